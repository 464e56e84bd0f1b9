/* test_writer.c: the nettrace writer checked at the byte level (header, object framing, padding at
 * absolute offsets, each header-compression case), plus sessions: filters, payload encoding,
 * rotation, circular segments, fork, write errors, drops, SIGKILL. The file walker below is a small
 * independent decoder of §2-§5 of nettrace-v5.md, kept here so these tests do not depend on the
 * reader under test elsewhere. */
#include <check.h>

#include "at_testlib.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "trace_int.h"
#include <stdint.h>

/* Check reports the location of every *passing* assertion to the parent process (one write each);
 * these tests assert millions of times in loops, so only failures are reported here, with the
 * asserting line in the message. */
#define REQ_CMP(X, OP, Y)                                                                          \
    do {                                                                                           \
        intmax_t x_ = (intmax_t)(X), y_ = (intmax_t)(Y);                                           \
        if (!(x_ OP y_))                                                                           \
            ck_abort_msg("line %d: %s %s %s (%jd vs %jd)", __LINE__, #X, #OP, #Y, x_, y_);         \
    } while (0)
#undef ck_assert_int_eq
#undef ck_assert_int_ne
#undef ck_assert_int_ge
#undef ck_assert_int_gt
#undef ck_assert_int_le
#undef ck_assert_int_lt
#undef ck_assert
#define ck_assert_int_eq(X, Y) REQ_CMP(X, ==, Y)
#define ck_assert_int_ne(X, Y) REQ_CMP(X, !=, Y)
#define ck_assert_int_ge(X, Y) REQ_CMP(X, >=, Y)
#define ck_assert_int_gt(X, Y) REQ_CMP(X, >, Y)
#define ck_assert_int_le(X, Y) REQ_CMP(X, <=, Y)
#define ck_assert_int_lt(X, Y) REQ_CMP(X, <, Y)
#define ck_assert(C)                                                                               \
    do {                                                                                           \
        if (!(C))                                                                                  \
            ck_abort_msg("line %d: %s", __LINE__, #C);                                             \
    } while (0)

/* ------------------------------------------------------------------ file walker */
typedef struct wev {
    uint8_t flags;
    uint32_t meta, seq, proc, stack, plen;
    uint64_t cap, tid, ts;
    at_guid act, rel;
    const uint8_t *payload;
    uint32_t nframes;
    uint64_t frames[8];
} wev;

typedef struct walk {
    uint8_t *buf;
    size_t len;
    size_t end_tag;          /* offset of the 0x01 */
    int nblocks[5];          /* event, metadata, stack, sp, other */
    wev *ev;
    size_t nev, cap;
    uint32_t meta_ids[256];
    uint8_t meta_payload[256][512];
    uint32_t nmeta;
    uint64_t sp_tid[4096];
    uint32_t sp_seq[4096];
    uint32_t nsp_entries;
    int nsp;
    /* stacks of the current SP interval */
    uint32_t stk_first, stk_count;
    uint64_t stk_frames[4096][8];
    uint32_t stk_n[4096];
    char err[256];
    int32_t pid;
    int64_t freq;
    int64_t sync_qpc;
} walk;

static uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static uint64_t var(const uint8_t **p)
{
    uint64_t v = 0;
    int sh = 0;
    for (;;) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80))
            return v;
        sh += 7;
    }
}

/* The whole file, read to its end. Not to a size taken first: a file being written grows while it
 * is read, and the bytes past that size can hold the end tag of the flush that completed meanwhile. */
static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = malloc(cap + 1);
    ck_assert_ptr_nonnull(b);
    size_t k;
    while ((k = fread(b + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            cap *= 2;
            b = realloc(b, cap + 1);
            ck_assert_ptr_nonnull(b);
        }
    }
    fclose(f);
    *len = n;
    return b;
}

#define WFAIL(...) do { snprintf(w->err, sizeof w->err, __VA_ARGS__); return -1; } while (0)

static int walk_blobs(walk *w, size_t off, uint32_t size, bool is_meta)
{
    const uint8_t *p = w->buf + off, *end = p + size;
    if (ld32(p) != (20 | (1u << 16)))
        WFAIL("block header at %zu: size/flags %08x", off, ld32(p));
    uint64_t mn = ld64(p + 4), mx = ld64(p + 12);
    p += 20;
    wev last = {0};
    while (p < end) {
        wev e = last;
        e.flags = *p++;
        if (e.flags & 1) e.meta = (uint32_t)var(&p);
        if (e.flags & 2) {
            e.seq = last.seq + (uint32_t)var(&p) + 1;
            e.cap = var(&p);
            e.proc = (uint32_t)var(&p);
        } else {
            e.seq = last.seq + (e.meta != 0 ? 1 : 0);
        }
        if (e.flags & 4) e.tid = var(&p);
        if (e.flags & 8) e.stack = (uint32_t)var(&p);
        e.ts = last.ts + var(&p);
        if (e.flags & 0x10) { memcpy(&e.act, p, 16); p += 16; }
        if (e.flags & 0x20) { memcpy(&e.rel, p, 16); p += 16; }
        if (e.flags & 0x80) e.plen = (uint32_t)var(&p);
        e.payload = p;
        p += e.plen;
        if (p > end)
            WFAIL("blob overruns block at %zu", off);
        if (e.ts < mn || e.ts > mx)
            WFAIL("blob ts %llu outside block [%llu,%llu]", (unsigned long long)e.ts,
                  (unsigned long long)mn, (unsigned long long)mx);
        last = e;
        if (is_meta) {
            if (e.meta != 0)
                WFAIL("metadata blob with metadata id %u", e.meta);
            uint32_t id = ld32(e.payload);
            for (uint32_t i = 0; i < w->nmeta; i++)
                if (w->meta_ids[i] == id)
                    WFAIL("metadata id %u defined twice", id);
            if (w->nmeta < 256) {
                memcpy(w->meta_payload[w->nmeta], e.payload, e.plen < 512 ? e.plen : 512);
                w->meta_ids[w->nmeta++] = id;
            }
            continue;
        }
        bool known = false;
        for (uint32_t i = 0; i < w->nmeta; i++)
            known |= w->meta_ids[i] == e.meta;
        if (!known)
            WFAIL("event uses metadata id %u before its definition", e.meta);
        e.nframes = 0;
        if (e.stack) {
            if (e.stack < w->stk_first || e.stack >= w->stk_first + w->stk_count)
                WFAIL("event uses undefined stack id %u", e.stack);
            uint32_t k = e.stack - w->stk_first;
            e.nframes = w->stk_n[k];
            for (uint32_t i = 0; i < e.nframes && i < 8; i++)
                e.frames[i] = w->stk_frames[k][i];
        }
        if (w->nev == w->cap) {
            w->cap = w->cap ? w->cap * 2 : 1024;
            w->ev = realloc(w->ev, w->cap * sizeof(wev));
        }
        w->ev[w->nev++] = e;
    }
    if (p != end)
        WFAIL("blobs do not end at the block end");
    return 0;
}

