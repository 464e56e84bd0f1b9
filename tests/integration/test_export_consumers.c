/* test_export_consumers: `acttrace export` read by the real consumers, on traces the shim wrote
 * of export_app (tests/fixtures/export_app.c with tests/data/hooks/export.conf): a request on the
 * main thread with payload arguments, a thread it starts, a transfer to a pool thread, and a
 * fork/exec child whose activity links to it. The consumers are npm packages pinned in
 * tests/consumers (installed by `make check` with npm ci):
 *   chrome-check.js      the Chrome JSON against a strict JSON schema of the Trace Event Format
 *                        (from @tracerbench/trace-event's types, checked by ajv), and what
 *                        Perfetto needs: time order, slices nested per thread, flows bound
 *                        to slices at both ends, process and thread names
 *   speedscope-check.js  speedscope's own app (in Debian's Chromium, through playwright-core)
 *                        imports the file, then exports what it made of it: its profiles,
 *                        their names and frames, and each frame's time
 * Each check asserts on what the consumer reports, against the trace as `acttrace tree --tsv`
 * reads it. Without node, the packages or Chromium the checks skip and say why, except under CI
 * (AT_TRACEEVENT_REQUIRED=1), where that fails them. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"
#include "at_web.h"
#include "at_tracegen.h"

static at_session s;
static char **files;
static int pid, child;
static uint64_t helper_tid, pool_tid;

/* tree --tsv: one activity */
typedef struct act {
    char name[64], path[64];
    int pid;
    uint64_t tid, serial, parent;
    long long dur; /* ns */
} act;
static act acts[64];
static int nacts;

/* A thread's name as the export gives it: its start function, except under make check-asan, where
 * the sanitizer's runtime, preloaded first, creates the threads and the shim sees its start
 * function (no name: "thread"). */
static const char *thread_named(const char *fn)
{
    const char *a = getenv("ACTTRACE_ASAN");
    return a && *a == '1' ? "thread" : fn;
}

/* True when the consumers can run; otherwise says why (a failure under CI). */
static bool ready(void)
{
    const char *why = at_web_missing_in(AT_SOURCE_DIR "/tests/consumers", "speedscope");
    if (!why) return true;
    if (at_traceevent_required()) ck_abort_msg("the export consumers cannot run under CI: %s", why);
    printf("test_export_consumers: skipped: %s\n", why);
    return false;
}

static uint64_t thread_of(const char *what)
{
    char v[64];
    snprintf(v, sizeof v, "\"%s\"", what);
    long i = at_find_field(&s.t, "HandleStart", "what", v, 0);
    ck_assert_msg(i >= 0, "no Handle(%s) in the trace", what);
    return s.t.ev[i].thread;
}

static void setup(void)
{
    char conf[4200], env0[4300];
    snprintf(conf, sizeof conf, "%s/tests/data/hooks/export.conf", AT_SOURCE_DIR);
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s", conf);
    const char *env[] = {env0, NULL};
    const char *argv[] = {"export_app", NULL};
    ck_assert_int_eq(at_session_run(&s, "export", argv, env), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace, "%s", at_session_describe(&s, d, sizeof d));
    ck_assert_msg(sscanf(s.r.out, "pid %d child %d", &pid, &child) == 2, "%s", s.r.out);
    helper_tid = thread_of("helper");
    pool_tid = thread_of("job");
    files = at_trace_files(s.dir);
    ck_assert_uint_ge(at_strv_len(files), 2);
    /* the activities as the project's reader pairs and links them */
    const char *args[64] = {"tree", "--tsv"};
    int n = 2;
    for (size_t i = 0; files[i] && n < 62; i++) args[n++] = files[i];
    args[n] = NULL;
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(r.exited && r.status == 0, "tree --tsv: %s", r.err);
    nacts = 0;
    for (char *l = strtok(r.out, "\n"); l && nacts < 64; l = strtok(NULL, "\n")) {
        act *a = &acts[nacts];
        unsigned long long serial, parent, tid, stop_tid;
        long long start;
        if (sscanf(l, "activity\t%llu\t%llu\t%d\t%llu\t%llu\t%63[^\t]\t%63[^\t]\t%lld\t%lld", &serial, &parent,
                   &a->pid, &tid, &stop_tid, a->name, a->path, &start, &a->dur) == 9) {
            a->serial = serial;
            a->parent = parent;
            a->tid = tid;
            nacts++;
        }
    }
    at_run_result_free(&r);
    ck_assert_int_eq(nacts, 6); /* Request, 3 Handle, ChildWork, its Handle */
}

static void teardown(void)
{
    at_strv_free(files);
    at_session_free(&s);
}

static const act *find_act(const char *name, int p, uint64_t tid)
{
    for (int i = 0; i < nacts; i++)
        if (!strcmp(acts[i].name, name) && acts[i].pid == p && acts[i].tid == tid) return &acts[i];
    ck_abort_msg("no activity %s of pid %d on thread %llu", name, p, (unsigned long long)tid);
    return NULL;
}

