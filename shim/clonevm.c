/* clonevm.c: children that clone() makes with CLONE_VM but without CLONE_SETTLS (some runtimes and
 * programs make them, as vfork-like helpers or threads of their own) run on their parent thread's
 * thread-local storage: the shim's per-thread state (the current activity, the event buffer, the
 * cached thread id) would be the parent thread's, written by two threads at once, and the program
 * could hang on a broken activity chain. Such a child records nothing: clone() below starts it
 * through a trampoline that notes its thread id, and while any such child lives at_on() takes a
 * slow path that asks the kernel who is calling (shim.h). The kernel clears a word of ours when the
 * child exits or execs (CLONE_CHILD_CLEARTID), which ends the slow path. A child made with the raw
 * system call does not come by here: what it writes is then skipped by the reader of the buffers
 * (runtime/flusher.c) as a damaged stretch, counted as dropped. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim.h"

#define AT_CLONEVM_SLOTS 64

typedef struct at_clonevm_slot {
    int state;          /* 0 free, 1 taken (the child may live) */
    int own_word;       /* 1: word is cleared by the kernel at the child's exit or exec */
    pid_t tid;          /* the child's id: the child stores it before running the program's code */
    pid_t word;         /* CLONE_CHILD_CLEARTID target */
    int (*fn)(void *);
    void *arg;
} at_clonevm_slot;

static at_clonevm_slot slots[AT_CLONEVM_SLOTS];

/* gettid without errno (the child shares the parent's) */
static pid_t raw_gettid(void)
{
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "0"((long)SYS_gettid) : "rcx", "r11", "memory");
    return (pid_t)r;
}

static bool slot_gone(at_clonevm_slot *s)
{
    if (s->own_word)
        return __atomic_load_n(&s->word, __ATOMIC_ACQUIRE) == 0;
    pid_t t = __atomic_load_n(&s->tid, __ATOMIC_ACQUIRE);
    if (t <= 0)
        return false; /* not started yet */
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "0"((long)SYS_kill), "D"((long)t), "S"(0L)
                     : "rcx", "r11", "memory");
    return r == -ESRCH;
}

bool at_clonevm_caller_is_child(void)
{
    pid_t me = raw_gettid();
    bool any = false, mine = false;
    for (int i = 0; i < AT_CLONEVM_SLOTS; i++) {
        at_clonevm_slot *s = &slots[i];
        if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != 1)
            continue;
        if (slot_gone(s)) {
            int one = 1;
            __atomic_compare_exchange_n(&s->state, &one, 0, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED);
            continue;
        }
        any = true;
        if (__atomic_load_n(&s->tid, __ATOMIC_ACQUIRE) == me)
            mine = true;
    }
    if (!any) { /* the last one ended: back to the fast at_on() */
        int two = 2;
        __atomic_compare_exchange_n(&at_hot.shim_on, &two, 1, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED);
    }
    return mine;
}

/* The child's first code: its id goes where at_on() looks before any of the program's runs. */
static int child_start(void *p)
{
    at_clonevm_slot *s = p;
    __atomic_store_n(&s->tid, raw_gettid(), __ATOMIC_RELEASE);
    return s->fn(s->arg);
}

AT_LAZY_REAL(clone, int, (int (*)(void *), void *, int, void *, ...))

AT_EXPORT int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
    /* the optional arguments, as glibc's own clone reads them whatever the flags */
    va_list ap;
    va_start(ap, arg);
    pid_t *ptid = va_arg(ap, pid_t *);
    void *tls = va_arg(ap, void *);
    pid_t *ctid = va_arg(ap, pid_t *);
    va_end(ap);
    clone_fn real = real_clone();
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    if (!(flags & CLONE_VM) || (flags & CLONE_SETTLS) || !fn ||
        __atomic_load_n(&at_hot.shim_on, __ATOMIC_ACQUIRE) == 0)
        return real(fn, stack, flags, arg, ptid, tls, ctid);
    at_clonevm_slot *s = NULL;
    for (int i = 0; i < AT_CLONEVM_SLOTS && !s; i++) {
        int zero = 0;
        if (__atomic_compare_exchange_n(&slots[i].state, &zero, 1, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            s = &slots[i];
    }
    if (!s) /* too many at once: the buffers' reader copes with what they write */
        return real(fn, stack, flags, arg, ptid, tls, ctid);
    s->fn = fn;
    s->arg = arg;
    __atomic_store_n(&s->tid, 0, __ATOMIC_RELEASE);
    s->own_word = !(flags & (CLONE_CHILD_CLEARTID | CLONE_CHILD_SETTID));
    __atomic_store_n(&s->word, 1, __ATOMIC_RELEASE);
    if (s->own_word) {
        flags |= CLONE_CHILD_CLEARTID;
        ctid = &s->word;
    }
    /* on before the child exists: its first at_on() must already look */
    int one = 1;
    __atomic_compare_exchange_n(&at_hot.shim_on, &one, 2, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    int e = errno;
    int r = real(child_start, stack, flags, s, ptid, tls, ctid);
    if (r < 0) {
        e = errno;
        __atomic_store_n(&s->state, 0, __ATOMIC_RELEASE);
    } else if (__atomic_load_n(&s->tid, __ATOMIC_ACQUIRE) == 0) {
        __atomic_store_n(&s->tid, r, __ATOMIC_RELEASE); /* the same value the child stores */
    }
    errno = e;
    return r;
}
