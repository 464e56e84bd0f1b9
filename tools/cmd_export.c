/* cmd_export.c: `acttrace export --format chrome|speedscope [-o OUT] FILE...`.
 * chrome: Chrome trace-event JSON (loads in Perfetto UI and chrome://tracing): every activity as a
 *   complete ("X") slice on each thread it ran on, flow arrows ("s"/"f") for its transfers between
 *   threads, process names. Streamed: written as activities finish.
 * speedscope: one evented profile per thread with activities as frames. speedscope wants each
 *   thread's open/close events nested and in time order, so the slices (40 bytes each) are kept and
 *   sorted at the end; slices that overlap without nesting are clipped to their enclosing one. */
#include "actmodel.h"
#include "cliopt.h"
#include "cmds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ex_slice {
    uint64_t tid;
    uint32_t pid, frame;
    int64_t from, to;
    uint32_t seq;
} ex_slice;

typedef struct ex_ctx {
    FILE *out;
    bool speedscope;
    bool first;
    uint64_t flow_id;
    /* speedscope */
    ex_slice *sl;
    size_t nsl, csl;
    char (*frames)[64];
    uint32_t nframes, cframes;
} ex_ctx;

static void export_usage(FILE *f)
{
    fprintf(f, "usage: acttrace export --format chrome|speedscope [-o OUT] FILE...\n"
               "  chrome      Chrome trace-event JSON for Perfetto UI (ui.perfetto.dev) or chrome://tracing:\n"
               "              activities as slices on their threads, flow arrows for transfers\n"
               "  speedscope  speedscope JSON (www.speedscope.app): a profile per thread, activities as frames\n"
               "  -o, --output OUT  output file (default, and with -o -: standard output)\n");
    at_cli_exit_codes(f);
}

static void comma(ex_ctx *c)
{
    if (!c->first) fputs(",\n", c->out);
    c->first = false;
}

static double us(int64_t ns)
{
    return (double)ns / 1e3;
}

static void chrome_slice(void *vc, const am_activity *a, uint64_t tid, int64_t from, int64_t to)
{
    ex_ctx *c = vc;
    FILE *f = c->out;
    comma(c);
    fprintf(f, "{\"ph\":\"X\",\"cat\":\"activity\",\"name\":");
    am_json_string(f, a->name);
    fprintf(f, ",\"pid\":%u,\"tid\":%llu,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"path\":", a->pid,
            (unsigned long long)tid, us(from), us(to - from));
    char path[AM_PATH_MAX], link[AM_LINK_MAX];
    am_act_path(a, path, sizeof path);
    am_json_string(f, path);
    fprintf(f, ",\"id\":%llu,\"stopped\":%s", (unsigned long long)a->unique_id, a->stopped ? "true" : "false");
    if (tid != am_start_tid(a)) fprintf(f, ",\"visit\":true");
    if (am_act_link(a, link, sizeof link)) {
        fprintf(f, ",\"from\":");
        am_json_string(f, link);
    }
    fprintf(f, "}}");
}

static void chrome_activity(void *vc, const am_activity *a)
{
    ex_ctx *c = vc;
    am_slices(a, chrome_slice, c);
    for (uint32_t i = 0; i < am_nxfers(a); i++) {
        const am_transfer *x = am_xfer_at(a, i);
        if (!x->from_tid) continue;
        uint64_t id = ++c->flow_id;
        comma(c);
        fprintf(c->out, "{\"ph\":\"s\",\"cat\":\"transfer\",\"name\":\"transfer\",\"id\":%llu,\"pid\":%u,\"tid\":%llu,\"ts\":%.3f}",
                (unsigned long long)id, a->pid, (unsigned long long)x->from_tid, us(x->send));
        comma(c);
        fprintf(c->out, "{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"transfer\",\"name\":\"transfer\",\"id\":%llu,\"pid\":%u,\"tid\":%llu,\"ts\":%.3f}",
                (unsigned long long)id, a->pid, (unsigned long long)x->to_tid, us(x->recv));
    }
}

