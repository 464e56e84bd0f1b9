/* flusher.c: the background thread and the merge. A flush snapshots every ring's head, then merges
 * the published records of all rings in timestamp order into the serialiser (ntw_block.c), frees the
 * ring space, and recycles the rings of exited threads once they are drained. It writes nothing newer
 * than its horizon (tbuf.c, at_rings_horizon): a thread preempted between reading the clock and
 * publishing its event holds the merge back, so no event ever arrives older than one already written
 * or than a sequence point. */
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/futex.h>
#include <signal.h>
#include <string.h>
#include <semaphore.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "trace_int.h"

#define HOLDBACK_NS 1000000ull

pthread_mutex_t at_flush_lock AT_FORK_DATA = PTHREAD_MUTEX_INITIALIZER;
_Atomic uint64_t at_stat_written AT_FORK_DATA, at_stat_dropped_io AT_FORK_DATA, at_stat_bytes AT_FORK_DATA,
    at_stat_files AT_FORK_DATA; /* a fork child starts them again */
uint64_t at_flusher_tid;
unsigned at_flush_interval_ms = 100;

AT_TLS int at_rt_own_thread;
static pthread_t flusher;
bool at_flusher_up AT_FORK_DATA; /* trace_int.h: at_flusher_is_running */
static _Atomic int flusher_stop;
static sem_t flusher_ready;
/* The flusher sleeps until its interval is due, or until a writer taking a chunk finds the buffers
 * filling (at_flusher_kick): no polling, so a traced program's cores are not woken a thousand times
 * a second (on a server busy with syscalls each wake-up took a core from the program). */
static sem_t flusher_wake;
/* Set when a flusher did not stop in time (a write blocked for ever, say on a hung network file
 * system): it is left alone, and no second flusher ever starts beside it. */
static bool flusher_stuck AT_FORK_DATA;

/* The writer's own descriptor table. Every file the shim opens at run time (the trace's files, the
 * maps and ELF files symbols come from, /proc) is opened by this thread; in the program's table even
 * a moment's descriptor would take the lowest free number from under a program's thread that opens
 * or lists descriptors just then (a daemon's close(0) then open("/dev/null"), a test of what is
 * open). The table starts empty (close_range with CLOSE_RANGE_UNSHARE copies nothing of the
 * program's), so the program's descriptors are never held open here either (a pipe's reader still
 * sees its end when the program closes its side). A program's thread that must write asks this
 * thread (at_flusher_request_flush); without such a table (an old kernel, a filter that refuses
 * close_range) everything is as before: the trace's descriptor in the program's table, guarded. */
AT_TLS bool at_fd_private_thread;
static bool flusher_private AT_FORK_DATA;
static int self_pidfd = -1; /* in the writer's table: the process, for the program's descriptors */

/* Requests of the program's threads: a ticket each, the kinds or'ed in first; the writer serves every
 * ticket it has seen with one pass and publishes the last (req_done, a futex word). */
enum { REQ_FLUSH = 1, REQ_FLUSH_SP = 2, REQ_ADOPT = 4, REQ_OPEN = 8 };
static _Atomic uint32_t req_ticket, req_kinds, req_done;
/* what a waiter watches to tell a slow writer from a stuck one: passes and writes */
static _Atomic uint64_t flusher_beat;
static void (*final_fn)(void); /* at_flusher_stop_final: run by the writer before it ends */


static at_ring *active[AT_MAX_THREADS];
static uint64_t active_ts[AT_MAX_THREADS]; /* the next record's timestamp of each active ring */

/* Flush passes: the chunk a thread is writing is read up to where its `used` said at the first look
 * of the pass. Chasing the writer within a pass (re-reading `used` each time we catch up) would pull
 * the line it stores to at every event away from it each time: on two cores that doubled the cost of
 * an event while the flusher drained. */
static uint32_t flush_pass = 1;
static bool pass_found; /* the last pass found records to write */

/* A record as a writer leaves it, within the published part of its chunk: anything else means two
 * writers shared the ring (a clone(CLONE_VM) child without a TLS of its own writes through its
 * parent's ring) and the chunk is damaged from there. */
static inline bool rec_sane(const at_rec *h, uint32_t pos, uint32_t used)
{
    if (h->size < sizeof(at_rec) || (h->size & 7u) || h->size > used - pos)
        return false;
    if (h->type_index == AT_REC_OWNER_TYPE)
        return h->size == sizeof(at_rec) + 8 && h->payload_len == 8 && h->nips == 0;
    uint32_t want = (uint32_t)(sizeof(at_rec) + ((h->flags & AT_REC_ACT) ? 16 : 0) +
                               ((h->flags & AT_REC_REL) ? 16 : 0) + (size_t)h->nips * 8 +
                               h->payload_len + 7) & ~7u;
    /* every flags bit has a meaning now (the CPU fills the upper ones): the size says the rest */
    return want == h->size && at_type_at(h->type_index) != NULL;
}

