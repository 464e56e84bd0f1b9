/* cmd_breakdown.c: `acttrace breakdown FILE...`: where each activity's wall time went. For every
 * activity: its wall time (Start to Stop), the CPU its CPU samples stand for (ACTTRACE_SAMPLE_HZ:
 * each sample's CpuNs, in the activity that was current on its thread), the time its threads were
 * blocked in it (each WaitResume's BlockedNs, by reason, with the stacks of the WaitSuspends that
 * began the longest waits), the time its work waited in queues between threads (each transfer into
 * it, from the Send to the Receive) and the rest (wall minus the three; 0 when they add up to more,
 * as when the activity ran on several threads at once). The same with its children, across threads
 * and processes. Memory: the open activities' sums, and the finished subtrees the model holds. */
#include "actmodel.h"
#include "cliopt.h"
#include "cmds.h"
#include "ntsym.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BD_REASONS 16 /* distinct reasons kept per activity (the rest: "other") */
#define BD_STACKS 3   /* blocking stacks kept per activity */
#define BD_STACK_TEXT 400

typedef struct bd_stack {
    uint64_t ns;
    char text[BD_STACK_TEXT]; /* "read <- handle_request <- worker" */
} bd_stack;

typedef struct bd_sums {
    uint64_t cpu, blocked, queued;
} bd_sums;

/* An activity's own figures, kept by its serial until it is printed */
typedef struct bd_acc {
    uint64_t serial; /* 0: a free slot */
    bd_sums self;    /* its samples and waits; its transfers' queued time once its subtree ended */
    bd_sums all;     /* with its children's, once its subtree ended (sums_fill) */
    uint64_t reason_ns[BD_REASONS];
    char reason[BD_REASONS][32];
    uint32_t nreasons;
    bd_stack *stacks; /* BD_STACKS, allocated at the first blocking stack */
    uint64_t samples;
} bd_acc;

/* A thread's last WaitSuspend, for the WaitResume that ends it */
typedef struct bd_pending {
    uint64_t tid;
    uint32_t pid;
    char text[BD_STACK_TEXT];
} bd_pending;

/* A printed row (kept for --slowest) */
typedef struct bd_row {
    char name[64], path[AM_PATH_MAX];
    int64_t wall;
    bool never;
    bd_sums self, all;
    char detail[1200]; /* text format: reasons and stacks */
} bd_row;

typedef struct bd_ctx {
    nt_symbolizer **sym;
    bd_acc *tab;
    size_t cap, used;
    bd_pending *pend;
    size_t npend, cpend;
    const char *name;
    const char *prefix; /* --activity */
    uint64_t tid;       /* --thread */
    bool has_tid;
    int64_t min_ns;
    bool tsv;
    uint64_t slowest; /* 0: every activity, in tree order */
    bd_row *rows;     /* --slowest: the N slowest so far */
    size_t nrows;
    uint64_t printed, samples, waits;
    am_buf out;
} bd_ctx;

static void breakdown_usage(FILE *f)
{
    fprintf(f,
            "usage: acttrace breakdown [--name NAME] [--min-ms MS] [--thread TID] [--activity PATH]\n"
            "       [--slowest N] [--format text|tsv] FILE...\n"
            "  Where each activity's wall time went: CPU (from CPU samples, ACTTRACE_SAMPLE_HZ),\n"
            "  blocked (waits the shim recorded: ACTTRACE_WAITS, by reason, with the stacks that began\n"
            "  the longest), queued (its work waiting between threads: from each transfer's Send to its\n"
            "  Receive) and other (the rest of the wall time: 0 when the parts add up to more, as when\n"
            "  the activity ran on several threads at once). For the activity alone, then with its\n"
            "  children (across threads and processes). Times in ms. Without samples the CPU column\n"
            "  is 0 and the time shows as other.\n"
            "  --name NAME    only activities named NAME\n"
            "  --min-ms MS    only activities lasting at least MS\n"
            "  --thread TID   only activities that ran on thread TID\n"
            "  --activity P   only the activity at path P (//1/5, or a GUID) and those below it\n"
            "  --slowest N    only the N activities with the longest wall time, slowest first\n"
            "                 (default: every activity, parents before children)\n"
            "  --format F     text (default) or tsv: a header line, then one line per activity with\n"
            "                 the columns name, path, wall_ms, cpu_ms, blocked_ms, queued_ms, other_ms\n"
            "                 (the activity alone)\n"
            "  A filter that matches nothing says so on stderr (exit 1).\n");
    at_cli_exit_codes(f);
}

