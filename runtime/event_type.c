/* event_type.c: the registry of event types. Each type gets an index that is also its metadata id
 * in every file (so ids are never reused, also across rotated files), and its V5 metadata payload is
 * encoded once here so the flusher only copies bytes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "asroom.h"
#include "trace_int.h"

/* The types every start registers (the shim's, the writer's) fit the first table, on the start data
 * page: the full one is 512 KiB of .bss that a process registering few types never touches. */
#define AT_TYPES_FIRST 32
static at_event_type *types_first[AT_TYPES_FIRST] AT_START_DATA;
static at_event_type *types_all[AT_MAX_TYPES];
at_event_type **at_types_tab AT_START_DATA = types_first;
_Atomic uint32_t at_ntypes AT_START_DATA;
static pthread_mutex_t reg_lock AT_FORK_DATA = PTHREAD_MUTEX_INITIALIZER; /* taken around fork */
static uint8_t filt_level AT_START_DATA;
static uint64_t filt_keywords AT_START_DATA;

static bool passes(const at_event_type *t, uint8_t level, uint64_t keywords)
{
    if (level != 0 && t->level > level)
        return false;
    if (keywords != 0 && t->keywords != 0 && (t->keywords & keywords) == 0)
        return false;
    return true;
}

void at_event_type_apply_filter(uint8_t level, uint64_t keywords)
{
    pthread_mutex_lock(&reg_lock);
    filt_level = level;
    filt_keywords = keywords;
    uint32_t n = atomic_load(&at_ntypes);
    for (uint32_t i = 1; i <= n; i++)
        at_types_tab[i]->head.enabled = passes(at_types_tab[i], level, keywords);
    pthread_mutex_unlock(&reg_lock);
}

/* The registry's memory: types, their names and metadata live as long as the process, so they come
 * from blocks carved in order and never given back, not from the program's malloc (whose heap a
 * program that never allocates would otherwise get from the shim's start: two brk calls and pages
 * written before main). The first block is static and holds what every start registers (the shim's
 * and the writer's types, 3,984 bytes: one page with the safe-read ranges' first entries after
 * it, shim/start.ld); more blocks are mapped through asroom.c. */
#define REG_FIRST (4096u - 64u) /* page-aligned; the safe-read ranges' head fills the page */
#define REG_BLOCK (64u << 10)
/* page-aligned by shim/start.ld */
static uint8_t reg_first[REG_FIRST] __attribute__((aligned(16))) AT_START_BSS_2;
static pthread_mutex_t mem_lock AT_FORK_DATA = PTHREAD_MUTEX_INITIALIZER;
static at_as_carver reg_mem AT_START_DATA = {reg_first, REG_FIRST}; /* under mem_lock */

/* n bytes, zeroed, 16-byte aligned, for the life of the process; NULL when out of memory. */
void *at_reg_alloc(size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0 || n > REG_BLOCK)
        return NULL;
    pthread_mutex_lock(&mem_lock);
    void *p = at_as_carve(&reg_mem, n, REG_BLOCK, "event types");
    pthread_mutex_unlock(&mem_lock);
    return p;
}

char *at_reg_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = at_reg_alloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* Byte buffer used only while encoding metadata (registration is not on the hot path): on the
 * caller's stack, on the heap only past it (a type with dozens of fields). */
typedef struct mbuf {
    uint8_t *p;
    size_t len, cap;
    bool oom, heap;
    uint8_t in[768];
} mbuf;

static void mb_init(mbuf *b)
{
    b->p = b->in;
    b->len = 0;
    b->cap = sizeof b->in;
    b->oom = b->heap = false;
}

static void mb_done(mbuf *b)
{
    if (b->heap)
        free(b->p);
}

static void mb_put(mbuf *b, const void *v, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n > b->cap) {
        size_t nc = b->cap * 2;
        while (nc < b->len + n)
            nc *= 2;
        uint8_t *np = b->heap ? realloc(b->p, nc) : malloc(nc);
        if (!np) {
            b->oom = true;
            return;
        }
        if (!b->heap)
            memcpy(np, b->p, b->len);
        b->p = np;
        b->cap = nc;
        b->heap = true;
    }
    memcpy(b->p + b->len, v, n);
    b->len += n;
}
static void mb_u32(mbuf *b, uint32_t v) { mb_put(b, &v, 4); }

