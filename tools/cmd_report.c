/* cmd_report.c: `acttrace report -o report.html FILE...`: one self-contained HTML file (inline CSS,
 * data and script; nothing fetched) that the page's own script (tools/report/report.js) turns into an
 * interactive report: a zoomable timeline of every activity per process and thread, search by name,
 * a sortable table of the activities, the waterfall of an activity's subtree across threads and
 * processes with its transfers and stacks, a duration histogram and a flame graph per name.
 *
 * Nothing is left out, so the data is compact and streamed: each activity is written as the model
 * hands it over (tree mode: a child process's roots hang under the activity that started it), as one
 * record of a flat JSON number array; strings (names, frames, odd paths) go to one table written at
 * the end, with the threads, the distinct stacks, the events inside activities, per-name statistics
 * and folded stacks. Memory beyond the model's: 4 bytes per activity (its Start's stack), the
 * distinct names, threads, stacks and folded stacks, and the events listed inside activities (at
 * most RP_MAX_MARKS). */
#include "actfold.h"
#include "cliopt.h"
#include "cmds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The page (tools/report/: its head with the CSS and the skeleton, and its script), linked in by
 * report_assets.c. */
extern const char at_report_page[], at_report_js[];

/* An activity record in the "report-acts" array: the flags, then these fields, then what the flags
 * announce, in this order. Times are ns; the start is relative to the previous record's start, the
 * other times of a record relative to its own start. */
enum {
    RP_OPEN = 1,     /* never stopped */
    RP_MOVED = 2,    /* + stop thread, end of its slice on the start thread */
    RP_VISITS = 4,   /* + n, n x (thread, first, last): the other threads it ran on */
    RP_XFERS = 8,    /* + n, n x (from thread or -1 when unseen, to thread, send, receive) */
    RP_XDROP = 16,   /* + transfers beyond the model's per-activity cap */
    RP_LINK = 32,    /* + the string "pid N //1/2": a root whose creator is not in the files */
    RP_SPLIT = 64,   /* + CPU and blocked time in us: its CPU samples' CpuNs, its waits' BlockedNs */
};
/* base fields after the flags: serial - previous serial, name, thread, start - previous start,
 * duration, serial - parent serial (0: a root), path, Start stack (0: none, else index + 1).
 * path: k * 2 + 1 for the parent's path + "/k", k * 2 for "//k", -(string + 1) otherwise. */

#define RP_MAX_MARKS 200000 /* events inside activities listed with their stacks (the rest counted) */
#define RP_MARK_TEXT 160

typedef struct rp_str {
    char **v;
    uint32_t n, cap;
    uint32_t *tab; /* open addressing: index + 1 */
    uint32_t tcap;
} rp_str;

typedef struct rp_thread {
    uint32_t pid;
    uint64_t tid;
} rp_thread;

typedef struct rp_stack {
    int file;
    uint32_t n;
    size_t ips;    /* into c->ips */
    size_t frames; /* into c->frames */
} rp_stack;

typedef struct rp_mark {
    uint64_t serial;
    int64_t time;
    uint32_t name, stack;
    char *text; /* its payload, "field=value ..." (NULL: none) */
} rp_mark;

typedef struct rp_name {
    const char *name; /* the model's interned copy */
    uint32_t str;
    am_dist d;
    uint64_t never;
    am_fold *fold;
} rp_name;

typedef struct rp_ctx {
    am_buf out;
    bool first;
    uint64_t acts, never, xdropped;
    uint64_t prev_serial;
    int64_t prev_start;
    rp_str strs;
    rp_thread *threads;
    uint32_t nthreads, cthreads;
    uint32_t *ttab, tcap; /* thread hash: index + 1 */
    rp_stack *stacks;
    uint32_t nstacks, cstacks;
    uint32_t *stab, scap; /* stack hash: index + 1 */
    uint64_t *ips;
    size_t nips, cips;
    uint32_t *frames;
    size_t nframes, cframes;
    uint32_t *start_stack; /* by serial - 1: its Start's stack + 1 */
    uint64_t cstart_stack;
    uint32_t (*split)[2];  /* by serial - 1: CPU and blocked us (RP_SPLIT); NULL until a sample or
                            * a wait comes */
    uint64_t csplit;
    rp_mark *marks;
    uint32_t nmarks, cmarks;
    uint64_t marks_cut;
    rp_name *names;
    uint32_t nnames, cnames;
    char **cmdline; /* per file, from its ProcessInfo */
    nt_symbolizer **sym;
    int nfiles;
    char key[65536];
} rp_ctx;

