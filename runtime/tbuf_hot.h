/* tbuf_hot.h: the thread's side of its buffer (tbuf.c) and the one-pass record of an activity event,
 * inline. A hooked call writes a Start and a Stop; the activity engine (activity.c) inlines this
 * record into each, with what it knows of the shape (ids present, payload length) made constant,
 * so that neither costs a call with six arguments and the tests that shape already answered.
 * Internal to the runtime: only trace.h is a contract. */
#ifndef AT_TBUF_HOT_H
#define AT_TBUF_HOT_H

#include "trace_int.h"

#define AT_MAX_PAYLOAD (48u * 1024)

typedef struct at_thr {
    at_ring *ring;
    uint32_t gen;
    uint32_t seq; /* per-thread sequence number: +1 per event tried, written or dropped */
    uint32_t seq_written; /* that of the last event written: seq != seq_written after a drop */
    uint8_t busy; /* inside a write: a signal handler writing now must not interleave */
    uint64_t tid;
    uint64_t last_ts;
    uint64_t live; /* at_rt_hot.sess_word as it reads while ring is this thread's in a running
                    * session (sess_active 1, sess_gen gen), set with ring */
} at_thr;
#define at_tbuf_thr AT_PTLS_AS(at_thr, tbuf) /* at_common.h */

/* The current chunk is full (or there is none): chain a new one. false when the cap is reached. */
bool at_tbuf_next_chunk(at_ring *r);
/* An activity event the one-pass record does not take (the thread's first event, a new session, a
 * fork child's gate, a signal handler inside a write, a payload too long): the general writer. */
int at_tbuf_write_act_general(const at_event_type *t, const at_guid *activity,
                              const at_guid *related, uint64_t head8, const void *payload,
                              uint32_t payload_len);

/* ++seq as one instruction: a signal handler that writes an event between the load and the store
 * of a plain increment would lose its number (a drop without a gap). Not locked: only this thread
 * (and its signal handlers) touch it. */
static inline uint32_t at_tbuf_seq_next(void)
{
    uint32_t v = 1;
    __asm__ volatile("xaddl %0, %1" : "+r"(v), "+m"(at_tbuf_thr.seq));
    return v + 1;
}

/* The event clock read for an event about to be written, announced first on the thread's ring
 * (r->pending) so that the flusher, which reads the markers after a process-wide barrier
 * (at_rings_horizon), never writes a newer event before this one is published: a thread preempted
 * between its clock read and its publish holds the merge back instead of arriving late. */
