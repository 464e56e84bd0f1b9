/* tbuf.c: per-thread ring buffers and the hot path (at_event_write). Memory is one mapping of
 * buffer_cap bytes cut into equal rings; a thread claims a free ring at its first event with a CAS
 * (async-signal-safe, no allocation), then writes records with plain stores and publishes them with
 * a release store of its head. The flusher is the only reader (single producer, single consumer).
 * At thread exit a pthread key destructor marks the ring retired; the flusher drains and frees it. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdio.h>
#include "trace_int.h"

#define AT_DEFAULT_CAP (128u << 20)
#define AT_MAX_RING (4u << 20)
#define AT_MIN_RING (4u << 10)
#define AT_MAX_PAYLOAD (60u * 1024) /* a blob must fit a 100 KiB block */
#define AT_MAX_IPS 1024u

at_pool at_pool_g;
_Atomic uint32_t at_sess_gen;
_Atomic int at_sess_active;
_Atomic uint64_t at_drops_noring;
_Atomic uint64_t at_drops_retired;

typedef struct at_thr {
    at_ring *ring;
    uint32_t gen;
    uint32_t seq; /* per-thread sequence number: +1 per event tried, written or dropped */
    uint64_t tid;
} at_thr;
static AT_TLS at_thr thr;

static pthread_key_t thr_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static void thr_exit(void *p)
{
    at_ring *r = p;
    if (r && thr.ring == r && thr.gen == atomic_load(&at_sess_gen))
        atomic_store_explicit(&r->state, AT_RING_RETIRED, memory_order_release);
    thr.ring = NULL; /* an event written after this (a later destructor) claims a new ring */
}

static void make_key(void) { pthread_key_create(&thr_key, thr_exit); }
void at_tbuf_init_key(void) { pthread_once(&key_once, make_key); }

int at_pool_init(size_t cap, char *err, size_t errlen)
{
    if (cap == 0)
        cap = AT_DEFAULT_CAP;
    if (cap < AT_MIN_RING) {
        snprintf(err, errlen, "buffer cap %zu is below the minimum of %u bytes", cap, AT_MIN_RING);
        return -1;
    }
    uint64_t rs = AT_MAX_RING;
    while (rs > AT_MIN_RING && rs > cap / 4)
        rs >>= 1;
    uint32_t n = (uint32_t)(cap / rs);
    if (n > 4096)
        n = 4096;
    if (at_pool_g.map && at_pool_g.ring_size == rs && at_pool_g.nrings == n) {
        /* same geometry (a new session in the same process): reuse the mapping */
        for (uint32_t i = 0; i < n; i++) {
            at_ring *r = &at_pool_g.rings[i];
            atomic_store(&r->state, AT_RING_FREE);
            atomic_store(&r->head, 0);
            atomic_store(&r->tail, 0);
            r->tail_cache = r->cursor = r->limit = 0;
            r->last_seq = 0;
            atomic_store(&r->drops, 0);
        }
        return 0;
    }
    size_t ring_bytes = (sizeof(at_ring) * n + 4095) & ~(size_t)4095;
    size_t len = ring_bytes + (size_t)rs * n;
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "cannot map %zu bytes of buffers: %s", len, strerror(errno));
        return -1;
    }
    /* an older mapping of another geometry stays mapped: a thread may still be writing into it */
    at_ring *rings = m;
    for (uint32_t i = 0; i < n; i++) {
        rings[i].data = (uint8_t *)m + ring_bytes + (size_t)rs * i;
        rings[i].size = rs;
    }
    at_pool_g.rings = rings;
    at_pool_g.nrings = n;
    at_pool_g.ring_size = rs;
    at_pool_g.map = m;
    at_pool_g.map_len = len;
    return 0;
}

void at_pool_reset_child(void)
{
    for (uint32_t i = 0; i < at_pool_g.nrings; i++) {
        at_ring *r = &at_pool_g.rings[i];
        atomic_store(&r->state, AT_RING_FREE);
        atomic_store(&r->head, 0);
        atomic_store(&r->tail, 0);
        r->tail_cache = r->cursor = r->limit = 0;
        r->last_seq = 0;
        atomic_store(&r->drops, 0);
    }
    atomic_store(&at_drops_noring, 0);
    atomic_store(&at_drops_retired, 0);
    thr.ring = NULL;
    thr.tid = 0; /* the child's only thread has a new tid */
    thr.seq = 0;
}

uint64_t at_tbuf_total_drops(void)
{
    uint64_t d = atomic_load(&at_drops_noring) + atomic_load(&at_drops_retired);
    for (uint32_t i = 0; i < at_pool_g.nrings; i++)
        d += atomic_load_explicit(&at_pool_g.rings[i].drops, memory_order_relaxed);
    return d;
}

