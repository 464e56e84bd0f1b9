/* test_harm_aslimit: a program that plans its address space to the last page under RLIMIT_AS
 * (fixture harm_aslimit, hooks of tests/data/hooks/aslimit.conf with stacks) does as well traced as
 * untraced. At main it reads its limit and VmSize, fills all but the room for 24 thread stacks
 * (256 KiB) and a headroom, then starts the threads, each of which runs hooked functions (a start/stop
 * pair in the key table, a function whose Start and Stop carry stacks). Anything the shim maps after
 * main beside the program's allocations (a chunk of alternate signal stacks for the 17th thread, a
 * glibc malloc arena for a thread's first activity, symbol files) makes one of its calls fail.
 * Each case runs it both ways in fresh folders and compares exit status, stdout and stderr but for
 * the shim's own `acttrace:` lines, and reads the trace back:
 *   - the limit set before exec (`ulimit -v`), at the tightest headroom the untraced run works with
 *     (0: the plan is exact) and a bit above;
 *   - no limit at the start: the program sets its own with setrlimit, then plans. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "at_harmcmp.h"
#include "at_testlib.h"

#define DEADLINE_S 60
#define LIMIT_KIB 300000
#define THREADS 24

static const char expect_out[] = "filled: malloc ok, mmap ok\nthreads 24 (all)\nlast malloc ok\ndone\n";

/* The fixture with argument args (under `ulimit -v limit_kib` unless 0), traced and untraced:
 * both must end and print the same; the untraced run prints expect_out. The traced run's trace
 * holds every thread's hooked calls, with stacks. */
static void run_both(unsigned limit_kib, const char *args)
{
    char *fx = at_fixture_path("harm_aslimit"), cmd[4300], conf[4300];
    if (limit_kib)
        snprintf(cmd, sizeof cmd, "ulimit -v %u && exec %s %s", limit_kib, fx, args);
    else
        snprintf(cmd, sizeof cmd, "exec %s %s", fx, args);
    snprintf(conf, sizeof conf, "ACTTRACE_CONFIG=%s/tests/data/hooks/aslimit.conf", AT_SOURCE_DIR);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    const char *env[] = {"ACTTRACE_OUTPUT=t.nettrace", conf, NULL};
    char *dir[2];
    at_run_result r[2];
    for (int u = 0; u < 2; u++) {
        dir[u] = at_tmpdir("harm-aslimit");
        at_run_opts o = {.argv = argv, .env = env, .no_preload = u == 1, .cwd = dir[u],
                         .deadline_s = DEADLINE_S};
        ck_assert_int_eq(at_run(&o, &r[u]), 0);
    }
    char d0[256], d1[256];
    at_run_describe(&r[0], d0, sizeof d0);
    at_run_describe(&r[1], d1, sizeof d1);
    ck_assert_msg(r[1].exited && r[1].status == 0 && !strcmp(r[1].out, expect_out),
                  "untraced (%s, %s): %s%s", cmd, d1, r[1].out, r[1].err);
    ck_assert_msg(r[0].exited && r[0].status == r[1].status, "traced: %s, untraced: %s (stderr '%s')",
                  d0, d1, r[0].err);
    ck_assert_msg(!strcmp(r[0].out, r[1].out), "%s: traced printed\n%suntraced\n%s(stderr '%s')",
                  cmd, r[0].out, r[1].out, r[0].err);
    char *e0 = at_harm_program_err(r[0].err), *e1 = at_harm_program_err(r[1].err);
    ck_assert_str_eq(e0, e1);
    free(e0);
    free(e1);

    char path[4400];
    snprintf(path, sizeof path, "%s/t-exec1.nettrace", dir[0]); /* the image sh exec'd */
    at_trace t;
    int rc = at_trace_load(path, &t);
    ck_assert_msg(rc == 0 && t.complete, "%s: %s", path, t.err);
    ck_assert_uint_eq(at_count(&t, NULL, "ConnStart"), THREADS);
    ck_assert_uint_eq(at_count(&t, NULL, "ConnStop"), THREADS);
    ck_assert_uint_eq(at_count(&t, NULL, "WorkStop"), THREADS);
    size_t starts = 0;
    for (long i = at_find(&t, NULL, "WorkStart", 0); i >= 0; i = at_find(&t, NULL, "WorkStart", (size_t)i + 1)) {
        ck_assert_msg(t.ev[i].nframes > 0, "a WorkStart without its stack");
        starts++;
    }
    ck_assert_uint_eq(starts, THREADS);
    at_trace_free(&t);

    for (int u = 0; u < 2; u++) {
        at_run_result_free(&r[u]);
        if (!getenv("AT_KEEP_TMP"))
            at_rmtree(dir[u]);
        free(dir[u]);
    }
    free(fx);
}

static bool skip_asan(const char *name)
{
    if (!getenv("ACTTRACE_ASAN"))
        return false;
    printf("%s skipped: the sanitizer runtime's shadow memory does not fit under an address-space "
           "limit\n", name);
    return true;
}

START_TEST(test_plan_to_the_last_page)
{
    if (skip_asan("test_plan_to_the_last_page"))
        return;
    run_both(LIMIT_KIB, "0 24");
}
END_TEST

START_TEST(test_plan_with_headroom)
{
    if (skip_asan("test_plan_with_headroom"))
        return;
    run_both(LIMIT_KIB, "2048 24");
}
END_TEST

START_TEST(test_limit_set_by_the_program)
{
    if (skip_asan("test_limit_set_by_the_program"))
        return;
    run_both(0, "0 24 lower");
}
END_TEST

int main(void)
{
    Suite *su = suite_create("harm_aslimit");
    TCase *tc = tcase_create("aslimit");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_plan_to_the_last_page);
    tcase_add_test(tc, test_plan_with_headroom);
    tcase_add_test(tc, test_limit_set_by_the_program);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
