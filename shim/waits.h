/* waits.h: blocked time (waits.c). A call that may block, made by a thread in an activity, is timed
 * (two clock reads); when it took at least the threshold (ACTTRACE_WAIT_MIN_US) the thread writes a
 * WaitSuspend at the call's start, with the call's stack, and a WaitResume at its end, both in its
 * current activity. A thread in no activity only tests its current activity, as before. */
#ifndef AT_SHIM_WAITS_H
#define AT_SHIM_WAITS_H

#include <stdint.h>

#include "shim.h"
#include "tbuf_hot.h"

typedef struct at_wait_cfg {
    int on;             /* the settings ask for waits and the session writes them */
    uint64_t min_ticks; /* ACTTRACE_WAIT_MIN_US in the event clock's ticks, once the clock is
                         * calibrated (0 before: every timed call is checked in ns by
                         * at_wait_record) */
    uint64_t min_ns;    /* ACTTRACE_WAIT_MIN_US in ns */
    uint64_t parked_quantum_ticks; /* at_wait_parked's quantum in ticks (0: not yet known) */
} at_wait_cfg_t;
extern at_wait_cfg_t at_wait_cfg;

/* The start's step (inline: the start's code stays on its own pages, shim/start.ld). */
static inline void at_waits_init(void)
{
    if (!at_cfg.waits || !at_ev.wait_suspend || !at_ev.wait_resume)
        return;
    at_wait_cfg.min_ns = (uint64_t)at_cfg.wait_min_us * 1000u;
    at_wait_cfg.min_ticks = 0; /* the clock may not be calibrated yet: at_wait_record sets it */
    __atomic_store_n(&at_wait_cfg.on, 1, __ATOMIC_RELEASE);
}
/* The wait [t0, t1] (at_ticks) of call, for reason, on object, announced on ring (at_tbuf_wait_begin,
 * NULL: nowhere): its two events when it lasted at least the threshold. Keeps errno. Called from the
 * function the program called (directly, or by a tail call from it): the stack starts two frames
 * up. */
void at_wait_record(struct at_ring *ring, uint64_t t0, uint64_t t1, const char *reason,
                    const char *call, uint64_t obj);

/* r = call_expr, timed as a wait of reason when the settings ask (the caller tested that the thread
 * is in an activity). The wait's start is announced on the thread's ring first, so that the trace
 * writer does not write past it while the call blocks (tbuf_hot.h). */
#define AT_WAIT_TIMED(r, call_expr, reason, name, obj)                                             \
    do {                                                                                           \
        if (!__atomic_load_n(&at_wait_cfg.on, __ATOMIC_RELAXED) || at_internal) {                  \
            r = call_expr;                                                                         \
            break;                                                                                 \
        }                                                                                          \
        uint64_t t0_;                                                                              \
        struct at_ring *ring_ = at_tbuf_wait_begin(&t0_);                                          \
        r = call_expr;                                                                             \
        uint64_t t1_ = at_ticks();                                                                 \
        if (AT_UNLIKELY(t1_ - t0_ >= at_wait_cfg.min_ticks))                                       \
            at_wait_record(ring_, t0_, t1_, reason, name, (uint64_t)(obj));                        \
        else                                                                                       \
            at_tbuf_wait_clear(ring_);                                                             \
    } while (0)

/* Activity a, which a thread had adopted and put back at t0 (at_ticks), is taken up again on fd
 * (obj): a wait of at least the threshold is added to what a has parked and not yet written, and
 * once that reaches AT_PARKED_QUANTUM_NS it is written as one WaitResume of reason "event loop" (no
 * Suspend: the wait was no thread's), so that a busy server's every request does not cost an event.
 * Keeps errno. */
#define AT_PARKED_QUANTUM_NS 1000000u
void at_wait_parked(struct at_activity *a, uint64_t t0, uint64_t obj);
/* What a has parked and not yet written, written now (its fd is being closed: before its Stop). */
void at_wait_parked_flush(struct at_activity *a, uint64_t obj);

/* The reason of an interposed I/O call, from its name (fdflow.c) */
const char *at_wait_io_reason(const char *call);

#endif
