/* ntreader.c: streaming reader of nettrace V4/V5 (FastSerialization framing). It reads through a
 * buffered stream (works on pipes), holds one block at a time, the metadata table, the stacks of the
 * current sequence-point interval and a per-capture-thread sequence table: memory is bounded by that
 * open state, never by file size. Fatal problems stop the parse with one message naming the file
 * offset; in strict mode (acttrace verify) every rule of the writer checklist in nettrace-v5.md §12 is
 * checked and reported through a callback without stopping. Events are returned in file order. */
#include "ntreader.h"
#include "guid.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The provider's GUID as TraceEvent gives it: the EventSource hash of the name, except for the .NET
 * runtime's providers that had GUIDs before that convention (EventPipeMetadata's legacy table), so
 * that counts by GUID agree with it. */
static void provider_guid(const char *name, at_guid *out)
{
    static const struct {
        const char *name;
        uint8_t le[16]; /* the GUID's bytes as stored (Data1-3 little-endian) */
    } legacy[] = {
        {"System.Threading.Tasks.TplEventSource",
         {0x47, 0xba, 0x5d, 0x2e, 0xd2, 0xa3, 0x16, 0x4d, 0x8e, 0xe0, 0x66, 0x71, 0xff, 0xdc, 0xd7, 0xb5}},
        {"Microsoft-Windows-DotNETRuntime",
         {0x23, 0x0d, 0x3c, 0xe1, 0xbc, 0xcc, 0x12, 0x4e, 0x93, 0x1b, 0xd9, 0xcc, 0x2e, 0xee, 0x27, 0xe4}},
        {"Microsoft-Windows-DotNETRuntimePrivate",
         {0x54, 0xd7, 0x3f, 0x76, 0x86, 0x70, 0xfe, 0x4d, 0x95, 0xeb, 0xc0, 0x1a, 0x46, 0xfa, 0xf4, 0xca}},
        {"Microsoft-Windows-DotNETRuntimeRundown",
         {0x1c, 0x02, 0x69, 0xa6, 0x50, 0xc4, 0x09, 0x46, 0xa0, 0x35, 0x5a, 0xf5, 0x9a, 0xf4, 0xdf, 0x18}},
        {"Microsoft-Windows-DotNETRuntimeStress",
         {0xba, 0xcb, 0x2b, 0xcc, 0xb6, 0x16, 0xf3, 0x4c, 0x89, 0x90, 0xd7, 0x4c, 0x2e, 0x8a, 0xf5, 0x00}},
        {"Microsoft-DotNETCore-SampleProfiler",
         {0x44, 0x0d, 0x53, 0x3c, 0xae, 0x97, 0x3a, 0x51, 0x1e, 0x6d, 0x78, 0x3e, 0x8f, 0x8e, 0x03, 0xa9}},
    };
    for (size_t i = 0; i < sizeof legacy / sizeof legacy[0]; i++)
        if (!strcmp(name, legacy[i].name)) {
            memcpy(out->b, legacy[i].le, 16);
            return;
        }
    at_guid_from_provider_name(name, out);
}

#define NT_STREAM_BUF (256 * 1024)
#define NT_GROW_STEP (4u << 20)       /* a block buffer grows at most this far ahead of the data read */
#define NT_MAX_READ_BLOCK (256u << 20) /* writers use 100 KiB blocks; far larger is a corrupt size */
#define NT_MAX_NAME 64                /* type names are short; a longer one is corruption */
#define NT_MAX_FIELD_DEPTH 16
#define NT_ERR_LEN 512

enum { BLK_NONE, BLK_EVENT, BLK_METADATA, BLK_STACK, BLK_SP };
static const char *const blk_names[] = {"", NT_NAME_EVENT_BLOCK, NT_NAME_METADATA_BLOCK, NT_NAME_STACK_BLOCK,
                                        NT_NAME_SP_BLOCK};

/* Compressed-header state carried from blob to blob inside one block. */
typedef struct blob_hdr {
    uint32_t meta_id;
    uint32_t seq;
    uint64_t capture_thread;
    uint32_t proc;
    uint64_t thread;
    uint32_t stack_id;
    uint64_t timestamp;
    at_guid activity, related;
    uint32_t payload_len;
} blob_hdr;

typedef struct thread_ent {
    nt_thread_stat st;
    uint64_t last_ts;
    bool used;
} thread_ent;

typedef struct stack_ent {
    uint32_t id;
    uint32_t nframes;
    uint64_t start;   /* index into the frame arena */
    bool used;
} stack_ent;

struct nt_reader {
    /* input */
    int fd;
    bool own_fd;
    const uint8_t *mem;     /* memory input (no fd) */
    uint8_t *buf;           /* stream buffer */
    size_t buf_len, buf_pos;
    uint64_t off;           /* absolute offset of the next unread byte */
    uint64_t file_size;     /* 0 if unknown (pipe) */
    bool eof;
    char name[256];

    nt_options opt;
    char err[NT_ERR_LEN];
    int state;              /* 0 reading objects, 1 inside an event block, 2 ended, 3 error */

    nt_trace_info info;
    nt_counts counts;
    uint64_t problems;

    /* current block */
    uint8_t *blk;
    size_t blk_cap;
    uint32_t blk_size, blk_pos, blk_hdr_size;
    uint64_t blk_off;       /* file offset of blk[0] */
    int blk_kind;
    bool blk_compressed;
    uint64_t blk_min_ts, blk_max_ts;
    blob_hdr last;
    uint64_t blk_prev_capture;
    bool blk_first;

    /* metadata: id -> index into metas (open addressing), metas in definition order */
    nt_metadata **metas;
    size_t nmetas, metas_cap;
    uint32_t *meta_ids;     /* hash keys; 0 = empty */
    uint32_t *meta_idx;
    size_t meta_hcap;

    /* stacks of the current SP interval */
    stack_ent *stacks;
    size_t stack_hcap, nstacks;
    uint64_t *frames;
    size_t nframes, frames_cap;

    /* capture threads */
    thread_ent *threads;
    size_t thread_hcap, nthreads;
    nt_thread_stat *thread_list;   /* snapshot for nt_thread_at */
    size_t thread_list_cap;

    uint64_t max_event_ts;  /* since the start, for the SP rule */
    uint64_t order_floor;   /* newest IsSorted event or sequence point so far (opt.order) */
    bool reported_before_sync;
    bool any_event;

    /* A file whose first block is a sequence point (acttrace's writer: the baseline of the threads'
     * numbers) counts every capture thread's drops from that baseline, also those before a thread's
     * first event; other files follow TraceEvent (a thread's first number starts its count). */
    bool seq_baseline;
    uint64_t good_end;      /* end of the last complete object: where damage starts */
    uint64_t tail_off;      /* > 0: reading a part after an end tag whose first byte was never written */
    uint64_t trailing;      /* bytes after the end tag that are no part of ours (damage) */
    nt_damage damage;
    char damage_msg[NT_ERR_LEN];
};

/* ---------------------------------------------------------------- errors and problems */

static int fail(nt_reader *r, uint64_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(nt_reader *r, uint64_t off, const char *fmt, ...)
{
    if (r->state == 3) return -1;
    char msg[NT_ERR_LEN - 240];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, sizeof r->err, "%.180s: offset %llu (0x%llx): %s", r->name, (unsigned long long)off,
             (unsigned long long)off, msg);
    r->state = 3;
    return -1;
}

