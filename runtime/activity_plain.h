/* activity_plain.h: the plain hooked call's Start and Stop (a Start with no fields, a Stop with one
 * 32-bit field, no stack), inline. The engine keeps the out-of-line at_activity_start_held_plain and
 * at_activity_end_held_u32 (activity.h) for its other callers; the shim's hooked-call path
 * (shim/hookpath.c) inlines these bodies into the stub's entry and return, so that a hooked call's
 * Start and Stop are not each a call of their own with registers saved and restored around it.
 * Only activity.c writes the state read here. Internal to the runtime and the shim's hook path. */
#ifndef AT_ACTIVITY_PLAIN_H
#define AT_ACTIVITY_PLAIN_H

#include "activity.h"
#include "actpath.h"
#include "tbuf_hot.h"

struct at_activity_kind {
    at_activity_kind *next;     /* registry list */
    char *provider, *name;
    unsigned flags;
    at_event_type *start_ev, *stop_ev;
};

/* activity.c's process-wide state the plain Start reads */
extern uint32_t at_actg_pid;                 /* 0: the engine is not set up yet */
extern at_guid at_actg_root_prefix;          /* "//1" (the AppDomain) encoded */
extern int at_actg_root_off;
extern at_guid at_actg_process_parent;       /* RelatedActivityId of root Starts (exec chains) */
extern bool at_actg_have_process_parent;

#define AT_ACT_CACHE_MAX 256u /* freed activities a thread keeps for its next Starts */

/* The ways out of the one-pass bodies below (activity.c), each a tail call of its own. They leave
 * errno as they found it, and the one-pass bodies make no call: a caller that keeps errno for the
 * program (the hooked call's path) need not save it around them. */
at_activity *at_act_start_plain_general(at_activity_kind *k);
at_activity *at_act_start_plain_written_general(at_activity *a, const at_guid *related);
void at_act_end_u32_general(at_activity *a, uint32_t v);
void at_act_end_u32_written_general(at_activity *a, uint32_t v);
void at_act_end_u32_free_general(at_activity *a);

/* The common case goes in one pass that makes no call; anything else (the engine or the thread not
 * set up, a block of numbers or the allocation cache to refill, a borrowed or stopped current
 * activity, a namesake to stop first, the depth limit, a long path, a record the fast writer does
 * not take) goes through the general body. */
static inline __attribute__((always_inline)) at_activity *at_act_start_plain(at_activity_kind *k)
{
    at_act_tls *s = &at_act_t;
    at_activity *parent = s->cur;
    uint32_t pid = __atomic_load_n(&at_actg_pid, __ATOMIC_ACQUIRE); /* 0: ensure_init has not run */
    if (AT_UNLIKELY(!k || !pid || s->borrowed))
        return at_act_start_plain_general(k);
    const at_guid *related;
    if (parent) {
        /* start()'s tests for a live current activity (the parent then): the depth limit, a path
         * that may need the general encoder, a namesake on the chain when not recursive */
        if (AT_UNLIKELY(!at_act_is_live(parent) || parent->level >= AT_ACTIVITY_MAX_DEPTH ||
                        (unsigned)parent->path_end > 7))
            return at_act_start_plain_general(k);
        if (!(k->flags & AT_ACT_RECURSIVE))
            for (at_activity *same = parent; same; same = same->creator)
                if (same->kind == k && at_act_is_live(same))
                    return at_act_start_plain_general(k);
        related = &parent->id;
    } else {
        if (AT_UNLIKELY((unsigned)at_actg_root_off > 7))
            return at_act_start_plain_general(k);
        related = at_actg_have_process_parent ? &at_actg_process_parent : NULL;
    }
    /* The thread's caches, tested right before they are used, as start() and make_id() do (a
     * signal handler's Start in between could empty them). From here on as they do it. */
    at_activity *a = s->free_list;
    if (AT_UNLIKELY(!a || s->unique_next == s->unique_end || (!parent && !s->root_left)))
        return at_act_start_plain_general(k);
    s->free_list = a->creator;
    s->free_count--;
    a->refs = 2; /* the thread's and the caller's: only this thread can reach it so far */
    a->stopped = ACT_LIVE;
    a->last_child = 0;
    a->kind = k;
    a->unique = s->unique_next++;
    if (parent) {
        a->level = (uint16_t)(parent->level + 1);
        uint32_t n = __atomic_add_fetch(&parent->last_child, 1, __ATOMIC_RELAXED);
        a->path_end = (int8_t)at_actpath_child_near(&a->id, &parent->id, parent->path_end, n, pid);
    } else {
        a->level = 0;
        s->root_left--;
        uint32_t n = s->root_next++;
        a->path_end = (int8_t)at_actpath_child_near(&a->id, &at_actg_root_prefix, at_actg_root_off,
                                                    n, pid);
    }
    a->creator = parent; /* the thread's reference on it becomes a's */
    const at_event_type *t = k->start_ev;
    if (at_event_enabled(t)) {
        /* the record's shape made constant both ways */
        bool put = related ? at_tbuf_try_put_act(t, &a->id, true, related, true, a->unique, NULL, 0)
                           : at_tbuf_try_put_act(t, &a->id, true, NULL, false, a->unique, NULL, 0);
        if (AT_UNLIKELY(!put))
            return at_act_start_plain_written_general(a, related);
    }
    at_act_idc.act = NULL; /* at_act_cur_set */
    s->cur = a;
    return a;
}

static inline __attribute__((always_inline)) void at_act_end_u32(at_activity *a, uint32_t v)
{
    at_act_tls *s = &at_act_t;
    /* stop_held()'s tests: current, live, held by the thread and the caller alone (the flow
     * caches then hold none), its creator live */
    if (AT_UNLIKELY(!a || a != s->cur || s->borrowed || !at_act_is_live(a) ||
                    __atomic_load_n(&a->refs, __ATOMIC_ACQUIRE) != 2 ||
                    (a->creator && !at_act_is_live(a->creator))))
        return at_act_end_u32_general(a, v);
    __atomic_store_n(&a->stopped, ACT_STOPPED, __ATOMIC_RELAXED);
    /* a's reference on its creator becomes the thread's. Before the record (stop_held() makes it
     * after): a signal handler in between sees the creator current either way (a is stopped), and
     * a stays off the allocation cache until its record is written. */
    at_act_idc.act = NULL; /* at_act_cur_set */
    s->cur = a->creator;
    const at_event_type *t = a->kind->stop_ev;
    if (at_event_enabled(t) &&
        AT_UNLIKELY(!at_tbuf_try_put_act(t, &a->id, true, NULL, false, a->unique, &v, sizeof v)))
        return at_act_end_u32_written_general(a, v);
    if (AT_UNLIKELY(s->free_count >= AT_ACT_CACHE_MAX || !s->registered))
        return at_act_end_u32_free_general(a);
    a->creator = s->free_list; /* act_free() */
    s->free_list = a;
    s->free_count++;
}

#endif
