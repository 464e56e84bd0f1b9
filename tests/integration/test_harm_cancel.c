/* test_harm_cancel: the trace's writer thread makes a program of one thread a multi-threaded one to
 * glibc, and the interposers then make some system calls themselves, as glibc would for the
 * program alone (shim/fdflow.c, the real call). Against an untraced run of harm_cancel: the same
 * results and errno from every such call; a thread that cancels itself ends at its next
 * cancellation point; a main thread blocked in read, recv or epoll_wait is cancelled by a second
 * thread (an alarm ends a run where it is not, and its status then differs). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_harmcmp.h"
#include "at_testlib.h"

static const char *const modes[] = {"errno", "self", "read", "recv", "epoll"};

START_TEST(test_calls_and_cancellation_as_untraced)
{
    const char *mode = modes[_i];
    char env0[4200];
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s/tests/data/hooks/cancel.conf", AT_SOURCE_DIR);
    const char *env[] = {env0, NULL};
    const char *argv[] = {"harm_cancel", mode, NULL};
    at_session s;
    ck_assert_int_eq(at_session_run_deadline(&s, "cancel", argv, env, 120), 0);
    at_run_result u;
    char *udir, d[1024];
    ck_assert_int_eq(at_harm_untraced("cancel-u", argv, NULL, &u, &udir), 0);
    ck_assert_msg(u.exited && u.status == 0, "%s untraced: %s", mode, at_run_describe(&u, d, sizeof d));
    ck_assert_msg(s.r.exited == u.exited && s.r.status == u.status && s.r.signaled == u.signaled,
                  "%s traced: %s", mode, at_session_describe(&s, d, sizeof d));
    ck_assert_msg(!strcmp(s.r.out, u.out), "%s: traced\n%s\nuntraced\n%s", mode, s.r.out, u.out);
    /* the writer ran during the calls: the hooked reads are in the trace */
    ck_assert_msg(s.has_trace && at_count(&s.t, NULL, "Read") >= 1, "%s: %s", mode,
                  at_session_describe(&s, d, sizeof d));
    at_run_result_free(&u);
    at_rmtree(udir);
    free(udir);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("harm_cancel");
    TCase *tc = tcase_create("cancel");
    tcase_set_timeout(tc, 0);
    tcase_add_loop_test(tc, test_calls_and_cancellation_as_untraced, 0,
                        (int)(sizeof modes / sizeof modes[0]));
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
