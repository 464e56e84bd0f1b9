/* hookconf.c: the config file parser (hookconf.h, format in docs/config.md). A small line parser of our
 * own rather than inih: messages must carry the column of the value at fault, and inih hands out
 * neither columns nor lines longer than its compile-time limit. Values that name arguments (capture,
 * key, when) are kept raw with their position and resolved against the signature when the section
 * ends, so keys may come in any order. */
#include "config.h"
#include "hookconf.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RAW_MAX 1024

typedef struct raw {
    char v[RAW_MAX];
    at_hc_pos pos;
    bool set;
} raw;

typedef struct probe_raw {
    raw symbol, sig, capture, key, when;
} probe_raw;

typedef struct parser {
    const char *path;
    char *err;
    size_t errlen;
    at_hookconf *c;
    bool in_trace;
    at_hc_entry *e; /* the entry of the open section, NULL in [trace] or before any */
    probe_raw pr[2];
    raw type, callback, callback_arg;
    at_hc_pos fd_key_pos;
} parser;

static int fail(parser *p, at_hc_pos pos, const char *fmt, ...)
{
    int n = snprintf(p->err, p->errlen, "%s:%d:%d: ", p->path, pos.line, pos.col);
    if (n < 0 || (size_t)n >= p->errlen)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

const char *at_hc_kind_name(at_hc_kind k)
{
    switch (k) {
    case AT_HC_ACTIVITY: return "activity";
    case AT_HC_EVENT: return "event";
    case AT_HC_FLOW_CALLBACK: return "flow (callback)";
    case AT_HC_FLOW_KEYED: return "flow (keyed)";
    }
    return "?";
}

/* ---- values ---- */

static int parse_bool(parser *p, const raw *r, bool *out)
{
    const char *v = r->v;
    if (!strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "on") || !strcmp(v, "1"))
        *out = true;
    else if (!strcmp(v, "no") || !strcmp(v, "false") || !strcmp(v, "off") || !strcmp(v, "0"))
        *out = false;
    else
        return fail(p, r->pos, "'%s': expected yes or no", v);
    return 0;
}

static int parse_u64(parser *p, const raw *r, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(r->v, &end, 0);
    if (errno || end == r->v || *end || r->v[0] == '-' || x > max)
        return fail(p, r->pos, "'%s': expected a number from 0 to %" PRIu64, r->v, max);
    *out = x;
    return 0;
}

/* 64M, 512K, 1G, or bytes */
static int parse_size(parser *p, const raw *r, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(r->v, &end, 10);
    uint64_t mul = 1;
    if (end != r->v && (*end == 'K' || *end == 'k'))
        mul = 1024, end++;
    else if (end != r->v && (*end == 'M' || *end == 'm'))
        mul = 1024 * 1024, end++;
    else if (end != r->v && (*end == 'G' || *end == 'g'))
        mul = 1024ull * 1024 * 1024, end++;
    if (errno || end == r->v || *end || r->v[0] == '-' || x == 0 || x > (1ull << 40) / mul)
        return fail(p, r->pos, "'%s': expected a size such as 4096, 512K, 64M or 1G", r->v);
    *out = x * mul;
    return 0;
}

static int parse_level(parser *p, const raw *r, uint8_t *out)
{
    static const char *const names[] = {"always", "critical", "error", "warning", "info", "verbose"};
    for (unsigned i = 0; i < 6; i++)
        if (!strcmp(r->v, names[i])) {
            *out = (uint8_t)i;
            return 0;
        }
    uint64_t x;
    if (isdigit((unsigned char)r->v[0]) && parse_u64(p, r, 5, &x) == 0) {
        *out = (uint8_t)x;
        return 0;
    }
    return fail(p, r->pos,
                "'%s': expected a level: critical, error, warning, info, verbose (or 1 to 5)", r->v);
}

static int parse_stacks(parser *p, const raw *r, unsigned *out)
{
    if (!strcmp(r->v, "none"))
        *out = 0;
    else if (!strcmp(r->v, "start"))
        *out = AT_HC_STACK_START;
    else if (!strcmp(r->v, "stop"))
        *out = AT_HC_STACK_STOP;
    else if (!strcmp(r->v, "both"))
        *out = AT_HC_STACK_START | AT_HC_STACK_STOP;
    else
        return fail(p, r->pos, "'%s': expected none, start, stop or both", r->v);
    return 0;
}

