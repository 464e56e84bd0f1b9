/* test_report_web: `acttrace report` in a browser. The node scripts of tests/web drive Debian's
 * Chromium with Playwright through the report of real traces and print what the page shows; these
 * checks hold that against what `acttrace stats`, `tree` and `stacks` say of the same trace.
 *   - the demo server (tests/fixtures/demo_server.c) traced with tests/demo/demo.conf: its threads
 *     and names on the timeline, zoom (wheel, buttons) and pan (drag), a click on a bar; the search
 *     counts; the table's sorting and pages; the waterfall of the longest Connection, across the
 *     accepting thread and a worker with the transfer between them; the flame graph's zoom;
 *   - a parent process and the program it spawns (proc_chain spawn): one waterfall across both;
 *   - a run of 1,000,000 activities (report_many): every activity counted and drawn (as bars or
 *     merged into pixel columns), the wheel zooms in, the longest activity leads the table.
 * Screenshots are taken after each step and must not be blank; AT_REPORT_SHOTS=dir keeps them.
 * Without Chromium, node or tests/web/node_modules the tests say why and pass, except under CI
 * (AT_TRACEEVENT_REQUIRED=1), where that fails them. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "actmodel.h"
#include "at_testlib.h"
#include "at_tracegen.h"
#include "at_web.h"

/* An activity as `acttrace tree --tsv` lists it. */
typedef struct tact {
    uint64_t serial, parent;
    unsigned pid;
    char name[64], path[96];
    long long start, dur;
} tact;

static at_session demo; /* its folder holds the trace and the report */
static char *dir, trace[4200], html[4300];
static char *tsv_out, *tree_out, *stats_out;
static tact *acts;
static size_t nacts;

/* acttrace args... to completion, exit 0; its stdout (malloc'd). */
static char *tool(const char *const *args)
{
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(r.exited && r.status == 0, "acttrace %s: exit %d: %s", args[0], r.status, r.err);
    char *out = strdup(r.out);
    at_run_result_free(&r);
    return out;
}

static void parse_tsv(const char *text)
{
    size_t cap = 0;
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, "activity\t", 9)) continue;
        if (nacts == cap) acts = realloc(acts, (cap = cap ? cap * 2 : 1024) * sizeof *acts);
        tact *a = &acts[nacts];
        unsigned long long st, sp;
        if (sscanf(p, "activity\t%lu\t%lu\t%u\t%llu\t%llu\t%63[^\t]\t%95[^\t]\t%lld\t%lld", &a->serial, &a->parent, &a->pid,
                   &st, &sp, a->name, a->path, &a->start, &a->dur) == 9)
            nacts++;
    }
}

static void setup_demo(void)
{
    at_session *s = &demo;
    const char *argv[] = {"demo_server", "200", "4", "8", NULL};
    const char *env[] = {"ACTTRACE_CONFIG=" AT_SOURCE_DIR "/tests/demo/demo.conf", NULL};
    ck_assert_int_eq(at_session_run(s, "report-web", argv, env), 0);
    char d[1024];
    ck_assert_msg(s->r.exited && s->r.status == 0 && s->has_trace && s->load_rc == 0 && s->t.events_lost == 0, "%s",
                  at_session_describe(s, d, sizeof d));
    dir = s->dir;
    char *t = at_trace_file_for_pid(s->dir, s->r.pid);
    snprintf(trace, sizeof trace, "%s", t);
    free(t);
    snprintf(html, sizeof html, "%s/demo.html", dir);
    free(tool((const char *const[]){"report", "-o", html, trace, NULL}));
    tsv_out = tool((const char *const[]){"tree", "--tsv", trace, NULL});
    tree_out = tool((const char *const[]){"tree", trace, NULL});
    stats_out = tool((const char *const[]){"stats", trace, NULL});
    parse_tsv(tsv_out);
    ck_assert_uint_gt(nacts, 1000);
}

static void teardown_demo(void)
{
    at_session_free(&demo);
    free(tsv_out);
    free(tree_out);
    free(stats_out);
    free(acts);
}

/* Whether the browser tests run here: false (after saying why) outside CI when a piece is missing. */
static bool web_ready(const char *test)
{
    const char *why = at_web_missing();
    if (!why) return true;
    ck_assert_msg(!at_traceevent_required(), "%s: %s (AT_TRACEEVENT_REQUIRED=1: CI runs the browser tests)", test, why);
    printf("%s skipped: %s\n", test, why);
    return false;
}

/* Runs tests/web/<script> on page with args (screenshots under tmp); its output (malloc'd, after a
 * newline), once it is checked that the script finished without a page error and that every
 * screenshot it took holds more than a few colours. */
