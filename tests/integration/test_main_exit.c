/* test_main_exit: a program whose first thread leaves through pthread_exit, thrd_exit or
 * cancellation ends as without the shim: with exit(0) once its last thread has ended (atexit
 * handlers run, stdio flushed, status 0, or the status a later exit() gives), and its trace file is
 * complete, holding what was written up to the end, the atexit handler's events included. The
 * shim's flusher thread once kept such a process alive for ever: each run has a deadline far above
 * its normal time (a hang fails the test; nothing here times how fast it ends). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"

#define DEADLINE_S 30

static void run(at_session *s, const char *mode)
{
    const char *argv[] = {"main_exits", mode, NULL};
    ck_assert_int_eq(at_session_run_deadline(s, mode, argv, NULL, DEADLINE_S), 0);
    char d[1024];
    ck_assert_msg(!s->r.timed_out, "%s: %s", mode, at_session_describe(s, d, sizeof d));
}

/* The file passes acttrace verify. */
static void verify(const at_trace *t)
{
    char tool[4096];
    snprintf(tool, sizeof tool, "%s/acttrace", at_build_dir());
    const char *argv[] = {tool, "verify", t->path, NULL};
    at_run_opts o = {.argv = argv, .no_preload = true};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 0, "acttrace verify %s: %s%s", t->path, r.out, r.err);
    at_run_result_free(&r);
}

/* Exit 0 (or want), a complete trace with main's 20 Before marks in its Main activity and the
 * atexit handler's mark after them. */
static void check_common(at_session *s, int want)
{
    char d[1024];
    ck_assert_msg(s->r.exited && s->r.status == want && s->has_trace && s->load_rc == 0 &&
                      s->t.complete,
                  "%s", at_session_describe(s, d, sizeof d));
    verify(&s->t);
    const at_trace *t = &s->t;
    long m = at_find(t, NULL, "MainStart", 0);
    ck_assert(m >= 0);
    ck_assert_uint_eq(at_count(t, NULL, "Before"), 20);
    long b = at_find_field(t, "Before", "Value", "19", 0);
    ck_assert(b >= 0);
    ck_assert_str_eq(t->ev[b].act_path, t->ev[m].act_path);
    long ax = at_find(t, NULL, "AtExit", 0);
    ck_assert_msg(ax > b, "no AtExit mark after the last Before (%ld, %ld)", ax, b);
}

START_TEST(test_alone)
{
    at_session s;
    run(&s, "alone");
    check_common(&s, 0);
    ck_assert_str_eq(s.r.out, "atexit\n");
    at_session_free(&s);
}
END_TEST

/* main leaves while a worker runs 200 ms longer: the process lasts until the worker returns, then
 * exits 0, and the worker's events and its ThreadEnd are in the file. */
static void check_worker(const char *mode)
{
    at_session s;
    run(&s, mode);
    check_common(&s, 0);
    ck_assert_str_eq(s.r.out, "worker done\natexit\n");
    const at_trace *t = &s.t;
    ck_assert_uint_eq(at_count(t, NULL, "Worker"), 20);
    long w = at_find_field(t, "Worker", "Value", "19", 0);
    ck_assert(w >= 0);
    long m = at_find(t, NULL, "MainStart", 0);
    ck_assert_msg(at_path_is_below(t->ev[w].act_path, t->ev[m].act_path) ||
                      strcmp(t->ev[w].act_path, t->ev[m].act_path) == 0,
                  "worker mark in %s, Main is %s", t->ev[w].act_path, t->ev[m].act_path);
    long e = at_find(t, "acttrace-shim", "ThreadEnd", (size_t)w);
    for (; e >= 0; e = at_find(t, "acttrace-shim", "ThreadEnd", (size_t)e + 1))
        if (t->ev[e].thread == t->ev[w].thread)
            break;
    ck_assert_msg(e >= 0, "no ThreadEnd of the worker after its marks");
    uint64_t kind = 9;
    ck_assert(at_field_u64(&t->ev[e], "ExitKind", &kind));
    ck_assert_uint_eq(kind, 0);
    at_session_free(&s);
}

START_TEST(test_worker)
{
    check_worker("worker");
}
END_TEST

START_TEST(test_thrd_exit)
{
    check_worker("thrd");
}
END_TEST

/* the flusher stopped and started again (setuid's pause) after main left still ends the process */
START_TEST(test_flusher_restarted)
{
    check_worker("setuid");
}
END_TEST

START_TEST(test_cancelled)
{
    check_worker("cancel");
}
END_TEST

/* main leaves, a worker calls exit(3) later: status 3, not 0. */
START_TEST(test_worker_exit)
{
    at_session s;
    run(&s, "worker-exit");
    check_common(&s, 3);
    ck_assert_str_eq(s.r.out, "worker exits\natexit\n");
    at_session_free(&s);
}
END_TEST

/* A worker forks after main left: the child's only thread (that worker) returns from its routine,
 * so the child exits 0 with its atexit handler, its own file complete; the parent ends after. */
START_TEST(test_fork_child)
{
    /* Under check-asan: the worker forks while main is leaving, and GCC 12's libasan takes no lock
     * of its allocator around a fork, so a child forked while another thread is inside it (main's
     * own exit frees its thread cache there; the keeper's creation allocates its TLS there) waits
     * for ever at its first free. The fixture hangs that way with or without the keeper (3 in 24
     * loaded runs of the library before it); the plain build runs this test. */
    if (getenv("ACTTRACE_ASAN"))
        return;
    at_session s;
    run(&s, "fork");
    check_common(&s, 0);
    ck_assert_str_eq(s.r.out, "child\natexit\nchild status 0\natexit\n");
    char **files = at_trace_files(s.dir);
    ck_assert_uint_eq(at_strv_len(files), 2);
    for (size_t i = 0; files[i]; i++) {
        at_trace t;
        ck_assert_int_eq(at_trace_load(files[i], &t), 0);
        verify(&t);
        if (t.pid != s.r.pid) /* the child's: forked, then its atexit mark */
            ck_assert(at_find(&t, NULL, "AtExit", 0) > at_find(&t, NULL, "ProcessForked", 0));
        at_trace_free(&t);
    }
    at_strv_free(files);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("main_exit");
    TCase *tc = tcase_create("last_thread");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_alone);
    tcase_add_test(tc, test_worker);
    tcase_add_test(tc, test_worker_exit);
    tcase_add_test(tc, test_thrd_exit);
    tcase_add_test(tc, test_cancelled);
    tcase_add_test(tc, test_flusher_restarted);
    tcase_add_test(tc, test_fork_child);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
