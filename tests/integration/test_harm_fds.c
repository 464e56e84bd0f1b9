/* test_harm_fds: no byte of the program's files is read or written by the shim's machinery. A
 * program puts its own files on every number 880..1023 (dup2), or issues a raw close_range system
 * call and opens 1000 files, then writes and reads them while a hooked function with stacks fires
 * through frames that have no unwind info (libunwind checks memory there): every file holds the
 * bytes of the untraced run, the output is the same, the trace verifies and holds every call. And
 * the shim holds no descriptor but the trace file (the memory checks use none). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_harmcmp.h"
#include "at_testlib.h"

static const struct {
    const char *mode;
    int nfiles, first; /* files f<first>.txt .. */
} modes[] = {{"dup2", 144, 880}, {"raw", 1000, 0}};

static const char *conf_env(void)
{
    static char env0[4200];
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s/tests/data/hooks/fds-work.conf", AT_SOURCE_DIR);
    return env0;
}

START_TEST(test_files_untouched)
{
    const char *env[] = {conf_env(), NULL};
    const char *argv[] = {"hs_fds", modes[_i].mode, NULL};
    at_session s;
    ck_assert_int_eq(at_session_run_deadline(&s, "fds", argv, env, 120), 0);
    at_run_result r;
    char *udir, d[1024];
    ck_assert_int_eq(at_harm_untraced("fds-u", argv, NULL, &r, &udir), 0);
    ck_assert_msg(r.exited && r.status == 0, "untraced: %s", at_run_describe(&r, d, sizeof d));
    ck_assert_msg(s.r.exited && s.r.status == 0, "%s: %s", modes[_i].mode,
                  at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(s.r.out, r.out);
    for (int i = 0; i < modes[_i].nfiles; i++) {
        char name[32];
        snprintf(name, sizeof name, "f%d.txt", modes[_i].first + i);
        const char *diff = at_harm_file_diff(s.dir, udir, name);
        ck_assert_msg(!diff, "%s: %s", modes[_i].mode, diff);
    }
    ck_assert_msg(s.has_trace && s.t.complete, "%s", at_session_describe(&s, d, sizeof d));
    const char *bad = at_harm_verify(s.t.path);
    ck_assert_msg(!bad, "%s", bad);
    /* 20 rounds of a call per file, and one more per file as it is read back */
    size_t want = (size_t)modes[_i].nfiles * 21;
    ck_assert_uint_eq(at_count(&s.t, NULL, "WorkStart"), want);
    ck_assert_uint_eq(at_count(&s.t, NULL, "WorkStop"), want);
    /* the stacks went through the frames without unwind info: main is beyond them */
    long k = at_find(&s.t, NULL, "WorkStart", 0);
    ck_assert_msg(k >= 0 && s.t.ev[k].nframes >= 5, "%u frames", k >= 0 ? s.t.ev[k].nframes : 0);
    at_run_result_free(&r);
    at_rmtree(udir);
    free(udir);
    at_session_free(&s);
}
END_TEST

/* The descriptors the program sees open: the same as untraced, plus the trace file's alone. */
START_TEST(test_only_trace_fd)
{
    const char *env[] = {conf_env(), NULL};
    const char *argv[] = {"hs_fds", "fds", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run_deadline(&s, "fdlist", argv, env, 120), 0);
    at_run_result r;
    char *udir, d[1024];
    ck_assert_int_eq(at_harm_untraced("fdlist-u", argv, NULL, &r, &udir), 0);
    ck_assert_msg(s.r.exited && s.r.status == 0 && r.exited && r.status == 0, "%s",
                  at_session_describe(&s, d, sizeof d));
    /* the traced list without its one "N trace" line */
    char *traced = strdup(s.r.out);
    char *t = strstr(traced, " trace\n");
    ck_assert_msg(t, "no trace descriptor in:\n%s", s.r.out);
    char *line = t;
    while (line > traced && line[-1] != '\n')
        line--;
    memmove(line, t + 7, strlen(t + 7) + 1);
    ck_assert_msg(!strstr(traced, " trace\n"), "two trace descriptors:\n%s", s.r.out);
    ck_assert_msg(!strcmp(traced, r.out), "traced (without the trace's):\n%s\nuntraced:\n%s", traced,
                  r.out);
    free(traced);
    at_run_result_free(&r);
    at_rmtree(udir);
    free(udir);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("harm_fds");
    TCase *tc = tcase_create("fds");
    tcase_set_timeout(tc, 0);
    tcase_add_loop_test(tc, test_files_untouched, 0, 2);
    tcase_add_test(tc, test_only_trace_fd);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
