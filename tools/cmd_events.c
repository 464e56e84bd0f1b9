/* cmd_events.c: `acttrace events FILE...`: PerfView's Events view in a terminal: one line per event
 * in time order (several files merge by time) with time, thread, provider/event, activity path,
 * related activity, the duration on Stops and the payload; filters by event name, activity path
 * prefix, thread and time range. Streams: memory holds only the activities still open. */
#include "actmodel.h"
#include "cliopt.h"
#include "cmds.h"
#include "ntsym.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ev_ctx {
    am_buf out;
    const char *name, *prefix;
    uint64_t tid;
    bool has_tid, has_from, has_to, multi;
    int64_t from, to;
    uint64_t printed;
    /* until an event is printed: which filters some event passed, each on its own */
    bool seen_time, seen_tid, seen_name, seen_prefix;
    char **labels;      /* by metadata id (of the file whose metadata label_meta holds) */
    const nt_metadata **label_meta;
    uint16_t *label_len;
    uint32_t nlabels;
    char buf[16384];
    /* the last paths formatted (activity, parent), by serial: events of one activity come in runs */
    uint64_t path_serial[2];
    char path[2][AM_PATH_MAX];
} ev_ctx;

static const char *cached_path(ev_ctx *c, int k, const am_activity *a)
{
    if (c->path_serial[k] != a->serial) {
        am_act_path(a, c->path[k], sizeof c->path[k]);
        c->path_serial[k] = a->serial;
    }
    return c->path[k];
}

static void events_usage(FILE *f)
{
    fprintf(f, "usage: acttrace events [options] FILE...\n"
               "  Lists every event in time order (several files are merged by time):\n"
               "  TIME_MSEC THREAD PROVIDER/EVENT ACTIVITY RELATED [DURATION=] PAYLOAD\n"
               "  A Stop's DURATION shows in us below 1 ms, in ms below 1 s, else in s.\n"
               "  --name NAME      only events named NAME, or NAMEStart/NAMEStop\n"
               "  --activity PATH  only events whose activity is PATH or below it (//1/5, or a GUID)\n"
               "  --thread TID     only events of that thread\n"
               "  --from MS --to MS  only events in that time range (ms from the trace start)\n"
               "  Filters that match nothing together say so on stderr (exit 1).\n");
    at_cli_exit_codes(f);
}

/* Event name NAME, or NAMEStart / NAMEStop. */
static bool name_matches(const char *ev, const char *name)
{
    size_t l = strlen(name);
    if (strncmp(ev, name, l) != 0) return false;
    return ev[l] == 0 || strcmp(ev + l, "Start") == 0 || strcmp(ev + l, "Stop") == 0;
}

/* A UTF-16 string of printable ASCII without quotes or backslashes, written as nt_field_format would
 * ("=" and the quoted text) without its per-character work; false (nothing written) otherwise. */
static bool ascii_string(am_buf *f, const uint8_t *pl, uint32_t len, uint32_t *off)
{
    char t[1024];
    uint32_t p = *off, k = 0;
    for (;;) {
        if (len < p || len - p < 2 || k == sizeof t) return false;
        uint16_t c = (uint16_t)(pl[p] | pl[p + 1] << 8);
        p += 2;
        if (c == 0) break;
        if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') return false;
        t[k++] = (char)c;
    }
    am_buf_mem(f, "=\"", 2);
    am_buf_mem(f, t, k);
    am_buf_chr(f, '"');
    *off = p;
    return true;
}

/* An event the filters pass; the activity's path into *act (cached or into actb) on the way. Until
 * an event passed them all, every filter is tried on its own too, for the message when none does. */
static bool selected(ev_ctx *c, const am_event *e, const char **act, char *actb, size_t actn)
{
    const nt_event *ev = e->ev;
    bool all = !c->printed;
    bool time_ok = e->time >= c->from && e->time <= c->to;
    if (!time_ok && !all) return false;
    bool tid_ok = !c->has_tid || ev->thread == c->tid;
    if (!tid_ok && !all) return false;
    bool name_ok = !c->name || name_matches(ev->meta->name, c->name);
    if (!name_ok && !all) return false;
    /* the model already decoded the ids of its activities: reuse them (decoding was a fifth of the time) */
    if (e->act && at_guid_eq(&e->act->id, &ev->activity)) *act = cached_path(c, 0, e->act);
    else {
        am_format_id(&ev->activity, e->pid, actb, actn);
        *act = actb;
    }
    bool prefix_ok = !c->prefix || am_path_within(*act, c->prefix);
    if (all) {
        c->seen_time |= time_ok;
        c->seen_tid |= tid_ok;
        c->seen_name |= name_ok;
        c->seen_prefix |= prefix_ok;
    }
    return time_ok && tid_ok && name_ok && prefix_ok;
}

