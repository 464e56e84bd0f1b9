/* cmd_export.c: `acttrace export --format chrome|speedscope [-o OUT] FILE...`.
 * chrome: Chrome trace-event JSON (JSON Object Format) for Perfetto UI and chrome://tracing: every
 *   activity as a complete ("X") slice on each thread it ran on, with its Start and Stop payload as
 *   args; process_name / thread_name metadata; flow arrows ("s" -> "f", bound to the enclosing slice)
 *   for transfers between threads, for thread creation (the creator's slice -> the new thread's
 *   first slice) and for processes (the fork, spawn or exec point -> the child image's first root
 *   activity under that point's activity: one arrow per child image, however many roots it has).
 * speedscope: one evented profile per thread (the program's main thread first), activities as
 *   frames, every profile on the trace's time line (ms from the trace start).
 * Both keep one record per slice until the end: the slices of a thread must nest, and come in time
 * order, for either consumer; slices that overlap without nesting are clipped to the enclosing one
 * (marked "clipped" in chrome's args). */
#include "actmodel.h"
#include "cmd_otlp.h"
#include "cliopt.h"
#include "cmds.h"
#include "ntsym.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EX_VISIT = 1, EX_CLIPPED = 2 };
enum { FL_TRANSFER, FL_THREAD, FL_PROCESS };
static const char *const flow_names[] = {"transfer", "thread start", "process start"};

typedef struct ex_slice {
    uint64_t tid, serial;
    uint64_t parent;          /* the parent activity's serial (0: a root) */
    int64_t from, to;
    const char *name;         /* the model's interned name (valid until am_close) */
    uint32_t proc;            /* index into ex_ctx.procs */
    uint32_t flags;
    uint32_t seq, depth;
} ex_slice;

/* A flow between two slices, named by (activity serial, thread); the times are clamped into the
 * slices when written. */
typedef struct ex_flow {
    uint64_t serial_from, tid_from, serial_to, tid_to;
    int64_t ts_from, ts_to;
    int kind;
    size_t s_from, s_to;      /* resolved slice indexes */
} ex_flow;

/* Per activity serial: its fragments in the arena (offset + 1; 0: none). */
typedef struct ex_act {
    size_t head, start, stop;
} ex_act;

typedef struct ex_proc {
    uint32_t pid;
    int64_t first;            /* its earliest file's start: processes are listed in that order */
    char *name;               /* JSON-escaped text (no quotes), NULL until known */
    char *fallback;           /* the program a parent's ProcessExec / ProcessSpawn named */
    uint32_t order;
} ex_proc;

typedef struct ex_thread {
    uint32_t pid;
    int file;
    uint64_t tid, routine;    /* ThreadBegin's StartRoutine */
    size_t seq;
} ex_thread;

/* A point where a process (or an exec image) was started, for the process flows. */
typedef struct ex_start {
    uint32_t child;           /* ChildPid of a fork/spawn; the pid itself for an exec */
    bool exec;
    uint32_t pid;
    uint64_t tid, serial;
    int64_t ts;
} ex_start;

/* A child image linked to its parent's activity by a process flow (fl[flow]); an image with many
 * roots under that activity gets the one arrow, to the root that starts first. */
typedef struct ex_plink {
    uint32_t child;
    uint64_t parent_serial;
    size_t flow;
} ex_plink;

typedef struct ex_ctx {
    FILE *out;
    bool speedscope;
    const char *name;         /* --name: activities named so and those below them, alone */
    uint64_t named;           /* activities --name kept */
    am_model *m;
    ex_slice *sl;
    size_t nsl, csl;
    ex_flow *fl;
    size_t nfl, cfl;
    ex_act *acts;
    size_t cacts;
    char *arena;
    size_t narena, carena;
    ex_proc *procs;
    uint32_t nprocs;
    uint32_t *file_proc;      /* per input file: its process's index */
    uint64_t *tid_key;        /* thread -> its process's index (open addressing; 0: empty): an
                               * activity's visit to a forked child is on the child's thread */
    uint32_t *tid_proc;
    size_t ntid, ctid;
    uint64_t last_tid;
    int last_file;
    ex_thread *threads;
    size_t nthreads, cthreads;
    ex_start *starts;
    size_t nstarts, cstarts;
    ex_plink *plinks;         /* the process flows made: one per (child pid, parent activity) */
    size_t nplinks, cplinks;
    nt_symbolizer **syms;     /* per file */
    char *buf;                /* a field's JSON */
    size_t nbuf;
    bool oom;
} ex_ctx;

static void export_usage(FILE *f)
{
    fprintf(f, "usage: acttrace export --format chrome|speedscope|otlp [-o OUT] [--name NAME] FILE...\n"
               "  chrome      Chrome trace-event JSON for Perfetto UI (ui.perfetto.dev) or chrome://tracing:\n"
               "              activities as slices on their threads with their payload as args, process and\n"
               "              thread names, flow arrows for transfers, thread starts and child processes\n"
               "  speedscope  speedscope JSON (www.speedscope.app): a profile per thread (the main thread\n"
               "              first), activities as frames, times in ms from the trace start\n"
               "  otlp        OpenTelemetry OTLP/JSON (ExportTraceServiceRequest): a span per activity,\n"
               "              one trace per tree (across processes), spans grouped per process\n"
               "  --endpoint http://HOST[:PORT][/PATH]  with otlp: send the spans to an OTLP/HTTP receiver\n"
               "              (an OpenTelemetry Collector, Jaeger, Tempo) as protobuf, to /v1/traces and\n"
               "              port 4318 unless given, instead of writing them (also to OUT with -o)\n"
               "  -o, --output OUT  output file (default, and with -o -: standard output)\n"
               "  --name NAME       only activities named NAME and those below them; none is said on\n"
               "                    stderr (exit 1)\n");
    at_cli_exit_codes(f);
}

/* ---------------- growing arrays ---------------- */

static bool grow(ex_ctx *c, void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap) return true;
    size_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *q = realloc(*p, n * size);
    if (!q) {
        c->oom = true;
        return false;
    }
    memset((char *)q + *cap * size, 0, (n - *cap) * size);
    *p = q;
    *cap = n;
    return true;
}

static ex_act *act_of(ex_ctx *c, uint64_t serial)
{
    if (!grow(c, (void **)&c->acts, &c->cacts, serial + 1, sizeof *c->acts)) return NULL;
    return &c->acts[serial];
}

