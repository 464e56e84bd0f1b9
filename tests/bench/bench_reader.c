/* bench_reader.c: reader throughput (MB/s, events/s) and peak memory over the largest sample, read
 * through the streaming file path exactly as `acttrace` does. Prints "metric\tmeasured\ttarget" rows;
 * never fails on a time. */
#include "ntreader.h"
#include "trace.h"

#include <stdio.h>
#include <uchar.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SAMPLE AT_SOURCE_DIR "/tests/data/nettrace-samples/eventpipe-dotnetcore3.0-win-x64-objver4.nettrace"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long max_rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Reads path once; returns events, or -1 on error. */
static long long read_once(const char *path, bool strict)
{
    char err[512];
    nt_options opt = {.strict = strict};
    nt_reader *r = nt_open_ex(path, &opt, err, sizeof err);
    if (!r) {
        fprintf(stderr, "bench_reader: %s\n", err);
        return -1;
    }
    nt_event ev;
    int rc;
    long long n = 0;
    volatile uint64_t sink = 0;
    while ((rc = nt_next(r, &ev)) == 1) {
        n++;
        sink += ev.payload_len + ev.nframes;
    }
    if (rc < 0) {
        fprintf(stderr, "bench_reader: %s\n", nt_error(r));
        n = -1;
    }
    if (strict && nt_problem_count(r))
        fprintf(stderr, "bench_reader: %s: %llu structural problems\n", path, (unsigned long long)nt_problem_count(r));
    nt_close(r);
    return n;
}


/* ---- a synthetic ~1 GB trace, written block by block from the format notes (no writer needed) ---- */

typedef struct obuf {
    uint8_t *p;
    size_t len, cap;
    FILE *f;
    uint64_t file_off; /* bytes already written to f */
} obuf;

static void o_put(obuf *o, const void *d, size_t n)
{
    if (o->len + n > o->cap) {
        o->cap = (o->len + n) * 2;
        o->p = realloc(o->p, o->cap);
        if (!o->p) abort();
    }
    memcpy(o->p + o->len, d, n);
    o->len += n;
}
static void o_u8(obuf *o, uint8_t v) { o_put(o, &v, 1); }
static void o_u16(obuf *o, uint16_t v) { o_put(o, &v, 2); }
static void o_u32(obuf *o, uint32_t v) { o_put(o, &v, 4); }
static void o_u64(obuf *o, uint64_t v) { o_put(o, &v, 8); }
static void o_var(obuf *o, uint64_t v)
{
    do {
        uint8_t c = v & 0x7F;
        v >>= 7;
        if (v) c |= 0x80;
        o_u8(o, c);
    } while (v);
}
static void o_flush(obuf *o)
{
    if (fwrite(o->p, 1, o->len, o->f) != o->len) abort();
    o->file_off += o->len;
    o->len = 0;
}
static void o_obj(obuf *o, const char *name, int ver)
{
    o_u8(o, 5); o_u8(o, 5); o_u8(o, 1);
    o_u32(o, (uint32_t)ver); o_u32(o, (uint32_t)ver);
    o_u32(o, (uint32_t)strlen(name));
    o_put(o, name, strlen(name));
    o_u8(o, 6);
}
/* writes block framing around body[0..n) */
static void o_block(obuf *o, const char *name, const obuf *body)
{
    o_obj(o, name, 2);
    o_u32(o, (uint32_t)body->len);
    while ((o->file_off + o->len) & 3) o_u8(o, 0);
    o_put(o, body->p, body->len);
    o_u8(o, 6);
    o_flush(o);
}

