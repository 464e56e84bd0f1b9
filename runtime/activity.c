/* activity.c: the activity engine. EventSource's ActivityTracker semantics (reference 000, sections
 * 4, 5 and 8) over a per-thread current activity that flows like AsyncLocal.
 *
 * Ownership: an activity is reference counted. References are held by
 *   - the thread whose current activity it is (one, in at_act_cur),
 *   - each child (its creator pointer), so a chain from any activity to its root stays valid,
 *   - captures (at_flow_capture) and explicit at_activity_ref.
 * An activity is freed when the last reference goes, stopped or not: an unstopped activity nobody can
 * reach any more can never be stopped (EventSource's garbage collector does the same).
 *
 * The thread's current pointer may name an activity that another thread stopped (at_activity_stop_ref,
 * or a Stop by name on a thread that shares the chain). Like EventSource's ActivityChanging, the
 * thread then behaves as if its nearest live ancestor were current: events carry that id, and new
 * activities become its children (EventSource would extend the dead one's path; we never extend a
 * finished activity's path, so the tree in the trace matches what each event saw).
 *
 * Hot paths (a nested Start+Stop, capture+enter+leave) take no lock, allocate from a per-thread cache
 * and use atomics only where another thread can hold a reference. */
#include "activity.h"

#include "activity_int.h"
#include "activity_plain.h"
#include "actpath.h"
#include "tbuf_hot.h"
#include "xstate.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* --- process-wide state --- */
uint32_t at_actg_pid AT_FORK_DATA; /* the pid in checksums; set lazily and after fork */
at_guid at_actg_root_prefix AT_START_DATA;     /* "//1" (the AppDomain) encoded, set in init_once before at_actg_pid */
int at_actg_root_off AT_START_DATA;
static uint32_t g_root_next;      /* atomic: EventSource's static m_nextId (wraps, by design) */
static uint32_t g_domain = 1;     /* the AppDomain part of root paths: 1, or 1 + the exec generation */
static uint64_t g_unique_next = 1;/* atomic: per-thread blocks of <Name>Id values are taken from it */
at_guid at_actg_process_parent;  /* RelatedActivityId of root Starts (exec chains) */
bool at_actg_have_process_parent;
static pthread_mutex_t g_kinds_lock AT_FORK_DATA = PTHREAD_MUTEX_INITIALIZER;
static at_activity_kind *g_kinds AT_START_DATA;
static pthread_once_t g_once AT_START_DATA = PTHREAD_ONCE_INIT;
static pthread_key_t g_thread_key AT_START_DATA;
#define g_send_ev (at_rt_hot.send_ev) /* at_common.h: on the runtime's hot line */
#define g_recv_ev (at_rt_hot.recv_ev)

/* --- per-thread state --- */
#define UNIQUE_BLOCK 1024u
#define CACHE_MAX AT_ACT_CACHE_MAX
AT_PTLS_FITS(at_act_tls, act); /* activity_inline.h at_act_t */
AT_PTLS_FITS(at_act_idcache, idc); /* activity_inline.h at_act_idc */
uint32_t at_act_epoch AT_HOT_PAGE_SHARED; /* activity_inline.h */
#define REFC_EXITED 0x10000u /* at_refc_busy after the thread's exit: no caching any more */
#define at_free_list (at_act_t.free_list)
#define at_free_count (at_act_t.free_count)
#define at_unique_next (at_act_t.unique_next)
#define at_unique_end (at_act_t.unique_end)
/* Root numbers come in per-thread blocks of g_root_next (one locked add costs ~6 ns, a tenth of a
 * hooked call): 1, 2, 4 ... up to ROOT_BLOCK_MAX numbers per refill, so a thread that starts one
 * root takes one number and a thread that starts millions takes a locked add per 64. Numbers stay
 * unique in the process; only their order across threads no longer follows time. */
#define ROOT_BLOCK_MAX_LOG2 6
#define at_root_next (at_act_t.root_next)
#define at_root_left (at_act_t.root_left)
#define at_root_grow (at_act_t.root_grow)
#define at_thread_registered (at_act_t.registered)

static void thread_exit(void *unused);

AT_FORK_TEXT static void after_fork_child(void)
{
    /* a thread of the parent registering a kind held it: made afresh (a kind is linked last, so
     * the list is whole) */
    at_mutex_fork_reset(&g_kinds_lock);
    at_activity_after_fork_child();
}

static void init_once(void)
{
    memset(&at_actg_root_prefix, 0, sizeof at_actg_root_prefix);
    at_actg_root_off = at_actpath_add_id(&at_actg_root_prefix, 0, g_domain, false, (uint32_t)getpid());
    pthread_key_create(&g_thread_key, thread_exit);
    pthread_atfork(NULL, NULL, after_fork_child);
    __atomic_store_n(&at_actg_pid, (uint32_t)getpid(), __ATOMIC_RELEASE); /* last: the fast check reads it */
}

static inline void ensure_init(void)
{
    if (AT_UNLIKELY(__atomic_load_n(&at_actg_pid, __ATOMIC_ACQUIRE) == 0))
        at_xs_once(&g_once, init_once); /* may be inside a hooked call: xstate.h */
}

/* The thread's activities and its allocation cache are released when it ends; registering the key
 * value costs once per thread that ever holds an activity. */
static AT_NOINLINE void register_thread(void)
{
    at_thread_registered = true;
    AT_INTERNAL_BEGIN();
    if (!at_thread_managed) /* otherwise at_activity_thread_exit is called at the thread's end */
        at_xs_setspecific(g_thread_key, (void *)1);
    AT_INTERNAL_END();
}

