/* altstack.c: an alternate signal stack on every thread the shim starts (and the first), so that the
 * fatal-signal handler (process.c, SA_ONSTACK) runs when the thread's own stack is what overflowed;
 * without one the kernel cannot push the handler's frame and kills the process before anything is
 * written. The program never sees ours: sigaltstack reports "disabled" while ours is in place, a
 * program that sets its own gets its own (our handler then runs on it), and one that disables its
 * own gets ours back.
 *
 * Stacks come from a pool that is never unmapped: a thread takes a slot when it starts. The kernel
 * clears the alternate stack of every new thread, so each start costs one sigaltstack system call;
 * an end costs none: the slot stays registered to the ending thread and is parked under its thread
 * descriptor (pthread_self). glibc gives a descriptor (it sits on the thread's cached stack) to a new
 * thread only once the kernel has reported the old one gone, so a new thread that finds a slot
 * parked under its own descriptor takes it: no signal can run on it any more. A slot whose
 * descriptor does not come back (its stack left glibc's cache) goes back to the pool when the pool
 * runs dry and tgkill says its thread is gone; a thread whose park entry is taken disables its stack
 * and gives the slot back (the second system call). Slots are mapped AT_ALT_PER_CHUNK at a time with MAP_NORESERVE: a page of a slot costs memory
 * only once a signal ran on it. Each slot has a PROT_NONE guard page below it, made when the slot is
 * first taken (one system call then, not one per slot of the chunk at the process's start); a
 * chunk's first page holds its slots' free-list links and guard flags (no table sized for every
 * possible slot: under RLIMIT_AS the first chunk is all a small limit may have room for). */
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

#define AT_ALT_CHUNK (AT_ALT_GUARD + (size_t)AT_ALT_PER_CHUNK * AT_ALT_SLOT) /* links page first */

static uint8_t *alt_chunks[AT_ALT_MAX_CHUNKS]; /* [0] unused: alt_c0 */
/* The first chunk's address, free-list links and guard flags, which every traced image's start
 * writes: on the start data page, not a page of .bss and the chunk's own first page (a fault each,
 * tens of microseconds under shadow paging). Later chunks keep theirs in their first page. */
static struct {
    uint8_t *base;
    uint32_t next[AT_ALT_PER_CHUNK];
    uint8_t made[AT_ALT_PER_CHUNK];
} alt_c0 AT_START_DATA;
static uint32_t alt_nchunks AT_START_DATA;
static _Atomic uint64_t alt_free AT_START_DATA; /* head: slot index + 1 (0: empty) | ABA counter << 32 */
static pthread_mutex_t alt_grow_lock AT_FORK_DATA = PTHREAD_MUTEX_INITIALIZER;

/* Parked slots by the ending thread's descriptor: key 0 empty, 1 being written or taken, else the
 * descriptor (the entry is complete). */
#define AT_ALT_PARK 256u
typedef struct park_ent {
    _Atomic uintptr_t key;
    uint32_t slot;
    pid_t tid;
} park_ent;
static park_ent alt_park[AT_ALT_PARK];

static AT_TLS uint32_t alt_slot;      /* this thread's slot + 1, or 0 */
static AT_TLS bool alt_ours;          /* ours is the thread's alternate stack now */

static long raw_sigaltstack(const stack_t *ss, stack_t *old)
{
    return syscall(SYS_sigaltstack, ss, old);
}

static inline uint8_t *chunk_base(uint32_t k)
{
    return k ? alt_chunks[k] : alt_c0.base;
}

static inline uint8_t *slot_base(uint32_t i)
{
    return chunk_base(i / AT_ALT_PER_CHUNK) + AT_ALT_GUARD +
           (size_t)(i % AT_ALT_PER_CHUNK) * AT_ALT_SLOT;
}

/* The free-list link of slot i: in its chunk's first page (the first chunk's: alt_c0). */
static inline uint32_t *slot_next(uint32_t i)
{
    if (i < AT_ALT_PER_CHUNK)
        return &alt_c0.next[i];
    return (uint32_t *)alt_chunks[i / AT_ALT_PER_CHUNK] + i % AT_ALT_PER_CHUNK;
}

/* Slot i's guard page is made (in its chunk's first page, after the links; alt_c0 for the first
 * chunk): only its taker writes it, and a slot has one taker at a time. */
static void slot_guard(uint32_t i)
{
    uint8_t *made = i < AT_ALT_PER_CHUNK ? &alt_c0.made[i]
                                         : (uint8_t *)alt_chunks[i / AT_ALT_PER_CHUNK] +
                                               4 * AT_ALT_PER_CHUNK + i % AT_ALT_PER_CHUNK;
    if (!*made && mprotect(slot_base(i), AT_ALT_GUARD, PROT_NONE) == 0)
        *made = 1;
}

