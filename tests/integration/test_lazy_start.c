/* test_lazy_start: a traced process image that records nothing costs no file and no thread; one
 * whose first event comes late still gets a complete file. Fixture lazy_start, traced and untraced
 * in folders of their own, with a pattern without %p (the names of related processes then tell
 * who opened first):
 *   - records nothing: no trace file, the same number of threads seen by the program, and the
 *     same status, stdout, stderr and written file as untraced;
 *   - the first event from a second thread, from a signal handler, from a hooked function: the
 *     file reads to its end, passes acttrace verify, and holds ProcessInfo, the event with its
 *     stack and the symbols that name it;
 *   - the event clock, chosen at the first event: the file's start is the process's, before main,
 *     and the first events lie between the program's own clock reads around them, with the
 *     clock chosen automatically, the TSC forced and CLOCK_MONOTONIC forced;
 *   - an exec'd image and a system() child are named as when every image opened its file at
 *     start: the image "t-exec1", the shell's child "t-<pid>", an image the shell execs
 *     "t-<pid>-exec1", and the program's own file stays "t". */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_harmcmp.h"
#include "at_testlib.h"
#include "at_tracegen.h"

#define DEADLINE_S 120

/* Run lazy_start mode traced in a fresh folder (*dir, to at_rmtree), with extra env. */
static void run_traced(const char *mode, const char *const *extra, at_run_result *r, char **dir)
{
    *dir = at_tmpdir("lazy");
    char *fx = at_fixture_path("lazy_start");
    const char *argv[] = {fx, mode, NULL};
    const char *env[8] = {"ACTTRACE_OUTPUT=t.nettrace", "ACTTRACE_THREAD_EVENTS=no",
                          "ACTTRACE_STACKS=both"};
    size_t k = 3;
    for (size_t i = 0; extra && extra[i] && k < 7; i++)
        env[k++] = extra[i];
    env[k] = NULL;
    at_run_opts o = {.argv = argv, .env = env, .cwd = *dir, .deadline_s = DEADLINE_S};
    ck_assert_int_eq(at_run(&o, r), 0);
    free(fx);
}

static char *in_dir(const char *dir, const char *name)
{
    char *p = NULL;
    ck_assert(asprintf(&p, "%s/%s", dir, name) > 0);
    return p;
}

START_TEST(test_records_nothing)
{
    at_run_result tr, ur;
    char *tdir, *udir;
    run_traced("quiet", NULL, &tr, &tdir);
    const char *argv[] = {"lazy_start", "quiet", NULL};
    ck_assert_int_eq(at_harm_untraced("lazy-plain", argv, NULL, &ur, &udir), 0);
    char d[512];
    ck_assert_msg(tr.exited && tr.status == 0, "traced: %s", at_run_describe(&tr, d, sizeof d));
    ck_assert_int_eq(ur.exited, tr.exited);
    ck_assert_int_eq(ur.status, tr.status);
    /* "tasks 1" at the start and at the end: no thread of the shim's */
    ck_assert_str_eq(tr.out, ur.out);
    ck_assert_msg(strstr(tr.out, "done tasks 1\n"), "%s", tr.out);
    char *terr = at_harm_program_err(tr.err);
    ck_assert_str_eq(terr, ur.err);
    ck_assert_msg(!strstr(tr.err, "acttrace:"), "the shim said: %s", tr.err);
    free(terr);
    const char *diff = at_harm_file_diff(tdir, udir, "out.txt");
    ck_assert_msg(diff == NULL, "out.txt: %s", diff);
    char **files = at_trace_files(tdir);
    ck_assert_msg(at_strv_len(files) == 0, "a trace file was written: %s", files[0]);
    at_strv_free(files);
    at_run_result_free(&tr);
    at_run_result_free(&ur);
    at_rmtree(tdir);
    at_rmtree(udir);
    free(tdir);
    free(udir);
}
END_TEST

static const struct {
    const char *mode;
    const char *event;
    bool hooks;
} late[] = {
    {"thread", "LateStart", false},
    {"signal", "FromSignalStart", false},
    {"hook", "WorkStart", true},
    {"execfail", "AfterExecStart", false},
};

