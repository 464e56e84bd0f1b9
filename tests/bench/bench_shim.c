/* bench_shim: what the preload core adds to a program: pthread_create+join of an empty thread (and
 * the part of it the alternate signal stack takes), read(2) on an untagged fd, and the request rate of a worker-queue and a thread-per-connection
 * server fixture under a loopback load (steady state), with what the same servers pay once in their
 * first requests, beside what a page's first touch costs on the machine. tests/fixtures/bench_ops runs under the shim and times each
 * operation through the shim's symbol and through libc's own, interleaved in one process (same run,
 * same machine state); the row is the difference. read() is measured in several processes (where a
 * process's memory landed moves it by +-10 ns) and beside a one-line forwarder library measured the
 * same way: what any LD_PRELOAD interposer costs on this machine. Prints rows
 * "metric<TAB>measured<TAB>target"; never fails on a time. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../fixtures/fx_median.h"
#include "at_testlib.h"

static bool run_op_env(const char *op, const char *n, const char *preload, const char *extra,
                       const char *dir, double *wrap, double *real, double *added)
{
    char *fx = at_fixture_path("bench_ops");
    const char *argv[] = {fx, op, n, NULL};
    char pre[1024];
    snprintf(pre, sizeof pre, "LD_PRELOAD=%s", preload ? preload : "");
    const char *env[4] = {"ACTTRACE_OUTPUT=bench-%p.nettrace"};
    int k = 1;
    if (extra)
        env[k++] = extra;
    if (preload)
        env[k++] = pre;
    env[k] = NULL;
    at_run_opts o = {.argv = argv, .env = env, .cwd = dir};
    at_run_result r;
    bool ok = false;
    if (at_run(&o, &r) == 0 && r.exited && r.status == 0)
        ok = sscanf(r.out, "%*s %lf %lf %lf", wrap, real, added) == 3;
    at_run_result_free(&r);
    free(fx);
    return ok;
}

static bool run_op(const char *op, const char *n, const char *preload, const char *dir, double *wrap,
                   double *real, double *added)
{
    return run_op_env(op, n, preload, NULL, dir, wrap, real, added);
}

static void measure_thread(const char *dir)
{
    double w, r, a;
    if (!run_op("thread", "20000", NULL, dir, &w, &r, &a)) {
        printf("shim: pthread_create+join added per thread\tfailed to run\t<= 3 us\n");
        return;
    }
    printf("shim: pthread_create+join added per thread\t%.2f us (median of pairs in one run: %.1f vs "
           "%.1f us)\t<= 3 us\n", a / 1000, w / 1000, r / 1000);
}

/* What the per-thread alternate signal stack costs (altstack.c: one sigaltstack call as a thread
 * starts, one as it ends, a slot taken from and given back to a pool): what the shim adds to
 * pthread_create+join with it and with ACTTRACE_SIGNALS=0 (no fatal-signal handlers, no alternate
 * stacks), each from its own process's pairs against libc, processes alternating; the row is the
 * difference of the medians. Beside it, two sigaltstack calls timed here: a system call's price on
 * this machine. */
#define ALT_PROCS 7
static double now_us(void);
static double sigaltstack_pair_us(void)
{
    static char st[64 << 10];
    stack_t on = {.ss_sp = st, .ss_size = sizeof st}, off = {.ss_flags = SS_DISABLE};
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        double t0 = now_us();
        for (int i = 0; i < 2000; i++) {
            syscall(SYS_sigaltstack, &on, NULL);
            syscall(SYS_sigaltstack, &off, NULL);
        }
        double us = (now_us() - t0) / 2000;
        best = us < best ? us : best;
    }
    return best;
}

static void measure_altstack(const char *dir)
{
    double with[ALT_PROCS], without[ALT_PROCS];
    int n = 0;
    for (int i = 0; i < ALT_PROCS; i++) {
        double w, r, a, w0, r0, a0;
        bool ok;
        if (i % 2 == 0)
            ok = run_op_env("thread", "4000", NULL, "ACTTRACE_SIGNALS=1", dir, &w, &r, &a) &&
                 run_op_env("thread", "4000", NULL, "ACTTRACE_SIGNALS=0", dir, &w0, &r0, &a0);
        else
            ok = run_op_env("thread", "4000", NULL, "ACTTRACE_SIGNALS=0", dir, &w0, &r0, &a0) &&
                 run_op_env("thread", "4000", NULL, "ACTTRACE_SIGNALS=1", dir, &w, &r, &a);
        if (ok) {
            with[n] = a;
            without[n++] = a0;
        }
    }
    if (n < ALT_PROCS / 2 + 1) {
        printf("shim: alternate signal stack, per thread created and joined\tfailed to run\t<= 3 us\n");
        return;
    }
    double mw = fx_median(with, n), mo = fx_median(without, n);
    printf("shim: alternate signal stack, per thread created and joined\t%.0f ns (added to "
           "create+join: %.2f us with, %.2f us with ACTTRACE_SIGNALS=0; median of %d processes each; "
           "two sigaltstack calls here: %.2f us)\t<= 3 us\n", mw - mo, mw / 1000, mo / 1000, n,
           sigaltstack_pair_us());
}

