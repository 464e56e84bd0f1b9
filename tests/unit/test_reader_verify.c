/* test_reader_verify.c: hand-built nettrace files, one rule broken at a time, read in strict mode (what
 * `acttrace verify` runs): each broken rule is reported with the right offset or stops the parse with a
 * clear error, and the clean file reports nothing. Also: sequence gaps counted exactly, stack ids
 * restarting after a sequence point, uncompressed blobs, V2Params/OpCode tags and implied opcodes.
 * The tiny builder below writes the format byte by byte from nettrace-v5.md; it is independent of the
 * runtime writer on purpose so it can also write what that writer never would. */
#include "guid.h"
#include "ntreader.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------------ builder */

typedef struct nb {
    uint8_t *p;
    size_t len, cap;
} nb;

static void put(nb *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
        ck_assert(b->p != NULL);
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}
static void u8(nb *b, uint8_t v) { put(b, &v, 1); }
static void u16(nb *b, uint16_t v) { put(b, &v, 2); }
static void u32(nb *b, uint32_t v) { put(b, &v, 4); }
static void u64(nb *b, uint64_t v) { put(b, &v, 8); }
static void varu(nb *b, uint64_t v)
{
    do {
        uint8_t c = v & 0x7F;
        v >>= 7;
        if (v) c |= 0x80;
        u8(b, c);
    } while (v);
}
static void wstr(nb *b, const char *s)
{
    for (; *s; s++) u16(b, (uint16_t)(unsigned char)*s);
    u16(b, 0);
}

typedef struct opts {
    int trace_version, trace_minver, block_version;
    uint8_t pad_byte;
    uint64_t sync_qpc;
    uint32_t meta_seq;
} opts;
static opts O;

static void obj_header(nb *b, const char *name, int ver, int minver)
{
    u8(b, 5); u8(b, 5); u8(b, 1);
    u32(b, (uint32_t)ver); u32(b, (uint32_t)minver);
    u32(b, (uint32_t)strlen(name));
    put(b, name, strlen(name));
    u8(b, 6);
}

static void trace_header(nb *b, int32_t pid)
{
    put(b, "Nettrace", 8);
    u32(b, 20);
    put(b, "!FastSerialization.1", 20);
    obj_header(b, "Trace", O.trace_version, O.trace_minver);
    uint16_t st[8] = {2026, 11, 0, 22, 14, 0, 0, 0};
    put(b, st, 16);
    u64(b, O.sync_qpc); /* sync qpc */
    u64(b, 1000000000); /* freq */
    u32(b, 8);
    u32(b, (uint32_t)pid);
    u32(b, 2);
    u32(b, 1000000);
    u8(b, 6);
}

/* begins a block; returns the offset of its size field */
static size_t block_begin(nb *b, const char *name)
{
    obj_header(b, name, O.block_version, 2);
    size_t at = b->len;
    u32(b, 0);
    while (b->len & 3) u8(b, O.pad_byte);
    return at;
}
static void block_end(nb *b, size_t size_at)
{
    size_t data = size_at + 4;
    while (data & 3) data++;
    uint32_t size = (uint32_t)(b->len - data);
    memcpy(b->p + size_at, &size, 4);
    u8(b, 6);
}

/* event/metadata block header; returns offset of min/max to patch */
static size_t evblock_header(nb *b, uint16_t flags, uint64_t min, uint64_t max)
{
    u16(b, 20); u16(b, flags);
    size_t at = b->len;
    u64(b, min); u64(b, max);
    return at;
}

typedef struct hdr {
    uint32_t meta, seq;
    uint64_t cap, thread;
    uint32_t proc, stack;
    uint64_t ts;
    at_guid act, rel;
    uint32_t len;
} hdr;