static void problem(nt_reader *r, uint64_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void problem(nt_reader *r, uint64_t off, const char *fmt, ...)
{
    r->problems++;
    if (!r->opt.problem) return;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->opt.problem(r->opt.ctx, off, msg);
}

/* ---------------------------------------------------------------- buffered input */

/* Make at least `need` bytes available at buf_pos if the input has them. Returns bytes available. */
static size_t rd_avail(nt_reader *r, size_t need)
{
    size_t have = r->buf_len - r->buf_pos;
    if (have >= need || r->eof || r->mem) return have;
    if (r->buf_pos > 0) {
        memmove(r->buf, r->buf + r->buf_pos, have);
        r->buf_len = have;
        r->buf_pos = 0;
    }
    while (r->buf_len < need && !r->eof) {
        ssize_t k = read(r->fd, r->buf + r->buf_len, NT_STREAM_BUF - r->buf_len);
        if (k < 0) {
            if (errno == EINTR) continue;
            r->eof = true; /* reported as truncation by the caller; errno kept in the message */
            snprintf(r->err, sizeof r->err, "%s: read error: %s", r->name, strerror(errno));
            break;
        }
        if (k == 0) r->eof = true;
        r->buf_len += (size_t)k;
    }
    return r->buf_len - r->buf_pos;
}

/* Copy n bytes (n <= NT_STREAM_BUF) or fail with a truncation message naming what was expected. */
static int rd_bytes(nt_reader *r, void *dst, size_t n, const char *what)
{
    if (rd_avail(r, n) < n)
        return fail(r, r->off, "file ends inside %s (needed %zu bytes, %zu left)", what, n,
                    r->buf_len - r->buf_pos);
    memcpy(dst, r->buf + r->buf_pos, n);
    r->buf_pos += n;
    r->off += n;
    return 0;
}

static int rd_u8(nt_reader *r, uint8_t *v, const char *what) { return rd_bytes(r, v, 1, what); }

static int rd_i32(nt_reader *r, int32_t *v, const char *what)
{
    uint8_t b[4];
    if (rd_bytes(r, b, 4, what)) return -1;
    *v = (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
    return 0;
}

/* Read n bytes into the block buffer. The buffer grows only as data actually arrives, so a corrupt
 * size can never make us allocate more than the input holds (plus one step). */
static int rd_block(nt_reader *r, uint32_t n)
{
    if (r->file_size && r->off + n > r->file_size)
        return fail(r, r->off, "%s of %u bytes runs past the end of the file (%llu bytes left)",
                    blk_names[r->blk_kind], n, (unsigned long long)(r->file_size - r->off));
    size_t got = 0;
    while (got < n) {
        size_t want = n;
        if (!r->file_size && want > got + NT_GROW_STEP) want = got + NT_GROW_STEP;
        if (want + 64 > r->blk_cap) {
            size_t cap = r->blk_cap ? r->blk_cap : 64 * 1024;
            while (cap < want + 64) cap *= 2;
            uint8_t *nb = realloc(r->blk, cap);
            if (!nb) return fail(r, r->off, "out of memory for a %u-byte block", n);
            r->blk = nb;
            r->blk_cap = cap;
        }
        /* drain the stream buffer first, then read the rest directly */
        size_t have = r->buf_len - r->buf_pos;
        if (have) {
            size_t take = have < want - got ? have : want - got;
            memcpy(r->blk + got, r->buf + r->buf_pos, take);
            r->buf_pos += take;
            got += take;
            r->off += take;
            continue;
        }
        if (r->mem || r->eof)
            return fail(r, r->off, "file ends inside a %s (%u bytes declared, %zu present)",
                        blk_names[r->blk_kind], n, got);
        ssize_t k = read(r->fd, r->blk + got, want - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            r->eof = true;
            if (k < 0)
                return fail(r, r->off, "read error: %s", strerror(errno));
            return fail(r, r->off, "file ends inside a %s (%u bytes declared, %zu present)",
                        blk_names[r->blk_kind], n, got);
        }
        got += (size_t)k;
        r->off += (uint64_t)k;
    }
    return 0;
}

/* ---------------------------------------------------------------- little helpers on block bytes */

static inline uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t ld32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t ld64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* LEB128 within [*pos, end). Returns false on running off the end or an over-long encoding. */
static inline bool varu64(const uint8_t *b, uint32_t end, uint32_t *pos, uint64_t *out, int maxbytes)
{
    uint64_t v = 0;
    uint32_t p = *pos;
    for (int i = 0, shift = 0; i < maxbytes; i++, shift += 7) {
        if (p >= end) return false;
        uint8_t c = b[p++];
        v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            *pos = p;
            *out = v;
            return true;
        }
    }
    return false;
}

/* ---------------------------------------------------------------- hash tables */

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static const nt_metadata *meta_find(const nt_reader *r, uint32_t id)
{
    if (!r->meta_hcap || id == 0) return NULL;
    size_t mask = r->meta_hcap - 1;
    for (size_t i = mix64(id) & mask;; i = (i + 1) & mask) {
        if (r->meta_ids[i] == 0) return NULL;
        if (r->meta_ids[i] == id) return r->metas[r->meta_idx[i]];
    }
}

static bool meta_insert(nt_reader *r, nt_metadata *m)
{
    if ((r->nmetas + 1) * 2 > r->meta_hcap) {
        size_t ncap = r->meta_hcap ? r->meta_hcap * 2 : 64;
        uint32_t *ids = calloc(ncap, sizeof *ids), *idx = calloc(ncap, sizeof *idx);
        if (!ids || !idx) {
            free(ids);
            free(idx);
            return false;
        }
        for (size_t i = 0; i < r->meta_hcap; i++) {
            if (!r->meta_ids[i]) continue;
            size_t j = mix64(r->meta_ids[i]) & (ncap - 1);
            while (ids[j]) j = (j + 1) & (ncap - 1);
            ids[j] = r->meta_ids[i];
            idx[j] = r->meta_idx[i];
        }
        free(r->meta_ids);
        free(r->meta_idx);
        r->meta_ids = ids;
        r->meta_idx = idx;
        r->meta_hcap = ncap;
    }
    if (r->nmetas == r->metas_cap) {
        size_t ncap = r->metas_cap ? r->metas_cap * 2 : 64;
        nt_metadata **nm = realloc(r->metas, ncap * sizeof *nm);
        if (!nm) return false;
        r->metas = nm;
        r->metas_cap = ncap;
    }
    size_t j = mix64(m->id) & (r->meta_hcap - 1);
    while (r->meta_ids[j]) j = (j + 1) & (r->meta_hcap - 1);
    r->meta_ids[j] = m->id;
    r->meta_idx[j] = (uint32_t)r->nmetas;
    r->metas[r->nmetas++] = m;
    return true;
}

static thread_ent *thread_get(nt_reader *r, uint64_t tid, bool *created)
{
    if ((r->nthreads + 1) * 2 > r->thread_hcap) {
        size_t ncap = r->thread_hcap ? r->thread_hcap * 2 : 64;
        thread_ent *nt = calloc(ncap, sizeof *nt);
        if (!nt) return NULL;
        for (size_t i = 0; i < r->thread_hcap; i++) {
            if (!r->threads[i].used) continue;
            size_t j = mix64(r->threads[i].st.capture_thread) & (ncap - 1);
            while (nt[j].used) j = (j + 1) & (ncap - 1);
            nt[j] = r->threads[i];
        }
        free(r->threads);
        r->threads = nt;
        r->thread_hcap = ncap;
    }
    size_t mask = r->thread_hcap - 1;
    for (size_t i = mix64(tid) & mask;; i = (i + 1) & mask) {
        if (!r->threads[i].used) {
            r->threads[i].used = true;
            r->threads[i].st.capture_thread = tid;
            r->nthreads++;
            *created = true;
            return &r->threads[i];
        }
        if (r->threads[i].st.capture_thread == tid) {
            *created = false;
            return &r->threads[i];
        }
    }
}

static const stack_ent *stack_find(const nt_reader *r, uint32_t id)
{
    if (!r->nstacks) return NULL;
    size_t mask = r->stack_hcap - 1;
    for (size_t i = mix64(id) & mask;; i = (i + 1) & mask) {
        if (!r->stacks[i].used) return NULL;
        if (r->stacks[i].id == id) return &r->stacks[i];
    }
}

/* Returns 0 ok, 1 duplicate, -1 out of memory. */
static int stack_insert(nt_reader *r, uint32_t id, uint64_t start, uint32_t nframes)
{
    if ((r->nstacks + 1) * 2 > r->stack_hcap) {
        size_t ncap = r->stack_hcap ? r->stack_hcap * 2 : 256;
        stack_ent *ns = calloc(ncap, sizeof *ns);
        if (!ns) return -1;
        for (size_t i = 0; i < r->stack_hcap; i++) {
            if (!r->stacks[i].used) continue;
            size_t j = mix64(r->stacks[i].id) & (ncap - 1);
            while (ns[j].used) j = (j + 1) & (ncap - 1);
            ns[j] = r->stacks[i];
        }
        free(r->stacks);
        r->stacks = ns;
        r->stack_hcap = ncap;
    }
    size_t mask = r->stack_hcap - 1;
    size_t i = mix64(id) & mask;
    for (; r->stacks[i].used; i = (i + 1) & mask)
        if (r->stacks[i].id == id) return 1;
    r->stacks[i] = (stack_ent){id, nframes, start, true};
    r->nstacks++;
    return 0;
}

static void stacks_flush(nt_reader *r)
{
    if (r->nstacks) memset(r->stacks, 0, r->stack_hcap * sizeof *r->stacks);
    r->nstacks = 0;
    r->nframes = 0;
}

/* ---------------------------------------------------------------- metadata parsing */

typedef struct mreader {
    const uint8_t *b;
    uint32_t pos, end;
    uint64_t base;       /* file offset of b[0] */
    const char *err;     /* first problem, static text */
    uint64_t err_off;
} mreader;

static bool m_need(mreader *m, uint32_t n, const char *what)
{
    if (m->end - m->pos < n) {
        if (!m->err) {
            m->err = what;
            m->err_off = m->base + m->pos;
        }
        return false;
    }
    return true;
}

static bool m_i32(mreader *m, int32_t *v, const char *what)
{
    if (!m_need(m, 4, what)) return false;
    *v = (int32_t)ld32(m->b + m->pos);
    m->pos += 4;
    return true;
}

/* UTF-16LE NUL-terminated string -> malloc'd UTF-8. */
static char *m_wstr(mreader *m, const char *what)
{
    uint32_t p = m->pos;
    while (1) {
        if (m->end - p < 2) {
            m_need(m, m->end - m->pos + 1, what);
            return NULL;
        }
        if (ld16(m->b + p) == 0) break;
        p += 2;
    }
    size_t units = (p - m->pos) / 2;
    char *s = malloc(units * 3 + 1);
    if (!s) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < units; i++) {
        uint32_t c = ld16(m->b + m->pos + 2 * i);
        if (c >= 0xD800 && c < 0xDC00 && i + 1 < units) {
            uint32_t c2 = ld16(m->b + m->pos + 2 * i + 2);
            if (c2 >= 0xDC00 && c2 < 0xE000) {
                c = 0x10000 + ((c - 0xD800) << 10) + (c2 - 0xDC00);
                i++;
            }
        }
        if (c >= 0xD800 && c < 0xE000) c = 0xFFFD;
        if (c < 0x80) s[o++] = (char)c;
        else if (c < 0x800) { s[o++] = (char)(0xC0 | c >> 6); s[o++] = (char)(0x80 | (c & 0x3F)); }
        else if (c < 0x10000) {
            s[o++] = (char)(0xE0 | c >> 12); s[o++] = (char)(0x80 | ((c >> 6) & 0x3F));
            s[o++] = (char)(0x80 | (c & 0x3F));
        } else {
            s[o++] = (char)(0xF0 | c >> 18); s[o++] = (char)(0x80 | ((c >> 12) & 0x3F));
            s[o++] = (char)(0x80 | ((c >> 6) & 0x3F)); s[o++] = (char)(0x80 | (c & 0x3F));
        }
    }
    s[o] = 0;
    m->pos = p + 2;
    return s;
}