static void slot_push(uint32_t i)
{
    uint64_t h = atomic_load_explicit(&alt_free, memory_order_acquire), n;
    do {
        *slot_next(i) = (uint32_t)h;
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
        n = ((h >> 32) + 1) << 32 | *slot_next(top - 1);
    } while (!atomic_compare_exchange_weak_explicit(&alt_free, &h, n, memory_order_acq_rel,
                                                    memory_order_acquire));
    *out = (uint32_t)h - 1;
    return true;
}

static inline park_ent *park_of(uintptr_t self)
{
    return &alt_park[(self * 0x9e3779b97f4a7c15ull) >> 56 & (AT_ALT_PARK - 1)];
}

/* The slot parked under this thread's descriptor, if any: its previous owner is gone. */
static bool park_take(uint32_t *out)
{
    uintptr_t self = (uintptr_t)pthread_self(), k = self;
    park_ent *p = park_of(self);
    if (atomic_load_explicit(&p->key, memory_order_acquire) != self ||
        !atomic_compare_exchange_strong(&p->key, &k, 1))
        return false;
    *out = p->slot;
    atomic_store_explicit(&p->key, 0, memory_order_release);
    return true;
}

/* Park slot i, still registered to this ending thread; false when the entry is taken. */
static bool park_put(uint32_t i)
{
    uintptr_t self = (uintptr_t)pthread_self(), z = 0;
    park_ent *p = park_of(self);
    if (!atomic_compare_exchange_strong(&p->key, &z, 1))
        return false;
    p->slot = i;
    p->tid = at_tid();
    atomic_store_explicit(&p->key, self, memory_order_release);
    return true;
}

/* Under alt_grow_lock, the pool empty: parked slots of threads that are gone back to it. tgkill's
 * ESRCH: no thread of the process has that id, so none can run a handler on the slot (an id reused
 * by a new thread only keeps the slot parked). */
static bool park_reclaim(void)
{
    bool any = false;
    pid_t pid = getpid();
    for (uint32_t j = 0; j < AT_ALT_PARK; j++) {
        park_ent *p = &alt_park[j];
        uintptr_t k = atomic_load_explicit(&p->key, memory_order_acquire);
        if (k <= 1 || syscall(SYS_tgkill, pid, p->tid, 0) == 0 || errno != ESRCH)
            continue;
        uint32_t i = p->slot;
        if (!atomic_compare_exchange_strong(&p->key, &k, 1))
            continue;
        atomic_store_explicit(&p->key, 0, memory_order_release);
        slot_push(i);
        any = true;
    }
    return any;
}

/* One more chunk of slots onto the free list (rare: AT_ALT_PER_CHUNK threads alive at once more),
 * after the parked slots of gone threads. */
static bool grow(void)
{
    bool ok = false;
    pthread_mutex_lock(&alt_grow_lock);
    /* another thread grew it meanwhile, or a gone thread's slot is parked (none before the first
     * chunk: the first thread's start reads no page of the parking table) */
    if ((uint32_t)atomic_load(&alt_free) || (alt_nchunks && park_reclaim())) {
        pthread_mutex_unlock(&alt_grow_lock);
        return true;
    }
    if (alt_nchunks >= AT_ALT_MAX_CHUNKS)
        goto out;
    /* under a finite RLIMIT_AS, out of the room the shim reserved at its start (asroom.c): threads
     * beyond what fits run without one (a stack overflow there ends the trace unflushed) */
    size_t len = AT_ALT_CHUNK;
    uint8_t *c = at_as_map("alternate signal stacks", &len, 0, 0, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (!c)
        goto out;
    uint32_t first = alt_nchunks * AT_ALT_PER_CHUNK;
    if (alt_nchunks)
        alt_chunks[alt_nchunks] = c;
    else
        alt_c0.base = c;
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
    if (!(!first && park_take(&i)) && !slot_pop(&i) && !(grow() && slot_pop(&i)))
        goto out;
    slot_guard(i);
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
    if (alt_ours && park_put(alt_slot - 1)) { /* it stays this thread's until the thread is gone */
        alt_slot = 0;
        errno = e;
        return;
    }
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

/* A fork child left untraced (ACTTRACE_FOLLOW): the thread has no alternate stack, as untraced; the
 * slot is left as it is (the child's copy of the parent's). */
void at_altstack_untrace(void)
{
    if (alt_ours) {
        stack_t off = {.ss_flags = SS_DISABLE};
        if (raw_sigaltstack(&off, NULL) == 0)
            alt_ours = false;
    }
    alt_slot = 0;
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
