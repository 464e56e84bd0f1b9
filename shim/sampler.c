/* sampler.c: CPU samples attributed to activities (ACTTRACE_SAMPLE_HZ, [trace] sample_hz).
 *
 * Each thread the shim knows (the first, those it starts, a fork child's) gets a POSIX timer on its
 * own CPU-time clock that sends it a real-time signal every 1/hz seconds of CPU it uses. The handler
 * writes the .NET runtime's sample event, Microsoft-DotNETCore-SampleProfiler ThreadSample (event 0,
 * payload int32 Type 2: running code; then, past what the runtime writes, uint64 CpuNs: the thread
 * CPU time the sample stands for), with the thread's stack from the interrupted instruction and its
 * current activity as the ActivityId: TraceEvent's SampleProfilerThreadTimeComputer (PerfView's
 * "Thread Time (with StartStop Activities)", dotnet-trace convert) groups the samples under the
 * activities, and acttrace's tools read them too.
 *
 * What keeps the program unchanged:
 *   - No system call is interrupted. Since Linux 5.11 (x86) the kernel checks CPU-time timers in task
 *     work run on the way back to user mode, so the signal is only ever raised with the thread in user
 *     mode: a poll, nanosleep or read is never cut short with EINTR. On older kernels the shim does not
 *     sample and says so.
 *   - The signal (SIGRTMAX-3) is the program's as soon as it asks for it: a sigaction or signal() on it
 *     stops sampling in every thread (each timer deleted, with any signal it had queued) before the
 *     program's disposition goes in. Until then a query of it reports the default, as untraced.
 *   - The program's masks: a thread that blocks every signal would never be sampled, so the sampling
 *     signal is left out of the masks the program sets through sigprocmask and pthread_sigmask, and
 *     put back in the masks it reads (per thread, inherited by the threads it starts).
 *   - The same signal number sent by anyone else (kill, sigqueue) goes where it would have gone
 *     untraced: sampling stops, and the signal is blocked again on a thread that had it blocked and
 *     sent on to the process (another thread, or pending for a sigwait), or takes its default action.
 *   - exec: the calling thread's timer is deleted first (with a queued signal the new image would
 *     otherwise receive under the default action) and made again if exec fails. A vfork child shares
 *     the parent's memory and touches none of this.
 * Known differences: the timers take POSIX timer ids, so the program's own timer_create returns other
 * (opaque) ids than untraced, and /proc/self/timers lists ours; each timer holds one queued signal
 * against RLIMIT_SIGPENDING. A thread whose timer cannot be made is not sampled. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "shim.h"
#include "stack.h"

#define SAMP_SLOTS 4096u
#define SAMP_COOKIE 0x61637473 /* "acts" in the signal's value: our timers' */
enum { SAMP_OFF = 0, SAMP_ON = 1, SAMP_GONE = 2 /* the program took the signal, or it came from elsewhere */ };

int at_sample_sig AT_FORK_DATA;
static _Atomic int samp_state AT_FORK_DATA;
static const at_event_type *samp_type;
static uint32_t samp_depth;
static long samp_period_ns;
/* every live timer's kernel id + 1 (0: free), so that stopping can delete them all; a thread knows
 * its slot */
static _Atomic int samp_ids[SAMP_SLOTS];
static AT_TLS uint32_t samp_slot;  /* slot + 1 of the thread's timer; 0: none */
static AT_TLS bool samp_vblock;    /* the program has the signal blocked in this thread */

bool at_sampler_on(void)
{
    return atomic_load_explicit(&samp_state, memory_order_relaxed) == SAMP_ON;
}

/* Linux 5.11 or later: CPU-time timers fire from task work on the way back to user mode. */
static bool kernel_ok(char *why, size_t n)
{
    struct utsname u;
    if (uname(&u) != 0) {
        snprintf(why, n, "cannot read the kernel's version");
        return false;
    }
    unsigned maj = 0, min = 0;
    if (sscanf(u.release, "%u.%u", &maj, &min) != 2 || maj < 5 || (maj == 5 && min < 11)) {
        snprintf(why, n, "Linux %s may cut system calls short with the sampling signal (5.11 or "
                 "later raises it in user mode only)", u.release);
        return false;
    }
    return true;
}

/* --- the timers --- */