static void report_usage(FILE *f)
{
    fprintf(f, "usage: acttrace report -o report.html FILE...\n"
               "  Writes one self-contained HTML file (no network access needed) to open in a browser:\n"
               "  a timeline of every activity per process and thread (wheel or +/- to zoom, drag to pan),\n"
               "  search by name, a table of the activities sortable by duration, name or start, the\n"
               "  waterfall of an activity's subtree across threads and processes (click one) with its\n"
               "  transfers and stacks, a duration histogram and a flame graph per activity name.\n"
               "  -o, --output OUT  the HTML file (-o -: standard output)\n");
    at_cli_exit_codes(f);
}

/* ---------------- tables ---------------- */

static bool grow(void *pv, void *pcap, size_t elem, size_t need, bool cap32)
{
    size_t cap = cap32 ? *(uint32_t *)pcap : *(size_t *)pcap;
    if (need <= cap) return true;
    size_t nc = cap ? cap : 64;
    while (nc < need) nc *= 2;
    if (cap32 && nc > UINT32_MAX) return false;
    void *v = realloc(*(void **)pv, nc * elem);
    if (!v) return false;
    *(void **)pv = v;
    if (cap32) *(uint32_t *)pcap = (uint32_t)nc;
    else *(size_t *)pcap = nc;
    return true;
}

static uint64_t hash_bytes(const void *p, size_t n, uint64_t h)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

/* Open-addressing tables of index + 1; rehash with the caller's hash of an index. */
static bool tab_grow(uint32_t **tab, uint32_t *tcap, uint32_t n, uint64_t (*hash)(rp_ctx *, uint32_t), rp_ctx *c)
{
    if ((uint64_t)(n + 1) * 2 <= *tcap) return true;
    uint32_t nc = *tcap ? *tcap * 2 : 1024;
    uint32_t *t = calloc(nc, sizeof *t);
    if (!t) return false;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t h = hash(c, i) & (nc - 1);
        while (t[h]) h = (h + 1) & (nc - 1);
        t[h] = i + 1;
    }
    free(*tab);
    *tab = t;
    *tcap = nc;
    return true;
}

static uint64_t str_hash_at(rp_ctx *c, uint32_t i)
{
    return hash_bytes(c->strs.v[i], strlen(c->strs.v[i]), 1469598103934665603ull);
}

/* The string's index in the table (interned). UINT32_MAX when out of memory. */
static uint32_t rp_intern(rp_ctx *c, const char *s)
{
    rp_str *t = &c->strs;
    if (!tab_grow(&t->tab, &t->tcap, t->n, str_hash_at, c)) return UINT32_MAX;
    uint64_t h = hash_bytes(s, strlen(s), 1469598103934665603ull) & (t->tcap - 1);
    for (; t->tab[h]; h = (h + 1) & (t->tcap - 1))
        if (!strcmp(t->v[t->tab[h] - 1], s)) return t->tab[h] - 1;
    char *d = strdup(s);
    if (!d || !grow(&t->v, &t->cap, sizeof *t->v, t->n + 1, true)) {
        free(d);
        return UINT32_MAX;
    }
    t->v[t->n] = d;
    t->tab[h] = t->n + 1;
    return t->n++;
}

static uint64_t thread_hash(uint32_t pid, uint64_t tid)
{
    return (tid * 0x9e3779b97f4a7c15ull ^ pid) * 0xff51afd7ed558ccdull >> 17;
}

static uint64_t thread_hash_at(rp_ctx *c, uint32_t i)
{
    return thread_hash(c->threads[i].pid, c->threads[i].tid);
}