/* one compressed blob, with the runtime's flag rules */
static void blob(nb *b, hdr *last, const hdr *h, bool sorted, const void *payload)
{
    uint8_t fl = 0;
    if (h->meta != last->meta) fl |= 0x01;
    if (last->seq + (h->meta ? 1u : 0u) != h->seq || last->cap != h->cap || last->proc != h->proc) fl |= 0x02;
    if (h->thread != last->thread) fl |= 0x04;
    if (h->stack != last->stack) fl |= 0x08;
    if (!at_guid_eq(&h->act, &last->act)) fl |= 0x10;
    if (!at_guid_eq(&h->rel, &last->rel)) fl |= 0x20;
    if (sorted) fl |= 0x40;
    if (h->len != last->len) fl |= 0x80;
    u8(b, fl);
    if (fl & 0x01) varu(b, h->meta);
    if (fl & 0x02) {
        varu(b, (uint32_t)(h->seq - last->seq - 1));
        varu(b, h->cap);
        varu(b, h->proc);
    }
    if (fl & 0x04) varu(b, h->thread);
    if (fl & 0x08) varu(b, h->stack);
    varu(b, h->ts - last->ts);
    if (fl & 0x10) put(b, h->act.b, 16);
    if (fl & 0x20) put(b, h->rel.b, 16);
    if (fl & 0x80) varu(b, h->len);
    put(b, payload, h->len);
    *last = *h;
}

/* metadata payload with a V1 field list of (type,name) pairs and optional opcode tag */
static void meta_payload(nb *m, uint32_t id, const char *prov, uint32_t evid, const char *name, int nf,
                         const uint32_t *types, const char *const *names, int opcode)
{
    u32(m, id);
    wstr(m, prov);
    u32(m, evid);
    wstr(m, name);
    u64(m, 0x10);
    u32(m, 1);
    u32(m, 4);
    u32(m, (uint32_t)nf);
    for (int i = 0; i < nf; i++) {
        u32(m, types[i]);
        wstr(m, names[i]);
    }
    if (opcode >= 0) {
        u32(m, 1);
        u8(m, 1);
        u8(m, (uint8_t)opcode);
    }
}

static void metadata_block(nb *b, const nb *payloads, int n, uint64_t ts)
{
    size_t sz = block_begin(b, "MetadataBlock");
    evblock_header(b, 1, ts, ts);
    hdr last = {0}, h = {0};
    for (int i = 0; i < n; i++) {
        h.ts = ts;
        h.seq = O.meta_seq;
        h.len = (uint32_t)payloads[i].len;
        blob(b, &last, &h, true, payloads[i].p);
    }
    block_end(b, sz);
}

static void stack_block(nb *b, uint32_t first, int n, const uint64_t *const *frames, const uint32_t *nframes)
{
    size_t sz = block_begin(b, "StackBlock");
    u32(b, first);
    u32(b, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        u32(b, nframes[i] * 8);
        put(b, frames[i], nframes[i] * 8);
    }
    block_end(b, sz);
}

static void sp_block(nb *b, uint64_t ts, int n, const uint64_t *tids, const uint32_t *seqs)
{
    size_t sz = block_begin(b, "SPBlock");
    u64(b, ts);
    u32(b, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        u64(b, tids[i]);
        u32(b, seqs[i]);
    }
    block_end(b, sz);
}

/* ------------------------------------------------------------------ reading */

#define MAXP 64
typedef struct result {
    int rc;
    char err[512];
    int nprob;
    uint64_t prob_off[MAXP];
    char prob[MAXP][400];
    uint64_t events, lost;
    hdr evs[64];
    uint32_t nframes[64];
    uint64_t frame0[64];
    char fields[64][256];
    uint8_t opcode[64];
} result;

static void on_problem(void *ctx, uint64_t off, const char *msg)
{
    result *r = ctx;
    if (r->nprob < MAXP) {
        r->prob_off[r->nprob] = off;
        snprintf(r->prob[r->nprob], sizeof r->prob[0], "%s", msg);
    }
    r->nprob++;
}