/* Walks a whole file; 0 when it is complete and every rule checked here holds. */
static int walk_file(walk *w, const char *path)
{
    memset(w, 0, sizeof *w);
    w->buf = slurp(path, &w->len);
    if (!w->buf)
        WFAIL("cannot read %s", path);
    uint8_t *b = w->buf;
    if (w->len < 0x66 || memcmp(b, "Nettrace", 8) || ld32(b + 8) != 20
        || memcmp(b + 12, "!FastSerialization.1", 20))
        WFAIL("bad magic/serializer signature");
    size_t off = 0x20;
    while (off < w->len) {
        if (b[off] == NT_TAG_NULL_REFERENCE) {
            w->end_tag = off;
            return 0;
        }
        if (off + 20 > w->len || b[off] != 5 || b[off + 1] != 5 || b[off + 2] != 1)
            WFAIL("bad object tags at %zu", off);
        uint32_t ver = ld32(b + off + 3), minv = ld32(b + off + 7), nl = ld32(b + off + 11);
        char name[32] = {0};
        if (nl >= sizeof name)
            WFAIL("bad name length at %zu", off);
        memcpy(name, b + off + 15, nl);
        off += 15 + nl;
        if (b[off++] != 6)
            WFAIL("type object not ended at %zu", off - 1);
        if (!strcmp(name, "Trace")) {
            if (ver != 4 || minv != 4)
                WFAIL("Trace version %u/%u", ver, minv);
            w->sync_qpc = (int64_t)ld64(b + off + 16);
            w->freq = (int64_t)ld64(b + off + 24);
            w->pid = (int32_t)ld32(b + off + 36);
            off += 48;
        } else {
            if (ver != 2 || minv != 2)
                WFAIL("%s version %u/%u", name, ver, minv);
            uint32_t size = ld32(b + off);
            off += 4;
            while (off & 3) {
                if (b[off] != 0)
                    WFAIL("non-zero padding at %zu", off);
                off++;
            }
            if (off + size > w->len)
                WFAIL("block past the end of the file");
            if (!strcmp(name, "EventBlock")) {
                w->nblocks[0]++;
                if (walk_blobs(w, off, size, false))
                    return -1;
            } else if (!strcmp(name, "MetadataBlock")) {
                w->nblocks[1]++;
                if (walk_blobs(w, off, size, true))
                    return -1;
            } else if (!strcmp(name, "StackBlock")) {
                w->nblocks[2]++;
                uint32_t first = ld32(b + off), n = ld32(b + off + 4);
                if (w->stk_count && first != w->stk_first + w->stk_count)
                    WFAIL("stack ids not consecutive: %u after %u+%u", first, w->stk_first, w->stk_count);
                if (!w->stk_count)
                    w->stk_first = first;
                size_t q = off + 8;
                for (uint32_t i = 0; i < n; i++) {
                    uint32_t sz = ld32(b + q);
                    uint32_t k = w->stk_count++;
                    w->stk_n[k] = sz / 8;
                    for (uint32_t j = 0; j < sz / 8 && j < 8; j++)
                        w->stk_frames[k][j] = ld64(b + q + 4 + 8 * j);
                    q += 4 + sz;
                }
                if (q != off + size)
                    WFAIL("stack block sizes disagree");
            } else if (!strcmp(name, "SPBlock")) {
                w->nblocks[3]++;
                w->nsp++;
                uint64_t ts = ld64(b + off);
                for (size_t i = 0; i < w->nev; i++)
                    if (w->ev[i].ts >= ts)
                        WFAIL("SP timestamp %llu not after event %zu", (unsigned long long)ts, i);
                uint32_t n = ld32(b + off + 8);
                for (uint32_t i = 0; i < n && w->nsp_entries < 4096; i++) {
                    w->sp_tid[w->nsp_entries] = ld64(b + off + 12 + 12 * i);
                    w->sp_seq[w->nsp_entries++] = ld32(b + off + 20 + 12 * i);
                }
                w->stk_first = 1;
                w->stk_count = 0;
            } else {
                WFAIL("unknown block %s", name);
            }
            off += size;
        }
        if (off >= w->len || b[off] != 6)
            WFAIL("object not ended at %zu", off);
        off++;
    }
    WFAIL("no end tag");
}

static void walk_free(walk *w)
{
    free(w->buf);
    free(w->ev);
}

/* Events of one metadata id */
static size_t count_meta(const walk *w, uint32_t meta)
{
    size_t n = 0;
    for (size_t i = 0; i < w->nev; i++)
        n += w->ev[i].meta == meta;
    return n;
}

/* ------------------------------------------------------------------ helpers */
static char dir[256];

/* After each test (in its own process): the folder it wrote its traces to goes. A failing test's
 * folder stays, for a look at the file. */
static void rm_tmp(void)
{
    if (dir[0])
        at_rmtree(dir);
    dir[0] = 0;
}