static void on_event(void *vc, const am_event *e)
{
    ev_ctx *c = vc;
    const nt_event *ev = e->ev;
    const nt_metadata *m = ev->meta;
    if (nt_sym_is_symbol_event(ev)) return;
    char actb[80], relb[80];
    const char *act = actb, *rel = relb;
    if (!selected(c, e, &act, actb, sizeof actb)) return;
    c->printed++;
    if (e->act && e->act->parent && at_guid_eq(&e->act->parent->id, &ev->related)) rel = cached_path(c, 1, e->act->parent);
    else am_format_id(&ev->related, e->pid, relb, sizeof relb);
    am_buf *f = &c->out;
    am_buf_ms(f, e->time, 12);
    am_buf_str(f, "  ");
    if (c->multi) {
        am_buf_str(f, "pid ");
        am_buf_u64(f, e->pid);
        am_buf_str(f, "  ");
    }
    am_buf_u64(f, ev->thread);
    am_buf_str(f, "  ");
    /* "provider/name  " built once per metadata id */
    if (m->id >= c->nlabels || c->label_meta[m->id] != m) {
        if (m->id >= c->nlabels) {
            uint32_t n = m->id + 64;
            char **l = realloc(c->labels, n * sizeof *l);
            if (l) c->labels = l;
            uint16_t *ll = realloc(c->label_len, n * sizeof *ll);
            if (ll) c->label_len = ll;
            const nt_metadata **lm = realloc(c->label_meta, n * sizeof *lm);
            if (lm) c->label_meta = lm;
            if (!l || !ll || !lm) return;
            memset(c->labels + c->nlabels, 0, (n - c->nlabels) * sizeof *l);
            memset(c->label_meta + c->nlabels, 0, (n - c->nlabels) * sizeof *lm);
            c->nlabels = n;
        }
        free(c->labels[m->id]); /* another file's metadata of the same id */
        c->label_meta[m->id] = m;
        if (asprintf(&c->labels[m->id], "%.200s/%.200s  ", m->provider, m->name[0] ? m->name : "(unnamed)") < 0) {
            c->labels[m->id] = NULL;
            return;
        }
        c->label_len[m->id] = (uint16_t)strlen(c->labels[m->id]);
    }
    am_buf_mem(f, c->labels[m->id], c->label_len[m->id]);
    am_buf_str(f, act[0] ? act : "-");
    am_buf_str(f, "  ");
    am_buf_str(f, rel[0] ? rel : "-");
    if (e->stopped) {
        am_buf_str(f, "  DURATION=");
        am_buf_dur(f, e->stopped->stop - e->stopped->start, 0);
    }
    uint32_t off = 0;
    for (uint32_t i = 0; i < m->nfields; i++) {
        am_buf_str(f, "  ");
        am_buf_str(f, m->fields[i].name);
        uint32_t t = m->fields[i].type;
        if ((t == NT_TYPE_UINT64 || t == NT_TYPE_UINT32 || t == NT_TYPE_INT64 || t == NT_TYPE_INT32) &&
            off + (t == NT_TYPE_UINT64 || t == NT_TYPE_INT64 ? 8u : 4u) <= ev->payload_len) {
            /* integers without printf: the common payload of activity events */
            uint64_t v = 0;
            int64_t sv;
            am_buf_chr(f, '=');
            if (t == NT_TYPE_UINT64 || t == NT_TYPE_INT64) {
                memcpy(&v, ev->payload + off, 8);
                off += 8;
                sv = (int64_t)v;
            } else {
                uint32_t u;
                memcpy(&u, ev->payload + off, 4);
                off += 4;
                v = u;
                sv = (int32_t)u;
            }
            if ((t == NT_TYPE_INT64 || t == NT_TYPE_INT32) && sv < 0) {
                am_buf_chr(f, '-');
                v = (uint64_t)0 - (uint64_t)sv;
            }
            am_buf_u64(f, v);
            continue;
        }
        if (t == NT_TYPE_STRING && ascii_string(f, ev->payload, ev->payload_len, &off)) continue;
        if (!nt_field_format(&m->fields[i], ev->payload, ev->payload_len, &off, c->buf, sizeof c->buf)) {
            am_buf_str(f, "=<payload too short>");
            break;
        }
        am_buf_chr(f, '=');
        am_buf_str(f, c->buf);
    }
    am_buf_chr(f, '\n');
}

/* The activity filter's syntax: a path as the commands print it ("//1/5", "//1/5$300", with or
 * without a closing '/') or a GUID. */

