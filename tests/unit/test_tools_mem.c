/* test_tools_mem.c: the analysis model's memory per open activity stays within 128 bytes (its own
 * accounting: activity slots, id table, names, rare fields), read back from a trace of 100k
 * activities that never stop, in list and tree mode; the activities it hands over still carry the
 * right names, paths, threads and parents. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actmodel.h"
#include "at_testlib.h"
#include "at_tracegen.h"

#define WANT_TREE                                                                                              \
    "Orphan //2  start 8.000  duration 1.00ms  threads T1  from pid P1 //9/9\n"                                \
    "Main //1  start 1.000  (running; finished children so far:)\n"                                            \
    "  Wait //1/3  start 1.300  NEVER STOPPED (open 7.70ms at the end)  threads T1\n"                          \
    "  Wait //1/4  start 1.400  NEVER STOPPED (open 7.60ms at the end)  threads T1\n"                          \
    "  Wait //1/5  start 1.500  NEVER STOPPED (open 7.50ms at the end)  threads T1\n"                          \
    "  Request //1/6  start 3.000  duration 4.00ms  threads T1,T2  transfers T1->T2@4.000,T2->T1@6.000\n"      \
    "Main //1  start 1.000  NEVER STOPPED (open 8.00ms at the end)  threads T1\n"                              \
    "  Wait //1/1  start 1.100  NEVER STOPPED (open 7.90ms at the end)  threads T1\n"                          \
    "  Wait //1/2  start 1.200  NEVER STOPPED (open 7.80ms at the end)  threads T1\n"
#define WANT_STATS                                                                                             \
    "NAME                        COUNT        P50        P90        P99        MAX THREADS   EVENTS NEVER_STOPPED\n" \
    "Main                            1          -          -          -          -       1        1             1\n" \
    "Orphan                          1     1.00ms     1.00ms     1.00ms     1.00ms       1        2             0\n" \
    "Request                         1     4.00ms     4.00ms     4.00ms     4.00ms       2        7             0\n" \
    "Wait                            5          -          -          -          -       1        5             5\n"
#define N_ROOTS 50000 /* each with one child: 100k open activities */

static char *dir;
static char trace[4096];
static uint64_t big_tid; /* the thread that wrote trace */

static void gen(void *ctx)
{
    (void)ctx;
    at_gen_note_thread(0);
    for (int k = 1; k <= N_ROOTS; k++) {
        char p[32], q[40];
        snprintf(p, sizeof p, "//%d", k);
        snprintf(q, sizeof q, "%s/1", p);
        at_gen_start("Request", p, NULL, 1 + k * 0.001);
        at_gen_start("Parse", q, p, 1 + k * 0.001);
    }
}

typedef struct seen {
    uint64_t n, never, children, bad;
} seen;

static void on_activity(void *vc, const am_activity *a)
{
    seen *s = vc;
    s->n++;
    s->never += !a->stopped;
    char path[AM_PATH_MAX];
    am_act_path(a, path, sizeof path);
    bool child = a->parent != NULL;
    s->children += child;
    if (strcmp(a->name, child ? "Parse" : "Request") != 0 || am_nvisits(a) != 1 ||
        am_visit_at(a, 0).tid != big_tid || am_events(a) != 1 || am_nxfers(a) != 0 ||
        strncmp(path, "//", 2) != 0 || (child && strcmp(path + strlen(path) - 2, "/1") != 0))
        s->bad++;
}

static char small[4096];
static pid_t small_pid;

static void *worker(void *arg)
{
    (void)arg;
    at_gen_note_thread(1);
    at_gen_recv("//1/6", NULL, 4);
    at_gen_info("Sample", "//1/6", 4.5, NULL, 0);
    at_gen_send("//1/6", 5);
    return NULL;
}

/* A root that never stops with five children that never stop either (closed at the end, past
 * --hold 3: printed under a "(running)" line), a finished request moved to another thread and back,
 * and a root linked to an activity the trace does not have. */
static void gen_small(void *ctx)
{
    (void)ctx;
    at_gen_note_thread(0);
    at_gen_start("Main", "//1", NULL, 1);
    for (int k = 1; k <= 5; k++) {
        char p[16];
        snprintf(p, sizeof p, "//1/%d", k);
        at_gen_start("Wait", p, "//1", 1 + k * 0.1);
    }
    at_gen_start("Request", "//1/6", "//1", 3);
    at_gen_send("//1/6", 3.5);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    at_gen_recv("//1/6", NULL, 6);
    at_gen_stop("Request", "//1/6", 7);
    at_gen_start("Orphan", "//2", "//9/9", 8);
    at_gen_stop("Orphan", "//2", 9);
}

static void setup(void)
{
    dir = at_tmpdir("tools-mem");
    snprintf(trace, sizeof trace, "%s/t.nettrace", dir);
    snprintf(small, sizeof small, "%s/small.nettrace", dir);
    ck_assert_int_gt(at_gen_trace(trace, gen, NULL), 0);
    big_tid = at_gen_tids[0];
    small_pid = at_gen_trace(small, gen_small, NULL);
    ck_assert_int_gt(small_pid, 0);
}

static void teardown(void)
{
    if (!getenv("AT_KEEP_TMP")) at_rmtree(dir);
    free(dir);
}

static void check_mode(bool tree)
{
    char err[600], *paths[] = {trace};
    seen s = {0};
    am_options o = {.tree = tree};
    am_callbacks cb = {.activity = on_activity, .ctx = &s};
    am_model *m = am_open(paths, 1, &o, &cb, err, sizeof err);
    ck_assert_msg(m, "%s", err);
    ck_assert_int_eq(am_run(m, err, sizeof err), 0);
    double per = (double)am_mem_peak(m) / (2.0 * N_ROOTS);
    ck_assert_uint_eq(am_never_stopped(m), 2 * N_ROOTS);
    am_close(m);
    ck_assert_uint_eq(s.n, 2 * N_ROOTS);
    ck_assert_uint_eq(s.never, 2 * N_ROOTS);
    ck_assert_uint_eq(s.children, N_ROOTS);
    ck_assert_uint_eq(s.bad, 0);
    ck_assert_msg(per <= 128.0, "%s mode: %.1f bytes per open activity (at most 128)", tree ? "tree" : "list", per);
}

START_TEST(per_activity_list)
{
    check_mode(false);
}
END_TEST

START_TEST(per_activity_tree)
{
    check_mode(true);
}
END_TEST

START_TEST(record_size)
{
    /* the in-line part: 128 bytes less the id table's share (at most 4 / 0.35 bytes) */
    ck_assert_uint_le(sizeof(am_activity), 112);
}
END_TEST

/* The output the model gave before it was made compact, byte for byte. */
static void expect(const char *const *args, const char *want)
{
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(r.exited && r.status == 0, "acttrace %s: %s", args[0], r.err);
    char *got = at_gen_normalize(r.out, AT_GEN_SLOTS, &small_pid, 1);
    ck_assert_msg(strcmp(got, want) == 0, "acttrace %s:\n--- got:\n%s--- want:\n%s", args[0], got, want);
    free(got);
    at_run_result_free(&r);
}

START_TEST(rare_fields_and_end_spill)
{
    expect((const char *const[]){"tree", "--hold", "3", small, NULL}, WANT_TREE);
    expect((const char *const[]){"stats", small, NULL}, WANT_STATS);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tools_mem");
    TCase *tc = tcase_create("mem");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, record_size);
    tcase_add_test(tc, per_activity_list);
    tcase_add_test(tc, per_activity_tree);
    tcase_add_test(tc, rare_fields_and_end_spill);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
