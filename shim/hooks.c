/* hooks.c: what a configured function does when it is called (issue 5). The config's entries
 * become rules (an activity kind or an event type with payload fields from the captures); each
 * rule's functions become hooks (shim/hook/: resolved, wrapped, installed by GOT or entry patching).
 * The wrappers call at_hook_enter/at_hook_exit here:
 *   activity on one function   Start on entry (if 'when' holds), Stop on return with a Status
 *                              (0 returned, 1 unwound by an exception, 2 abandoned by a longjmp)
 *   start/stop pair            Start when the start function returns (key from it), Stop when the
 *                              stop function is entered with the same key, on any thread
 *   event                      on entry, or on return when it captures or tests the return value
 *   keyed flow                 enqueue captures the current activity for the item; the thread that
 *                              dequeues the item adopts it (until its next dequeue)
 * Installation runs in the constructor (one thread) and again after dlopen for new modules. */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "activity_plain.h"
#include "hook/hook.h"
#include "hookconf.h"
#include "shim.h"
#include "stack.h"
#include "xstate.h"

/* ---------------- keyed tables ---------------- */

/* Small non-negative keys (fds) index an array of atomic pointers: no lock. Other keys (pointers,
 * large numbers) share a small locked list: rare in practice and never on a Start/Stop of one
 * function. */
#define KT_DIRECT (1u << 20)

typedef struct kt_node {
    uint64_t key;
    at_activity *a;
    struct kt_node *next;
} kt_node;

typedef struct keytab {
    at_activity **direct;
    uint64_t ndirect; /* KT_DIRECT, or fewer under a tight RLIMIT_AS (larger keys go to the list) */
    pthread_mutex_t lock;
    kt_node *list;
} keytab;

