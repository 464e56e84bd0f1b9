/* slots.c: 64-byte contexts for work items handed between threads (GLib pool items), with no lock
 * and no malloc per item.
 *
 * Slots are carved from one address range reserved at first use (PROT_NONE, committed 2 MiB at a time
 * as it fills), so "is this pointer one of our slots" is a subtraction and a compare: a pool worker
 * told to run an item can tell a wrapped item from the program's own pointer without a lookup.
 *
 * An item is allocated on the submitting thread and freed on the worker: each thread keeps a cache of
 * free slots; a cache that grows past AT_SLOT_CACHE gives a batch of AT_SLOT_BATCH back to a global
 * list, and an empty cache takes a batch from it (or carves new slots). The global lock is taken once
 * per batch, not per item. A thread's cache goes back to the global list when the thread ends. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

#include "shim.h"

#define AT_SLOT_RESERVE (1ull << 30) /* 16 Mi slots of address space; committed as used */
#define AT_SLOT_COMMIT (2u << 20)
#define AT_SLOT_BATCH 32u
#define AT_SLOT_CACHE (2 * AT_SLOT_BATCH)

typedef struct free_slot {
    struct free_slot *next;       /* within a cache or a batch */
    struct free_slot *next_batch; /* in the global list: the next batch (first slot of each) */
    unsigned n;                   /* in the global list: the slots in this batch */
} free_slot;

uintptr_t at_slot_lo = UINTPTR_MAX;
size_t at_slot_used; /* atomic: bytes carved so far (slots below lo+used may be live) */

static size_t slot_committed;
static size_t slot_reserve; /* bytes reserved at at_slot_lo */
static pthread_mutex_t slot_lock AT_FORK_DATA = PTHREAD_MUTEX_INITIALIZER; /* taken around fork */
static free_slot *slot_batches; /* under slot_lock: full batches */
static free_slot *slot_loose;   /* under slot_lock: short remainders of ended threads' caches */
static unsigned slot_nloose;
static bool slot_failed;        /* under slot_lock: no range (mmap refused) or the range is full */

#define tl_cache (*(free_slot **)&AT_PTLS.slot_cache) /* at_common.h */
#define tl_ncache (AT_PTLS.slot_ncache)