START_TEST(test_late_first_event)
{
    char *cdir = at_tmpdir("lazy-conf");
    char *conf_path = in_dir(cdir, "hook.conf");
    FILE *f = fopen(conf_path, "w");
    ck_assert(f != NULL);
    fputs("[activity Work]\nfunction = lazy_work\n", f);
    fclose(f);
    char cenv[4200];
    snprintf(cenv, sizeof cenv, "ACTTRACE_CONFIG=%s", conf_path);
    const char *extra[] = {late[_i].hooks ? cenv : NULL, NULL};
    at_run_result tr, ur;
    char *tdir, *udir;
    run_traced(late[_i].mode, extra, &tr, &tdir);
    const char *argv[] = {"lazy_start", late[_i].mode, NULL};
    ck_assert_int_eq(at_harm_untraced("lazy-plain", argv, NULL, &ur, &udir), 0);
    char d[512];
    ck_assert_msg(tr.exited && tr.status == 0, "%s: %s", late[_i].mode,
                  at_run_describe(&tr, d, sizeof d));
    if (late[_i].hooks) {
        /* with a function hooked the session starts whole in the constructor (a hook may record
         * the first event in a signal handler, where no thread may be started): the writer's
         * thread is there from the start; the program's own result is the same */
        ck_assert_msg(!strncmp(tr.out, "tasks 2\n", 8), "%s: traced '%s'", late[_i].mode, tr.out);
        ck_assert_msg(strstr(tr.out, "\nsum 12\n") && strstr(ur.out, "\nsum 12\n"),
                      "%s: traced '%s', untraced '%s'", late[_i].mode, tr.out, ur.out);
    } else {
        /* the same output up to the last line, whose thread count has the writer's thread now */
        const char *te = strstr(tr.out, "done tasks "), *ue = strstr(ur.out, "done tasks ");
        ck_assert_msg(te && ue && te - tr.out == ue - ur.out &&
                          !strncmp(tr.out, ur.out, (size_t)(te - tr.out)),
                      "%s: traced '%s', untraced '%s'", late[_i].mode, tr.out, ur.out);
    }
    char *path = in_dir(tdir, "t.nettrace");
    at_trace t;
    int rc = at_trace_load(path, &t);
    ck_assert_msg(rc == 0 && t.complete, "%s: %s", late[_i].mode, t.err);
    const char *v = at_harm_verify(path);
    ck_assert_msg(v == NULL, "%s: verify: %s", late[_i].mode, v);
    ck_assert_uint_eq(at_count(&t, NULL, "ProcessInfo"), 1);
    long i = at_find(&t, NULL, late[_i].event, 0);
    ck_assert_msg(i >= 0, "%s: no %s event", late[_i].mode, late[_i].event);
    ck_assert_msg(t.ev[i].nframes > 0, "%s: %s has no stack", late[_i].mode, late[_i].event);
    ck_assert_uint_eq(t.events_lost, 0);
    ck_assert_msg(at_count(&t, "Universal.System", "ProcessSymbol") > 0, "%s: no symbols",
                  late[_i].mode);
    if (late[_i].hooks)
        ck_assert_uint_eq(at_count(&t, NULL, "WorkStop"), 3);
    if (!strcmp(late[_i].mode, "execfail")) {
        /* the failed exec, made in no activity before any event, was left out (as a fork's is): the
         * program went on, and its next event opened the file and started the writer thread */
        ck_assert_msg(strstr(tr.out, "done tasks 2\n"), "execfail: %s", tr.out);
        ck_assert_uint_eq(at_count(&t, NULL, "ProcessExec"), 0);
    }
    at_trace_free(&t);
    free(path);
    char **files = at_trace_files(tdir);
    ck_assert_uint_eq(at_strv_len(files), 1);
    at_strv_free(files);
    at_run_result_free(&tr);
    at_run_result_free(&ur);
    at_rmtree(tdir);
    at_rmtree(udir);
    free(tdir);
    free(udir);
    at_rmtree(cdir);
    free(cdir);
    free(conf_path);
}
END_TEST

/* The clock is chosen at the first event, the start's time taken before it by a system call: in
 * every clock the file's times are CLOCK_MONOTONIC ns, the sync time precedes main, and the first
 * event lies between the program's reads around it. */
static const char *const clocks[] = {NULL, "ACTTRACE_CLOCK=tsc", "ACTTRACE_CLOCK=monotonic"};