static void mkdir_tmp(void)
{
    snprintf(dir, sizeof dir, "/tmp/at_test_writer.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static at_event_type *type_plain(const char *name)
{
    at_event_desc d = {.provider = "Test-Writer", .name = name, .level = NT_LEVEL_INFO};
    at_event_type *t = at_event_type_register(&d);
    ck_assert_ptr_nonnull(t);
    return t;
}

static void start(const char *file, at_trace_options *o)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    o->path = path;
    if (!o->flush_interval_ms)
        o->flush_interval_ms = 100000; /* only explicit flushes, for deterministic blocks */
    o->command_line = o->command_line ? o->command_line : "test_writer --x";
    char err[256];
    int rc = at_trace_start(o, err, sizeof err);
    ck_assert_msg(rc == 0, "start: %s", err);
}

static void path_of(char *out, size_t cap, const char *file)
{
    snprintf(out, cap, "%s/%s", dir, file);
}

/* ------------------------------------------------------------------ tests */
/* The payload copy every event makes: each length from 0 to 80 at every alignment copies exactly
 * its bytes and nothing beyond. */
START_TEST(small_copy_exact)
{
    unsigned char src[128], dst[160], want[160];
    for (int i = 0; i < 128; i++)
        src[i] = (unsigned char)(i * 37 + 11);
    for (size_t n = 0; n <= 80; n++)
        for (size_t off = 0; off < 8; off++) {
            memset(dst, 0xA5, sizeof dst);
            memset(want, 0xA5, sizeof want);
            memcpy(want + 16 + off, src + off, n);
            at_copy_small(dst + 16 + off, src + off, n);
            ck_assert_msg(memcmp(dst, want, sizeof dst) == 0, "length %zu offset %zu", n, off);
        }
}
END_TEST

START_TEST(header_bytes)
{
    mkdir_tmp();
    at_trace_options o = {0};
    uint64_t before = at_now_ns(); /* file time is CLOCK_MONOTONIC ns */
    start("h.nettrace", &o);
    at_trace_stop();
    char p[512];
    path_of(p, sizeof p, "h.nettrace");
    size_t len;
    uint8_t *b = slurp(p, &len);
    ck_assert_ptr_nonnull(b);
    static const uint8_t head[] = {
        'N', 'e', 't', 't', 'r', 'a', 'c', 'e', 20, 0, 0, 0, '!', 'F', 'a', 's', 't', 'S', 'e', 'r',
        'i', 'a', 'l', 'i', 'z', 'a', 't', 'i', 'o', 'n', '.', '1', 5, 5, 1, 4, 0, 0, 0, 4, 0, 0, 0,
        5, 0, 0, 0, 'T', 'r', 'a', 'c', 'e', 6};
    ck_assert_int_ge(len, 0x66);
    ck_assert_mem_eq(b, head, sizeof head);
    ck_assert_int_eq(sizeof head, 0x35);
    int64_t qpc = (int64_t)ld64(b + 0x35 + 16);
    /* the sync point is the last whole millisecond of wall-clock time at the start */
    ck_assert_int_ge(qpc + 1000000, (int64_t)before);
    ck_assert_int_le(qpc, (int64_t)at_now_ns());
    /* file time is CLOCK_MONOTONIC ns, whatever clock the events read */
    ck_assert_int_eq((int64_t)ld64(b + 0x35 + 24), 1000000000);
    ck_assert_int_eq(ld32(b + 0x35 + 32), 8);
    ck_assert_int_eq(ld32(b + 0x35 + 36), (uint32_t)getpid());
    uint16_t year;
    memcpy(&year, b + 0x35, 2);
    ck_assert_int_ge(year, 2024);
    ck_assert_int_eq(b[0x65], 6);
    /* the first block is the baseline sequence point (at the sync time, no thread yet), padded
     * after its size to a 4-byte offset: readers count every drop from it */
    static const uint8_t sp[] = {5, 5, 1, 2, 0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 'S', 'P', 'B', 'l',
                                 'o', 'c', 'k', 6, 12, 0, 0, 0, 0, 0, 0};
    ck_assert_mem_eq(b + 0x66, sp, sizeof sp); /* 0x7d + 4 = 0x81 -> 0x84 */
    ck_assert_int_eq((int64_t)ld64(b + 0x84), qpc);
    ck_assert_int_eq(ld32(b + 0x8c), 0);
    ck_assert_int_eq(b[0x90], 6);
    /* then the ProcessInfo metadata */
    static const uint8_t mb[] = {5, 5, 1, 2, 0, 0, 0, 2, 0, 0, 0, 13, 0, 0, 0, 'M', 'e', 't', 'a',
                                 'd', 'a', 't', 'a', 'B', 'l', 'o', 'c', 'k', 6};
    ck_assert_mem_eq(b + 0x91, mb, sizeof mb);
    ck_assert_int_eq(b[0xb2], 0);   /* two padding bytes: 0xae + 4 = 0xb2 -> 0xb4 */
    ck_assert_int_eq(b[0xb3], 0);
    ck_assert_int_eq(ld32(b + 0xb4), 20 | (1u << 16));
    ck_assert_int_eq(b[len - 1], 1); /* end of stream */
    free(b);
    walk w;
    ck_assert_msg(walk_file(&w, p) == 0, "%s", w.err);
    ck_assert_int_eq(w.end_tag, len - 1);
    ck_assert_int_eq(w.pid, getpid());
    /* ProcessInfo: once, with its three UTF-16 strings */
    ck_assert_int_eq(w.nev, 1);
    ck_assert_int_eq(w.nmeta, 1);
    const uint8_t *pl = w.ev[0].payload;
    const char *expect[] = {"test_writer --x", "Linux", "x64"};
    for (int i = 0; i < 3; i++) {
        for (const char *c = expect[i]; *c; c++, pl += 2)
            ck_assert_int_eq(pl[0] | pl[1] << 8, *c);
        ck_assert_int_eq(pl[0] | pl[1], 0);
        pl += 2;
    }
    ck_assert_int_eq(pl - w.ev[0].payload, w.ev[0].plen);
    walk_free(&w);
}
END_TEST

/* Metadata payload bytes of a registered type (§4.4), including the OpCode tag. */
START_TEST(metadata_encoding)
{
    at_field f[] = {{"Id", NT_TYPE_UINT64}, {"Name", NT_TYPE_STRING}};
    at_event_desc d = {.provider = "P", .event_id = 7, .name = "AStart", .version = 2,
                       .level = 4, .opcode = NT_OPCODE_START, .keywords = 0x30, .nfields = 2,
                       .fields = f};
    at_event_type *t = at_event_type_register(&d);
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_eq(at_event_type_register(&d), t); /* same provider/name/version: same type */
    uint8_t want[128], *p = want;
#define U32(v) do { uint32_t v_ = (v); memcpy(p, &v_, 4); p += 4; } while (0)
#define W(s) do { for (const char *c_ = (s); ; c_++) { *p++ = (uint8_t)*c_; *p++ = 0; if (!*c_) break; } } while (0)
    U32(t->index);
    W("P");
    U32(7);
    W("AStart");
    uint64_t kw = 0x30;
    memcpy(p, &kw, 8);
    p += 8;
    U32(2);
    U32(4);
    U32(2);
    U32(NT_TYPE_UINT64);
    W("Id");
    U32(NT_TYPE_STRING);
    W("Name");
    static const uint8_t tag[] = {1, 0, 0, 0, 1, 1};
    memcpy(p, tag, 6);
    p += 6;
    ck_assert_int_eq(t->meta_len, p - want);
    ck_assert_mem_eq(t->meta, want, t->meta_len);
    /* event id 0: the next free id of the provider */
    at_event_desc d2 = {.provider = "P", .name = "B"};
    at_event_type *t2 = at_event_type_register(&d2);
    ck_assert_int_eq(t2->event_id, 8);
    ck_assert_int_eq(t2->meta_len, 4 + 4 + 4 + 4 + 8 + 12); /* no tag for opcode 0 */
    /* an informational event named like a Start or a Stop says it is Info: without the tag,
     * TraceEvent (and our reader) would take the opcode from the name and open an activity */
    const char *infos[] = {"XStart", "cachestop", "Stop"};
    for (int i = 0; i < 3; i++) {
        at_event_desc di = {.provider = "Q", .name = infos[i]};
        at_event_type *ti = at_event_type_register(&di);
        ck_assert_ptr_nonnull(ti);
        static const uint8_t info_tag[] = {1, 0, 0, 0, 1, 0};
        ck_assert_int_eq(ti->meta_len, 4 + (strlen(infos[i]) + 1) * 2 + 4 + 4 + 8 + 12 + 6);
        ck_assert_mem_eq(ti->meta + ti->meta_len - 6, info_tag, 6);
    }
    /* the same name with another shape is another type (a payload read with the first one's fields
     * would be garbage), with its own event id; the same shape again is the same type */
    at_field fs[] = {{"Id", NT_TYPE_UINT64}, {"Name", NT_TYPE_INT32}};
    at_event_desc d3 = d;
    d3.fields = fs;
    at_event_type *t3 = at_event_type_register(&d3);
    ck_assert_ptr_nonnull(t3);
    ck_assert_ptr_ne(t3, t);
    ck_assert_int_eq(t3->event_id, 7); /* asked for explicitly */
    ck_assert_ptr_eq(at_event_type_register(&d3), t3);
    ck_assert_ptr_eq(at_event_type_register(&d), t);
    at_event_desc d4 = d2;
    d4.nfields = 1;
    d4.fields = f;
    at_event_type *t4 = at_event_type_register(&d4);
    ck_assert_ptr_ne(t4, t2);
    ck_assert_int_eq(t4->event_id, 9); /* and a fresh id when none was asked for */
    at_event_desc d5 = d2;
    d5.level = 2; /* other metadata than fields: another type too */
    ck_assert_ptr_ne(at_event_type_register(&d5), t2);
    /* invalid input */
    errno = 0;
    at_event_desc bad = {.provider = "P", .name = "C", .nfields = 1,
                         .fields = (at_field[]){{"x", NT_TYPE_ARRAY}}};
    ck_assert_ptr_null(at_event_type_register(&bad));
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_ptr_null(at_event_type_register(NULL));
}
END_TEST

START_TEST(payload_builders)
{
    uint8_t buf[64];
    at_payload pl;
    at_payload_init(&pl, buf, sizeof buf);
    at_payload_u32(&pl, 0x01020304);
    at_payload_i64(&pl, -2);
    at_payload_double(&pl, 1.5);
    ck_assert_int_eq(pl.p - buf, 20);
    ck_assert_int_eq(buf[0], 4);
    ck_assert_int_eq(buf[4], 0xfe);
    ck_assert_int_eq(buf[11], 0xff);
    /* UTF-8 -> UTF-16LE: é, an astral char (surrogates), an invalid byte (U+FFFD) */
    at_payload_init(&pl, buf, sizeof buf);
    at_payload_str(&pl, "a\xc3\xa9\xf0\x9f\x98\x80\xff", 100);
    static const uint8_t w[] = {'a', 0, 0xe9, 0, 0x3d, 0xd8, 0x00, 0xde, 0xfd, 0xff, 0, 0};
    ck_assert_int_eq(pl.p - buf, sizeof w);
    ck_assert_mem_eq(buf, w, sizeof w);
    /* max_chars never splits a surrogate pair */
    at_payload_init(&pl, buf, sizeof buf);
    at_payload_str(&pl, "a\xf0\x9f\x98\x80", 2);
    ck_assert_int_eq(pl.p - buf, 4);
    at_payload_str(&pl, NULL, 5);
    ck_assert_int_eq(pl.p - buf, 6);
    ck_assert(!pl.overflow);
    /* overflow: the field is left out whole */
    at_payload_init(&pl, buf, 6);
    at_payload_u32(&pl, 1);
    at_payload_u32(&pl, 2);
    ck_assert(pl.overflow);
    ck_assert_int_eq(pl.p - buf, 4);
    at_payload_init(&pl, buf, 6);
    at_payload_str(&pl, "abc", 10);
    ck_assert(pl.overflow);
    ck_assert_int_eq(pl.p - buf, 0);
}
END_TEST

/* Every header-compression case, byte by byte (§4.1). */
static at_event_type *ca, *cb;
static uint64_t cts;
static void *other_thread(void *a)
{
    (void)a;
    at_event_write_ts(cts + 5, ca, NULL, NULL, NULL, 0, NULL, 0);
    return NULL;
}

/* Pins the calling thread (and the threads it creates) to its last allowed CPU, so that every event
 * has the same capture processor; returns that CPU. */
static uint32_t pin_last_cpu(void)
{
    cpu_set_t set;
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    int last = -1;
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set))
            last = i;
    ck_assert_int_ge(last, 0);
    CPU_ZERO(&set);
    CPU_SET(last, &set);
    ck_assert_int_eq(sched_setaffinity(0, sizeof set, &set), 0);
    return (uint32_t)last;
}

