/* actmodel.c: the activity model of the analysis commands (see actmodel.h): a k-way time merge of
 * the input files, a hash table of the activities still open (or kept for a pending tree), and the
 * rules that pair Starts with Stops, link parents, record thread visits and transfers. */
#include "actmodel.h"

#include "actpath.h"
#include "guid.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define AM_MAX_VISITS 256
#define AM_MAX_XFERS 256
#define AM_PROGRESS_MIN (64ull << 20) /* bytes; ACTTRACE_PROGRESS_MIN overrides (tests) */

typedef struct am_input {
    nt_reader *r;
    const char *path;
    nt_trace_info info;
    uint64_t size;
    nt_event head;
    bool has_head, done;
    int64_t head_time;
    int64_t shift;             /* ns added to its clock: files of another clock (host) aligned */
    int domain;                /* its clock's: files whose UTC and event clock agree share one */
} am_input;

/* A clock other than the first file's (another host's, or another time namespace's): how its files
 * were put on the first one's time line. */
typedef struct am_clock {
    int64_t utc_shift;         /* from the files' SyncTimeUTC (ms precision) */
    int64_t moved;             /* then by the connections between them */
    int64_t lo, hi;            /* the range the connections allow (INT64_MIN/MAX: unbounded) */
    uint32_t pairs;            /* connections that bounded it */
    uint32_t pid;              /* a process of it, for the note */
} am_clock;

/* A Send with a TransferId, for the Receive that names it (direct-mapped: a Send pushed out by a
 * later one that hashes alike is matched by its thread alone, with the Receive's time). */
#define AM_SENT_BITS 14
typedef struct am_sent {
    uint64_t tid, id;
    int64_t ts;
    int file;
} am_sent;

/* An accepted connection's activity (server) and the activity the other process connected it in
 * (client), from their SocketEndpoints events */
typedef struct am_xlink {
    at_guid server, client;
} am_xlink;

/* From an exchange of a kept-alive connection on (the server's SocketExchange: its activity, file
 * and Index), the server's work is another client activity's than before: a segment activity
 * under that client (client zero: the connecting activity's again, no segment) */
typedef struct am_xseg {
    at_guid server, client;
    int file;
    int32_t index;
} am_xseg;

struct am_model {
    am_options o;
    am_callbacks cb;
    am_input *in;
    int nin;
    int64_t origin;
    int64_t end;
    /* open-addressing table of activities by id (linear probing, backward-shift delete): slot
     * numbers + 1 (0: empty) */
    uint32_t *tab;
    size_t tcap, tn;
    bool ended;                /* am_run's end: tab lists the open activities */
    char **chunks;             /* activity storage (AM_CHUNK_BYTES each, aligned) */
    uint32_t nchunks, cchunks;
    am_activity *free_acts;    /* free slots, linked through parent */
    char **names;              /* interned names (open addressing) */
    size_t nnames, cnames;
    size_t mem, mem_peak;      /* bytes allocated for activities, table, names, rare fields */
    uint64_t never_stopped, unmatched_stops;
    char unmatched_first[320]; /* the first of them, described for the warning */
    uint64_t total_size;
    uint64_t serial;
    uint64_t held, hold_limit;
    am_activity **kept;        /* roots held for the activities other processes may link to */
    size_t nkept, ckept;
    am_activity **shadow;      /* open activities of earlier exec images, out of the table */
    size_t nshadow, cshadow; /* tree mode: finished activities kept for an open ancestor */
    int last_pct;
    bool progress_shown;
    uint64_t progress_min;
    am_sent *sent;             /* Sends that carry a TransferId, by (file, thread, id); see xfer_ */
    am_xlink *xlinks;          /* activities of one process at an accepted socket whose other end
                                * another process connected in an activity: sorted by server id */
    size_t nxlinks;
    am_xseg *xsegs;            /* sorted by server, file, index */
    size_t nxsegs;
    am_clock *clocks;          /* per clock domain (0: the first file's) */
    int nclocks;
};

/* ---------------- small helpers ---------------- */

void am_errorf(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "acttrace %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void am_activity_name(const char *ev, char *out, size_t n)
{
    size_t l = strlen(ev);
    if (l > 5 && (strcmp(ev + l - 5, "Start") == 0)) l -= 5;
    else if (l > 4 && strcmp(ev + l - 4, "Stop") == 0) l -= 4;
    if (l >= n) l = n - 1;
    memcpy(out, ev, l);
    out[l] = 0;
}

void am_format_id(const at_guid *g, uint32_t pid, char *out, size_t n)
{
    if (at_guid_is_zero(g)) {
        out[0] = 0;
        return;
    }
    if (at_actpath_format(g, pid, out, n) > 0) return;
    /* another process's id (a cross-process link): its pid is in the checksum */
    if (pid && at_actpath_format(g, 0, out, n) > 0) return;
    char s[37];
    at_guid_format(g, s);
    snprintf(out, n, "%s", s);
}

bool am_path_within(const char *path, const char *prefix)
{
    size_t l = strlen(prefix);
    if (l && prefix[l - 1] == '/') l--;
    return strncmp(path, prefix, l) == 0 && (path[l] == 0 || path[l] == '/');
}

int am_visit_index(const am_activity *a, uint64_t tid)
{
    for (uint32_t i = 0; i < am_nvisits(a); i++)
        if (am_visit_at(a, i).tid == tid) return (int)i;
    return -1;
}

void am_act_path(const am_activity *a, char *out, size_t n)
{
    if (a->x && a->x->seg_index) { /* an exchange: its connection's path and "#index" */
        am_format_id(&a->x->seg_of, a->pid, out, n);
        size_t l = strlen(out);
        if (l < n) snprintf(out + l, n - l, "#%u", a->x->seg_index);
        return;
    }
    am_format_id(&a->id, a->pid, out, n);
}

bool am_act_link(const am_activity *a, char *out, size_t n)
{
    out[0] = 0;
    if (!a->has_link) return false;
    const at_guid *g = &a->x->related;
    uint32_t pid = a->pid;
    uint32_t rp = at_actpath_is_path(g, pid) ? pid : at_actpath_is_path(g, 0) ? at_actpath_pid(g) : pid;
    char rs[AM_PATH_MAX];
    am_format_id(g, rp, rs, sizeof rs);
    snprintf(out, n, "pid %u %s", rp, rs);
    return true;
}

void am_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else if (*p == '<') fputs("\\u003c", f); /* safe inside an HTML <script> too */
        else fputc(*p, f);
    }
    fputc('"', f);
}

void am_slices(const am_activity *a, void (*fn)(void *, const am_activity *, uint64_t, int64_t, int64_t), void *ctx)
{
    uint64_t st = am_start_tid(a);
    for (uint32_t i = 0, n = am_nvisits(a); i < n; i++) {
        am_visit v = am_visit_at(a, i);
        if (v.tid == st) fn(ctx, a, v.tid, a->start, a->moved ? v.last : a->stop);
        else fn(ctx, a, v.tid, v.first, v.last);
    }
}

void am_buf_flush(am_buf *b)
{
    if (b->n) fwrite(b->b, 1, b->n, b->f);
    b->n = 0;
}

void am_buf_write_slow(am_buf *b, const char *s, size_t n)
{
    am_buf_flush(b);
    if (n > sizeof b->b) fwrite(s, 1, n, b->f);
    else {
        memcpy(b->b, s, n);
        b->n = n;
    }
}

static const char digits2[201] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                 "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                 "8081828384858687888990919293949596979899";

/* Digits of v right-aligned ending at end; returns the first. */
static char *u64_digits(char *end, uint64_t v)
{
    char *p = end;
    while (v >= 100) {
        unsigned k = (unsigned)(v % 100) * 2;
        v /= 100;
        *--p = digits2[k + 1];
        *--p = digits2[k];
    }
    if (v >= 10) {
        *--p = digits2[v * 2 + 1];
        *--p = digits2[v * 2];
    } else {
        *--p = (char)('0' + v);
    }
    return p;
}

void am_buf_u64(am_buf *b, uint64_t v)
{
    char t[24], *p = u64_digits(t + 24, v);
    am_buf_mem(b, p, (size_t)(t + 24 - p));
}

void am_buf_ms(am_buf *b, int64_t ns, int width)
{
    char t[48], *end = t + 48;
    bool neg = ns < 0;
    uint64_t us = neg ? ((uint64_t)0 - (uint64_t)ns + 500) / 1000 : ((uint64_t)ns + 500) / 1000; /* round half away */
    unsigned frac = (unsigned)(us % 1000);
    char *p = end - 3;
    p[0] = (char)('0' + frac / 100);
    p[1] = digits2[(frac % 100) * 2];
    p[2] = digits2[(frac % 100) * 2 + 1];
    *--p = '.';
    p = u64_digits(p, us / 1000);
    if (neg) *--p = '-';
    while (end - p < width && p > t) *--p = ' ';
    am_buf_mem(b, p, (size_t)(end - p));
}