static char *web(const char *script, const char *page, const char *tag, const char *tmp, const char *const *args)
{
    char shots[4400], why[25000];
    at_web_shots(tag, tmp, shots, sizeof shots);
    at_run_result r;
    ck_assert_int_eq(at_web_run(&r, script, page, shots, args), 0);
    ck_assert_msg(at_web_ok(&r, script, why, sizeof why), "%s", why);
    char *out = malloc(strlen(r.out) + 2); /* every line after a newline: strstr(out, "\nkey ...") finds the first */
    out[0] = '\n';
    strcpy(out + 1, r.out);
    at_run_result_free(&r);
    return out;
}

/* COUNT of a name in the stats table, -1 when not there. */
static long stats_count(const char *stats, const char *name)
{
    char nm[64];
    long c;
    for (const char *p = strchr(stats, '\n'); p && p[1]; p = strchr(p + 1, '\n'))
        if (sscanf(p + 1, "%63s %ld", nm, &c) == 2 && !strcmp(nm, name)) return c;
    return -1;
}

/* The names of the stats table (below its header line). */
static int stats_names(const char *stats, char names[][64], int max)
{
    int n = 0;
    for (const char *p = strchr(stats, '\n'); p && p[1] && n < max; p = strchr(p + 1, '\n'))
        if (sscanf(p + 1, "%63s", names[n]) == 1) n++;
    return n;
}

/* The `tree` line of the activity with this path (first match), into buf. */
static const char *tree_line(const char *path, char *buf, size_t n)
{
    char key[128];
    snprintf(key, sizeof key, " %s  start ", path);
    const char *p = strstr(tree_out, key);
    ck_assert_msg(p, "no %s in the tree", path);
    const char *b = p, *e = strchr(p, '\n');
    while (b > tree_out && b[-1] != '\n') b--;
    snprintf(buf, n, "%.*s", (int)(e - b), b);
    return buf;
}

/* The comma-separated list after "label " in a tree line ("" when absent). */
static void tree_list(const char *line, const char *label, char *out, size_t n)
{
    const char *p = strstr(line, label);
    out[0] = 0;
    if (p) snprintf(out, n, "%.*s", (int)strcspn(p + strlen(label), " \n"), p + strlen(label));
}

static bool same_set(const char *a, const char *b)
{
    char x[1100], y[1100];
    snprintf(x, sizeof x, ",%s,", a);
    snprintf(y, sizeof y, ",%s,", b);
    int na = 0, nb = 0;
    for (const char *p = a; *p; p++) na += *p == ',';
    for (const char *p = b; *p; p++) nb += *p == ',';
    if (na != nb) return false;
    for (char *tok = strtok(x + 1, ","); tok; tok = strtok(NULL, ",")) {
        char k[64];
        snprintf(k, sizeof k, ",%s,", tok);
        if (!strstr(y, k)) return false;
    }
    return true;
}

/* ns as tree prints times since the start: ms with 3 decimals, rounded half away from zero */
static void ms3(long long ns, char *out, size_t n)
{
    long long us = (ns + 500) / 1000;
    snprintf(out, n, "%lld.%03lld", us / 1000, us % 1000);
}

