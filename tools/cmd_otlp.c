/* cmd_otlp.c: `acttrace export --format otlp`: the activities as OpenTelemetry spans, OTLP/JSON
 * (ExportTraceServiceRequest in the protobuf JSON mapping OTLP specifies: trace and span ids as hex,
 * 64-bit integers as decimal strings, enums as numbers).
 *
 * One span per activity: its name, its Start and Stop as wall-clock times (each file's SyncTimeUTC
 * and the event clock), its trace id the id of its root in the tree the files make together (across
 * processes: a server's connection under the client activity that connected it, a child process's
 * roots under the activity that started it) hashed to 16 bytes, its span id and its parent's the
 * FNV-1a-64 of their activity ids (never 0), its Start's payload fields as attributes
 * (and acttrace.path, acttrace.thread, acttrace.stopped), its transfers between threads as span
 * events. Spans are grouped per process (ResourceSpans) with resource attributes from the file's
 * ProcessInfo: service.name (the program), process.pid, process.command_line. A root linked to an
 * activity of a process not in the files gets that activity's span as parent (the span lives in that
 * process's own export) and the root's own trace id. An activity a request landed in with a W3C
 * traceparent header (the shim's TraceContext event) joins that trace: its trace id the header's,
 * its parent the caller's span the header names (kind SERVER), and so for the spans below it. */
#include <errno.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actmodel.h"
#include "cliopt.h"
#include "cmd_otlp.h"
#include "traceids.h"

typedef struct ot_attr_buf {
    char *p;
    size_t n, cap;
} ot_buf;

typedef struct ot_proc {
    uint32_t pid;
    char cmdline[1024];
    ot_buf spans;             /* the process's spans, JSON objects joined by commas */
    ot_buf pb;                /* the same spans as protobuf Span messages (field 2 of ScopeSpans) */
    uint64_t nspans;
} ot_proc;

typedef struct ot_ctx {
    am_model *m;
    const char *name;
    uint64_t named;
    ot_proc *procs;
    uint32_t nprocs, cprocs;
    char **start_attrs;       /* by activity serial: its Start's fields as OTLP attributes (JSON) */
    ot_buf *start_pb;         /* the same as protobuf KeyValue messages (field 9 of Span) */
    size_t cattrs;
    bool want_pb;             /* --endpoint: the protobuf twin is made too */
    struct ot_tctx {          /* by activity serial: the traceparent a request in it carried */
        uint64_t serial;
        char trace[33], parent[17];
    } *tctx;                  /* serial 0: none */
    size_t ctctx;
    int64_t unix0;            /* the wall-clock ns of model time 0 */
    bool oom;
} ot_ctx;

