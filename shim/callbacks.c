/* callbacks.c: the current activity flows through callback APIs. One mechanism for all of them:
 * at submit the current activity is captured (a reference) into a small context that replaces the
 * API's (function, data) pair; the trampoline the API calls enters the captured activity on whatever
 * thread runs it, calls the program's function with the program's data, and restores what that
 * thread had before. The context lives as long as the API can still call it: it is released by the
 * API's own destroy notification, by the one-shot completion, or by the call that removes it.
 *
 * Where an API lets the program look the data up again (g_idle_remove_by_data,
 * g_source_remove_by_user_data), the lookup is translated by a registry from data to context.
 * GThreadPool items are wrapped in slots (slots.c) and unwrapped wherever GLib hands them back.
 *
 * Fast path: with no current activity nothing is wrapped; the real function is called as it is
 * (thread pools and libuv async handles, whose trampolines are installed at creation, then run their
 * items in no activity, so a pool thread carries nothing from one item to the next).
 *
 * Covered: GLib (g_idle_add*, g_timeout_add*, g_main_context_invoke*, g_io_add_watch*,
 * g_child_watch_add*, g_source_set_callback of such sources, GThreadPool), POSIX
 * SIGEV_THREAD (timer_create, mq_notify), libuv (uv_queue_work, uv_timer_start, uv_async_init/send;
 * its pool threads begin in none whichever request started them),
 * libevent (event_new/event_assign + event_add, event_base_once, bufferevent_setcb; libevent's own
 * events are left alone), OpenMP (GOMP_parallel,
 * GOMP_parallel_loop_*, GOMP_parallel_sections, GOMP_parallel_reductions, GOMP_task: the task's
 * data block is extended, not replaced by a pointer, because libgomp copies it). */
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <mqueue.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shim.h"

/* the real functions: AT_LAZY_REAL (shim.h), resolved on first use (the libraries may be absent) */
#define REAL AT_LAZY_REAL

typedef int gboolean;
typedef unsigned guint;
typedef int (*GSourceFunc)(void *);
typedef void (*GSourceOnceFunc)(void *);
typedef void (*GDestroyNotify)(void *);
typedef void (*GFunc)(void *data, void *user_data);

REAL(g_idle_add_full, guint, (int, GSourceFunc, void *, GDestroyNotify))
REAL(g_timeout_add_full, guint, (int, guint, GSourceFunc, void *, GDestroyNotify))
REAL(g_timeout_add_seconds_full, guint, (int, guint, GSourceFunc, void *, GDestroyNotify))
REAL(g_main_context_invoke_full, void, (void *, int, GSourceFunc, void *, GDestroyNotify))
REAL(g_idle_add_once, guint, (GSourceOnceFunc, void *))
REAL(g_timeout_add_once, guint, (guint, GSourceOnceFunc, void *))
REAL(g_idle_remove_by_data, gboolean, (void *))
REAL(g_source_remove_by_user_data, gboolean, (void *))
REAL(g_source_remove_by_funcs_user_data, gboolean, (void *, void *))
REAL(g_main_context_find_source_by_user_data, void *, (void *, void *))
REAL(g_main_context_find_source_by_funcs_user_data, void *, (void *, void *, void *))
REAL(g_source_set_callback, void, (void *, GSourceFunc, void *, GDestroyNotify))
REAL(g_thread_pool_new_full, void *, (GFunc, void *, GDestroyNotify, int, gboolean, void **))
REAL(g_thread_pool_push, gboolean, (void *, void *, void **))

REAL(timer_create, int, (clockid_t, struct sigevent *, timer_t *))
REAL(mq_notify, int, (mqd_t, const struct sigevent *))

typedef void (*uv_work_cb)(void *req);
typedef void (*uv_after_work_cb)(void *req, int status);
typedef void (*uv_timer_cb)(void *handle);
typedef void (*uv_async_cb)(void *handle);
typedef void (*uv_close_cb)(void *handle);
REAL(uv_queue_work, int, (void *, void *, uv_work_cb, uv_after_work_cb))
REAL(uv_timer_start, int, (void *, uv_timer_cb, uint64_t, uint64_t))
REAL(uv_async_init, int, (void *, void *, uv_async_cb))
REAL(uv_close, void, (void *, uv_close_cb))
REAL(uv_async_send, int, (void *))

typedef void (*uv_thread_cb)(void *arg);
REAL(uv_thread_create_ex, int, (void *, const void *, uv_thread_cb, void *))
REAL(uv_thread_create, int, (void *, uv_thread_cb, void *))

#define G_PRIORITY_DEFAULT 0
#define G_PRIORITY_DEFAULT_IDLE 200

/* ---------------- contexts ---------------- */

typedef struct cb_ctx {
    void *fn;            /* the program's function */
    void *data;          /* the program's data */
    void *fn2;           /* a second function (uv after_work) */
    GDestroyNotify destroy;
    at_activity *cap;    /* the captured activity (a reference) */
    uint64_t tid;        /* the submitting thread: a run elsewhere is a transfer */
    uint64_t send_ts;    /* the Send's timestamp (0: none written) */
    int once;            /* GSourceOnceFunc: call fn without using a return value */
} cb_ctx;

static cb_ctx *ctx_new(at_activity *cap, void *fn, void *data)
{
    int e = errno;
    cb_ctx *c = calloc(1, sizeof *c);
    errno = e;
    if (!c)
        return NULL;
    c->fn = fn;
    c->data = data;
    c->cap = cap;
    c->tid = (uint64_t)at_tid();
    c->send_ts = at_flow_transfer_send(cap);
    return c;
}

static void ctx_free(cb_ctx *c)
{
    at_flow_release(c->cap);
    free(c);
}

/* Enter c's activity on this thread; records the hop when the thread is not the submitter's and
 * was not in that activity already. A thread already in it (an OpenMP task made in a region and
 * run at a barrier or taskwait inside it, by a team thread in the region's activity) adopts
 * nothing, so no Receive is written, as for I/O on an fd tagged with the thread's own activity
 * (fdflow.c); the Send the submitter wrote then stands alone. */
AT_HOT_FN static at_activity *ctx_enter(at_activity *cap, uint64_t from_tid, uint64_t send_ts)
{
    if (cap && (uint64_t)at_tid() != from_tid) {
        at_activity *cur = at_act_live_from(at_act_cur); /* what the Receive names as before */
        if (cur == cap)
            return at_flow_enter(cap);
        at_guid prev = cur ? *at_activity_id(cur) : (at_guid){{0}};
        at_activity *p = at_flow_enter(cap);
        at_flow_transfer_receive_from(cap, &prev, from_tid, send_ts);
        at_flow_task_start(p, from_tid, send_ts);
        return p;
    }
    return at_flow_enter(cap);
}

/* ---------------- registry: (owner, key) -> contexts, for lookups by the program's pointers ---- */

typedef struct reg_ent {
    struct reg_ent *next;
    const void *owner, *key;
    void *val;
} reg_ent;

#define REG_BUCKETS 16384u
typedef struct reg_bucket {
    reg_ent *head, *tail; /* FIFO: queued items are taken in the order they were put */
} reg_bucket;
static reg_bucket reg_tab[REG_BUCKETS];
static pthread_mutex_t reg_lock AT_FORK_DATA = PTHREAD_MUTEX_INITIALIZER; /* taken around fork */
static uint32_t reg_count; /* atomic: 0 lets trampolines skip the lock */

static inline uint32_t reg_hash(const void *owner, const void *key)
{
    uint64_t h = ((uintptr_t)owner * 0x9E3779B97F4A7C15ull) ^ ((uintptr_t)key * 0xC2B2AE3D27D4EB4Full);
    return (uint32_t)(h >> 40) & (REG_BUCKETS - 1);
}

/* Append (FIFO per key: an item pushed twice runs its captures in push order). */
static bool reg_put(const void *owner, const void *key, void *val)
{
    int e = errno;
    reg_ent *n = malloc(sizeof *n);
    errno = e;
    if (!n)
        return false;
    n->next = NULL;
    n->owner = owner;
    n->key = key;
    n->val = val;
    pthread_mutex_lock(&reg_lock);
    reg_bucket *b = &reg_tab[reg_hash(owner, key)];
    if (b->tail)
        b->tail->next = n;
    else
        b->head = n;
    b->tail = n;
    __atomic_add_fetch(&reg_count, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&reg_lock);
    return true;
}

