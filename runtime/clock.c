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
 * never become earlier ns, even when converted later, through other pairs (see "the file time
 * base" below). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/platform/x86.h>
#include <sys/syscall.h>
#include "clock.h"
#include "at_common.h"


#define NPAIRS 64u /* the pairs kept (see "the file time base" below) */

typedef struct at_ratio {
    uint64_t k, r, den, q;
} at_ratio;

/* floor(x * num / den) for any x, exactly as the 128-bit division computes it (truncated to 64
 * bits), with multiplications only. num = k * den + r; q = floor(2^64 * r / den) estimates
 * floor(x * r / den) from below by at most 1 (x * q / 2^64 > x * r / den - 1 for x < 2^64), and the
 * remainder x * r - y * den, which lies in [0, 2 den) and so fits 64 bits while den <= 2^63,
 * corrects it. */
static void ratio_set(at_ratio *q, uint64_t num, uint64_t den)
{
    q->den = den;
    q->k = num / den;
    q->r = num % den;
    q->q = den <= (1ull << 63) ? (uint64_t)(((unsigned __int128)q->r << 64) / den) : 0;
}

static __attribute__((noinline, cold)) uint64_t ratio_divide(const at_ratio *q, uint64_t x)
{
    return (uint64_t)((unsigned __int128)x * (q->k * q->den + q->r) / q->den);
}

static inline uint64_t ratio_apply(const at_ratio *q, uint64_t x)
{
    if (AT_UNLIKELY(q->den > (1ull << 63)))
        return ratio_divide(q, x);
    uint64_t y = (uint64_t)(((unsigned __int128)x * q->q) >> 64);
    if (x * q->r - y * q->den >= q->den)
        y++;
    return q->k * x + y;
}

uint64_t at_clock_test_muldiv(uint64_t x, uint64_t num, uint64_t den)
{
    at_ratio q;
    ratio_set(&q, num, den);
    return ratio_apply(&q, x);
}

static struct {
    bool based;             /* the base pair is taken */
    bool calibrated;        /* and the second, 20 us or more after it */
    uint64_t tsc0, ns0;     /* the base pair */
    _Atomic uint64_t freq;  /* TSC ticks per second, best estimate so far */
    /* pairs taken by the flusher (under at_flush_lock), strictly increasing in both members */
    uint64_t ptsc[NPAIRS], pns[NPAIRS];
    uint32_t npairs, last; /* pairs held; index of the newest */
    uint64_t seen;         /* the newest tick converted so far (values up to it were given out) */
    uint64_t bdn, bdt;     /* the lowest slope of the segments dropped (bdt 0: none yet) */
    /* the segment ending at pair i (from the pair before it) as a ratio ready to apply: the flusher
     * converts every event, and a 128-bit division per event was a fifth of its time */
    at_ratio seg[NPAIRS];
} C AT_START_BSS; /* the start writes its head (the base pair): at_common.h */

static inline uint64_t tsc_ordered(void)
{
    uint32_t lo, hi;
    __asm__ volatile("lfence; rdtsc" : "=a"(lo), "=d"(hi)::"memory");
    return ((uint64_t)hi << 32) | lo;
}

/* A TSC value and the CLOCK_MONOTONIC time at (almost) the same instant: the tightest of a few
 * tries, the TSC taken as the middle of the two reads around clock_gettime. Returns the ticks the
 * tightest try spanned (0: the TSC did not advance). Async-signal-safe. */
static uint64_t clock_pair(uint64_t *tsc, uint64_t *ns)
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
    return best;
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
    /* the leaf glibc's loader read (sys/platform/x86.h): CPUID itself traps to a hypervisor */
    if (!CPU_FEATURE_PRESENT(INVARIANT_TSC))
        return false;
    /* raw calls: libc's read and close would be the shim's interposed ones (a code page more) */
    static const char src[] = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
    long fd = at_raw_syscall3(SYS_openat, AT_FDCWD, (long)src, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char buf[64];
    long n = at_raw_syscall3(SYS_read, fd, (long)buf, sizeof buf - 1);
    at_raw_syscall3(SYS_close, fd, 0, 0);
    if (n <= 0)
        return false;
    buf[n] = 0;
    for (char *c = buf; *c; c++) /* by hand: strcspn is a page of libc a start otherwise never maps */
        if (*c == '\n') {
            *c = 0;
            break;
        }
    return !strcmp(buf, "tsc") || !strcmp(buf, "kvm-clock")
           || !strcmp(buf, "hyperv_clocksource_tsc_page");
}

static void seg_set(uint32_t i);

/* The base pair, at the start (the frequency waits for the second: at_clock_calibrate); a TSC
 * that does not advance is not used. */
static void calibrate_start(void)
{
    if (C.based)
        return;
    if (clock_pair(&C.tsc0, &C.ns0) == 0)
        return; /* C.freq stays 0 */
    C.based = true;
    C.ptsc[0] = C.tsc0;
    C.pns[0] = C.ns0;
    C.npairs = 1;
    C.last = 0;
}

/* The second pair, at least 20 us after the base: events before the first flush convert through
 * the two (the two reads' error, tens of ns, over their span); every flush adds a pair. Taken when
 * the writer's memory is set up (at the start, or at the first event that counts of a session that
 * waits for it), so an image that records nothing does not spin here, and the first span is
 * usually far longer than 20 us. */
void at_clock_calibrate(void)
{
    if (!C.based || C.calibrated)
        return;
    uint64_t t, n;
    do
        clock_pair(&t, &n);
    while (n - C.ns0 < 20000);
    atomic_store(&C.freq, freq_from(t, n));
    C.calibrated = true;
    C.ptsc[1] = t;
    C.pns[1] = n;
    C.npairs = 2;
    C.last = 1;
    seg_set(1);
}

/* clock_gettime for the monotonic event clock, on at_rt_hot's page (at_clock_mono_ns): set by its
 * first call, not at the start (an image that records nothing writes nothing on that page) */
static int (*at_clock_gettime)(clockid_t, struct timespec *) AT_HOT_PAGE_RT;

enum at_clock_kind at_clock_select(enum at_clock_kind want)
{
    if (want == AT_CLOCK_AUTO)
        want = tsc_trusted() ? AT_CLOCK_TSC : AT_CLOCK_MONOTONIC;
    if (want == AT_CLOCK_TSC) {
        calibrate_start();
        if (!C.based) /* a TSC that does not advance */
            want = AT_CLOCK_MONOTONIC;
    }
    __atomic_store_n(&at_clock_tsc, want == AT_CLOCK_TSC, __ATOMIC_RELAXED);
    return want;
}

/* The monotonic event clock (at_ticks), beside the path's other code: through that pointer rather
 * than the GOT (a page of its own) from its second call on. */
__attribute__((hot, section("at_path_clock"))) uint64_t at_clock_mono_ns(void)
{
    int (*fn)(clockid_t, struct timespec *) = at_clock_gettime;
    struct timespec ts;
    if (AT_UNLIKELY(!fn))
        at_clock_gettime = fn = clock_gettime;
    fn(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* at_ticks_nocall's way to it (at_common.h): called below the caller's red zone with the stack
 * aligned anyhow; saves the general registers a call may clobber besides rax and rdx, realigns,
 * and returns the ns as rdtsc returns ticks (edx:eax). The flags are the caller's clobber. */
__asm__(".pushsection at_path_clock,\"ax\",@progbits\n"
        ".p2align 4\n"
        ".globl at_clock_mono_ns_keep\n"
        ".hidden at_clock_mono_ns_keep\n"
        ".type at_clock_mono_ns_keep,@function\n"
        "at_clock_mono_ns_keep:\n"
        ".cfi_startproc\n"
        "push %rbp\n"
        ".cfi_adjust_cfa_offset 8\n"
        ".cfi_rel_offset %rbp, 0\n"
        "mov %rsp, %rbp\n"
        ".cfi_def_cfa_register %rbp\n"
        "push %rcx\n"
        "push %rsi\n"
        "push %rdi\n"
        "push %r8\n"
        "push %r9\n"
        "push %r10\n"
        "push %r11\n"
        "and $-16, %rsp\n"
        "call at_clock_mono_ns\n"
        "mov %rax, %rdx\n"
        "shr $32, %rdx\n"
        "mov %eax, %eax\n"
        "lea -56(%rbp), %rsp\n"
        "pop %r11\n"
        "pop %r10\n"
        "pop %r9\n"
        "pop %r8\n"
        "pop %rdi\n"
        "pop %rsi\n"
        "pop %rcx\n"
        "pop %rbp\n"
        ".cfi_def_cfa %rsp, 8\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size at_clock_mono_ns_keep, .-at_clock_mono_ns_keep\n"
        ".popsection\n");

uint64_t at_clock_ticks_at_ns(uint64_t ns)
{
    if (!__atomic_load_n(&at_clock_tsc, __ATOMIC_RELAXED) || !C.based)
        return ns;
    return ns <= C.ns0 ? C.tsc0 - at_clock_ns_to_ticks(C.ns0 - ns)
                       : C.tsc0 + at_clock_ns_to_ticks(ns - C.ns0);
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

/* ---- the file time base ----
 * The conversion changes as pairs come and go, yet a time once written must never be contradicted:
 * an event written later with an equal or later TSC value (the same thread's next event, or any
 * event after the merge's horizon) must not get an earlier time. So every change keeps the values
 * already given out, for ticks up to the newest one converted (`seen`):
 * - values past the newest pair (an explicit flush writes what was published after its pair) were
 *   extrapolated: before the next pair, that point becomes a pair itself, 1 ns above the line, so
 *   the new segment lies on or above every value given out there;
 * - a full window drops its oldest pair while that segment lies wholly below `seen`; ticks older
 *   than the window then go back from the oldest pair at the lowest slope of any segment dropped or
 *   kept, which never gives less than before (the segment gone read at most that slope);
 * - while a thread preempted mid-write holds the merge back (flusher.c), `seen` stays behind and
 *   new pairs pile up above it: then the window thins there (the newest pair is replaced), where
 *   no value has been given out, so the held-back event still converts between the pairs around
 *   it. */

/* pairs strictly increase in both members: the interval between two and its ns */
static inline uint64_t seg_dt(uint32_t a, uint32_t b) { return C.ptsc[b] - C.ptsc[a]; }
static inline uint64_t seg_dn(uint32_t a, uint32_t b) { return C.pns[b] - C.pns[a]; }

static inline uint32_t pair_at(uint32_t k) /* k-th oldest pair held */
{
    return (C.last + NPAIRS + 1 - C.npairs + k) % NPAIRS;
}

/* pair i was set: the segment from the pair before it to it */
static void seg_set(uint32_t i)
{
    uint32_t a = (i + NPAIRS - 1) % NPAIRS;
    ratio_set(&C.seg[i], seg_dn(a, i), seg_dt(a, i));
}

/* ns at tsc on the line through pairs a and b (b the pair after a), tsc at or after pair a */
static inline uint64_t interp(uint32_t a, uint32_t b, uint64_t tsc)
{
    return C.pns[a] + ratio_apply(&C.seg[b], tsc - C.ptsc[a]);
}

/* The slope for ticks older than the window: the lowest of the dropped segments' (C.bdn / C.bdt)
 * and the oldest kept one's. */
static void back_slope(uint64_t *dn, uint64_t *dt)
{
    uint32_t a = pair_at(0), b = pair_at(1);
    *dn = seg_dn(a, b);
    *dt = seg_dt(a, b);
    if (C.bdt && (unsigned __int128)C.bdn * *dt < (unsigned __int128)*dn * C.bdt) {
        *dn = C.bdn;
        *dt = C.bdt;
    }
}

static void drop_oldest(void)
{
    uint64_t dn, dt;
    back_slope(&dn, &dt);
    C.bdn = dn;
    C.bdt = dt;
    C.npairs--;
}

/* Append a pair (strictly newer in both members than the newest), making room as the comment
 * above says. */
static void pair_push(uint64_t t, uint64_t n)
{
    if (C.npairs == NPAIRS) {
        if (C.ptsc[pair_at(1)] <= C.seen || C.ptsc[pair_at(NPAIRS - 2)] < C.seen) {
            drop_oldest();
        } else {
            C.ptsc[C.last] = t; /* the newest pair and everything after it: nothing given out */
            C.pns[C.last] = n;
            seg_set(C.last);
            return;
        }
    }
    C.last = (C.last + 1) % NPAIRS;
    C.ptsc[C.last] = t;
    C.pns[C.last] = n;
    seg_set(C.last);
    C.npairs++;
}

static inline uint64_t convert(uint64_t ticks);

/* The bookkeeping of at_clock_mark, given the pair read (tests feed pairs of their own). */
static uint64_t mark_with(uint64_t t, uint64_t n)
{
    uint64_t lt = C.ptsc[C.last], ln = C.pns[C.last];
    if (C.seen > lt) {
        /* values past the newest pair were given out: keep them (1 ns up: the new line then lies
         * on or above their rounded values) */
        uint64_t pn = convert(C.seen) + 1;
        if (pn > ln) { /* else a caller's tick so far ahead that its ns wrapped */
            pair_push(C.seen, pn);
            lt = C.seen;
            ln = pn;
        }
    }
    /* no time has passed, the pair read was disturbed, or the values given out are ahead of it
     * (a caller's timestamp): keep the newest */
    if (t <= lt || n <= ln)
        return t < lt ? t : lt;
    uint64_t f = freq_from(t, n);
    if (f)
        atomic_store_explicit(&C.freq, f, memory_order_relaxed);
    pair_push(t, n);
    return t;
}

uint64_t at_clock_mark(void)
{
    if (!__atomic_load_n(&at_clock_tsc, __ATOMIC_RELAXED))
        return at_now_ns();
    uint64_t t, n;
    clock_pair(&t, &n);
    return mark_with(t, n);
}

/* convert, for ticks before the second-newest pair */
static __attribute__((noinline)) uint64_t convert_older(uint64_t ticks)
{
    uint32_t b = C.last, a = (b + NPAIRS - 1) % NPAIRS;
    for (uint32_t k = 2; ticks < C.ptsc[a] && k < C.npairs; k++) {
        b = a;
        a = (a + NPAIRS - 1) % NPAIRS;
    }
    if (ticks >= C.ptsc[a])
        return interp(a, b, ticks);
    uint64_t dn, dt;
    back_slope(&dn, &dt);
    uint64_t back = (uint64_t)((unsigned __int128)(C.ptsc[a] - ticks) * dn / dt);
    return back < C.pns[a] ? C.pns[a] - back : 0;
}

/* ns at ticks through the pairs as they are */
static inline uint64_t convert(uint64_t ticks)
{
    /* newest first: nearly every event lies after the second-newest pair */
    uint32_t b = C.last, a = (b + NPAIRS - 1) % NPAIRS;
    if (AT_LIKELY(ticks >= C.ptsc[a]))
        return interp(a, b, ticks);
    return convert_older(ticks);
}

uint64_t at_clock_file_ts(uint64_t ticks)
{
    if (!__atomic_load_n(&at_clock_tsc, __ATOMIC_RELAXED) || C.npairs < 2)
        return ticks;
    if (ticks > C.seen)
        C.seen = ticks;
    return convert(ticks);
}

/* The file time of ticks as at_clock_file_ts gives it, without counting it as given out. */
static uint64_t file_ts_look(uint64_t ticks)
{
    if (!__atomic_load_n(&at_clock_tsc, __ATOMIC_RELAXED) || C.npairs < 2)
        return ticks;
    return convert(ticks);
}

/* The conversion does not decrease with the tick (each segment is a line of positive slope, the
 * segments meet at the pairs, and ticks before the window go back from the oldest pair), so the
 * ticks whose file time is at most ns are those up to one tick: found from hi down, doubling the
 * step, then halving the interval. A few conversions per flush instead of one per event. */
bool at_clock_ticks_upto(uint64_t ns, uint64_t hi, uint64_t *upto)
{
    if (file_ts_look(hi) <= ns) {
        *upto = hi;
        return true;
    }
    uint64_t lo, step = 1; /* file_ts_look(lo) <= ns < file_ts_look(hi) */
    for (;;) {
        uint64_t t = hi > step ? hi - step : 0;
        if (file_ts_look(t) <= ns) {
            lo = t;
            break;
        }
        if (t == 0)
            return false;
        hi = t;
        step *= 2;
    }
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (file_ts_look(mid) <= ns)
            lo = mid;
        else
            hi = mid;
    }
    *upto = lo;
    return true;
}

/* Tests only: the file time base in TSC mode from a pair of the caller's, and a pair added as a
 * flush would (at_clock_mark). */
void at_clock_test_reset(uint64_t tsc, uint64_t ns, uint64_t tsc2, uint64_t ns2)
{
    memset(C.ptsc, 0, sizeof C.ptsc);
    memset(C.pns, 0, sizeof C.pns);
    C.ptsc[0] = tsc;
    C.pns[0] = ns;
    C.ptsc[1] = tsc2;
    C.pns[1] = ns2;
    C.npairs = 2;
    C.last = 1;
    seg_set(1);
    C.seen = 0;
    C.bdn = C.bdt = 0;
    __atomic_store_n(&at_clock_tsc, true, __ATOMIC_RELAXED);
}

uint64_t at_clock_test_mark(uint64_t tsc, uint64_t ns)
{
    return mark_with(tsc, ns);
}

/* A file's start: a pair of its own rather than an extrapolation (the newest pair may be a whole
 * flush interval, or a session, old), kept like an event's time since no event of the file may
 * precede it. */
uint64_t at_clock_file_now(void)
{
    return at_clock_file_ts(at_clock_mark());
}
