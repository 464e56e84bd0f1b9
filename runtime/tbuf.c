/* tbuf.c: per-thread buffers and the hot path (at_event_write). Buffer memory is one mapping of
 * buffer_cap bytes cut into 64 KiB chunks on a lock-free free list (a tagged-index Treiber stack: a
 * CAS, async-signal-safe, no allocation). A thread claims a descriptor at its first event and chains
 * chunks as it fills them; records are written with plain stores and published with a release store,
 * so the flusher (the single consumer) never takes a lock either. When no chunk is free the event is
 * dropped and counted: the traced thread never waits. At thread exit a pthread key destructor marks
 * the descriptor retired; the flusher drains it and returns its chunks. */
#include <sys/platform/x86.h>
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdio.h>
#include "tbuf_hot.h"
#include "xstate.h"

#define AT_DEFAULT_CAP (256u << 20) /* virtual; chunks are reused LIFO so RSS follows the backlog */
#define AT_MAX_IPS 1024u           /* with the largest payload a record still fits one chunk */
_Static_assert(AT_MAX_PAYLOAD <= UINT16_MAX && AT_MAX_IPS <= UINT16_MAX, "at_rec's 16-bit fields");

at_pool at_pool_g;
/* glibc >= 2.35: where each thread's struct rseq lies from the thread pointer (weak: older ones) */
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));

/* a fork child writes it too (at_sess_active, at_sess_gen) */
at_rt_hot_t at_rt_hot AT_HOT_PAGE_RT __attribute__((aligned(64)));
_Static_assert(sizeof(at_rt_hot_t) <= 64, "the runtime's words every event reads: one line");
_Atomic uint64_t at_drops_noring AT_FORK_DATA; /* a fork child starts them again */
_Atomic uint64_t at_drops_retired AT_FORK_DATA;
_Atomic uint64_t at_drops_damaged AT_FORK_DATA;

AT_PTLS_FITS(at_thr, tbuf); /* tbuf_hot.h at_tbuf_thr */
static AT_TLS int32_t no_cpu = -1; /* at_tbuf_cpu_now's word when glibc registered no rseq */
#define thr at_tbuf_thr
#define seq_next at_tbuf_seq_next
#define clock_announced at_tbuf_clock_announced
#define cpu_now at_tbuf_cpu_now
#define prefetch_write at_tbuf_prefetch_write
#define count_drop at_tbuf_count_drop
#define next_chunk at_tbuf_next_chunk

static pthread_key_t thr_key AT_START_DATA;
static pthread_once_t key_once AT_START_DATA = PTHREAD_ONCE_INIT;

static void ring_hand_over(at_ring *r);

static void thr_exit(void *p)
{
    at_ring *r = p;
    if (r && thr.ring == r && thr.gen == atomic_load(&at_sess_gen)) {
        /* Its last event written: the next thread to start goes on in this ring (ring_hand_over).
         * Its last events dropped: the flusher must first list them in a sequence point under this
         * thread's id, which it does for a retired ring before recycling it. */
        if (thr.seq == thr.seq_written) {
            r->hand_ts = thr.last_ts;
            ring_hand_over(r);
        } else {
            atomic_store_explicit(&r->state, AT_RING_RETIRED, memory_order_release);
        }
        /* an event written after this (the exit(0) glibc's last thread makes, its atexit handlers)
         * comes in another ring, numbered from 1 as a new thread's: the file numbers it on from
         * this ring's last, as it does for a reused thread id */
        thr.seq = thr.seq_written = 0;
    }
    thr.ring = NULL; /* an event written after this (a later destructor) claims a new descriptor */
}

static void make_key(void) { pthread_key_create(&thr_key, thr_exit); }

/* The end of a thread that its creator's trampoline manages (at_thread_managed): what thr_exit does
 * for the others. */
bool at_trace_thread_writing(void)
{
    return at_tbuf_thr.busy != 0;
}

void at_tbuf_thread_exit(void)
{
    thr_exit(thr.ring);
}
void at_tbuf_init_key(void) { pthread_once(&key_once, make_key); }

/* A lock-free LIFO of indexes (free chunks, free rings): head is tag << 32 | (index + 1), 0 in the
 * index part when empty; next[i] links index i to the one below it. The tag changes at every
 * update, so a pop that read a stale link (another thread popped meanwhile) fails its CAS. */
static int32_t istack_pop(_Atomic uint64_t *head, const uint32_t *next)
{
    uint64_t h = atomic_load_explicit(head, memory_order_acquire);
    for (;;) {
        uint32_t idx = (uint32_t)h;
        if (idx == 0)
            return -1;
        uint64_t nh = ((h >> 32) + 1) << 32 | next[idx - 1];
        if (atomic_compare_exchange_weak_explicit(head, &h, nh, memory_order_acq_rel,
                                                  memory_order_acquire))
            return (int32_t)idx - 1;
    }
}

static void istack_push(_Atomic uint64_t *head, uint32_t *next, uint32_t i)
{
    uint64_t h = atomic_load_explicit(head, memory_order_relaxed);
    do {
        next[i] = (uint32_t)h;
    } while (!atomic_compare_exchange_weak_explicit(head, &h, ((h >> 32) + 1) << 32 | (i + 1),
                                                    memory_order_release, memory_order_relaxed));
}

/* Empty the stack, for a reset (nothing else touches it then). */
static void istack_clear(_Atomic uint64_t *head)
{
    uint64_t h = atomic_load_explicit(head, memory_order_relaxed);
    atomic_store_explicit(head, ((h >> 32) + 1) << 32, memory_order_release);
}

/* Indexes never handed out wait above a mark rather than on a stack, and are taken in increasing
 * order once the stack (of those given back) is empty: the lowest addresses first, as a stack filled
 * with all of them gave them. Filling the links of 4096 chunks and 4096 rings wrote 8 pages at every
 * process start, a page fault each (tens of microseconds each under shadow paging). */
static int32_t fresh_take(_Atomic uint32_t *fresh, uint32_t n)
{
    uint32_t f = atomic_load_explicit(fresh, memory_order_relaxed);
    while (f < n)
        if (atomic_compare_exchange_weak_explicit(fresh, &f, f + 1, memory_order_relaxed,
                                                  memory_order_relaxed))
            return (int32_t)f;
    return -1;
}

static int32_t chunk_pop(void)
{
    int32_t i = istack_pop(&at_pool_g.free_head, at_pool_g.free_next);
    if (i < 0)
        i = fresh_take(&at_pool_g.fresh, at_pool_g.nchunks);
    if (i >= 0)
        atomic_fetch_sub_explicit(&at_pool_g.nfree, 1, memory_order_relaxed);
    return i;
}

