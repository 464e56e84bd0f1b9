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
           "Request //1  start 1.000  duration 9.00ms  threads T1\n"
           "  Parse //1/1  start 2.000  duration 3.00ms  threads T1\n"
           "Request //2  start 12.000  NEVER STOPPED (open 8.00ms at the end)  threads T1\n"
           "  Parse //2/1  start 13.000  duration 1.50ms  threads T1\n");
}
END_TEST

static void gen_nonnested(void *ctx)
{
    (void)ctx;
    at_gen_note_thread(0);
    at_gen_start("Session", "//1", NULL, 1);
    at_gen_start("Upload", "//1/1", "//1", 2);
    at_gen_stop("Session", "//1", 3);   /* the parent ends before its child */
    at_gen_stop("Upload", "//1/1", 6);
    at_gen_stop("Upload", "//9", 7);    /* a Stop that matches nothing */
    at_gen_start("Session", "//2", NULL, 8);
    at_gen_stop("Upload", "//2", 9);    /* EventSource's Stop with no live Upload: //2 keeps running */
    at_gen_stop("Session", "//2", 10);
}

START_TEST(non_nested)
{
    pids[0] = at_gen_trace(paths[0], gen_nonnested, NULL);
    ck_assert_int_gt(pids[0], 0);
    expect((const char *const[]){"tree", paths[0], NULL},
           "Session //1  start 1.000  duration 2.00ms  threads T1\n"
           "  Upload //1/1  start 2.000  duration 4.00ms  threads T1\n"
           "Session //2  start 8.000  duration 2.00ms  threads T1\n");
    expect((const char *const[]){"events", "--to", "7", paths[0], NULL},
           "       0.000  T16  Microsoft-DotNETCore-EventPipe/ProcessInfo  -  -  CommandLine=\"tracegen\"  OSInformation=\"Linux\"  ArchInformation=\"x64\"\n"
           "       1.000  T1  acttrace/SessionStart  //1  -  SessionId=1\n"
           "       2.000  T1  acttrace/UploadStart  //1/1  //1  UploadId=11\n"
           "       3.000  T1  acttrace/SessionStop  //1  -  DURATION=2.00ms  SessionId=1\n"
           "       6.000  T1  acttrace/UploadStop  //1/1  -  DURATION=4.00ms  UploadId=11\n"
           "       7.000  T1  acttrace/UploadStop  //9  -  UploadId=9\n");
}
END_TEST

static void gen_recursive(void *ctx)
{
    (void)ctx;
    at_gen_note_thread(0);
    at_gen_start("Request", "//1", NULL, 1);
    at_gen_start("Request", "//1/1", "//1", 2);
    at_gen_start("Request", "//1/1/1", "//1/1", 3);
    uintptr_t st[] = {0x1003, 0x1002, 0x1001};
    at_gen_info("Sample", "//1/1/1", 3.5, st, 3);
    at_gen_info("Sample", "//1/1/1", 3.6, st, 3);
    at_gen_info("Sample", "//1", 3.7, st + 1, 2);
    at_gen_stop("Request", "//1/1/1", 4);
    at_gen_stop("Request", "//1/1", 6);
    at_gen_start("Request", "//1/2", "//1", 7);
    at_gen_stop("Request", "//1/2", 8);
    at_gen_stop("Request", "//1", 20);
}

START_TEST(recursive)
{
    pids[0] = at_gen_trace(paths[0], gen_recursive, NULL);
    ck_assert_int_gt(pids[0], 0);
    expect((const char *const[]){"tree", paths[0], NULL},
           "Request //1  start 1.000  duration 19.0ms  threads T1\n"
           "  Request //1/1  start 2.000  duration 4.00ms  threads T1\n"
           "    Request //1/1/1  start 3.000  duration 1.00ms  threads T1\n"
           "  Request //1/2  start 7.000  duration 1.00ms  threads T1\n");
    expect((const char *const[]){"tree", "--min-ms", "3", paths[0], NULL},
           "Request //1  start 1.000  duration 19.0ms  threads T1\n"
           "  Request //1/1  start 2.000  duration 4.00ms  threads T1\n");
    expect((const char *const[]){"stats", paths[0], NULL},
           "NAME                        COUNT        P50        P90        P99        MAX THREADS   EVENTS NEVER_STOPPED\n"
           "Request                         4     1.00ms     19.0ms     19.0ms     19.0ms       1       11             0\n");
    expect((const char *const[]){"stacks", paths[0], NULL},
           "Request;0x1001;0x1002 1\n"
           "Request;Request;Request;0x1001;0x1002;0x1003 2\n");
    expect((const char *const[]){"stacks", "--by-activity", paths[0], NULL},
           "Request //1;0x1001;0x1002 1\n"
           "Request //1;Request //1/1;Request //1/1/1;0x1001;0x1002;0x1003 2\n");
}
END_TEST