static uint32_t rp_thread_of(rp_ctx *c, uint32_t pid, uint64_t tid)
{
    if (!tab_grow(&c->ttab, &c->tcap, c->nthreads, thread_hash_at, c)) return 0;
    uint64_t h = thread_hash(pid, tid) & (c->tcap - 1);
    for (; c->ttab[h]; h = (h + 1) & (c->tcap - 1)) {
        rp_thread *t = &c->threads[c->ttab[h] - 1];
        if (t->pid == pid && t->tid == tid) return c->ttab[h] - 1;
    }
    if (!grow(&c->threads, &c->cthreads, sizeof *c->threads, c->nthreads + 1, true)) return 0;
    c->threads[c->nthreads] = (rp_thread){.pid = pid, .tid = tid};
    c->ttab[h] = c->nthreads + 1;
    return c->nthreads++;
}

static uint64_t stack_hash(int file, const uint64_t *ips, uint32_t n)
{
    return hash_bytes(ips, n * sizeof *ips, 1469598103934665603ull ^ (uint64_t)file);
}

static uint64_t stack_hash_at(rp_ctx *c, uint32_t i)
{
    return stack_hash(c->stacks[i].file, c->ips + c->stacks[i].ips, c->stacks[i].n);
}

/* The distinct stack of an event (index + 1, 0 when it has none), its frames named once. */
static uint32_t rp_stack_of(rp_ctx *c, const am_event *e)
{
    const nt_event *ev = e->ev;
    if (!ev->nframes || !tab_grow(&c->stab, &c->scap, c->nstacks, stack_hash_at, c)) return 0;
    uint64_t h = stack_hash(e->file, ev->frames, ev->nframes) & (c->scap - 1);
    for (; c->stab[h]; h = (h + 1) & (c->scap - 1)) {
        rp_stack *s = &c->stacks[c->stab[h] - 1];
        if (s->file == e->file && s->n == ev->nframes && !memcmp(c->ips + s->ips, ev->frames, s->n * sizeof *ev->frames))
            return c->stab[h];
    }
    if (!grow(&c->stacks, &c->cstacks, sizeof *c->stacks, c->nstacks + 1, true) ||
        !grow(&c->ips, &c->cips, sizeof *c->ips, c->nips + ev->nframes, false) ||
        !grow(&c->frames, &c->cframes, sizeof *c->frames, c->nframes + ev->nframes, false))
        return 0;
    rp_stack *s = &c->stacks[c->nstacks];
    *s = (rp_stack){.file = e->file, .n = ev->nframes, .ips = c->nips, .frames = c->nframes};
    char buf[512];
    for (uint32_t i = 0; i < ev->nframes; i++) {
        c->ips[c->nips++] = ev->frames[i];
        uint32_t k = rp_intern(c, nt_sym_format(c->sym[e->file], ev->frames[i], buf, sizeof buf));
        c->frames[c->nframes++] = k == UINT32_MAX ? 0 : k;
    }
    c->stab[h] = ++c->nstacks;
    return c->nstacks;
}

static rp_name *rp_name_of(rp_ctx *c, const char *name)
{
    for (uint32_t i = c->nnames; i-- > 0;) /* the model interns names: pointers compare */
        if (c->names[i].name == name || !strcmp(c->names[i].name, name)) return &c->names[i];
    uint32_t s = rp_intern(c, name);
    if (s == UINT32_MAX || !grow(&c->names, &c->cnames, sizeof *c->names, c->nnames + 1, true)) return NULL;
    rp_name *n = &c->names[c->nnames];
    memset(n, 0, sizeof *n);
    if (!(n->fold = am_fold_new())) return NULL;
    n->name = name;
    n->str = s;
    c->nnames++;
    return n;
}

/* ---------------- output helpers ---------------- */

static void put_i64(am_buf *b, int64_t v)
{
    if (v < 0) am_buf_chr(b, '-');
    am_buf_u64(b, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
}

static void put_num(rp_ctx *c, int64_t v)
{
    if (!c->first) am_buf_chr(&c->out, ',');
    c->first = false;
    put_i64(&c->out, v);
}

/* A JSON string, safe inside an HTML <script> ('<' escaped). */
static void put_str(am_buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    am_buf_chr(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            am_buf_chr(b, '\\');
            am_buf_chr(b, (char)*p);
        } else if (*p < 0x20 || *p == '<') {
            char u[6] = {'\\', 'u', '0', '0', hex[*p >> 4], hex[*p & 15]};
            am_buf_mem(b, u, 6);
        } else {
            am_buf_chr(b, (char)*p);
        }
    }
    am_buf_chr(b, '"');
}