static void fields_free(nt_field *f, uint32_t n)
{
    if (!f) return;
    for (uint32_t i = 0; i < n; i++) {
        free(f[i].name);
        fields_free(f[i].fields, f[i].nfields);
    }
    free(f);
}

static bool type_ok_v1(uint32_t t) { return t == NT_TYPE_OBJECT || (t >= 3 && t <= 18); }

/* V1 field list: int32 count, count x {int32 type; [object: nested list]; wchar name}. */
static bool parse_fields_v1(mreader *m, nt_field **out, uint32_t *nout, int depth)
{
    int32_t n;
    *out = NULL;
    *nout = 0;
    if (!m_i32(m, &n, "field count")) return false;
    if (n < 0 || (uint32_t)n > (m->end - m->pos) / 6) { /* each field takes at least 6 bytes */
        if (!m->err) { m->err = "field count larger than the metadata payload"; m->err_off = m->base + m->pos - 4; }
        return false;
    }
    if (n == 0) return true;
    nt_field *f = calloc((size_t)n, sizeof *f);
    if (!f) return false;
    *out = f;
    for (int32_t i = 0; i < n; i++) {
        int32_t t;
        if (!m_i32(m, &t, "field type")) return false;
        f[i].type = (uint32_t)t;
        *nout = (uint32_t)i + 1;
        if (!type_ok_v1(f[i].type)) {
            if (!m->err) { m->err = "unsupported field type code in the V1 field list"; m->err_off = m->base + m->pos - 4; }
            return false;
        }
        if (f[i].type == NT_TYPE_OBJECT) {
            if (depth >= NT_MAX_FIELD_DEPTH) {
                if (!m->err) { m->err = "nested object fields too deep"; m->err_off = m->base + m->pos; }
                return false;
            }
            if (!parse_fields_v1(m, &f[i].fields, &f[i].nfields, depth + 1)) return false;
        }
        if (!(f[i].name = m_wstr(m, "field name"))) return false;
    }
    return true;
}

static bool parse_field_v2(mreader *m, nt_field *f, int depth);

/* V2 list: int32 count, count x {int32 size (incl. itself), wchar name, int32 type, [elem type], [nested]}. */
static bool parse_fields_v2(mreader *m, nt_field **out, uint32_t *nout, int depth)
{
    int32_t n;
    *out = NULL;
    *nout = 0;
    if (!m_i32(m, &n, "V2 field count")) return false;
    if (n < 0 || (uint32_t)n > (m->end - m->pos) / 10) {
        if (!m->err) { m->err = "V2 field count larger than the tag"; m->err_off = m->base + m->pos - 4; }
        return false;
    }
    if (n == 0) return true;
    nt_field *f = calloc((size_t)n, sizeof *f);
    if (!f) return false;
    *out = f;
    for (int32_t i = 0; i < n; i++) {
        *nout = (uint32_t)i + 1;
        if (!parse_field_v2(m, &f[i], depth)) return false;
    }
    return true;
}

/* Type (and for arrays the element type, for objects the nested list) of a V2 field. */
static bool parse_type_v2(mreader *m, nt_field *f, uint32_t type, int depth)
{
    if (type == NT_TYPE_ARRAY) {
        int32_t et;
        if (!m_i32(m, &et, "array element type")) return false;
        f->elem_type = (uint32_t)et;
        if (f->elem_type == NT_TYPE_ARRAY || !type_ok_v1(f->elem_type)) {
            if (!m->err) { m->err = "unsupported array element type"; m->err_off = m->base + m->pos - 4; }
            return false;
        }
        if (f->elem_type == NT_TYPE_OBJECT) {
            if (depth >= NT_MAX_FIELD_DEPTH) {
                if (!m->err) { m->err = "nested fields too deep"; m->err_off = m->base + m->pos; }
                return false;
            }
            return parse_fields_v2(m, &f->fields, &f->nfields, depth + 1);
        }
        return true;
    }
    if (type == NT_TYPE_OBJECT) {
        if (depth >= NT_MAX_FIELD_DEPTH) {
            if (!m->err) { m->err = "nested fields too deep"; m->err_off = m->base + m->pos; }
            return false;
        }
        return parse_fields_v2(m, &f->fields, &f->nfields, depth + 1);
    }
    if (!type_ok_v1(type)) {
        if (!m->err) { m->err = "unsupported field type code in the V2 field list"; m->err_off = m->base + m->pos - 4; }
        return false;
    }
    return true;
}

static bool parse_field_v2(mreader *m, nt_field *f, int depth)
{
    uint32_t start = m->pos;
    int32_t size, type;
    if (!m_i32(m, &size, "V2 field size")) return false;
    if (size < 4 || (uint32_t)size > m->end - start) {
        if (!m->err) { m->err = "V2 field size out of range"; m->err_off = m->base + start; }
        return false;
    }
    uint32_t saved_end = m->end;
    m->end = start + (uint32_t)size;
    bool ok = (f->name = m_wstr(m, "V2 field name")) && m_i32(m, &type, "V2 field type");
    if (ok) {
        f->type = (uint32_t)type;
        ok = parse_type_v2(m, f, f->type, depth);
    }
    m->end = saved_end;
    m->pos = start + (uint32_t)size; /* padding up to Size is skipped */
    return ok;
}

static bool ends_with_ci(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    if (a < b) return false;
    for (size_t i = 0; i < b; i++) {
        char x = s[a - b + i], y = suf[i];
        if (x >= 'A' && x <= 'Z') x = (char)(x + 32);
        if (y >= 'A' && y <= 'Z') y = (char)(y + 32);
        if (x != y) return false;
    }
    return true;
}

static void meta_free(nt_metadata *m)
{
    if (!m) return;
    free(m->provider);
    free(m->name);
    fields_free(m->fields, m->nfields);
    free(m);
}

/* Parse one metadata payload (nettrace-v5.md §4.4). Structural errors of the identity part are fatal;
 * a field list TraceEvent could not parse leaves the metadata without fields (as TraceEvent does) and is
 * reported as a problem. */
