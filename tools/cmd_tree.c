/* cmd_tree.c: `acttrace tree FILE...`: the activity tree (PerfView's StartStopTree): per activity its
 * name, path, start, duration, the threads it visited with the transfers between them, and its
 * children, indented. Several files (a process and its forked/executed children) merge into one tree
 * through their cross-process links. A tree is printed as soon as its root and every descendant have
 * finished, so memory holds open activities and the finished parts of unfinished trees. */
#include "actmodel.h"
#include "cliopt.h"
#include "cmds.h"
#include "actpath.h"
#include "guid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tree_ctx {
    am_buf out;
    const char *name;
    int64_t min_dur;
    bool multi;
    uint64_t printed;
    uint64_t hold;
    bool has_min;
    bool name_seen, long_seen; /* an activity of that name, one lasting at least min_dur */
    uint64_t tid;               /* --thread: activities that ran on it */
    bool has_tid, tid_seen;
    const char *prefix;         /* --activity: that activity and the ones below it */
    bool prefix_seen;
    uint64_t shown[1024]; /* serials of the open ancestors whose "(running)" lines were printed last */
    int nshown;
    bool tsv;
} tree_ctx;

static void tree_usage(FILE *f)
{
    fprintf(f, "usage: acttrace tree [--name NAME] [--min-ms MS] [--thread TID] [--activity PATH] [--hold N]\n"
               "       [--tsv] FILE...\n"
               "  Prints the activity tree: name, path, start (ms from the trace start), duration, threads\n"
               "  visited and the transfers between them (from->to@ms), children indented below their\n"
               "  parent. Durations show in us below 1 ms, in ms below 1 s, else in s. Activities never\n"
               "  stopped show as such. Several files (parent and child processes) merge into one tree.\n"
               "  --name NAME   only activities named NAME (with their ancestors and descendants)\n"
               "  --min-ms MS   only activities lasting at least MS (with their ancestors)\n"
               "  --thread TID  only activities that ran on thread TID (with their ancestors)\n"
               "  --activity P  only the activity at path P (//1/5, or a GUID) and those below it (with\n"
               "                its ancestors)\n"
               "  --hold N      finished activities kept for ancestors still running (default %d); past\n"
               "                that they are printed early under a '(running)' line for the ancestors,\n"
               "                which keeps memory bounded under a long-lived root\n"
               "  --tsv         one line per activity for other programs, parents before children:\n"
               "                activity, serial, parent serial (0: a root), pid, start thread, stop thread\n"
               "                (0: never stopped), name, path, start and duration in ns from the trace\n"
               "                start (duration -1: never stopped), ActivityId, the path in PerfView's\n"
               "                notation; per Stop that stopped nothing: stop, pid, thread, event name,\n"
               "                time, ActivityId; per Start with a RelatedActivityId: related, serial,\n"
               "                RelatedActivityId. Tab-separated; every activity (no filter)\n"
               "  A filter that matches nothing says so on stderr (exit 1).\n", AM_HOLD_DEFAULT);
    at_cli_exit_codes(f);
}

static bool within_prefix(const tree_ctx *c, const am_activity *a)
{
    char path[AM_PATH_MAX];
    am_act_path(a, path, sizeof path);
    return am_path_within(path, c->prefix);
}

static bool node_matches(const tree_ctx *c, const am_activity *a)
{
    if (c->name && strcmp(a->name, c->name) != 0) return false;
    if (c->has_tid && am_visit_index(a, c->tid) < 0) return false;
    if (c->prefix && !within_prefix(c, a)) return false;
    return a->stop - a->start >= c->min_dur;
}

static bool subtree_matches(const tree_ctx *c, const am_activity *a)
{
    if (node_matches(c, a)) return true;
    for (const am_activity *k = a->first_child; k; k = k->next_sibling)
        if (subtree_matches(c, k)) return true;
    return false;
}