/* lib!sym, sym@VER, module+0xOFF or sym: only the shape is checked here; resolution happens later. */
static int check_symbol(parser *p, const raw *r)
{
    const char *v = r->v;
    for (const char *s = v; *s; s++)
        if (isspace((unsigned char)*s)) {
            at_hc_pos pos = {r->pos.line, r->pos.col + (int)(s - v)};
            return fail(p, pos, "'%s': a symbol has no spaces; expected sym, lib!sym, sym@VERSION "
                                "or module+0xOFFSET", v);
        }
    const char *plus = strrchr(v, '+');
    if (plus) {
        char *end;
        errno = 0;
        if (strncmp(plus + 1, "0x", 2) || (strtoull(plus + 1, &end, 16), errno) || *end ||
            plus == v) {
            at_hc_pos pos = {r->pos.line, r->pos.col + (int)(plus - v)};
            return fail(p, pos, "'%s': expected module+0xOFFSET (hexadecimal offset)", v);
        }
    }
    return 0;
}

/* An argument reference: a parameter name, argN, or "return" (when allow_return). */
static int arg_ref(parser *p, const at_hc_probe *pb, const char *name, at_hc_pos pos,
                   bool allow_return, const char *what, int *out)
{
    if (!strcmp(name, "return")) {
        if (!allow_return)
            return fail(p, pos, "%s cannot use 'return' here", what);
        if (pb->sig.ret == AT_CT_VOID)
            return fail(p, pos, "%s: '%s' returns void", what, pb->sig.fname);
        *out = AT_HC_RETURN;
        return 0;
    }
    int i = at_sig_param_index(&pb->sig, name);
    if (i < 0) {
        /* the names it has, as the signature gives them (an unnamed one as argN) */
        char names[512] = "";
        size_t k = 0;
        for (int j = 0; j < pb->sig.nparams && k + 80 < sizeof names; j++) {
            int w = pb->sig.p[j].name[0]
                        ? snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "", pb->sig.p[j].name)
                        : snprintf(names + k, sizeof names - k, "%sarg%d", k ? ", " : "", j);
            if (w > 0)
                k += (size_t)w;
        }
        bool ret = allow_return && pb->sig.ret != AT_CT_VOID;
        if (!pb->sig.nparams)
            return fail(p, pos, "%s: '%s' is not a parameter of %s, which has none%s", what, name,
                        pb->sig.fname, ret ? "; expected return" : "");
        return fail(p, pos, "%s: '%s' is not a parameter of %s; expected one of %s%s", what, name,
                    pb->sig.fname, names, ret ? " or return" : "");
    }
    *out = i;
    return 0;
}

static bool is_integer(at_ctype t)
{
    return t != AT_CT_VOID && t != AT_CT_F32 && t != AT_CT_F64 && t != AT_CT_STR;
}

/* ---- sections ---- */

static const char *role_name(const at_hc_entry *e, int i)
{
    if (e->kind == AT_HC_FLOW_KEYED)
        return i ? "dequeue" : "enqueue";
    if (e->paired)
        return i ? "stop" : "start";
    return "function";
}