/* read(): the median over READ_PROCS processes of each one's median of pairs, for the shim and for
 * the forwarder (tests/fixtures/libfwdread.c), processes alternating. */
#define READ_PROCS 9
static void measure_read(const char *dir)
{
    char *fwd = at_fixture_path("libfwdread.so");
    double shim[READ_PROCS], floor_[READ_PROCS], call[READ_PROCS];
    int n = 0;
    for (int i = 0; i < READ_PROCS; i++) {
        double w, r, a, fw, fr, fa;
        if (run_op("read", "400000", NULL, dir, &w, &r, &a) &&
            run_op("read", "400000", fwd, dir, &fw, &fr, &fa)) {
            shim[n] = a;
            floor_[n] = fa;
            call[n++] = r;
        }
    }
    free(fwd);
    if (n < READ_PROCS / 2 + 1) {
        printf("shim: read() on an untagged fd added\tfailed to run\t<= 5 ns\n");
        return;
    }
    double m = fx_median(shim, n), lo = shim[0], hi = shim[n - 1];
    printf("shim: read() on an untagged fd added\t%.1f ns (median of %d processes, %.1f..%.1f; a "
           "one-line forwarder library: %.1f ns; the read itself %.0f ns)\t<= 5 ns\n", m, n, lo, hi,
           fx_median(floor_, n), fx_median(call, n));
}

/* A call the shim times as a wait (shim/waits.c), pthread_mutex_lock of a mutex no other thread
 * wants: what the wrapper adds in no activity (one test of the current activity) and inside one (the
 * wait's start announced, two clock reads: a call that does not block records nothing). The
 * median over READ_PROCS processes of each one's median of pairs. */
static void measure_waits(const char *dir)
{
    double out[READ_PROCS], in[READ_PROCS], call[READ_PROCS];
    int n = 0;
    for (int i = 0; i < READ_PROCS; i++) {
        double w, r, a, iw, ir, ia;
        if (run_op("lock", "400000", NULL, dir, &w, &r, &a) &&
            run_op("lockact", "400000", NULL, dir, &iw, &ir, &ia)) {
            out[n] = a;
            in[n] = ia;
            call[n++] = r;
        }
    }
    if (n < READ_PROCS / 2 + 1) {
        printf("waits: a blocking call's wrapper added, in no activity\tfailed to run\t<= 2 ns\n");
        return;
    }
    printf("waits: a blocking call's wrapper added, in no activity (pthread_mutex_lock uncontended)"
           "\t%.1f ns (median of %d processes; the lock and unlock themselves %.1f ns)\t<= 2 ns\n",
           fx_median(out, n), n, fx_median(call, n));
    printf("waits: a blocking call's wrapper added, in an activity, the call not blocking (the same "
           "lock)\t%.1f ns (median of %d processes)\t<= 20 ns\n", fx_median(in, n), n);
}

/* Requests per second of tests/fixtures/queue_server under a loopback load, traced or not (separate
 * processes: a server cannot be timed against itself in one). The steady-state rows time the last
 * 5000 of 15000 requests: one-time work (the first flushes, which symbolise the first stacks, and
 * the first touch of every buffer page the shim cycles through, 15 us a page on this VM) stays out.
 * With 1000 warm-up requests the shim still added ~400 page faults to the timed window (6 ms of
 * CPU); after 10000 it adds none. The one-time rows time a server's first 5000 requests instead.
 * cpu: CPU seconds per timed request, all threads, and faults: minor page faults per timed request,
 * both from the fixture's own getrusage. */
typedef struct server_run {
    double rps, cpu, faults;
} server_run;

static bool server_run_once(const char *workers, const char *requests, const char *warmup,
                            bool traced, const char *dir, server_run *out)
{
    char *fx = at_fixture_path("queue_server");
    const char *argv[] = {fx, workers, requests, "4", warmup, NULL};
    const char *env[] = {"ACTTRACE_OUTPUT=bench-%p.nettrace", NULL};
    at_run_opts o = {.argv = argv, .env = env, .no_preload = !traced, .cwd = dir};
    at_run_result r;
    double secs = 0, c = 0;
    long faults = 0;
    int n = 0;
    bool ok = at_run(&o, &r) == 0 && r.exited && r.status == 0 &&
              sscanf(r.out, "served %d %lf %lf %ld", &n, &secs, &c, &faults) == 4 && n > 0 && secs > 0;
    at_run_result_free(&r);
    free(fx);
    if (ok)
        *out = (server_run){.rps = n / secs, .cpu = c / n, .faults = (double)faults / n};
    return ok;
}

/* Rounds of one untraced and one traced run back to back (which goes first alternates), each round
 * giving the traced run's loss against its own neighbour; the row is the median round, with the
 * quartiles, and the median round's extra CPU and page faults per request. A best-of-N per side was
 * tried first: one lucky untraced run moved it by 10 points (15 rounds of the worker-queue server:
 * median loss 0-0.6%, best against best 14-16%). */