static int kt_init(keytab *t)
{
    size_t len = KT_DIRECT * sizeof(void *);
    void *p = at_as_map("start/stop key table", &len, 4096, 32, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (!p)
        return -1;
    t->direct = p;
    t->ndirect = len / sizeof(void *);
    pthread_mutex_init(&t->lock, NULL);
    return 0;
}

/* Put a (the table's reference); returns what the key held before (a reference) or NULL. */
AT_PATH_ACT static at_activity *kt_put(keytab *t, uint64_t key, at_activity *a)
{
    if (key < t->ndirect)
        return __atomic_exchange_n(&t->direct[key], a, __ATOMIC_ACQ_REL);
    pthread_mutex_lock(&t->lock);
    at_activity *old = NULL;
    kt_node *n;
    for (n = t->list; n && n->key != key; n = n->next)
        ;
    if (n) {
        old = n->a;
        n->a = a;
    } else if (a && (n = at_xs_malloc(sizeof *n))) { /* a hook's code: xstate.h */
        n->key = key;
        n->a = a;
        n->next = t->list;
        t->list = n;
    } else
        old = a; /* no memory: the caller drops it */
    pthread_mutex_unlock(&t->lock);
    return old;
}

/* on the hook logic's pages: every call of a pair's Stop looks its key up (nginx closes the file it
 * serves, which started nothing) */
AT_PATH_CORE static at_activity *kt_take(keytab *t, uint64_t key)
{
    if (key < t->ndirect)
        return __atomic_exchange_n(&t->direct[key], NULL, __ATOMIC_ACQ_REL);
    if (!__atomic_load_n(&t->list, __ATOMIC_RELAXED))
        return NULL;
    pthread_mutex_lock(&t->lock);
    at_activity *a = NULL;
    for (kt_node **pp = &t->list; *pp; pp = &(*pp)->next)
        if ((*pp)->key == key) {
            kt_node *n = *pp;
            a = n->a;
            *pp = n->next;
            at_xs_free(n);
            break;
        }
    pthread_mutex_unlock(&t->lock);
    return a;
}

/* ---------------- rules ---------------- */

/* What a call reads comes first: an event rule's call reads one line of it (rules are 64-byte
 * aligned, in a block of their own), a pair's the line of its keys too. */
typedef struct rule {
    /* the entry's kind, pairing and callback arguments: what a call reads of it (6 KiB, most of
     * it names and signatures), here */
    at_hc_kind ekind;
    bool paired;
    int8_t callback, callback_arg;
    bool key_is_fd;         /* fd_key: the fd hand-off carries the pair's activity */
    bool event_on_return;
    bool plain;             /* an activity on one function with no 'when', capture or stack: a
                             * Start with no fields and a Stop with its Status only (the hot path) */
    unsigned stacks;        /* AT_HC_STACK_*: which events carry a stack */
    at_activity_kind *kind; /* activities */
    at_event_type *event;   /* events */
    keytab keys;            /* pairs and keyed flows */
    const at_hc_entry *e;
    at_field *fields;       /* owned: start (or event) fields then stop fields */
} __attribute__((aligned(64))) rule;

/* What a call reads of its probe's config (at_hc_probe: 3 KiB, its captures and test after its
 * symbol and signature, each parameter's type a line of its own), copied at install beside the
 * probe's other hot fields. The names are at_hc_probe's. */
/* A call's payload buffer, made on its frame at the size its fields need: a number takes 8 bytes at
 * most (and a Stop's Status 4), a string up to the whole buffer. A 1 KiB array on every call's frame
 * put what it calls one stack page deeper. */
#define HK_BUF_MAX 1024
#define HK_SRC_NONE (-128) /* hk_pc.cap_src: a parameter the hooked variant lacks (written as 0) */
typedef struct hk_pc {
    int8_t ncapture, key, when_what;
    bool has_when, has_sig;
    uint8_t when_op;
    int8_t capture[AT_HC_MAX_CAPTURE];
    uint8_t cap_nt[AT_HC_MAX_CAPTURE]; /* each capture's field type (NT_TYPE_*), worked out once */
    /* all captures numbers (cap_words): each one's source (an argument's index, AT_HC_RETURN, or
     * HK_SRC_NONE for a parameter the hooked variant lacks) and width, worked out at install */
    bool cap_words;
    int8_t cap_src[AT_HC_MAX_CAPTURE];
    uint8_t cap_w[AT_HC_MAX_CAPTURE];
    uint16_t buf_size; /* the payload buffer a call's fields need (HK_BUF_MAX with a string) */
    unsigned max_string;
    int64_t when_value;
    struct {
        uint8_t nparams, ret;
        struct {
            uint8_t type;
        } p[AT_SIG_MAX_PARAMS];
    } sig;
} hk_pc;

/* What the shim's interposer of the hooked function does by itself, from its own arguments and
 * return value, for the two rules a server's per-request calls have most (hk_fast_plan): an event
 * whose fields are numbers from the arguments' registers and the return value, with no condition,
 * written at the return (or at the entry when it captures no return value) (HK_FAST_EVENT); the Stop of a pair keyed by an argument, with no
 * condition, when nothing holds that key (HK_FAST_NOKEY: the file a server closes, which started
 * nothing). On the probe's first line, so that such a call reads that line, the event's type and
 * nothing else of the rule, its probe or its hook. */
enum { HK_FAST_NONE, HK_FAST_EVENT, HK_FAST_NOKEY };
#define HK_FAST_CAP 4
#define HK_FAST_RET 0xffu  /* hk_fast.slot: the return value */
#define HK_FAST_WIDE 0x80u /* hk_fast.type: a field of 8 bytes */
typedef struct hk_fast {
    uint8_t kind; /* HK_FAST_* */
    uint8_t ncap;
    uint8_t slot[HK_FAST_CAP]; /* each field's register (the interposer's raw index), or HK_FAST_RET */
    uint8_t type[HK_FAST_CAP]; /* its at_ctype (the key's: type[0], from slot[0]), with
                                * HK_FAST_WIDE when it takes 8 bytes in the payload (else 4) */
    bool stack;                /* the event carries a stack */
    uint32_t nkeys;            /* the keys the pair's array holds (keytab.ndirect) */
    void *obj;                 /* the event's type, or the pair's array of keys (keytab.direct) */
} hk_fast;

/* A call reads fast (an interposer's), or pc and the four fields after it, then its hook's first
 * line: with probes 64-byte aligned, three lines (two of them before the hook came last). */
typedef struct probe {
    hk_fast fast;
    hk_pc pc; /* p's, for the call */
    rule *r;
    at_activity_kind *plain_kind; /* r->kind when r->plain (set at install): one load on the call */
    int role; /* index into e->probe */
    at_hook hook __attribute__((aligned(64)));
    /* install's */
    bool pending; /* not resolved yet: retried after each dlopen */
    const at_hc_probe *p;
    const struct probe *alias_of; /* another name of that probe's libc function (open64 for open) */
} __attribute__((aligned(64))) probe;
_Static_assert(offsetof(probe, hook) == 128, "a probe's hot fields take its first two lines");
_Static_assert(sizeof(hk_fast) == 24 && AT_CT_STR < HK_FAST_WIDE, "hk_fast: 24 bytes");

/* The probe whose hook h is */
static inline probe *probe_of(const at_hook *h)
{
    return (probe *)(uintptr_t)((const char *)h - offsetof(probe, hook));
}

static const at_hookconf *hk_conf;
static rule *hk_rules;
static probe *hk_probes;
static int hk_nprobes, hk_nbase; /* the config's functions first, then their aliases */
#define HK_ALIASES_MAX 96        /* aliases of all functions together */
#define HK_ALIASES_EACH 16
static pthread_mutex_t hk_install_lock AT_FORK_DATA = PTHREAD_MUTEX_INITIALIZER;

/* Threads' live calls that started an activity, by frame: a longjmp over them leaves entries
 * deeper than the frame the program is in, stopped (Status 2) at the next hooked call or return.
 * The first LIVE_INLINE are in the thread's TLS, the rest in a mapping made when a thread first
 * nests that deep: glibc zeroes the static TLS of every new thread, and a 3 KiB array there cost
 * every thread of a thread-per-connection server 48 cache lines whether it used hooks or not. */
#define LIVE_MAX 128
#define LIVE_INLINE 8
typedef struct live {
    uintptr_t sp;
    at_activity *a;
    probe *pr;
} live;
/* the thread's list of calls in progress with something at their return (its count, hk_nlive, on
 * the line every event reads), a part of the path's thread-local object (at_common.h) */
typedef struct hk_tls {
    live *more; /* LIVE_MAX - LIVE_INLINE entries, or NULL; unmapped when a thread the trampoline
                 * started ends (main and threads older than the shim keep theirs until the process
                 * ends) */
    live in[LIVE_INLINE];
} hk_tls;
AT_PTLS_FITS(hk_tls, hk); /* at_common.h */
#define hk_t AT_PTLS_AS(hk_tls, hk)
#define hk_nlive (AT_PTLS.hk_nlive) /* on the line every event reads */
#define hk_live_in (hk_t.in)
#define hk_live_more (hk_t.more)

static inline live *live_at(int i)
{
    return i < LIVE_INLINE ? &hk_live_in[i] : &hk_live_more[i - LIVE_INLINE];
}

/* Where the next entry goes, or NULL when the list is full (or no room could be mapped). */
static AT_NOINLINE live *live_push_slot_deep(void);
static inline live *live_push_slot(void)
{
    if (AT_LIKELY(hk_nlive < LIVE_INLINE))
        return &hk_live_in[hk_nlive];
    return live_push_slot_deep();
}

static AT_NOINLINE live *live_push_slot_deep(void)
{
    if (hk_nlive >= LIVE_MAX)
        return NULL;
    if (!hk_live_more) {
        int e = errno;
        size_t len = (LIVE_MAX - LIVE_INLINE) * sizeof(live);
        void *m = at_xs_as_map("deep call list", &len); /* a hook's code: xstate.h */
        errno = e;
        if (!m)
            return NULL;
        hk_live_more = m;
    }
    return &hk_live_more[hk_nlive - LIVE_INLINE];
}
#define hk_adopt_prev (AT_PTLS.hk_adopt_prev) /* keyed flow: what was current before the adoption */
#define hk_adopt_cap (AT_PTLS.hk_adopt_cap)   /* keyed flow: the adopted capture (a reference) */
#define hk_adopting (AT_PTLS.hk_adopting)

/* Stacks: the program's frames only (stacks.c drops the hook machinery's, wherever it stands). */
#define HK_STACK_WORDS (AT_STACK_MAX_DEPTH + 1) /* hk_stack's array: a marker and the leaf first */
static unsigned hk_depth AT_HOT_PAGE_RT; /* beside at_rt_hot, which every event reads */

/* The hooked function fn is the leaf (it has no frame of its own yet at entry, none left at
 * return), then its callers. */
/* c: the call whose entry or exit takes it (NULL: none known); at its exit by the stub the walk
 * starts at the caller (at_hook_call.ret_ip). A stack the thread has written before is a reference
 * to it (at_shim_capture_call). The leaf is inside fn, and so is the byte before it, which readers
 * of return addresses look up. ips holds HK_STACK_WORDS. */
AT_PATH_STACK static uint32_t hk_stack(uintptr_t *ips, const at_hook *h, const at_hook_call *c)
{
    bool from = c && c->ret_ip;
    return at_shim_capture_call(ips, hk_depth - 1, from ? c->ret_ip : 0, from ? c->ret_sp : 0,
                                from ? c->ret_bp : 0, h->addr + 1);
}

static const char *field_name(const at_hc_probe *p, int idx, char *buf, size_t n)
{
    if (idx == AT_HC_RETURN)
        return "Return";
    if (p->sig.p[idx].name[0])
        return p->sig.p[idx].name;
    snprintf(buf, n, "arg%d", idx);
    return buf;
}

static at_ctype cap_type(const at_hc_probe *p, int idx)
{
    return idx == AT_HC_RETURN ? p->sig.ret : p->sig.p[idx].type;
}

static at_ctype pc_type(const hk_pc *p, int idx)
{
    return (at_ctype)(idx == AT_HC_RETURN ? p->sig.ret : p->sig.p[idx].type);
}

/* pr's hk_pc from its config probe */
static void pc_make(probe *pr)
{
    const at_hc_probe *p = pr->p;
    hk_pc *c = &pr->pc;
    _Static_assert(AT_HC_MAX_CAPTURE <= 127 && AT_SIG_MAX_PARAMS <= 127 && AT_CT_STR < 256,
                   "hk_pc's narrow fields hold at_hc_probe's values");
    *c = (hk_pc){.ncapture = (int8_t)p->ncapture, .key = (int8_t)p->key,
                 .when_what = (int8_t)p->when_what, .has_when = p->has_when, .has_sig = p->has_sig,
                 .when_op = (uint8_t)p->when_op, .max_string = p->max_string,
                 .when_value = p->when_value};
    pr->hook.sets_args = pr->r->ekind == AT_HC_FLOW_CALLBACK; /* hook_enter's callback case */
    /* the parameters the call's semantics reads: its captures, key and condition (a callback flow
     * reads and may replace any) */
    int hi = -1;
    for (int i = 0; i < p->ncapture; i++)
        hi = p->capture[i] > hi ? p->capture[i] : hi;
    hi = p->key > hi ? p->key : hi;
    if (p->has_when)
        hi = p->when_what > hi ? p->when_what : hi;
    pr->hook.args_read = pr->hook.sets_args ? 0 : (uint8_t)(hi + 2);
    /* hook_enter and hook_exit's cases with nothing to do at one end of the call. The entry: an
     * event written at the return, the Start of a pair (made at its return), a keyed flow's put
     * keyed by the return value or its take. The return: an event written at the entry, the Stop
     * of a pair, a keyed flow's put keyed by an argument, a callback flow. A plain rule has both. */
    const rule *r = pr->r;
    bool pair = r->ekind == AT_HC_ACTIVITY && r->paired;
    bool keyed = r->ekind == AT_HC_FLOW_KEYED;
    pr->hook.enter_noop = !r->plain && ((r->ekind == AT_HC_EVENT && r->event_on_return) ||
                                        (pair && pr->role == 0) ||
                                        (keyed && (pr->role == 1 || p->key == AT_HC_RETURN)));
    pr->hook.exit_noop = !r->plain && ((r->ekind == AT_HC_EVENT && !r->event_on_return) ||
                                       (pair && pr->role == 1) ||
                                       (keyed && pr->role == 0 && p->key != AT_HC_RETURN) ||
                                       r->ekind == AT_HC_FLOW_CALLBACK);
    c->buf_size = 8; /* a Stop's Status */
    c->cap_words = true;
    for (int i = 0; i < p->ncapture; i++) {
        int idx = p->capture[i];
        c->capture[i] = (int8_t)idx;
        c->cap_nt[i] = (uint8_t)at_ctype_nt(cap_type(p, idx));
        c->buf_size = c->cap_nt[i] == NT_TYPE_STRING ? HK_BUF_MAX : c->buf_size + 8;
        c->cap_words &= c->cap_nt[i] != NT_TYPE_STRING;
        c->cap_w[i] = c->cap_nt[i] == NT_TYPE_INT32 || c->cap_nt[i] == NT_TYPE_UINT32 ? 4 : 8;
        c->cap_src[i] = (int8_t)(idx == AT_HC_RETURN || !p->has_sig || idx < p->sig.nparams
                                     ? idx
                                     : HK_SRC_NONE);
    }
    if (c->buf_size > HK_BUF_MAX)
        c->buf_size = HK_BUF_MAX;
    c->sig.nparams = (uint8_t)p->sig.nparams;
    c->sig.ret = (uint8_t)p->sig.ret;
    /* all of them: an alias with fewer parameters (__open_2) keeps the types of the captured ones
     * it lacks, and writes them as 0 */
    for (int i = 0; i < AT_SIG_MAX_PARAMS; i++)
        c->sig.p[i].type = (uint8_t)p->sig.p[i].type;
}

/* Fields of the captures of p: which = 0 arguments only, 1 return only, 2 all. */
static uint32_t add_fields(at_field *f, uint32_t n, const at_hc_probe *p, int which)
{
    for (int i = 0; i < p->ncapture; i++) {
        int idx = p->capture[i];
        if ((which == 0 && idx == AT_HC_RETURN) || (which == 1 && idx != AT_HC_RETURN))
            continue;
        char buf[16];
        f[n].name = strdup(field_name(p, idx, buf, sizeof buf));
        f[n].type = at_ctype_nt(cap_type(p, idx));
        n++;
    }
    return n;
}

/* nt: the field's type (hk_pc.cap_nt); numbers written inline (a call's captures are a few
 * words), a double as its bits (no vector register) */
static inline void put_value(at_payload *pl, unsigned nt, uint64_t v, unsigned max_string)
{
    uint32_t w = (uint32_t)v;
    switch (nt) {
    case NT_TYPE_INT32:
    case NT_TYPE_UINT32: at_payload_put(pl, &w, 4); break;
    case NT_TYPE_INT64:
    case NT_TYPE_UINT64:
    case NT_TYPE_DOUBLE: at_payload_put(pl, &v, 8); break;
    case NT_TYPE_STRING: at_payload_str_safe(pl, (const char *)(uintptr_t)v, max_string); break;
    }
}

/* Argument idx, 0 when the hooked variant has no such parameter (__open_2 has no mode). */
static inline uint64_t arg_of(const hk_pc *p, const uint64_t *args, int idx)
{
    return args && (!p->has_sig || idx < p->sig.nparams) ? args[idx] : 0;
}

AT_PATH_CORE static AT_NOINLINE void put_captures_slow(at_payload *pl, const hk_pc *p,
                                          const uint64_t *args, uint64_t ret, bool have_ret,
                                          int which)
{
    for (int i = 0; i < p->ncapture; i++) {
        int idx = p->capture[i];
        if ((which == 0 && idx == AT_HC_RETURN) || (which == 1 && idx != AT_HC_RETURN))
            continue;
        uint64_t v = idx == AT_HC_RETURN ? (have_ret ? ret : 0) : arg_of(p, args, idx);
        put_value(pl, p->cap_nt[i], v, p->max_string);
    }
}

/* The captures of a probe whose fields are all numbers, into a payload with room for a word each
 * (pc_make sized its buffer at 8 bytes a capture and the Status): each value stored as a whole
 * word, the payload moved on by its width (x86-64 is little-endian: a 32-bit field is the word's
 * first 4 bytes). */
static inline __attribute__((always_inline)) void put_words(at_payload *pl, const hk_pc *p,
                                                            const uint64_t *args, uint64_t ret,
                                                            bool have_ret, int which)
{
    uint8_t *o = pl->p;
    for (int i = 0; i < p->ncapture; i++) {
        int src = p->cap_src[i];
        uint64_t v;
        if (src == AT_HC_RETURN) {
            if (which == 0)
                continue;
            v = have_ret ? ret : 0;
        } else {
            if (which == 1)
                continue;
            v = src >= 0 ? args[src] : 0;
        }
        __builtin_memcpy(o, &v, 8);
        o += p->cap_w[i];
    }
    pl->p = o;
}

static inline void put_captures(at_payload *pl, const hk_pc *p, const uint64_t *args,
                                uint64_t ret, bool have_ret, int which)
{
    if (!p->ncapture)
        return;
    if (AT_LIKELY(p->cap_words && args && (size_t)(pl->end - pl->p) >= 8u * (unsigned)p->ncapture))
        put_words(pl, p, args, ret, have_ret, which);
    else
        put_captures_slow(pl, p, args, ret, have_ret, which);
}

/* apart from the core: a rule with a condition is the few (a pair's Start, once a connection) */
AT_PATH_TEXT static AT_NOINLINE bool when_test(const hk_pc *p, const uint64_t *args, uint64_t ret)
{
    if (!args && p->when_what != AT_HC_RETURN)
        return true;
    at_ctype t = pc_type(p, p->when_what);
    uint64_t raw = p->when_what == AT_HC_RETURN ? ret : arg_of(p, args, p->when_what);
    bool is_signed = t == AT_CT_I8 || t == AT_CT_I16 || t == AT_CT_I32 || t == AT_CT_I64;
    int cmp;
    if (is_signed) {
        int64_t a = (int64_t)raw, b = p->when_value;
        cmp = a < b ? -1 : a > b;
    } else {
        uint64_t a = raw, b = (uint64_t)p->when_value;
        cmp = a < b ? -1 : a > b;
    }
    switch (p->when_op) {
    case AT_HC_EQ: return cmp == 0;
    case AT_HC_NE: return cmp != 0;
    case AT_HC_LT: return cmp < 0;
    case AT_HC_LE: return cmp <= 0;
    case AT_HC_GT: return cmp > 0;
    case AT_HC_GE: return cmp >= 0;
    }
    return true;
}

/* Does the rule's condition hold (true without one)? The test inline, the comparison a call (placed
 * apart: a rule without a condition, most, runs none of it). */
static inline bool when_holds(const hk_pc *p, const uint64_t *args, uint64_t ret)
{
    return !p->has_when || when_test(p, args, ret);
}

/* The Stop of a, which no longer is the thread's alone (or current), and our reference on it. */
static AT_NOINLINE void stop_shared(const rule *r, at_activity *a, const uint8_t *buf, uint32_t len,
                                    const uintptr_t *ips, uint32_t nips)
{
    if (at_activity_current() == a) {
        /* still current, so the thread's reference keeps it alive without ours, and the engine's
         * stop-by-kind takes its fast path (current, sole reference) */
        at_activity_unref(a);
        at_activity_stop(r->kind, buf, len, ips, nips);
        return;
    }
    at_activity_stop_ref(a, buf, len, ips, nips);
    at_activity_unref(a);
}

/* The Stop of call activity a; a NULL for a call whose Start had no id (past the depth limit): the
 * same fields, no id. */
/* The call's stack, into an array made on the frame only when a stack is taken: a 2 KiB array in
 * the frame of every call with fields put the event write below it on one more page of the stack,
 * another page walk between two system calls of a server. ips is left on a one-entry array (never
 * NULL) with nips 0 otherwise. */
#define HK_TAKE_STACK(ips, nips, cond, h, c)                                                       \
    do {                                                                                           \
        if (cond) {                                                                                \
            (ips) = __builtin_alloca(HK_STACK_WORDS * sizeof(uintptr_t));                          \
            (nips) = hk_stack((ips), (h), (c));                                                    \
        }                                                                                          \
    } while (0)

AT_PATH_ACT static void stop_single(const rule *r, const at_hook *h, at_activity *a, const hk_pc *p,
                        const uint64_t *args, uint64_t ret, int status, const at_hook_call *c)
{
    uint8_t *buf = __builtin_alloca(p->buf_size);
    at_payload pl;
    at_payload_init(&pl, buf, p->buf_size);
    put_captures(&pl, p, args, ret, status == AT_HOOK_RETURNED, 1);
    at_payload_u32(&pl, (uint32_t)status);
    uintptr_t none[1], *ips = none;
    uint32_t nips = 0;
    HK_TAKE_STACK(ips, nips, r->stacks & AT_HC_STACK_STOP, h, c);
    uint32_t len = (uint32_t)(pl.p - buf);
    if (AT_UNLIKELY(!a))
        at_activity_stop_untracked(r->kind, buf, len, ips, nips);
    /* the common case: still current and held by the thread and us alone: no atomic operation */
    else if (!at_activity_stop_held(a, buf, len, ips, nips))
        stop_shared(r, a, buf, len, ips, nips);
}

/* Calls deeper than sp (at the same depth, when a new call enters: a sibling that never
 * returned) that are still listed were jumped over. */
static void abandon_below(uintptr_t sp, bool entering)
{
    while (hk_nlive > 0 && (live_at(hk_nlive - 1)->sp < sp ||
                            (entering && live_at(hk_nlive - 1)->sp == sp))) {
        live *l = live_at(--hk_nlive);
        stop_single(l->pr->r, &l->pr->hook, l->a, &l->pr->pc, NULL, 0, AT_HOOK_ABANDONED, NULL);
    }
}

/* abandon_below's first test, inline: the innermost listed call is deeper than sp (the common case,
 * a call returning or a nested one entering, is not) */
static inline bool jumped_over(uintptr_t sp, bool entering)
{
    uintptr_t top = live_at(hk_nlive - 1)->sp;
    return top < sp || (entering && top == sp);
}

/* The thread ends (thread.c): calls it never returned from are abandoned (pthread_exit inside a
 * hooked function), and a keyed-flow adoption is left. */
void at_hooks_thread_exit(void)
{
    if (!hk_nlive && !hk_adopting && !hk_live_more)
        return;
    int e = errno;
    AT_INTERNAL_BEGIN();
    while (hk_nlive > 0) {
        live *l = live_at(--hk_nlive);
        stop_single(l->pr->r, &l->pr->hook, l->a, &l->pr->pc, NULL, 0, AT_HOOK_ABANDONED, NULL);
    }
    if (hk_adopting) {
        at_flow_leave(hk_adopt_prev);
        at_flow_release(hk_adopt_cap);
        hk_adopting = false;
        hk_adopt_prev = hk_adopt_cap = NULL;
    }
    if (hk_live_more) {
        at_as_unmap(hk_live_more, (LIVE_MAX - LIVE_INLINE) * sizeof(live));
        hk_live_more = NULL;
    }
    AT_INTERNAL_END();
    errno = e;
}

/* A callback flow: the program's callback and its argument, and the activity of the submitter.
 * The submitted (fn, arg) become (cb_run, this); the callback runs once, in that activity. */
typedef struct cb_ctx {
    void *(*fn)(void *);
    void *arg;
    at_activity *cap;
} cb_ctx;

static void *cb_run(void *p)
{
    cb_ctx x = *(cb_ctx *)p;
    at_xs_free(p);
    at_activity *prev = at_flow_enter(x.cap);
    void *r = x.fn(x.arg);
    at_flow_leave(prev);
    at_flow_release(x.cap);
    return r;
}

AT_PATH_ACT static uint64_t key_of(const hk_pc *p, const uint64_t *args, uint64_t ret)
{
    return p->key == AT_HC_RETURN ? ret : arg_of(p, args, p->key);
}

/* The thread's errno at its offset from the thread pointer, found once at install: &errno is a call
 * into libc, twice per hooked call otherwise, and glibc's errno is initial-exec TLS, at the same
 * offset in every thread. (A clone(CLONE_VM) child without a thread pointer of its own shares the
 * thread's TLS, errno included, so the offset is right for it too.) */
static long hk_errno_off AT_HOT_PAGE_RT; /* likewise */
static inline int errno_get(void)
{
    int v;
    __asm__ volatile("movl %%fs:(%1), %0" : "=r"(v) : "r"(hk_errno_off));
    return v;
}
static inline void errno_set(int v)
{
    __asm__ volatile("movl %0, %%fs:(%1)" : : "r"(v), "r"(hk_errno_off) : "memory");
}

/* The call of a plain rule's function (rule.plain): the Start with no fields, no stack and no test,
 * listed for its Stop. What at_hook_enter does for such a rule, without what it does not need. */
static AT_NOINLINE void abandon_below_keep_errno(uintptr_t sp, bool entering)
{
    int err = errno_get();
    abandon_below(sp, entering);
    errno_set(err);
}

/* errno is the program's: nothing here changes it (the engine's one-pass Start makes no call, and
 * its ways out, the deep call list's mapping and the abandoning of calls jumped over keep it), so
 * it is not saved and restored on every call. */
static inline __attribute__((always_inline)) void plain_enter(probe *pr, at_hook_call *c)
{
    AT_INTERNAL_BEGIN();
    if (AT_UNLIKELY(hk_nlive > 0) && jumped_over(c->sp, true))
        abandon_below_keep_errno(c->sp, true);
    at_activity *a = at_act_start_plain(pr->plain_kind);
    if (AT_UNLIKELY(a == AT_ACTIVITY_UNTRACKED)) {
        c->started = 3; /* its Start has no id: so will its Stop */
    } else if (a) {
        c->act = a;
        c->started = 2;
        live *l = live_push_slot();
        if (l) {
            *l = (live){c->sp, a, pr};
            hk_nlive++;
            c->started = 1;
        }
    }
    AT_INTERNAL_END();
}

static AT_NOINLINE void hook_enter(probe *pr, at_hook *h, at_hook_call *c, uint64_t *args);

/* The plain rule's path is inline, down to the engine's one-pass Start and Stop (activity_plain.h):
 * the stub's entry and return (hook/stub.c, the same translation unit: hookpath.c) make no call for
 * it. The others' is a function of its own: its frame (payload and stack buffers, many live values)
 * is not set up for the plain one. */
AT_PATH_TEXT static AT_NOINLINE void plain_enter_call(probe *pr, at_hook_call *c)
{
    plain_enter(pr, c);
}

/* inline_plain: the plain path inline here (the stub's entry), else a call (at_hook_enter, whose
 * other callers then keep the frame they had) */
static inline __attribute__((always_inline)) void enter_rule(at_hook *h, at_hook_call *c,
                                                            uint64_t *args, bool inline_plain)
{
    probe *pr = h->user;
    if (AT_LIKELY(pr->plain_kind)) {
        if (inline_plain)
            plain_enter(pr, c);
        else
            plain_enter_call(pr, c);
    } else if (h->enter_noop) {
        /* only what every entry does: calls a longjmp left are over (hook_enter's first step) */
        if (AT_UNLIKELY(hk_nlive > 0) && jumped_over(c->sp, true)) {
            AT_INTERNAL_BEGIN();
            abandon_below_keep_errno(c->sp, true);
            AT_INTERNAL_END();
        }
    } else {
        hook_enter(pr, h, c, args);
    }
}

/* The shim not simply on (a clone(CLONE_VM) child may run on this thread's TLS): a function of its
 * own, so that the entry points below keep no frame. */
static AT_NOINLINE void enter_unsure(at_hook *h, at_hook_call *c, uint64_t *args)
{
    if (at_on())
        enter_rule(h, c, args, false);
}

/* at_hook_enter's body past its test of at_internal, for the stub's entry to inline (it has just
 * made that test, and nothing since can have changed it) */
static inline __attribute__((always_inline)) void hook_enter_tested(at_hook *h, at_hook_call *c,
                                                                   uint64_t *args,
                                                                   bool inline_plain)
{
    if (AT_UNLIKELY(__atomic_load_n(&at_hot.shim_on, __ATOMIC_RELAXED) != 1))
        return enter_unsure(h, c, args);
    enter_rule(h, c, args, inline_plain);
}

/* the libffi wrappers' and the unwind personality's way in (the stubs inline it): apart from the core */
AT_PATH_TEXT void at_hook_enter(at_hook *h, at_hook_call *c, uint64_t *args)
{
    /* the hooks' own code (and all the shim's, at_internal) calls a configured function through
     * without recording: close in libelf, malloc in libunwind as a stack is taken */
    if (at_internal)
        return;
    hook_enter_tested(h, c, args, false);
}

AT_PATH_CORE static AT_NOINLINE void hook_enter(probe *pr, at_hook *h, at_hook_call *c, uint64_t *args)
{
    AT_INTERNAL_BEGIN();
    rule *r = pr->r;
    const hk_pc *p = &pr->pc;
    int err = errno_get();
    if (AT_UNLIKELY(hk_nlive > 0) && jumped_over(c->sp, true))
        abandon_below(c->sp, true);
    uint8_t *buf = __builtin_alloca(p->buf_size);
    at_payload pl;
    switch (r->ekind) {
    case AT_HC_ACTIVITY:
        if (!r->paired) {
            if (!when_holds(p, args, 0))
                break;
            at_payload_init(&pl, buf, p->buf_size);
            put_captures(&pl, p, args, 0, false, 0);
            uintptr_t none[1], *ips = none;
            uint32_t nips = 0;
            HK_TAKE_STACK(ips, nips, r->stacks & AT_HC_STACK_START, h, c);
            /* started with our reference on it, without an atomic operation */
            at_activity *a = at_activity_start_held(r->kind, buf, (uint32_t)(pl.p - buf), ips, nips);
            if (AT_UNLIKELY(a == AT_ACTIVITY_UNTRACKED)) {
                c->started = 3; /* 3: its Start has no id (too deep), so will its Stop */
            } else if (a) {
                c->act = a;
                c->started = 2; /* 2: not listed (the list is full); 1: listed */
                live *l = live_push_slot();
                if (l) {
                    *l = (live){c->sp, a, pr};
                    hk_nlive++;
                    c->started = 1;
                }
            }
        } else if (pr->role == 1 && args && when_holds(p, args, 0)) {
            at_activity *a = kt_take(&r->keys, key_of(p, args, 0));
            if (a) {
                at_payload_init(&pl, buf, p->buf_size);
                put_captures(&pl, p, args, 0, false, 0);
                uintptr_t none[1], *ips = none;
                uint32_t nips = 0;
                HK_TAKE_STACK(ips, nips, r->stacks & AT_HC_STACK_STOP, h, c);
                at_activity_stop_ref(a, buf, (uint32_t)(pl.p - buf), ips, nips);
                at_activity_unref(a);
            }
        }
        break;
    case AT_HC_EVENT:
        if (!r->event_on_return && when_holds(p, args, 0) && at_event_enabled(r->event)) {
            at_payload_init(&pl, buf, p->buf_size);
            put_captures(&pl, p, args, 0, false, 2);
            uintptr_t none[1], *ips = none;
            uint32_t nips = 0;
            HK_TAKE_STACK(ips, nips, r->stacks, h, c);
            at_activity_event(r->event, buf, (uint32_t)(pl.p - buf), ips, nips);
        }
        break;
    case AT_HC_FLOW_KEYED:
        if (pr->role == 0 && args && p->key != AT_HC_RETURN) {
            at_activity *cap = at_flow_capture();
            at_activity *old = kt_put(&r->keys, key_of(p, args, 0), cap);
            if (old)
                at_flow_release(old);
        }
        break;
    case AT_HC_FLOW_CALLBACK:
        if (args && r->callback_arg != AT_HC_NONE && args[r->callback]) {
            at_activity *cap = at_flow_capture();
            if (!cap)
                break; /* nothing current: the callback runs as it would anyway */
            cb_ctx *x = at_xs_malloc(sizeof *x);
            if (!x) {
                at_flow_release(cap);
                break;
            }
            x->fn = (void *(*)(void *))(uintptr_t)args[r->callback];
            x->arg = (void *)(uintptr_t)args[r->callback_arg];
            x->cap = cap;
            args[r->callback] = (uint64_t)(uintptr_t)cb_run;
            args[r->callback_arg] = (uint64_t)(uintptr_t)x;
        }
        break;
    }
    AT_INTERNAL_END();
    errno_set(err);
}

/* A listed call is on top of the list now (deeper ones were dropped before): taken off. If it is
 * not, it was taken for abandoned (a signal handler on another stack can make a live call look so)
 * and stopped then, with our reference: false. */
static inline bool unlist(const at_hook_call *c)
{
    if (!(hk_nlive > 0 && live_at(hk_nlive - 1)->a == c->act && live_at(hk_nlive - 1)->sp == c->sp))
        return false;
    hk_nlive--;
    return true;
}

/* The return (or unwind) of a plain rule's function: its Stop with the Status. */
AT_PATH_TEXT static AT_NOINLINE void plain_exit_slow(const rule *r, at_hook_call *c, int status)
{
    AT_INTERNAL_BEGIN();
    int err = errno_get();
    int n = hk_nlive;
    live *top = n > 0 ? live_at(n - 1) : NULL;
    if (AT_UNLIKELY(top && top->sp < c->sp)) { /* jumped_over, with the entry unlist needs */
        abandon_below(c->sp, false);
        n = hk_nlive;
        top = n > 0 ? live_at(n - 1) : NULL;
    }
    int started = c->started;
    c->started = 0;
    if (started == 1) { /* listed: unlist's test on the top entry already at hand */
        if (top && top->a == c->act && top->sp == c->sp)
            hk_nlive = n - 1;
        else
            started = 0;
    }
    if (started == 3) {
        uint32_t v = (uint32_t)status;
        at_activity_stop_untracked(r->kind, &v, sizeof v, NULL, 0);
    } else if (started) {
        at_activity_end_held_u32(c->act, (uint32_t)status);
    }
    AT_INTERNAL_END();
    errno_set(err);
    (void)r;
}

/* The common case first: the call is the innermost one listed (nothing jumped over it), in the
 * thread's own entries. */
static inline __attribute__((always_inline)) void plain_exit(const rule *r, at_hook_call *c, int status)
{
    int n = hk_nlive;
    if (AT_UNLIKELY(c->started != 1 || n <= 0 || n > LIVE_INLINE ||
                    hk_live_in[n - 1].sp != c->sp || hk_live_in[n - 1].a != c->act))
        return plain_exit_slow(r, c, status);
    AT_INTERNAL_BEGIN();
    hk_nlive = n - 1;
    c->started = 0;
    at_act_end_u32(c->act, (uint32_t)status); /* keeps errno (activity_plain.h) */
    AT_INTERNAL_END();
}

static AT_NOINLINE void hook_exit(probe *pr, at_hook *h, at_hook_call *c, const uint64_t *args,
                                  uint64_t ret, int status);

AT_PATH_TEXT static AT_NOINLINE void plain_exit_call(const rule *r, at_hook_call *c, int status)
{
    plain_exit(r, c, status);
}

static inline __attribute__((always_inline)) void exit_rule(at_hook *h, at_hook_call *c,
                                                           const uint64_t *args, uint64_t ret,
                                                           int status, bool inline_plain)
{
    probe *pr = h->user;
    if (AT_LIKELY(pr->plain_kind)) {
        if (inline_plain)
            plain_exit(pr->r, c, status);
        else
            plain_exit_call(pr->r, c, status);
    } else {
        hook_exit(pr, h, c, args, ret, status);
    }
}

static AT_NOINLINE void exit_unsure(at_hook *h, at_hook_call *c, const uint64_t *args,
                                    uint64_t ret, int status)
{
    if (at_on() || c->started) /* what a call started is stopped, whatever came since */
        exit_rule(h, c, args, ret, status, false);
}

/* A call of h takes the plain rule's path: no stack, so no return point to walk from. */
static inline bool hook_plain(const at_hook *h)
{
    return ((const probe *)h->user)->plain_kind != NULL;
}

/* at_hook_exit's body (the stub's return inlines it with the plain path inline too) */
static inline __attribute__((always_inline)) void hook_exit_inline(at_hook *h, at_hook_call *c,
                                                                  const uint64_t *args, uint64_t ret,
                                                                  int status, bool inline_plain)
{
    if (at_internal)
        return;
    if (AT_UNLIKELY(__atomic_load_n(&at_hot.shim_on, __ATOMIC_RELAXED) != 1))
        return exit_unsure(h, c, args, ret, status);
    exit_rule(h, c, args, ret, status, inline_plain);
}

AT_PATH_TEXT void at_hook_exit(at_hook *h, at_hook_call *c, const uint64_t *args, uint64_t ret, int status)
{
    hook_exit_inline(h, c, args, ret, status, false);
}

/* with the hook logic's entry (AT_PATH_CORE): the interposers' common rules at the return take
 * hk_fast instead, so that their twins, at_direct_return and the event write share two pages */
AT_PATH_CORE static AT_NOINLINE void hook_exit(probe *pr, at_hook *h, at_hook_call *c, const uint64_t *args,
                                  uint64_t ret, int status)
{
    rule *r = pr->r;
    const hk_pc *p = &pr->pc;
    AT_INTERNAL_BEGIN();
    int err = errno_get();
    if (AT_UNLIKELY(hk_nlive > 0) && jumped_over(c->sp, false))
        abandon_below(c->sp, false);
    uint8_t *buf = __builtin_alloca(p->buf_size);
    at_payload pl;
    switch (r->ekind) {
    case AT_HC_ACTIVITY:
        if (!r->paired) {
            if (!c->started)
                break;
            if (c->started == 3) {
                c->started = 0;
                stop_single(r, h, NULL, p, args, ret, status, c);
                break;
            }
            if (c->started == 1 && !unlist(c)) {
                c->started = 0;
                break;
            }
            c->started = 0;
            stop_single(r, h, c->act, p, args, ret, status, c);
        } else if (pr->role == 0 && status == AT_HOOK_RETURNED && args && when_holds(p, args, ret)) {
            /* The Start of a pair: a child of what is current, not left current (each pair is its
             * own thread of work) unless the fd hand-off takes it over. */
            if (r->key_is_fd) /* the previous pair's hold is over, not the adoption it runs in */
                at_fdflow_hold_prepare(r->kind);
            at_activity *base = at_flow_capture();
            at_activity *prev = at_flow_enter(base);
            at_payload_init(&pl, buf, p->buf_size);
            put_captures(&pl, p, args, ret, true, 2);
            uintptr_t none[1], *ips = none;
            uint32_t nips = 0;
            HK_TAKE_STACK(ips, nips, r->stacks & AT_HC_STACK_START, h, c);
            at_activity *a = at_activity_start(r->kind, buf, (uint32_t)(pl.p - buf), ips, nips);
            uint64_t key = key_of(p, args, ret);
            if (a) {
                at_activity_ref(a);
                at_activity *old = kt_put(&r->keys, key, a);
                if (old) { /* the key was reused without a Stop we saw: that one is over */
                    at_activity_stop_ref(old, NULL, 0, NULL, 0);
                    at_activity_unref(old);
                }
            }
            if (!(a && r->key_is_fd && at_fdflow_hold((int)key, a, prev, base))) {
                at_flow_leave(prev);
                at_flow_release(base);
            }
        }
        break;
    case AT_HC_EVENT:
        if (r->event_on_return && status == AT_HOOK_RETURNED && when_holds(p, args, ret) &&
            at_event_enabled(r->event)) {
            at_payload_init(&pl, buf, p->buf_size);
            put_captures(&pl, p, args, ret, true, 2);
            uintptr_t none[1], *ips = none;
            uint32_t nips = 0;
            HK_TAKE_STACK(ips, nips, r->stacks, h, c);
            at_activity_event(r->event, buf, (uint32_t)(pl.p - buf), ips, nips);
        }
        break;
    case AT_HC_FLOW_KEYED:
        if (status != AT_HOOK_RETURNED || !args)
            break;
        if (pr->role == 0 && p->key == AT_HC_RETURN) {
            at_activity *old = kt_put(&r->keys, ret, at_flow_capture());
            if (old)
                at_flow_release(old);
        } else if (pr->role == 1) {
            at_activity *a = kt_take(&r->keys, key_of(p, args, ret));
            if (!a)
                break;
            /* the item is this thread's work now: leave the previous item's activity (enter
             * borrows the capture: it is released only after the leave) */
            if (hk_adopting) {
                at_flow_leave(hk_adopt_prev);
                at_flow_release(hk_adopt_cap);
            }
            hk_adopt_prev = at_flow_enter(a);
            hk_adopt_cap = a;
            hk_adopting = true;
        }
        break;
    case AT_HC_FLOW_CALLBACK:
        break;
    }
    AT_INTERNAL_END();
    errno_set(err);
}

/* ---------------- installation ---------------- */

static void *real_dlopen_fn;
static void *real_dlsym_fn;
void *at_hk_dlopen(const char *file, int mode);
void *at_hk_dlsym(void *handle, const char *name);
static void hk_rescan(const char *file);

/* The function calls through the GOT tier reach: what the program's own calls reached before, so
 * interposers (this shim's accept4, a preloaded malloc) stay in the chain. */
static void *call_target(const at_resolved *res, const char *spec)
{
    if (strchr(spec, '!'))
        return (void *)res->addr;
    void *p = res->version[0] ? dlvsym(RTLD_DEFAULT, res->sym, res->version)
                              : dlsym(RTLD_DEFAULT, res->sym);
    return p ? p : (void *)res->addr;
}

/* The version whose imports a GOT hook takes: the one asked for, else the definition's (a module
 * importing an older version of the name calls another function). */
static const char *hook_version(const at_resolved *r)
{
    return r->version[0] ? r->version : r->defver;
}

/* hk_fast for a rule its interposer runs (after at_direct_ok, which placed the parameters): the
 * rule's shape, or HK_FAST_NONE for the general way. */
static void hk_fast_plan(probe *pr)
{
    const rule *r = pr->r;
    const hk_pc *p = &pr->pc;
    const at_hook *h = &pr->hook;
    hk_fast f = {.kind = HK_FAST_NONE};
    if (p->has_when || !p->has_sig)
        goto done;
    if (r->ekind == AT_HC_EVENT && p->cap_words && p->ncapture <= HK_FAST_CAP) {
        for (int i = 0; i < p->ncapture; i++) {
            int src = p->cap_src[i];
            unsigned nt = p->cap_nt[i];
            if (nt != NT_TYPE_INT32 && nt != NT_TYPE_UINT32 && nt != NT_TYPE_INT64 &&
                nt != NT_TYPE_UINT64)
                goto done;
            if (src == AT_HC_RETURN) {
                f.slot[i] = HK_FAST_RET;
                f.type[i] = h->ret_type;
            } else if (src >= 0 && src < h->nparams && h->arg_slot[src] < 6) {
                f.slot[i] = h->arg_slot[src];
                f.type[i] = (uint8_t)(h->ptypes >> 4 * src & 15);
            } else {
                goto done;
            }
            f.type[i] |= p->cap_w[i] == 8 ? HK_FAST_WIDE : 0;
        }
        f.ncap = (uint8_t)p->ncapture;
        f.stack = r->stacks != 0; /* hook_enter's and hook_exit's HK_TAKE_STACK for an event */
        f.obj = r->event;
        f.kind = r->event ? HK_FAST_EVENT : HK_FAST_NONE;
    } else if (r->ekind == AT_HC_ACTIVITY && r->paired && pr->role == 1 && p->key >= 0 &&
               p->key < h->nparams && h->arg_slot[p->key] < 6) {
        f.slot[0] = h->arg_slot[p->key];
        f.type[0] = (uint8_t)(h->ptypes >> 4 * p->key & 15);
        f.nkeys = (uint32_t)r->keys.ndirect;
        f.obj = r->keys.direct;
        f.kind = HK_FAST_NOKEY;
    }
done:
    pr->fast = f;
}

/* A function the shim interposes itself (real.h: AT_DIRECT_LIST), named so that modules bind to the
 * interposer (no lib!, no version; an interposer preloaded ahead of the shim's takes the name, and
 * the stub the rule): the rule runs in the interposer (hook.h: at_direct_entry/return), and every GOT
 * slot importing the name leads there (those not yet bound are set to it). Not when another hook on
 * the function holds its slots, or the rule needs the stub. */
static bool install_direct(probe *pr)
{
    at_hook *h = &pr->hook;
    void *self, *real;
    int i = at_fdflow_direct_index(h->text->res.sym, &self, &real);
    if (i < 0 || at_cfg.hook_wrapper_stub || at_cfg.hook_wrapper_ffi || !at_direct_ok(h) ||
        at_direct_hooks[i] || call_target(&h->text->res, h->text->spec) != self)
        return false;
    for (int k = 0; k < hk_nprobes; k++) {
        at_hook *o = &hk_probes[k].hook;
        if (o != h && o->tier == 1 && !strcmp(o->text->res.sym, h->text->res.sym))
            return false;
    }
    char why[256] = "";
    const char *ver = hook_version(&h->text->res);
    int n = at_got_patch(h->text->res.sym, ver, NULL, NULL, 0);
    at_got_patch(h->text->res.sym, ver, self, why, sizeof why);
    if (why[0])
        return false; /* a slot could not be rewritten: the stub's way rewrites them and reports it */
    h->orig = real;
    h->wrapper = self;
    h->nslots = n;
    h->tier = 1;
    hk_fast_plan(pr);
    __atomic_store_n(&at_direct_hooks[i], h, __ATOMIC_RELEASE);
    __atomic_fetch_or(&at_hot.direct, (1ull << i) | (h->enter_noop ? 0 : 1ull << (32 + i)),
                      __ATOMIC_RELEASE);
    return true;
}

static void install(probe *pr)
{
    at_hook *h = &pr->hook;
    pr->plain_kind = pr->r->plain ? pr->r->kind : NULL;
    char why[256] = "";
    if (at_resolve(h->text->spec, &h->text->res, why, sizeof why) < 0) {
        pr->pending = true;
        snprintf(h->text->why, sizeof h->text->why, "%s", why);
        return;
    }
    pr->pending = false;
    h->addr = h->text->res.addr;
    const at_hc_entry *e = pr->r->e;
    if (h->text->res.table == AT_SYM_OFFSET && e->build_id[0]) {
        char id[128];
        at_module_build_id(h->text->res.module, id, sizeof id);
        if (strcmp(id, e->build_id)) {
            /* the module's path cut to what leaves room for the rest */
            snprintf(h->text->why, sizeof h->text->why, "%.200s has build-id %s, the config names %s",
                     h->text->res.module, id[0] ? id : "(none)", e->build_id);
            return;
        }
    }
    /* an alias is hooked where modules import it, never by patching: the function's own entry is
     * patched already, or its other names' GOT slots are */
    int tier = pr->alias_of ? AT_HC_TIER_GOT : pr->r->e->tier;
    bool got = tier != AT_HC_TIER_ENTRY && h->text->res.exported && !h->text->res.is_exe && h->text->res.sym[0] &&
               at_got_patch(h->text->res.sym, hook_version(&h->text->res), NULL, NULL, 0) > 0;
    if (tier == AT_HC_TIER_GOT && !got) {
        snprintf(h->text->why, sizeof h->text->why, "no module imports it through a GOT slot (tier = got)");
        pr->pending = pr->alias_of != NULL; /* a module loaded later may */
        return;
    }
    /* The register-saving stub serves GOT slots too, typed or not: it reads a typed call's arguments
     * from the registers and stack slots the caller used, and its code and data are a few pages that
     * a server's hooked calls share, where a libffi closure walked its trampoline, libffi's closure and
     * call code and the call interface on pages of their own at every call (between two system calls
     * of a real server all of them cold: about three times the stub's cost per call). libffi serves
     * a typed GOT hook only when the stubs run out. */
    if (got && install_direct(pr))
        return;
    bool ffi = got && h->sig && !pr->alias_of;
    if (!h->wrapper && (!ffi || !at_cfg.hook_wrapper_ffi || at_ffi_make(h, why, sizeof why) != 0) &&
        at_stub_make(h) != 0) {
        if (!ffi || at_ffi_make(h, why, sizeof why) != 0) {
            snprintf(h->text->why, sizeof h->text->why, "%s", ffi ? why : "no stub left (512 hooks at most)");
            return;
        }
    }
    if (got) {
        h->orig = call_target(&h->text->res, h->text->spec);
        /* the same function hooked by an earlier entry: its wrapper holds the slots now, and
         * calling through it keeps both hooks */
        for (int i = 0; i < hk_nprobes; i++) {
            at_hook *o = &hk_probes[i].hook;
            if (o != h && o->tier == 1 && !strcmp(o->text->res.sym, h->text->res.sym) &&
                o->text->res.addr == h->text->res.addr)
                h->orig = o->wrapper;
        }
        int n = at_got_patch(h->text->res.sym, hook_version(&h->text->res), h->wrapper, why, sizeof why);
        if (n > 0) {
            h->tier = 1;
            h->nslots = n;
            return;
        }
    }
    if (h->closure) {
        snprintf(h->text->why, sizeof h->text->why, "its GOT slots could not be rewritten (%s)", why);
        return;
    }
    if (at_entry_patch(h, why, sizeof why) == 0) {
        h->tier = 2;
        return;
    }
    snprintf(h->text->why, sizeof h->text->why, "%s", why);
}

/* Is the parent process traced too (this shim mapped in it)? Then this is a child it ran (a shell,
 * a helper), where a config written for the parent usually names nothing. */
static bool parent_traced(void)
{
    static int anchor;
    Dl_info di;
    if (!dladdr(&anchor, &di) || !di.dli_fname)
        return false;
    char path[64], line[4352];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)getppid());
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, di.dli_fname) != NULL;
    fclose(f);
    return found;
}