static result *run(const nb *b)
{
    static result res;
    memset(&res, 0, sizeof res);
    nt_options opt = {.strict = true, .problem = on_problem, .ctx = &res};
    nt_reader *r = nt_open_mem(b->p, b->len, &opt, res.err, sizeof res.err);
    if (!r) {
        res.rc = -1;
        return &res;
    }
    nt_event ev;
    int rc;
    while ((rc = nt_next(r, &ev)) == 1) {
        size_t i = res.events++;
        if (i >= 64) continue;
        res.evs[i] = (hdr){ev.meta->id, ev.seq, ev.capture_thread, ev.thread, ev.proc, ev.stack_id, ev.timestamp,
                           ev.activity, ev.related, ev.payload_len};
        res.nframes[i] = ev.nframes;
        res.frame0[i] = ev.nframes ? ev.frames[0] : 0;
        res.opcode[i] = ev.meta->opcode;
        uint32_t off = 0;
        size_t o = 0;
        for (uint32_t k = 0; k < ev.meta->nfields; k++) {
            char buf[128];
            ck_assert(nt_field_format(&ev.meta->fields[k], ev.payload, ev.payload_len, &off, buf, sizeof buf));
            o += (size_t)snprintf(res.fields[i] + o, sizeof res.fields[i] - o, "%s%s=%s", k ? " " : "",
                                  ev.meta->fields[k].name, buf);
        }
    }
    res.rc = rc;
    if (rc < 0) snprintf(res.err, sizeof res.err, "%s", nt_error(r));
    res.lost = nt_get_counts(r)->events_lost;
    nt_close(r);
    return &res;
}

static bool has_problem(const result *r, const char *needle, uint64_t *off)
{
    for (int i = 0; i < r->nprob && i < MAXP; i++)
        if (strstr(r->prob[i], needle)) {
            if (off) *off = r->prob_off[i];
            return true;
        }
    return false;
}

static void dump_problems(const result *r)
{
    for (int i = 0; i < r->nprob && i < MAXP; i++)
        fprintf(stderr, "  problem @%llu: %s\n", (unsigned long long)r->prob_off[i], r->prob[i]);
    if (r->rc < 0) fprintf(stderr, "  error: %s\n", r->err);
}

/* ------------------------------------------------------------------ a well-formed file, with knobs */

typedef struct knobs {
    bool dup_meta, undefined_meta, dup_stack, undefined_stack, bad_minmax, ts_backwards, sp_not_after,
        unsorted_switch, no_end_tag, trailing, seq_gap, sp_gap, uncompressed, stack_reuse_after_sp;
} knobs;

#define T1 101
#define T2 202