START_TEST(compression_cases)
{
    mkdir_tmp();
    uint32_t cpu = pin_last_cpu();
    /* timestamps given here are compared as written: the clock whose ticks are the file's */
    at_trace_options o = {.clock = AT_CLOCK_MONOTONIC};
    start("c.nettrace", &o);
    ca = type_plain("A");
    cb = type_plain("B");
    uint64_t t = at_ticks();
    cts = t + 100;
    uint32_t u = 7;
    at_guid g1 = {{1, 2, 3}}, g2 = {{9}};
    uintptr_t ips[2] = {0x1111, 0x2222};
    at_event_write_ts(t + 1, ca, NULL, NULL, NULL, 0, NULL, 0);       /* 0: first in block */
    at_event_write_ts(t + 2, ca, NULL, NULL, NULL, 0, NULL, 0);       /* 1: nothing changes */
    at_event_write_ts(t + 3, ca, NULL, NULL, &u, 4, NULL, 0);         /* 2: payload size */
    at_event_write_ts(t + 4, ca, NULL, NULL, &u, 4, ips, 2);          /* 3: stack */
    at_event_write_ts(t + 5, ca, &g1, NULL, &u, 4, ips, 2);           /* 4: activity */
    at_event_write_ts(t + 6, ca, &g1, &g2, &u, 4, ips, 2);            /* 5: related */
    at_event_write_ts(t + 7, cb, &g1, &g2, &u, 4, ips, 2);            /* 6: metadata id */
    at_tbuf_test_set_seq(0xFFFFFFFEu);
    at_event_write_ts(t + 8, cb, &g1, &g2, &u, 4, ips, 2);            /* 7: seq jump (0xFFFFFFFF) */
    at_event_write_ts(t + 9, cb, &g1, &g2, &u, 4, ips, 2);            /* 8: seq wraps to 0 */
    at_event_write_ts(t + 10, cb, &g1, &g2, &u, 4, ips, 2);           /* 9: seq 1 */
    at_event_write_ts(t + 300, cb, &g1, &g2, &u, 4, ips, 2);          /* 11: ts delta 2 bytes */
    pthread_t th;
    pthread_create(&th, NULL, other_thread, NULL);                    /* 10: thread change */
    pthread_join(th, NULL);
    at_trace_stop();
    char p[512];
    path_of(p, sizeof p, "c.nettrace");
    walk w;
    ck_assert_msg(walk_file(&w, p) == 0, "%s", w.err);
    ck_assert_int_eq(w.nev, 13);
    wev *e = w.ev + 1; /* after ProcessInfo, in a new block */
    uint64_t me = (uint64_t)gettid();
    ck_assert_int_eq(e[0].flags, 0x40 | 0x01 | 0x02 | 0x04); /* first of a block: all differ from 0 */
    ck_assert_int_eq(e[0].seq, 1);
    ck_assert_int_eq(e[0].cap, me);
    ck_assert_int_eq(e[0].tid, me);
    /* the CPU it ran on, from rseq (unknown where glibc registers none) */
    ck_assert_int_eq(e[0].proc, at_rt_hot.rseq_cpu ? cpu : 0xFFFFFFFFu);
    ck_assert_int_eq(e[0].ts, t + 1);
    ck_assert_int_eq(e[1].flags, 0x40);
    ck_assert_int_eq(e[1].seq, 2);
    ck_assert_int_eq(e[2].flags, 0x40 | 0x80);
    ck_assert_int_eq(e[2].plen, 4);
    ck_assert_int_eq(ld32(e[2].payload), 7);
    ck_assert_int_eq(e[3].flags, 0x40 | 0x08);
    ck_assert_int_eq(e[3].nframes, 2);
    ck_assert_int_eq(e[3].frames[0], 0x1111);
    ck_assert_int_eq(e[3].frames[1], 0x2222);
    ck_assert_int_eq(e[4].flags, 0x40 | 0x10);
    ck_assert_mem_eq(&e[4].act, &g1, 16);
    ck_assert_int_eq(e[5].flags, 0x40 | 0x20);
    ck_assert_mem_eq(&e[5].rel, &g2, 16);
    ck_assert_int_eq(e[6].flags, 0x40 | 0x01);
    ck_assert_int_eq(e[6].meta, cb->index);
    ck_assert_int_eq(e[6].seq, 7);
    ck_assert_int_eq(e[7].flags, 0x40 | 0x02); /* gap: delta 0xFFFFFFFF-7-1 written */
    ck_assert_int_eq(e[7].seq, 0xFFFFFFFFu);
    ck_assert_int_eq(e[8].flags, 0x40);        /* wraps to 0 without a flag */
    ck_assert_int_eq(e[8].seq, 0);
    ck_assert_int_eq(e[9].seq, 1);
    ck_assert_int_eq(e[10].flags, 0x40 | 0x01 | 0x02 | 0x04 | 0x08 | 0x10 | 0x20 | 0x80);
    ck_assert_int_eq(e[10].stack, 0);
    ck_assert_int_eq(e[10].plen, 0);
    ck_assert_int_ne(e[10].tid, me);
    ck_assert_int_eq(e[10].seq, 1);
    ck_assert_int_eq(e[11].ts, t + 300);
    ck_assert_int_eq(e[11].tid, me);
    ck_assert_int_eq(e[11].seq, 2);
    ck_assert_int_eq(e[11].stack, e[9].stack); /* same stack interned once */
    /* the compressed bytes of blob 1: flags 0x40, ts delta 1 */
    walk_free(&w);
}
END_TEST

/* Header fields are LEB128: every length boundary (1 to 9 bytes) round-trips, as a timestamp delta
 * and as a payload length. */
START_TEST(varint_boundaries)
{
    mkdir_tmp();
    /* timestamps given here are compared as written: the clock whose ticks are the file's */
    at_trace_options o = {.clock = AT_CLOCK_MONOTONIC};
    start("v.nettrace", &o);
    at_event_type *a = type_plain("A");
    static const uint64_t deltas[] = {1, 0x7f, 0x80, 0x3fff, 0x4000, 0x1fffff, 0x200000, 0xfffffff,
                                      0x10000000, 0x7ffffffffull, 0x800000000ull,
                                      0x3ffffffffffffull, 0x100000000000000ull};
    enum { N = sizeof deltas / sizeof deltas[0] };
    uint64_t ts[N], t = at_ticks();
    static uint8_t pay[200];
    for (int i = 0; i < N; i++) {
        t += deltas[i];
        ts[i] = t;
        /* payload lengths across the one/two byte boundary as well */
        uint32_t len = i % 3 == 0 ? 127 : i % 3 == 1 ? 128 : 0;
        at_event_write_ts(t, a, NULL, NULL, pay, len, NULL, 0);
    }
    at_trace_stop();
    char p[512];
    path_of(p, sizeof p, "v.nettrace");
    walk w;
    ck_assert_msg(walk_file(&w, p) == 0, "%s", w.err);
    ck_assert_int_eq(w.nev, 1 + N);
    for (int i = 0; i < N; i++) {
        ck_assert_uint_eq(w.ev[1 + i].ts, ts[i]);
        ck_assert_uint_eq(w.ev[1 + i].plen, i % 3 == 0 ? 127u : i % 3 == 1 ? 128u : 0u);
    }
    walk_free(&w);
}
END_TEST