/* Thread ids whose thread ended after its events were written (its ring was recycled or handed to
 * another thread), with the last number the file gave it. The kernel reuses ids: when an id of this
 * set writes again it is a new thread, and the file numbers its events on from the ended thread's
 * last (at_ring.rseq_base), so that no reader sees a regression or counts the old thread's numbers
 * as lost: V5 readers (TraceEvent's EventPipeEventSource among them) know a thread only by its id
 * and count any number going back as 2^31 lost events. Open addressing with tombstones; when full,
 * the oldest knowledge is dropped by clearing it (a reuse after that shows as a regression). */
#define ENDED_SLOTS 8192u
#define ENDED_TOMB 1u
static uint64_t ended[ENDED_SLOTS];
static uint32_t ended_last[ENDED_SLOTS];
static uint32_t nended, nended_used;

static inline uint32_t ended_hash(uint64_t tid)
{
    return (uint32_t)((tid * 0x9E3779B97F4A7C15ull) >> 40) & (ENDED_SLOTS - 1);
}

static void ended_add(uint64_t tid, uint32_t last)
{
    if (tid <= ENDED_TOMB)
        return;
    if (nended_used >= ENDED_SLOTS / 2) {
        memset(ended, 0, sizeof ended);
        nended = nended_used = 0;
    }
    uint32_t i = ended_hash(tid), tomb = UINT32_MAX;
    for (;; i = (i + 1) & (ENDED_SLOTS - 1)) {
        if (ended[i] == tid) {
            ended_last[i] = last;
            return;
        }
        if (ended[i] == ENDED_TOMB && tomb == UINT32_MAX)
            tomb = i;
        if (ended[i] == 0)
            break;
    }
    if (tomb != UINT32_MAX) {
        i = tomb;
    } else {
        nended_used++;
    }
    ended[i] = tid;
    ended_last[i] = last;
    nended++;
}

/* Was tid's thread seen to end? Its last number into *last, and forget it (the new thread is now
 * the live one). */
static bool ended_take(uint64_t tid, uint32_t *last)
{
    if (!nended)
        return false;
    for (uint32_t i = ended_hash(tid);; i = (i + 1) & (ENDED_SLOTS - 1)) {
        if (ended[i] == 0)
            return false;
        if (ended[i] == tid) {
            ended[i] = ENDED_TOMB;
            *last = ended_last[i];
            nended--;
            return true;
        }
    }
}

/* The next published record of r (a checked copy, body at r->rbody), or NULL. Chunks the reader
 * has left behind go back to the pool. fresh: look at `used` again even if this pass already did
 * (sequence points and recycling must know whether anything at all is left). Bounded whatever the
 * buffer holds: every step consumes a record of at least 24 bytes or a chunk, a damaged stretch is
 * skipped to the end of what its chunk published, and a chain longer than the pool (links two
 * writers made) ends the look. */
