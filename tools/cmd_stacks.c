/* cmd_stacks.c: `acttrace stacks FILE...`: folded stacks (flamegraph.pl / inferno format), one line
 * per distinct stack: the chain of activity names the event ran in, then its frames, then a count. */
#include "actfold.h"
#include "cliopt.h"
#include "cmds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sk_ctx {
    am_fold *fold;
    nt_symbolizer **sym; /* one per file */
    const char *name;
    bool by_activity, all, offsets, samples;
    bool name_seen;  /* an activity named name */
    uint64_t lines;  /* stacks folded */
    uint64_t other_kind; /* stacks of the kind not asked for (samples, or events with --samples) */
    uint64_t samples_seen; /* CPU samples, with a stack or not */
    uint64_t tid;             /* --thread: events of that thread only */
    bool has_tid;
    const char *prefix;       /* --activity: events inside that activity or below it only */
    uint64_t filtered_out;    /* stacks the --thread/--activity filters left out */
    char key[65536];
} sk_ctx;

static void stacks_usage(FILE *f)
{
    fprintf(f, "usage: acttrace stacks [--name NAME] [--thread TID] [--activity PATH] [--by-activity] [--all]\n"
               "       [--offsets] [--samples] FILE...\n"
               "  Folded stacks of the events that carry a stack: activity names from the root down,\n"
               "  then frames from the outermost, then the number of events (flamegraph.pl/inferno).\n"
               "  Frames are grouped by function (\"module!function\"). The count is a number of\n"
               "  events (Starts, Stops, marks) taken with that stack, not time: in a flame graph\n"
               "  drawn from it a frame's width is how many such events were taken under it.\n"
               "  --name NAME     only events inside an activity NAME; stacks start at that activity\n"
               "  --thread TID    only events of thread TID\n"
               "  --activity P    only events inside the activity at path P (//1/5, or a GUID) or below it\n"
               "  --by-activity   one stack per activity (\"Name //1/5\") rather than per name\n"
               "  --all           also events outside any activity, under \"(no activity)\"\n"
               "  --offsets       frames with their offset (\"module!function+0x1a\"): one per call site\n"
               "  --samples       CPU samples instead (ACTTRACE_SAMPLE_HZ): the count is microseconds of\n"
               "                  CPU, so a frame's width is the CPU time spent under it in each activity\n"
               "                  (a sample that does not say its CPU time counts 1 ms, the .NET runtime's\n"
               "                  period)\n"
               "  A filter that matches nothing says so on stderr (exit 1).\n");
    at_cli_exit_codes(f);
}

static void on_event(void *vc, const am_event *e)
{
    sk_ctx *c = vc;
    nt_sym_observe(c->sym[e->file], e->ev);
    if (nt_sym_is_symbol_event(e->ev)) return;
    uint64_t cpu_ns = 0;
    bool sample = nt_event_cpu_sample(e->ev, &cpu_ns);
    if (sample) c->samples_seen++;
    if (!e->ev->nframes) return;
    if (sample != c->samples) { /* samples weigh CPU time, events count: never one sum */
        c->other_kind++;
        return;
    }
    if (!e->act && (!c->all || c->name || c->prefix)) return;
    if (c->has_tid && e->ev->thread != c->tid) {
        c->filtered_out++;
        return;
    }
    if (c->prefix) {
        char path[AM_PATH_MAX];
        am_act_path(e->act, path, sizeof path);
        if (!am_path_within(path, c->prefix)) {
            c->filtered_out++;
            return;
        }
    }
    uint64_t w = !sample ? 1 : cpu_ns ? (cpu_ns + 500) / 1000 : 1000;
    if (am_fold_key(c->key, sizeof c->key, e->act, c->name, c->by_activity, e->ev, c->sym[e->file])) {
        am_fold_add(c->fold, c->key, w);
        c->lines++;
    }
}

static void on_activity(void *vc, const am_activity *a)
{
    sk_ctx *c = vc;
    if (!strcmp(a->name, c->name)) c->name_seen = true;
}

static void print_line(void *ctx, const char *key, uint64_t n)
{
    fprintf(ctx, "%s %llu\n", key, (unsigned long long)n);
}