static void *worker(void *arg)
{
    (void)arg;
    at_gen_note_thread(1);
    at_gen_recv("//1", NULL, 3);
    at_gen_start("Work", "//1/1", "//1", 4);
    at_gen_stop("Work", "//1/1", 5);
    at_gen_send("//1", 5.5);
    return NULL;
}

static void gen_threads(void *ctx)
{
    (void)ctx;
    at_gen_note_thread(0);
    at_gen_start("Request", "//1", NULL, 1);
    at_gen_send("//1", 2);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    at_gen_recv("//1", NULL, 6);
    at_gen_stop("Request", "//1", 8);
}

START_TEST(cross_thread)
{
    pids[0] = at_gen_trace(paths[0], gen_threads, NULL);
    ck_assert_int_gt(pids[0], 0);
    expect((const char *const[]){"tree", paths[0], NULL},
           "Request //1  start 1.000  duration 7.00ms  threads T1,T2  transfers T1->T2@3.000,T2->T1@6.000\n"
           "  Work //1/1  start 4.000  duration 1.00ms  threads T2\n");
    expect((const char *const[]){"events", "--name", "Work", paths[0], NULL},
           "       4.000  T2  acttrace/WorkStart  //1/1  //1  WorkId=11\n"
           "       5.000  T2  acttrace/WorkStop  //1/1  -  DURATION=1.00ms  WorkId=11\n");
}
END_TEST

static void gen_child(void *ctx)
{
    (void)ctx;
    at_gen_note_thread(1);
    /* the parent's activity current at the fork: the child's roots link to it */
    at_guid rel = at_gen_id((uint32_t)getppid(), "//1/1");
    at_gen_start_rel("Main", "//1", &rel, 300);
    at_gen_start("Load", "//1/1", "//1", 301);
    at_gen_stop("Load", "//1/1", 302);
    at_gen_stop("Main", "//1", 306);
}

static void gen_parent(void *ctx)
{
    (void)ctx;
    at_gen_note_thread(0);
    at_gen_start("Request", "//1", NULL, 1);
    at_gen_start("Spawn", "//1/1", "//1", 2);
    ck_assert_int_gt(at_gen_fork(gen_child, NULL), 0);
    at_gen_stop("Spawn", "//1/1", 310);
    at_gen_stop("Request", "//1", 315);
}

START_TEST(cross_process)
{
    pids[0] = at_gen_trace(paths[0], gen_parent, NULL);
    ck_assert_int_gt(pids[0], 0);
    pids[1] = (pid_t)at_gen_tids[AT_GEN_SLOTS - 2];
    char child[4200];
    snprintf(child, sizeof child, "%s/t0-%d.nettrace", dir, (int)pids[1]);
    ck_assert_msg(at_file_exists(child), "%s", child);
    expect((const char *const[]){"tree", paths[0], child, NULL},
           "Request //1 pid P1  start 1.000  duration 314ms  threads T1\n"
           "  Spawn //1/1  start 2.000  duration 308ms  threads T1\n"
           "    Main //1 pid P2  start 300.000  duration 6.00ms  threads T2\n"
           "      Load //1/1  start 301.000  duration 1.00ms  threads T2\n");
    expect((const char *const[]){"stats", child, paths[0], NULL},
           "NAME                        COUNT        P50        P90        P99        MAX THREADS   EVENTS NEVER_STOPPED\n"
           "Load                            1     1.00ms     1.00ms     1.00ms     1.00ms       1        2             0\n"
           "Main                            1     6.00ms     6.00ms     6.00ms     6.00ms       1        2             0\n"
           "Request                         1      314ms      314ms      314ms      314ms       1        2             0\n"
           "Spawn                           1      308ms      308ms      308ms      308ms       1        2             0\n");
    /* events of both files on one time line, each with its pid */
    expect((const char *const[]){"events", "--activity", "//1", "--to", "301", paths[0], child, NULL},
           "       1.000  pid P1  T1  acttrace/RequestStart  //1  -  RequestId=1\n"
           "       2.000  pid P1  T1  acttrace/SpawnStart  //1/1  //1  SpawnId=11\n"
           "     300.000  pid P2  T2  acttrace/MainStart  //1  //1/1  MainId=1\n"
           "     301.000  pid P2  T2  acttrace/LoadStart  //1/1  //1  LoadId=11\n");
    /* alone, the child's root names its link */
    char *alone = tool(0, (const char *const[]){"tree", child, NULL});
    ck_assert_msg(strstr(alone, "duration 6.00ms  threads T2  from pid P1 //1/1\n  Load //1/1 "), "%s", alone);
    free(alone);
}
END_TEST

