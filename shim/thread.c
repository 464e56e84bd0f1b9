/* thread.c: pthread_create / thrd_create: a new thread starts in a copy of its creator's current
 * activity (AsyncLocal semantics: what the thread starts is a child of it, and nothing the thread
 * does changes the creator's). The creator captures; a trampoline enters the capture in the new
 * thread, writes ThreadBegin, runs the program's routine, writes ThreadEnd, leaves and releases.
 * Threads a pool creates on its own behalf begin in no activity: the callback layer (callbacks*.c)
 * raises at_thread_noflow around the pool calls that create them (and around libuv's own calls of
 * uv_thread_create, which start its pool at the first request of any kind), and a thread whose
 * routine is a runtime's own (libuv's pool workers, libgomp's team threads, GLib's service threads
 * such as "gmain" and "gdbus") begins in none whoever started it. That last check sees the routine
 * only when no other interposer of pthread_create (a sanitizer's) stands before ours. */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "real.h"
#include "hook/hook.h"
#include "shim.h"

/* What the creator hands the new thread: one cache line in a block of its own creations. */
typedef struct at_thread_start {
    union {
        void *(*posix)(void *);
        int (*c11)(void *);
    } fn;
    void *arg;
    at_activity *cap;  /* creator's activity (a reference) or NULL */
    uint64_t parent;   /* creator's tid */
    uintptr_t stk_top; /* the program's own stack for the thread (its top), or 0 */
    size_t stk_size;   /* the thread's stack size (0: unknown) */
    uint32_t busy;     /* START_BUSY until the new thread has copied it; START_MALLOC: it frees it */
    bool samp_vblock;  /* the creator has the sampling signal blocked, as the program sees it */
} __attribute__((aligned(64))) at_thread_start;
enum { START_FREE = 0, START_BUSY = 1, START_MALLOC = 2 };

/* A creating thread takes start contexts from a page of its own, and the new thread gives its own
 * back with a store once it has copied it: no lock and no atomic read-modify-write per thread. (As
 * slots, each one sent the ending thread through the slot allocator's lock to return it.) A block
 * outlives its creator (a new thread may still be copying from it): it goes on a list for the next
 * creator, never back to the system. */
#define START_PER_BLOCK 63
typedef struct start_block {
    struct start_block *next;
    at_thread_start ctx[START_PER_BLOCK];
} start_block;
_Static_assert(sizeof(start_block) <= 4096, "a start block is one page");
static AT_TLS start_block *tl_starts;
static AT_TLS unsigned tl_start_next;
static AT_TLS bool tl_starts_forked; /* a fork child's: contexts in flight at the fork are free */
static start_block *spare_blocks;
static pthread_mutex_t spare_lock AT_FORK_DATA = PTHREAD_MUTEX_INITIALIZER; /* taken around fork */

