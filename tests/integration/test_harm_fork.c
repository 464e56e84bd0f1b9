/* test_harm_fork: a fork child's file and flusher wait for its first event. A child that records
 * nothing sees what it sees untraced (one thread: no flusher) and leaves no file; a child that
 * records and then _exits or dies of a signal leaves a complete file with ProcessForked, its events
 * in the activity it inherited, and how it ended; a child that records nothing but dies of a signal
 * leaves a file with that. Each run is compared with the untraced one (exit, stdout, stderr). */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"

/* fork_lazy MODE untraced and traced: same exit, stdout and stderr; returns the traced session. */
static void run_both(at_session *s, const char *mode)
{
    char *fx = at_fixture_path("fork_lazy");
    const char *argv[] = {fx, mode, NULL};
    at_run_opts o = {.argv = argv, .no_preload = true, .deadline_s = 120};
    at_run_result plain;
    ck_assert_int_eq(at_run(&o, &plain), 0);
    free(fx);
    const char *sargv[] = {"fork_lazy", mode, NULL};
    ck_assert_int_eq(at_session_run_deadline(s, "forklazy", sargv, NULL, 120), 0);
    char d[1024];
    ck_assert_msg(plain.exited && plain.status == 0, "%s untraced: exit %d: %s", mode, plain.status, plain.err);
    ck_assert_msg(s->r.exited && s->r.status == 0, "%s: %s", mode, at_session_describe(s, d, sizeof d));
    ck_assert_str_eq(s->r.out, plain.out);
    ck_assert_str_eq(s->r.err, plain.err);
    ck_assert_msg(s->has_trace && s->load_rc == 0 && s->t.complete, "%s: %s", mode,
                  at_session_describe(s, d, sizeof d));
    at_run_result_free(&plain);
}

/* The one file of the run that is not the parent's, loaded; false when there is none. */
static bool child_trace(const at_session *s, at_trace *c, size_t *nfiles)
{
    char **files = at_trace_files(s->dir);
    bool found = false;
    *nfiles = at_strv_len(files);
    for (size_t i = 0; files && files[i]; i++) {
        char own[64];
        snprintf(own, sizeof own, "/acttrace-%d.nettrace", s->r.pid);
        if (strstr(files[i], own))
            continue;
        ck_assert_msg(at_trace_load(files[i], c) == 0 && c->complete, "%s: %s", files[i], c->err);
        found = true;
    }
    at_strv_free(files);
    return found;
}

START_TEST(test_quiet_child_no_file_no_thread)
{
    at_session s;
    run_both(&s, "quiet");
    ck_assert_str_eq(s.r.out, "child threads 1\nchild exit 0\n");
    at_trace c;
    size_t n;
    ck_assert_msg(!child_trace(&s, &c, &n), "a child that recorded nothing left a file (%zu files)", n);
    ck_assert(at_find(&s.t, "acttrace-shim", "ProcessFork", 0) >= 0);
    at_session_free(&s);
}
END_TEST

static void check_child(at_session *s, at_trace *c, const char *ending, size_t marks)
{
    size_t n;
    ck_assert_msg(child_trace(s, c, &n), "no file for the child (%zu files)", n);
    ck_assert_int_eq(n, 2);
    long pf = at_find(c, "acttrace-shim", "ProcessForked", 0);
    ck_assert_msg(pf >= 0, "no ProcessForked");
    ck_assert_uint_eq(at_count(c, NULL, "ChildMark"), marks);
    ck_assert_msg(at_find(c, "acttrace-shim", ending, 0) > pf, "no %s after ProcessForked", ending);
    ck_assert_uint_eq(c->events_lost, 0);
    if (marks) {
        /* the child's events are in the activity it inherited */
        long ps = at_find(&s->t, NULL, "ParentStart", 0), m = at_find(c, NULL, "ChildMark", 0);
        ck_assert(ps >= 0 && m > pf);
        ck_assert_str_eq(c->ev[m].act_path, s->t.ev[ps].act_path);
    }
}

START_TEST(test_recording_child_exit)
{
    at_session s;
    run_both(&s, "mark");
    ck_assert_str_eq(s.r.out, "child exit 0\n");
    at_trace c;
    check_child(&s, &c, "ProcessExit", 5);
    at_trace_free(&c);
    at_session_free(&s);
}
END_TEST

START_TEST(test_recording_child_abort)
{
    at_session s;
    run_both(&s, "abort");
    at_trace c;
    check_child(&s, &c, "FatalSignal", 5);
    at_trace_free(&c);
    at_session_free(&s);
}
END_TEST

START_TEST(test_quiet_child_crash)
{
    at_session s;
    run_both(&s, "crash");
    ck_assert_str_eq(s.r.out, "child threads 1\nchild signal 6\n");
    at_trace c;
    check_child(&s, &c, "FatalSignal", 0);
    at_trace_free(&c);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("harm_fork");
    TCase *tc = tcase_create("lazy");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_quiet_child_no_file_no_thread);
    tcase_add_test(tc, test_recording_child_exit);
    tcase_add_test(tc, test_recording_child_abort);
    tcase_add_test(tc, test_quiet_child_crash);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