static const at_rec *peek_ex(at_ring *r, bool fresh)
{
    if (r->rchunk < 0) {
        int32_t f = atomic_load_explicit(&r->first, memory_order_acquire);
        if (f < 0 || (uint32_t)f >= at_pool_g.nchunks)
            return NULL;
        r->rchunk = f;
        r->rtid = r->tid; /* written before first was published */
        r->rpos = r->rused = AT_CHUNK_HDR;
        r->rused_pass = 0;
    }
    for (uint32_t hops = 0; hops <= at_pool_g.nchunks;) {
        at_chunk *c = at_chunk_at(&at_pool_g, r->rchunk);
        /* `used` is on the line the writer stores to at every event: read it only when what was
         * seen last time is consumed, not per record */
        if (r->rpos < r->rused || fresh || r->rused_pass != flush_pass) {
            if (r->rpos >= r->rused) {
                r->rused_pass = flush_pass;
                r->rused = at_ring_chunk_used(r, r->rchunk, c);
                if (r->rused > AT_CHUNK_SIZE)
                    r->rused = AT_CHUNK_SIZE;
            }
            if (r->rpos < r->rused) {
                const uint8_t *p = (const uint8_t *)c + r->rpos;
                memcpy(&r->rcopy, p, sizeof r->rcopy);
                const at_rec *h = &r->rcopy;
                if (AT_UNLIKELY(!rec_sane(h, r->rpos, r->rused))) {
                    atomic_fetch_add_explicit(&at_drops_damaged, 1, memory_order_relaxed);
                    r->rpos = r->rused;
                    continue;
                }
                if (AT_LIKELY(h->type_index != AT_REC_OWNER_TYPE)) {
                    /* a thread's numbers only go up and its clock never back: a record that breaks
                     * that came from a second writer */
                    if (AT_UNLIKELY((r->last_seq && (int32_t)(h->seq - r->last_seq) <= 0) ||
                                    h->ts < r->rlast_ts)) {
                        atomic_fetch_add_explicit(&at_drops_damaged, 1, memory_order_relaxed);
                        r->rpos += h->size;
                        continue;
                    }
                    r->rbody = p + sizeof(at_rec);
                    return h;
                }
                /* the ring changed hands (tbuf.c): what follows is the new owner's, whose
                 * sequence numbers start again */
                uint64_t owner;
                memcpy(&owner, p + sizeof(at_rec), 8);
                if (r->last_seq && (owner != r->rtid || h->seq == 1))
                    ended_add(r->rtid, r->last_seq + r->rseq_base);
                r->rtid = owner;
                r->last_seq = 0;
                r->rseq_base = 0;
                r->rowners++;
                r->rpos += h->size;
                continue;
            }
        }
        int32_t n = atomic_load_explicit(&c->next, memory_order_acquire);
        if (n < 0)
            return NULL;
        if ((uint32_t)n >= at_pool_g.nchunks || n == r->rchunk) {
            atomic_fetch_add_explicit(&at_drops_damaged, 1, memory_order_relaxed);
            return NULL; /* a link no writer makes alone: stay here */
        }
        /* next is linked only after the chunk's last record was published: used is final now.
         * Records published after this pass first looked are taken too (keeping the stale look
         * here made this loop spin for ever) */
        uint32_t used = atomic_load_explicit(&c->used, memory_order_acquire);
        if (used > AT_CHUNK_SIZE)
            used = AT_CHUNK_SIZE;
        if (r->rpos < used) {
            r->rused = used;
            r->rused_pass = flush_pass;
            continue;
        }
        at_chunk_retire(r->rchunk);
        r->rchunk = n;
        r->rpos = r->rused = AT_CHUNK_HDR;
        r->rused_pass = 0;
        hops++;
    }
    atomic_fetch_add_explicit(&at_drops_damaged, 1, memory_order_relaxed);
    return NULL;
}

/* peek_ex(r, false) for the common case, inline in the merge: a record within what this pass has
 * seen published of the chunk being read, an event that follows the last one. */
static inline const at_rec *peek(at_ring *r)
{
    if (AT_LIKELY(r->rchunk >= 0 && r->rpos < r->rused)) {
        const uint8_t *p = (const uint8_t *)at_chunk_at(&at_pool_g, r->rchunk) + r->rpos;
        memcpy(&r->rcopy, p, sizeof r->rcopy);
        const at_rec *h = &r->rcopy;
        if (AT_LIKELY(h->type_index != AT_REC_OWNER_TYPE && rec_sane(h, r->rpos, r->rused)
                      && (r->last_seq == 0 || (int32_t)(h->seq - r->last_seq) > 0)
                      && h->ts >= r->rlast_ts)) {
            r->rbody = p + sizeof(at_rec);
            return h;
        }
    }
    return peek_ex(r, false);
}

/* The sequence number a sequence point may list for r: everything up to it is in the file or was
 * dropped. seq_pub is stored after the record is published, so if nothing is left to read after
 * loading it, every number up to it that we did not write was dropped. */
uint32_t at_ring_sp_seq(at_ring *r)
{
    uint32_t s = atomic_load_explicit(&r->seq_pub, memory_order_acquire);
    uint32_t owners = r->rowners;
    /* an owner record taken by this look: s may be the last owner's count */
    if (peek_ex(r, true) != NULL || r->rowners != owners)
        return r->last_seq;
    if (r->rchunk < 0) /* nothing ever written (its events all dropped): its only owner's count */
        r->rtid = r->tid;
    /* seq_pub may lag the last record consumed (stored just after publishing it). What the point
     * lists is the thread's last number from now on: a later record at or below it (a second writer
     * on the ring) is skipped, as the file must never go back */
    if ((int32_t)(s - r->last_seq) > 0)
        r->last_seq = s;
    return r->last_seq;
}