/* ---------------- per-activity sums ---------------- */

static size_t slot_of(uint64_t serial, size_t cap)
{
    return (size_t)((serial * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
}

static bool tab_grow(bd_ctx *c)
{
    size_t nc = c->cap ? c->cap * 2 : 1024;
    bd_acc *t = calloc(nc, sizeof *t);
    if (!t)
        return false;
    for (size_t i = 0; i < c->cap; i++) {
        if (!c->tab[i].serial)
            continue;
        size_t j = slot_of(c->tab[i].serial, nc);
        while (t[j].serial)
            j = (j + 1) & (nc - 1);
        t[j] = c->tab[i];
    }
    free(c->tab);
    c->tab = t;
    c->cap = nc;
    return true;
}

static bd_acc *acc_find(bd_ctx *c, uint64_t serial)
{
    if (!c->cap)
        return NULL;
    for (size_t j = slot_of(serial, c->cap);; j = (j + 1) & (c->cap - 1)) {
        if (c->tab[j].serial == serial)
            return &c->tab[j];
        if (!c->tab[j].serial)
            return NULL;
    }
}

static bd_acc *acc_get(bd_ctx *c, uint64_t serial)
{
    bd_acc *a = acc_find(c, serial);
    if (a)
        return a;
    if ((c->used + 1) * 2 > c->cap && !tab_grow(c))
        return NULL;
    size_t j = slot_of(serial, c->cap);
    while (c->tab[j].serial)
        j = (j + 1) & (c->cap - 1);
    memset(&c->tab[j], 0, sizeof c->tab[j]);
    c->tab[j].serial = serial;
    c->used++;
    return &c->tab[j];
}

/* Remove serial's entry (linear probing: the entries after it move up) */
static void acc_drop(bd_ctx *c, uint64_t serial)
{
    if (!c->cap)
        return;
    size_t j = slot_of(serial, c->cap);
    while (c->tab[j].serial != serial) {
        if (!c->tab[j].serial)
            return;
        j = (j + 1) & (c->cap - 1);
    }
    free(c->tab[j].stacks);
    c->tab[j].stacks = NULL;
    c->tab[j].serial = 0;
    c->used--;
    for (size_t k = (j + 1) & (c->cap - 1); c->tab[k].serial; k = (k + 1) & (c->cap - 1)) {
        bd_acc e = c->tab[k];
        c->tab[k].serial = 0;
        c->tab[k].stacks = NULL;
        size_t h = slot_of(e.serial, c->cap);
        while (c->tab[h].serial)
            h = (h + 1) & (c->cap - 1);
        c->tab[h] = e;
    }
}

/* ---------------- events ---------------- */

static bd_pending *pending_of(bd_ctx *c, uint32_t pid, uint64_t tid, bool make)
{
    for (size_t i = 0; i < c->npend; i++)
        if (c->pend[i].tid == tid && c->pend[i].pid == pid)
            return &c->pend[i];
    if (!make)
        return NULL;
    if (c->npend == c->cpend) {
        size_t n = c->cpend ? c->cpend * 2 : 16;
        bd_pending *p = realloc(c->pend, n * sizeof *p);
        if (!p)
            return NULL;
        c->pend = p;
        c->cpend = n;
    }
    bd_pending *p = &c->pend[c->npend++];
    p->tid = tid;
    p->pid = pid;
    p->text[0] = 0;
    return p;
}

/* "read <- server!handle_request <- server!worker": the call, then the frames by function,
 * innermost first */
static void stack_text(bd_ctx *c, const am_event *e, const char *call, char *out, size_t n)
{
    size_t len = (size_t)snprintf(out, n, "%s", call);
    if (len >= n)
        len = n - 1;
    for (uint32_t i = 0; i < e->ev->nframes && i < 8 && len + 8 < n; i++) {
        char b[300];
        nt_sym_format(c->sym[e->file], e->ev->frames[i], b, sizeof b);
        int w = snprintf(out + len, n - len, "%s%s", len ? " <- " : "", b);
        if (w < 0 || (size_t)w >= n - len) {
            out[len] = 0;
            break;
        }
        len += (size_t)w;
    }
}

static void add_reason(bd_acc *a, const char *reason, uint64_t ns)
{
    uint32_t i;
    for (i = 0; i < a->nreasons; i++)
        if (!strcmp(a->reason[i], reason))
            break;
    if (i == a->nreasons) {
        if (a->nreasons == BD_REASONS)
            i = BD_REASONS - 1, reason = "other";
        else
            snprintf(a->reason[a->nreasons++], sizeof a->reason[0], "%s", reason);
    }
    a->reason_ns[i] += ns;
}

static void add_stack(bd_acc *a, const char *text, uint64_t ns)
{
    if (!text[0])
        return;
    if (!a->stacks && !(a->stacks = calloc(BD_STACKS, sizeof *a->stacks)))
        return;
    int lo = 0;
    for (int i = 0; i < BD_STACKS; i++) {
        if (a->stacks[i].ns && !strcmp(a->stacks[i].text, text)) {
            a->stacks[i].ns += ns;
            return;
        }
        if (a->stacks[i].ns < a->stacks[lo].ns)
            lo = i;
    }
    if (a->stacks[lo].ns < ns) { /* keeps the longest waits' stacks */
        a->stacks[lo].ns = ns;
        snprintf(a->stacks[lo].text, sizeof a->stacks[lo].text, "%s", text);
    }
}

static void on_event(void *vc, const am_event *e)
{
    bd_ctx *c = vc;
    nt_sym_observe(c->sym[e->file], e->ev);
    uint64_t cpu_ns;
    if (nt_event_cpu_sample(e->ev, &cpu_ns)) {
        c->samples++;
        bd_acc *a = e->act ? acc_get(c, e->act->serial) : NULL;
        if (a) {
            /* the runtime's own samples: its 1 ms period */
            a->self.cpu += am_sample_cpu(e->act, e->ev->thread, e->time, cpu_ns ? cpu_ns : 1000000);
            a->samples++;
        }
        return;
    }
    bool resume;
    char reason[32], call[48];
    uint64_t ns;
    if (!nt_event_wait(e->ev, &resume, reason, sizeof reason, call, sizeof call, &ns))
        return;
    if (!resume) { /* its stack, for the Resume that ends it on this thread */
        bd_pending *p = pending_of(c, e->pid, e->ev->thread, true);
        if (p)
            stack_text(c, e, call, p->text, sizeof p->text);
        return;
    }
    c->waits++;
    bd_pending *p = pending_of(c, e->pid, e->ev->thread, false);
    bd_acc *a = e->act ? acc_get(c, e->act->serial) : NULL;
    if (a) {
        a->self.blocked += ns;
        add_reason(a, reason[0] ? reason : "?", ns);
        if (p)
            add_stack(a, p->text, ns);
    }
    if (p)
        p->text[0] = 0;
}

/* ---------------- rows ---------------- */

static double ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

static uint64_t other_of(int64_t wall, const bd_sums *s)
{
    int64_t o = wall - (int64_t)(s->cpu + s->blocked + s->queued);
    return o > 0 ? (uint64_t)o : 0;
}

static bool wanted(const bd_ctx *c, const am_activity *a)
{
    if (c->name && strcmp(a->name, c->name) != 0)
        return false;
    if (c->has_tid && am_visit_index(a, c->tid) < 0)
        return false;
    if (c->prefix) {
        char path[AM_PATH_MAX];
        am_act_path(a, path, sizeof path);
        if (!am_path_within(path, c->prefix))
            return false;
    }
    return a->stop - a->start >= c->min_ns;
}

static void row_fill(bd_ctx *c, const am_activity *a, const bd_sums *self, const bd_sums *all,
                     bd_row *r)
{
    snprintf(r->name, sizeof r->name, "%s", a->name);
    am_act_path(a, r->path, sizeof r->path);
    r->wall = a->stop - a->start;
    r->never = !a->stopped;
    r->self = *self;
    r->all = *all;
    r->detail[0] = 0;
    if (c->tsv)
        return;
    const bd_acc *x = acc_find(c, a->serial);
    size_t len = 0;
    if (x && x->nreasons) {
        len += (size_t)snprintf(r->detail + len, sizeof r->detail - len, "    blocked by:");
        for (uint32_t i = 0; i < x->nreasons && len < sizeof r->detail; i++)
            len += (size_t)snprintf(r->detail + len, sizeof r->detail - len, "%s %s %.3f ms",
                                    i ? "," : "", x->reason[i], ms(x->reason_ns[i]));
        if (len < sizeof r->detail)
            len += (size_t)snprintf(r->detail + len, sizeof r->detail - len, "\n");
    }
    if (x && x->stacks) { /* the blocking stacks, longest first */
        int order[BD_STACKS], n = 0;
        for (int j = 0; j < BD_STACKS; j++)
            if (x->stacks[j].ns)
                order[n++] = j;
        for (int i = 1; i < n; i++)
            for (int k = i; k > 0 && x->stacks[order[k]].ns > x->stacks[order[k - 1]].ns; k--) {
                int t = order[k];
                order[k] = order[k - 1];
                order[k - 1] = t;
            }
        for (int i = 0; i < n && len < sizeof r->detail; i++)
            len += (size_t)snprintf(r->detail + len, sizeof r->detail - len, "      %.3f ms  %s\n",
                                    ms(x->stacks[order[i]].ns), x->stacks[order[i]].text);
    }
}

static void row_print(bd_ctx *c, const bd_row *r, int depth)
{
    char b[2048];
    if (c->tsv) {
        snprintf(b, sizeof b, "%s\t%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", r->name, r->path,
                 ms((uint64_t)r->wall), ms(r->self.cpu), ms(r->self.blocked), ms(r->self.queued),
                 ms(other_of(r->wall, &r->self)));
        am_buf_str(&c->out, b);
        return;
    }
    int ind = depth > 20 ? 40 : depth * 2;
    snprintf(b, sizeof b,
             "%*s%s %s  wall %.3f ms%s: cpu %.3f, blocked %.3f, queued %.3f, other %.3f\n", ind, "",
             r->name, r->path, ms((uint64_t)r->wall), r->never ? " (never stopped)" : "",
             ms(r->self.cpu), ms(r->self.blocked), ms(r->self.queued),
             ms(other_of(r->wall, &r->self)));
    am_buf_str(&c->out, b);
    if (r->all.cpu != r->self.cpu || r->all.blocked != r->self.blocked ||
        r->all.queued != r->self.queued) {
        snprintf(b, sizeof b, "%*s    with its children: cpu %.3f, blocked %.3f, queued %.3f\n", ind,
                 "", ms(r->all.cpu), ms(r->all.blocked), ms(r->all.queued));
        am_buf_str(&c->out, b);
    }
    if (r->detail[0]) {
        /* the detail lines, indented as the row */
        const char *p = r->detail;
        while (*p) {
            const char *nl = strchr(p, '\n');
            size_t n = nl ? (size_t)(nl - p) + 1 : strlen(p);
            snprintf(b, sizeof b, "%*s%.*s", ind, "", (int)n, p);
            am_buf_str(&c->out, b);
            p += n;
        }
    }
}

static int by_wall_desc(const void *x, const void *y)
{
    const bd_row *a = x, *b = y;
    return a->wall < b->wall ? 1 : a->wall > b->wall ? -1 : 0;
}

static void row_keep(bd_ctx *c, const bd_row *r)
{
    if (c->nrows < c->slowest) {
        c->rows[c->nrows++] = *r;
        return;
    }
    size_t lo = 0; /* replace the fastest kept, when this one is slower */
    for (size_t i = 1; i < c->nrows; i++)
        if (c->rows[i].wall < c->rows[lo].wall)
            lo = i;
    if (c->nrows && r->wall > c->rows[lo].wall)
        c->rows[lo] = *r;
}

/* Once a subtree ended: each activity's own sums (the transfers into it are its queued time) and
 * its sums with its children, into its entry, children first. Returns a's sums with children. */
static bd_sums sums_fill(bd_ctx *c, const am_activity *a)
{
    bd_acc *x = acc_find(c, a->serial);
    bd_sums self = x ? x->self : (bd_sums){0};
    for (uint32_t i = 0, n = am_nxfers(a); i < n; i++) {
        const am_transfer *t = am_xfer_at(a, i);
        if (t->from_tid && t->recv > t->send)
            self.queued += (uint64_t)(t->recv - t->send);
    }
    bd_sums all = self;
    for (const am_activity *k = a->first_child; k; k = k->next_sibling) {
        bd_sums ks = sums_fill(c, k);
        all.cpu += ks.cpu;
        all.blocked += ks.blocked;
        all.queued += ks.queued;
    }
    x = acc_get(c, a->serial); /* after the children's: their entries may have moved the table */
    if (x) {
        x->self = self;
        x->all = all;
    }
    return all;
}

static void emit(bd_ctx *c, const am_activity *a, int depth)
{
    if (wanted(c, a)) {
        const bd_acc *x = acc_find(c, a->serial);
        bd_sums none = {0};
        bd_row r;
        row_fill(c, a, x ? &x->self : &none, x ? &x->all : &none, &r);
        c->printed++;
        if (c->slowest)
            row_keep(c, &r);
        else
            row_print(c, &r, c->name ? 0 : depth);
    }
    for (const am_activity *k = a->first_child; k; k = k->next_sibling)
        emit(c, k, depth + 1);
}

static void drop_all(bd_ctx *c, const am_activity *a)
{
    acc_drop(c, a->serial);
    for (const am_activity *k = a->first_child; k; k = k->next_sibling)
        drop_all(c, k);
}

static void on_tree(void *vc, const am_activity *root)
{
    bd_ctx *c = vc;
    sums_fill(c, root);
    emit(c, root, root->depth);
    drop_all(c, root);
}

int at_cmd_breakdown(int argc, char **argv)
{
    enum { O_NAME = 256, O_MIN, O_SLOWEST, O_FORMAT, O_THREAD, O_ACTIVITY };
    static const struct option opts[] = {{"name", required_argument, NULL, O_NAME},
                                         {"min-ms", required_argument, NULL, O_MIN},
                                         {"thread", required_argument, NULL, O_THREAD},
                                         {"activity", required_argument, NULL, O_ACTIVITY},
                                         {"slowest", required_argument, NULL, O_SLOWEST},
                                         {"format", required_argument, NULL, O_FORMAT},
                                         {0}};
    bd_ctx c = {0};
    at_cli cli;
    at_cli_init(&cli, "breakdown", breakdown_usage, "", opts, argc, argv);
    int o;
    while ((o = at_cli_next(&cli)) > 0) {
        if (o == O_NAME)
            c.name = cli.arg;
        else if (o == O_MIN)
            at_cli_ms(&cli, false, &c.min_ns);
        else if (o == O_THREAD)
            c.has_tid = at_cli_u64(&cli, "a thread id (a number)", &c.tid);
        else if (o == O_ACTIVITY) {
            c.prefix = cli.arg;
            at_cli_activity_path(&cli);
        }
        else if (o == O_SLOWEST) {
            if (at_cli_u64(&cli, "a number of activities", &c.slowest) && c.slowest == 0) {
                at_cli_usage_error(&cli, "--slowest wants a number of activities above 0");
                return AT_EXIT_USAGE;
            }
        } else if (o == O_FORMAT) {
            if (!strcmp(cli.arg, "tsv"))
                c.tsv = true;
            else if (strcmp(cli.arg, "text") != 0)
                return at_cli_usage_error(&cli, "--format wants text or tsv, not '%s'", cli.arg);
        }
    }
    if (o == AT_CLI_EXIT)
        return cli.status;
    int nfiles;
    char **files = at_cli_operands(&cli, &nfiles);
    if (!nfiles)
        return at_cli_usage_error(&cli, "give at least one trace FILE");
    int status = at_cli_check_inputs("breakdown", files, nfiles);
    if (status)
        return status;
    if (c.slowest) {
        if (c.slowest > 1000000)
            return at_cli_usage_error(&cli, "--slowest wants at most 1000000 activities");
        c.rows = malloc(c.slowest * sizeof *c.rows);
        if (!c.rows) {
            am_errorf("breakdown", "out of memory for %llu rows", (unsigned long long)c.slowest);
            return AT_EXIT_ERROR;
        }
    }
    c.sym = calloc((size_t)nfiles, sizeof *c.sym);
    for (int i = 0; c.sym && i < nfiles; i++)
        c.sym[i] = nt_sym_new(&(nt_sym_options){.demangle = true, .no_offset = true});
    if (!c.sym) {
        am_errorf("breakdown", "out of memory");
        return AT_EXIT_ERROR;
    }
    c.out.f = stdout;
    char err[600];
    am_options mo = {.tree = true, .progress = true, .need_events = true};
    am_callbacks cb = {.event = on_event, .tree = on_tree, .spill = on_tree, .ctx = &c};
    am_model *m = am_open(files, nfiles, &mo, &cb, err, sizeof err);
    if (!m) {
        am_errorf("breakdown", "%s", err);
        return AT_EXIT_ERROR;
    }
    if (c.tsv)
        am_buf_str(&c.out, "name\tpath\twall_ms\tcpu_ms\tblocked_ms\tqueued_ms\tother_ms\n");
    am_run(m, err, sizeof err); /* a damaged file: what was read before the damage, then the damage */
    if (c.slowest) {
        qsort(c.rows, c.nrows, sizeof *c.rows, by_wall_desc);
        for (size_t i = 0; i < c.nrows; i++)
            row_print(&c, &c.rows[i], 0);
    }
    if (!c.tsv && c.printed && !c.samples)
        am_buf_str(&c.out, "(no CPU samples in the trace: record with ACTTRACE_SAMPLE_HZ, or "
                           "acttrace run --sample HZ, for the CPU column)\n");
    am_buf_flush(&c.out);
    fflush(stdout);
    status = am_report_damage(m, "breakdown");
    if (!c.printed) {
        char in[600];
        at_cli_files_desc(files, nfiles, in, sizeof in);
        if (c.name)
            am_errorf("breakdown", "no activity named '%s'%s in %s", c.name,
                      c.min_ns || c.has_tid || c.prefix ? " that the other filters keep" : "", in);
        else
            am_errorf("breakdown", "no activity%s in %s",
                      c.min_ns || c.has_tid || c.prefix ? " that the filters keep" : "", in);
        if (!status)
            status = AT_EXIT_ERROR;
    }
    am_close(m);
    for (int i = 0; i < nfiles; i++)
        nt_sym_free(c.sym[i]);
    free(c.sym);
    for (size_t i = 0; i < c.cap; i++)
        if (c.tab[i].serial)
            free(c.tab[i].stacks);
    free(c.tab);
    free(c.pend);
    free(c.rows);
    return status;
}
