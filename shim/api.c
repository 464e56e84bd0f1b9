/* api.c: the entry points behind acttrace.h. Names are mapped to activity kinds and event types
 * through a lock-free table (readers take no lock; a miss registers under a mutex), so a Start by
 * name costs a hash of the name plus the engine's Start. */
#include "acttrace.h"
#include "shim.h"
#include "stack.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NSLOTS 4096u /* names and event shapes a program marks by hand; beyond: slow path each call */

typedef struct api_slot {
    uint64_t hash;
    const char *key; /* owned copy; published last (release) */
    void *obj;
} api_slot;

static api_slot at_api_table[NSLOTS];
static pthread_mutex_t at_api_lock AT_FORK_DATA = PTHREAD_MUTEX_INITIALIZER;

/* A fork child must not inherit the lock held by a thread that does not exist there. It is made
 * afresh in the child rather than taken before the fork: its holder registers an activity kind
 * (activity.c's lock, then the event types'), and taking it in a prepare handler, which runs after
 * the writer's (the event types' lock), could deadlock the parent. A slot being filled at the
 * fork is not published in the child (its key goes last), so the table stays consistent. */
AT_FORK_TEXT static void api_fork_child(void)
{
    at_mutex_fork_reset(&at_api_lock);
}

__attribute__((constructor)) static void api_init(void)
{
    pthread_atfork(NULL, NULL, api_fork_child);
}

static uint64_t hash_key(const char *a, const char *b, int tag)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)tag;
    for (const char *s = a; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
    if (b)
        for (const char *s = b; *s; s++)
            h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h ? h : 1;
}

/* key layout: tag byte, a, NUL, b, NUL */
static bool key_eq(const char *key, const char *a, const char *b, int tag)
{
    if ((uint8_t)key[0] != (uint8_t)tag)
        return false;
    key++;
    if (strcmp(key, a) != 0)
        return false;
    key += strlen(a) + 1;
    return strcmp(key, b ? b : "") == 0;
}

typedef void *(*make_fn)(const char *a, const char *b, int tag, unsigned flags);

/* Recent look-ups by the caller's pointers, shared by all threads: programs mark with string
 * literals, so the same pointers come back, also from every new thread of a thread-per-connection
 * server (a per-thread cache missed there every time). The text is still compared (a reused buffer
 * may hold another name now) but neither hashed nor probed in the table: ~50 instructions instead of
 * ~220 per mark. Each entry has a sequence count, odd while it is written: a reader that sees it odd
 * or changed takes the slow path; a writer only tries, so a signal handler never waits on one. */
#define RECENT 64u
typedef struct recent {
    uint32_t seq;
    int tag;
    const char *a, *b;   /* the caller's pointers */
    const char *ka, *kb; /* the table's copies of their text (never freed) */
    void *obj;
} recent;
static recent at_api_recent[RECENT];

static inline uint32_t recent_slot(const char *a, const char *b, int tag)
{
    uint64_t h = ((uintptr_t)a * 0x9E3779B97F4A7C15ull) ^ ((uintptr_t)b * 0xC2B2AE3D27D4EB4Full) ^
                 (uint64_t)tag;
    return (uint32_t)(h >> 58) & (RECENT - 1);
}

static void *recent_get(const char *a, const char *b, int tag)
{
    recent *r = &at_api_recent[recent_slot(a, b, tag)];
    uint32_t s0 = __atomic_load_n(&r->seq, __ATOMIC_ACQUIRE);
    if (s0 & 1)
        return NULL;
    const char *ra = __atomic_load_n(&r->a, __ATOMIC_RELAXED);
    const char *rb = __atomic_load_n(&r->b, __ATOMIC_RELAXED);
    const char *ka = __atomic_load_n(&r->ka, __ATOMIC_RELAXED);
    const char *kb = __atomic_load_n(&r->kb, __ATOMIC_RELAXED);
    void *obj = __atomic_load_n(&r->obj, __ATOMIC_RELAXED);
    int rt = __atomic_load_n(&r->tag, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&r->seq, __ATOMIC_RELAXED) != s0 || ra != a || rb != b || rt != tag || !ka)
        return NULL;
    /* ka and kb point into the table's keys, which live as long as the process */
    return strcmp(ka, a) == 0 && strcmp(kb, b ? b : "") == 0 ? obj : NULL;
}

static void recent_put(const char *a, const char *b, int tag, const char *key, void *obj)
{
    recent *r = &at_api_recent[recent_slot(a, b, tag)];
    uint32_t s0 = __atomic_load_n(&r->seq, __ATOMIC_RELAXED);
    if ((s0 & 1) || !__atomic_compare_exchange_n(&r->seq, &s0, s0 + 1, false, __ATOMIC_ACQUIRE,
                                                 __ATOMIC_RELAXED))
        return; /* another writer (or this thread, interrupted): leave it */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&r->a, a, __ATOMIC_RELAXED);
    __atomic_store_n(&r->b, b, __ATOMIC_RELAXED);
    __atomic_store_n(&r->tag, tag, __ATOMIC_RELAXED);
    __atomic_store_n(&r->ka, key + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&r->kb, key + 2 + strlen(key + 1), __ATOMIC_RELAXED);
    __atomic_store_n(&r->obj, obj, __ATOMIC_RELAXED);
    __atomic_store_n(&r->seq, s0 + 2, __ATOMIC_RELEASE);
}

