/* thread.c: pthread_create / thrd_create: a new thread starts in a copy of its creator's current
 * activity (AsyncLocal semantics: what the thread starts is a child of it, and nothing the thread
 * does changes the creator's). The creator captures; a trampoline enters the capture in the new
 * thread, writes ThreadBegin, runs the program's routine, writes ThreadEnd, leaves and releases.
 * Threads a pool creates on its own behalf begin in no activity: the callback layer (callbacks*.c)
 * raises at_thread_noflow around the pool calls that create them. */
#include <errno.h>
#include <stdlib.h>

#include "real.h"
#include "shim.h"

typedef struct at_thread_start {
    union {
        void *(*posix)(void *);
        int (*c11)(void *);
    } fn;
    void *arg;
    at_activity *cap;  /* creator's activity (a reference) or NULL */
    uint64_t parent;   /* creator's tid */
} at_thread_start;

/* What the running thread must undo however it ends (return, pthread_exit/thrd_exit, cancel). */
static AT_TLS at_activity *at_thread_cap;
static AT_TLS at_activity *at_thread_prev;
static AT_TLS bool at_thread_ours;
AT_TLS int at_thread_noflow;

AT_HOT_FN static void thread_begin(at_thread_start *s)
{
    at_thread_managed = true; /* thread_end does the writer's and the engine's exit work */
    at_thread_cap = s->cap;
    at_thread_prev = at_flow_enter(s->cap);
    at_thread_ours = true;
    if (at_cfg.thread_events && at_on()) {
        uint8_t buf[16];
        at_payload pl;
        at_payload_init(&pl, buf, sizeof buf);
        at_payload_u64(&pl, s->parent);
        at_payload_u64(&pl, (uint64_t)(uintptr_t)s->fn.posix);
        at_shim_event(at_ev.thread_begin, buf, (uint32_t)(pl.p - buf));
    }
}

AT_HOT_FN static void thread_end(uint32_t kind)
{
    if (!at_thread_ours)
        return;
    at_thread_ours = false;
    at_fdflow_thread_exit();
    at_hooks_thread_exit();
    at_slots_thread_exit();
    if (at_cfg.thread_events && at_on()) {
        uint8_t buf[4];
        at_payload pl;
        at_payload_init(&pl, buf, sizeof buf);
        at_payload_u32(&pl, kind);
        at_shim_event(at_ev.thread_end, buf, (uint32_t)(pl.p - buf));
    }
    at_flow_leave(at_thread_prev);
    at_flow_release(at_thread_cap);
    at_thread_cap = at_thread_prev = NULL;
    /* the thread keys' destructors would do this later; with no key value set glibc skips them.
     * Whatever runs after (another library's destructor) goes back to the keys. */
    at_activity_thread_exit();
    at_tbuf_thread_exit();
    at_thread_managed = false;
}

/* A cancelled thread unwinds through its cleanup handlers only: end it there (pthread_exit has
 * already ended it in its own wrapper, and a return pops the handler without running it). */
static void cancelled(void *unused)
{
    (void)unused;
    thread_end(2);
}

/* The start context is a slot (slots.c), not malloc'd: the new thread frees it, and a free() there
 * would give a thread that never mallocs a tcache of its own (set up on an arena, torn down at its
 * exit), a cost a thread-per-connection server pays per connection. */
static void start_free(void *p)
{
    if (at_is_slot(p))
        at_slot_free(p);
    else
        free(p);
}

AT_HOT_FN static void *posix_trampoline(void *p)
{
    at_thread_start s = *(at_thread_start *)p;
    start_free(p);
    thread_begin(&s);
    void *r;
    pthread_cleanup_push(cancelled, NULL);
    r = s.fn.posix(s.arg);
    pthread_cleanup_pop(0);
    thread_end(0);
    return r;
}

static int c11_trampoline(void *p)
{
    at_thread_start s = *(at_thread_start *)p;
    start_free(p);
    thread_begin(&s);
    int r;
    pthread_cleanup_push(cancelled, NULL);
    r = s.fn.c11(s.arg);
    pthread_cleanup_pop(0);
    thread_end(0);
    return r;
}

static at_thread_start *start_new(void)
{
    _Static_assert(sizeof(at_thread_start) <= AT_SLOT_SIZE, "a start context fits a slot");
    at_thread_start *s = at_slot_alloc();
    if (!s) {
        int e = errno;
        s = malloc(sizeof *s);
        errno = e;
    }
    if (!s)
        return NULL; /* run the thread untraced rather than fail the program's call */
    s->cap = at_thread_noflow ? NULL : at_flow_capture();
    s->parent = (uint64_t)at_tid();
    return s;
}

static void start_abandon(at_thread_start *s)
{
    int e = errno;
    at_flow_release(s->cap);
    start_free(s);
    errno = e;
}

AT_HOT_FN AT_EXPORT int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    at_thread_start *s;
    if (!at_on() || at_internal || !(s = start_new()))
        return AT_REAL(pthread_create)(t, attr, fn, arg);
    s->fn.posix = fn;
    s->arg = arg;
    int r = AT_REAL(pthread_create)(t, attr, posix_trampoline, s);
    if (r != 0)
        start_abandon(s);
    return r;
}

AT_EXPORT int thrd_create(thrd_t *t, thrd_start_t fn, void *arg)
{
    at_thread_start *s;
    if (!at_on() || at_internal || !(s = start_new()))
        return AT_REAL(thrd_create)(t, fn, arg);
    s->fn.c11 = fn;
    s->arg = arg;
    int r = AT_REAL(thrd_create)(t, c11_trampoline, s);
    if (r != thrd_success)
        start_abandon(s);
    return r;
}

AT_EXPORT void pthread_exit(void *ret)
{
    thread_end(1);
    AT_REAL(pthread_exit)(ret);
    __builtin_unreachable();
}

AT_EXPORT void thrd_exit(int res)
{
    thread_end(1);
    AT_REAL(thrd_exit)(res);
    __builtin_unreachable();
}
