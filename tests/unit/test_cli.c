/* test_cli.c: the command line every acttrace command shares, through the built binary on a small
 * trace written with known content (at_tracegen.h): --version, help on stdout with exit 0, --opt=value
 * as --opt value, options after the files and --, usage errors (one line naming the option, then the
 * usage, exit 2), filters that match nothing (named, exit 1), directories, empty and non-trace files
 * named as such, -o - on stdout, durations in the unit that shows them, and check on a script. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "at_testlib.h"
#include "at_tracegen.h"

static char *dir;
static char trace[4096];
static char worker_tid[32];

static void *worker(void *arg)
{
    (void)arg;
    at_gen_note_thread(1);
    at_gen_start("Work", "//4", NULL, 3);
    at_gen_stop("Work", "//4", 4);
    return NULL;
}

/* Request //1 lasts 412 us, Request //2 7.5 ms, Batch //3 1.5 s (with a stacked event inside);
 * Work //4 runs on a second thread. */
static void gen(void *ctx)
{
    (void)ctx;
    at_gen_note_thread(0);
    at_gen_start("Request", "//1", NULL, 1);
    at_gen_stop("Request", "//1", 1.412);
    at_gen_start("Request", "//2", NULL, 2);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    at_gen_stop("Request", "//2", 9.5);
    at_gen_start("Batch", "//3", NULL, 10);
    uintptr_t st[] = {0x1002, 0x1001};
    at_gen_info("Sample", "//3", 11, st, 2);
    at_gen_stop("Batch", "//3", 1510);
}

static void setup(void)
{
    dir = at_tmpdir("cli");
    snprintf(trace, sizeof trace, "%s/t.nettrace", dir);
    ck_assert_int_gt(at_gen_trace(trace, gen, NULL), 0);
    snprintf(worker_tid, sizeof worker_tid, "%llu", (unsigned long long)at_gen_tids[1]);
}

static void teardown(void)
{
    if (!getenv("AT_KEEP_TMP")) at_rmtree(dir);
    free(dir);
}

/* Runs acttrace with args; asserts the exit status; the result is the caller's to free. */
static void run(at_run_result *r, int want, const char *const *args)
{
    ck_assert_int_eq(at_tool_run(r, args), 0);
    char how[128];
    ck_assert_msg(r->exited && r->status == want, "acttrace %s %s: %s, not exit %d; stdout: %.300s stderr: %.600s",
                  args[0], args[1] ? args[1] : "", at_run_describe(r, how, sizeof how), want, r->out, r->err);
}

/* Exit status want and stderr exactly err_line (a usage error: err_line, then the usage). */
static void expect_err(int want, const char *err_line, const char *const *args)
{
    at_run_result r;
    run(&r, want, args);
    size_t l = strlen(err_line);
    ck_assert_msg(!strncmp(r.err, err_line, l), "acttrace %s: stderr is\n%s\nnot\n%s", args[0], r.err, err_line);
    if (want == 2) {
        /* the command's usage; the overview's for an error before the command */
        char usage[64];
        snprintf(usage, sizeof usage, "usage: acttrace %s", strstr(err_line, "acttrace: ") ? "[" : args[0]);
        ck_assert_msg(!strncmp(r.err + l, usage, strlen(usage)), "acttrace %s: no usage after the error: %s", args[0],
                      r.err);
    } else {
        ck_assert_msg(r.err[l] == 0, "acttrace %s: more on stderr than '%s': %s", args[0], err_line, r.err);
    }
    ck_assert_msg(want == 2 ? r.outlen == 0 : true, "acttrace %s: a usage error printed on stdout: %s", args[0], r.out);
    at_run_result_free(&r);
}

/* stdout of acttrace args (exit 0), malloc'd. */
static char *out_of(const char *const *args)
{
    at_run_result r;
    run(&r, 0, args);
    char *s = strdup(r.out);
    at_run_result_free(&r);
    return s;
}

static void same_output(const char *const *a, const char *const *b)
{
    char *x = out_of(a), *y = out_of(b);
    ck_assert_msg(x[0] && !strcmp(x, y), "acttrace %s %s ... and %s %s ... differ:\n%s\n---\n%s", a[0], a[1], b[0],
                  b[1], x, y);
    free(x);
    free(y);
}

START_TEST(version)
{
    char *v = out_of((const char *const[]){"--version", NULL});
    unsigned a, b, c;
    char nl;
    ck_assert_msg(sscanf(v, "acttrace %u.%u.%u%c", &a, &b, &c, &nl) == 4 && nl == '\n' && !strchr(v, '\n')[1],
                  "--version: %s", v);
    char *w = out_of((const char *const[]){"-V", NULL});
    ck_assert_str_eq(v, w);
    free(v);
    free(w);
}
END_TEST

static const char *const commands[] = {"run", "check", "events", "tree", "stats", "stacks",
                                       "export", "report", "dump", "verify"};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