static uint32_t frame_of(ex_ctx *c, const char *name)
{
    for (uint32_t i = 0; i < c->nframes; i++)
        if (!strcmp(c->frames[i], name)) return i;
    if (c->nframes == c->cframes) {
        uint32_t n = c->cframes ? c->cframes * 2 : 16;
        void *p = realloc(c->frames, n * sizeof *c->frames);
        if (!p) return 0;
        c->frames = p;
        c->cframes = n;
    }
    snprintf(c->frames[c->nframes], sizeof c->frames[0], "%s", name);
    return c->nframes++;
}

static void ss_slice(void *vc, const am_activity *a, uint64_t tid, int64_t from, int64_t to)
{
    ex_ctx *c = vc;
    if (c->nsl == c->csl) {
        size_t n = c->csl ? c->csl * 2 : 1024;
        ex_slice *p = realloc(c->sl, n * sizeof *p);
        if (!p) return;
        c->sl = p;
        c->csl = n;
    }
    c->sl[c->nsl] = (ex_slice){.tid = tid, .pid = a->pid, .frame = frame_of(c, a->name), .from = from,
                               .to = to, .seq = (uint32_t)c->nsl};
    c->nsl++;
}

static void ss_activity(void *vc, const am_activity *a)
{
    am_slices(a, ss_slice, vc);
}