/* An exec chain: each image starts Hop //1/1 again (same pid, so the same id) naming the previous
 * image's as related, as the shim's exec hand-over does; the previous image's Hop never stops. */
static void gen_exec(void *ctx)
{
    (void)ctx;
    at_gen_note_thread(0);
    at_gen_start("Hop", "//1", NULL, 1);
    at_gen_start("Work", "//1/1", "//1", 2);
    at_gen_exec(paths[1]);
    at_gen_start("Hop", "//1", "//1", 10);
    at_gen_exec(paths[2]);
    at_gen_start("Hop", "//1", "//1", 20);
    at_gen_stop("Hop", "//1", 21);
}

START_TEST(exec_chain)
{
    pids[0] = at_gen_trace(paths[0], gen_exec, NULL);
    ck_assert_int_gt(pids[0], 0);
    expect((const char *const[]){"tree", paths[0], paths[1], paths[2], NULL},
           "Hop //1 pid P1  start 1.000  NEVER STOPPED (open 20.0ms at the end)  threads T1\n"
           "  Work //1/1  start 2.000  NEVER STOPPED (open 19.0ms at the end)  threads T1\n"
           "  Hop //1 pid P1  start 10.000  NEVER STOPPED (open 11.0ms at the end)  threads T1\n"
           "    Hop //1 pid P1  start 20.000  duration 1.00ms  threads T1\n");
}
END_TEST

/* A root that lives as long as the process, over five requests: with --hold 3, whenever more than 3
 * finished activities wait for the root, they are printed before it ends under a "(running)" line
 * (after Request 2 and Request 4 here), so memory does not grow with them. */
static void gen_longroot(void *ctx)
{
    (void)ctx;
    at_gen_note_thread(0);
    at_gen_start("Main", "//1", NULL, 1);
    for (int k = 1; k <= 5; k++) {
        char p[16], q[20];
        snprintf(p, sizeof p, "//1/%d", k);
        snprintf(q, sizeof q, "//1/%d/1", k);
        at_gen_start("Request", p, "//1", 10 * k);
        at_gen_start("Parse", q, p, 10 * k + 1);
        at_gen_stop("Parse", q, 10 * k + 2);
        at_gen_stop("Request", p, 10 * k + 5);
    }
}

START_TEST(long_lived_root)
{
    pids[0] = at_gen_trace(paths[0], gen_longroot, NULL);
    ck_assert_int_gt(pids[0], 0);
    expect((const char *const[]){"tree", "--hold", "3", paths[0], NULL},
           "Main //1  start 1.000  (running; finished children so far:)\n"
           "  Request //1/1  start 10.000  duration 5.00ms  threads T1\n"
           "    Parse //1/1/1  start 11.000  duration 1.00ms  threads T1\n"
           "  Request //1/2  start 20.000  duration 5.00ms  threads T1\n"
           "    Parse //1/2/1  start 21.000  duration 1.00ms  threads T1\n"
           "  Request //1/3  start 30.000  duration 5.00ms  threads T1\n"
           "    Parse //1/3/1  start 31.000  duration 1.00ms  threads T1\n"
           "  Request //1/4  start 40.000  duration 5.00ms  threads T1\n"
           "    Parse //1/4/1  start 41.000  duration 1.00ms  threads T1\n"
           "Main //1  start 1.000  NEVER STOPPED (open 54.0ms at the end)  threads T1\n"
           "  Request //1/5  start 50.000  duration 5.00ms  threads T1\n"
           "    Parse //1/5/1  start 51.000  duration 1.00ms  threads T1\n");
    /* by default everything fits: one tree */
    expect((const char *const[]){"tree", "--name", "Main", "--min-ms", "50", paths[0], NULL},
           "Main //1  start 1.000  NEVER STOPPED (open 54.0ms at the end)  threads T1\n");
    expect((const char *const[]){"stats", paths[0], NULL},
           "NAME                        COUNT        P50        P90        P99        MAX THREADS   EVENTS NEVER_STOPPED\n"
           "Main                            1          -          -          -          -       1        1             1\n"
           "Parse                           5     1.00ms     1.00ms     1.00ms     1.00ms       1       10             0\n"
           "Request                         5     5.00ms     5.00ms     5.00ms     5.00ms       1       10             0\n");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tools_golden");
    TCase *tc = tcase_create("golden");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, never_stopped);
    tcase_add_test(tc, non_nested);
    tcase_add_test(tc, recursive);
    tcase_add_test(tc, cross_thread);
    tcase_add_test(tc, cross_process);
    tcase_add_test(tc, long_lived_root);
    tcase_add_test(tc, exec_chain);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