static start_block *block_get(void)
{
    int e = errno;
    pthread_mutex_lock(&spare_lock);
    start_block *b = spare_blocks;
    if (b)
        spare_blocks = b->next;
    pthread_mutex_unlock(&spare_lock);
    if (!b) {
        AT_INTERNAL_BEGIN(); /* a hooked mmap sees the program's alone */
        size_t len = 4096; /* under RLIMIT_AS, out of the shim's reserved room (asroom.c) */
        b = at_as_map("thread start blocks", &len, 0, 0, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        AT_INTERNAL_END();
    }
    errno = e;
    return b;
}

/* fork: the child must not inherit the list's lock held by another thread, and the threads this
 * one was starting do not exist there (their contexts would stay busy for ever) */
AT_FORK_TEXT static void starts_prepare(void)
{
    at_fork_lock(&spare_lock);
}

AT_FORK_TEXT static void starts_parent(void)
{
    at_fork_unlock(&spare_lock);
}

AT_FORK_TEXT static void starts_child(void)
{
    at_mutex_fork_reset(&spare_lock);
    /* freed by this thread's next start (start_new): a child that starts none reads no block */
    if (tl_starts)
        tl_starts_forked = true;
}

__attribute__((constructor)) static void starts_init(void)
{
    pthread_atfork(starts_prepare, starts_parent, starts_child);
}

/* The creating thread ends: its block (some contexts may still be in flight) serves the next one. */
static void block_put(void)
{
    start_block *b = tl_starts;
    if (!b)
        return;
    tl_starts = NULL;
    int e = errno;
    pthread_mutex_lock(&spare_lock);
    b->next = spare_blocks;
    spare_blocks = b;
    pthread_mutex_unlock(&spare_lock);
    errno = e;
}

/* What the running thread must undo however it ends (return, pthread_exit/thrd_exit, cancel). */
static AT_TLS at_activity *at_thread_cap;
static AT_TLS at_activity *at_thread_prev;
static AT_TLS bool at_thread_ours;

AT_HOT_FN static void thread_begin(at_thread_start *s)
{
    at_thread_managed = true; /* thread_end does the writer's and the engine's exit work */
    at_altstack_thread_start();
    at_sampler_thread_start(s->samp_vblock);
    at_thread_cap = s->cap;
    at_thread_prev = at_flow_enter(s->cap);
    at_thread_ours = true;
    if (at_cfg.thread_events && at_on()) {
        uint8_t buf[16];
        at_payload pl;
        at_payload_init(&pl, buf, sizeof buf);
        at_payload_u64(&pl, s->parent);
        at_payload_u64(&pl, (uint64_t)(uintptr_t)s->fn.posix);
        int q = at_trace_quiet;
        at_trace_quiet = 3; /* written with the process's file; none for it alone */
        at_shim_event(at_ev.thread_begin, buf, (uint32_t)(pl.p - buf));
        at_trace_quiet = q;
    }
}

AT_HOT_FN static void thread_end(uint32_t kind)
{
    at_trace_thread_ending(); /* after the first thread has left, the last one ends the process */
    at_sampler_thread_end();
    at_altstack_thread_end();
    if (!at_thread_ours)
        return;
    at_thread_ours = false;
    at_fdflow_thread_exit();
    at_hooks_thread_exit();
    at_stub_thread_exit();
    at_slots_thread_exit();
    block_put();
    if (at_cfg.thread_events && at_on()) {
        uint8_t buf[4];
        at_payload pl;
        at_payload_init(&pl, buf, sizeof buf);
        at_payload_u32(&pl, kind);
        int q = at_trace_quiet;
        at_trace_quiet = 3;
        at_shim_event(at_ev.thread_end, buf, (uint32_t)(pl.p - buf));
        at_trace_quiet = q;
    }
    at_flow_leave(at_thread_prev);
    at_flow_release(at_thread_cap);
    at_thread_cap = at_thread_prev = NULL;
    /* the thread keys' destructors would do this later; with no key value set glibc skips them.
     * Whatever runs after (another library's destructor) goes back to the keys. */
    at_activity_thread_exit();
    at_tbuf_thread_exit();
    at_thread_managed = false;
    at_trace_thread_done = true;
}

/* A cancelled thread unwinds through its cleanup handlers only: end it there (pthread_exit has
 * already ended it in its own wrapper, and a return pops the handler without running it). */
static void cancelled(void *unused)
{
    (void)unused;
    thread_end(2);
}

/* The new thread has its copy: the context goes back to its creator's block (or to malloc). */
static void start_free(at_thread_start *p)
{
    if (p->busy == START_MALLOC) {
        int e = errno;
        AT_INTERNAL_BEGIN();
        free(p);
        AT_INTERNAL_END();
        errno = e;
    } else {
        __atomic_store_n(&p->busy, START_FREE, __ATOMIC_RELEASE);
    }
}

/* The bounds of the thread's stack, for the hook stub (a record of a call a longjmp left is known
 * dead when a new call is made above it on the same stack): the program's own stack exactly, else
 * from here (the thread's calls are all below) down half the stack's size, well above the guard
 * and whatever glibc keeps at the top. */
static inline void stack_bounds(const at_thread_start *s, uintptr_t here)
{
    if (!s->stk_size)
        return;
    if (s->stk_top)
        at_stub_thread_start(s->stk_top - s->stk_size, s->stk_top);
    else
        at_stub_thread_start(here - s->stk_size / 2, here);
}

static void *posix_trampoline(void *p)
{
    at_thread_start s = *(at_thread_start *)p;
    start_free((at_thread_start *)p);
    stack_bounds(&s, (uintptr_t)__builtin_frame_address(0));
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
    start_free((at_thread_start *)p);
    stack_bounds(&s, (uintptr_t)__builtin_frame_address(0));
    thread_begin(&s);
    int r;
    pthread_cleanup_push(cancelled, NULL);
    r = s.fn.c11(s.arg);
    pthread_cleanup_pop(0);
    thread_end(0);
    return r;
}

/* The process's first thread (or, in a fork child, the thread that forked) carries a key whose
 * destructor runs when it leaves through pthread_exit, thrd_exit or cancellation, never on exit or a
 * return from main. glibc then goes on while other threads live and calls exit(0) after the last
 * one; the flusher, which glibc counts too, must take that over (lastthread.c). */
static pthread_key_t leader_key AT_START_DATA;
/* Made once, by the constructor or a fork child's one thread, never two threads at a time: a flag,
 * not pthread_once, whose wake-up is a system call at every traced image's start. */
static bool leader_key_made AT_START_DATA;

static void leader_left(void *unused)
{
    (void)unused;
    int e = errno;
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, NULL, &mask);
    at_trace_thread_done = true;
    at_trace_exit_with_last_thread(&mask);
    errno = e;
}