static void recycle(at_ring *r)
{
    if (r->last_seq || r->rowners)
        ended_add(r->rtid, r->last_seq + r->rseq_base);
    if (r->rchunk >= 0)
        at_chunk_retire(r->rchunk);
    r->rchunk = -1;
    atomic_store(&r->first, -1);
    atomic_fetch_add(&at_drops_retired, atomic_load(&r->drops));
    atomic_store(&r->drops, 0);
    r->last_seq = 0;
    r->rseq_base = 0;
    r->rlast_ts = 0;
    r->rowners = 0;
    atomic_store_explicit(&r->wait_since, 0, memory_order_relaxed);
    atomic_store_explicit(&r->seq_pub, 0, memory_order_relaxed);
    atomic_store_explicit(&r->state, AT_RING_FREE, memory_order_release);
    at_ring_free(r);
}

void at_flush_locked(bool holdback, bool force_sp)
{
    pass_found = false;
    if (at_out.fd < 0 && !at_out.failed && !at_out.detached)
        return;
    bool ok = !at_out.failed;
    if (++flush_pass == 0)
        flush_pass = 1;
    /* The periodic flush takes what was written before now (a new pair of the file clock, clock.c);
     * an explicit flush (at_trace_flush, stop, emergency) takes everything published, whatever
     * timestamp a caller of at_event_write_ts gave it. Either stops short of a clock read a writer
     * has not published yet. Without a process-wide barrier, the periodic flush holds back a margin
     * that makes a late event rare rather than impossible. */
    uint64_t cut = at_clock_mark();
    uint64_t limit_ts = holdback ? cut : UINT64_MAX;
    uint64_t margin = holdback ? at_clock_ns_to_ticks(HOLDBACK_NS) : 0;
    limit_ts = at_rings_horizon(limit_ts, limit_ts > margin ? limit_ts - margin : 0);
    if (limit_ts == 0 && !holdback)
        limit_ts = UINT64_MAX; /* the last flush: a writer stuck mid-write does not hold it back */
    /* In file time (clock.c), which several TSC ticks share: what is written stays strictly older
     * than the horizon's own file time, so that the sequence point that may follow (file time of the
     * newest event + 1) is never newer than an event written later. */
    uint64_t limit_file = limit_ts == UINT64_MAX ? UINT64_MAX : at_clock_file_ts(limit_ts);
    if (limit_file != UINT64_MAX)
        limit_file = limit_file ? limit_file - 1 : 0;
    /* the same limit in ticks (the records' own), so the merge converts no record to compare it */
    uint64_t upto = limit_ts;
    bool none = limit_file != UINT64_MAX && !at_clock_ticks_upto(limit_file, limit_ts, &upto);
    at_chunk_pass_begin();
    at_rings_sweep_warm(!holdback); /* retired here, recycled below once drained */
    uint32_t na = 0;
    for (uint32_t i = 0, lim = at_ring_limit(); i < lim; i++) {
        at_ring *r = &at_pool_g.rings[i];
        if (atomic_load_explicit(&r->state, memory_order_acquire) == AT_RING_FREE)
            continue;
        const at_rec *rec = peek(r);
        if (rec) {
            active_ts[na] = rec->ts;
            active[na++] = r;
        }
    }
    pass_found = na > 0;
    if (ok)
        at_ntw_flush_begin();
    while (na) {
        /* the buffer with the oldest next record, and the next-oldest timestamp among the others
         * (from the copies in active_ts: no look at the rings themselves) */
        uint32_t best = 0;
        uint64_t best_ts = active_ts[0], second = UINT64_MAX;
        for (uint32_t i = 1; i < na; i++) {
            uint64_t ts = active_ts[i];
            if (ts < best_ts) {
                second = best_ts;
                best_ts = ts;
                best = i;
            } else if (ts < second) {
                second = ts;
            }
        }
        if (best_ts > upto || none)
            break;
        if (second > upto)
            second = upto;
        at_ring *r = active[best];
        /* a run: this thread's records up to the next-oldest of the others */
        const at_rec *rec = peek(r);
        do {
            /* a thread's first event written: if its id belonged to a thread that ended, the
             * readers learn first that this is another thread */
            uint32_t last;
            if (AT_UNLIKELY(nended) && r->last_seq == 0 && ended_take(r->rtid, &last))
                r->rseq_base = last;
            if (ok)
                at_ntw_event(r, rec, r->rbody, r->rtid, r->rseq_base);
            else
                atomic_fetch_add(&at_stat_dropped_io, 1);
            r->last_seq = rec->seq;
            r->rlast_ts = rec->ts;
            r->rpos += rec->size;
            rec = peek(r);
        } while (rec && rec->ts <= second);
        if (rec) {
            active_ts[best] = rec->ts;
        } else {
            active[best] = active[--na];
            active_ts[best] = active_ts[na];
        }
    }
    /* Exited threads: once everything they published is written, their buffer can be reused. A
     * thread whose last events were dropped must first appear in a sequence point, or a reader
     * would never learn about those drops. */
    uint32_t nr = 0;
    for (uint32_t i = 0, lim = at_ring_limit(); i < lim; i++) {
        at_ring *r = &at_pool_g.rings[i];
        if (atomic_load_explicit(&r->state, memory_order_acquire) == AT_RING_RETIRED &&
            !peek_ex(r, true)) {
            active[nr++] = r;
            if (atomic_load(&r->seq_pub) != r->last_seq)
                force_sp = true;
        }
    }
    if (ok && at_ntw_flush_end(force_sp) < 0) {
        atomic_fetch_add(&at_stat_dropped_io, at_ntw_pending_events);
        at_ntw_pending_events = 0;
    }
    /* a write failed (now or before): a sequence point counts the lost events in the file as soon
     * as it fits, and writing resumes after it */
    at_ntw_retry();
    for (uint32_t i = 0; i < nr; i++)
        recycle(active[i]);
    if (!holdback) /* an explicit flush, stop or exit: every chunk back on the free list */
        at_chunk_cool_drain();
}