/* Nothing printed: the filters that matched nothing, each named, or the set of them together. */
static void no_match(const ev_ctx *c, char *const *files, int nfiles)
{
    char in[600];
    at_cli_files_desc(files, nfiles, in, sizeof in);
    bool said = false;
    if (!c->seen_time) {
        char from[40] = "the start", to[40] = "the end";
        if (c->has_from) snprintf(from, sizeof from, "%g ms", (double)c->from / 1e6);
        if (c->has_to) snprintf(to, sizeof to, "%g ms", (double)c->to / 1e6);
        am_errorf("events", "no event between %s and %s in %s", from, to, in);
        said = true;
    }
    if (!c->seen_tid) {
        am_errorf("events", "no event on thread %llu in %s", (unsigned long long)c->tid, in);
        said = true;
    }
    if (!c->seen_name) {
        am_errorf("events", "no event named '%s' (or '%sStart', '%sStop') in %s", c->name, c->name, c->name, in);
        said = true;
    }
    if (!c->seen_prefix) {
        am_errorf("events", "no event in activity %s or below it in %s", c->prefix, in);
        said = true;
    }
    if (said) return;
    /* each filter matched some event, but no event matched them all */
    char both[1024];
    size_t k = 0;
    both[0] = 0;
    if (c->name) k += (size_t)snprintf(both + k, sizeof both - k, " --name %.200s", c->name);
    if (c->prefix) k += (size_t)snprintf(both + k, sizeof both - k, " --activity %.200s", c->prefix);
    if (c->has_tid) k += (size_t)snprintf(both + k, sizeof both - k, " --thread %llu", (unsigned long long)c->tid);
    if (c->has_from) k += (size_t)snprintf(both + k, sizeof both - k, " --from %g", (double)c->from / 1e6);
    if (c->has_to) snprintf(both + k, sizeof both - k, " --to %g", (double)c->to / 1e6);
    am_errorf("events", "no event matches%s together in %s", both, in);
}

int at_cmd_events(int argc, char **argv)
{
    enum { O_NAME = 256, O_ACTIVITY, O_THREAD, O_FROM, O_TO };
    static const struct option opts[] = {{"name", required_argument, NULL, O_NAME},
                                         {"activity", required_argument, NULL, O_ACTIVITY},
                                         {"thread", required_argument, NULL, O_THREAD},
                                         {"from", required_argument, NULL, O_FROM},
                                         {"to", required_argument, NULL, O_TO},
                                         {0}};
    ev_ctx *c = calloc(1, sizeof *c);
    int status = AT_EXIT_ERROR;
    if (!c) {
        fprintf(stderr, "acttrace events: out of memory\n");
        return AT_EXIT_ERROR;
    }
    c->out.f = stdout;
    c->from = INT64_MIN;
    c->to = INT64_MAX;
    at_cli cli;
    at_cli_init(&cli, "events", events_usage, "", opts, argc, argv);
    int o;
    while ((o = at_cli_next(&cli)) > 0) {
        switch (o) {
        case O_NAME: c->name = cli.arg; break;
        case O_ACTIVITY:
            c->prefix = cli.arg;
            at_cli_activity_path(&cli);
            break;
        case O_THREAD: c->has_tid = at_cli_u64(&cli, "a thread id (a number)", &c->tid); break;
        case O_FROM: c->has_from = at_cli_ms(&cli, true, &c->from); break;
        case O_TO: c->has_to = at_cli_ms(&cli, true, &c->to); break;
        }
    }
    int nfiles;
    char **files = at_cli_operands(&cli, &nfiles);
    if (o == AT_CLI_EXIT) {
        status = cli.status;
        goto out;
    }
    if (!nfiles) {
        status = at_cli_usage_error(&cli, "give at least one trace FILE");
        goto out;
    }
    if (c->from > c->to) {
        status = at_cli_usage_error(&cli, "--from %g is after --to %g", (double)c->from / 1e6, (double)c->to / 1e6);
        goto out;
    }
    if ((status = at_cli_check_inputs("events", files, nfiles))) goto out;
    c->multi = nfiles > 1;
    char err[600];
    am_options mo = {.progress = true, .need_events = true};
    am_callbacks cb = {.event = on_event, .ctx = c};
    am_model *m = am_open(files, nfiles, &mo, &cb, err, sizeof err);
    if (!m) {
        am_errorf("events", "%s", err);
        status = AT_EXIT_ERROR;
        goto out;
    }
    am_run(m, err, sizeof err);
    am_buf_flush(&c->out);
    fflush(stdout);
    status = am_report_damage(m, "events");
    if (!c->printed && (c->name || c->prefix || c->has_tid || c->has_from || c->has_to)) {
        no_match(c, files, nfiles);
        if (!status) status = AT_EXIT_ERROR;
    }
    am_close(m);
out:
    for (uint32_t i = 0; i < c->nlabels; i++) free(c->labels[i]);
    free(c->labels);
    free(c->label_len);
    free(c->label_meta);
    free(c);
    return status;
}