START_TEST(help)
{
    /* the overview: every command and the exit codes */
    char *h = out_of((const char *const[]){"--help", NULL});
    for (size_t i = 0; i < NCOMMANDS; i++) {
        char line[32];
        snprintf(line, sizeof line, "\n  %s ", commands[i]);
        ck_assert_msg(strstr(h, line), "acttrace --help does not list %s:\n%s", commands[i], h);
    }
    ck_assert_msg(strstr(h, "0 ok") && strstr(h, "1 error") && strstr(h, "2 usage error") &&
                      strstr(h, "3 an input file is damaged"),
                  "acttrace --help lacks the exit codes:\n%s", h);
    free(h);
    /* each command's, with -h and --help, on stdout */
    for (size_t i = 0; i < NCOMMANDS; i++) {
        char usage[64];
        snprintf(usage, sizeof usage, "usage: acttrace %s", commands[i]);
        char *s = out_of((const char *const[]){commands[i], "-h", NULL});
        char *l = out_of((const char *const[]){commands[i], "--help", NULL});
        char *viahelp = out_of((const char *const[]){"help", commands[i], NULL});
        char *before = out_of((const char *const[]){"--help", commands[i], NULL});
        ck_assert_msg(!strncmp(s, usage, strlen(usage)), "acttrace %s -h: %s", commands[i], s);
        ck_assert_str_eq(s, l);
        ck_assert_str_eq(s, viahelp);
        ck_assert_str_eq(s, before);
        free(before);
        if (strcmp(commands[i], "run")) /* run's own */
            ck_assert_msg(strstr(s, "Exit status") && strstr(s, "2 usage error"),
                          "acttrace %s --help lacks its exit codes:\n%s", commands[i], s);
        free(s);
        free(l);
        free(viahelp);
    }
}
END_TEST

START_TEST(value_forms)
{
    /* --opt=value as --opt value, options after the files, short and long -o */
    same_output((const char *const[]){"events", "--name=Request", trace, NULL},
                (const char *const[]){"events", trace, "--name", "Request", NULL});
    same_output((const char *const[]){"tree", "--min-ms=0.3", trace, NULL},
                (const char *const[]){"tree", trace, "--min-ms", "0.3", NULL});
    same_output((const char *const[]){"events", "--thread", worker_tid, "--from=2.5", "--to=5", trace, NULL},
                (const char *const[]){"events", trace, "--to", "5", "--from", "2.5", "--thread", worker_tid, NULL});
    same_output((const char *const[]){"export", "--format=chrome", trace, NULL},
                (const char *const[]){"export", trace, "--format", "chrome", NULL});
    same_output((const char *const[]){"stacks", "--name=Batch", trace, NULL},
                (const char *const[]){"stacks", trace, "--name", "Batch", NULL});
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/a.json", dir);
    snprintf(b, sizeof b, "%s/b.json", dir);
    char *x = out_of((const char *const[]){"export", "--format", "speedscope", "-o", a, trace, NULL});
    char *y = out_of((const char *const[]){"export", trace, "--format=speedscope", "--output", b, NULL});
    ck_assert_msg(!x[0] && !y[0], "export to a file printed: %s%s", x, y);
    free(x);
    free(y);
    char *fa = at_read_file(a, NULL), *fb = at_read_file(b, NULL);
    ck_assert_msg(fa && fb && fa[0] == '{' && !strcmp(fa, fb), "-o FILE and --output FILE wrote different files");
    free(fa);
    free(fb);
    /* -- ends the options: a file whose name starts with '-' */
    char dash[4200];
    snprintf(dash, sizeof dash, "%s/-t.nettrace", dir);
    ck_assert_int_eq(link(trace, dash), 0);
    const char *argv[] = {NULL, "tree", "--", "-t.nettrace", NULL};
    char tool[4200];
    snprintf(tool, sizeof tool, "%s/acttrace", at_build_dir());
    argv[0] = tool;
    at_run_opts o = {.argv = argv, .no_preload = true, .cwd = dir};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    char *want = out_of((const char *const[]){"tree", trace, NULL});
    ck_assert_msg(r.exited && r.status == 0 && !strcmp(r.out, want), "tree -- -t.nettrace: %s%s", r.out, r.err);
    free(want);
    at_run_result_free(&r);
}
END_TEST

