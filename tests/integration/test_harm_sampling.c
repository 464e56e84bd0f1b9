/* test_harm_sampling: CPU sampling (ACTTRACE_SAMPLE_HZ) leaves the program as untraced. Each mode of
 * tests/fixtures/samples runs traced at 1000 Hz and untraced, and must exit the same way with the
 * same output, while the trace shows that samples were really taken:
 *   eintr    poll, read, nanosleep and sem_timedwait that block between bursts of CPU: none ends
 *            with EINTR (the timer's signal is raised in user mode only);
 *   owner    the program asks what SIGRTMAX-3 holds (the default), takes it (with sigaction,
 *            signal, sigset, sysv_signal or bsd_signal) and receives its own five sigqueue values,
 *            each once, with their code, and nothing else;
 *   mask     all signals blocked: the mask reads back with SIGRTMAX-3 in it, in a thread it starts
 *            too; its own kill of that signal waits for its sigwaitinfo;
 *   dfl      setting SIGRTMAX-3 to its default (as bash does for every signal) reads back the
 *            default and leaves sampling on: the activity after it holds samples;
 *   default  SIGRTMAX-3 raised under the default action ends the process by that signal. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_harmcmp.h"
#include "at_testlib.h"

static void same_as_untraced_how(const char *mode, const char *how, bool want_samples)
{
    const char *argv[] = {"samples", mode, how, NULL};
    const char *env[] = {"ACTTRACE_SAMPLE_HZ=1000", NULL};
    char tag[64];
    snprintf(tag, sizeof tag, "hsamp-%s%s", mode, how ? how : "");
    at_session s;
    ck_assert_int_eq(at_session_run_deadline(&s, tag, argv, env, 300), 0);
    at_run_result u;
    char *udir;
    snprintf(tag, sizeof tag, "hsamp-%s%s-u", mode, how ? how : "");
    ck_assert_int_eq(at_harm_untraced(tag, argv, NULL, &u, &udir), 0);
    at_rmtree(udir);
    free(udir);
    char d[1024], e[256];
    ck_assert_msg(s.r.exited == u.exited && s.r.status == u.status && s.r.signaled == u.signaled &&
                      s.r.sig == u.sig,
                  "%s: traced %s, untraced %s", mode, at_session_describe(&s, d, sizeof d),
                  at_run_describe(&u, e, sizeof e));
    ck_assert_msg(strcmp(s.r.out, u.out) == 0, "%s: traced printed\n%s\nuntraced\n%s", mode, s.r.out,
                  u.out);
    char *perr = at_harm_program_err(s.r.err);
    ck_assert_msg(strcmp(perr, u.err) == 0, "%s: traced stderr\n%s\nuntraced\n%s", mode, perr, u.err);
    free(perr);
    ck_assert_msg(s.has_trace, "%s: no trace: %s", mode, at_session_describe(&s, d, sizeof d));
    size_t n = at_count(&s.t, "Microsoft-DotNETCore-SampleProfiler", NULL);
    if (want_samples)
        ck_assert_msg(n >= 5, "%s: %zu samples: sampling was not on", mode, n);
    const char *bad = at_harm_verify(s.t.path);
    ck_assert_msg(!bad, "%s: %s", mode, bad);
    at_run_result_free(&u);
    at_session_free(&s);
}

static void same_as_untraced(const char *mode, bool want_samples)
{
    same_as_untraced_how(mode, NULL, want_samples);
}

START_TEST(test_no_eintr)
{
    same_as_untraced("eintr", true);
}
END_TEST

START_TEST(test_program_takes_the_signal)
{
    static const char *const how[] = {"sigaction", "signal", "sigset", "sysv_signal", "bsd_signal"};
    /* sysv_signal's handler is reset after the first signal: the second ends the process, by a
     * signal the shim does not flush on, so that trace holds no event to count */
    for (size_t i = 0; i < sizeof how / sizeof how[0]; i++)
        same_as_untraced_how("owner", how[i], strcmp(how[i], "sysv_signal") != 0);
}
END_TEST

START_TEST(test_masks_read_back)
{
    same_as_untraced("mask", true);
}
END_TEST

START_TEST(test_default_set_again)
{
    same_as_untraced("dfl", true);
    const char *argv[] = {"samples", "dfl", NULL};
    const char *env[] = {"ACTTRACE_SAMPLE_HZ=1000", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run_deadline(&s, "hsamp-dfl2", argv, env, 300), 0);
    long st = at_find(&s.t, NULL, "AfterDflStart", 0);
    ck_assert_msg(st >= 0, "no AfterDflStart");
    size_t in = 0;
    for (size_t i = 0; i < s.t.n; i++)
        in += !strcmp(s.t.ev[i].provider, "Microsoft-DotNETCore-SampleProfiler") &&
              !strcmp(s.t.ev[i].act_path, s.t.ev[st].act_path);
    ck_assert_msg(in >= 5, "%zu samples in the activity after SIG_DFL was set", in);
    at_session_free(&s);
}
END_TEST

START_TEST(test_default_action)
{
    same_as_untraced("default", false);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("harm_sampling");
    TCase *tc = tcase_create("sampling");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_no_eintr);
    tcase_add_test(tc, test_program_takes_the_signal);
    tcase_add_test(tc, test_masks_read_back);
    tcase_add_test(tc, test_default_set_again);
    tcase_add_test(tc, test_default_action);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