/* Resolve one probe's raw values against its signature. */
static int probe_finish(parser *p, at_hc_entry *e, int i)
{
    probe_raw *r = &p->pr[i];
    at_hc_probe *pb = &e->probe[i];
    const char *pre = (e->paired || e->kind == AT_HC_FLOW_KEYED) ? role_name(e, i) : "";
    char kname[64];
    snprintf(pb->symbol, sizeof pb->symbol, "%s", r->symbol.v);
    pb->symbol_pos = r->symbol.pos;
    pb->key = AT_HC_NONE;
    if (!pb->max_string)
        pb->max_string = 256;
    if (r->sig.set) {
        int col = 0;
        char err[256];
        if (at_sig_parse(r->sig.v, &pb->sig, &col, err, sizeof err) < 0) {
            at_hc_pos pos = {r->sig.pos.line, r->sig.pos.col + col};
            return fail(p, pos, "%s", err);
        }
        pb->has_sig = true;
        /* the signature names the function it describes: it must be the hooked one */
        const char *s = pb->symbol;
        const char *bang = strchr(s, '!');
        if (bang)
            s = bang + 1;
        size_t len = strcspn(s, "@+");
        if (!strchr(pb->symbol, '+') && (strlen(pb->sig.fname) != len || strncmp(s, pb->sig.fname, len)))
            return fail(p, r->sig.pos, "the signature is of '%s' but the function is '%.*s'",
                        pb->sig.fname, (int)len, s);
    }
    snprintf(kname, sizeof kname, "%s%scapture", pre, *pre ? "_" : "");
    if (r->capture.set) {
        if (!pb->has_sig)
            return fail(p, r->capture.pos, "%s needs a signature to know the types", kname);
        char buf[RAW_MAX];
        snprintf(buf, sizeof buf, "%s", r->capture.v);
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            while (isspace((unsigned char)*t))
                t++;
            char *end = t + strlen(t);
            while (end > t && isspace((unsigned char)end[-1]))
                *--end = 0;
            at_hc_pos pos = {r->capture.pos.line, r->capture.pos.col + (int)(t - buf)};
            if (!*t)
                return fail(p, pos, "%s: expected a parameter name between commas", kname);
            if (pb->ncapture >= AT_HC_MAX_CAPTURE)
                return fail(p, pos, "%s: at most %d values", kname, AT_HC_MAX_CAPTURE);
            int idx;
            if (arg_ref(p, pb, t, pos, true, kname, &idx) < 0)
                return -1;
            pb->capture[pb->ncapture++] = idx;
        }
    }
    snprintf(kname, sizeof kname, "%s%skey", pre, *pre ? "_" : "");
    if (r->key.set) {
        if (!pb->has_sig)
            return fail(p, r->key.pos, "%s needs a signature to know the types", kname);
        if (arg_ref(p, pb, r->key.v, r->key.pos, true, kname, &pb->key) < 0)
            return -1;
        at_ctype t = pb->key == AT_HC_RETURN ? pb->sig.ret : pb->sig.p[pb->key].type;
        if (!is_integer(t))
            return fail(p, r->key.pos, "%s: '%s' is a %s; a key must be an integer or a pointer",
                        kname, r->key.v, at_ctype_name(t));
    }
    snprintf(kname, sizeof kname, "%s%swhen", pre, *pre ? "_" : "");
    if (r->when.set) {
        if (!pb->has_sig)
            return fail(p, r->when.pos, "%s needs a signature to know the types", kname);
        char what[RAW_MAX], op[4] = "";
        const char *v = r->when.v;
        int n = 0;
        while (isalnum((unsigned char)v[n]) || v[n] == '_')
            n++;
        snprintf(what, sizeof what, "%.*s", n, v);
        const char *q = v + n;
        while (isspace((unsigned char)*q))
            q++;
        int opcol = (int)(q - v);
        static const struct {
            const char *s;
            at_hc_op op;
        } ops[] = {{">=", AT_HC_GE}, {"<=", AT_HC_LE}, {"==", AT_HC_EQ}, {"!=", AT_HC_NE},
                   {">", AT_HC_GT},  {"<", AT_HC_LT}};
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
            if (!strncmp(q, ops[k].s, strlen(ops[k].s))) {
                pb->when_op = ops[k].op;
                snprintf(op, sizeof op, "%s", ops[k].s);
                break;
            }
        if (!n || !pb->when_op) {
            at_hc_pos pos = {r->when.pos.line, r->when.pos.col + (n ? opcol : 0)};
            return fail(p, pos, "%s: expected 'NAME OP NUMBER' (OP one of == != < <= > >=), "
                                "such as 'return >= 0'", kname);
        }
        at_hc_pos wpos = r->when.pos;
        if (arg_ref(p, pb, what, wpos, true, kname, &pb->when_what) < 0)
            return -1;
        at_ctype t = pb->when_what == AT_HC_RETURN ? pb->sig.ret : pb->sig.p[pb->when_what].type;
        if (!is_integer(t))
            return fail(p, wpos, "%s: '%s' is a %s; a condition compares integers", kname, what,
                        at_ctype_name(t));
        q += strlen(op);
        while (isspace((unsigned char)*q))
            q++;
        char *end;
        errno = 0;
        long long x = strtoll(q, &end, 0);
        at_hc_pos npos = {wpos.line, wpos.col + (int)(q - v)};
        if (errno || end == q || *end)
            return fail(p, npos, "%s: expected an integer after '%s'", kname, op);
        pb->when_value = x;
        pb->has_when = true;
    }
    return 0;
}

