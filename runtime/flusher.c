/* flusher.c: the background thread and the merge. A flush snapshots every ring's head, then merges
 * the published records of all rings in timestamp order into the serialiser (ntw_block.c), frees the
 * ring space, and recycles the rings of exited threads once they are drained. The periodic flush
 * holds back the last millisecond so that a thread preempted between reading the clock and
 * publishing its event rarely arrives after newer events of other threads have been written. */
#include <errno.h>
#include <signal.h>
#include <sys/syscall.h>
#include <semaphore.h>
#include <unistd.h>
#include "trace_int.h"

#define HOLDBACK_NS 1000000ull
#define POLL_NS 1000000l

pthread_mutex_t at_flush_lock = PTHREAD_MUTEX_INITIALIZER;
_Atomic uint64_t at_stat_written, at_stat_dropped_io, at_stat_bytes, at_stat_files;
uint64_t at_flusher_tid;
unsigned at_flush_interval_ms = 100;

static pthread_t flusher;
static bool flusher_running;
static _Atomic int flusher_stop;
static sem_t flusher_ready;

static at_ring *active[4096], *snap[4096];

/* The record at r->cursor, skipping a wrap marker. */
static inline const at_rec *peek(at_ring *r)
{
    uint64_t pos = r->cursor & (r->size - 1);
    const at_rec *rec = (const at_rec *)(r->data + pos);
    if (rec->size == 0) {
        r->cursor += r->size - pos;
        rec = (const at_rec *)r->data;
    }
    return rec;
}

static void recycle(at_ring *r)
{
    atomic_fetch_add(&at_drops_retired, atomic_load(&r->drops));
    atomic_store(&r->drops, 0);
    r->last_seq = 0;
    atomic_store_explicit(&r->seq_pub, 0, memory_order_relaxed);
    atomic_store_explicit(&r->state, AT_RING_FREE, memory_order_release);
}

void at_flush_locked(bool holdback, bool force_sp)
{
    if (at_out.fd < 0 && !at_out.failed)
        return;
    bool ok = !at_out.failed;
    uint64_t limit_ts = holdback ? at_now_ns() - HOLDBACK_NS : UINT64_MAX;
    uint32_t na = 0, ns = 0;
    for (uint32_t i = 0; i < at_pool_g.nrings; i++) {
        at_ring *r = &at_pool_g.rings[i];
        uint32_t st = atomic_load_explicit(&r->state, memory_order_acquire);
        if (st == AT_RING_FREE)
            continue;
        r->limit = atomic_load_explicit(&r->head, memory_order_acquire);
        r->cursor = atomic_load_explicit(&r->tail, memory_order_relaxed);
        snap[ns++] = r;
        if (r->cursor != r->limit)
            active[na++] = r;
    }
    if (ok)
        at_ntw_flush_begin();
    uint32_t since_tail = 0;
    while (na) {
        /* the ring with the oldest next record, and the next-oldest timestamp among the others */
        uint32_t best = 0;
        uint64_t best_ts = peek(active[0])->ts, second = UINT64_MAX;
        for (uint32_t i = 1; i < na; i++) {
            uint64_t ts = peek(active[i])->ts;
            if (ts < best_ts) {
                second = best_ts;
                best_ts = ts;
                best = i;
            } else if (ts < second) {
                second = ts;
            }
        }
        if (best_ts > limit_ts)
            break;
        if (second > limit_ts)
            second = limit_ts;
        at_ring *r = active[best];
        /* a run: this ring's records up to the next-oldest of the others */
        for (;;) {
            const at_rec *rec = peek(r);
            if (rec->ts > second && rec->ts != best_ts)
                break;
            best_ts = UINT64_MAX; /* only the first record may equal the other rings' minimum */
            if (ok)
                at_ntw_event(rec, (const uint8_t *)(rec + 1), r->tid);
            else
                atomic_fetch_add(&at_stat_dropped_io, 1);
            r->last_seq = rec->seq;
            r->cursor += rec->size;
            if (++since_tail >= 256) {
                since_tail = 0;
                for (uint32_t i = 0; i < na; i++)
                    atomic_store_explicit(&active[i]->tail, active[i]->cursor, memory_order_release);
            }
            if (r->cursor == r->limit) {
                atomic_store_explicit(&r->tail, r->cursor, memory_order_release);
                active[best] = active[--na];
                break;
            }
        }
    }
    for (uint32_t i = 0; i < ns; i++)
        atomic_store_explicit(&snap[i]->tail, snap[i]->cursor, memory_order_release);
    if (ok && at_ntw_flush_end(force_sp) < 0) {
        atomic_fetch_add(&at_stat_dropped_io, at_ntw_pending_events);
        at_ntw_pending_events = 0;
    }
    /* exited threads: once everything they published is written, their ring can be reused */
    for (uint32_t i = 0; i < at_pool_g.nrings; i++) {
        at_ring *r = &at_pool_g.rings[i];
        if (atomic_load_explicit(&r->state, memory_order_acquire) == AT_RING_RETIRED
            && atomic_load_explicit(&r->head, memory_order_acquire) == r->cursor)
            recycle(r);
    }
}

static bool rings_filling(void)
{
    for (uint32_t i = 0; i < at_pool_g.nrings; i++) {
        at_ring *r = &at_pool_g.rings[i];
        if (atomic_load_explicit(&r->state, memory_order_relaxed) == AT_RING_FREE)
            continue;
        uint64_t used = atomic_load_explicit(&r->head, memory_order_relaxed)
                      - atomic_load_explicit(&r->tail, memory_order_relaxed);
        if (used >= r->size / 4)
            return true;
    }
    return false;
}

static void *flusher_main(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals go to the program's threads, never here */
    at_flusher_tid = (uint64_t)syscall(SYS_gettid);
    sem_post(&flusher_ready);
    uint64_t last = at_now_ns();
    while (!atomic_load(&flusher_stop)) {
        struct timespec d = {0, POLL_NS};
        nanosleep(&d, NULL);
        uint64_t now = at_now_ns();
        if (now - last >= (uint64_t)at_flush_interval_ms * 1000000u || rings_filling()) {
            pthread_mutex_lock(&at_flush_lock);
            at_flush_locked(true, false);
            pthread_mutex_unlock(&at_flush_lock);
            last = now;
        }
    }
    return NULL;
}

int at_flusher_start(void)
{
    atomic_store(&flusher_stop, 0);
    sem_init(&flusher_ready, 0, 0);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* no signal may land on the new thread before it masks */
    int rc = pthread_create(&flusher, NULL, flusher_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    while (sem_wait(&flusher_ready) < 0 && errno == EINTR)
        ;
    flusher_running = true;
    return 0;
}

void at_flusher_stop(void)
{
    if (!flusher_running)
        return;
    atomic_store(&flusher_stop, 1);
    if (!pthread_equal(pthread_self(), flusher))
        pthread_join(flusher, NULL);
    else
        pthread_detach(flusher);
    flusher_running = false;
}

/* In a fork child the parent's flusher does not exist. */
void at_flusher_forget(void) { flusher_running = false; }