/* Under slot_lock: n new slots, linked, or NULL. */
static free_slot *carve_locked(unsigned n)
{
    if (slot_failed)
        return NULL;
    if (at_slot_lo == UINTPTR_MAX) {
        /* a reserved range counts against RLIMIT_AS too: a share of a finite limit at most, and
         * after the shim's start, out of the room it reserved then (asroom.c) */
        size_t len = AT_SLOT_RESERVE;
        int e = errno;
        void *p = at_as_map("work item slots", &len, AT_SLOT_COMMIT, 16, PROT_NONE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        errno = e;
        slot_reserve = len & ~(size_t)(AT_SLOT_COMMIT - 1);
        if (!p) {
            slot_failed = true;
            return NULL;
        }
        __atomic_store_n(&at_slot_lo, (uintptr_t)p, __ATOMIC_RELEASE);
    }
    size_t used = at_slot_used, need = used + (size_t)n * AT_SLOT_SIZE;
    if (need > slot_reserve) {
        slot_failed = true;
        return NULL;
    }
    if (need > slot_committed) {
        size_t grow = AT_SLOT_COMMIT;
        if (mprotect((void *)(at_slot_lo + slot_committed), grow, PROT_READ | PROT_WRITE) != 0) {
            slot_failed = true;
            return NULL;
        }
        slot_committed += grow;
    }
    free_slot *head = NULL;
    for (unsigned i = n; i-- > 0;) {
        free_slot *s = (free_slot *)(at_slot_lo + used + (size_t)i * AT_SLOT_SIZE);
        s->next = head;
        head = s;
    }
    __atomic_store_n(&at_slot_used, need, __ATOMIC_RELEASE);
    return head;
}

static void refill(void)
{
    int e = errno;
    pthread_mutex_lock(&slot_lock);
    free_slot *b = slot_batches;
    unsigned n = AT_SLOT_BATCH;
    if (b) {
        slot_batches = b->next_batch;
        n = b->n;
    } else if (slot_loose) {
        b = slot_loose;
        n = slot_nloose;
        slot_loose = NULL;
        slot_nloose = 0;
    } else {
        b = carve_locked(AT_SLOT_BATCH);
    }
    pthread_mutex_unlock(&slot_lock);
    errno = e;
    if (b) {
        tl_cache = b;
        tl_ncache = n;
    }
}

AT_HOT_FN void *at_slot_alloc(void)
{
    if (AT_UNLIKELY(!tl_cache))
        refill();
    free_slot *s = tl_cache;
    if (AT_UNLIKELY(!s))
        return NULL;
    tl_cache = s->next;
    tl_ncache--;
    return s;
}

static void put_batch(free_slot *first, unsigned n)
{
    int e = errno;
    pthread_mutex_lock(&slot_lock);
    first->n = n;
    first->next_batch = slot_batches;
    slot_batches = first;
    pthread_mutex_unlock(&slot_lock);
    errno = e;
}

/* Give the first AT_SLOT_BATCH slots of the cache (which holds at least that many) back. */
static void give_batch(void)
{
    free_slot *first = tl_cache, *last = first;
    for (unsigned i = 1; i < AT_SLOT_BATCH; i++)
        last = last->next;
    tl_cache = last->next;
    tl_ncache -= AT_SLOT_BATCH;
    last->next = NULL;
    put_batch(first, AT_SLOT_BATCH);
}

AT_HOT_FN void at_slot_free(void *p)
{
    free_slot *s = p;
    /* bytes 24-31 of a free slot are NULL: callbacks.c's scan for a pool's live items reads them
     * as the owner (pool_item.pc), whatever used the slot before */
    __atomic_store_n(&((void **)p)[3], NULL, __ATOMIC_RELAXED);
    s->next = tl_cache;
    tl_cache = s;
    if (AT_UNLIKELY(++tl_ncache > AT_SLOT_CACHE))
        give_batch();
}

/* The ending thread's cache goes back: full batches as they are, the rest onto the loose list (a
 * pool thread may end holding a few slots: a batch of a few each would make every later refill take
 * the lock for them alone). A thread that freed nothing takes no lock. */
void at_slots_thread_exit(void)
{
    while (tl_ncache >= AT_SLOT_BATCH)
        give_batch();
    if (!tl_cache)
        return;
    free_slot *first = tl_cache, *last = first;
    while (last->next)
        last = last->next;
    unsigned n = tl_ncache;
    tl_cache = NULL;
    tl_ncache = 0;
    int e = errno;
    pthread_mutex_lock(&slot_lock);
    last->next = slot_loose;
    slot_loose = first;
    slot_nloose += n;
    if (slot_nloose >= AT_SLOT_BATCH) { /* the loose list becomes one batch */
        slot_loose->n = slot_nloose;
        slot_loose->next_batch = slot_batches;
        slot_batches = slot_loose;
        slot_loose = NULL;
        slot_nloose = 0;
    }
    pthread_mutex_unlock(&slot_lock);
    errno = e;
}

/* A fork child must not inherit the lock held by a thread that does not exist there. */
AT_FORK_TEXT static void slots_prepare(void)
{
    at_fork_lock(&slot_lock);
}

AT_FORK_TEXT static void slots_parent(void)
{
    at_fork_unlock(&slot_lock);
}

AT_FORK_TEXT static void slots_child(void)
{
    at_mutex_fork_reset(&slot_lock);
}

__attribute__((constructor)) static void slots_init(void)
{
    pthread_atfork(slots_prepare, slots_parent, slots_child);
}