static void *lookup(const char *a, const char *b, int tag, unsigned flags, make_fn make)
{
    void *hit = recent_get(a, b, tag);
    if (hit)
        return hit;
    uint64_t h = hash_key(a, b, tag);
    for (uint32_t i = 0; i < NSLOTS; i++) {
        api_slot *s = &at_api_table[(h + i) & (NSLOTS - 1)];
        const char *k = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);
        if (!k)
            break;
        if (s->hash == h && key_eq(k, a, b, tag)) {
            recent_put(a, b, tag, k, s->obj);
            return s->obj;
        }
    }
    /* Miss: register under the lock (it allocates), then publish. */
    pthread_mutex_lock(&at_api_lock);
    void *obj = NULL;
    uint32_t i;
    for (i = 0; i < NSLOTS; i++) {
        api_slot *s = &at_api_table[(h + i) & (NSLOTS - 1)];
        if (!s->key)
            break;
        if (s->hash == h && key_eq(s->key, a, b, tag)) {
            obj = s->obj;
            goto out;
        }
    }
    obj = make(a, b, tag, flags);
    if (obj && i < NSLOTS) {
        size_t la = strlen(a), lb = b ? strlen(b) : 0;
        char *key = malloc(la + lb + 3);
        if (key) {
            key[0] = (char)tag;
            memcpy(key + 1, a, la + 1);
            memcpy(key + 2 + la, b ? b : "", lb + 1);
            api_slot *s = &at_api_table[(h + i) & (NSLOTS - 1)];
            s->hash = h;
            s->obj = obj;
            __atomic_store_n(&s->key, key, __ATOMIC_RELEASE);
        }
    }
out:
    pthread_mutex_unlock(&at_api_lock);
    return obj;
}

static void *make_kind(const char *name, const char *unused, int tag, unsigned flags)
{
    (void)unused;
    (void)tag;
    at_activity_kind_desc d = {.name = name, .flags = (flags & ACTTRACE_RECURSIVE) ? AT_ACT_RECURSIVE : 0};
    return at_activity_kind_register(&d);
}

static void *make_event(const char *name, const char *field, int tag, unsigned flags)
{
    (void)flags;
    at_field f = {field, NT_TYPE_INT64};
    if (tag == ACTTRACE_FIELD_STR)
        f.type = NT_TYPE_STRING;
    else if (tag == ACTTRACE_FIELD_DOUBLE)
        f.type = NT_TYPE_DOUBLE;
    at_event_desc d = {
        .provider = AT_ACTIVITY_PROVIDER,
        .name = name,
        .level = NT_LEVEL_INFO,
        .nfields = tag == ACTTRACE_FIELD_NONE ? 0 : 1,
        .fields = &f,
    };
    return at_event_type_register(&d);
}

AT_HOT_FN AT_EXPORT int acttrace_api_start(const char *name, unsigned flags)
{
    if (!at_on() || !name || !*name)
        return 0;
    int e = errno;
    at_activity_kind *k = lookup(name, NULL, 0x40, flags, make_kind);
    uintptr_t ips[AT_STACK_MAX_DEPTH];
    uint32_t n = k ? at_shim_stack(AT_CFG_STACKS_START, ips, AT_STACK_MAX_DEPTH, 1) : 0;
    at_activity *a = k ? at_activity_start(k, NULL, 0, ips, n) : NULL;
    errno = e;
    return a != NULL;
}

AT_HOT_FN AT_EXPORT int acttrace_api_stop(const char *name)
{
    if (!at_on() || !name || !*name)
        return 0;
    int e = errno;
    at_activity_kind *k = lookup(name, NULL, 0x40, 0, make_kind);
    uintptr_t ips[AT_STACK_MAX_DEPTH];
    uint32_t n = k ? at_shim_stack(AT_CFG_STACKS_STOP, ips, AT_STACK_MAX_DEPTH, 1) : 0;
    bool r = k && at_activity_stop(k, NULL, 0, ips, n);
    errno = e;
    return r;
}

AT_HOT_FN AT_EXPORT int acttrace_api_event(const char *name, const char *field, int type, const void *value)
{
    if (!at_on() || !name || !*name)
        return -1;
    if (type != ACTTRACE_FIELD_NONE && (!field || !*field))
        return -1;
    if (type < ACTTRACE_FIELD_NONE || type > ACTTRACE_FIELD_DOUBLE)
        return -1;
    int e = errno;
    at_event_type *t = lookup(name, type == ACTTRACE_FIELD_NONE ? NULL : field, type, 0, make_event);
    int r = -1;
    if (t && at_event_enabled(t)) {
        uint8_t buf[8 + 2 * 1024 + 2];
        at_payload pl;
        at_payload_init(&pl, buf, sizeof buf);
        if (type == ACTTRACE_FIELD_I64)
            at_payload_i64(&pl, *(const int64_t *)value);
        else if (type == ACTTRACE_FIELD_DOUBLE)
            at_payload_double(&pl, *(const double *)value);
        else if (type == ACTTRACE_FIELD_STR)
            at_payload_str(&pl, (const char *)value, 1024);
        r = at_activity_event(t, buf, (uint32_t)(pl.p - buf), NULL, 0);
    }
    errno = e;
    return r;
}

AT_EXPORT int acttrace_api_current_path(char *buf, size_t n)
{
    at_activity *a = at_on() ? at_activity_current() : NULL;
    if (!a) {
        if (n)
            buf[0] = 0;
        return -1;
    }
    return at_activity_path(a, buf, n);
}

AT_EXPORT void *acttrace_api_capture(void)
{
    return at_on() ? at_flow_capture() : NULL;
}

AT_EXPORT void *acttrace_api_enter(void *captured)
{
    return at_flow_enter((at_activity *)captured);
}

AT_EXPORT void acttrace_api_leave(void *prev)
{
    at_flow_leave((at_activity *)prev);
}

AT_EXPORT void acttrace_api_release(void *captured)
{
    at_flow_release((at_activity *)captured);
}