/* Exports the files in format to a file; returns its path (static). */
static const char *export_to(const char *format)
{
    static char out[2][4200];
    int k = !strcmp(format, "chrome");
    /* not *.chrome.json: speedscope takes a file of that name for a DevTools profile */
    snprintf(out[k], sizeof out[k], "%s/%s.json", s.dir, k ? "trace" : "trace.speedscope");
    const char *args[64] = {"export", "--format", format, "-o", out[k]};
    int n = 5;
    for (size_t i = 0; files[i] && n < 62; i++) args[n++] = files[i];
    args[n] = NULL;
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(r.exited && r.status == 0, "export --format %s: %s", format, r.err);
    at_run_result_free(&r);
    return out[k];
}

/* Runs a consumer script on file; its stdout (malloc'd) once it exits 0. */
static char *consumer(const char *script, const char *file)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tests/consumers/%s", AT_SOURCE_DIR, script);
    const char *argv[] = {"node", path, file, NULL};
    at_run_opts o = {.argv = argv, .no_preload = true};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 0, "%s %s: exit %d\n%s%s", script, file, r.status, r.out, r.err);
    char *out = strdup(r.out);
    at_run_result_free(&r);
    return out;
}

static void expect_line(const char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void expect_line(const char *out, const char *fmt, ...)
{
    char want[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(want, sizeof want - 1, fmt, ap);
    va_end(ap);
    size_t l = strlen(want);
    for (const char *p = out; (p = strstr(p, want)); p++)
        if ((p == out || p[-1] == '\n') && (p[l] == '\n' || p[l] == 0)) return;
    ck_abort_msg("no line \"%s\" in:\n%s", want, out);
}

/* A line of out that starts with prefix and ends with suffix. */
static void expect_parts(const char *out, const char *prefix, const char *suffix)
{
    size_t pl = strlen(prefix), sl = strlen(suffix);
    for (const char *p = out; (p = strstr(p, prefix)); p++) {
        if (p != out && p[-1] != '\n') continue;
        const char *e = strchr(p, '\n');
        if (!e) e = p + strlen(p);
        if ((size_t)(e - p) >= pl + sl && !strncmp(e - sl, suffix, sl)) return;
    }
    ck_abort_msg("no line \"%s...%s\" in:\n%s", prefix, suffix, out);
}

START_TEST(chrome_strict_and_perfetto)
{
    if (!ready()) return;
    char *out = consumer("chrome-check.js", export_to("chrome"));
    expect_line(out, "order: time order");
    ck_assert_msg(!strncmp(out, "schema: valid (", 15), "%s", out);
    expect_line(out, "process %d \"export_app\"", pid);
    /* the child: a fork of export_app, then the image it exec'd */
    expect_line(out, "process %d \"export_app \xe2\x86\x92 export_app child\"", child);
    expect_line(out, "thread %d/%d \"main\": 2 slices, nested", pid, pid);
    expect_line(out, "thread %d/%llu \"%s\": 2 slices, nested", pid, (unsigned long long)helper_tid,
                thread_named("ea_helper"));
    expect_line(out, "thread %d/%llu \"%s\": 2 slices, nested", pid, (unsigned long long)pool_tid,
                thread_named("ea_pool_worker"));
    expect_line(out, "thread %d/%d \"main\": 3 slices, nested", child, child);
    /* the three kinds of arrows, each bound to the slices it joins */
    expect_line(out, "flow thread start: Request on %d/%d -> Request on %d/%llu", pid, pid, pid,
                (unsigned long long)helper_tid);
    expect_line(out, "flow transfer: Request on %d/%d -> Request on %d/%llu", pid, pid, pid,
                (unsigned long long)pool_tid);
    expect_line(out, "flow process start: Request on %d/%d -> ChildWork on %d/%d", pid, pid, child, child);
    /* the payload as args, the Handles inside the Request on each thread */
    const act *h0 = find_act("Handle", pid, (uint64_t)pid), *h7 = find_act("Handle", child, (uint64_t)child);
    char pre[256];
    snprintf(pre, sizeof pre, "slice %d/%d   Handle %s {\"HandleId\":", pid, pid, h0->path);
    expect_parts(out, pre, ",\"id\":0,\"what\":\"main\",\"Return\":0,\"Status\":0}");
    expect_line(out, "slice %d/%d Request //1/1 {\"RequestId\":1}", pid, pid);
    expect_line(out, "slice %d/%llu Request //1/1 visit {\"RequestId\":1}", pid, (unsigned long long)pool_tid);
    snprintf(pre, sizeof pre, "slice %d/%d     Handle %s {\"HandleId\":", child, child, h7->path);
    expect_parts(out, pre, ",\"id\":7,\"what\":\"child\",\"Return\":14,\"Status\":0}");
    ck_assert_msg(strstr(out, "\"id\":2,\"what\":\"job\",\"Return\":4,\"Status\":0}"), "%s", out);
    ck_assert_msg(strstr(out, "\"id\":1,\"what\":\"helper\",\"Return\":2,\"Status\":0}"), "%s", out);
    ck_assert_msg(!strstr(out, "FAIL"), "%s", out);
    expect_line(out, "ok");
    free(out);
}
END_TEST

/* speedscope's view of a file: 4 profiles, the main thread's first, named for their process and
 * thread, and each activity's time. chrome: the file was Chrome JSON (speedscope's importer names
 * a frame by the slice's name and args). */
static void check_speedscope(const char *out, const char *unit, bool chrome)
{
    expect_line(out, "title export_app (pid %d), main (tid %d) (1/4)", pid, pid);
    expect_line(out, "profiles 4 view 0");
    ck_assert_msg(strstr(out, "\nprofile 0 export_app (pid "), "%s", out);
    char p0[256];
    snprintf(p0, sizeof p0, "\nprofile 0 export_app (pid %d), main (tid %d) unit=%s span=", pid, pid, unit);
    ck_assert_msg(strstr(out, p0), "the first profile is not the main thread's:\n%s", out);
    char p1[256], p2[256], p3[256];
    snprintf(p1, sizeof p1, "\nprofile 1 export_app (pid %d), %s (tid %llu) unit=%s", pid,
             thread_named("ea_pool_worker"), (unsigned long long)pool_tid, unit);
    snprintf(p2, sizeof p2, "\nprofile 2 export_app (pid %d), %s (tid %llu) unit=%s", pid,
             thread_named("ea_helper"), (unsigned long long)helper_tid, unit);
    snprintf(p3, sizeof p3, "\nprofile 3 export_app \xe2\x86\x92 export_app child (pid %d), main (tid %d) unit=%s",
             child, child, unit);
    ck_assert_msg(strstr(out, p1) && strstr(out, p2) && strstr(out, p3), "%s", out);
    /* each frame's time is the activity's duration, to the ns */
    const act *req = find_act("Request", pid, (uint64_t)pid);
    const act *hs[] = {find_act("Handle", pid, (uint64_t)pid), find_act("Handle", pid, pool_tid),
                       find_act("Handle", pid, helper_tid), find_act("Handle", child, (uint64_t)child)};
    const act *cw = find_act("ChildWork", child, (uint64_t)child);
    int prof[] = {0, 1, 2, 3};
    char want[512];
    if (!chrome) {
        expect_line(out, "frame 0 Request total=%lld calls=1", req->dur);
        for (int i = 0; i < 4; i++) expect_line(out, "frame %d Handle total=%lld calls=1", prof[i], hs[i]->dur);
        expect_line(out, "frame 3 ChildWork total=%lld calls=1", cw->dur);
    } else {
        snprintf(want, sizeof want, "\nframe 0 Request {\"acttrace\":{\"path\":\"//1/1\",\"stopped\":true},\"RequestId\":1} total=%lld calls=1\n",
                 req->dur);
        ck_assert_msg(strstr(out, want), "%s in\n%s", want, out);
        for (int i = 0; i < 4; i++) {
            char head[128], tail[128];
            snprintf(head, sizeof head, "frame %d Handle {\"acttrace\":{\"path\":\"%s\",\"stopped\":true},", prof[i], hs[i]->path);
            snprintf(tail, sizeof tail, "\"Status\":0} total=%lld calls=1", hs[i]->dur);
            expect_parts(out, head, tail);
        }
        snprintf(want, sizeof want, "\nframe 3 ChildWork {\"acttrace\":{\"path\":\"//2/1\",\"stopped\":true},\"ChildWorkId\":1} total=%lld calls=1\n",
                 cw->dur);
        ck_assert_msg(strstr(out, want), "%s in\n%s", want, out);
    }
    /* speedscope matched every frame it closed */
    ck_assert_msg(!strstr(out, "\nwarning "), "%s", out);
    expect_line(out, "ok");
}

START_TEST(speedscope_reads_speedscope)
{
    if (!ready()) return;
    char *out = consumer("speedscope-check.js", export_to("speedscope"));
    expect_line(out, "schema: valid (speedscope file format)");
    check_speedscope(out, "milliseconds", false);
    free(out);
}
END_TEST

START_TEST(speedscope_reads_chrome)
{
    if (!ready()) return;
    char *out = consumer("speedscope-check.js", export_to("chrome"));
    check_speedscope(out, "microseconds", true);
    free(out);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("export_consumers");
    TCase *tc = tcase_create("consumers");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, chrome_strict_and_perfetto);
    tcase_add_test(tc, speedscope_reads_speedscope);
    tcase_add_test(tc, speedscope_reads_chrome);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