/* Remove and return the first value for (owner, key) (or for that value when val is given). */
static void *reg_take(const void *owner, const void *key, const void *val)
{
    if (__atomic_load_n(&reg_count, __ATOMIC_RELAXED) == 0)
        return NULL;
    void *v = NULL;
    pthread_mutex_lock(&reg_lock);
    reg_bucket *b = &reg_tab[reg_hash(owner, key)];
    for (reg_ent *prev = NULL, *n = b->head; n; prev = n, n = n->next) {
        if (n->owner == owner && n->key == key && (!val || n->val == val)) {
            if (prev)
                prev->next = n->next;
            else
                b->head = n->next;
            if (b->tail == n)
                b->tail = prev;
            v = n->val;
            free(n);
            __atomic_sub_fetch(&reg_count, 1, __ATOMIC_RELAXED);
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    return v;
}

static void *reg_get(const void *owner, const void *key)
{
    if (__atomic_load_n(&reg_count, __ATOMIC_RELAXED) == 0)
        return NULL;
    void *v = NULL;
    pthread_mutex_lock(&reg_lock);
    for (reg_ent *n = reg_tab[reg_hash(owner, key)].head; n; n = n->next)
        if (n->owner == owner && n->key == key) {
            v = n->val;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    return v;
}

/* Owners (the kinds of keys) */
static const char OWN_GSOURCE[] = "gsource"; /* program data -> ctx of a wrapped source */
static const char OWN_UVWORK[] = "uvwork";   /* uv_work_t -> ctx */
static const char OWN_UVTIMER[] = "uvtimer"; /* uv_timer_t -> ctx */
static const char OWN_UVASYNC[] = "uvasync"; /* uv_async_t -> ctx (cap swapped at each send) */
static const char OWN_EVENT[] = "event";     /* an event_assign'ed struct event -> ev_ctx */

/* ---------------- GLib main-loop sources ---------------- */

static int src_tramp(void *p)
{
    cb_ctx *c = p;
    int e = errno;
    at_activity *prev = ctx_enter(c->cap, c->tid, c->send_ts);
    errno = e;
    int r = 0;
    if (c->once)
        ((GSourceOnceFunc)c->fn)(c->data);
    else
        r = ((GSourceFunc)c->fn)(c->data);
    e = errno;
    at_flow_leave(prev);
    errno = e;
    return r;
}

static void src_destroy(void *p)
{
    cb_ctx *c = p;
    reg_take(OWN_GSOURCE, c->data, c);
    if (c->destroy)
        c->destroy(c->data);
    int e = errno;
    ctx_free(c);
    errno = e;
}

/* An I/O watch's callback: GIOFunc(channel, condition, data). */
typedef gboolean (*GIOFunc)(void *channel, int condition, void *data);
static gboolean io_tramp(void *channel, int cond, void *p)
{
    cb_ctx *c = p;
    int e = errno;
    at_activity *prev = ctx_enter(c->cap, c->tid, c->send_ts);
    errno = e;
    gboolean r = ((GIOFunc)c->fn)(channel, cond, c->data);
    e = errno;
    at_flow_leave(prev);
    errno = e;
    return r;
}

/* A child watch's callback: GChildWatchFunc(pid, wait status, data). */
typedef void (*GChildWatchFunc)(int pid, int status, void *data);
static void child_tramp(int pid, int status, void *p)
{
    cb_ctx *c = p;
    int e = errno;
    at_activity *prev = ctx_enter(c->cap, c->tid, c->send_ts);
    errno = e;
    ((GChildWatchFunc)c->fn)(pid, status, c->data);
    e = errno;
    at_flow_leave(prev);
    errno = e;
}

/* A Unix fd source's callback: GUnixFDSourceFunc(fd, condition, data). */
typedef gboolean (*GUnixFDSourceFunc)(int fd, int cond, void *data);
static gboolean unixfd_tramp(int fd, int cond, void *p)
{
    cb_ctx *c = p;
    int e = errno;
    at_activity *prev = ctx_enter(c->cap, c->tid, c->send_ts);
    errno = e;
    gboolean r = ((GUnixFDSourceFunc)c->fn)(fd, cond, c->data);
    e = errno;
    at_flow_leave(prev);
    errno = e;
    return r;
}

/* Wrap (fn, data, notify) for a source when an activity is current, fn then being tramp (which
 * calls the program's fn with the source's own arguments and the program's data); false: call
 * through as is. */
static bool src_wrap_with(void **fn, void **data, GDestroyNotify *notify, int once, void *tramp)
{
    if (!at_on())
        return false;
    at_activity *cap = at_flow_capture();
    if (!cap)
        return false;
    cb_ctx *c = ctx_new(cap, *fn, *data);
    if (!c || !reg_put(OWN_GSOURCE, *data, c)) {
        if (c)
            free(c);
        at_flow_release(cap);
        return false;
    }
    c->destroy = *notify;
    c->once = once;
    *fn = tramp;
    *data = c;
    *notify = src_destroy;
    return true;
}

static bool src_wrap(GSourceFunc *fn, void **data, GDestroyNotify *notify, int once)
{
    void *f = (void *)*fn;
    bool ok = src_wrap_with(&f, data, notify, once, (void *)src_tramp);
    *fn = (GSourceFunc)f;
    return ok;
}

AT_EXPORT guint g_idle_add_full(int prio, GSourceFunc fn, void *data, GDestroyNotify notify)
{
    src_wrap(&fn, &data, &notify, 0);
    return real_g_idle_add_full()(prio, fn, data, notify);
}

AT_EXPORT guint g_idle_add(GSourceFunc fn, void *data)
{
    return g_idle_add_full(G_PRIORITY_DEFAULT_IDLE, fn, data, NULL);
}

AT_EXPORT guint g_idle_add_once(GSourceOnceFunc fn, void *data)
{
    /* GLib runs a once function through a source that removes itself: the same with ours */
    GSourceFunc f = (GSourceFunc)(void *)fn;
    GDestroyNotify n = NULL;
    if (src_wrap(&f, &data, &n, 1))
        return real_g_idle_add_full()(G_PRIORITY_DEFAULT_IDLE, f, data, n);
    return real_g_idle_add_once()(fn, data);
}

AT_EXPORT guint g_timeout_add_full(int prio, guint ms, GSourceFunc fn, void *data,
                                   GDestroyNotify notify)
{
    src_wrap(&fn, &data, &notify, 0);
    return real_g_timeout_add_full()(prio, ms, fn, data, notify);
}

AT_EXPORT guint g_timeout_add(guint ms, GSourceFunc fn, void *data)
{
    return g_timeout_add_full(G_PRIORITY_DEFAULT, ms, fn, data, NULL);
}

AT_EXPORT guint g_timeout_add_once(guint ms, GSourceOnceFunc fn, void *data)
{
    GSourceFunc f = (GSourceFunc)(void *)fn;
    GDestroyNotify n = NULL;
    if (src_wrap(&f, &data, &n, 1))
        return real_g_timeout_add_full()(G_PRIORITY_DEFAULT, ms, f, data, n);
    return real_g_timeout_add_once()(ms, fn, data);
}

AT_EXPORT guint g_timeout_add_seconds_full(int prio, guint s, GSourceFunc fn, void *data,
                                           GDestroyNotify notify)
{
    src_wrap(&fn, &data, &notify, 0);
    return real_g_timeout_add_seconds_full()(prio, s, fn, data, notify);
}

AT_EXPORT guint g_timeout_add_seconds(guint s, GSourceFunc fn, void *data)
{
    return g_timeout_add_seconds_full(G_PRIORITY_DEFAULT, s, fn, data, NULL);
}

AT_EXPORT void g_main_context_invoke_full(void *ctx, int prio, GSourceFunc fn, void *data,
                                          GDestroyNotify notify)
{
    src_wrap(&fn, &data, &notify, 0);
    real_g_main_context_invoke_full()(ctx, prio, fn, data, notify);
}

AT_EXPORT void g_main_context_invoke(void *ctx, GSourceFunc fn, void *data)
{
    g_main_context_invoke_full(ctx, G_PRIORITY_DEFAULT, fn, data, NULL);
}

/* I/O watches (g_io_add_watch on a GIOChannel) and child watches (a child process's exit): their
 * callbacks take the source's own arguments before the data. */
REAL(g_io_add_watch_full, guint, (void *, int, int, GIOFunc, void *, GDestroyNotify))
REAL(g_child_watch_add_full, guint, (int, int, GChildWatchFunc, void *, GDestroyNotify))

AT_EXPORT guint g_io_add_watch_full(void *channel, int prio, int cond, GIOFunc fn, void *data,
                                    GDestroyNotify notify)
{
    void *f = (void *)fn;
    if (fn && src_wrap_with(&f, &data, &notify, 0, (void *)io_tramp))
        fn = (GIOFunc)f;
    return real_g_io_add_watch_full()(channel, prio, cond, fn, data, notify);
}

AT_EXPORT guint g_io_add_watch(void *channel, int cond, GIOFunc fn, void *data)
{
    return g_io_add_watch_full(channel, G_PRIORITY_DEFAULT, cond, fn, data, NULL);
}

AT_EXPORT guint g_child_watch_add_full(int prio, int pid, GChildWatchFunc fn, void *data,
                                       GDestroyNotify notify)
{
    void *f = (void *)fn;
    if (fn && src_wrap_with(&f, &data, &notify, 0, (void *)child_tramp))
        fn = (GChildWatchFunc)f;
    return real_g_child_watch_add_full()(prio, pid, fn, data, notify);
}

AT_EXPORT guint g_child_watch_add(int pid, GChildWatchFunc fn, void *data)
{
    return g_child_watch_add_full(G_PRIORITY_DEFAULT, pid, fn, data, NULL);
}

/* glib-unix.h: a Unix fd watch (the fd, the condition, then the data) and a Unix signal
 * delivered as a source (GSourceFunc(data); GLib's worker thread notices the signal, the callback
 * runs in the context's thread). */
REAL(g_unix_fd_add_full, guint, (int, int, int, GUnixFDSourceFunc, void *, GDestroyNotify))
REAL(g_unix_signal_add_full, guint, (int, int, GSourceFunc, void *, GDestroyNotify))

AT_EXPORT guint g_unix_fd_add_full(int prio, int fd, int cond, GUnixFDSourceFunc fn, void *data,
                                   GDestroyNotify notify)
{
    void *f = (void *)fn;
    if (fn && src_wrap_with(&f, &data, &notify, 0, (void *)unixfd_tramp))
        fn = (GUnixFDSourceFunc)f;
    return real_g_unix_fd_add_full()(prio, fd, cond, fn, data, notify);
}

AT_EXPORT guint g_unix_fd_add(int fd, int cond, GUnixFDSourceFunc fn, void *data)
{
    return g_unix_fd_add_full(G_PRIORITY_DEFAULT, fd, cond, fn, data, NULL);
}

AT_EXPORT guint g_unix_signal_add_full(int prio, int sig, GSourceFunc fn, void *data,
                                       GDestroyNotify notify)
{
    if (fn)
        src_wrap(&fn, &data, &notify, 0);
    return real_g_unix_signal_add_full()(prio, sig, fn, data, notify);
}

AT_EXPORT guint g_unix_signal_add(int sig, GSourceFunc fn, void *data)
{
    return g_unix_signal_add_full(G_PRIORITY_DEFAULT, sig, fn, data, NULL);
}

/* A source made by hand and given its callback: how GIO hands work back to a main context
 * (g_task_return from a GTask's thread: g_idle_source_new + g_source_set_callback +
 * g_source_attach), and how programs do the same. Idle and timeout sources call the callback as a
 * GSourceFunc(data), as do Unix signal sources; I/O, child and Unix fd watches with their own
 * arguments first (the trampoline is chosen by the source's kind); other kinds (GIO's socket
 * sources...) are left alone. GSource's third member is its GSourceFuncs (public struct, stable
 * ABI). */
static void *src_tramp_for(void *src, const void *ret)
{
    /* the source kinds of the GLib the caller reaches (lazy.c), which may be a plugin's own */
    static at_lazy_local tab[6][AT_LAZY_LOCAL];
    static at_lazy idle, timeout, io, child, usig, ufd;
    const void *funcs = ((void *const *)src)[2];
    if (!funcs)
        return NULL;
    if (funcs == at_lazy_get(&idle, "g_idle_funcs", tab[0], ret, false) ||
        funcs == at_lazy_get(&timeout, "g_timeout_funcs", tab[1], ret, false) ||
        funcs == at_lazy_get(&usig, "g_unix_signal_funcs", tab[4], ret, false))
        return (void *)src_tramp;
    if (funcs == at_lazy_get(&io, "g_io_watch_funcs", tab[2], ret, false))
        return (void *)io_tramp;
    if (funcs == at_lazy_get(&child, "g_child_watch_funcs", tab[3], ret, false))
        return (void *)child_tramp;
    if (funcs == at_lazy_get(&ufd, "g_unix_fd_source_funcs", tab[5], ret, false))
        return (void *)unixfd_tramp;
    return NULL;
}

AT_EXPORT void g_source_set_callback(void *src, GSourceFunc fn, void *data, GDestroyNotify notify)
{
    void *tramp = src && fn ? src_tramp_for(src, __builtin_return_address(0)) : NULL;
    void *f = (void *)fn;
    if (tramp && src_wrap_with(&f, &data, &notify, 0, tramp))
        fn = (GSourceFunc)f;
    real_g_source_set_callback()(src, fn, data, notify);
}

/* Removal by the program's data: look for a source we wrapped for it first. */
static cb_ctx *src_by_data(void *data)
{
    return reg_get(OWN_GSOURCE, data);
}

AT_EXPORT gboolean g_idle_remove_by_data(void *data)
{
    cb_ctx *c = src_by_data(data);
    if (c && real_g_idle_remove_by_data()(c))
        return 1;
    return real_g_idle_remove_by_data()(data);
}

AT_EXPORT gboolean g_source_remove_by_user_data(void *data)
{
    cb_ctx *c = src_by_data(data);
    if (c && real_g_source_remove_by_user_data()(c))
        return 1;
    return real_g_source_remove_by_user_data()(data);
}

AT_EXPORT gboolean g_source_remove_by_funcs_user_data(void *funcs, void *data)
{
    cb_ctx *c = src_by_data(data);
    if (c && real_g_source_remove_by_funcs_user_data()(funcs, c))
        return 1;
    return real_g_source_remove_by_funcs_user_data()(funcs, data);
}

/* Lookups by the program's data find the sources we wrapped for it too. */
AT_EXPORT void *g_main_context_find_source_by_user_data(void *ctx, void *data)
{
    cb_ctx *c = src_by_data(data);
    void *src = c ? real_g_main_context_find_source_by_user_data()(ctx, c) : NULL;
    return src ? src : real_g_main_context_find_source_by_user_data()(ctx, data);
}

AT_EXPORT void *g_main_context_find_source_by_funcs_user_data(void *ctx, void *funcs, void *data)
{
    cb_ctx *c = src_by_data(data);
    void *src = c ? real_g_main_context_find_source_by_funcs_user_data()(ctx, funcs, c) : NULL;
    return src ? src : real_g_main_context_find_source_by_funcs_user_data()(ctx, funcs, data);
}

/* ---------------- GLib thread pools ---------------- */

/* GThreadPool's public head: { func, user_data, exclusive }. Pools we create run pool_tramp with a
 * pool_ctx as user_data. An item pushed in an activity is wrapped in a pool_item slot (slots.c): no
 * lock and no malloc per item, and the worker tells a wrapped item from the program's own pointer by
 * its address. Everywhere GLib hands an item back to the program it is unwrapped first: the pool's
 * function, the item-free function of g_thread_pool_new_full (also called for the items
 * g_thread_pool_free drops unrun, which releases their captures), the sort function; and
 * g_thread_pool_move_to_front finds the wrapper of the program's pointer. */
typedef struct gpool_head {
    GFunc func;
    void *user_data;
    gboolean exclusive;
} gpool_head;

typedef int (*GCompareDataFunc)(const void *, const void *, void *);
typedef struct pool_sort {
    GCompareDataFunc fn;
    void *user_data;
} pool_sort;

typedef struct pool_ctx {
    GFunc func;
    void *user_data;
    GDestroyNotify item_free;
    pool_sort *sort; /* under pool_sort_lock */
} pool_ctx;

/* A wrapped item. A free slot reads pc == NULL (at_slot_free clears it), which is what
 * g_thread_pool_move_to_front's scan relies on. */
typedef struct pool_item {
    at_activity *cap; /* NULL: pushed in no activity (wrapped only because the pool has an item_free) */
    void *data;       /* the program's item */
    uint64_t tid;     /* the submitting thread */
    pool_ctx *pc;     /* atomic; NULL once freed (at offset 24: see at_slot_free) */
    uint64_t send_ts; /* the Send's timestamp (0: none written) */
} pool_item;
_Static_assert(sizeof(pool_item) <= AT_SLOT_SIZE, "a pool item fits a slot");
_Static_assert(offsetof(pool_item, pc) == 3 * sizeof(void *), "at_slot_free clears pc");

/* the thread's last wrapped push (GTask moves it to front), in at_common.h's path object */
#define tl_last_item (*(pool_item **)&AT_PTLS.pool_last)
static pthread_mutex_t pool_sort_lock AT_FORK_DATA = PTHREAD_MUTEX_INITIALIZER;

/* A fork child must not inherit a lock held by a thread that does not exist there: the first
 * registry call in such a child (a timer started, a source added) waited for ever. */
AT_FORK_TEXT static void callbacks_fork_prepare(void)
{
    at_fork_lock(&reg_lock);
    at_fork_lock(&pool_sort_lock);
}

AT_FORK_TEXT static void callbacks_fork_parent(void)
{
    at_fork_unlock(&pool_sort_lock);
    at_fork_unlock(&reg_lock);
}

AT_FORK_TEXT static void callbacks_fork_child(void)
{
    at_mutex_fork_reset(&pool_sort_lock);
    at_mutex_fork_reset(&reg_lock);
}

__attribute__((constructor)) static void callbacks_init(void)
{
    pthread_atfork(callbacks_fork_prepare, callbacks_fork_parent, callbacks_fork_child);
}

REAL(g_thread_pool_set_sort_function, void, (void *, GCompareDataFunc, void *))
REAL(g_thread_pool_move_to_front, gboolean, (void *, void *))

static inline void *item_data(const void *p)
{
    return at_is_slot(p) ? ((const pool_item *)p)->data : (void *)p;
}

static void item_done(pool_item *it)
{
    at_flow_release(it->cap);
    at_slot_free(it);
}

AT_HOT_FN static void pool_tramp(void *p, void *arg)
{
    pool_ctx *pc = arg;
    pool_item *it = at_is_slot(p) ? p : NULL;
    void *data = it ? it->data : p;
    int e = errno;
    /* an item with nothing captured runs in no activity, whatever the previous item left */
    at_activity *prev = ctx_enter(it ? it->cap : NULL, it ? it->tid : 0, it ? it->send_ts : 0);
    errno = e;
    pc->func(data, pc->user_data);
    e = errno;
    at_flow_leave(prev);
    if (it)
        item_done(it);
    errno = e;
}

/* The queue's item-free function, always ours: a wrapped item is released, and the program's own
 * function (if any) gets the program's pointer. A pool with an item-free function has all its items
 * wrapped, so a bare pointer here belongs to a pool without one (or is an item pushed when no slot
 * could be had, 16 Mi live items or no address space: its item-free function is then not called). */
static void pool_item_free(void *p)
{
    if (!at_is_slot(p))
        return;
    pool_item *it = p;
    pool_ctx *pc = it->pc;
    void *data = it->data;
    item_done(it);
    if (pc && pc->item_free)
        pc->item_free(data);
}

static int pool_sort_tramp(const void *a, const void *b, void *p)
{
    pool_sort *s = p;
    return s->fn(item_data(a), item_data(b), s->user_data);
}

AT_EXPORT void *g_thread_pool_new_full(GFunc func, void *user_data, GDestroyNotify item_free,
                                       int max_threads, gboolean exclusive, void **error)
{
    if (!at_on())
        return real_g_thread_pool_new_full()(func, user_data, item_free, max_threads, exclusive, error);
    int e = errno;
    pool_ctx *pc = calloc(1, sizeof *pc); /* lives as long as the process: pools can outlive free */
    errno = e;
    if (!pc)
        return real_g_thread_pool_new_full()(func, user_data, item_free, max_threads, exclusive, error);
    pc->func = func;
    pc->user_data = user_data;
    pc->item_free = item_free;
    at_thread_noflow++; /* an exclusive pool starts its threads now: they belong to the pool */
    void *pool = real_g_thread_pool_new_full()(pool_tramp, pc, pool_item_free, max_threads, exclusive,
                                               error);
    at_thread_noflow--;
    return pool;
}

AT_EXPORT void *g_thread_pool_new(GFunc func, void *user_data, int max_threads, gboolean exclusive,
                                  void **error)
{
    return g_thread_pool_new_full(func, user_data, NULL, max_threads, exclusive, error);
}

AT_HOT_FN AT_EXPORT gboolean g_thread_pool_push(void *pool, void *data, void **error)
{
    gpool_head *h = pool;
    void *item = data;
    if (h && h->func == pool_tramp) { /* our pool: its item-free function expects wrappers */
        pool_ctx *pc = h->user_data;
        at_activity *cap = at_on() ? at_flow_capture() : NULL;
        if (cap || pc->item_free) {
            pool_item *it = at_slot_alloc();
            if (it) {
                it->cap = cap;
                it->data = data;
                it->tid = cap ? (uint64_t)at_tid() : 0;
                __atomic_store_n(&it->pc, pc, __ATOMIC_RELAXED);
                tl_last_item = it;
                item = it;
                it->send_ts = at_flow_transfer_send(cap);
            } else {
                at_flow_release(cap); /* no slot: the item runs in no activity */
            }
        }
    }
    at_thread_noflow++; /* GLib creates pool threads lazily, here, on the pool's behalf */
    /* FALSE (a thread could not be started) still queues the item: the slot is the queue's now */
    gboolean ok = real_g_thread_pool_push()(pool, item, error);
    at_thread_noflow--;
    return ok;
}

/* Raising a pool's limit starts threads for the items already queued, here: they are the pool's. */
REAL(g_thread_pool_set_max_threads, gboolean, (void *, int, void **))
AT_EXPORT gboolean g_thread_pool_set_max_threads(void *pool, int max_threads, void **error)
{
    at_thread_noflow++;
    gboolean ok = real_g_thread_pool_set_max_threads()(pool, max_threads, error);
    at_thread_noflow--;
    return ok;
}

/* A GThread GIO or GObject starts for itself (GIO's D-Bus worker "gdbus"), told by its function:
 * it serves every connection and activity after, so it begins in none. libglib's own (its worker
 * "gmain") never come through here; thread.c tells those by the GThread pthread_create is handed,
 * which a sanitizer's pthread_create hides: this wrapper does not depend on it. */
REAL(g_thread_new, void *, (const char *, void *(*)(void *), void *))
AT_EXPORT void *g_thread_new(const char *name, void *(*func)(void *), void *data)
{
    int own = at_on() && at_glib_own((const void *)func);
    at_thread_noflow += own;
    void *t = real_g_thread_new()(name, func, data);
    at_thread_noflow -= own;
    return t;
}

REAL(g_thread_try_new, void *, (const char *, void *(*)(void *), void *, void **))
AT_EXPORT void *g_thread_try_new(const char *name, void *(*func)(void *), void *data, void **error)
{
    int own = at_on() && at_glib_own((const void *)func);
    at_thread_noflow += own;
    void *t = real_g_thread_try_new()(name, func, data, error);
    at_thread_noflow -= own;
    return t;
}

AT_EXPORT void g_thread_pool_set_sort_function(void *pool, GCompareDataFunc fn, void *user_data)
{
    gpool_head *h = pool;
    if (!h || h->func != pool_tramp) {
        real_g_thread_pool_set_sort_function()(pool, fn, user_data);
        return;
    }
    pool_ctx *pc = h->user_data;
    pool_sort *s = NULL;
    if (fn) {
        int e = errno;
        s = malloc(sizeof *s);
        errno = e;
        if (!s) { /* sorting the wrappers by address is no order at all: keep the old one */
            return;
        }
        s->fn = fn;
        s->user_data = user_data;
    }
    /* GLib swaps and uses the function under the queue's lock: once set, the old one is unused */
    pthread_mutex_lock(&pool_sort_lock);
    real_g_thread_pool_set_sort_function()(pool, s ? pool_sort_tramp : NULL, s);
    pool_sort *old = pc->sort;
    pc->sort = s;
    pthread_mutex_unlock(&pool_sort_lock);
    free(old);
}

/* The program names its own pointer; the queue holds the wrapper. The thread's last push is tried
 * first (GTask pushes, then moves the same task to the front), then a bare item, then every live
 * wrapper of this pool with this data (rare: a scan of the slots). */
AT_EXPORT gboolean g_thread_pool_move_to_front(void *pool, void *data)
{
    gpool_head *h = pool;
    if (!h || h->func != pool_tramp)
        return real_g_thread_pool_move_to_front()(pool, data);
    pool_ctx *pc = h->user_data;
    pool_item *last = tl_last_item;
    if (last && __atomic_load_n(&last->pc, __ATOMIC_RELAXED) == pc &&
        __atomic_load_n(&last->data, __ATOMIC_RELAXED) == data &&
        real_g_thread_pool_move_to_front()(pool, last))
        return 1;
    if (real_g_thread_pool_move_to_front()(pool, data))
        return 1;
    uintptr_t lo = __atomic_load_n(&at_slot_lo, __ATOMIC_ACQUIRE);
    size_t used = __atomic_load_n(&at_slot_used, __ATOMIC_ACQUIRE);
    for (size_t off = 0; off < used; off += AT_SLOT_SIZE) {
        pool_item *it = (pool_item *)(lo + off);
        if (it != last && __atomic_load_n(&it->pc, __ATOMIC_RELAXED) == pc &&
            __atomic_load_n(&it->data, __ATOMIC_RELAXED) == data &&
            real_g_thread_pool_move_to_front()(pool, it))
            return 1;
    }
    return 0;
}

/* ---------------- POSIX SIGEV_THREAD ---------------- */

typedef struct sigev_ctx {
    cb_ctx c;
    void (*fn)(union sigval);
    union sigval value;
    int one_shot; /* mq_notify: released after its run */
} sigev_ctx;

static void sigev_tramp(union sigval v)
{
    sigev_ctx *s = v.sival_ptr;
    at_activity *prev = ctx_enter(s->c.cap, s->c.tid, s->c.send_ts);
    s->fn(s->value);
    int e = errno;
    at_flow_leave(prev);
    if (s->one_shot)
        ctx_free(&s->c);
    errno = e;
}

static sigev_ctx *sigev_wrap(const struct sigevent *in, struct sigevent *out, int one_shot)
{
    if (!at_on() || !in || in->sigev_notify != SIGEV_THREAD || !in->sigev_notify_function)
        return NULL;
    at_activity *cap = at_flow_capture();
    if (!cap)
        return NULL;
    int e = errno;
    sigev_ctx *s = calloc(1, sizeof *s);
    errno = e;
    if (!s) {
        at_flow_release(cap);
        return NULL;
    }
    s->c.cap = cap;
    s->c.tid = (uint64_t)at_tid();
    s->fn = in->sigev_notify_function;
    s->value = in->sigev_value;
    s->one_shot = one_shot;
    s->c.send_ts = at_flow_transfer_send(cap);
    *out = *in;
    out->sigev_notify_function = sigev_tramp;
    out->sigev_value.sival_ptr = s;
    return s;
}

/* A timer's context lives as long as the process: a notification thread already started may still
 * be running the function when timer_delete returns, and glibc gives no way to wait for it (a few
 * bytes per timer). */
AT_EXPORT int timer_create(clockid_t clock, struct sigevent *sev, timer_t *id)
{
    struct sigevent mine;
    sigev_ctx *s = sigev_wrap(sev, &mine, 0);
    if (!s)
        return real_timer_create()(clock, sev, id);
    int r = real_timer_create()(clock, &mine, id);
    if (r != 0) {
        int e = errno;
        ctx_free(&s->c);
        errno = e;
    }
    return r;
}

AT_EXPORT int mq_notify(mqd_t q, const struct sigevent *sev)
{
    struct sigevent mine;
    sigev_ctx *s = sigev_wrap(sev, &mine, 1);
    if (!s)
        return real_mq_notify()(q, sev);
    int r = real_mq_notify()(q, &mine);
    if (r != 0) {
        int e = errno;
        ctx_free(&s->c);
        errno = e;
    }
    return r;
}

/* ---------------- libuv ---------------- */

static void uv_work_tramp(void *req)
{
    cb_ctx *c = reg_get(OWN_UVWORK, req);
    at_activity *prev = ctx_enter(c ? c->cap : NULL, c ? c->tid : 0, c ? c->send_ts : 0);
    if (c)
        ((uv_work_cb)c->fn)(req);
    at_flow_leave(prev);
}

static void uv_after_tramp(void *req, int status)
{
    cb_ctx *c = reg_take(OWN_UVWORK, req, NULL);
    if (!c)
        return;
    at_activity *prev = ctx_enter(c->cap, c->tid, c->send_ts);
    if (c->fn2)
        ((uv_after_work_cb)c->fn2)(req, status);
    at_flow_leave(prev);
    ctx_free(c);
}

AT_EXPORT int uv_queue_work(void *loop, void *req, uv_work_cb work, uv_after_work_cb after)
{
    at_activity *cap = at_on() && work ? at_flow_capture() : NULL;
    cb_ctx *c = cap ? ctx_new(cap, (void *)work, req) : NULL;
    if (c && !reg_put(OWN_UVWORK, req, c)) {
        ctx_free(c);
        c = NULL;
    } else if (!c && cap) {
        at_flow_release(cap);
    }
    at_thread_noflow++; /* libuv starts its thread pool at the first submit */
    int r = c ? real_uv_queue_work()(loop, req, uv_work_tramp, uv_after_tramp)
              : real_uv_queue_work()(loop, req, work, after);
    at_thread_noflow--;
    if (c) {
        c->fn2 = (void *)after;
        if (r != 0 && reg_take(OWN_UVWORK, req, c) == c)
            ctx_free(c);
    }
    return r;
}

static void uv_timer_tramp(void *handle)
{
    cb_ctx *c = reg_get(OWN_UVTIMER, handle);
    if (!c)
        return;
    at_activity *prev = ctx_enter(c->cap, c->tid, c->send_ts);
    ((uv_timer_cb)c->fn)(handle);
    at_flow_leave(prev);
}

AT_EXPORT int uv_timer_start(void *handle, uv_timer_cb cb, uint64_t timeout, uint64_t repeat)
{
    cb_ctx *old = reg_take(OWN_UVTIMER, handle, NULL); /* a restart replaces the capture */
    at_activity *cap = at_on() && cb ? at_flow_capture() : NULL;
    cb_ctx *c = cap ? ctx_new(cap, (void *)cb, handle) : NULL;
    if (c && !reg_put(OWN_UVTIMER, handle, c)) {
        ctx_free(c);
        c = NULL;
    } else if (!c && cap) {
        at_flow_release(cap);
    }
    int r = real_uv_timer_start()(handle, c ? uv_timer_tramp : cb, timeout, repeat);
    if (old)
        ctx_free(old); /* after the restart: the loop thread no longer runs through old */
    return r;
}

static void uv_async_tramp(void *handle)
{
    cb_ctx *c = reg_get(OWN_UVASYNC, handle);
    if (!c)
        return;
    at_activity *cap = __atomic_exchange_n(&c->cap, NULL, __ATOMIC_ACQ_REL);
    uint64_t tid = __atomic_load_n(&c->tid, __ATOMIC_RELAXED);
    at_activity *prev = ctx_enter(cap, tid, 0);
    ((uv_async_cb)c->fn)(handle);
    at_flow_leave(prev);
    at_flow_release(cap);
}

/* A call from libuv's own code (ret in the library real came from): libuv's internal handles
 * (the loop's async through which its pool reports finished requests) are left as they are. */
static bool called_from_libuv(const void *ret, void *real)
{
    struct dl_find_object a, b;
    return real && _dl_find_object((void *)ret, &a) == 0 && _dl_find_object(real, &b) == 0 &&
           a.dlfo_link_map == b.dlfo_link_map;
}

/* The program's async handles only: libuv's pool wakes the loop through one of its own, and
 * capturing the pool thread's activity (none) at each of those sends had every completion (after
 * callbacks, fs and DNS callbacks) run in none instead of in the loop thread's activity. */
AT_EXPORT int uv_async_init(void *loop, void *async, uv_async_cb cb)
{
    cb_ctx *c = at_on() && cb && !called_from_libuv(__builtin_return_address(0),
                                                     (void *)real_uv_async_init())
                    ? ctx_new(NULL, (void *)cb, async)
                    : NULL;
    if (c && !reg_put(OWN_UVASYNC, async, c)) {
        free(c);
        c = NULL;
    }
    int r = real_uv_async_init()(loop, async, c ? uv_async_tramp : cb);
    if (r != 0 && c && reg_take(OWN_UVASYNC, async, c) == c)
        free(c);
    return r;
}

AT_EXPORT int uv_async_send(void *async)
{
    cb_ctx *c = at_on() ? reg_get(OWN_UVASYNC, async) : NULL;
    if (c) {
        /* sends coalesce into one callback: it runs in the newest sender's activity */
        at_activity *cap = at_flow_capture();
        if (cap)
            at_flow_transfer_send(cap);
        __atomic_store_n(&c->tid, (uint64_t)at_tid(), __ATOMIC_RELAXED);
        at_activity *old = __atomic_exchange_n(&c->cap, cap, __ATOMIC_ACQ_REL);
        at_flow_release(old);
    }
    return real_uv_async_send()(async);
}

/* libuv requests: a file-system, DNS, random, write, shutdown, connect or UDP-send request made
 * with a callback runs that callback (on the loop thread, when the request completes) in the
 * activity current when it was made, so a chain of requests (open, then read in its callback, then
 * close) stays in the activity that started it. Every request callback takes the request first and
 * up to three integer or pointer arguments after it (status, results), passed on as they came. A
 * request made with no callback (a synchronous uv_fs_* call) or with no activity is left alone. */
static const char OWN_UVREQ[] = "uvreq"; /* a pending libuv request -> ctx */

typedef void (*uv_req_cb)(void *req);
typedef void (*uv_req_cb3)(void *req, uintptr_t a, uintptr_t b, uintptr_t c);

static void uvreq_tramp(void *req, uintptr_t a, uintptr_t b, uintptr_t c3)
{
    int e = errno;
    cb_ctx *c = reg_take(OWN_UVREQ, req, NULL); /* there is one: the callback was swapped for it */
    if (!c)
        return;
    at_activity *prev = ctx_enter(c->cap, c->tid, c->send_ts);
    errno = e;
    ((uv_req_cb3)c->fn)(req, a, b, c3);
    e = errno;
    at_flow_leave(prev);
    ctx_free(c);
    errno = e;
}

/* The current activity captured for cb, registered under (owner, key); NULL when there is none
 * (or no memory): the call then goes through as it is. */
static cb_ctx *reg_capture(const void *owner, void *key, void *cb)
{
    if (!cb || !key || !at_on())
        return NULL;
    at_activity *cap = at_flow_capture();
    if (!cap)
        return NULL;
    cb_ctx *c = ctx_new(cap, cb, key);
    if (!c) {
        at_flow_release(cap);
        return NULL;
    }
    if (!reg_put(owner, key, c)) {
        ctx_free(c);
        return NULL;
    }
    return c;
}

/* Capture for req: non-NULL means the request is to be made with uvreq_tramp as its callback. */
static cb_ctx *uvreq_begin(void *req, void *cb)
{
    return reg_capture(OWN_UVREQ, req, cb);
}

/* The request was refused (libuv then never calls back): its capture goes. */
static void uvreq_end(void *req, cb_ctx *c, int r)
{
    if (c && r < 0 && reg_take(OWN_UVREQ, req, c) == c)
        ctx_free(c);
}

/* name's parameters are spelt out (the request is `req`, the callback `cb` of type cbt) */
#define UV_REQ(name, cbt, decl, args)                                                              \
    REAL(name, int, decl)                                                                          \
    AT_EXPORT int name decl                                                                        \
    {                                                                                              \
        cb_ctx *c_ = uvreq_begin(req, (void *)cb);                                                 \
        if (c_)                                                                                    \
            cb = (cbt)(void (*)(void))uvreq_tramp;                                                 \
        int r_ = real_##name() args;                                                               \
        uvreq_end(req, c_, r_);                                                                    \
        return r_;                                                                                 \
    }

typedef void (*uv_fs_cb_t)(void *req);
typedef void (*uv_status_cb_t)(void *req, int status);
#define UV_FS(name, decl, args) UV_REQ(name, uv_fs_cb_t, decl, args)
UV_FS(uv_fs_close, (void *loop, void *req, int file, uv_fs_cb_t cb), (loop, req, file, cb))
UV_FS(uv_fs_open, (void *loop, void *req, const char *path, int flags, int mode, uv_fs_cb_t cb),
      (loop, req, path, flags, mode, cb))
UV_FS(uv_fs_read, (void *loop, void *req, int file, const void *bufs, unsigned nbufs, int64_t off,
                   uv_fs_cb_t cb), (loop, req, file, bufs, nbufs, off, cb))
UV_FS(uv_fs_write, (void *loop, void *req, int file, const void *bufs, unsigned nbufs, int64_t off,
                    uv_fs_cb_t cb), (loop, req, file, bufs, nbufs, off, cb))
UV_FS(uv_fs_unlink, (void *loop, void *req, const char *path, uv_fs_cb_t cb), (loop, req, path, cb))
UV_FS(uv_fs_copyfile, (void *loop, void *req, const char *path, const char *np, int flags,
                       uv_fs_cb_t cb), (loop, req, path, np, flags, cb))
UV_FS(uv_fs_mkdir, (void *loop, void *req, const char *path, int mode, uv_fs_cb_t cb),
      (loop, req, path, mode, cb))
UV_FS(uv_fs_mkdtemp, (void *loop, void *req, const char *tpl, uv_fs_cb_t cb), (loop, req, tpl, cb))
UV_FS(uv_fs_mkstemp, (void *loop, void *req, const char *tpl, uv_fs_cb_t cb), (loop, req, tpl, cb))
UV_FS(uv_fs_rmdir, (void *loop, void *req, const char *path, uv_fs_cb_t cb), (loop, req, path, cb))
UV_FS(uv_fs_scandir, (void *loop, void *req, const char *path, int flags, uv_fs_cb_t cb),
      (loop, req, path, flags, cb))
UV_FS(uv_fs_opendir, (void *loop, void *req, const char *path, uv_fs_cb_t cb), (loop, req, path, cb))
UV_FS(uv_fs_readdir, (void *loop, void *req, void *dir, uv_fs_cb_t cb), (loop, req, dir, cb))
UV_FS(uv_fs_closedir, (void *loop, void *req, void *dir, uv_fs_cb_t cb), (loop, req, dir, cb))
UV_FS(uv_fs_stat, (void *loop, void *req, const char *path, uv_fs_cb_t cb), (loop, req, path, cb))
UV_FS(uv_fs_lstat, (void *loop, void *req, const char *path, uv_fs_cb_t cb), (loop, req, path, cb))
UV_FS(uv_fs_fstat, (void *loop, void *req, int file, uv_fs_cb_t cb), (loop, req, file, cb))
UV_FS(uv_fs_statfs, (void *loop, void *req, const char *path, uv_fs_cb_t cb), (loop, req, path, cb))
UV_FS(uv_fs_rename, (void *loop, void *req, const char *path, const char *np, uv_fs_cb_t cb),
      (loop, req, path, np, cb))
UV_FS(uv_fs_fsync, (void *loop, void *req, int file, uv_fs_cb_t cb), (loop, req, file, cb))
UV_FS(uv_fs_fdatasync, (void *loop, void *req, int file, uv_fs_cb_t cb), (loop, req, file, cb))
UV_FS(uv_fs_ftruncate, (void *loop, void *req, int file, int64_t off, uv_fs_cb_t cb),
      (loop, req, file, off, cb))
UV_FS(uv_fs_sendfile, (void *loop, void *req, int out, int in, int64_t off, size_t len,
                       uv_fs_cb_t cb), (loop, req, out, in, off, len, cb))
UV_FS(uv_fs_access, (void *loop, void *req, const char *path, int mode, uv_fs_cb_t cb),
      (loop, req, path, mode, cb))
UV_FS(uv_fs_chmod, (void *loop, void *req, const char *path, int mode, uv_fs_cb_t cb),
      (loop, req, path, mode, cb))
UV_FS(uv_fs_fchmod, (void *loop, void *req, int file, int mode, uv_fs_cb_t cb),
      (loop, req, file, mode, cb))
UV_FS(uv_fs_utime, (void *loop, void *req, const char *path, double at, double mt, uv_fs_cb_t cb),
      (loop, req, path, at, mt, cb))
UV_FS(uv_fs_futime, (void *loop, void *req, int file, double at, double mt, uv_fs_cb_t cb),
      (loop, req, file, at, mt, cb))
UV_FS(uv_fs_lutime, (void *loop, void *req, const char *path, double at, double mt, uv_fs_cb_t cb),
      (loop, req, path, at, mt, cb))
UV_FS(uv_fs_link, (void *loop, void *req, const char *path, const char *np, uv_fs_cb_t cb),
      (loop, req, path, np, cb))
UV_FS(uv_fs_symlink, (void *loop, void *req, const char *path, const char *np, int flags,
                      uv_fs_cb_t cb), (loop, req, path, np, flags, cb))
UV_FS(uv_fs_readlink, (void *loop, void *req, const char *path, uv_fs_cb_t cb), (loop, req, path, cb))
UV_FS(uv_fs_realpath, (void *loop, void *req, const char *path, uv_fs_cb_t cb), (loop, req, path, cb))
UV_FS(uv_fs_chown, (void *loop, void *req, const char *path, unsigned uid, unsigned gid,
                    uv_fs_cb_t cb), (loop, req, path, uid, gid, cb))
UV_FS(uv_fs_fchown, (void *loop, void *req, int file, unsigned uid, unsigned gid, uv_fs_cb_t cb),
      (loop, req, file, uid, gid, cb))
UV_FS(uv_fs_lchown, (void *loop, void *req, const char *path, unsigned uid, unsigned gid,
                     uv_fs_cb_t cb), (loop, req, path, uid, gid, cb))

typedef void (*uv_getaddrinfo_cb_t)(void *req, int status, void *res);
typedef void (*uv_getnameinfo_cb_t)(void *req, int status, const char *host, const char *service);
typedef void (*uv_random_cb_t)(void *req, int status, void *buf, size_t len);
UV_REQ(uv_getaddrinfo, uv_getaddrinfo_cb_t,
       (void *loop, void *req, uv_getaddrinfo_cb_t cb, const char *node, const char *service,
        const void *hints), (loop, req, cb, node, service, hints))
UV_REQ(uv_getnameinfo, uv_getnameinfo_cb_t,
       (void *loop, void *req, uv_getnameinfo_cb_t cb, const void *addr, int flags),
       (loop, req, cb, addr, flags))
UV_REQ(uv_random, uv_random_cb_t,
       (void *loop, void *req, void *buf, size_t len, unsigned flags, uv_random_cb_t cb),
       (loop, req, buf, len, flags, cb))
UV_REQ(uv_write, uv_status_cb_t,
       (void *req, void *handle, const void *bufs, unsigned nbufs, uv_status_cb_t cb),
       (req, handle, bufs, nbufs, cb))
UV_REQ(uv_write2, uv_status_cb_t,
       (void *req, void *handle, const void *bufs, unsigned nbufs, void *send_handle,
        uv_status_cb_t cb), (req, handle, bufs, nbufs, send_handle, cb))
UV_REQ(uv_shutdown, uv_status_cb_t, (void *req, void *handle, uv_status_cb_t cb), (req, handle, cb))
UV_REQ(uv_tcp_connect, uv_status_cb_t, (void *req, void *handle, const void *addr, uv_status_cb_t cb),
       (req, handle, addr, cb))
UV_REQ(uv_udp_send, uv_status_cb_t,
       (void *req, void *handle, const void *bufs, unsigned nbufs, const void *addr,
        uv_status_cb_t cb), (req, handle, bufs, nbufs, addr, cb))

/* uv_pipe_connect reports every error through its callback */
REAL(uv_pipe_connect, void, (void *req, void *handle, const char *name, uv_status_cb_t cb))
AT_EXPORT void uv_pipe_connect(void *req, void *handle, const char *name, uv_status_cb_t cb)
{
    cb_ctx *c = uvreq_begin(req, (void *)cb);
    real_uv_pipe_connect()(req, handle, name,
                           c ? (uv_status_cb_t)(void (*)(void))uvreq_tramp : cb);
}

/* libuv's own threads: its pool starts at the first request of any kind (uv_fs_*, uv_getaddrinfo,
 * uv_random, uv_queue_work), in init_threads, through uv_thread_create_ex. Called from libuv's own
 * code, it makes a thread of libuv's, which begins in no activity; called by the program (also
 * through uv_thread_create, which calls uv_thread_create_ex in turn), one of the program's, which
 * inherits. The caller is told by the return address, so another interposer of pthread_create (a
 * sanitizer's, which hides the thread routine from thread.c) changes nothing. */
static AT_TLS int uv_program_create; /* inside the program's uv_thread_create */

AT_EXPORT int uv_thread_create_ex(void *tid, const void *params, uv_thread_cb entry, void *arg)
{
    uv_thread_create_ex_fn real = real_uv_thread_create_ex();
    if (!real)
        return -ENOSYS;
    int own = !uv_program_create && at_on() &&
              called_from_libuv(__builtin_return_address(0), (void *)real);
    at_thread_noflow += own;
    int r = real(tid, params, entry, arg);
    at_thread_noflow -= own;
    return r;
}

AT_EXPORT int uv_thread_create(void *tid, uv_thread_cb entry, void *arg)
{
    uv_thread_create_fn real = real_uv_thread_create();
    if (!real)
        return -ENOSYS;
    int own = at_on() && called_from_libuv(__builtin_return_address(0), (void *)real);
    at_thread_noflow += own;
    uv_program_create++;
    int r = real(tid, entry, arg);
    uv_program_create--;
    at_thread_noflow -= own;
    return r;
}

/* libuv handles whose callback runs again and again: a stream's reads, a listening socket's
 * connections, UDP receives, poll, signal, idle/check/prepare, fs_event and fs_poll handles. The
 * callback runs in the activity current at the call that set it (a connection's reads in the
 * activity its handler was in when it called uv_read_start), like libevent's event_add; one set
 * with no activity runs as it is. A handle has one such callback; a new start replaces the
 * capture, uv_close drops it. The capture is registered before the real start (its callback can
 * only come later, from the loop on this same thread) and settled after: the handle's previous
 * capture goes if the start took, the new one if it was refused. */
static const char OWN_UVHANDLE[] = "uvhandle"; /* a libuv handle -> ctx of its callback */

typedef void (*uv_handle_cb4)(void *h, uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d);

static void uvh_tramp(void *h, uintptr_t a, uintptr_t b, uintptr_t c3, uintptr_t d)
{
    int e = errno;
    cb_ctx *c = reg_get(OWN_UVHANDLE, h); /* there is one: the callback was swapped for it */
    if (!c)
        return;
    uv_handle_cb4 fn = (uv_handle_cb4)c->fn;
    at_activity *prev = ctx_enter(c->cap, c->tid, c->send_ts);
    errno = e;
    fn(h, a, b, c3, d); /* may close or restart h, freeing c */
    e = errno;
    at_flow_leave(prev);
    errno = e;
}

static cb_ctx *uvh_begin(void *h, void *cb, cb_ctx **old)
{
    *old = reg_get(OWN_UVHANDLE, h);
    return reg_capture(OWN_UVHANDLE, h, cb);
}

static void uvh_end(void *h, cb_ctx *c, cb_ctx *old, int r)
{
    cb_ctx *drop = r == 0 ? old : c;
    if (drop && reg_take(OWN_UVHANDLE, h, drop) == drop)
        ctx_free(drop);
}

/* name's parameters are spelt out (the handle is `h`, the callback `cb` of type cbt). keep: a start
 * on an active handle returns 0 and keeps the callback it has (idle, check, prepare, fs_poll), and
 * so do we, rather than let the trampoline call the new one libuv ignored. */
REAL(uv_is_active, int, (const void *))
#define UV_HANDLE_(name, cbt, keep, decl, args)                                                    \
    REAL(name, int, decl)                                                                          \
    AT_EXPORT int name decl                                                                        \
    {                                                                                              \
        uv_is_active_fn act_ = keep && h ? real_uv_is_active_opt() : NULL;       \
        if (act_ && act_(h))                                                                       \
            return real_##name() args;                                                             \
        cb_ctx *old_, *c_ = uvh_begin(h, (void *)cb, &old_);                                       \
        if (c_)                                                                                    \
            cb = (cbt)(void (*)(void))uvh_tramp;                                                   \
        int r_ = real_##name() args;                                                               \
        uvh_end(h, c_, old_, r_);                                                                  \
        return r_;                                                                                 \
    }
#define UV_HANDLE(name, cbt, decl, args) UV_HANDLE_(name, cbt, 0, decl, args)
#define UV_HANDLE_KEEP(name, cbt, decl, args) UV_HANDLE_(name, cbt, 1, decl, args)

typedef void (*uv_any_cb_t)(void);
UV_HANDLE(uv_read_start, uv_any_cb_t, (void *h, uv_any_cb_t alloc, uv_any_cb_t cb), (h, alloc, cb))
UV_HANDLE(uv_udp_recv_start, uv_any_cb_t, (void *h, uv_any_cb_t alloc, uv_any_cb_t cb),
          (h, alloc, cb))
UV_HANDLE(uv_listen, uv_any_cb_t, (void *h, int backlog, uv_any_cb_t cb), (h, backlog, cb))
UV_HANDLE(uv_poll_start, uv_any_cb_t, (void *h, int events, uv_any_cb_t cb), (h, events, cb))
UV_HANDLE(uv_signal_start, uv_any_cb_t, (void *h, uv_any_cb_t cb, int signum), (h, cb, signum))
UV_HANDLE(uv_signal_start_oneshot, uv_any_cb_t, (void *h, uv_any_cb_t cb, int signum),
          (h, cb, signum))
UV_HANDLE_KEEP(uv_idle_start, uv_any_cb_t, (void *h, uv_any_cb_t cb), (h, cb))
UV_HANDLE_KEEP(uv_check_start, uv_any_cb_t, (void *h, uv_any_cb_t cb), (h, cb))
UV_HANDLE_KEEP(uv_prepare_start, uv_any_cb_t, (void *h, uv_any_cb_t cb), (h, cb))
UV_HANDLE(uv_fs_event_start, uv_any_cb_t, (void *h, uv_any_cb_t cb, const char *path, unsigned fl),
          (h, cb, path, fl))
UV_HANDLE_KEEP(uv_fs_poll_start, uv_any_cb_t, (void *h, uv_any_cb_t cb, const char *path, unsigned ms),
          (h, cb, path, ms))

AT_EXPORT void uv_close(void *handle, uv_close_cb cb)
{
    cb_ctx *t = reg_take(OWN_UVTIMER, handle, NULL);
    cb_ctx *a = reg_take(OWN_UVASYNC, handle, NULL);
    cb_ctx *h = reg_take(OWN_UVHANDLE, handle, NULL);
    real_uv_close()(handle, cb);
    /* uv_close stops the handle at once: its callback cannot run any more */
    if (t)
        ctx_free(t);
    if (a)
        ctx_free(a);
    if (h)
        ctx_free(h);
}

/* ---------------- libevent ---------------- */

typedef void (*ev_cb)(int fd, short what, void *arg);
REAL(event_new, void *, (void *, int, short, ev_cb, void *))
REAL(event_assign, int, (void *, void *, int, short, ev_cb, void *))
REAL(event_add, int, (void *, const void *))
REAL(event_free, void, (void *))
REAL(event_base_once, int, (void *, int, short, ev_cb, void *, const void *))
REAL(event_get_callback, ev_cb, (const void *))
REAL(event_get_callback_arg, void *, (const void *))
REAL(event_self_cbarg, void *, (void))

/* An event keeps one context for its life: event_add stores the activity current there (each add
 * re-arms it: a persistent event runs every time in the activity of its latest add). */
typedef struct ev_ctx {
    ev_cb cb;
    void *arg;           /* the program's argument (the event itself for event_self_cbarg()) */
    at_activity *cap;    /* atomic: swapped by event_add */
    uint64_t tid;
    int once;            /* event_base_once: freed after its run */
} ev_ctx;

static void ev_tramp(int fd, short what, void *p)
{
    ev_ctx *c = p;
    at_activity *cap = __atomic_load_n(&c->cap, __ATOMIC_ACQUIRE);
    at_activity *prev = ctx_enter(cap, c->tid, 0);
    c->cb(fd, what, c->arg);
    int e = errno;
    at_flow_leave(prev);
    if (c->once) {
        at_flow_release(c->cap);
        free(c);
    }
    errno = e;
}

/* A call from libevent's own code: its bufferevents, listeners, evhttp and evdns make and add
 * events of their own, and read those events' arguments back themselves (a bufferevent's
 * finalizer takes its event's argument as the bufferevent): their events are left exactly as
 * they are. Wrapping them swapped the argument for our context, and every program freeing a
 * bufferevent crashed in its finalizer. */
static bool called_from_libevent(const void *ret)
{
    const char *n = at_object_name(ret);
    return n && strncmp(n, "libevent", 8) == 0;
}

/* inlined into the wrappers: the libevent it asks is the one their caller reaches */
static inline __attribute__((always_inline)) ev_ctx *ev_ctx_of(const void *ev)
{
    if (!ev || real_event_get_callback()(ev) != ev_tramp)
        return NULL;
    return real_event_get_callback_arg()(ev);
}

static ev_ctx *ev_ctx_new(ev_cb cb, void *arg)
{
    int e = errno;
    ev_ctx *c = calloc(1, sizeof *c);
    errno = e;
    if (c) {
        c->cb = cb;
        c->arg = arg;
    }
    return c;
}

AT_EXPORT void *event_new(void *base, int fd, short what, ev_cb cb, void *arg)
{
    ev_ctx *c = at_on() && cb && !called_from_libevent(__builtin_return_address(0))
                    ? ev_ctx_new(cb, arg)
                    : NULL;
    if (!c)
        return real_event_new()(base, fd, what, cb, arg);
    void *ev = real_event_new()(base, fd, what, ev_tramp, c);
    if (!ev) {
        free(c);
        return NULL;
    }
    if (arg == real_event_self_cbarg()())
        c->arg = ev;
    return ev;
}

AT_EXPORT int event_assign(void *ev, void *base, int fd, short what, ev_cb cb, void *arg)
{
    /* libevent's own event_new and event_base_once call event_assign through the PLT: already ours */
    if (cb == ev_tramp || called_from_libevent(__builtin_return_address(0)))
        return real_event_assign()(ev, base, fd, what, cb, arg);
    /* a re-assigned event (the program reuses its struct) drops the old context */
    ev_ctx *old = reg_take(OWN_EVENT, ev, NULL);
    ev_ctx *c = at_on() && cb ? ev_ctx_new(cb, arg == real_event_self_cbarg()() ? ev : arg) : NULL;
    if (c && !reg_put(OWN_EVENT, ev, c)) {
        free(c);
        c = NULL;
    }
    int r = c ? real_event_assign()(ev, base, fd, what, ev_tramp, c)
              : real_event_assign()(ev, base, fd, what, cb, arg);
    if (r != 0 && c && reg_take(OWN_EVENT, ev, c) == c)
        free(c);
    if (old) {
        at_flow_release(old->cap);
        free(old);
    }
    return r;
}

AT_EXPORT int event_add(void *ev, const void *tv)
{
    ev_ctx *c = at_on() ? ev_ctx_of(ev) : NULL;
    if (c) {
        at_activity *cap = at_flow_capture();
        if (cap)
            at_flow_transfer_send(cap);
        __atomic_store_n(&c->tid, (uint64_t)at_tid(), __ATOMIC_RELAXED);
        at_flow_release(__atomic_exchange_n(&c->cap, cap, __ATOMIC_ACQ_REL));
    }
    return real_event_add()(ev, tv);
}

AT_EXPORT void event_free(void *ev)
{
    ev_ctx *c = ev_ctx_of(ev);
    real_event_free()(ev); /* deletes the event: its callback cannot run any more */
    if (c) {
        reg_take(OWN_EVENT, ev, c);
        at_flow_release(c->cap);
        free(c);
    }
}

AT_EXPORT ev_cb event_get_callback(const void *ev)
{
    ev_ctx *c = ev_ctx_of(ev);
    return c ? c->cb : real_event_get_callback()(ev);
}

AT_EXPORT void *event_get_callback_arg(const void *ev)
{
    ev_ctx *c = ev_ctx_of(ev);
    return c ? c->arg : real_event_get_callback_arg()(ev);
}

/* bufferevents: the read, write and event callbacks run in the activity current at
 * bufferevent_setcb (a connection's callbacks in the activity its handler was in when it set
 * them), as a libuv stream's reads do. The callbacks and their argument move into a context of
 * the bufferevent's; bufferevent_getcb gives the program's back; bufferevent_free (or a new setcb)
 * drops it. libevent's own setcb calls (bufferevent_free clears the callbacks, filters and pairs
 * set their underlying ones) pass through. */
typedef void (*bev_data_cb)(void *bev, void *arg);
typedef void (*bev_event_cb)(void *bev, short what, void *arg);
typedef struct bev_ctx {
    bev_data_cb readcb, writecb;
    bev_event_cb eventcb;
    void *arg;
    at_activity *cap;
    uint64_t tid;
} bev_ctx;

REAL(bufferevent_setcb, void, (void *, bev_data_cb, bev_data_cb, bev_event_cb, void *))
REAL(bufferevent_getcb, void, (void *, bev_data_cb *, bev_data_cb *, bev_event_cb *, void **))
REAL(bufferevent_free, void, (void *))

static void bev_read_tramp(void *bev, void *p)
{
    bev_ctx *c = p;
    bev_data_cb fn = c->readcb;
    void *arg = c->arg;
    at_activity *prev = ctx_enter(c->cap, c->tid, 0);
    fn(bev, arg); /* may set other callbacks or free bev, freeing c */
    int e = errno;
    at_flow_leave(prev);
    errno = e;
}

static void bev_write_tramp(void *bev, void *p)
{
    bev_ctx *c = p;
    bev_data_cb fn = c->writecb;
    void *arg = c->arg;
    at_activity *prev = ctx_enter(c->cap, c->tid, 0);
    fn(bev, arg);
    int e = errno;
    at_flow_leave(prev);
    errno = e;
}

static void bev_event_tramp(void *bev, short what, void *p)
{
    bev_ctx *c = p;
    bev_event_cb fn = c->eventcb;
    void *arg = c->arg;
    at_activity *prev = ctx_enter(c->cap, c->tid, 0);
    fn(bev, what, arg);
    int e = errno;
    at_flow_leave(prev);
    errno = e;
}

/* bev's context, when its callbacks are ours (inlined into the wrappers, like ev_ctx_of) */
static inline __attribute__((always_inline)) bev_ctx *bev_ctx_of(void *bev)
{
    bev_data_cb r = NULL, w = NULL;
    bev_event_cb ev = NULL;
    void *arg = NULL;
    bufferevent_getcb_fn getcb = bev ? real_bufferevent_getcb_opt() : NULL;
    if (!getcb)
        return NULL;
    getcb(bev, &r, &w, &ev, &arg);
    return r == bev_read_tramp || w == bev_write_tramp || ev == bev_event_tramp ? arg : NULL;
}

static void bev_ctx_free(bev_ctx *c)
{
    if (c) {
        int e = errno;
        at_flow_release(c->cap);
        free(c);
        errno = e;
    }
}

AT_EXPORT void bufferevent_setcb(void *bev, bev_data_cb readcb, bev_data_cb writecb,
                                 bev_event_cb eventcb, void *arg)
{
    bev_ctx *old = bev_ctx_of(bev), *c = NULL;
    at_activity *cap = NULL;
    if (at_on() && (readcb || writecb || eventcb) &&
        !called_from_libevent(__builtin_return_address(0)) && (cap = at_flow_capture())) {
        int e = errno;
        c = malloc(sizeof *c);
        errno = e;
        if (c) {
            *c = (bev_ctx){readcb, writecb, eventcb, arg, cap, (uint64_t)at_tid()};
            at_flow_transfer_send(cap);
        } else {
            at_flow_release(cap);
        }
    }
    if (c)
        real_bufferevent_setcb()(bev, readcb ? bev_read_tramp : NULL, writecb ? bev_write_tramp : NULL,
                                 eventcb ? bev_event_tramp : NULL, c);
    else
        real_bufferevent_setcb()(bev, readcb, writecb, eventcb, arg);
    bev_ctx_free(old); /* after the swap, under the bufferevent's lock: no callback of it runs now */
}

AT_EXPORT void bufferevent_getcb(void *bev, bev_data_cb *readcb, bev_data_cb *writecb,
                                 bev_event_cb *eventcb, void **arg)
{
    bev_ctx *c = bev_ctx_of(bev);
    if (!c) {
        real_bufferevent_getcb()(bev, readcb, writecb, eventcb, arg);
        return;
    }
    if (readcb)
        *readcb = c->readcb;
    if (writecb)
        *writecb = c->writecb;
    if (eventcb)
        *eventcb = c->eventcb;
    if (arg)
        *arg = c->arg;
}

/* The callbacks are cleared here, under the bufferevent's lock (callbacks run holding it, and it is
 * recursive: a callback freeing its own bufferevent is fine), and the context freed before the
 * real free, which clears them again through setcb (then ours no more). */
REAL(bufferevent_lock, void, (void *))
REAL(bufferevent_unlock, void, (void *))
AT_EXPORT void bufferevent_free(void *bev)
{
    bev_ctx *c = NULL;
    bufferevent_lock_fn lock = bev ? real_bufferevent_lock_opt() : NULL;
    bufferevent_unlock_fn unlock = bev ? real_bufferevent_unlock_opt() : NULL;
    if (lock && unlock) {
        lock(bev);
        c = bev_ctx_of(bev);
        if (c)
            real_bufferevent_setcb()(bev, NULL, NULL, NULL, NULL);
        unlock(bev);
    }
    bev_ctx_free(c);
    real_bufferevent_free()(bev);
}

AT_EXPORT int event_base_once(void *base, int fd, short what, ev_cb cb, void *arg, const void *tv)
{
    at_activity *cap = at_on() && cb && !called_from_libevent(__builtin_return_address(0))
                           ? at_flow_capture()
                           : NULL;
    ev_ctx *c = cap ? ev_ctx_new(cb, arg) : NULL;
    if (!c) {
        at_flow_release(cap);
        return real_event_base_once()(base, fd, what, cb, arg, tv);
    }
    c->cap = cap;
    c->tid = (uint64_t)at_tid();
    c->once = 1;
    at_flow_transfer_send(cap);
    int r = real_event_base_once()(base, fd, what, ev_tramp, c, tv);
    if (r != 0) {
        at_flow_release(cap);
        free(c);
    }
    return r; /* a once-event whose base is freed before it fires keeps its context (libevent
                 gives no notification) */
}

/* ---------------- OpenMP (libgomp) ---------------- */

typedef void (*omp_fn)(void *);

typedef struct omp_env {
    omp_fn fn;
    void *data;
    at_activity *cap;
    uint64_t tid;
} omp_env;

/* Every thread of the team (the caller included) runs the region in the caller's activity. */
static void omp_tramp(void *p)
{
    omp_env *env = p;
    at_activity *prev = ctx_enter(env->cap, env->tid, 0);
    env->fn(env->data);
    at_flow_leave(prev);
}

#define OMP_WRAP(call_real, fn, data)                                                              \
    do {                                                                                           \
        at_activity *cap_ = at_on() ? at_flow_capture() : NULL;                                    \
        omp_env env_ = {fn, data, cap_, (uint64_t)at_tid()};                                       \
        if (cap_) {                                                                                \
            fn = omp_tramp;                                                                        \
            data = &env_;                                                                          \
        }                                                                                          \
        at_thread_noflow++; /* libgomp's team threads are the runtime's, not the caller's */      \
        call_real;                                                                                 \
        at_thread_noflow--;                                                                        \
        at_flow_release(cap_);                                                                     \
    } while (0)

REAL(GOMP_parallel, void, (omp_fn, void *, unsigned, unsigned))
AT_EXPORT void GOMP_parallel(omp_fn fn, void *data, unsigned nthreads, unsigned flags)
{
    OMP_WRAP(real_GOMP_parallel()(fn, data, nthreads, flags), fn, data);
}

REAL(GOMP_parallel_sections, void, (omp_fn, void *, unsigned, unsigned, unsigned))
AT_EXPORT void GOMP_parallel_sections(omp_fn fn, void *data, unsigned nthreads, unsigned count,
                                      unsigned flags)
{
    OMP_WRAP(real_GOMP_parallel_sections()(fn, data, nthreads, count, flags), fn, data);
}

/* A region with task reductions: libgomp reads the reductions' descriptor from the first word of the
 * region's data block, so the block handed over in its place starts with that same word. */
typedef struct omp_red_env {
    void *rdata;
    omp_env env;
} omp_red_env;

static void omp_red_tramp(void *p)
{
    omp_tramp(&((omp_red_env *)p)->env);
}

REAL(GOMP_parallel_reductions, unsigned, (omp_fn, void *, unsigned, unsigned))
AT_EXPORT unsigned GOMP_parallel_reductions(omp_fn fn, void *data, unsigned nthreads, unsigned flags)
{
    at_activity *cap = at_on() && data ? at_flow_capture() : NULL;
    omp_red_env r = {cap ? *(void **)data : NULL, {fn, data, cap, (uint64_t)at_tid()}};
    at_thread_noflow++;
    unsigned n = cap ? real_GOMP_parallel_reductions()(omp_red_tramp, &r, nthreads, flags)
                     : real_GOMP_parallel_reductions()(fn, data, nthreads, flags);
    at_thread_noflow--;
    at_flow_release(cap);
    return n;
}

#define OMP_LOOP(name)                                                                             \
    REAL(name, void, (omp_fn, void *, unsigned, long, long, long, long, unsigned))                 \
    AT_EXPORT void name(omp_fn fn, void *data, unsigned n, long start, long end, long incr,        \
                        long chunk, unsigned flags)                                                \
    {                                                                                              \
        OMP_WRAP(real_##name()(fn, data, n, start, end, incr, chunk, flags), fn, data);            \
    }
OMP_LOOP(GOMP_parallel_loop_static)
OMP_LOOP(GOMP_parallel_loop_dynamic)
OMP_LOOP(GOMP_parallel_loop_guided)
OMP_LOOP(GOMP_parallel_loop_nonmonotonic_dynamic)
OMP_LOOP(GOMP_parallel_loop_nonmonotonic_guided)

#define OMP_LOOP_RT(name)                                                                          \
    REAL(name, void, (omp_fn, void *, unsigned, long, long, long, unsigned))                       \
    AT_EXPORT void name(omp_fn fn, void *data, unsigned n, long start, long end, long incr,        \
                        unsigned flags)                                                            \
    {                                                                                              \
        OMP_WRAP(real_##name()(fn, data, n, start, end, incr, flags), fn, data);                   \
    }
OMP_LOOP_RT(GOMP_parallel_loop_runtime)
OMP_LOOP_RT(GOMP_parallel_loop_nonmonotonic_runtime)
OMP_LOOP_RT(GOMP_parallel_loop_maybe_nonmonotonic_runtime)

/* GOMP_task: libgomp copies the data block (arg_size bytes, or through cpyfn) when it defers the
 * task, and runs fn on the copy. The block is extended in front with a header (the program's fn, the
 * capture, the Send's time) so every copy carries it; the program's data follows at its own
 * alignment. The header is kept to 32 bytes (the program's cpyfn and source only when it has one):
 * the thread that runs the task reads it from a copy the creating core just wrote, and 56 bytes
 * pulled one more line across (~50-90 ns a task here). */
typedef struct omp_task_hdr {
    omp_fn fn;
    at_activity *cap;
    uint64_t send_ts;    /* the Send's timestamp (0: none written) */
    uint32_t tid;        /* the submitting thread */
    uint32_t off;        /* where the program's data starts in the block */
} omp_task_hdr;
_Static_assert(sizeof(omp_task_hdr) == 32, "the header the running core pulls in stays small");
/* with a cpyfn, libgomp copies through omp_task_copy, which reads the longer header */
typedef struct omp_task_hdr_copy {
    omp_task_hdr h;
    void (*cpyfn)(void *, void *);
    void *src;           /* the program's data, for its cpyfn */
} omp_task_hdr_copy;

AT_HOT_FN static void omp_task_tramp(void *p)
{
    omp_task_hdr *h = p;
    at_activity *prev = ctx_enter(h->cap, h->tid, h->send_ts);
    h->fn((char *)p + h->off);
    at_flow_leave(prev);
    at_flow_release(h->cap); /* one capture per task, run once */
}

static void omp_task_copy(void *dst, void *src)
{
    omp_task_hdr_copy *s = src;
    memcpy(dst, s, sizeof *s);
    s->cpyfn((char *)dst + s->h.off, s->src);
}

REAL(GOMP_task, void, (omp_fn, void *, void (*)(void *, void *), long, long, _Bool, unsigned,
                       void **, int, void *))
AT_HOT_FN AT_EXPORT void GOMP_task(omp_fn fn, void *data, void (*cpyfn)(void *, void *), long size,
                                   long align, _Bool if_clause, unsigned flags, void **depend,
                                   int priority, void *detach)
{
    at_activity *cap = at_on() ? at_flow_capture() : NULL;
    if (!cap || align <= 0 || (align & (align - 1)) || align > 4096 || size < 0 ||
        size > (1l << 20)) {
        at_flow_release(cap);
        real_GOMP_task()(fn, data, cpyfn, size, align, if_clause, flags, depend, priority, detach);
        return;
    }
    long hsize = cpyfn ? (long)sizeof(omp_task_hdr_copy) : (long)sizeof(omp_task_hdr);
    long a = align < (long)_Alignof(omp_task_hdr_copy) ? (long)_Alignof(omp_task_hdr_copy) : align;
    long off = (hsize + a - 1) & ~(a - 1);
    long total = off + size;
    /* the block only has to live through the call (libgomp copies it when it defers the task, and
     * runs an undeferred one on it before returning): small ones on the stack, no malloc/free */
    _Alignas(64) char local[512];
    void *raw = local;
    if (total + a > (long)sizeof local) {
        int e = errno;
        raw = malloc((size_t)(total + a));
        errno = e;
    }
    if (!raw) {
        at_flow_release(cap);
        real_GOMP_task()(fn, data, cpyfn, size, align, if_clause, flags, depend, priority, detach);
        return;
    }
    char *blk = (char *)(((uintptr_t)raw + (uintptr_t)a - 1) & ~((uintptr_t)a - 1));
    omp_task_hdr *h = (omp_task_hdr *)blk;
    h->fn = fn;
    h->cap = cap;
    h->tid = (uint32_t)at_tid();
    h->off = (uint32_t)off;
    if (cpyfn) {
        ((omp_task_hdr_copy *)h)->cpyfn = cpyfn;
        ((omp_task_hdr_copy *)h)->src = data;
    } else if (size) {
        memcpy(blk + off, data, (size_t)size);
    }
    h->send_ts = at_flow_transfer_send(cap);
    /* an undeferred task runs fn(data) on this very block with cpyfn applied first by libgomp */
    real_GOMP_task()(omp_task_tramp, blk, cpyfn ? omp_task_copy : NULL, total, a, if_clause, flags,
                     depend, priority, detach);
    if (raw != local)
        free(raw);
}