START_TEST(usage_errors)
{
    /* an unknown option, for every command that takes files (run is its own) */
    for (size_t i = 1; i < NCOMMANDS; i++) {
        char line[128];
        snprintf(line, sizeof line, "acttrace %s: unknown option '--nme'\n", commands[i]);
        expect_err(2, line, (const char *const[]){commands[i], "--nme=x", trace, NULL});
    }
    expect_err(2, "acttrace tree: unknown option '--nme'\n", (const char *const[]){"tree", "--nme", "x", trace, NULL});
    expect_err(2, "acttrace tree: unknown option '-z'\n", (const char *const[]){"tree", "-z", trace, NULL});
    expect_err(2, "acttrace: unknown option '--bogus'\n", (const char *const[]){"--bogus", NULL});
    expect_err(2, "acttrace: unknown command 'trees'\n", (const char *const[]){"trees", trace, NULL});
    {
        at_run_result hr;
        run(&hr, 2, (const char *const[]){"help", "run", "extra", NULL});
        ck_assert_msg(!strncmp(hr.err, "acttrace help: one command at a time (not 'extra')\nusage: acttrace [", 60),
                      "help run extra: %s", hr.err);
        at_run_result_free(&hr);
    }
    /* a missing value, a value where none is taken, a bad value */
    expect_err(2, "acttrace events: option '--thread' needs a value\n", (const char *const[]){"events", trace, "--thread", NULL});
    expect_err(2, "acttrace export: option '-o' needs a value\n",
               (const char *const[]){"export", "--format", "chrome", trace, "-o", NULL});
    expect_err(2, "acttrace tree: option '--tsv' takes no value\n", (const char *const[]){"tree", "--tsv=yes", trace, NULL});
    expect_err(2, "acttrace events: --thread wants a thread id (a number), not 'abc'\n",
               (const char *const[]){"events", "--thread", "abc", trace, NULL});
    expect_err(2, "acttrace events: --from wants a time in ms (a number such as 12.5), not 'soon'\n",
               (const char *const[]){"events", "--from=soon", trace, NULL});
    expect_err(2, "acttrace tree: --min-ms wants a time in ms (a number such as 12.5, not negative), not '-1'\n",
               (const char *const[]){"tree", "--min-ms", "-1", trace, NULL});
    expect_err(2, "acttrace events: --activity wants an activity path such as //1/5 (or a GUID), not '1/1'\n",
               (const char *const[]){"events", "--activity", "1/1", trace, NULL});
    expect_err(2, "acttrace tree: --activity wants an activity path such as //1/5 (or a GUID), not '1/1'\n",
               (const char *const[]){"tree", "--activity", "1/1", trace, NULL});
    expect_err(2, "acttrace export: unknown format 'svg' (chrome, speedscope or otlp)\n",
               (const char *const[]){"export", "--format", "svg", trace, NULL});
    expect_err(2, "acttrace export: --endpoint goes with --format otlp\n",
               (const char *const[]){"export", "--format", "chrome", "--endpoint", "http://127.0.0.1:1", trace, NULL});
    expect_err(2, "acttrace tree: give at least one trace FILE\n", (const char *const[]){"tree", "--name", "x", NULL});
    /* an empty value says nothing: refused, not taken as a name no event has */
    expect_err(2, "acttrace events: option '--name' needs a value (it is empty)\n",
               (const char *const[]){"events", "--name=", trace, NULL});
    expect_err(2, "acttrace stats: option '--name' needs a value (it is empty)\n",
               (const char *const[]){"stats", "--name", "", trace, NULL});
    expect_err(2, "acttrace run: the program's name is empty\n", (const char *const[]){"run", "--", "", NULL});
}
END_TEST