/* Time to flush before the interval is due: unflushed chunks reach a quarter of the pool (at most
 * 64, 4 MiB). Exited threads' last chunks count too: letting hundreds of them wait for the interval
 * was measured slower on a thread-per-connection server (each new thread then writes into a cold
 * chunk), not faster, though the flusher woke 20 times less often. */
bool at_rings_filling(void)
{
    int32_t used = (int32_t)at_pool_g.nchunks - atomic_load_explicit(&at_pool_g.nfree, memory_order_relaxed)
                   - (int32_t)at_chunks_cooling();
    int32_t thr = (int32_t)at_pool_g.nchunks / 4;
    if (thr > 64)
        thr = 64;
    if (thr < 2)
        thr = 2;
    return used >= thr;
}

/* Filling buffers want a flush, unless the file waits for its first event that counts: the events
 * stay where they are until then (what does not fit is dropped and counted). */
static bool filling(void)
{
    return at_rings_filling() && !at_trace_file_waits();
}

bool at_writer_table_shared AT_START_DATA; /* set at the start, with the settings */

/* The writer's table of its own, empty; the standard numbers on /dev/null there, so that nothing
 * written to "stderr" from this thread can land in a file of ours (at_errmsg borrows the
 * program's). */
static void private_begin(void)
{
    if (at_writer_table_shared || syscall(SYS_close_range, 0u, ~0u, CLOSE_RANGE_UNSHARE) != 0)
        return;
    at_fd_private_thread = true;
    for (int i = 0; i < 3; i++)
        if (open("/dev/null", O_RDWR | O_CLOEXEC) < 0)
            break;
    self_pidfd = (int)syscall(SYS_pidfd_open, (pid_t)syscall(SYS_getpid), 0);
    if (self_pidfd >= 0)
        self_pidfd = at_fd_move_high(self_pidfd);
    flusher_private = true;
}

int at_fd_program(int fd)
{
    if (!at_fd_private_thread || self_pidfd < 0 || fd < 0)
        return -1;
    return (int)syscall(SYS_pidfd_getfd, self_pidfd, fd, 0);
}

static void futex_wake_all(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
}

static bool requests_pending(void)
{
    return atomic_load(&req_ticket) != atomic_load(&req_done);
}

/* Serve the tickets seen: under at_flush_lock, as the program's thread would have done it. */
static void serve_requests(void)
{
    uint32_t t = atomic_load(&req_ticket);
    uint32_t k = atomic_exchange(&req_kinds, 0);
    pthread_mutex_lock(&at_flush_lock);
    if (k & REQ_ADOPT) /* a program's thread opened the file: take it over (the caller closes its number) */
        (void)at_output_here(&at_out);
    if (k & REQ_OPEN)
        at_trace_open_pending_locked();
    if ((k & (REQ_FLUSH | REQ_FLUSH_SP)) && at_trace_ready_locked())
        at_flush_locked(false, (k & REQ_FLUSH_SP) != 0);
    pthread_mutex_unlock(&at_flush_lock);
    atomic_fetch_add(&flusher_beat, 1);
    atomic_store(&req_done, t);
    futex_wake_all(&req_done);
}