/* ---------------- the arena of JSON fragments ---------------- */

static size_t arena_mark(ex_ctx *c) { return c->narena; }

static void arena_put(ex_ctx *c, const char *s, size_t n)
{
    if (!grow(c, (void **)&c->arena, &c->carena, c->narena + n + 1, 1)) return;
    memcpy(c->arena + c->narena, s, n);
    c->narena += n;
    c->arena[c->narena] = 0;
}

static void arena_str(ex_ctx *c, const char *s) { arena_put(c, s, strlen(s)); }

/* s as the text of a JSON string (no quotes). '<' stays as it is (Perfetto's older tokenizers take
 * no \u escapes), control characters are escaped. */
static void arena_json_text(ex_ctx *c, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char e[8];
        if (*p == '"' || *p == '\\') {
            e[0] = '\\';
            e[1] = (char)*p;
            arena_put(c, e, 2);
        } else if (*p < 0x20) {
            snprintf(e, sizeof e, "\\u%04x", *p);
            arena_put(c, e, 6);
        } else {
            arena_put(c, (const char *)p, 1);
        }
    }
}

/* Ends the fragment started at mark: its offset + 1, or 0 when it is empty. */
static size_t arena_end(ex_ctx *c, size_t mark)
{
    if (c->oom || c->narena == mark) return 0;
    arena_put(c, "", 0);
    c->narena++; /* keep its NUL */
    return mark + 1;
}

static const char *frag(const ex_ctx *c, size_t off) { return off ? c->arena + off - 1 : ""; }

static void json_text(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
}

/* ns from the origin as microseconds with ns precision, without a double's rounding. */
static void put_us(FILE *f, int64_t ns)
{
    uint64_t v = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    fprintf(f, "%s%llu.%03u", ns < 0 ? "-" : "", (unsigned long long)(v / 1000), (unsigned)(v % 1000));
}

/* ns as milliseconds with ns precision. */
static void put_ms(FILE *f, int64_t ns)
{
    uint64_t v = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    fprintf(f, "%s%llu.%06u", ns < 0 ? "-" : "", (unsigned long long)(v / 1000000), (unsigned)(v % 1000000));
}

/* ---------------- processes and threads ---------------- */

static ex_proc *proc_of(ex_ctx *c, uint32_t pid)
{
    for (uint32_t i = 0; i < c->nprocs; i++)
        if (c->procs[i].pid == pid) return &c->procs[i];
    return NULL;
}

/* name's text appended to p's name (an exec chain: one pid, an image per file). */
static void proc_name_add(ex_proc *p, const char *text)
{
    if (!text[0]) return;
    if (p->name) {
        /* a rotated file of the same image repeats its last name */
        const char *tail = p->name;
        char *arrow = strstr(p->name, " \xe2\x86\x92 ");
        while (arrow) {
            tail = arrow + 5;
            arrow = strstr(tail, " \xe2\x86\x92 ");
        }
        if (!strcmp(tail, text) || strlen(p->name) > 1000) return;
        char *n = malloc(strlen(p->name) + strlen(text) + 6);
        if (!n) return;
        sprintf(n, "%s \xe2\x86\x92 %s", p->name, text);
        free(p->name);
        p->name = n;
    } else {
        p->name = strdup(text);
    }
}

/* The program of a command line (JSON-escaped text): its first word's last path element, with the
 * rest of the line, cut at 200 bytes between two characters (not inside an escape or a UTF-8
 * sequence). */
static char *program_of(const char *cmdline)
{
    const char *sp = strchr(cmdline, ' ');
    size_t wl = sp ? (size_t)(sp - cmdline) : strlen(cmdline);
    const char *base = cmdline;
    for (size_t i = 0; i < wl; i++)
        if (cmdline[i] == '/') base = cmdline + i + 1;
    if (base == cmdline + wl) base = cmdline; /* "/" alone, or a word ending in '/' */
    char *s = strdup(base);
    if (!s || strlen(s) <= 200) return s;
    size_t cut = 0;
    for (size_t i = 0; s[i];) {
        size_t len = 1;
        if (s[i] == '\\') len = s[i + 1] == 'u' ? 6 : 2;
        else if ((unsigned char)s[i] >= 0xF0) len = 4;
        else if ((unsigned char)s[i] >= 0xE0) len = 3;
        else if ((unsigned char)s[i] >= 0xC0) len = 2;
        if (i + len > 197) break;
        i += len;
        cut = i;
    }
    memcpy(s + cut, "...", 4);
    return s;
}

static int by_pid_tid(const void *x, const void *y)
{
    const ex_thread *a = x, *b = y;
    if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
    if (a->tid != b->tid) return a->tid < b->tid ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq; /* a reused tid: its last start names it */
}

/* The name of thread (pid, tid): "main", or the function it was started with (threads sorted by
 * by_pid_tid), or "thread". */
static void thread_name(ex_ctx *c, uint32_t pid, uint64_t tid, char *out, size_t n)
{
    snprintf(out, n, "%s", tid == pid ? "main" : "thread");
    if (tid == pid) return;
    ex_thread k = {.pid = pid, .tid = tid, .seq = SIZE_MAX};
    size_t lo = 0, hi = c->nthreads; /* the last entry not after k */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (by_pid_tid(&c->threads[mid], &k) <= 0) lo = mid + 1;
        else hi = mid;
    }
    if (lo) {
        ex_thread *t = &c->threads[lo - 1];
        if (t->pid != pid || t->tid != tid || !t->routine) return;
        char b[1024];
        const char *s = nt_sym_format_exact(c->syms[t->file], t->routine, b, sizeof b);
        const char *fn = strchr(s, '!');
        fn = fn ? fn + 1 : s;
        if (!strncmp(fn, "0x", 2) || strstr(fn, "+0x")) return; /* not named by the file */
        snprintf(out, n, "%s", fn);
    }
}

static size_t tid_slot(const ex_ctx *c, uint64_t tid)
{
    size_t mask = c->ctid - 1, i = (size_t)((tid * 0x9E3779B97F4A7C15ull) >> 20) & mask;
    while (c->tid_key[i] && c->tid_key[i] != tid) i = (i + 1) & mask;
    return i;
}