size_t am_fmt_dur(char *out, int64_t ns)
{
    static const struct {
        uint64_t scale;
        const char *unit;
    } units[] = {{1000, "us"}, {1000000, "ms"}, {1000000000, "s"}};
    char *p = out;
    uint64_t v = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    if (ns < 0) *p++ = '-';
    if (v == 0) return (size_t)(stpcpy(p, "0us") - out);
    int u = 0;
    /* the first unit in which the value rounds to below 1000 */
    while (u < 2 && v >= units[u].scale * 1000 - units[u].scale / 2) u++;
    uint64_t s = units[u].scale;
    char t[24], *end = t + sizeof t, *d;
    if (v < s / 1000 * 9995) { /* x.yy */
        uint64_t r = (v + s / 200) / (s / 100);
        d = end - 2;
        d[0] = digits2[(r % 100) * 2];
        d[1] = digits2[(r % 100) * 2 + 1];
        *--d = '.';
        d = u64_digits(d, r / 100);
    } else if (v < s / 1000 * 99950) { /* xx.y */
        uint64_t r = (v + s / 20) / (s / 10);
        d = end - 1;
        d[0] = (char)('0' + r % 10);
        *--d = '.';
        d = u64_digits(d, r / 10);
    } else {
        d = u64_digits(end, (v + s / 2) / s);
    }
    memcpy(p, d, (size_t)(end - d));
    p += end - d;
    return (size_t)(stpcpy(p, units[u].unit) - out);
}

void am_buf_dur(am_buf *b, int64_t ns, int width)
{
    char t[AM_DUR_MAX];
    size_t n = am_fmt_dur(t, ns);
    for (int i = (int)n; i < width; i++) am_buf_chr(b, ' ');
    am_buf_mem(b, t, n);
}

/* ---------------- distribution ---------------- */

#define AM_HIST_SUB 64 /* sub-buckets per power of two: ~1.1% precision */
#define AM_HIST_BUCKETS (64 * AM_HIST_SUB)

static uint32_t hist_bucket(uint64_t v)
{
    if (v < AM_HIST_SUB) return (uint32_t)v;
    int e = 63 - __builtin_clzll(v);          /* v in [2^e, 2^(e+1)) with e >= 6 */
    uint64_t sub = (v >> (e - 6)) & (AM_HIST_SUB - 1);
    return (uint32_t)((e - 5) * AM_HIST_SUB + sub);
}

static uint64_t hist_value(uint32_t b)
{
    if (b < AM_HIST_SUB) return b;
    int e = (int)(b / AM_HIST_SUB) + 5;
    uint64_t sub = b % AM_HIST_SUB;
    uint64_t lo = (1ull << e) | (sub << (e - 6));
    return lo + ((1ull << (e - 6)) >> 1); /* the bucket's middle */
}