static int parse_metadata(nt_reader *r, const uint8_t *p, uint32_t len, uint64_t off)
{
    mreader m = {p, 0, len, off, NULL, 0};
    nt_metadata *md = calloc(1, sizeof *md);
    if (!md) return fail(r, off, "out of memory");
    int32_t id, evid, ver, lvl;
    int64_t kw;
    if (!m_i32(&m, &id, "metadata id") || !(md->provider = m_wstr(&m, "provider name")) ||
        !m_i32(&m, &evid, "event id") || !(md->name = m_wstr(&m, "event name")) || !m_need(&m, 8, "keywords")) {
        meta_free(md);
        return fail(r, m.err ? m.err_off : off, "metadata record ends inside its %s", m.err ? m.err : "header");
    }
    kw = (int64_t)ld64(p + m.pos);
    m.pos += 8;
    if (!m_i32(&m, &ver, "version") || !m_i32(&m, &lvl, "level")) {
        meta_free(md);
        return fail(r, m.err_off, "metadata record ends inside its %s", m.err);
    }
    md->id = (uint32_t)id;
    md->event_id = (uint32_t)evid;
    md->keywords = (uint64_t)kw;
    md->version = (uint32_t)ver;
    md->level = (uint32_t)lvl;
    provider_guid(md->provider, &md->provider_guid);
    if (id <= 0) {
        meta_free(md);
        return fail(r, off, "metadata id %d is not positive", id);
    }
    if (meta_find(r, md->id)) {
        uint32_t dup = md->id;
        meta_free(md);
        return fail(r, off, "metadata id %u defined twice (ids must be unique in a V5 file)", dup);
    }

    bool fields_ok = parse_fields_v1(&m, &md->fields, &md->nfields, 0);
    /* tags: int32 payload bytes, uint8 kind, payload; repeated to the end */
    while (fields_ok && m.pos < m.end) {
        int32_t tlen;
        uint8_t kind;
        uint32_t tstart = m.pos;
        if (!m_i32(&m, &tlen, "tag size") || !m_need(&m, 1, "tag kind")) { fields_ok = false; break; }
        kind = m.b[m.pos++];
        if (tlen < 0 || (uint32_t)tlen > m.end - m.pos) {
            m.err = "metadata tag size runs past the record";
            m.err_off = off + tstart;
            fields_ok = false;
            break;
        }
        uint32_t tend = m.pos + (uint32_t)tlen;
        if (kind == NT_META_TAG_OPCODE) {
            if (tlen < 1) {
                m.err = "empty OpCode tag";
                m.err_off = off + tstart;
                fields_ok = false;
                break;
            }
            md->opcode = m.b[m.pos];
            md->has_opcode_tag = true;
        } else if (kind == NT_META_TAG_V2PARAMS) {
            if (md->nfields) {
                m.err = "V2Params tag after a non-empty V1 field list";
                m.err_off = off + tstart;
            }
            fields_free(md->fields, md->nfields);
            md->fields = NULL;
            md->nfields = 0;
            uint32_t saved = m.end;
            m.end = tend;
            fields_ok = parse_fields_v2(&m, &md->fields, &md->nfields, 0);
            m.end = saved;
            if (fields_ok && m.pos != tend && r->opt.strict)
                problem(r, off + m.pos, "metadata id %u: V2Params tag has %u unparsed bytes", md->id, tend - m.pos);
        } else if (r->opt.strict) {
            problem(r, off + tstart, "metadata id %u: unknown tag kind %u (skipped)", md->id, kind);
        }
        m.pos = tend;
    }
    if (!fields_ok) {
        fields_free(md->fields, md->nfields);
        md->fields = NULL;
        md->nfields = 0;
        problem(r, m.err ? m.err_off : off, "metadata id %u (%s/%s): %s; the event is kept without fields",
                md->id, md->provider, md->name, m.err ? m.err : "unreadable field list");
    }
    /* TraceEvent's implied opcode: no tag and a Start/Stop suffix */
    if (!md->has_opcode_tag) {
        if (ends_with_ci(md->name, "Start")) md->opcode = NT_OPCODE_START;
        else if (ends_with_ci(md->name, "Stop")) md->opcode = NT_OPCODE_STOP;
    }
    if (!meta_insert(r, md)) {
        meta_free(md);
        return fail(r, off, "out of memory");
    }
    r->counts.metadata++;
    if (r->opt.on_metadata) r->opt.on_metadata(r->opt.ctx, md);
    return 0;
}

/* ---------------------------------------------------------------- blobs */

/* Decode the next blob header of the current block at blk_pos into r->last. Returns 0 / -1. The
 * payload is at blk[*payload_pos .. + last.payload_len]. */
static int next_blob(nt_reader *r, uint32_t *payload_pos, bool *sorted, uint64_t *blob_off)
{
    const uint8_t *b = r->blk;
    uint32_t end = r->blk_size, p = r->blk_pos;
    blob_hdr *h = &r->last;
    *blob_off = r->blk_off + p;
    if (r->blk_compressed) {
        uint64_t v;
        uint8_t fl = b[p++];
#define VAR(dst, maxb, what)                                                                            \
    do {                                                                                                \
        if (!varu64(b, end, &p, &v, maxb))                                                              \
            return fail(r, r->blk_off + p, "bad or truncated varint (%s) in the blob at offset %llu", what, \
                        (unsigned long long)*blob_off);                                                 \
        dst = v;                                                                                        \
    } while (0)
        if (fl & NT_EV_METADATA_ID) VAR(h->meta_id, 5, "metadata id");
        if (fl & NT_EV_CAPTURE_THREAD_AND_SEQ) {
            uint32_t delta;
            VAR(delta, 5, "sequence delta");
            h->seq = h->seq + delta + 1;
            VAR(h->capture_thread, 10, "capture thread");
            VAR(h->proc, 5, "processor number");
        } else if (h->meta_id != 0) {
            h->seq++;
        }
        if (fl & NT_EV_THREAD_ID) VAR(h->thread, 10, "thread id");
        if (fl & NT_EV_STACK_ID) VAR(h->stack_id, 5, "stack id");
        uint64_t dts;
        VAR(dts, 10, "timestamp delta");
        /* wraps on purpose: real runtime files encode a step back as a 64-bit wrap-around delta */
        h->timestamp += dts;
        if (fl & NT_EV_ACTIVITY_ID) {
            if (end - p < 16) goto trunc;
            memcpy(h->activity.b, b + p, 16);
            p += 16;
        }
        if (fl & NT_EV_RELATED_ACTIVITY_ID) {
            if (end - p < 16) goto trunc;
            memcpy(h->related.b, b + p, 16);
            p += 16;
        }
        *sorted = (fl & NT_EV_SORTED) != 0;
        if (fl & NT_EV_DATA_LENGTH) VAR(h->payload_len, 5, "payload size");
#undef VAR
        if (h->payload_len > end - p)
            return fail(r, *blob_off, "blob payload of %u bytes runs past the end of its block (%u bytes left)",
                        h->payload_len, end - p);
        *payload_pos = p;
        r->blk_pos = p + h->payload_len;
        return 0;
    }
    /* uncompressed V4 layout (nettrace-v5.md §4.2) */
    if (end - p < 80) goto trunc;
    uint32_t evsize = ld32(b + p);
    uint32_t mid = ld32(b + p + 4);
    h->meta_id = mid & 0x7FFFFFFFu;
    *sorted = (mid & 0x80000000u) == 0;
    h->seq = ld32(b + p + 8);
    h->thread = ld64(b + p + 12);
    h->capture_thread = ld64(b + p + 20);
    h->proc = ld32(b + p + 28);
    h->stack_id = ld32(b + p + 32);
    h->timestamp = ld64(b + p + 36);
    memcpy(h->activity.b, b + p + 44, 16);
    memcpy(h->related.b, b + p + 60, 16);
    h->payload_len = ld32(b + p + 76);
    if (h->payload_len > end - p - 80)
        return fail(r, *blob_off, "blob payload of %u bytes runs past the end of its block", h->payload_len);
    *payload_pos = p + 80;
    uint32_t next = p + 80 + h->payload_len;
    /* The runtime pads uncompressed events to 4 bytes and counts the padding in EventSize. */
    if (evsize >= 76 + h->payload_len && evsize - (76 + h->payload_len) < 4 && evsize <= end - p - 4)
        next = p + 4 + evsize;
    r->blk_pos = next;
    return 0;
trunc:
    return fail(r, *blob_off, "blob header runs past the end of its block");
}

/* Strict-mode checks common to event and metadata blobs. */
static void check_blob_common(nt_reader *r, uint64_t boff)
{
    if (r->last.timestamp < r->blk_min_ts || r->last.timestamp > r->blk_max_ts)
        problem(r, boff, "blob timestamp %llu outside the block's [min %llu, max %llu]",
                (unsigned long long)r->last.timestamp, (unsigned long long)r->blk_min_ts,
                (unsigned long long)r->blk_max_ts);
}

static int parse_metadata_block(nt_reader *r)
{
    while (r->blk_pos < r->blk_size) {
        uint32_t pp;
        bool sorted;
        uint64_t boff;
        if (next_blob(r, &pp, &sorted, &boff)) return -1;
        if (r->opt.strict) {
            check_blob_common(r, boff);
            if (r->last.meta_id != 0)
                problem(r, boff, "metadata blob has metadata id %u in its header (must be 0)", r->last.meta_id);
            if (r->last.seq != 0 || r->last.capture_thread != 0)
                problem(r, boff, "metadata blob has sequence %u / capture thread %llu (must be 0 / 0)", r->last.seq,
                        (unsigned long long)r->last.capture_thread);
        }
        if (parse_metadata(r, r->blk + pp, r->last.payload_len, r->blk_off + pp)) return -1;
    }
    return 0;
}