static inline at_activity *act_alloc(void)
{
    at_activity *a = at_free_list;
    if (AT_LIKELY(a)) {
        at_free_list = a->creator;
        at_free_count--;
        return a;
    }
    if (AT_UNLIKELY(!at_thread_registered))
        register_thread();
    AT_INTERNAL_BEGIN(); /* a hooked malloc sees only the program's own */
    a = at_xs_malloc(sizeof(at_activity)); /* may be a hooked call: xstate.h */
    AT_INTERNAL_END();
    return a;
}

static inline void act_free(at_activity *a)
{
    if (AT_LIKELY(at_free_count < CACHE_MAX && at_thread_registered)) {
        a->creator = at_free_list;
        at_free_list = a;
        at_free_count++;
        return;
    }
    AT_INTERNAL_BEGIN();
    at_xs_free(a);
    AT_INTERNAL_END();
}

#define is_live at_act_is_live
#define live_from at_act_live_from

void at_activity_ref(at_activity *a)
{
    if (a)
        __atomic_fetch_add(&a->refs, 1, __ATOMIC_RELAXED);
}

void at_activity_unref(at_activity *a)
{
    while (a && __atomic_sub_fetch(&a->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        at_activity *c = a->creator;
        act_free(a);
        a = c;
    }
}

/* n references at once (the flow caches' settlements) */
static void unref_n(at_activity *a, uint32_t n)
{
    if (n && __atomic_sub_fetch(&a->refs, n, __ATOMIC_ACQ_REL) == 0) {
        at_activity *c = a->creator;
        act_free(a);
        at_activity_unref(c);
    }
}

static void refc_register(void)
{
    if (AT_UNLIKELY(!at_thread_registered)) {
        ensure_init();
        register_thread(); /* thread_exit settles what the caches hold */
    }
}

AT_HOT_FN at_activity *at_flow_capture_slow(at_activity *c)
{
    if (at_refc_busy) { /* inside a cache update (a signal handler), or the thread has ended */
        __atomic_fetch_add(&c->refs, 1, __ATOMIC_RELAXED);
        return c;
    }
    at_refc_busy = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    at_activity *old = at_pre_act;
    uint32_t n = at_pre_n;
    __atomic_fetch_add(&c->refs, AT_PREPAY, __ATOMIC_RELAXED);
    at_pre_act = c;
    at_pre_n = AT_PREPAY - 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    at_refc_busy = 0;
    refc_register();
    if (old)
        unref_n(old, n);
    return c;
}

AT_HOT_FN void at_flow_release_slow(at_activity *a)
{
    if (at_refc_busy) {
        at_activity_unref(a);
        return;
    }
    at_refc_busy = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    at_activity *old = at_rel_act;
    uint32_t n = at_rel_n;
    at_rel_act = a;
    at_rel_n = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    at_refc_busy = 0;
    refc_register();
    if (old)
        unref_n(old, n); /* a itself when its count was full */
}

/* Settle what this thread's flow caches hold on a (all of it when a is NULL). */
static void refc_settle(at_activity *a)
{
    if (at_refc_busy)
        return;
    at_refc_busy = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    at_activity *p = NULL, *r = NULL;
    uint32_t pn = 0, rn = 0;
    if (at_pre_act && (!a || at_pre_act == a)) {
        p = at_pre_act;
        pn = at_pre_n;
        at_pre_act = NULL;
        at_pre_n = 0;
    }
    if (at_rel_act && (!a || at_rel_act == a)) {
        r = at_rel_act;
        rn = at_rel_n;
        at_rel_act = NULL;
        at_rel_n = 0;
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    at_refc_busy = 0;
    if (p)
        unref_n(p, pn);
    if (r)
        unref_n(r, rn);
}

static inline bool refc_holds(const at_activity *a)
{
    return (a == at_pre_act && at_pre_n) || (a == at_rel_act && at_rel_n);
}

/* True when the caller's reference is the only one: nobody else can take one meanwhile (references
 * are only made from references). */
static inline bool sole_ref(at_activity *a)
{
    /* the flow caches' references are counted in refs: with 1, they hold none */
    if (AT_LIKELY(__atomic_load_n(&a->refs, __ATOMIC_ACQUIRE) == 1))
        return true;
    if (!refc_holds(a))
        return false;
    refc_settle(a);
    return __atomic_load_n(&a->refs, __ATOMIC_ACQUIRE) == 1;
}

static void thread_exit(void *unused)
{
    (void)unused;
    refc_settle(NULL);
    at_refc_busy = REFC_EXITED; /* a release after this (a later destructor) goes straight through */
    at_activity *c = at_act_cur;
    at_act_cur_set(NULL);
    if (!at_act_borrowed)
        at_activity_unref(c);
    at_act_borrowed = false;
    at_thread_registered = false; /* from here on act_free frees */
    AT_INTERNAL_BEGIN();
    while (at_free_list) {
        at_activity *a = at_free_list;
        at_free_list = a->creator;
        at_xs_free(a);
    }
    AT_INTERNAL_END();
    at_free_count = 0;
}

void at_activity_thread_exit(void)
{
    if (at_thread_registered)
        thread_exit(NULL);
}

static inline uint64_t next_unique(void)
{
    if (AT_UNLIKELY(at_unique_next == at_unique_end)) {
        at_unique_next = __atomic_fetch_add(&g_unique_next, UNIQUE_BLOCK, __ATOMIC_RELAXED);
        at_unique_end = at_unique_next + UNIQUE_BLOCK;
    }
    return at_unique_next++;
}

/* --- kinds --- */

static at_event_type *reg_event(const at_activity_kind_desc *d, const char *provider,
                                const char *suffix, uint8_t opcode, uint32_t nextra,
                                const at_field *extra)
{
    size_t nl = strlen(d->name);
    /* on the stack for the usual kinds (the shim's, a config's): no allocation at a start */
    char ename_in[128], idname_in[128];
    at_field f_in[16];
    bool big = nl + 6 > sizeof ename_in || nextra + 1 > 16;
    char *ename = big ? malloc(nl + 6) : ename_in, *idname = big ? malloc(nl + 3) : idname_in;
    at_field *f = big ? malloc(sizeof(at_field) * (1 + (size_t)nextra)) : f_in;
    at_event_type *t = NULL;
    if (ename && idname && f) {
        memcpy(ename, d->name, nl);
        strcpy(ename + nl, suffix);
        memcpy(idname, d->name, nl);
        strcpy(idname + nl, "Id");
        f[0].name = idname;
        f[0].type = NT_TYPE_UINT64;
        for (uint32_t i = 0; i < nextra; i++)
            f[1 + i] = extra[i];
        at_event_desc ed = {
            .provider = provider,
            .name = ename,
            .level = d->level ? d->level : NT_LEVEL_INFO,
            .opcode = opcode,
            .keywords = d->keywords,
            .nfields = 1 + nextra,
            .fields = f,
        };
        t = at_event_type_register(&ed);
    }
    if (big) {
        free(ename);
        free(idname);
        free(f);
    }
    return t;
}

at_activity_kind *at_activity_kind_register(const at_activity_kind_desc *d)
{
    if (!d || !d->name || !d->name[0] || (d->nstart_fields && !d->start_fields) ||
        (d->nstop_fields && !d->stop_fields)) {
        errno = EINVAL;
        return NULL;
    }
    ensure_init();
    const char *provider = d->provider ? d->provider : AT_ACTIVITY_PROVIDER;
    pthread_mutex_lock(&g_kinds_lock);
    at_activity_kind *k;
    for (k = g_kinds; k; k = k->next)
        if (strcmp(k->name, d->name) == 0 && strcmp(k->provider, provider) == 0)
            goto out;
    k = at_reg_alloc(sizeof *k); /* the registry's memory: never freed, not the program's heap */
    if (!k)
        goto out;
    k->provider = at_reg_strdup(provider);
    k->name = at_reg_strdup(d->name);
    k->flags = d->flags;
    k->start_ev = reg_event(d, provider, "Start", NT_OPCODE_START, d->nstart_fields, d->start_fields);
    k->stop_ev = reg_event(d, provider, "Stop", NT_OPCODE_STOP, d->nstop_fields, d->stop_fields);
    if (!k->provider || !k->name || !k->start_ev || !k->stop_ev) {
        k = NULL; /* what was carved stays unused */
        errno = EINVAL;
        goto out;
    }
    k->next = g_kinds;
    __atomic_store_n(&g_kinds, k, __ATOMIC_RELEASE);
out:
    pthread_mutex_unlock(&g_kinds_lock);
    return k;
}

/* --- events --- */

#define EXTRA_MAX 8192u

static AT_NOINLINE void write_activity_event_slow(const at_event_type *t, const at_guid *id,
                                                  const at_guid *related, uint64_t unique,
                                                  const void *extra, uint32_t extra_len,
                                                  const uintptr_t *ips, uint32_t nips)
{
    if (extra_len > EXTRA_MAX) /* extra fields this long are left out; the event is written */
        extra_len = 0;
    at_event_write_head(t, id, related, unique, extra, extra_len, ips, nips);
}

/* The enabled test inline; the payload frame only when the event is written. */
static inline void write_activity_event(const at_event_type *t, const at_guid *id,
                                        const at_guid *related, uint64_t unique, const void *extra,
                                        uint32_t extra_len, const uintptr_t *ips, uint32_t nips)
{
    if (!at_event_enabled(t))
        return;
    if (AT_LIKELY(nips == 0 && extra_len <= EXTRA_MAX))
        at_event_write_act(t, id, related, unique, extra, extra_len);
    else
        write_activity_event_slow(t, id, related, unique, extra, extra_len, ips, nips);
}

/* The Start or Stop of an activity made here, its record inline (a hooked call writes two): the
 * activity's id is never zero (a path's first byte holds the AppDomain's code), nor is a related id
 * given (a parent's, or the process parent's, which is set only when not zero). */
static inline __attribute__((always_inline)) void write_own_event(const at_event_type *t,
                                                                  const at_guid *id,
                                                                  const at_guid *related,
                                                                  uint64_t unique,
                                                                  const void *extra,
                                                                  uint32_t extra_len,
                                                                  const uintptr_t *ips,
                                                                  uint32_t nips)
{
    if (!at_event_enabled(t))
        return;
    if (AT_LIKELY(nips == 0 && extra_len <= EXTRA_MAX))
        at_tbuf_put_act(t, id, true, related, related != NULL, unique, extra, extra_len);
    else
        write_activity_event_slow(t, id, related, unique, extra, extra_len, ips, nips);
}

/* --- ids --- */

/* inline in the Start: a hooked call's Start is the common caller */
static inline __attribute__((always_inline)) void make_id(at_activity *a, at_activity *parent)
{
    uint32_t pid = at_actg_pid;
    if (!parent) {
        if (AT_UNLIKELY(at_root_left == 0)) {
            uint32_t blk = 1u << at_root_grow;
            at_root_next = __atomic_fetch_add(&g_root_next, blk, __ATOMIC_RELAXED) + 1;
            at_root_left = blk;
            if (at_root_grow < ROOT_BLOCK_MAX_LOG2)
                at_root_grow++;
        }
        at_root_left--;
        uint32_t n = at_root_next++;
        /* every root path starts with the AppDomain, always 1: encoded once in init_once (the
         * checksum, the only pid-dependent part, is rewritten by the next id) */
        a->path_end = (int8_t)at_actpath_child(&a->id, &at_actg_root_prefix, at_actg_root_off, n, pid);
        return;
    }
    uint32_t n = __atomic_add_fetch(&parent->last_child, 1, __ATOMIC_RELAXED);
    int end = at_actpath_child(&a->id, &parent->id, parent->path_end, n, pid);
    a->path_end = (int8_t)end;
    if (AT_LIKELY(end <= AT_ACTPATH_END))
        return;
    /* CreateOverflowGuid: the nearest ancestor with at least two bytes of room gives out a number of
     * its own and the id is written in the '$' overflow form after its path. A root always has room. */
    for (at_activity *anc = parent; anc; anc = anc->creator) {
        if (anc->path_end > 10)
            continue;
        uint32_t m = __atomic_add_fetch(&anc->last_child, 1, __ATOMIC_RELAXED);
        at_guid g = anc->id;
        if (at_actpath_add_id(&g, anc->path_end, m, true, pid) <= AT_ACTPATH_END) {
            a->id = g;
            return;
        }
    }
}

/* --- start / stop --- */

/* Kill (no Stop event) the live activities from 'from' up to, not including, 'to'. */
static void kill_between(at_activity *from, at_activity *to)
{
    for (at_activity *o = from; o && o != to; o = o->creator) {
        uint8_t live = ACT_LIVE;
        if (__atomic_compare_exchange_n(&o->stopped, &live, ACT_KILLED, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            at_act_epoch_bump();
    }
}

/* Make 'next' the thread's current activity (taking a reference) and drop the old one. */
static inline void set_current(at_activity *next)
{
    at_activity *old = at_act_cur;
    if (next == old && !at_act_borrowed)
        return;
    at_activity_ref(next);
    at_act_cur_set(next);
    if (!at_act_borrowed)
        at_activity_unref(old);
    at_act_borrowed = false;
}

static inline const at_guid *id_or_null(const at_activity *a)
{
    return a ? &a->id : NULL;
}

/* held: the caller gets a reference of its own besides the thread's (at_activity_start_held); one
 * body inlined into both, so the hooked call's Start makes no call more than the event's */
static inline __attribute__((always_inline)) at_activity *start(at_activity_kind *k,
                                                               const void *extra,
                                                               uint32_t extra_len,
                                                               const uintptr_t *ips,
                                                               uint32_t nips, bool held)
{
    if (AT_UNLIKELY(!k))
        return NULL;
    ensure_init();
    at_activity *cur = at_act_cur;
    at_activity *parent = live_from(cur);
    const at_guid *related = id_or_null(parent);
    if (!related && at_actg_have_process_parent)
        related = &at_actg_process_parent;

    if (parent) {
        if (AT_UNLIKELY(parent->level >= AT_ACTIVITY_MAX_DEPTH)) {
            /* EventSource stops tracking: the Start is logged without an id and nothing changes.
             * A held Start (a hooked call) says so, for its Stop to be logged without one too. */
            write_activity_event(k->start_ev, NULL, related, 0, extra, extra_len, ips, nips);
            return held ? AT_ACTIVITY_UNTRACKED : NULL;
        }
        if (!(k->flags & AT_ACT_RECURSIVE)) {
            /* No recursion by default (section 5): a live activity of this kind on the chain is
             * stopped, with everything it started on this chain, before the new one starts. */
            at_activity *same = parent;
            while (same && !(same->kind == k && is_live(same)))
                same = same->creator;
            if (same) {
                kill_between(parent, same);
                kill_between(same, same->creator);
                parent = live_from(same->creator);
                /* related is what is current once the namesake stopped, as in the runtime
                 * (tests/unit/test_actpath_live.c) */
                related = id_or_null(parent);
                if (!related && at_actg_have_process_parent)
                    related = &at_actg_process_parent;
            }
        }
    }

    at_activity *a = act_alloc();
    if (AT_UNLIKELY(!a))
        return NULL;
    /* the thread's, and the caller's when held: only this thread can reach it so far */
    a->refs = held ? 2 : 1;
    a->stopped = ACT_LIVE;
    a->last_child = 0;
    a->parked = 0;
    a->parked_acc = 0;
    a->kind = k;
    a->level = parent ? (uint16_t)(parent->level + 1) : 0;
    a->unique = next_unique();
    make_id(a, parent);
    a->creator = parent;
    write_own_event(k->start_ev, &a->id, related, a->unique, extra, extra_len, ips, nips);
    /* The child's creator reference on parent replaces the thread's reference on cur when they are
     * the same activity (the common case): no atomic operation. */
    at_act_cur_set(a);
    if (AT_UNLIKELY(at_act_borrowed)) {
        at_activity_ref(parent);
        at_act_borrowed = false;
    } else if (parent != cur) {
        at_activity_ref(parent);
        at_activity_unref(cur);
    }
    return a;
}

/* The thread's current activity has just been stopped (or killed): make its nearest live ancestor
 * current. */
static inline void pop_to_creator(at_activity *a)
{
    at_activity *next = live_from(a->creator);
    if (AT_UNLIKELY(at_act_borrowed)) {
        at_activity_ref(next);
        at_act_cur_set(next);
        at_act_borrowed = false;
        return;
    }
    if (AT_LIKELY(next == a->creator && sole_ref(a))) {
        /* Only the thread held a: hand a's reference on its creator to the thread and free a. */
        at_act_cur_set(next);
        act_free(a);
        return;
    }
    at_activity_ref(next);
    at_act_cur_set(next);
    at_activity_unref(a);
}

bool at_activity_stop(at_activity_kind *k, const void *extra, uint32_t extra_len,
                      const uintptr_t *ips, uint32_t nips)
{
    if (AT_UNLIKELY(!k))
        return false;
    for (;;) {
        at_activity *cur = at_act_cur;
        at_activity *t = cur;
        while (t && !(t->kind == k && is_live(t)))
            t = t->creator;
        if (!t) {
            /* Stop without a live Start: logged with the current id, nothing changes. */
            at_activity *live = live_from(cur);
            write_activity_event(k->stop_ev, id_or_null(live), NULL, 0, extra, extra_len, ips, nips);
            return false;
        }
        uint8_t live = ACT_LIVE;
        if (t == cur && !at_act_borrowed && sole_ref(t)) {
            __atomic_store_n(&t->stopped, ACT_STOPPED, __ATOMIC_RELAXED);
        } else {
            if (!__atomic_compare_exchange_n(&t->stopped, &live, ACT_STOPPED, false, __ATOMIC_ACQ_REL,
                                             __ATOMIC_RELAXED))
                continue; /* another thread stopped it first: search again */
            at_act_epoch_bump();
            kill_between(cur, t);
        }
        write_activity_event(k->stop_ev, &t->id, NULL, t->unique, extra, extra_len, ips, nips);
        /* The thread continues in the stopped activity's nearest live ancestor. */
        if (t == cur) {
            pop_to_creator(t);
        } else {
            set_current(live_from(t->creator));
        }
        return true;
    }
}

at_activity *at_activity_start(at_activity_kind *k, const void *extra, uint32_t extra_len,
                               const uintptr_t *ips, uint32_t nips)
{
    return start(k, extra, extra_len, ips, nips, false);
}

AT_CORE_FN at_activity *at_activity_start_held(at_activity_kind *k, const void *extra,
                                              uint32_t extra_len, const uintptr_t *ips,
                                              uint32_t nips)
{
    return start(k, extra, extra_len, ips, nips, true);
}

/* --- the plain shape: a Start with no fields, a Stop with one 32-bit field, no stack ---
 * What a plain hooked call runs: the one-pass bodies are activity_plain.h's (the hook path inlines
 * them); these are their ways out, each a tail call of a function of its own. */

AT_NOINLINE at_activity *at_act_start_plain_general(at_activity_kind *k)
{
    int e = errno;
    at_activity *a = start(k, NULL, 0, NULL, 0, true);
    errno = e;
    return a;
}

/* The fast Start's record by the general writer, and what follows it. */
AT_NOINLINE at_activity *at_act_start_plain_written_general(at_activity *a, const at_guid *related)
{
    int e = errno;
    at_tbuf_write_act_general(a->kind->start_ev, &a->id, related, a->unique, NULL, 0);
    at_act_cur_set(a);
    errno = e;
    return a;
}

/* activity_plain.h's body, for the engine's other callers */
AT_CORE_FN at_activity *at_activity_start_held_plain(at_activity_kind *k)
{
    return at_act_start_plain(k);
}

static inline __attribute__((always_inline)) bool stop_held(at_activity *a, const void *extra,
                                                            uint32_t extra_len,
                                                            const uintptr_t *ips, uint32_t nips)
{
    /* refs == 2: nobody but this thread (current) and the caller holds it, and no other thread can
     * take a reference without holding one: no one can stop, capture or free it meanwhile */
    if (!a || a != at_act_cur || at_act_borrowed || !is_live(a))
        return false;
    /* the flow caches' references are counted in refs: with 2, they hold none */
    if (AT_UNLIKELY(__atomic_load_n(&a->refs, __ATOMIC_ACQUIRE) != 2)) {
        if (!refc_holds(a))
            return false;
        refc_settle(a);
        if (__atomic_load_n(&a->refs, __ATOMIC_ACQUIRE) != 2)
            return false;
    }
    at_activity *next = live_from(a->creator);
    if (AT_UNLIKELY(next != a->creator))
        return false;
    __atomic_store_n(&a->stopped, ACT_STOPPED, __ATOMIC_RELAXED);
    write_own_event(a->kind->stop_ev, &a->id, NULL, a->unique, extra, extra_len, ips, nips);
    /* a's reference on its creator becomes the thread's */
    at_act_cur_set(next);
    act_free(a);
    return true;
}

bool at_activity_stop_held(at_activity *a, const void *extra, uint32_t extra_len,
                           const uintptr_t *ips, uint32_t nips)
{
    return stop_held(a, extra, extra_len, ips, nips);
}

/* The held Stop when stop_held() refuses it: a is no longer the thread's alone (or current). */
static AT_NOINLINE void end_held_shared(at_activity *a, const void *extra, uint32_t extra_len)
{
    if (at_activity_current() == a) {
        /* still current, so the thread's reference keeps it alive without ours, and the Stop by
         * kind takes its fast path (current, sole reference) */
        at_activity_kind *k = a->kind;
        at_activity_unref(a);
        at_activity_stop(k, extra, extra_len, NULL, 0);
        return;
    }
    at_activity_stop_ref(a, extra, extra_len, NULL, 0);
    at_activity_unref(a);
}

AT_NOINLINE void at_act_end_u32_general(at_activity *a, uint32_t v)
{
    int e = errno;
    if (!stop_held(a, &v, sizeof v, NULL, 0))
        end_held_shared(a, &v, sizeof v);
    errno = e;
}

/* The fast Stop's record by the general writer, and what follows it. */
AT_NOINLINE void at_act_end_u32_written_general(at_activity *a, uint32_t v)
{
    int e = errno;
    at_tbuf_write_act_general(a->kind->stop_ev, &a->id, NULL, a->unique, &v, sizeof v);
    act_free(a);
    errno = e;
}

AT_NOINLINE void at_act_end_u32_free_general(at_activity *a)
{
    int e = errno;
    act_free(a);
    errno = e;
}

at_activity at_act_untracked;

void at_activity_stop_untracked(at_activity_kind *k, const void *extra, uint32_t extra_len,
                                const uintptr_t *ips, uint32_t nips)
{
    if (k)
        write_activity_event(k->stop_ev, NULL, NULL, 0, extra, extra_len, ips, nips);
}

AT_CORE_FN void at_activity_end_held_u32(at_activity *a, uint32_t v)
{
    at_act_end_u32(a, v);
}

bool at_activity_stop_ref(at_activity *a, const void *extra, uint32_t extra_len,
                          const uintptr_t *ips, uint32_t nips)
{
    if (!a)
        return false;
    uint8_t live = ACT_LIVE;
    if (!__atomic_compare_exchange_n(&a->stopped, &live, ACT_STOPPED, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED))
        return false;
    at_act_epoch_bump();
    write_activity_event(a->kind->stop_ev, &a->id, NULL, a->unique, extra, extra_len, ips, nips);
    if (at_act_cur == a)
        set_current(live_from(a->creator));
    return true;
}

AT_FORK_TEXT at_activity *at_activity_current(void) /* a fork child's ProcessForked asks too */
{
    return live_from(at_act_cur);
}

const at_guid *at_activity_id(const at_activity *a)
{
    static const at_guid zero;
    return a ? &a->id : &zero;
}

uint64_t at_activity_unique_id(const at_activity *a)
{
    return a ? a->unique : 0;
}

bool at_activity_is_stopped(const at_activity *a)
{
    return !a || !is_live(a);
}

int at_activity_path(const at_activity *a, char *buf, size_t n)
{
    if (!a) {
        if (n)
            buf[0] = 0;
        return -1;
    }
    return at_actpath_format(&a->id, at_actpath_pid(&a->id), buf, n);
}

/* The id of the current activity's nearest live one (NULL: none), from at_act_idc when it holds
 * (activity_inline.h), else from the activities, and kept. A signal handler's event on the thread
 * may fill the entry in between: the entry is emptied first and named last, and a copy counts only
 * when the entry still names the same after it. */
static inline const at_guid *cur_live_id(at_guid *out)
{
    at_activity *cur = at_act_cur;
    if (!cur)
        return NULL;
    at_act_idcache *c = &at_act_idc;
    /* before the activities are read: a stop this misses changes the epoch after it */
    uint32_t e = __atomic_load_n(&at_act_epoch, __ATOMIC_ACQUIRE);
    if (AT_LIKELY(c->act == cur && c->epoch == e)) {
        uint32_t none = c->none;
        *out = c->id;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        if (AT_LIKELY(c->act == cur && c->epoch == e))
            return none ? NULL : out;
    }
    at_activity *live = live_from(cur);
    c->act = NULL;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    c->epoch = e;
    c->none = !live;
    if (live)
        c->id = live->id;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    c->act = cur;
    if (!live)
        return NULL;
    *out = live->id;
    return out;
}

AT_PATH_EVENT int at_activity_event(const at_event_type *t, const void *payload, uint32_t len,
                      const uintptr_t *ips, uint32_t nips)
{
    if (!t || !at_event_enabled(t))
        return 0;
    at_guid id;
    return at_event_write_onepass(t, cur_live_id(&id), NULL, payload, len, ips, nips);
}

int at_activity_event_ts(uint64_t ts, const at_event_type *t, const void *payload, uint32_t len,
                         const uintptr_t *ips, uint32_t nips)
{
    if (!t || !at_event_enabled(t))
        return 0;
    at_guid id;
    return at_event_write_ts(ts, t, cur_live_id(&id), NULL, payload, len, ips, nips);
}

/* --- flow --- */

/* --- transfers --- */

/* The tasks PerfView follows. TraceEvent gives a thread the StartStop activities started on it and
 * those a TPL task brought (its ActivityComputer: TaskScheduled on the sending thread makes a task
 * whose creator is what that thread does; TaskExecute Start and Stop on the thread that runs it make
 * the task that thread's current work), never an event's ActivityId. So a hand-off that writes a
 * Send and its Receive also writes them as the runtime's TplEventSource does: TaskScheduled beside
 * the Send, TaskExecute Start beside the Receive and its Stop where the work leaves the thread
 * again; then PerfView's activity view and `dotnet-trace convert` put the samples a pool thread
 * takes in a flowed activity under it. The TaskID is the Send's thread and id, hashed to 32 bits
 * (TraceEvent keys a task by process and TaskID while it is scheduled or running). */
#define AT_TPL_PROVIDER "System.Threading.Tasks.TplEventSource"
#define AT_TPL_SCHEDULER 1 /* the OriginatingTaskSchedulerID of every task: the default one's */
static at_event_type *g_task_sched, *g_task_start, *g_task_stop;
static bool g_tasks_on;

void at_flow_tasks_enable(bool on)
{
    g_tasks_on = on;
}

/* Registered with the transfers' types, only when on: otherwise the pointers stay NULL, and a
 * hand-off tests one of them. */
static void init_task_events(void)
{
    if (!g_tasks_on)
        return;
    static const at_field fsched[] = {{"OriginatingTaskSchedulerID", NT_TYPE_INT32},
                                      {"OriginatingTaskID", NT_TYPE_INT32},
                                      {"TaskID", NT_TYPE_INT32},
                                      {"CreatingTaskID", NT_TYPE_INT32},
                                      {"TaskCreationOptions", NT_TYPE_INT32},
                                      {"appDomain", NT_TYPE_INT32}};
    static const at_field fstart[] = {{"OriginatingTaskSchedulerID", NT_TYPE_INT32},
                                      {"OriginatingTaskID", NT_TYPE_INT32},
                                      {"TaskID", NT_TYPE_INT32}};
    static const at_field fstop[] = {{"OriginatingTaskSchedulerID", NT_TYPE_INT32},
                                     {"OriginatingTaskID", NT_TYPE_INT32},
                                     {"TaskID", NT_TYPE_INT32},
                                     {"IsExceptional", NT_TYPE_BOOLEAN}};
    /* ids, versions, opcodes and keywords as the runtime's TplEventSource declares them */
    at_event_desc d = {.provider = AT_TPL_PROVIDER, .event_id = 7, .id_given = true,
                       .name = "TaskScheduled", .version = 1, .level = NT_LEVEL_INFO,
                       .opcode = NT_OPCODE_SEND, .keywords = 0x3, .nfields = 6, .fields = fsched};
    g_task_sched = at_event_type_register(&d);
    d = (at_event_desc){.provider = AT_TPL_PROVIDER, .event_id = 8, .id_given = true,
                        .name = "TaskStarted", .level = NT_LEVEL_INFO, .opcode = NT_OPCODE_START,
                        .keywords = 0x2, .nfields = 3, .fields = fstart};
    g_task_start = at_event_type_register(&d);
    d = (at_event_desc){.provider = AT_TPL_PROVIDER, .event_id = 9, .id_given = true,
                        .name = "TaskCompleted", .version = 1, .level = NT_LEVEL_INFO,
                        .opcode = NT_OPCODE_STOP, .keywords = 0x40, .nfields = 4, .fields = fstop};
    g_task_stop = at_event_type_register(&d);
}

static inline int32_t task_id(uint64_t tid, uint64_t send_id)
{
    uint64_t h = (send_id ^ (tid << 40) ^ tid) * 0x9E3779B97F4A7C15ull;
    int32_t id = (int32_t)(h >> 33);
    return id ? id : 1;
}

/* The thread's open tasks, innermost last: each with the enter its Receive followed (the value
 * at_flow_enter returned, which the matching at_flow_leave passes back) */
typedef struct at_task_open {
    int32_t id;
    at_activity *prev;
} at_task_open;
#define AT_TASKS_MAX 4
#define at_tasks ((at_task_open *)AT_PTLS.tasks)
_Static_assert(sizeof(at_task_open) * AT_TASKS_MAX <= sizeof(((at_path_tls *)0)->tasks),
               "tasks in at_path_tls hold AT_TASKS_MAX open tasks");
#define at_task_n (at_act_t.task_n)

/* Written with no ActivityId: TraceEvent follows tasks by thread and TaskID, and readers that take
 * any Start or Stop with an id for an activity's (ours, TraceEvent's StartStopActivityComputer for
 * providers named as EventSources are) must not see a second activity in them. */
static void task_event(at_event_type *t, int32_t id, uint32_t len)
{
    if (!t || !at_event_enabled(t))
        return;
    int32_t pl[6] = {AT_TPL_SCHEDULER, 0, id, 0, 0, 1};
    if (t == g_task_stop)
        pl[3] = 0; /* IsExceptional */
    at_event_write(t, NULL, NULL, pl, len, NULL, 0);
}

void at_flow_task_start(at_activity *prev, uint64_t from_tid, uint64_t send_id)
{
    if (!from_tid || !send_id || at_task_n >= AT_TASKS_MAX || !g_task_start ||
        !at_event_enabled(g_task_start))
        return;
    int32_t id = task_id(from_tid, send_id);
    task_event(g_task_start, id, 12);
    at_tasks[at_task_n] = (at_task_open){id, prev};
    at_task_n++;
}

void at_flow_task_leave(at_activity *prev)
{
    at_task_open *top = &at_tasks[at_task_n - 1];
    if (top->prev != prev)
        return;
    task_event(g_task_stop, top->id, 16);
    at_task_n--;
}

/* Send: ActivityUniqueId, ThreadId (the sender), TransferId. Receive: ActivityUniqueId, ThreadId (the
 * receiver), SenderThreadId, TransferId (the Send's; 0 when unknown). The fields after ThreadId came
 * later: readers that know only the first two still read both events. */
static void init_transfer_events(void)
{
    static const at_field fs[] = {{"ActivityUniqueId", NT_TYPE_UINT64},
                                  {"ThreadId", NT_TYPE_UINT64},
                                  {"TransferId", NT_TYPE_UINT64}};
    static const at_field fr[] = {{"ActivityUniqueId", NT_TYPE_UINT64},
                                  {"ThreadId", NT_TYPE_UINT64},
                                  {"SenderThreadId", NT_TYPE_UINT64},
                                  {"TransferId", NT_TYPE_UINT64}};
    at_event_desc s = {.provider = AT_FLOW_PROVIDER, .name = "TransferSend", .level = NT_LEVEL_INFO,
                       .opcode = NT_OPCODE_SEND, .keywords = AT_KEYWORD_FLOW, .nfields = 3,
                       .fields = fs};
    at_event_desc r = s;
    r.name = "TransferReceive";
    r.opcode = NT_OPCODE_RECEIVE;
    r.nfields = 4;
    r.fields = fr;
    g_send_ev = at_event_type_register(&s);
    g_recv_ev = at_event_type_register(&r);
    init_task_events();
}

static pthread_once_t g_transfer_once = PTHREAD_ONCE_INIT;
#define g_transfer_ready (at_rt_hot.transfer_ready) /* atomic: set once the types are registered */

static void init_transfer_once(void)
{
    init_transfer_events();
    __atomic_store_n(&g_transfer_ready, 1, __ATOMIC_RELEASE);
}

static inline void transfer_types(void)
{
    if (AT_UNLIKELY(!__atomic_load_n(&g_transfer_ready, __ATOMIC_ACQUIRE)))
        at_xs_once(&g_transfer_once, init_transfer_once);
}

AT_HOT_FN static int write_transfer(at_event_type *t, at_activity *a, const at_guid *related,
                                    uint64_t floor, bool ordered, const uint64_t *extra,
                                    uint32_t nextra, int stamp)
{
    uint64_t pl[4] = {a->unique, (uint64_t)at_tid()};
    for (uint32_t i = 0; i < nextra; i++)
        pl[2 + i] = extra[i];
    return at_event_write_stamped(floor, ordered, t, &a->id, related, pl,
                                  (2 + nextra) * sizeof *pl, stamp);
}

AT_HOT_FN uint64_t at_flow_transfer_send(at_activity *a)
{
    if (!a)
        return 0;
    transfer_types();
    if (!g_send_ev || !at_event_enabled(g_send_ev))
        return 0;
    /* The Send's time is its TransferId (written into the payload by the writer, after its clock
     * read): kept after the thread's previous event, so two Sends of a thread never share one (the
     * Receive names the sender's thread and this id). */
    uint64_t id = 0;
    if (write_transfer(g_send_ev, a, NULL, at_event_last_ts() + 1, false, &id, 1, 16) != 0)
        return 0;
    id = at_event_last_ts();
    task_event(g_task_sched, task_id((uint64_t)at_tid(), id), 24);
    return id;
}

void at_flow_transfer_receive(at_activity *a, const at_guid *previous)
{
    at_flow_transfer_receive_from(a, previous, 0, 0);
}

void at_flow_transfer_receive_after(at_activity *a, const at_guid *previous, uint64_t send_ts)
{
    at_flow_transfer_receive_from(a, previous, 0, send_ts);
}

AT_HOT_FN void at_flow_transfer_receive_from(at_activity *a, const at_guid *previous,
                                             uint64_t from_tid, uint64_t send_id)
{
    if (!a)
        return;
    transfer_types();
    if (!g_recv_ev || !at_event_enabled(g_recv_ev))
        return;
    /* a Receive follows what the sending thread published: its clock read must not run ahead of
     * the Send's. Knowing the Send's time, a plain read kept after it does; otherwise the read waits
     * for the loads before it (lfence). */
    uint64_t extra[2] = {from_tid, send_id};
    write_transfer(g_recv_ev, a, previous && !at_guid_is_zero(previous) ? previous : NULL,
                   send_id ? send_id + 1 : 0, send_id == 0, extra, 2, -1);
}

/* --- process --- */

void at_activity_set_process_parent(const at_guid *parent_id)
{
    if (parent_id && !at_guid_is_zero(parent_id)) {
        at_actg_process_parent = *parent_id;
        at_actg_have_process_parent = true;
    } else {
        at_actg_have_process_parent = false;
    }
}

void at_activity_set_exec_generation(uint32_t gen)
{
    if (__atomic_load_n(&at_actg_pid, __ATOMIC_ACQUIRE) == 0) /* before the first activity only */
        g_domain = gen + 1;
}

AT_FORK_TEXT void at_activity_after_fork_child(void)
{
    at_tid_cache = 0;
    at_act_t.task_n = 0; /* the parent's open tasks end in the parent's file */
    /* only once initialized: at_actg_pid != 0 is what tells ensure_init that init_once has run */
    if (__atomic_load_n(&at_actg_pid, __ATOMIC_ACQUIRE) != 0)
        __atomic_store_n(&at_actg_pid, (uint32_t)at_raw_getpid(), __ATOMIC_RELEASE);
}

/* --- test hooks (activity_int.h) --- */

void at_activity_test_set_pid(uint32_t pid)
{
    ensure_init();
    __atomic_store_n(&at_actg_pid, pid ? pid : (uint32_t)getpid(), __ATOMIC_RELEASE);
}

uint32_t at_activity_test_refs(const at_activity *a)
{
    return __atomic_load_n(&a->refs, __ATOMIC_ACQUIRE);
}

void at_activity_test_set_last_child(at_activity *a, uint32_t last)
{
    __atomic_store_n(a ? &a->last_child : &g_root_next, last, __ATOMIC_RELAXED);
    if (!a) /* the calling thread's next root takes the number after last */
        at_root_left = at_root_grow = 0;
}