static int section_finish(parser *p)
{
    at_hc_entry *e = p->e;
    if (!e)
        return 0;
    probe_raw *r = p->pr;
    switch (e->kind) {
    case AT_HC_ACTIVITY:
        if (e->paired) {
            if (!r[0].symbol.set)
                return fail(p, e->pos, "[activity %s]: 'stop' without 'start'", e->name);
            if (!r[1].symbol.set)
                return fail(p, e->pos, "[activity %s]: 'start' without 'stop'", e->name);
        } else if (!r[0].symbol.set)
            return fail(p, e->pos, "[activity %s]: expected 'function = NAME' or 'start = NAME' "
                                   "and 'stop = NAME'", e->name);
        break;
    case AT_HC_EVENT:
        if (!r[0].symbol.set)
            return fail(p, e->pos, "[event %s]: expected 'function = NAME'", e->name);
        break;
    case AT_HC_FLOW_CALLBACK:
    case AT_HC_FLOW_KEYED:
        break;
    }
    if (e->kind == AT_HC_FLOW_CALLBACK || e->kind == AT_HC_FLOW_KEYED) {
        if (!p->type.set)
            return fail(p, e->pos, "[flow %s]: expected 'type = callback' or 'type = keyed'",
                        e->name);
    }
    int nprobes = (e->paired || e->kind == AT_HC_FLOW_KEYED) ? 2 : 1;
    for (int i = 0; i < nprobes; i++)
        if (probe_finish(p, e, i) < 0)
            return -1;
    if (e->kind == AT_HC_ACTIVITY && e->paired) {
        if (e->probe[0].key == AT_HC_NONE)
            return fail(p, e->pos, "[activity %s]: a start/stop pair needs 'start_key' and "
                                   "'stop_key' (the value that pairs them)", e->name);
        if (e->probe[1].key == AT_HC_NONE)
            return fail(p, e->pos, "[activity %s]: expected 'stop_key'", e->name);
        if (e->probe[1].key == AT_HC_RETURN)
            return fail(p, p->pr[1].key.pos, "stop_key: the Stop is written on entry; expected "
                                             "an argument of %s", e->probe[1].sig.fname);
        if (e->probe[1].has_when && e->probe[1].when_what == AT_HC_RETURN)
            return fail(p, p->pr[1].when.pos, "stop_when: the Stop is written on entry, before "
                                              "the return value exists; test an argument");
        for (int i = 0; i < e->probe[1].ncapture; i++)
            if (e->probe[1].capture[i] == AT_HC_RETURN)
                return fail(p, p->pr[1].capture.pos, "stop_capture: the Stop is written on entry, "
                                                     "before the return value exists");
    }
    if (e->kind == AT_HC_ACTIVITY && e->fd_key) {
        if (!e->paired)
            return fail(p, p->fd_key_pos, "fd_key belongs to a start/stop pair");
        at_ctype kt = e->probe[0].key == AT_HC_RETURN ? e->probe[0].sig.ret
                                                       : e->probe[0].sig.p[e->probe[0].key].type;
        if (kt != AT_CT_I32)
            return fail(p, p->fd_key_pos, "fd_key: the start key is a %s; a file descriptor is an "
                                          "int", at_ctype_name(kt));
    }
    if (e->kind == AT_HC_ACTIVITY && !e->paired) {
        if (e->probe[0].key != AT_HC_NONE)
            return fail(p, r[0].key.pos, "'key' pairs a start/stop activity; this one has "
                                         "'function'");
        if (e->probe[0].has_when && e->probe[0].when_what == AT_HC_RETURN)
            return fail(p, r[0].when.pos, "when: the Start is written on entry, before the "
                                          "return value exists; test an argument");
    }
    if (e->kind == AT_HC_FLOW_KEYED) {
        if (!r[0].symbol.set || !r[1].symbol.set)
            return fail(p, e->pos, "[flow %s]: a keyed flow needs 'enqueue' and 'dequeue'",
                        e->name);
        if (e->probe[0].key == AT_HC_NONE || e->probe[1].key == AT_HC_NONE)
            return fail(p, e->pos, "[flow %s]: expected 'enqueue_key' and 'dequeue_key' (the "
                                   "item handed over)", e->name);
    }
    if (e->kind == AT_HC_FLOW_CALLBACK) {
        if (!r[0].symbol.set)
            return fail(p, e->pos, "[flow %s]: a callback flow needs 'function'", e->name);
        if (!e->probe[0].has_sig)
            return fail(p, e->pos, "[flow %s]: a callback flow needs 'signature'", e->name);
        if (!p->callback.set)
            return fail(p, e->pos, "[flow %s]: expected 'callback = ARGUMENT' (the function "
                                   "pointer argument)", e->name);
        if (arg_ref(p, &e->probe[0], p->callback.v, p->callback.pos, false, "callback",
                    &e->callback) < 0)
            return -1;
        if (e->probe[0].sig.p[e->callback].type != AT_CT_PTR)
            return fail(p, p->callback.pos, "callback: '%s' is not a pointer", p->callback.v);
        e->callback_arg = AT_HC_NONE;
        if (!p->callback_arg.set)
            return fail(p, e->pos, "[flow %s]: expected 'callback_arg = ARGUMENT' (the argument "
                                   "the callback receives: the shim passes its own in its place)",
                        e->name);
        if (arg_ref(p, &e->probe[0], p->callback_arg.v, p->callback_arg.pos, false,
                    "callback_arg", &e->callback_arg) < 0)
            return -1;
        if (e->probe[0].sig.p[e->callback_arg].type != AT_CT_PTR &&
            e->probe[0].sig.p[e->callback_arg].type != AT_CT_U64 &&
            e->probe[0].sig.p[e->callback_arg].type != AT_CT_I64)
            return fail(p, p->callback_arg.pos, "callback_arg: '%s' is not pointer-sized",
                        p->callback_arg.v);
    }
    return 0;
}