START_TEST(timeline_threads_names_zoom_pan_click)
{
    if (!web_ready("timeline_threads_names_zoom_pan_click")) return;
    /* the bar to click: the longest Request */
    const tact *target = NULL;
    for (size_t i = 0; i < nacts; i++)
        if (!strcmp(acts[i].name, "Request") && (!target || acts[i].dur > target->dur)) target = &acts[i];
    ck_assert_ptr_nonnull(target);
    char *out = web("timeline.js", html, "timeline", dir, (const char *const[]){target->path, NULL});
    char b[1024];

    char want[256];
    snprintf(want, sizeof want, "%zu", nacts);
    ck_assert_str_eq(at_web_line(out, "activities", NULL, b, sizeof b) ? b : "", want);
    /* every name with its count, as stats counts them */
    char names[32][64];
    int nn = stats_names(stats_out, names, 32);
    ck_assert_int_eq(at_web_count(out, "name"), nn);
    for (int i = 0; i < nn; i++) {
        char want[128];
        snprintf(want, sizeof want, "\nname %.63s %ld\n", names[i], stats_count(stats_out, names[i]));
        ck_assert_msg(strstr(out, want), "no '%s' in:\n%s", want + 1, out);
    }
    /* one band per thread any activity ran on, with a slice per activity that ran there */
    char tids[64][24];
    long visits[64];
    int nt = 0;
    for (const char *p = tree_out; (p = strstr(p, "  threads ")); p++) {
        char list[1024], *save = NULL;
        tree_list(p, "  threads ", list, sizeof list);
        for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            int k = 0;
            while (k < nt && strcmp(tids[k], t)) k++;
            if (k == nt && nt < 64) snprintf(tids[nt], sizeof tids[0], "%s", t), visits[nt++] = 0;
            if (k < 64) visits[k]++;
        }
    }
    ck_assert_int_eq(at_web_count(out, "thread"), nt);
    long pid = (long)acts[0].pid;
    for (int k = 0; k < nt; k++) {
        char want[256];
        snprintf(want, sizeof want, "\nthread %ld %.23s ", pid, tids[k]);
        const char *p = strstr(out, want);
        ck_assert_msg(p, "no band for thread %s:\n%s", tids[k], out);
        int lanes;
        long slices;
        ck_assert_int_eq(sscanf(p + strlen(want), "%d %ld", &lanes, &slices), 2);
        ck_assert_msg(lanes >= 1 && lanes <= 4, "thread %s: %d lanes", tids[k], lanes);
        ck_assert_int_eq(slices, visits[k]);
    }
    /* the wheel zooms in around the time under the pointer: a notch of 250 is a factor e^-0.5 */
    double a0, a1, b0, b1, px, pw;
    const char *p = out;
    for (int i = 0; i < 2; i++) {
        ck_assert(at_web_line(out, "wheel", &p, b, sizeof b));
        ck_assert_int_eq(sscanf(b, "%lf %lf %lf %lf %lf %lf", &a0, &a1, &b0, &b1, &px, &pw), 6);
        ck_assert_msg(fabs((b1 - b0) / (a1 - a0) - exp(-0.5)) < 0.005, "wheel: %s", b);
        ck_assert_msg(fabs((a0 + px / pw * (a1 - a0)) - (b0 + px / pw * (b1 - b0))) <= (a1 - a0) / pw, "wheel moved the time under the pointer: %s", b);
    }
    /* the buttons halve and double the span around its middle */
    ck_assert(at_web_line(out, "zoom-in", NULL, b, sizeof b));
    ck_assert_int_eq(sscanf(b, "%lf %lf %lf %lf", &a0, &a1, &b0, &b1), 4);
    ck_assert_msg(fabs((b1 - b0) / (a1 - a0) - 0.5) < 1e-6 && fabs((a0 + a1) - (b0 + b1)) < 2, "zoom-in: %s", b);
    ck_assert(at_web_line(out, "zoom-out", NULL, b, sizeof b));
    ck_assert_int_eq(sscanf(b, "%lf %lf %lf %lf", &a0, &a1, &b0, &b1), 4);
    ck_assert_msg(fabs((b1 - b0) / (a1 - a0) - 2) < 1e-6 && fabs((a0 + a1) - (b0 + b1)) < 2, "zoom-out: %s", b);
    /* dragging 200 px to the right shows 200 px worth of earlier time */
    ck_assert(at_web_line(out, "drag", NULL, b, sizeof b));
    ck_assert_int_eq(sscanf(b, "%lf %lf %lf %lf %lf %lf", &a0, &a1, &b0, &b1, &px, &pw), 6);
    double shift = px * (a1 - a0) / pw;
    ck_assert_msg(fabs((a0 - b0) - shift) <= (a1 - a0) / pw && fabs((b1 - b0) - (a1 - a0)) < 1, "drag: %s", b);
    /* the target's bar is drawn in its name's colour; a click on it opens its waterfall */
    snprintf(want, sizeof want, "Request %s %u %lld %lld", target->path, target->pid, target->start, target->dur);
    ck_assert_str_eq(at_web_line(out, "target", NULL, b, sizeof b) ? b : "", want);
    int r1, g1, b1c, r2, g2, b2, w;
    ck_assert(at_web_line(out, "pixel", NULL, b, sizeof b));
    ck_assert_int_eq(sscanf(b, "%d,%d,%d %d,%d,%d %d", &r1, &g1, &b1c, &r2, &g2, &b2, &w), 7);
    ck_assert_msg(abs(r1 - r2) <= 3 && abs(g1 - g2) <= 3 && abs(b1c - b2) <= 3 && w >= 100, "pixel: %s", b);
    snprintf(want, sizeof want, "\"Request %s  (pid %u)\"", target->path, target->pid);
    ck_assert_str_eq(at_web_line(out, "tooltip", NULL, b, sizeof b) ? b : "", want);
    snprintf(want, sizeof want, "Request %s %u", target->path, target->pid);
    ck_assert_str_eq(at_web_line(out, "clicked", NULL, b, sizeof b) ? b : "", want);
    free(out);
}
END_TEST

