/* waits.c: blocked time (ACTTRACE_WAITS, [trace] waits; ACTTRACE_WAIT_MIN_US, [trace] wait_min_us).
 *
 * When a thread in an activity blocks, the activity's wall time goes by without its CPU: a trace that
 * only has CPU samples cannot say where. Every call the shim takes that may block is timed when the
 * calling thread is in an activity (two clock reads around the real call); one that took at least
 * the threshold writes, after it returns, a WaitSuspend (opcode Suspend) at the time the call began,
 * with the reason, the function, its object and the call's stack, and a WaitResume (opcode Resume)
 * at the time it returned, with the time blocked. Both carry the thread's current activity as their
 * ActivityId. A thread in no activity pays one test of its current activity; a timed call that did
 * not block, the two clock reads.
 *
 * The calls: reads and writes on descriptors and the wait points (fdflow.c, which times them the
 * same way), and here the sleeps, mutexes, read-write locks, condition variables, semaphores,
 * barriers, joins, fsync and its kin, waits for children, file locks and signals, POSIX and C11
 * alike, and the futex waits made through syscall(2).
 *
 * What stays as untraced: each call's result and errno (the record keeps errno), its cancellation
 * (nothing is held across the real call, so a cancellation unwinds through the wrapper as through
 * any C frame), and the versions of the condition-variable functions: glibc keeps the condition
 * variables of before 2.3.2 under GLIBC_2.2.5, and the shim's definitions are GLIBC_2.3.2 ones
 * (shim/versions.map), so a program linked against the old ones still reaches glibc's old ones.
 *
 * The Suspend's time is older than events other threads wrote during the wait: the writer then
 * writes it as a late event (not sorted), which readers take. */

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "stack.h"
#include "waits.h"

at_wait_cfg_t at_wait_cfg AT_HOT_PAGE_RT; /* beside at_rt_hot: every timed call reads it */

/* reason and call as the payload's two strings, then the object (and the time blocked) */
static uint32_t wait_payload(uint8_t *buf, size_t cap, const char *reason, const char *call,
                             uint64_t obj, const uint64_t *blocked)
{
    at_payload pl;
    at_payload_init(&pl, buf, cap);
    at_payload_str(&pl, reason, 32);
    at_payload_str(&pl, call, 32);
    at_payload_u64(&pl, obj);
    if (blocked)
        at_payload_u64(&pl, *blocked);
    return (uint32_t)(pl.p - buf);
}

AT_NOINLINE void at_wait_record(struct at_ring *ring, uint64_t t0, uint64_t t1, const char *reason,
                                const char *call, uint64_t obj)
{
    int e = errno;
    if (!at_on() || at_internal || !at_event_enabled(at_ev.wait_suspend)) {
        at_tbuf_wait_clear(ring);
        errno = e;
        return;
    }
    AT_INTERNAL_BEGIN();
    uint64_t freq = at_clock_freq();
    if (!freq) { /* a session that calibrates at its first event: this one */
        at_clock_calibrate();
        freq = at_clock_freq();
    }
    uint64_t ns = freq ? (uint64_t)((unsigned __int128)(t1 - t0) * 1000000000u / freq) : t1 - t0;
    if (freq && !at_wait_cfg.min_ticks) /* the threshold in ticks, for the next calls' test */
        __atomic_store_n(&at_wait_cfg.min_ticks,
                         (uint64_t)((unsigned __int128)at_wait_cfg.min_ns * freq / 1000000000u) | 1,
                         __ATOMIC_RELAXED);
    if (ns < at_wait_cfg.min_ns) {
        at_tbuf_wait_clear(ring);
        AT_INTERNAL_END();
        errno = e;
        return;
    }
    uintptr_t ips[AT_STACK_MAX_DEPTH];
    /* this frame and the wrapper's: the stack is the program's, from the call that waited */
    uint32_t nips = at_shim_stack(AT_CFG_STACKS_START, ips, AT_STACK_MAX_DEPTH, 2);
    uint8_t buf[160];
    uint32_t n = wait_payload(buf, sizeof buf, reason, call, obj, NULL);
    /* the Suspend at the wait's start unless the writer had to go past it (a wait of more than
     * AT_WAIT_HOLD_NS), the Resume at its end: both in order with what the file holds */
    uint64_t outer, ts0 = at_tbuf_wait_end(ring, t0, t1, &outer);
    at_activity_event_ts(ts0, at_ev.wait_suspend, buf, n, ips, nips);
    n = wait_payload(buf, sizeof buf, reason, call, obj, &ns);
    at_activity_event_ts(t1 > ts0 ? t1 : ts0, at_ev.wait_resume, buf, n, NULL, 0);
    at_tbuf_wait_done(ring, outer);
    AT_INTERNAL_END();
    errno = e;
}

