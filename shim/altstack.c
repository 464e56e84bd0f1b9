/* altstack.c: an alternate signal stack on every thread the shim starts (and the first), so that the
 * fatal-signal handler (process.c, SA_ONSTACK) runs when the thread's own stack is what overflowed;
 * without one the kernel cannot push the handler's frame and kills the process before anything is
 * written. The program never sees ours: sigaltstack reports "disabled" while ours is in place, a
 * program that sets its own gets its own (our handler then runs on it), and one that disables its
 * own gets ours back.
 *
 * Stacks come from a pool that is never unmapped: a thread takes a slot when it starts and gives it
 * back when it ends (after disabling it), so a thread costs two sigaltstack system calls (one at
 * its start, one at its end) and no mmap. Slots are mapped AT_ALT_PER_CHUNK at a time with MAP_NORESERVE: a page of a slot costs memory
 * only once a signal ran on it. Each slot has a PROT_NONE guard page below it. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim.h"

#define AT_ALT_SIZE (64u << 10)  /* the handler writes the buffers out: deep enough for that */
#define AT_ALT_GUARD 4096u
#define AT_ALT_SLOT (AT_ALT_SIZE + AT_ALT_GUARD)
#define AT_ALT_PER_CHUNK 16u
#define AT_ALT_MAX_CHUNKS 4096u

static uint8_t *alt_chunks[AT_ALT_MAX_CHUNKS];
static uint32_t alt_nchunks;
static uint32_t *alt_next;            /* free-list links by slot index (one page per 1024 slots) */
static _Atomic uint64_t alt_free;     /* head: slot index + 1 (0: empty) | ABA counter << 32 */
static pthread_mutex_t alt_grow_lock AT_FORK_DATA = PTHREAD_MUTEX_INITIALIZER;

static AT_TLS uint32_t alt_slot;      /* this thread's slot + 1, or 0 */
static AT_TLS bool alt_ours;          /* ours is the thread's alternate stack now */

static long raw_sigaltstack(const stack_t *ss, stack_t *old)
{
    return syscall(SYS_sigaltstack, ss, old);
}

static inline uint8_t *slot_base(uint32_t i)
{
    return alt_chunks[i / AT_ALT_PER_CHUNK] + (size_t)(i % AT_ALT_PER_CHUNK) * AT_ALT_SLOT;
}

static void slot_push(uint32_t i)
{
    uint64_t h = atomic_load_explicit(&alt_free, memory_order_acquire), n;
    do {
        alt_next[i] = (uint32_t)h;
        n = ((h >> 32) + 1) << 32 | (i + 1);
    } while (!atomic_compare_exchange_weak_explicit(&alt_free, &h, n, memory_order_acq_rel,
                                                    memory_order_acquire));
}

static bool slot_pop(uint32_t *out)
{
    uint64_t h = atomic_load_explicit(&alt_free, memory_order_acquire), n;
    do {
        uint32_t top = (uint32_t)h;
        if (!top)
            return false;
        n = ((h >> 32) + 1) << 32 | alt_next[top - 1];
    } while (!atomic_compare_exchange_weak_explicit(&alt_free, &h, n, memory_order_acq_rel,
                                                    memory_order_acquire));
    *out = (uint32_t)h - 1;
    return true;
}

/* One more chunk of slots onto the free list (rare: AT_ALT_PER_CHUNK threads alive at once more). */
static bool grow(void)
{
    bool ok = false;
    pthread_mutex_lock(&alt_grow_lock);
    if ((uint32_t)atomic_load(&alt_free)) { /* another thread grew it meanwhile */
        pthread_mutex_unlock(&alt_grow_lock);
        return true;
    }
    if (!alt_next) {
        void *m = mmap(NULL, AT_ALT_MAX_CHUNKS * AT_ALT_PER_CHUNK * sizeof(uint32_t),
                       PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            goto out;
        alt_next = m;
    }
    if (alt_nchunks >= AT_ALT_MAX_CHUNKS)
        goto out;
    uint8_t *c = mmap(NULL, (size_t)AT_ALT_PER_CHUNK * AT_ALT_SLOT, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (c == MAP_FAILED)
        goto out;
    for (uint32_t k = 0; k < AT_ALT_PER_CHUNK; k++)
        mprotect(c + (size_t)k * AT_ALT_SLOT, AT_ALT_GUARD, PROT_NONE);
    uint32_t first = alt_nchunks * AT_ALT_PER_CHUNK;
    alt_chunks[alt_nchunks] = c;
    __atomic_store_n(&alt_nchunks, alt_nchunks + 1, __ATOMIC_RELEASE);
    for (uint32_t k = AT_ALT_PER_CHUNK; k-- > 0;)
        slot_push(first + k);
    ok = true;
out:
    pthread_mutex_unlock(&alt_grow_lock);
    return ok;
}

/* first: the process's first thread, which may have one already (an earlier constructor's, a
 * sanitizer's): it stays. A new thread has none (the kernel clears it for a thread sharing memory). */
static void thread_start(bool first)
{
    if (alt_slot || !at_cfg.fatal_signals)
        return;
    int e = errno;
    AT_INTERNAL_BEGIN(); /* grow's mmap and mprotect are the shim's own */
    stack_t cur;
    if (first && (raw_sigaltstack(NULL, &cur) != 0 || !(cur.ss_flags & SS_DISABLE)))
        goto out;
    uint32_t i;
    if (!slot_pop(&i) && !(grow() && slot_pop(&i)))
        goto out;
    stack_t ss = {.ss_sp = slot_base(i) + AT_ALT_GUARD, .ss_size = AT_ALT_SIZE, .ss_flags = 0};
    if (raw_sigaltstack(&ss, NULL) != 0) {
        slot_push(i);
        goto out;
    }
    alt_slot = i + 1;
    alt_ours = true;
out:
    AT_INTERNAL_END();
    errno = e;
}

void at_altstack_thread_start(void)
{
    thread_start(false);
}

void at_altstack_thread_end(void)
{
    if (!alt_slot)
        return;
    int e = errno;
    if (alt_ours) {
        stack_t off = {.ss_flags = SS_DISABLE};
        /* refused only while running on it (a handler ending the thread): then it stays taken */
        if (raw_sigaltstack(&off, NULL) != 0) {
            errno = e;
            return;
        }
        alt_ours = false;
    }
    slot_push(alt_slot - 1);
    alt_slot = 0;
    errno = e;
}

/* A fork child's thread keeps its alternate stack and its slot; another thread of the parent may
 * have held the lock. */
AT_FORK_TEXT static void alt_atfork_child(void)
{
    at_mutex_fork_reset(&alt_grow_lock);
}

void at_altstack_init(void)
{
    pthread_atfork(NULL, NULL, alt_atfork_child);
    thread_start(true);
}

AT_EXPORT int sigaltstack(const stack_t *ss, stack_t *old)
{
    bool was_ours = alt_ours;
    long r = raw_sigaltstack(ss, old);
    if (r != 0)
        return -1;
    if (old && was_ours) { /* the program never set one: what it would read untraced */
        memset(old, 0, sizeof *old);
        old->ss_flags = SS_DISABLE;
    }
    if (ss) {
        alt_ours = false;
        if ((ss->ss_flags & SS_DISABLE) && alt_slot) { /* none for the program: ours again */
            stack_t mine = {.ss_sp = slot_base(alt_slot - 1) + AT_ALT_GUARD, .ss_size = AT_ALT_SIZE};
            alt_ours = raw_sigaltstack(&mine, NULL) == 0;
        }
    }
    return 0;
}