START_TEST(search_counts_match_the_trace)
{
    if (!web_ready("search_counts_match_the_trace")) return;
    char names[32][64], quoted[32][70];
    int nn = stats_names(stats_out, names, 32);
    const char *args[40];
    int k = 0;
    for (int i = 0; i < nn && k < 32; i++) {
        snprintf(quoted[i], sizeof quoted[i], "\"%.63s\"", names[i]);
        args[k++] = quoted[i];
    }
    args[k++] = "e";
    args[k++] = "LOOK";
    args[k++] = "zzz";
    args[k] = NULL;
    char *out = web("search.js", html, "search", dir, args);
    char b[1024], want[512];
    /* a name in quotes: its activities alone, as many as stats counts, all in the table */
    for (int i = 0; i < nn; i++) {
        long c = stats_count(stats_out, names[i]);
        snprintf(want, sizeof want, "\nsearch \"\\\"%.63s\\\"\" %ld %ld %.63s\n", names[i], c, c, names[i]);
        ck_assert_msg(strstr(out, want), "no '%s' in:\n%s", want + 1, out);
    }
    /* a part of a name, in any case: every name that holds it */
    long e = 0, look = 0;
    for (int i = 0; i < nn; i++) {
        if (strchr(names[i], 'e') || strchr(names[i], 'E')) e += stats_count(stats_out, names[i]);
        if (strcasestr(names[i], "look")) look += stats_count(stats_out, names[i]);
    }
    snprintf(want, sizeof want, "\nsearch \"e\" %ld %ld ", e, e);
    const char *p = strstr(out, want);
    ck_assert_msg(p, "no '%s' in:\n%s", want + 1, out);
    char shown[512];
    sscanf(p + strlen(want), "%511s", shown);
    for (char *t = strtok(shown, ","); t; t = strtok(NULL, ",")) ck_assert_msg(strcasestr(t, "e"), "%s shown for 'e'", t);
    snprintf(want, sizeof want, "\nsearch \"LOOK\" %ld %ld Lookup\n", look, look);
    ck_assert_msg(look == 200 && strstr(out, want), "no '%s' in:\n%s", want + 1, out);
    ck_assert_msg(strstr(out, "\nsearch \"zzz\" 0 0 -\n"), "%s", out);
    snprintf(want, sizeof want, "%zu %zu", nacts, nacts);
    ck_assert_str_eq(at_web_line(out, "cleared", NULL, b, sizeof b) ? b : "", want);
    free(out);
}
END_TEST

/* The activity of the tsv that sorts first by cmp (-1: a before b). */
static const tact *first_by(int (*cmp)(const tact *, const tact *))
{
    const tact *f = &acts[0];
    for (size_t i = 1; i < nacts; i++)
        if (cmp(&acts[i], f) < 0) f = &acts[i];
    return f;
}
static int longer(const tact *a, const tact *b) { return a->dur > b->dur ? -1 : a->dur < b->dur ? 1 : (a->start < b->start ? -1 : 1); }
static int shorter(const tact *a, const tact *b) { return a->dur < b->dur ? -1 : a->dur > b->dur ? 1 : (a->start < b->start ? -1 : 1); }
static int earlier(const tact *a, const tact *b) { return a->start < b->start ? -1 : 1; }
static int by_name(const tact *a, const tact *b)
{
    int c = strcmp(a->name, b->name);
    return c ? c : earlier(a, b);
}

/* The table's first row (name, path, pid, start and duration in ns) after a step of table.js. */
static void check_first(const char *out, const char *what, const char *sort, const tact *t)
{
    char b[1024] = "", want[512];
    const char *p = out;
    snprintf(want, sizeof want, "%s %s %s %s %u %lld %lld \"", what, sort, t->name, t->path, t->pid, t->start, t->dur);
    while (at_web_line(out, "first", &p, b, sizeof b))
        if (!strncmp(b, what, strlen(what)) && b[strlen(what)] == ' ') break;
    ck_assert_msg(!strncmp(b, want, strlen(want)), "first row %s: '%s', want '%s...'", what, b, want);
}

START_TEST(table_sorts_and_pages)
{
    if (!web_ready("table_sorts_and_pages")) return;
    char *out = web("table.js", html, "table", dir, NULL);
    /* longest first as the page opens, the activity the tsv says is the longest */
    check_first(out, "opened", "dur-desc", first_by(longer));
    check_first(out, "dur-clicked", "dur-asc", first_by(shorter));
    check_first(out, "start-clicked", "start-asc", first_by(earlier));
    check_first(out, "name-clicked", "name-asc", first_by(by_name));
    char b[256], want[3][64];
    size_t pages = (nacts + 99) / 100;
    snprintf(want[0], sizeof want[0], "0 %zu %zu 100", pages, nacts);
    snprintf(want[1], sizeof want[1], "1 %zu %zu 100", pages, nacts);
    snprintf(want[2], sizeof want[2], "%zu %zu %zu %zu", pages - 1, pages, nacts, nacts - (pages - 1) * 100);
    const char *p = out;
    for (int i = 0; i < 3; i++) ck_assert_str_eq(at_web_line(out, "page", &p, b, sizeof b) ? b : "", want[i]);
    free(out);
}
END_TEST