static void tid_put(ex_ctx *c, uint64_t tid, uint32_t proc)
{
    if (!tid) return;
    if ((c->ntid + 1) * 2 > c->ctid) {
        size_t oc = c->ctid, nc = oc ? oc * 2 : 256;
        uint64_t *ok = c->tid_key, *nk = calloc(nc, sizeof *nk);
        uint32_t *ov = c->tid_proc, *nv = calloc(nc, sizeof *nv);
        if (!nk || !nv) {
            free(nk);
            free(nv);
            c->oom = true;
            return;
        }
        c->tid_key = nk;
        c->tid_proc = nv;
        c->ctid = nc;
        for (size_t i = 0; i < oc; i++)
            if (ok[i]) {
                size_t j = tid_slot(c, ok[i]);
                nk[j] = ok[i];
                nv[j] = ov[i];
            }
        free(ok);
        free(ov);
    }
    size_t i = tid_slot(c, tid);
    if (!c->tid_key[i]) c->ntid++;
    c->tid_key[i] = tid;
    c->tid_proc[i] = proc;
}

/* The process of thread tid (the last one it was seen in), else dflt. */
static uint32_t tid_proc(const ex_ctx *c, uint64_t tid, uint32_t dflt)
{
    if (!c->ctid) return dflt;
    size_t i = tid_slot(c, tid);
    return c->tid_key[i] ? c->tid_proc[i] : dflt;
}

/* ---------------- what the events say ---------------- */

static uint64_t field_u64(const nt_event *ev, uint32_t i)
{
    const nt_metadata *md = ev->meta;
    uint32_t off = 0;
    for (uint32_t k = 0; k < md->nfields && k <= i; k++) {
        uint32_t t = md->fields[k].type;
        uint32_t sz = t == NT_TYPE_UINT64 || t == NT_TYPE_INT64 ? 8 : t == NT_TYPE_UINT32 || t == NT_TYPE_INT32 ? 4 : 0;
        if (!sz || off + sz > ev->payload_len) return 0;
        if (k == i) {
            if (sz == 8) {
                uint64_t v;
                memcpy(&v, ev->payload + off, 8);
                return v;
            }
            uint32_t v;
            memcpy(&v, ev->payload + off, 4);
            return v;
        }
        off += sz;
    }
    return 0;
}

/* A string field (the first one after `skip` fields of 4 or 8 bytes) as JSON-escaped text, into
 * c->buf without its quotes; false when there is none. */
static bool field_text(ex_ctx *c, const nt_event *ev, uint32_t i)
{
    const nt_metadata *md = ev->meta;
    uint32_t off = 0;
    if (i >= md->nfields || md->fields[i].type != NT_TYPE_STRING) return false;
    for (uint32_t k = 0; k < i; k++) {
        uint32_t t = md->fields[k].type;
        if (t == NT_TYPE_INT32 || t == NT_TYPE_UINT32) off += 4;
        else if (t == NT_TYPE_INT64 || t == NT_TYPE_UINT64) off += 8;
        else return false;
    }
    if (nt_field_json(&md->fields[i], ev->payload, ev->payload_len, &off, c->buf, c->nbuf) != 1) return false;
    size_t l = strlen(c->buf);
    if (l < 2) return false;
    memmove(c->buf, c->buf + 1, l - 2);
    c->buf[l - 2] = 0;
    return true;
}

/* Is item (`"name":value`, or `"name":` alone when prefix) one of fragment's, between its commas? */
static bool frag_has(const char *fragment, const char *item, bool prefix)
{
    size_t l = strlen(item);
    for (const char *p = strstr(fragment, item); p; p = strstr(p + 1, item))
        if ((p == fragment || p[-1] == ',') && (prefix || p[l] == ',' || p[l] == 0)) return true;
    return false;
}

/* The payload of a Start or Stop as a fragment `"name":value,...`. A Stop's field that the Start
 * already gave with the same value (the <Name>Id) is left out; one the Start gave with another value
 * is named "stop.NAME". */
static size_t payload_fragment(ex_ctx *c, const nt_event *ev, size_t start)
{
    const nt_metadata *md = ev->meta;
    size_t mark = arena_mark(c);
    uint32_t off = 0;
    for (uint32_t i = 0; i < md->nfields && !c->oom; i++) {
        int rc = nt_field_json(&md->fields[i], ev->payload, ev->payload_len, &off, c->buf, c->nbuf);
        if (rc < 0) break; /* a short payload: what follows cannot be placed */
        const char *value = rc ? c->buf : "\"(too long for the export)\"";
        /* `,"name":value` at the arena's end */
        size_t item = arena_mark(c);
        if (item > mark) arena_str(c, ",");
        size_t key = c->narena;
        arena_str(c, "\"");
        arena_json_text(c, md->fields[i].name ? md->fields[i].name : "?");
        arena_str(c, "\":");
        size_t key_end = c->narena;
        arena_str(c, value);
        if (c->oom || !start) continue;
        char *kv = strdup(c->arena + key);
        if (!kv) {
            c->oom = true;
            break;
        }
        bool same = frag_has(frag(c, start), kv, false); /* (the arena may have moved) */
        kv[key_end - key] = 0;
        bool named = !same && frag_has(frag(c, start), kv, true);
        c->narena = same ? item : key;
        c->arena[c->narena] = 0;
        if (!same) {
            arena_str(c, named ? "\"stop." : "\"");
            arena_str(c, kv + 1);
            arena_str(c, value);
        }
        free(kv);
    }
    return arena_end(c, mark);
}