START_TEST(test_deferred_clock)
{
    const char *extra[] = {clocks[_i], NULL};
    at_run_result r;
    char *dir;
    run_traced("timed", extra, &r, &dir);
    char d[512];
    ck_assert_msg(r.exited && r.status == 0, "%s", at_run_describe(&r, d, sizeof d));
    unsigned long long t0, t1, t2;
    ck_assert_msg(sscanf(r.out, "t0 %llu\nt1 %llu\nt2 %llu", &t0, &t1, &t2) == 3, "'%s'", r.out);
    char *path = in_dir(dir, "t.nettrace");
    uint64_t sync = at_gen_sync_time(path);
    ck_assert_msg(sync > 0 && sync <= t0 && t0 - sync < 2000000000ull,
                  "%s: sync %llu, main at %llu", clocks[_i] ? clocks[_i] : "auto",
                  (unsigned long long)sync, t0);
    at_trace t;
    ck_assert_msg(at_trace_load(path, &t) == 0 && t.complete, "%s", t.err);
    long s = at_find(&t, NULL, "TimedStart", 0), e = at_find(&t, NULL, "TimedStop", 0);
    ck_assert(s >= 0 && e >= 0);
    ck_assert_msg(t.ev[s].timestamp >= t1 && t.ev[s].timestamp <= t.ev[e].timestamp &&
                      t.ev[e].timestamp <= t2,
                  "%s: Start %llu Stop %llu, program's reads %llu .. %llu",
                  clocks[_i] ? clocks[_i] : "auto", (unsigned long long)t.ev[s].timestamp,
                  (unsigned long long)t.ev[e].timestamp, t1, t2);
    const char *v = at_harm_verify(path);
    ck_assert_msg(v == NULL, "verify: %s", v);
    at_trace_free(&t);
    free(path);
    at_run_result_free(&r);
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* The file of dir holding the Child event, its name (static) */
static const char *child_file(const char *dir)
{
    static char name[512];
    name[0] = 0;
    char **files = at_trace_files(dir);
    for (size_t k = 0; files[k]; k++) {
        at_trace t;
        if (at_trace_load(files[k], &t) == 0 && at_find(&t, NULL, "Child", 0) >= 0) {
            const char *b = strrchr(files[k], '/');
            snprintf(name, sizeof name, "%s", b ? b + 1 : files[k]);
        }
        at_trace_free(&t);
    }
    at_strv_free(files);
    return name;
}

START_TEST(test_exec_and_system_names)
{
    static const char *const modes[] = {"exec", "system", "system-exec"};
    for (size_t m = 0; m < 3; m++) {
        at_run_result tr;
        char *tdir;
        run_traced(modes[m], NULL, &tr, &tdir);
        char d[512];
        ck_assert_msg(tr.exited && tr.status == 0, "%s: %s", modes[m],
                      at_run_describe(&tr, d, sizeof d));
        const char *p = strstr(tr.out, "pid ");
        ck_assert_msg(p, "%s: %s", modes[m], tr.out);
        int child = atoi(p + 4);
        char want[64];
        if (m == 0)
            snprintf(want, sizeof want, "t-exec1.nettrace"); /* the same pid, its next image */
        else if (m == 1)
            snprintf(want, sizeof want, "t-%d.nettrace", child); /* the shell's vfork child */
        else
            snprintf(want, sizeof want, "t-%d-exec1.nettrace", child); /* the shell's next image */
        ck_assert_msg(!strcmp(child_file(tdir), want), "%s: Child in '%s', want %s", modes[m],
                      child_file(tdir), want);
        /* the program's own file keeps the plain name: system() opened it first. An exec made in no
         * activity by an image that recorded nothing is left out (as a fork's is): that image
         * writes no file, and the next one's is named by its generation all the same */
        char *own = in_dir(tdir, "t.nettrace");
        if (m == 0) {
            ck_assert_msg(!at_file_exists(own), "exec: the first image recorded nothing, yet %s", own);
            char **files = at_trace_files(tdir);
            ck_assert_uint_eq(at_strv_len(files), 1);
            at_strv_free(files);
            free(own);
            at_run_result_free(&tr);
            at_rmtree(tdir);
            free(tdir);
            continue;
        }
        at_trace t;
        ck_assert_msg(at_trace_load(own, &t) == 0 && t.complete, "%s: %s", modes[m], t.err);
        ck_assert_int_eq(t.pid, tr.pid);
        at_trace_free(&t);
        free(own);
        at_run_result_free(&tr);
        at_rmtree(tdir);
        free(tdir);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lazy_start");
    TCase *tc = tcase_create("lazy_start");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_records_nothing);
    tcase_add_loop_test(tc, test_late_first_event, 0, sizeof late / sizeof late[0]);
    tcase_add_loop_test(tc, test_deferred_clock, 0, sizeof clocks / sizeof clocks[0]);
    tcase_add_test(tc, test_exec_and_system_names);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