static void build(nb *b, const knobs *k)
{
    memset(b, 0, sizeof *b);
    trace_header(b, 4242);
    /* metadata: 1 = RequestStart(int32 Id, string Url) (implied Start), 2 = Tick(uint64 N) with OpCode
     * tag 9 (Send), 3 = Job/Stop with OpCode tag 2 and a GUID field */
    nb m[3] = {0};
    static const uint32_t t1[] = {9, 18};
    static const char *const n1[] = {"Id", "Url"};
    meta_payload(&m[0], 1, "Test-Provider", 1, "RequestStart", 2, t1, n1, -1);
    static const uint32_t t2[] = {12};
    static const char *const n2[] = {"N"};
    meta_payload(&m[1], k->dup_meta ? 1 : 2, "Test-Provider", 2, "Tick", 1, t2, n2, 9);
    static const uint32_t t3[] = {17};
    static const char *const n3[] = {"Guid"};
    meta_payload(&m[2], 3, "Test-Provider", 3, "JobDone", 1, t3, n3, 2);
    metadata_block(b, m, 3, 2000);
    for (int i = 0; i < 3; i++) free(m[i].p);

    static const uint64_t s1[] = {0x1111, 0x2222, 0x3333}, s2[] = {0x4444};
    const uint64_t *fr[] = {s1, s2};
    uint32_t nfr[] = {3, 1};
    stack_block(b, 1, 2, fr, nfr);
    if (k->dup_stack) stack_block(b, 2, 1, fr, nfr);

    /* event block: T1 seq 1,2 ; T2 seq 1 ; T1 seq 3 */
    size_t sz = block_begin(b, "EventBlock");
    if (k->uncompressed) {
        evblock_header(b, 0, 3000, 3300);
        for (int i = 0; i < 2; i++) {
            uint8_t pl[8] = {(uint8_t)(7 + i)};
            u32(b, 76 + 8);                     /* EventSize */
            u32(b, 2 | (i ? 0x80000000u : 0));  /* MetadataId, high bit = not sorted */
            u32(b, (uint32_t)i + 1);            /* seq */
            u64(b, T1); u64(b, T1); u32(b, 0); u32(b, 0);
            u64(b, 3000 + 100 * (uint64_t)i);
            at_guid z = {{0}};
            put(b, z.b, 16); put(b, z.b, 16);
            u32(b, 8);
            put(b, pl, 8);
        }
        block_end(b, sz);
        u8(b, 1);
        return;
    }
    size_t mm = evblock_header(b, 1, 3000, 3300);
    hdr last = {0};
    uint8_t p1[64];
    nb pay = {0};
    u32(&pay, 42);
    wstr(&pay, "/index.html");
    memcpy(p1, pay.p, pay.len);
    uint32_t p1len = (uint32_t)pay.len;
    free(pay.p);
    at_guid act = {{0x11, 0x50}}; /* //1/1/5 for pid 4242 */
    {
        uint32_t u[3];
        memcpy(u, act.b, 12);
        uint32_t c = (u[0] + u[1] + u[2] + 0x599D99ADu) ^ 4242u;
        memcpy(act.b + 12, &c, 4);
    }
    hdr h = {.meta = k->undefined_meta ? 9 : 1, .seq = 1, .cap = T1, .thread = T1, .stack = 1, .ts = 3000,
             .act = act, .len = p1len};
    blob(b, &last, &h, true, p1);
    uint64_t n = 77;
    h = (hdr){.meta = 2, .seq = 2, .cap = T1, .thread = T1, .stack = k->undefined_stack ? 7 : 2,
              .ts = k->ts_backwards ? 3050 : 3100, .act = act, .len = 8};
    if (k->ts_backwards) { /* goes back after a later one on the same thread */
        hdr h0 = h;
        h0.ts = 3100;
        blob(b, &last, &h0, true, &n);
        h.seq = 3;
    }
    blob(b, &last, &h, true, &n);
    n = 78;
    h = (hdr){.meta = 2, .seq = 1, .cap = T2, .thread = T2, .stack = 0, .ts = 3200, .len = 8};
    blob(b, &last, &h, !k->unsorted_switch, &n);
    at_guid g = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};
    h = (hdr){.meta = 3, .seq = k->ts_backwards ? 4 : (k->seq_gap ? 6 : 3), .cap = T1, .thread = T1, .stack = 1,
              .ts = 3300, .act = act, .len = 16};
    blob(b, &last, &h, true, g.b);
    if (k->bad_minmax) {
        uint64_t max = 3250;
        memcpy(b->p + mm + 8, &max, 8);
    }
    block_end(b, sz);

    uint64_t tids[] = {T1, T2};
    uint32_t seqs[] = {k->ts_backwards ? 4u : (k->seq_gap ? 6u : 3u), k->sp_gap ? 5u : 1u};
    sp_block(b, k->sp_not_after ? 3300 : 3301, 2, tids, seqs);

    /* after the SP: stack id 1 defined again (legal), used by one event */
    static const uint64_t s3[] = {0x5555, 0x6666};
    const uint64_t *fr2[] = {s3};
    uint32_t nfr2[] = {2};
    if (k->stack_reuse_after_sp) stack_block(b, 1, 1, fr2, nfr2);
    sz = block_begin(b, "EventBlock");
    evblock_header(b, 1, 3400, 3400);
    last = (hdr){0};
    n = 79;
    h = (hdr){.meta = 2, .seq = seqs[1] + 1, .cap = T2, .thread = T2, .stack = k->stack_reuse_after_sp ? 1 : 0,
              .ts = 3400, .len = 8};
    blob(b, &last, &h, true, &n);
    block_end(b, sz);
    if (!k->no_end_tag) u8(b, 1);
    if (k->trailing) u8(b, 0);
}