START_TEST(exact_blob_bytes)
{
    /* steady state of payload-less events: flags byte + 1-byte delta = 2 bytes per event */
    mkdir_tmp();
    at_trace_options o = {0};
    start("b.nettrace", &o);
    at_event_type *a = type_plain("A");
    uint64_t t = at_ticks();
    for (int i = 0; i < 1000; i++)
        at_event_write_ts(t + (uint64_t)i * 50, a, NULL, NULL, NULL, 0, NULL, 0);
    at_trace_flush();
    at_trace_stats s1;
    at_trace_get_stats(&s1);
    for (int i = 1000; i < 11000; i++)
        at_event_write_ts(t + (uint64_t)i * 50, a, NULL, NULL, NULL, 0, NULL, 0);
    at_trace_flush();
    at_trace_stats s2;
    at_trace_get_stats(&s2);
    ck_assert_int_eq(s2.events_written - s1.events_written, 10000);
    /* 10000 blobs of 2 bytes, block and object framing, one end tag rewrite */
    ck_assert_int_le(s2.bytes_written - s1.bytes_written, 10000 * 2 + 200);
    ck_assert_int_ge(s2.bytes_written - s1.bytes_written, 10000 * 2);
    at_trace_stop();
}
END_TEST

START_TEST(filter_sets_enabled)
{
    mkdir_tmp();
    at_event_desc dv = {.provider = "F", .name = "Verbose", .level = NT_LEVEL_VERBOSE};
    at_event_desc dk = {.provider = "F", .name = "Kw", .level = NT_LEVEL_INFO, .keywords = 0x4};
    at_event_desc dn = {.provider = "F", .name = "NoKw", .level = NT_LEVEL_ERROR};
    at_event_type *v = at_event_type_register(&dv), *k = at_event_type_register(&dk),
                  *n = at_event_type_register(&dn);
    ck_assert(at_event_enabled(v) && at_event_enabled(k) && at_event_enabled(n));
    at_trace_options o = {.level = NT_LEVEL_INFO, .keywords = 0x3};
    start("f.nettrace", &o);
    ck_assert(!at_event_enabled(v)); /* above the level */
    ck_assert(!at_event_enabled(k)); /* keywords disjoint */
    ck_assert(at_event_enabled(n));  /* no keywords: passes */
    at_event_desc dl = {.provider = "F", .name = "Late", .level = NT_LEVEL_INFO, .keywords = 0x2};
    ck_assert(at_event_enabled(at_event_type_register(&dl))); /* registered after start */
    at_trace_stop();
}
END_TEST

START_TEST(metadata_lazy_and_once)
{
    mkdir_tmp();
    at_trace_options o = {0};
    start("m.nettrace", &o);
    at_event_type *a = type_plain("A"), *unused = type_plain("Unused"), *b = type_plain("B");
    (void)unused;
    for (int i = 0; i < 3; i++) {
        at_event_write(a, NULL, NULL, NULL, 0, NULL, 0);
        at_trace_flush();
    }
    at_event_write(b, NULL, NULL, NULL, 0, NULL, 0);
    at_trace_stop();
    char p[512];
    path_of(p, sizeof p, "m.nettrace");
    walk w;
    ck_assert_msg(walk_file(&w, p) == 0, "%s", w.err);
    ck_assert_int_eq(w.nmeta, 3); /* ProcessInfo, A, B: never Unused, never twice */
    ck_assert_int_eq(w.meta_ids[1], a->index);
    ck_assert_int_eq(w.meta_ids[2], b->index);
    ck_assert_int_eq(count_meta(&w, a->index), 3);
    walk_free(&w);
}
END_TEST

/* The registry's first table (on the start data page) holds 32 types; past it every type moves to
 * the full one: types registered before and after are found again, and their events and metadata
 * are written under their own ids. */
START_TEST(types_past_first_table)
{
    mkdir_tmp();
    at_trace_options o = {0};
    start("many.nettrace", &o);
    at_event_type *t[80];
    char name[16];
    for (int i = 0; i < 80; i++) {
        snprintf(name, sizeof name, "T%d", i);
        t[i] = type_plain(name);
    }
    for (int i = 0; i < 80; i++) {
        snprintf(name, sizeof name, "T%d", i);
        ck_assert(type_plain(name) == t[i]); /* the same type, found in the table */
    }
    at_event_write(t[0], NULL, NULL, NULL, 0, NULL, 0);
    at_event_write(t[79], NULL, NULL, NULL, 0, NULL, 0);
    at_trace_stop();
    char p[512];
    path_of(p, sizeof p, "many.nettrace");
    walk w;
    ck_assert_msg(walk_file(&w, p) == 0, "%s", w.err);
    ck_assert_int_eq(w.nmeta, 3); /* ProcessInfo, T0, T79 */
    ck_assert_int_eq(count_meta(&w, t[0]->index), 1);
    ck_assert_int_eq(count_meta(&w, t[79]->index), 1);
    ck_assert_int_gt(t[79]->index, 32);
    size_t seen = 0;
    for (size_t i = 0; i < w.nev; i++)
        seen += w.ev[i].meta == t[0]->index || w.ev[i].meta == t[79]->index;
    ck_assert_int_eq(seen, 2);
    walk_free(&w);
}
END_TEST

START_TEST(path_patterns)
{
    mkdir_tmp();
    at_trace_options o = {0};
    start("x-%p-%%-%t.nettrace", &o);
    const char *cur = at_trace_path();
    ck_assert_ptr_nonnull(cur);
    char want[512];
    snprintf(want, sizeof want, "%s/x-%d-%%-", dir, (int)getpid());
    ck_assert_msg(strncmp(cur, want, strlen(want)) == 0, "%s", cur);
    const char *ts = cur + strlen(want); /* YYYYMMDD-HHMMSS */
    ck_assert_int_eq(strlen(ts), 15 + strlen(".nettrace"));
    ck_assert_int_eq(ts[8], '-');
    at_trace_stop();
    ck_assert_ptr_null(at_trace_path());
    char err[256];
    at_trace_options bad = {.path = "/tmp/x%q"};
    ck_assert_int_eq(at_trace_start(&bad, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "%"));
    at_trace_options nodir = {.path = "/nonexistent-dir/x.nettrace"};
    ck_assert_int_eq(at_trace_start(&nodir, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "nonexistent-dir"));
    ck_assert(!at_trace_active());
}
END_TEST

static uint64_t write_n(at_event_type *t, uint64_t n, uint32_t plen)
{
    uint8_t pay[256] = {0};
    uint64_t ok = 0;
    for (uint64_t i = 0; i < n; i++) {
        memcpy(pay, &i, 8);
        ok += at_event_write(t, NULL, NULL, pay, plen, NULL, 0) == 0;
    }
    return ok;
}

static void check_files_complete(const char *fmt, unsigned first, unsigned last, size_t *events)
{
    *events = 0;
    for (unsigned k = first; k <= last; k++) {
        char p[512], name[64];
        if (k == 0)
            snprintf(name, sizeof name, "%s.nettrace", fmt);
        else
            snprintf(name, sizeof name, "%s.%u.nettrace", fmt, k);
        path_of(p, sizeof p, name);
        walk w;
        ck_assert_msg(walk_file(&w, p) == 0, "%s: %s", name, w.err);
        ck_assert_int_eq(w.end_tag, w.len - 1);
        ck_assert_int_ge(w.nmeta, 2);
        ck_assert_int_eq(count_meta(&w, 1), 1); /* ProcessInfo once per file */
        *events += w.nev - 1;
        walk_free(&w);
    }
}

START_TEST(rotate_mode)
{
    mkdir_tmp();
    at_trace_options o = {.mode = AT_OUTPUT_ROTATE, .mode_size = 64 * 1024};
    start("r.nettrace", &o);
    at_event_type *a = type_plain("A");
    for (int i = 0; i < 20; i++) {
        ck_assert_int_eq(write_n(a, 2000, 100), 2000);
        at_trace_flush();
    }
    at_trace_stop();
    at_trace_stats s;
    at_trace_get_stats(&s);
    ck_assert_int_eq(s.events_written, 40000);
    ck_assert_int_ge(s.files, 40000 * 100 / (64 * 1024));
    size_t n;
    check_files_complete("r", 0, (unsigned)s.files - 1, &n);
    ck_assert_int_eq(n, 40000);
    char p[512], name[64];
    snprintf(name, sizeof name, "r.%u.nettrace", (unsigned)s.files);
    path_of(p, sizeof p, name);
    ck_assert_int_eq(access(p, F_OK), -1);
}
END_TEST