/* ---------------- the model's callbacks ---------------- */

/* The path field of a record (see the enum above). */
static int64_t path_code(rp_ctx *c, const am_activity *a)
{
    char path[AM_PATH_MAX], pp[AM_PATH_MAX + 24];
    am_act_path(a, path, sizeof path);
    const char *tail = NULL;
    int rel = 0;
    if (a->parent && a->parent->pid == a->pid) {
        am_act_path(a->parent, pp, AM_PATH_MAX);
        size_t l = strlen(pp);
        if (!strncmp(path, pp, l) && path[l] == '/' && path[l + 1] != '/') tail = path + l + 1, rel = 1;
    }
    if (!tail && !strncmp(path, "//", 2)) tail = path + 2;
    if (tail && *tail >= '1' && *tail <= '9' && strlen(tail) <= 15) {
        char *end;
        unsigned long long k = strtoull(tail, &end, 10);
        if (!*end) return (int64_t)k * 2 + rel;
    }
    uint32_t s = rp_intern(c, path);
    return s == UINT32_MAX ? 0 : -(int64_t)s - 1;
}

typedef struct rp_visits {
    rp_ctx *c;
    const am_activity *a;
    uint64_t start_tid;
    int64_t end0;     /* end of the slice on the start thread */
    uint32_t n;
    uint32_t thread[64];
    int64_t from[64], to[64];
} rp_visits;

static void on_slice(void *vv, const am_activity *a, uint64_t tid, int64_t from, int64_t to)
{
    rp_visits *v = vv;
    (void)a;
    if (tid == v->start_tid) {
        v->end0 = to;
        return;
    }
    if (v->n == 64) return; /* the model caps visits far below this */
    v->thread[v->n] = rp_thread_of(v->c, v->a->pid, tid);
    v->from[v->n] = from;
    v->to[v->n++] = to;
}

static void rp_activity(void *vc, const am_activity *a)
{
    rp_ctx *c = vc;
    am_buf *b = &c->out;
    rp_name *n = rp_name_of(c, a->name);
    if (!n) return;
    if (a->stopped) am_dist_add(&n->d, a->stop - a->start);
    else n->never++;
    c->acts++;
    c->never += !a->stopped;

    rp_visits v = {.c = c, .a = a, .start_tid = am_start_tid(a), .end0 = a->stop};
    am_slices(a, on_slice, &v);
    char link[AM_LINK_MAX];
    bool has_link = am_act_link(a, link, sizeof link);
    uint32_t nx = am_nxfers(a);
    int flags = (a->stopped ? 0 : RP_OPEN) | (a->moved ? RP_MOVED : 0) | (v.n ? RP_VISITS : 0) |
                (nx ? RP_XFERS : 0) | (am_xfers_dropped(a) ? RP_XDROP : 0) | (has_link ? RP_LINK : 0);
    uint32_t thread = rp_thread_of(c, a->pid, v.start_tid);
    uint32_t stack = a->serial - 1 < c->cstart_stack ? c->start_stack[a->serial - 1] : 0;
    const uint32_t *split = a->serial - 1 < c->csplit ? c->split[a->serial - 1] : NULL;
    if (split && (split[0] || split[1]))
        flags |= RP_SPLIT;
    put_num(c, flags);
    put_num(c, (int64_t)(a->serial - c->prev_serial));
    put_num(c, n->str);
    put_num(c, thread);
    put_num(c, a->start - c->prev_start);
    put_num(c, a->stop - a->start);
    put_num(c, a->parent ? (int64_t)(a->serial - a->parent->serial) : 0);
    put_num(c, path_code(c, a));
    put_num(c, stack);
    c->prev_serial = a->serial;
    c->prev_start = a->start;
    if (a->moved) {
        put_num(c, rp_thread_of(c, a->pid, am_stop_tid(a)));
        put_num(c, v.end0 - a->start);
    }
    if (v.n) {
        put_num(c, v.n);
        for (uint32_t i = 0; i < v.n; i++) {
            put_num(c, v.thread[i]);
            put_num(c, v.from[i] - a->start);
            put_num(c, v.to[i] - a->start);
        }
    }
    if (nx) {
        put_num(c, nx);
        for (uint32_t i = 0; i < nx; i++) {
            const am_transfer *x = am_xfer_at(a, i);
            put_num(c, x->from_tid ? (int64_t)rp_thread_of(c, a->pid, x->from_tid) : -1);
            put_num(c, rp_thread_of(c, a->pid, x->to_tid));
            put_num(c, x->send - a->start);
            put_num(c, x->recv - a->start);
        }
    }
    if (am_xfers_dropped(a)) {
        put_num(c, am_xfers_dropped(a));
        c->xdropped += am_xfers_dropped(a);
    }
    if (has_link) {
        uint32_t s = rp_intern(c, link);
        put_num(c, s == UINT32_MAX ? 0 : s);
    }
    if (flags & RP_SPLIT) {
        put_num(c, split[0]);
        put_num(c, split[1]);
    }
    if ((c->acts & 7) == 0) am_buf_chr(b, '\n'); /* lines of a reasonable length */
}