extern int at_exec_generation; /* process.c: execs of this pid before this image */

static void summary(void)
{
    int got = 0, entry = 0, skipped = 0, missing = 0;
    char skip[2048] = "";
    size_t off = 0;
    for (int i = 0; i < hk_nbase; i++) {
        at_hook *h = &hk_probes[i].hook;
        if (h->tier == 1)
            got++;
        else if (h->tier == 2)
            entry++;
        else {
            skipped++;
            missing += hk_probes[i].pending;
            int k = snprintf(skip + off, sizeof skip - off, "%s%s (%s)", skipped > 1 ? "; " : "",
                             h->text->spec, h->text->why);
            if (k > 0 && off + (size_t)k < sizeof skip)
                off += (size_t)k;
        }
    }
    /* A child of a traced program (a shell, a helper it runs) or a later image of an exec chain
     * (wrapper scripts) stays quiet unless a function was found there and refused: the first
     * image's line said what the config hooks. */
    if (missing == skipped && (at_exec_generation > 0 || parent_traced()))
        return;
    /* ACTTRACE_QUIET: only a function found and refused is worth the line */
    if (at_cfg.quiet && missing == skipped)
        return;
    /* and, on the same line, the other names of libc functions hooked with them */
    char al[2048] = "";
    size_t aoff = 0;
    for (int i = hk_nbase; i < hk_nprobes; i++) {
        const at_hook *h = &hk_probes[i].hook;
        if (h->tier != 1)
            continue;
        int k = snprintf(al + aoff, sizeof al - aoff, "%s%s (%s, %d slot%s)",
                         aoff ? ", " : "; aliases: ", h->text->res.sym,
                         hk_probes[i].alias_of->hook.text->res.sym, h->nslots, h->nslots > 1 ? "s" : "");
        if (k > 0 && aoff + (size_t)k < sizeof al)
            aoff += (size_t)k;
    }
    /* which program the line is about: under a wrapper (a shell, a script) the first is not the
     * one whose functions the config names */
    fprintf(stderr, "acttrace: %d of %d functions hooked (%d GOT, %d entry)%s%s%s [in %s, pid %d]\n",
            got + entry, hk_nbase, got, entry, skipped ? "; skipped: " : "", skip, al,
            program_invocation_short_name, (int)at_pid);
}