void at_chunk_free(int32_t i)
{
    istack_push(&at_pool_g.free_head, at_pool_g.free_next, (uint32_t)i);
    atomic_fetch_add_explicit(&at_pool_g.nfree, 1, memory_order_relaxed);
}

/* Chunks the flusher has just read wait here before writers get them again. A chunk freed and taken
 * at once (the free list is LIFO) still sits in the flusher's core's cache, and the writer's first
 * store to each line then has to fetch it from that core: with a Start+Stop written every ~40 ns that
 * doubled its cost (36 -> 150-200 ns per pair while the flusher drained on the other core; 113 with
 * both threads on one core). After enough newer chunks, its lines have left that core's L2. Only the
 * flusher (under at_flush_lock) retires chunks.
 *
 * How many wait follows the rate: as many as the flusher retired in its last pass (at most
 * COOL_MAX). Every chunk that waits is one more the writers cycle through, each of its 16 pages
 * touched for the first time once, and on a virtual machine with shadow paging a first touch cost
 * 15 us a page: with a fixed 32, tests/fixtures/queue_server went through 50-53 distinct chunks in
 * 40000 requests, following the rate 27-35. A writer that fills a chunk or two per flush does not
 * catch the flusher's lines anyway. */
#define COOL_MAX 32u
static int32_t cool[COOL_MAX];
static uint32_t cool_head;
static _Atomic uint32_t cool_n; /* read by writers (at_rings_filling): cooling is not backlog */
static uint32_t retired_pass, retired_prev; /* chunks retired in this flush pass and the last one */

static uint32_t cool_limit(void)
{
    uint32_t k = at_pool_g.nchunks / 8;
    uint32_t rate = retired_pass > retired_prev ? retired_pass : retired_prev;
    if (k > rate)
        k = rate;
    return k < COOL_MAX ? k : COOL_MAX;
}

void at_chunk_pass_begin(void)
{
    retired_prev = retired_pass;
    retired_pass = 0;
}

void at_chunk_retire(int32_t i)
{
    retired_pass++;
    uint32_t k = cool_limit();
    /* never let cooling starve the writers: below 2k free chunks, straight back */
    if (k == 0 || atomic_load_explicit(&at_pool_g.nfree, memory_order_relaxed) < (int32_t)(2 * k)) {
        at_chunk_free(i);
        return;
    }
    uint32_t n = atomic_load_explicit(&cool_n, memory_order_relaxed);
    while (n >= k) { /* the oldest go back first (also when the rate fell since they came) */
        at_chunk_free(cool[cool_head]);
        cool_head = (cool_head + 1) % COOL_MAX;
        n--;
    }
    cool[(cool_head + n) % COOL_MAX] = i;
    atomic_store_explicit(&cool_n, n + 1, memory_order_relaxed);
}

uint32_t at_chunks_cooling(void) { return atomic_load_explicit(&cool_n, memory_order_relaxed); }

void at_chunk_cool_drain(void)
{
    uint32_t n = atomic_load_explicit(&cool_n, memory_order_relaxed);
    while (n) {
        at_chunk_free(cool[cool_head]);
        cool_head = (cool_head + 1) % COOL_MAX;
        atomic_store_explicit(&cool_n, --n, memory_order_relaxed);
    }
}

/* Free rings, on an index stack like the chunks' (lowest index on top). A new thread pops one instead
 * of scanning the rings for a free one: exited threads' rings wait for the flusher at the low
 * indexes, and a thread-per-connection server paid a cache miss per waiting ring at every start. */
static uint32_t ring_next[AT_MAX_THREADS];
static _Atomic uint64_t ring_head;
static _Atomic uint32_t ring_fresh; /* rings from here up were never handed out */

static bool rings_denied; /* tests only: at_tbuf_test_deny_rings */

static at_ring *ring_pop(void)
{
    int32_t i = istack_pop(&ring_head, ring_next);
    if (i < 0)
        i = fresh_take(&ring_fresh, at_pool_g.nrings);
    return i < 0 ? NULL : &at_pool_g.rings[i];
}

static void ring_push(uint32_t i)
{
    istack_push(&ring_head, ring_next, i);
}

/* Rings handed from a thread that ended to the next thread that writes (a ring is on this stack or
 * on the free one, never both: they share ring_next). The new owner writes an owner record, after
 * which the flusher names the ring's records after it, and goes on in the chunk the last owner left.
 * Otherwise each connection of a thread-per-connection server took a ring, a cold 64 KiB chunk for
 * its three events and a recycle by the flusher, and a few dozen such chunks woke the flusher. */
static _Atomic uint64_t warm_head;

static void ring_hand_over(at_ring *r)
{
    r->warm_seen = 0;
    istack_push(&warm_head, ring_next, (uint32_t)(r - at_pool_g.rings));
}

static at_ring *ring_pop_warm(void)
{
    int32_t i = istack_pop(&warm_head, ring_next);
    return i < 0 ? NULL : &at_pool_g.rings[i];
}

/* The flusher, at every flush: a handed-over ring keeps its chunk only while new threads keep coming.
 * One that has waited since the last periodic flush (all of them at an explicit flush) retires: the
 * flusher drains it and its chunk goes back to the pool, so threads that ended long ago hold no
 * buffer a live thread could need. Whoever pops a ring owns it, so warm_seen needs no atomics. */
void at_rings_sweep_warm(bool all)
{
    uint32_t keep[64], nkeep = 0;
    at_ring *r;
    while ((r = ring_pop_warm()) != NULL) {
        if (all || r->warm_seen || nkeep == AT_ARRAY_LEN(keep)) {
            atomic_store_explicit(&r->state, AT_RING_RETIRED, memory_order_release);
        } else {
            r->warm_seen = 1;
            keep[nkeep++] = (uint32_t)(r - at_pool_g.rings);
        }
    }
    while (nkeep)
        istack_push(&warm_head, ring_next, keep[--nkeep]);
}

void at_ring_free(at_ring *r)
{
    ring_push((uint32_t)(r - at_pool_g.rings));
}

static void ring_clear(at_ring *r)
{
    atomic_store(&r->state, AT_RING_FREE);
    r->wchunk = r->rchunk = -1;
    atomic_store(&r->first, -1);
    r->last_seq = 0;
    r->rlast_ts = 0;
    atomic_store(&r->seq_pub, 0);
    atomic_store(&r->wpub, 0);
    atomic_store(&r->drops, 0);
    memset(r->stkref, 0, sizeof r->stkref); /* its definitions are lost with its records */
    at_ntw_stkmap_clear(r);
    r->inited = 1;
}

