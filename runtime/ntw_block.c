/* ntw_block.c: nettrace V5 serialisation (see ../shared/nettrace-v5.md §2-§6): FastSerialization
 * object framing, the Trace object, Metadata/Stack/Event blocks with header compression, stack
 * interning, sequence points and the end tag. Owned by whoever holds at_flush_lock; everything here
 * is async-signal-safe after at_ntw_init (fixed buffers, pwrite only) so the emergency flush can use it.
 *
 * Crash safety: each flush appends after the previous end tag. The first byte of the new content
 * (which overwrites that end tag) is written last, after the new end tag: a process killed in the
 * middle of a flush leaves the previous complete file (plus unread bytes after its end tag, which
 * the project's reader recognises as a torn tail and recovers the complete blocks of).
 *
 * A failed write (full disk, quota, file size limit, I/O error) cuts the file back to its last
 * complete part; what that part would have held is forgotten (metadata and symbols are written
 * again), and a sequence point appended as soon as it fits lists every thread's number: the events
 * that were lost are sequence gaps for every reader.
 *
 * Each file starts with a sequence point (the baseline: every thread's number so far), so that a
 * reader counts drops from it, also those before a thread's first event in the file. */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "asroom.h"
#include "symrun.h"

#define BLOCK_MAX NT_MAX_BLOCK_SIZE
#define BLOB_WORST 96 /* flags + every optional header field at its widest, without payload */
#define OBUF_SIZE (1u << 20)
#define STK_SLOTS 16384u      /* power of two; an SP resets the table at half load */
#define STK_ARENA (512u << 10) /* frames (uint64) remembered for comparison */
#define SP_BYTES (8u << 20)   /* at most this many bytes between sequence points */
#define SP_NS 1000000000ull   /* and at most a second (checked at flush end) */

at_output at_out __attribute__((aligned(4096))); /* trace_int.h: the pages a start touches */
at_event_type *at_processinfo_type AT_START_DATA;
uint64_t at_ntw_pending_events;

typedef struct blob_hdr {
    uint32_t meta, seq, proc, stack, plen;
    uint64_t cap_tid, tid, ts;
    at_guid act, rel;
} blob_hdr;

typedef struct evblock {
    uint8_t *buf; /* 20-byte header space + blobs */
    size_t len;
    uint64_t min_ts, max_ts;
    uint32_t n;
    blob_hdr last;
} evblock;

typedef struct stk_slot {
    uint64_t hash;
    uint32_t id, nips, off;
} stk_slot;

static struct {
    bool init;
    uint8_t *ob;
    size_t ob_len;
    uint64_t ob_off;        /* file offset of ob[0] */
    bool hold, held_taken;
    uint64_t held_off;
    uint8_t held_byte;
    evblock eb, mb;
    uint8_t *sb;            /* stack block payload */
    size_t sb_len;
    uint32_t sb_first, sb_count;
    stk_slot *stk;
    uint64_t *arena;
    uint32_t arena_len, stk_used, next_stack_id;
    uint32_t file_gen;
    uint64_t max_ts;        /* of every event written to this file so far */
    uint64_t sp_ts;         /* of the last sequence point: no later event is older */
    uint64_t bytes_at_sp, sp_time;
    bool rotate_due;
    bool stack_fresh;       /* the last stack_intern added a stack */
    uint32_t stk_epoch;     /* stack ids' interval: new at every reset of the table */
    uint32_t flusher_seq;   /* sequence of the flusher's own events in this file */
    uint64_t flusher_seq_tid; /* the thread id flusher_seq numbers (a later writer thread: anew) */
    uint64_t file_events;   /* events (not ProcessInfo) in the current file */
    uint8_t *pi_payload;    /* ProcessInfo */
    uint32_t pi_len;
    size_t pi_cap;
    int32_t nprocs;
    uint32_t part;          /* the current file part (metadata written in it: at_event_type.meta_part) */
    uint32_t part_flusher_seq; /* flusher_seq when the part began */
    uint32_t sym_gen;       /* the symbol rundown's generation: new per file and per failed part */
    uint8_t sp_buf[12 + 12 * AT_MAX_THREADS];
    size_t ob_cap;          /* OBUF_SIZE, or less under a tight RLIMIT_AS */
    uint32_t stk_slots;     /* STK_SLOTS (a power of two), or less: fewer stacks per SP interval */
    uint32_t arena_cap;     /* STK_ARENA, or less */
} W;

