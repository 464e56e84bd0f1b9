/* clock.c: the event clock and its calibration.
 *
 * nettrace timestamps are "QPC" ticks whose frequency the Trace object states. When the TSC can be
 * trusted (invariant, and the kernel's own clocksource is TSC-based, so the hypervisor or kernel keeps
 * it in step across CPUs) events carry the raw TSC: rdtsc costs about 12 ns on the KVM guests we run
 * on against 28 ns for clock_gettime, and an event Start+Stop reads the clock twice. The frequency is
 * measured against CLOCK_MONOTONIC from a base pair taken when the TSC is first chosen; every flush
 * refines it over the whole run so far (two clock reads of error over seconds: parts per billion)
 * and the writer rewrites the header's frequency field, so a file's durations are as exact as
 * CLOCK_MONOTONIC's. Otherwise, or when asked, the ticks are CLOCK_MONOTONIC ns (frequency 1e9). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "clock.h"


static struct {
    bool based;
    uint64_t tsc0, ns0;     /* the base pair */
    _Atomic uint64_t freq;  /* TSC ticks per second, best estimate so far */
} C;

static inline uint64_t tsc_ordered(void)
{
    uint32_t lo, hi;
    __asm__ volatile("lfence; rdtsc" : "=a"(lo), "=d"(hi)::"memory");
    return ((uint64_t)hi << 32) | lo;
}

/* A TSC value and the CLOCK_MONOTONIC time at (almost) the same instant: the tightest of a few
 * tries, the TSC taken as the middle of the two reads around clock_gettime. Async-signal-safe. */
static void clock_pair(uint64_t *tsc, uint64_t *ns)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        uint64_t a = tsc_ordered();
        uint64_t n = at_now_ns();
        uint64_t b = tsc_ordered();
        if (b - a < best) {
            best = b - a;
            *tsc = a + (b - a) / 2;
            *ns = n;
        }
    }
}

static uint64_t freq_from(uint64_t tsc, uint64_t ns)
{
    if (ns <= C.ns0 || tsc <= C.tsc0)
        return 0;
    return (uint64_t)((unsigned __int128)(tsc - C.tsc0) * 1000000000u / (ns - C.ns0));
}

/* Is the TSC one clock for the whole machine? CPUID's invariant-TSC bit, and a kernel clocksource
 * that is itself the TSC or built on it (kvm-clock and Hyper-V's page only run in the vDSO when the
 * host keeps the TSC stable across vCPUs). */
static bool tsc_trusted(void)
{
    uint32_t a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000000u), "c"(0));
    if (a < 0x80000007u)
        return false;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000007u), "c"(0));
    if (!(d & (1u << 8)))
        return false;
    int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                  O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    buf[strcspn(buf, "\n")] = 0;
    return !strcmp(buf, "tsc") || !strcmp(buf, "kvm-clock")
           || !strcmp(buf, "hyperv_clocksource_tsc_page");
}

static void calibrate_start(void)
{
    if (C.based)
        return;
    clock_pair(&C.tsc0, &C.ns0);
    /* a first estimate over 20 us (error ~1e-3): only what the header says until the first flush,
     * which every file gets (the exit's too), refines it over the whole run. A longer wait here is
     * paid by every process image at start. */
    uint64_t t, n;
    do
        clock_pair(&t, &n);
    while (n - C.ns0 < 20000);
    atomic_store(&C.freq, freq_from(t, n));
    C.based = true;
}

enum at_clock_kind at_clock_select(enum at_clock_kind want)
{
    if (want == AT_CLOCK_AUTO)
        want = tsc_trusted() ? AT_CLOCK_TSC : AT_CLOCK_MONOTONIC;
    if (want == AT_CLOCK_TSC) {
        calibrate_start();
        if (atomic_load(&C.freq) == 0) /* a TSC that does not advance */
            want = AT_CLOCK_MONOTONIC;
    }
    __atomic_store_n(&at_clock_tsc, want == AT_CLOCK_TSC, __ATOMIC_RELAXED);
    return want;
}

uint64_t at_clock_freq(void)
{
    return __atomic_load_n(&at_clock_tsc, __ATOMIC_RELAXED)
               ? atomic_load_explicit(&C.freq, memory_order_relaxed)
               : 1000000000u;
}

uint64_t at_clock_refine(void)
{
    if (!__atomic_load_n(&at_clock_tsc, __ATOMIC_RELAXED))
        return 1000000000u;
    uint64_t t, n;
    clock_pair(&t, &n);
    uint64_t f = freq_from(t, n);
    if (f)
        atomic_store_explicit(&C.freq, f, memory_order_relaxed);
    return at_clock_freq();
}

uint64_t at_clock_ticks_to_ns(uint64_t ticks)
{
    uint64_t f = at_clock_freq();
    if (f == 1000000000u || f == 0)
        return ticks;
    return (uint64_t)((unsigned __int128)ticks * 1000000000u / f);
}

uint64_t at_clock_ns_to_ticks(uint64_t ns)
{
    uint64_t f = at_clock_freq();
    if (f == 1000000000u || f == 0)
        return ns;
    return (uint64_t)((unsigned __int128)ns * f / 1000000000u);
}