/* UTF-16LE + NUL, through the payload encoder so both agree on invalid UTF-8. ASCII (every name the
 * shim and the writer register at each start) is widened here directly: the encoder's checks per
 * character and a buffer per string were a third of a traced image's start in instructions. */
static void mb_str(mbuf *b, const char *s)
{
    size_t n = strlen(s);
    size_t ascii = 0;
    while (ascii < n && (unsigned char)s[ascii] < 0x80)
        ascii++;
    if (ascii == n) {
        uint8_t w[128];
        size_t k = 0;
        for (size_t i = 0; i <= n; i++) { /* the NUL too */
            w[k++] = (uint8_t)s[i];
            w[k++] = 0;
            if (k == sizeof w || i == n) {
                mb_put(b, w, k);
                k = 0;
            }
        }
        return;
    }
    size_t cap = n * 2 + 2; /* each byte gives at most one UTF-16 unit */
    uint8_t *tmp = malloc(cap);
    if (!tmp) {
        b->oom = true;
        return;
    }
    at_payload pl;
    at_payload_init(&pl, tmp, cap);
    at_payload_str(&pl, s, (size_t)-1);
    mb_put(b, tmp, (size_t)(pl.p - tmp));
    free(tmp);
}

static bool valid_type(uint32_t t)
{
    switch (t) {
    case NT_TYPE_BOOLEAN: case NT_TYPE_CHAR: case NT_TYPE_SBYTE: case NT_TYPE_BYTE:
    case NT_TYPE_INT16: case NT_TYPE_UINT16: case NT_TYPE_INT32: case NT_TYPE_UINT32:
    case NT_TYPE_INT64: case NT_TYPE_UINT64: case NT_TYPE_SINGLE: case NT_TYPE_DOUBLE:
    case NT_TYPE_DATETIME: case NT_TYPE_GUID: case NT_TYPE_STRING:
        return true;
    default:
        return false; /* Object/Array need nested lists or V2Params; Decimal is unusable in TraceEvent */
    }
}

/* s equals lower (lowercase ASCII) in any case: not strcasecmp, whose locale table is a page of
 * libc that an image's start otherwise never reads */
static bool ascii_ieq(const char *s, const char *lower)
{
    for (; *lower; s++, lower++)
        if ((*s >= 'A' && *s <= 'Z' ? *s + ('a' - 'A') : *s) != *lower)
            return false;
    return *s == 0;
}

/* Does a reader imply an opcode from this name (a "Start"/"Stop" suffix, any case)? */
static bool implies_opcode(const char *name)
{
    size_t n = strlen(name);
    return (n >= 5 && ascii_ieq(name + n - 5, "start")) || (n >= 4 && ascii_ieq(name + n - 4, "stop"));
}

/* The V5 metadata payload of d under metadata id index and event id (nettrace-v5.md §4.4). */
static void encode_meta(mbuf *b, uint32_t index, uint32_t event_id, const at_event_desc *d)
{
    mb_u32(b, index);
    mb_str(b, d->provider);
    mb_u32(b, event_id);
    mb_str(b, d->name);
    mb_put(b, &d->keywords, 8);
    mb_u32(b, d->version);
    mb_u32(b, d->level);
    mb_u32(b, d->nfields);
    for (uint32_t i = 0; i < d->nfields; i++) {
        mb_u32(b, d->fields[i].type);
        mb_str(b, d->fields[i].name);
    }
    /* The tag also for Info (0) when the name ends in Start/Stop: without it TraceEvent takes the
     * opcode from the name (nettrace-v5.md §4.4) and "XStart" would open an activity. */
    if (d->opcode != 0 || implies_opcode(d->name)) {
        uint8_t tag[6] = {1, 0, 0, 0, NT_META_TAG_OPCODE, d->opcode};
        mb_put(b, tag, sizeof tag);
    }
}

/* Is t what d describes (fields, level, keywords, opcode: everything its metadata says)? */
static bool same_shape(const at_event_type *t, const at_event_desc *d)
{
    mbuf b;
    mb_init(&b);
    encode_meta(&b, t->index, t->event_id, d);
    bool same = !b.oom && b.len == t->meta_len && memcmp(b.p, t->meta, b.len) == 0;
    mb_done(&b);
    return same;
}