static inline uint64_t at_tbuf_clock_announced(at_ring *r, uint64_t floor, bool ordered)
{
    if (AT_LIKELY(r != NULL))
        atomic_store_explicit(&r->pending, AT_PENDING_CLOCK, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    uint64_t ts = ordered ? at_ticks_ordered() : at_ticks();
    if (ts < floor)
        ts = floor;
    if (AT_LIKELY(r != NULL))
        atomic_store_explicit(&r->pending, ts, memory_order_relaxed);
    return ts;
}

/* A wait (shim/waits.c): the calling thread is about to make a call that may block. Announces the
 * wait's start on its ring (ring->wait_since, after the ANNOUNCE marker, as the clock of an event),
 * reads the clock into *t0 and returns the ring (NULL: none announced: the thread has no ring in the
 * running session). After the call: at_tbuf_wait_clear for a wait not recorded, at_tbuf_wait_end
 * and at_tbuf_wait_done around the two events of one recorded. */
static inline __attribute__((always_inline)) at_ring *at_tbuf_wait_begin(uint64_t *t0)
{
    at_ring *r = at_tbuf_thr.ring;
    if (r && (at_tbuf_thr.gen != atomic_load_explicit(&at_rt_hot.sess_gen, memory_order_relaxed) ||
              atomic_load_explicit(&at_rt_hot.sess_active, memory_order_relaxed) != 1))
        r = NULL;
    if (AT_LIKELY(r != NULL))
        atomic_store_explicit(&r->wait_since, AT_WAIT_ANNOUNCE, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    *t0 = at_ticks();
    if (AT_LIKELY(r != NULL))
        atomic_store_explicit(&r->wait_since, *t0, memory_order_relaxed);
    return r;
}

/* The wait announced on r is over and is not recorded. */
static inline __attribute__((always_inline)) void at_tbuf_wait_clear(at_ring *r)
{
    if (r && r == at_tbuf_thr.ring)
        atomic_store_explicit(&r->wait_since, 0, memory_order_relaxed);
}

/* The wait [t0, t1] announced on r (at_tbuf_wait_begin) is recorded: the time its Suspend takes
 * (t0, or the horizon the flusher reached when the wait outlived AT_WAIT_HOLD_NS; t1 when nothing
 * was announced), announced as the clock of an event being written until at_tbuf_wait_done(r,
 * *outer). The Resume takes the later of t1 and that. */
uint64_t at_tbuf_wait_end(at_ring *r, uint64_t t0, uint64_t t1, uint64_t *outer);
void at_tbuf_wait_done(at_ring *r, uint64_t outer);

/* The CPU this thread runs on, from the rseq area the kernel keeps current (one load, no syscall);
 * AT_REC_CPU_NONE when glibc registered no rseq for the process (a word of -1 is read instead) or
 * the thread (-1, -2), or the number does not fit. */
static inline uint32_t at_tbuf_cpu_now(void)
{
    long off = at_rt_hot.rseq_cpu;
    int32_t c;
    __asm__ volatile("movl %%fs:(%1), %0" : "=r"(c) : "r"(off));
    return (uint32_t)c < AT_REC_CPU_NONE ? (uint32_t)c : AT_REC_CPU_NONE;
}

/* Fetch the line holding p ready for a store: PREFETCHW where CPUID says the CPU has it (AMD since
 * K8, Intel since Broadwell), else a plain prefetch (the line then comes shared if another core
 * holds it). A hint either way: it never faults. */
static inline void at_tbuf_prefetch_write(const void *p)
{
    if (AT_LIKELY(at_rt_hot.prefetchw))
        __asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
    else
        __builtin_prefetch(p, 1, 3);
}

/* The lines of the records a few events ahead are fetched for writing as each record is written: a
 * line from memory or from the flusher's core takes longer than one event (fetched one record
 * ahead, a hooked function called in a loop waited on every line: sustained stub ~95 ns a call
 * with 128 bytes ahead, ~66 ns with 512). Near the chunk's end nothing is fetched (the next
 * records go to another chunk). */
#define AT_PREFETCH_AHEAD 512u

static inline void at_tbuf_count_drop(at_ring *r, uint32_t seq)
{
    atomic_store_explicit(&r->drops, atomic_load_explicit(&r->drops, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    atomic_store_explicit(&r->seq_pub, seq, memory_order_release);
}

/* An event without a stack, or with one word of stack, stk1 (a reference, trace.h; 0: none):
 * at_event_write's record (with head, at_event_write_head's: head8, then payload), written in one
 * pass while the thread has its ring in the running session with room in
 * its chunk and is not inside a write of its own. Otherwise false, with nothing done: the caller
 * writes it with the general writer (at_tbuf_write_act_general), which also chains a new chunk. No
 * call the compiler sees either way (the monotonic clock's is at_ticks_nocall's), so that a caller
 * with no other can keep to the registers a call may clobber.
 * has_act/has_rel say whether activity/related are present and not zero: callers that know it pass
 * constants. busy is set before the ring is looked at: a handler that interrupts from then on drops
 * its event (as it would inside the general path), so nothing it does can move the ring under this
 * write. */
static inline __attribute__((always_inline)) bool at_tbuf_try_put(const at_event_type *t,
                                                                  const at_guid *activity,
                                                                  bool has_act,
                                                                  const at_guid *related,
                                                                  bool has_rel, bool head,
                                                                  uint64_t head8,
                                                                  const void *payload,
                                                                  uint32_t payload_len,
                                                                  uint64_t stk1)
{
    at_thr *th = &at_tbuf_thr;
    if (AT_UNLIKELY(th->busy))
        return false;
    uint32_t plen = payload_len + (head ? 8 : 0);
    uint32_t size = (uint32_t)(sizeof(at_rec) + (has_act ? 16 : 0) + (has_rel ? 16 : 0)
                               + (stk1 ? 8 : 0) + plen + 7) & ~7u;
    th->busy = 1;
    atomic_signal_fence(memory_order_seq_cst);
    at_ring *r = th->ring;
    if (AT_UNLIKELY(!r || th->live != __atomic_load_n(&at_rt_hot.sess_word, __ATOMIC_RELAXED) ||
                    r->wpos + size > AT_CHUNK_SIZE ||
                    payload_len > AT_MAX_PAYLOAD - (head ? 8u : 0u) || (payload_len && !payload))) {
        atomic_signal_fence(memory_order_seq_cst);
        th->busy = 0;
        return false;
    }
    uint64_t outer = atomic_load_explicit(&r->pending, memory_order_relaxed);
    /* at_tbuf_clock_announced(), its clock read making no call the compiler sees */
    atomic_store_explicit(&r->pending, AT_PENDING_CLOCK, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    uint64_t ts = at_ticks_nocall();
    atomic_store_explicit(&r->pending, ts, memory_order_relaxed);
    uint32_t seq = at_tbuf_seq_next();
    uint32_t wpos = r->wpos;
    at_chunk *c = at_wchunk(r->wchunk);
    uint8_t *p = (uint8_t *)c + wpos;
    if (AT_UNLIKELY(ts < th->last_ts)) /* a handler's event overtook this clock read */
        ts = th->last_ts;
    th->last_ts = ts;
    /* at_rec: size; type_index and flags (ids present, CPU); ts; seq; payload_len and nips */
    uint32_t w1 = (uint16_t)t->index |
                  ((has_act ? AT_REC_ACT : 0) | (has_rel ? AT_REC_REL : 0) |
                   at_tbuf_cpu_now() << AT_REC_CPU_SHIFT) << 16;
    uint32_t w5 = plen | (stk1 ? 1u << 16 : 0);
    __builtin_memcpy(p, &size, 4);
    __builtin_memcpy(p + 4, &w1, 4);
    __builtin_memcpy(p + 8, &ts, 8);
    __builtin_memcpy(p + 16, &seq, 4);
    __builtin_memcpy(p + 20, &w5, 4);
    p += sizeof(at_rec);
    if (has_act) {
        __builtin_memcpy(p, activity, 16);
        p += 16;
    }
    if (has_rel) {
        __builtin_memcpy(p, related, 16);
        p += 16;
    }
    if (stk1) {
        __builtin_memcpy(p, &stk1, 8);
        p += 8;
    }
    if (head) {
        __builtin_memcpy(p, &head8, 8);
        p += 8;
    }
    if (AT_LIKELY(payload_len)) /* a hooked call's event has its captures */
        at_copy_small(p, payload, payload_len);
    wpos += size;
    r->wpos = wpos;
    at_ring_publish(r, r->wchunk, wpos);
    th->seq_written = seq;
    if (AT_LIKELY(wpos + AT_PREFETCH_AHEAD + 64 <= AT_CHUNK_SIZE)) {
        /* records of at most a line advance the fetch point by at most a line: one fetch per
         * record reaches every line (a constant size folds the test away) */
        const uint8_t *nx = (const uint8_t *)c + wpos;
        if (size > 64)
            at_tbuf_prefetch_write(nx + AT_PREFETCH_AHEAD - 64);
        at_tbuf_prefetch_write(nx + AT_PREFETCH_AHEAD);
    }
    atomic_store_explicit(&r->seq_pub, th->seq, memory_order_release);
    atomic_signal_fence(memory_order_seq_cst);
    th->busy = 0;
    atomic_store_explicit(&r->pending, outer, memory_order_release);
    return true;
}

/* An activity's Start or Stop: its record's payload starts with head8 (at_event_write_head). */
static inline __attribute__((always_inline)) bool at_tbuf_try_put_act(const at_event_type *t,
                                                                      const at_guid *activity,
                                                                      bool has_act,
                                                                      const at_guid *related,
                                                                      bool has_rel, uint64_t head8,
                                                                      const void *payload,
                                                                      uint32_t payload_len)
{
    return at_tbuf_try_put(t, activity, has_act, related, has_rel, true, head8, payload,
                           payload_len, 0);
}

/* The record, by the general writer when the fast one cannot: 0, or -1 when dropped. */
static inline __attribute__((always_inline)) int at_tbuf_put_act(const at_event_type *t,
                                                                 const at_guid *activity,
                                                                 bool has_act,
                                                                 const at_guid *related,
                                                                 bool has_rel, uint64_t head8,
                                                                 const void *payload,
                                                                 uint32_t payload_len)
{
    if (AT_LIKELY(at_tbuf_try_put_act(t, activity, has_act, related, has_rel, head8, payload,
                                      payload_len)))
        return 0;
    return at_tbuf_write_act_general(t, activity, related, head8, payload, payload_len);
}

#endif