static void parked_write(at_activity *a, uint64_t ticks, uint64_t obj)
{
    uint64_t freq = at_clock_freq();
    uint64_t ns = freq ? (uint64_t)((unsigned __int128)ticks * 1000000000u / freq) : ticks;
    if (!ns || !at_on() || at_internal || !at_event_enabled(at_ev.wait_resume))
        return;
    AT_INTERNAL_BEGIN();
    uint8_t buf[160];
    uint32_t n = wait_payload(buf, sizeof buf, "event loop", "", obj, &ns);
    at_event_write_ts(at_ticks(), at_ev.wait_resume, at_activity_id(a), NULL, buf, n, NULL, 0);
    AT_INTERNAL_END();
}

void at_wait_parked(at_activity *a, uint64_t t0, uint64_t obj)
{
    uint64_t gap = at_ticks() - t0;
    if ((int64_t)gap <= 0 || gap < at_wait_cfg.min_ticks)
        return;
    int e = errno;
    uint64_t q = at_wait_cfg.parked_quantum_ticks;
    if (AT_UNLIKELY(!q)) { /* the quantum in ticks once the clock is calibrated */
        uint64_t freq = at_clock_freq();
        uint64_t qns = at_wait_cfg.min_ns > AT_PARKED_QUANTUM_NS ? at_wait_cfg.min_ns : AT_PARKED_QUANTUM_NS;
        if (freq) {
            q = (uint64_t)((unsigned __int128)qns * freq / 1000000000u) | 1;
            __atomic_store_n(&at_wait_cfg.parked_quantum_ticks, q, __ATOMIC_RELAXED);
        }
    }
    if (__atomic_add_fetch(&a->parked_acc, gap, __ATOMIC_RELAXED) >= q) {
        uint64_t take = __atomic_exchange_n(&a->parked_acc, 0, __ATOMIC_RELAXED);
        if (take)
            parked_write(a, take, obj);
    }
    errno = e;
}

void at_wait_parked_flush(at_activity *a, uint64_t obj)
{
    if (!a || !__atomic_load_n(&a->parked_acc, __ATOMIC_RELAXED) || at_activity_is_stopped(a))
        return;
    int e = errno;
    uint64_t take = __atomic_exchange_n(&a->parked_acc, 0, __ATOMIC_RELAXED);
    if (take)
        parked_write(a, take, obj);
    errno = e;
}

const char *at_wait_io_reason(const char *call)
{
    if (strstr(call, "accept"))
        return "accept";
    if (strstr(call, "connect"))
        return "connect";
    if (strstr(call, "poll") || strstr(call, "select"))
        return "poll";
    if (strstr(call, "read") || strstr(call, "recv"))
        return "read";
    return "write";
}

/* ---------------- the calls ---------------- */