/* The writer ends: its table goes with it, and with it the file's descriptor (not closed: a pause or
 * a yield, the file goes on). The next writer, or a program's thread at exit, opens it again. */
static void private_end(void)
{
    if (!at_fd_private_thread)
        return;
    pthread_mutex_lock(&at_flush_lock);
    if (at_out.fd >= 0 && at_out.fd_private) {
        at_out.fd = -1;
        at_out.fd_private = false;
        at_out.detached = true;
    }
    pthread_mutex_unlock(&at_flush_lock);
}

/* Dozing. A writer thread whose passes have found nothing to write for a second sleeps until the
 * next record instead of waking every interval: an idle traced process (a daemon between requests)
 * is not woken ten times a second (each wake-up costs tens of microseconds of CPU on a virtual
 * machine, and the core's sleep). The flag is on the line every record reads (at_ring_publish): the
 * record's own store, then a look at the flag; here the flag's store, a process-wide barrier, then
 * a fresh look at every ring. Either the record's thread sees the flag and wakes the writer, or the
 * look finds its record. Without membarrier the writer never dozes. */
#define DOZE_AFTER_PASSES 10u
#define DOZE_MAX_NS (60ull * 1000000000u) /* a bound all the same */
static uint32_t idle_passes;

enum { AWAKE, DOZE_PENDING, DOZE };

static int doze_begin(void)
{
    if (idle_passes < DOZE_AFTER_PASSES)
        return AWAKE;
    /* a session waiting for its first event that counts: that event wakes the writer itself
     * (at_trace_child_gate), records before it are none of its business */
    if (at_trace_file_waits())
        return DOZE_PENDING;
    atomic_store(&at_rt_hot.flusher_doze, 1);
    bool quiet = at_rings_barrier();
    if (quiet) {
        pthread_mutex_lock(&at_flush_lock);
        for (uint32_t i = 0, lim = at_ring_limit(); i < lim && quiet; i++) {
            at_ring *r = &at_pool_g.rings[i];
            if (atomic_load_explicit(&r->state, memory_order_acquire) != AT_RING_FREE &&
                peek_ex(r, true))
                quiet = false;
        }
        pthread_mutex_unlock(&at_flush_lock);
    }
    if (!quiet)
        atomic_store(&at_rt_hot.flusher_doze, 0);
    return quiet ? DOZE : AWAKE;
}

/* Wake the writer if flag is set, clearing it: the first thread to see it posts, in any context
 * (a signal handler too; sem_post is async-signal-safe, errno kept). */
static void wake_on(_Atomic int *flag)
{
    if (atomic_exchange_explicit(flag, 0, memory_order_acq_rel)) {
        int e = errno;
        AT_INTERNAL_BEGIN(); /* sem_post may be a hooked function */
        sem_post(&flusher_wake);
        AT_INTERNAL_END();
        errno = e;
    }
}

/* A record's thread, the writer dozing. */
void at_flusher_undoze(void) { wake_on(&at_rt_hot.flusher_doze); }

