/* fdflow.c: the fd-keyed hand-off. Real servers pass work between threads through queues of
 * their own (the main thread accepts and wakes a worker through an eventfd or a pipe), so the shim
 * follows the one thing every such hand-off shares: the socket. A socket returned by
 * accept/accept4/connect is tagged with the activity current then (a Send transfer); a thread doing
 * I/O on a tagged fd adopts that activity (a Receive transfer when the thread is not the one that
 * tagged or last took it) until its next wait point (epoll_wait, poll, select and variants) or I/O
 * on another tagged fd; close untags. I/O on a tagged fd by a thread already inside an unrelated
 * activity of its own is reported (FdAmbiguous) and nothing is adopted: we never guess.
 *
 * An adoption never makes the thread's own tree worse: a stopped activity is never adopted (a
 * Connect hooked around connect() has ended by the time the socket is used: the thread's own
 * activity goes on), and a wait point leaves an adoption only while the thread is still in it,
 * never while an activity the thread started inside it runs (a hooked function that polls), and
 * never by resetting what the thread made current itself (its own Stop moved it elsewhere). So a
 * program that neither accepts nor uses fd-keyed pairs gets the same tree with the hand-off off.
 * Adoptions nest: an fd-keyed pair started inside an adopted connection (a file the request opens)
 * is held above it, and leaving the file returns to the connection.
 *
 * The table is indexed by fd (the slots of the lowest fds sit on the shim's hot page, real.h); each
 * slot holds an atomic pointer, so the I/O path takes no lock and an untagged fd costs a bounds
 * check and one relaxed load. A thread taking its own reference on a tag
 * announces itself in the slot's reader count so a concurrent close cannot free the activity under
 * it (close waits for that count, which only covers a few instructions, to drop). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <uchar.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "actpath.h"
#include "traceids.h"
#include "hook/hook.h"
#include "real.h"
#include "shim.h"
#include "waits.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

#define AT_FD_LIMIT (1 << 20)

/* at_fd_slot and the slots of the lowest fds: real.h (the hot page) */

/* the table and its size live on the hot page (real.h: at_hot.fd_tab, fd_max; 0 until the table
 * exists: every fd is then "untagged") */
static int at_fd_high = -1; /* highest fd ever tagged: bounds the scans of close_range */

/* This thread's adoptions (an adopted tag, an accepted Connection, a held fd-keyed pair), innermost
 * last, each undone at the thread's next wait point. */
#define AT_ADOPT_MAX 4
typedef struct at_adoption {
    at_activity *act;  /* our reference on the adopted activity, the one the thread was put in */
    at_activity *prev; /* what at_flow_enter returned: restored on leave */
    at_activity *base; /* a capture to release on leave (accept path, held pairs), or NULL */
} at_adoption;
AT_PTLS_FITS(at_adoption[AT_ADOPT_MAX], adopt); /* at_common.h */
#define at_adopt ((at_adoption *)AT_PTLS.adopt)
#define at_nadopt (AT_PTLS.nadopt)

int at_fdflow_init(char *err, size_t n)
{
    struct rlimit rl;
    rlim_t max = AT_FD_LIMIT;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY && rl.rlim_max < max)
        max = rl.rlim_max;
    /* Untouched pages cost nothing: only slots of fds actually tagged are ever written. */
    /* under a tight RLIMIT_AS fewer numbers (asroom.c): higher fds are not followed */
    size_t len = (size_t)max * sizeof(at_fd_slot);
    void *p = at_as_map("fd table", &len, (size_t)AT_FD_LOW * sizeof(at_fd_slot), 32,
                        PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (!p) {
        if (at_as_limited()) { /* asroom.c's line said so */
            err[0] = 0;
            return -1;
        }
        snprintf(err, n, "cannot map the fd table (%llu fds): %s", (unsigned long long)max,
                 strerror(errno));
        return -1;
    }
    max = len / sizeof(at_fd_slot);
    at_hot.fd_tab = p;
    __atomic_store_n(&at_hot.fd_max, (int)max, __ATOMIC_RELEASE);
    return 0;
}

static inline at_fd_slot *slot_of(int fd)
{
    int max = __atomic_load_n(&at_hot.fd_max, __ATOMIC_ACQUIRE);
    if (AT_LIKELY((unsigned)fd < AT_FD_LOW))
        return max ? &at_hot.fd_low[fd] : NULL;
    return AT_LIKELY((unsigned)fd >= (unsigned)max) ? NULL : &at_hot.fd_tab[fd];
}

/* ---------------- adoption ---------------- */

enum { ADOPT_IN, ADOPT_BELOW, ADOPT_GONE };

/* Where the thread stands with adoption ad: still in it (ADOPT_IN: at it or in activities below it
 * that have all ended), inside an activity of its own started in it that still runs (ADOPT_BELOW),
 * or out of it (ADOPT_GONE: its own Stop made an activity outside it current). The chain is short
 * (AT_ACTIVITY_MAX_DEPTH) and held by the thread's reference on its current activity. */
static int adopt_where(const at_adoption *ad)
{
    bool own = false;
    for (const at_activity *x = at_act_cur; x; x = x->creator) {
        if (x == ad->act)
            return own ? ADOPT_BELOW : ADOPT_IN;
        own |= at_act_is_live(x);
    }
    return ADOPT_GONE;
}

/* Undo the innermost adoption: restore what was current before it when the thread is still in it,
 * else only drop the references (what the thread made current itself stays). */
static void adopt_pop(bool restore)
{
    at_adoption ad = at_adopt[--at_nadopt];
    at_adopt[at_nadopt] = (at_adoption){0};
    /* no thread is in it from now on until one takes it up again (fd_io_slow): its time parked is
     * the time it waits in the program's event loop */
    if (__atomic_load_n(&at_wait_cfg.on, __ATOMIC_RELAXED))
        __atomic_store_n(&ad.act->parked, at_ticks(), __ATOMIC_RELAXED);
    if (restore) {
        at_flow_leave(ad.prev);
    } else {
        if (at_act_t.task_n)
            at_flow_task_leave(ad.prev);
        at_activity *p = (at_activity *)((uintptr_t)ad.prev & ~(uintptr_t)1);
        if (p && !((uintptr_t)ad.prev & 1))
            at_activity_unref(p); /* the thread's reference on it had moved to the adoption */
    }
    at_flow_release(ad.act); /* into this thread's caches: the next adoption of it takes it back */
    at_flow_release(ad.base);
}

/* Leave the adoptions the thread is done with, innermost first, down to one it is still busy
 * below (its own activity runs inside it) or, with kind, to one that is not of that kind. */
static void adopt_settle(const at_activity_kind *kind)
{
    while (at_nadopt > 0) {
        const at_adoption *ad = &at_adopt[at_nadopt - 1];
        int w = adopt_where(ad);
        if (w == ADOPT_BELOW || (kind && w == ADOPT_IN && ad->act->kind != kind))
            return;
        adopt_pop(w == ADOPT_IN);
    }
}

static void adopt_push(at_activity *a, at_activity *prev, at_activity *base)
{
    at_adopt[at_nadopt++] = (at_adoption){a, prev, base};
}

void at_fdflow_thread_exit(void)
{
    if (at_nadopt) {
        int e = errno;
        while (at_nadopt > 0)
            adopt_pop(adopt_where(&at_adopt[at_nadopt - 1]) == ADOPT_IN);
        errno = e;
    }
}

/* A wait point: the thread is about to wait for new work, what it adopted is over. */
static inline void fd_wait(void)
{
    if (AT_UNLIKELY(at_nadopt) && !at_internal) { /* the shim's own waits end nothing */
        int e = errno;
        adopt_settle(NULL);
        errno = e;
    }
}

/* An fd-keyed pair of kind is about to start on this thread (hooks.c): a hold of an earlier pair of
 * the same kind is over (the previous connection), an adopted activity of another kind (the
 * connection a file is opened for) is what the new one starts in. */
void at_fdflow_hold_prepare(const at_activity_kind *kind)
{
    if (at_nadopt) {
        int e = errno;
        adopt_settle(kind);
        errno = e;
    }
}

/* Our own reference on fd's tag, or NULL. One this thread's flow caches hold needs no atomic, nor
 * the reader count: the tag cannot be freed while we hold references on it. */
static at_activity *tag_acquire(at_fd_slot *s)
{
    at_activity *t = __atomic_load_n(&s->act, __ATOMIC_ACQUIRE);
    if (t && at_flow_take(t))
        return t;
    __atomic_add_fetch(&s->readers, 1, __ATOMIC_SEQ_CST);
    at_activity *a = __atomic_load_n(&s->act, __ATOMIC_SEQ_CST);
    if (a)
        at_activity_ref(a);
    __atomic_sub_fetch(&s->readers, 1, __ATOMIC_RELEASE);
    return a;
}

/* Remove a tag; returns the reference the slot held (NULL if none) once no reader can still be
 * about to take its own. */
