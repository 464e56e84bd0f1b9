/* test_harm_forkpages: what a fork costs traced is mostly pages (on a VM with shadow paging each
 * page fault costs tens of microseconds): a fork child maps afresh every code page it runs and copies
 * every data page it writes, and the parent copies every page it writes after the fork. The shim keeps
 * what a fork runs and writes on one code page and one data page, a child that records nothing
 * touches no buffer, and the buffers are no page the two share. Against an untraced run of the same
 * program with a thread of its own (a traced process always has one, the writer's, and glibc's fork
 * does more then), the page faults per fork of the parent and of the child stay within a few; and
 * the child sees the errno its parent had. A child whose first events come from several threads at
 * once gets one complete file, ProcessForked once, first. A child that recorded nothing and forks
 * again leaves its grandchild every descriptor it had (the number the parent's trace had is the
 * child's to reuse). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"

/* Page faults per fork a traced fork may add, parent and child each (measured: 1-2 each; 8 and 22
 * when every page the fork handlers and the writer touched was a page of its own). */
#define EXTRA_FAULTS 4.0

static void minflt(const at_run_result *r, double *parent, double *child)
{
    const char *m = strstr(r->err, "minflt ");
    ck_assert_msg(m && sscanf(m, "minflt %lf %lf", parent, child) == 2, "no minflt line: %s", r->err);
}

START_TEST(test_quiet_fork_pages)
{
    char *fx = at_fixture_path("fork_pages");
    const char *argv[] = {fx, "pages", NULL};
    at_run_opts o = {.argv = argv, .no_preload = true, .deadline_s = 120};
    at_run_result plain;
    ck_assert_int_eq(at_run(&o, &plain), 0);
    free(fx);
    at_session s;
    const char *sargv[] = {"fork_pages", "pages", NULL};
    ck_assert_int_eq(at_session_run_deadline(&s, "forkpages", sargv, NULL, 120), 0);
    char d[1024];
    ck_assert_msg(plain.exited && plain.status == 0, "untraced: exit %d: %s", plain.status, plain.err);
    ck_assert_msg(s.r.exited && s.r.status == 0, "%s", at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(s.r.out, plain.out);
    ck_assert_str_eq(s.r.out, "errno ok 100\n");
    double pp, pc, tp, tc;
    minflt(&plain, &pp, &pc);
    minflt(&s.r, &tp, &tc);
    /* A run's count moves by a few faults with what the writer thread happens to be doing at the
     * forks (1 run in 8 showed +5 in the child): the fewest of up to three traced runs is compared,
     * against the +8 and +22 a fork page rule broken gives in every run. */
    for (int again = 0; again < 2 && (tc > pc + EXTRA_FAULTS || tp > pp + EXTRA_FAULTS); again++) {
        at_session s2;
        ck_assert_int_eq(at_session_run_deadline(&s2, "forkpages", sargv, NULL, 120), 0);
        ck_assert_msg(s2.r.exited && s2.r.status == 0, "%s", at_session_describe(&s2, d, sizeof d));
        double tp2, tc2;
        minflt(&s2.r, &tp2, &tc2);
        tp = tp2 < tp ? tp2 : tp;
        tc = tc2 < tc ? tc2 : tc;
        at_session_free(&s2);
    }
    if (!getenv("ACTTRACE_ASAN")) { /* the sanitizers' shadow memory takes faults of its own */
        ck_assert_msg(tc <= pc + EXTRA_FAULTS, "child: %.2f page faults per fork traced, %.2f untraced",
                      tc, pc);
        ck_assert_msg(tp <= pp + EXTRA_FAULTS, "parent: %.2f page faults per fork traced, %.2f untraced",
                      tp, pp);
    }
    /* the children recorded nothing: the parent's file is the only one */
    char **files = at_trace_files(s.dir);
    ck_assert_uint_eq(at_strv_len(files), 1);
    at_strv_free(files);
    ck_assert_msg(s.has_trace && s.t.complete, "%s", at_session_describe(&s, d, sizeof d));
    ck_assert_uint_eq(at_count(&s.t, "acttrace-shim", "ProcessFork"), 100);
    at_run_result_free(&plain);
    at_session_free(&s);
}
END_TEST

START_TEST(test_child_first_events_from_threads)
{
    /* Not under the sanitizers: a thread the fork child starts gets a stack glibc reclaimed from a
     * thread of the parent's (the writer), whose ASan shadow still holds that thread's live frames,
     * and ASan stops the new thread at its first store to its own stack (the same with the shim as
     * it was before these fork changes; without the shim no thread's stack is reclaimed). */
    if (getenv("ACTTRACE_ASAN"))
        return;
    at_session s;
    const char *argv[] = {"fork_pages", "threads", NULL};
    ck_assert_int_eq(at_session_run_deadline(&s, "forkthreads", argv, NULL, 120), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.t.complete, "%s",
                  at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(s.r.out, "child exit 0\n");
    int child = 0;
    long f = at_find(&s.t, "acttrace-shim", "ProcessFork", 0);
    ck_assert(f >= 0);
    const char *cp = at_ev_field(&s.t.ev[f], "ChildPid");
    ck_assert(cp);
    child = atoi(cp);
    at_trace c;
    ck_assert_msg(at_session_load_pid(&s, child, &c), "no file for the child pid %d in %s", child, s.dir);
    ck_assert_msg(c.complete, "child file: %s", c.err);
    ck_assert_uint_eq(c.events_lost, 0);
    ck_assert_uint_eq(at_count(&c, "acttrace-shim", "ProcessForked"), 1);
    ck_assert_uint_eq(at_count(&c, NULL, "ThreadMark"), 400);
    /* ProcessForked carries the fork's time: no event of the child comes before it */
    long pf = at_find(&c, "acttrace-shim", "ProcessForked", 0);
    for (size_t i = 0; i < c.n; i++)
        if (strcmp(c.ev[i].name, "ThreadMark") == 0)
            ck_assert_msg(c.ev[i].timestamp >= c.ev[pf].timestamp, "a ThreadMark before ProcessForked");
    at_trace_free(&c);
    at_session_free(&s);
}
END_TEST

START_TEST(test_grandchild_keeps_fds)
{
    char *fx = at_fixture_path("fork_pages");
    const char *argv[] = {fx, "grandchild", NULL};
    at_run_opts o = {.argv = argv, .no_preload = true, .deadline_s = 120};
    at_run_result plain;
    ck_assert_int_eq(at_run(&o, &plain), 0);
    free(fx);
    at_session s;
    const char *sargv[] = {"fork_pages", "grandchild", NULL};
    ck_assert_int_eq(at_session_run_deadline(&s, "forkgrand", sargv, NULL, 120), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0, "%s", at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(plain.out, "grandchild exit 0\n");
    ck_assert_str_eq(s.r.out, plain.out);
    ck_assert_str_eq(s.r.err, plain.err);
    at_run_result_free(&plain);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("harm_forkpages");
    TCase *tc = tcase_create("fork");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_quiet_fork_pages);
    tcase_add_test(tc, test_child_first_events_from_threads);
    tcase_add_test(tc, test_grandchild_keeps_fds);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