START_TEST(filters_matching_nothing)
{
    char line[8400];
    snprintf(line, sizeof line, "acttrace tree: no activity named 'Nope' in %s\n", trace);
    expect_err(1, line, (const char *const[]){"tree", "--name", "Nope", trace, NULL});
    snprintf(line, sizeof line, "acttrace tree: no activity lasting at least 5000 ms in %s\n", trace);
    expect_err(1, line, (const char *const[]){"tree", "--min-ms", "5000", trace, NULL});
    snprintf(line, sizeof line, "acttrace tree: no activity named 'Work' lasts at least 2 ms in %s\n", trace);
    expect_err(1, line, (const char *const[]){"tree", "--name", "Work", "--min-ms", "2", trace, NULL});
    snprintf(line, sizeof line, "acttrace tree: no activity on thread 999999 in %s\n", trace);
    expect_err(1, line, (const char *const[]){"tree", "--thread", "999999", trace, NULL});
    snprintf(line, sizeof line, "acttrace tree: no activity //7 or below it in %s\n", trace);
    expect_err(1, line, (const char *const[]){"tree", "--activity", "//7", trace, NULL});
    snprintf(line, sizeof line, "acttrace tree: no activity matches --thread %s --activity //1 together in %s\n",
             worker_tid, trace);
    expect_err(1, line, (const char *const[]){"tree", "--thread", worker_tid, "--activity", "//1", trace, NULL});
    snprintf(line, sizeof line, "acttrace events: no event named 'Nope' (or 'NopeStart', 'NopeStop') in %s\n", trace);
    expect_err(1, line, (const char *const[]){"events", "--name", "Nope", trace, NULL});
    snprintf(line, sizeof line, "acttrace events: no event on thread 999999 in %s\n", trace);
    expect_err(1, line, (const char *const[]){"events", "--thread", "999999", trace, NULL});
    snprintf(line, sizeof line, "acttrace events: no event in activity //7 or below it in %s\n", trace);
    expect_err(1, line, (const char *const[]){"events", "--activity", "//7", trace, NULL});
    snprintf(line, sizeof line, "acttrace events: no event between 5000 ms and the end in %s\n", trace);
    expect_err(1, line, (const char *const[]){"events", "--from", "5000", trace, NULL});
    snprintf(line, sizeof line, "acttrace events: no event matches --name Request --thread %s together in %s\n",
             worker_tid, trace);
    expect_err(1, line, (const char *const[]){"events", "--name", "Request", "--thread", worker_tid, trace, NULL});
    snprintf(line, sizeof line, "acttrace stacks: no activity named 'Nope' in %s\n", trace);
    expect_err(1, line, (const char *const[]){"stacks", "--name", "Nope", trace, NULL});
    snprintf(line, sizeof line, "acttrace stacks: no event with a stack inside an activity named 'Request' in %s\n",
             trace);
    expect_err(1, line, (const char *const[]){"stacks", "--name", "Request", trace, NULL});
    snprintf(line, sizeof line, "acttrace stacks: no CPU sample in %s (its events with a stack fold without --samples)\n",
             trace);
    expect_err(1, line, (const char *const[]){"stacks", "--samples", trace, NULL});
    {
        /* a .NET runtime's sample trace: its only stacks are samples, which plain stacks leaves out */
        char rt[4200];
        snprintf(rt, sizeof rt, "%s/tests/data/nettrace-samples/dotnet-5.0-SampleProfiler-single-thread.golden.nettrace",
                 AT_SOURCE_DIR);
        at_run_result rr;
        run(&rr, 0, (const char *const[]){"stacks", rt, NULL});
        snprintf(line, sizeof line, "acttrace stacks: the only stacks in %s are CPU samples: fold them with --samples\n",
                 rt);
        ck_assert_msg(rr.outlen == 0 && !strcmp(rr.err, line), "stacks on runtime samples: '%s'", rr.err);
        at_run_result_free(&rr);
        /* with --samples: recorded, none inside an activity (the runtime writes none): said, not "record them" */
        run(&rr, 1, (const char *const[]){"stacks", "--samples", rt, NULL});
        snprintf(line, sizeof line,
                 "acttrace stacks: none of the 5564 CPU samples in %s was taken inside an activity with a stack "
                 "(--all folds those outside activities too)\n",
                 rt);
        ck_assert_msg(!strcmp(rr.err, line), "stacks --samples on runtime samples: '%s'", rr.err);
        at_run_result_free(&rr);
        run(&rr, 0, (const char *const[]){"stacks", "--samples", "--all", rt, NULL});
        ck_assert_msg(rr.outlen > 0, "stacks --samples --all folded nothing: %s", rr.err);
        at_run_result_free(&rr);
    }
    snprintf(line, sizeof line, "acttrace stacks: no event with a stack on thread %s in %s\n", worker_tid, trace);
    expect_err(1, line, (const char *const[]){"stacks", "--thread", worker_tid, trace, NULL});
    snprintf(line, sizeof line, "acttrace stacks: no event with a stack inside //1 or below it in %s\n", trace);
    expect_err(1, line, (const char *const[]){"stacks", "--activity", "//1", trace, NULL});
    char *sk = out_of((const char *const[]){"stacks", "--activity", "//3", trace, NULL});
    ck_assert_msg(!strncmp(sk, "Batch;", 6), "stacks --activity //3: %s", sk);
    free(sk);
    snprintf(line, sizeof line, "acttrace export: no activity named 'Nope' in %s\n", trace);
    expect_err(1, line, (const char *const[]){"export", "--format", "chrome", "--name", "Nope", trace, NULL});
    char *ex = out_of((const char *const[]){"export", "--format", "chrome", "--name", "Batch", trace, NULL});
    ck_assert_msg(strstr(ex, "\"name\":\"Batch\"") && !strstr(ex, "\"name\":\"Request\"") &&
                      !strstr(ex, "\"name\":\"Work\""),
                  "export --name Batch: %.400s", ex);
    free(ex);
    snprintf(line, sizeof line, "acttrace stats: no activity named 'Nope' in %s\n", trace);
    expect_err(1, line, (const char *const[]){"stats", "--name", "Nope", trace, NULL});
    /* the same filters when they match: exit 0 */
    char *tw = out_of((const char *const[]){"tree", "--thread", worker_tid, trace, NULL});
    ck_assert_msg(!strncmp(tw, "Work //4 ", 9) && !strchr(tw, '\n')[1], "tree --thread %s:\n%s", worker_tid, tw);
    free(tw);
    char *ta = out_of((const char *const[]){"tree", "--activity", "//3", trace, NULL});
    ck_assert_msg(!strncmp(ta, "Batch //3 ", 10) && !strchr(ta, '\n')[1], "tree --activity //3:\n%s", ta);
    free(ta);
    char *st = out_of((const char *const[]){"stats", "--name", "Request", trace, NULL});
    ck_assert_msg(strstr(st, "\nRequest ") && !strstr(st, "Batch") && !strstr(st, "Work"), "%s", st);
    free(st);
    char *s = out_of((const char *const[]){"events", "--activity", "//3", "--name", "Batch", trace, NULL});
    ck_assert_msg(strstr(s, "BatchStart") && strstr(s, "BatchStop"), "%s", s);
    free(s);
}
END_TEST

/* one file given twice (by one name, through a link, or as a copy) would count each event twice:
 * refused */
START_TEST(same_file_twice)
{
    char alias[4200], line[9000];
    snprintf(alias, sizeof alias, "%s/alias.nettrace", dir);
    ck_assert_int_eq(symlink(trace, alias), 0);
    static const char *const readers[] = {"events", "tree", "stats", "stacks", "report", "export"};
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++) {
        const char *args[8];
        int n = 0;
        args[n++] = readers[i];
        if (!strcmp(readers[i], "report")) args[n++] = "-o", args[n++] = "-";
        if (!strcmp(readers[i], "export")) args[n++] = "--format", args[n++] = "chrome";
        args[n++] = trace;
        args[n++] = trace;
        args[n] = NULL;
        snprintf(line, sizeof line, "acttrace %s: %s is given twice: give it once\n", readers[i], trace);
        expect_err(1, line, args);
        args[n - 1] = alias;
        snprintf(line, sizeof line, "acttrace %s: %s and %s are the same file: give it once\n", readers[i], trace,
                 alias);
        expect_err(1, line, args);
    }
    /* and a copy of it */
    char copy[4200];
    snprintf(copy, sizeof copy, "%s/copy.nettrace", dir);
    {
        char cmd[9000];
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", trace, copy);
        ck_assert_int_eq(system(cmd), 0);
    }
    snprintf(line, sizeof line, "acttrace tree: %s and %s hold the same trace (a copy?): give it once\n", trace, copy);
    expect_err(1, line, (const char *const[]){"tree", trace, copy, NULL});
    snprintf(line, sizeof line, "acttrace stats: - (standard input) is given twice: it can be read once\n");
    expect_err(1, line, (const char *const[]){"stats", "-", "-", NULL});
}
END_TEST