AT_HOT_FN static at_activity *tag_take(at_fd_slot *s, bool *owns)
{
    at_activity *old = __atomic_exchange_n(&s->act, NULL, __ATOMIC_SEQ_CST);
    *owns = s->owns;
    s->owns = 0;
    __atomic_store_n(&s->http, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&s->xturn, AT_XT_NONE, __ATOMIC_RELAXED);
    __atomic_store_n(&s->tp, 0, __ATOMIC_RELAXED); /* bytes it owed: their entry is stale (owed_take) */
    __atomic_store_n(&s->reported, 0, __ATOMIC_RELAXED);
    while (__atomic_load_n(&s->readers, __ATOMIC_ACQUIRE) != 0)
        sched_yield();
    return old;
}

static void tag_drop(at_activity *old, bool owns)
{
    if (!old)
        return;
    if (owns && !at_activity_is_stopped(old))
        at_activity_stop_ref(old, NULL, 0, NULL, 0);
    at_flow_release(old);
}

/* Is the activity path of inner equal to or below that of outer? (Compared id by id, as their
 * printed paths would compare: no string is made on a worker's way from one connection to the
 * next.) */
static bool act_within(const at_activity *inner, const at_activity *outer)
{
    return at_actpath_within(at_activity_id(inner), at_activity_id(outer));
}

static void report_ambiguous(at_fd_slot *s, int fd, const at_activity *tag, const at_activity *cur)
{
    if (__atomic_exchange_n(&s->reported, 1, __ATOMIC_RELAXED))
        return;
    uint8_t buf[40];
    at_payload pl;
    at_payload_init(&pl, buf, sizeof buf);
    at_payload_i32(&pl, fd);
    at_payload_guid(&pl, at_activity_id(tag));
    at_payload_guid(&pl, at_activity_id(cur));
    at_shim_event(at_ev.fd_ambiguous, buf, (uint32_t)(pl.p - buf));
}

AT_NOINLINE AT_PATH_IO static void fd_io_slow(at_fd_slot *s, int fd)
{
    if (!at_on() || at_internal) /* the shim's own I/O hands nothing over */
        return;
    /* The tag is what this thread is in already (adopted, or inherited from the thread that
     * accepted): nothing changes, and no reference is taken. Comparing pointers is safe: the thread
     * holds a reference on what it adopted or is in. */
    at_activity *t = __atomic_load_n(&s->act, __ATOMIC_ACQUIRE);
    if (!t)
        return;
    if (at_nadopt && at_adopt[at_nadopt - 1].act == t) /* the same activity through another fd */
        return;
    if (!at_nadopt && t == at_act_live_from(at_act_cur))
        return;
    int e = errno;
    at_activity *a = tag_acquire(s);
    if (!a)
        goto out;
    /* Whoever tagged the fd has finished that activity (a Connect around connect(), a request that
     * ended): the I/O is the current activity's own. */
    if (at_activity_is_stopped(a))
        goto drop;
    /* I/O on another tagged fd ends the adoptions the thread is done with, except those the tag is
     * part of (a file of the adopted connection nests in it) */
    while (at_nadopt > 0) {
        const at_adoption *top = &at_adopt[at_nadopt - 1];
        if (top->act == a) /* retagged meanwhile with the activity adopted here */
            goto drop;
        if (act_within(a, top->act))
            break;
        int w = adopt_where(top);
        if (w == ADOPT_BELOW) /* busy with its own activity in it: the checks below decide */
            break;
        adopt_pop(w == ADOPT_IN);
    }
    at_activity *cur = at_activity_current();
    if (cur == a || (cur && act_within(cur, a))) /* already inside it (inherited, or accepted here) */
        goto drop;
    if (cur && !act_within(a, cur)) { /* busy with something unrelated: do not guess */
        report_ambiguous(s, fd, a, cur);
        goto drop;
    }
    if (at_nadopt == AT_ADOPT_MAX)
        goto drop;
    at_guid prev_id = {{0}};
    if (cur)
        prev_id = *at_activity_id(cur);
    at_activity *entered_from = at_flow_enter(a);
    adopt_push(a, entered_from, NULL);
    uint64_t parked;
    if (__atomic_load_n(&a->parked, __ATOMIC_RELAXED) &&
        (parked = __atomic_exchange_n(&a->parked, 0, __ATOMIC_RELAXED)) != 0)
        at_wait_parked(a, parked, (uint64_t)(int64_t)fd);
    /* A Receive only when the work really changed thread: not for the thread that tagged the fd
     * taking it up again after a wait point, and once per hop: a worker that takes the connection
     * up again after each wait point (every request of a keep-alive connection) is not handed it
     * again (memcached: 400 Receives of one connection on one thread told nothing more than one) */
    uint32_t me = (uint32_t)at_tid();
    uint32_t last = __atomic_load_n(&s->last_tid, __ATOMIC_RELAXED);
    if (last != me) {
        __atomic_store_n(&s->last_tid, me, __ATOMIC_RELAXED);
        /* the tag's Send answers the first hop only: a later one comes from the last receiver */
        uint64_t sid = __atomic_exchange_n(&s->send_id, 0, __ATOMIC_RELAXED);
        at_flow_transfer_receive_from(a, &prev_id, last, sid);
        at_flow_task_start(entered_from, last, sid);
    }
    goto out;
drop:
    at_flow_release(a);
out:
    errno = e;
}

/* Called before every I/O call on fd (fd_io; fd_io_slot gives the slot of a tagged fd, else NULL).
 * The common case of a tagged fd inline: the connection this thread adopted last, each request of
 * a keep-alive connection (fd_io_slow's first test; a pointer compared, nothing read through it). */
static inline __attribute__((always_inline)) at_fd_slot *fd_io_slot(int fd)
{
    at_fd_slot *s = slot_of(fd);
    if (AT_LIKELY(s == NULL))
        return NULL;
    at_activity *t = __atomic_load_n(&s->act, __ATOMIC_RELAXED);
    if (AT_LIKELY(t == NULL))
        return NULL;
    if (!(at_nadopt && at_adopt[at_nadopt - 1].act == t))
        fd_io_slow(s, fd);
    return s;
}

static inline void fd_io(int fd)
{
    (void)fd_io_slot(fd);
}

/* ---------------- tagging ---------------- */

/* What tagged an fd, as the event's Source field: UTF-16 with its NUL already (the literals are the
 * payload; converting the name at every accept cost as much as the rest of the event). */
typedef struct tag_source {
    const char16_t *utf16;
    uint32_t bytes;
} tag_source;
#define TAG_SOURCE(s) ((tag_source){u##s, sizeof(u##s)})
#define SRC_ACCEPT TAG_SOURCE("accept")
#define SRC_CONNECT TAG_SOURCE("connect")
#define SRC_HOOK TAG_SOURCE("hook")

static void tag_event(int fd, tag_source src)
{
    uint8_t buf[4 + 16];
    _Static_assert(sizeof(u"connect") <= 16, "the longest source fits");
    memcpy(buf, &fd, 4);
    /* by hand: a copy of variable length would be a call to libc's memcpy (vector registers) */
    const uint8_t *u = (const uint8_t *)src.utf16;
    for (uint32_t i = 0; i < src.bytes; i++) {
        buf[4 + i] = u[i];
        __asm__("" ::: "memory");
    }
    at_shim_event(at_ev.fd_tag, buf, 4 + src.bytes);
}

/* Publish tag on slot s: the Send names the hop, and this thread counts as the one that has it
 * (its own I/O on fd after a wait point is no hop). The Send's id goes with the tag so the Receive
 * of whoever takes it names it. */
static void tag_publish(at_fd_slot *s, int fd, at_activity *tag, tag_source source)
{
    tag_event(fd, source);
    __atomic_store_n(&s->send_id, at_flow_transfer_send(tag), __ATOMIC_RELAXED);
    __atomic_store_n(&s->last_tid, (uint32_t)at_tid(), __ATOMIC_RELAXED);
    __atomic_store_n(&s->act, tag, __ATOMIC_RELEASE);
}