static int parse_stack_block(nt_reader *r)
{
    const uint8_t *b = r->blk;
    uint32_t end = r->blk_size, p = 0;
    if (end < 8) return fail(r, r->blk_off, "StackBlock of %u bytes is shorter than its 8-byte header", end);
    uint32_t first = ld32(b), count = ld32(b + 4);
    p = 8;
    uint32_t ps = (uint32_t)r->info.pointer_size;
    for (uint32_t i = 0; i < count; i++) {
        if (end - p < 4)
            return fail(r, r->blk_off + p, "StackBlock declares %u stacks but ends after %u", count, i);
        uint32_t sz = ld32(b + p);
        p += 4;
        if (sz > end - p)
            return fail(r, r->blk_off + p - 4, "stack %u of %u bytes runs past the end of its StackBlock",
                        first + i, sz);
        if (sz % ps && r->opt.strict)
            problem(r, r->blk_off + p - 4, "stack %u size %u is not a multiple of the pointer size %u", first + i,
                    sz, ps);
        uint32_t n = sz / ps;
        if (r->nframes + n > r->frames_cap) {
            size_t cap = r->frames_cap ? r->frames_cap : 4096;
            while (cap < r->nframes + n) cap *= 2;
            uint64_t *nf = realloc(r->frames, cap * sizeof *nf);
            if (!nf) return fail(r, r->blk_off + p, "out of memory for stacks");
            r->frames = nf;
            r->frames_cap = cap;
        }
        for (uint32_t k = 0; k < n; k++)
            r->frames[r->nframes + k] = ps == 8 ? ld64(b + p + 8 * k) : ld32(b + p + 4 * k);
        int rc = stack_insert(r, first + i, r->nframes, n);
        if (rc < 0) return fail(r, r->blk_off, "out of memory for stacks");
        if (rc > 0)
            return fail(r, r->blk_off + p - 4,
                        "stack id %u defined twice before a sequence point (TraceEvent aborts on this)", first + i);
        r->nframes += n;
        p += sz;
    }
    if (p != end && r->opt.strict)
        problem(r, r->blk_off + p, "StackBlock has %u bytes after its %u declared stacks", end - p, count);
    r->counts.stack_blocks++;
    return 0;
}

static void note_seq(nt_reader *r, thread_ent *t, uint32_t expected_last, uint64_t off, bool from_sp, bool first)
{
    /* TraceEvent: a thread whose last sequence number is 0 counts no drops (recycled thread id);
     * a file with a baseline counts from 0 */
    if (t->st.last_seq != 0 || r->seq_baseline) {
        int32_t d = (int32_t)(expected_last - t->st.last_seq);
        if (d > 0) {
            t->st.dropped += (uint32_t)d;
            r->counts.events_lost += (uint32_t)d; /* drops are data, not a structural problem */
            if (t->st.last_seq == 0)
                r->counts.events_lost_first += (uint32_t)d;
        } else if (d < 0 && !first) { /* a first number past 2^31 is a counter that wrapped, not a regression */
            problem(r, off, "sequence number of capture thread %llu goes backwards (%u after %u)",
                    (unsigned long long)t->st.capture_thread, expected_last + (from_sp ? 0 : 1), t->st.last_seq);
        }
    }
}

static int parse_sp_block(nt_reader *r)
{
    const uint8_t *b = r->blk;
    uint32_t end = r->blk_size;
    if (end < 12) return fail(r, r->blk_off, "SPBlock of %u bytes is shorter than its 12-byte header", end);
    uint64_t ts = ld64(b);
    uint32_t n = ld32(b + 8);
    if (n > (end - 12) / 12)
        return fail(r, r->blk_off + 8, "SPBlock declares %u threads but holds room for %u", n, (end - 12) / 12);
    if (ts > r->order_floor) r->order_floor = ts;
    if (r->opt.strict) {
        if (r->any_event && ts <= r->max_event_ts)
            problem(r, r->blk_off, "sequence point timestamp %llu is not greater than an earlier event's %llu",
                    (unsigned long long)ts, (unsigned long long)r->max_event_ts);
        if (12 + 12 * n != end)
            problem(r, r->blk_off + 12 + 12 * n, "SPBlock has %u bytes after its %u thread entries",
                    end - 12 - 12 * n, n);
    }
    /* the file's first block: the baseline (nothing before it can have been lost in this file) */
    bool baseline = r->counts.event_blocks + r->counts.metadata_blocks + r->counts.stack_blocks
                        + r->counts.sp_blocks == 0;
    if (baseline) r->seq_baseline = true;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *e = b + 12 + 12 * i;
        uint64_t tid = ld64(e);
        uint32_t seq = ld32(e + 8);
        bool created;
        thread_ent *t = thread_get(r, tid, &created);
        if (!t) return fail(r, r->blk_off, "out of memory");
        /* number 0: the id's thread ended and a new one has it (the kernel reuses ids): its numbers
         * start again, as TraceEvent takes a last number of 0 (a recycled thread) */
        if (!baseline && seq != 0 && (!created || r->seq_baseline))
            note_seq(r, t, seq, r->blk_off + 12 + 12 * i, true, created);
        t->st.last_seq = seq;
    }
    stacks_flush(r);
    r->counts.sp_blocks++;
    return 0;
}

/* ---------------------------------------------------------------- objects */

static int expect_tag(nt_reader *r, uint8_t want, const char *what)
{
    uint8_t t;
    uint64_t off = r->off;
    if (rd_u8(r, &t, what)) return -1;
    if (t != want) return fail(r, off, "expected %s (tag %u), found byte 0x%02x", what, want, t);
    return 0;
}

/* Reads "BeginPrivateObject, BeginPrivateObject, NullReference, version, minVersion, name, EndObject"
 * after the first tag. */
static int read_type(nt_reader *r, int32_t *ver, int32_t *minver, char name[NT_MAX_NAME + 1])
{
    int32_t len;
    uint64_t off;
    if (expect_tag(r, NT_TAG_BEGIN_PRIVATE_OBJECT, "BeginPrivateObject of the type") ||
        expect_tag(r, NT_TAG_NULL_REFERENCE, "NullReference (type of a type)") ||
        rd_i32(r, ver, "object version") || rd_i32(r, minver, "minimum reader version"))
        return -1;
    off = r->off;
    if (rd_i32(r, &len, "type name length")) return -1;
    if (len <= 0 || len > NT_MAX_NAME) return fail(r, off, "type name length %d out of range", len);
    if (rd_bytes(r, name, (size_t)len, "type name")) return -1;
    name[len] = 0;
    return expect_tag(r, NT_TAG_END_OBJECT, "EndObject after the type name");
}

static int read_header(nt_reader *r)
{
    uint8_t magic[8];
    size_t have = rd_avail(r, 24);
    static const uint8_t netperf[24] = {0x14, 0, 0, 0, '!', 'F', 'a', 's', 't', 'S', 'e', 'r',
                                        'i',  'a', 'l', 'i', 'z', 'a', 't', 'i', 'o', 'n', '.', '1'};
    if (have >= 24 && memcmp(r->buf + r->buf_pos, netperf, 24) == 0)
        return fail(r, 0, "this is the V3 \"netperf\" format (.NET Core 2.x, no Nettrace magic); only nettrace "
                          "V4/V5 is supported");
    if (rd_bytes(r, magic, 8, "the Nettrace magic")) return -1;
    if (memcmp(magic, NT_MAGIC, 8) != 0) return fail(r, 0, "not a nettrace file (no \"Nettrace\" magic)");
    int32_t len;
    if (rd_i32(r, &len, "the serializer signature")) return -1;
    if (len == 0) {
        int32_t major = 0, minor = 0;
        if (rd_i32(r, &major, "the V6 header") || rd_i32(r, &minor, "the V6 header")) return -1;
        return fail(r, 8, "nettrace format V%d (major %d, minor %d) is not supported; only V4/V5 are", major, major,
                    minor);
    }
    char sig[20];
    if (len != 20 || rd_bytes(r, sig, 20, "the serializer signature") || memcmp(sig, NT_SERIALIZER_SIG, 20) != 0)
        return fail(r, 8, "missing \"!FastSerialization.1\" signature");
    /* Trace object */
    int32_t ver, minver;
    char name[NT_MAX_NAME + 1];
    uint64_t obj_off = r->off;
    if (expect_tag(r, NT_TAG_BEGIN_PRIVATE_OBJECT, "BeginPrivateObject of the Trace object") ||
        read_type(r, &ver, &minver, name))
        return -1;
    if (strcmp(name, NT_NAME_TRACE) != 0)
        return fail(r, obj_off, "first object is \"%s\", expected \"Trace\"", name);
    if (ver != NT_TRACE_OBJECT_VERSION)
        return fail(r, obj_off, "Trace object version %d: nettrace V%d is not supported; only V4/V5 (Trace version 4)",
                    ver, ver);
    if (minver != NT_TRACE_OBJECT_MIN_VERSION && r->opt.strict)
        problem(r, obj_off, "Trace object minimum reader version is %d, expected 4", minver);
    uint8_t t[NT_TRACE_PAYLOAD_SIZE];
    uint64_t poff = r->off;
    if (rd_bytes(r, t, sizeof t, "the 48-byte Trace payload")) return -1;
    for (int i = 0; i < 8; i++) r->info.sync_time_utc[i] = ld16(t + 2 * i);
    r->info.sync_time_qpc = (int64_t)ld64(t + 16);
    r->info.qpc_freq = (int64_t)ld64(t + 24);
    r->info.pointer_size = (int32_t)ld32(t + 32);
    r->info.pid = (int32_t)ld32(t + 36);
    r->info.num_processors = (int32_t)ld32(t + 40);
    r->info.sampling_rate = (int32_t)ld32(t + 44);
    if (r->info.pointer_size != 4 && r->info.pointer_size != 8)
        return fail(r, poff + 32, "pointer size %d (must be 4 or 8)", r->info.pointer_size);
    if (r->opt.strict) {
        const uint16_t *st = r->info.sync_time_utc;
        if (st[0] < 1601 || st[1] < 1 || st[1] > 12 || st[3] < 1 || st[3] > 31 || st[4] > 23 || st[5] > 59 ||
            st[6] > 59 || st[7] > 999)
            problem(r, poff, "SyncTimeUTC %u-%u-%u %u:%u:%u.%u is not a valid date", st[0], st[1], st[3], st[4],
                    st[5], st[6], st[7]);
        if (r->info.qpc_freq <= 0)
            problem(r, poff + 24, "QPC frequency %lld is not positive", (long long)r->info.qpc_freq);
    }
    return expect_tag(r, NT_TAG_END_OBJECT, "EndObject after the 48-byte Trace payload");
}

