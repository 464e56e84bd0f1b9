/* test_harm_limits: a program at its resource limits does as well traced as untraced (fixture
 * harm_limits). Each case runs it both ways in fresh folders and compares exit status, stdout, the
 * files it wrote, and stderr but for the shim's own `acttrace:` lines:
 *   - RLIMIT_AS (`ulimit -v 300000`): 20 threads alive at once, then a 48 MiB malloc (the buffer
 *     pool used to reserve 256 MiB up front, leaving room for one thread);
 *   - RLIMIT_FSIZE 64 KiB: the trace written at exit past the limit no longer kills the program
 *     with SIGXFSZ;
 *   - RLIMIT_NPROC 4 under an unused uid (needs root to switch uid: skipped otherwise): as many
 *     threads (pthread_create, C11's thrd_create) and children (posix_spawn) as untraced, though
 *     the shim's writer thread counted against the limit. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "at_harmcmp.h"
#include "at_testlib.h"

#define DEADLINE_S 60

typedef struct pair {
    char *dir[2];
    at_run_result r[2];
} pair;

static void run_pair(pair *p, const char *tag, const char *const *argv, const char *const *env)
{
    for (int u = 0; u < 2; u++) {
        p->dir[u] = at_tmpdir(tag);
        at_run_opts o = {.argv = argv, .env = env, .no_preload = u == 1, .cwd = p->dir[u],
                         .deadline_s = DEADLINE_S};
        ck_assert_int_eq(at_run(&o, &p->r[u]), 0);
    }
    char d0[256], d1[256];
    at_run_describe(&p->r[0], d0, sizeof d0);
    at_run_describe(&p->r[1], d1, sizeof d1);
    ck_assert_msg(p->r[0].exited && p->r[1].exited && p->r[0].status == p->r[1].status,
                  "traced: %s, untraced: %s (stderr '%s')", d0, d1, p->r[0].err);
    ck_assert_str_eq(p->r[0].out, p->r[1].out);
    char *e0 = at_harm_program_err(p->r[0].err), *e1 = at_harm_program_err(p->r[1].err);
    ck_assert_str_eq(e0, e1);
    free(e0);
    free(e1);
}

static void pair_free(pair *p)
{
    for (int u = 0; u < 2; u++) {
        at_run_result_free(&p->r[u]);
        if (!getenv("AT_KEEP_TMP"))
            at_rmtree(p->dir[u]);
        free(p->dir[u]);
    }
}

static size_t count_in(const char *path, const char *name)
{
    at_trace t;
    int rc = at_trace_load(path, &t);
    ck_assert_msg(rc == 0 && t.complete, "%s: %s", path, t.err);
    size_t n = at_count(&t, NULL, name);
    at_trace_free(&t);
    return n;
}

START_TEST(test_address_space_limit)
{
    if (getenv("ACTTRACE_ASAN")) {
        printf("test_address_space_limit skipped: the sanitizer runtime's shadow memory does not "
               "fit under ulimit -v\n");
        return;
    }
    char *fx = at_fixture_path("harm_limits"), cmd[4200];
    snprintf(cmd, sizeof cmd, "ulimit -v 300000 && exec %s as", fx);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    const char *env[] = {"ACTTRACE_OUTPUT=t.nettrace", NULL};
    pair p;
    run_pair(&p, "harm-as", argv, env);
    ck_assert_str_eq(p.r[1].out, "threads 20 (all)\nmalloc ok\n");
    char path[4200];
    snprintf(path, sizeof path, "%s/t-exec1.nettrace", p.dir[0]); /* the image sh exec'd */
    ck_assert_uint_eq(count_in(path, "Thread"), 20);
    pair_free(&p);
    free(fx);
}
END_TEST

START_TEST(test_file_size_limit)
{
    char *fx = at_fixture_path("harm_limits");
    const char *argv[] = {fx, "fsize", NULL};
    /* no periodic flush: the whole trace is written by the exiting thread */
    const char *env[] = {"ACTTRACE_OUTPUT=t.nettrace", "ACTTRACE_FLUSH_MS=3600000", NULL};
    pair p;
    run_pair(&p, "harm-fsize", argv, env);
    ck_assert_str_eq(p.r[1].out, "fsize done\n");
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/own.txt", p.dir[0]);
    snprintf(b, sizeof b, "%s/own.txt", p.dir[1]);
    size_t la, lb;
    char *ca = at_read_file(a, &la), *cb = at_read_file(b, &lb);
    ck_assert(ca && cb && la == lb && memcmp(ca, cb, la) == 0);
    free(ca);
    free(cb);
    /* the shim said why the trace is short */
    ck_assert_msg(strstr(p.r[0].err, "acttrace: write failed") != NULL, "stderr '%s'", p.r[0].err);
    snprintf(a, sizeof a, "%s/t.nettrace", p.dir[0]);
    struct stat st;
    ck_assert_int_eq(stat(a, &st), 0);
    ck_assert_int_le(st.st_size, 64 << 10);
    pair_free(&p);
    free(fx);
}
END_TEST

START_TEST(test_process_limit)
{
    if (geteuid() != 0) {
        printf("test_process_limit skipped: switching to an unused uid needs root (root itself "
               "ignores RLIMIT_NPROC)\n");
        return;
    }
    char *fx = at_fixture_path("harm_limits");
    const char *argv[] = {fx, "nproc", NULL};
    /* the folder is the test user's: the trace goes where the fixture's unused uid may write */
    const char *env[] = {"ACTTRACE_OUTPUT=/tmp/acttrace-harm-nproc-%p.nettrace", NULL};
    pair p;
    run_pair(&p, "harm-nproc", argv, env);
    ck_assert_str_eq(p.r[1].out, "threads 3 (Resource temporarily unavailable)\n");
    char path[128];
    snprintf(path, sizeof path, "/tmp/acttrace-harm-nproc-%d.nettrace", (int)p.r[0].pid);
    ck_assert_uint_eq(count_in(path, "Thread"), 3);
    unlink(path);
    pair_free(&p);
    free(fx);
}
END_TEST

/* harm_limits nproc HOW: the same count of HOW's threads or children traced as untraced (want) */
static void nproc_case(const char *how, const char *want)
{
    if (geteuid() != 0) {
        printf("nproc %s skipped: switching to an unused uid needs root\n", how);
        return;
    }
    char *fx = at_fixture_path("harm_limits");
    const char *argv[] = {fx, "nproc", how, NULL};
    const char *env[] = {"ACTTRACE_OUTPUT=/tmp/acttrace-harm-nproc-%p.nettrace", NULL};
    pair p;
    run_pair(&p, "harm-nproc", argv, env);
    ck_assert_str_eq(p.r[1].out, want);
    char path[128];
    snprintf(path, sizeof path, "/tmp/acttrace-harm-nproc-%d.nettrace", (int)p.r[0].pid);
    unlink(path);
    pair_free(&p);
    free(fx);
}

START_TEST(test_process_limit_c11)
{
    nproc_case("c11", "threads 3 (thrd_create failed)\n");
}
END_TEST

START_TEST(test_process_limit_spawn)
{
    nproc_case("spawn", "children 3 (Resource temporarily unavailable)\n");
}
END_TEST

int main(void)
{
    Suite *su = suite_create("harm_limits");
    TCase *tc = tcase_create("limits");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_address_space_limit);
    tcase_add_test(tc, test_file_size_limit);
    tcase_add_test(tc, test_process_limit);
    tcase_add_test(tc, test_process_limit_c11);
    tcase_add_test(tc, test_process_limit_spawn);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