static int section_open(parser *p, char *name, at_hc_pos pos)
{
    if (section_finish(p) < 0)
        return -1;
    p->e = NULL;
    p->in_trace = false;
    memset(p->pr, 0, sizeof p->pr);
    memset(&p->type, 0, sizeof p->type);
    memset(&p->callback, 0, sizeof p->callback);
    memset(&p->callback_arg, 0, sizeof p->callback_arg);
    memset(&p->fd_key_pos, 0, sizeof p->fd_key_pos);
    char *sp = name + strcspn(name, " \t");
    char *arg = sp;
    while (isspace((unsigned char)*arg))
        arg++;
    *sp = 0;
    if (!strcmp(name, "trace")) {
        if (*arg)
            return fail(p, pos, "[trace] takes no name");
        p->in_trace = true;
        return 0;
    }
    at_hc_kind k;
    if (!strcmp(name, "activity"))
        k = AT_HC_ACTIVITY;
    else if (!strcmp(name, "event"))
        k = AT_HC_EVENT;
    else if (!strcmp(name, "flow"))
        k = AT_HC_FLOW_CALLBACK; /* 'type' decides */
    else
        return fail(p, pos, "unknown section [%s]; expected [trace], [activity NAME], "
                            "[event NAME] or [flow NAME]", name);
    at_hc_pos apos = {pos.line, pos.col + (int)(arg - name)};
    if (!*arg)
        return fail(p, apos, "[%s] needs a name, such as [%s Request]", name, name);
    for (const char *s = arg; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_')
            return fail(p, apos, "'%s': a name is letters, digits and '_' (it becomes the event "
                                 "name)", arg);
    if (strlen(arg) >= AT_HC_NAME_MAX - 8)
        return fail(p, apos, "name longer than %d characters", AT_HC_NAME_MAX - 9);
    for (int i = 0; i < p->c->nentries; i++)
        if (!strcmp(p->c->entries[i].name, arg))
            return fail(p, apos, "'%s' is already defined at line %d", arg,
                        p->c->entries[i].pos.line);
    at_hc_entry *ne = realloc(p->c->entries, sizeof *ne * (size_t)(p->c->nentries + 1));
    if (!ne)
        return fail(p, pos, "out of memory");
    p->c->entries = ne;
    at_hc_entry *e = &ne[p->c->nentries++];
    memset(e, 0, sizeof *e);
    e->kind = k;
    /* a configured activity nests: a function's calls are nested by construction, and a pair's
     * Start never means an earlier one ended (each is stopped by its own key) */
    e->recursive = k == AT_HC_ACTIVITY;
    e->pos = pos;
    snprintf(e->name, sizeof e->name, "%s", arg);
    p->e = e;
    return 0;
}

static int set_raw(parser *p, raw *r, const char *key, const char *v, at_hc_pos kpos, at_hc_pos vpos)
{
    if (r->set)
        return fail(p, kpos, "'%s' given twice (first at line %d)", key, r->pos.line);
    if (strlen(v) >= RAW_MAX)
        return fail(p, vpos, "value longer than %d characters", RAW_MAX - 1);
    snprintf(r->v, sizeof r->v, "%s", v);
    r->pos = vpos;
    r->set = true;
    return 0;
}

static int trace_key(parser *p, const char *key, const char *v, at_hc_pos kpos, at_hc_pos vpos)
{
    at_hookconf *c = p->c;
    raw r = {.pos = vpos, .set = true};
    snprintf(r.v, sizeof r.v, "%s", v);
    uint64_t x;
    if (!strcmp(key, "provider")) {
        if (!*v || strlen(v) >= sizeof c->provider)
            return fail(p, vpos, "expected a provider name of 1 to %zu characters",
                        sizeof c->provider - 1);
        snprintf(c->provider, sizeof c->provider, "%s", v);
    } else if (!strcmp(key, "output")) {
        if (!*v || strlen(v) >= sizeof c->output)
            return fail(p, vpos, "expected a path");
        snprintf(c->output, sizeof c->output, "%s", v);
    } else if (!strcmp(key, "mode")) {
        char word[32] = "";
        int n = 0;
        sscanf(v, "%31s %n", word, &n);
        if (!strcmp(word, "file") && !v[n])
            c->mode = 1;
        else if ((!strcmp(word, "rotate") || !strcmp(word, "circular")) && v[n]) {
            raw s = {.pos = {vpos.line, vpos.col + n}, .set = true};
            snprintf(s.v, sizeof s.v, "%s", v + n);
            if (parse_size(p, &s, &c->mode_size) < 0)
                return -1;
            c->mode = word[0] == 'r' ? 2 : 3;
        } else
            return fail(p, vpos, "'%s': expected file, rotate SIZE or circular SIZE", v);
    } else if (!strcmp(key, "buffer")) {
        if (parse_size(p, &r, &c->buffer_bytes) < 0)
            return -1;
    } else if (!strcmp(key, "flush_ms")) {
        if (parse_u64(p, &r, 3600000, &x) < 0)
            return -1;
        c->flush_ms = (unsigned)x;
    } else if (!strcmp(key, "clock")) {
        static const char *const kinds[] = {"auto", "monotonic", "tsc"};
        c->clock = 0;
        for (int i = 0; i < 3; i++)
            if (!strcmp(v, kinds[i]))
                c->clock = i + 1;
        if (!c->clock)
            return fail(p, vpos, "'%s': expected auto, monotonic or tsc", v);
    } else if (!strcmp(key, "symbols")) {
        static const char *const kinds[] = {"off", "on", "methods"};
        c->symbols = 0;
        for (int i = 0; i < 3; i++)
            if (!strcmp(v, kinds[i]))
                c->symbols = i + 1;
        if (!c->symbols)
            return fail(p, vpos, "'%s': expected on, off or methods", v);
    } else if (!strcmp(key, "file_mode")) {
        if (at_config_parse_file_mode(v, &c->file_mode) != 0 || c->file_mode == 0)
            return fail(p, vpos, "'%s': expected octal permissions such as 0600 or 0640", v);
    } else if (!strcmp(key, "sample_hz")) {
        if (parse_u64(p, &r, AT_SAMPLE_HZ_MAX, &x) < 0)
            return -1;
        c->sample_hz = (int)x;
    } else if (!strcmp(key, "waits")) {
        bool b;
        if (parse_bool(p, &r, &b) < 0)
            return -1;
        c->waits = b;
    } else if (!strcmp(key, "traceparent")) {
        bool b;
        if (parse_bool(p, &r, &b) < 0)
            return -1;
        c->traceparent = b;
    } else if (!strcmp(key, "exchanges")) {
        bool b;
        if (parse_bool(p, &r, &b) < 0)
            return -1;
        c->exchanges = b;
    } else if (!strcmp(key, "traceparent_inject")) {
        bool b;
        if (parse_bool(p, &r, &b) < 0)
            return -1;
        c->traceparent_inject = b;
    } else if (!strcmp(key, "tasks")) {
        if (!strcmp(v, "auto"))
            c->tasks = 2;
        else if (!strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "on") || !strcmp(v, "1"))
            c->tasks = 1;
        else if (!strcmp(v, "no") || !strcmp(v, "false") || !strcmp(v, "off") || !strcmp(v, "0"))
            c->tasks = 0;
        else
            return fail(p, vpos, "'%s': expected on, off or auto", v);
    } else if (!strcmp(key, "wait_min_us")) {
        if (parse_u64(p, &r, AT_WAIT_MIN_US_MAX, &x) < 0)
            return -1;
        c->wait_min_us = (long)x;
    } else if (!strcmp(key, "level")) {
        uint8_t l;
        if (parse_level(p, &r, &l) < 0)
            return -1;
        c->level = l;
    } else if (!strcmp(key, "keywords")) {
        if (parse_u64(p, &r, UINT64_MAX, &c->keywords) < 0)
            return -1;
        c->has_keywords = true;
    } else
        return fail(p, kpos, "unknown key '%s' in [trace]; expected provider, output, mode, "
                             "buffer, flush_ms, clock, symbols, file_mode, sample_hz, waits, wait_min_us, level or "
                             "keywords", key);
    return 0;
}