START_TEST(not_traces)
{
    char empty[4200], text[4200], sub[4200];
    snprintf(empty, sizeof empty, "%s/empty.nettrace", dir);
    snprintf(text, sizeof text, "%s/notes.txt", dir);
    snprintf(sub, sizeof sub, "%s/folder", dir);
    FILE *f = fopen(empty, "w");
    fclose(f);
    f = fopen(text, "w");
    fputs("these are notes, not a trace\n", f);
    fclose(f);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    static const char *const readers[][4] = {{"events"}, {"tree"}, {"stats"}, {"stacks"}, {"dump"}, {"verify"},
                                             {"export", "--format", "chrome"}, {"report", "-o", "-"}};
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++) {
        const char *const *c = readers[i];
        struct {
            const char *file, *says;
        } cases[] = {{sub, "is a directory"},
                     {empty, "is empty"},
                     {text, "is not a .nettrace file (it does not start with the Nettrace magic)"}};
        for (size_t k = 0; k < 3; k++) {
            char line[8400];
            snprintf(line, sizeof line, "acttrace %s: %s %s\n", c[0], cases[k].file, cases[k].says);
            const char *args[6];
            int n = 0;
            for (int j = 0; j < 4 && c[j]; j++) args[n++] = c[j];
            args[n++] = cases[k].file;
            args[n] = NULL;
            expect_err(1, line, args);
        }
    }
}
END_TEST

/* The first bytes of path, for an "is it still the trace" check. */
static bool starts_with(const char *path, const char *head)
{
    char b[16] = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    size_t n = fread(b, 1, strlen(head), f);
    fclose(f);
    return n == strlen(head) && !memcmp(b, head, n);
}

/* -o naming an input trace (by its name or another link to it), or another trace, is refused
 * before anything is written: the traces are still there afterwards */
START_TEST(output_is_input)
{
    char alias[4200];
    snprintf(alias, sizeof alias, "%s/same.nettrace", dir);
    ck_assert_int_eq(link(trace, alias), 0);
    static const char *const writers[][3] = {{"export", "--format", "chrome"}, {"report"}};
    const char *names[] = {trace, alias};
    for (size_t i = 0; i < 2; i++)
        for (size_t k = 0; k < 2; k++) {
            const char *args[8];
            int n = 0;
            for (int j = 0; j < 3 && writers[i][j]; j++) args[n++] = writers[i][j];
            args[n++] = "-o";
            args[n++] = names[k];
            args[n++] = trace;
            args[n] = NULL;
            char line[9000];
            snprintf(line, sizeof line,
                     "acttrace %s: -o %s is the input trace %s: writing it would destroy what is being read; "
                     "choose another name\n",
                     writers[i][0], names[k], trace);
            expect_err(2, line, args);
            ck_assert_msg(starts_with(trace, "Nettrace"), "%s -o %s: the input trace was overwritten", writers[i][0],
                          names[k]);
        }
    /* another trace (not an input) is not written over either */
    char other[4200];
    snprintf(other, sizeof other, "%s/other.nettrace", dir);
    {
        char cmd[9000];
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", trace, other);
        ck_assert_int_eq(system(cmd), 0);
    }
    for (size_t i = 0; i < 2; i++) {
        const char *args[8];
        int n = 0;
        for (int j = 0; j < 3 && writers[i][j]; j++) args[n++] = writers[i][j];
        args[n++] = "-o";
        args[n++] = other;
        args[n++] = trace;
        args[n] = NULL;
        char line[9000];
        snprintf(line, sizeof line, "acttrace %s: -o %s is a trace: writing it would destroy it; choose another name\n",
                 writers[i][0], other);
        expect_err(2, line, args);
        ck_assert(starts_with(other, "Nettrace"));
    }
    /* and the trace still reads as before */
    char *a = out_of((const char *const[]){"stats", trace, NULL});
    ck_assert_msg(strstr(a, "Request") != NULL, "stats after the refusals: %s", a);
    free(a);
}
END_TEST

/* A write that fails (a full disk: /dev/full) is an error with one line naming the output, never
 * exit 0 with the output lost; /dev/full stays the device it is */