static int by_thread_time(const void *x, const void *y)
{
    const ex_slice *a = x, *b = y;
    if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
    if (a->tid != b->tid) return a->tid < b->tid ? -1 : 1;
    if (a->from != b->from) return a->from < b->from ? -1 : 1;
    if (a->to != b->to) return a->to > b->to ? -1 : 1; /* the longer one encloses */
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static void ss_event(FILE *f, bool *first, char type, double at, uint32_t frame)
{
    fprintf(f, "%s{\"type\":\"%c\",\"at\":%.6f,\"frame\":%u}", *first ? "" : ",", type, at, frame);
    *first = false;
}

static void speedscope_write(ex_ctx *c)
{
    FILE *f = c->out;
    if (c->nsl) qsort(c->sl, c->nsl, sizeof *c->sl, by_thread_time);
    fprintf(f, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\"exporter\":\"acttrace\","
               "\"name\":\"acttrace activities\",\"activeProfileIndex\":0,\n\"profiles\":[");
    int64_t stack_to[256];
    uint32_t stack_fr[256];
    bool first_profile = true;
    for (size_t i = 0; i < c->nsl;) {
        size_t j = i;
        while (j < c->nsl && c->sl[j].pid == c->sl[i].pid && c->sl[j].tid == c->sl[i].tid) j++;
        int64_t lo = c->sl[i].from, hi = lo;
        for (size_t k = i; k < j; k++)
            if (c->sl[k].to > hi) hi = c->sl[k].to;
        fprintf(f, "%s\n{\"type\":\"evented\",\"name\":\"pid %u tid %llu\",\"unit\":\"milliseconds\",\"startValue\":%.6f,"
                   "\"endValue\":%.6f,\"events\":[", first_profile ? "" : ",", c->sl[i].pid,
                (unsigned long long)c->sl[i].tid, lo / 1e6, hi / 1e6);
        first_profile = false;
        bool first = true;
        int depth = 0;
        for (size_t k = i; k < j; k++) {
            ex_slice *s = &c->sl[k];
            while (depth > 0 && stack_to[depth - 1] <= s->from) {
                depth--;
                ss_event(f, &first, 'C', stack_to[depth] / 1e6, stack_fr[depth]);
            }
            if (depth == 256) continue;
            int64_t to = s->to;
            if (depth > 0 && to > stack_to[depth - 1]) to = stack_to[depth - 1]; /* clip to the enclosing */
            ss_event(f, &first, 'O', s->from / 1e6, s->frame);
            stack_to[depth] = to;
            stack_fr[depth++] = s->frame;
        }
        while (depth > 0) {
            depth--;
            ss_event(f, &first, 'C', stack_to[depth] / 1e6, stack_fr[depth]);
        }
        fputs("]}", f);
        i = j;
    }
    fputs("],\n\"shared\":{\"frames\":[", f);
    for (uint32_t i = 0; i < c->nframes; i++) {
        fputs(i ? ",{\"name\":" : "{\"name\":", f);
        am_json_string(f, c->frames[i]);
        fputc('}', f);
    }
    fputs("]}}\n", f);
}

int at_cmd_export(int argc, char **argv)
{
    enum { O_FORMAT = 256 };
    static const struct option opts[] = {{"format", required_argument, NULL, O_FORMAT},
                                         {"output", required_argument, NULL, 'o'},
                                         {0}};
    ex_ctx c = {.first = true};
    const char *format = NULL, *outpath = NULL;
    at_cli cli;
    at_cli_init(&cli, "export", export_usage, "o:", opts, argc, argv);
    int o;
    while ((o = at_cli_next(&cli)) > 0) {
        switch (o) {
        case O_FORMAT:
            format = cli.arg;
            if (strcmp(format, "chrome") && strcmp(format, "speedscope")) {
                at_cli_usage_error(&cli, "unknown format '%s' (chrome or speedscope)", format);
                cli.failed = true;
            }
            break;
        case 'o': outpath = strcmp(cli.arg, "-") ? cli.arg : NULL; break;
        }
    }
    if (o == AT_CLI_EXIT) return cli.status;
    int nfiles;
    char **files = at_cli_operands(&cli, &nfiles);
    if (!format) return at_cli_usage_error(&cli, "say which format: --format chrome or --format speedscope");
    if (!nfiles) return at_cli_usage_error(&cli, "give at least one trace FILE");
    int status = at_cli_check_inputs("export", files, nfiles);
    if (status) return status;
    c.speedscope = !strcmp(format, "speedscope");
    char err[600];
    am_options mo = {.progress = true};
    am_callbacks cb = {.activity = c.speedscope ? ss_activity : chrome_activity, .ctx = &c};
    am_model *m = am_open(files, nfiles, &mo, &cb, err, sizeof err);
    if (!m) {
        am_errorf("export", "%s", err);
        return AT_EXIT_ERROR;
    }
    c.out = outpath ? fopen(outpath, "w") : stdout;
    if (!c.out) {
        am_errorf("export", "%s: %m", outpath);
        am_close(m);
        return AT_EXIT_ERROR;
    }
    if (!c.speedscope) {
        fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"exporter\":\"acttrace\"},\n\"traceEvents\":[\n", c.out);
        for (int i = 0; i < am_nfiles(m); i++) {
            comma(&c);
            fprintf(c.out, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":", am_info(m, i)->pid);
            char nm[4200];
            snprintf(nm, sizeof nm, "pid %d (%s)", am_info(m, i)->pid, am_path(m, i));
            am_json_string(c.out, nm);
            fputs("}}", c.out);
        }
    }
    am_run(m, err, sizeof err); /* a damaged file: what was read before the damage is exported */
    if (c.speedscope) {
        speedscope_write(&c);
    } else {
        fputs("\n]}\n", c.out);
    }
    if (outpath) {
        if (fclose(c.out) != 0) {
            am_errorf("export", "%s: write failed", outpath);
            status = AT_EXIT_ERROR;
            remove(outpath);
        }
    } else if (fflush(stdout) != 0 || ferror(stdout)) {
        am_errorf("export", "standard output: write failed");
        status = AT_EXIT_ERROR;
    }
    int dmg = am_report_damage(m, "export");
    if (!status) status = dmg;
    am_close(m);
    free(c.sl);
    free(c.frames);
    return status;
}