/* Each function's next definition, resolved on its first call (real.c) */
#define W_LIST(X)                                                                                  \
    X(nanosleep) X(clock_nanosleep) X(sleep) X(usleep) X(thrd_sleep)                              \
    X(pthread_mutex_trylock) X(pthread_rwlock_tryrdlock) X(pthread_rwlock_trywrlock)             \
    X(mtx_trylock) X(sem_trywait)                                                                  \
    X(pthread_mutex_timedlock) X(pthread_mutex_clocklock)                    \
    X(pthread_rwlock_rdlock) X(pthread_rwlock_wrlock) X(pthread_rwlock_timedrdlock)                \
    X(pthread_rwlock_timedwrlock) X(pthread_rwlock_clockrdlock) X(pthread_rwlock_clockwrlock)      \
    X(mtx_lock) X(mtx_timedlock)                                                                   \
    X(pthread_cond_wait) X(pthread_cond_timedwait) X(pthread_cond_clockwait) X(cnd_wait)           \
    X(cnd_timedwait)                                                                               \
    X(sem_wait) X(sem_timedwait) X(sem_clockwait) X(pthread_barrier_wait)                          \
    X(pthread_join) X(pthread_timedjoin_np) X(pthread_clockjoin_np) X(thrd_join)                   \
    X(fsync) X(fdatasync) X(syncfs) X(msync)                                                       \
    X(wait) X(waitpid) X(wait3) X(wait4) X(waitid) X(flock) X(lockf)                              \
    X(sigwait) X(sigwaitinfo) X(sigtimedwait) X(sigsuspend) X(pause)

static struct {
#define W_MEMBER(fn) __typeof__(fn) *fn;
    W_LIST(W_MEMBER)
#undef W_MEMBER
} w_real;