static void *flusher_main(void *arg)
{
    (void)arg;
    at_internal = 1; /* all of this thread's work is the shim's own */
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals go to the program's threads, never here */
    at_flusher_tid = (uint64_t)at_tid(); /* the second thread to look: tid.c learns here */
    private_begin();
    sem_post(&flusher_ready);
    pthread_setname_np(pthread_self(), "acttrace-flush");
    uint64_t last = at_now_ns();
    while (!atomic_load(&flusher_stop)) {
        atomic_fetch_add(&flusher_beat, 1);
        if (AT_UNLIKELY(at_trace_file_wanted())) {
            pthread_mutex_lock(&at_flush_lock);
            at_trace_file_open_locked();
            pthread_mutex_unlock(&at_flush_lock);
        }
        if (requests_pending()) {
            serve_requests();
            continue;
        }
        uint64_t now = at_now_ns();
        uint64_t due = last + (uint64_t)at_flush_interval_ms * 1000000u;
        /* the program's first thread has left: the process ends when no other is alive */
        uint64_t wake = due;
        if (AT_UNLIKELY(atomic_load_explicit(&at_last_thread_watch, memory_order_relaxed))) {
            uint64_t look = at_lastthread_poll(now);
            if (look < wake)
                wake = look;
        }
        if (now < due && !filling()) {
            atomic_store(&at_flusher_armed, 1);
            int doze = doze_begin();
            if (doze != AWAKE && wake == due)
                wake = now + DOZE_MAX_NS;
            /* a writer that found the buffers filling (or a thread that ended, or the first event
             * that counts) before we armed did not post: look again */
            if (!filling() && !atomic_load(&flusher_stop) && !at_lastthread_kicked() &&
                !at_trace_file_wanted() && !requests_pending()) {
                struct timespec ts = {(time_t)(wake / 1000000000u), (long)(wake % 1000000000u)};
                while (sem_clockwait(&flusher_wake, CLOCK_MONOTONIC, &ts) < 0 && errno == EINTR)
                    ;
            }
            atomic_store(&at_flusher_armed, 0);
            /* woken by a record (it took the flag) or by anything else: awake again either way;
             * the pass that follows (its interval long due) writes what came */
            if (doze == DOZE && !atomic_exchange(&at_rt_hot.flusher_doze, 0))
                idle_passes = 0;
            while (sem_trywait(&flusher_wake) == 0)
                ;
            continue;
        }
        pthread_mutex_lock(&at_flush_lock);
        at_flush_locked(true, false);
        bool found = pass_found;
        pthread_mutex_unlock(&at_flush_lock);
        idle_passes = found ? 0 : idle_passes + 1;
        last = now;
        /* the hold-back leaves the last millisecond: when the buffers were filling, come back
         * soon rather than a whole interval later */
        if (filling() && !atomic_load(&flusher_stop)) {
            struct timespec d = {0, 1000000};
            nanosleep(&d, NULL);
        }
    }
    if (requests_pending())
        serve_requests();
    if (final_fn) {
        pthread_mutex_lock(&at_flush_lock);
        final_fn();
        pthread_mutex_unlock(&at_flush_lock);
    }
    private_end();
    return NULL;
}

int at_flusher_start(void)
{
    if (flusher_stuck) {
        errno = EBUSY;
        return -1;
    }
    atomic_store(&flusher_stop, 0);
    atomic_store(&at_flusher_armed, 0);
    atomic_store(&at_rt_hot.flusher_doze, 0);
    idle_passes = 0;
    flusher_private = false;
    final_fn = NULL;
    sem_init(&flusher_ready, 0, 0);
    sem_init(&flusher_wake, 0, 0);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* no signal may land on the new thread before it masks */
    /* under a finite RLIMIT_AS the default stack (RLIMIT_STACK, 8 MiB) would come out of the
     * program's room: the flusher's calls are shallow */
    pthread_attr_t attr, *ap = NULL;
    if (at_as_limited() && pthread_attr_init(&attr) == 0) {
        ap = &attr;
        pthread_attr_setstacksize(&attr, 1u << 20);
    }
    at_rt_own_thread++;
    int rc = pthread_create(&flusher, ap, flusher_main, NULL);
    at_rt_own_thread--;
    if (ap)
        pthread_attr_destroy(ap);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    while (sem_wait(&flusher_ready) < 0 && errno == EINTR)
        ;
    __atomic_store_n(&at_flusher_up, true, __ATOMIC_RELEASE);
    return 0;
}

/* Every pass is bounded, but one write can block for as long as the file system wants: exit waits
 * this long for the flusher, then goes on without it (at_trace_stop writes what it can). */
#define FLUSHER_JOIN_S 5

void at_flusher_stop(void)
{
    if (!at_flusher_up)
        return;
    atomic_store(&flusher_stop, 1);
    sem_post(&flusher_wake);
    if (!pthread_equal(pthread_self(), flusher)) {
        /* as long as it makes progress (a last flush of full buffers to a slow disk), then
         * FLUSHER_JOIN_S more */
        int rc, idle = 0;
        uint64_t seen = atomic_load(&flusher_beat) + atomic_load(&at_stat_bytes);
        do {
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            dl.tv_sec += 1;
            while ((rc = pthread_timedjoin_np(flusher, NULL, &dl)) == EINTR)
                ;
            uint64_t now = atomic_load(&flusher_beat) + atomic_load(&at_stat_bytes);
            idle = now == seen ? idle + 1 : 0;
            seen = now;
        } while (rc == ETIMEDOUT && idle < FLUSHER_JOIN_S);
        if (rc != 0) {
            flusher_stuck = true;
            at_errmsg("the trace writer's thread did not stop; the file may end early", "", 0);
        }
    } else {
        pthread_detach(flusher);
    }
    __atomic_store_n(&at_flusher_up, false, __ATOMIC_RELEASE);
}

bool at_flusher_is_stuck(void) { return flusher_stuck; }

/* A writer took a chunk and the buffers are filling: wake the flusher if it sleeps. Async-signal-safe
 * (sem_post). */