/* Whether a configured function is hooked now or may be once a later dlopen brings its module: the
 * trace then starts whole in the constructor (hooks.c's callers can run in signal handlers, where
 * starting a thread or loading libunwind for a first event could deadlock). */
bool at_hooks_any(void)
{
    for (int i = 0; i < hk_nbase; i++)
        if (hk_probes[i].hook.tier == 1 || hk_probes[i].hook.tier == 2 || hk_probes[i].pending)
            return true;
    return false;
}

/* ---------------- aliases ---------------- */

/* glibc's fortified variants take the function's parameters plus the caller's buffer size (the
 * printf family: a flag, and a size for those writing into a buffer), at a place fixed per
 * function: at the end unless listed here. */
typedef struct fortify_ins {
    const char *fn;
    uint8_t at, flag, size; /* inserted before parameter at: flag (int), then size (size_t) */
} fortify_ins;
static const fortify_ins hk_fortify[] = {
    {"recv", 3, 0, 1}, {"recvfrom", 3, 0, 1}, {"fgets", 1, 0, 1}, {"fgets_unlocked", 1, 0, 1},
    {"fgetws", 1, 0, 1}, {"fgetws_unlocked", 1, 0, 1}, {"fread", 1, 0, 1},
    {"fread_unlocked", 1, 0, 1}, {"printf", 0, 1, 0}, {"vprintf", 0, 1, 0}, {"wprintf", 0, 1, 0},
    {"vwprintf", 0, 1, 0}, {"fprintf", 1, 1, 0}, {"vfprintf", 1, 1, 0}, {"fwprintf", 1, 1, 0},
    {"vfwprintf", 1, 1, 0}, {"dprintf", 1, 1, 0}, {"vdprintf", 1, 1, 0}, {"asprintf", 1, 1, 0},
    {"vasprintf", 1, 1, 0}, {"obstack_printf", 1, 1, 0}, {"obstack_vprintf", 1, 1, 0},
    {"syslog", 1, 1, 0}, {"vsyslog", 1, 1, 0}, {"sprintf", 1, 1, 1}, {"vsprintf", 1, 1, 1},
    {"snprintf", 2, 1, 1}, {"vsnprintf", 2, 1, 1}, {"swprintf", 2, 1, 1}, {"vswprintf", 2, 1, 1},
    {"longjmp", 0, 0, 0}, {"siglongjmp", 0, 0, 0},
};
/* __NAME_2: open and its kin without the optional mode (and attributes): the parameters kept */
static const struct {
    const char *fn;
    int keep;
} hk_fortify2[] = {{"open", 2}, {"open64", 2}, {"openat", 3}, {"openat64", 3}, {"mq_open", 2}};