/* Appends the subtree of a (its children in start order) as the waterfall lists it. */
static void subtree(const tact *a, int depth, const tact **rows, int *depths, int *n)
{
    rows[*n] = a;
    depths[(*n)++] = depth;
    for (;;) { /* children in start order: the next unlisted child with the earliest start */
        const tact *next = NULL;
        for (size_t i = 0; i < nacts; i++) {
            if (acts[i].parent != a->serial) continue;
            bool listed = false;
            for (int k = 0; k < *n; k++) listed |= rows[k] == &acts[i];
            if (!listed && (!next || acts[i].start < next->start)) next = &acts[i];
        }
        if (!next) return;
        subtree(next, depth + 1, rows, depths, n);
    }
}

START_TEST(waterfall_of_a_connection_across_threads)
{
    if (!web_ready("waterfall_of_a_connection_across_threads")) return;
    const tact *root = NULL;
    for (size_t i = 0; i < nacts; i++)
        if (!strcmp(acts[i].name, "Connection") && (!root || longer(&acts[i], root) < 0)) root = &acts[i];
    char *out = web("waterfall.js", html, "waterfall", dir, (const char *const[]){"Connection", NULL});
    char b[2048], want[2048];
    snprintf(want, sizeof want, "Connection %s %u", root->path, root->pid);
    ck_assert_str_eq(at_web_line(out, "root", NULL, b, sizeof b) ? b : "", want);
    /* its rows: the subtree in start order, with the tree's threads and transfers */
    const tact *rows[64];
    int depths[64], n = 0, visits = 0, xfers = 0;
    subtree(root, 0, rows, depths, &n);
    ck_assert_int_ge(n, 3);
    ck_assert_int_eq(at_web_count(out, "row"), n);
    const char *p = out;
    for (int i = 0; i < n; i++) {
        const tact *a = rows[i];
        ck_assert(at_web_line(out, "row", &p, b, sizeof b));
        char head[512], threads[1024], xf[1024], line[4096], tthreads[1024], txf[1024];
        snprintf(head, sizeof head, "%d %s %s %u %lld %lld ", depths[i], a->name, a->path, a->pid, a->start, a->dur);
        ck_assert_msg(!strncmp(b, head, strlen(head)), "row %d: '%s', want '%s...'", i, b, head);
        ck_assert_int_eq(sscanf(b + strlen(head), "%1023s %1023s", threads, xf), 2);
        tree_line(a->path, line, sizeof line);
        tree_list(line, "  threads ", tthreads, sizeof tthreads);
        ck_assert_msg(same_set(threads, tthreads), "%s: threads %s, the tree says %s", a->path, threads, tthreads);
        int nth = 1;
        for (const char *q = threads; *q; q++) nth += *q == ',';
        if (nth > 1) visits += nth;
        /* transfers: "from>to@send-recv" (ns) against the tree's "from->to@recv" (ms) */
        tree_list(line, "  transfers ", txf, sizeof txf);
        if (!strcmp(xf, "-")) {
            ck_assert_msg(!txf[0], "%s: the tree has transfers %s", a->path, txf);
            continue;
        }
        char conv[1024] = "", *save = NULL;
        for (char *t = strtok_r(xf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            char from[32], to[32], recv[32];
            long long s, r;
            ck_assert_int_eq(sscanf(t, "%31[^>]>%31[^@]@%lld-%lld", from, to, &s, &r), 4);
            ck_assert_msg(s <= r && s >= a->start, "%s: transfer %s", a->path, t);
            ms3(r, recv, sizeof recv);
            snprintf(conv + strlen(conv), sizeof conv - strlen(conv), "%s%s->%s@%s", conv[0] ? "," : "", from, to, recv);
            xfers++;
        }
        ck_assert_str_eq(conv, txf);
    }
    ck_assert_int_gt(xfers, 0); /* the hand-off from the accepting thread to a worker */
    snprintf(want, sizeof want, "%d visits %d arrows %d more 0", n, visits, xfers);
    ck_assert_str_eq(at_web_line(out, "bars", NULL, b, sizeof b) ? b : "", want);
    /* the stack of its Start: accept, called by the server's serve() */
    ck_assert_msg(at_web_line(out, "frame", NULL, b, sizeof b) && strstr(b, "accept"), "first frame: %s", b);
    ck_assert_msg(strstr(out, "\nframe demo_server!serve\n"), "%s", out);
    snprintf(want, sizeof want, "%s %s", rows[1]->name, rows[1]->path);
    ck_assert_str_eq(at_web_line(out, "detail", NULL, b, sizeof b) ? b : "", want);
    free(out);
}
END_TEST

START_TEST(flame_graph_zooms_into_a_frame)
{
    if (!web_ready("flame_graph_zooms_into_a_frame")) return;
    char *folded = tool((const char *const[]){"stacks", "--name", "Request", trace, NULL});
    char *out = web("flame.js", html, "flame", dir, (const char *const[]){"Request", NULL});
    /* the folded stacks of Request: the total, per box under the root, and under the widest of them */
    char kids[16][256], b[1024];
    long kc[16] = {0}, total = 0;
    int nk = 0;
    for (char *l = folded; l && *l;) {
        char *e = strchr(l, '\n');
        if (e) *e = 0;
        char *sp = strrchr(l, ' ');
        long c = atol(sp + 1);
        total += c;
        char *f1 = strchr(l, ';');
        if (f1) {
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)strcspn(f1 + 1, "; "), f1 + 1);
            int k = 0;
            while (k < nk && strcmp(kids[k], name)) k++;
            if (k == nk && nk < 16) snprintf(kids[nk++], sizeof kids[0], "%s", name);
            if (k < 16) kc[k] += c;
        }
        l = e ? e + 1 : NULL;
    }
    free(folded);
    ck_assert_int_gt(total, 0);
    char want[512];
    snprintf(want, sizeof want, "%ld", total);
    ck_assert_str_eq(at_web_line(out, "total", NULL, b, sizeof b) ? b : "", want);
    ck_assert_int_eq(at_web_count(out, "child"), nk);
    int widest = 0;
    for (int k = 0; k < nk; k++) {
        /* its count, and a width in proportion (boxes leave half a pixel between them) */
        snprintf(want, sizeof want, "\nchild \"%.255s\" %ld ", kids[k], kc[k]);
        const char *p = strstr(out, want);
        double w;
        ck_assert_msg(p && sscanf(p + strlen(want), "%lf", &w) == 1, "no '%s' in:\n%s", want + 1, out);
        ck_assert_msg(fabs(w - (double)kc[k] / (double)total) < 0.002, "%s: width %.4f of the graph", kids[k], w);
        if (kc[k] > kc[widest]) widest = k;
    }
    snprintf(want, sizeof want, "\"%.255s\"", kids[widest]);
    ck_assert_str_eq(at_web_line(out, "focus", NULL, b, sizeof b) ? b : "", want);
    /* zoomed: the box spans the graph, its root drawn above it */
    double wr;
    char zn[256];
    long zc;
    ck_assert(at_web_line(out, "zoomed", NULL, b, sizeof b));
    ck_assert_int_eq(sscanf(b, "%255s %ld %lf", zn, &zc, &wr), 3);
    ck_assert_msg(!strcmp(zn, want) && zc == kc[widest] && wr > 0.99, "zoomed: %s", b);
    ck_assert_int_gt(at_web_count(out, "grandchild"), 0);
    ck_assert_str_eq(at_web_line(out, "ancestors", NULL, b, sizeof b) ? b : "", "Request");
    snprintf(want, sizeof want, "\"Request\" %d", nk);
    ck_assert_str_eq(at_web_line(out, "reset", NULL, b, sizeof b) ? b : "", want);
    free(out);
}
END_TEST