static void *map(const char *what, size_t *n, size_t min, unsigned share)
{
    return at_as_map(what, n, min, share, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

void at_ntw_init(void)
{
    if (!W.init) {
        /* under a tight RLIMIT_AS the output buffer and the stack table shrink (asroom.c): more
         * writes, and stacks interned again sooner; the blocks are the format's own size */
        size_t ob = OBUF_SIZE, blk = BLOCK_MAX, b2 = BLOCK_MAX, b3 = BLOCK_MAX;
        size_t stk = STK_SLOTS * sizeof(stk_slot), ar = STK_ARENA * sizeof(uint64_t);
        W.ob = map("output buffer", &ob, 64u << 10, 64);
        W.eb.buf = map("event block", &blk, 0, 0);
        W.mb.buf = map("metadata block", &b2, 0, 0);
        W.sb = map("stack block", &b3, 0, 0);
        W.stk = map("stack table", &stk, 1024 * sizeof(stk_slot), 64);
        W.arena = map("stack frames", &ar, 64u << 10, 32);
        W.ob_cap = ob;
        W.stk_slots = 1024;
        while ((size_t)W.stk_slots * 2 * sizeof(stk_slot) <= stk && W.stk_slots < STK_SLOTS)
            W.stk_slots *= 2;
        W.arena_cap = (uint32_t)(ar / sizeof(uint64_t));
        W.init = W.ob && W.eb.buf && W.mb.buf && W.sb && W.stk && W.arena;
    }
    long np = sysconf(_SC_NPROCESSORS_ONLN);
    W.nprocs = np > 0 ? (int32_t)np : 1;
    /* ProcessInfo payload: CommandLine, OSInformation, ArchInformation (UTF-16, NUL-terminated),
     * built once per session so that writing it (also from the emergency flush) only copies */
    const char *cl = at_command_line ? at_command_line : "";
    size_t cap = strlen(cl) * 2 + 64;
    if (W.pi_payload)
        munmap(W.pi_payload, W.pi_cap);
    W.pi_payload = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (W.pi_payload == MAP_FAILED)
        W.pi_payload = NULL;
    W.pi_cap = cap;
    if (W.pi_payload) {
        at_payload pl;
        at_payload_init(&pl, W.pi_payload, cap);
        at_payload_str(&pl, cl, 30000); /* keep the event well inside a block */
        at_payload_str(&pl, "Linux", 16);
        at_payload_str(&pl, "x64", 16);
        W.pi_len = (uint32_t)(pl.p - W.pi_payload);
    }
}

bool at_ntw_ready(void) { return W.init && W.pi_payload; }

/* ---- output buffer ---- */
static int ob_drain(void)
{
    if (W.ob_len == 0)
        return 0;
    if (at_out.failed) { /* the part is lost already: it will be cut off */
        W.ob_off += W.ob_len;
        W.ob_len = 0;
        return -1;
    }
    const uint8_t *p = W.ob;
    size_t len = W.ob_len;
    uint64_t off = W.ob_off;
    if (W.hold && !W.held_taken && off == W.held_off) {
        W.held_byte = p[0];
        W.held_taken = true;
        p++;
        len--;
        off++;
    }
    int rc = len ? at_output_pwrite(&at_out, p, len, off) : 0;
    W.ob_off += W.ob_len;
    W.ob_len = 0;
    return rc;
}

static int ob_put(const void *v, size_t n)
{
    const uint8_t *p = v;
    int rc = 0;
    while (n) {
        size_t room = W.ob_cap - W.ob_len;
        size_t k = n < room ? n : room;
        memcpy(W.ob + W.ob_len, p, k);
        W.ob_len += k;
        p += k;
        n -= k;
        if (W.ob_len == W.ob_cap && ob_drain() < 0)
            rc = -1;
    }
    return rc;
}
static uint64_t ob_pos(void) { return W.ob_off + W.ob_len; }
static void ob_u8(uint8_t v) { ob_put(&v, 1); }
static void ob_u32(uint32_t v) { ob_put(&v, 4); }

static void obj_begin(const char *name, uint32_t ver, uint32_t minver)
{
    uint8_t t[3] = {NT_TAG_BEGIN_PRIVATE_OBJECT, NT_TAG_BEGIN_PRIVATE_OBJECT, NT_TAG_NULL_REFERENCE};
    ob_put(t, 3);
    ob_u32(ver);
    ob_u32(minver);
    uint32_t n = (uint32_t)strlen(name);
    ob_u32(n);
    ob_put(name, n);
    ob_u8(NT_TAG_END_OBJECT);
}

/* A block object: size, padding to a 4-byte absolute offset, payload, EndObject. */
static void write_block(const char *name, const uint8_t *payload, size_t len)
{
    obj_begin(name, NT_BLOCK_VERSION, NT_BLOCK_MIN_VERSION);
    ob_u32((uint32_t)len);
    static const uint8_t zero[4];
    ob_put(zero, (4 - (ob_pos() & 3)) & 3);
    ob_put(payload, len);
    ob_u8(NT_TAG_END_OBJECT);
}

/* ---- event/metadata blocks ---- */
static void eb_reset(evblock *b)
{
    b->len = NT_BLOCK_HEADER_SIZE;
    b->n = 0;
    b->min_ts = UINT64_MAX;
    b->max_ts = 0;
    memset(&b->last, 0, sizeof b->last);
}

/* Unsigned LEB128. Up to four bytes (timestamp deltas, thread ids, lengths: nearly every field)
 * without a loop; the loop cost ~60 instructions per event. */
static inline uint8_t *var_u64(uint8_t *p, uint64_t v)
{
    if (v < 0x80) {
        p[0] = (uint8_t)v;
        return p + 1;
    }
    if (v < 0x4000) {
        p[0] = (uint8_t)(v | 0x80);
        p[1] = (uint8_t)(v >> 7);
        return p + 2;
    }
    if (v < 0x200000) {
        p[0] = (uint8_t)(v | 0x80);
        p[1] = (uint8_t)((v >> 7) | 0x80);
        p[2] = (uint8_t)(v >> 14);
        return p + 3;
    }
    if (v < 0x10000000) {
        p[0] = (uint8_t)(v | 0x80);
        p[1] = (uint8_t)((v >> 7) | 0x80);
        p[2] = (uint8_t)((v >> 14) | 0x80);
        p[3] = (uint8_t)(v >> 21);
        return p + 4;
    }
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Append one compressed blob (§4.1); the caller made sure BLOB_WORST + payload fits. (Events take
 * the same encoding in at_ntw_event, for the common case.) */
static void blob_put(evblock *b, const blob_hdr *h, const void *payload, bool sorted)
{
    blob_hdr *l = &b->last;
    uint8_t *p0 = b->buf + b->len, *p = p0 + 1;
    uint8_t flags = 0;
    if (h->meta != l->meta) {
        flags |= NT_EV_METADATA_ID;
        p = var_u64(p, h->meta);
    }
    if (l->seq + (h->meta != 0 ? 1u : 0u) != h->seq || l->cap_tid != h->cap_tid || l->proc != h->proc) {
        flags |= NT_EV_CAPTURE_THREAD_AND_SEQ;
        p = var_u64(p, (uint32_t)(h->seq - l->seq - 1));
        p = var_u64(p, h->cap_tid);
        p = var_u64(p, h->proc);
    }
    if (h->tid != l->tid) {
        flags |= NT_EV_THREAD_ID;
        p = var_u64(p, h->tid);
    }
    if (h->stack != l->stack) {
        flags |= NT_EV_STACK_ID;
        p = var_u64(p, h->stack);
    }
    p = var_u64(p, h->ts - l->ts); /* caller keeps ts non-decreasing inside a block */
    if (!at_guid_eq(&h->act, &l->act)) {
        flags |= NT_EV_ACTIVITY_ID;
        memcpy(p, &h->act, 16);
        p += 16;
    }
    if (!at_guid_eq(&h->rel, &l->rel)) {
        flags |= NT_EV_RELATED_ACTIVITY_ID;
        memcpy(p, &h->rel, 16);
        p += 16;
    }
    if (sorted)
        flags |= NT_EV_SORTED;
    if (h->plen != l->plen) {
        flags |= NT_EV_DATA_LENGTH;
        p = var_u64(p, h->plen);
    }
    at_copy_small(p, payload, h->plen);
    p += h->plen;
    *p0 = flags;
    b->len = (size_t)(p - b->buf);
    *l = *h;
    if (h->ts < b->min_ts)
        b->min_ts = h->ts;
    if (h->ts > b->max_ts)
        b->max_ts = h->ts;
    b->n++;
}

static void eb_emit(evblock *b, const char *name)
{
    if (b->n == 0)
        return;
    uint8_t *p = b->buf;
    uint16_t hs = NT_BLOCK_HEADER_SIZE, fl = NT_BLOCK_FLAG_COMPRESSED;
    memcpy(p, &hs, 2);
    memcpy(p + 2, &fl, 2);
    memcpy(p + 4, &b->min_ts, 8);
    memcpy(p + 12, &b->max_ts, 8);
    write_block(name, b->buf, b->len);
    eb_reset(b);
}

static void sb_emit(void)
{
    if (W.sb_count == 0)
        return;
    memcpy(W.sb, &W.sb_first, 4);
    memcpy(W.sb + 4, &W.sb_count, 4);
    write_block(NT_NAME_STACK_BLOCK, W.sb, W.sb_len);
    W.sb_len = 8;
    W.sb_count = 0;
}

/* Metadata, then stacks, then events: whatever an event refers to precedes it in the file. */
static void emit_pending(void)
{
    eb_emit(&W.mb, NT_NAME_METADATA_BLOCK);
    sb_emit();
    eb_emit(&W.eb, NT_NAME_EVENT_BLOCK);
    if (at_out.seg_size && ob_pos() >= at_out.seg_size)
        W.rotate_due = true;
}

static void stacks_reset(void)
{
    /* slots are only ever written as stk_used grows: with none used the table is clean (fresh
     * mappings are zero), and clearing 384 KiB of it would fault in 96 pages at every process start */
    if (W.stk_used)
        memset(W.stk, 0, W.stk_slots * sizeof(stk_slot));
    W.stk_used = 0;
    W.arena_len = 0;
    W.next_stack_id = 1;
    W.stk_epoch++;
    W.sb_len = 8;
    W.sb_count = 0;
    W.sb_first = 1;
}

/* Sequence point (§5) at ts: every thread's last sequence number (as the file numbers it: the
 * owner's own plus the ring's base), then stack ids start again at 1. */
static bool sp_empty; /* the baseline of a file that precedes every event of its session */

static void write_sp_at(uint64_t ts)
{
    emit_pending();
    uint8_t *buf = W.sp_buf;
    uint32_t n = 0;
    size_t len = 12;
    for (uint32_t i = 0, lim = sp_empty ? 0 : at_ring_limit(); i < lim && n < AT_MAX_THREADS; i++) {
        at_ring *r = &at_pool_g.rings[i];
        if (atomic_load_explicit(&r->state, memory_order_acquire) == AT_RING_FREE)
            continue;
        uint32_t seq = at_ring_sp_seq(r);
        if (seq == 0)
            continue;
        seq += r->rseq_base;
        memcpy(buf + len, &r->rtid, 8); /* the owner whose records were read: it changes hands */
        memcpy(buf + len + 8, &seq, 4);
        len += 12;
        n++;
    }
    memcpy(buf, &ts, 8);
    memcpy(buf + 8, &n, 4);
    write_block(NT_NAME_SP_BLOCK, buf, len);
    if (ts > W.max_ts)
        W.max_ts = ts;
    stacks_reset();
    W.bytes_at_sp = ob_pos();
    W.sp_time = at_now_ns();
    W.sp_ts = ts;
}

void at_ntw_write_sp(void)
{
    write_sp_at(W.max_ts + 1); /* strictly after every earlier event (old readers drop the rest) */
}

static uint64_t hash_ips(const uintptr_t *ips, uint32_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (uint32_t i = 0; i < n; i++) {
        h ^= ips[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return h | 1; /* 0 marks an empty slot */
}

/* Stack id of ips in the current SP interval, adding it to the pending StackBlock if new. */
static uint32_t stack_intern(const uintptr_t *ips, uint32_t n)
{
    W.stack_fresh = false;
    if (n == 0)
        return 0;
    uint64_t h = hash_ips(ips, n);
    for (;;) {
        uint32_t i = (uint32_t)h & (W.stk_slots - 1);
        for (;; i = (i + 1) & (W.stk_slots - 1)) {
            stk_slot *s = &W.stk[i];
            if (s->hash == 0)
                break;
            if (s->hash == h && s->nips == n && memcmp(W.arena + s->off, ips, (size_t)n * 8) == 0)
                return s->id;
        }
        if (W.stk_used < W.stk_slots / 2 && W.arena_len + n <= W.arena_cap) {
            if (W.sb_len + 4 + (size_t)n * 8 > BLOCK_MAX)
                emit_pending();
            stk_slot *s = &W.stk[i];
            s->hash = h;
            s->nips = n;
            s->off = W.arena_len;
            s->id = W.next_stack_id++;
            memcpy(W.arena + W.arena_len, ips, (size_t)n * 8);
            W.arena_len += n;
            W.stk_used++;
            if (W.sb_count == 0)
                W.sb_first = s->id;
            uint32_t bytes = n * 8;
            memcpy(W.sb + W.sb_len, &bytes, 4);
            memcpy(W.sb + W.sb_len + 4, ips, bytes);
            W.sb_len += 4 + bytes;
            W.sb_count++;
            W.stack_fresh = true;
            return s->id;
        }
        at_ntw_write_sp(); /* table full: a sequence point lets ids start again */
    }
}

/* The stacks a ring's records defined (trace.h, AT_STKREF_DEF), by tag: the frames, and the id
 * they have in the current interval of stack ids when they were interned in it. */
struct at_stkmap {
    struct {
        uint32_t gen, n, id, epoch;
    } e[AT_STKREF_TAGS];
    uintptr_t ips[AT_STKREF_TAGS][AT_STKREF_MAX];
};
static at_as_carver stkmap_carver;
static uint64_t stkref_unresolved; /* references to a definition not held: events without a stack */

uint64_t at_ntw_stkrefs_unresolved(void)
{
    return stkref_unresolved;
}

void at_ntw_stkmap_clear(at_ring *ring)
{
    if (ring->stkmap)
        memset(ring->stkmap->e, 0, sizeof ring->stkmap->e);
}

/* A record's stack id, its frames in *ips and *n (p and n as the record holds them: frames, or a
 * marker of the ring's definitions first). */
static uint32_t record_stack(at_ring *ring, const uintptr_t *p, uint32_t n, const uintptr_t **ips,
                             uint32_t *nips)
{
    *ips = p;
    *nips = n;
    if (AT_LIKELY(n == 0 || !at_stkref_marker(p[0])))
        return stack_intern(p, n);
    uint64_t m = p[0];
    uint32_t tag = (uint32_t)(m >> 32) & (AT_STKREF_TAGS - 1), gen = (uint32_t)m;
    struct at_stkmap *sm = ring ? ring->stkmap : NULL;
    if (m < AT_STKREF_USE) { /* a definition: the frames follow */
        *ips = p + 1;
        *nips = n - 1;
        uint32_t id = stack_intern(p + 1, n - 1);
        if (!ring || n - 1 > AT_STKREF_MAX || n < 2)
            return id;
        if (!sm)
            sm = ring->stkmap = at_as_carve(&stkmap_carver, sizeof *sm, 64u << 10, "stack definitions");
        if (sm) {
            memcpy(sm->ips[tag], p + 1, (size_t)(n - 1) * 8);
            sm->e[tag].gen = gen;
            sm->e[tag].n = n - 1;
            sm->e[tag].id = id;
            sm->e[tag].epoch = W.stk_epoch;
        }
        return id;
    }
    W.stack_fresh = false;
    if (n != 1 || !sm || sm->e[tag].gen != gen || !gen) {
        stkref_unresolved++;
        if (ring) /* the writer then defines its stacks anew */
            atomic_fetch_add_explicit(&ring->stkref_epoch, 1, memory_order_relaxed);
        *nips = 0;
        return 0;
    }
    *ips = sm->ips[tag];
    *nips = sm->e[tag].n;
    if (sm->e[tag].epoch == W.stk_epoch && sm->e[tag].id)
        return sm->e[tag].id;
    uint32_t id = stack_intern(*ips, *nips);
    sm->e[tag].id = id;
    sm->e[tag].epoch = W.stk_epoch;
    return id;
}

static void put_metadata(at_event_type *t, uint64_t ts, uint64_t tid)
{
    if (W.mb.len + BLOB_WORST + t->meta_len > BLOCK_MAX || ts < W.mb.last.ts)
        emit_pending();
    blob_hdr h = {0};
    h.tid = tid;
    h.ts = ts;
    h.plen = t->meta_len;
    blob_put(&W.mb, &h, t->meta, true);
    t->file_gen = W.file_gen;
    t->meta_part = W.part;
}

/* ---- file level ---- */
static uint64_t write_trace_object(uint64_t sync_qpc)
{
    /* SyncTimeUTC has millisecond precision: name the last whole millisecond of wall-clock time and
     * the file time (CLOCK_MONOTONIC ns) at that instant, so readers that place events by it
     * (TraceEvent) put the files of one machine on one time line to the microsecond */
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    uint64_t now = at_now_ns();
    /* the wall-clock time of sync_qpc (at most a little in the past), then back to its millisecond */
    int64_t ago = now > sync_qpc ? (int64_t)(now - sync_qpc) : 0;
    int64_t real_ns = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec - ago;
    int64_t sub_ms = real_ns % 1000000;
    real_ns -= sub_ms;
    sync_qpc -= (uint64_t)sub_ms;
    int y, mon, d, hh, mi, s, dow;
    int64_t secs = real_ns / 1000000000;
    at_civil_from_unix(secs, &y, &mon, &d, &hh, &mi, &s, &dow);
    uint8_t p[NT_TRACE_PAYLOAD_SIZE];
    uint16_t st[8] = {(uint16_t)y, (uint16_t)mon, (uint16_t)dow, (uint16_t)d, (uint16_t)hh,
                      (uint16_t)mi, (uint16_t)s, (uint16_t)(real_ns % 1000000000 / 1000000)};
    memcpy(p, st, 16);
    int64_t q = (int64_t)sync_qpc, f = 1000000000; /* file time is ns */
    int32_t ps = 8, pid = (int32_t)getpid(), rate = 0;
    memcpy(p + 16, &q, 8);
    memcpy(p + 24, &f, 8);
    memcpy(p + 32, &ps, 4);
    memcpy(p + 36, &pid, 4);
    memcpy(p + 40, &W.nprocs, 4);
    memcpy(p + 44, &rate, 4);
    obj_begin(NT_NAME_TRACE, NT_TRACE_OBJECT_VERSION, NT_TRACE_OBJECT_MIN_VERSION);
    ob_put(p, sizeof p);
    ob_u8(NT_TAG_END_OBJECT);
    return sync_qpc;
}

/* A new file: header, Trace object, ProcessInfo (with its metadata) and the end tag. */
int at_ntw_file_begin_first(uint64_t sync_qpc)
{
    sp_empty = true;
    int rc = at_ntw_file_begin(sync_qpc);
    sp_empty = false;
    return rc;
}

int at_ntw_file_begin(uint64_t sync_qpc)
{
    W.ob_off = 0;
    W.ob_len = 0;
    W.hold = false;
    W.file_gen++;
    if (W.file_gen == 0)
        W.file_gen = 1;
    W.rotate_due = false;
    W.file_events = 0;
    W.flusher_seq = 1; /* ProcessInfo */
    W.flusher_seq_tid = at_flusher_tid;
    W.sym_gen++;
    eb_reset(&W.eb);
    eb_reset(&W.mb);
    stacks_reset();
    ob_put(NT_MAGIC, 8);
    uint32_t n = (uint32_t)strlen(NT_SERIALIZER_SIG);
    ob_u32(n);
    ob_put(NT_SERIALIZER_SIG, n);
    /* the header names a whole millisecond at or before sync_qpc; ProcessInfo stands there too, but
     * never before what an earlier file of this process (a rotation) has written */
    uint64_t prev = W.max_ts;
    sync_qpc = write_trace_object(sync_qpc);
    if (sync_qpc < prev)
        sync_qpc = prev;
    /* the baseline: at the sync time, which no event of the file precedes */
    write_sp_at(sync_qpc);
    W.max_ts = sync_qpc;
    if (at_processinfo_type && W.pi_payload) {
        put_metadata(at_processinfo_type, sync_qpc, at_flusher_tid);
        /* its own capture thread (the flusher, which writes no other event) with sequence 1 */
        blob_hdr h = {0};
        h.meta = at_processinfo_type->index;
        h.seq = 1;
        h.cap_tid = h.tid = at_flusher_tid;
        h.proc = 0xFFFFFFFFu;
        h.ts = sync_qpc;
        h.plen = W.pi_len;
        blob_put(&W.eb, &h, W.pi_payload, true);
    }
    emit_pending();
    W.rotate_due = false;
    W.bytes_at_sp = ob_pos();
    W.sp_time = at_now_ns();
    at_out.pos = ob_pos();
    ob_u8(NT_TAG_NULL_REFERENCE);
    int rc = ob_drain();
    return at_out.failed ? -1 : rc;
}

static void part_begin(void)
{
    W.ob_off = at_out.pos;
    W.ob_len = 0;
    W.hold = true;
    W.held_taken = false;
    W.held_off = at_out.pos;
    eb_reset(&W.eb);
    eb_reset(&W.mb);
    if (++W.part == 0)
        W.part = 1;
    W.part_flusher_seq = W.flusher_seq;
}

void at_ntw_flush_begin(void)
{
    part_begin();
}

/* The part being written failed: cut the file back to where it was (its end tag is still there,
 * since the part's first byte is written last), and forget what the part defined. */
static void part_lost(void)
{
    at_output_cut(&at_out, W.held_off + 1);
    for (uint32_t i = 0, n = atomic_load(&at_ntypes); i <= n && i < AT_MAX_TYPES; i++) {
        at_event_type *t = at_type_at(i);
        if (t && t->file_gen == W.file_gen && t->meta_part == W.part)
            t->file_gen = 0;
    }
    if (++W.sym_gen == 0)
        W.sym_gen = 1;
    W.flusher_seq = W.part_flusher_seq; /* the flusher's lost symbol events are written again */
    W.ob_off = W.held_off;
    W.ob_len = 0;
    W.held_taken = false;
    eb_reset(&W.eb);
    eb_reset(&W.mb);
    stacks_reset(); /* its stack definitions are gone: ids start again after the next SP */
}

static int finish_file_part(void)
{
    emit_pending();
    uint64_t end = ob_pos();
    if (end == W.held_off && !at_out.failed)
        return 0; /* nothing new: the file already ends with its tag */
    ob_u8(NT_TAG_NULL_REFERENCE);
    ob_drain();
    if (W.held_taken && !at_out.failed)
        at_output_pwrite(&at_out, &W.held_byte, 1, W.held_off);
    if (at_out.failed) {
        part_lost();
        return -1;
    }
    at_out.pos = end;
    /* anything more in this flush starts a new part over the tag just written */
    W.ob_off = W.held_off = end;
    W.held_taken = false;
    if (++W.part == 0)
        W.part = 1;
    W.part_flusher_seq = W.flusher_seq;
    atomic_fetch_add(&at_stat_written, at_ntw_pending_events);
    at_ntw_pending_events = 0;
    return 0;
}

void at_ntw_retry(void)
{
    if (!at_out.failed || at_out.fd < 0)
        return;
    at_out.failed = false;
    part_begin();
    write_sp_at(W.max_ts + 1);
    if (finish_file_part() < 0)
        at_out.failed = true;
}

static void rotate(void)
{
    /* the old file's last word on every thread: drops since its last sequence point are counted
     * there, and the new file's baseline starts after them */
    at_ntw_write_sp();
    if (finish_file_part() < 0)
        return;
    uint64_t sync = W.max_ts; /* the next events are (almost always) not older than this */
    if (at_output_open_next(&at_out) < 0)
        return;
    at_ntw_file_begin(sync);
    at_ntw_flush_begin();
}

/* at_ntw_event for every case: a new file part, metadata, stacks, a late event, a full block. */
static AT_NOINLINE int event_slow(at_ring *ring, const at_rec *r, const uint8_t *body, uint64_t tid,
                                  uint32_t seq_base, at_event_type *t, uint64_t ts)
{
    /* rotate before a file would pass its size (block framing, metadata and stack included) */
    if (at_out.seg_size && W.file_events
        && ob_pos() + W.mb.len + W.sb_len + W.eb.len + 256 + BLOB_WORST + r->payload_len
                   + (size_t)(r->nips == 1 ? AT_STKREF_MAX : r->nips) * 12 /* 1: a reference */
                   + (t->file_gen != W.file_gen ? t->meta_len : 0)
               > at_out.seg_size)
        W.rotate_due = true;
    if (W.rotate_due)
        rotate();
    if (t->file_gen != W.file_gen)
        put_metadata(t, ts, tid);
    blob_hdr h;
    h.meta = t->index;
    h.seq = r->seq + seq_base;
    h.cap_tid = h.tid = tid;
    h.proc = at_rec_cpu(r);
    h.ts = ts;
    const uint8_t *p = body;
    if (r->flags & AT_REC_ACT) {
        memcpy(&h.act, p, 16);
        p += 16;
    } else {
        memset(&h.act, 0, 16);
    }
    if (r->flags & AT_REC_REL) {
        memcpy(&h.rel, p, 16);
        p += 16;
    } else {
        memset(&h.rel, 0, 16);
    }
    const uintptr_t *ips;
    uint32_t nips;
    h.stack = record_stack(ring, (const uintptr_t *)p, r->nips, &ips, &nips);
    /* a sequence point written just before (a full stack table, a reused thread id; time: newest
     * event + 1) with an event of the same nanosecond as the newest still to come: readers would
     * dispatch it out of order, so it moves to the sequence point's time (1 ns, and only then) */
    if (h.ts < W.sp_ts && h.ts + 1 == W.sp_ts)
        h.ts = W.sp_ts;
    /* a stack new in this interval: name what this file has not named yet (before the event, so a
     * reader meets the symbols first) */
    if (W.stack_fresh && at_symrun_on)
        at_symrun_cover(ips, nips, W.sym_gen);
    p += (size_t)r->nips * 8;
    h.plen = r->payload_len;
    /* IsSorted only when no earlier-written event is newer (§6). A late event (a thread published
     * it after newer events of other threads were written) is not sorted, and readers queue an
     * unsorted blob on the capture thread of the block's first blob or of the last sorted one: so it
     * starts a new block unless it follows its own thread. A new block also keeps deltas >= 0. */
    bool sorted = h.ts >= W.max_ts;
    if (W.eb.len + BLOB_WORST + h.plen > BLOCK_MAX
        || (W.eb.n && (h.ts < W.eb.last.ts || (!sorted && W.eb.last.cap_tid != h.cap_tid)))) {
        emit_pending();
        /* a sequence point between events of the same nanosecond would be newer than the second:
         * the byte budget waits for the next later event */
        if (ob_pos() - W.bytes_at_sp >= SP_BYTES && h.ts > W.max_ts) {
            at_ntw_write_sp();
            h.stack = stack_intern(ips, nips);
        }
    }
    if (sorted)
        W.max_ts = h.ts;
    blob_put(&W.eb, &h, p, sorted);
    at_ntw_pending_events++;
    W.file_events++;
    return 0;
}

/* Nearly every event: its type's metadata is in the file, no stack, no rotation due, it fits the
 * block and is not older than anything written (so it is sorted, needs no new block, and no
 * sequence point is due before it). Encoded here as blob_put would, field by field against the
 * block's last header, without building a header of its own: the flusher's cost per event is the
 * traced program's too when the flusher shares its CPU. */
int at_ntw_event(at_ring *ring, const at_rec *r, const uint8_t *body, uint64_t tid, uint32_t seq_base)
{
    at_event_type *t = at_type_at(r->type_index);
    uint64_t ts = at_clock_file_ts(r->ts);
    evblock *b = &W.eb;
    uint32_t plen = r->payload_len;
    if (AT_UNLIKELY(r->nips || t->file_gen != W.file_gen || W.rotate_due || at_out.seg_size
                    || ts < W.max_ts || ts < W.sp_ts || b->len + BLOB_WORST + plen > BLOCK_MAX))
        return event_slow(ring, r, body, tid, seq_base, t, ts);
    blob_hdr *l = &b->last;
    uint32_t meta = t->index, seq = r->seq + seq_base;
    uint8_t *p0 = b->buf + b->len, *p = p0 + 1;
    uint8_t flags = NT_EV_SORTED;
    if (meta != l->meta) {
        flags |= NT_EV_METADATA_ID;
        p = var_u64(p, meta);
        l->meta = meta;
    }
    uint32_t proc = at_rec_cpu(r);
    if (l->seq + 1 != seq || l->cap_tid != tid || l->proc != proc) { /* meta != 0 */
        flags |= NT_EV_CAPTURE_THREAD_AND_SEQ;
        p = var_u64(p, (uint32_t)(seq - l->seq - 1));
        p = var_u64(p, tid);
        p = var_u64(p, proc);
        l->cap_tid = tid;
        l->proc = proc;
    }
    l->seq = seq;
    if (tid != l->tid) {
        flags |= NT_EV_THREAD_ID;
        p = var_u64(p, tid);
        l->tid = tid;
    }
    if (l->stack != 0) {
        flags |= NT_EV_STACK_ID;
        p = var_u64(p, 0);
        l->stack = 0;
    }
    p = var_u64(p, ts - l->ts); /* ts >= W.max_ts >= every ts of the block */
    l->ts = ts;
    const uint8_t *q = body;
    uint64_t g[2] = {0, 0};
    if (r->flags & AT_REC_ACT) {
        memcpy(g, q, 16);
        q += 16;
    }
    if (memcmp(g, &l->act, 16) != 0) {
        flags |= NT_EV_ACTIVITY_ID;
        memcpy(p, g, 16);
        memcpy(&l->act, g, 16);
        p += 16;
    }
    g[0] = g[1] = 0;
    if (r->flags & AT_REC_REL) {
        memcpy(g, q, 16);
        q += 16;
    }
    if (memcmp(g, &l->rel, 16) != 0) {
        flags |= NT_EV_RELATED_ACTIVITY_ID;
        memcpy(p, g, 16);
        memcpy(&l->rel, g, 16);
        p += 16;
    }
    if (plen != l->plen) {
        flags |= NT_EV_DATA_LENGTH;
        p = var_u64(p, plen);
        l->plen = plen;
    }
    at_copy_small(p, q, plen);
    p += plen;
    *p0 = flags;
    b->len = (size_t)(p - b->buf);
    if (ts < b->min_ts)
        b->min_ts = ts;
    b->max_ts = ts;
    b->n++;
    W.max_ts = ts;
    W.stack_fresh = false;
    at_ntw_pending_events++;
    W.file_events++;
    return 0;
}

void at_ntw_flusher_event(at_event_type *t, const void *payload, uint32_t len)
{
    uint64_t ts = W.max_ts; /* not older than anything written: the blob is sorted */
    if (t->file_gen != W.file_gen)
        put_metadata(t, ts, at_flusher_tid);
    if (W.eb.len + BLOB_WORST + len > BLOCK_MAX || (W.eb.n && ts < W.eb.last.ts))
        emit_pending();
    /* a writer thread started after the file's first events (a paused one that came back, one an
     * exec that failed started): its own thread id, numbered from 1 */
    if (AT_UNLIKELY(at_flusher_tid != W.flusher_seq_tid)) {
        W.flusher_seq_tid = at_flusher_tid;
        W.flusher_seq = W.part_flusher_seq = 0;
    }
    blob_hdr h = {0};
    h.meta = t->index;
    h.seq = ++W.flusher_seq;
    h.cap_tid = h.tid = at_flusher_tid;
    h.proc = 0xFFFFFFFFu;
    h.ts = ts;
    h.plen = len;
    blob_put(&W.eb, &h, payload, true);
}

int at_ntw_flush_end(bool force_sp)
{
    if (force_sp || (ob_pos() - W.bytes_at_sp >= SP_BYTES)
        || (ob_pos() > W.bytes_at_sp && at_now_ns() - W.sp_time >= SP_NS))
        at_ntw_write_sp();
    int rc = finish_file_part();
    W.hold = false;
    if (W.rotate_due && !at_out.failed) {
        rotate();
        rc = finish_file_part();
        W.hold = false;
    }
    return rc;
}