#define SERVER_ROUNDS 21
static void measure_server(const char *workers, const char *metric, const char *dir)
{
    double loss[SERVER_ROUNDS], more_cpu[SERVER_ROUNDS], more_faults[SERVER_ROUNDS];
    double base_sum = 0, traced_sum = 0;
    int n = 0;
    for (int i = 0; i < SERVER_ROUNDS; i++) {
        server_run b, t;
        bool ok;
        if (i % 2 == 0)
            ok = server_run_once(workers, "15000", "10000", false, dir, &b) &&
                 server_run_once(workers, "15000", "10000", true, dir, &t);
        else
            ok = server_run_once(workers, "15000", "10000", true, dir, &t) &&
                 server_run_once(workers, "15000", "10000", false, dir, &b);
        if (!ok || b.cpu <= 0)
            continue;
        loss[n] = 100.0 * (b.rps - t.rps) / b.rps;
        more_cpu[n] = 100.0 * (t.cpu - b.cpu) / b.cpu;
        more_faults[n++] = t.faults - b.faults;
        base_sum += b.rps;
        traced_sum += t.rps;
    }
    if (n < SERVER_ROUNDS / 2 + 1) {
        printf("%s\tfailed to run\t<= 5%%\n", metric);
        return;
    }
    double mc = fx_median(more_cpu, n), mf = fx_median(more_faults, n);
    qsort(loss, (size_t)n, sizeof loss[0], fx_cmp_double);
    printf("%s\t%.1f%% (median of %d rounds; quartiles %.1f%%..%.1f%%; mean %.0f vs %.0f req/s; CPU "
           "per request %+.1f%%; page faults per 1000 requests %+.1f)\t<= 5%%\n", metric, loss[n / 2], n,
           loss[n / 4], loss[(3 * n) / 4], traced_sum / n, base_sum / n, mc, 1000 * mf);
}

/* A server's first 5000 requests, one-time work included: the CPU the shim adds (median of pairs),
 * and its page faults. Reported, no target: the target is about a server under load. */
#define STARTUP_ROUNDS 9
static void measure_startup(const char *workers, const char *metric, const char *dir)
{
    double more_cpu[STARTUP_ROUNDS], more_faults[STARTUP_ROUNDS];
    int n = 0;
    for (int i = 0; i < STARTUP_ROUNDS; i++) {
        server_run b, t;
        if (!server_run_once(workers, "5000", "0", i % 2 == 0, dir, i % 2 == 0 ? &t : &b) ||
            !server_run_once(workers, "5000", "0", i % 2 != 0, dir, i % 2 == 0 ? &b : &t) || b.cpu <= 0)
            continue;
        more_cpu[n] = 5000 * (t.cpu - b.cpu) * 1000;
        more_faults[n++] = 5000 * (t.faults - b.faults);
    }
    if (n < STARTUP_ROUNDS / 2 + 1) {
        printf("%s\tfailed to run\t-\n", metric);
        return;
    }
    printf("%s\t%+.1f ms CPU, %+.0f page faults (median of %d pairs)\t-\n", metric,
           fx_median(more_cpu, n), fx_median(more_faults, n), n);
}

/* What a page touched for the first time costs on this machine (one-time work, such as the first
 * pass of the shim's buffers, is mostly that): 1024 fresh anonymous pages written one store each,
 * then written again. On bare metal the first touch is a fraction of a microsecond; under shadow
 * paging it was 15 us here. */
static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void measure_first_touch(void)
{
    enum { PAGES = 1024 };
    size_t len = (size_t)PAGES * 4096;
    volatile char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        printf("machine: first touch of a fresh page\tfailed to run\t-\n");
        return;
    }
    double t0 = now_us();
    for (size_t i = 0; i < len; i += 4096)
        m[i] = 1;
    double t1 = now_us();
    for (size_t i = 0; i < len; i += 4096)
        m[i] = 2;
    double t2 = now_us();
    munmap((void *)m, len);
    printf("machine: first touch of a fresh page (us; what one-time work costs here)\t%.2f (touched "
           "again: %.3f)\t-\n", (t1 - t0) / PAGES, (t2 - t1) / PAGES);
}

int main(void)
{
    char *dir = at_tmpdir("bench");
    if (!dir)
        return 1;
    measure_first_touch();
    measure_thread(dir);
    measure_altstack(dir);
    measure_read(dir);
    measure_waits(dir);
    measure_server("3", "shim: worker-queue server, fewer requests/s", dir);
    measure_server("0", "shim: thread-per-connection server, fewer requests/s", dir);
    measure_startup("3", "shim: worker-queue server's first 5000 requests, one-time work included", dir);
    measure_startup("0", "shim: thread-per-connection server's first 5000 requests, one-time work included", dir);
    at_rmtree(dir);
    free(dir);
    return 0;
}