static bool is_process_info(const nt_event *ev)
{
    return ev->meta->provider && !strcmp(ev->meta->provider, "Microsoft-DotNETCore-EventPipe") &&
           !strcmp(ev->meta->name, "ProcessInfo");
}

/* The payload as "field=value field=value", cut at RP_MARK_TEXT bytes. */
static void payload_text(const nt_event *ev, char *out, size_t n)
{
    size_t len = 0;
    uint32_t off = 0;
    out[0] = 0;
    char v[256];
    for (uint32_t i = 0; i < ev->meta->nfields && len + 1 < n; i++) {
        if (!nt_field_format(&ev->meta->fields[i], ev->payload, ev->payload_len, &off, v, sizeof v)) break;
        int k = snprintf(out + len, n - len, "%s%s=%s", len ? " " : "", ev->meta->fields[i].name, v);
        if (k < 0) break;
        len = (size_t)k >= n - len ? n - 1 : len + (size_t)k;
    }
}

/* An activity's CPU (which 0) or blocked time (1), in us, saturating */
static void split_add(rp_ctx *c, uint64_t serial, int which, uint64_t ns)
{
    uint64_t i = serial - 1;
    if (i >= c->csplit) {
        uint64_t nc = c->csplit ? c->csplit : 4096;
        while (nc <= i)
            nc *= 2;
        uint32_t(*v)[2] = realloc(c->split, nc * sizeof *v);
        if (!v)
            return;
        memset(v + c->csplit, 0, (nc - c->csplit) * sizeof *v);
        c->split = v;
        c->csplit = nc;
    }
    uint64_t us = c->split[i][which] + (ns + 500) / 1000;
    c->split[i][which] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static void rp_event(void *vc, const am_event *e)
{
    rp_ctx *c = vc;
    const nt_event *ev = e->ev;
    nt_sym_observe(c->sym[e->file], ev);
    if (nt_sym_is_symbol_event(ev)) return;
    if (is_process_info(ev)) {
        uint32_t off = 0;
        char cmd[1024];
        if (!c->cmdline[e->file] && ev->meta->nfields &&
            nt_field_format(&ev->meta->fields[0], ev->payload, ev->payload_len, &off, cmd, sizeof cmd)) {
            size_t l = strlen(cmd);
            bool quoted = l >= 2 && cmd[0] == '"' && cmd[l - 1] == '"'; /* the formatter quotes strings */
            c->cmdline[e->file] = quoted ? strndup(cmd + 1, l - 2) : strdup(cmd);
        }
        return;
    }
    uint64_t took = 0;
    if (nt_event_cpu_sample(ev, &took)) { /* samples weigh CPU time: `stacks --samples` */
        if (e->act)
            split_add(c, e->act->serial, 0, /* the runtime's: 1 ms each */
                      am_sample_cpu(e->act, ev->thread, e->time, took ? took : 1000000));
        return;
    }
    if (!e->act) return;
    bool resume;
    if (nt_event_wait(ev, &resume, NULL, 0, NULL, 0, &took) && resume)
        split_add(c, e->act->serial, 1, took);
    uint8_t op = ev->meta->opcode;
    uint32_t st = rp_stack_of(c, e);
    if (op == NT_OPCODE_START) {
        uint64_t i = e->act->serial - 1;
        if (i >= c->cstart_stack) {
            uint64_t nc = c->cstart_stack ? c->cstart_stack : 4096;
            while (nc <= i) nc *= 2;
            uint32_t *v = realloc(c->start_stack, nc * sizeof *v);
            if (!v) return;
            memset(v + c->cstart_stack, 0, (nc - c->cstart_stack) * sizeof *v);
            c->start_stack = v;
            c->cstart_stack = nc;
        }
        c->start_stack[i] = st;
    } else if (op != NT_OPCODE_SEND && op != NT_OPCODE_RECEIVE && (op != NT_OPCODE_STOP || st)) {
        /* an event inside the activity (a Stop only for its stack) */
        if (c->nmarks == RP_MAX_MARKS) {
            c->marks_cut++;
        } else if (grow(&c->marks, &c->cmarks, sizeof *c->marks, c->nmarks + 1, true)) {
            char text[RP_MARK_TEXT];
            payload_text(ev, text, sizeof text);
            uint32_t name = rp_intern(c, ev->meta->name);
            rp_mark *mk = &c->marks[c->nmarks];
            *mk = (rp_mark){.serial = e->act->serial, .time = e->time, .name = name == UINT32_MAX ? 0 : name,
                            .stack = st, .text = text[0] ? strdup(text) : NULL};
            c->nmarks++;
        }
    }
    if (!st) return;
    /* flame graphs: one stack per distinct name on the chain, from its outermost activity of that name */
    const char *seen[32];
    int ns = 0;
    for (const am_activity *p = e->act; p && ns < 32; p = p->parent) {
        bool dup = false;
        for (int i = 0; i < ns; i++) dup |= !strcmp(seen[i], p->name);
        if (dup) continue;
        seen[ns++] = p->name;
        rp_name *n = rp_name_of(c, p->name);
        if (n && am_fold_key(c->key, sizeof c->key, e->act, p->name, false, ev, c->sym[e->file]))
            am_fold_add(n->fold, c->key, 1);
    }
}

/* ---------------- the data written at the end ---------------- */

static void put_fold(void *vc, const char *key, uint64_t n)
{
    rp_ctx *c = vc;
    am_buf *b = &c->out;
    am_buf_str(b, c->first ? "[" : ",[");
    c->first = false;
    am_buf_u64(b, n);
    char part[4096];
    for (const char *p = key; *p;) {
        size_t l = strcspn(p, ";");
        snprintf(part, sizeof part, "%.*s", (int)l, p);
        uint32_t s = rp_intern(c, part);
        am_buf_chr(b, ',');
        am_buf_u64(b, s == UINT32_MAX ? 0 : s);
        p += l + (p[l] == ';');
    }
    am_buf_chr(b, ']');
}

static void write_data(rp_ctx *c, const am_model *m)
{
    am_buf *b = &c->out;
    am_buf_str(b, "<script id=\"report-data\" type=\"application/json\">{\"procs\":[");
    for (int i = 0; i < am_nfiles(m); i++) {
        am_buf_str(b, i ? ",{\"pid\":" : "{\"pid\":");
        put_i64(b, am_info(m, i)->pid);
        am_buf_str(b, ",\"file\":");
        put_str(b, am_path(m, i));
        am_buf_str(b, ",\"cmd\":");
        put_str(b, c->cmdline[i] ? c->cmdline[i] : "");
        am_buf_chr(b, '}');
    }
    am_buf_str(b, "],\n\"threads\":[");
    for (uint32_t i = 0; i < c->nthreads; i++) {
        am_buf_str(b, i ? ",[" : "[");
        am_buf_u64(b, c->threads[i].pid);
        am_buf_chr(b, ',');
        am_buf_u64(b, c->threads[i].tid);
        am_buf_chr(b, ']');
    }
    am_buf_str(b, "],\n\"names\":[");
    for (uint32_t i = 0; i < c->nnames; i++) {
        rp_name *n = &c->names[i];
        am_buf_str(b, i ? ",\n{\"s\":" : "\n{\"s\":");
        am_buf_u64(b, n->str);
        am_buf_str(b, ",\"count\":");
        am_buf_u64(b, n->d.n + n->never);
        am_buf_str(b, ",\"never\":");
        am_buf_u64(b, n->never);
        static const double pct[] = {50, 90, 99};
        static const char *pn[] = {",\"p50\":", ",\"p90\":", ",\"p99\":"};
        for (int k = 0; k < 3; k++) {
            am_buf_str(b, pn[k]);
            put_i64(b, am_dist_pct(&n->d, pct[k]));
        }
        am_buf_str(b, ",\"min\":");
        put_i64(b, n->d.n ? n->d.min : 0);
        am_buf_str(b, ",\"max\":");
        put_i64(b, n->d.n ? n->d.max : 0);
        am_buf_str(b, ",\"flame\":[");
        c->first = true;
        am_fold_each(n->fold, put_fold, c);
        am_buf_str(b, "]}");
    }
    am_buf_str(b, "],\n\"stacks\":[");
    for (uint32_t i = 0; i < c->nstacks; i++) {
        am_buf_str(b, i ? ",[" : "[");
        for (uint32_t k = 0; k < c->stacks[i].n; k++) {
            if (k) am_buf_chr(b, ',');
            am_buf_u64(b, c->frames[c->stacks[i].frames + k]);
        }
        am_buf_chr(b, ']');
    }
    /* marks: serial, time, name, stack + 1 (0: none); their payloads in marktext */
    am_buf_str(b, "],\n\"marks\":[");
    for (uint32_t i = 0; i < c->nmarks; i++) {
        rp_mark *k = &c->marks[i];
        if (i) am_buf_chr(b, ',');
        am_buf_u64(b, k->serial);
        am_buf_chr(b, ',');
        put_i64(b, k->time);
        am_buf_chr(b, ',');
        am_buf_u64(b, k->name);
        am_buf_chr(b, ',');
        am_buf_u64(b, k->stack);
        if ((i & 7) == 7) am_buf_chr(b, '\n');
    }
    am_buf_str(b, "],\n\"marktext\":[");
    for (uint32_t i = 0; i < c->nmarks; i++) {
        if (i) am_buf_chr(b, ',');
        put_str(b, c->marks[i].text ? c->marks[i].text : "");
    }
    /* last: the names of frames the folded stacks above interned */
    am_buf_str(b, "],\n\"strings\":[");
    for (uint32_t i = 0; i < c->strs.n; i++) {
        if (i) am_buf_str(b, (i & 15) ? "," : ",\n");
        put_str(b, c->strs.v[i]);
    }
    am_buf_str(b, "]}</script>\n");
}

static void write_meta(rp_ctx *c, const am_model *m, char *const *files, int nfiles)
{
    am_buf *b = &c->out;
    am_buf_str(b, "<script id=\"report-meta\" type=\"application/json\">{\"files\":[");
    for (int i = 0; i < nfiles; i++) {
        if (i) am_buf_chr(b, ',');
        put_str(b, files[i]);
    }
    uint64_t lost = 0;
    int damaged = 0;
    for (int i = 0; i < am_nfiles(m); i++) {
        lost += nt_get_counts(am_reader(m, i))->events_lost;
        damaged += nt_get_damage(am_reader(m, i)) != NULL;
    }
    am_buf_str(b, "],\"activities\":");
    am_buf_u64(b, c->acts);
    am_buf_str(b, ",\"never\":");
    am_buf_u64(b, c->never);
    am_buf_str(b, ",\"end\":");
    put_i64(b, am_end_ns(m));
    am_buf_str(b, ",\"lost\":");
    am_buf_u64(b, lost);
    am_buf_str(b, ",\"damaged\":");
    am_buf_u64(b, (uint64_t)damaged);
    am_buf_str(b, ",\"unmatched\":");
    am_buf_u64(b, am_unmatched_stops(m));
    am_buf_str(b, ",\"unmatched_first\":");
    put_str(b, am_unmatched_first(m));
    am_buf_str(b, ",\"xfers_dropped\":");
    am_buf_u64(b, c->xdropped);
    am_buf_str(b, ",\"marks_cut\":");
    am_buf_u64(b, c->marks_cut);
    am_buf_str(b, "}</script>\n");
}

static void rp_free(rp_ctx *c)
{
    free(c->split);
    if (c->sym)
        for (int i = 0; i < c->nfiles; i++) nt_sym_free(c->sym[i]);
    if (c->cmdline)
        for (int i = 0; i < c->nfiles; i++) free(c->cmdline[i]);
    free(c->sym);
    free(c->cmdline);
    for (uint32_t i = 0; i < c->nnames; i++) {
        am_dist_free(&c->names[i].d);
        am_fold_free(c->names[i].fold);
    }
    for (uint32_t i = 0; i < c->strs.n; i++) free(c->strs.v[i]);
    for (uint32_t i = 0; i < c->nmarks; i++) free(c->marks[i].text);
    free(c->strs.v);
    free(c->strs.tab);
    free(c->names);
    free(c->threads);
    free(c->ttab);
    free(c->stacks);
    free(c->stab);
    free(c->ips);
    free(c->frames);
    free(c->start_stack);
    free(c->marks);
    free(c);
}

int at_cmd_report(int argc, char **argv)
{
    static const struct option opts[] = {{"output", required_argument, NULL, 'o'}, {0}};
    const char *outpath = NULL;
    rp_ctx *c = calloc(1, sizeof *c);
    int nfiles = 0, status = AT_EXIT_ERROR;
    char **files = NULL;
    am_model *m = NULL;
    FILE *f = NULL;
    if (!c) return AT_EXIT_ERROR;
    at_cli cli;
    at_cli_init(&cli, "report", report_usage, "o:", opts, argc, argv);
    int o;
    while ((o = at_cli_next(&cli)) > 0)
        if (o == 'o') outpath = cli.arg;
    if (o == AT_CLI_EXIT) {
        status = cli.status;
        goto out;
    }
    files = at_cli_operands(&cli, &nfiles);
    if (!outpath) {
        status = at_cli_usage_error(&cli, "say where the report goes: -o report.html (or -o - for standard output)");
        goto out;
    }
    if (!nfiles) {
        status = at_cli_usage_error(&cli, "give at least one trace FILE");
        goto out;
    }
    if ((status = at_cli_check_output(&cli, outpath, files, nfiles))) goto out;
    if ((status = at_cli_check_inputs("report", files, nfiles))) goto out;
    status = AT_EXIT_ERROR;
    bool to_stdout = !strcmp(outpath, "-");
    c->nfiles = nfiles;
    if (!(c->sym = calloc((size_t)nfiles, sizeof *c->sym)) || !(c->cmdline = calloc((size_t)nfiles, sizeof *c->cmdline)))
        goto out;
    for (int i = 0; i < nfiles; i++) {
        nt_sym_options so = {.demangle = true, .no_offset = true}; /* the flame graph groups by function */
        if (!(c->sym[i] = nt_sym_new(&so))) goto out;
    }
    char err[600];
    /* tree mode: a child process's roots hang under the activity that started it, stopped or not */
    am_options mo = {.tree = true, .progress = true, .need_events = true};
    am_callbacks cb = {.activity = rp_activity, .event = rp_event, .ctx = c};
    if (!(m = am_open(files, nfiles, &mo, &cb, err, sizeof err))) {
        am_errorf("report", "%s", err);
        goto out;
    }
    if (!(f = to_stdout ? stdout : fopen(outpath, "w"))) {
        am_errorf("report", "%s: %m", outpath);
        goto out;
    }
    c->out.f = f;
    c->first = true;
    am_buf_str(&c->out, at_report_page);
    am_buf_str(&c->out, "<script id=\"report-acts\" type=\"application/json\">[\n");
    am_run(m, err, sizeof err); /* a damaged file: what was read before the damage is reported */
    am_buf_str(&c->out, "]</script>\n");
    write_data(c, m);
    write_meta(c, m, files, nfiles);
    am_buf_str(&c->out, "<script>\n");
    am_buf_str(&c->out, at_report_js);
    am_buf_str(&c->out, "</script>\n</body></html>\n");
    am_buf_flush(&c->out);
    {
        FILE *g = f;
        f = NULL;
        if (at_cli_close_output("report", g, to_stdout ? NULL : outpath))
            goto out;
    }
    if (!to_stdout)
        fprintf(stderr, "acttrace report: wrote %s\n", outpath);
    status = am_report_damage(m, "report");
out:
    if (f && f != stdout) fclose(f);
    am_close(m);
    rp_free(c);
    return status;
}
