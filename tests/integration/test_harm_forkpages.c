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
 * child's to reuse). A process with one thread that records nothing writes no page of the shim's
 * when it forks and starts no thread (its forks are recorded once it has a file). */
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
    /* the children recorded nothing, nor did the parent (its thread's begin and end, its forks in
     * no activity): no file at all */
    char **files = at_trace_files(s.dir);
    ck_assert_uint_eq(at_strv_len(files), 0);
    at_strv_free(files);
    at_run_result_free(&plain);
    at_session_free(&s);
}
END_TEST

/* A process with one thread that records nothing and forks (a shell, make, a pre-forking server
 * before its first request): its forks are left out of a file it does not have, so it starts no
 * writer thread and its forks stay those of a one-thread process, writing no page of the shim's in
 * the parent. Once it is in an activity, a fork is recorded (the tools keep that activity for the
 * child's file), and the child's file names its parent and sits in that activity. */
START_TEST(test_one_thread_fork)
{
    char *fx = at_fixture_path("fork_pages");
    const char *argv[] = {fx, "quiet", NULL};
    at_run_opts o = {.argv = argv, .no_preload = true, .deadline_s = 120};
    at_run_result plain;
    ck_assert_int_eq(at_run(&o, &plain), 0);
    free(fx);
    char d[1024];
    ck_assert_msg(plain.exited && plain.status == 0, "untraced: exit %d: %s", plain.status, plain.err);
    ck_assert_str_eq(plain.out, "errno ok 100\nthreads 1\nchild exit 0\n");
    double pp, pc, tp = 1e9, tc = 1e9;
    minflt(&plain, &pp, &pc);
    const char *sargv[] = {"fork_pages", "quiet", NULL};
    at_session s;
    for (int run = 0; run < 3; run++) { /* the fewest of up to three runs, as above */
        at_session r;
        ck_assert_int_eq(at_session_run_deadline(&r, "forkquiet", sargv, NULL, 120), 0);
        ck_assert_msg(r.r.exited && r.r.status == 0, "%s", at_session_describe(&r, d, sizeof d));
        ck_assert_str_eq(r.r.out, plain.out); /* "threads 1": no writer thread was started */
        double a, b;
        minflt(&r.r, &a, &b);
        tp = a < tp ? a : tp;
        tc = b < tc ? b : tc;
        if (run == 0)
            s = r;
        else
            at_session_free(&r);
        if (tp <= pp + 1.0 && tc <= pc + EXTRA_FAULTS)
            break;
    }
    if (!getenv("ACTTRACE_ASAN")) {
        /* measured: the parent's faults per fork equal the untraced ones, the child's +0-2 (the
         * fork code and data pages of the shim's); a parent with a writer thread takes +1-2 */
        ck_assert_msg(tp <= pp + 1.0, "parent: %.2f page faults per fork traced, %.2f untraced", tp, pp);
        ck_assert_msg(tc <= pc + EXTRA_FAULTS, "child: %.2f page faults per fork traced, %.2f untraced",
                      tc, pc);
    }
    /* two files: the parent's (from its activity on) and the one child's that recorded an event */
    char **files = at_trace_files(s.dir);
    ck_assert_uint_eq(at_strv_len(files), 2);
    at_strv_free(files);
    ck_assert_msg(s.has_trace && s.t.complete, "%s", at_session_describe(&s, d, sizeof d));
    ck_assert_uint_eq(at_count(&s.t, "acttrace-shim", "ProcessFork"), 1);
    long st = at_find(&s.t, NULL, "ParentStart", 0);
    long f = at_find(&s.t, "acttrace-shim", "ProcessFork", 0);
    ck_assert(st >= 0 && f > st);
    ck_assert_str_eq(s.t.ev[f].act_path, s.t.ev[st].act_path);
    const char *cp = at_ev_field(&s.t.ev[f], "ChildPid");
    ck_assert(cp);
    at_trace c;
    ck_assert_msg(at_session_load_pid(&s, atoi(cp), &c), "no file for the child %s in %s", cp, s.dir);
    ck_assert_msg(c.complete, "child file: %s", c.err);
    long pf = at_find(&c, "acttrace-shim", "ProcessForked", 0);
    long m = at_find(&c, NULL, "Child", 0);
    ck_assert(pf >= 0 && m > pf);
    const char *ppid = at_ev_field(&c.ev[pf], "ParentPid");
    ck_assert(ppid);
    ck_assert_int_eq(atoi(ppid), s.t.pid);
    ck_assert_str_eq(c.ev[pf].act_path, s.t.ev[st].act_path);
    ck_assert_str_eq(c.ev[m].act_path, s.t.ev[st].act_path);
    at_trace_free(&c);
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
    tcase_add_test(tc, test_one_thread_fork);
    tcase_add_test(tc, test_child_first_events_from_threads);
    tcase_add_test(tc, test_grandchild_keeps_fds);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