static bool generate(const char *path, uint64_t target_bytes)
{
    obuf o = {0};
    o.f = fopen(path, "wb");
    if (!o.f) return false;
    o_put(&o, "Nettrace", 8);
    o_u32(&o, 20);
    o_put(&o, "!FastSerialization.1", 20);
    o_obj(&o, "Trace", 4);
    uint16_t st[8] = {2026, 11, 0, 22, 12, 0, 0, 0};
    o_put(&o, st, 16);
    o_u64(&o, 1000); o_u64(&o, 1000000000); o_u32(&o, 8); o_u32(&o, 1234); o_u32(&o, 2); o_u32(&o, 0);
    o_u8(&o, 6);
    /* one metadata record: Bench/Tick(uint64 N) */
    obuf b = {0}, m = {0};
    o_u32(&m, 1);
    for (const char *c = "Bench"; ; c++) { o_u16(&m, (uint16_t)*c); if (!*c) break; }
    o_u32(&m, 1);
    for (const char *c = "Tick"; ; c++) { o_u16(&m, (uint16_t)*c); if (!*c) break; }
    o_u64(&m, 0); o_u32(&m, 0); o_u32(&m, 4); o_u32(&m, 1); o_u32(&m, 12);
    for (const char *c = "N"; ; c++) { o_u16(&m, (uint16_t)*c); if (!*c) break; }
    o_u16(&b, 20); o_u16(&b, 1); o_u64(&b, 1000); o_u64(&b, 1000);
    o_u8(&b, 0x80 | 0x40); o_var(&b, 1000); o_var(&b, m.len); o_put(&b, m.p, m.len);
    o_block(&o, "MetadataBlock", &b);

    enum { THREADS = 4, RUN = 64, STACKS = 16, DEPTH = 12 };
    uint32_t seq[THREADS] = {0};
    uint64_t ts = 2000, n = 0, since_sp = 0;
    bool stacks_defined = false;
    while (o.file_off < target_bytes) {
        if (!stacks_defined) {
            b.len = 0;
            o_u32(&b, 1); o_u32(&b, STACKS);
            for (uint32_t s = 0; s < STACKS; s++) {
                o_u32(&b, DEPTH * 8);
                for (uint64_t k = 0; k < DEPTH; k++) o_u64(&b, 0x400000 + s * 0x1000 + k * 0x10);
            }
            o_block(&o, "StackBlock", &b);
            stacks_defined = true;
        }
        /* one ~100 KB event block: runs of RUN events per thread, IsSorted on each run's first blob */
        b.len = 0;
        o_u16(&b, 20); o_u16(&b, 1);
        size_t mm = b.len;
        o_u64(&b, 0); o_u64(&b, 0);
        uint64_t bmin = ts, lts = 0;
        uint32_t lmeta = 0, lseq = 0, lstack = 0, llen = 0;
        uint64_t lcap = 0;
        while (b.len < 100 * 1024 - 2048) {
            int t = (int)((n / RUN) % THREADS);
            for (int i = 0; i < RUN; i++, n++) {
                uint32_t sq = ++seq[t];
                uint64_t cap = 1000 + (uint64_t)t;
                uint32_t stack = 1 + (uint32_t)(n % STACKS);
                uint8_t fl = 0;
                if (lmeta != 1) fl |= 0x01;
                if (lseq + 1 != sq || lcap != cap) fl |= 0x02 | 0x04;
                if (stack != lstack) fl |= 0x08;
                if (i == 0) fl |= 0x40;
                if (llen != 8) fl |= 0x80;
                o_u8(&b, fl);
                if (fl & 0x01) o_var(&b, 1);
                if (fl & 0x02) { o_var(&b, (uint32_t)(sq - lseq - 1)); o_var(&b, cap); o_var(&b, 0); }
                if (fl & 0x04) o_var(&b, cap);
                if (fl & 0x08) o_var(&b, stack);
                o_var(&b, ts - lts);
                if (fl & 0x80) o_var(&b, 8);
                o_u64(&b, n);
                lmeta = 1; lseq = sq; lcap = cap; lstack = stack; llen = 8; lts = ts;
                ts += 7;
            }
        }
        memcpy(b.p + mm, &bmin, 8);
        memcpy(b.p + mm + 8, &lts, 8);
        size_t before = o.file_off;
        o_block(&o, "EventBlock", &b);
        since_sp += o.file_off - before;
        if (since_sp >= 10u << 20) { /* sequence point every ~10 MB, stacks restart after it */
            b.len = 0;
            o_u64(&b, ts++);
            o_u32(&b, THREADS);
            for (int t = 0; t < THREADS; t++) { o_u64(&b, 1000 + (uint64_t)t); o_u32(&b, seq[t]); }
            o_block(&o, "SPBlock", &b);
            stacks_defined = false;
            since_sp = 0;
        }
    }
    o_u8(&o, 1);
    o_flush(&o);
    bool ok = fclose(o.f) == 0;
    free(o.p); free(b.p); free(m.p);
    return ok;
}

static void bench_file(const char *label, const char *path, int reps)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "bench_reader: cannot stat %s\n", path);
        return;
    }
    read_once(path, false); /* warm the page cache */
    for (int strict = 0; strict <= 1; strict++) {
        double best = 0;
        long long events = 0;
        for (int i = 0; i < reps; i++) {
            double t0 = now_s();
            events = read_once(path, strict);
            double t = now_s() - t0;
            if (events < 0) return;
            double mbs = (double)st.st_size / t / 1e6;
            if (mbs > best) best = mbs;
        }
        printf("reader %s%s: MB/s (best of %d)\t%.0f\t%s\n", label, strict ? ", strict (verify)" : "", reps, best,
               strict ? "" : ">= 300");
        if (!strict)
            printf("reader %s: events/s\t%.1f M\t\n", label, best * 1e6 / (double)st.st_size * (double)events / 1e6);
    }
}

