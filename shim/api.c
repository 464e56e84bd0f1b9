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
static pthread_mutex_t at_api_lock = PTHREAD_MUTEX_INITIALIZER;

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

/* This thread's last few look-ups, by the caller's pointers: programs mark with string literals, so
 * the same pointers come back. The text is still compared (a reused buffer may hold another name
 * now) but neither hashed nor looked up in the table: ~50 instructions instead of ~220 per mark. An
 * entry is filled with its a pointer cleared and published last, so a signal handler of this
 * thread never takes half an entry. */
#define RECENT 4
typedef struct recent {
    const char *a, *b; /* the caller's pointers (a NULL: empty) */
    const char *ka, *kb; /* the table's copies of their text */
    void *obj;
    int tag;
} recent;
static AT_TLS recent at_api_recent[RECENT];
static AT_TLS unsigned at_api_recent_next;

static void *recent_get(const char *a, const char *b, int tag)
{
    for (unsigned i = 0; i < RECENT; i++) {
        recent *r = &at_api_recent[i];
        if (r->a == a && r->b == b && r->tag == tag) {
            __atomic_signal_fence(__ATOMIC_ACQUIRE);
            if (strcmp(r->ka, a) == 0 && strcmp(r->kb, b ? b : "") == 0)
                return r->obj;
        }
    }
    return NULL;
}

static void recent_put(const char *a, const char *b, int tag, const char *key, void *obj)
{
    recent *r = &at_api_recent[at_api_recent_next++ % RECENT];
    r->a = NULL;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    r->b = b;
    r->tag = tag;
    r->ka = key + 1;
    r->kb = key + 2 + strlen(key + 1);
    r->obj = obj;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    r->a = a;
}

AT_HOT_FN static void *lookup(const char *a, const char *b, int tag, unsigned flags, make_fn make)
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