/* Slow path of the first event of a thread (or after a new session/fork). */
static AT_NOINLINE at_ring *ring_acquire(uint32_t gen)
{
    if (thr.tid == 0)
        thr.tid = (uint64_t)syscall(SYS_gettid);
    for (uint32_t i = 0; i < at_pool_g.nrings; i++) {
        at_ring *r = &at_pool_g.rings[i];
        uint32_t expect = AT_RING_FREE;
        if (atomic_load_explicit(&r->state, memory_order_relaxed) != AT_RING_FREE)
            continue;
        if (!atomic_compare_exchange_strong(&r->state, &expect, AT_RING_USED))
            continue;
        r->tid = thr.tid;
        r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
        thr.ring = r;
        thr.gen = gen;
        pthread_setspecific(thr_key, r); /* keys < 32 live in the thread descriptor: no allocation */
        return r;
    }
    return NULL;
}

static inline void count_drop(at_ring *r, uint32_t seq)
{
    atomic_store_explicit(&r->drops, atomic_load_explicit(&r->drops, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    atomic_store_explicit(&r->seq_pub, seq, memory_order_release);
}

int at_event_write_ts(uint64_t ts, const at_event_type *t, const at_guid *activity,
                      const at_guid *related, const void *payload, uint32_t payload_len,
                      const uintptr_t *ips, uint32_t nips)
{
    uint32_t seq = ++thr.seq;
    at_ring *r = thr.ring;
    uint32_t gen = atomic_load_explicit(&at_sess_gen, memory_order_relaxed);
    if (AT_UNLIKELY(!atomic_load_explicit(&at_sess_active, memory_order_relaxed) || !t))
        goto drop_noring;
    if (AT_UNLIKELY(!r || thr.gen != gen)) {
        r = ring_acquire(gen);
        if (!r)
            goto drop_noring;
    }
    bool has_act = activity && !at_guid_is_zero(activity);
    bool has_rel = related && !at_guid_is_zero(related);
    if (AT_UNLIKELY(payload_len > AT_MAX_PAYLOAD || nips > AT_MAX_IPS || (payload_len && !payload)
                    || (nips && !ips))) {
        count_drop(r, seq);
        return -1;
    }
    uint64_t size = (sizeof(at_rec) + (has_act ? 16 : 0) + (has_rel ? 16 : 0) + (uint64_t)nips * 8
                     + payload_len + 7) & ~(uint64_t)7;
    uint64_t rsz = r->size;
    uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t pos = h & (rsz - 1);
    uint64_t skip = (pos + size > rsz) ? rsz - pos : 0; /* records never straddle the end */
    if (AT_UNLIKELY(h + skip + size - r->tail_cache > rsz)) {
        r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
        if (h + skip + size - r->tail_cache > rsz) {
            count_drop(r, seq);
            return -1;
        }
    }
    if (AT_UNLIKELY(skip)) {
        *(uint32_t *)(r->data + pos) = 0; /* wrap marker; pos is 8-aligned so 4 bytes fit */
        h += skip;
        pos = 0;
    }
    uint8_t *p = r->data + pos;
    at_rec *rec = (at_rec *)p;
    rec->size = (uint32_t)size;
    rec->type_index = t->index;
    rec->ts = ts;
    rec->seq = seq;
    rec->payload_len = payload_len;
    rec->nips = (uint16_t)nips;
    rec->flags = (uint16_t)((has_act ? AT_REC_ACT : 0) | (has_rel ? AT_REC_REL : 0));
    p += sizeof(at_rec);
    if (has_act) {
        memcpy(p, activity, 16);
        p += 16;
    }
    if (has_rel) {
        memcpy(p, related, 16);
        p += 16;
    }
    if (nips) {
        memcpy(p, ips, (size_t)nips * 8);
        p += (size_t)nips * 8;
    }
    if (payload_len)
        memcpy(p, payload, payload_len);
    atomic_store_explicit(&r->head, h + size, memory_order_release);
    atomic_store_explicit(&r->seq_pub, seq, memory_order_release);
    return 0;

drop_noring:
    atomic_fetch_add_explicit(&at_drops_noring, 1, memory_order_relaxed);
    return -1;
}

int at_event_write(const at_event_type *t, const at_guid *activity, const at_guid *related,
                   const void *payload, uint32_t payload_len, const uintptr_t *ips, uint32_t nips)
{
    return at_event_write_ts(at_now_ns(), t, activity, related, payload, payload_len, ips, nips);
}
