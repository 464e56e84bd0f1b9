/* cmd_stats.c: `acttrace stats FILE...`: per activity name: count, p50/p90/p99/max duration, the
 * threads its activities ran on, their events, and how many never stopped. Memory: one entry per
 * name (durations exact up to 65536 per name, then a 1% histogram). */
#include "actmodel.h"
#include "cliopt.h"
#include "cmds.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_TIDS 4096

typedef struct st_name {
    char name[64];
    am_dist d;
    uint64_t count, never, events;
    uint64_t *tids;
    uint32_t ntids, ctids;
} st_name;

typedef struct st_ctx {
    st_name *v;
    const char *name; /* --name: only that row */
    size_t n, cap;
} st_ctx;

static void stats_usage(FILE *f)
{
    fprintf(f, "usage: acttrace stats [--name NAME] FILE...\n"
               "  Per activity name: COUNT, P50/P90/P99/MAX duration (stopped activities; in us below 1 ms,\n"
               "  in ms below 1 s, else in s), THREADS (distinct threads visited), EVENTS (events inside\n"
               "  them), NEVER_STOPPED. A name none of whose activities stopped shows - for the durations.\n"
               "  --name NAME   only the row of activities named NAME\n");
    at_cli_exit_codes(f);
}

static st_name *st_get(st_ctx *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->v[i].name, name)) return &c->v[i];
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 16;
        st_name *v = realloc(c->v, nc * sizeof *v);
        if (!v) return NULL;
        c->v = v;
        c->cap = nc;
    }
    st_name *s = &c->v[c->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

static void add_tid(st_name *s, uint64_t tid)
{
    for (uint32_t i = 0; i < s->ntids; i++)
        if (s->tids[i] == tid) return;
    if (s->ntids >= ST_MAX_TIDS) return;
    if (s->ntids == s->ctids) {
        uint32_t c = s->ctids ? s->ctids * 2 : 8;
        uint64_t *t = realloc(s->tids, c * sizeof *t);
        if (!t) return;
        s->tids = t;
        s->ctids = c;
    }
    s->tids[s->ntids++] = tid;
}

static void on_activity(void *vc, const am_activity *a)
{
    st_ctx *c = vc;
    if (c->name && strcmp(a->name, c->name) != 0) return;
    st_name *s = st_get(vc, a->name);
    if (!s) return;
    s->count++;
    s->events += am_events(a);
    if (a->stopped) am_dist_add(&s->d, a->stop - a->start);
    else s->never++;
    for (uint32_t i = 0, n = am_nvisits(a); i < n; i++) add_tid(s, am_visit_at(a, i).tid);
}

static int by_name(const void *x, const void *y)
{
    return strcmp(((const st_name *)x)->name, ((const st_name *)y)->name);
}

int at_cmd_stats(int argc, char **argv)
{
    enum { O_NAME = 256 };
    static const struct option opts[] = {{"name", required_argument, NULL, O_NAME}, {0}};
    st_ctx c = {0};
    at_cli cli;
    at_cli_init(&cli, "stats", stats_usage, "", opts, argc, argv);
    int o;
    while ((o = at_cli_next(&cli)) > 0)
        if (o == O_NAME) c.name = cli.arg;
    if (o == AT_CLI_EXIT) return cli.status;
    int nfiles;
    char **files = at_cli_operands(&cli, &nfiles);
    if (!nfiles) return at_cli_usage_error(&cli, "give at least one trace FILE");
    int status = at_cli_check_inputs("stats", files, nfiles);
    if (status) return status;
    char err[600];
    am_options mo = {.progress = true};
    am_callbacks cb = {.activity = on_activity, .ctx = &c};
    am_model *m = am_open(files, nfiles, &mo, &cb, err, sizeof err);
    if (!m) {
        am_errorf("stats", "%s", err);
        return AT_EXIT_ERROR;
    }
    am_run(m, err, sizeof err); /* a damaged file: what was read before the damage, then the damage */
    if (!c.name || c.n) {
        if (c.n) qsort(c.v, c.n, sizeof *c.v, by_name);
        printf("%-24s %8s %10s %10s %10s %10s %7s %8s %13s\n", "NAME", "COUNT", "P50", "P90", "P99", "MAX",
               "THREADS", "EVENTS", "NEVER_STOPPED");
        for (size_t i = 0; i < c.n; i++) {
            st_name *s = &c.v[i];
            char p50[AM_DUR_MAX], p90[AM_DUR_MAX], p99[AM_DUR_MAX], max[AM_DUR_MAX];
            if (s->count > s->never) {
                am_fmt_dur(p50, am_dist_pct(&s->d, 50));
                am_fmt_dur(p90, am_dist_pct(&s->d, 90));
                am_fmt_dur(p99, am_dist_pct(&s->d, 99));
                am_fmt_dur(max, s->d.max);
            } else { /* none stopped: no duration to show, rather than 0us */
                strcpy(p50, "-"), strcpy(p90, "-"), strcpy(p99, "-"), strcpy(max, "-");
            }
            printf("%-24s %8llu %10s %10s %10s %10s %7u %8llu %13llu\n", s->name, (unsigned long long)s->count,
                   p50, p90, p99, max, s->ntids, (unsigned long long)s->events, (unsigned long long)s->never);
        }
    }
    fflush(stdout);
    status = am_report_damage(m, "stats");
    if (c.name && !c.n) {
        char in[600];
        at_cli_files_desc(files, nfiles, in, sizeof in);
        am_errorf("stats", "no activity named '%s' in %s", c.name, in);
        if (!status) status = AT_EXIT_ERROR;
    }
    am_close(m);
    for (size_t i = 0; i < c.n; i++) {
        am_dist_free(&c.v[i].d);
        free(c.v[i].tids);
    }
    free(c.v);
    return status;
}