/* ------------------------------------------------------------------ tests */

START_TEST(clean_file_reads_exactly)
{
    nb b;
    knobs k = {.stack_reuse_after_sp = true};
    build(&b, &k);
    result *r = run(&b);
    dump_problems(r);
    ck_assert_int_eq(r->rc, 0);
    ck_assert_int_eq(r->nprob, 0);
    ck_assert_uint_eq(r->events, 5);
    ck_assert_uint_eq(r->lost, 0);
    /* event 0: RequestStart with an implied Start opcode, stack 1, activity path, fields */
    ck_assert_uint_eq(r->evs[0].meta, 1);
    ck_assert_uint_eq(r->opcode[0], NT_OPCODE_START);
    ck_assert_uint_eq(r->nframes[0], 3);
    ck_assert_uint_eq(r->frame0[0], 0x1111);
    ck_assert_str_eq(r->fields[0], "Id=42 Url=\"/index.html\"");
    ck_assert_uint_eq(r->evs[0].act.b[0], 0x11);
    /* event 1: OpCode tag 9, stack 2 */
    ck_assert_uint_eq(r->opcode[1], 9);
    ck_assert_uint_eq(r->nframes[1], 1);
    ck_assert_uint_eq(r->frame0[1], 0x4444);
    ck_assert_str_eq(r->fields[1], "N=77");
    ck_assert_uint_eq(r->evs[1].seq, 2);
    ck_assert_uint_eq(r->evs[1].ts, 3100);
    /* event 2: other thread, no stack, no activity */
    ck_assert_uint_eq(r->evs[2].cap, T2);
    ck_assert_uint_eq(r->evs[2].seq, 1);
    ck_assert_uint_eq(r->nframes[2], 0);
    ck_assert(at_guid_is_zero(&r->evs[2].act));
    /* event 3: explicit Stop tag on a name without the suffix, GUID field */
    ck_assert_uint_eq(r->opcode[3], NT_OPCODE_STOP);
    ck_assert_str_eq(r->fields[3], "Guid=04030201-0605-0807-090a-0b0c0d0e0f10");
    /* event 4: after the SP, stack id 1 means the new stack */
    ck_assert_uint_eq(r->nframes[4], 2);
    ck_assert_uint_eq(r->frame0[4], 0x5555);
    /* AT_SEED_OUT=path writes this file out (how tests/fuzz/seeds/synthetic.nettrace was made) */
    const char *seed = getenv("AT_SEED_OUT");
    if (seed) {
        FILE *f = fopen(seed, "wb");
        ck_assert(f && fwrite(b.p, 1, b.len, f) == b.len && fclose(f) == 0);
    }
    free(b.p);
}
END_TEST

