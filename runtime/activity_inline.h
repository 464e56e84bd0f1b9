/* activity_inline.h: the flow hot path of the engine, inline (included by activity.h): a pool or
 * callback hop is capture + enter + leave + release, and calls across files would cost as much as
 * the work. Only activity.c writes these fields otherwise. */
#ifndef AT_ACTIVITY_INLINE_H
#define AT_ACTIVITY_INLINE_H

enum { ACT_LIVE = 0, ACT_STOPPED = 1, ACT_KILLED = 2 };

struct at_activity {
    uint32_t refs;              /* atomic */
    uint8_t stopped;            /* atomic: ACT_* */
    int8_t path_end;            /* AddIdToGuid offset after this id; > 12 once the path overflowed */
    uint16_t level;             /* 0 for a root */
    uint32_t last_child;        /* atomic: the last child number handed out */
    at_activity *creator;       /* holds a reference */
    at_activity_kind *kind;
    uint64_t unique;            /* the <Name>Id payload value */
    at_guid id;
    uint64_t parked;            /* atomic; shim/fdflow.c: when a thread that had adopted it put it
                                 * back (at_ticks), until one takes it up again; 0: not parked */
    uint64_t parked_acc;        /* atomic; shim/waits.c: time parked not yet written (ticks) */
};

/* The engine's per-thread state, one object: in a shared library each thread-local variable costs a
 * load of its offset from the GOT, and a Start touched ten of them. The names below are its fields;
 * the ones without a name here are activity.c's alone. */
typedef struct at_act_tls {
    at_activity *cur;       /* the current activity (a reference, unless borrowed) */
    bool borrowed;          /* cur borrowed from a capture by at_flow_enter */
    bool registered;        /* activity.c: the thread's exit releases what it holds */
    uint8_t root_grow;      /* activity.c: log2 of the next block of root numbers */
    uint8_t task_n;         /* activity.c: hand-offs open as tasks (at_flow_task_start) */
    uint32_t refc_busy;
    at_activity *pre_act;
    uint32_t pre_n;
    uint32_t rel_n;
    at_activity *rel_act;
    at_activity *free_list; /* activity.c: freed activities, linked through creator */
    uint32_t free_count;
    uint32_t root_next, root_left; /* activity.c: this thread's block of root numbers */
    uint64_t unique_next, unique_end; /* activity.c: this thread's block of <Name>Id values */
} at_act_tls;
#define at_act_t AT_PTLS_AS(at_act_tls, act) /* at_common.h */

/* The thread's current activity (a reference, unless borrowed from a capture by at_flow_enter).
 * Set with at_act_cur_set (which empties at_act_idc, below). */
#define at_act_cur (at_act_t.cur)
#define at_act_borrowed (at_act_t.borrowed)

/* The id an event of the thread takes (that of the current activity's nearest live one), kept in
 * the thread's state (activity.c cur_live_id): read from the activity itself, it was a page of its
 * own that each event after a system call which empties the TLB walked again. The entry holds
 * while the thread's current pointer is unchanged (every change empties it: meanwhile the thread's
 * reference keeps the object from being freed and reused) and at_act_epoch reads the same: it
 * changes at every stop or kill that other threads may see, that is every one but the stop of an
 * activity its thread holds alone (the current one with no other reference: no other thread's
 * current activity is it or below it). */
typedef struct at_act_idcache {
    at_activity *act; /* the current activity the entry is for; NULL: none */
    uint32_t epoch;   /* at_act_epoch when it was filled */
    uint32_t none;    /* no live activity: the event has no id */
    at_guid id;
} at_act_idcache;
#define at_act_idc AT_PTLS_AS(at_act_idcache, idc) /* at_common.h */
extern uint32_t at_act_epoch; /* atomic */
#define at_act_cur_set(v) (at_act_idc.act = NULL, at_act_cur = (v))
static inline void at_act_epoch_bump(void)
{
    __atomic_fetch_add(&at_act_epoch, 1, __ATOMIC_ACQ_REL);
}

static inline bool at_act_is_live(const at_activity *a)
{
    return __atomic_load_n(&a->stopped, __ATOMIC_RELAXED) == ACT_LIVE;
}

/* Nearest live activity from a up its creator chain (a itself if live); NULL if none. */
static inline at_activity *at_act_live_from(at_activity *a)
{
    while (a && !at_act_is_live(a))
        a = a->creator;
    return a;
}

