/* bench_stack.c: cost of taking a stack (per frame, depth 10 and 30, each walker), of interning a
 * stack the flusher has already seen, and of the first capture on a new thread with libunwind's own
 * unw_backtrace (before) and with the shared rule table (after). Prints `metric\tmeasured\ttarget`
 * rows; never fails on time. Best of several rounds (the machine is shared). */
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "stack.h"
#include "trace.h"
#include "unwmem.h"

#define CHAIN __attribute__((noinline, optimize("no-omit-frame-pointer")))

static enum at_stack_mode g_mode;
static int g_depth;
static uint32_t g_got;
static int g_glibc;

CHAIN static void capture_loop(int iters)
{
    uintptr_t ips[64];
    for (int i = 0; i < iters; i++) {
        if (g_glibc)
            g_got = (uint32_t)backtrace((void **)ips, g_depth);
        else
            g_got = at_stack_capture_with(g_mode, ips, (uint32_t)g_depth, 0);
    }
}

/* a chain deep enough that every walker finds g_depth frames; frame pointers so the fp walk too */
CHAIN static void descend(int n, int iters)
{
    if (n > 0)
        descend(n - 1, iters);
    else
        capture_loop(iters);
    __asm__ volatile("" ::: "memory");
}

static double per_frame(enum at_stack_mode m, int depth)
{
    enum { ITERS = 20000, ROUNDS = 7 };
    g_mode = m;
    g_depth = depth;
    double best = 1e18;
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t = at_now_ns();
        descend(depth + 2, ITERS);
        double ns = (double)(at_now_ns() - t) / ITERS;
        if (ns < best)
            best = ns;
    }
    if (g_got != (uint32_t)depth)
        fprintf(stderr, "bench_stack: %s walked %u frames, not %d\n", at_stack_mode_name(m), g_got, depth);
    return best / depth;
}

/* ---- first capture on a new thread ---- */
static double first_ns;
static long first_faults;
static void *first_capture(void *a)
{
    (void)a;
    struct rusage r0, r1;
    getrusage(RUSAGE_THREAD, &r0);
    uint64_t t = at_now_ns();
    descend(10, 1);
    first_ns = (double)(at_now_ns() - t);
    getrusage(RUSAGE_THREAD, &r1);
    first_faults = r1.ru_minflt - r0.ru_minflt;
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static long median_faults;
static double new_thread_first(enum at_stack_mode m, int glibc)
{
    enum { N = 15 };
    double v[N], f[N];
    g_mode = m;
    g_depth = 12;
    g_glibc = glibc;
    for (int i = 0; i < N; i++) {
        pthread_t t;
        pthread_create(&t, NULL, first_capture, NULL);
        pthread_join(t, NULL);
        v[i] = first_ns;
        f[i] = (double)first_faults;
    }
    g_glibc = 0;
    qsort(v, N, sizeof v[0], cmp_d);
    qsort(f, N, sizeof f[0], cmp_d);
    median_faults = (long)f[N / 2];
    return v[N / 2] / 1000.0; /* median, us */
}

/* ---- the flusher's interning of a stack it has seen: flush time per event with the same 10-frame
 * stack minus without a stack ---- */
static double flush_per_event(at_event_type *t, const uintptr_t *ips, uint32_t n)
{
    enum { BATCH = 40000, ROUNDS = 9 };
    double best = 1e18;
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t ts = at_now_ns();
        for (int i = 0; i < BATCH; i++)
            at_event_write_ts(ts, t, NULL, NULL, NULL, 0, ips, n);
        while (at_now_ns() <= ts)
            ;
        uint64_t t0 = at_now_ns();
        at_trace_flush();
        double ns = (double)(at_now_ns() - t0) / BATCH;
        if (ns < best)
            best = ns;
    }
    return best;
}

/* ---- libunwind's memory check, per address: the pipe it makes itself (a read that finds it empty,
 * then a one-byte write), the descriptor-free probe that replaces it, and the other ways considered */
enum { PROBE_N = 200000 };
static double probe_ns(int how, const void *addr)
{
    static int pfd[2] = {-1, -1};
    if (how == 0 && pfd[0] < 0 && pipe2(pfd, O_CLOEXEC | O_NONBLOCK) != 0)
        return -1;
    double best = 1e18;
    for (int r = 0; r < 5; r++) {
        uint64_t t = at_now_ns();
        for (int i = 0; i < PROBE_N; i++) {
            char c;
            if (how == 0) {
                if (read(pfd[0], &c, 1) < 0) { /* empty, as libunwind keeps it */
                }
                if (syscall(SYS_write, pfd[1], addr, 1) != 1)
                    return -1;
            } else if (how == 1) {
                at_unwmem_probe(addr);
            } else if (how == 2) {
                struct iovec l = {&c, 1}, rm = {(void *)addr, 1};
                process_vm_readv(getpid(), &l, 1, &rm, 1, 0);
            } else {
                unsigned char v[2];
                mincore((void *)((uintptr_t)addr & ~(uintptr_t)4095), 4096, v);
            }
        }
        double ns = (double)(at_now_ns() - t) / PROBE_N;
        if (ns < best)
            best = ns;
    }
    return best;
}

