/* bench_writer.c: cost of the writer's hot path and of the flusher. Prints `metric\tmeasured\ttarget`
 * rows; never fails on time. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "trace.h"

static at_event_type *t0, *t2;

static double now_s(void) { return (double)at_now_ns() / 1e9; }

/* ns per event of `kind` into the buffer; the timestamp is precomputed (clock excluded) and the
 * flush between batches is not timed. A batch stays below the backlog that wakes the flusher early
 * (64 chunks), so this is the writer alone. Best of several batches (the machine is shared). */
static double hot_path(int kind)
{
    enum { BATCH = 50000, ROUNDS = 40 };
    uintptr_t ips[16];
    for (int i = 0; i < 16; i++)
        ips[i] = 0x400000 + (uintptr_t)i * 0x40;
    double best = 1e9;
    uint64_t ts = at_ticks();
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t = at_now_ns();
        for (uint32_t i = 0; i < BATCH; i++) {
            ts++;
            if (kind == 0) {
                at_event_write_ts(ts, t0, NULL, NULL, NULL, 0, NULL, 0);
            } else if (kind == 1) {
                uint8_t buf[16];
                at_payload pl;
                at_payload_init(&pl, buf, sizeof buf);
                at_payload_u32(&pl, i);
                at_payload_u64(&pl, ts);
                at_event_write_ts(ts, t2, NULL, NULL, buf, (uint32_t)(pl.p - buf), NULL, 0);
            } else {
                at_event_write_ts(ts, t0, NULL, NULL, NULL, 0, ips, 16);
            }
        }
        double ns = (double)(at_now_ns() - t) / BATCH;
        if (ns < best)
            best = ns;
        at_trace_flush();
    }
    return best;
}

static _Atomic uint64_t go;
static uint64_t per_thread;
static void *producer(void *a)
{
    (void)a;
    while (!go)
        ;
    for (uint64_t i = 0; i < per_thread; i++)
        at_event_write(t0, NULL, NULL, NULL, 0, NULL, 0);
    return NULL;
}

/* Events per second from the first event to the file being complete, n threads. */
static void throughput(int nthreads, const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tp%d.nettrace", dir, nthreads);
    at_trace_options o = {.path = path, .command_line = "bench"};
    char err[256];
    if (at_trace_start(&o, err, sizeof err)) {
        fprintf(stderr, "bench_writer: %s\n", err);
        exit(1);
    }
    per_thread = 20000000 / (uint64_t)nthreads;
    pthread_t th[8];
    go = 0;
    for (int i = 0; i < nthreads; i++)
        pthread_create(&th[i], NULL, producer, NULL);
    double t = now_s();
    go = 1;
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    at_trace_stop();
    double dt = now_s() - t;
    at_trace_stats s;
    at_trace_get_stats(&s);
    printf("throughput %d writer thread%s (M events/s; %llu of %llu dropped)\t%.1f\t>= 10\n",
           nthreads, nthreads > 1 ? "s" : "", (unsigned long long)s.events_dropped,
           (unsigned long long)(per_thread * (uint64_t)nthreads), (double)s.events_written / dt / 1e6);
    unlink(path);
}

int main(void)
{
    char dir[] = "/tmp/bench_writer.XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char path[512];
    snprintf(path, sizeof path, "%s/hot.nettrace", dir);
    at_trace_options o = {.path = path, .command_line = "bench", .flush_interval_ms = 100000};
    char err[256];
    if (at_trace_start(&o, err, sizeof err)) {
        fprintf(stderr, "bench_writer: %s\n", err);
        return 1;
    }
    at_event_desc d0 = {.provider = "Bench", .name = "Plain"};
    at_field f[] = {{"A", NT_TYPE_UINT32}, {"B", NT_TYPE_UINT64}};
    at_event_desc d2 = {.provider = "Bench", .name = "TwoFields", .nfields = 2, .fields = f};
    t0 = at_event_type_register(&d0);
    t2 = at_event_type_register(&d2);
    hot_path(0); /* warm up: buffers faulted in */
    printf("event write, no payload (ns, clock excluded)\t%.1f\t<= 25\n", hot_path(0));
    printf("event write, 2-field payload incl. building (ns)\t%.1f\t-\n", hot_path(1));
    printf("event write, 16-frame stack (ns)\t%.1f\t-\n", hot_path(2));
    printf("clock read clock_gettime(CLOCK_MONOTONIC) (ns)\t%.1f\t-\n", ({
               uint64_t t = at_now_ns(), x = 0;
               for (int i = 0; i < 1000000; i++)
                   x += at_now_ns();
               (void)x;
               (double)(at_now_ns() - t) / 1e6;
           }));
    printf("clock read, the event clock (%s) (ns)\t%.1f\t-\n", at_clock_tsc ? "rdtsc" : "monotonic", ({
               uint64_t t = at_now_ns(), x = 0;
               for (int i = 0; i < 1000000; i++)
                   x += at_ticks();
               (void)x;
               (double)(at_now_ns() - t) / 1e6;
           }));
    /* steady state on disk: real timestamps, one thread, flushed in big batches */
    at_trace_flush();
    at_trace_stats s1, s2;
    at_trace_get_stats(&s1);
    for (int r = 0; r < 10; r++) {
        for (int i = 0; i < 100000; i++)
            at_event_write(t0, NULL, NULL, NULL, 0, NULL, 0);
        at_trace_flush();
    }
    at_trace_get_stats(&s2);
    printf("bytes on disk per payload-less event (steady state)\t%.2f\t<= 8\n",
           (double)(s2.bytes_written - s1.bytes_written) / (double)(s2.events_written - s1.events_written));
    at_trace_stop();
    unlink(path);
    throughput(1, dir);
    throughput(2, dir);
    rmdir(dir);
    return 0;
}
