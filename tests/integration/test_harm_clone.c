/* test_harm_clone: children made with clone(CLONE_VM) and no TLS of their own share their parent
 * thread's per-thread state. The fixture (harm_clone) makes 20 of them one after another, each
 * marking events (and, through glibc's clone(), starting and stopping activities) while the parent
 * does the same. Over 30 runs of each kind, every traced run ends as the untraced one does (same
 * status, same stdout, same stderr), never hangs (a run deadline far above its normal time: a hang
 * fails the test), and leaves a file that `acttrace verify` passes, with the parent's events all in
 * it. Before, such runs hung in the flusher or the activity chain, or crashed in the heap. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"

#define RUNS 30
#define DEADLINE_S 60

static void verify(const char *path)
{
    char tool[4096];
    snprintf(tool, sizeof tool, "%s/acttrace", at_build_dir());
    const char *argv[] = {tool, "verify", path, NULL};
    at_run_opts o = {.argv = argv, .no_preload = true};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 0, "acttrace verify %s: %s%s", path, r.out, r.err);
    at_run_result_free(&r);
}

static void runs(const char *mode)
{
    char *fx = at_fixture_path("harm_clone");
    const char *argv[] = {fx, mode, NULL};
    at_run_opts uo = {.argv = argv, .no_preload = true, .deadline_s = DEADLINE_S};
    at_run_result u;
    ck_assert_int_eq(at_run(&uo, &u), 0);
    ck_assert_msg(u.exited && u.status == 0 && strstr(u.out, "children 20 of 20"), "untraced: %s",
                  u.out);
    for (int i = 0; i < RUNS; i++) {
        at_session s;
        ck_assert_int_eq(at_session_run_deadline(&s, "harm-clone", argv, NULL, DEADLINE_S), 0);
        char d[1024];
        ck_assert_msg(!s.r.timed_out, "%s run %d hung: %s", mode, i, at_session_describe(&s, d, sizeof d));
        ck_assert_msg(s.r.exited && s.r.status == u.status, "%s run %d: %s", mode, i,
                      at_session_describe(&s, d, sizeof d));
        ck_assert_str_eq(s.r.out, u.out);
        ck_assert_str_eq(s.r.err, u.err);
        ck_assert_msg(s.has_trace && s.load_rc == 0 && s.t.complete, "%s run %d: %s", mode, i,
                      at_session_describe(&s, d, sizeof d));
        /* the parent's 60000 marks and the pre-registration one; with raw children, those a
         * child's writes damaged are skipped and show as drops */
        size_t parent = at_count(&s.t, NULL, "Parent");
        if (!strcmp(mode, "raw"))
            ck_assert_msg(parent == 60001 || (parent > 0 && s.t.events_lost > 0),
                          "run %d: %zu Parent marks, %llu lost", i, parent,
                          (unsigned long long)s.t.events_lost);
        else
            ck_assert_uint_eq(parent, 60001);
        verify(s.t.path);
        at_session_free(&s);
    }
    at_run_result_free(&u);
    free(fx);
}

/* glibc's clone(): the child records nothing (the shim knows it is one), the parent everything */
START_TEST(test_clone_vm_children)
{
    runs("glibc");
}
END_TEST

/* the raw system call, which no wrapper sees: what the children write into the parent's buffer is
 * taken where it is sound and skipped where it is not (gaps counted as drops) */
START_TEST(test_raw_clone_vm_children)
{
    runs("raw");
}
END_TEST

int main(void)
{
    Suite *su = suite_create("harm_clone");
    TCase *tc = tcase_create("clone_vm");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_clone_vm_children);
    tcase_add_test(tc, test_raw_clone_vm_children);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