static void print_head(tree_ctx *c, const am_activity *a, int indent)
{
    am_buf *f = &c->out;
    for (int i = 0; i < indent; i++) am_buf_mem(f, "  ", 2);
    am_buf_str(f, a->name);
    am_buf_chr(f, ' ');
    char path[AM_PATH_MAX];
    am_act_path(a, path, sizeof path);
    am_buf_str(f, path);
    if (c->multi && (!a->parent || a->parent->file != a->file)) {
        am_buf_str(f, " pid ");
        am_buf_u64(f, a->pid);
    }
    am_buf_str(f, "  start ");
    am_buf_ms(f, a->start, 0);
}

static void print_node(tree_ctx *c, const am_activity *a, int indent, bool inside)
{
    bool self = node_matches(c, a);
    /* inside: an ancestor matched --name, so descendants show (still subject to --min-ms) */
    if (!(inside && a->stop - a->start >= c->min_dur) && !subtree_matches(c, a)) return;
    am_buf *f = &c->out;
    print_head(c, a, indent);
    am_buf_str(f, a->stopped ? "  duration " : "  NEVER STOPPED (open ");
    am_buf_dur(f, a->stop - a->start, 0);
    if (!a->stopped) am_buf_str(f, " at the end)");
    am_buf_str(f, "  threads ");
    for (uint32_t i = 0, n = am_nvisits(a); i < n; i++) {
        if (i) am_buf_chr(f, ',');
        am_buf_u64(f, am_visit_at(a, i).tid);
    }
    if (am_nxfers(a)) {
        am_buf_str(f, "  transfers ");
        for (uint32_t i = 0; i < am_nxfers(a); i++) {
            const am_transfer *x = am_xfer_at(a, i);
            if (i) am_buf_chr(f, ',');
            if (x->from_tid) am_buf_u64(f, x->from_tid);
            else am_buf_chr(f, '?');
            am_buf_str(f, "->");
            am_buf_u64(f, x->to_tid);
            am_buf_chr(f, '@');
            am_buf_ms(f, x->recv, 0);
        }
        if (am_xfers_dropped(a)) {
            am_buf_str(f, " (+");
            am_buf_u64(f, am_xfers_dropped(a));
            am_buf_str(f, " more)");
        }
    }
    char link[AM_LINK_MAX];
    if (am_act_link(a, link, sizeof link)) {
        am_buf_str(f, "  from ");
        am_buf_str(f, link);
    }
    am_buf_chr(f, '\n');
    c->printed++;
    for (const am_activity *k = a->first_child; k; k = k->next_sibling)
        print_node(c, k, indent + 1, inside || (self && c->name));
}

/* --tsv: every activity as the model pairs and links it (tests/compat compares it with TraceEvent's
 * StartStopActivityComputer). */
static void on_activity(void *vc, const am_activity *a)
{
    tree_ctx *c = vc;
    am_buf *f = &c->out;
    char path[AM_PATH_MAX];
    am_act_path(a, path, sizeof path);
    am_buf_str(f, "activity\t");
    am_buf_u64(f, a->serial);
    am_buf_chr(f, '\t');
    am_buf_u64(f, a->parent ? a->parent->serial : 0);
    am_buf_chr(f, '\t');
    am_buf_u64(f, a->pid);
    am_buf_chr(f, '\t');
    am_buf_u64(f, am_start_tid(a));
    am_buf_chr(f, '\t');
    am_buf_u64(f, am_stop_tid(a));
    am_buf_chr(f, '\t');
    am_buf_str(f, a->name);
    am_buf_chr(f, '\t');
    am_buf_str(f, path);
    am_buf_chr(f, '\t');
    if (a->start < 0) am_buf_chr(f, '-');
    am_buf_u64(f, a->start < 0 ? (uint64_t)0 - (uint64_t)a->start : (uint64_t)a->start);
    am_buf_chr(f, '\t');
    if (a->stopped) am_buf_u64(f, (uint64_t)(a->stop - a->start));
    else am_buf_str(f, "-1");
    char g[37];
    at_guid_format(&a->id, g);
    am_buf_chr(f, '\t');
    am_buf_str(f, g);
    am_buf_chr(f, '\t');
    if (at_actpath_format_perfview(&a->id, path, sizeof path) < 0) path[0] = 0;
    am_buf_str(f, path);
    am_buf_chr(f, '\n');
}

/* --tsv: a Stop that stopped nothing (a Stop of another name than the activity of its id, or of
 * no activity): readers that pair by ActivityId alone stop an activity there. */