/* The probe of alias name of base's function: the same rule and captures, its parameters mapped
 * to the variant's. false when the variant's parameters are not known (a typed hook then skips
 * it: a capture would read the wrong register). */
static bool alias_probe(const at_hc_probe *base, const char *module, const char *name,
                        at_hc_probe *ap)
{
    *ap = *base;
    const char *lib = strrchr(module, '/');
    snprintf(ap->symbol, sizeof ap->symbol, "%.200s!%s", lib ? lib + 1 : module, name);
    size_t l = strlen(name);
    bool chk = l > 6 && !strncmp(name, "__", 2) && !strcmp(name + l - 4, "_chk");
    bool two = !chk && l > 4 && !strncmp(name, "__", 2) && !strcmp(name + l - 2, "_2");
    if (!ap->has_sig || (!chk && !two))
        return true; /* another name of the very function, or a signature-less hook */
    char fn[64];
    snprintf(fn, sizeof fn, "%.*s", (int)(l - (chk ? 6 : 4)), name + 2);
    at_sig *sg = &ap->sig;
    snprintf(sg->fname, sizeof sg->fname, "%s", name);
    if (two) {
        for (size_t i = 0; i < sizeof hk_fortify2 / sizeof *hk_fortify2; i++)
            if (!strcmp(fn, hk_fortify2[i].fn)) {
                if (sg->nparams > hk_fortify2[i].keep)
                    sg->nparams = hk_fortify2[i].keep; /* captures beyond them read 0 */
                return true;
            }
        return false;
    }
    fortify_ins ins = {fn, (uint8_t)sg->nparams, 0, 1};
    for (size_t i = 0; i < sizeof hk_fortify / sizeof *hk_fortify; i++)
        if (!strcmp(fn, hk_fortify[i].fn))
            ins = hk_fortify[i];
    int n = ins.flag + ins.size;
    if (ins.at > sg->nparams || sg->nparams + n > AT_SIG_MAX_PARAMS)
        return false;
    for (int i = sg->nparams - 1; i >= ins.at; i--)
        sg->p[i + n] = sg->p[i];
    for (int k = 0; k < n; k++)
        sg->p[ins.at + k] = (at_sig_param){.type = k < ins.flag ? AT_CT_I32 : AT_CT_U64};
    sg->nparams += n;
    for (int i = 0; i < ap->ncapture; i++)
        if (ap->capture[i] >= ins.at)
            ap->capture[i] += n;
    if (ap->key >= ins.at)
        ap->key += n;
    if (ap->has_when && ap->when_what >= ins.at)
        ap->when_what += n;
    return true;
}