START_TEST(circular_mode)
{
    mkdir_tmp();
    at_trace_options o = {.mode = AT_OUTPUT_CIRCULAR, .mode_size = 256 * 1024};
    start("c.nettrace", &o);
    at_event_type *a = type_plain("A");
    for (int i = 0; i < 40; i++) {
        ck_assert_int_eq(write_n(a, 2000, 100), 2000);
        at_trace_flush();
    }
    at_trace_stop();
    at_trace_stats s;
    at_trace_get_stats(&s);
    unsigned last = (unsigned)s.files - 1;
    ck_assert_int_ge(last, 8);
    /* the 4 newest segments exist and are complete; every older one is gone */
    size_t n;
    check_files_complete("c", last - 3, last, &n);
    ck_assert_int_gt(n, 0);
    for (unsigned k = 0; k + 4 <= last; k++) {
        char p[512], name[64];
        if (k == 0)
            snprintf(name, sizeof name, "c.nettrace");
        else
            snprintf(name, sizeof name, "c.%u.nettrace", k);
        path_of(p, sizeof p, name);
        ck_assert_msg(access(p, F_OK) == -1, "%s still exists", name);
    }
    uint64_t total = 0;
    for (unsigned k = last - 3; k <= last; k++) {
        char p[512], name[64];
        snprintf(name, sizeof name, "c.%u.nettrace", k);
        path_of(p, sizeof p, name);
        struct stat st;
        ck_assert_int_eq(stat(p, &st), 0);
        total += (uint64_t)st.st_size;
    }
    ck_assert_int_le(total, 256 * 1024); /* about the last SIZE bytes are kept */
    ck_assert_int_ge(total, 256 * 1024 * 3 / 4 - 4096);
}
END_TEST

START_TEST(fork_child_own_file)
{
    mkdir_tmp();
    at_trace_options o = {0};
    start("k.nettrace", &o);
    at_event_type *pa = type_plain("Parent"), *ch = type_plain("Child");
    ck_assert_int_eq(write_n(pa, 100, 0), 100); /* buffered, not flushed at fork time */
    pid_t pid = fork();
    if (pid == 0) {
        write_n(ch, 50, 0);
        at_trace_stop();
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    at_trace_stop();
    char p[512], name[64];
    path_of(p, sizeof p, "k.nettrace");
    walk w;
    ck_assert_msg(walk_file(&w, p) == 0, "%s", w.err);
    ck_assert_int_eq(count_meta(&w, pa->index), 100);
    ck_assert_int_eq(count_meta(&w, ch->index), 0);
    walk_free(&w);
    snprintf(name, sizeof name, "k-%d.nettrace", (int)pid);
    path_of(p, sizeof p, name);
    ck_assert_msg(walk_file(&w, p) == 0, "%s", w.err);
    ck_assert_int_eq(w.pid, pid);
    ck_assert_int_eq(count_meta(&w, pa->index), 0); /* none of the parent's buffered events */
    ck_assert_int_eq(count_meta(&w, ch->index), 50);
    for (size_t i = 1; i < w.nev; i++)
        ck_assert_int_eq(w.ev[i].tid, pid);
    walk_free(&w);
}
END_TEST

START_TEST(write_error_counts_drops)
{
    mkdir_tmp();
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {32 * 1024, 32 * 1024};
        setrlimit(RLIMIT_FSIZE, &rl);
        at_trace_options o = {0};
        start("e.nettrace", &o);
        at_event_type *a = type_plain("A");
        for (int i = 0; i < 20; i++) {
            write_n(a, 1000, 64);
            at_trace_flush();
        }
        at_trace_stop();
        at_trace_stats s;
        at_trace_get_stats(&s);
        /* everything not written is counted */
        _exit(s.events_written + s.events_dropped == 20000 && s.events_dropped > 0 ? 0 : 1);
    }
    close(fds[1]);
    char out[4096] = {0};
    size_t n = 0;
    ssize_t r;
    while ((r = read(fds[0], out + n, sizeof out - 1 - n)) > 0)
        n += (size_t)r;
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    ck_assert_msg(strncmp(out, "acttrace: write failed: ", 24) == 0, "stderr: %s", out);
    ck_assert_ptr_nonnull(strstr(out, "File too large"));
    /* one report, then silence */
    int lines = 0;
    for (char *c = out; *c; c++)
        lines += *c == '\n';
    ck_assert_int_eq(lines, 2);
}
END_TEST

/* A child writing continuously with a short flush interval is SIGKILLed; what it left must open. */
START_TEST(sigkill_leaves_readable_file)
{
    mkdir_tmp();
    char p[512];
    path_of(p, sizeof p, "kill.nettrace");
    pid_t pid = fork();
    if (pid == 0) {
        /* dies with the test: an orphan writing for ever would fill the disk */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1)
            _exit(1);
        at_trace_options o = {.flush_interval_ms = 5};
        start("kill.nettrace", &o);
        at_event_type *a = type_plain("A");
        uint32_t v = 0;
        for (;;) {
            at_event_write(a, NULL, NULL, &v, 4, NULL, 0);
            v++;
            /* writing all along, at a pace the reader below keeps up with: flat out the file grew
             * by hundreds of MB a second, and a reader that had to catch up read it whole each
             * time (once until the machine ran out of memory) */
            if ((v & 1023) == 0)
                usleep(200);
        }
    }
    /* wait until completed flushes hold over 1000 events (the size alone can include a flush in
     * progress, which a reader rightly does not see yet), then kill without warning */
    size_t before = 0;
    char last[256] = "";
    for (int i = 0; i < 3000 && before <= 1000; i++) {
        usleep(10000);
        walk w0;
        if (walk_file(&w0, p) == 0)
            before = w0.nev;
        else
            snprintf(last, sizeof last, "%s", w0.err);
        walk_free(&w0);
    }
    if (before <= 1000)
        kill(pid, SIGKILL);
    ck_assert_msg(before > 1000, "after 30 s the file holds %zu events (%s)", before, last);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    walk w;
    ck_assert_msg(walk_file(&w, p) == 0, "%s", w.err);
    ck_assert_int_ge(w.nev, before);
    for (size_t i = 2; i < w.nev; i++) {
        ck_assert_int_eq(w.ev[i].seq, w.ev[i - 1].seq + 1); /* nothing lost before the kill */
        ck_assert_int_eq(ld32(w.ev[i].payload), ld32(w.ev[i - 1].payload) + 1);
    }
    walk_free(&w);
}
END_TEST

/* Events of the test's own (a 4-byte payload) holding v, in the file's completed flushes. */
static size_t count_value(const char *path, uint32_t v)
{
    walk w;
    size_t n = 0;
    if (walk_file(&w, path) == 0)
        for (size_t i = 0; i < w.nev; i++)
            n += w.ev[i].plen == 4 && ld32(w.ev[i].payload) == v;
    walk_free(&w);
    return n;
}

