/* test_tools_mem.c: the analysis model's memory per open activity stays within 128 bytes (its own
 * accounting: activity slots, id table, names, rare fields), read back from a trace of 100k
 * activities that never stop, in list and tree mode; the activities it hands over still carry the
 * right names, paths, threads and parents. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actmodel.h"
#include "at_testlib.h"
#include "at_tracegen.h"

#define N_ROOTS 50000 /* each with one child: 100k open activities */

static char *dir;
static char trace[4096];

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
        am_visit_at(a, 0).tid != at_gen_tids[0] || am_events(a) != 1 || am_nxfers(a) != 0 ||
        strncmp(path, "//", 2) != 0 || (child && strcmp(path + strlen(path) - 2, "/1") != 0))
        s->bad++;
}

static void setup(void)
{
    dir = at_tmpdir("tools-mem");
    snprintf(trace, sizeof trace, "%s/t.nettrace", dir);
    ck_assert_int_gt(at_gen_trace(trace, gen, NULL), 0);
}

static void teardown(void)
{
    at_rmtree(dir);
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

int main(void)
{
    Suite *s = suite_create("tools_mem");
    TCase *tc = tcase_create("mem");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, record_size);
    tcase_add_test(tc, per_activity_list);
    tcase_add_test(tc, per_activity_tree);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