static void on_event(void *vc, const am_event *e)
{
    ex_ctx *c = vc;
    const nt_event *ev = e->ev;
    const nt_metadata *md = ev->meta;
    if (c->syms[e->file]) nt_sym_observe(c->syms[e->file], ev);
    if (ev->thread != c->last_tid || e->file != c->last_file) {
        tid_put(c, ev->thread, c->file_proc[e->file]);
        c->last_tid = ev->thread;
        c->last_file = e->file;
    }
    if (md->opcode == NT_OPCODE_START && e->act && !c->speedscope && ev->payload_len) {
        ex_act *x = act_of(c, e->act->serial);
        if (x && !x->start) x->start = payload_fragment(c, ev, 0);
        return;
    }
    if (md->opcode == NT_OPCODE_STOP && e->stopped && !c->speedscope && ev->payload_len) {
        ex_act *x = act_of(c, e->stopped->serial);
        if (x && !x->stop) x->stop = payload_fragment(c, ev, x->start);
        return;
    }
    if (!md->provider || md->opcode != NT_OPCODE_INFO) return;
    if (!strcmp(md->provider, "Microsoft-DotNETCore-EventPipe")) {
        if (strcmp(md->name, "ProcessInfo") || !field_text(c, ev, 0)) return;
        ex_proc *p = &c->procs[c->file_proc[e->file]];
        char *prog = program_of(c->buf);
        if (prog) proc_name_add(p, prog);
        free(prog);
        return;
    }
    if (strcmp(md->provider, "acttrace-shim")) return;
    if (!strcmp(md->name, "ThreadBegin")) {
        uint64_t routine = field_u64(ev, 1);
        if (routine && grow(c, (void **)&c->threads, &c->cthreads, c->nthreads + 1, sizeof *c->threads)) {
            c->threads[c->nthreads] = (ex_thread){.pid = e->pid, .file = e->file, .tid = ev->thread,
                                                  .routine = routine, .seq = c->nthreads};
            c->nthreads++;
        }
        uint64_t parent = field_u64(ev, 0);
        if (!e->act || !parent || parent == ev->thread || e->act->done_reported) return;
        if (!grow(c, (void **)&c->fl, &c->cfl, c->nfl + 1, sizeof *c->fl)) return;
        c->fl[c->nfl++] = (ex_flow){.serial_from = e->act->serial, .tid_from = parent,
                                    .serial_to = e->act->serial, .tid_to = ev->thread,
                                    .ts_from = e->time, .ts_to = e->time, .kind = FL_THREAD};
        return;
    }
    bool fork = !strcmp(md->name, "ProcessFork"), spawn = !strcmp(md->name, "ProcessSpawn");
    bool exec = !strcmp(md->name, "ProcessExec");
    if (!fork && !spawn && !exec) return;
    uint32_t child = exec ? e->pid : (uint32_t)field_u64(ev, 0);
    if (!child) return;
    if ((exec && field_text(c, ev, 0)) || (spawn && field_text(c, ev, 1))) {
        /* the program the child runs: its name when its own file gives none */
        ex_proc *p = proc_of(c, child);
        char *prog = program_of(c->buf);
        if (p && prog && !p->fallback) p->fallback = prog;
        else free(prog);
    }
    if (!e->act || !grow(c, (void **)&c->starts, &c->cstarts, c->nstarts + 1, sizeof *c->starts)) return;
    c->starts[c->nstarts++] = (ex_start){.child = child, .exec = exec, .pid = e->pid, .tid = ev->thread,
                                         .serial = e->act->serial, .ts = e->time};
}

/* ---------------- activities ---------------- */

static void on_slice(void *vc, const am_activity *a, uint64_t tid, int64_t from, int64_t to)
{
    ex_ctx *c = vc;
    if (!grow(c, (void **)&c->sl, &c->csl, c->nsl + 1, sizeof *c->sl)) return;
    c->sl[c->nsl] = (ex_slice){.tid = tid, .serial = a->serial, .parent = a->parent ? a->parent->serial : 0,
                               .depth = a->depth, .from = from, .to = to, .name = a->name,
                               .proc = tid_proc(c, tid, c->file_proc[a->file]), .flags = tid != am_start_tid(a) ? EX_VISIT : 0,
                               .seq = (uint32_t)c->nsl};
    c->nsl++;
}

static void add_flow(ex_ctx *c, ex_flow f)
{
    if (grow(c, (void **)&c->fl, &c->cfl, c->nfl + 1, sizeof *c->fl)) c->fl[c->nfl++] = f;
}

/* --name: a is so named, or below one so named (across processes too) */
static bool kept_by_name(const ex_ctx *c, const am_activity *a)
{
    for (const am_activity *p = a; p; p = p->parent)
        if (!strcmp(p->name, c->name)) return true;
    return false;
}

static void on_activity(void *vc, const am_activity *a)
{
    ex_ctx *c = vc;
    if (c->name) {
        if (!kept_by_name(c, a)) return; /* no slice: no flow binds to it either */
        c->named++;
    }
    am_slices(a, on_slice, c);
    for (uint32_t i = 0; i < am_nxfers(a); i++) {
        const am_transfer *x = am_xfer_at(a, i);
        if (!x->from_tid || x->from_tid == x->to_tid) continue;
        add_flow(c, (ex_flow){.serial_from = a->serial, .tid_from = x->from_tid, .serial_to = a->serial,
                              .tid_to = x->to_tid, .ts_from = x->send, .ts_to = x->recv, .kind = FL_TRANSFER});
    }
    /* an activity of a child process (or of an exec'd image) under one of its parent's: from the
     * point that started the child, else from the parent's start thread */
    const am_activity *p = a->parent;
    if (p && p->file != a->file) {
        const ex_start *s = NULL;
        for (size_t i = c->nstarts; i-- > 0 && !s;)
            if (c->starts[i].child == a->pid && c->starts[i].serial == p->serial &&
                c->starts[i].exec == (p->pid == a->pid) && c->starts[i].ts <= a->start)
                s = &c->starts[i];
        if (s || p->pid != a->pid) { /* one pid without an exec: a rotated file of the same image */
            ex_plink *l = NULL;
            for (size_t i = 0; i < c->nplinks && !l; i++)
                if (c->plinks[i].child == a->pid && c->plinks[i].parent_serial == p->serial)
                    l = &c->plinks[i];
            if (l) { /* the image's arrow goes to its first root */
                ex_flow *f = &c->fl[l->flow];
                if (a->start < f->ts_to) {
                    f->serial_to = a->serial;
                    f->tid_to = am_start_tid(a);
                    f->ts_to = a->start;
                    if (!s) f->ts_from = a->start;
                }
            } else if (grow(c, (void **)&c->plinks, &c->cplinks, c->nplinks + 1, sizeof *c->plinks)) {
                c->plinks[c->nplinks++] = (ex_plink){.child = a->pid, .parent_serial = p->serial, .flow = c->nfl};
                add_flow(c, (ex_flow){.serial_from = p->serial, .tid_from = s ? s->tid : am_start_tid(p),
                                      .serial_to = a->serial, .tid_to = am_start_tid(a),
                                      .ts_from = s ? s->ts : a->start, .ts_to = a->start, .kind = FL_PROCESS});
            }
        }
    }
    if (c->speedscope) return;
    ex_act *x = act_of(c, a->serial);
    if (!x) return;
    char path[AM_PATH_MAX], link[AM_LINK_MAX];
    am_act_path(a, path, sizeof path);
    size_t mark = arena_mark(c);
    arena_str(c, "\"path\":\"");
    arena_json_text(c, path);
    arena_str(c, a->stopped ? "\",\"stopped\":true" : "\",\"stopped\":false");
    if (am_act_link(a, link, sizeof link)) {
        arena_str(c, ",\"from\":\"");
        arena_json_text(c, link);
        arena_str(c, "\"");
    }
    x->head = arena_end(c, mark);
}