/* Reads the next object and processes it. Returns 1 if an EventBlock is now open (events to return),
 * 0 if a non-event object was consumed, 2 at the end-of-stream tag, -1 on error. */
static int read_object(nt_reader *r)
{
    uint8_t tag;
    uint64_t obj_off = r->off;
    if (rd_avail(r, 1) < 1)
        return fail(r, r->off, "file ends without the end-of-stream tag (0x01) after the last block");
    if (rd_u8(r, &tag, "object tag")) return -1;
    if (tag == NT_TAG_NULL_REFERENCE) {
        /* end of stream; nothing may follow, except a part our writer had not finished: it starts
         * where this tag is, with its first byte (the object's BeginPrivateObject) held back until the
         * rest is written, so what follows is the rest of a type header */
        size_t more = rd_avail(r, 2);
        if (more >= 2 && !r->tail_off && r->buf[r->buf_pos] == NT_TAG_BEGIN_PRIVATE_OBJECT &&
            r->buf[r->buf_pos + 1] == NT_TAG_NULL_REFERENCE) {
            r->tail_off = obj_off;
            r->damage.recovered = r->counts.events;
            tag = NT_TAG_BEGIN_PRIVATE_OBJECT;
        } else if (more) {
            uint64_t extra = r->file_size ? r->file_size - r->off : more;
            problem(r, r->off, "%llu%s trailing byte(s) after the end-of-stream tag", (unsigned long long)extra,
                    r->file_size ? "" : "+");
            r->trailing = extra;
            return 2;
        } else {
            return 2;
        }
    }
    if (tag != NT_TAG_BEGIN_PRIVATE_OBJECT)
        return fail(r, obj_off, "expected a BeginPrivateObject tag (5) or the end-of-stream tag (1), found 0x%02x",
                    tag);
    int32_t ver, minver;
    char name[NT_MAX_NAME + 1];
    if (read_type(r, &ver, &minver, name)) return -1;
    int kind = BLK_NONE;
    for (int k = BLK_EVENT; k <= BLK_SP; k++)
        if (strcmp(name, blk_names[k]) == 0) kind = k;
    if (kind == BLK_NONE) {
        if (strcmp(name, NT_NAME_TRACE) == 0) return fail(r, obj_off, "a second Trace object");
        return fail(r, obj_off, "unknown object type \"%s\" (V5 readers reject it)", name);
    }
    if (ver != NT_BLOCK_VERSION)
        return fail(r, obj_off, "%s version %d not supported (expected 2)", name, ver);
    if (minver != NT_BLOCK_MIN_VERSION && r->opt.strict)
        problem(r, obj_off, "%s minimum reader version is %d, expected 2", name, minver);
    int32_t size;
    uint64_t size_off = r->off;
    if (rd_i32(r, &size, "block size")) return -1;
    if (size < 0) return fail(r, size_off, "negative block size %d", size);
    if ((uint32_t)size > NT_MAX_READ_BLOCK)
        return fail(r, size_off, "%s size %d is over the reader's limit of %u bytes (writers use 100 KiB)", name, size,
                    NT_MAX_READ_BLOCK);
    uint32_t pad = (uint32_t)((4 - (r->off & 3)) & 3);
    if (pad) {
        uint8_t zb[3];
        uint64_t poff = r->off;
        if (rd_bytes(r, zb, pad, "block padding")) return -1;
        if (r->opt.strict)
            for (uint32_t i = 0; i < pad; i++)
                if (zb[i]) {
                    problem(r, poff + i, "non-zero padding byte 0x%02x before the %s", zb[i], name);
                    break;
                }
    }
    r->blk_kind = kind;
    r->blk_off = r->off;
    r->blk_size = (uint32_t)size;
    r->blk_pos = 0;
    if (rd_block(r, (uint32_t)size)) return -1;
    /* the EndObject of a block follows its data: check it now so a block is complete before use */
    if (expect_tag(r, NT_TAG_END_OBJECT, "EndObject after the block")) return -1;

    if (kind == BLK_EVENT || kind == BLK_METADATA) {
        if (size < NT_BLOCK_HEADER_SIZE)
            return fail(r, r->blk_off, "%s of %d bytes is shorter than its 20-byte header", name, size);
        uint16_t hs = ld16(r->blk), fl = ld16(r->blk + 2);
        if (hs < NT_BLOCK_HEADER_SIZE || hs > (uint32_t)size)
            return fail(r, r->blk_off, "%s header size %u out of range (20..%d)", name, hs, size);
        r->blk_hdr_size = hs;
        r->blk_compressed = (fl & NT_BLOCK_FLAG_COMPRESSED) != 0;
        r->blk_min_ts = ld64(r->blk + 4);
        r->blk_max_ts = ld64(r->blk + 12);
        r->blk_pos = hs;
        memset(&r->last, 0, sizeof r->last);
        r->blk_first = true;
        if (r->opt.strict) {
            if (!r->blk_compressed)
                problem(r, r->blk_off + 2, "%s without header compression (flags 0x%x); the runtime always compresses",
                        name, fl);
            if (fl & ~NT_BLOCK_FLAG_COMPRESSED) problem(r, r->blk_off + 2, "%s has unknown flags 0x%x", name, fl);
            if (hs != NT_BLOCK_HEADER_SIZE)
                problem(r, r->blk_off, "%s header size %u (the runtime writes 20)", name, hs);
            if (r->blk_min_ts > r->blk_max_ts)
                problem(r, r->blk_off + 4, "%s min timestamp %llu > max timestamp %llu", name,
                        (unsigned long long)r->blk_min_ts, (unsigned long long)r->blk_max_ts);
        }
        if (kind == BLK_METADATA) {
            r->counts.metadata_blocks++;
            return parse_metadata_block(r) ? -1 : 0;
        }
        r->counts.event_blocks++;
        if (r->opt.skip_events) {
            /* still count the blobs so summaries stay exact */
            while (r->blk_pos < r->blk_size) {
                uint32_t pp;
                bool sorted;
                uint64_t boff;
                if (next_blob(r, &pp, &sorted, &boff)) return -1;
                r->counts.events++;
                /* sequence accounting as for a decoded event: the drop count stays exact */
                bool created;
                thread_ent *t = thread_get(r, r->last.capture_thread, &created);
                if (!t) return fail(r, boff, "out of memory");
                if ((!created || r->seq_baseline) && r->last.seq - 1 != t->st.last_seq)
                    note_seq(r, t, r->last.seq - 1, boff, false, created);
                t->st.last_seq = r->last.seq;
                t->st.events++;
                t->last_ts = r->last.timestamp;
                uint64_t ts = r->last.timestamp;
                if (!r->any_event || ts < r->counts.first_ts) r->counts.first_ts = ts;
                r->any_event = true;
                if (ts > r->counts.last_ts) r->counts.last_ts = ts;
                if (ts > r->max_event_ts) r->max_event_ts = ts;
            }
            return 0;
        }
        return r->blk_pos < r->blk_size ? 1 : 0;
    }
    if (kind == BLK_STACK) return parse_stack_block(r) ? -1 : 0;
    return parse_sp_block(r) ? -1 : 0;
}

/* ---------------------------------------------------------------- public API */

static nt_reader *reader_new(const nt_options *opt, const char *name)
{
    nt_reader *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->fd = -1;
    if (opt) r->opt = *opt;
    snprintf(r->name, sizeof r->name, "%s", name);
    return r;
}

static nt_reader *finish_open(nt_reader *r, char *err, size_t errlen)
{
    if (read_header(r)) {
        if (err && errlen) snprintf(err, errlen, "%s", r->err);
        nt_close(r);
        return NULL;
    }
    r->good_end = r->off;
    return r;
}