void am_dist_add(am_dist *d, int64_t v)
{
    if (v < 0) v = 0;
    if (d->n == 0 || v < d->min) d->min = v;
    if (d->n == 0 || v > d->max) d->max = v;
    d->n++;
    d->sum += (double)v;
    if (!d->hist && d->nexact < AM_EXACT) {
        if (d->nexact == d->cexact) {
            uint32_t c = d->cexact ? d->cexact * 2 : 64;
            int64_t *p = realloc(d->exact, c * sizeof *p);
            if (p) {
                d->exact = p;
                d->cexact = c;
            }
        }
        if (d->nexact < d->cexact) {
            d->exact[d->nexact++] = v;
            return;
        }
    }
    if (!d->hist) {
        d->hist = calloc(AM_HIST_BUCKETS, sizeof *d->hist);
        if (!d->hist) return;
        for (uint32_t i = 0; i < d->nexact; i++) d->hist[hist_bucket((uint64_t)d->exact[i])]++;
        free(d->exact);
        d->exact = NULL;
        d->nexact = d->cexact = 0;
    }
    d->hist[hist_bucket((uint64_t)v)]++;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int64_t am_dist_pct(am_dist *d, double p)
{
    if (d->n == 0) return 0;
    uint64_t rank = (uint64_t)(p / 100.0 * (double)d->n + 0.999999999);
    if (rank < 1) rank = 1;
    if (rank > d->n) rank = d->n;
    if (!d->hist) {
        qsort(d->exact, d->nexact, sizeof *d->exact, cmp_i64);
        return d->exact[rank - 1];
    }
    uint64_t acc = 0;
    for (uint32_t b = 0; b < AM_HIST_BUCKETS; b++) {
        acc += d->hist[b];
        if (acc >= rank) {
            int64_t v = (int64_t)hist_value(b);
            return v < d->min ? d->min : v > d->max ? d->max : v;
        }
    }
    return d->max;
}

void am_dist_free(am_dist *d)
{
    free(d->exact);
    free(d->hist);
    memset(d, 0, sizeof *d);
}

/* ---------------- activity storage ---------------- */

/* Activities live in aligned chunks of fixed-size slots (no per-activity allocation header); the id
 * table holds 32-bit slot numbers, and a slot's number is found from its address through the chunk's
 * header. */
#define AM_CHUNK_BYTES (512u << 10)
#define AM_CHUNK_HDR 16u
#define AM_PER_CHUNK ((AM_CHUNK_BYTES - AM_CHUNK_HDR) / sizeof(am_activity))

typedef struct am_chunk_hdr {
    uint32_t no;
} am_chunk_hdr;

static void mem_add(am_model *m, size_t n)
{
    m->mem += n;
    if (m->mem > m->mem_peak) m->mem_peak = m->mem;
}

static am_activity *slot_act(const am_model *m, uint32_t s) /* s: slot number + 1 */
{
    s--;
    return (am_activity *)(m->chunks[s / AM_PER_CHUNK] + AM_CHUNK_HDR) + s % AM_PER_CHUNK;
}

static uint32_t act_slot(const am_activity *a)
{
    uintptr_t base = (uintptr_t)a & ~(uintptr_t)(AM_CHUNK_BYTES - 1);
    uint32_t no = ((const am_chunk_hdr *)base)->no;
    return no * (uint32_t)AM_PER_CHUNK + (uint32_t)(((uintptr_t)a - base - AM_CHUNK_HDR) / sizeof *a) + 1;
}

static bool add_chunk(am_model *m)
{
    if ((uint64_t)(m->nchunks + 1) * AM_PER_CHUNK >= UINT32_MAX) return false;
    if (m->nchunks == m->cchunks) {
        uint32_t c = m->cchunks ? m->cchunks * 2 : 16;
        char **v = realloc(m->chunks, c * sizeof *v);
        if (!v) return false;
        mem_add(m, (c - m->cchunks) * sizeof *v);
        m->chunks = v;
        m->cchunks = c;
    }
    /* aligned: map twice the size, give back what is around the aligned chunk */
    char *p = mmap(NULL, 2 * AM_CHUNK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    char *c = (char *)(((uintptr_t)p + AM_CHUNK_BYTES - 1) & ~(uintptr_t)(AM_CHUNK_BYTES - 1));
    if (c > p) munmap(p, (size_t)(c - p));
    if (c + AM_CHUNK_BYTES < p + 2 * AM_CHUNK_BYTES) munmap(c + AM_CHUNK_BYTES, (size_t)(p + 2 * AM_CHUNK_BYTES - (c + AM_CHUNK_BYTES)));
    ((am_chunk_hdr *)c)->no = m->nchunks;
    m->chunks[m->nchunks++] = c;
    mem_add(m, AM_CHUNK_BYTES);
    /* its slots join the free list, lowest first */
    am_activity *first = (am_activity *)(c + AM_CHUNK_HDR);
    for (size_t i = AM_PER_CHUNK; i-- > 0;) {
        first[i].parent = m->free_acts;
        m->free_acts = &first[i];
    }
    return true;
}

static am_activity *act_new(am_model *m)
{
    if (!m->free_acts && !add_chunk(m)) return NULL;
    am_activity *a = m->free_acts;
    m->free_acts = a->parent;
    memset(a, 0, sizeof *a);
    a->used = true;
    return a;
}

static am_extra *extra(am_model *m, am_activity *a)
{
    if (!a->x) {
        a->x = calloc(1, sizeof *a->x);
        if (a->x) mem_add(m, sizeof *a->x);
    }
    return a->x;
}

static void act_free(am_model *m, am_activity *a)
{
    if (a->x) {
        am_extra *x = a->x;
        m->mem -= sizeof *x + x->cvisits * sizeof *x->visits + x->cxfers * sizeof *x->xfers +
                  (x->sends ? sizeof *x->sends : 0);
        free(x->visits);
        free(x->xfers);
        free(x->sends);
        free(x);
    }
    a->used = false;
    a->parent = m->free_acts;
    m->free_acts = a;
}

/* ---------------- names ---------------- */

static uint64_t str_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The one copy of name (NULL when out of memory). */
static const char *intern(am_model *m, const char *name)
{
    if ((m->nnames + 1) * 2 > m->cnames) {
        size_t oc = m->cnames, nc = oc ? oc * 2 : 64;
        char **t = calloc(nc, sizeof *t);
        if (!t) return NULL;
        for (size_t i = 0; i < oc; i++) {
            if (!m->names[i]) continue;
            size_t j = str_hash(m->names[i]) & (nc - 1);
            while (t[j]) j = (j + 1) & (nc - 1);
            t[j] = m->names[i];
        }
        free(m->names);
        m->names = t;
        m->cnames = nc;
        mem_add(m, (nc - oc) * sizeof *t);
    }
    size_t j = str_hash(name) & (m->cnames - 1);
    for (; m->names[j]; j = (j + 1) & (m->cnames - 1))
        if (!strcmp(m->names[j], name)) return m->names[j];
    size_t l = strlen(name) + 1;
    if (!(m->names[j] = malloc(l))) return NULL;
    memcpy(m->names[j], name, l);
    m->nnames++;
    mem_add(m, l);
    return m->names[j];
}

/* ---------------- the id table ---------------- */

static size_t guid_hash(const at_guid *g)
{
    uint64_t a, b;
    memcpy(&a, g->b, 8);
    memcpy(&b, g->b + 8, 8);
    uint64_t h = (a ^ (b * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
    return (size_t)(h ^ (h >> 31));
}

static uint32_t *tab_slot(am_model *m, const at_guid *g)
{
    size_t mask = m->tcap - 1, i = guid_hash(g) & mask;
    while (m->tab[i] && !at_guid_eq(&slot_act(m, m->tab[i])->id, g)) i = (i + 1) & mask;
    return &m->tab[i];
}

static am_activity *tab_get(am_model *m, const at_guid *g)
{
    if (at_guid_is_zero(g)) return NULL;
    uint32_t s = *tab_slot(m, g);
    return s ? slot_act(m, s) : NULL;
}

/* Grows past 70% full: linear probing stays short, 4-byte slots keep the table at 6-12 bytes per
 * activity. */
static bool tab_grow(am_model *m)
{
    size_t oc = m->tcap, nc = oc ? oc * 2 : 1024;
    uint32_t *old = m->tab, *t = calloc(nc, sizeof *t);
    if (!t) return false;
    m->tab = t;
    m->tcap = nc;
    for (size_t i = 0; i < oc; i++)
        if (old[i]) *tab_slot(m, &slot_act(m, old[i])->id) = old[i];
    free(old);
    mem_add(m, nc * sizeof *t);
    m->mem -= oc * sizeof *t;
    return true;
}

/* Put a (replacing any activity of the same id: that one stays in its tree, unreachable by id). */
static bool tab_put(am_model *m, am_activity *a)
{
    if ((m->tn + 1) * 10 > m->tcap * 7 && !tab_grow(m)) return false;
    uint32_t *s = tab_slot(m, &a->id);
    if (!*s) m->tn++;
    else slot_act(m, *s)->in_tab = false;
    *s = act_slot(a);
    a->in_tab = true;
    return true;
}

static void tab_del(am_model *m, am_activity *a)
{
    if (!a->in_tab) return; /* replaced by a newer one of the same id */
    a->in_tab = false;
    if (m->ended) {
        m->tn--; /* the table became the list of open activities (am_run's end) */
        return;
    }
    size_t mask = m->tcap - 1, i = guid_hash(&a->id) & mask;
    uint32_t sa = act_slot(a);
    while (m->tab[i] && m->tab[i] != sa) {
        if (at_guid_eq(&slot_act(m, m->tab[i])->id, &a->id)) return; /* replaced by a newer one of the same id */
        i = (i + 1) & mask;
    }
    if (!m->tab[i]) return;
    m->tab[i] = 0;
    m->tn--;
    for (size_t j = (i + 1) & mask; m->tab[j]; j = (j + 1) & mask) {
        size_t h = guid_hash(&slot_act(m, m->tab[j])->id) & mask;
        /* move back entries whose home is not in (i, j] */
        bool between = i <= j ? (h > i && h <= j) : (h > i || h <= j);
        if (!between) {
            m->tab[i] = m->tab[j];
            m->tab[j] = 0;
            i = j;
        }
    }
}

/* ---------------- activity lifecycle ---------------- */

static void visit(am_model *m, am_activity *a, uint64_t tid, int64_t t)
{
    am_extra *x = a->x;
    if (!x || !x->visits) {
        if (tid == am_start_tid(a)) {
            a->stop = t; /* while open: its last event on the start thread */
            return;
        }
        /* a second thread: the visits go out of line */
        if (!(x = extra(m, a)) || !(x->visits = malloc(2 * sizeof *x->visits))) return;
        x->cvisits = 2;
        mem_add(m, 2 * sizeof *x->visits);
        x->visits[0] = (am_visit){.tid = am_start_tid(a), .first = a->start, .last = a->stop};
        x->visits[1] = (am_visit){.tid = tid, .first = t, .last = t};
        x->nvisits = 2;
        return;
    }
    for (uint32_t i = 0; i < x->nvisits; i++)
        if (x->visits[i].tid == tid) {
            x->visits[i].last = t;
            return;
        }
    if (x->nvisits >= AM_MAX_VISITS) return;
    if (x->nvisits == x->cvisits) {
        uint32_t c = x->cvisits * 2;
        am_visit *v = realloc(x->visits, c * sizeof *v);
        if (!v) return;
        mem_add(m, (c - x->cvisits) * sizeof *v);
        x->visits = v;
        x->cvisits = c;
    }
    x->visits[x->nvisits++] = (am_visit){.tid = tid, .first = t, .last = t};
}

static void add_xfer(am_model *m, am_activity *a, uint64_t from, int64_t send, uint64_t to, int64_t recv)
{
    am_extra *x = extra(m, a);
    if (!x) return;
    if (x->nxfers >= AM_MAX_XFERS) {
        x->nxfers_dropped++;
        return;
    }
    if (x->nxfers == x->cxfers) {
        uint32_t c = x->cxfers ? x->cxfers * 2 : 2;
        am_transfer *v = realloc(x->xfers, c * sizeof *v);
        if (!v) return;
        mem_add(m, (c - x->cxfers) * sizeof *v);
        x->xfers = v;
        x->cxfers = c;
    }
    x->xfers[x->nxfers++] = (am_transfer){.from_tid = from, .to_tid = to, .send = send, .recv = recv};
}

/* Non-tree mode: free a once it is closed and none of its children is alive, then its parent. */
static void try_free(am_model *m, am_activity *a)
{
    while (a && a->done_reported && a->live_children == 0) {
        am_activity *p = a->parent;
        tab_del(m, a);
        act_free(m, a);
        if (p) p->live_children--;
        a = p;
    }
}

/* Children are prepended as they start (no last-child pointer per activity): put every list of the
 * subtree in start order before it is handed over. Iterative: a chain may be AM_MAX_DEPTH deep and
 * wide subtrees long. */
static void order_subtree(am_activity *a)
{
    am_activity *n = a;
    while (n) {
        am_activity *prev = NULL, *c = n->first_child;
        while (c) {
            am_activity *next = c->next_sibling;
            c->next_sibling = prev;
            prev = c;
            c = next;
        }
        n->first_child = prev;
        /* next node in preorder (children are already in order, siblings not yet visited are) */
        if (n->first_child) n = n->first_child;
        else {
            while (n != a && !n->next_sibling) n = n->parent;
            n = n == a ? NULL : n->next_sibling;
        }
    }
}

static void report_subtree(am_model *m, am_activity *a)
{
    if (m->cb.activity) m->cb.activity(m->cb.ctx, a);
    for (am_activity *c = a->first_child; c; c = c->next_sibling) report_subtree(m, c);
}

static void free_subtree(am_model *m, am_activity *a)
{
    am_activity *c = a->first_child;
    while (c) {
        am_activity *n = c->next_sibling;
        free_subtree(m, c);
        c = n;
    }
    if (a->done_reported) m->held--;
    tab_del(m, a);
    act_free(m, a);
}

static int by_start(const void *x, const void *y)
{
    const am_activity *a = *(am_activity *const *)x, *b = *(am_activity *const *)y;
    if (a->start != b->start) return a->start < b->start ? -1 : 1;
    if (a->depth != b->depth) return a->depth < b->depth ? -1 : 1;
    return a->serial < b->serial ? -1 : a->serial > b->serial;
}

static int cmp_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

static int by_start_slot(const void *x, const void *y, void *vm)
{
    const am_model *m = vm;
    const am_activity *a = slot_act(m, *(const uint32_t *)x), *b = slot_act(m, *(const uint32_t *)y);
    if (a->start != b->start) return a->start < b->start ? -1 : 1;
    if (a->depth != b->depth) return a->depth < b->depth ? -1 : 1;
    return a->serial < b->serial ? -1 : a->serial > b->serial;
}

/* Tree mode, too many finished activities held for ancestors still open: hand over every finished
 * subtree whose parent is open (in start order) and free it. Runs once per o.hold closes at most, and
 * visits the table once, so the cost per activity stays constant. */
static void spill(am_model *m)
{
    size_t k = 0;
    am_activity **v = malloc((m->tn + 1) * sizeof *v);
    if (!v) return;
    /* the activities the id table holds (scanned in memory order: at the end of the stream the table
     * is the list of open activities) */
    for (uint32_t c = 0; c < m->nchunks; c++) {
        am_activity *all = (am_activity *)(m->chunks[c] + AM_CHUNK_HDR);
        for (size_t i = 0; i < AM_PER_CHUNK; i++) {
            am_activity *a = &all[i];
            if (a->used && a->in_tab && a->done_reported && a->open_below == 0 && a->parent &&
                a->parent->open_below > 0)
                v[k++] = a;
        }
    }
    /* a finished subtree replaced in the table by a newer activity of its id is not found here: it
     * waits for its root, as it would without spilling */
    qsort(v, k, sizeof *v, by_start);
    for (size_t i = 0; i < k; i++) {
        order_subtree(v[i]);
        report_subtree(m, v[i]);
        if (m->cb.spill) m->cb.spill(m->cb.ctx, v[i]);
        v[i]->spilled = true;
    }
    for (size_t i = 0; i < k; i++) { /* unlink from the parents: one pass over each parent's children */
        am_activity *p = v[i]->parent;
        if (p->spilled) continue; /* this parent's list is already filtered (the mark is reset below) */
        am_activity **c = &p->first_child;
        while (*c) {
            if ((*c)->spilled) *c = (*c)->next_sibling;
            else c = &(*c)->next_sibling;
        }
        p->spilled = true;
    }
    for (size_t i = 0; i < k; i++) v[i]->parent->spilled = false;
    for (size_t i = 0; i < k; i++) {
        v[i]->parent->live_children--;
        free_subtree(m, v[i]);
    }
    free(v);
}

/* A root whose whole subtree has finished: to the command, then freed. */
static void hand_tree(am_model *m, am_activity *root)
{
    order_subtree(root);
    report_subtree(m, root);
    if (m->cb.tree) m->cb.tree(m->cb.ctx, root);
    free_subtree(m, root);
}

/* a has stopped (or the stream ended with it open): report it when final, free what can go. */
static void close_activity(am_model *m, am_activity *a)
{
    a->done_reported = true;
    am_activity *root = a;
    for (am_activity *p = a; p; p = p->parent) {
        p->open_below--;
        root = p;
    }
    if (!m->o.tree) {
        if (m->cb.activity) m->cb.activity(m->cb.ctx, a);
        try_free(m, a);
        return;
    }
    m->held++;
    if (root->open_below == 0 && root->keep && m->nin > 1) {
        /* a child process's activities may still link here (their Start can follow this Stop): the
         * tree waits for the end of the stream */
        if (!root->spilled_kept) {
            if (m->nkept == m->ckept) {
                size_t c = m->ckept ? 2 * m->ckept : 16;
                am_activity **k = realloc(m->kept, c * sizeof *k);
                if (!k) goto report;
                m->kept = k;
                m->ckept = c;
            }
            m->kept[m->nkept++] = root;
            root->spilled_kept = true;
        }
        return;
    }
report:
    if (root->open_below == 0) {
        hand_tree(m, root);
    } else if (m->held > m->hold_limit) {
        spill(m);
        /* what stays is held by subtrees still open: wait for as many closes again */
        m->hold_limit = m->held + (m->o.hold ? m->o.hold : AM_HOLD_DEFAULT);
    }
}

/* The parent's id from the path: //1/5/1 -> //1/5, rebuilt with the path encoder. */
static bool path_parent_id(const char *path, uint32_t pid, at_guid *out)
{
    if (strncmp(path, "//", 2) != 0) return false;
    uint32_t ids[64];
    int n = 0;
    const char *s = path + 2;
    while (*s) {
        char *e;
        unsigned long v = strtoul(s, &e, 10);
        if (e == s || n == 64) return false;
        ids[n++] = (uint32_t)v;
        s = e;
        if (*s == '/') s++;
        else if (*s) return false;
    }
    if (n < 2) return false;
    memset(out, 0, sizeof *out);
    int where = 0;
    for (int i = 0; i < n - 1; i++) {
        where = at_actpath_add_id(out, where, ids[i], false, pid);
        if (where == AT_ACTPATH_NOFIT) return false;
    }
    return true;
}

static uint64_t first_u64(const nt_event *ev)
{
    const nt_metadata *md = ev->meta;
    if (md->nfields == 0 || ev->payload_len < 8) return 0;
    uint32_t t = md->fields[0].type;
    if (t != NT_TYPE_UINT64 && t != NT_TYPE_INT64) return 0;
    uint64_t v;
    memcpy(&v, ev->payload, 8);
    return v;
}

static void shadow_push(am_model *m, am_activity *a)
{
    if (m->nshadow == m->cshadow) {
        size_t c = m->cshadow ? m->cshadow * 2 : 16;
        am_activity **v = realloc(m->shadow, c * sizeof *v);
        if (!v) return; /* then it is closed at the end only if still reachable: a leak, not a crash */
        m->shadow = v;
        m->cshadow = c;
    }
    m->shadow[m->nshadow++] = a;
}

/* ---------------- connections between processes ---------------- */

typedef struct am_endpoint {
    at_guid act;
    int64_t t, stop;           /* stop: a connect's activity's Stop in the same file (0: none) */
    uint32_t pid;
    int file, fd;
    bool accepted;
    char local[64], peer[64];
} am_endpoint;

/* A SocketExchange: exchange index of the connection of endpoint ep, in activity act */
typedef struct am_exch {
    at_guid act;
    size_t ep;
    int32_t index;
} am_exch;

/* room for one more of size sz in *v (n used of *cap): false when it cannot grow */
static bool grow(void **v, size_t n, size_t *cap, size_t sz)
{
    if (n < *cap) return true;
    size_t nc = *cap ? *cap * 2 : 64;
    void *p = realloc(*v, nc * sz);
    if (!p) return false;
    *v = p;
    *cap = nc;
    return true;
}

static int exch_cmp(const void *a, const void *b)
{
    const am_exch *x = a, *y = b;
    if (x->ep != y->ep) return x->ep < y->ep ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static int xseg_cmp(const void *a, const void *b)
{
    const am_xseg *x = a, *y = b;
    int c = memcmp(&x->server, &y->server, sizeof x->server);
    if (c) return c;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* The exchanges of endpoint ep: [*lo, *hi) of xs (sorted by exch_cmp) */
static void exch_range(const am_exch *xs, size_t n, size_t ep, size_t *lo, size_t *hi)
{
    size_t a = 0, b = n;
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        if (xs[mid].ep < ep) a = mid + 1;
        else b = mid;
    }
    *lo = a;
    while (a < n && xs[a].ep == ep) a++;
    *hi = a;
}

/* The segments of an accepted connection (server endpoint si, its client ci): each server
 * exchange that the client's exchange of the same index made in another activity than the one
 * before (the connecting one for the first) */
static void xsegs_add(am_model *m, const am_endpoint *ep, size_t si, size_t ci, const am_exch *xs,
                      size_t nx, size_t *cap)
{
    size_t slo, shi, clo, chi;
    exch_range(xs, nx, si, &slo, &shi);
    if (slo == shi) return;
    exch_range(xs, nx, ci, &clo, &chi);
    at_guid prev = ep[ci].act;
    size_t c = clo;
    for (size_t i = slo; i < shi; i++) {
        while (c < chi && xs[c].index < xs[i].index) c++;
        if (c == chi || xs[c].index != xs[i].index) continue; /* not seen: unchanged */
        if (at_guid_eq(&xs[c].act, &prev)) continue;
        prev = xs[c].act;
        if (!grow((void **)&m->xsegs, m->nxsegs, cap, sizeof *m->xsegs)) return;
        am_xseg g = {.server = xs[i].act, .file = ep[si].file, .index = xs[i].index};
        if (!at_guid_eq(&prev, &ep[ci].act)) g.client = prev;
        m->xsegs[m->nxsegs++] = g;
    }
}

static int xlink_cmp(const void *a, const void *b)
{
    return memcmp(&((const am_xlink *)a)->server, &((const am_xlink *)b)->server, sizeof(at_guid));
}

static bool xlink_client(const am_model *m, const at_guid *server, at_guid *client)
{
    am_xlink key = {.server = *server};
    const am_xlink *x = bsearch(&key, m->xlinks, m->nxlinks, sizeof key, xlink_cmp);
    if (x) *client = x->client;
    return x != NULL;
}

/* A connection between two clocks bounds how the server's clock (or the client's) may move: its
 * accept returns after the client's connect did (the handshake's last step is the client's), and
 * before the activity that connected stopped (it waited for the answer). Each side's time is on
 * the first file's line already (by SyncTimeUTC); the bounds are on the move of the clock that is
 * not the first's (a connection between two others bounds the server's). */
static void clock_bound(am_model *m, const am_endpoint *srv, const am_endpoint *cli)
{
    if (!m->nclocks) return;
    int ds = m->in[srv->file].domain, dc = m->in[cli->file].domain;
    if (ds == dc) return;
    int64_t lo, hi;
    am_clock *k;
    if (ds != 0) { /* move the server's clock: t_s + d >= t_c, t_s + d <= stop */
        k = &m->clocks[ds];
        lo = cli->t - srv->t;
        hi = cli->stop ? cli->stop - srv->t : INT64_MAX;
    } else { /* move the client's: t_c + d <= t_s, stop + d >= t_s */
        k = &m->clocks[dc];
        hi = srv->t - cli->t;
        lo = cli->stop ? srv->t - cli->stop : INT64_MIN;
    }
    if (lo > k->lo) k->lo = lo;
    if (hi < k->hi) k->hi = hi;
    k->pairs++;
}

/* Each other clock moved by the least that its connections ask (none when its SyncTimeUTC placing
 * already keeps every answer after its request); when they contradict each other (the clocks
 * drifted apart during the traces), the lower bound wins: no server starts before its client. */
static void clocks_move(am_model *m)
{
    for (int k = 1; k < m->nclocks; k++) {
        am_clock *c = &m->clocks[k];
        if (!c->pairs) continue;
        int64_t d = 0;
        if (c->lo > 0 || c->lo > c->hi) d = c->lo;
        else if (c->hi < 0) d = c->hi;
        c->moved = d;
        for (int i = 0; i < m->nin; i++)
            if (m->in[i].domain == k) m->in[i].shift += d;
    }
}

int am_clock_note(const am_model *m, char *out, size_t n)
{
    size_t len = 0;
    if (n) out[0] = 0;
    for (int k = 1; k < m->nclocks && len < n; k++) {
        const am_clock *c = &m->clocks[k];
        int w;
        if (!c->pairs)
            w = snprintf(out + len, n - len,
                         "clocks: pid %u's clock put on pid %u's by their SyncTimeUTC (%+.3f ms; no connection between them bounds it: within a few ms)\n",
                         c->pid, m->in[0].info.pid, (double)c->utc_shift / 1e6);
        else if (c->lo > c->hi)
            w = snprintf(out + len, n - len,
                         "clocks: pid %u's clock put on pid %u's by their SyncTimeUTC (%+.3f ms), moved %+.3f ms by %u connections, which disagree by %.3f ms (the clocks drifted)\n",
                         c->pid, m->in[0].info.pid, (double)c->utc_shift / 1e6, (double)c->moved / 1e6, c->pairs,
                         (double)(c->lo - c->hi) / 1e6);
        else if (c->hi == INT64_MAX || c->lo == INT64_MIN)
            w = snprintf(out + len, n - len,
                         "clocks: pid %u's clock put on pid %u's by their SyncTimeUTC (%+.3f ms), moved %+.3f ms by %u connections (bounded on one side only)\n",
                         c->pid, m->in[0].info.pid, (double)c->utc_shift / 1e6, (double)c->moved / 1e6, c->pairs);
        else
            w = snprintf(out + len, n - len,
                         "clocks: pid %u's clock put on pid %u's by their SyncTimeUTC (%+.3f ms), moved %+.3f ms by %u connections, aligned within %.3f ms\n",
                         c->pid, m->in[0].info.pid, (double)c->utc_shift / 1e6, (double)c->moved / 1e6, c->pairs,
                         (double)(c->hi - c->lo) / 1e6);
        if (w < 0) break;
        len += (size_t)w;
    }
    return (int)(len < n ? len : n);
}

/* Files of several processes: a first pass over each for the shim's SocketEndpoints events, pairing
 * each accepted socket with the connect whose ends are its own the other way round (in another
 * process, the latest before the accept), so that the accepting activity hangs under the
 * connecting one. Files of one process, and standard input, need no pass. */
static void xlinks_scan(am_model *m)
{
    bool several = false;
    for (int i = 1; i < m->nin; i++) several |= m->in[i].info.pid != m->in[0].info.pid;
    if (!several) return;
    am_endpoint *ep = NULL;
    size_t n = 0, cap = 0;
    am_exch *xs = NULL;
    size_t nx = 0, xcap = 0;
    size_t *fdmap = NULL; /* a file's fd -> its latest endpoint + 1 */
    size_t fdcap = 0;
    for (int f = 0; f < m->nin; f++) {
        if (!strcmp(m->in[f].path, "-")) continue;
        char err[256];
        nt_options no = {0};
        nt_reader *r = nt_open_ex(m->in[f].path, &no, err, sizeof err);
        if (!r) continue;
        nt_event ev;
        size_t first = n; /* this file's records */
        if (fdmap) memset(fdmap, 0, fdcap * sizeof *fdmap);
        while (nt_next(r, &ev) == 1) {
            int xfd, xindex;
            uint64_t xidle;
            if (ev.meta && ev.meta->opcode == NT_OPCODE_INFO && !at_guid_is_zero(&ev.activity) &&
                nt_event_exchange(&ev, &xfd, &xindex, &xidle)) {
                if (xfd < 0 || (size_t)xfd >= fdcap || !fdmap[xfd] || xindex <= 0 ||
                    !grow((void **)&xs, nx, &xcap, sizeof *xs))
                    continue;
                xs[nx++] = (am_exch){.act = ev.activity, .ep = fdmap[xfd] - 1, .index = xindex};
                continue;
            }
            if (m->nclocks && ev.meta && ev.meta->opcode == NT_OPCODE_STOP && !at_guid_is_zero(&ev.activity)) {
                for (size_t k = first; k < n; k++) /* a connecting activity's Stop: bounds the server */
                    if (!ep[k].accepted && !ep[k].stop && at_guid_eq(&ep[k].act, &ev.activity))
                        ep[k].stop = am_time(m, f, ev.timestamp);
                continue;
            }
            am_endpoint e = {.act = ev.activity, .pid = (uint32_t)m->in[f].info.pid, .file = f, .fd = -1};
            if (at_guid_is_zero(&ev.activity) ||
                !nt_event_endpoints(&ev, &e.fd, &e.accepted, e.local, sizeof e.local, e.peer, sizeof e.peer))
                continue;
            e.t = am_time(m, f, ev.timestamp);
            if (!grow((void **)&ep, n, &cap, sizeof *ep)) break;
            if (e.fd >= 0 && e.fd < (1 << 22) && (size_t)e.fd >= fdcap) {
                size_t nc = fdcap ? fdcap : 256;
                while (nc <= (size_t)e.fd) nc *= 2;
                size_t *v = realloc(fdmap, nc * sizeof *v);
                if (v) {
                    memset(v + fdcap, 0, (nc - fdcap) * sizeof *v);
                    fdmap = v;
                    fdcap = nc;
                }
            }
            if (e.fd >= 0 && (size_t)e.fd < fdcap) fdmap[e.fd] = n + 1;
            ep[n++] = e;
        }
        nt_close(r);
    }
    free(fdmap);
    if (nx) qsort(xs, nx, sizeof *xs, exch_cmp);
    size_t segcap = 0;
    size_t nl = 0;
    am_xlink *xl = n ? calloc(n, sizeof *xl) : NULL;
    for (size_t i = 0; xl && i < n; i++) {
        if (!ep[i].accepted) continue;
        const am_endpoint *best = NULL;
        for (size_t j = 0; j < n; j++) {
            const am_endpoint *c = &ep[j];
            if (c->accepted || c->pid == ep[i].pid || strcmp(c->local, ep[i].peer) ||
                strcmp(c->peer, ep[i].local))
                continue;
            /* the connect that made it: the latest one not after the accept (a second of skew) */
            if (c->t <= ep[i].t + 1000000000 && (!best || c->t > best->t)) best = c;
        }
        if (best) {
            xl[nl++] = (am_xlink){ep[i].act, best->act};
            clock_bound(m, &ep[i], best);
            if (nx) xsegs_add(m, ep, i, (size_t)(best - ep), xs, nx, &segcap);
        }
    }
    clocks_move(m);
    free(ep);
    free(xs);
    if (m->nxsegs) qsort(m->xsegs, m->nxsegs, sizeof *m->xsegs, xseg_cmp);
    if (nl) {
        qsort(xl, nl, sizeof *xl, xlink_cmp);
        m->xlinks = xl;
        m->nxlinks = nl;
    } else {
        free(xl);
    }
}

/* a becomes p's child (its last one started) */
static void link_parent(am_model *m, am_activity *a, am_activity *p)
{
    a->parent = p;
    a->depth = p->depth + 1;
    p->live_children++;
    if (m->o.tree) { /* prepended: order_subtree puts the list in start order when handed over */
        a->next_sibling = p->first_child;
        p->first_child = a;
    }
    for (am_activity *q = p; q; q = q->parent) q->open_below++;
}

/* link_parent undone, before a is freed (a is p's first child) */
static void unlink_parent(am_model *m, am_activity *a, am_activity *p)
{
    p->live_children--;
    for (am_activity *q = p; q; q = q->parent) q->open_below--;
    if (m->o.tree) {
        am_activity **c = &p->first_child;
        while (*c != a) c = &(*c)->next_sibling;
        *c = a->next_sibling;
    }
}

bool am_accepted_from(const struct am_model *m, const am_activity *a)
{
    at_guid c;
    return (a->x && a->x->seg_index) || (m->nxlinks && xlink_client(m, &a->id, &c));
}

static am_activity *start_activity(am_model *m, const nt_event *ev, int file, uint32_t pid, int64_t t)
{
    const at_guid *ev_related_override = NULL;
    char nm[64];
    am_activity_name(ev->meta->name, nm, sizeof nm);
    const char *name = intern(m, nm);
    am_activity *a = name ? act_new(m) : NULL;
    if (!a) return NULL;
    a->name = name;
    a->file = (uint32_t)file;
    a->id = ev->activity;
    a->pid = pid;
    a->unique_id = first_u64(ev);
    a->start = a->stop = t;
    if (ev->thread < UINT32_MAX) a->start_tid32 = (uint32_t)ev->thread;
    else {
        a->start_tid32 = UINT32_MAX;
        if (!extra(m, a)) {
            act_free(m, a);
            return NULL;
        }
        a->x->start_tid = ev->thread;
    }
    a->open_below = 1;
    a->serial = ++m->serial;

    char path[AM_PATH_MAX];
    am_format_id(&ev->activity, pid, path, sizeof path);
    am_activity *p = NULL;
    at_guid pg;
    /* An exec'ed image keeps the pid, so its ids are those of the image before it, whose activities
     * never stopped (the image was replaced): the activity of the same id in an earlier file is the
     * one it continues, when the new Start names no other creator. */
    am_activity *old = tab_get(m, &a->id);
    bool exec_cont = old && !old->done_reported && (int)old->file != file &&
                     (at_guid_is_zero(&ev->related) || at_guid_eq(&ev->related, &ev->activity));
    /* usually RelatedActivityId is the path parent: one lookup and a prefix check, no re-encoding */
    am_activity *r = at_guid_is_zero(&ev->related) ? NULL : tab_get(m, &ev->related);
    char rpath[AM_PATH_MAX];
    size_t rl = 0;
    if (r && r->pid == pid && !exec_cont) {
        am_act_path(r, rpath, sizeof rpath);
        rl = strlen(rpath);
    }
    if (exec_cont)
        p = old;
    else if (rl && !strncmp(path, rpath, rl) && path[rl] == '/' && !strchr(path + rl + 1, '/'))
        p = r;
    else if (path_parent_id(path, pid, &pg))
        p = tab_get(m, &pg);
    if (!p && !at_guid_is_zero(&ev->related) && !at_guid_eq(&ev->related, &ev->activity))
        p = tab_get(m, &ev->related);
    at_guid cross = {{0}};
    if (!p && m->nxlinks && xlink_client(m, &a->id, &cross)) {
        /* the other end of its connection: a cross-process link, as an exec'd image's to its
         * parent's activity */
        p = tab_get(m, &cross);
        if (!p && at_guid_is_zero(&ev->related)) ev_related_override = &cross;
    }
    if (p && p->x && p->x->seg) p = p->x->seg; /* started in an exchange another client sent */
    if (p && p->done_reported && !m->o.tree) p = NULL; /* already reported: nowhere to hang it */
    if (p && p->depth + 1 >= AM_MAX_DEPTH) p = NULL;   /* a hostile chain: the walks up stay short */
    if (!p && (!at_guid_is_zero(&ev->related) || ev_related_override)) {
        /* its link, formatted when printed (am_act_link) */
        if (!extra(m, a)) {
            act_free(m, a);
            return NULL;
        }
        a->x->related = ev_related_override ? *ev_related_override : ev->related;
        a->has_link = true;
    }
    if (p) link_parent(m, a, p);
    if (old && !old->done_reported) {
        tab_del(m, old);
        if ((int)old->file != file) {
            /* an earlier image's: it stays open (never stopped) until the end of the stream */
            shadow_push(m, old);
        } else {
            /* the same id started again while open: the old one never stopped */
            m->never_stopped++;
            old->stop = t;
            close_activity(m, old);
        }
    }
    if (!tab_put(m, a)) {
        if (p) unlink_parent(m, a, p);
        act_free(m, a);
        return NULL;
    }
    return a;
}

/* ---------------- exchanges of kept-alive connections ---------------- */

static void close_segment(am_model *m, am_activity *srv, int64_t t)
{
    am_activity *g = srv->x ? srv->x->seg : NULL;
    if (!g) return;
    srv->x->seg = NULL;
    if (g->done_reported) return;
    g->stopped = true;
    g->stop = t > g->start ? t : g->start;
    close_activity(m, g);
}

/* Exchange g of srv's connection begins at t on thread tid: the segment before it ends (at end);
 * one under g's client begins, named as srv with "Exchange" (ConnectionExchange), its path srv's
 * with "#index". */
static void start_segment(am_model *m, am_activity *srv, const am_xseg *g, int64_t end, int64_t t,
                          uint64_t tid)
{
    close_segment(m, srv, end);
    if (at_guid_is_zero(&g->client) || !extra(m, srv)) return;
    char nm[80];
    snprintf(nm, sizeof nm, "%sExchange", srv->name);
    const char *name = intern(m, nm);
    am_activity *a = name ? act_new(m) : NULL;
    if (!a) return;
    if (!extra(m, a)) {
        act_free(m, a);
        return;
    }
    a->name = name;
    a->file = srv->file;
    a->pid = srv->pid;
    a->start = a->stop = t;
    /* an id of its own, no activity path (the segment's path is printed from seg_of) */
    uint64_t h[2] = {0xcbf29ce484222325ull, 0x9e3779b97f4a7c15ull};
    for (int i = 0; i < 16; i++) {
        h[0] = (h[0] ^ srv->id.b[i]) * 0x100000001b3ull;
        h[1] = (h[1] ^ srv->id.b[i]) * 0xff51afd7ed558ccdull;
    }
    h[0] ^= (uint64_t)(uint32_t)g->index * 0xc4ceb9fe1a85ec53ull;
    h[1] += (uint64_t)(uint32_t)g->index;
    memcpy(a->id.b, h, 16);
    a->x->seg_of = srv->id;
    a->x->seg_index = (uint32_t)g->index;
    if (tid < UINT32_MAX) a->start_tid32 = (uint32_t)tid;
    else {
        a->start_tid32 = UINT32_MAX;
        a->x->start_tid = tid;
    }
    a->open_below = 1;
    a->serial = ++m->serial;
    am_activity *p = tab_get(m, &g->client);
    if (p && p->done_reported && !m->o.tree) p = NULL;
    if (p && p->depth + 1 >= AM_MAX_DEPTH) p = NULL;
    if (p) {
        link_parent(m, a, p);
    } else { /* the client activity is gone or not given: a link, as a root */
        a->x->related = g->client;
        a->has_link = true;
    }
    if (tab_get(m, &a->id) || !tab_put(m, a)) { /* (an id taken: two segments alike) */
        if (p) unlink_parent(m, a, p);
        act_free(m, a);
        return;
    }
    srv->x->seg = a;
}

/* An exchange of a server's connection: where a segment starts (the one before ends at the
 * server's last answer before it: IdleNs earlier), or the connection's end (index -1) */
static void exchange_event(am_model *m, int f, am_activity *a, const nt_event *ev, int64_t t)
{
    int fd, index;
    uint64_t idle;
    if (!nt_event_exchange(ev, &fd, &index, &idle)) return;
    int64_t end = idle < (uint64_t)INT64_MAX && t - (int64_t)idle > a->start ? t - (int64_t)idle : t;
    if (index < 0) {
        close_segment(m, a, end);
        return;
    }
    am_xseg key = {.server = a->id, .file = f, .index = index};
    const am_xseg *g = bsearch(&key, m->xsegs, m->nxsegs, sizeof key, xseg_cmp);
    if (g) start_segment(m, a, g, end, t, ev->thread);
}

/* Does a Stop event of this name stop an activity named name? ("RequestStop" or, with a Stop opcode
 * given by tag, "Request"; compared as the model stores names, cut to the same length) */
static bool stop_names(const char *ev_name, const char *name)
{
    char n[64];
    am_activity_name(ev_name, n, sizeof n);
    return strcmp(n, name) == 0;
}

/* A UInt64 payload field of a transfer event by name, when every field before it is 8 bytes (the
 * layout the shim writes); false when the event has no such field (files of older shims). */
static bool xfer_field(const nt_event *ev, const char *name, uint64_t *v)
{
    const nt_metadata *md = ev->meta;
    for (uint32_t i = 0; i < md->nfields; i++) {
        uint32_t t = md->fields[i].type;
        if (t != NT_TYPE_UINT64 && t != NT_TYPE_INT64) return false;
        if (strcmp(md->fields[i].name, name) == 0) {
            if (ev->payload_len < 8 * (i + 1)) return false;
            memcpy(v, ev->payload + 8 * i, 8);
            return true;
        }
    }
    return false;
}

static am_sent *xfer_slot(am_model *m, int f, uint64_t tid, uint64_t id)
{
    if (!m->sent && !(m->sent = calloc((size_t)1 << AM_SENT_BITS, sizeof *m->sent))) return NULL;
    uint64_t h = (id ^ (tid * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)f << 40)) * 0xff51afd7ed558ccdull;
    return &m->sent[h >> (64 - AM_SENT_BITS)];
}

/* The Send a Receive answers: by the sender's thread and TransferId the Receive names (a Send that
 * several threads receive, such as a parallel region's, answers each), else the oldest pending
 * Send of the activity from the named thread, else (files of older shims, which name no sender) the
 * oldest pending Send of the activity. */
static void xfer_receive(am_model *m, am_activity *a, int f, const nt_event *ev, int64_t t)
{
    uint64_t from = 0, id = 0;
    int64_t st = t;
    bool named = xfer_field(ev, "SenderThreadId", &from) && from != 0;
    if (named && xfer_field(ev, "TransferId", &id) && id) {
        am_sent *s = xfer_slot(m, f, from, id);
        if (s && s->id == id && s->tid == from && s->file == f) {
            add_xfer(m, a, from, s->ts, ev->thread, t);
            return;
        }
    }
    am_sends *q = a->x ? a->x->sends : NULL;
    uint32_t k = 0, n = q ? q->n : 0;
    if (named) {
        while (k < n && q->tid[(q->head + k) % 8] != from) k++;
    } else if (q) {
        from = q->last_tid;
        st = q->last_ts;
    }
    if (k < n) {
        /* take entry k out of the ring, keeping the order of the rest */
        uint32_t i = (q->head + k) % 8;
        from = q->tid[i];
        st = q->ts[i];
        for (; k > 0; k--) {
            uint32_t prev = (q->head + k - 1) % 8, cur = (q->head + k) % 8;
            q->tid[cur] = q->tid[prev];
            q->ts[cur] = q->ts[prev];
        }
        q->head = (q->head + 1) % 8;
        q->n--;
    }
    if (!from) st = t;
    if (from != ev->thread) add_xfer(m, a, from, st, ev->thread, t);
}

/* A Stop no open activity took: counted, and the first described for the warning. */
static void unmatched_stop(am_model *m, const nt_event *ev, uint32_t pid, int64_t t, const char *why)
{
    if (m->unmatched_stops++)
        return;
    char path[96];
    am_format_id(&ev->activity, pid, path, sizeof path);
    snprintf(m->unmatched_first, sizeof m->unmatched_first, "%s of %s in pid %u, thread %llu, at %.3f ms: %s",
             ev->meta->name ? ev->meta->name : "a Stop", path[0] ? path : "no activity", pid,
             (unsigned long long)ev->thread, (double)t / 1e6, why);
}

static void apply(am_model *m, int f, const nt_event *ev, int64_t t)
{
    uint32_t pid = (uint32_t)m->in[f].info.pid;
    uint8_t op = ev->meta->opcode;
    am_event e = {.ev = ev, .file = f, .pid = pid, .time = t};
    am_activity *a = NULL;
    /* the end of the stream is the program's last event: a file's ProcessInfo is written when its
     * session starts (an exec'd image's may come after the last event of the image before) */
    if (t > m->end && !(ev->meta->provider && !strcmp(ev->meta->name, "ProcessInfo")
                        && !strcmp(ev->meta->provider, "Microsoft-DotNETCore-EventPipe")))
        m->end = t;
    if (!at_guid_is_zero(&ev->activity)) {
        if (op == NT_OPCODE_START) a = start_activity(m, ev, f, pid, t);
        else a = tab_get(m, &ev->activity);
    }
    if (a && a->done_reported) {
        /* after its Stop: the event still names it, the activity no longer changes */
        e.act = a;
        if (op == NT_OPCODE_STOP) {
            e.act = NULL;
            unmatched_stop(m, ev, pid, t, "its activity had stopped already (a second Stop of one Start)");
        }
        if (m->cb.event) m->cb.event(m->cb.ctx, &e);
        return;
    }
    if (a) {
        if (++a->events_lo == 0 && extra(m, a)) a->x->events_hi++;
        /* a process started in this activity: its files may link here after the tree closed */
        if (!a->keep && ev->meta->opcode == NT_OPCODE_INFO && ev->meta->provider
            && !strcmp(ev->meta->provider, "acttrace-shim")
            && (!strcmp(ev->meta->name, "ProcessFork") || !strcmp(ev->meta->name, "ProcessSpawn")))
        {
            am_activity *q = a;
            while (q->parent) q = q->parent;
            q->keep = true;
        }
        visit(m, a, ev->thread, t);
        if (op == NT_OPCODE_SEND) {
            am_sends *q = a->x && a->x->sends ? a->x->sends : NULL;
            if (!q && extra(m, a) && (q = a->x->sends = calloc(1, sizeof *q))) mem_add(m, sizeof *q);
            if (q) {
                uint32_t k = (q->head + q->n) % 8;
                if (q->n == 8) q->head = (q->head + 1) % 8;
                else q->n++;
                q->tid[k] = ev->thread;
                q->ts[k] = t;
                q->last_tid = ev->thread;
                q->last_ts = t;
            }
            uint64_t id;
            am_sent *sl;
            if (xfer_field(ev, "TransferId", &id) && id && (sl = xfer_slot(m, f, ev->thread, id)))
                *sl = (am_sent){.tid = ev->thread, .id = id, .ts = t, .file = f};
        } else if (op == NT_OPCODE_RECEIVE) {
            xfer_receive(m, a, f, ev, t);
        } else if (op == NT_OPCODE_INFO && m->nxsegs) {
            exchange_event(m, f, a, ev, t);
        }
    }
    e.act = a;
    /* a Stop without an ActivityId is no activity's (the TPL task events the shim writes beside its
     * transfers: TaskExecute Stop) */
    if (op == NT_OPCODE_STOP && !at_guid_is_zero(&ev->activity)) {
        /* EventSource logs a Stop that finds no live activity of its name with the current id: such
         * a Stop (another name) leaves the activity of that id running */
        am_activity *named = a;
        if (a && !stop_names(ev->meta->name, a->name)) a = NULL;
        if (a) {
            if (a->x && a->x->seg) close_segment(m, a, t);
            a->stopped = true;
            a->stop = t;
            a->moved = ev->thread != am_start_tid(a);
            if (a->moved && extra(m, a)) a->x->stop_tid = ev->thread;
            e.stopped = a;
        } else {
            unmatched_stop(m, ev, pid, t,
                           named ? "the activity of that id has another name (a Stop of another kind leaves it running)"
                                 : "no activity of that id was open (stopped already, or its Start is in a file not given or was lost)");
        }
    }
    if (m->cb.event) m->cb.event(m->cb.ctx, &e);
    if (e.stopped) close_activity(m, a);
}

/* ---------------- input ---------------- */

/* Times are kept within +-2^62 ns (146 years): a corrupt timestamp or frequency is clamped there,
 * and the differences the commands take (stop - start, time - origin) cannot overflow. */
#define AM_TIME_LIMIT ((__int128)1 << 62)
static int64_t clamp_ns(__int128 v)
{
    return (int64_t)(v > AM_TIME_LIMIT ? AM_TIME_LIMIT : v < -AM_TIME_LIMIT ? -AM_TIME_LIMIT : v);
}

static int64_t to_ns(const nt_trace_info *in, uint64_t ts)
{
    if (in->qpc_freq == 1000000000 || in->qpc_freq <= 0) return clamp_ns(ts);
    return clamp_ns((__int128)ts * 1000000000 / in->qpc_freq);
}

int64_t am_time(const am_model *m, int f, uint64_t ts)
{
    return clamp_ns((__int128)to_ns(&m->in[f].info, ts) + m->in[f].shift - m->origin);
}

/* A SyncTimeUTC as ns since 1970, or false when it is no date (a damaged or hand-made header) */
static bool utc_ns(const uint16_t *t, int64_t *out)
{
    if (t[0] < 1970 || t[0] > 2200 || t[1] < 1 || t[1] > 12 || t[3] < 1 || t[3] > 31 || t[4] > 23 ||
        t[5] > 59 || t[6] > 60 || t[7] > 999)
        return false;
    struct tm tm = {.tm_year = t[0] - 1900, .tm_mon = t[1] - 1, .tm_mday = t[3], .tm_hour = t[4],
                    .tm_min = t[5], .tm_sec = t[6]};
    *out = (int64_t)timegm(&tm) * 1000000000 + (int64_t)t[7] * 1000000;
    return true;
}

/* The files' clocks: a file's wall-clock time at its start less its event clock's there is the
 * same, within the wall clock's millisecond and its slewing, for every file of one clock (one
 * host's CLOCK_MONOTONIC or TSC); files that differ by more than AM_CLOCK_SAME_NS are of another
 * host (or time namespace), put on the first file's time line by that difference (their SyncTimeUTC
 * against the first file's), which the connections between them refine (xlinks_scan). */
#define AM_CLOCK_SAME_NS 500000000
static void clocks_assign(am_model *m)
{
    int64_t *d = calloc((size_t)m->nin, sizeof *d);
    am_clock *cl = calloc((size_t)m->nin, sizeof *cl);
    if (!d || !cl) {
        free(d);
        free(cl);
        return;
    }
    int n = 0;
    for (int i = 0; i < m->nin; i++) {
        am_input *in = &m->in[i];
        int64_t u;
        if (!utc_ns(in->info.sync_time_utc, &u)) { /* a file without a usable date: one clock for all */
            for (int j = 0; j < m->nin; j++) m->in[j].domain = 0, m->in[j].shift = 0;
            n = 0;
            break;
        }
        int64_t di = clamp_ns((__int128)u - to_ns(&in->info, (uint64_t)in->info.sync_time_qpc));
        int k = 0;
        while (k < n && ((__int128)di - d[k] > AM_CLOCK_SAME_NS || (__int128)d[k] - di > AM_CLOCK_SAME_NS)) k++;
        if (k == n) {
            d[n] = di;
            cl[n] = (am_clock){.utc_shift = n ? clamp_ns((__int128)di - d[0]) : 0, .lo = INT64_MIN,
                               .hi = INT64_MAX, .pid = (uint32_t)in->info.pid};
            if (n == 0) cl[0].utc_shift = 0;
            n++;
        }
        in->domain = k;
        in->shift = cl[k].utc_shift;
    }
    free(d);
    if (n > 1) {
        m->clocks = cl;
        m->nclocks = n;
    } else {
        free(cl);
    }
}

am_model *am_open(char *const *paths, int npaths, const am_options *o, const am_callbacks *cb,
                  char *err, size_t errlen)
{
    am_model *m = calloc(1, sizeof *m);
    if (npaths > AM_MAX_FILES) {
        snprintf(err, errlen, "too many files (at most %d)", AM_MAX_FILES);
        free(m);
        return NULL;
    }
    if (!m || npaths < 1 || !(m->in = calloc((size_t)npaths, sizeof *m->in))) {
        snprintf(err, errlen, "out of memory");
        free(m);
        return NULL;
    }
    m->o = *o;
    if (cb) m->cb = *cb;
    m->last_pct = -1;
    const char *pm = getenv("ACTTRACE_PROGRESS_MIN");
    m->progress_min = pm && *pm ? strtoull(pm, NULL, 10) : AM_PROGRESS_MIN;
    m->hold_limit = m->o.hold ? m->o.hold : AM_HOLD_DEFAULT;
    for (int i = 0; i < npaths; i++) {
        am_input *in = &m->in[i];
        nt_options no = {0};
        in->path = paths[i];
        in->r = nt_open_ex(paths[i], &no, err, errlen);
        if (!in->r) {
            am_close(m);
            return NULL;
        }
        m->nin++;
        in->info = *nt_info(in->r);
        struct stat st;
        if (strcmp(paths[i], "-") != 0 && stat(paths[i], &st) == 0) in->size = (uint64_t)st.st_size;
        m->total_size += in->size;
    }
    clocks_assign(m);
    xlinks_scan(m); /* the connections between processes, which may move other clocks' files */
    for (int i = 0; i < m->nin; i++) {
        am_input *in = &m->in[i];
        int64_t s = to_ns(&in->info, (uint64_t)in->info.sync_time_qpc) + in->shift;
        if (i == 0 || s < m->origin) m->origin = s;
    }
    if (!tab_grow(m)) {
        snprintf(err, errlen, "out of memory");
        am_close(m);
        return NULL;
    }
    return m;
}

static void progress(am_model *m, bool final)
{
    if (!m->o.progress || m->total_size < m->progress_min || !isatty(2)) return;
    if (final) {
        if (m->progress_shown) fprintf(stderr, "\r%60s\r", "");
        return;
    }
    uint64_t done = 0;
    for (int i = 0; i < m->nin; i++) done += m->in[i].done ? m->in[i].size : nt_offset(m->in[i].r);
    int pct = (int)(done * 100 / m->total_size);
    if (pct == m->last_pct) return;
    m->last_pct = pct;
    m->progress_shown = true;
    char bar[41];
    int w = pct * 40 / 100;
    for (int i = 0; i < 40; i++) bar[i] = i < w ? '#' : '.';
    bar[40] = 0;
    fprintf(stderr, "\racttrace: [%s] %3d%%", bar, pct);
}

/* Refill file f's head: 1 ok, 0 end, -1 error. */
static int refill(am_model *m, int f)
{
    am_input *in = &m->in[f];
    int rc = nt_next(in->r, &in->head);
    in->has_head = rc == 1;
    if (rc == 1) in->head_time = am_time(m, f, in->head.timestamp);
    else in->done = true;
    return rc;
}

int am_run(am_model *m, char *err, size_t errlen)
{
    /* a damaged file ends where its damage starts; the others are read to their end */
    int status = 0;
    for (int i = 0; i < m->nin; i++)
        if (refill(m, i) < 0 && status == 0) {
            snprintf(err, errlen, "%s", nt_error(m->in[i].r));
            status = -1;
        }
    uint64_t n = 0;
    for (;;) {
        int best = -1;
        for (int i = 0; i < m->nin; i++)
            if (m->in[i].has_head && (best < 0 || m->in[i].head_time < m->in[best].head_time)) best = i;
        if (best < 0) break;
        apply(m, best, &m->in[best].head, m->in[best].head_time);
        if ((++n & 0xfff) == 0) progress(m, false);
        if (refill(m, best) < 0 && status == 0) {
            snprintf(err, errlen, "%s", nt_error(m->in[best].r));
            status = -1;
        }
    }
    progress(m, true);
    /* the stream ended (or broke): activities still open were never stopped, in start order. The
     * table is not needed any more: it becomes their list (no memory on top of the peak). */
    size_t k = 0;
    uint32_t *open = m->tab;
    for (size_t i = 0; i < m->tcap; i++)
        if (m->tab[i] && !slot_act(m, m->tab[i])->done_reported) open[k++] = m->tab[i];
    m->ended = true;
    if (k + m->nshadow > m->tcap) {
        uint32_t *v = realloc(m->tab, (k + m->nshadow) * sizeof *v);
        if (v) {
            mem_add(m, (k + m->nshadow - m->tcap) * sizeof *v);
            m->tab = open = v;
            m->tcap = k + m->nshadow;
        } else {
            m->nshadow = 0; /* then they are freed at am_close without a report */
        }
    }
    for (size_t i = 0; i < m->nshadow; i++) open[k++] = act_slot(m->shadow[i]);
    memset(open + k, 0, (m->tcap - k) * sizeof *open);
    /* parents before children. Slots are mostly taken in start order: in slot order the list is
     * usually sorted already, and checking that reads the activities in memory order */
    qsort(open, k, sizeof *open, cmp_u32);
    for (size_t i = 1; i < k; i++)
        if (by_start_slot(&open[i - 1], &open[i], m) > 0) {
            qsort_r(open, k, sizeof *open, by_start_slot, m);
            break;
        }
    /* close deepest-last so a parent's report sees its children final: close children first */
    for (size_t i = k; i-- > 0;) {
        slot_act(m, open[i])->stop = m->end;
        m->never_stopped++;
    }
    for (size_t i = k; i-- > 0;) {
        /* an activity freed with a tree closed earlier in this loop was closed already */
        am_activity *a = slot_act(m, open[i]);
        open[i] = 0;
        close_activity(m, a);
    }
    /* the trees held for child processes, now final (a child may have reopened one: it is
     * reported when its last activity closes, which the loop above did) */
    for (size_t i = 0; i < m->nkept; i++) {
        am_activity *root = m->kept[i];
        if (root->open_below != 0) continue;
        hand_tree(m, root);
    }
    m->nkept = 0;
    return status;
}

void am_close(am_model *m)
{
    if (!m) return;
    for (int i = 0; i < m->nin; i++) nt_close(m->in[i].r);
    free(m->in);
    free(m->xlinks);
    free(m->xsegs);
    free(m->clocks);
    /* what is left (an error path): the rare fields of the activities still held, then the chunks */
    for (uint32_t c = 0; c < m->nchunks; c++) {
        am_activity *v = (am_activity *)(m->chunks[c] + AM_CHUNK_HDR);
        for (size_t i = 0; i < AM_PER_CHUNK; i++)
            if (v[i].used) act_free(m, &v[i]);
        munmap(m->chunks[c], AM_CHUNK_BYTES);
    }
    free(m->chunks);
    for (size_t i = 0; i < m->cnames; i++) free(m->names[i]);
    free(m->names);
    free(m->tab);
    free(m->shadow);
    free(m->kept);
    free(m->sent);
    free(m);
}

int am_report_damage(const am_model *m, const char *cmd)
{
    int rc = 0;
    for (int i = 0; i < m->nin; i++) {
        const nt_reader *r = m->in[i].r;
        const nt_damage *d = nt_get_damage(r);
        const nt_counts *c = nt_get_counts(r);
        if (d) {
            rc = AM_EXIT_DAMAGED;
            if (d->kind == NT_DAMAGE_TORN)
                am_errorf(cmd, "%s: %s", m->in[i].path, d->text);
            else if (d->file_size)
                am_errorf(cmd, "damaged file: the results cover its first %llu of %llu bytes (%llu events); %s",
                          (unsigned long long)d->offset, (unsigned long long)d->file_size,
                          (unsigned long long)d->events_before, d->text);
            else
                am_errorf(cmd, "damaged input: the results cover its first %llu bytes (%llu events); %s",
                          (unsigned long long)d->offset, (unsigned long long)d->events_before, d->text);
        }
        if (c->events_lost)
            am_errorf(cmd, "%s: %llu events lost by the writer (full buffers or a failed write): the results miss them",
                      m->in[i].path, (unsigned long long)c->events_lost);
    }
    return rc;
}

int am_nfiles(const am_model *m) { return m->nin; }
const nt_trace_info *am_info(const am_model *m, int f) { return &m->in[f].info; }
const char *am_path(const am_model *m, int f) { return m->in[f].path; }
nt_reader *am_reader(const am_model *m, int f) { return m->in[f].r; }
int64_t am_origin_ns(const am_model *m) { return m->origin; }
int64_t am_end_ns(const am_model *m) { return m->end; }
uint64_t am_never_stopped(const am_model *m) { return m->never_stopped; }
uint64_t am_unmatched_stops(const am_model *m) { return m->unmatched_stops; }
const char *am_unmatched_first(const am_model *m) { return m->unmatched_first; }
size_t am_mem_peak(const am_model *m) { return m->mem_peak; }