/* Voluntary context switches of a thread of this process: its wake-ups. */
static long wakeups(uint64_t tid)
{
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/self/task/%llu/status", (unsigned long long)tid);
    FILE *f = fopen(path, "r");
    long n = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

/* A writer thread whose passes found nothing to write for a while dozes: no wake-up every interval
 * while the process is idle, and the next record wakes it, so that the record is in the file
 * without an explicit flush, within the interval rather than the doze's bound (60 s). */
START_TEST(idle_writer_dozes)
{
    mkdir_tmp();
    at_trace_options o = {.flush_interval_ms = 20};
    start("doze.nettrace", &o);
    if (!at_rings_barrier()) {
        at_trace_stop();
        fprintf(stderr, "idle_writer_dozes: skipped, the kernel refuses membarrier (no doze then)\n");
        return;
    }
    char p[512];
    path_of(p, sizeof p, "doze.nettrace");
    at_event_type *a = type_plain("A");
    uint32_t v = 0x5eed0001;
    at_event_write(a, NULL, NULL, &v, 4, NULL, 0);
    /* ten passes with nothing (0.2 s at this interval), then it dozes */
    for (int i = 0; i < 3000 && !atomic_load(&at_rt_hot.flusher_doze); i++)
        usleep(10000);
    ck_assert_msg(atomic_load(&at_rt_hot.flusher_doze), "the idle writer did not doze in 30 s");
    ck_assert_int_eq(count_value(p, v), 1); /* everything was written before it dozed */
    long w0 = wakeups(at_flusher_tid);
    usleep(500000); /* 25 intervals */
    long w1 = wakeups(at_flusher_tid);
    ck_assert_msg(w0 >= 0 && w1 - w0 <= 1, "the dozing writer woke %ld times in 0.5 s", w1 - w0);
    uint32_t v2 = 0x5eed0002;
    at_event_write(a, NULL, NULL, &v2, 4, NULL, 0);
    size_t n = 0;
    for (int i = 0; i < 3000 && n == 0; i++) {
        usleep(10000);
        n = count_value(p, v2);
    }
    ck_assert_msg(n == 1, "the record written while the writer dozed is not in the file after 30 s");
    at_trace_stop();
    ck_assert_int_eq(count_value(p, v), 1);
    ck_assert_int_eq(count_value(p, v2), 1);
}
END_TEST

/* Tiny cap: every attempt is either written or counted as dropped, and the file's sequence
 * numbers (gaps + sequence points) account for the drops. */
#define TINY_THREADS 3
#define TINY_N 200000
static at_event_type *tiny_t;
static void *tiny_thread(void *a)
{
    (void)a;
    uint8_t pay[64] = {0};
    for (int i = 0; i < TINY_N; i++)
        at_event_write(tiny_t, NULL, NULL, pay, sizeof pay, NULL, 0);
    return NULL;
}

/* A thread whose ring belonged to an earlier session, in a session where it can get none: its
 * events are dropped and counted, and once rings can be had its next one takes a ring of this
 * session: it is not written into the earlier session's ring (which another thread may hold now,
 * and no flusher reads for this thread). */
START_TEST(no_stale_ring_after_refused_acquire)
{
    mkdir_tmp();
    at_trace_options o1 = {0};
    start("s1.nettrace", &o1);
    at_event_type *t = type_plain("Stale");
    ck_assert_int_eq(at_event_write(t, NULL, NULL, NULL, 0, NULL, 0), 0); /* this thread's ring */
    at_trace_stop();
    at_trace_options o2 = {0};
    start("s2.nettrace", &o2);
    at_tbuf_test_deny_rings(true);
    ck_assert_int_eq(at_event_write(t, NULL, NULL, NULL, 0, NULL, 0), -1);
    ck_assert_int_eq(at_event_write(t, NULL, NULL, NULL, 0, NULL, 0), -1);
    at_tbuf_test_deny_rings(false);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(at_event_write(t, NULL, NULL, NULL, 0, NULL, 0), 0);
    at_trace_stop();
    at_trace_stats st;
    at_trace_get_stats(&st);
    ck_assert_int_eq(st.events_written, 3);
    ck_assert_int_eq(st.events_dropped, 2);
    char p[512];
    path_of(p, sizeof p, "s2.nettrace");
    walk w;
    ck_assert_msg(walk_file(&w, p) == 0, "%s", w.err);
    ck_assert_int_eq(w.nev - 1, 3); /* ProcessInfo, then the three */
    /* the two dropped ones are the gap before the first written: numbers 1, 2 lost, 3.. written */
    ck_assert_int_eq(w.ev[1].seq, 3);
    ck_assert_int_eq(w.ev[3].seq, 5);
    walk_free(&w);
}
END_TEST

START_TEST(tiny_cap_drops_exact)
{
    mkdir_tmp();
    at_trace_options o = {.buffer_cap = 2 * AT_CHUNK_SIZE, .flush_interval_ms = 1};
    start("t.nettrace", &o);
    tiny_t = type_plain("A");
    pthread_t th[TINY_THREADS];
    for (int i = 0; i < TINY_THREADS; i++)
        pthread_create(&th[i], NULL, tiny_thread, NULL);
    for (int i = 0; i < TINY_THREADS; i++)
        pthread_join(th[i], NULL);
    at_trace_stop();
    at_trace_stats s;
    at_trace_get_stats(&s);
    ck_assert_int_eq(s.events_written + s.events_dropped, (uint64_t)TINY_THREADS * TINY_N);
    ck_assert_int_gt(s.events_dropped, 0);
    char p[512];
    path_of(p, sizeof p, "t.nettrace");
    walk w;
    ck_assert_msg(walk_file(&w, p) == 0, "%s", w.err);
    ck_assert_int_eq(w.nev - 1, s.events_written);
    /* per thread: the last sequence number known (event or SP) is the number of attempts, so
     * written + gaps inside + leading gap == TINY_N */
    uint64_t tids[16];
    uint32_t last[16] = {0};
    size_t nt = 0;
    for (size_t i = 1; i < w.nev; i++) {
        size_t k;
        for (k = 0; k < nt && tids[k] != w.ev[i].cap; k++)
            ;
        if (k == nt)
            tids[nt++] = w.ev[i].cap;
        ck_assert_int_gt(w.ev[i].seq, last[k]);
        last[k] = w.ev[i].seq;
    }
    for (uint32_t j = 0; j < w.nsp_entries; j++)
        for (size_t k = 0; k < nt; k++)
            if (w.sp_tid[j] == tids[k] && w.sp_seq[j] > last[k])
                last[k] = w.sp_seq[j];
    for (size_t k = 0; k < nt; k++)
        ck_assert_int_eq(last[k], TINY_N);
    walk_free(&w);
}
END_TEST

/* Chunks the flusher has read wait (cool) before writers get them again, as many as it retired in
 * its last pass: a pass that retired 10 keeps 10 waiting, and once passes retire 1 each, 1 waits and
 * the rest are free again (a fixed depth made every process cycle through 32 more chunks, each of
 * whose pages costs a first-touch fault). Periodic passes are run by hand (the flusher's interval is
 * set far away); events are back-dated so that the pass's hold-back takes them all. */
static at_event_type *cool_t;
static uint64_t cool_ts = 1000;
static void fill_chunks(uint32_t k)
{
    static uint8_t pl[1000];
    int32_t want = atomic_load(&at_pool_g.nfree) - (int32_t)k;
    while (atomic_load(&at_pool_g.nfree) > want)
        ck_assert_int_eq(at_event_write_ts(cool_ts++, cool_t, NULL, NULL, pl, sizeof pl, NULL, 0), 0);
}

static void periodic_pass(void)
{
    pthread_mutex_lock(&at_flush_lock);
    at_flush_locked(true, false);
    pthread_mutex_unlock(&at_flush_lock);
}

START_TEST(cooling_follows_retire_rate)
{
    mkdir_tmp();
    at_trace_options o = {.buffer_cap = 1024 * AT_CHUNK_SIZE, .flush_interval_ms = 3600000};
    start("cool.nettrace", &o);
    cool_t = type_plain("Cool");
    fill_chunks(11); /* 10 full chunks behind the one being written */
    periodic_pass();
    ck_assert_int_eq(at_chunks_cooling(), 10);
    ck_assert_int_eq(atomic_load(&at_pool_g.nfree), 1024 - 11);
    fill_chunks(1);
    periodic_pass(); /* the rate seen is still 10 (the last pass's): the oldest goes back */
    ck_assert_int_eq(at_chunks_cooling(), 10);
    ck_assert_int_eq(atomic_load(&at_pool_g.nfree), 1024 - 11);
    fill_chunks(1);
    periodic_pass(); /* two passes of 1 each: 1 waits, 10 are free again */
    ck_assert_int_eq(at_chunks_cooling(), 1);
    ck_assert_int_eq(atomic_load(&at_pool_g.nfree), 1024 - 2);
    at_trace_stop();
    ck_assert_int_eq(at_chunks_cooling(), 0);
    at_trace_stats st;
    at_trace_get_stats(&st);
    ck_assert_int_eq(st.events_dropped, 0);
}
END_TEST

/* Several threads x 1M events at the default cap: all present, per thread in order, no gaps. */
#define STRESS_THREADS 4
#define STRESS_N 1000000
static void *stress_thread(void *a)
{
    (void)a;
    for (uint32_t i = 0; i < STRESS_N; i++)
        at_event_write(tiny_t, NULL, NULL, &i, 4, NULL, 0);
    return NULL;
}

START_TEST(stress_default_cap)
{
    mkdir_tmp();
    at_trace_options o = {.flush_interval_ms = 100};
    start("s.nettrace", &o);
    tiny_t = type_plain("A");
    pthread_t th[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_create(&th[i], NULL, stress_thread, NULL);
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_join(th[i], NULL);
    at_trace_stop();
    at_trace_stats s;
    at_trace_get_stats(&s);
    ck_assert_int_eq(s.events_dropped, 0);
    ck_assert_int_eq(s.events_written, (uint64_t)STRESS_THREADS * STRESS_N);
    char p[512];
    path_of(p, sizeof p, "s.nettrace");
    walk w;
    ck_assert_msg(walk_file(&w, p) == 0, "%s", w.err);
    ck_assert_int_eq(w.nev - 1, (size_t)STRESS_THREADS * STRESS_N);
    uint64_t tids[STRESS_THREADS];
    uint32_t next[STRESS_THREADS];
    size_t nt = 0;
    uint64_t prev_ts = 0;
    for (size_t i = 1; i < w.nev; i++) {
        size_t k;
        for (k = 0; k < nt && tids[k] != w.ev[i].cap; k++)
            ;
        if (k == nt) {
            ck_assert_int_lt(nt, STRESS_THREADS);
            tids[nt] = w.ev[i].cap;
            next[nt++] = 0;
        }
        ck_assert_int_eq(w.ev[i].seq, next[k] + 1);
        ck_assert_int_eq(ld32(w.ev[i].payload), next[k]);
        next[k]++;
        if (w.ev[i].flags & 0x40) /* sorted blobs are globally non-decreasing */
            ck_assert_int_ge(w.ev[i].ts, prev_ts);
        if (w.ev[i].ts > prev_ts)
            prev_ts = w.ev[i].ts;
    }
    walk_free(&w);
}
END_TEST

/* Stacks: ids interned per SP interval and restarted after each SP. */
START_TEST(stacks_across_sps)
{
    mkdir_tmp();
    at_trace_options o = {0};
    start("st.nettrace", &o);
    at_event_type *a = type_plain("A");
    uintptr_t s1[3] = {1, 2, 3}, s2[2] = {4, 5};
    at_event_write(a, NULL, NULL, NULL, 0, s1, 3);
    at_event_write(a, NULL, NULL, NULL, 0, s2, 2);
    at_event_write(a, NULL, NULL, NULL, 0, s1, 3);
    at_trace_stop(); /* final flush writes an SP */
    char p[512];
    path_of(p, sizeof p, "st.nettrace");
    walk w;
    ck_assert_msg(walk_file(&w, p) == 0, "%s", w.err);
    ck_assert_int_eq(w.nev, 4);
    ck_assert_int_eq(w.ev[1].stack, 1);
    ck_assert_int_eq(w.ev[2].stack, 2);
    ck_assert_int_eq(w.ev[3].stack, 1);
    ck_assert_int_eq(w.ev[3].frames[2], 3);
    ck_assert_int_eq(w.nblocks[2], 1);
    ck_assert_int_ge(w.nsp, 1);
    walk_free(&w);
}
END_TEST

/* An activity event's one-pass writer (at_event_write_act) gives the record the general writer
 * gives (at_event_write_head without a stack): ids present or not, payloads of every small length
 * (across record padding and a chunk change), read back from the file. */
START_TEST(activity_writer_same_records)
{
    mkdir_tmp();
    at_trace_options o = {0};
    start("act.nettrace", &o);
    at_event_type *a = type_plain("A");
    at_guid id, rel, zero;
    memset(&zero, 0, sizeof zero);
    for (int i = 0; i < 16; i++)
        id.b[i] = (uint8_t)(0x10 + i), rel.b[i] = (uint8_t)(0x80 + i);
    uint8_t pl[64];
    for (int i = 0; i < 64; i++)
        pl[i] = (uint8_t)(i * 7 + 1);
    at_event_write(a, NULL, NULL, NULL, 0, NULL, 0); /* the thread's ring, set up */
    enum { NLEN = 41, ROUNDS = 12 };
    for (int k = 0; k < ROUNDS * NLEN; k++) {
        const at_guid *ai = k % 3 == 0 ? &id : k % 3 == 1 ? NULL : &zero;
        const at_guid *ri = k % 4 == 0 ? &rel : k % 4 == 1 ? NULL : k % 4 == 2 ? &zero : &id;
        uint32_t len = (uint32_t)(k % NLEN);
        ck_assert_int_eq(at_event_write_act(a, ai, ri, 1000 + (uint64_t)k, pl, len), 0);
        ck_assert_int_eq(at_event_write_head(a, ai, ri, 1000 + (uint64_t)k, pl, len, NULL, 0), 0);
    }
    at_trace_stop();
    char p[512];
    path_of(p, sizeof p, "act.nettrace");
    walk w;
    ck_assert_msg(walk_file(&w, p) == 0, "%s", w.err);
    ck_assert_int_eq(w.nev, 2 + 2 * ROUNDS * NLEN);
    for (size_t e = 2; e + 1 < w.nev; e += 2) {
        const wev *x = &w.ev[e], *y = &w.ev[e + 1];
        ck_assert_int_eq(x->meta, y->meta);
        ck_assert_int_eq(x->seq + 1, y->seq);
        ck_assert_int_le(x->ts, y->ts);
        ck_assert_int_eq(x->tid, y->tid);
        ck_assert_int_eq(x->stack, y->stack);
        ck_assert(memcmp(&x->act, &y->act, 16) == 0);
        ck_assert(memcmp(&x->rel, &y->rel, 16) == 0);
        ck_assert_int_eq(x->plen, 8 + (e / 2 - 1) % NLEN);
        ck_assert_int_eq(x->plen, y->plen);
        ck_assert(memcmp(x->payload, y->payload, x->plen) == 0);
        ck_assert_int_eq(ld64(x->payload), 1000 + e / 2 - 1);
        ck_assert(memcmp(x->payload + 8, pl, x->plen - 8) == 0);
    }
    walk_free(&w);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("writer");
    TCase *tc = tcase_create("writer");
    tcase_set_timeout(tc, 0);
    tcase_add_checked_fixture(tc, NULL, rm_tmp); /* a passing test leaves nothing in /tmp */
    tcase_add_test(tc, small_copy_exact);
    tcase_add_test(tc, header_bytes);
    tcase_add_test(tc, metadata_encoding);
    tcase_add_test(tc, payload_builders);
    tcase_add_test(tc, compression_cases);
    tcase_add_test(tc, varint_boundaries);
    tcase_add_test(tc, exact_blob_bytes);
    tcase_add_test(tc, filter_sets_enabled);
    tcase_add_test(tc, metadata_lazy_and_once);
    tcase_add_test(tc, types_past_first_table);
    tcase_add_test(tc, path_patterns);
    tcase_add_test(tc, rotate_mode);
    tcase_add_test(tc, circular_mode);
    tcase_add_test(tc, fork_child_own_file);
    tcase_add_test(tc, write_error_counts_drops);
    tcase_add_test(tc, sigkill_leaves_readable_file);
    tcase_add_test(tc, idle_writer_dozes);
    tcase_add_test(tc, tiny_cap_drops_exact);
    tcase_add_test(tc, no_stale_ring_after_refused_acquire);
    tcase_add_test(tc, cooling_follows_retire_rate);
    tcase_add_test(tc, stress_default_cap);
    tcase_add_test(tc, stacks_across_sps);
    tcase_add_test(tc, activity_writer_same_records);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