#define W_REAL(fn)                                                                                 \
    (AT_LIKELY(w_real.fn != NULL) ? w_real.fn                                                      \
                                  : (__typeof__(fn) *)at_real_resolve(#fn, (void **)&w_real.fn))

/* The wrappers are cancellation points: a thread cancelled in one leaves through the wrapper's frame
 * by a forced unwind, which a sanitizer's stack poisoning does not see (the main thread's TSD
 * destructors then run on the same stack and trip over it): their frames carry no redzones. */
#define W_NOASAN __attribute__((no_sanitize_address))

/* The wrapper of name: the real call as it is for a thread in no activity (a tail call), timed for
 * one in an activity. */
#define W_FN(ret, name, params, args, reason, obj)                                                 \
    AT_EXPORT W_NOASAN ret name params                                                             \
    {                                                                                              \
        if (AT_LIKELY(at_act_cur == NULL))                                                         \
            return W_REAL(name) args;                                                              \
        ret r_;                                                                                    \
        AT_WAIT_TIMED(r_, W_REAL(name) args, reason, #name, obj);                                  \
        return r_;                                                                                 \
    }

/* The same for a lock or a semaphore: in an activity it is first tried (try_expr), and a free one,
 * taken at once as the call would have taken it, is not timed: only one that is held can block
 * (glibc's calls give the same results either way: a free lock is taken, and an error the try
 * returns is the call's). `busy` tells a try that found it held. */
#define W_FN_TRY(ret, name, params, args, reason, obj, try_expr, busy)                             \
    AT_EXPORT W_NOASAN ret name params                                                             \
    {                                                                                              \
        if (AT_LIKELY(at_act_cur == NULL))                                                         \
            return W_REAL(name) args;                                                              \
        ret t_ = try_expr;                                                                         \
        if (AT_LIKELY(!(busy)))                                                                    \
            return t_;                                                                             \
        ret r_;                                                                                    \
        AT_WAIT_TIMED(r_, W_REAL(name) args, reason, #name, obj);                                  \
        return r_;                                                                                 \
    }

#define PTR(p) ((uint64_t)(uintptr_t)(p))

W_FN(int, nanosleep, (const struct timespec *t, struct timespec *rem), (t, rem), "sleep", 0)
W_FN(int, clock_nanosleep, (clockid_t c, int f, const struct timespec *t, struct timespec *rem),
     (c, f, t, rem), "sleep", 0)
W_FN(unsigned int, sleep, (unsigned int s), (s), "sleep", 0)
W_FN(int, usleep, (useconds_t u), (u), "sleep", 0)
W_FN(int, thrd_sleep, (const struct timespec *t, struct timespec *rem), (t, rem), "sleep", 0)

/* The shim's own start takes locks, and its calls come here too: this wrapper's code is with the
 * start's (shim/start.ld) and its pointer to glibc's on the interposers' page (which a start writes
 * anyway, and which a program's I/O reads between its locks), so that a start touches no page more
 * for it. */
static __typeof__(pthread_mutex_lock) *real_mutex_lock AT_HOT_PAGE_RT;
__attribute__((section(".text.at_start_wrap"))) AT_EXPORT int pthread_mutex_lock(pthread_mutex_t *m)
{
    __typeof__(pthread_mutex_lock) *f = __atomic_load_n(&real_mutex_lock, __ATOMIC_RELAXED);
    if (AT_UNLIKELY(!f))
        f = (__typeof__(pthread_mutex_lock) *)at_real_resolve("pthread_mutex_lock",
                                                              (void **)&real_mutex_lock);
    if (AT_LIKELY(at_act_cur == NULL))
        return f(m);
    int t_ = W_REAL(pthread_mutex_trylock)(m); /* a free mutex: taken, not timed (W_FN_TRY) */
    if (AT_LIKELY(t_ != EBUSY))
        return t_;
    int r_;
    AT_WAIT_TIMED(r_, f(m), "lock", "pthread_mutex_lock", PTR(m));
    return r_;
}
W_FN(int, pthread_mutex_timedlock, (pthread_mutex_t *m, const struct timespec *t), (m, t), "lock",
     PTR(m))
W_FN(int, pthread_mutex_clocklock, (pthread_mutex_t *m, clockid_t c, const struct timespec *t),
     (m, c, t), "lock", PTR(m))
W_FN_TRY(int, pthread_rwlock_rdlock, (pthread_rwlock_t *l), (l), "lock", PTR(l),
         W_REAL(pthread_rwlock_tryrdlock)(l), t_ == EBUSY)
W_FN_TRY(int, pthread_rwlock_wrlock, (pthread_rwlock_t *l), (l), "lock", PTR(l),
         W_REAL(pthread_rwlock_trywrlock)(l), t_ == EBUSY)
W_FN(int, pthread_rwlock_timedrdlock, (pthread_rwlock_t *l, const struct timespec *t), (l, t),
     "lock", PTR(l))
W_FN(int, pthread_rwlock_timedwrlock, (pthread_rwlock_t *l, const struct timespec *t), (l, t),
     "lock", PTR(l))
W_FN(int, pthread_rwlock_clockrdlock, (pthread_rwlock_t *l, clockid_t c, const struct timespec *t),
     (l, c, t), "lock", PTR(l))
W_FN(int, pthread_rwlock_clockwrlock, (pthread_rwlock_t *l, clockid_t c, const struct timespec *t),
     (l, c, t), "lock", PTR(l))
W_FN_TRY(int, mtx_lock, (mtx_t *m), (m), "lock", PTR(m), W_REAL(mtx_trylock)(m), t_ == thrd_busy)
W_FN(int, mtx_timedlock, (mtx_t *restrict m, const struct timespec *restrict t), (m, t), "lock",
     PTR(m))

/* the GLIBC_2.3.2 definitions (versions.map): a reference to the old GLIBC_2.2.5 ones skips them */
__asm__(".symver at_w_pthread_cond_wait, pthread_cond_wait@@GLIBC_2.3.2");
__asm__(".symver at_w_pthread_cond_timedwait, pthread_cond_timedwait@@GLIBC_2.3.2");
AT_EXPORT W_NOASAN int at_w_pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    if (AT_LIKELY(at_act_cur == NULL))
        return W_REAL(pthread_cond_wait)(c, m);
    int r_;
    AT_WAIT_TIMED(r_, W_REAL(pthread_cond_wait)(c, m), "condition", "pthread_cond_wait", PTR(c));
    return r_;
}
AT_EXPORT W_NOASAN int at_w_pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
                                          const struct timespec *t)
{
    if (AT_LIKELY(at_act_cur == NULL))
        return W_REAL(pthread_cond_timedwait)(c, m, t);
    int r_;
    AT_WAIT_TIMED(r_, W_REAL(pthread_cond_timedwait)(c, m, t), "condition",
                  "pthread_cond_timedwait", PTR(c));
    return r_;
}
W_FN(int, pthread_cond_clockwait,
     (pthread_cond_t *c, pthread_mutex_t *m, clockid_t k, const struct timespec *t), (c, m, k, t),
     "condition", PTR(c))
W_FN(int, cnd_wait, (cnd_t *c, mtx_t *m), (c, m), "condition", PTR(c))
W_FN(int, cnd_timedwait, (cnd_t *restrict c, mtx_t *restrict m, const struct timespec *restrict t),
     (c, m, t), "condition", PTR(c))

/* sem_wait acts on a pending cancellation even when it need not wait (glibc tests for one first):
 * so does the try here, before it takes a unit */
static int sem_try(sem_t *s, int *busy)
{
    int e = errno;
    pthread_testcancel();
    int r = W_REAL(sem_trywait)(s);
    *busy = r != 0 && errno == EAGAIN;
    if (*busy)
        errno = e;
    return r;
}
AT_EXPORT W_NOASAN int sem_wait(sem_t *s)
{
    if (AT_LIKELY(at_act_cur == NULL))
        return W_REAL(sem_wait)(s);
    int busy, t_ = sem_try(s, &busy);
    if (AT_LIKELY(!busy))
        return t_;
    int r_;
    AT_WAIT_TIMED(r_, W_REAL(sem_wait)(s), "semaphore", "sem_wait", PTR(s));
    return r_;
}
W_FN(int, sem_timedwait, (sem_t *s, const struct timespec *t), (s, t), "semaphore", PTR(s))
W_FN(int, sem_clockwait, (sem_t *s, clockid_t c, const struct timespec *t), (s, c, t), "semaphore",
     PTR(s))
W_FN(int, pthread_barrier_wait, (pthread_barrier_t *b), (b), "barrier", PTR(b))

W_FN(int, pthread_join, (pthread_t t, void **ret), (t, ret), "join", (uint64_t)t)
W_FN(int, pthread_timedjoin_np, (pthread_t t, void **ret, const struct timespec *a), (t, ret, a),
     "join", (uint64_t)t)
W_FN(int, pthread_clockjoin_np, (pthread_t t, void **ret, clockid_t c, const struct timespec *a),
     (t, ret, c, a), "join", (uint64_t)t)
W_FN(int, thrd_join, (thrd_t t, int *res), (t, res), "join", (uint64_t)t)

W_FN(int, fsync, (int fd), (fd), "sync", (uint64_t)(int64_t)fd)
W_FN(int, fdatasync, (int fd), (fd), "sync", (uint64_t)(int64_t)fd)
W_FN(int, syncfs, (int fd), (fd), "sync", (uint64_t)(int64_t)fd)
W_FN(int, msync, (void *a, size_t n, int f), (a, n, f), "sync", PTR(a))

W_FN(pid_t, wait, (int *st), (st), "child", 0)
W_FN(pid_t, waitpid, (pid_t p, int *st, int o), (p, st, o), "child", (uint64_t)(int64_t)p)
W_FN(pid_t, wait3, (int *st, int o, struct rusage *ru), (st, o, ru), "child", 0)
W_FN(pid_t, wait4, (pid_t p, int *st, int o, struct rusage *ru), (p, st, o, ru), "child",
     (uint64_t)(int64_t)p)
W_FN(int, waitid, (idtype_t t, id_t id, siginfo_t *si, int o), (t, id, si, o), "child",
     (uint64_t)id)
W_FN(int, flock, (int fd, int op), (fd, op), "file lock", (uint64_t)(int64_t)fd)
W_FN(int, lockf, (int fd, int cmd, off_t n), (fd, cmd, n), "file lock", (uint64_t)(int64_t)fd)

/* signals: waits for one (the object is the first signal of the set the call waits for, or none) */
static uint64_t first_signal(const sigset_t *s)
{
    for (int i = 1; s && i < NSIG; i++)
        if (sigismember(s, i) == 1)
            return (uint64_t)i;
    return 0;
}
W_FN(int, sigwait, (const sigset_t *s, int *sig), (s, sig), "signal", first_signal(s))
W_FN(int, sigwaitinfo, (const sigset_t *s, siginfo_t *i), (s, i), "signal", first_signal(s))
W_FN(int, sigtimedwait, (const sigset_t *s, siginfo_t *i, const struct timespec *t), (s, i, t),
     "signal", first_signal(s))
W_FN(int, sigsuspend, (const sigset_t *s), (s), "signal", 0)
W_FN(int, pause, (void), (), "signal", 0)

/* Futex waits a program makes itself through syscall(2) (its own locks, GLib's GMutex and GCond,
 * Rust's standard library's Mutex, Condvar and park): FUTEX_WAIT, WAIT_BITSET, LOCK_PI, LOCK_PI2,
 * WAIT_REQUEUE_PI and futex_waitv. glibc's own futex waits are inside the calls above.
 *
 * syscall is the shim's own, in assembly: any other system call is made right there, as glibc's
 * syscall makes it (the number and six arguments moved to the kernel's registers, the seventh word
 * from the stack, errno set from a result in -4095..-1): nothing is resolved, no C runs and nothing
 * of the shim's stays on the stack, so it is what it was untraced in a signal handler, before any
 * library is set up (the shim's own calls to syscall, a sanitizer's start) and for a vfork or clone
 * made through it. A futex call goes to at_w_syscall_futex, which takes the seventh argument from
 * the stack where the program's call put it and makes the call through at_w_raw_syscall. */
#define W_SYS_FUTEX 202
#define W_SYS_FUTEX_WAITV 449
long at_w_raw_syscall(long n, long a1, long a2, long a3, long a4, long a5, long a6);
long at_w_syscall_futex(long n, long a1, long a2, long a3, long a4, long a5, long a6)
    __attribute__((used));
__asm__(".text\n"
        ".globl syscall\n"
        ".type syscall, @function\n"
        "syscall:\n"
        "    cmpq $202, %rdi\n" /* W_SYS_FUTEX */
        "    je 2f\n"
        "    cmpq $449, %rdi\n" /* W_SYS_FUTEX_WAITV */
        "    je 2f\n"
        ".globl at_w_raw_syscall\n"
        ".hidden at_w_raw_syscall\n"
        "at_w_raw_syscall:\n"
        "    movq %rdi, %rax\n"
        "    movq %rsi, %rdi\n"
        "    movq %rdx, %rsi\n"
        "    movq %rcx, %rdx\n"
        "    movq %r8, %r10\n"
        "    movq %r9, %r8\n"
        "    movq 8(%rsp), %r9\n"
        "    syscall\n"
        "    cmpq $-4095, %rax\n"
        "    jae 1f\n"
        "    ret\n"
        "1:  negl %eax\n"
        "    pushq %rax\n" /* the stack aligned for the call */
        "    call *__errno_location@GOTPCREL(%rip)\n"
        "    popq %rcx\n"
        "    movl %ecx, (%rax)\n"
        "    movq $-1, %rax\n"
        "    ret\n"
        "2:  jmp at_w_syscall_futex\n"
        ".size syscall, .-syscall\n");

static bool futex_blocks(long n, long op)
{
    if (n == W_SYS_FUTEX_WAITV)
        return true;
    if (n != W_SYS_FUTEX)
        return false;
    switch (op & 0x7f) { /* FUTEX_CMD_MASK: without PRIVATE_FLAG and CLOCK_REALTIME */
    case 0:  /* FUTEX_WAIT */
    case 6:  /* FUTEX_LOCK_PI */
    case 9:  /* FUTEX_WAIT_BITSET */
    case 11: /* FUTEX_WAIT_REQUEUE_PI */
    case 13: /* FUTEX_LOCK_PI2 */
        return true;
    default:
        return false;
    }
}

W_NOASAN long at_w_syscall_futex(long n, long a1, long a2, long a3, long a4, long a5, long a6)
{
    if (AT_LIKELY(at_act_cur == NULL) || !futex_blocks(n, a2))
        return at_w_raw_syscall(n, a1, a2, a3, a4, a5, a6);
    long r_;
    AT_WAIT_TIMED(r_, at_w_raw_syscall(n, a1, a2, a3, a4, a5, a6), "futex", "syscall", (uint64_t)a1);
    return r_;
}