static void timer_make(void)
{
    if (samp_slot || atomic_load_explicit(&samp_state, memory_order_acquire) != SAMP_ON)
        return;
    int e = errno;
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = at_sample_sig;
    ev.sigev_value.sival_int = SAMP_COOKIE;
    ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    int id = -1;
    if (syscall(SYS_timer_create, CLOCK_THREAD_CPUTIME_ID, &ev, &id) != 0) {
        errno = e;
        return; /* not sampled: RLIMIT_SIGPENDING reached, say */
    }
    struct itimerspec its = {{samp_period_ns / 1000000000L, samp_period_ns % 1000000000L},
                             {samp_period_ns / 1000000000L, samp_period_ns % 1000000000L}};
    for (uint32_t i = (uint32_t)id % SAMP_SLOTS, k = 0; k < SAMP_SLOTS; k++, i = (i + 1) % SAMP_SLOTS) {
        int want = 0;
        if (atomic_compare_exchange_strong(&samp_ids[i], &want, id + 1)) {
            samp_slot = i + 1;
            break;
        }
    }
    /* armed only once listed, so that a stop deletes it; and stopped meanwhile: not armed */
    if (!samp_slot || atomic_load(&samp_state) != SAMP_ON ||
        syscall(SYS_timer_settime, id, 0, &its, NULL) != 0) {
        if (samp_slot) {
            int mine = id + 1;
            if (!atomic_compare_exchange_strong(&samp_ids[samp_slot - 1], &mine, 0))
                id = -1; /* a stop took it and deletes it */
            samp_slot = 0;
        }
        if (id >= 0)
            syscall(SYS_timer_delete, id);
    }
    errno = e;
}

/* The thread's timer, deleted (with a signal it has queued); only by whoever takes it off its slot. */
static void timer_drop(void)
{
    if (!samp_slot)
        return;
    int e = errno;
    int v = atomic_exchange(&samp_ids[samp_slot - 1], 0);
    samp_slot = 0;
    if (v)
        syscall(SYS_timer_delete, v - 1);
    errno = e;
}

/* Sampling ends in the whole process: every timer deleted, by whichever thread takes it. */
static void stop_all(void)
{
    int s = SAMP_ON;
    if (!atomic_compare_exchange_strong(&samp_state, &s, SAMP_GONE))
        return;
    for (uint32_t i = 0; i < SAMP_SLOTS; i++) {
        if (!atomic_load_explicit(&samp_ids[i], memory_order_relaxed))
            continue;
        int v = atomic_exchange(&samp_ids[i], 0);
        if (v)
            syscall(SYS_timer_delete, v - 1);
    }
}

void at_sampler_thread_start(bool vblock)
{
    samp_vblock = vblock;
    timer_make();
}

void at_sampler_thread_end(void) { timer_drop(); }

bool at_sampler_vblocked(void) { return samp_vblock; }

void at_sampler_exec_before(void) { timer_drop(); }
void at_sampler_exec_failed(void) { timer_make(); }

/* A fork child: no timer came with it (and its table lists the parent's). */
void at_sampler_fork_child(void)
{
    if (atomic_load_explicit(&samp_state, memory_order_relaxed) != SAMP_ON)
        return;
    for (uint32_t i = 0; i < SAMP_SLOTS; i++)
        if (atomic_load_explicit(&samp_ids[i], memory_order_relaxed))
            atomic_store_explicit(&samp_ids[i], 0, memory_order_relaxed);
    samp_slot = 0;
    timer_make();
}

/* A fork child left untraced (ACTTRACE_FOLLOW): the signal goes back to the default, as the program
 * would find it, and is an ordinary signal for the wrappers from now on. */
static void samp_handler(int sig, siginfo_t *si, void *ucv);