/* A parent and the program it spawns, two files: one waterfall from the parent's activity down
 * into the child process's. */
START_TEST(waterfall_across_processes)
{
    if (!web_ready("waterfall_across_processes")) return;
    at_session s;
    const char *argv[] = {"proc_chain", "spawn", NULL};
    ck_assert_int_eq(at_session_run(&s, "report-web-spawn", argv, NULL), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace, "%s", at_session_describe(&s, d, sizeof d));
    char **files = at_trace_files(s.dir);
    ck_assert_uint_eq(at_strv_len(files), 2);
    char page[4300];
    snprintf(page, sizeof page, "%s/spawn.html", s.dir);
    free(tool((const char *const[]){"report", "-o", page, files[0], files[1], NULL}));
    char *tsv = tool((const char *const[]){"tree", "--tsv", files[0], files[1], NULL});
    char *out = web("waterfall.js", page, "spawn", s.dir, (const char *const[]){"Parent", NULL});
    /* Parent in the first process, Leaf under it in the other */
    tact *save = acts;
    size_t nsave = nacts;
    acts = NULL;
    nacts = 0;
    parse_tsv(tsv);
    const tact *parent = NULL, *leaf = NULL;
    for (size_t i = 0; i < nacts; i++) {
        if (!strcmp(acts[i].name, "Parent")) parent = &acts[i];
        if (!strcmp(acts[i].name, "Leaf")) leaf = &acts[i];
    }
    ck_assert_msg(parent && leaf && leaf->parent == parent->serial && leaf->pid != parent->pid, "%s", tsv);
    char b[1024], want[512];
    snprintf(want, sizeof want, "Parent %s %u", parent->path, parent->pid);
    ck_assert_str_eq(at_web_line(out, "root", NULL, b, sizeof b) ? b : "", want);
    snprintf(want, sizeof want, "\nrow 1 Leaf %s %u %lld %lld ", leaf->path, leaf->pid, leaf->start, leaf->dur);
    ck_assert_msg(strstr(out, want), "no '%s' in:\n%s", want + 1, out);
    free(acts);
    acts = save;
    nacts = nsave;
    free(out);
    free(tsv);
    at_strv_free(files);
    at_session_free(&s);
}
END_TEST