static void pool_reset(void)
{
    at_pool *p = &at_pool_g;
    cool_head = 0;
    retired_pass = retired_prev = 0;
    atomic_store(&cool_n, 0);
    /* every chunk fresh: the lowest addresses are used first */
    istack_clear(&p->free_head);
    atomic_store(&p->fresh, 0);
    atomic_store(&p->nfree, (int32_t)p->nchunks);
    /* Only the rings used so far hold anything: 4096 rings are 192 pages, and touching them all
     * cost every process start ~3 ms of page faults. A ring never used is set up by its first
     * owner (ring_acquire). */
    for (uint32_t i = 0, lim = atomic_load(&p->hiwater); i < lim; i++)
        ring_clear(&p->rings[i]);
    atomic_store(&warm_head, 0);
    istack_clear(&ring_head);
    atomic_store(&ring_fresh, 0);
}

int at_pool_init(size_t cap, char *err, size_t errlen)
{
    if (cap == 0)
        cap = AT_DEFAULT_CAP;
    if (cap < 2 * AT_CHUNK_SIZE) {
        snprintf(err, errlen, "buffer cap %zu is below the minimum of %u bytes", cap,
                 2 * AT_CHUNK_SIZE);
        return -1;
    }
    uint32_t n = (uint32_t)(cap / AT_CHUNK_SIZE);
    at_rt_hot.prefetchw = CPU_FEATURE_PRESENT(PREFETCHW); /* glibc's copy of the leaf: no CPUID trap */
    /* struct rseq's cpu_id (offset 4), or without rseq a word of this thread's that reads as no CPU
     * (the same offset in every thread: initial-exec TLS) */
    uintptr_t tp;
    __asm__("mov %%fs:0, %0" : "=r"(tp));
    at_rt_hot.rseq_cpu = &__rseq_size && &__rseq_offset && __rseq_size >= 8
                             ? (long)__rseq_offset + 4
                             : (long)((uintptr_t)&no_cpu - tp);
    /* a new session with the same cap reuses the mapping (shrunk to a limit or not: a new one
     * would come after main, beside the program's allocations) */
    static uint32_t asked;
    if (at_pool_g.map && asked == n) {
        pool_reset();
        return 0;
    }
    size_t ring_bytes = (sizeof(at_ring) * AT_MAX_THREADS + sizeof(uint32_t) * n + 4095)
                        & ~(size_t)4095;
    size_t want = ring_bytes + (size_t)n * AT_CHUNK_SIZE, len = want;
    /* under a finite address-space limit an eighth of it at most (asroom.c): events beyond what
     * fits are dropped and counted */
    void *m = at_as_map("buffers", &len, ring_bytes + 2 * (size_t)AT_CHUNK_SIZE, 8,
                        PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (!m) {
        snprintf(err, errlen, "cannot map %zu bytes of buffers: %s", want, strerror(errno));
        return -1;
    }
    asked = n;
    n = (uint32_t)((len - ring_bytes) / AT_CHUNK_SIZE);
    /* The rings and chunks are not the business of a fork child, which starts on buffers of its own
     * (pool_reset_child): wiped at the fork, they are no page of the parent's that the child
     * shares, so the parent's next events take no copy-on-write fault, and fork copies no page
     * table of them. The free-chunk links stay (the child goes on with the parent's free chunks). */
    size_t ring_only = sizeof(at_ring) * AT_MAX_THREADS & ~(size_t)4095;
    bool wiped = madvise(m, ring_only, MADV_WIPEONFORK) == 0 &&
                 madvise((uint8_t *)m + ring_bytes, (size_t)n * AT_CHUNK_SIZE, MADV_WIPEONFORK) == 0;
    /* Past the first chunks, chunks on huge pages where the kernel gives them (THP "madvise" or
     * "always"): a program that writes a lot cycles through tens of chunks, whose 4 KiB pages each
     * took a TLB miss every ~36 hooked calls (a page walk, two-dimensional under a hypervisor): the
     * sustained hooked call measured 2-3 ns less with them. A program that writes little stays in
     * the first chunks (taken lowest first, at least 256 KiB before the first huge page), on small
     * pages, so it is not made to hold 2 MiB. */
    uintptr_t hp_lo = ((uintptr_t)m + ring_bytes + (256u << 10) + (2u << 20) - 1) & ~(uintptr_t)((2u << 20) - 1);
    uintptr_t hp_hi = ((uintptr_t)m + ring_bytes + (size_t)n * AT_CHUNK_SIZE) & ~(uintptr_t)((2u << 20) - 1);
    if (hp_hi > hp_lo)
        madvise((void *)hp_lo, hp_hi - hp_lo, MADV_HUGEPAGE);
    /* an older mapping of another size stays mapped: a thread may still be writing into it */
    at_pool_g.wiped = wiped;
    at_pool_g.rings = m;
    at_pool_g.nrings = AT_MAX_THREADS;
    at_pool_g.free_next = (uint32_t *)((uint8_t *)m + sizeof(at_ring) * AT_MAX_THREADS);
    at_pool_g.chunks = (uint8_t *)m + ring_bytes;
    at_rt_hot.chunks = at_pool_g.chunks;
    at_pool_g.nchunks = n;
    at_pool_g.map = m;
    at_pool_g.map_len = len;
    pool_reset();
    return 0;
}

/* In a fork child, the parent's free chunks and free rings stay free: each free stack (and its mark of
 * fresh ones) is whole at any instant (one CAS per change; the flusher, which frees rings and chunks,
 * is between passes while fork holds at_flush_lock). What the parent's threads held (their rings,
 * the chunks chained in them, the cooling chunks) holds the parent's events: those rings are cleared
 * so that no flusher here reads them, and their chunks stay unused. When that is more than half the
 * pool, the whole pool is reset instead. This runs at the child's first event that counts. */
static void pool_reset_child(void)
{
    at_pool *p = &at_pool_g;
    uint32_t lim = atomic_load(&p->hiwater), held = 0;
    /* wiped rings read as free and never set up (ring_acquire sets one up): none to clear, and the
     * parent's are lost to the child as its chunks are */
    if (p->wiped)
        lim = 0;
    for (uint32_t i = 0; i < lim; i++)
        held += atomic_load_explicit(&p->rings[i].state, memory_order_relaxed) != AT_RING_FREE;
    if (atomic_load(&p->nfree) < (int32_t)(p->nchunks / 2) || held > p->nrings / 2) {
        pool_reset();
        return;
    }
    cool_head = 0;
    retired_pass = retired_prev = 0;
    atomic_store(&cool_n, 0);
    for (uint32_t i = 0; i < lim; i++)
        if (atomic_load_explicit(&p->rings[i].state, memory_order_relaxed) != AT_RING_FREE)
            ring_clear(&p->rings[i]);
    atomic_store(&warm_head, 0);
}

void at_pool_reset_child(void)
{
    pool_reset_child();
}

/* ---- stacks by reference (trace.h) ----
 * A server takes the same stack at the same call site again and again: a hooked call's stack from
 * a kept walk is written in full once, as a definition of one of its ring's tags, and then as one
 * word naming the tag and the definition's number; the flusher (ntw_block.c) takes the frames from
 * the definition. Numbers are the process's, one per definition whatever its ring: a reference
 * whose definition never reached the ring's flusher side (a damaged stretch, a ring cleared, a
 * record that went to another ring when a session changed between the stack and its write) names
 * none the flusher holds there, and its event goes without a stack, never with another one's. The thread refers to a definition only
 * once its record is in the ring (put_record says so: a definition whose event was dropped, or
 * never written, is not referred to), and while its ring and its session are the definition's. The
 * table is the ring's, on its page, and goes with it to a thread that takes the ring over (the
 * flusher meets the definitions in the ring's order, whoever wrote them). Should the flusher meet
 * a reference it holds no definition for (a damaged stretch skipped), it voids every definition
 * of the ring (stkref_epoch), and the next stacks are written in full again. */
_Static_assert(sizeof(((at_ring *)0)->stkref) / sizeof(struct at_stkref_ent) == AT_STKREF_TAGS,
               "a ring has a table entry per tag");
static _Atomic uint32_t stkref_gen; /* definitions made so far, by every thread */

static inline uint32_t stkref_tag(uint64_t walk, uintptr_t leaf)
{
    return (uint32_t)(((walk ^ leaf) * 0x9E3779B97F4A7C15ull) >> 61) & (AT_STKREF_TAGS - 1);
}

AT_PATH_STACK uint64_t at_stkref_use(uint64_t walk, uintptr_t leaf, uint32_t depth)
{
    const at_ring *r = thr.ring;
    if (!r)
        return 0;
    uint32_t tag = stkref_tag(walk, leaf);
    const struct at_stkref_ent *e = &r->stkref[tag];
    /* a signal handler that defines a stack in the middle of these reads gives the entry a number
     * of its own: the number read before them and after them match only if none did */
    uint32_t gen = e->gen;
    atomic_signal_fence(memory_order_seq_cst);
    if (r->stkref_busy || e->walk != walk || e->leaf != leaf || e->depth != depth || !e->written
        || e->sess != thr.gen || thr.gen != atomic_load_explicit(&at_sess_gen, memory_order_relaxed)
        || e->epoch != atomic_load_explicit(&r->stkref_epoch, memory_order_relaxed))
        return 0;
    atomic_signal_fence(memory_order_seq_cst);
    if (e->gen != gen)
        return 0;
    return AT_STKREF_USE | (uint64_t)tag << 32 | gen;
}

AT_PATH_STACK uint64_t at_stkref_def(uint64_t walk, uintptr_t leaf, uint32_t depth, uint32_t nframes)
{
    at_ring *r = thr.ring;
    if (!walk || !r || r->stkref_busy || nframes == 0 || nframes > AT_STKREF_MAX
        || thr.gen != atomic_load_explicit(&at_sess_gen, memory_order_relaxed))
        return 0;
    r->stkref_busy = 1;
    atomic_signal_fence(memory_order_seq_cst);
    uint32_t tag = stkref_tag(walk, leaf);
    /* one atomic for a number no other definition has (another ring's, a signal handler's) */
    uint32_t gen = atomic_fetch_add_explicit(&stkref_gen, 1, memory_order_relaxed) + 1;
    if (gen == 0) /* 0 names nothing (the flusher's empty entries) */
        gen = atomic_fetch_add_explicit(&stkref_gen, 1, memory_order_relaxed) + 1;
    r->stkref[tag] = (struct at_stkref_ent){walk, leaf, depth, gen, thr.gen, 0,
                                            atomic_load_explicit(&r->stkref_epoch,
                                                                 memory_order_relaxed)};
    atomic_signal_fence(memory_order_seq_cst);
    r->stkref_busy = 0;
    return AT_STKREF_DEF | (uint64_t)tag << 32 | gen;
}

/* A definition's record written into r: the thread may refer to it from now on */
static AT_NOINLINE void stkref_written(at_ring *r, uint64_t marker)
{
    struct at_stkref_ent *e = &r->stkref[(marker >> 32) & (AT_STKREF_TAGS - 1)];
    if (!r->stkref_busy && e->gen == (uint32_t)marker)
        e->written = 1;
}

AT_FORK_TEXT void at_tbuf_fork_child_thread(void)
{
    thr.ring = NULL;
    thr.tid = 0; /* the child's only thread has a new tid */
    at_tid_cache = 0;
    thr.seq = thr.seq_written = 0;
    thr.busy = 0;
}

uint64_t at_tbuf_total_drops(void)
{
    uint64_t d = atomic_load(&at_drops_noring) + atomic_load(&at_drops_retired) +
                 atomic_load(&at_drops_damaged);
    for (uint32_t i = 0, lim = at_ring_limit(); i < lim; i++)
        d += atomic_load_explicit(&at_pool_g.rings[i].drops, memory_order_relaxed);
    return d;
}


/* Slow path of the first event of a thread (or after a new session/fork). A ring an ended thread
 * handed over comes first: this thread's owner record goes into it (the flusher then names what
 * follows after this thread) and its timestamps continue from the last owner's, so the ring's
 * records stay in time order for the merge. */
AT_HOT_FN static AT_NOINLINE at_ring *ring_acquire(uint32_t gen)
{
    if (AT_UNLIKELY(rings_denied))
        return NULL;
    if (thr.tid == 0)
        thr.tid = (uint64_t)at_tid();
    at_ring *r = ring_pop_warm();
    if (r) {
        atomic_store_explicit(&r->wait_since, 0, memory_order_relaxed); /* a dead owner's */
        if (thr.last_ts < r->hand_ts)
            thr.last_ts = r->hand_ts;
        /* r->tid stays the first owner's: the flusher names the ring's first records after it if
         * it has not looked at the ring yet; later owners are named by their owner records */
        /* the last owner's count must not be read as this thread's: reset before the owner record
         * is published (the release store of the ring's publication orders it) */
        atomic_store_explicit(&r->seq_pub, 0, memory_order_relaxed);
        uint32_t size = (uint32_t)sizeof(at_rec) + 8;
        if (r->wpos + size > AT_CHUNK_SIZE && !next_chunk(r)) {
            /* no room for the owner record: this ring cannot be this thread's */
            atomic_store_explicit(&r->state, AT_RING_RETIRED, memory_order_release);
            r = NULL;
        } else {
            at_chunk *c = at_wchunk(r->wchunk);
            at_rec *rec = (at_rec *)((uint8_t *)c + r->wpos);
            /* seq 1: another thread than the ring's last owner, even if the kernel gave it the
             * same id (the flusher tells readers the numbers start again) */
            *rec = (at_rec){.size = size, .type_index = AT_REC_OWNER_TYPE, .ts = thr.last_ts,
                            .seq = 1, .payload_len = 8};
            memcpy(rec + 1, &thr.tid, 8);
            r->wpos += size;
            at_ring_publish(r, r->wchunk, r->wpos);
        }
    }
    if (!r) {
        r = ring_pop();
        if (!r)
            return NULL;
        uint32_t i = (uint32_t)(r - at_pool_g.rings);
        if (AT_UNLIKELY(!r->inited))
            ring_clear(r); /* before the flusher can see it (hiwater, state below) */
        atomic_store_explicit(&r->state, AT_RING_USED, memory_order_relaxed);
        uint32_t hw = atomic_load_explicit(&at_pool_g.hiwater, memory_order_relaxed);
        while (hw < i + 1 && !atomic_compare_exchange_weak(&at_pool_g.hiwater, &hw, i + 1))
            ;
        r->tid = thr.tid;
        r->wchunk = -1;
        r->wpos = AT_CHUNK_SIZE;
        /* a ring used before may still publish its last owner's chunk, which may be handed out
         * again: nothing before this owner's first chunk is linked (release) */
        atomic_store_explicit(&r->wpub, 0, memory_order_relaxed);
    }
    thr.ring = r;
    thr.gen = gen;
    /* at_rt_hot.sess_word in the running session (tbuf_hot.h) */
    thr.live = 1 | (uint64_t)gen << 32;
    AT_INTERNAL_BEGIN();
    if (!at_thread_managed) /* otherwise at_tbuf_thread_exit is called at the thread's end */
        at_xs_setspecific(thr_key, r); /* keys < 32 live in the thread descriptor */
    AT_INTERNAL_END();
    return r;
}

/* tbuf_hot.h */
AT_HOT_FN AT_NOINLINE bool at_tbuf_next_chunk(at_ring *r)
{
    int32_t n = chunk_pop();
    if (n < 0)
        return false;
    at_chunk *c = at_wchunk(n);
    atomic_store_explicit(&c->used, AT_CHUNK_HDR, memory_order_relaxed);
    atomic_store_explicit(&c->next, -1, memory_order_relaxed);
    if (r->wchunk >= 0) {
        /* the chunk left: its count final (the one-pass writer published only on the ring), then
         * the link that tells the reader so */
        at_chunk *old = at_wchunk(r->wchunk);
        atomic_store_explicit(&old->used, r->wpos, memory_order_release);
        atomic_store_explicit(&old->next, n, memory_order_release);
    }
    else
        atomic_store_explicit(&r->first, n, memory_order_release);
    r->wchunk = n;
    r->wpos = AT_CHUNK_HDR;
    if (atomic_load_explicit(&at_flusher_armed, memory_order_relaxed) && at_rings_filling())
        at_flusher_kick();
    /* More than half the buffers wait for the flusher: writers flat out on every core would leave it
     * no CPU and their events would be dropped when the rest fills. Give it the CPU, once per chunk
     * taken (64 KiB of events), never waiting for it. */
    if (AT_UNLIKELY(atomic_load_explicit(&at_pool_g.nfree, memory_order_relaxed) <
                    (int32_t)at_pool_g.nchunks / 2))
        sched_yield();
    return true;
}

static inline __attribute__((always_inline)) int write_event(uint64_t ts, bool live, const at_event_type *t,
                              const at_guid *activity, const at_guid *related, const void *payload,
                              uint32_t payload_len, const uintptr_t *ips, uint32_t nips, int stamp,
                              bool head, uint64_t head8);

void at_event_lost(void)
{
    seq_next();
    atomic_fetch_add_explicit(&at_drops_noring, 1, memory_order_relaxed);
}

AT_HOT_FN int at_event_write_ts(uint64_t ts, const at_event_type *t, const at_guid *activity,
                      const at_guid *related, const void *payload, uint32_t payload_len,
                      const uintptr_t *ips, uint32_t nips)
{
    if (AT_UNLIKELY(thr.busy)) {
        /* A signal handler interrupted this thread's own write: writing now would interleave the
         * two records, so this one is dropped (counted; its sequence number makes a visible gap). */
        seq_next();
        atomic_fetch_add_explicit(&at_drops_noring, 1, memory_order_relaxed);
        return -1;
    }
    thr.busy = 1;
    atomic_signal_fence(memory_order_seq_cst);
    int rc = write_event(ts, false, t, activity, related, payload, payload_len, ips, nips, -1, false, 0);
    /* after the record is published (the SP logic relies on that order); thr.seq also covers
     * handler events dropped while this write was in progress */
    if (AT_LIKELY(thr.ring != NULL))
        atomic_store_explicit(&thr.ring->seq_pub, thr.seq, memory_order_release);
    atomic_signal_fence(memory_order_seq_cst);
    thr.busy = 0;
    return rc;
}

/* One event's record into r at its write position (in a new chunk when it does not fit there). */
static inline __attribute__((always_inline)) int put_record(at_ring *r, uint64_t ts, uint32_t seq,
                                                            const at_event_type *t,
                                                            const at_guid *activity,
                                                            const at_guid *related,
                                                            const void *payload,
                                                            uint32_t payload_len,
                                                            const uintptr_t *ips, uint32_t nips,
                                                            int stamp, bool head, uint64_t head8)
{
    bool has_act = activity && !at_guid_is_zero(activity);
    bool has_rel = related && !at_guid_is_zero(related);
    if (AT_UNLIKELY(payload_len > AT_MAX_PAYLOAD - (head ? 8u : 0u) || nips > AT_MAX_IPS || (payload_len && !payload)
                    || (nips && !ips))) {
        count_drop(r, seq);
        return -1;
    }
    uint32_t plen = payload_len + (head ? 8 : 0); /* the record's payload: head8, then payload */
    uint32_t size = (uint32_t)(sizeof(at_rec) + (has_act ? 16 : 0) + (has_rel ? 16 : 0)
                               + (size_t)nips * 8 + plen + 7) & ~7u;
    if (AT_UNLIKELY(r->wpos + size > AT_CHUNK_SIZE) && !next_chunk(r)) {
        count_drop(r, seq);
        return -1;
    }
    at_chunk *c = at_wchunk(r->wchunk);
    uint8_t *p = (uint8_t *)c + r->wpos;
    at_rec *rec = (at_rec *)p;
    rec->size = size;
    rec->type_index = (uint16_t)t->index;
    /* per-thread timestamps never go backwards in the file (a caller's ts or a clock read that a
     * signal handler's event overtook) */
    if (AT_UNLIKELY(ts < thr.last_ts))
        ts = thr.last_ts;
    thr.last_ts = ts;
    rec->ts = ts;
    rec->seq = seq;
    rec->payload_len = (uint16_t)plen;
    rec->nips = (uint16_t)nips;
    rec->flags = (uint16_t)((has_act ? AT_REC_ACT : 0) | (has_rel ? AT_REC_REL : 0) | cpu_now() << AT_REC_CPU_SHIFT);
    p += sizeof(at_rec);
    if (has_act) {
        memcpy(p, activity, 16);
        p += 16;
    }
    if (has_rel) {
        memcpy(p, related, 16);
        p += 16;
    }
    if (nips) {
        if (AT_UNLIKELY(ips[0] >= AT_STKREF_DEF && ips[0] < AT_STKREF_USE))
            stkref_written(r, ips[0]);
        at_copy_words((uint64_t *)p, (const uint64_t *)ips, nips); /* no libc memcpy: xstate.h */
        p += (size_t)nips * 8;
    }
    if (head) {
        memcpy(p, &head8, 8);
        p += 8;
    }
    if (payload_len)
        at_copy_small(p, payload, payload_len);
    /* the event's own timestamp into its payload (a Send's TransferId): the one it was given */
    if (stamp >= 0 && (uint32_t)stamp + 8 <= payload_len)
        memcpy(p + stamp, &ts, 8);
    r->wpos += size;
    at_ring_publish(r, r->wchunk, r->wpos); /* the chunk's own count: when it is left */
    thr.seq_written = seq;
    /* the lines a few records ahead (tbuf_hot.h), two per record: a record of a stack or a long
     * payload advances by more than a line */
    if (AT_LIKELY(r->wpos + AT_PREFETCH_AHEAD + 64 <= AT_CHUNK_SIZE)) {
        const uint8_t *nx = (const uint8_t *)c + r->wpos;
        prefetch_write(nx + AT_PREFETCH_AHEAD - 64);
        prefetch_write(nx + AT_PREFETCH_AHEAD);
    }
    return 0;
}

static inline __attribute__((always_inline)) int write_event(uint64_t ts, bool live, const at_event_type *t,
                              const at_guid *activity, const at_guid *related, const void *payload,
                              uint32_t payload_len, const uintptr_t *ips, uint32_t nips, int stamp,
                              bool head, uint64_t head8)
{
    uint32_t seq = seq_next();
    at_ring *r = thr.ring;
    uint32_t gen = atomic_load_explicit(&at_sess_gen, memory_order_relaxed);
    int active = atomic_load_explicit(&at_sess_active, memory_order_relaxed);
    bool gated = false;
    if (AT_UNLIKELY(active != 1 || !t)) {
        if (!active || !t)
            goto drop_noring;
        /* a fork child's (or a lazily started image's) first events: its file is not open yet */
        uint32_t taken = thr.seq, gen0 = thr.gen;
        if (!at_trace_child_gate())
            return -1; /* quiet, and the child has recorded nothing: it will have no file */
        /* the gate may have put ProcessForked in this thread's buffer (numbering it anew, or after
         * the thread's own): the numbers go on from it. Only then: the events other threads write
         * while one opens the file come by here too */
        if (thr.gen != gen0 || thr.seq != taken)
            seq = seq_next();
        r = thr.ring;
        gen = atomic_load_explicit(&at_sess_gen, memory_order_relaxed);
        gated = true;
    }
    if (AT_UNLIKELY(!r || thr.gen != gen)) {
        if (thr.gen != gen) {
            /* a new session (its files start from a baseline of their own): the thread's numbers
             * start again at 1, or its first event would count the earlier ones as lost */
            thr.seq = seq = 1;
            thr.seq_written = 0;
            thr.gen = gen; /* once: a drop for want of a buffer keeps counting on */
            /* the earlier session's ring is not this thread's any more (another thread may hold it
             * now): if no ring can be had, none is written to */
            thr.ring = NULL;
        }
        r = ring_acquire(gen);
        if (!r)
            goto drop_noring;
        /* a clock read made before this ring existed was announced nowhere: read it again */
        if (live)
            ts = clock_announced(r, ts, false);
    } else if (AT_UNLIKELY(gated) && live) {
        ts = clock_announced(r, ts, false); /* this ring came with the gate's ProcessForked */
    }
    return put_record(r, ts, seq, t, activity, related, payload, payload_len, ips, nips, stamp, head,
                      head8);

drop_noring:
    atomic_fetch_add_explicit(&at_drops_noring, 1, memory_order_relaxed);
    return -1;
}

void at_tbuf_put_saved(const at_event_type *t, const at_guid *activity, const void *payload,
                       uint32_t len, uint64_t ts)
{
    uint32_t gen = atomic_load_explicit(&at_sess_gen, memory_order_relaxed);
    if (thr.gen != gen) {
        thr.ring = NULL;
        thr.seq = thr.seq_written = 0;
        thr.gen = gen;
    }
    uint32_t seq = seq_next();
    at_ring *r = thr.ring ? thr.ring : ring_acquire(gen);
    if (!r) {
        atomic_fetch_add_explicit(&at_drops_noring, 1, memory_order_relaxed);
        return;
    }
    put_record(r, ts, seq, t, activity, NULL, payload, len, NULL, 0, -1, false, 0);
    atomic_store_explicit(&r->seq_pub, thr.seq, memory_order_release);
}

/* The clock read, the record and its publication: one body, inlined into each entry point below (a
 * hooked call writes two events; the layers of calls with stack-passed arguments cost more than
 * the record). */
static inline __attribute__((always_inline)) int write_live(uint64_t floor, bool ordered,
                                                            const at_event_type *t,
                                                            const at_guid *activity,
                                                            const at_guid *related,
                                                            const void *payload,
                                                            uint32_t payload_len,
                                                            const uintptr_t *ips, uint32_t nips,
                                                            int stamp, bool head, uint64_t head8)
{
    at_ring *r = thr.ring;
    if (AT_UNLIKELY(r && thr.gen != atomic_load_explicit(&at_sess_gen, memory_order_relaxed)))
        r = NULL;
    /* a signal handler's event inside this one's announcement puts the outer one back when done */
    uint64_t outer = r ? atomic_load_explicit(&r->pending, memory_order_relaxed) : 0;
    uint64_t ts = clock_announced(r, floor, ordered);
    int rc = -1;
    if (AT_UNLIKELY(thr.busy)) {
        /* A signal handler interrupted this thread's own write: writing now would interleave the
         * two records, so this one is dropped (counted; its sequence number makes a visible gap). */
        seq_next();
        atomic_fetch_add_explicit(&at_drops_noring, 1, memory_order_relaxed);
    } else {
        thr.busy = 1;
        atomic_signal_fence(memory_order_seq_cst);
        rc = write_event(ts, true, t, activity, related, payload, payload_len, ips, nips, stamp, head,
                         head8);
        if (AT_LIKELY(thr.ring != NULL))
            atomic_store_explicit(&thr.ring->seq_pub, thr.seq, memory_order_release);
        atomic_signal_fence(memory_order_seq_cst);
        thr.busy = 0;
    }
    if (AT_LIKELY(thr.ring != NULL))
        atomic_store_explicit(&thr.ring->pending, thr.ring == r ? outer : 0, memory_order_release);
    return rc;
}


AT_HOT_FN int at_event_write_now(uint64_t floor, bool ordered, const at_event_type *t,
                                 const at_guid *activity, const at_guid *related,
                                 const void *payload, uint32_t payload_len, const uintptr_t *ips,
                                 uint32_t nips)
{
    return write_live(floor, ordered, t, activity, related, payload, payload_len, ips, nips, -1,
                      false, 0);
}

AT_HOT_FN int at_event_write_stamped(uint64_t floor, bool ordered, const at_event_type *t,
                                     const at_guid *activity, const at_guid *related,
                                     const void *payload, uint32_t payload_len, int stamp)
{
    return write_live(floor, ordered, t, activity, related, payload, payload_len, NULL, 0, stamp,
                      false, 0);
}

AT_HOT_FN int at_event_write_stamped_ips(uint64_t floor, bool ordered, const at_event_type *t,
                                         const at_guid *activity, const at_guid *related,
                                         const void *payload, uint32_t payload_len,
                                         const uintptr_t *ips, uint32_t nips, int stamp)
{
    return write_live(floor, ordered, t, activity, related, payload, payload_len, ips, nips, stamp,
                      false, 0);
}

/* Out of line: at_event_write_onepass keeps only the one-pass record's code beside the hooked
 * call's path, and takes this general way otherwise */
AT_NOINLINE AT_PATH_STACK int at_event_write(const at_event_type *t, const at_guid *activity,
                                         const at_guid *related, const void *payload,
                                         uint32_t payload_len, const uintptr_t *ips, uint32_t nips)
{
    return write_live(0, false, t, activity, related, payload, payload_len, ips, nips, -1, false, 0);
}

/* A stack written before (one word, trace.h) in one pass too, beside the stack's path rather than
 * the one-pass record's (a definition takes the general writer, which says when its record is in
 * the ring). */
static AT_NOINLINE AT_PATH_STACK int onepass_ref(const at_event_type *t, const at_guid *activity,
                                                 const void *payload, uint32_t payload_len,
                                                 const uintptr_t *ips)
{
    bool has_act = activity && !at_guid_is_zero(activity);
    if (at_tbuf_try_put(t, has_act ? activity : NULL, has_act, NULL, false, false, 0, payload,
                        payload_len, ips[0]))
        return 0;
    return at_event_write(t, activity, NULL, payload, payload_len, ips, 1);
}

/* at_event_write, trying the one-pass record first (the activity engine's events: a hooked call's
 * with its fields). Its busy window covers the clock read too: a signal handler's event that lands
 * in it is dropped (counted) like one inside a hooked call's Start or Stop. */
AT_PATH_EVENT int at_event_write_onepass(const at_event_type *t, const at_guid *activity,
                                         const at_guid *related, const void *payload,
                                         uint32_t payload_len, const uintptr_t *ips, uint32_t nips)
{
    /* without a stack or a related id: in one pass, with the shape made constant each way */
    if (!nips && !related) {
        bool put = AT_LIKELY(activity && !at_guid_is_zero(activity)) /* a hook's, in its request */
                       ? at_tbuf_try_put(t, activity, true, NULL, false, false, 0, payload,
                                         payload_len, 0)
                       : at_tbuf_try_put(t, NULL, false, NULL, false, false, 0, payload,
                                         payload_len, 0);
        if (AT_LIKELY(put))
            return 0;
    } else if (nips == 1 && ips[0] >= AT_STKREF_USE && !related) {
        return onepass_ref(t, activity, payload, payload_len, ips);
    }
    return at_event_write(t, activity, related, payload, payload_len, ips, nips);
}

AT_HOT_FN int at_event_write_head(const at_event_type *t, const at_guid *activity,
                                  const at_guid *related, uint64_t head8, const void *payload,
                                  uint32_t payload_len, const uintptr_t *ips, uint32_t nips)
{
    return write_live(0, false, t, activity, related, payload, payload_len, ips, nips, -1, true,
                      head8);
}

/* tbuf_hot.h: an activity event the one-pass record does not take, a call of its own six arguments
 * (a jump, nothing kept around it) */
AT_NOINLINE int at_tbuf_write_act_general(const at_event_type *t, const at_guid *activity,
                                          const at_guid *related, uint64_t head8,
                                          const void *payload, uint32_t payload_len)
{
    return at_event_write_head(t, activity, related, head8, payload, payload_len, NULL, 0);
}

AT_HOT_FN int at_event_write_act(const at_event_type *t, const at_guid *activity,
                                 const at_guid *related, uint64_t head8, const void *payload,
                                 uint32_t payload_len)
{
    return at_tbuf_put_act(t, activity, activity && !at_guid_is_zero(activity), related,
                           related && !at_guid_is_zero(related), head8, payload, payload_len);
}

uint64_t at_event_last_ts(void)
{
    return thr.last_ts;
}


/* Tests only: every ring taken from now on is refused (as when all are held), or no longer. */
void at_tbuf_test_deny_rings(bool deny)
{
    rings_denied = deny;
}

/* Tests only: place the calling thread's sequence counter (e.g. just before the 2^32 wrap) in the
 * current session (its first event there would otherwise start the numbers again at 1). The reader
 * of the buffers skips a record whose number does not follow (a second writer's, flusher.c): an
 * owner record (the same thread) tells it the numbers start again. */
void at_tbuf_test_set_seq(uint32_t seq)
{
    uint32_t gen = atomic_load(&at_sess_gen);
    if (thr.gen != gen) {
        thr.ring = NULL;
        thr.gen = gen;
        thr.seq_written = 0;
    }
    thr.seq = seq;
    at_ring *r = thr.ring;
    uint32_t size = (uint32_t)sizeof(at_rec) + 8;
    if (!r || (r->wpos + size > AT_CHUNK_SIZE && !next_chunk(r)))
        return;
    at_chunk *c = at_wchunk(r->wchunk);
    at_rec *rec = (at_rec *)((uint8_t *)c + r->wpos);
    *rec = (at_rec){.size = size, .type_index = AT_REC_OWNER_TYPE, .ts = thr.last_ts, .payload_len = 8};
    memcpy(rec + 1, &thr.tid, 8);
    r->wpos += size;
    at_ring_publish(r, r->wchunk, r->wpos);
}

/* ---- the flusher's horizon ----
 * A writer announces its clock read on its ring before making it (clock_announced). The flusher takes
 * its cut-off time, then runs a process-wide barrier (membarrier: every thread of the process passes a
 * full memory barrier, or is not running): a writer whose announcement it then does not see had not
 * made it before the barrier, so its clock read comes after the cut-off. Announcements it sees lower
 * the horizon to their clock read. The writer itself pays two plain stores. Where membarrier is not
 * available (an old kernel, a seccomp filter) the flusher holds back a margin instead. */
static bool barrier_ok;

void at_rings_barrier_init(void)
{
    barrier_ok = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

bool at_rings_barrier(void)
{
    int saved = errno;
    if (barrier_ok && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
        barrier_ok = false;
    errno = saved;
    return barrier_ok;
}

/* The ring of the thread a writer's flush is done for (an exit's, a fatal signal's): that thread
 * is not in a write of its own, or never will finish it, so its ring holds nothing back, as the
 * calling thread's own ring does not when it flushes itself. */
static _Atomic(at_ring *) rings_skip;

void at_rings_skip_mine(bool on)
{
    atomic_store(&rings_skip, on ? thr.ring : NULL);
}

/* Waits (tbuf_hot.h at_tbuf_wait_begin). The flusher marks a wait it stopped holding for
 * (at_rings_horizon: AT_WAIT_LATE with the time it may write up to) with a compare-and-swap, and
 * reads the ring's pending word after it; here the pending word is announced first and the mark
 * taken by an exchange after it. So either the mark is seen here and the Suspend goes after it, or
 * the flusher sees the announcement and waits for the events. */
uint64_t at_tbuf_wait_end(at_ring *r, uint64_t t0, uint64_t t1, uint64_t *outer)
{
    *outer = 0;
    if (!r || r != thr.ring)
        return t1; /* announced nowhere it still holds: the one time known to be safe, its end */
    *outer = atomic_load_explicit(&r->pending, memory_order_relaxed);
    atomic_store_explicit(&r->pending, AT_PENDING_CLOCK, memory_order_relaxed);
    uint64_t w = atomic_exchange_explicit(&r->wait_since, 0, memory_order_seq_cst);
    uint64_t ts = t0;
    if ((w & AT_WAIT_LATE) && w != AT_WAIT_ANNOUNCE && (w & ~AT_WAIT_LATE) > ts)
        ts = w & ~AT_WAIT_LATE;
    if (ts < thr.last_ts) /* a signal handler's event during the wait */
        ts = thr.last_ts;
    atomic_store_explicit(&r->pending, ts, memory_order_relaxed);
    return ts;
}

void at_tbuf_wait_done(at_ring *r, uint64_t outer)
{
    if (r && r == thr.ring)
        atomic_store_explicit(&r->pending, outer, memory_order_release);
}

/* A ring's wait for the horizon (at_tbuf_wait_begin): *h lowered to a young wait's start; an old
 * one marked so that its Suspend goes after what this pass writes (mark: now, never older than the
 * horizon). false: its clock read is unknown (nothing new is safe this pass). */
static bool wait_horizon(at_ring *r, uint64_t now, uint64_t hold, uint64_t *h)
{
    uint64_t w = atomic_load_explicit(&r->wait_since, memory_order_acquire);
    for (unsigned k = 0; k < 64; k++) {
        if (w == AT_WAIT_ANNOUNCE) { /* between announcing and reading the clock */
            if (k < 48)
                __builtin_ia32_pause();
            else
                sched_yield();
            w = atomic_load_explicit(&r->wait_since, memory_order_acquire);
            continue;
        }
        if (!w)
            return true;
        if (!(w & AT_WAIT_LATE) && now - w < hold) {
            if (w < *h)
                *h = w;
            return true;
        }
        uint64_t mark = AT_WAIT_LATE | (now & ~AT_WAIT_LATE);
        if (w == mark || atomic_compare_exchange_strong_explicit(&r->wait_since, &w, mark,
                                                                 memory_order_seq_cst,
                                                                 memory_order_acquire))
            return true;
        /* the owner ended the wait or began another: look again */
    }
    return false;
}

uint64_t at_rings_horizon(uint64_t cut, uint64_t fallback)
{
    /* the last flushes (cut: everything) hold for no wait: a thread blocked at exit would keep
     * the others' events out of the file */
    uint64_t now = at_ticks(), hold = cut == UINT64_MAX ? 0 : at_clock_ns_to_ticks(AT_WAIT_HOLD_NS);
    uint64_t h = at_rings_barrier() ? cut : fallback;
    at_ring *own = thr.ring; /* an emergency flush on a thread interrupted in its own write */
    at_ring *asker = atomic_load(&rings_skip);
    for (uint32_t i = 0, lim = at_ring_limit(); i < lim; i++) {
        at_ring *r = &at_pool_g.rings[i];
        if (r == own || r == asker || atomic_load_explicit(&r->state, memory_order_acquire) == AT_RING_FREE)
            continue;
        if (!wait_horizon(r, now, hold, &h))
            return 0;
        uint64_t p = atomic_load_explicit(&r->pending, memory_order_acquire);
        /* between announcing and reading the clock: a few instructions, unless preempted there */
        for (unsigned k = 0; p == AT_PENDING_CLOCK && k < 64; k++) {
            if (k < 48)
                __builtin_ia32_pause();
            else
                sched_yield();
            p = atomic_load_explicit(&r->pending, memory_order_acquire);
        }
        if (p == AT_PENDING_CLOCK)
            return 0; /* its clock read is unknown: nothing new is safe to write this time */
        if (p && p < h)
            h = p; /* its event has timestamp p: others up to p may go first */
    }
    return h;
}
