/* test_harm_waits: the shim times the calls that may block (shim/waits.c, shim/fdflow.c) when the
 * calling thread is in an activity. Against an untraced run of harm_waits, which makes each such
 * call outside and inside an activity so that it does not succeed at once: the same results, error
 * codes, errno, remaining times, and a thread cancelled in pthread_cond_wait holding its mutex in
 * its cleanup handler. The traced run recorded the waits inside the activity (the timeouts, the
 * interrupted sleeps, the join) and none outside. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_harmcmp.h"
#include "at_testlib.h"

START_TEST(test_waits_as_untraced)
{
    const char *argv[] = {"harm_waits", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run_deadline(&s, "hwaits", argv, NULL, 120), 0);
    at_run_result u;
    char *udir, d[1024];
    ck_assert_int_eq(at_harm_untraced("hwaits-u", argv, NULL, &u, &udir), 0);
    ck_assert_msg(u.exited && u.status == 0, "untraced: %s", at_run_describe(&u, d, sizeof d));
    ck_assert_msg(s.r.exited == u.exited && s.r.status == u.status && s.r.signaled == u.signaled,
                  "traced: %s", at_session_describe(&s, d, sizeof d));
    ck_assert_msg(!strcmp(s.r.out, u.out), "traced\n%s\nuntraced\n%s", s.r.out, u.out);
    ck_assert_msg(strstr(u.out, "mutex_timedlock ETIMEDOUT") && strstr(u.out, "cleanup-held 1") &&
                      strstr(u.out, "futex-timeout -1 ETIMEDOUT") && strstr(u.out, "pause-eintr -1 EINTR") &&
                      strstr(u.out, "syscall-clone 1 status 3") && strstr(u.out, "syscall-mmap 1"),
                  "%s", u.out);
    /* the waits inside the activity, none outside */
    ck_assert_msg(s.has_trace, "%s", at_session_describe(&s, d, sizeof d));
    const char *const want[] = {"\"pthread_mutex_timedlock\"", "\"pthread_rwlock_timedwrlock\"",
                                "\"pthread_mutex_clocklock\"", "\"pthread_cond_timedwait\"",
                                "\"sem_timedwait\"",           "\"pthread_timedjoin_np\"",
                                "\"pthread_join\"",            "\"nanosleep\"",
                                "\"sleep\"",                   "\"sigtimedwait\"",
                                "\"sigsuspend\"",              "\"pause\"",
                                "\"syscall\""};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        size_t n = 0;
        for (size_t i = 0; i < s.t.n; i++) {
            const at_tev *e = &s.t.ev[i];
            if (strcmp(e->name, "WaitResume") != 0)
                continue;
            ck_assert_msg(e->act_path[0], "a wait outside any activity");
            const char *c = at_ev_field(e, "Call");
            n += c && !strcmp(c, want[k]);
        }
        ck_assert_msg(n >= 1, "no wait of %s recorded", want[k]);
    }
    at_run_result_free(&u);
    at_rmtree(udir);
    free(udir);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("harm_waits");
    TCase *tc = tcase_create("waits");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_waits_as_untraced);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