static bool is_libc(const char *module)
{
    const char *b = strrchr(module, '/');
    return !strncmp(b ? b + 1 : module, "libc.so", 7);
}

/* libc's definition of the function r names: r itself, or (r found first in an interposer
 * loaded before libc, a sanitizer's runtime or a preloaded allocator) libc's own of that name. */
static const at_resolved *libc_def(const at_resolved *r, at_resolved *buf)
{
    if (is_libc(r->module))
        return r;
    char spec[300], why[256];
    if (!r->sym[0] || r->is_exe || r->table != AT_SYM_DYNSYM)
        return NULL;
    snprintf(spec, sizeof spec, "libc.so!%s", r->sym);
    return at_resolve(spec, buf, why, sizeof why) == 0 ? buf : NULL;
}

/* A libc function's other names are hooked with it (the program may import open64 or __open_2
 * rather than open), through the GOT only: an entry patch covers every name of the function
 * already. Called with the install lock held, after the config's functions are installed. */
static void add_aliases(void)
{
    for (int i = 0; i < hk_nbase; i++) {
        probe *b = &hk_probes[i];
        at_resolved lbuf;
        const at_resolved *lc;
        if (b->pending || b->hook.tier == 2 || strchr(b->hook.text->spec, '@') ||
            !(lc = libc_def(&b->hook.text->res, &lbuf)))
            continue;
        char names[HK_ALIASES_EACH][64];
        int n = at_resolve_aliases(lc, names, HK_ALIASES_EACH);
        for (int k = 0; k < n && hk_nprobes < hk_nbase + HK_ALIASES_MAX; k++) {
            at_hc_probe *ap = malloc(sizeof *ap);
            if (!ap)
                return;
            if (!alias_probe(b->p, lc->module, names[k], ap)) {
                free(ap);
                continue;
            }
            probe *pr = &hk_probes[hk_nprobes++];
            *pr = (probe){.r = b->r, .role = b->role, .p = ap, .alias_of = b,
                          .hook.text = pr->hook.text};
            pc_make(pr);
            snprintf(pr->hook.text->spec, sizeof pr->hook.text->spec, "%s", ap->symbol);
            pr->hook.sig = ap->has_sig ? &ap->sig : NULL;
            pr->hook.user = pr;
            install(pr);
        }
    }
}