static int entry_key(parser *p, const char *key, const char *v, at_hc_pos kpos, at_hc_pos vpos)
{
    at_hc_entry *e = p->e;
    raw r = {.pos = vpos, .set = true};
    snprintf(r.v, sizeof r.v, "%s", v);
    bool act = e->kind == AT_HC_ACTIVITY, ev = e->kind == AT_HC_EVENT, flow = !act && !ev;
    if (flow && !p->type.set && strcmp(key, "type"))
        return fail(p, kpos, "'type = callback' or 'type = keyed' must come first in a [flow] "
                             "section");
    /* role prefix: start_/stop_ (activity pairs), enqueue_/dequeue_ (keyed flows) */
    int role = -1;
    const char *attr = key;
    static const struct {
        const char *pre;
        int role;
        bool flow;
    } roles[] = {{"start", 0, false}, {"stop", 1, false}, {"enqueue", 0, true}, {"dequeue", 1, true}};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
        size_t n = strlen(roles[i].pre);
        if (!strncmp(key, roles[i].pre, n) && (key[n] == 0 || key[n] == '_') &&
            (roles[i].flow ? flow : act)) {
            role = roles[i].role;
            attr = key[n] ? key + n + 1 : "";
        }
    }
    if (role >= 0) {
        if (flow && strcmp(p->type.v, "keyed"))
            return fail(p, kpos, "'%s' belongs to a keyed flow; set 'type = keyed' first", key);
        if (act && !e->paired && p->pr[0].symbol.set)
            return fail(p, kpos, "an activity has either 'function' or 'start' and 'stop', not "
                                 "both");
        if (act)
            e->paired = true;
    }
    probe_raw *pr = &p->pr[role >= 0 ? role : 0];
    if (!*attr && role >= 0) {
        if (check_symbol(p, &r) < 0)
            return -1;
        return set_raw(p, &pr->symbol, key, v, kpos, vpos);
    }
    if (role < 0 && !strcmp(key, "function") && !(flow && !strcmp(p->type.v, "keyed"))) {
        if (act && e->paired)
            return fail(p, kpos, "an activity has either 'function' or 'start' and 'stop', not "
                                 "both");
        if (check_symbol(p, &r) < 0)
            return -1;
        return set_raw(p, &pr->symbol, key, v, kpos, vpos);
    }
    if (!strcmp(attr, "signature"))
        return set_raw(p, &pr->sig, key, v, kpos, vpos);
    if (!strcmp(attr, "capture") && !(flow && role < 0))
        return set_raw(p, &pr->capture, key, v, kpos, vpos);
    if (!strcmp(attr, "key") && (role >= 0))
        return set_raw(p, &pr->key, key, v, kpos, vpos);
    if (!strcmp(attr, "when") && !flow)
        return set_raw(p, &pr->when, key, v, kpos, vpos);
    if (!strcmp(attr, "max_string") && !flow) {
        uint64_t x;
        if (parse_u64(p, &r, 65535, &x) < 0)
            return -1;
        e->probe[role >= 0 ? role : 0].max_string = (unsigned)x;
        return 0;
    }
    if (role < 0 && act && !strcmp(key, "fd_key")) {
        if (parse_bool(p, &r, &e->fd_key) < 0)
            return -1;
        p->fd_key_pos = kpos;
        return 0;
    }
    if (role < 0 && !strcmp(key, "tier")) {
        if (!strcmp(v, "auto"))
            e->tier = AT_HC_TIER_AUTO;
        else if (!strcmp(v, "got"))
            e->tier = AT_HC_TIER_GOT;
        else if (!strcmp(v, "entry"))
            e->tier = AT_HC_TIER_ENTRY;
        else
            return fail(p, vpos, "'%s': expected auto, got or entry", v);
        return 0;
    }
    if (role < 0 && !strcmp(key, "build_id")) {
        size_t len = strlen(v);
        if (len < 8 || len >= sizeof e->build_id || strspn(v, "0123456789abcdef") != len)
            return fail(p, vpos, "'%s': expected the module's build-id in lower-case hexadecimal "
                                 "(as 'acttrace check' or 'file' prints it)", v);
        snprintf(e->build_id, sizeof e->build_id, "%s", v);
        e->build_id_pos = vpos;
        return 0;
    }
    if (role < 0 && !flow) {
        if (!strcmp(key, "recursive") && act)
            return parse_bool(p, &r, &e->recursive);
        if (!strcmp(key, "stacks")) {
            e->stacks_set = true;
            return parse_stacks(p, &r, &e->stacks);
        }
        if (!strcmp(key, "level"))
            return parse_level(p, &r, &e->level);
        if (!strcmp(key, "keywords"))
            return parse_u64(p, &r, UINT64_MAX, &e->keywords);
    }
    if (flow && role < 0) {
        if (!strcmp(key, "type")) {
            if (strcmp(v, "callback") && strcmp(v, "keyed"))
                return fail(p, vpos, "'%s': expected callback or keyed", v);
            if (p->pr[0].symbol.set || p->pr[1].symbol.set)
                return fail(p, kpos, "'type' must come first in a [flow] section");
            e->kind = !strcmp(v, "keyed") ? AT_HC_FLOW_KEYED : AT_HC_FLOW_CALLBACK;
            return set_raw(p, &p->type, key, v, kpos, vpos);
        }
        if (!p->type.set)
            return fail(p, kpos, "'type = callback' or 'type = keyed' must come first in a "
                                 "[flow] section");
        if (e->kind == AT_HC_FLOW_CALLBACK && !strcmp(key, "callback"))
            return set_raw(p, &p->callback, key, v, kpos, vpos);
        if (e->kind == AT_HC_FLOW_CALLBACK && !strcmp(key, "callback_arg"))
            return set_raw(p, &p->callback_arg, key, v, kpos, vpos);
    }
    const char *expect =
        act ? (e->paired ? "start, stop, start_signature, start_capture, start_key, start_when, "
                           "stop_signature, stop_capture, stop_key, stop_when, recursive, stacks, "
                           "level, keywords, tier, fd_key"
                         : "function, signature, capture, when, recursive, stacks, level, keywords, "
                           "max_string, tier, build_id (or start/stop pairs)")
        : ev ? "function, signature, capture, when, stacks, level, keywords, max_string, tier, "
               "build_id"
        : e->kind == AT_HC_FLOW_KEYED
            ? "enqueue, enqueue_signature, enqueue_key, dequeue, dequeue_signature, dequeue_key"
            : "type, function, signature, callback, callback_arg";
    return fail(p, kpos, "unknown key '%s' in [%s %s]; expected %s", key,
                act ? "activity" : ev ? "event" : "flow", e->name, expect);
}