static void leader_key_create(void) { pthread_key_create(&leader_key, leader_left); }

static AT_TLS bool leader_watched; /* a fork child's thread keeps its parent thread's key value */

static inline __attribute__((always_inline)) void watch_leader(void)
{
    if (leader_watched)
        return;
    if (!leader_key_made) {
        leader_key_create();
        leader_key_made = true;
    }
    pthread_setspecific(leader_key, &leader_key);
    leader_watched = true;
}

/* A fork child's, on the fork page; the start's own copy is start code (a fault less per image) */
AT_FORK_TEXT void at_thread_watch_leader(void)
{
    watch_leader();
}

void at_thread_watch_leader_start(void)
{
    watch_leader();
}

const char *at_object_name(const void *addr)
{
    struct dl_find_object o;
    if (!addr || _dl_find_object((void *)addr, &o) != 0 || !o.dlfo_link_map || !o.dlfo_link_map->l_name)
        return NULL;
    const char *n = strrchr(o.dlfo_link_map->l_name, '/');
    return n ? n + 1 : o.dlfo_link_map->l_name;
}

bool at_glib_own(const void *addr)
{
    const char *f = at_object_name(addr);
    return f && (strncmp(f, "libglib-2.0.so", 14) == 0 || strncmp(f, "libgio-2.0.so", 13) == 0 ||
                 strncmp(f, "libgobject-2.0.so", 17) == 0);
}

/* A thread a runtime starts on its own behalf, told by its routine: a pool runtime's (libuv's pool
 * workers, libgomp's team; their thread-creation APIs such as uv_thread_create hand pthread_create
 * the program's routine itself), or a GThread whose function is GLib's own (GLib's worker "gmain",
 * GIO's D-Bus worker "gdbus", a pool's threads and its spawner). GLib starts every GThread through
 * its proxy in libglib with the GThread as argument, and a GThread begins with its function (the
 * public struct). A program's g_thread_new runs a function of the program: that thread inherits.
 * Asked only when there is an activity to pass on. */
static AT_NOINLINE bool runtime_routine(void *(*fn)(void *), void *arg)
{
    const char *n = at_object_name((const void *)fn);
    if (!n)
        return false;
    if (strncmp(n, "libuv.so", 8) == 0 || strncmp(n, "libgomp.so", 10) == 0)
        return true;
    return strncmp(n, "libglib-2.0.so", 14) == 0 && arg && at_glib_own(*(void *const *)arg);
}