/* ---- a walk through a frame without unwind info (libunwind's checked fallback) ---- */
__asm__(".text\n.p2align 4\nbench_nocfi:\n  pushq %rbp\n  movq %rsp, %rbp\n  movq %rdi, %rax\n"
        "  movq %rsi, %rdi\n  call *%rax\n  popq %rbp\n  ret\n");
extern void bench_nocfi(void (*fn)(int), int arg);
static int nocfi_got;
CHAIN static void nocfi_leaf(int iters)
{
    uintptr_t ips[32];
    for (int i = 0; i < iters; i++)
        nocfi_got = (int)at_stack_capture_with(AT_STACK_LIBUNWIND, ips, 32, 0);
}
static double nocfi_walk_us(void)
{
    enum { ITERS = 2000 };
    double best = 1e18;
    for (int r = 0; r < 5; r++) {
        uint64_t t = at_now_ns();
        bench_nocfi(nocfi_leaf, ITERS);
        double us = (double)(at_now_ns() - t) / ITERS / 1000.0;
        if (us < best)
            best = us;
    }
    return best;
}

int main(void)
{
    char err[256], path[256];
    /* before: libunwind's own fast path, never used in this process yet on these threads */
    uint64_t t_init = at_now_ns();
    at_stack_init(AT_STACK_LIBUNWIND, err, sizeof err);
    double init_us = (double)(at_now_ns() - t_init) / 1000.0;
    double before = new_thread_first(AT_STACK_LIBUNWIND, 0);
    long before_faults = median_faults;
    double glibc = new_thread_first(AT_STACK_LIBUNWIND, 1);
    if (at_stack_init(AT_STACK_SHARED, err, sizeof err) < 0)
        fprintf(stderr, "bench_stack: %s\n", err);
    descend(12, 1); /* the rules of this chain, learned once per process */
    double after = new_thread_first(AT_STACK_SHARED, 0);
    long after_faults = median_faults;

    printf("stack: libunwind unw_backtrace, depth 10 (ns/frame)\t%.1f\t<= 15\n", per_frame(AT_STACK_LIBUNWIND, 10));
    printf("stack: libunwind unw_backtrace, depth 30 (ns/frame)\t%.1f\t<= 15\n", per_frame(AT_STACK_LIBUNWIND, 30));
    printf("stack: shared rules (libunwind-learned), depth 10 (ns/frame)\t%.1f\t<= 15\n", per_frame(AT_STACK_SHARED, 10));
    printf("stack: shared rules (libunwind-learned), depth 30 (ns/frame)\t%.1f\t<= 15\n", per_frame(AT_STACK_SHARED, 30));
    printf("stack: frame pointers, depth 10 (ns/frame)\t%.1f\t<= 3\n", per_frame(AT_STACK_FP, 10));
    printf("stack: frame pointers, depth 30 (ns/frame)\t%.1f\t<= 3\n", per_frame(AT_STACK_FP, 30));
    printf("stack: first capture on a new thread, unw_backtrace (us, before)\t%.1f\t\n", before);
    printf("stack: first capture on a new thread, glibc backtrace (us)\t%.1f\t\n", glibc);
    printf("stack: first capture on a new thread, shared rules (us, after)\t%.1f\t~ steady state\n", after);
    printf("stack: page faults of that first capture, unw_backtrace / shared\t%ld / %ld\t\n", before_faults,
           after_faults);
    printf("stack: at_stack_init: dlopen, lazy binding, first walk (us, once per process)\t%.0f\t\n", init_us);
    int here = 0;
    printf("stack: memory check per address, libunwind's pipe read+write (ns, before)\t%.0f\t\n", probe_ns(0, &here));
    printf("stack: memory check per address, rt_sigprocmask probe, no descriptor (ns, after)\t%.0f\t\n", probe_ns(1, &here));
    printf("stack: memory check per address, process_vm_readv on our pid (ns, not taken)\t%.0f\t\n", probe_ns(2, &here));
    printf("stack: memory check per address, mincore alone (ns, cannot tell PROT_NONE)\t%.0f\t\n", probe_ns(3, &here));
    printf("stack: libunwind walk through a frame without unwind info (us/walk, %d frames, %d slots)\t%.2f\t\n",
           nocfi_got, at_unwmem_slots(), nocfi_walk_us());

    snprintf(path, sizeof path, "/tmp/acttrace-bench-stack-%d.nettrace", (int)getpid());
    at_trace_options o = {.path = path, .flush_interval_ms = 100000};
    if (at_trace_start(&o, err, sizeof err) < 0) {
        fprintf(stderr, "bench_stack: %s\n", err);
        return 1;
    }
    at_event_desc d = {.provider = "Bench", .name = "S"};
    at_event_type *t = at_event_type_register(&d);
    uintptr_t ips[10];
    uint32_t n = at_stack_capture(ips, 10, 0);
    flush_per_event(t, ips, n); /* interned once, symbols written once */
    double with = flush_per_event(t, ips, n), without = flush_per_event(t, NULL, 0);
    printf("stack: interned-stack hit in the flusher, 10 frames (ns/event)\t%.1f\t<= 30\n", with - without);
    at_trace_stop();
    unlink(path);
    return 0;
}