static int parse_line(parser *p, char *line, int lineno)
{
    /* strip an inline comment: '#' or ';' at the start or after whitespace */
    for (char *s = line; *s; s++)
        if ((*s == '#' || *s == ';') && (s == line || isspace((unsigned char)s[-1]))) {
            *s = 0;
            break;
        }
    char *s = line;
    while (isspace((unsigned char)*s))
        s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = 0;
    if (!*s)
        return 0;
    at_hc_pos pos = {lineno, (int)(s - line) + 1};
    if (*s == '[') {
        if (end[-1] != ']') {
            at_hc_pos epos = {lineno, (int)(end - line) + 1};
            return fail(p, epos, "expected ']' at the end of the section header");
        }
        end[-1] = 0;
        char *name = s + 1;
        while (isspace((unsigned char)*name))
            name++;
        char *ne = name + strlen(name);
        while (ne > name && isspace((unsigned char)ne[-1]))
            *--ne = 0;
        at_hc_pos npos = {lineno, (int)(name - line) + 1};
        return section_open(p, name, npos);
    }
    char *eq = strchr(s, '=');
    if (!eq)
        return fail(p, pos, "expected 'key = value', a [section] or a comment");
    char *k_end = eq;
    while (k_end > s && isspace((unsigned char)k_end[-1]))
        k_end--;
    *k_end = 0;
    for (char *q = s; *q; q++)
        if (!isalnum((unsigned char)*q) && *q != '_') {
            at_hc_pos qpos = {lineno, (int)(q - line) + 1};
            return fail(p, qpos, "expected a key (letters, digits and '_') before '='");
        }
    if (!*s)
        return fail(p, pos, "expected a key before '='");
    char *v = eq + 1;
    while (isspace((unsigned char)*v))
        v++;
    at_hc_pos vpos = {lineno, (int)(v - line) + 1};
    if (!*v)
        return fail(p, vpos, "'%s' has no value", s);
    if (p->in_trace)
        return trace_key(p, s, v, pos, vpos);
    if (!p->e)
        return fail(p, pos, "'%s' outside a section; expected [trace], [activity NAME], "
                            "[event NAME] or [flow NAME] first", s);
    return entry_key(p, s, v, pos, vpos);
}