static void on_event(void *vc, const am_event *e)
{
    tree_ctx *c = vc;
    am_buf *f = &c->out;
    char g[37];
    if (e->ev->meta->opcode == NT_OPCODE_START && e->act && !at_guid_is_zero(&e->ev->related)) {
        /* the creator the Start names, which readers that link by it alone use */
        at_guid_format(&e->ev->related, g);
        am_buf_str(f, "related\t");
        am_buf_u64(f, e->act->serial);
        am_buf_chr(f, '\t');
        am_buf_str(f, g);
        am_buf_chr(f, '\n');
        return;
    }
    if (e->ev->meta->opcode != NT_OPCODE_STOP || e->stopped || at_guid_is_zero(&e->ev->activity)) return;
    at_guid_format(&e->ev->activity, g);
    am_buf_str(f, "stop\t");
    am_buf_u64(f, e->pid);
    am_buf_chr(f, '\t');
    am_buf_u64(f, e->ev->thread);
    am_buf_chr(f, '\t');
    am_buf_str(f, e->ev->meta->name);
    am_buf_chr(f, '\t');
    if (e->time < 0) am_buf_chr(f, '-');
    am_buf_u64(f, e->time < 0 ? (uint64_t)0 - (uint64_t)e->time : (uint64_t)e->time);
    am_buf_chr(f, '\t');
    am_buf_str(f, g);
    am_buf_chr(f, '\n');
}

static void on_tree(void *vc, const am_activity *root)
{
    tree_ctx *c = vc;
    c->nshown = 0;
    print_node(c, root, 0, false);
}

/* A finished subtree printed before its ancestors finished (see --hold): under "(running)" lines for
 * those ancestors, printed again only when the chain changes. */
static void on_spill(void *vc, const am_activity *sub)
{
    tree_ctx *c = vc;
    const am_activity *chain[1024];
    int n = 0;
    bool inside = false;
    for (const am_activity *p = sub->parent; p && n < 1024; p = p->parent) {
        chain[n++] = p;
        inside |= c->name && !strcmp(p->name, c->name);
    }
    if (!(inside && sub->stop - sub->start >= c->min_dur) && !subtree_matches(c, sub)) return;
    for (int i = n - 1, d = 0; i >= 0; i--, d++) {
        if (d < c->nshown && c->shown[d] == chain[i]->serial) continue;
        print_head(c, chain[i], d);
        am_buf_str(&c->out, "  (running; finished children so far:)\n");
        c->shown[d] = chain[i]->serial;
        c->nshown = d + 1;
    }
    c->nshown = n;
    print_node(c, sub, n, inside);
}

/* Every activity, for the filters' message when nothing matched. */
static void note_activity(void *vc, const am_activity *a)
{
    tree_ctx *c = vc;
    if (c->name && !strcmp(a->name, c->name)) c->name_seen = true;
    if (a->stop - a->start >= c->min_dur) c->long_seen = true;
    if (c->has_tid && am_visit_index(a, c->tid) >= 0) c->tid_seen = true;
    if (c->prefix && within_prefix(c, a)) c->prefix_seen = true;
}

/* Nothing printed for --name / --min-ms: which of them matched nothing. */
static void no_match(const tree_ctx *c, char *const *files, int nfiles)
{
    char in[600], ms[64];
    at_cli_files_desc(files, nfiles, in, sizeof in);
    snprintf(ms, sizeof ms, "%g", (double)c->min_dur / 1e6);
    if (c->name && !c->name_seen)
        am_errorf("tree", "no activity named '%s' in %s", c->name, in);
    else if (c->has_min && !c->long_seen)
        am_errorf("tree", "no activity lasting at least %s ms in %s", ms, in);
    else if (c->has_tid && !c->tid_seen)
        am_errorf("tree", "no activity on thread %llu in %s", (unsigned long long)c->tid, in);
    else if (c->prefix && !c->prefix_seen)
        am_errorf("tree", "no activity %s or below it in %s", c->prefix, in);
    else if (c->name && c->has_min && !c->has_tid && !c->prefix)
        am_errorf("tree", "no activity named '%s' lasts at least %s ms in %s", c->name, ms, in);
    else { /* each matched something, never together */
        char f[400] = "";
        size_t k = 0;
        if (c->name) k += (size_t)snprintf(f + k, sizeof f - k, " --name %s", c->name);
        if (c->has_min && k < sizeof f) k += (size_t)snprintf(f + k, sizeof f - k, " --min-ms %s", ms);
        if (c->has_tid && k < sizeof f)
            k += (size_t)snprintf(f + k, sizeof f - k, " --thread %llu", (unsigned long long)c->tid);
        if (c->prefix && k < sizeof f) snprintf(f + k, sizeof f - k, " --activity %s", c->prefix);
        am_errorf("tree", "no activity matches%s together in %s", f, in);
    }
}