nt_reader *nt_open_fd(int fd, const char *name, const nt_options *opt, char *err, size_t errlen)
{
    nt_reader *r = reader_new(opt, name);
    if (!r || !(r->buf = malloc(NT_STREAM_BUF))) {
        if (err && errlen) snprintf(err, errlen, "%s: out of memory", name);
        free(r);
        return NULL;
    }
    r->fd = fd;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        off_t pos = lseek(fd, 0, SEEK_CUR);
        r->file_size = (uint64_t)(st.st_size - (pos > 0 ? pos : 0));
    }
    return finish_open(r, err, errlen);
}

nt_reader *nt_open_ex(const char *path, const nt_options *opt, char *err, size_t errlen)
{
    if (strcmp(path, "-") == 0) return nt_open_fd(0, "<stdin>", opt, err, errlen);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (err && errlen) snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    nt_reader *r = nt_open_fd(fd, path, opt, err, errlen);
    if (!r) {
        close(fd);
        return NULL;
    }
    r->own_fd = true;
    return r;
}

nt_reader *nt_open(const char *path, char *err, size_t errlen) { return nt_open_ex(path, NULL, err, errlen); }

nt_reader *nt_open_mem(const void *data, size_t len, const nt_options *opt, char *err, size_t errlen)
{
    nt_reader *r = reader_new(opt, "<memory>");
    if (!r) {
        if (err && errlen) snprintf(err, errlen, "<memory>: out of memory");
        return NULL;
    }
    r->mem = data;
    r->buf = (uint8_t *)(uintptr_t)data; /* never written: rd_avail does not refill memory input */
    r->buf_len = len;
    r->eof = true;
    r->file_size = len;
    return finish_open(r, err, errlen);
}

static int next_inner(nt_reader *r, nt_event *ev)
{
    for (;;) {
        if (r->state == 3) return -1;
        if (r->state == 2) return 0;
        if (r->state == 1) {
            if (r->blk_pos >= r->blk_size) {
                r->good_end = r->off; /* every event of the block was returned */
                r->state = 0;
                continue;
            }
            uint32_t pp;
            bool sorted;
            uint64_t boff;
            if (next_blob(r, &pp, &sorted, &boff)) return -1;
            const blob_hdr *h = &r->last;
            r->counts.events++;
            const nt_metadata *m = meta_find(r, h->meta_id);
            if (AT_UNLIKELY(!m)) {
                if (h->meta_id == 0)
                    return fail(r, boff, "event blob with metadata id 0 in an EventBlock");
                return fail(r, boff, "event references metadata id %u, which is not defined before it", h->meta_id);
            }
            /* sequence accounting per capture thread (TraceEvent EventCache semantics) */
            bool created;
            thread_ent *t = thread_get(r, h->capture_thread, &created);
            if (AT_UNLIKELY(!t)) return fail(r, boff, "out of memory");
            if (!created || r->seq_baseline) {
                if (AT_UNLIKELY(h->seq - 1 != t->st.last_seq)) note_seq(r, t, h->seq - 1, boff, false, created);
                if (AT_UNLIKELY(r->opt.strict) && h->timestamp < t->last_ts)
                    problem(r, boff, "timestamp %llu of capture thread %llu is earlier than its previous event's %llu",
                            (unsigned long long)h->timestamp, (unsigned long long)h->capture_thread,
                            (unsigned long long)t->last_ts);
            }
            t->st.last_seq = h->seq;
            t->st.events++;
            t->last_ts = h->timestamp;
            if (AT_UNLIKELY(r->opt.strict)) {
                check_blob_common(r, boff);
                if (!r->blk_first && h->capture_thread != r->blk_prev_capture && !sorted)
                    problem(r, boff, "capture thread changes (%llu -> %llu) on a blob without the IsSorted flag",
                            (unsigned long long)r->blk_prev_capture, (unsigned long long)h->capture_thread);
            }
            if (AT_UNLIKELY(r->opt.strict && r->opt.order)) {
                if (h->timestamp < r->order_floor)
                    problem(r, boff, "event of capture thread %llu at %llu is older than an IsSorted event or "
                            "sequence point before it (%llu): readers dispatch it out of order",
                            (unsigned long long)h->capture_thread, (unsigned long long)h->timestamp,
                            (unsigned long long)r->order_floor);
                if (sorted && h->timestamp > r->order_floor) r->order_floor = h->timestamp;
            }
            if (AT_UNLIKELY(r->opt.strict)) {
                /* Without opt.order, not checked: an event older than an IsSorted one written before it.
                 * nettrace-v5.md §6 recommends avoiding it, but the runtime itself writes such files
                 * (objver4, mixed, only_managed samples) and TraceEvent only dispatches them out of order. */
                if (h->timestamp < (uint64_t)r->info.sync_time_qpc && !r->reported_before_sync) {
                    r->reported_before_sync = true;
                    problem(r, boff, "event timestamp %llu is before the trace's SyncTimeQPC %lld (reported once)",
                            (unsigned long long)h->timestamp, (long long)r->info.sync_time_qpc);
                }
            }
            r->blk_first = false;
            r->blk_prev_capture = h->capture_thread;
            /* first/last = earliest/latest timestamp: the order TraceEvent dispatches in, not file order */
            if (!r->any_event || h->timestamp < r->counts.first_ts) r->counts.first_ts = h->timestamp;
            r->any_event = true;
            if (h->timestamp > r->counts.last_ts) r->counts.last_ts = h->timestamp;
            if (h->timestamp > r->max_event_ts) r->max_event_ts = h->timestamp;

            ev->meta = m;
            ev->seq = h->seq;
            ev->capture_thread = h->capture_thread;
            ev->proc = h->proc;
            ev->thread = h->thread;
            ev->stack_id = h->stack_id;
            ev->timestamp = h->timestamp;
            ev->activity = h->activity;
            ev->related = h->related;
            ev->sorted = sorted;
            ev->payload = r->blk + pp;
            ev->payload_len = h->payload_len;
            ev->frames = NULL;
            ev->nframes = 0;
            ev->file_offset = boff;
            if (h->stack_id) {
                const stack_ent *s = stack_find(r, h->stack_id);
                if (s) {
                    /* an empty stack may come before any frame was stored (frames still NULL) */
                    ev->frames = s->nframes ? r->frames + s->start : NULL;
                    ev->nframes = s->nframes;
                } else {
                    /* TraceEvent silently shows no stack; we say so */
                    problem(r, boff, "event references stack id %u, which is not defined in this sequence-point interval",
                            h->stack_id);
                }
            }
            return 1;
        }
        int rc = read_object(r);
        if (rc < 0) return -1;
        if (rc != 1) r->good_end = r->off; /* an event block: once its events are all read */
        if (rc == 2) {
            r->state = 2;
            return 0;
        }
        if (rc == 1) r->state = 1;
    }
}

int nt_next(nt_reader *r, nt_event *ev)
{
    int prev = r->state;
    int rc = next_inner(r, ev);
    if (rc == 1 || prev >= 2) return rc;
    uint64_t size = r->file_size ? r->file_size : r->off + (r->buf_len - r->buf_pos);
    nt_damage *d = &r->damage;
    d->offset = r->good_end;
    d->file_size = r->file_size;
    if (r->tail_off) {
        /* a torn part: its complete blocks were read, the rest is what the killed writer left */
        d->kind = NT_DAMAGE_TORN;
        d->recovered = r->counts.events - d->recovered;
        d->events_before = r->counts.events;
        uint64_t torn = rc < 0 && size > r->good_end ? size - r->good_end : 0;
        if (rc < 0)
            snprintf(r->damage_msg, sizeof r->damage_msg,
                     "torn tail: %llu bytes after the last complete block at offset %llu, the process was killed "
                     "while writing (%llu events recovered after the end tag at offset %llu)",
                     (unsigned long long)torn, (unsigned long long)r->good_end, (unsigned long long)d->recovered,
                     (unsigned long long)r->tail_off);
        else
            snprintf(r->damage_msg, sizeof r->damage_msg,
                     "torn tail: the part after the end tag at offset %llu is complete but was never committed, the "
                     "process was killed while writing (%llu events recovered from it)",
                     (unsigned long long)r->tail_off, (unsigned long long)d->recovered);
        d->text = r->damage_msg;
        r->err[0] = 0;
        r->state = 2;
        return 0;
    }
    if (rc < 0) {
        d->kind = NT_DAMAGE_BROKEN;
        d->events_before = r->counts.events;
        d->text = r->err;
    } else if (rc == 0 && r->trailing) {
        /* the trace itself is whole; what follows its end (another file appended to it, a copy gone
         * wrong) is not read, and the results say so */
        d->kind = NT_DAMAGE_BROKEN;
        d->events_before = r->counts.events;
        snprintf(r->damage_msg, sizeof r->damage_msg,
                 "%s: offset %llu (0x%llx): %llu%s byte(s) after the end-of-stream tag are not part of the trace "
                 "(another file appended to it?) and were not read",
                 r->name, (unsigned long long)r->good_end, (unsigned long long)r->good_end,
                 (unsigned long long)r->trailing, r->file_size ? "" : "+");
        d->text = r->damage_msg;
    }
    return rc;
}