/* ---------------- ordering ---------------- */

static const ex_ctx *sort_ctx;

static int by_thread_time(const void *x, const void *y)
{
    const ex_slice *a = x, *b = y;
    uint32_t pa = sort_ctx->procs[a->proc].order, pb = sort_ctx->procs[b->proc].order;
    if (pa != pb) return pa < pb ? -1 : 1;
    if (a->tid != b->tid) return a->tid < b->tid ? -1 : 1;
    if (a->from != b->from) return a->from < b->from ? -1 : 1;
    if (a->to != b->to) return a->to > b->to ? -1 : 1; /* the longer one encloses */
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static int by_first(const void *x, const void *y)
{
    const ex_proc *a = x, *b = y;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    return a->pid < b->pid ? -1 : a->pid > b->pid;
}

/* Slices per thread in time order, the enclosing one first; one that outlives the slice it starts
 * in is clipped to it: timelines and flame charts draw a thread's slices as one stack. */
static void nest(ex_ctx *c)
{
    sort_ctx = c;
    if (c->nsl) qsort(c->sl, c->nsl, sizeof *c->sl, by_thread_time);
    int64_t *stack = NULL;
    size_t cap = 0, depth = 0;
    for (size_t i = 0; i < c->nsl; i++) {
        ex_slice *s = &c->sl[i];
        if (i == 0 || s->tid != s[-1].tid || s->proc != s[-1].proc) depth = 0;
        while (depth > 0 && stack[depth - 1] <= s->from) depth--;
        if (depth > 0 && s->to > stack[depth - 1]) {
            s->to = stack[depth - 1];
            s->flags |= EX_CLIPPED;
        }
        if (!grow(c, (void **)&stack, &cap, depth + 1, sizeof *stack)) break;
        stack[depth++] = s->to;
    }
    free(stack);
}

/* The slice of activity serial on thread tid (slices sorted by nest()), or SIZE_MAX. */
typedef struct ex_key {
    uint64_t serial, tid;
    size_t idx;
} ex_key;

static int by_key(const void *x, const void *y)
{
    const ex_key *a = x, *b = y;
    if (a->serial != b->serial) return a->serial < b->serial ? -1 : 1;
    return a->tid < b->tid ? -1 : a->tid > b->tid;
}

static size_t find_slice(const ex_key *keys, size_t n, uint64_t serial, uint64_t tid)
{
    ex_key k = {serial, tid, 0};
    const ex_key *f = bsearch(&k, keys, n, sizeof *keys, by_key);
    return f ? f->idx : SIZE_MAX;
}

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The slices' keys (activity serial, thread) in order, for find_slice; NULL when out of memory. */
static ex_key *slice_keys(ex_ctx *c)
{
    ex_key *keys = malloc((c->nsl ? c->nsl : 1) * sizeof *keys);
    if (!keys) {
        c->oom = true;
        return NULL;
    }
    for (size_t i = 0; i < c->nsl; i++) keys[i] = (ex_key){c->sl[i].serial, c->sl[i].tid, i};
    qsort(keys, c->nsl, sizeof *keys, by_key);
    return keys;
}

static int by_depth_desc(const void *x, const void *y)
{
    const ex_slice *a = *(ex_slice *const *)x, *b = *(ex_slice *const *)y;
    if (a->depth != b->depth) return a->depth > b->depth ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* An activity's slice on a thread it visited spans its own events there; it is widened over its
 * children's slices on that thread (deepest first): the thread worked for it while they ran, and
 * they nest in it as in the tree. (speedscope's Chrome importer mismatches a child and its parent
 * that end at one time.) */
static void cover_children(ex_ctx *c)
{
    ex_key *keys = slice_keys(c);
    ex_slice **order = malloc((c->nsl ? c->nsl : 1) * sizeof *order);
    if (!keys || !order) {
        c->oom = true;
        free(keys);
        free(order);
        return;
    }
    for (size_t i = 0; i < c->nsl; i++) order[i] = &c->sl[i];
    qsort(order, c->nsl, sizeof *order, by_depth_desc);
    for (size_t i = 0; i < c->nsl; i++) {
        const ex_slice *s = order[i];
        size_t k = s->parent ? find_slice(keys, c->nsl, s->parent, s->tid) : SIZE_MAX;
        if (k == SIZE_MAX || !(c->sl[k].flags & EX_VISIT)) continue;
        if (s->from < c->sl[k].from) c->sl[k].from = s->from;
        /* after the child's Stop the thread is back in the parent: it ends after the child (one ns,
         * the least that is known), and readers need not order two ends at one time */
        if (s->to >= c->sl[k].to) c->sl[k].to = s->to + 1;
    }
    free(keys);
    free(order);
}

/* Binds every flow to its two slices, drops those without both, and numbers them in time order. */
static void bind_flows(ex_ctx *c)
{
    ex_key *keys = slice_keys(c);
    if (!keys) {
        c->nfl = 0;
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < c->nfl; i++) {
        ex_flow f = c->fl[i];
        f.s_from = find_slice(keys, c->nsl, f.serial_from, f.tid_from);
        f.s_to = find_slice(keys, c->nsl, f.serial_to, f.tid_to);
        if (f.s_from == SIZE_MAX || f.s_to == SIZE_MAX) continue;
        const ex_slice *a = &c->sl[f.s_from], *b = &c->sl[f.s_to];
        f.ts_from = clamp(f.ts_from, a->from, a->to);
        f.ts_to = clamp(f.ts_to, b->from, b->to);
        if (f.ts_to < f.ts_from) continue; /* a clipped source after its target: no arrow backwards */
        c->fl[k++] = f;
    }
    c->nfl = k;
    free(keys);
}

/* The chrome events after the metadata: slices and flow ends in one time order. At one time a slice
 * comes before the flow ends bound to it (a longer slice before a shorter one), a flow's start
 * before its end. */
typedef struct ex_item {
    int64_t ts, dur;
    int rank;                 /* 0 slice, 1 flow start, 2 flow end */
    size_t idx;
} ex_item;

static int by_item(const void *x, const void *y)
{
    const ex_item *a = x, *b = y;
    if (a->ts != b->ts) return a->ts < b->ts ? -1 : 1;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    if (a->dur != b->dur) return a->dur > b->dur ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static int by_flow_time(const void *x, const void *y)
{
    const ex_flow *a = x, *b = y;
    if (a->ts_from != b->ts_from) return a->ts_from < b->ts_from ? -1 : 1;
    if (a->ts_to != b->ts_to) return a->ts_to < b->ts_to ? -1 : 1;
    if (a->s_from != b->s_from) return a->s_from < b->s_from ? -1 : 1;
    return a->s_to < b->s_to ? -1 : a->s_to > b->s_to;
}

/* ---------------- writing ---------------- */

static const char *proc_name(const ex_proc *p, char *b, size_t n)
{
    if (p->name) return p->name;
    if (p->fallback) return p->fallback;
    snprintf(b, n, "pid %u", p->pid);
    return b;
}

static void chrome_meta(ex_ctx *c, const char *name, uint32_t pid, uint64_t tid, const char *key, bool str,
                        const char *value, bool *first)
{
    FILE *f = c->out;
    fprintf(f, "%s{\"ph\":\"M\",\"ts\":0,\"pid\":%u,\"tid\":%llu,\"cat\":\"__metadata\",\"name\":\"%s\",\"args\":{\"%s\":%s",
            *first ? "" : ",\n", pid, (unsigned long long)tid, name, key, str ? "\"" : "");
    fputs(value, f);
    fputs(str ? "\"}}" : "}}", f);
    *first = false;
}

static void chrome_write(ex_ctx *c)
{
    FILE *f = c->out;
    bool first = true;
    char b[64], tn[1100], num[32];
    fputs("{\"traceEvents\":[\n", f);
    /* process names and order, then each thread's name (the main thread first) */
    for (uint32_t o = 0; o < c->nprocs; o++) {
        const ex_proc *p = NULL;
        for (uint32_t i = 0; i < c->nprocs; i++)
            if (c->procs[i].order == o) p = &c->procs[i];
        chrome_meta(c, "process_name", p->pid, p->pid, "name", true, proc_name(p, b, sizeof b), &first);
        snprintf(num, sizeof num, "%u", o);
        chrome_meta(c, "process_sort_index", p->pid, p->pid, "sort_index", false, num, &first);
    }
    for (size_t i = 0; i < c->nsl; i++) {
        const ex_slice *s = &c->sl[i];
        if (i && s->tid == s[-1].tid && s->proc == s[-1].proc) continue;
        uint32_t pid = c->procs[s->proc].pid;
        thread_name(c, pid, s->tid, tn, sizeof tn);
        size_t mark = arena_mark(c);
        arena_json_text(c, tn);
        chrome_meta(c, "thread_name", pid, s->tid, "name", true, c->oom ? "" : c->arena + mark, &first);
        c->narena = mark;
        chrome_meta(c, "thread_sort_index", pid, s->tid, "sort_index", false, s->tid == pid ? "-1" : "0", &first);
    }
    /* slices and flows in time order */
    if (c->nfl) qsort(c->fl, c->nfl, sizeof *c->fl, by_flow_time);
    size_t nit = c->nsl + 2 * c->nfl;
    ex_item *it = malloc((nit ? nit : 1) * sizeof *it);
    if (!it) {
        c->oom = true;
        nit = 0;
    }
    size_t k = 0;
    for (size_t i = 0; it && i < c->nsl; i++) it[k++] = (ex_item){c->sl[i].from, c->sl[i].to - c->sl[i].from, 0, i};
    for (size_t i = 0; it && i < c->nfl; i++) {
        it[k++] = (ex_item){c->fl[i].ts_from, 0, 1, i};
        it[k++] = (ex_item){c->fl[i].ts_to, 0, 2, i};
    }
    if (nit) qsort(it, nit, sizeof *it, by_item);
    for (size_t i = 0; i < nit; i++) {
        fputs(first ? "" : ",\n", f);
        first = false;
        if (it[i].rank == 0) {
            const ex_slice *s = &c->sl[it[i].idx];
            const ex_act *x = s->serial < c->cacts ? &c->acts[s->serial] : NULL;
            fputs("{\"ph\":\"X\",\"ts\":", f);
            put_us(f, s->from);
            fputs(",\"dur\":", f);
            put_us(f, s->to - s->from);
            fprintf(f, ",\"pid\":%u,\"tid\":%llu,\"cat\":\"activity\",\"name\":\"", c->procs[s->proc].pid,
                    (unsigned long long)s->tid);
            json_text(f, s->name);
            fputs("\",\"args\":{\"acttrace\":{", f);
            fputs(x ? frag(c, x->head) : "", f);
            if (s->flags & EX_VISIT) fputs(",\"visit\":true", f);
            if (s->flags & EX_CLIPPED) fputs(",\"clipped\":true", f);
            fputc('}', f);
            if (x && x->start) fprintf(f, ",%s", frag(c, x->start));
            if (x && x->stop) fprintf(f, ",%s", frag(c, x->stop));
            fputs("}}", f);
        } else {
            const ex_flow *fl = &c->fl[it[i].idx];
            const ex_slice *s = &c->sl[it[i].rank == 1 ? fl->s_from : fl->s_to];
            fprintf(f, "{\"ph\":\"%s\",\"ts\":", it[i].rank == 1 ? "s" : "f");
            put_us(f, it[i].ts);
            fprintf(f, ",\"pid\":%u,\"tid\":%llu,\"cat\":\"flow\",\"name\":\"%s\",\"id\":\"0x%zx\",%s\"args\":{}}",
                    c->procs[s->proc].pid, (unsigned long long)s->tid, flow_names[fl->kind], it[i].idx + 1,
                    it[i].rank == 2 ? "\"bp\":\"e\"," : "");
        }
    }
    free(it);
    fputs("\n],\n\"metadata\":{\"exporter\":\"acttrace\",\"time-unit\":\"us\",\"time-origin\":\"the trace start\"}}\n", f);
}

/* speedscope: a profile per thread with slices, and each process's main thread first (even when it
 * ran no activity: the first profile is the program's main thread). */
typedef struct ex_prof {
    uint32_t proc;
    uint64_t tid;
    size_t from, to;          /* its slices */
} ex_prof;

static int by_prof(const void *x, const void *y)
{
    const ex_prof *a = x, *b = y;
    uint32_t pa = sort_ctx->procs[a->proc].order, pb = sort_ctx->procs[b->proc].order;
    if (pa != pb) return pa < pb ? -1 : 1;
    bool ma = a->tid == sort_ctx->procs[a->proc].pid, mb = b->tid == sort_ctx->procs[b->proc].pid;
    if (ma != mb) return ma ? -1 : 1;
    return a->tid < b->tid ? -1 : a->tid > b->tid;
}

static void ss_event(FILE *f, bool *first, char type, int64_t at, uint32_t frame)
{
    fprintf(f, "%s{\"type\":\"%c\",\"frame\":%u,\"at\":", *first ? "" : ",", type, frame);
    put_ms(f, at);
    fputc('}', f);
    *first = false;
}

static void speedscope_write(ex_ctx *c)
{
    FILE *f = c->out;
    /* frames: the activity names, in order of first appearance (names are interned: a name is
     * one pointer, looked up in a small open-addressing table) */
    const char **frames = NULL;
    uint32_t nframes = 0;
    size_t cframes = 0, ctab = 64;
    while (ctab < 2 * c->nsl + 2) ctab *= 2;
    uint32_t *tab = calloc(ctab, sizeof *tab); /* frame + 1 */
    uint32_t *frame_of = malloc((c->nsl ? c->nsl : 1) * sizeof *frame_of);
    for (size_t i = 0; tab && frame_of && i < c->nsl; i++) {
        size_t h = (size_t)(((uintptr_t)c->sl[i].name >> 3) * 0x9E3779B97F4A7C15ull) & (ctab - 1);
        while (tab[h] && frames[tab[h] - 1] != c->sl[i].name) h = (h + 1) & (ctab - 1);
        if (!tab[h]) {
            if (!grow(c, (void **)&frames, &cframes, nframes + 1, sizeof *frames)) break;
            frames[nframes++] = c->sl[i].name;
            tab[h] = nframes;
        }
        frame_of[i] = tab[h] - 1;
    }
    if (!tab) {
        free(frame_of);
        frame_of = NULL;
    }
    free(tab);
    /* profiles */
    ex_prof *pr = malloc((c->nsl + c->nprocs + 1) * sizeof *pr);
    size_t npr = 0;
    for (size_t i = 0; pr && i < c->nsl;) {
        size_t j = i;
        while (j < c->nsl && c->sl[j].tid == c->sl[i].tid && c->sl[j].proc == c->sl[i].proc) j++;
        pr[npr++] = (ex_prof){c->sl[i].proc, c->sl[i].tid, i, j};
        i = j;
    }
    for (uint32_t p = 0; pr && p < c->nprocs; p++) {
        bool has = false, main = false;
        for (size_t i = 0; i < npr; i++)
            if (pr[i].proc == p) {
                has = true;
                main |= pr[i].tid == c->procs[p].pid;
            }
        if (has && !main) pr[npr++] = (ex_prof){p, c->procs[p].pid, 0, 0};
    }
    sort_ctx = c;
    if (npr) qsort(pr, npr, sizeof *pr, by_prof);
    int64_t lo = 0, hi = am_end_ns(c->m);
    for (size_t i = 0; i < c->nsl; i++) {
        if (c->sl[i].from < lo) lo = c->sl[i].from;
        if (c->sl[i].to > hi) hi = c->sl[i].to;
    }
    fputs("{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\"exporter\":\"acttrace\","
          "\"name\":\"acttrace activities\",\"activeProfileIndex\":0,\n\"profiles\":[", f);
    int64_t *stack_to = NULL;
    uint32_t *stack_fr = NULL;
    size_t cst = 0, cfr = 0;
    char b[64], tn[1100];
    for (size_t n = 0; n < npr; n++) {
        const ex_proc *p = &c->procs[pr[n].proc];
        thread_name(c, p->pid, pr[n].tid, tn, sizeof tn);
        /* the names speedscope gives the threads of a Chrome trace */
        fprintf(f, "%s\n{\"type\":\"evented\",\"name\":\"", n ? "," : "");
        fputs(proc_name(p, b, sizeof b), f);
        fprintf(f, " (pid %u), ", p->pid);
        json_text(f, tn);
        fprintf(f, " (tid %llu)\",\"unit\":\"milliseconds\",\"startValue\":", (unsigned long long)pr[n].tid);
        put_ms(f, lo);
        fputs(",\"endValue\":", f);
        put_ms(f, hi);
        fputs(",\"events\":[", f);
        bool first = true;
        size_t depth = 0;
        for (size_t k = pr[n].from; frame_of && k < pr[n].to; k++) {
            const ex_slice *s = &c->sl[k];
            while (depth > 0 && stack_to[depth - 1] <= s->from) {
                depth--;
                ss_event(f, &first, 'C', stack_to[depth], stack_fr[depth]);
            }
            if (!grow(c, (void **)&stack_to, &cst, depth + 1, sizeof *stack_to) ||
                !grow(c, (void **)&stack_fr, &cfr, depth + 1, sizeof *stack_fr))
                break;
            ss_event(f, &first, 'O', s->from, frame_of[k]);
            stack_to[depth] = s->to; /* nest() clipped it into the enclosing one */
            stack_fr[depth++] = frame_of[k];
        }
        while (depth > 0) {
            depth--;
            ss_event(f, &first, 'C', stack_to[depth], stack_fr[depth]);
        }
        fputs("]}", f);
    }
    fputs("],\n\"shared\":{\"frames\":[", f);
    for (uint32_t i = 0; i < nframes; i++) {
        fputs(i ? ",{\"name\":\"" : "{\"name\":\"", f);
        json_text(f, frames[i]);
        fputs("\"}", f);
    }
    fputs("]}}\n", f);
    if (!frame_of || !pr) c->oom = true;
    free(stack_to);
    free(stack_fr);
    free(frames);
    free(frame_of);
    free(pr);
}

/* ---------------- the command ---------------- */

static void ctx_free(ex_ctx *c)
{
    for (uint32_t i = 0; i < c->nprocs; i++) {
        free(c->procs[i].name);
        free(c->procs[i].fallback);
    }
    if (c->syms)
        for (int i = 0; c->m && i < am_nfiles(c->m); i++) nt_sym_free(c->syms[i]);
    free(c->syms);
    free(c->procs);
    free(c->file_proc);
    free(c->tid_key);
    free(c->tid_proc);
    free(c->sl);
    free(c->fl);
    free(c->acts);
    free(c->arena);
    free(c->threads);
    free(c->starts);
    free(c->plinks);
    free(c->buf);
}

int at_cmd_export(int argc, char **argv)
{
    enum { O_FORMAT = 256, O_NAME, O_ENDPOINT };
    static const struct option opts[] = {{"format", required_argument, NULL, O_FORMAT},
                                         {"endpoint", required_argument, NULL, O_ENDPOINT},
                                         {"name", required_argument, NULL, O_NAME},
                                         {"output", required_argument, NULL, 'o'},
                                         {0}};
    ex_ctx c = {.last_file = -1};
    const char *format = NULL, *outpath = NULL, *endpoint = NULL;
    bool have_o = false;
    at_cli cli;
    at_cli_init(&cli, "export", export_usage, "o:", opts, argc, argv);
    int o;
    while ((o = at_cli_next(&cli)) > 0) {
        switch (o) {
        case O_FORMAT:
            format = cli.arg;
            if (strcmp(format, "chrome") && strcmp(format, "speedscope") && strcmp(format, "otlp")) {
                at_cli_usage_error(&cli, "unknown format '%s' (chrome, speedscope or otlp)", format);
                cli.failed = true;
            }
            break;
        case 'o': outpath = strcmp(cli.arg, "-") ? cli.arg : NULL; have_o = true; break;
        case O_ENDPOINT: endpoint = cli.arg; break;
        case O_NAME: c.name = cli.arg; break;
        }
    }
    if (o == AT_CLI_EXIT) return cli.status;
    int nfiles;
    char **files = at_cli_operands(&cli, &nfiles);
    if (!format)
        return at_cli_usage_error(&cli, "say which format: --format chrome, speedscope or otlp");
    if (!nfiles) return at_cli_usage_error(&cli, "give at least one trace FILE");
    if (endpoint && strcmp(format, "otlp"))
        return at_cli_usage_error(&cli, "--endpoint goes with --format otlp");
    int status = at_cli_check_output(&cli, outpath, files, nfiles);
    if (status) return status;
    status = at_cli_check_inputs("export", files, nfiles);
    if (status) return status;
    c.speedscope = !strcmp(format, "speedscope");
    char err[600];
    if (!strcmp(format, "otlp")) {
        uint64_t named = 0;
        int rc = at_export_otlp(files, nfiles, c.name, endpoint && !have_o ? NULL : outpath, endpoint, err,
                                sizeof err, &named);
        if (rc == 1) {
            char in[600];
            at_cli_files_desc(files, nfiles, in, sizeof in);
            am_errorf("export", "no activity named '%s' in %s", c.name, in);
        } else if (rc == -1) {
            am_errorf("export", "%s", err);
        }
        return rc < 0 || rc == 1 ? AT_EXIT_ERROR : rc;
    }
    /* tree mode: an activity's parent stays known until its tree is done, across processes too */
    am_options mo = {.tree = true, .progress = true, .need_events = true};
    am_callbacks cb = {.activity = on_activity, .event = on_event, .ctx = &c};
    am_model *m = am_open(files, nfiles, &mo, &cb, err, sizeof err);
    if (!m) {
        am_errorf("export", "%s", err);
        return AT_EXIT_ERROR;
    }
    c.m = m;
    c.nbuf = 1 << 16;
    c.buf = malloc(c.nbuf);
    c.syms = calloc((size_t)am_nfiles(m), sizeof *c.syms);
    c.procs = calloc((size_t)am_nfiles(m), sizeof *c.procs);
    c.file_proc = calloc((size_t)am_nfiles(m), sizeof *c.file_proc);
    if (!c.buf || !c.syms || !c.procs || !c.file_proc) {
        am_errorf("export", "out of memory");
        am_close(m);
        ctx_free(&c);
        return AT_EXIT_ERROR;
    }
    nt_sym_options so = {.demangle = true, .no_offset = true};
    for (int i = 0; i < am_nfiles(m); i++) {
        c.syms[i] = nt_sym_new(&so);
        uint32_t pid = (uint32_t)am_info(m, i)->pid;
        int64_t first = am_time(m, i, (uint64_t)am_info(m, i)->sync_time_qpc);
        ex_proc *p = proc_of(&c, pid);
        if (!p) {
            p = &c.procs[c.nprocs++];
            *p = (ex_proc){.pid = pid, .first = first};
        } else if (first < p->first) {
            p->first = first;
        }
        c.file_proc[i] = (uint32_t)(p - c.procs);
    }
    if (c.nprocs) {
        ex_proc *sorted = malloc(c.nprocs * sizeof *sorted);
        if (sorted) {
            memcpy(sorted, c.procs, c.nprocs * sizeof *sorted);
            qsort(sorted, c.nprocs, sizeof *sorted, by_first);
            for (uint32_t i = 0; i < c.nprocs; i++) proc_of(&c, sorted[i].pid)->order = i;
            free(sorted);
        }
    }
    am_run(m, err, sizeof err); /* a damaged file: what was read before the damage is exported */
    if (c.name && !c.named) { /* before any output is made */
        char in[600];
        at_cli_files_desc(files, nfiles, in, sizeof in);
        am_errorf("export", "no activity named '%s' in %s", c.name, in);
        int dmg = am_report_damage(m, "export");
        ctx_free(&c); /* reads the model: before it closes */
        am_close(m);
        return dmg ? dmg : AT_EXIT_ERROR;
    }
    c.out = outpath ? fopen(outpath, "w") : stdout;
    if (!c.out) {
        am_errorf("export", "%s: %m", outpath);
        am_close(m);
        ctx_free(&c);
        return AT_EXIT_ERROR;
    }
    cover_children(&c);
    nest(&c);
    if (c.nthreads) qsort(c.threads, c.nthreads, sizeof *c.threads, by_pid_tid);
    if (c.speedscope) {
        speedscope_write(&c);
    } else {
        bind_flows(&c);
        chrome_write(&c);
    }
    if (c.oom) {
        am_errorf("export", "out of memory: the export is incomplete");
        status = AT_EXIT_ERROR;
    }
    if (at_cli_close_output("export", c.out, outpath))
        status = AT_EXIT_ERROR;
    int dmg = am_report_damage(m, "export");
    if (!status) status = dmg;
    ctx_free(&c);
    am_close(m);
    return status;
}