START_TEST(sequence_gaps_are_counted_exactly)
{
    nb b;
    knobs k = {.seq_gap = true, .sp_gap = true};
    build(&b, &k);
    result *r = run(&b);
    dump_problems(r);
    ck_assert_int_eq(r->rc, 0);
    ck_assert_int_eq(r->nprob, 0); /* drops are data, not a structural problem */
    /* T1: 2 -> 6 = 3 dropped; T2 at the SP: 1 -> 5 = 4 dropped */
    ck_assert_uint_eq(r->lost, 7);
    nt_reader *rd = nt_open_mem(b.p, b.len, NULL, NULL, 0);
    nt_event ev;
    while (nt_next(rd, &ev) == 1) {}
    ck_assert_uint_eq(nt_thread_count(rd), 2);
    ck_assert_uint_eq(nt_thread_at(rd, 0)->capture_thread, T1);
    ck_assert_uint_eq(nt_thread_at(rd, 0)->dropped, 3);
    ck_assert_uint_eq(nt_thread_at(rd, 1)->capture_thread, T2);
    ck_assert_uint_eq(nt_thread_at(rd, 1)->dropped, 4);
    ck_assert_uint_eq(nt_thread_at(rd, 1)->events, 2);
    nt_close(rd);
    /* acttrace verify: drops are printed per thread and do not fail the file */
    char tmp[] = "/tmp/at_drops_XXXXXX";
    int fd = mkstemp(tmp);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, b.p, b.len), (ssize_t)b.len);
    close(fd);
    char cmd[8192], out[4096];
    snprintf(cmd, sizeof cmd, "%s/acttrace verify %s 2>&1", AT_BUILD_DIR, tmp);
    FILE *p = popen(cmd, "r");
    ck_assert(p != NULL);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    unlink(tmp);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", out);
    ck_assert_msg(strstr(out, ": 7 events dropped\n"), "%s", out);
    ck_assert(strstr(out, "  capture thread 101: 3 dropped, 3 written\n"));
    ck_assert(strstr(out, "  capture thread 202: 4 dropped, 2 written\n"));
    ck_assert(strstr(out, ": OK\n"));
    free(b.p);
}
END_TEST

START_TEST(fatal_rules)
{
    nb b;
    knobs k = {.dup_meta = true};
    build(&b, &k);
    result *r = run(&b);
    ck_assert_int_eq(r->rc, -1);
    ck_assert_msg(strstr(r->err, "metadata id 1 defined twice") && strstr(r->err, "offset "), "%s", r->err);
    free(b.p);

    k = (knobs){.undefined_meta = true};
    build(&b, &k);
    r = run(&b);
    ck_assert_int_eq(r->rc, -1);
    ck_assert_msg(strstr(r->err, "metadata id 9, which is not defined"), "%s", r->err);
    free(b.p);

    k = (knobs){.dup_stack = true};
    build(&b, &k);
    r = run(&b);
    ck_assert_int_eq(r->rc, -1);
    ck_assert_msg(strstr(r->err, "stack id 2 defined twice before a sequence point"), "%s", r->err);
    free(b.p);

    k = (knobs){.no_end_tag = true};
    build(&b, &k);
    r = run(&b);
    ck_assert_int_eq(r->rc, -1);
    char want[64];
    snprintf(want, sizeof want, "offset %zu", b.len);
    ck_assert_msg(strstr(r->err, "without the end-of-stream tag") && strstr(r->err, want), "%s", r->err);
    free(b.p);

    O.trace_version = 5;
    k = (knobs){0};
    build(&b, &k);
    r = run(&b);
    O.trace_version = 4;
    ck_assert_int_eq(r->rc, -1);
    ck_assert_msg(strstr(r->err, "Trace object version 5"), "%s", r->err);
    free(b.p);

    O.block_version = 3;
    build(&b, &k);
    r = run(&b);
    O.block_version = 2;
    ck_assert_int_eq(r->rc, -1);
    ck_assert_msg(strstr(r->err, "MetadataBlock version 3 not supported"), "%s", r->err);
    free(b.p);
}
END_TEST