const nt_damage *nt_get_damage(const nt_reader *r)
{
    return r->damage.kind != NT_DAMAGE_NONE ? &r->damage : NULL;
}

const char *nt_error(const nt_reader *r) { return r->err[0] ? r->err : "no error"; }
const nt_trace_info *nt_info(const nt_reader *r) { return &r->info; }
const nt_counts *nt_get_counts(const nt_reader *r) { return &r->counts; }
const nt_metadata *nt_metadata_get(const nt_reader *r, uint32_t id) { return meta_find(r, id); }
size_t nt_metadata_count(const nt_reader *r) { return r->nmetas; }
const nt_metadata *nt_metadata_at(const nt_reader *r, size_t i) { return i < r->nmetas ? r->metas[i] : NULL; }
uint64_t nt_offset(const nt_reader *r) { return r->off; }
uint64_t nt_problem_count(const nt_reader *r) { return r->problems; }

size_t nt_thread_count(const nt_reader *r) { return r->nthreads; }

static int cmp_thread(const void *a, const void *b)
{
    const nt_thread_stat *x = a, *y = b;
    return x->capture_thread < y->capture_thread ? -1 : x->capture_thread > y->capture_thread;
}

const nt_thread_stat *nt_thread_at(const nt_reader *r, size_t i)
{
    if (i >= r->nthreads) return NULL;
    nt_reader *w = (nt_reader *)r; /* the sorted snapshot is a cache, rebuilt on index 0 */
    if (i == 0 || !w->thread_list) {
        if (w->thread_list_cap < r->nthreads) {
            nt_thread_stat *nl = realloc(w->thread_list, r->nthreads * sizeof *nl);
            if (!nl) return NULL;
            w->thread_list = nl;
            w->thread_list_cap = r->nthreads;
        }
        size_t k = 0;
        for (size_t j = 0; j < r->thread_hcap; j++)
            if (r->threads[j].used) w->thread_list[k++] = r->threads[j].st;
        qsort(w->thread_list, k, sizeof *w->thread_list, cmp_thread);
    }
    return &w->thread_list[i];
}

void nt_close(nt_reader *r)
{
    if (!r) return;
    if (r->own_fd && r->fd >= 0) close(r->fd);
    if (!r->mem) free(r->buf);
    free(r->blk);
    for (size_t i = 0; i < r->nmetas; i++) meta_free(r->metas[i]);
    free(r->metas);
    free(r->meta_ids);
    free(r->meta_idx);
    free(r->stacks);
    free(r->frames);
    free(r->threads);
    free(r->thread_list);
    free(r);
}

const char *nt_opcode_name(uint8_t op)
{
    switch (op) {
    case NT_OPCODE_INFO: return "Info";
    case NT_OPCODE_START: return "Start";
    case NT_OPCODE_STOP: return "Stop";
    case NT_OPCODE_DC_START: return "DCStart";
    case NT_OPCODE_DC_STOP: return "DCStop";
    case NT_OPCODE_EXTENSION: return "Extension";
    case NT_OPCODE_REPLY: return "Reply";
    case NT_OPCODE_RESUME: return "Resume";
    case NT_OPCODE_SUSPEND: return "Suspend";
    case NT_OPCODE_SEND: return "Send";
    case NT_OPCODE_RECEIVE: return "Receive";
    default: return NULL;
    }
}

const char *nt_type_name(uint32_t t)
{
    static const char *const names[] = {
        [NT_TYPE_OBJECT] = "object", [NT_TYPE_BOOLEAN] = "bool",     [NT_TYPE_CHAR] = "char",
        [NT_TYPE_SBYTE] = "int8",    [NT_TYPE_BYTE] = "uint8",       [NT_TYPE_INT16] = "int16",
        [NT_TYPE_UINT16] = "uint16", [NT_TYPE_INT32] = "int32",      [NT_TYPE_UINT32] = "uint32",
        [NT_TYPE_INT64] = "int64",   [NT_TYPE_UINT64] = "uint64",    [NT_TYPE_SINGLE] = "float",
        [NT_TYPE_DOUBLE] = "double", [NT_TYPE_DECIMAL] = "decimal",  [NT_TYPE_DATETIME] = "datetime",
        [NT_TYPE_GUID] = "guid",     [NT_TYPE_STRING] = "string",    [NT_TYPE_ARRAY] = "array",
    };
    if (t < AT_ARRAY_LEN(names) && names[t]) return names[t];
    return "unknown";
}

bool nt_event_wait(const nt_event *ev, bool *resume, char *reason, size_t rn, char *call, size_t cn,
                   uint64_t *blocked_ns)
{
    const nt_metadata *m = ev->meta;
    if (!m || !m->provider || !m->name || strcmp(m->provider, "acttrace-shim") != 0)
        return false;
    bool res = !strcmp(m->name, "WaitResume");
    if (!res && strcmp(m->name, "WaitSuspend") != 0)
        return false;
    *resume = res;
    *blocked_ns = 0;
    if (reason && rn)
        reason[0] = 0;
    if (call && cn)
        call[0] = 0;
    uint32_t off = 0;
    for (uint32_t i = 0; i < m->nfields; i++) {
        const nt_field *f = &m->fields[i];
        if (f->type == NT_TYPE_UINT64) {
            if (off + 8 > ev->payload_len)
                return false;
            if (!strcmp(f->name, "BlockedNs"))
                memcpy(blocked_ns, ev->payload + off, 8);
            off += 8;
            continue;
        }
        char buf[128];
        if (!nt_field_format(f, ev->payload, ev->payload_len, &off, buf, sizeof buf))
            return false;
        size_t n = strlen(buf);
        const char *v = buf;
        if (n >= 2 && buf[0] == '"' && buf[n - 1] == '"') { /* the formatter quotes strings */
            buf[n - 1] = 0;
            v = buf + 1;
        }
        if (!strcmp(f->name, "Reason") && reason && rn)
            snprintf(reason, rn, "%s", v);
        else if (!strcmp(f->name, "Call") && call && cn)
            snprintf(call, cn, "%s", v);
    }
    return true;
}

bool nt_event_exchange(const nt_event *ev, int *fd, int *index, uint64_t *idle_ns)
{
    const nt_metadata *m = ev->meta;
    if (!m || !m->provider || !m->name || strcmp(m->name, "SocketExchange") != 0 ||
        strcmp(m->provider, "acttrace-shim") != 0 || m->nfields < 2 ||
        m->fields[0].type != NT_TYPE_INT32 || m->fields[1].type != NT_TYPE_INT32 ||
        ev->payload_len < 8 || !ev->payload)
        return false;
    int32_t v[2];
    memcpy(v, ev->payload, 8);
    *fd = v[0];
    *index = v[1];
    *idle_ns = 0;
    if (m->nfields >= 3 && m->fields[2].type == NT_TYPE_UINT64 && ev->payload_len >= 16)
        memcpy(idle_ns, ev->payload + 8, 8);
    return true;
}

bool nt_event_endpoints(const nt_event *ev, int *fd, bool *accepted, char *local, size_t ln, char *peer,
                        size_t pn)
{
    const nt_metadata *m = ev->meta;
    if (!m || !m->provider || !m->name || strcmp(m->name, "SocketEndpoints") != 0 ||
        strcmp(m->provider, "acttrace-shim") != 0)
        return false;
    int got = 0;
    uint32_t off = 0;
    for (uint32_t i = 0; i < m->nfields; i++) {
        const nt_field *f = &m->fields[i];
        char buf[160];
        if (!nt_field_format(f, ev->payload, ev->payload_len, &off, buf, sizeof buf))
            return false;
        size_t n = strlen(buf);
        const char *v = buf;
        if (n >= 2 && buf[0] == '"' && buf[n - 1] == '"') { /* the formatter quotes strings */
            buf[n - 1] = 0;
            v = buf + 1;
        }
        if (!strcmp(f->name, "Fd") && fd) {
            *fd = atoi(v);
        } else if (!strcmp(f->name, "Role")) {
            *accepted = !strcmp(v, "accept");
            got |= 1;
        } else if (!strcmp(f->name, "Local")) {
            snprintf(local, ln, "%s", v);
            got |= 2;
        } else if (!strcmp(f->name, "Peer")) {
            snprintf(peer, pn, "%s", v);
            got |= 4;
        }
    }
    return got == 7;
}

bool nt_event_cpu_sample(const nt_event *ev, uint64_t *cpu_ns)
{
    const nt_metadata *m = ev->meta;
    if (!m || m->event_id != 0 || !m->provider || strcmp(m->provider, "Microsoft-DotNETCore-SampleProfiler") != 0)
        return false;
    uint64_t v = 0;
    if (ev->payload_len >= 12 && ev->payload)
        memcpy(&v, ev->payload + 4, 8);
    if (cpu_ns)
        *cpu_ns = v;
    return true;
}
