/* test_writer_roundtrip.c: what the writer writes, read back through the project's reader
 * (tools/ntreader.h) in strict mode (every rule of the writer checklist): every field type, every
 * header-compression case, stacks across sequence points, rotation and circular files, a
 * multi-thread stress at the default cap, exact drop accounting at a tiny cap, SIGKILL, the
 * emergency flush from a signal handler and exit() from another thread. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include "at_testlib.h"
#include "ntreader.h"
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

static char dir[256];

/* After each test (in its own process): the folder it wrote its traces to goes. A failing test's
 * folder stays, for a look at the file. */
static void rm_tmp(void)
{
    if (dir[0])
        at_rmtree(dir);
    dir[0] = 0;
}
static unsigned problems;
static char first_problem[512];

static void on_problem(void *ctx, uint64_t off, const char *msg)
{
    (void)ctx;
    if (!problems++)
        snprintf(first_problem, sizeof first_problem, "offset %llu: %s", (unsigned long long)off, msg);
}

static void mkdir_tmp(void)
{
    snprintf(dir, sizeof dir, "/tmp/at_test_rt.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static const char *pathf(const char *name)
{
    static char p[4][512];
    static int k;
    k = (k + 1) & 3;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void start(const char *name, at_trace_options *o)
{
    o->path = pathf(name);
    if (!o->flush_interval_ms)
        o->flush_interval_ms = 100000;
    if (!o->command_line)
        o->command_line = "roundtrip \xc3\xa9";
    char err[256];
    int rc = at_trace_start(o, err, sizeof err);
    ck_assert_msg(rc == 0, "start: %s", err);
}

static at_event_type *type_plain(const char *name)
{
    at_event_desc d = {.provider = "Test-Roundtrip", .name = name, .level = NT_LEVEL_INFO};
    at_event_type *t = at_event_type_register(&d);
    ck_assert_ptr_nonnull(t);
    return t;
}

/* A copied event */
typedef struct rev {
    uint32_t meta, seq, stack, plen, nframes;
    uint64_t cap, tid, ts;
    uint64_t psum; /* FNV-1a of the whole payload (only its first 256 bytes are kept) */
    at_guid act, rel;
    bool sorted;
    uint8_t payload[256];
    uint64_t frames[32];
} rev;

typedef struct rfile {
    rev *ev;
    size_t nev, cap;
    nt_counts counts;
    nt_trace_info info;
    nt_thread_stat threads[64];
    size_t nthreads;
    char pi_cmdline[256];
    uint64_t pi_count;
} rfile;

static uint64_t fnv(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Reads a whole file strictly: a clean end and no problem. keep = copy the events. */
static void read_file(const char *path, rfile *f, bool keep)
{
    memset(f, 0, sizeof *f);
    problems = 0;
    nt_options opt = {.strict = true, .problem = on_problem};
    char err[512];
    nt_reader *r = nt_open_ex(path, &opt, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_event e;
    int rc;
    while ((rc = nt_next(r, &e)) == 1) {
        if (!strcmp(e.meta->provider, "Microsoft-DotNETCore-EventPipe") && e.meta->event_id == 1) {
            uint32_t off = 0;
            f->pi_count++;
            ck_assert(nt_field_format(&e.meta->fields[0], e.payload, e.payload_len, &off,
                                      f->pi_cmdline, sizeof f->pi_cmdline));
            continue;
        }
        if (!keep)
            continue;
        if (f->nev == f->cap) {
            f->cap = f->cap ? f->cap * 2 : 4096;
            f->ev = realloc(f->ev, f->cap * sizeof(rev));
        }
        rev *v = &f->ev[f->nev++];
        v->meta = e.meta->id;
        v->seq = e.seq;
        v->stack = e.stack_id;
        v->cap = e.capture_thread;
        v->tid = e.thread;
        v->ts = e.timestamp;
        v->act = e.activity;
        v->rel = e.related;
        v->sorted = e.sorted;
        v->plen = e.payload_len;
        memcpy(v->payload, e.payload, e.payload_len < 256 ? e.payload_len : 256);
        v->psum = fnv(e.payload, e.payload_len);
        v->nframes = e.nframes;
        for (uint32_t i = 0; i < e.nframes && i < 32; i++)
            v->frames[i] = e.frames[i];
    }
    ck_assert_msg(rc == 0, "%s: %s", path, nt_error(r));
    ck_assert_msg(problems == 0, "%s: %u problems, first: %s", path, problems, first_problem);
    f->counts = *nt_get_counts(r);
    f->info = *nt_info(r);
    f->nthreads = nt_thread_count(r);
    for (size_t i = 0; i < f->nthreads && i < 64; i++)
        f->threads[i] = *nt_thread_at(r, i);
    nt_close(r);
}

START_TEST(every_field_type)
{
    mkdir_tmp();
    at_trace_options o = {0};
    start("types.nettrace", &o);
    at_field fields[] = {
        {"I32", NT_TYPE_INT32}, {"U32", NT_TYPE_UINT32}, {"I64", NT_TYPE_INT64},
        {"U64", NT_TYPE_UINT64}, {"Dbl", NT_TYPE_DOUBLE}, {"G", NT_TYPE_GUID},
        {"S", NT_TYPE_STRING}, {"Empty", NT_TYPE_STRING},
    };
    at_event_desc d = {.provider = "Types", .event_id = 42, .name = "AllStart", .version = 3,
                       .level = NT_LEVEL_WARNING, .opcode = NT_OPCODE_START, .keywords = 0xF0,
                       .nfields = 8, .fields = fields};
    at_event_type *t = at_event_type_register(&d);
    ck_assert_ptr_nonnull(t);
    uint8_t buf[256];
    at_payload pl;
    at_payload_init(&pl, buf, sizeof buf);
    at_guid g = {{0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x59, 0x9c, 0x99, 0xda}};
    at_payload_i32(&pl, -5);
    at_payload_u32(&pl, 4000000000u);
    at_payload_i64(&pl, -9000000000ll);
    at_payload_u64(&pl, 18000000000000000000ull);
    at_payload_double(&pl, 2.5);
    at_payload_guid(&pl, &g);
    at_payload_str(&pl, "h\xc3\xa9llo", 100);
    at_payload_str(&pl, NULL, 100);
    ck_assert(!pl.overflow);
    uint32_t len = (uint32_t)(pl.p - buf);
    ck_assert_int_eq(at_event_write(t, NULL, NULL, buf, len, NULL, 0), 0);
    at_trace_stop();

    nt_options opt = {.strict = true, .problem = on_problem};
    problems = 0;
    char err[512];
    nt_reader *r = nt_open_ex(pathf("types.nettrace"), &opt, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_event e;
    ck_assert_int_eq(nt_next(r, &e), 1); /* ProcessInfo */
    ck_assert_int_eq(nt_next(r, &e), 1);
    const nt_metadata *m = e.meta;
    ck_assert_str_eq(m->provider, "Types");
    ck_assert_str_eq(m->name, "AllStart");
    ck_assert_int_eq(m->event_id, 42);
    ck_assert_int_eq(m->version, 3);
    ck_assert_int_eq(m->level, NT_LEVEL_WARNING);
    ck_assert_int_eq(m->keywords, 0xF0);
    ck_assert_int_eq(m->opcode, NT_OPCODE_START);
    ck_assert(m->has_opcode_tag);
    ck_assert_int_eq(m->nfields, 8);
    const char *want[] = {"-5", "4000000000", "-9000000000", "18000000000000000000", "2.5",
                          "00000011-0000-0000-0000-0000599c99da", "h\xc3\xa9llo", ""};
    ck_assert_int_eq(e.payload_len, len);
    ck_assert_mem_eq(e.payload, buf, len);
    uint32_t off = 0;
    for (int i = 0; i < 8; i++) {
        ck_assert_str_eq(m->fields[i].name, fields[i].name);
        ck_assert_int_eq(m->fields[i].type, fields[i].type);
        char out[128];
        ck_assert(nt_field_format(&m->fields[i], e.payload, e.payload_len, &off, out, sizeof out));
        ck_assert_msg(strstr(out, want[i]) != NULL, "field %d: '%s' lacks '%s'", i, out, want[i]);
    }
    ck_assert_int_eq(off, len);
    ck_assert_int_eq(nt_next(r, &e), 0);
    ck_assert_int_eq(problems, 0);
    nt_close(r);
}
END_TEST

START_TEST(process_info_and_header)
{
    mkdir_tmp();
    at_trace_options o = {0};
    uint64_t before = at_now_ns(); /* file time is CLOCK_MONOTONIC ns */
    start("pi.nettrace", &o);
    at_event_write(type_plain("A"), NULL, NULL, NULL, 0, NULL, 0);
    at_trace_stop();
    rfile f;
    read_file(pathf("pi.nettrace"), &f, true);
    ck_assert_int_eq(f.pi_count, 1);
    ck_assert_ptr_nonnull(strstr(f.pi_cmdline, "roundtrip \xc3\xa9"));
    /* file time is CLOCK_MONOTONIC ns, whatever clock the events read */
    ck_assert_int_eq(f.info.qpc_freq, 1000000000);
    ck_assert_int_eq(f.info.pointer_size, 8);
    ck_assert_int_eq(f.info.pid, getpid());
    /* the sync point is the last whole millisecond of wall-clock time at the start */
    ck_assert_int_ge(f.info.sync_time_qpc + 1000000, (int64_t)before);
    ck_assert_int_le(f.info.sync_time_qpc, (int64_t)f.ev[0].ts);
    ck_assert_int_eq(f.nev, 1);
    free(f.ev);
}
END_TEST

/* The TSC clock: events read the TSC, the file holds CLOCK_MONOTONIC ns converted through the pairs
 * the flusher takes (clock.c), so durations are CLOCK_MONOTONIC's and the times are its own: each
 * event lies between the clock_gettime calls around it (within the pairs' read error). The wall-clock
 * sync time is the start's, on a whole millisecond. */
START_TEST(tsc_clock_durations)
{
    mkdir_tmp();
    at_trace_options o = {.clock = AT_CLOCK_TSC};
    struct timespec rt0;
    clock_gettime(CLOCK_REALTIME, &rt0);
    start("tsc.nettrace", &o);
    ck_assert_int_eq(at_clock_select(AT_CLOCK_TSC), AT_CLOCK_TSC);
    at_event_type *a = type_plain("A");
    uint64_t n[4];
    n[0] = at_now_ns();
    at_event_write(a, NULL, NULL, NULL, 0, NULL, 0);
    n[1] = at_now_ns();
    struct timespec d = {0, 300000000};
    nanosleep(&d, NULL);
    n[2] = at_now_ns();
    at_event_write(a, NULL, NULL, NULL, 0, NULL, 0);
    n[3] = at_now_ns();
    at_trace_stop();
    rfile f;
    read_file(pathf("tsc.nettrace"), &f, true);
    ck_assert_int_eq(f.nev, 2);
    ck_assert_int_eq(f.info.qpc_freq, 1000000000);
    for (int i = 0; i < 2; i++)
        ck_assert_msg(f.ev[i].ts + 200 >= n[2 * i] && f.ev[i].ts <= n[2 * i + 1] + 200,
                      "event %d at %llu ns, not within [%llu, %llu]", i,
                      (unsigned long long)f.ev[i].ts, (unsigned long long)n[2 * i],
                      (unsigned long long)n[2 * i + 1]);
    ck_assert_int_eq(f.info.sync_time_utc[7] * 1000000ll % 1000000, 0);
    /* the first event is no earlier than the sync point, and the sync point is the start's time */
    ck_assert_int_ge((int64_t)f.ev[0].ts, f.info.sync_time_qpc);
    struct tm tm;
    gmtime_r(&rt0.tv_sec, &tm);
    const uint16_t *u = f.info.sync_time_utc;
    long utc_s = ((long)u[4] * 60 + u[5]) * 60 + u[6], rt_s = ((long)tm.tm_hour * 60 + tm.tm_min) * 60 + tm.tm_sec;
    ck_assert_int_eq(u[0], tm.tm_year + 1900);
    ck_assert_int_le(labs(utc_s - rt_s), 1);
    free(f.ev);
    at_clock_select(AT_CLOCK_AUTO);
}
END_TEST

/* Asked for CLOCK_MONOTONIC: ns ticks, frequency 1e9 exactly. */
START_TEST(monotonic_clock_header)
{
    mkdir_tmp();
    at_trace_options o = {.clock = AT_CLOCK_MONOTONIC};
    uint64_t before = at_now_ns();
    start("mono.nettrace", &o);
    at_event_write(type_plain("A"), NULL, NULL, NULL, 0, NULL, 0);
    uint64_t after = at_now_ns();
    at_trace_stop();
    rfile f;
    read_file(pathf("mono.nettrace"), &f, true);
    ck_assert_int_eq(f.info.qpc_freq, 1000000000);
    ck_assert_int_eq(f.nev, 1);
    ck_assert_uint_ge(f.ev[0].ts, before);
    ck_assert_uint_le(f.ev[0].ts, after);
    free(f.ev);
    at_clock_select(AT_CLOCK_AUTO);
}
END_TEST

static at_event_type *ca, *cb;
static uint64_t cts;
static void *other_thread(void *a)
{
    (void)a;
    /* a new thread starting just below 2^32: the reader sees no gap, then the wrap */
    at_tbuf_test_set_seq(0xFFFFFFFDu);
    for (int i = 0; i < 4; i++)
        at_event_write_ts(cts + (uint64_t)i, ca, NULL, NULL, NULL, 0, NULL, 0);
    return NULL;
}

START_TEST(compression_cases)
{
    mkdir_tmp();
    /* timestamps given here are compared as written: the clock whose ticks are the file's */
    at_trace_options o = {.clock = AT_CLOCK_MONOTONIC};
    start("c.nettrace", &o);
    ca = type_plain("A");
    cb = type_plain("B");
    uint64_t t = at_ticks();
    cts = t + 20;
    uint32_t u = 7;
    at_guid g1 = {{1, 2, 3}}, g2 = {{9}};
    uintptr_t ips[2] = {0x1111, 0x2222};
    at_event_write_ts(t + 1, ca, NULL, NULL, NULL, 0, NULL, 0);
    at_event_write_ts(t + 2, ca, NULL, NULL, NULL, 0, NULL, 0);
    at_event_write_ts(t + 3, ca, NULL, NULL, &u, 4, NULL, 0);    /* payload size */
    at_event_write_ts(t + 4, ca, NULL, NULL, &u, 4, ips, 2);     /* stack */
    at_event_write_ts(t + 5, ca, &g1, NULL, &u, 4, ips, 2);      /* activity */
    at_event_write_ts(t + 6, ca, &g1, &g2, &u, 4, ips, 2);       /* related */
    at_event_write_ts(t + 7, cb, &g1, &g2, &u, 4, ips, 2);       /* metadata */
    at_event_write_ts(t + 8, cb, NULL, NULL, NULL, 0, NULL, 0);  /* everything back to zero */
    at_tbuf_test_set_seq(10);                                    /* as if 2 events were dropped */
    at_event_write_ts(t + 9, cb, NULL, NULL, NULL, 0, NULL, 0);  /* seq 11: a gap */
    pthread_t th;
    pthread_create(&th, NULL, other_thread, NULL);               /* thread change at t+20.. */
    pthread_join(th, NULL);
    at_event_write_ts(t + 30, cb, NULL, NULL, NULL, 0, NULL, 0); /* and back */
    at_trace_stop();
    rfile f;
    read_file(pathf("c.nettrace"), &f, true);
    ck_assert_int_eq(f.nev, 14);
    rev *e = f.ev;
    uint64_t me = (uint64_t)gettid();
    static const uint32_t seqs[] = {1, 2, 3, 4, 5, 6, 7, 8, 11, 0xFFFFFFFEu, 0xFFFFFFFFu, 0, 1, 12};
    for (int i = 0; i < 14; i++) {
        ck_assert_int_eq(e[i].seq, seqs[i]);
        ck_assert_int_eq(e[i].cap, e[i].tid);
        ck_assert_int_eq(e[i].tid == me, i < 9 || i == 13);
        ck_assert(e[i].sorted);
        ck_assert_int_eq(e[i].meta, (i < 6 || (i >= 9 && i < 13)) ? ca->index : cb->index);
    }
    ck_assert_int_eq(e[0].ts, t + 1);
    ck_assert_int_eq(e[9].ts, t + 20);
    ck_assert_int_eq(e[12].ts, t + 23);
    ck_assert_int_eq(e[13].ts, t + 30);
    ck_assert_int_eq(e[1].plen, 0);
    ck_assert_int_eq(e[2].plen, 4);
    ck_assert_int_eq(e[2].nframes, 0);
    ck_assert_int_eq(e[3].nframes, 2);
    ck_assert_int_eq(e[3].frames[0], 0x1111);
    ck_assert_int_eq(e[3].frames[1], 0x2222);
    ck_assert(at_guid_is_zero(&e[3].act));
    ck_assert(at_guid_eq(&e[4].act, &g1));
    ck_assert(at_guid_is_zero(&e[4].rel));
    ck_assert(at_guid_eq(&e[5].rel, &g2));
    ck_assert(at_guid_eq(&e[6].act, &g1) && at_guid_eq(&e[6].rel, &g2));
    ck_assert_int_eq(e[6].nframes, 2);
    ck_assert(at_guid_is_zero(&e[7].act) && at_guid_is_zero(&e[7].rel));
    ck_assert_int_eq(e[7].nframes, 0);
    ck_assert_int_eq(e[7].plen, 0);
    ck_assert_int_eq(f.counts.events_lost, 2); /* the gap 8 -> 11; the wrap is not a gap */
    free(f.ev);
}
END_TEST

/* Every header field changing in random combinations, nearly all of it through the writer's common
 * path (no stack) with a few events that take the general one (stacks, new metadata) between them,
 * a gap in the numbers now and then, another thread's events between ours, flushes at random:
 * every event reads back as written. */
typedef struct rh_want {
    uint32_t type, seq, plen;
    int act, rel, nips;
    uint64_t ts, tid;
} rh_want;
static rh_want *rh;
static size_t nrh;
static at_event_type *rh_types[4];
static const at_guid rh_ids[4] = {{{0}}, {{1, 2, 3}}, {{9, 8}}, {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7}}};
static uint64_t rh_ts;
static uint32_t rh_seed = 5;

static uint32_t rh_rand(void)
{
    rh_seed = rh_seed * 1103515245u + 12345u;
    return rh_seed >> 8;
}

static void rh_write(uint32_t *seq, uint64_t tid)
{
    rh_want *w = &rh[nrh++];
    uint32_t k = rh_rand();
    w->type = k % 3 ? k % 3 : (k >> 4) % (rh_types[3] ? 4 : 3);
    w->act = (int)((k >> 6) % 4);
    w->rel = (k >> 8) % 3 ? 0 : (int)((k >> 10) % 4);
    w->plen = (k >> 12) % 4 ? (k >> 14) % 41 : 0;
    w->nips = (k >> 20) % 50 ? 0 : 1 + (int)((k >> 22) % 3);
    uint32_t d = rh_rand();
    rh_ts += d % 8 ? d % 200 : (uint64_t)d % 3000000;
    w->ts = rh_ts;
    w->tid = tid;
    uint8_t pl[64];
    for (uint32_t i = 0; i < w->plen; i++)
        pl[i] = (uint8_t)(nrh * 7 + i);
    uintptr_t ips[3] = {0x401000 + (nrh % 5) * 16, 0x402000, 0x403000};
    if (rh_rand() % 97 == 0) {
        *seq += 3; /* three numbers dropped */
        at_tbuf_test_set_seq(*seq);
    }
    w->seq = ++*seq;
    at_event_write_ts(w->ts, rh_types[w->type], w->act ? &rh_ids[w->act] : NULL,
                      w->rel ? &rh_ids[w->rel] : NULL, pl, w->plen, ips, (uint32_t)w->nips);
}

static void *rh_other(void *a)
{
    (void)a;
    uint32_t rh_other_seq = 0;
    for (int i = 0; i < 50; i++)
        rh_write(&rh_other_seq, (uint64_t)gettid());
    return NULL;
}

START_TEST(random_headers_round_trip)
{
    mkdir_tmp();
    at_trace_options o = {.clock = AT_CLOCK_MONOTONIC};
    start("rh.nettrace", &o);
    rh_types[0] = type_plain("R0");
    rh_types[1] = type_plain("R1");
    rh_types[2] = type_plain("R2");
    enum { N = 200000 };
    rh = calloc(N + 100 * 60, sizeof *rh);
    nrh = 0;
    rh_ts = at_ticks();
    uint32_t seq = 0;
    uint64_t me = (uint64_t)gettid();
    for (int i = 0; i < N; i++) {
        rh_write(&seq, me);
        if (i % 4099 == 4098) {
            pthread_t th;
            pthread_create(&th, NULL, rh_other, NULL);
            pthread_join(th, NULL);
        }
        if (i == N / 2)
            rh_types[3] = type_plain("R3"); /* metadata first met in the middle */
        if (i >= N / 2 && rh_rand() % 1000 == 0)
            at_trace_flush();
    }
    at_trace_stop();
    rfile f;
    read_file(pathf("rh.nettrace"), &f, true);
    ck_assert_int_eq(f.nev, nrh);
    for (size_t i = 0; i < nrh; i++) {
        const rev *e = &f.ev[i];
        const rh_want *w = &rh[i];
        ck_assert_int_eq(e->meta, rh_types[w->type]->index);
        ck_assert_int_eq(e->ts, w->ts);
        ck_assert_int_eq(e->seq, w->seq);
        ck_assert_int_eq(e->tid, w->tid);
        ck_assert_int_eq(e->cap, w->tid);
        ck_assert_int_eq(e->plen, w->plen);
        ck_assert_int_eq(e->nframes, w->nips);
        ck_assert(e->sorted);
        ck_assert(at_guid_eq(&e->act, &rh_ids[w->act]));
        ck_assert(at_guid_eq(&e->rel, &rh_ids[w->rel]));
        for (uint32_t k = 0; k < w->plen; k++)
            ck_assert_int_eq(e->payload[k], (uint8_t)((i + 1) * 7 + k));
    }
    free(rh);
    free(f.ev);
}
END_TEST

/* More distinct stacks than one SP interval holds: ids restart after each SP and every event still
 * resolves to its own frames. */
START_TEST(stacks_across_sps)
{
    mkdir_tmp();
    at_trace_options o = {0};
    start("st.nettrace", &o);
    at_event_type *a = type_plain("A");
    enum { N = 30000 };
    for (uint32_t i = 0; i < N; i++) {
        uintptr_t ips[4] = {0x1000 + i % 20000, 0x2000, 0x3000 + i % 7, i};
        uint32_t n = 1 + i % 4;
        ck_assert_int_eq(at_event_write(a, NULL, NULL, &i, 4, ips, n), 0);
        if (i % 7000 == 6999)
            at_trace_flush();
    }
    at_trace_stop();
    rfile f;
    read_file(pathf("st.nettrace"), &f, true);
    ck_assert_int_eq(f.nev, N);
    ck_assert_int_ge(f.counts.sp_blocks, 2);
    ck_assert_int_ge(f.counts.stack_blocks, 2);
    for (uint32_t k = 0; k < N; k++) {
        uint32_t i;
        memcpy(&i, f.ev[k].payload, 4);
        ck_assert_int_eq(i, k);
        uintptr_t ips[4] = {0x1000 + i % 20000, 0x2000, 0x3000 + i % 7, i};
        ck_assert_int_eq(f.ev[k].nframes, 1 + i % 4);
        for (uint32_t j = 0; j < f.ev[k].nframes; j++)
            ck_assert_int_eq(f.ev[k].frames[j], ips[j]);
    }
    free(f.ev);
}
END_TEST

/* Stacks by reference (trace.h), as the shim's hooks write them: a site's stack in full once, as
 * a definition, then one word. Sites share the 8 tags (definitions replace each other), sequence
 * points restart the file's stack ids meanwhile, and every event reads back with its own site's
 * frames. A reference whose definition was never written names nothing: no stack, never another. */
START_TEST(stack_references_round_trip)
{
    mkdir_tmp();
    at_trace_options o = {0};
    start("sr.nettrace", &o);
    at_event_type *a = type_plain("A");
    enum { N = 30000, SITES = 11, DEPTH = 20 };
    uint32_t uses = 0, defs = 0;
    for (uint32_t i = 0; i < N; i++) {
        uint32_t site = (i * 7 + i / 100) % SITES, nf = 3 + site;
        uint64_t walk = 0x100000000ull * (site + 1) + 2;
        uintptr_t leaf = 0x7000 + site;
        uintptr_t ips[2 + SITES + 3];
        uint32_t n;
        uint64_t m = at_stkref_use(walk, leaf, DEPTH);
        if (m) {
            ips[0] = m;
            n = 1;
            uses++;
        } else {
            for (uint32_t j = 0; j < nf; j++)
                ips[1 + j] = 0x400000 + site * 0x1000 + j;
            m = at_stkref_def(walk, leaf, DEPTH, nf);
            if (m) {
                ips[0] = m;
                n = nf + 1;
                defs++;
            } else {
                memmove(ips, ips + 1, nf * sizeof ips[0]);
                n = nf;
            }
        }
        ck_assert_int_eq(at_event_write(a, NULL, NULL, &i, 4, ips, n), 0);
        if (i % 7000 == 6999)
            at_trace_flush();
    }
    ck_assert_int_gt(uses, N / 2);
    ck_assert_int_gt(defs, SITES - 1);
    /* a definition whose event is never written is never referred to */
    ck_assert(at_stkref_def(0x900000002ull, 0x9000, DEPTH, 3) != 0);
    ck_assert(at_stkref_use(0x900000002ull, 0x9000, DEPTH) == 0);
    /* a reference to a definition the ring never held: the event goes without a stack, and the
     * flusher voids the ring's definitions (the next stacks go in full again) */
    uint32_t site = ((N - 1) * 7 + (N - 1) / 100) % SITES;
    uint64_t walk = 0x100000000ull * (site + 1) + 2;
    ck_assert(at_stkref_use(walk, 0x7000 + site, DEPTH) != 0);
    uintptr_t forged[1] = {AT_STKREF_USE | 3ull << 32 | 0x7fffffffu};
    uint32_t last = N;
    ck_assert_int_eq(at_event_write(a, NULL, NULL, &last, 4, forged, 1), 0);
    at_trace_flush();
    ck_assert(at_stkref_use(walk, 0x7000 + site, DEPTH) == 0);
    at_trace_stop();
    ck_assert_int_eq(at_ntw_stkrefs_unresolved(), 1);
    rfile f;
    read_file(pathf("sr.nettrace"), &f, true);
    ck_assert_int_eq(f.nev, N + 1);
    ck_assert_int_ge(f.counts.sp_blocks, 2);
    for (uint32_t k = 0; k < N; k++) {
        uint32_t i;
        memcpy(&i, f.ev[k].payload, 4);
        ck_assert_int_eq(i, k);
        uint32_t site = (i * 7 + i / 100) % SITES, nf = 3 + site;
        ck_assert_int_eq(f.ev[k].nframes, nf);
        for (uint32_t j = 0; j < nf; j++)
            ck_assert_int_eq(f.ev[k].frames[j], 0x400000 + site * 0x1000 + j);
    }
    ck_assert_int_eq(f.ev[N].nframes, 0);
    free(f.ev);
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

static const char *seg_name(const char *stem, unsigned k)
{
    static char n[64];
    if (k == 0)
        snprintf(n, sizeof n, "%s.nettrace", stem);
    else
        snprintf(n, sizeof n, "%s.%u.nettrace", stem, k);
    return pathf(n);
}

START_TEST(rotate_files_each_complete)
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
    uint64_t total = 0, expect = 0;
    for (unsigned k = 0; k < s.files; k++) {
        rfile f;
        read_file(seg_name("r", k), &f, true);
        ck_assert_int_eq(f.pi_count, 1);
        for (size_t i = 0; i < f.nev; i++) {
            uint64_t v;
            memcpy(&v, f.ev[i].payload, 8);
            ck_assert_int_eq(v, expect % 2000); /* in order, none lost or doubled at the seams */
            expect++;
        }
        total += f.nev;
        struct stat st;
        ck_assert_int_eq(stat(seg_name("r", k), &st), 0);
        ck_assert_int_le(st.st_size, 64 * 1024);
        free(f.ev);
    }
    ck_assert_int_eq(total, 40000);
}
END_TEST

START_TEST(circular_keeps_last_segments)
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
    uint64_t prev_last = 0;
    for (unsigned k = last - 3; k <= last; k++) {
        rfile f;
        read_file(seg_name("c", k), &f, false);
        ck_assert_int_eq(f.pi_count, 1);
        ck_assert_int_gt(f.counts.events, 1);
        ck_assert_int_ge(f.counts.first_ts, prev_last);
        prev_last = f.counts.last_ts;
    }
    for (unsigned k = 0; k + 4 <= last; k++)
        ck_assert_int_eq(access(seg_name("c", k), F_OK), -1);
}
END_TEST

#define STRESS_THREADS 4
#define STRESS_N 1000000
static at_event_type *st_t;
static void *stress_thread(void *a)
{
    (void)a;
    for (uint32_t i = 0; i < STRESS_N; i++)
        at_event_write(st_t, NULL, NULL, &i, 4, NULL, 0);
    return NULL;
}

static void check_stress_file(const char *path, int nthreads, uint32_t n)
{
    problems = 0;
    nt_options opt = {.strict = true, .problem = on_problem};
    char err[512];
    nt_reader *r = nt_open_ex(path, &opt, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    uint64_t tids[16];
    uint32_t next[16];
    int nt = 0;
    nt_event e;
    int rc;
    uint64_t count = 0;
    while ((rc = nt_next(r, &e)) == 1) {
        if (e.meta->id != st_t->index)
            continue;
        int k;
        for (k = 0; k < nt && tids[k] != e.capture_thread; k++)
            ;
        if (k == nt) {
            ck_assert_int_lt(nt, nthreads);
            tids[nt] = e.capture_thread;
            next[nt++] = 0;
        }
        uint32_t v;
        memcpy(&v, e.payload, 4);
        ck_assert_int_eq(v, next[k]);
        ck_assert_int_eq(e.seq, next[k] + 1);
        next[k]++;
        count++;
    }
    ck_assert_msg(rc == 0, "%s", nt_error(r));
    ck_assert_msg(problems == 0, "%u problems, first: %s", problems, first_problem);
    ck_assert_int_eq(count, (uint64_t)nthreads * n);
    ck_assert_int_eq(nt_get_counts(r)->events_lost, 0);
    nt_close(r);
}

START_TEST(stress_default_cap)
{
    mkdir_tmp();
    at_trace_options o = {.flush_interval_ms = 100};
    start("s.nettrace", &o);
    st_t = type_plain("A");
    pthread_t th[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_create(&th[i], NULL, stress_thread, NULL);
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_join(th[i], NULL);
    /* an explicit flush leaves no chunk cooling (tbuf.c): the exited threads' buffers all free */
    at_trace_flush();
    ck_assert_uint_eq(at_chunks_cooling(), 0);
    ck_assert_int_eq(atomic_load(&at_pool_g.nfree), (int32_t)at_pool_g.nchunks);
    at_trace_stop();
    at_trace_stats s;
    at_trace_get_stats(&s);
    ck_assert_int_eq(s.events_dropped, 0);
    ck_assert_int_eq(s.events_written, (uint64_t)STRESS_THREADS * STRESS_N);
    check_stress_file(pathf("s.nettrace"), STRESS_THREADS, STRESS_N);
}
END_TEST

#define TINY_THREADS 3
#define TINY_N 200000
static void *tiny_thread(void *a)
{
    (void)a;
    uint8_t pay[64] = {0};
    for (int i = 0; i < TINY_N; i++)
        at_event_write(st_t, NULL, NULL, pay, sizeof pay, NULL, 0);
    return NULL;
}

/* Threads that end hand their ring to the next thread that writes (tbuf.c): a run of short-lived
 * threads (half ended by the trampoline's call, half by the thread key) shares one ring and one
 * chunk, every event keeps its own thread's id with sequence numbers from 1, nothing is counted lost,
 * a first event stamped older than the last owner's last one is kept after it, and an explicit
 * flush gives every chunk back. */
#define HAND_THREADS 300
#define HAND_EVENTS 3
static at_event_type *hand_t;
static uint64_t hand_last_ts[HAND_THREADS];

static void *hand_thread(void *p)
{
    int k = (int)(intptr_t)p;
    at_thread_managed = (k & 1) != 0;
    uint64_t tid = (uint64_t)at_tid();
    for (int i = 0; i < HAND_EVENTS; i++) {
        uint64_t v[2] = {tid, (uint64_t)k};
        /* the first event stamped in the past: after the last owner's events all the same */
        at_event_write_ts(i == 0 && k > 0 ? 1 : at_ticks(), hand_t, NULL, NULL, v, sizeof v, NULL, 0);
    }
    hand_last_ts[k] = at_event_last_ts();
    if (at_thread_managed)
        at_tbuf_thread_exit(); /* what thread.c's trampoline does; the others: the thread key */
    return NULL;
}

START_TEST(ended_threads_hand_over_their_rings)
{
    mkdir_tmp();
    /* timestamps given here are compared as written: the clock whose ticks are the file's */
    at_trace_options o = {.clock = AT_CLOCK_MONOTONIC};
    start("hand.nettrace", &o);
    at_field f[] = {{"Tid", NT_TYPE_UINT64}, {"K", NT_TYPE_UINT64}};
    at_event_desc d = {.provider = "Test-Roundtrip", .name = "Hand", .level = NT_LEVEL_INFO,
                       .nfields = 2, .fields = f};
    hand_t = at_event_type_register(&d);
    for (int k = 0; k < HAND_THREADS; k++) {
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, hand_thread, (void *)(intptr_t)k), 0);
        pthread_join(t, NULL);
    }
    /* one ring went from thread to thread (the flusher ran no pass: nothing was recycled) */
    ck_assert_int_le(at_ring_limit(), 2);
    ck_assert_int_le((int32_t)at_pool_g.nchunks - atomic_load(&at_pool_g.nfree), 2);
    at_trace_flush();
    ck_assert_int_eq(atomic_load(&at_pool_g.nfree), (int32_t)at_pool_g.nchunks);
    at_trace_stop();
    rfile rf;
    read_file(pathf("hand.nettrace"), &rf, true);
    ck_assert_int_eq(rf.nev, HAND_THREADS * HAND_EVENTS);
    ck_assert_int_eq(rf.counts.events_lost, 0);
    int seen[HAND_THREADS] = {0};
    for (size_t i = 0; i < rf.nev; i++) {
        rev *v = &rf.ev[i];
        uint64_t tid, k;
        memcpy(&tid, v->payload, 8);
        memcpy(&k, v->payload + 8, 8);
        ck_assert_int_lt(k, HAND_THREADS);
        ck_assert_int_eq(v->tid, tid);         /* named after the thread that wrote it */
        ck_assert_int_eq(v->cap, tid);
        ck_assert_int_eq(v->seq, ++seen[k]);   /* each thread's own numbers, from 1 */
        if (k > 0 && seen[k] == 1)             /* the back-dated first event: after the last owner */
            ck_assert_int_ge(v->ts, hand_last_ts[k - 1]);
        if (i > 0)
            ck_assert_int_ge(v->ts, rf.ev[i - 1].ts);
    }
    for (int k = 0; k < HAND_THREADS; k++)
        ck_assert_int_eq(seen[k], HAND_EVENTS);
    free(rf.ev);
}
END_TEST

/* The record header's 16-bit fields at their limits: a type registered after 300 others, the
 * largest payload a record takes (48 KiB) with the deepest stack (1024 frames), then one byte more
 * (dropped: a gap of one sequence number), then a small event. */
START_TEST(largest_records_round_trip)
{
    mkdir_tmp();
    at_trace_options o = {0};
    start("large.nettrace", &o);
    at_event_type *t = NULL;
    for (int i = 0; i < 300; i++) {
        char name[16];
        snprintf(name, sizeof name, "Many%d", i);
        t = type_plain(name);
    }
    ck_assert_int_gt(t->index, 300);
    enum { BIG = 48 * 1024, FRAMES = 1024 };
    uint8_t *pl = malloc(BIG + 1);
    uintptr_t *ips = malloc(FRAMES * sizeof *ips);
    for (int i = 0; i <= BIG; i++)
        pl[i] = (uint8_t)(i * 7 + 3);
    for (int i = 0; i < FRAMES; i++)
        ips[i] = 0x400000u + (uintptr_t)i * 16;
    at_guid act = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};
    ck_assert_int_eq(at_event_write(t, &act, NULL, pl, BIG, ips, FRAMES), 0);
    ck_assert_int_eq(at_event_write(t, &act, NULL, pl, BIG + 1, NULL, 0), -1);
    ck_assert_int_eq(at_event_write(t, NULL, NULL, pl, 8, NULL, 0), 0);
    at_trace_stop();
    rfile rf;
    read_file(pathf("large.nettrace"), &rf, true);
    ck_assert_int_eq(rf.nev, 2);
    ck_assert_int_eq(rf.counts.events_lost, 1);
    rev *a = &rf.ev[0], *b = &rf.ev[1];
    ck_assert_int_eq(a->meta, t->index);
    ck_assert_int_eq(a->plen, BIG);
    ck_assert(a->psum == fnv(pl, BIG));
    ck_assert(memcmp(&a->act, &act, 16) == 0);
    ck_assert_int_eq(a->nframes, FRAMES);
    for (int i = 0; i < 32; i++)
        ck_assert_int_eq(a->frames[i], ips[i]);
    ck_assert_int_eq(b->meta, t->index);
    ck_assert_int_eq(b->plen, 8);
    ck_assert_int_eq(b->seq, a->seq + 2);
    ck_assert(at_guid_is_zero(&b->act));
    free(pl);
    free(ips);
    free(rf.ev);
}
END_TEST

START_TEST(tiny_cap_drops_agree)
{
    mkdir_tmp();
    at_trace_options o = {.buffer_cap = 2 * AT_CHUNK_SIZE, .flush_interval_ms = 1};
    start("t.nettrace", &o);
    st_t = type_plain("A");
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
    rfile f;
    read_file(pathf("t.nettrace"), &f, true);
    ck_assert_int_eq(f.nev, s.events_written);
    /* Every thread's last known sequence number (event or SP entry) is its number of attempts, so
     * the sequence numbers account for every drop: sum(last_seq - events) == dropped. The reader
     * counts all of them, also those before a thread's first event: the file starts with a
     * sequence point, the baseline its drops are counted from. */
    uint64_t by_seq = 0, reader_gaps = 0;
    for (size_t t = 0; t < f.nthreads; t++) {
        if (f.threads[t].capture_thread == at_flusher_tid)
            continue; /* ProcessInfo's */
        ck_assert_int_eq(f.threads[t].last_seq, TINY_N);
        by_seq += f.threads[t].last_seq - f.threads[t].events;
        reader_gaps += f.threads[t].dropped;
    }
    ck_assert_int_eq(by_seq, s.events_dropped);
    ck_assert_int_eq(reader_gaps, f.counts.events_lost);
    ck_assert_int_eq(f.counts.events_lost, s.events_dropped);
    free(f.ev);
}
END_TEST

START_TEST(sigkill_leaves_readable_file)
{
    mkdir_tmp();
    const char *p = pathf("kill.nettrace");
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
        }
    }
    struct stat st;
    do {
        usleep(10000);
    } while (stat(p, &st) != 0 || st.st_size < 200 * 1024);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFSIGNALED(status));
    /* not strict: a kill in the middle of a flush leaves bytes after the end tag, which readers
     * never look at; everything before it must be a clean trace */
    char err[512];
    nt_reader *r = nt_open(p, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_event e;
    int rc;
    uint64_t n = 0;
    uint32_t expect = 0;
    while ((rc = nt_next(r, &e)) == 1) {
        if (e.meta->event_id == 1 && !strcmp(e.meta->name, "ProcessInfo"))
            continue;
        uint32_t v;
        memcpy(&v, e.payload, 4);
        ck_assert_int_eq(v, expect++);
        n++;
    }
    ck_assert_msg(rc == 0, "%s", nt_error(r));
    ck_assert_int_gt(n, 1000);
    ck_assert_int_eq(nt_get_counts(r)->events_lost, 0);
    nt_close(r);
}
END_TEST

static void on_segv(int sig)
{
    (void)sig;
    at_trace_emergency_flush();
    _exit(3);
}

START_TEST(emergency_flush_from_signal_handler)
{
    mkdir_tmp();
    pid_t pid = fork();
    if (pid == 0) {
        at_trace_options o = {0}; /* never flushed by the interval */
        start("em.nettrace", &o);
        signal(SIGSEGV, on_segv);
        at_event_type *a = type_plain("A");
        write_n(a, 5000, 8);
        raise(SIGSEGV);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 3);
    rfile f;
    read_file(pathf("em.nettrace"), &f, false);
    ck_assert_int_eq(f.counts.events, 5000 + 1);
}
END_TEST

static void *exiting_thread(void *a)
{
    (void)a;
    write_n(st_t, 3000, 8);
    exit(0); /* from a thread other than main, with main still writing */
}

START_TEST(exit_from_other_thread_flushes_everything)
{
    mkdir_tmp();
    pid_t pid = fork();
    if (pid == 0) {
        at_trace_options o = {0};
        start("ex.nettrace", &o);
        atexit(at_trace_stop); /* what the shim registers */
        st_t = type_plain("A");
        write_n(st_t, 1000, 8);
        pthread_t th;
        pthread_create(&th, NULL, exiting_thread, NULL);
        pthread_join(th, NULL);
        _exit(9); /* not reached */
    }
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    rfile f;
    read_file(pathf("ex.nettrace"), &f, false);
    ck_assert_int_eq(f.counts.events, 4000 + 1);
    ck_assert_int_eq(f.counts.events_lost, 0);
}
END_TEST

START_TEST(thread_exit_keeps_buffered_events)
{
    mkdir_tmp();
    at_trace_options o = {0};
    start("te.nettrace", &o);
    st_t = type_plain("A");
    pthread_t th[8];
    for (int round = 0; round < 3; round++) { /* descriptors are recycled between rounds */
        for (int i = 0; i < 8; i++)
            pthread_create(&th[i], NULL, tiny_thread, NULL);
        for (int i = 0; i < 8; i++)
            pthread_join(th[i], NULL);
        at_trace_flush();
        /* the flush recycled the exited threads' rings and the next round takes the same ones:
         * rings in use never went past the main thread's and 8 */
        ck_assert_uint_le(at_ring_limit(), 9);
    }
    at_trace_stop();
    at_trace_stats s;
    at_trace_get_stats(&s);
    ck_assert_int_eq(s.events_dropped, 0);
    ck_assert_int_eq(s.events_written, 24ull * TINY_N);
    rfile f;
    read_file(pathf("te.nettrace"), &f, false);
    ck_assert_int_eq(f.counts.events, 24ull * TINY_N + 1);
}
END_TEST


/* Events written from a signal handler that interrupts the same thread's writes: the file stays
 * valid (per-thread order, no torn record) and every attempt is written or counted. */
static at_event_type *sig_type;
static volatile sig_atomic_t sig_attempts;
static void on_prof(int sig)
{
    (void)sig;
    uint32_t v = 0xABCD;
    sig_attempts++;
    at_event_write(sig_type, NULL, NULL, &v, 4, NULL, 0);
}

START_TEST(signal_handler_writes)
{
    mkdir_tmp();
    at_trace_options o = {.flush_interval_ms = 10};
    start("sig.nettrace", &o);
    at_event_type *a = type_plain("Main");
    sig_type = type_plain("FromHandler");
    uint8_t first[40] = {1};
    at_event_write(a, NULL, NULL, first, sizeof first, NULL, 0); /* no drop before the first event */
    uint64_t n = 1;
    struct sigaction sa = {0};
    sa.sa_handler = on_prof;
    sigaction(SIGPROF, &sa, NULL);
    struct itimerval it = {{0, 200}, {0, 200}};
    setitimer(ITIMER_PROF, &it, NULL);
    while (sig_attempts < 300 && n < 3000000) {
        uint8_t pay[40] = {1};
        at_event_write(a, NULL, NULL, pay, sizeof pay, NULL, 0);
        n++;
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    at_trace_stop();
    at_trace_stats s;
    at_trace_get_stats(&s);
    ck_assert_int_eq(s.events_written + s.events_dropped, n + (uint64_t)sig_attempts);
    problems = 0;
    nt_options opt = {.strict = true, .problem = on_problem};
    char err[512];
    nt_reader *r = nt_open_ex(pathf("sig.nettrace"), &opt, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_event e;
    int rc;
    uint64_t from_handler = 0, total = 0;
    while ((rc = nt_next(r, &e)) == 1) {
        if (e.meta->id == sig_type->index) {
            uint32_t v;
            memcpy(&v, e.payload, 4);
            ck_assert_int_eq(v, 0xABCD);
            from_handler++;
        } else if (e.meta->id == a->index) {
            ck_assert_int_eq(e.payload_len, 40);
            ck_assert_int_eq(e.payload[0], 1);
        }
        total++;
    }
    ck_assert_msg(rc == 0, "%s", nt_error(r));
    ck_assert_msg(problems == 0, "%u problems, first: %s", problems, first_problem);
    ck_assert_int_eq(total - 1, s.events_written);
    ck_assert_int_gt(from_handler, 0);
    ck_assert_int_eq(nt_get_counts(r)->events_lost, s.events_dropped); /* one thread: drops are gaps */
    nt_close(r);
    unlink(pathf("sig.nettrace"));
}
END_TEST

/* The merge's promise under overload: no event is older than an IsSorted event or a sequence point
 * written before it (else TraceEvent dispatches it out of order), whatever the scheduler does. Four
 * writers on two cores, each stopped now and then for up to 3 ms (one stop in 300: 400 ms, longer
 * than the file clock keeps pairs for at a flush every few ms) by a signal whose handler sleeps
 * (anywhere in its write: also between its clock read and its publish), under a flusher running every
 * 2 ms. The same thread's events must not go back in file time either. ACTTRACE_TEST_ORDER_SECONDS
 * sets how long (default 6). */
#define ORD_THREADS 4
static at_event_type *ord_t;
static _Atomic int ord_stop;
static _Atomic uint64_t ord_stalls;
static uint64_t ord_n[ORD_THREADS];
static void ord_stall(int sig)
{
    (void)sig;
    int e = errno;
    /* now and then a stall longer than the file clock's window of pairs (64 flushes) */
    bool long_one = atomic_fetch_add(&ord_stalls, 1) % 300 == 299;
    struct timespec d = {0, 100000 + (long)(at_now_ns() % 2900000)};
    if (long_one)
        d.tv_nsec = 400000000;
    nanosleep(&d, NULL);
    errno = e;
}
static void *ord_writer(void *p)
{
    int k = (int)(intptr_t)p;
    uint64_t n = 0;
    while (!atomic_load_explicit(&ord_stop, memory_order_relaxed)) {
        at_event_write(ord_t, NULL, NULL, &n, 8, NULL, 0);
        n++;
    }
    ord_n[k] = n;
    return NULL;
}

START_TEST(preempted_writers_never_late)
{
    mkdir_tmp();
    at_trace_options o = {.flush_interval_ms = 2};
    start("ord.nettrace", &o);
    ord_t = type_plain("Ord");
    struct sigaction sa = {0};
    sa.sa_handler = ord_stall;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    const char *env = getenv("ACTTRACE_TEST_ORDER_SECONDS");
    uint64_t secs = env ? strtoull(env, NULL, 10) : 6;
    pthread_t th[ORD_THREADS];
    atomic_store(&ord_stop, 0);
    for (int i = 0; i < ORD_THREADS; i++)
        pthread_create(&th[i], NULL, ord_writer, (void *)(intptr_t)i);
    uint64_t end = at_now_ns() + secs * 1000000000u;
    for (unsigned k = 0; at_now_ns() < end; k++) {
        pthread_kill(th[k % ORD_THREADS], SIGUSR1);
        struct timespec d = {0, 300000};
        nanosleep(&d, NULL);
    }
    atomic_store(&ord_stop, 1);
    for (int i = 0; i < ORD_THREADS; i++)
        pthread_join(th[i], NULL);
    signal(SIGUSR1, SIG_DFL);
    at_trace_stop();
    at_trace_stats s;
    at_trace_get_stats(&s);
    uint64_t tried = 0;
    for (int i = 0; i < ORD_THREADS; i++)
        tried += ord_n[i];
    ck_assert_int_gt(atomic_load(&ord_stalls), 100);
    problems = 0;
    nt_options opt = {.strict = true, .order = true, .problem = on_problem};
    char err[512];
    nt_reader *r = nt_open_ex(pathf("ord.nettrace"), &opt, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_event e;
    int rc;
    uint64_t n = 0;
    while ((rc = nt_next(r, &e)) == 1)
        n += e.meta->id == ord_t->index;
    ck_assert_msg(rc == 0, "%s", nt_error(r));
    ck_assert_msg(problems == 0, "%u problems in %llu events (%llu stalls), first: %s", problems,
                  (unsigned long long)n, (unsigned long long)atomic_load(&ord_stalls), first_problem);
    ck_assert_int_eq(n + s.events_dropped, tried);
    ck_assert_int_eq(nt_get_counts(r)->events_lost, s.events_dropped);
    nt_close(r);
}
END_TEST

/* The kernel reuses thread ids (after pid_max threads): a new thread with an ended thread's id has
 * numbers of its own, from 1. The file numbers its events on from the ended thread's last, so that
 * no reader sees a regression or counts anything as lost (a V5 reader knows threads only by id, and
 * TraceEvent counts a number going back, even to 0 in a sequence point, as 2^31 lost events). Here
 * four threads take the same id in turn, with a flush between them and without one. */
static at_event_type *reuse_t;
static void *reuse_thread(void *p)
{
    at_tid_cache = 777777; /* as the kernel would hand it out again */
    for (uint32_t i = 0; i < 5; i++)
        at_event_write(reuse_t, NULL, NULL, &i, 4, NULL, 0);
    if (p)
        at_trace_flush();
    return NULL;
}

START_TEST(reused_thread_ids)
{
    mkdir_tmp();
    at_trace_options o = {.flush_interval_ms = 5};
    start("reuse.nettrace", &o);
    reuse_t = type_plain("Reuse");
    for (int k = 0; k < 4; k++) {
        pthread_t th;
        pthread_create(&th, NULL, reuse_thread, (void *)(intptr_t)(k & 1));
        pthread_join(th, NULL);
        struct timespec d = {0, 20000000}; /* the ended thread's buffer is recycled meanwhile */
        if (k & 1)
            nanosleep(&d, NULL);
    }
    at_trace_stop();
    problems = 0;
    nt_options opt = {.strict = true, .order = true, .problem = on_problem};
    char err[512];
    nt_reader *r = nt_open_ex(pathf("reuse.nettrace"), &opt, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_event e;
    int rc;
    uint32_t n = 0;
    while ((rc = nt_next(r, &e)) == 1)
        if (e.meta->id == reuse_t->index) {
            ck_assert_int_eq(e.capture_thread, 777777);
            uint32_t v;
            memcpy(&v, e.payload, 4);
            ck_assert_int_eq(e.seq, n + 1); /* one unbroken count over the four threads */
            ck_assert_int_eq(v, n % 5);
            n++;
        }
    ck_assert_msg(rc == 0, "%s", nt_error(r));
    ck_assert_msg(problems == 0, "%u problems, first: %s", problems, first_problem);
    ck_assert_int_eq(n, 20);
    ck_assert_int_eq(nt_get_counts(r)->events_lost, 0);
    nt_close(r);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("writer_roundtrip");
    TCase *tc = tcase_create("roundtrip");
    tcase_set_timeout(tc, 0);
    tcase_add_checked_fixture(tc, NULL, rm_tmp); /* a passing test leaves nothing in /tmp */
    tcase_add_test(tc, every_field_type);
    tcase_add_test(tc, process_info_and_header);
    tcase_add_test(tc, tsc_clock_durations);
    tcase_add_test(tc, monotonic_clock_header);
    tcase_add_test(tc, compression_cases);
    tcase_add_test(tc, random_headers_round_trip);
    tcase_add_test(tc, stacks_across_sps);
    tcase_add_test(tc, stack_references_round_trip);
    tcase_add_test(tc, rotate_files_each_complete);
    tcase_add_test(tc, circular_keeps_last_segments);
    tcase_add_test(tc, stress_default_cap);
    tcase_add_test(tc, ended_threads_hand_over_their_rings);
    tcase_add_test(tc, largest_records_round_trip);
    tcase_add_test(tc, tiny_cap_drops_agree);
    tcase_add_test(tc, sigkill_leaves_readable_file);
    tcase_add_test(tc, emergency_flush_from_signal_handler);
    tcase_add_test(tc, exit_from_other_thread_flushes_everything);
    tcase_add_test(tc, thread_exit_keeps_buffered_events);
    tcase_add_test(tc, signal_handler_writes);
    tcase_add_test(tc, reused_thread_ids);
    suite_add_tcase(s, tc);
    /* a case of its own, to run alone for longer (ACTTRACE_TEST_ORDER_SECONDS, CK_RUN_CASE=order) */
    TCase *ord = tcase_create("order");
    tcase_set_timeout(ord, 0);
    tcase_add_checked_fixture(ord, NULL, rm_tmp);
    tcase_add_test(ord, preempted_writers_never_late);
    suite_add_tcase(s, ord);
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
