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
};

/* The thread's current activity (a reference, unless borrowed from a capture by at_flow_enter). */
extern AT_TLS at_activity *at_act_cur;
extern AT_TLS bool at_act_borrowed;

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

static inline at_activity *at_flow_capture(void)
{
    at_activity *c = at_act_cur;
    if (AT_LIKELY(!c))
        return NULL;
    c = at_act_live_from(c);
    if (c)
        __atomic_fetch_add(&c->refs, 1, __ATOMIC_RELAXED);
    return c;
}

/* What enter returns: the previous current activity, its low bit set when it was borrowed. The
 * thread's reference on it (if any) moves to the caller until leave. */
static inline at_activity *at_flow_enter(at_activity *captured)
{
    at_activity *prev = at_act_cur;
    if (!captured && !prev)
        return NULL;
    uintptr_t tagged = (uintptr_t)prev | (uintptr_t)at_act_borrowed;
    at_act_cur = at_act_live_from(captured); /* borrowed: captured's chain keeps it alive */
    at_act_borrowed = true;
    return (at_activity *)tagged;
}

static inline void at_flow_leave(at_activity *prev)
{
    at_activity *old = at_act_cur;
    if (!at_act_borrowed && old)
        at_activity_unref(old);
    at_act_cur = (at_activity *)((uintptr_t)prev & ~(uintptr_t)1);
    at_act_borrowed = ((uintptr_t)prev & 1) != 0;
}

static inline void at_flow_release(at_activity *captured)
{
    if (captured)
        at_activity_unref(captured);
}

#endif