START_TEST(write_failures)
{
    struct stat st;
    ck_assert_msg(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode),
                  "this test needs /dev/full, the character device that fails every write");
    char tool[4096];
    snprintf(tool, sizeof tool, "%s/acttrace", at_build_dir());
    static const char *const cmds[] = {"events", "tree", "stats", "stacks", "dump", "verify",
                                       "export --format chrome", "export --format speedscope",
                                       "report -o -"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char script[9000];
        snprintf(script, sizeof script, "exec '%s' %s '%s' > /dev/full", tool, cmds[i], trace);
        const char *argv[] = {"sh", "-c", script, NULL};
        at_run_opts o = {.argv = argv, .no_preload = true};
        at_run_result r;
        ck_assert_int_eq(at_run(&o, &r), 0);
        char cmd[32], want[128];
        sscanf(cmds[i], "%31s", cmd);
        snprintf(want, sizeof want, "acttrace %s: standard output: write failed", cmd);
        ck_assert_msg(r.exited && r.status == 1 && !strncmp(r.err, want, strlen(want)) &&
                          !strchr(r.err, '\n')[1],
                      "acttrace %s > /dev/full: exit %d, stderr '%s' (not exit 1 and one line '%s...')", cmds[i],
                      r.status, r.err, want);
        at_run_result_free(&r);
    }
    /* the overview and the version too */
    static const char *const plain[] = {"--help", "--version", "help stats"};
    for (size_t i = 0; i < 3; i++) {
        char script[9000];
        snprintf(script, sizeof script, "exec '%s' %s > /dev/full", tool, plain[i]);
        const char *argv[] = {"sh", "-c", script, NULL};
        at_run_opts o = {.argv = argv, .no_preload = true};
        at_run_result r;
        ck_assert_int_eq(at_run(&o, &r), 0);
        ck_assert_msg(r.exited && r.status == 1 && strstr(r.err, ": standard output: write failed"),
                      "acttrace %s > /dev/full: exit %d, stderr '%s'", plain[i], r.status, r.err);
        at_run_result_free(&r);
    }
    static const char *const writers[][3] = {{"export", "--format", "chrome"}, {"report"}};
    for (size_t i = 0; i < 2; i++) {
        const char *args[8];
        int n = 0;
        for (int j = 0; j < 3 && writers[i][j]; j++) args[n++] = writers[i][j];
        args[n++] = "-o";
        args[n++] = "/dev/full";
        args[n++] = trace;
        args[n] = NULL;
        at_run_result r;
        run(&r, 1, args);
        char want[128];
        snprintf(want, sizeof want, "acttrace %s: /dev/full: write failed", writers[i][0]);
        ck_assert_msg(!strncmp(r.err, want, strlen(want)) && !strstr(r.err, "wrote"),
                      "%s -o /dev/full: stderr '%s'", writers[i][0], r.err);
        at_run_result_free(&r);
        ck_assert_msg(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode), "%s -o /dev/full removed the device",
                      writers[i][0]);
    }
}
END_TEST

/* Request //1 stopped twice; Other //2 stopped by a Stop of another name */
static void gen_unmatched(void *ctx)
{
    (void)ctx;
    at_gen_note_thread(0);
    at_gen_start("Request", "//1", NULL, 1);
    at_gen_stop("Request", "//1", 2);
    at_gen_stop("Request", "//1", 3.5);
    at_gen_start("Other", "//2", NULL, 4);
    at_gen_stop("Request", "//2", 5);
    at_gen_stop("Other", "//2", 6);
}

/* Stops that match no open activity: how many, and the first said in full, by tree and the report */
START_TEST(unmatched_stops_named)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/u.nettrace", dir);
    pid_t pid = at_gen_trace(path, gen_unmatched, NULL);
    ck_assert_int_gt(pid, 0);
    at_run_result r;
    run(&r, 0, (const char *const[]){"tree", path, NULL});
    char want[512];
    snprintf(want, sizeof want,
             "acttrace tree: 2 Stop events matched no open activity; the first: RequestStop of //1 in pid %d, "
             "thread %llu, at 3.500 ms: no activity of that id was open (stopped already, or its Start is in a file "
             "not given or was lost) (tree --tsv lists each as a stop line with no activity)\n",
             (int)pid, (unsigned long long)at_gen_tids[0]);
    ck_assert_msg(strstr(r.err, want) != NULL, "tree's stderr:\n%s\nlacks\n%s", r.err, want);
    at_run_result_free(&r);
    run(&r, 0, (const char *const[]){"report", "-o", "-", path, NULL});
    ck_assert_msg(strstr(r.out, "\"unmatched\":2,\"unmatched_first\":\"RequestStop of //1 in pid ") != NULL,
                  "the report's data lacks the first unmatched Stop");
    at_run_result_free(&r);
}
END_TEST

/* python3 reads text from its stdin with script; returns its stdout after asserting exit 0. */
static char *python_stdin(const char *script, const char *text)
{
    const char *argv[] = {"python3", "-c", script, NULL};
    at_run_opts o = {.argv = argv, .no_preload = true, .stdin_data = text};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 0, "python: %s%s", r.out, r.err);
    char *out = strdup(r.out);
    at_run_result_free(&r);
    return out;
}

START_TEST(output_to_stdout)
{
    static const char json_check[] =
        "import json,sys\n"
        "d=json.load(sys.stdin)\n"
        "print('chrome' if 'traceEvents' in d else 'speedscope' if 'profiles' in d else 'other')\n";
    const char *formats[] = {"chrome", "speedscope"};
    for (int i = 0; i < 2; i++) {
        at_run_result r;
        run(&r, 0, (const char *const[]){"export", "--format", formats[i], "-o", "-", trace, NULL});
        char *kind = python_stdin(json_check, r.out);
        char want[32];
        snprintf(want, sizeof want, "%s\n", formats[i]);
        ck_assert_str_eq(kind, want);
        free(kind);
        at_run_result_free(&r);
    }
    /* the report: HTML whose elements all close, with its data and script, nothing said about a file */
    static const char html_check[] =
        "import sys\n"
        "from html.parser import HTMLParser\n"
        "class P(HTMLParser):\n"
        "  def __init__(s):\n"
        "    super().__init__(); s.open=[]; s.seen=set()\n"
        "  def handle_starttag(s,t,a):\n"
        "    s.seen.add(t)\n"
        "    if t not in ('meta','br','img','link','input'): s.open.append(t)\n"
        "  def handle_endtag(s,t):\n"
        "    assert s.open and s.open[-1]==t, (t, s.open[-3:])\n"
        "    s.open.pop()\n"
        "text=sys.stdin.read()\n"
        "assert text.startswith('<!DOCTYPE html>'), text[:40]\n"
        "p=P(); p.feed(text); p.close()\n"
        "assert not p.open, p.open\n"
        "print(' '.join(t for t in ('html','head','body','script','style') if t in p.seen))\n";
    at_run_result r;
    run(&r, 0, (const char *const[]){"report", "-o", "-", trace, NULL});
    char *tags = python_stdin(html_check, r.out);
    ck_assert_str_eq(tags, "html head body script style\n");
    ck_assert_msg(!strstr(r.err, "wrote"), "report -o - says it wrote a file: %s", r.err);
    free(tags);
    at_run_result_free(&r);
}
END_TEST

