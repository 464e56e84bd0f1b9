/* clock.c: the event clock, and the one time base of every file.
 *
 * Events read the event clock (at_ticks): the raw TSC when it can be trusted (invariant, and the
 * kernel's own clocksource is TSC-based, so it is one clock across CPUs), since rdtsc costs about
 * 12 ns on the KVM guests we run on against 28 ns for clock_gettime; CLOCK_MONOTONIC ns otherwise.
 *
 * Files never carry the TSC. Each process estimating the TSC's frequency for itself put files of one
 * machine parts per million apart (a child 10-15 ms before its parent at 40 minutes of uptime).
 * Instead every file's timestamps are CLOCK_MONOTONIC ns (frequency 1e9, as the .NET runtime writes
 * on Linux), so the files of one machine share one time base. The flusher takes a (TSC,
 * CLOCK_MONOTONIC) pair at every flush; an event's TSC is converted by interpolating between the two
 * pairs around it, exactly where the kernel's own conversion is linear (between its updates), within
 * the pairs' read error (tens of ns) elsewhere. Conversion keeps order: equal or later TSC values
 * never become earlier ns. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "clock.h"


#define NPAIRS 64u /* the last pairs; an event older than all of them uses the oldest slope */

static struct {
    bool based;
    uint64_t tsc0, ns0;     /* the base pair */
    _Atomic uint64_t freq;  /* TSC ticks per second, best estimate so far */
    /* pairs taken by the flusher (under at_flush_lock), strictly increasing in both members */
    uint64_t ptsc[NPAIRS], pns[NPAIRS];
    uint32_t npairs, last; /* pairs held; index of the newest */
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
    /* the first two pairs, 20 us apart: events before the first flush convert through them (the
     * two reads' error, tens of ns, over a short span); every flush adds a pair. A longer wait here
     * is paid by every process image at start. */
    uint64_t t, n;
    do
        clock_pair(&t, &n);
    while (n - C.ns0 < 20000);
    atomic_store(&C.freq, freq_from(t, n));
    C.based = true;
    C.ptsc[0] = C.tsc0;
    C.pns[0] = C.ns0;
    C.ptsc[1] = t;
    C.pns[1] = n;
    C.npairs = 2;
    C.last = 1;
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

uint64_t at_clock_ns_to_ticks(uint64_t ns)
{
    uint64_t f = at_clock_freq();
    if (f == 1000000000u || f == 0)
        return ns;
    return (uint64_t)((unsigned __int128)ns * f / 1000000000u);
}

/* ---- the file time base ---- */

uint64_t at_clock_mark(void)
{
    if (!__atomic_load_n(&at_clock_tsc, __ATOMIC_RELAXED))
        return at_now_ns();
    uint64_t t, n;
    clock_pair(&t, &n);
    uint64_t lt = C.ptsc[C.last], ln = C.pns[C.last];
    if (C.npairs && (t <= lt || n <= ln))
        return lt; /* no time has passed (or the pair read was disturbed): keep the newest */
    uint64_t f = freq_from(t, n);
    if (f)
        atomic_store_explicit(&C.freq, f, memory_order_relaxed);
    C.last = (C.last + 1) % NPAIRS;
    C.ptsc[C.last] = t;
    C.pns[C.last] = n;
    if (C.npairs < NPAIRS)
        C.npairs++;
    return t;
}

/* ns at tsc on the line through pairs a and b (tsc may lie outside them: the line goes on). */
static uint64_t interp(uint32_t a, uint32_t b, uint64_t tsc)
{
    uint64_t dt = C.ptsc[b] - C.ptsc[a], dn = C.pns[b] - C.pns[a];
    if (tsc >= C.ptsc[a])
        return C.pns[a] + (uint64_t)((unsigned __int128)(tsc - C.ptsc[a]) * dn / dt);
    uint64_t back = (uint64_t)((unsigned __int128)(C.ptsc[a] - tsc) * dn / dt);
    return back < C.pns[a] ? C.pns[a] - back : 0;
}

uint64_t at_clock_file_ts(uint64_t ticks)
{
    if (!__atomic_load_n(&at_clock_tsc, __ATOMIC_RELAXED) || C.npairs < 2)
        return ticks;
    /* newest first: nearly every event lies after the second-newest pair */
    uint32_t b = C.last, a = (b + NPAIRS - 1) % NPAIRS;
    for (uint32_t k = 2; ticks < C.ptsc[a] && k < C.npairs; k++) {
        b = a;
        a = (a + NPAIRS - 1) % NPAIRS;
    }
    return interp(a, b, ticks);
}

uint64_t at_clock_file_now(void)
{
    return at_clock_file_ts(at_ticks());
}