void at_flusher_kick(void) { wake_on(&at_flusher_armed); }

/* In a fork child the parent's flusher does not exist. */
AT_FORK_TEXT void at_flusher_forget(void)
{
    /* a doze flag the parent's writer left is harmless here: a record takes it and posts to a
     * semaphore no thread waits on; a writer started here clears it (at_flusher_start) */
    __atomic_store_n(&at_flusher_up, false, __ATOMIC_RELEASE);
    flusher_stuck = false;
    flusher_private = false;
}

bool at_flusher_owns_table(void) { return at_flusher_is_running() && flusher_private; }

/* A writer with a table of its own is there to ask (not from the writer itself). */
static bool private_writer(void)
{
    return at_flusher_is_running() && flusher_private && !at_fd_private_thread;
}

/* Wait for ticket t, as long as the writer makes progress (idle_max 10 ms rounds without any):
 * true when served. Async-signal-safe (futex, clock). */
static bool request_wait(uint32_t t, int idle_max)
{
    int idle = 0;
    uint64_t seen = atomic_load(&flusher_beat) + atomic_load(&at_stat_bytes);
    for (;;) {
        uint32_t d = atomic_load(&req_done);
        if ((int32_t)(d - t) >= 0)
            return true;
        if (!at_flusher_is_running())
            return false;
        struct timespec ts = {0, 10000000};
        syscall(SYS_futex, (uint32_t *)&req_done, FUTEX_WAIT_PRIVATE, d, &ts, NULL, 0);
        uint64_t now = atomic_load(&flusher_beat) + atomic_load(&at_stat_bytes);
        idle = now == seen ? idle + 1 : 0;
        seen = now;
        if (idle > idle_max)
            return false;
    }
}

static uint32_t request(uint32_t kinds)
{
    atomic_fetch_or(&req_kinds, kinds);
    uint32_t t = atomic_fetch_add(&req_ticket, 1) + 1;
    AT_INTERNAL_BEGIN(); /* sem_post may be a hooked function */
    sem_post(&flusher_wake);
    AT_INTERNAL_END();
    return t;
}

/* Ask the writer and wait (errno kept): false when there is none to ask, or it made no progress
 * for idle_max rounds of 10 ms. skip_mine: a flush for the asking thread, whose ring then holds
 * nothing back (it may have been interrupted in a write of its own it cannot finish while it
 * waits). Set only once there is a writer to ask: a process that recorded nothing touches
 * nothing more at its exit. */
static bool ask(uint32_t kinds, int idle_max, bool skip_mine)
{
    if (!private_writer())
        return false;
    int e = errno;
    if (skip_mine)
        at_rings_skip_mine(true);
    bool ok = request_wait(request(kinds), idle_max);
    if (skip_mine)
        at_rings_skip_mine(false);
    errno = e;
    return ok;
}

/* An explicit flush, or exec's (which may run in a signal handler that interrupted a write). */
bool at_flusher_request_flush(bool force_sp)
{
    return ask(force_sp ? REQ_FLUSH_SP : REQ_FLUSH, 100 * FLUSHER_JOIN_S, true);
}

/* A fatal signal's handler: about two seconds without progress at most (without a writer to ask,
 * the handler waits 200 ms for the lock, then writes itself). */
bool at_flusher_request_emergency(void) { return ask(REQ_FLUSH_SP, 200, true); }

bool at_flusher_request_open(void) { return ask(REQ_OPEN, 100 * FLUSHER_JOIN_S, false); }

void at_flusher_adopt(void)
{
    if (!private_writer())
        return;
    pthread_mutex_lock(&at_flush_lock);
    bool shared = at_out.fd >= 0 && !at_out.fd_private;
    pthread_mutex_unlock(&at_flush_lock);
    if (shared)
        (void)request_wait(request(REQ_ADOPT), 100 * FLUSHER_JOIN_S);
    pthread_mutex_lock(&at_flush_lock);
    at_output_leftover_close();
    pthread_mutex_unlock(&at_flush_lock);
}

bool at_flusher_stop_final(void (*final)(void))
{
    if (!private_writer())
        return false;
    final_fn = final;
    at_rings_skip_mine(true); /* the exiting thread's ring, as for a flush it asks for */
    at_flusher_stop();
    at_rings_skip_mine(false);
    return !flusher_stuck;
}

void at_flusher_wake(void)
{
    if (!at_flusher_is_running())
        return;
    AT_INTERNAL_BEGIN(); /* sem_post may be a hooked function */
    sem_post(&flusher_wake);
    AT_INTERNAL_END();
}