static at_thread_start *start_new(void *(*fn)(void *), void *arg)
{
    at_thread_start *s = NULL;
    if (AT_UNLIKELY(tl_starts_forked)) { /* the threads of the contexts in flight at the fork */
        for (unsigned i = 0; i < START_PER_BLOCK; i++)
            tl_starts->ctx[i].busy = START_FREE;
        tl_starts_forked = false;
    }
    start_block *b = tl_starts ? tl_starts : (tl_starts = block_get());
    for (unsigned k = 0; b && k < START_PER_BLOCK; k++) {
        unsigned i = (tl_start_next + k) % START_PER_BLOCK;
        if (__atomic_load_n(&b->ctx[i].busy, __ATOMIC_ACQUIRE) == START_FREE) {
            s = &b->ctx[i];
            s->busy = START_BUSY;
            tl_start_next = i + 1;
            break;
        }
    }
    if (!s) { /* every context of the block in flight (or no block): one of its own */
        /* not under RLIMIT_AS: its free on the new thread makes glibc give that thread an arena
         * (64 MiB of address space) the program's thread never had */
        if (at_as_limited())
            return NULL;
        int e = errno;
        AT_INTERNAL_BEGIN();
        s = aligned_alloc(64, sizeof *s);
        AT_INTERNAL_END();
        errno = e;
        if (!s)
            return NULL; /* run the thread untraced rather than fail the program's call */
        s->busy = START_MALLOC;
    }
    s->cap = at_thread_noflow ? NULL : at_flow_capture();
    if (s->cap && AT_UNLIKELY(runtime_routine(fn, arg))) {
        at_flow_release(s->cap);
        s->cap = NULL;
    }
    s->parent = (uint64_t)at_tid();
    s->samp_vblock = at_sampler_vblocked();
    s->stk_top = 0;
    s->stk_size = 0;
    return s;
}

/* The new thread's stack as attr makes it (stack_bounds). */
static void start_stack(at_thread_start *s, const pthread_attr_t *attr)
{
    static size_t dflt;
    size_t size = 0;
    void *top = NULL;
    if (attr) {
        /* a stack the program gave: glibc keeps its top and its size, and gives their difference
         * (so its top is 0 when glibc is to make one) */
        void *lo;
        if (pthread_attr_getstack(attr, &lo, &size) == 0)
            top = (void *)((uintptr_t)lo + size); /* in integers: lo wraps when top is 0 */
        else
            size = 0;
    }
    if (!size) {
        if (!dflt) {
            pthread_attr_t d;
            if (pthread_getattr_default_np(&d) == 0) {
                if (pthread_attr_getstacksize(&d, &dflt) != 0)
                    dflt = 0;
                pthread_attr_destroy(&d);
            }
        }
        size = dflt;
    }
    s->stk_top = (uintptr_t)top;
    s->stk_size = size;
}

static void start_abandon(at_thread_start *s)
{
    int e = errno;
    at_flow_release(s->cap);
    start_free(s);
    errno = e;
}

/* The new thread's ThreadBegin would be the process's first event (its file waits for one that
 * counts): the buffers and the writer's thread are started here, by the creating thread, which its
 * own pthread_create makes allocate anyway; the file still waits. Started by whichever thread records
 * first, the writer's thread descriptor could be that thread's first allocation, and give it a malloc
 * arena of its own (64 MiB of address space, and a lock page every later fork copies in the parent). */
static inline void open_for_thread(void)
{
    if (at_cfg.thread_events && at_ev.thread_begin && at_event_enabled(at_ev.thread_begin))
        at_trace_writer_now();
}

AT_HOT_FN AT_EXPORT int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    at_thread_start *s;
    if (!at_on() || at_internal || at_rt_own_thread || !(s = start_new(fn, arg)))
        return AT_REAL(pthread_create)(t, attr, fn, arg);
    open_for_thread();
    start_stack(s, attr);
    s->fn.posix = fn;
    s->arg = arg;
    int r = AT_REAL(pthread_create)(t, attr, posix_trampoline, s);
    if (r == EAGAIN && at_trace_flusher_yield()) /* our thread took the last one the limit allows */
        r = AT_REAL(pthread_create)(t, attr, posix_trampoline, s);
    if (r != 0)
        start_abandon(s);
    return r;
}

AT_EXPORT int thrd_create(thrd_t *t, thrd_start_t fn, void *arg)
{
    at_thread_start *s;
    if (!at_on() || at_internal || !(s = start_new(NULL, NULL)))
        return AT_REAL(thrd_create)(t, fn, arg);
    open_for_thread();
    start_stack(s, NULL);
    s->fn.c11 = fn;
    s->arg = arg;
    int r = AT_REAL(thrd_create)(t, c11_trampoline, s);
    /* glibc reports EAGAIN as thrd_error (the only error a thread without attributes meets) */
    if (r == thrd_error && at_trace_flusher_yield()) /* as pthread_create's */
        r = AT_REAL(thrd_create)(t, c11_trampoline, s);
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