static bool buf_put(ot_ctx *c, ot_buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            c->oom = true;
            return false;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

static void buf_str(ot_ctx *c, ot_buf *b, const char *s) { buf_put(c, b, s, strlen(s)); }

static void buf_fmt(ot_ctx *c, ot_buf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void buf_fmt(ot_ctx *c, ot_buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) buf_put(c, b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* s as a JSON string, quotes included */
static void buf_json(ot_ctx *c, ot_buf *b, const char *s)
{
    buf_put(c, b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            buf_put(c, b, e, 2);
        } else if (*p < 0x20) {
            buf_fmt(c, b, "\\u%04x", *p);
        } else {
            buf_put(c, b, (const char *)p, 1);
        }
    }
    buf_put(c, b, "\"", 1);
}

/* ---------------- protobuf ---------------- */

static void pb_varint(ot_ctx *c, ot_buf *b, uint64_t v)
{
    char t[10];
    size_t n = 0;
    do {
        t[n++] = (char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    buf_put(c, b, t, n);
}

static void pb_tag(ot_ctx *c, ot_buf *b, unsigned field, unsigned wire) { pb_varint(c, b, field << 3 | wire); }

static void pb_bytes(ot_ctx *c, ot_buf *b, unsigned field, const void *p, size_t n)
{
    pb_tag(c, b, field, 2);
    pb_varint(c, b, n);
    buf_put(c, b, p, n);
}

static void pb_str(ot_ctx *c, ot_buf *b, unsigned field, const char *s) { pb_bytes(c, b, field, s, strlen(s)); }

static void pb_fixed64(ot_ctx *c, ot_buf *b, unsigned field, uint64_t v)
{
    pb_tag(c, b, field, 1);
    char t[8];
    for (int i = 0; i < 8; i++) t[i] = (char)(v >> (8 * i));
    buf_put(c, b, t, 8);
}

/* a KeyValue (key, AnyValue) as field `field` of its parent; type: 's' string, 'i' int64, 'd'
 * double, 'b' bool */
static void pb_kv(ot_ctx *c, ot_buf *out, unsigned field, const char *key, char type, const char *s, int64_t i,
                  double d)
{
    ot_buf v = {0}, kv = {0};
    switch (type) {
    case 's': pb_str(c, &v, 1, s); break;
    case 'b': pb_tag(c, &v, 2, 0); pb_varint(c, &v, i != 0); break;
    case 'i': pb_tag(c, &v, 3, 0); pb_varint(c, &v, (uint64_t)i); break;
    default: {
        uint64_t u;
        memcpy(&u, &d, 8);
        pb_fixed64(c, &v, 4, u);
    }
    }
    pb_str(c, &kv, 1, key);
    pb_bytes(c, &kv, 2, v.p ? v.p : "", v.n);
    pb_bytes(c, out, field, kv.p, kv.n);
    free(v.p);
    free(kv.p);
}

static size_t unhex(const char *h, uint8_t *out, size_t max)
{
    size_t n = 0;
    for (; h[0] && h[1] && n < max; h += 2) {
        int hi = h[0] <= '9' ? h[0] - '0' : h[0] - 'a' + 10, lo = h[1] <= '9' ? h[1] - '0' : h[1] - 'a' + 10;
        out[n++] = (uint8_t)(hi << 4 | lo);
    }
    return n;
}

void ot_span_id(const at_guid *g, char out[17]) { at_span_id_hex(g, out); }

void ot_trace_id(const at_guid *g, char out[33]) { at_trace_id_hex(g, out); }

static ot_proc *proc_get(ot_ctx *c, uint32_t pid)
{
    for (uint32_t i = 0; i < c->nprocs; i++)
        if (c->procs[i].pid == pid) return &c->procs[i];
    if (c->nprocs == c->cprocs) {
        uint32_t nc = c->cprocs ? c->cprocs * 2 : 8;
        ot_proc *np = realloc(c->procs, nc * sizeof *np);
        if (!np) {
            c->oom = true;
            return NULL;
        }
        c->procs = np;
        c->cprocs = nc;
    }
    ot_proc *p = &c->procs[c->nprocs++];
    memset(p, 0, sizeof *p);
    p->pid = pid;
    return p;
}

/* A Start's payload fields as OTLP KeyValues (without the brackets), the first (<Name>Id) included */
static char *start_attrs(ot_ctx *c, const nt_event *ev, ot_buf *pb)
{
    const nt_metadata *md = ev->meta;
    ot_buf b = {0};
    uint32_t off = 0;
    for (uint32_t i = 0; i < md->nfields; i++) {
        const nt_field *f = &md->fields[i];
        char v[1024];
        int r = nt_field_json(f, ev->payload, ev->payload_len, &off, v, sizeof v);
        if (r < 0) break;
        if (r == 0) continue;
        if (b.n) buf_put(c, &b, ",", 1);
        buf_str(c, &b, "{\"key\":");
        buf_json(c, &b, f->name);
        switch (f->type) {
        case NT_TYPE_BOOLEAN:
            buf_fmt(c, &b, ",\"value\":{\"boolValue\":%s}}", v);
            if (pb) pb_kv(c, pb, 9, f->name, 'b', NULL, !strcmp(v, "true"), 0);
            break;
        case NT_TYPE_SBYTE: case NT_TYPE_BYTE: case NT_TYPE_INT16: case NT_TYPE_UINT16: case NT_TYPE_INT32:
        case NT_TYPE_UINT32: case NT_TYPE_INT64: case NT_TYPE_UINT64:
            buf_fmt(c, &b, ",\"value\":{\"intValue\":\"%s\"}}", v);
            if (pb) pb_kv(c, pb, 9, f->name, 'i', NULL, v[0] == '-' ? strtoll(v, NULL, 10) : (int64_t)strtoull(v, NULL, 10), 0);
            break;
        case NT_TYPE_SINGLE: case NT_TYPE_DOUBLE: case NT_TYPE_DECIMAL:
            if (v[0] == '"') { /* NaN, infinities */
                buf_fmt(c, &b, ",\"value\":{\"stringValue\":%s}}", v);
                v[strlen(v) - 1] = 0;
                if (pb) pb_kv(c, pb, 9, f->name, 's', v + 1, 0, 0);
            } else {
                buf_fmt(c, &b, ",\"value\":{\"doubleValue\":%s}}", v);
                if (pb) pb_kv(c, pb, 9, f->name, 'd', NULL, 0, strtod(v, NULL));
            }
            break;
        default: {
            buf_str(c, &b, ",\"value\":{\"stringValue\":");
            size_t mark = b.n;
            if (v[0] == '"') buf_str(c, &b, v); /* a JSON string already */
            else buf_json(c, &b, v);            /* arrays, objects: their JSON as text */
            if (pb && b.p) { /* the string itself: the JSON string's text unescaped */
                const char *q = b.p + mark + 1, *end = b.p + b.n - 1;
                ot_buf u = {0};
                for (; q < end; q++) {
                    char ch = *q;
                    if (*q == '\\' && q + 1 < end) {
                        q++;
                        ch = *q == 'n' ? '\n' : *q == 't' ? '\t' : *q == 'r' ? '\r' : *q == 'b' ? '\b' : *q == 'f' ? '\f' : *q;
                        if (*q == 'u' && q + 4 < end) {
                            ch = (char)strtol((char[5]){q[1], q[2], q[3], q[4], 0}, NULL, 16);
                            q += 4;
                        }
                    }
                    buf_put(c, &u, &ch, 1);
                }
                pb_kv(c, pb, 9, f->name, 's', u.p ? u.p : "", 0, 0);
                free(u.p);
            }
            buf_str(c, &b, "}}");
        }
        }
    }
    return b.p;
}

static void on_event(void *vc, const am_event *e)
{
    ot_ctx *c = vc;
    const nt_metadata *md = e->ev->meta;
    if (md->opcode == NT_OPCODE_START && e->act && e->ev->payload_len) {
        uint64_t s = e->act->serial;
        if (s >= c->cattrs) {
            size_t nc = c->cattrs ? c->cattrs : 1024;
            while (nc <= s) nc *= 2;
            char **np = realloc(c->start_attrs, nc * sizeof *np);
            if (np) c->start_attrs = np;
            ot_buf *nb = np ? realloc(c->start_pb, nc * sizeof *nb) : NULL;
            if (!np || !nb) {
                c->oom = true;
                return;
            }
            memset(np + c->cattrs, 0, (nc - c->cattrs) * sizeof *np);
            memset(nb + c->cattrs, 0, (nc - c->cattrs) * sizeof *nb);
            c->start_pb = nb;
            c->cattrs = nc;
        }
        free(c->start_attrs[s]);
        free(c->start_pb[s].p);
        c->start_pb[s] = (ot_buf){0};
        c->start_attrs[s] = start_attrs(c, e->ev, c->want_pb ? &c->start_pb[s] : NULL);
    } else if (e->act && md->provider && md->name && !strcmp(md->name, "TraceContext") &&
               !strcmp(md->provider, "acttrace-shim")) {
        /* the first one an activity saw: its request's (indexed by serial: no search per event) */
        uint64_t sv = e->act->serial;
        if (sv < c->ctctx && c->tctx[sv].serial) return;
        struct ot_tctx t = {.serial = sv};
        uint32_t off = 0;
        for (uint32_t i = 0; i < md->nfields; i++) {
            char v[64];
            if (!nt_field_format(&md->fields[i], e->ev->payload, e->ev->payload_len, &off, v, sizeof v)) return;
            size_t n = strlen(v);
            if (n >= 2 && v[0] == '"') {
                v[n - 1] = 0;
                if (!strcmp(md->fields[i].name, "TraceId") && n - 2 == 32) memcpy(t.trace, v + 1, 33);
                if (!strcmp(md->fields[i].name, "ParentId") && n - 2 == 16) memcpy(t.parent, v + 1, 17);
            }
        }
        if (!t.trace[0] || !t.parent[0]) return;
        if (sv >= c->ctctx) {
            size_t nc = c->ctctx ? c->ctctx : 64;
            while (nc <= sv) nc *= 2;
            struct ot_tctx *np = realloc(c->tctx, nc * sizeof *np);
            if (!np) {
                c->oom = true;
                return;
            }
            memset(np + c->ctctx, 0, (nc - c->ctctx) * sizeof *np);
            c->tctx = np;
            c->ctctx = nc;
        }
        c->tctx[sv] = t;
    } else if (md->provider && md->name && !strcmp(md->name, "ProcessInfo") &&
               !strcmp(md->provider, "Microsoft-DotNETCore-EventPipe")) {
        ot_proc *p = proc_get(c, e->pid);
        uint32_t off = 0;
        if (p && md->nfields && !p->cmdline[0] &&
            nt_field_format(&md->fields[0], e->ev->payload, e->ev->payload_len, &off, p->cmdline,
                            sizeof p->cmdline)) {
            size_t n = strlen(p->cmdline);
            if (n >= 2 && p->cmdline[0] == '"' && p->cmdline[n - 1] == '"') {
                memmove(p->cmdline, p->cmdline + 1, n - 2);
                p->cmdline[n - 2] = 0;
            }
        }
    }
}

static bool kept_by_name(const ot_ctx *c, const am_activity *a)
{
    for (const am_activity *q = a; q; q = q->parent)
        if (!strcmp(q->name, c->name)) return true;
    return false;
}

static void on_activity(void *vc, const am_activity *a)
{
    ot_ctx *c = vc;
    if (c->name) {
        if (!kept_by_name(c, a)) return;
        c->named++;
    }
    ot_proc *p = proc_get(c, a->pid);
    if (!p) return;
    const am_activity *root = a;
    while (root->parent) root = root->parent;
    char tid[33], sid[17], pid_s[17] = "", path[AM_PATH_MAX];
    at_guid link = {{0}};
    bool linked = !a->parent && am_act_link(a, path, sizeof path) && a->x;
    if (linked) link = a->x->related;
    /* the nearest activity, itself or above, that a request with a traceparent landed in: its
     * trace, and for that activity the caller's span as parent */
    const struct ot_tctx *adopted = NULL;
    const am_activity *q = a;
    for (; q && !adopted; q = adopted ? q : q->parent)
        if (q->serial < c->ctctx && c->tctx[q->serial].serial) adopted = &c->tctx[q->serial];
    if (adopted) memcpy(tid, adopted->trace, 33);
    else ot_trace_id(&root->id, tid);
    ot_span_id(&a->id, sid);
    if (adopted && q == a) memcpy(pid_s, adopted->parent, 17);
    else if (a->parent) ot_span_id(&a->parent->id, pid_s);
    else if (linked) ot_span_id(&link, pid_s);
    am_act_path(a, path, sizeof path);
    ot_buf *b = &p->spans;
    if (p->nspans++) buf_put(c, b, ",", 1);
    buf_fmt(c, b, "{\"traceId\":\"%s\",\"spanId\":\"%s\"", tid, sid);
    if (pid_s[0]) buf_fmt(c, b, ",\"parentSpanId\":\"%s\"", pid_s);
    buf_str(c, b, ",\"name\":");
    buf_json(c, b, a->name);
    /* SPAN_KIND_SERVER for a connection accepted from a traced client (or an exchange of one), else
     * INTERNAL */
    int kind = (a->parent && a->parent->pid != a->pid && am_accepted_from(c->m, a)) || (adopted && q == a)
                   ? 2
                   : 1;
    buf_fmt(c, b, ",\"kind\":%d,\"startTimeUnixNano\":\"%lld\",\"endTimeUnixNano\":\"%lld\"", kind,
            (long long)(c->unix0 + a->start), (long long)(c->unix0 + a->stop));
    buf_str(c, b, ",\"attributes\":[");
    const char *sa = a->serial < c->cattrs ? c->start_attrs[a->serial] : NULL;
    if (sa && *sa) {
        buf_str(c, b, sa);
        buf_put(c, b, ",", 1);
    }
    buf_str(c, b, "{\"key\":\"acttrace.path\",\"value\":{\"stringValue\":");
    buf_json(c, b, path);
    buf_fmt(c, b, "}},{\"key\":\"acttrace.thread\",\"value\":{\"intValue\":\"%llu\"}}",
            (unsigned long long)am_start_tid(a));
    buf_fmt(c, b, ",{\"key\":\"acttrace.stopped\",\"value\":{\"boolValue\":%s}}]",
            a->stopped ? "true" : "false");
    buf_str(c, b, ",\"events\":[");
    uint32_t nev = 0;
    for (uint32_t i = 0; i < am_nxfers(a); i++) {
        const am_transfer *x = am_xfer_at(a, i);
        if (nev++) buf_put(c, b, ",", 1);
        buf_fmt(c, b,
                "{\"timeUnixNano\":\"%lld\",\"name\":\"transfer\",\"attributes\":["
                "{\"key\":\"acttrace.from_thread\",\"value\":{\"intValue\":\"%llu\"}},"
                "{\"key\":\"acttrace.to_thread\",\"value\":{\"intValue\":\"%llu\"}},"
                "{\"key\":\"acttrace.queued_ns\",\"value\":{\"intValue\":\"%lld\"}}]}",
                (long long)(c->unix0 + x->recv), (unsigned long long)x->from_tid,
                (unsigned long long)x->to_tid, (long long)(x->from_tid ? x->recv - x->send : 0));
    }
    buf_str(c, b, "]");
    /* status: UNSET for a stopped activity; one never stopped is marked, not failed */
    buf_str(c, b, ",\"status\":{}}");
    if (!c->want_pb) return;
    ot_buf s = {0};
    uint8_t id[16];
    pb_bytes(c, &s, 1, id, unhex(tid, id, 16));
    pb_bytes(c, &s, 2, id, unhex(sid, id, 8));
    if (pid_s[0]) pb_bytes(c, &s, 4, id, unhex(pid_s, id, 8));
    pb_str(c, &s, 5, a->name);
    pb_tag(c, &s, 6, 0);
    pb_varint(c, &s, (uint64_t)kind);
    pb_fixed64(c, &s, 7, (uint64_t)(c->unix0 + a->start));
    pb_fixed64(c, &s, 8, (uint64_t)(c->unix0 + a->stop));
    if (a->serial < c->cattrs && c->start_pb[a->serial].n)
        buf_put(c, &s, c->start_pb[a->serial].p, c->start_pb[a->serial].n);
    pb_kv(c, &s, 9, "acttrace.path", 's', path, 0, 0);
    pb_kv(c, &s, 9, "acttrace.thread", 'i', NULL, (int64_t)am_start_tid(a), 0);
    pb_kv(c, &s, 9, "acttrace.stopped", 'b', NULL, a->stopped, 0);
    for (uint32_t i = 0; i < am_nxfers(a); i++) {
        const am_transfer *x = am_xfer_at(a, i);
        ot_buf ev = {0};
        pb_fixed64(c, &ev, 1, (uint64_t)(c->unix0 + x->recv));
        pb_str(c, &ev, 2, "transfer");
        pb_kv(c, &ev, 3, "acttrace.from_thread", 'i', NULL, (int64_t)x->from_tid, 0);
        pb_kv(c, &ev, 3, "acttrace.to_thread", 'i', NULL, (int64_t)x->to_tid, 0);
        pb_kv(c, &ev, 3, "acttrace.queued_ns", 'i', NULL, x->from_tid ? x->recv - x->send : 0, 0);
        pb_bytes(c, &s, 11, ev.p ? ev.p : "", ev.n);
        free(ev.p);
    }
    pb_bytes(c, &s, 15, "", 0); /* an empty status, as the JSON's */
    pb_bytes(c, &p->pb, 2, s.p ? s.p : "", s.n);
    free(s.p);
}

static int64_t unix_ns_of(const uint16_t *t)
{
    struct tm tm = {.tm_year = t[0] - 1900, .tm_mon = t[1] - 1, .tm_mday = t[3], .tm_hour = t[4],
                    .tm_min = t[5], .tm_sec = t[6]};
    time_t s = timegm(&tm);
    return (int64_t)s * 1000000000 + (int64_t)t[7] * 1000000;
}

static const char *program_of(const char *cmdline, char *out, size_t n)
{
    size_t len = strcspn(cmdline, " ");
    const char *s = cmdline;
    for (size_t i = 0; i < len; i++)
        if (cmdline[i] == '/') s = cmdline + i + 1;
    size_t k = (size_t)(cmdline + len - s);
    if (k && s[k - 1] == ':') k--; /* nginx's "nginx: worker process" */
    if (k >= n) k = n - 1;
    memcpy(out, s, k);
    out[k] = 0;
    return out;
}

static void write_json(ot_ctx *c, FILE *f)
{
    fputs("{\"resourceSpans\":[", f);
    bool first = true;
    for (uint32_t i = 0; i < c->nprocs; i++) {
        ot_proc *p = &c->procs[i];
        if (!p->nspans) continue;
        if (!first) fputc(',', f);
        first = false;
        ot_buf r = {0};
        char prog[256];
        buf_str(c, &r, "{\"resource\":{\"attributes\":[{\"key\":\"service.name\",\"value\":{\"stringValue\":");
        buf_json(c, &r, p->cmdline[0] ? program_of(p->cmdline, prog, sizeof prog) : "unknown_service");
        buf_fmt(c, &r, "}},{\"key\":\"process.pid\",\"value\":{\"intValue\":\"%u\"}}", p->pid);
        if (p->cmdline[0]) {
            buf_str(c, &r, ",{\"key\":\"process.command_line\",\"value\":{\"stringValue\":");
            buf_json(c, &r, p->cmdline);
            buf_str(c, &r, "}}");
        }
        buf_str(c, &r, ",{\"key\":\"telemetry.sdk.name\",\"value\":{\"stringValue\":\"acttrace\"}}]},"
                       "\"scopeSpans\":[{\"scope\":{\"name\":\"acttrace\"},\"spans\":[");
        fputs(r.p ? r.p : "", f);
        free(r.p);
        fputs(p->spans.p ? p->spans.p : "", f);
        fputs("]}]}", f);
    }
    fputs("]}\n", f);
}

/* The request as protobuf: a ResourceSpans per process (its resource's attributes, one scope) */
static void request_pb(ot_ctx *c, ot_buf *req)
{
    for (uint32_t i = 0; i < c->nprocs; i++) {
        ot_proc *p = &c->procs[i];
        if (!p->nspans) continue;
        ot_buf res = {0}, scope = {0}, ss = {0}, rs = {0};
        char prog[256];
        pb_kv(c, &res, 1, "service.name", 's', p->cmdline[0] ? program_of(p->cmdline, prog, sizeof prog) : "unknown_service",
              0, 0);
        pb_kv(c, &res, 1, "process.pid", 'i', NULL, p->pid, 0);
        if (p->cmdline[0]) pb_kv(c, &res, 1, "process.command_line", 's', p->cmdline, 0, 0);
        pb_kv(c, &res, 1, "telemetry.sdk.name", 's', "acttrace", 0, 0);
        pb_str(c, &scope, 1, "acttrace");
        pb_bytes(c, &ss, 1, scope.p, scope.n);
        buf_put(c, &ss, p->pb.p ? p->pb.p : "", p->pb.n);
        pb_bytes(c, &rs, 1, res.p, res.n);
        pb_bytes(c, &rs, 2, ss.p, ss.n);
        pb_bytes(c, req, 1, rs.p, rs.n);
        free(res.p);
        free(scope.p);
        free(ss.p);
        free(rs.p);
    }
}

/* POST body to an OTLP/HTTP receiver: url http://HOST[:PORT][/PATH] (port 4318, path /v1/traces
 * when none is given). 0 when it answered 2xx; else -1 with err saying what happened. */
static int http_post(const char *url, const void *body, size_t n, char *err, size_t errlen)
{
    if (strncmp(url, "http://", 7) != 0) {
        snprintf(err, errlen, "--endpoint %s: expected http://HOST[:PORT][/PATH] (https is not supported)", url);
        return -1;
    }
    const char *h = url + 7, *slash = strchr(h, '/');
    char host[256], port[16] = "4318", path[1024] = "/v1/traces";
    size_t hl = slash ? (size_t)(slash - h) : strlen(h);
    if (hl == 0 || hl >= sizeof host) {
        snprintf(err, errlen, "--endpoint %s: no host", url);
        return -1;
    }
    memcpy(host, h, hl);
    host[hl] = 0;
    if (slash && strcmp(slash, "/") != 0) snprintf(path, sizeof path, "%s", slash);
    char *colon = host[0] == '[' ? strstr(host, "]:") : strrchr(host, ':');
    if (colon) {
        if (host[0] == '[') colon++;
        snprintf(port, sizeof port, "%s", colon + 1);
        *colon = 0;
    }
    char *hostname = host;
    if (hostname[0] == '[') { /* an IPv6 literal */
        hostname++;
        char *rb = strchr(hostname, ']');
        if (rb) *rb = 0;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(hostname, port, &hints, &ai);
    if (g != 0) {
        snprintf(err, errlen, "--endpoint %s: %s", url, gai_strerror(g));
        return -1;
    }
    int fd = -1, cerr = 0;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        struct timeval tv = {30, 0}; /* a receiver that never answers is an error, not a hang */
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            cerr = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        snprintf(err, errlen, "--endpoint %s: %s", url, strerror(cerr ? cerr : ECONNREFUSED));
        return -1;
    }
    char head[1600];
    int hn = snprintf(head, sizeof head,
                      "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/x-protobuf\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      path, host, port, n);
    const char *parts[2] = {head, body};
    size_t lens[2] = {(size_t)hn, n};
    for (int k = 0; k < 2; k++) {
        for (size_t off = 0; off < lens[k];) {
            ssize_t w = send(fd, parts[k] + off, lens[k] - off, MSG_NOSIGNAL);
            if (w <= 0) {
                snprintf(err, errlen, "--endpoint %s: sending: %s", url, strerror(errno));
                close(fd);
                return -1;
            }
            off += (size_t)w;
        }
    }
    char resp[512];
    size_t got = 0;
    while (got < sizeof resp - 1) {
        ssize_t r = recv(fd, resp + got, sizeof resp - 1 - got, 0);
        if (r <= 0) break;
        got += (size_t)r;
        if (memchr(resp, '\n', got)) break;
    }
    close(fd);
    resp[got] = 0;
    int code = 0;
    if (sscanf(resp, "HTTP/%*s %d", &code) != 1) {
        snprintf(err, errlen, "--endpoint %s: no HTTP answer", url);
        return -1;
    }
    if (code < 200 || code > 299) {
        resp[strcspn(resp, "\r\n")] = 0;
        snprintf(err, errlen, "--endpoint %s: the receiver answered \"%s\"", url, resp);
        return -1;
    }
    return 0;
}

int at_export_otlp(char **files, int nfiles, const char *name, const char *outpath, const char *endpoint,
                   char *err, size_t errlen, uint64_t *named)
{
    ot_ctx c = {.name = name, .want_pb = endpoint != NULL};
    am_options mo = {.tree = true, .progress = true, .need_events = true};
    am_callbacks cb = {.activity = on_activity, .event = on_event, .ctx = &c};
    am_model *m = am_open(files, nfiles, &mo, &cb, err, errlen);
    if (!m) return -1;
    c.m = m;
    const nt_trace_info *in0 = am_info(m, 0);
    c.unix0 = unix_ns_of(in0->sync_time_utc) - am_time(m, 0, (uint64_t)in0->sync_time_qpc);
    am_run(m, err, errlen); /* a damaged file: what was read before the damage is exported */
    int rc = 0;
    if (named) *named = c.named;
    if (name && !c.named) {
        rc = 1;
    } else if (endpoint) {
        ot_buf req = {0};
        request_pb(&c, &req);
        if (!c.oom && http_post(endpoint, req.p ? req.p : "", req.n, err, errlen) != 0) rc = -1;
        free(req.p);
        if (rc == 0 && outpath) { /* the JSON too, when asked */
            FILE *out = fopen(outpath, "w");
            if (!out) {
                snprintf(err, errlen, "%s: %s", outpath, strerror(errno));
                rc = -1;
            } else {
                write_json(&c, out);
                if (at_cli_close_output("export", out, outpath)) rc = -2;
            }
        }
    } else { /* the output is made once there is something to write */
        FILE *out = outpath ? fopen(outpath, "w") : stdout;
        if (!out) {
            snprintf(err, errlen, "%s: %s", outpath, strerror(errno));
            rc = -1;
        } else {
            write_json(&c, out);
            if (at_cli_close_output("export", out, outpath)) /* which says so */
                rc = -2;
        }
    }
    if (c.oom && rc == 0) {
        snprintf(err, errlen, "out of memory: the export is incomplete");
        rc = -1;
    }
    rc = rc ? rc : am_report_damage(m, "export") ? 3 : 0;
    for (uint32_t i = 0; i < c.nprocs; i++) {
        free(c.procs[i].spans.p);
        free(c.procs[i].pb.p);
    }
    for (size_t i = 0; c.start_pb && i < c.cattrs; i++) free(c.start_pb[i].p);
    free(c.start_pb);
    free(c.procs);
    for (size_t i = 0; i < c.cattrs; i++) free(c.start_attrs[i]);
    free(c.start_attrs);
    free(c.tctx);
    am_close(m);
    return rc;
}
