/* tid.c: the calling thread's kernel id, once per thread. gettid(2) is a system call, about 1 us on a
 * VM whose kernel isolates page tables, and a thread-per-connection server would pay it for every
 * connection. glibc keeps each thread's id in its descriptor (struct pthread's tid, which the kernel
 * fills through clone's parent_tid before the thread runs, and fork's child_tid in a child); where in
 * the descriptor is glibc's own business, so it is learned rather than assumed. Threads that make the
 * system call narrow a set of candidate offsets (the 4-byte words of their descriptor that hold their
 * id); once two different threads leave exactly one, threads started through the shim's trampoline
 * read their id there. Other threads keep the system call: a thread made with a bare clone() would
 * find its creator's descriptor at pthread_self(). Async-signal-safe (atomics only). */
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "at_common.h"

#define TID_SCAN_BYTES 1024u /* within glibc's descriptor (the id sits at 0x2d0 in 2.17-2.36) */
#define TID_WORDS (TID_SCAN_BYTES / 4u / 64u)

_Static_assert(sizeof(pid_t) == sizeof(int), "at_path_tls.tid_cache holds a pid_t");
AT_TLS bool at_thread_managed;

/* bit i of word w: offset 4 * (64 * w + i) may hold the id; all set until a thread has looked */
static uint64_t tid_cand[TID_WORDS] = {[0 ... TID_WORDS - 1] = ~0ull};
static pid_t tid_seen;    /* the first thread that looked */
static int tid_off = -1;  /* the learned offset, or -1 */
static unsigned tid_syscalls; /* how many looks took the system call (tests) */

static void learn(pid_t tid)
{
    if (__atomic_load_n(&tid_off, __ATOMIC_ACQUIRE) >= 0)
        return;
    const pid_t *d = (const pid_t *)(const void *)pthread_self();
    for (unsigned w = 0; w < TID_WORDS; w++) {
        uint64_t m = 0;
        for (unsigned i = 0; i < 64; i++)
            if (d[w * 64 + i] == tid)
                m |= 1ull << i;
        __atomic_and_fetch(&tid_cand[w], m, __ATOMIC_ACQ_REL);
    }
    /* the first thread to look leaves its id here; one with another id that finds it knows both
     * threads' words are in (the first one's went in before its exchange) */
    pid_t first = 0;
    if (__atomic_compare_exchange_n(&tid_seen, &first, tid, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE) || first == tid)
        return;
    unsigned total = 0;
    int only = -1;
    for (unsigned w = 0; w < TID_WORDS; w++) {
        uint64_t now = __atomic_load_n(&tid_cand[w], __ATOMIC_ACQUIRE);
        total += (unsigned)__builtin_popcountll(now);
        if (now)
            only = (int)(4 * (w * 64 + (unsigned)__builtin_ctzll(now)));
    }
    if (total == 1)
        __atomic_store_n(&tid_off, only, __ATOMIC_RELEASE);
}

pid_t at_tid_slow(void)
{
    int off = __atomic_load_n(&tid_off, __ATOMIC_ACQUIRE);
    if (off >= 0 && at_thread_managed) {
        pid_t t = *(volatile const pid_t *)(const void *)((const char *)pthread_self() + off);
        if (AT_LIKELY(t > 0))
            return at_tid_cache = t;
    }
    AT_INTERNAL_BEGIN();
    pid_t t = (pid_t)syscall(SYS_gettid);
    AT_INTERNAL_END();
    __atomic_add_fetch(&tid_syscalls, 1, __ATOMIC_RELAXED);
    learn(t);
    return at_tid_cache = t;
}

int at_tid_offset(void)
{
    return __atomic_load_n(&tid_off, __ATOMIC_ACQUIRE);
}

unsigned at_tid_syscalls(void)
{
    return __atomic_load_n(&tid_syscalls, __ATOMIC_RELAXED);
}