static int rule_make(rule *r, const at_hc_entry *e, const char *provider, char *err, size_t n)
{
    r->e = e;
    r->ekind = e->kind;
    r->paired = e->paired;
    r->callback = (int8_t)e->callback;
    r->callback_arg = (int8_t)e->callback_arg;
    static const unsigned from_env[] = {AT_HC_STACK_START, AT_HC_STACK_STOP,
                                        AT_HC_STACK_START | AT_HC_STACK_STOP, 0};
    r->stacks = e->stacks_set ? e->stacks : from_env[at_cfg.stacks];
    if (!at_cfg.stack_depth)
        r->stacks = 0;
    r->fields = calloc(4 * AT_HC_MAX_CAPTURE + 2, sizeof *r->fields);
    if (!r->fields) {
        snprintf(err, n, "out of memory");
        return -1;
    }
    at_field *sf = r->fields, *tf = r->fields + 2 * AT_HC_MAX_CAPTURE + 1;
    uint32_t ns = 0, nt = 0;
    if (e->kind == AT_HC_ACTIVITY) {
        if (e->paired) {
            ns = add_fields(sf, 0, &e->probe[0], 2);
            nt = add_fields(tf, 0, &e->probe[1], 0);
            r->key_is_fd = e->fd_key;
            if (kt_init(&r->keys) < 0) {
                snprintf(err, n, "cannot map the key table of %s", e->name);
                return -1;
            }
        } else {
            ns = add_fields(sf, 0, &e->probe[0], 0);
            nt = add_fields(tf, 0, &e->probe[0], 1);
            r->plain = !e->probe[0].has_when && e->probe[0].ncapture == 0 && r->stacks == 0;
            tf[nt].name = "Status";
            tf[nt++].type = NT_TYPE_UINT32;
        }
        at_activity_kind_desc d = {
            .provider = provider,
            .name = e->name,
            .flags = e->recursive ? AT_ACT_RECURSIVE : 0,
            .level = e->level,
            .keywords = e->keywords,
            .nstart_fields = ns,
            .start_fields = sf,
            .nstop_fields = nt,
            .stop_fields = tf,
        };
        r->kind = at_activity_kind_register(&d);
        if (!r->kind) {
            snprintf(err, n, "cannot register the activity %s", e->name);
            return -1;
        }
    } else if (e->kind == AT_HC_EVENT) {
        ns = add_fields(sf, 0, &e->probe[0], 2);
        for (int i = 0; i < e->probe[0].ncapture; i++)
            if (e->probe[0].capture[i] == AT_HC_RETURN)
                r->event_on_return = true;
        if (e->probe[0].has_when && e->probe[0].when_what == AT_HC_RETURN)
            r->event_on_return = true;
        at_event_desc d = {
            .provider = provider,
            .name = e->name,
            .level = e->level ? e->level : NT_LEVEL_INFO,
            .opcode = NT_OPCODE_INFO,
            .keywords = e->keywords,
            .nfields = ns,
            .fields = sf,
        };
        r->event = at_event_type_register(&d);
        if (!r->event) {
            snprintf(err, n, "cannot register the event %s", e->name);
            return -1;
        }
    } else if (e->kind == AT_HC_FLOW_KEYED) {
        if (kt_init(&r->keys) < 0) {
            snprintf(err, n, "cannot map the key table of %s", e->name);
            return -1;
        }
    }
    return 0;
}

/* dlsym: a configured function hooked through the GOT is returned as its wrapper, so calls through
 * the pointer are seen too (entry-patched functions need nothing: the function itself jumps).
 * RTLD_NEXT lookups depend on the caller's address, which a wrapper would replace with its own: they
 * jump straight to the real dlsym (a tail jump keeps the caller's return address) and are never
 * substituted. */
void *at_hk_dlsym_c(void *handle, const char *name);
__asm__(".text\n"
        ".globl at_hk_dlsym\n.hidden at_hk_dlsym\n.type at_hk_dlsym, @function\n"
        "at_hk_dlsym:\n"
        "  .cfi_startproc\n"
        "  cmpq $-1, %rdi\n" /* RTLD_NEXT */
        "  je 1f\n"
        "  jmp at_hk_dlsym_c\n"
        "1:\n"
        "  jmp *real_dlsym_fn(%rip)\n"
        "  .cfi_endproc\n"
        ".size at_hk_dlsym, . - at_hk_dlsym\n");

void *at_hk_dlsym_c(void *handle, const char *name)
{
    void *(*real)(void *, const char *) = (void *(*)(void *, const char *))real_dlsym_fn;
    void *r = real(handle, name);
    if (!r || !name || !at_on())
        return r;
    hk_rescan("an earlier dlopen"); /* after a bare-name dlopen: its modules are hooked now */
    for (int i = 0; i < hk_nprobes; i++) {
        at_hook *h = &hk_probes[i].hook;
        if (h->tier == 1 && (r == h->orig || r == (void *)h->text->res.addr) && !strcmp(h->text->res.sym, name))
            return h->wrapper;
    }
    return r;
}

/* Modules added since the last look (dl_iterate_phdr's count of loads). */
static unsigned long long hk_adds_seen;

static int adds_of(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    *(unsigned long long *)data = info->dlpi_adds;
    return 1;
}

/* Hook what new modules bring: their GOT slots, and functions that could not be resolved before. */
static void hk_rescan(const char *file)
{
    unsigned long long adds = 0;
    dl_iterate_phdr(adds_of, &adds);
    if (adds == __atomic_load_n(&hk_adds_seen, __ATOMIC_RELAXED))
        return;
    int e = errno;
    AT_INTERNAL_BEGIN();
    pthread_mutex_lock(&hk_install_lock);
    hk_adds_seen = adds;
    at_got_patch("dlopen", NULL, (void *)at_hk_dlopen, NULL, 0);
    if (real_dlsym_fn)
        at_got_patch("dlsym", NULL, (void *)at_hk_dlsym, NULL, 0);
    for (int i = 0; i < hk_nprobes; i++) {
        at_hook *h = &hk_probes[i].hook;
        if (h->tier == 1)
            h->nslots += at_got_patch(h->text->res.sym, hook_version(&h->text->res), h->wrapper, NULL, 0);
        else if (h->tier == 0 && hk_probes[i].pending) {
            install(&hk_probes[i]);
            if (!hk_probes[i].pending && !hk_probes[i].alias_of && !(at_cfg.quiet && h->tier))
                fprintf(stderr, "acttrace: %s %s after dlopen(%s)%s%s\n", h->text->spec,
                        h->tier == 1 ? "hooked (GOT)" : h->tier == 2 ? "hooked (entry)" : "not hooked",
                        file, h->tier ? "" : ": ", h->tier ? "" : h->text->why);
        }
    }
    pthread_mutex_unlock(&hk_install_lock);
    AT_INTERNAL_END();
    errno = e;
}

/* dlopen, through the GOT slots of modules that import it (only when the config hooks something).
 * A path with a '/' (or NULL) is opened from here and the new modules are hooked at once. A bare
 * name is searched along the *caller's* DT_RUNPATH, which glibc finds from the return address: it
 * tail-jumps to the real dlopen (the caller's return address stays), and the new modules are hooked
 * at the program's next dlopen or dlsym (the way a loaded library's functions are usually reached). */
int at_hk_dlopen_direct(const char *file);
void *at_hk_dlopen_c(const char *file, int mode);
__asm__(".text\n"
        ".globl at_hk_dlopen\n.hidden at_hk_dlopen\n.type at_hk_dlopen, @function\n"
        "at_hk_dlopen:\n"
        "  .cfi_startproc\n"
        "  pushq %rdi\n  .cfi_adjust_cfa_offset 8\n"
        "  pushq %rsi\n  .cfi_adjust_cfa_offset 8\n"
        "  subq $8, %rsp\n  .cfi_adjust_cfa_offset 8\n"
        "  call at_hk_dlopen_direct\n"
        "  addq $8, %rsp\n  .cfi_adjust_cfa_offset -8\n"
        "  popq %rsi\n  .cfi_adjust_cfa_offset -8\n"
        "  popq %rdi\n  .cfi_adjust_cfa_offset -8\n"
        "  testl %eax, %eax\n"
        "  jnz at_hk_dlopen_c\n"
        "  jmp *real_dlopen_fn(%rip)\n"
        "  .cfi_endproc\n"
        ".size at_hk_dlopen, . - at_hk_dlopen\n");

int at_hk_dlopen_direct(const char *file)
{
    if (!file)
        return 1;
    int e = errno;
    hk_rescan("an earlier dlopen"); /* a bare-name dlopen before this one */
    errno = e;
    return strchr(file, '/') != NULL;
}

void *at_hk_dlopen_c(const char *file, int mode)
{
    void *(*real)(const char *, int) = (void *(*)(const char *, int))real_dlopen_fn;
    void *r = real(file, mode);
    if (r && at_on())
        hk_rescan(file ? file : "NULL");
    return r;
}

/* A fork child has one thread: locks another thread of the parent held stay held forever. And the
 * hooked calls the forking thread was inside (the fork itself when it is hooked, and what called it)
 * are the parent's. Their activities were started, and are stopped, in the
 * parent's file; the child's returns from them write no Stop and leave the current activity as the
 * fork left it, so the child's own work and its execs stay under the activity that forked it. Off
 * the thread's list, a return finds its call unlisted, as it does one that a longjmp abandoned. */
AT_FORK_TEXT static void hk_atfork_child(void)
{
    hk_nlive = 0;
    at_mutex_fork_reset(&hk_install_lock);
    for (int i = 0; hk_conf && i < hk_conf->nentries; i++)
        if (hk_rules[i].keys.direct)
            at_mutex_fork_reset(&hk_rules[i].keys.lock);
}

/* The rules and probes of a config of up to ~20 rules, in the library's own data on the pages right
 * after the interposers' page (shim/start.ld at_hot_bss): a hooked call between two system calls
 * reads its probe and rule there, and the translation of a page next to the one the interposer and
 * every event read is found from the same page-table line, where a block from the program's heap
 * took a walk of its own through page-table lines the program's work had evicted (the first load
 * from it was ~60% of an interposer's rule at the return in nginx's worker). Zero pages until the
 * install writes them: the probes of aliases never used are never touched. It starts on the page of
 * the stack walker's words (AT_WALK_BSS), right after them. */
