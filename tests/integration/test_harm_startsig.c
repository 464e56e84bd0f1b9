/* test_harm_startsig: the shim's start installs its fatal-signal handler with one system call per
 * signal (set, reading what was there) and puts back, exactly as the kernel held it, whatever was
 * not the default, with the signals blocked meanwhile. An image that inherits ignored signals (as
 * under nohup), blocked ones and a pending one sees every disposition, flag and mask, its blocked
 * and pending sets exactly as untraced; an ignored signal raised stays ignored; the pending one,
 * unblocked, ends it the same way, and the trace of that image holds its FatalSignal. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_harmcmp.h"
#include "at_testlib.h"

START_TEST(test_inherited_signal_state)
{
    const char *argv[] = {"start_sigs", "launch", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run_deadline(&s, "startsig", argv, NULL, 120), 0);
    at_run_result u;
    char *udir;
    ck_assert_int_eq(at_harm_untraced("startsig-u", argv, NULL, &u, &udir), 0);
    at_rmtree(udir);
    free(udir);
    char d[1024], e[256];
    ck_assert_msg(u.signaled && u.sig == SIGUSR2, "untraced: %s", at_run_describe(&u, e, sizeof e));
    ck_assert_msg(s.r.signaled == u.signaled && s.r.sig == u.sig && s.r.exited == u.exited,
                  "traced %s, untraced %s", at_session_describe(&s, d, sizeof d),
                  at_run_describe(&u, e, sizeof e));
    ck_assert_msg(strstr(u.out, "hup ignored") && strstr(u.out, "1 ignored flags 0 mask 0"),
                  "untraced: %s", u.out);
    ck_assert_str_eq(s.r.out, u.out);
    char *perr = at_harm_program_err(s.r.err);
    ck_assert_str_eq(perr, u.err);
    free(perr);
    /* the shown image's trace: its pending signal's FatalSignal, written by the handler */
    char *f = at_trace_file_last_image(s.dir, s.r.pid);
    ck_assert_msg(f, "no trace of the exec'd image: %s", at_session_describe(&s, d, sizeof d));
    at_trace t;
    ck_assert_int_eq(at_trace_load(f, &t), 0);
    ck_assert_msg(at_find_field(&t, "FatalSignal", "Signal", "12", 0) >= 0, "no FatalSignal 12 in %s",
                  f);
    const char *bad = at_harm_verify(f);
    ck_assert_msg(!bad, "%s", bad);
    at_trace_free(&t);
    free(f);
    at_run_result_free(&u);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("harm_startsig");
    TCase *tc = tcase_create("signals");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_inherited_signal_state);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