void at_sampler_untrace(void)
{
    if (!at_sample_sig)
        return;
    atomic_store_explicit(&samp_state, SAMP_GONE, memory_order_relaxed);
    for (uint32_t i = 0; i < SAMP_SLOTS; i++) /* the parent's timers, not this process's */
        if (atomic_load_explicit(&samp_ids[i], memory_order_relaxed))
            atomic_store_explicit(&samp_ids[i], 0, memory_order_relaxed);
    samp_slot = 0;
    struct sigaction cur;
    if (AT_REAL(sigaction)(at_sample_sig, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
        cur.sa_sigaction == samp_handler) {
        memset(&cur, 0, sizeof cur);
        cur.sa_handler = SIG_DFL;
        AT_REAL(sigaction)(at_sample_sig, &cur, NULL);
    }
    at_sample_sig = 0;
}

/* --- the handler --- */

/* The interrupted frame first, exact: the walk from here crosses the handler's frames and the signal
 * trampoline; what follows the interrupted instruction's frame is its callers' call sites. */
static uint32_t sample_stack(uintptr_t *ips, const ucontext_t *uc)
{
    uintptr_t rip = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    uint32_t n = at_shim_capture(ips, AT_STACK_MAX_DEPTH - 1, 0);
    for (uint32_t i = 0; i < n; i++) {
        if (ips[i] + 1 != rip)
            continue;
        uint32_t m = n - i < samp_depth ? n - i : samp_depth;
        memmove(ips, ips + i, m * sizeof *ips);
        ips[0] = rip;
        return m;
    }
    ips[0] = rip; /* the walk did not reach it: the leaf alone */
    return 1;
}

/* Our signal number from elsewhere (kill, sigqueue, raise): where it would have gone untraced. */
static void not_ours(int sig, siginfo_t *si, ucontext_t *uc)
{
    stop_all();
    if (samp_vblock) {
        /* blocked in this thread as the program set it: blocked on return, and sent on to the
         * process (another thread takes it, or it waits for a sigwait) */
        sigaddset(&uc->uc_sigmask, sig);
        syscall(SYS_rt_sigqueueinfo, (pid_t)syscall(SYS_getpid), sig, si);
        return;
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    AT_REAL(sigaction)(sig, &dfl, NULL);
    /* pending while this handler runs; its default action on return */
    syscall(SYS_tgkill, (pid_t)syscall(SYS_getpid), (pid_t)syscall(SYS_gettid), sig);
}

static void samp_handler(int sig, siginfo_t *si, void *ucv)
{
    int e = errno;
    ucontext_t *uc = ucv;
    if (AT_UNLIKELY(!si || si->si_code != SI_TIMER || si->si_value.sival_int != SAMP_COOKIE)) {
        not_ours(sig, si, uc);
        errno = e;
        return;
    }
    /* the shim's own work (a hook, the writer) is not the program's, and a sample inside a write of
     * the thread's would be dropped */
    if (at_internal || !at_on() || at_trace_thread_writing() || !samp_type ||
        atomic_load_explicit(&samp_state, memory_order_relaxed) != SAMP_ON) {
        errno = e;
        return;
    }
    AT_INTERNAL_BEGIN();
    uintptr_t ips[AT_STACK_MAX_DEPTH];
    uint32_t n = samp_depth ? sample_stack(ips, uc) : 0;
    /* the runtime's payload (Type 2, ClrThreadSampleType.Managed: the thread was running), then the
     * thread CPU time the sample stands for: the timer's periods, those the kernel folded into this
     * signal included (it checks CPU timers at its tick, which may be longer than the period) */
    uint8_t pl[12];
    int32_t type = 2;
    uint64_t cpu_ns = (uint64_t)samp_period_ns * (1u + (uint32_t)(si->si_overrun > 0 ? si->si_overrun : 0));
    memcpy(pl, &type, 4);
    memcpy(pl + 4, &cpu_ns, 8);
    at_activity_event(samp_type, pl, sizeof pl, ips, n);
    AT_INTERNAL_END();
    errno = e;
}

/* --- the program's calls on the signal and the masks --- */

/* sigaction(at_sample_sig) while sampling: a change gives the program the signal; a query reports the
 * default. */
int at_sampler_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    /* the default, set while the default is what the program sees (bash sets each signal to
     * SIG_DFL and back to learn what it held): nothing changes, sampling goes on */
    if (act && !(act->sa_flags & SA_SIGINFO) && act->sa_handler == SIG_DFL && at_sampler_on()) {
        if (old) {
            memset(old, 0, sizeof *old);
            old->sa_handler = SIG_DFL;
        }
        return 0;
    }
    if (act)
        stop_all();
    struct sigaction prev;
    int r = AT_REAL(sigaction)(sig, act, &prev);
    if (r == 0 && old) {
        if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction == samp_handler) {
            memset(&prev, 0, sizeof prev);
            prev.sa_handler = SIG_DFL;
        }
        *old = prev;
    }
    return r;
}

/* Bits of the mask's first word, directly: glibc's sigdelset refuses its own internal signals. */
static inline bool bit_has(const sigset_t *s, int sig)
{
    return (((const unsigned long *)(const void *)s)[0] >> (sig - 1)) & 1u;
}
static inline void bit_clear(sigset_t *s, int sig)
{
    ((unsigned long *)(void *)s)[0] &= ~(1ul << (sig - 1));
}

/* glibc's other ways to set a disposition call its sigaction from inside, past the one above: the
 * signal is the program's from then on all the same (sampling stops first). */
static sighandler_t as_program_sees(sighandler_t prev)
{
    return (void *)prev == (void *)samp_handler ? SIG_DFL : prev;
}

AT_LAZY_REAL(sysv_signal, sighandler_t, (int, sighandler_t))
AT_LAZY_REAL(bsd_signal, sighandler_t, (int, sighandler_t))
AT_LAZY_REAL(sigset, sighandler_t, (int, sighandler_t))

/* The sampling signal set through one of them: true when it is the default again while sampling
 * (nothing changes: the program sees the default already); otherwise sampling stops first when the
 * signal is ours. */
static bool keep_ours(int sig, sighandler_t h)
{
    if (!sig || sig != at_sample_sig)
        return false;
    if (h == SIG_DFL && at_sampler_on())
        return true;
    stop_all();
    return false;
}