/* A trace of at least `bytes` written by our own writer (runtime/trace.h), the way the shim writes:
 * events with activity ids (eight rotating), payloads of varying integers and a short string, and a
 * stack on one event in sixteen. Returns the events written, or -1. */
static long long writer_generate(const char *path, unsigned long long bytes)
{
    at_trace_options o = {.path = path, .command_line = "bench_reader"};
    char err[256];
    if (at_trace_start(&o, err, sizeof err) != 0) {
        fprintf(stderr, "bench_reader: %s\n", err);
        return -1;
    }
    static const at_field f[] = {{"Id", NT_TYPE_UINT64}, {"Size", NT_TYPE_UINT32},
                                 {"Elapsed", NT_TYPE_UINT64}, {"Url", NT_TYPE_STRING}};
    at_event_desc d = {.provider = "BenchReader", .name = "Request", .level = NT_LEVEL_INFO,
                       .nfields = 4, .fields = f};
    at_event_type *t = at_event_type_register(&d);
    if (!t)
        return -1;
    at_guid acts[8];
    for (int i = 0; i < 8; i++)
        for (int k = 0; k < 16; k++)
            acts[i].b[k] = (uint8_t)(i * 31 + k * 7 + 1);
    uintptr_t ips[8] = {0x401000, 0x401100, 0x401200, 0x401300, 0x7f0000001000, 0x7f0000002000,
                        0x7f0000003000, 0x7f0000004000};
    long long n = 0;
    struct stat st = {0};
    /* at most 64 rounds (each ~60 MB): a writer that wrote elsewhere or dropped its events never
     * loops until the disk is full */
    for (int round = 0;; round++) {
        if (round == 64) {
            at_trace_stop();
            fprintf(stderr, "bench_reader: %s is %lld bytes after %lld events\n", path,
                    (long long)st.st_size, n);
            return -1;
        }
        for (int i = 0; i < 1000000; i++, n++) {
            uint8_t pl[64], *p = pl;
            uint64_t id = (uint64_t)n, el = (uint64_t)n * 977u % 100000u;
            uint32_t sz = (uint32_t)(n % 65536);
            memcpy(p, &id, 8), p += 8;
            memcpy(p, &sz, 4), p += 4;
            memcpy(p, &el, 8), p += 8;
            static const char16_t url[] = u"/api/items/42";
            memcpy(p, url, sizeof url), p += sizeof url;
            ips[0] = 0x401000 + (uintptr_t)(n % 64) * 16;
            at_event_write(t, &acts[n % 8], NULL, pl, (uint32_t)(p - pl), n % 16 == 0 ? ips : NULL,
                           n % 16 == 0 ? 8 : 0);
        }
        at_trace_flush();
        if (stat(path, &st) != 0 || (unsigned long long)st.st_size >= bytes)
            break;
    }
    at_trace_stop();
    return stat(path, &st) == 0 && (unsigned long long)st.st_size >= bytes ? n : -1;
}

int main(int argc, char **argv)
{
    long rss0 = max_rss_kb();
    const char *path = argc > 1 ? argv[1] : SAMPLE;
    bench_file("largest sample (4.8 MB)", path, 15);
    printf("reader: max RSS (whole benchmark)\t%ld KiB\tflat\n", max_rss_kb());
    printf("reader: max RSS growth while reading\t%ld KiB\t\n", max_rss_kb() - rss0);
    long rss_before_big = max_rss_kb();
    char big[] = "/tmp/at_bench_reader_XXXXXX";
    int fd = mkstemp(big);
    if (fd >= 0) {
        close(fd);
        if (generate(big, 1000ull << 20)) {
            bench_file("synthetic 1 GB trace", big, 2);
            printf("reader: max RSS growth over the 1 GB trace\t%ld KiB\tflat\n", max_rss_kb() - rss_before_big);
        }
        unlink(big);
    }
    /* the writer creates its file itself (it never writes into one that exists): a name in a
     * folder of our own */
    char wdir[] = "/tmp/at_bench_reader_w_XXXXXX";
    if (mkdtemp(wdir)) {
        char wg[sizeof wdir + 16];
        snprintf(wg, sizeof wg, "%s/w.nettrace", wdir);
        long long n = writer_generate(wg, 1000ull << 20);
        if (n > 0) {
            bench_file("writer-generated 1 GB trace", wg, 2);
            long long got = read_once(wg, true); /* the writer's own events, plus its ProcessInfo */
            printf("reader writer-generated 1 GB trace: events read / written\t%lld / %lld\t"
                   "all\n", got - 1, n);
        }
        else
            printf("reader: writer-generated 1 GB trace\tnot run (the writer failed)\t>= 300 MB/s\n");
        unlink(wg);
        rmdir(wdir);
    }
    return 0;
}