int at_hookconf_parse(const char *path, const char *text, at_hookconf *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    c->level = -1;
    c->sample_hz = -1;
    c->waits = -1;
    c->tasks = -1;
    c->traceparent = -1;
    c->traceparent_inject = -1;
    c->exchanges = -1;
    c->wait_min_us = -1;
    parser *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    p->path = path;
    p->err = err;
    p->errlen = errlen;
    p->c = c;
    err[0] = 0;
    int rc = 0, lineno = 0;
    size_t cap = 256;
    char *line = malloc(cap);
    const char *t = text;
    while (rc == 0 && line && *t) {
        lineno++;
        size_t n = strcspn(t, "\n");
        if (n + 1 > cap) {
            char *nl = realloc(line, n + 1);
            if (!nl)
                break;
            line = nl;
            cap = n + 1;
        }
        memcpy(line, t, n);
        line[n] = 0;
        if (n && line[n - 1] == '\r')
            line[n - 1] = 0;
        if (lineno == 1 && !strncmp(line, "\xEF\xBB\xBF", 3))
            memmove(line, line + 3, strlen(line + 3) + 1);
        rc = parse_line(p, line, lineno);
        t += n + (t[n] == '\n');
    }
    if (!line) {
        snprintf(err, errlen, "%s: out of memory", path);
        rc = -1;
    }
    if (rc == 0)
        rc = section_finish(p);
    free(line);
    free(p);
    if (rc != 0)
        at_hookconf_free(c);
    return rc;
}

int at_hookconf_load(const char *path, at_hookconf *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len - 1 == 0) {
            char *nb = cap < (16u << 20) ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        snprintf(err, errlen, "%s: cannot read (or larger than 16 MB)", path);
        return -1;
    }
    buf[len] = 0;
    if (memchr(buf, 0, len)) {
        free(buf);
        snprintf(err, errlen, "%s: not a text file (contains NUL bytes)", path);
        return -1;
    }
    int rc = at_hookconf_parse(path, buf, c, err, errlen);
    free(buf);
    return rc;
}

void at_hookconf_free(at_hookconf *c)
{
    free(c->entries);
    c->entries = NULL;
    c->nentries = 0;
}
