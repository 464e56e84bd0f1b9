/* test_harm_altstack: a stack overflow keeps the trace. A program without an alternate signal stack
 * marks 1001 events, then overflows its stack by recursion (on the first thread, on a second one):
 * traced, the file holds all 1001 and the FatalSignal, and verifies; the program dies of the same
 * SIGSEGV (139 from sh) as untraced. What sigaltstack reports to the program is what it reports
 * untraced (none at first, its own once set, none once disabled), and a program with its own
 * SIGSEGV handler on its own alternate stack runs it there, as untraced. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_harmcmp.h"
#include "at_testlib.h"

static void run_both(const char *mode, at_session *s, at_run_result *u)
{
    const char *argv[] = {"hs_overflow", mode, NULL};
    /* no timed flush before the fault: what the file holds, the handler wrote */
    const char *env[] = {"ACTTRACE_FLUSH_MS=600000", NULL};
    ck_assert_int_eq(at_session_run_deadline(s, "altstack", argv, env, 120), 0);
    char *udir;
    ck_assert_int_eq(at_harm_untraced("altstack-u", argv, NULL, u, &udir), 0);
    at_rmtree(udir);
    free(udir);
    char d[1024], e[256];
    ck_assert_msg(s->r.exited == u->exited && s->r.status == u->status &&
                      s->r.signaled == u->signaled && s->r.sig == u->sig,
                  "%s: traced %s, untraced %s", mode, at_session_describe(s, d, sizeof d),
                  at_run_describe(u, e, sizeof e));
    ck_assert_str_eq(s->r.out, u->out);
}

static void check_trace(at_session *s, const char *mode, bool fatal)
{
    char d[1024];
    ck_assert_msg(s->has_trace && s->load_rc == 0 && s->t.complete, "%s: %s", mode,
                  at_session_describe(s, d, sizeof d));
    ck_assert_msg(at_count(&s->t, NULL, "Before") == 1001, "%s: %zu of 1001 events", mode,
                  at_count(&s->t, NULL, "Before"));
    ck_assert_uint_eq(s->t.events_lost, 0);
    if (fatal)
        ck_assert_msg(at_find_field(&s->t, "FatalSignal", "Signal", "11", 0) >= 0, "%s: no FatalSignal",
                      mode);
    const char *bad = at_harm_verify(s->t.path);
    ck_assert_msg(!bad, "%s", bad);
}

static const char *const overflows[] = {"main", "thread", "reuse"};

START_TEST(test_overflow_keeps_trace)
{
    at_session s;
    at_run_result u;
    run_both(overflows[_i], &s, &u);
    ck_assert_msg(u.signaled && u.sig == SIGSEGV, "untraced: not SIGSEGV");
    check_trace(&s, overflows[_i], true);
    at_run_result_free(&u);
    at_session_free(&s);
}
END_TEST

/* sh reports the same 139 */
START_TEST(test_overflow_status_from_sh)
{
    char *fx = at_fixture_path("hs_overflow"), cmd[4200];
    snprintf(cmd, sizeof cmd, "%s thread; echo status $?", fx);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    at_session s;
    ck_assert_int_eq(at_session_run_deadline(&s, "altstack-sh", argv, NULL, 120), 0);
    ck_assert_msg(strstr(s.r.out, "status 139\n"), "%s", s.r.out);
    at_run_opts o = {.argv = argv, .no_preload = true, .deadline_s = 120};
    at_run_result u;
    ck_assert_int_eq(at_run(&o, &u), 0);
    ck_assert_str_eq(s.r.out, u.out);
    at_run_result_free(&u);
    at_session_free(&s);
    free(fx);
}
END_TEST

START_TEST(test_sigaltstack_as_untraced)
{
    /* the sanitizer preloaded before the shim puts an alternate stack of its own on every thread:
     * the program sees that one traced, none untraced (where nothing is preloaded) */
    const char *san = getenv("ACTTRACE_ASAN");
    if (san && *san == '1')
        return;
    at_session s;
    at_run_result u;
    run_both("query", &s, &u);
    ck_assert_msg(strstr(s.r.out, "main: sp null size 0 flags 2\n"), "%s", s.r.out);
    ck_assert_msg(strstr(s.r.out, "thread: sp null size 0 flags 2\n"), "%s", s.r.out);
    ck_assert_msg(strstr(s.r.out, "thread disabled: sp null size 0 flags 2\n"), "%s", s.r.out);
    at_run_result_free(&u);
    at_session_free(&s);
}
END_TEST

START_TEST(test_own_handler_own_stack)
{
    at_session s;
    at_run_result u;
    run_both("own", &s, &u);
    ck_assert_msg(s.r.exited && s.r.status == 42, "not the program's handler");
    ck_assert_msg(strstr(s.r.out, "caught 11 on own stack\n"), "%s", s.r.out);
    check_trace(&s, "own", false);
    at_run_result_free(&u);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("harm_altstack");
    TCase *tc = tcase_create("altstack");
    tcase_set_timeout(tc, 0);
    tcase_add_loop_test(tc, test_overflow_keeps_trace, 0,
                        (int)(sizeof overflows / sizeof overflows[0]));
    tcase_add_test(tc, test_overflow_status_from_sh);
    tcase_add_test(tc, test_sigaltstack_as_untraced);
    tcase_add_test(tc, test_own_handler_own_stack);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