int at_cmd_tree(int argc, char **argv)
{
    static tree_ctx c;
    enum { O_NAME = 256, O_MIN, O_HOLD, O_TSV, O_THREAD, O_ACTIVITY };
    static const struct option opts[] = {{"name", required_argument, NULL, O_NAME},
                                         {"thread", required_argument, NULL, O_THREAD},
                                         {"activity", required_argument, NULL, O_ACTIVITY},
                                         {"min-ms", required_argument, NULL, O_MIN},
                                         {"hold", required_argument, NULL, O_HOLD},
                                         {"tsv", no_argument, NULL, O_TSV},
                                         {0}};
    c.out.f = stdout;
    at_cli cli;
    at_cli_init(&cli, "tree", tree_usage, "", opts, argc, argv);
    int o;
    while ((o = at_cli_next(&cli)) > 0) {
        switch (o) {
        case O_NAME: c.name = cli.arg; break;
        case O_MIN: c.has_min = at_cli_ms(&cli, false, &c.min_dur); break;
        case O_HOLD: at_cli_u64(&cli, "a number of activities", &c.hold); break;
        case O_TSV: c.tsv = true; break;
        case O_THREAD: c.has_tid = at_cli_u64(&cli, "a thread id (a number)", &c.tid); break;
        case O_ACTIVITY:
            c.prefix = cli.arg;
            at_cli_activity_path(&cli);
            break;
        }
    }
    if (o == AT_CLI_EXIT) return cli.status;
    int nfiles;
    char **files = at_cli_operands(&cli, &nfiles);
    if (!nfiles) return at_cli_usage_error(&cli, "give at least one trace FILE");
    bool filtered = c.name || c.has_min || c.has_tid || c.prefix;
    if (c.tsv && filtered)
        return at_cli_usage_error(&cli, "--tsv lists every activity: --name, --min-ms, --thread and --activity do "
                                        "not apply to it");
    int status = at_cli_check_inputs("tree", files, nfiles);
    if (status) return status;
    c.multi = nfiles > 1;
    char err[600];
    am_options mo = {.tree = true, .progress = true, .hold = c.hold};
    am_callbacks cb = {.tree = on_tree, .spill = on_spill, .ctx = &c};
    if (filtered) cb.activity = note_activity;
    if (c.tsv) {
        cb = (am_callbacks){.activity = on_activity, .event = on_event, .ctx = &c};
        mo.need_events = true;
    }
    am_model *m = am_open(files, nfiles, &mo, &cb, err, sizeof err);
    if (!m) {
        am_errorf("tree", "%s", err);
        return AT_EXIT_ERROR;
    }
    am_run(m, err, sizeof err);
    char clocks[2048];
    if (!c.tsv && am_clock_note(m, clocks, sizeof clocks) > 0) /* several hosts: how well aligned */
        am_buf_str(&c.out, clocks);
    am_buf_flush(&c.out);
    fflush(stdout);
    status = am_report_damage(m, "tree");
    if (am_unmatched_stops(m))
        fprintf(stderr, "acttrace tree: %llu Stop event%s matched no open activity; the first: %s "
                        "(tree --tsv lists each as a stop line with no activity)\n",
                (unsigned long long)am_unmatched_stops(m), am_unmatched_stops(m) == 1 ? "" : "s",
                am_unmatched_first(m));
    if (!c.printed && filtered) {
        no_match(&c, files, nfiles);
        if (!status) status = AT_EXIT_ERROR;
    }
    am_close(m);
    return status;
}