START_TEST(durations)
{
    char *tree = out_of((const char *const[]){"tree", trace, NULL});
    ck_assert_msg(strstr(tree, "Request //1  start 1.000  duration 412us  threads ") &&
                      strstr(tree, "Request //2  start 2.000  duration 7.50ms  threads ") &&
                      strstr(tree, "Batch //3  start 10.000  duration 1.50s  threads "),
                  "tree:\n%s", tree);
    free(tree);
    char *ev = out_of((const char *const[]){"events", "--name", "Request", trace, NULL});
    ck_assert_msg(strstr(ev, "acttrace/RequestStop  //1  -  DURATION=412us  RequestId=1\n") &&
                      strstr(ev, "acttrace/RequestStop  //2  -  DURATION=7.50ms  RequestId=2\n"),
                  "events:\n%s", ev);
    free(ev);
    char *st = out_of((const char *const[]){"stats", trace, NULL});
    ck_assert_msg(strstr(st, "NAME                        COUNT        P50        P90        P99        MAX THREADS") &&
                      strstr(st, "\nBatch                           1      1.50s      1.50s      1.50s      1.50s ") &&
                      strstr(st, "\nRequest                         2      412us     7.50ms     7.50ms     7.50ms "),
                  "stats:\n%s", st);
    free(st);
    /* machine formats keep their numbers: ns in tree --tsv */
    char *tsv = out_of((const char *const[]){"tree", "--tsv", trace, NULL});
    ck_assert_msg(strstr(tsv, "\tRequest\t//1\t1000000\t412000\t"), "tree --tsv:\n%s", tsv);
    free(tsv);
}
END_TEST