static char hk_store[64 << 10] __attribute__((aligned(64), section(".bss.at_hooks")));
static bool hk_store_taken;
/* Its first bytes hold the structs of the rules' event types (their Start, Stop or event: about a
 * dozen), so that the types, the rules and the first probes share a page. */
#define HK_STORE_TYPES 1024u

int at_hooks_install(const at_hookconf *hc, char *err, size_t n)
{
    hk_conf = hc;
    uintptr_t tp;
    __asm__("mov %%fs:0, %0" : "=r"(tp));
    hk_errno_off = (long)((uintptr_t)&errno - tp); /* before any hook is installed */
    if (!hc->nentries)
        return 0;
    if (at_dynlib_load(err, n) < 0)
        return -1;
    const char *provider = hc->provider[0] ? hc->provider : AT_ACTIVITY_PROVIDER;
    /* the rules and then the probes in one block: a hooked call reads its probe and its rule */
    size_t nprobes = (size_t)hc->nentries * 2 + HK_ALIASES_MAX;
    size_t rules_size = (size_t)hc->nentries * sizeof *hk_rules; /* a multiple of 64 */
    size_t block_size = rules_size + nprobes * sizeof *hk_probes;
    bool own = !hk_store_taken && block_size <= sizeof hk_store - HK_STORE_TYPES; /* zero already */
    char *block = own ? hk_store + HK_STORE_TYPES : aligned_alloc(64, block_size);
    if (block && !own)
        memset(block, 0, block_size);
    at_hook_text *texts = calloc(nprobes, sizeof *texts);
    if (!block || !texts) {
        if (!own)
            free(block);
        free(texts);
        snprintf(err, n, "out of memory");
        return -1;
    }
    hk_store_taken |= own;
    if (own)
        at_event_type_hot_region(hk_store, HK_STORE_TYPES);
    hk_rules = (rule *)block;
    hk_probes = (probe *)(block + rules_size);
    for (size_t i = 0; i < nprobes; i++)
        hk_probes[i].hook.text = &texts[i];
    for (int i = 0; i < hc->nentries; i++) {
        const at_hc_entry *e = &hc->entries[i];
        if (e->kind == AT_HC_FLOW_CALLBACK && e->callback_arg == AT_HC_NONE) {
            fprintf(stderr, "acttrace: %s:%d: [flow %s]: a callback flow needs 'callback_arg' "
                            "(the argument the callback receives); skipped\n",
                    hc->path, e->pos.line, e->name);
            continue;
        }
        if (rule_make(&hk_rules[i], e, provider, err, n) < 0) {
            at_event_type_hot_region(NULL, 0);
            return -1;
        }
        int np = (e->paired || e->kind == AT_HC_FLOW_KEYED) ? 2 : 1;
        for (int k = 0; k < np; k++) {
            probe *pr = &hk_probes[hk_nprobes++];
            pr->r = &hk_rules[i];
            pr->role = k;
            pr->p = &e->probe[k];
            pc_make(pr);
            snprintf(pr->hook.text->spec, sizeof pr->hook.text->spec, "%s", e->probe[k].symbol);
            pr->hook.sig = e->probe[k].has_sig ? &e->probe[k].sig : NULL;
            pr->hook.user = pr;
        }
    }
    at_event_type_hot_region(NULL, 0);
    bool stacks = false;
    for (int i = 0; i < hc->nentries; i++)
        stacks |= hk_rules[i].stacks != 0;
    if (stacks) {
        char serr[256];
        hk_depth = at_cfg.stack_depth < AT_STACK_MAX_DEPTH ? at_cfg.stack_depth : AT_STACK_MAX_DEPTH;
        at_shim_stack_own_init();
        if (at_stack_init((enum at_stack_mode)at_cfg.stack_walker, serr, sizeof serr) != 0)
            fprintf(stderr, "acttrace: stacks: %s\n", serr);
    }
    pthread_atfork(NULL, NULL, hk_atfork_child);
    pthread_mutex_lock(&hk_install_lock);
    hk_nbase = hk_nprobes;
    for (int i = 0; i < hk_nprobes; i++)
        install(&hk_probes[i]);
    add_aliases();
    real_dlopen_fn = dlsym(RTLD_DEFAULT, "dlopen");
    if (real_dlopen_fn && hk_nprobes)
        at_got_patch("dlopen", NULL, (void *)at_hk_dlopen, NULL, 0);
    dl_iterate_phdr(adds_of, &hk_adds_seen);
    real_dlsym_fn = dlsym(RTLD_DEFAULT, "dlsym");
    if (real_dlsym_fn && hk_nprobes)
        at_got_patch("dlsym", NULL, (void *)at_hk_dlsym, NULL, 0);
    pthread_mutex_unlock(&hk_install_lock);
    summary();
    return 0;
}

/* ---------------- acttrace check ---------------- */

static const char *table_name(at_sym_table t)
{
    switch (t) {
    case AT_SYM_DYNSYM: return ".dynsym";
    case AT_SYM_SYMTAB: return ".symtab";
    case AT_SYM_DEBUG: return "debug file .symtab";
    case AT_SYM_OFFSET: return "module+offset";
    }
    return "?";
}

/* acttrace check: the other names of a libc function hooked with it, and where each is bound. */
static void check_aliases(FILE *out, const at_resolved *res, const at_hc_probe *p,
                          const at_hc_entry *e)
{
    char names[HK_ALIASES_EACH][64];
    int n = at_resolve_aliases(res, names, HK_ALIASES_EACH);
    for (int k = 0; k < n; k++) {
        at_hc_probe ap;
        at_resolved ar;
        char why[512];
        fprintf(out, "  alias %s: ", names[k]);
        if (!alias_probe(p, res->module, names[k], &ap)) {
            fprintf(out, "NOT hooked: its parameters are not known for the signature of [%s]\n",
                    e->name);
            continue;
        }
        if (at_resolve(ap.symbol, &ar, why, sizeof why) < 0) {
            fprintf(out, "not found (%s)\n", why);
            continue;
        }
        int slots = at_got_patch(ar.sym, hook_version(&ar), NULL, NULL, 0);
        if (slots > 0)
            fprintf(out, "hooked by GOT (%d slot%s)%s\n", slots, slots > 1 ? "s" : "",
                     ap.has_sig && strcmp(ap.sig.fname, p->sig.fname)
                         ? ", parameters mapped to the variant's"
                         : "");
        else
            fprintf(out, "no module imports it now (hooked if one loaded later does)\n");
    }
}

/* ACTTRACE_CHECK=1 (acttrace check): the program is loaded, main has not run. Resolve every
 * entry and say how it would be hooked, or why not, without changing anything; then exit. */
int at_hooks_check(const at_hookconf *hc, FILE *out)
{
    int ok = 0, total = 0;
    char lerr[256];
    if (hc->nentries && at_dynlib_load(lerr, sizeof lerr) < 0) {
        fprintf(out, "acttrace: %s: no function can be hooked\n", lerr);
        return 1;
    }
    /* where each function with a signature was found, for the tool's DWARF comparison:
     * "ENTRY PROBE OFFSET MODULE" lines (offset = address - load bias, the DWARF address) */
    const char *sigs_path = getenv("ACTTRACE_CHECK_SIGS");
    FILE *sigs = sigs_path && *sigs_path ? fopen(sigs_path, "we") : NULL;
    for (int i = 0; i < hc->nentries; i++) {
        const at_hc_entry *e = &hc->entries[i];
        static const char *const kinds[] = {"", "activity", "event", "flow", "flow"};
        int np = (e->paired || e->kind == AT_HC_FLOW_KEYED) ? 2 : 1;
        for (int k = 0; k < np; k++) {
            const at_hc_probe *p = &e->probe[k];
            total++;
            fprintf(out, "[%s %s] %s: ", kinds[e->kind], e->name, p->symbol);
            if (e->kind == AT_HC_FLOW_CALLBACK && e->callback_arg == AT_HC_NONE) {
                fprintf(out, "NOT hooked: a callback flow needs 'callback_arg'\n");
                continue;
            }
            at_resolved res;
            char why[512];
            if (at_resolve(p->symbol, &res, why, sizeof why) < 0) {
                fprintf(out, "not found now (%s); tried again whenever a library is loaded with "
                             "dlopen\n", why);
                continue;
            }
            fprintf(out, "found in %s (%s, +0x%lx", res.module, table_name(res.table),
                    (unsigned long)(res.addr - res.base));
            if (sigs && p->has_sig) {
                char exe[4096] = "";
                if (!res.module[0]) {
                    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
                    exe[n > 0 ? n : 0] = 0;
                }
                fprintf(sigs, "%d %d %lx %s\n", i, k, (unsigned long)(res.addr - res.base),
                        res.module[0] ? res.module : exe);
            }
            if (res.size)
                fprintf(out, ", %zu bytes", res.size);
            fprintf(out, "); ");
            if (res.table == AT_SYM_OFFSET) {
                char id[128];
                at_module_build_id(res.module, id, sizeof id);
                if (e->build_id[0] && strcmp(id, e->build_id)) {
                    fprintf(out, "NOT hooked: the module has build-id %s, the config names %s\n",
                            id[0] ? id : "(none)", e->build_id);
                    continue;
                }
                if (!e->build_id[0])
                    fprintf(out, "unguarded: add 'build_id = %s'; ", id[0] ? id : "(none)");
            }
            int slots = 0;
            if (e->tier != AT_HC_TIER_ENTRY && res.exported && !res.is_exe && res.sym[0])
                slots = at_got_patch(res.sym, hook_version(&res), NULL, NULL, 0);
            if (e->tier == AT_HC_TIER_GOT && slots == 0) {
                fprintf(out, "NOT hooked: no module imports it through a GOT slot (tier = got)\n");
                continue;
            }
            const char *wrap = !p->has_sig ? "signature-less stub"
                                           : "typed stub (arguments from the saved registers)";
            if (slots > 0) {
                fprintf(out, "hooked by GOT (%d slot%s), %s\n", slots, slots > 1 ? "s" : "", wrap);
                ok++;
                at_resolved lbuf;
                const at_resolved *lc = strchr(p->symbol, '@') ? NULL : libc_def(&res, &lbuf);
                if (lc)
                    check_aliases(out, lc, p, e);
            } else if (at_entry_check(res.addr, res.size, why, sizeof why) == 0) {
                fprintf(out, "hooked by entry patching, %s\n", wrap);
                ok++;
            } else
                fprintf(out, "NOT hooked: %s\n", why);
        }
    }
    fprintf(out, "%d of %d functions can be hooked\n", ok, total);
    if (sigs)
        fclose(sigs);
    return ok == total ? 0 : 1;
}