/* Where the time went, in the waterfall: tests/fixtures/glib_waits (requests that burn, sleep, wait
 * on locks and a busy pool) with CPU samples; each row of a round's waterfall says its CPU, blocked
 * and queued time (data and the text after its bar), and they are acttrace breakdown's for the
 * same activity (within rounding: the page keeps microseconds). */
START_TEST(waterfall_says_where_the_time_went)
{
    if (!web_ready("waterfall_says_where_the_time_went")) return;
    at_session s;
    const char *argv[] = {"glib_waits", "1", NULL};
    const char *env[] = {"ACTTRACE_SAMPLE_HZ=1000", NULL};
    ck_assert_int_eq(at_session_run(&s, "report-web-waits", argv, env), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace, "%s", at_session_describe(&s, d, sizeof d));
    char page[4300];
    snprintf(page, sizeof page, "%s/waits.html", s.dir);
    free(tool((const char *const[]){"report", "-o", page, s.t.path, NULL}));
    char *tsv = tool((const char *const[]){"breakdown", "--format", "tsv", s.t.path, NULL});
    char *out = web("waterfall.js", page, "waits", s.dir, (const char *const[]){"Round", NULL});
    int rows = 0;
    bool blocked_row = false, queued_row = false;
    for (const char *p = strstr(out, "\nsplit "); p; p = strstr(p + 1, "\nsplit ")) {
        char path[96], text[256];
        double cpu, blocked, queued;
        ck_assert_int_eq(sscanf(p, "\nsplit %95s %lf %lf %lf %255[^\n]", path, &cpu, &blocked, &queued, text), 5);
        /* breakdown's line of that path: name path wall cpu blocked queued other (ms) */
        char key[128];
        snprintf(key, sizeof key, "\t%s\t", path);
        const char *l = strstr(tsv, key);
        ck_assert_msg(l, "no breakdown line for %s:\n%s", path, tsv);
        double w, bc, bb, bq;
        ck_assert_int_eq(sscanf(l + strlen(key), "%lf %lf %lf %lf", &w, &bc, &bb, &bq), 4);
        ck_assert_msg(fabs(cpu / 1e6 - bc) < 0.1 && fabs(blocked / 1e6 - bb) < 0.1 && fabs(queued / 1e6 - bq) < 0.1,
                      "%s: the waterfall says cpu %.3f, blocked %.3f, queued %.3f ms; breakdown %.3f, %.3f, %.3f",
                      path, cpu / 1e6, blocked / 1e6, queued / 1e6, bc, bb, bq);
        if (cpu || blocked || queued)
            ck_assert_msg(strstr(text, "(cpu ") && strstr(text, ", blocked ") && strstr(text, ", queued "), "%s: %s", path, text);
        blocked_row |= blocked > 50e6;
        queued_row |= queued > 50e6;
        rows++;
    }
    ck_assert_int_eq(rows, 9); /* the round and its eight requests */
    ck_assert_msg(blocked_row && queued_row, "%s", out);
    free(out);
    free(tsv);
    at_session_free(&s);
}
END_TEST

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