AT_EXPORT sighandler_t sysv_signal(int sig, sighandler_t h)
{
    if (keep_ours(sig, h))
        return SIG_DFL;
    return as_program_sees(real_sysv_signal()(sig, h));
}

AT_EXPORT sighandler_t bsd_signal(int sig, sighandler_t h)
{
    if (keep_ours(sig, h))
        return SIG_DFL;
    return as_program_sees(real_bsd_signal()(sig, h));
}

AT_EXPORT sighandler_t sigset(int sig, sighandler_t h)
{
    if (keep_ours(sig, h)) {
        sighandler_t was = samp_vblock ? SIG_HOLD : SIG_DFL;
        samp_vblock = false; /* sigset unblocks what it sets */
        return was;
    }
    return as_program_sees(real_sigset()(sig, h));
}

void at_sampler_stop(void) { stop_all(); }

/* pthread_sigmask as glibc makes it (its two internal signals never blocked, the error returned),
 * with the sampling signal kept out of the mask while sampling and reported as the program set it. */
static int mask_call(int how, const sigset_t *set, sigset_t *old)
{
    sigset_t local;
    /* the shim's own calls (libunwind's lock, the writer's threads) set the masks they ask for */
    bool ours = atomic_load_explicit(&samp_state, memory_order_relaxed) == SAMP_ON && at_sample_sig &&
                !at_internal;
    bool vb = samp_vblock;
    if (set) {
        int s_cancel = 32, s_setxid = 33; /* glibc's SIGCANCEL and SIGSETXID */
        bool mine = ours && bit_has(set, at_sample_sig);
        if (bit_has(set, s_cancel) || bit_has(set, s_setxid) || mine) {
            local = *set;
            bit_clear(&local, s_cancel);
            bit_clear(&local, s_setxid);
            if (mine)
                bit_clear(&local, at_sample_sig);
            set = &local;
        }
        if (how != SIG_BLOCK && how != SIG_UNBLOCK && how != SIG_SETMASK)
            return EINVAL;
        if (ours) {
            if (how == SIG_SETMASK)
                vb = mine;
            else if (mine)
                vb = how == SIG_BLOCK;
        }
    }
    long r = syscall(SYS_rt_sigprocmask, how, set, old, _NSIG / 8);
    if (r != 0)
        return errno;
    if (ours && old && samp_vblock)
        sigaddset(old, at_sample_sig);
    if (ours)
        samp_vblock = vb;
    return 0;
}

AT_EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    int e = errno;
    int r = mask_call(how, set, old);
    errno = e;
    return r;
}

AT_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
    int e = errno;
    int r = mask_call(how, set, old);
    if (r == 0) {
        errno = e;
        return 0;
    }
    errno = r;
    return -1;
}

/* --- start --- */

/* After the writer and the stack walker are ready; 0, or -1 with why sampling is off. */
int at_sampler_init(unsigned hz, char *why, size_t n)
{
    if (!hz)
        return 0;
    if (!kernel_ok(why, n))
        return -1;
    static const at_event_desc d = {
        .provider = "Microsoft-DotNETCore-SampleProfiler",
        .event_id = 0,
        .id_given = true,
        .name = "",
        .level = NT_LEVEL_INFO,
    };
    samp_type = at_event_type_register(&d);
    if (!samp_type) {
        snprintf(why, n, "cannot register the sample event");
        return -1;
    }
    samp_depth = at_cfg.stack_depth < AT_STACK_MAX_DEPTH - 1 ? at_cfg.stack_depth
                                                             : AT_STACK_MAX_DEPTH - 1;
    if (at_cfg.stacks == AT_CFG_STACKS_NONE)
        samp_depth = 0;
    samp_period_ns = 1000000000L / (long)hz;
    at_sample_sig = SIGRTMAX - 3;
    struct sigaction cur;
    if (AT_REAL(sigaction)(at_sample_sig, NULL, &cur) != 0 ||
        (cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL) {
        snprintf(why, n, "signal %d (SIGRTMAX-3) already has a handler", at_sample_sig);
        at_sample_sig = 0;
        return -1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = samp_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (AT_REAL(sigaction)(at_sample_sig, &sa, NULL) != 0) {
        snprintf(why, n, "cannot install the sampling signal's handler: %s", strerror(errno));
        at_sample_sig = 0;
        return -1;
    }
    /* the first thread's mask as inherited: the signal leaves it, and reads back as it was */
    sigset_t m;
    if (syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &m, _NSIG / 8) == 0 &&
        sigismember(&m, at_sample_sig)) {
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, at_sample_sig);
        syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, &one, NULL, _NSIG / 8);
        samp_vblock = true;
    }
    atomic_store(&samp_state, SAMP_ON);
    timer_make();
    return 0;
}