START_TEST(reported_rules)
{
    nb b;
    uint64_t off;
    struct {
        knobs k;
        const char *needle;
    } cases[] = {
        {{.undefined_stack = true}, "stack id 7, which is not defined"},
        {{.bad_minmax = true}, "outside the block's [min 3000, max 3250]"},
        {{.ts_backwards = true}, "is earlier than its previous event's 3100"},
        {{.sp_not_after = true}, "sequence point timestamp 3300 is not greater than an earlier event's 3300"},
        {{.unsorted_switch = true}, "capture thread changes (101 -> 202) on a blob without the IsSorted flag"},
        {{.trailing = true}, "1 trailing byte(s) after the end-of-stream tag"},
        {{.uncompressed = true}, "without header compression"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        build(&b, &cases[i].k);
        result *r = run(&b);
        if (!has_problem(r, cases[i].needle, &off)) dump_problems(r);
        ck_assert_msg(r->rc == 0, "case %zu: %s", i, r->err);
        ck_assert_msg(has_problem(r, cases[i].needle, &off), "case %zu: no \"%s\"", i, cases[i].needle);
        ck_assert_uint_lt(off, b.len);
        ck_assert_int_eq(r->nprob, 1); /* exactly the broken rule */
        if (cases[i].k.trailing) ck_assert_uint_eq(off, b.len - 1);
        free(b.p);
    }
    /* non-zero padding and a wrong minimum reader version */
    O.pad_byte = 0xAA;
    knobs k = {0};
    build(&b, &k);
    result *r = run(&b);
    O.pad_byte = 0;
    ck_assert_int_eq(r->rc, 0);
    ck_assert(has_problem(r, "non-zero padding byte 0xaa", &off));
    ck_assert_uint_eq(b.p[off], 0xAA);
    free(b.p);
    O.trace_minver = 3;
    build(&b, &k);
    r = run(&b);
    O.trace_minver = 4;
    ck_assert(has_problem(r, "Trace object minimum reader version is 3", NULL));
    ck_assert_int_eq(r->nprob, 1);
    free(b.p);
    /* events before SyncTimeQPC: reported once */
    O.sync_qpc = 3150;
    build(&b, &k);
    r = run(&b);
    O.sync_qpc = 1000;
    ck_assert(has_problem(r, "event timestamp 3000 is before the trace's SyncTimeQPC 3150", NULL));
    ck_assert_int_eq(r->nprob, 1);
    free(b.p);
    /* metadata blobs carry sequence 0 */
    O.meta_seq = 5;
    build(&b, &k);
    r = run(&b);
    O.meta_seq = 0;
    ck_assert(has_problem(r, "metadata blob has sequence 5 / capture thread 0", NULL));
    ck_assert_int_eq(r->nprob, 3);
    free(b.p);
}
END_TEST

START_TEST(uncompressed_blobs_read)
{
    nb b;
    knobs k = {.uncompressed = true};
    build(&b, &k);
    result *r = run(&b);
    ck_assert_int_eq(r->rc, 0);
    ck_assert_uint_eq(r->events, 2);
    ck_assert_uint_eq(r->evs[0].ts, 3000);
    ck_assert_uint_eq(r->evs[1].ts, 3100);
    ck_assert_uint_eq(r->evs[1].seq, 2);
    ck_assert_str_eq(r->fields[0], "N=7");
    ck_assert_str_eq(r->fields[1], "N=8");
    free(b.p);
}
END_TEST

START_TEST(v2params_objects_and_arrays)
{
    /* metadata with an empty V1 list, a V2Params tag: int32 A, array<struct{uint16 X; string S}> L,
     * then an OpCode tag; one event using it */
    nb b = {0};
    trace_header(&b, 1);
    nb m = {0};
    u32(&m, 5);
    wstr(&m, "P");
    u32(&m, 1);
    wstr(&m, "Ev");
    u64(&m, 0);
    u32(&m, 0);
    u32(&m, 5);
    u32(&m, 0); /* V1 count */
    nb v2 = {0};
    u32(&v2, 2);
    /* field A */
    nb f = {0};
    wstr(&f, "A");
    u32(&f, 9);
    u32(&v2, (uint32_t)(4 + f.len));
    put(&v2, f.p, f.len);
    f.len = 0;
    /* field L: array of object with nested V2 list */
    wstr(&f, "L");
    u32(&f, 19);
    u32(&f, 1);
    u32(&f, 2);
    nb g = {0};
    wstr(&g, "X");
    u32(&g, 8);
    u32(&f, (uint32_t)(4 + g.len));
    put(&f, g.p, g.len);
    g.len = 0;
    wstr(&g, "S");
    u32(&g, 18);
    u32(&f, (uint32_t)(4 + g.len));
    put(&f, g.p, g.len);
    u32(&v2, (uint32_t)(4 + f.len));
    put(&v2, f.p, f.len);
    u32(&m, (uint32_t)v2.len);
    u8(&m, 2);
    put(&m, v2.p, v2.len);
    u32(&m, 1);
    u8(&m, 1);
    u8(&m, 7);
    metadata_block(&b, &m, 1, 2000);
    size_t sz = block_begin(&b, "EventBlock");
    evblock_header(&b, 1, 3000, 3000);
    nb pl = {0};
    u32(&pl, (uint32_t)-5);
    u16(&pl, 2);
    u16(&pl, 1);
    wstr(&pl, "a");
    u16(&pl, 65535);
    wstr(&pl, "q\"");
    hdr last = {0}, h = {.meta = 5, .seq = 1, .cap = 1, .thread = 1, .ts = 3000, .len = (uint32_t)pl.len};
    blob(&b, &last, &h, true, pl.p);
    block_end(&b, sz);
    u8(&b, 1);
    result *r = run(&b);
    dump_problems(r);
    ck_assert_int_eq(r->rc, 0);
    ck_assert_int_eq(r->nprob, 0);
    ck_assert_uint_eq(r->events, 1);
    ck_assert_uint_eq(r->opcode[0], 7);
    ck_assert_str_eq(r->fields[0], "A=-5 L=[{X=1, S=\"a\"}, {X=65535, S=\"q\\\"\"}]");
    free(m.p); free(v2.p); free(f.p); free(g.p); free(pl.p); free(b.p);
}
END_TEST

START_TEST(field_formatting_is_bounded)
{
    /* array<object{ M: array<object{}> }>: 65535 x 65535 empty objects would be 4e9 steps */
    nt_field m = {.name = "M", .type = NT_TYPE_ARRAY, .elem_type = NT_TYPE_OBJECT, .nfields = 0, .fields = NULL};
    nt_field outer = {.name = "L", .type = NT_TYPE_ARRAY, .elem_type = NT_TYPE_OBJECT, .nfields = 1, .fields = &m};
    size_t len = 2 + 2 * 65535;
    uint8_t *pl = malloc(len);
    ck_assert(pl != NULL);
    for (size_t i = 0; i < len; i += 2) { pl[i] = 0xFF; pl[i + 1] = 0xFF; }
    char buf[128];
    uint32_t off = 0;
    ck_assert(!nt_field_format(&outer, pl, (uint32_t)len, &off, buf, sizeof buf));
    /* a modest one still formats */
    pl[0] = 2; pl[1] = 0; pl[2] = 1; pl[3] = 0; pl[4] = 0; pl[5] = 0;
    off = 0;
    ck_assert(nt_field_format(&outer, pl, 6, &off, buf, sizeof buf));
    ck_assert_str_eq(buf, "[{M=[{}]}, {M=[]}]");
    ck_assert_uint_eq(off, 6);
    free(pl);
}
END_TEST

int main(void)
{
    O = (opts){4, 4, 2, 0, 1000, 0};
    Suite *s = suite_create("reader_verify");
    TCase *tc = tcase_create("rules");
    tcase_add_test(tc, clean_file_reads_exactly);
    tcase_add_test(tc, sequence_gaps_are_counted_exactly);
    tcase_add_test(tc, fatal_rules);
    tcase_add_test(tc, reported_rules);
    tcase_add_test(tc, uncompressed_blobs_read);
    tcase_add_test(tc, v2params_objects_and_arrays);
    tcase_add_test(tc, field_formatting_is_bounded);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* O is global state set by main */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