int at_cmd_stacks(int argc, char **argv)
{
    enum { O_NAME = 256, O_BY_ACTIVITY, O_ALL, O_OFFSETS, O_SAMPLES, O_THREAD, O_ACTIVITY };
    static const struct option opts[] = {{"name", required_argument, NULL, O_NAME},
                                         {"thread", required_argument, NULL, O_THREAD},
                                         {"activity", required_argument, NULL, O_ACTIVITY},
                                         {"by-activity", no_argument, NULL, O_BY_ACTIVITY},
                                         {"all", no_argument, NULL, O_ALL},
                                         {"offsets", no_argument, NULL, O_OFFSETS},
                                         {"samples", no_argument, NULL, O_SAMPLES},
                                         {0}};
    sk_ctx *c = calloc(1, sizeof *c);
    int nfiles = 0, status = AT_EXIT_ERROR;
    char **files = NULL;
    if (!c) return AT_EXIT_ERROR;
    at_cli cli;
    at_cli_init(&cli, "stacks", stacks_usage, "", opts, argc, argv);
    int o;
    while ((o = at_cli_next(&cli)) > 0) {
        switch (o) {
        case O_NAME: c->name = cli.arg; break;
        case O_BY_ACTIVITY: c->by_activity = true; break;
        case O_ALL: c->all = true; break;
        case O_OFFSETS: c->offsets = true; break;
        case O_SAMPLES: c->samples = true; break;
        case O_THREAD: c->has_tid = at_cli_u64(&cli, "a thread id (a number)", &c->tid); break;
        case O_ACTIVITY:
            c->prefix = cli.arg;
            at_cli_activity_path(&cli);
            break;
        }
    }
    if (o == AT_CLI_EXIT) {
        status = cli.status;
        goto out;
    }
    files = at_cli_operands(&cli, &nfiles);
    if (!nfiles) {
        status = at_cli_usage_error(&cli, "give at least one trace FILE");
        goto out;
    }
    if ((status = at_cli_check_inputs("stacks", files, nfiles))) goto out;
    status = AT_EXIT_ERROR;
    c->fold = am_fold_new();
    c->sym = calloc((size_t)nfiles, sizeof *c->sym);
    if (!c->fold || !c->sym) goto out;
    for (int i = 0; i < nfiles; i++)
    {
        nt_sym_options so = {.demangle = true, .no_offset = !c->offsets};
        if (!(c->sym[i] = nt_sym_new(&so))) goto out;
    }
    char err[600];
    am_options mo = {.progress = true, .need_events = true};
    am_callbacks cb = {.event = on_event, .activity = c->name ? on_activity : NULL, .ctx = c};
    am_model *m = am_open(files, nfiles, &mo, &cb, err, sizeof err);
    if (!m) {
        am_errorf("stacks", "%s", err);
        goto out;
    }
    am_run(m, err, sizeof err);
    am_fold_each(c->fold, print_line, stdout);
    fflush(stdout);
    status = am_report_damage(m, "stacks");
    if (c->name && !c->lines) {
        char in[600];
        at_cli_files_desc(files, nfiles, in, sizeof in);
        if (!c->name_seen) am_errorf("stacks", "no activity named '%s' in %s", c->name, in);
        else
            am_errorf("stacks", "no %s inside an activity named '%s' in %s",
                      c->samples ? "CPU sample" : "event with a stack", c->name, in);
        if (!status) status = AT_EXIT_ERROR;
    } else if (!c->lines) { /* nothing to fold at all: say why rather than print nothing */
        char in[600];
        at_cli_files_desc(files, nfiles, in, sizeof in);
        if (c->filtered_out) { /* stacks there were, none of that thread or activity */
            char f[200] = "";
            if (c->has_tid) snprintf(f, sizeof f, "on thread %llu", (unsigned long long)c->tid);
            if (c->prefix)
                snprintf(f + strlen(f), sizeof f - strlen(f), "%sinside %s or below it", c->has_tid ? " and " : "",
                         c->prefix);
            am_errorf("stacks", "no %s %s in %s", c->samples ? "CPU sample" : "event with a stack", f, in);
            if (!status) status = AT_EXIT_ERROR;
        } else if (c->samples && c->samples_seen) { /* recorded, and none folded: say why */
            am_errorf("stacks", "none of the %llu CPU samples in %s %s", (unsigned long long)c->samples_seen, in,
                      c->all ? "carries a stack" : "was taken inside an activity with a stack (--all folds those outside activities too)");
            if (!status) status = AT_EXIT_ERROR;
        } else if (c->samples) { /* asked for samples, as a filter is: none is an error */
            am_errorf("stacks", "no CPU sample in %s (%s)", in,
                      c->other_kind ? "its events with a stack fold without --samples"
                                    : "record them with acttrace run --sample HZ, or ACTTRACE_SAMPLE_HZ");
            if (!status) status = AT_EXIT_ERROR;
        } else if (c->other_kind) {
            am_errorf("stacks", "the only stacks in %s are CPU samples: fold them with --samples", in);
        } else {
            am_errorf("stacks", "no event with a stack in %s (the config's stacks setting, or "
                                "ACTTRACE_STACKS, decides which events carry one)", in);
        }
    }
    am_close(m);
out:
    if (c->sym)
        for (int i = 0; i < nfiles; i++) nt_sym_free(c->sym[i]);
    free(c->sym);
    am_fold_free(c->fold);
    free(c);
    return status;
}
