/* test_harm_fds: no byte of the program's files is read or written by the shim's machinery. A
 * program puts its own files on every number 880..1023 (dup2), or issues a raw close_range system
 * call and opens 1000 files, then writes and reads them while a hooked function with stacks fires
 * through frames that have no unwind info (libunwind checks memory there): every file holds the
 * bytes of the untraced run, the output is the same, the trace verifies and holds every call. And
 * the program's descriptor table holds nothing of the shim's, not even the trace file (the memory
 * checks use none; the writer thread opens its files in a table of its own). */
#include <check.h>
#include <dirent.h>
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

/* The program traced (with env) and untraced, each in a folder of its own. */
static void run_both(at_session *s, at_run_result *r, char **udir, const char *name,
                     const char **argv, const char **env)
{
    char un[64];
    ck_assert_int_eq(at_session_run_deadline(s, name, argv, env, 300), 0);
    snprintf(un, sizeof un, "%s-u", name);
    ck_assert_int_eq(at_harm_untraced(un, argv, NULL, r, udir), 0);
}

static void both_free(at_session *s, at_run_result *r, char *udir)
{
    at_run_result_free(r);
    at_rmtree(udir);
    free(udir);
    at_session_free(s);
}

/* _i / 2: the writer's own descriptor table, or the program's (as where the kernel refuses one) */
START_TEST(test_files_untouched)
{
    const char *env[] = {conf_env(), _i < 2 ? "ACTTRACE_WRITER_TABLE=own" : "ACTTRACE_WRITER_TABLE=shared",
                         NULL};
    const char *argv[] = {"hs_fds", modes[_i % 2].mode, NULL};
    at_session s;
    at_run_result r;
    char *udir, d[1024];
    run_both(&s, &r, &udir, "fds", argv, env);
    ck_assert_msg(r.exited && r.status == 0, "untraced: %s", at_run_describe(&r, d, sizeof d));
    ck_assert_msg(s.r.exited && s.r.status == 0, "%s: %s", modes[_i % 2].mode,
                  at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(s.r.out, r.out);
    for (int i = 0; i < modes[_i % 2].nfiles; i++) {
        char name[32];
        snprintf(name, sizeof name, "f%d.txt", modes[_i % 2].first + i);
        const char *diff = at_harm_file_diff(s.dir, udir, name);
        ck_assert_msg(!diff, "%s: %s", modes[_i % 2].mode, diff);
    }
    ck_assert_msg(s.has_trace && s.t.complete, "%s", at_session_describe(&s, d, sizeof d));
    const char *bad = at_harm_verify(s.t.path);
    ck_assert_msg(!bad, "%s", bad);
    /* 20 rounds of a call per file, and one more per file as it is read back */
    size_t want = (size_t)modes[_i % 2].nfiles * 21;
    ck_assert_uint_eq(at_count(&s.t, NULL, "WorkStart"), want);
    ck_assert_uint_eq(at_count(&s.t, NULL, "WorkStop"), want);
    /* the stacks went through the frames without unwind info: main is beyond them */
    long k = at_find(&s.t, NULL, "WorkStart", 0);
    ck_assert_msg(k >= 0 && s.t.ev[k].nframes >= 5, "%u frames", k >= 0 ? s.t.ev[k].nframes : 0);
    both_free(&s, &r, udir);
}
END_TEST

/* The descriptors the program sees open: the same as untraced. The trace file is open, in the
 * writer's own table. */
START_TEST(test_only_trace_fd)
{
    const char *env[] = {conf_env(), NULL};
    const char *argv[] = {"hs_fds", "fds", NULL};
    at_session s;
    at_run_result r;
    char *udir, d[1024];
    run_both(&s, &r, &udir, "fdlist", argv, env);
    ck_assert_msg(s.r.exited && s.r.status == 0 && r.exited && r.status == 0, "%s",
                  at_session_describe(&s, d, sizeof d));
    ck_assert_msg(strstr(s.r.err, "trace in a table of its own\n"), "stderr: %s", s.r.err);
    ck_assert_msg(!strcmp(s.r.out, r.out), "traced:\n%s\nuntraced:\n%s", s.r.out, r.out);
    both_free(&s, &r, udir);
}
END_TEST

/* The program's descriptor numbers while the shim's writer opens file after file: a thread that
 * opens and closes a file gets the lowest free number every time, as untraced. (Each file the
 * writer opened in the program's table, even for a moment, took that number from under it.) */
START_TEST(test_lowest_number)
{
    char envc[4200];
    snprintf(envc, sizeof envc, "ACTTRACE_CONFIG=%s/tests/data/hooks/fds-rotate.conf", AT_SOURCE_DIR);
    const char *env[] = {envc, NULL};
    const char *argv[] = {"hs_fds", "lowest", NULL};
    at_session s;
    at_run_result r;
    char *udir, d[1024];
    run_both(&s, &r, &udir, "lowest", argv, env);
    ck_assert_msg(r.exited && r.status == 0 && !strcmp(r.out, "lowest: ok\n"), "untraced: %s",
                  at_run_describe(&r, d, sizeof d));
    ck_assert_msg(s.r.exited && s.r.status == 0, "%s", at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(s.r.out, r.out);
    /* the writer did open files while the program ran: more than a few */
    DIR *dir = opendir(s.dir);
    ck_assert_ptr_nonnull(dir);
    int files = 0;
    for (struct dirent *de; (de = readdir(dir));)
        files += strstr(de->d_name, ".nettrace") != NULL;
    closedir(dir);
    ck_assert_msg(files >= 10, "%d trace files", files);
    both_free(&s, &r, udir);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("harm_fds");
    TCase *tc = tcase_create("fds");
    tcase_set_timeout(tc, 0);
    tcase_add_loop_test(tc, test_files_untouched, 0, 4);
    tcase_add_test(tc, test_only_trace_fd);
    tcase_add_test(tc, test_lowest_number);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