AT_HOT_FN static void fd_tag(int fd, tag_source source, bool accepted)
{
    at_fd_slot *s;
    if (fd < 0 || !at_on() || at_internal || !at_cfg.fdflow || !(s = slot_of(fd)))
        return;
    int e = errno;
    at_activity *tag = NULL;
    bool owns = false;
    if (accepted && at_cfg.accept_activity) {
        /* A Connection activity per accepted socket, child of what is current here, current on this
         * thread until its next wait point (so threads created for it inherit it) and stopped at
         * close. Entered like an adoption so the wait point restores exactly what was current. */
        fd_wait();
        at_activity *base = at_flow_capture();
        at_activity *prev = at_flow_enter(base);
        uint8_t pb[4];
        at_payload pl;
        at_payload_init(&pl, pb, sizeof pb);
        at_payload_i32(&pl, fd);
        at_activity *c = at_nadopt < AT_ADOPT_MAX
                             ? at_activity_start(at_ev.connection, pb, (uint32_t)(pl.p - pb), NULL, 0)
                             : NULL;
        if (c) {
            tag = at_flow_capture();
            owns = true;
            at_activity_ref(c);
            adopt_push(c, prev, base);
        } else {
            at_flow_leave(prev);
            at_flow_release(base);
        }
    } else {
        tag = at_flow_capture();
    }
    bool old_owns;
    at_activity *old = tag_take(s, &old_owns); /* a stale tag: the fd number was closed unseen */
    if (tag) {
        int high = __atomic_load_n(&at_fd_high, __ATOMIC_RELAXED);
        while (fd > high && !__atomic_compare_exchange_n(&at_fd_high, &high, fd, true,
                                                         __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            ;
        s->owns = owns;
        tag_publish(s, fd, tag, source);
    }
    tag_drop(old, old_owns);
    errno = e;
}

static void fd_exchange(at_activity *in, int fd, int32_t k, uint64_t sent);

static void fd_untag_tagged(at_fd_slot *s, int fd);

/* fd is closed (or replaced): its tag, if any, is dropped (fd_untag_tagged, after the calls a
 * server makes per request: a file's close reads only the slot) */
static inline void fd_untag(int fd)
{
    at_fd_slot *s = slot_of(fd);
    if (AT_UNLIKELY(s != NULL) && __atomic_load_n(&s->act, __ATOMIC_RELAXED))
        fd_untag_tagged(s, fd);
}

void at_fdflow_untag_range(unsigned first, unsigned last)
{
    int high = __atomic_load_n(&at_fd_high, __ATOMIC_RELAXED);
    for (long fd = first; fd <= (long)last && fd <= high; fd++)
        fd_untag((int)fd);
}

/* ---------------- the interposed functions ---------------- */

/* A configured start/stop activity just started on this thread with an fd as its key (hooks.c):
 * fd is tagged with it and it stays current here until the thread's next wait point, the way the
 * accept Connection does, so threads created for the connection and whoever does I/O on fd join
 * it. prev/base: what at_flow_enter/at_flow_capture returned around the Start (given over). Returns
 * false (nothing taken) when fd is not in the table; the caller then restores prev itself. */
bool at_fdflow_hold(int fd, at_activity *a, at_activity *prev, at_activity *base)
{
    at_fd_slot *s;
    if (fd < 0 || !at_on() || !at_cfg.fdflow || !(s = slot_of(fd)))
        return false;
    if (at_nadopt == AT_ADOPT_MAX)
        return false;
    int e = errno;
    at_activity *tag = at_flow_capture(); /* a, current now */
    at_activity_ref(a);
    adopt_push(a, prev, base);
    bool old_owns;
    at_activity *old = tag_take(s, &old_owns);
    if (tag) {
        int high = __atomic_load_n(&at_fd_high, __ATOMIC_RELAXED);
        while (fd > high && !__atomic_compare_exchange_n(&at_fd_high, &high, fd, true,
                                                         __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            ;
        s->owns = false; /* the hook's own stop symbol stops it */
        tag_publish(s, fd, tag, SRC_HOOK);
    }
    tag_drop(old, old_owns);
    errno = e;
    return true;
}

/* ---------------- a config's rule on an interposed function ---------------- */

/* The arguments as the registers held them (hook.h: at_direct_entry): integers extended as the
 * conversion to 64 bits does, pointers as addresses. */
#define AT_U64(x) ((uint64_t)(uintptr_t)(x))
#define AT_RAW1(a) AT_U64(a)
#define AT_RAW2(a, ...) AT_U64(a), AT_RAW1(__VA_ARGS__)
#define AT_RAW3(a, ...) AT_U64(a), AT_RAW2(__VA_ARGS__)
#define AT_RAW4(a, ...) AT_U64(a), AT_RAW3(__VA_ARGS__)
#define AT_RAW5(a, ...) AT_U64(a), AT_RAW4(__VA_ARGS__)
#define AT_RAW6(a, ...) AT_U64(a), AT_RAW5(__VA_ARGS__)
#define AT_RAW7(a, ...) AT_U64(a), AT_RAW6(__VA_ARGS__)
#define AT_NARGS_(a, b, c, d, e, f, g, n, ...) n
#define AT_NARGS(...) AT_NARGS_(__VA_ARGS__, 7, 6, 5, 4, 3, 2, 1, 0)
#define AT_RAW_CAT(n) AT_RAW##n
#define AT_RAW_N(n) AT_RAW_CAT(n)
#define AT_RAW(...) AT_RAW_N(AT_NARGS(__VA_ARGS__))(__VA_ARGS__)

/* An interposer with a rule on it (at_hot.direct) goes on here, by a tail call (a jump: the
 * arguments and the return address are its caller's; test_harm_stub checks it in the shim's
 * disassembly), so that the interposer's own path keeps no frame: the rule's work at the entry,
 * where the stub's would run (before the interposer's own work), or at the return, after the
 * interposer's work that follows the real function (post, which may read r_), in the order a call
 * through a GOT slot holding the stub ran them. frame: this function's, whose return address is the
 * program's. */
/* after: run once the rule's return has (a Start at the return of accept4 tags its socket with the
 * new activity: its ends are recorded in that one) */
#define AT_DIRECT_FN(ret, name, params, args, pre, post)                                           \
    AT_DIRECT_FN_AFTER(ret, name, params, args, pre, post, (void)0)
#define AT_DIRECT_FN_AFTER(ret, name, params, args, pre, post, after)                              \
    static AT_NOINLINE AT_PATH_DIRECT ret name##_direct params                                     \
    {                                                                                              \
        uint64_t raw_[8] = {AT_RAW args};                                                          \
        uint64_t *frame_ = (uint64_t *)__builtin_frame_address(0);                                 \
        bool entry_ = __atomic_load_n(&at_hot.direct, __ATOMIC_RELAXED) & AT_DIRECT_ENTRY_BIT(name); \
        if (entry_)                                                                                \
            at_direct_entry(AT_DIRECT_##name, raw_, frame_);                                       \
        pre;                                                                                       \
        ret r_;                                                                                    \
        if (AT_LIKELY(at_act_cur == NULL))                                                         \
            r_ = AT_REAL(name) args;                                                               \
        else                                                                                       \
            AT_WAIT_TIMED(r_, AT_REAL(name) args, at_wait_io_reason(#name), #name, raw_[0]);       \
        post;                                                                                      \
        if (!entry_)                                                                               \
            at_direct_return(AT_DIRECT_##name, raw_, frame_, (uint64_t)(int64_t)r_);               \
        after;                                                                                     \
        return r_;                                                                                 \
    }
/* An interposer that may go on to its AT_DIRECT_FN: the tail call made at every optimisation level
 * (the sanitizer build's -O1 makes none of its own) */
#define AT_TAIL __attribute__((optimize("optimize-sibling-calls")))
#define AT_DIRECT(name, args)                                                                      \
    do {                                                                                           \
        if (AT_UNLIKELY(__atomic_load_n(&at_hot.direct, __ATOMIC_RELAXED) & AT_DIRECT_BIT(name)))  \
            return name##_direct args;                                                             \
    } while (0)

/* shim.h (hooks.c asks it whether the rule on name may be run by the shim's interposer of it) */
int at_fdflow_direct_index(const char *name, void **self, void **real)
{
#define AT_DIRECT_NAME(fn)                                                                         \
    if (!strcmp(name, #fn)) {                                                                      \
        *self = (void *)fn;                                                                        \
        *real = (void *)AT_REAL(fn);                                                               \
        return AT_DIRECT_##fn;                                                                     \
    }
    AT_DIRECT_LIST(AT_DIRECT_NAME)
#undef AT_DIRECT_NAME
    return -1;
}

/* close's own work before the real close (ra: its caller); true: the fd is the shim's, the
 * program never had it */
static inline bool close_ours(int fd, const void *ra)
{
    if (at_fd_is_ours(fd) && !at_internal) {
        const char *n = at_object_name(ra);
        if (!n || strncmp(n, "libunwind", 9) != 0)
            return true; /* the shim's own: the program never had it (fdguard.c) */
        at_unw_fds[at_unw_fds[1] == fd] = -1; /* libunwind remaking its pipe */
    }
    fd_untag(fd); /* before the number can be reused by another thread's accept */
    return false;
}

/* close with a rule on it (AT_DIRECT_FN's way: frame[1] is the program's return address) */
static AT_NOINLINE AT_PATH_DIRECT int close_direct(int fd)
{
    uint64_t *frame = (uint64_t *)__builtin_frame_address(0);
    uint64_t raw = AT_U64(fd);
    bool entry = __atomic_load_n(&at_hot.direct, __ATOMIC_RELAXED) & AT_DIRECT_ENTRY_BIT(close);
    if (entry) {
        at_fd_slot *s = slot_of(fd); /* the time its connection parked, before a Stop by the rule */
        at_activity *t = s ? __atomic_load_n(&s->act, __ATOMIC_ACQUIRE) : NULL;
        if (AT_UNLIKELY(t && __atomic_load_n(&t->parked_acc, __ATOMIC_RELAXED)))
            at_wait_parked_flush(t, (uint64_t)(int64_t)fd);
        at_direct_entry(AT_DIRECT_close, &raw, frame);
    }
    int r = close_ours(fd, (const void *)(uintptr_t)frame[1]) ? 0 : AT_REAL(close)(fd);
    if (!entry)
        at_direct_return(AT_DIRECT_close, &raw, frame, (uint64_t)(int64_t)r);
    return r;
}

AT_EXPORT AT_PATH_IO AT_TAIL int close(int fd)
{
    AT_DIRECT(close, (fd));
    if (close_ours(fd, __builtin_return_address(0)))
        return 0;
    return AT_REAL(close)(fd);
}

AT_EXPORT AT_HOT_FN int dup2(int from, int to)
{
    if (from != to) {
        fd_untag(to);
        if (at_fd_is_ours(to))
            at_fdguard_before_dup(to);
    }
    return AT_REAL(dup2)(from, to);
}

AT_EXPORT AT_HOT_FN int dup3(int from, int to, int flags)
{
    fd_untag(to);
    if (from != to && at_fd_is_ours(to))
        at_fdguard_before_dup(to);
    return AT_REAL(dup3)(from, to, flags);
}

/* The real call timed as a wait (waits.h), for a thread in an activity: out of the path's pages
 * and of the start's (fdflow.o's plain .text is with the start's code, shim/start.ld) */
#define AT_TIMED_FN(ret, name, params, args, reason, obj)                                          \
    static AT_NOINLINE __attribute__((section(".text.at_waits"))) ret name##_timed params          \
    {                                                                                              \
        ret r_;                                                                                    \
        AT_WAIT_TIMED(r_, AT_REAL(name) args, reason, #name, obj);                                 \
        return r_;                                                                                 \
    }

/* ---------------- exchanges: the requests of a kept-alive connection ---------------- */


static void fd_turn(at_fd_slot *s, int fd, uint8_t x, bool send);

/* Before a call that sends on fd's socket s (tagged: only a tagged socket's ends are recorded): one
 * whose last bytes came the other way turns; a server's answer that goes on is timed (its end is
 * the next exchange's start of idle time) */
static inline __attribute__((always_inline)) bool sock_tx(at_fd_slot *s, int fd)
{
    uint8_t x = __atomic_load_n(&s->xturn, __ATOMIC_RELAXED);
    /* (tp read plainly: a caller that ignores the answer, the rule's own run, reads nothing) */
    if (AT_LIKELY(x == AT_XT_NONE || x == AT_XT_CONNECT_SENT))
        return AT_UNLIKELY(x != AT_XT_NONE) && s->tp == 2;
    /* a request's first send gets a traceparent (tp_send), as does one that owes header bytes */
    uint8_t tp = s->tp;
    fd_turn(s, fd, x, true);
    return AT_UNLIKELY(tp != 0) && (tp == 2 || x == AT_XT_CONNECT || x == AT_XT_CONNECT_RECV);
}

static inline void fd_tx(int fd)
{
    at_fd_slot *s = slot_of(fd);
    if (AT_UNLIKELY(s != NULL) && __atomic_load_n(&s->act, __ATOMIC_RELAXED))
        (void)sock_tx(s, fd);
}

/* fd_io and fd_tx, the slot found once: true when the send is to go through tp_send */
static inline __attribute__((always_inline)) bool fd_io_tx(int fd)
{
    at_fd_slot *s = fd_io_slot(fd);
    return s && sock_tx(s, fd);
}

/* after a receive of r > 0 bytes: does its socket turn? */
static inline bool turns_rx(uint8_t x)
{
    return x != AT_XT_NONE && x != AT_XT_ACCEPT_RECV && x != AT_XT_CONNECT_RECV;
}

/* Does a receive on fd turn its socket? */
static inline bool fd_rx_wanted(int fd)
{
    at_fd_slot *s = slot_of(fd);
    return AT_UNLIKELY(s != NULL) && turns_rx(__atomic_load_n(&s->xturn, __ATOMIC_RELAXED));
}

/* A call on fd, io(fd) before it: fd_io, or for one that sends fd_io_tx (the socket's exchanges
 * counted) */
#define AT_IO_HEAD(ret, name, params, args, fd, io)                                                \
    AT_DIRECT_FN(ret, name, params, args, (void)io(fd), (void)0)                                   \
    AT_TIMED_FN(ret, name, params, args, at_wait_io_reason(#name), (uint64_t)(int64_t)(fd))
#define AT_IO_REAL(name, args)                                                                     \
    if (AT_UNLIKELY(at_act_cur != NULL))                                                           \
        return name##_timed args;                                                                  \
    return AT_REAL(name) args;
#define AT_IO1(ret, name, params, args, fd)                                                        \
    AT_IO_HEAD(ret, name, params, args, fd, fd_io)                                                 \
    AT_EXPORT AT_PATH_IO AT_TAIL ret name params                                                   \
    {                                                                                              \
        AT_DIRECT(name, args);                                                                     \
        fd_io(fd);                                                                                 \
        AT_IO_REAL(name, args)                                                                     \
    }
/* a call that sends: name##_tp (tp_send) when a traceparent is added to what it sends */
#define AT_IO_TX(ret, name, params, args, fd)                                                      \
    AT_IO_HEAD(ret, name, params, args, fd, fd_io_tx)                                              \
    AT_EXPORT AT_PATH_IO AT_TAIL ret name params                                                   \
    {                                                                                              \
        AT_DIRECT(name, args);                                                                     \
        if (AT_UNLIKELY(fd_io_tx(fd)))                                                             \
            return name##_tp args;                                                                 \
        AT_IO_REAL(name, args)                                                                     \
    }

/* ---------------- W3C trace context: read, never written ---------------- */

static bool all_hex(const char *p, int n, bool *zero)
{
    *zero = true;
    for (int i = 0; i < n; i++) {
        char c = p[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
        *zero &= c == '0';
    }
    return true;
}

/* The bytes a read of an accepted socket gave the program (b, n): the connection's first ones say
 * whether it carries HTTP/1.x requests (a method and a space). A read that starts a request (its
 * bytes begin with a method) is looked at up to the end of its headers (the blank line), each line
 * that is a `traceparent` header (W3C Trace Context, version 00: 2-32-16-2 lowercase hex digits,
 * neither id all zero) a TraceContext event in the thread's current activity, the one the request
 * landed in; reads of bodies and the rest are not looked at, so a large upload costs nothing. A
 * header in a later read than the request line's is not seen. Nothing the program reads is
 * changed. */
static const char *const http_methods[] = {"GET ",     "POST ",  "PUT ",     "HEAD ", "DELETE ",
                                            "OPTIONS ", "PATCH ", "CONNECT ", "TRACE "};

static void tp_adopt_put(const at_guid *act, const char *trace);

static AT_NOINLINE void http_inspect(at_fd_slot *s, int fd, const char *b, size_t n)
{
    if (!at_on() || at_internal)
        return;
    uint8_t h = __atomic_load_n(&s->http, __ATOMIC_RELAXED);
    if (h != 1 && h != 2) /* not an accepted socket's, or not HTTP */
        return;
    int e = errno;
    bool request = false;
    for (size_t i = 0; i < AT_ARRAY_LEN(http_methods) && !request; i++) {
        size_t l = strlen(http_methods[i]);
        request = n >= l && !memcmp(b, http_methods[i], l);
    }
    if (h == 1)
        __atomic_store_n(&s->http, request ? 2 : 3, __ATOMIC_RELAXED);
    if (!request)
        goto out;
    const char *end = b + n;
    for (const char *nl = b; (nl = memchr(nl, '\n', (size_t)(end - nl))) != NULL; nl++) {
        if (nl + 1 < end && (nl[1] == '\r' || nl[1] == '\n')) /* the blank line: the headers end */
            break;
        if (end - nl < 1 + 12 + 55 || (nl[1] | 0x20) != 't' || strncasecmp(nl + 1, "traceparent:", 12) != 0)
            continue;
        const char *v = nl + 13;
        while (v < end && (*v == ' ' || *v == '\t'))
            v++;
        bool z1, z2, z3;
        if (end - v < 55 || v[0] != '0' || v[1] != '0' || v[2] != '-' || v[35] != '-' || v[52] != '-' ||
            !all_hex(v + 3, 32, &z1) || !all_hex(v + 36, 16, &z2) || !all_hex(v + 53, 2, &z3) || z1 || z2 ||
            (end - v > 55 && v[55] != '\r' && v[55] != '\n'))
            continue;
        char tid[33], pid[17];
        memcpy(tid, v + 3, 32);
        tid[32] = 0;
        memcpy(pid, v + 36, 16);
        pid[16] = 0;
        int flags = (int)strtol((char[3]){v[53], v[54], 0}, NULL, 16);
        AT_INTERNAL_BEGIN();
        uint8_t buf[4 + 2 * 33 + 2 * 17 + 4 + 16];
        at_payload pb;
        at_payload_init(&pb, buf, sizeof buf);
        at_payload_i32(&pb, fd);
        at_payload_str(&pb, tid, 33);
        at_payload_str(&pb, pid, 17);
        at_payload_i32(&pb, flags);
        at_shim_event(at_ev.trace_context, buf, (uint32_t)(pb.p - buf));
        at_activity *cur;
        if (at_cfg.traceparent_inject && (cur = at_activity_current()))
            tp_adopt_put(&cur->id, tid); /* the requests it sends go on in this trace */
        AT_INTERNAL_END();
    }
out:
    errno = e;
}

/* fd_io for a call that receives: true when what it reads is to be inspected (http_inspect) */
static inline bool fd_io_rx(int fd)
{
    at_fd_slot *s = fd_io_slot(fd);
    if (AT_LIKELY(s == NULL))
        return false;
    uint8_t h = __atomic_load_n(&s->http, __ATOMIC_RELAXED);
    return AT_UNLIKELY(h == 1 || h == 2 || turns_rx(__atomic_load_n(&s->xturn, __ATOMIC_RELAXED)));
}

static inline void fd_rx(int fd, ssize_t r, const void *b, size_t n, bool peek)
{
    at_fd_slot *s;
    if (r <= 0 || peek || !(s = slot_of(fd)))
        return;
    uint8_t x = __atomic_load_n(&s->xturn, __ATOMIC_RELAXED);
    if (AT_UNLIKELY(turns_rx(x)))
        fd_turn(s, fd, x, false);
    if (!b)
        return;
    uint8_t h = __atomic_load_n(&s->http, __ATOMIC_RELAXED);
    if (AT_UNLIKELY(h == 1 || h == 2))
        http_inspect(s, fd, b, (size_t)r < n ? (size_t)r : n);
}

/* A receiving call: as AT_IO1, and when its socket's requests are read for trace context, the
 * call is made from name##_rx, which hands what it read to http_inspect */
#define AT_IO_RX(ret, name, params, args, fd, buf, len, peek)                                      \
    AT_DIRECT_FN(ret, name, params, args, fd_io(fd), fd_rx(fd, r_, buf, len, peek))                \
    AT_TIMED_FN(ret, name, params, args, at_wait_io_reason(#name), (uint64_t)(int64_t)(fd))        \
    static AT_NOINLINE ret name##_rx params                                                        \
    {                                                                                              \
        ret r_ = AT_UNLIKELY(at_act_cur != NULL) ? name##_timed args : AT_REAL(name) args;         \
        fd_rx(fd, r_, buf, len, peek);                                                             \
        return r_;                                                                                 \
    }                                                                                              \
    AT_EXPORT AT_PATH_IO AT_TAIL ret name params                                                   \
    {                                                                                              \
        AT_DIRECT(name, args);                                                                     \
        if (AT_UNLIKELY(fd_io_rx(fd)))                                                             \
            return name##_rx args;                                                                 \
        if (AT_UNLIKELY(at_act_cur != NULL))                                                       \
            return name##_timed args;                                                              \
        return AT_REAL(name) args;                                                                 \
    }

#define IOV0(v, n) ((n) > 0 && (v) ? (v)[0].iov_base : NULL)
#define IOV0LEN(v, n) ((n) > 0 && (v) ? (v)[0].iov_len : 0)

/* ---------------- W3C trace context: written, when asked ---------------- */

/* The trace each activity a traceparent landed in belongs to (http_inspect), for the requests it
 * and its children send: a table by activity id, an entry overwritten by a later one of the same
 * slot (its activities then send their own trace's id). Read and written under a sequence number. */
#define TP_ADOPT_N 1024
static struct tp_adopt {
    uint32_t seq; /* atomic: odd while written */
    at_guid act;
    char trace[32];
} tp_adopted[TP_ADOPT_N];

static uint32_t tp_slot(const at_guid *g)
{
    uint64_t a, b;
    memcpy(&a, g->b, 8);
    memcpy(&b, g->b + 8, 8);
    return (uint32_t)(((a ^ (b * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull) >> 54) % TP_ADOPT_N;
}

static void tp_adopt_put(const at_guid *act, const char *trace)
{
    struct tp_adopt *e = &tp_adopted[tp_slot(act)];
    uint32_t q = __atomic_load_n(&e->seq, __ATOMIC_RELAXED);
    if ((q & 1) || !__atomic_compare_exchange_n(&e->seq, &q, q + 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return; /* another thread writes it: this activity's requests start their own trace */
    memcpy(&e->act, act, sizeof e->act);
    memcpy(e->trace, trace, 32);
    __atomic_store_n(&e->seq, q + 2, __ATOMIC_RELEASE);
}

static bool tp_adopt_get(const at_guid *act, char out[33])
{
    struct tp_adopt *e = &tp_adopted[tp_slot(act)];
    uint32_t q = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
    if (q == 0 || (q & 1))
        return false;
    at_guid a;
    memcpy(&a, &e->act, sizeof a);
    memcpy(out, e->trace, 32);
    out[32] = 0;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(&e->seq, __ATOMIC_RELAXED) == q && at_guid_eq(&a, act);
}

/* "traceparent: 00-TRACE-SPAN-01\r\n" for a request sent in cur: its span the one the OTLP export
 * makes of cur, its trace the one an ancestor (or cur) adopted from a request it received, else
 * that of cur's root (the export's trace when this process's tree is the top of the request's) */
static size_t tp_header(at_activity *cur, char out[80])
{
    char trace[33], span[17];
    at_activity *q = cur, *root = cur;
    bool found = false;
    for (; q && !found; q = q->creator) {
        found = tp_adopt_get(&q->id, trace);
        root = q;
    }
    if (!found)
        at_trace_id_hex(&root->id, trace);
    at_span_id_hex(&cur->id, span);
    return (size_t)snprintf(out, 80, "traceparent: 00-%s-%s-01\r\n", trace, span);
}

/* Header bytes a partial send left owed on a socket (sent before the program's next bytes): a few
 * entries, one taken before a header is added (none free: no header is added). */
#define TP_OWED_N 64
static struct tp_owed {
    int fd; /* atomic: -1 free (set at the first use) */
    uint8_t len;
    char b[80];
} tp_owed[TP_OWED_N];
static bool tp_owed_init;

static struct tp_owed *owed_find(int fd)
{
    for (int i = 0; i < TP_OWED_N; i++)
        if (__atomic_load_n(&tp_owed[i].fd, __ATOMIC_ACQUIRE) == fd)
            return &tp_owed[i];
    return NULL;
}

static struct tp_owed *owed_take(int fd)
{
    if (!__atomic_load_n(&tp_owed_init, __ATOMIC_ACQUIRE)) {
        for (int i = 0; i < TP_OWED_N; i++) {
            int z = 0;
            __atomic_compare_exchange_n(&tp_owed[i].fd, &z, -1, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
        }
        __atomic_store_n(&tp_owed_init, true, __ATOMIC_RELEASE);
    }
    for (int i = 0; i < TP_OWED_N; i++) {
        int f = __atomic_load_n(&tp_owed[i].fd, __ATOMIC_ACQUIRE);
        at_fd_slot *fs;
        /* free, or left by a socket closed while it owed bytes (its slot owes none now) */
        if (f >= 0 && (fs = slot_of(f)) && __atomic_load_n(&fs->tp, __ATOMIC_RELAXED) == 2)
            continue;
        if (__atomic_compare_exchange_n(&tp_owed[i].fd, &f, fd, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return &tp_owed[i];
    }
    return NULL;
}

static void owed_release(struct tp_owed *o)
{
    o->len = 0;
    __atomic_store_n(&o->fd, -1, __ATOMIC_RELEASE);
}

/* Does b (n bytes, a request's first send) hold a whole HTTP/1.x request line and no traceparent
 * header of its own? The line's length with its CRLF, else 0. */
static size_t tp_request_line(const char *b, size_t n)
{
    bool request = false;
    for (size_t i = 0; i < AT_ARRAY_LEN(http_methods) && !request; i++) {
        size_t l = strlen(http_methods[i]);
        request = n >= l && !memcmp(b, http_methods[i], l);
    }
    const char *nl = request ? memchr(b, '\n', n) : NULL;
    if (!nl || nl == b || nl[-1] != '\r' || nl - b < 10 || memcmp(nl - 10, " HTTP/1.", 8) != 0)
        return 0;
    for (const char *h = nl; (h = memchr(h, '\n', (size_t)(b + n - h))) != NULL; h++) {
        if (h + 1 < b + n && (h[1] == '\r' || h[1] == '\n'))
            break;
        if (b + n - h > 12 && strncasecmp(h + 1, "traceparent:", 12) == 0)
            return 0; /* the program sends its own */
    }
    return (size_t)(nl + 1 - b);
}

/* A send on a connecting socket whose requests get a traceparent (ACTTRACE_TRACEPARENT_INJECT): the
 * header after the request line of a request's first send (or the bytes a partial send left owed,
 * before the program's), in one sendmsg or writev with the program's bytes; the program is told
 * of its own bytes only. msg: sendmsg with m's name and control and flags, else writev. */
static AT_NOINLINE ssize_t tp_send(int fd, const struct iovec *iov, int cnt, int flags,
                                   const struct msghdr *m, bool msg)
{
    at_fd_slot *s = slot_of(fd);
    int e = errno;
    char hdr[80];
    size_t hl = 0, line = 0;
    struct tp_owed *o = s && __atomic_load_n(&s->tp, __ATOMIC_RELAXED) == 2 ? owed_find(fd) : NULL;
    at_activity *cur;
    if (o) {
        hl = o->len;
        memcpy(hdr, o->b, hl);
    } else if (cnt > 0 && iov && iov[0].iov_base && (cur = at_activity_current()) &&
               (line = tp_request_line(iov[0].iov_base, iov[0].iov_len)) && (o = owed_take(fd))) {
        hl = tp_header(cur, hdr);
    }
    struct iovec v[64];
    if (!hl || cnt + 2 > (int)AT_ARRAY_LEN(v)) {
        if (o && !hl)
            owed_release(o);
        errno = e;
        if (msg) {
            struct msghdr mm = m ? *m : (struct msghdr){0};
            mm.msg_iov = (struct iovec *)iov;
            mm.msg_iovlen = (size_t)cnt;
            return AT_REAL(sendmsg)(fd, &mm, flags);
        }
        return AT_REAL(writev)(fd, iov, cnt);
    }
    int n = 0;
    if (line)
        v[n++] = (struct iovec){iov[0].iov_base, line};
    v[n++] = (struct iovec){hdr, hl};
    if (iov[0].iov_len > line)
        v[n++] = (struct iovec){(char *)iov[0].iov_base + line, iov[0].iov_len - line};
    for (int i = 1; i < cnt; i++)
        v[n++] = iov[i];
    errno = e;
    ssize_t r;
    if (msg) {
        struct msghdr mm = m ? *m : (struct msghdr){0};
        mm.msg_iov = v;
        mm.msg_iovlen = (size_t)n;
        r = AT_REAL(sendmsg)(fd, &mm, flags);
    } else {
        r = AT_REAL(writev)(fd, v, n);
    }
    if (r < 0) { /* nothing sent: a new header is not owed */
        if (!__atomic_load_n(&s->tp, __ATOMIC_RELAXED) || __atomic_load_n(&s->tp, __ATOMIC_RELAXED) == 1)
            owed_release(o);
        return r;
    }
    size_t sent = (size_t)r;
    if (sent >= line + hl) { /* the header whole: the program's bytes are the rest */
        owed_release(o);
        __atomic_store_n(&s->tp, 1, __ATOMIC_RELAXED);
        return (ssize_t)(sent - hl);
    }
    /* a partial send: what of the header was not sent is owed before the program's next bytes */
    size_t done = sent > line ? sent - line : 0;
    memmove(o->b, hdr + done, hl - done);
    o->len = (uint8_t)(hl - done);
    __atomic_store_n(&s->tp, 2, __ATOMIC_RELAXED);
    if (line)
        return (ssize_t)(sent < line ? sent : line);
    /* none of the program's bytes went: as a send that would block (or was interrupted) */
    int fl = fcntl(fd, F_GETFL);
    errno = (fl >= 0 && (fl & O_NONBLOCK)) || (flags & MSG_DONTWAIT) ? EAGAIN : EINTR;
    return -1;
}

static ssize_t write_tp(int fd, const void *b, size_t n)
{
    return tp_send(fd, &(struct iovec){(void *)b, n}, 1, 0, NULL, false);
}
static ssize_t send_tp(int fd, const void *b, size_t n, int f)
{
    return tp_send(fd, &(struct iovec){(void *)b, n}, 1, f, NULL, true);
}
static ssize_t writev_tp(int fd, const struct iovec *v, int n)
{
    return tp_send(fd, v, n, 0, NULL, false);
}
static ssize_t sendmsg_tp(int fd, const struct msghdr *m, int f)
{
    return tp_send(fd, m ? m->msg_iov : NULL, m ? (int)m->msg_iovlen : 0, f, m, true);
}
static ssize_t sendto_tp(int fd, const void *b, size_t n, int f, const struct sockaddr *a, socklen_t l)
{
    struct msghdr m = {.msg_name = (void *)a, .msg_namelen = l};
    return tp_send(fd, &(struct iovec){(void *)b, n}, 1, f, &m, true);
}
/* several messages at once: sent as they are (no header added); header bytes owed go first, with
 * the first message alone (fewer messages sent than asked, as sendmmsg may) */
static int sendmmsg_tp(int fd, struct mmsghdr *m, unsigned int n, int f)
{
    at_fd_slot *s = slot_of(fd);
    if (!m || !n || !s || __atomic_load_n(&s->tp, __ATOMIC_RELAXED) != 2)
        return AT_REAL(sendmmsg)(fd, m, n, f);
    ssize_t r = sendmsg_tp(fd, &m[0].msg_hdr, f);
    if (r < 0)
        return -1;
    m[0].msg_len = (unsigned int)r;
    return 1;
}

/* The exchanges' bookkeeping, before the calls that run it (on their page) */

/* The socket's bytes went the other way (send: the program is about to send; else it received
 * some): the new way, and an exchange when that begins one */
static AT_NOINLINE AT_PATH_IO void fd_turn(at_fd_slot *s, int fd, uint8_t x, bool send)
{
    bool accepted = x <= AT_XT_ACCEPT_RECV;
    uint8_t nx = accepted ? (send ? AT_XT_ACCEPT_SENT : AT_XT_ACCEPT_RECV)
                          : (send ? AT_XT_CONNECT_SENT : AT_XT_CONNECT_RECV);
    bool begins = send ? x == AT_XT_CONNECT_RECV : x == AT_XT_ACCEPT_SENT;
    if (nx != x)
        __atomic_store_n(&s->xturn, nx, __ATOMIC_RELAXED);
    if (accepted && send) /* a server's answer: when it ends, the next exchange's idle time starts */
        __atomic_store_n(&s->xsent, at_ticks(), __ATOMIC_RELAXED);
    if (begins)
        fd_exchange(NULL, fd, (int32_t)__atomic_add_fetch(&s->xindex, 1, __ATOMIC_RELAXED),
                    accepted ? __atomic_load_n(&s->xsent, __ATOMIC_RELAXED) : 0);
}

/* In the order they are laid out in the path's code (shim/start.ld): the calls a server makes on
 * a connection for each request first, then the wait points, then the others, so that a server's
 * hooked call and the interposed calls around it take as few pages as they can. */
AT_IO_RX(ssize_t, read, (int fd, void *b, size_t n), (fd, b, n), fd, b, n, false)
AT_IO_TX(ssize_t, write, (int fd, const void *b, size_t n), (fd, b, n), fd)
AT_IO_RX(ssize_t, recv, (int fd, void *b, size_t n, int f), (fd, b, n, f), fd, b, n, f & MSG_PEEK)
AT_IO_TX(ssize_t, send, (int fd, const void *b, size_t n, int f), (fd, b, n, f), fd)
AT_IO_TX(ssize_t, writev, (int fd, const struct iovec *v, int n), (fd, v, n), fd)
AT_IO_TX(ssize_t, sendmsg, (int fd, const struct msghdr *m, int f), (fd, m, f), fd)
AT_IO_RX(ssize_t, readv, (int fd, const struct iovec *v, int n), (fd, v, n), fd, IOV0(v, n),
         IOV0LEN(v, n), false)
AT_IO_RX(ssize_t, recvmsg, (int fd, struct msghdr *m, int f), (fd, m, f), fd,
         m ? IOV0(m->msg_iov, (int)m->msg_iovlen) : NULL, m ? IOV0LEN(m->msg_iov, (int)m->msg_iovlen) : 0,
         f & MSG_PEEK)
AT_IO_RX(ssize_t, recvfrom, (int fd, void *b, size_t n, int f, struct sockaddr *a, socklen_t *l),
         (fd, b, n, f, a, l), fd, b, n, f & MSG_PEEK)
AT_IO_TX(ssize_t, sendto, (int fd, const void *b, size_t n, int f, const struct sockaddr *a, socklen_t l),
       (fd, b, n, f, a, l), fd)
AT_IO_RX(int, recvmmsg, (int fd, struct mmsghdr *m, unsigned int n, int f, struct timespec *t),
         (fd, m, n, f, t), fd, NULL, 0, f & MSG_PEEK)

/* after the calls a server makes per request on a connection, on their page */
/* A connected socket whose ends were recorded (fd_endpoints) began exchange k (1, 2, ...): its
 * client sent again after it had received, or its server received again after it had sent. A
 * SocketExchange event in the thread's current activity (the client's request, the server's
 * connection) lets the tools give each exchange of a kept-alive connection to the client activity
 * that sent it. */
static AT_NOINLINE AT_PATH_IO void fd_exchange(at_activity *in, int fd, int32_t k, uint64_t sent)
{
    if (!at_on() || at_internal || !at_cfg.exchanges || !at_event_enabled(at_ev.sock_exchange))
        return;
    at_activity *cur = in ? in : at_activity_current();
    if (!cur)
        return;
    int e = errno;
    uint64_t idle = 0, now = at_ticks(), freq = at_clock_freq();
    if (sent && now > sent) /* the time since the server's answer to the exchange before */
        idle = freq ? (uint64_t)((unsigned __int128)(now - sent) * 1000000000u / freq) : now - sent;
    AT_INTERNAL_BEGIN();
    uint8_t buf[16];
    at_payload pb;
    at_payload_init(&pb, buf, sizeof buf);
    at_payload_i32(&pb, fd);
    at_payload_i32(&pb, k);
    at_payload_u64(&pb, idle);
    at_event_write(at_ev.sock_exchange, at_activity_id(cur), NULL, buf, (uint32_t)(pb.p - buf), NULL,
                   0);
    AT_INTERNAL_END();
    errno = e;
}

AT_NOINLINE AT_PATH_IO static void fd_untag_tagged(at_fd_slot *s, int fd)
{
    int e = errno;
    bool owns;
    uint8_t x = __atomic_load_n(&s->xturn, __ATOMIC_RELAXED);
    at_activity *old = tag_take(s, &owns);
    /* a server's kept-alive connection: its last exchange ended at its last answer */
    if (AT_UNLIKELY(x >= AT_XT_ACCEPT && x <= AT_XT_ACCEPT_RECV) && s->xindex && old)
        fd_exchange(old, fd, -1, s->xsent);
    at_wait_parked_flush(old, (uint64_t)(int64_t)fd); /* before tag_drop's Stop */
    tag_drop(old, owns);
    errno = e;
}


/* ---------------- connections ---------------- */

/* "address:port" of a TCP or UDP endpoint into out (64 bytes); false for other families */
static bool fmt_endpoint(const struct sockaddr_storage *ss, socklen_t len, char *out)
{
    static const char hex[] = "0123456789abcdef";
    char *o = out;
    const uint8_t *v4 = NULL;
    unsigned port;
    if (ss->ss_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
        v4 = (const uint8_t *)&in->sin_addr;
        port = ntohs(in->sin_port);
    } else if (ss->ss_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        const uint8_t *a = in6->sin6_addr.s6_addr;
        port = ntohs(in6->sin6_port);
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(a, mapped, 12)) {
            v4 = a + 12;
        } else {
            *o++ = '[';
            for (int g = 0; g < 8; g++) {
                unsigned w = (unsigned)a[2 * g] << 8 | a[2 * g + 1];
                bool lead = true;
                for (int sh = 12; sh >= 0; sh -= 4) {
                    unsigned d = (w >> sh) & 0xf;
                    if (d || !lead || sh == 0) {
                        *o++ = hex[d];
                        lead = false;
                    }
                }
                if (g < 7)
                    *o++ = ':';
            }
            *o++ = ']';
        }
    } else {
        return false;
    }
    if (v4) {
        for (int i = 0; i < 4; i++) {
            unsigned b = v4[i];
            if (b >= 100)
                *o++ = (char)('0' + b / 100);
            if (b >= 10)
                *o++ = (char)('0' + b / 10 % 10);
            *o++ = (char)('0' + b % 10);
            if (i < 3)
                *o++ = '.';
        }
    }
    *o++ = ':';
    char d[6];
    int n = 0;
    do {
        d[n++] = (char)('0' + port % 10);
        port /= 10;
    } while (port);
    while (n)
        *o++ = d[--n];
    *o = 0;
    return true;
}

/* A Unix socket's path as "unix:/path" or "unix:@name" (abstract) into out (64 bytes); false when
 * it has none (an unnamed socket) or it does not fit */
static bool fmt_unix(const struct sockaddr_storage *ss, socklen_t len, char *out)
{
    const struct sockaddr_un *un = (const struct sockaddr_un *)ss;
    size_t off = offsetof(struct sockaddr_un, sun_path);
    if (ss->ss_family != AF_UNIX || len <= off)
        return false;
    size_t n = len - off;
    const char *p = un->sun_path;
    bool abstract = p[0] == 0;
    if (abstract) {
        p++;
        n--;
    } else {
        n = strnlen(p, n);
    }
    if (n == 0 || n + 7 > 63)
        return false;
    memcpy(out, abstract ? "unix:@" : "unix:", abstract ? 6 : 5);
    memcpy(out + (abstract ? 6 : 5), p, n);
    out[n + (abstract ? 6 : 5)] = 0;
    return true;
}

/* A connected TCP, UDP or Unix socket tagged with an activity: its two ends as a SocketEndpoints
 * event in that activity, which lets the tools hang the activity at the other end (another traced process,
 * on this host or another) under this one. peer: the address given to connect (a non-blocking
 * connect has no peer to ask for yet). */
static AT_NOINLINE void fd_endpoints(int fd, bool accepted, const struct sockaddr *peer,
                                     socklen_t peer_len)
{
    at_fd_slot *s;
    if (fd < 0 || !at_on() || at_internal || !at_cfg.fdflow || !at_ev.sock_endpoints ||
        !at_event_enabled(at_ev.sock_endpoints) || !(s = slot_of(fd)))
        return;
    at_activity *t = __atomic_load_n(&s->act, __ATOMIC_ACQUIRE);
    if (!t)
        return;
    if (accepted && at_cfg.traceparent) /* its requests' first bytes tell whether they are HTTP */
        __atomic_store_n(&s->http, 1, __ATOMIC_RELAXED);
    if (!accepted && at_cfg.traceparent_inject) /* its requests get a traceparent (tp_send) */
        __atomic_store_n(&s->tp, 1, __ATOMIC_RELAXED);
    int e = errno;
    AT_INTERNAL_BEGIN();
    struct sockaddr_storage l, p;
    socklen_t ll = sizeof l, pl = sizeof p;
    char ls[64], ps[64];
    bool ok = getsockname(fd, (struct sockaddr *)&l, &ll) == 0;
    if (ok && l.ss_family == AF_UNIX) {
        /* a Unix socket: the path (or @abstract name) of the listening end, and the pid of the
         * connecting process, which each end knows (SO_PEERCRED names the other process) */
        bool have = getpeername(fd, (struct sockaddr *)&p, &pl) == 0;
        if (!have && peer && peer_len <= sizeof p) {
            memcpy(&p, peer, peer_len);
            pl = peer_len;
            have = true;
        }
        struct ucred cr;
        socklen_t cl = sizeof cr;
        ok = have && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 &&
             fmt_unix(accepted ? &l : &p, accepted ? ll : pl, accepted ? ls : ps) &&
             snprintf(accepted ? ps : ls, 64, "unix:pid=%d", accepted ? (int)cr.pid : (int)getpid()) > 0;
    } else if (ok) {
        ok = fmt_endpoint(&l, ll, ls);
        bool have = ok && getpeername(fd, (struct sockaddr *)&p, &pl) == 0;
        if (ok && !have && peer && peer_len <= sizeof p) {
            memcpy(&p, peer, peer_len);
            pl = peer_len;
            have = true;
        }
        ok = have && fmt_endpoint(&p, pl, ps);
    }
    if (ok) {
        /* its exchanges from now on (fd_turn) */
        __atomic_store_n(&s->xindex, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&s->xsent, 0, __ATOMIC_RELAXED);
        if (at_cfg.exchanges || (!accepted && at_cfg.traceparent_inject))
            __atomic_store_n(&s->xturn, accepted ? AT_XT_ACCEPT : AT_XT_CONNECT, __ATOMIC_RELAXED);
        uint8_t buf[4 + 2 * 8 + 2 * 2 * 64];
        at_payload pb;
        at_payload_init(&pb, buf, sizeof buf);
        at_payload_i32(&pb, fd);
        at_payload_str(&pb, accepted ? "accept" : "connect", 8);
        at_payload_str(&pb, ls, 64);
        at_payload_str(&pb, ps, 64);
        at_event_write(at_ev.sock_endpoints, at_activity_id(t), NULL, buf, (uint32_t)(pb.p - buf),
                       NULL, 0);
    }
    AT_INTERNAL_END();
    errno = e;
}

/* A socket tagged by a rule's Start at the call's return (a config's activity from accept4 to
 * close) has its ends recorded then, in that activity */
static void fd_endpoints_late(int fd, bool accepted, const struct sockaddr *peer, socklen_t peer_len)
{
    at_fd_slot *s;
    if (fd >= 0 && (s = slot_of(fd)) && __atomic_load_n(&s->act, __ATOMIC_RELAXED) &&
        __atomic_load_n(&s->xturn, __ATOMIC_RELAXED) == AT_XT_NONE)
        fd_endpoints(fd, accepted, peer, peer_len);
}

AT_DIRECT_FN_AFTER(int, accept, (int fd, struct sockaddr *addr, socklen_t *len), (fd, addr, len),
                   fd_wait(), (fd_tag(r_, SRC_ACCEPT, true), fd_endpoints(r_, true, NULL, 0)),
                   fd_endpoints_late(r_, true, NULL, 0))
AT_TIMED_FN(int, accept, (int fd, struct sockaddr *addr, socklen_t *len), (fd, addr, len),
            "accept", (uint64_t)(int64_t)fd)
AT_EXPORT AT_HOT_FN AT_TAIL int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    AT_DIRECT(accept, (fd, addr, len));
    fd_wait(); /* accept blocks for the next connection: a wait point of its own */
    int r = AT_UNLIKELY(at_act_cur != NULL) ? accept_timed(fd, addr, len)
                                            : AT_REAL(accept)(fd, addr, len);
    fd_tag(r, SRC_ACCEPT, true);
    fd_endpoints(r, true, NULL, 0);
    return r;
}

AT_DIRECT_FN_AFTER(int, accept4, (int fd, struct sockaddr *addr, socklen_t *len, int flags),
                   (fd, addr, len, flags), fd_wait(),
                   (fd_tag(r_, SRC_ACCEPT, true), fd_endpoints(r_, true, NULL, 0)),
                   fd_endpoints_late(r_, true, NULL, 0))
AT_TIMED_FN(int, accept4, (int fd, struct sockaddr *addr, socklen_t *len, int flags),
            (fd, addr, len, flags), "accept", (uint64_t)(int64_t)fd)
AT_EXPORT AT_HOT_FN AT_TAIL int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    AT_DIRECT(accept4, (fd, addr, len, flags));
    fd_wait();
    int r = AT_UNLIKELY(at_act_cur != NULL) ? accept4_timed(fd, addr, len, flags)
                                            : AT_REAL(accept4)(fd, addr, len, flags);
    fd_tag(r, SRC_ACCEPT, true);
    fd_endpoints(r, true, NULL, 0);
    return r;
}

/* a non-blocking connect in progress is as much a connection of this activity */
#define CONNECT_TAG(r, fd, addr, len)                                                              \
    do {                                                                                           \
        if ((r) == 0 || errno == EINPROGRESS) {                                                    \
            fd_tag(fd, SRC_CONNECT, false);                                                        \
            fd_endpoints(fd, false, addr, len);                                                    \
        }                                                                                          \
    } while (0)

AT_DIRECT_FN_AFTER(int, connect, (int fd, const struct sockaddr *addr, socklen_t len), (fd, addr, len),
                   (void)0, CONNECT_TAG(r_, fd, addr, len), {
                       int e_ = errno;
                       if (r_ == 0 || e_ == EINPROGRESS)
                           fd_endpoints_late(fd, false, addr, len);
                       errno = e_;
                   })
AT_TIMED_FN(int, connect, (int fd, const struct sockaddr *addr, socklen_t len), (fd, addr, len),
            "connect", (uint64_t)(int64_t)fd)
AT_EXPORT AT_HOT_FN AT_TAIL int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    AT_DIRECT(connect, (fd, addr, len));
    int r = AT_UNLIKELY(at_act_cur != NULL) ? connect_timed(fd, addr, len)
                                            : AT_REAL(connect)(fd, addr, len);
    CONNECT_TAG(r, fd, addr, len);
    return r;
}


/* ---------------- wait points ---------------- */

#define AT_WAIT(ret, name, params, args)                                                           \
    AT_TIMED_FN(ret, name, params, args, "poll", 0)                                                \
    AT_EXPORT AT_HOT_FN ret name params                                                            \
    {                                                                                              \
        fd_wait();                                                                                 \
        if (AT_UNLIKELY(at_act_cur != NULL))                                                       \
            return name##_timed args;                                                              \
        return AT_REAL(name) args;                                                                 \
    }

AT_WAIT(int, epoll_wait, (int ep, struct epoll_event *e, int n, int t), (ep, e, n, t))
AT_WAIT(int, epoll_pwait, (int ep, struct epoll_event *e, int n, int t, const sigset_t *m),
        (ep, e, n, t, m))
AT_WAIT(int, epoll_pwait2,
        (int ep, struct epoll_event *e, int n, const struct timespec *t, const sigset_t *m),
        (ep, e, n, t, m))
AT_WAIT(int, poll, (struct pollfd *f, nfds_t n, int t), (f, n, t))
AT_WAIT(int, ppoll, (struct pollfd *f, nfds_t n, const struct timespec *t, const sigset_t *m),
        (f, n, t, m))
AT_WAIT(int, __poll_chk, (struct pollfd *f, nfds_t n, int t, size_t fl), (f, n, t, fl))
AT_WAIT(int, __ppoll_chk,
        (struct pollfd *f, nfds_t n, const struct timespec *t, const sigset_t *m, size_t fl),
        (f, n, t, m, fl))
AT_WAIT(int, select, (int n, fd_set *r, fd_set *w, fd_set *x, struct timeval *t), (n, r, w, x, t))
AT_WAIT(int, pselect,
        (int n, fd_set *r, fd_set *w, fd_set *x, const struct timespec *t, const sigset_t *m),
        (n, r, w, x, t, m))

/* ---------------- the other I/O calls ---------------- */

AT_IO_TX(int, sendmmsg, (int fd, struct mmsghdr *m, unsigned int n, int f), (fd, m, n, f), fd)
AT_IO1(ssize_t, pread, (int fd, void *b, size_t n, off_t o), (fd, b, n, o), fd)
AT_IO1(ssize_t, pwrite, (int fd, const void *b, size_t n, off_t o), (fd, b, n, o), fd)
AT_IO1(ssize_t, pread64, (int fd, void *b, size_t n, off64_t o), (fd, b, n, o), fd)
AT_IO1(ssize_t, pwrite64, (int fd, const void *b, size_t n, off64_t o), (fd, b, n, o), fd)
AT_IO1(ssize_t, preadv, (int fd, const struct iovec *v, int n, off_t o), (fd, v, n, o), fd)
AT_IO1(ssize_t, pwritev, (int fd, const struct iovec *v, int n, off_t o), (fd, v, n, o), fd)
AT_IO1(ssize_t, preadv2, (int fd, const struct iovec *v, int n, off_t o, int f), (fd, v, n, o, f), fd)
AT_IO1(ssize_t, pwritev2, (int fd, const struct iovec *v, int n, off_t o, int f), (fd, v, n, o, f), fd)
AT_IO_RX(ssize_t, __read_chk, (int fd, void *b, size_t n, size_t bl), (fd, b, n, bl), fd, b, n, false)
AT_IO1(ssize_t, __pread_chk, (int fd, void *b, size_t n, off_t o, size_t bl), (fd, b, n, o, bl), fd)
AT_IO1(ssize_t, __pread64_chk, (int fd, void *b, size_t n, off64_t o, size_t bl), (fd, b, n, o, bl), fd)
AT_IO_RX(ssize_t, __recv_chk, (int fd, void *b, size_t n, size_t bl, int f), (fd, b, n, bl, f), fd, b, n,
         f & MSG_PEEK)
AT_IO_RX(ssize_t, __recvfrom_chk,
         (int fd, void *b, size_t n, size_t bl, int f, struct sockaddr *a, socklen_t *l),
         (fd, b, n, bl, f, a, l), fd, b, n, f & MSG_PEEK)

/* Two fds: the socket is usually the output of sendfile and either end of splice. */
AT_DIRECT_FN(ssize_t, sendfile, (int out, int in, off_t *off, size_t n), (out, in, off, n),
             (fd_io(out), fd_io(in), fd_tx(out)), (void)0)
AT_TIMED_FN(ssize_t, sendfile, (int out, int in, off_t *off, size_t n), (out, in, off, n), "write",
            (uint64_t)(int64_t)out)
AT_EXPORT AT_HOT_FN AT_TAIL ssize_t sendfile(int out, int in, off_t *off, size_t n)
{
    AT_DIRECT(sendfile, (out, in, off, n));
    fd_io(out);
    fd_io(in);
    fd_tx(out);
    if (AT_UNLIKELY(at_act_cur != NULL))
        return sendfile_timed(out, in, off, n);
    return AT_REAL(sendfile)(out, in, off, n);
}

AT_DIRECT_FN(ssize_t, sendfile64, (int out, int in, off64_t *off, size_t n), (out, in, off, n),
             (fd_io(out), fd_io(in), fd_tx(out)), (void)0)
AT_TIMED_FN(ssize_t, sendfile64, (int out, int in, off64_t *off, size_t n), (out, in, off, n),
            "write", (uint64_t)(int64_t)out)
AT_EXPORT AT_HOT_FN AT_TAIL ssize_t sendfile64(int out, int in, off64_t *off, size_t n)
{
    AT_DIRECT(sendfile64, (out, in, off, n));
    fd_io(out);
    fd_io(in);
    fd_tx(out);
    if (AT_UNLIKELY(at_act_cur != NULL))
        return sendfile64_timed(out, in, off, n);
    return AT_REAL(sendfile64)(out, in, off, n);
}

AT_DIRECT_FN(ssize_t, splice,
             (int in, off64_t *oin, int out, off64_t *oout, size_t n, unsigned int f),
             (in, oin, out, oout, n, f), (fd_io(in), fd_io(out), fd_tx(out)),
             fd_rx(in, r_, NULL, 0, false))
AT_TIMED_FN(ssize_t, splice, (int in, off64_t *oin, int out, off64_t *oout, size_t n, unsigned int f),
            (in, oin, out, oout, n, f), "write", (uint64_t)(int64_t)out)
AT_EXPORT AT_HOT_FN AT_TAIL ssize_t splice(int in, off64_t *oin, int out, off64_t *oout, size_t n, unsigned int f)
{
    AT_DIRECT(splice, (in, oin, out, oout, n, f));
    fd_io(in);
    fd_io(out);
    fd_tx(out);
    if (AT_UNLIKELY(fd_rx_wanted(in))) { /* a socket's bytes spliced out: a receive of it */
        ssize_t r = AT_UNLIKELY(at_act_cur != NULL) ? splice_timed(in, oin, out, oout, n, f)
                                                    : AT_REAL(splice)(in, oin, out, oout, n, f);
        fd_rx(in, r, NULL, 0, false);
        return r;
    }
    if (AT_UNLIKELY(at_act_cur != NULL))
        return splice_timed(in, oin, out, oout, n, f);
    return AT_REAL(splice)(in, oin, out, oout, n, f);
}