/* Flow references without an atomic per hop. A thread capturing the same activity again and again
 * (a loop submitting tasks) takes AT_PREPAY references with one atomic and hands them out one by
 * one; a thread releasing captures of the same activity (a pool thread running its tasks) owes them
 * and pays AT_PREPAY with one atomic. Otherwise submitter and runner would each write the activity's
 * line at every task, taking it from each other's cache. The thread's cached references are real
 * ones: they keep the activity's memory (never its state) a little longer, and go back when the
 * thread moves to another activity, when a stop wants to know whether it holds the only reference,
 * and at thread exit. at_refc_busy is non-zero inside a cache update (a signal handler that captures
 * then goes straight to the atomics) and after the thread's exit. */
#define AT_PREPAY 64u
#define at_pre_act (at_act_t.pre_act) /* prepaid references on it: at_pre_n */
#define at_pre_n (at_act_t.pre_n)
#define at_rel_act (at_act_t.rel_act) /* releases owed to it: at_rel_n */
#define at_rel_n (at_act_t.rel_n)
#define at_refc_busy (at_act_t.refc_busy)
at_activity *at_flow_capture_slow(at_activity *c);
void at_flow_release_slow(at_activity *a);

static inline at_activity *at_flow_capture(void)
{
    at_activity *c = at_act_cur;
    if (AT_LIKELY(!c))
        return NULL;
    c = at_act_live_from(c);
    if (!c)
        return NULL;
    at_refc_busy++;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (AT_LIKELY(at_refc_busy == 1 && c == at_pre_act && at_pre_n)) {
        at_pre_n--;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        at_refc_busy--;
        return c;
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    at_refc_busy--;
    return at_flow_capture_slow(c);
}

/* What enter returns: the previous current activity, its low bit set when it was borrowed. The
 * thread's reference on it (if any) moves to the caller until leave. */
static inline at_activity *at_flow_enter(at_activity *captured)
{
    at_activity *prev = at_act_cur;
    if (!captured && !prev)
        return NULL;
    uintptr_t tagged = (uintptr_t)prev | (uintptr_t)at_act_borrowed;
    at_act_cur_set(at_act_live_from(captured)); /* borrowed: captured's chain keeps it alive */
    at_act_borrowed = true;
    return (at_activity *)tagged;
}

/* The work a hand-off brought ends (activity.c): the task its Receive opened, if prev is that of the
 * enter it followed. */
void at_flow_task_leave(at_activity *prev);

static inline void at_flow_leave(at_activity *prev)
{
    if (AT_UNLIKELY(at_act_t.task_n))
        at_flow_task_leave(prev);
    at_activity *old = at_act_cur;
    if (!at_act_borrowed && old)
        at_activity_unref(old);
    at_act_cur_set((at_activity *)((uintptr_t)prev & ~(uintptr_t)1));
    at_act_borrowed = ((uintptr_t)prev & 1) != 0;
}

/* One of the references this thread's caches hold on a (prepaid or owed), taken without an atomic:
 * true when it had one, and the caller then owns it (release it with at_flow_release). A thread
 * that keeps adopting the same activity (a worker taking connections of one server activity) then
 * pays one atomic per AT_PREPAY hops. Holding references on a also means a pointer read from shared
 * state that equals a is a itself: it cannot have been freed and reused. */
static inline bool at_flow_take(at_activity *a)
{
    bool ok = false;
    at_refc_busy++;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (AT_LIKELY(at_refc_busy == 1)) {
        if (a == at_pre_act && at_pre_n) {
            at_pre_n--;
            ok = true;
        } else if (a == at_rel_act && at_rel_n) {
            at_rel_n--;
            ok = true;
        }
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    at_refc_busy--;
    return ok;
}

static inline void at_flow_release(at_activity *captured)
{
    if (!captured)
        return;
    at_refc_busy++;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (AT_LIKELY(at_refc_busy == 1)) {
        if (captured == at_rel_act && at_rel_n < AT_PREPAY) {
            at_rel_n++;
            goto done;
        }
        if (captured == at_pre_act && at_pre_n < AT_PREPAY) { /* back to this thread's own prepaid */
            at_pre_n++;
            goto done;
        }
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    at_refc_busy--;
    at_flow_release_slow(captured);
    return;
done:
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    at_refc_busy--;
}

#endif