static char *write_file(const char *name, const char *text, mode_t mode)
{
    char *p = malloc(4200);
    snprintf(p, 4200, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    ck_assert_int_eq(chmod(p, mode), 0);
    return p;
}

/* A program the shim cannot be loaded into (statically linked; setuid to another user) is said to
 * be one, exit 1, and never run: check would otherwise run its main */
START_TEST(check_unhookable)
{
    char *conf = write_file("c.conf", "[activity W]\nfunction = write\n", 0644);
    char *st = at_fixture_path("static_exit");
    char want[8400];
    snprintf(want, sizeof want, "acttrace check: %s is statically linked: no dynamic loader runs for it to read "
                                "LD_PRELOAD, so the shim cannot be loaded into it and nothing in it can be hooked\n", st);
    expect_err(1, want, (const char *const[]){"check", conf, "--", st, NULL});
    /* setuid to another user: secure execution (as root, a copy of true owned by nobody) */
    char su[4200];
    snprintf(su, sizeof su, "%s/su-true", dir);
    const char *cp[] = {"cp", "/bin/true", su, NULL};
    at_run_opts o = {.argv = cp, .no_preload = true};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    at_run_result_free(&r);
    struct statvfs vfs;
    if (geteuid() != 0 || chown(su, 65534, 65534) != 0 || chmod(su, 04755) != 0 ||
        statvfs(su, &vfs) != 0 || (vfs.f_flag & ST_NOSUID)) {
        fprintf(stderr, "check_unhookable: the setuid case needs root and a folder without nosuid: skipped\n");
    } else {
        snprintf(want, sizeof want, "acttrace check: %s is setuid (to uid 65534): the loader runs it in "
                                    "secure-execution mode and ignores LD_PRELOAD, so the shim cannot be loaded into it\n",
                 su);
        expect_err(1, want, (const char *const[]){"check", conf, "--", su, NULL});
    }
    free(st);
    free(conf);
}
END_TEST

START_TEST(check_scripts)
{
    char *conf = write_file("c.conf", "[activity Alloc]\nfunction = malloc\n", 0644);
    char *sh = write_file("s.sh", "#!/bin/sh\nexit 0\n", 0755);
    char *envbash = write_file("e.sh", "#!/usr/bin/env bash\nexit 0\n", 0755);
    char *plain = write_file("p.sh", "#!/bin/sh\nexit 0\n", 0644);
    char *badint = write_file("b.sh", "#!/nonexistent/sh\nexit 0\n", 0755);
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, (const char *const[]){"check", conf, "--", sh, NULL}), 0);
    char want[8400];
    snprintf(want, sizeof want, "%s is a script: its interpreter is /bin/sh (#!/bin/sh); the hooks apply to", sh);
    ck_assert_msg(!strncmp(r.out, want, strlen(want)), "check on a sh script: %s%s", r.out, r.err);
    /* under check-asan the shim cannot load without the sanitizer runtime first: the line alone */
    if (!getenv("ACTTRACE_ASAN"))
        ck_assert_msg(r.exited && r.status == 0 && strstr(r.out, "[activity Alloc] malloc: found in "), "%s%s", r.out,
                      r.err);
    at_run_result_free(&r);
    /* #!/usr/bin/env bash: bash as PATH finds it */
    ck_assert_int_eq(at_tool_run(&r, (const char *const[]){"check", conf, "--", envbash, NULL}), 0);
    snprintf(want, sizeof want, "%s is a script: its interpreter is ", envbash);
    ck_assert_msg(!strncmp(r.out, want, strlen(want)) && strstr(r.out, "bash (#!/usr/bin/env bash); the hooks apply"),
                  "check on an env bash script: %s%s", r.out, r.err);
    at_run_result_free(&r);
    /* an interpreter that is itself a script (a pyenv shim): said, with what to check instead */
    char *wrap = write_file("wrap", "#!/bin/sh\nexec /bin/sh \"$@\"\n", 0755);
    char text[4400];
    snprintf(text, sizeof text, "#!%s\nexit 0\n", wrap);
    char *inner = write_file("in.sh", text, 0755);
    ck_assert_int_eq(at_tool_run(&r, (const char *const[]){"check", conf, "--", inner, NULL}), 0);
    snprintf(want, sizeof want, "%s is a script: its interpreter is %s (#!%s), itself a script (#!/bin/sh): the program "
                                "checked here is the one that script runs first;", inner, wrap, wrap);
    ck_assert_msg(!strncmp(r.out, want, strlen(want)), "check with a wrapper interpreter: %s%s", r.out, r.err);
    at_run_result_free(&r);
    free(wrap);
    free(inner);
    /* env -S with settings and options before the program's name; a #! line with DOS line ends */
    char *envset = write_file("ev.sh", "#!/usr/bin/env -S A=1 -u HOME sh -e\nexit 0\n", 0755);
    ck_assert_int_eq(at_tool_run(&r, (const char *const[]){"check", conf, "--", envset, NULL}), 0);
    ck_assert_msg(strstr(r.out, "/sh (#!/usr/bin/env -S A=1 -u HOME sh -e); the hooks apply"), "%s%s", r.out, r.err);
    at_run_result_free(&r);
    free(envset);
    char *crlf = write_file("crlf.sh", "#!/bin/sh\r\nexit 0\r\n", 0755);
    snprintf(want, sizeof want,
             "acttrace check: %s: its #! line ends with a carriage return (DOS line ends), which the kernel takes as "
             "part of the interpreter's name: it cannot run (dos2unix mends it)\n",
             crlf);
    expect_err(1, want, (const char *const[]){"check", conf, "--", crlf, NULL});
    free(crlf);
    /* #!/usr/bin/env -S NAME ARGS: NAME as PATH finds it */
    char *envs = write_file("es.sh", "#!/usr/bin/env -S sh -e\nexit 0\n", 0755);
    ck_assert_int_eq(at_tool_run(&r, (const char *const[]){"check", conf, "--", envs, NULL}), 0);
    snprintf(want, sizeof want, "%s is a script: its interpreter is ", envs);
    ck_assert_msg(!strncmp(r.out, want, strlen(want)) && strstr(r.out, "/sh (#!/usr/bin/env -S sh -e); the hooks apply"),
                  "check on an env -S script: %s%s", r.out, r.err);
    at_run_result_free(&r);
    free(envs);
    snprintf(want, sizeof want, "acttrace check: %s is not executable (mode 0644)\n", plain);
    expect_err(1, want, (const char *const[]){"check", conf, "--", plain, NULL});
    snprintf(want, sizeof want, "acttrace check: %s is a script for /nonexistent/sh (#!/nonexistent/sh), which does "
                                "not exist\n", badint);
    expect_err(1, want, (const char *const[]){"check", conf, "--", badint, NULL});
    snprintf(want, sizeof want, "acttrace check: %s/missing does not exist\n", dir);
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/missing", dir);
    expect_err(1, want, (const char *const[]){"check", conf, "--", missing, NULL});
    expect_err(1, "acttrace check: no-such-program-here is not found in PATH\n",
               (const char *const[]){"check", conf, "--", "no-such-program-here", NULL});
    expect_err(2, "acttrace check: put -- between the CONFIG and the PROGRAM: acttrace check CONFIG -- PROGRAM [ARGS]\n",
               (const char *const[]){"check", conf, sh, NULL});
    /* the program's own options are not taken for check's */
    expect_err(2, "acttrace check: put -- between the CONFIG and the PROGRAM: acttrace check CONFIG -- PROGRAM [ARGS]\n",
               (const char *const[]){"check", conf, sh, "--version", NULL});
    expect_err(2, "acttrace check: give the CONFIG before --: acttrace check CONFIG -- PROGRAM [ARGS]\n",
               (const char *const[]){"check", "--", sh, NULL});
    expect_err(2, "acttrace check: give the program after --: acttrace check CONFIG -- PROGRAM\n",
               (const char *const[]){"check", conf, "--", NULL});
    free(conf);
    free(sh);
    free(envbash);
    free(plain);
    free(badint);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("cli");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, version);
    tcase_add_test(tc, help);
    tcase_add_test(tc, value_forms);
    tcase_add_test(tc, usage_errors);
    tcase_add_test(tc, filters_matching_nothing);
    tcase_add_test(tc, not_traces);
    tcase_add_test(tc, same_file_twice);
    tcase_add_test(tc, output_to_stdout);
    tcase_add_test(tc, output_is_input);
    tcase_add_test(tc, write_failures);
    tcase_add_test(tc, unmatched_stops_named);
    tcase_add_test(tc, durations);
    tcase_add_test(tc, check_scripts);
    tcase_add_test(tc, check_unhookable);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