/* trace.h: where the next types' own structs come from (under reg_lock) */
static uint8_t *hot_p;
static size_t hot_left;

void at_event_type_hot_region(void *p, size_t n)
{
    pthread_mutex_lock(&reg_lock);
    hot_p = p;
    hot_left = n;
    pthread_mutex_unlock(&reg_lock);
}

/* A type's struct, zeroed: from the hot region while it has room, else from the registry's blocks */
static at_event_type *type_alloc(void)
{
    size_t n = (sizeof(at_event_type) + 15) & ~(size_t)15;
    if (hot_p && hot_left >= n) {
        at_event_type *t = (at_event_type *)(void *)hot_p;
        hot_p += n;
        hot_left -= n;
        return t;
    }
    return at_reg_alloc(sizeof(at_event_type));
}

at_event_type *at_event_type_register(const at_event_desc *d)
{
    if (!d || !d->provider || !d->provider[0] || !d->name || (d->nfields && !d->fields)) {
        errno = EINVAL;
        return NULL;
    }
    for (uint32_t i = 0; i < d->nfields; i++)
        if (!d->fields[i].name || !valid_type(d->fields[i].type)) {
            errno = EINVAL;
            return NULL;
        }
    pthread_mutex_lock(&reg_lock);
    uint32_t n = atomic_load(&at_ntypes);
    uint32_t max_id = 0;
    for (uint32_t i = 1; i <= n; i++) {
        at_event_type *t = at_types_tab[i];
        if (strcmp(t->provider, d->provider) != 0)
            continue;
        /* the same name with other fields (a program marking "Tick" with an integer here and a
         * string there) is another type with its own event id: sharing the first one's metadata
         * would have readers decode one shape's payload as the other's */
        if (strcmp(t->name, d->name) == 0 && t->version == d->version && same_shape(t, d)) {
            pthread_mutex_unlock(&reg_lock);
            return t;
        }
        if (t->event_id > max_id)
            max_id = t->event_id;
    }
    if (n + 1 >= AT_MAX_TYPES) {
        pthread_mutex_unlock(&reg_lock);
        errno = ENOSPC;
        return NULL;
    }
    at_event_type *t = type_alloc();
    if (!t)
        goto oom;
    t->index = n + 1;
    t->event_id = d->event_id || d->id_given ? d->event_id : max_id + 1;
    t->level = d->level;
    t->keywords = d->keywords;
    t->version = d->version;
    t->provider = at_reg_strdup(d->provider);
    t->name = at_reg_strdup(d->name);
    if (!t->provider || !t->name)
        goto oom;
    mbuf b;
    mb_init(&b);
    encode_meta(&b, t->index, t->event_id, d);
    uint8_t *meta = b.oom ? NULL : at_reg_alloc(b.len);
    if (meta)
        memcpy(meta, b.p, b.len);
    mb_done(&b);
    if (!meta)
        goto oom; /* what was carved stays unused: the registry gives nothing back */
    t->meta = meta;
    t->meta_len = (uint32_t)b.len;
    t->head.enabled = passes(t, filt_level, filt_keywords);
    if (t->index == AT_TYPES_FIRST) { /* readers holding the first table read only its entries */
        memcpy(types_all, types_first, sizeof types_first);
        __atomic_store_n(&at_types_tab, types_all, __ATOMIC_RELEASE);
    }
    at_types_tab[t->index] = t;
    atomic_store_explicit(&at_ntypes, t->index, memory_order_release);
    pthread_mutex_unlock(&reg_lock);
    return t;
oom:
    pthread_mutex_unlock(&reg_lock);
    errno = ENOMEM;
    return NULL;
}

/* fork: the child must not inherit the registry lock held by another thread */
AT_FORK_TEXT void at_event_type_fork_prepare(void)
{
    at_fork_lock(&reg_lock);
    at_fork_lock(&mem_lock);
}
AT_FORK_TEXT void at_event_type_fork_parent(void)
{
    at_fork_unlock(&mem_lock);
    at_fork_unlock(&reg_lock);
}
AT_FORK_TEXT void at_event_type_fork_child(void)
{
    at_mutex_fork_reset(&mem_lock);
    at_mutex_fork_reset(&reg_lock);
}