START_TEST(a_million_activities)
{
    if (!web_ready("a_million_activities")) return;
    char *tmp = at_tmpdir("report-many"), path[4300], page[4300], fx[4300];
    snprintf(path, sizeof path, "%s/many.nettrace", tmp);
    snprintf(page, sizeof page, "%s/many.html", tmp);
    snprintf(fx, sizeof fx, "%s/fixtures/report_many", at_build_dir());
    char outenv[4400];
    snprintf(outenv, sizeof outenv, "ACTTRACE_OUTPUT=%s", path);
    const char *argv[] = {fx, NULL};
    const char *env[] = {outenv, "ACTTRACE_STACKS=none", NULL};
    at_run_opts o = {.argv = argv, .env = env, .cwd = tmp};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 0 && !strcmp(r.out, "activities 1000000\n"), "report_many: %s%s", r.out, r.err);
    at_run_result_free(&r);
    char *stats = tool((const char *const[]){"stats", path, NULL});
    ck_assert_int_eq(stats_count(stats, "Batch") + stats_count(stats, "Item") + stats_count(stats, "Slow"), 1000000);
    double t0 = now_s();
    free(tool((const char *const[]){"report", "-o", page, path, NULL}));
    double secs = now_s() - t0;
    struct stat st;
    ck_assert_int_eq(stat(page, &st), 0);
    printf("a_million_activities: report of 1000000 activities: %.1f MB, written in %.2f s\n", (double)st.st_size / 1e6, secs);

    char *out = web("many.js", page, "many", tmp, NULL);
    char b[1024];
    if (at_web_line(out, "timings", NULL, b, sizeof b)) printf("a_million_activities: page timings (ms): %s\n", b);
    ck_assert_str_eq(at_web_line(out, "activities", NULL, b, sizeof b) ? b : "", "1000000");
    /* four threads of 250,000 activities each, every one drawn: as a bar, or counted in a column */
    ck_assert_int_eq(at_web_count(out, "thread"), 4);
    const char *p = out;
    while (at_web_line(out, "thread", &p, b, sizeof b)) {
        long pid, tid, slices;
        int lanes;
        ck_assert_int_eq(sscanf(b, "%ld %ld %d %ld", &pid, &tid, &lanes, &slices), 4);
        ck_assert_msg(lanes == 2 && slices == 250000, "thread: %s", b);
    }
    long bars, merged, cols;
    ck_assert(at_web_line(out, "whole", NULL, b, sizeof b));
    ck_assert_int_eq(sscanf(b, "%ld %ld %ld", &bars, &merged, &cols), 3);
    ck_assert_msg(bars + merged == 1000000 && merged > 900000 && cols > 1000, "whole: %s", b);
    /* the longest activity leads the table: the Batch that holds Slow, stats' longest */
    char name[64], apath[96], dur[AM_DUR_MAX], want[128];
    long apid;
    long long start, ns;
    ck_assert(at_web_line(out, "first", NULL, b, sizeof b));
    ck_assert_int_eq(sscanf(b, "%63s %95s %ld %lld %lld", name, apath, &apid, &start, &ns), 5);
    am_fmt_dur(dur, ns);
    snprintf(want, sizeof want, "\nBatch ");
    const char *line = strstr(stats, want);
    ck_assert_ptr_nonnull(line);
    char f[6][32];
    ck_assert_int_eq(sscanf(line + 1, "%31s %31s %31s %31s %31s %31s", f[0], f[1], f[2], f[3], f[4], f[5]), 6);
    ck_assert_msg(!strcmp(name, "Batch") && !strcmp(dur, f[5]), "first row %s, stats' longest Batch %s", b, f[5]);
    /* each notch of the wheel (400) zooms in e^-0.8 at the pointer; bars appear as activities spread */
    p = out;
    double a0, a1, b0, b1;
    long rects = 0;
    for (int i = 0; i < 8; i++) {
        int k;
        ck_assert(at_web_line(out, "wheel", &p, b, sizeof b));
        ck_assert_int_eq(sscanf(b, "%d %lf %lf %lf %lf %ld %ld %ld", &k, &a0, &a1, &b0, &b1, &rects, &merged, &cols), 8);
        ck_assert_msg(fabs((b1 - b0) / (a1 - a0) - exp(-0.8)) < 0.005, "wheel: %s", b);
    }
    ck_assert_msg(rects > 0 && merged < 100000, "after zooming in: %s", b);
    snprintf(want, sizeof want, "Batch %s %ld", apath, apid);
    ck_assert_str_eq(at_web_line(out, "clicked", NULL, b, sizeof b) ? b : "", want);
    free(out);
    free(stats);
    /* not left for TraceEvent (make check reads the traces the tests leave): two million events of
     * one kind would add minutes there and check nothing the other traces do not */
    if (!getenv("AT_KEEP_TMP")) {
        unlink(path);
        at_rmtree(tmp);
    }
    free(tmp);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("report_web");
    TCase *tc = tcase_create("demo");
    tcase_add_unchecked_fixture(tc, setup_demo, teardown_demo);
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, timeline_threads_names_zoom_pan_click);
    tcase_add_test(tc, search_counts_match_the_trace);
    tcase_add_test(tc, table_sorts_and_pages);
    tcase_add_test(tc, waterfall_of_a_connection_across_threads);
    tcase_add_test(tc, flame_graph_zooms_into_a_frame);
    tcase_add_test(tc, waterfall_across_processes);
    tcase_add_test(tc, waterfall_says_where_the_time_went);
    tcase_add_test(tc, a_million_activities);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
