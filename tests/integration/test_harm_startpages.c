/* test_harm_startpages: what a traced process image's start costs is mostly pages (on a VM with
 * shadow paging each page fault costs tens of microseconds, more than the rest of the shim's start
 * put together). An image that records nothing (no config: its session waits for its first event)
 * touches few pages of the shim's: the start's code is grouped (shim/start.ld), and the settings,
 * the event types and the start's one-time state lie on a few pages (AT_START_DATA and
 * AT_START_BSS, page-aligned settings and output names), not one page each.
 * Against an untraced run of the same spawner, the page faults per spawned image stay within a
 * bound; the images and the spawner record nothing and leave no file.
 * The start takes nothing of the program's own: a program that allocates nothing finds its heap
 * not yet made at main, traced as untraced (the shim's event types once came from malloc, which
 * made the heap before main). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"

#define SPAWNS "40"
/* Page faults per image the shim may add. Measured: 21.1-21.3 with the socket exchanges' event
 * type and the exchanges' and traceparent-writing settings (at most 21 before them; an empty preloaded
 * library alone adds
 * 5-9 here: the loader's pages, the library's first code and data pages; 16 before the shim took
 * the calls that may block: the loader's symbol lookups now read one more page of the shim's larger
 * symbol table, and the two wait event types take the event registry onto one more page). Each page the start
 * writes or reads for the first time adds one: the event types made in the program's heap, the
 * clock chosen at the start (the vDSO's data pages), relocated .data, a second page of output names,
 * a table of the start's own on a page of its own, a constant read from .rodata (the start's are
 * beside its code) or a 64 KiB window of code each. Where the loader places libc moves a run by a
 * fault or two (its code is mapped by 64 KiB windows). */
#define EXTRA_FAULTS 23.0

static double minflt(const at_run_result *r)
{
    double v = -1;
    const char *m = strstr(r->out, "minflt ");
    ck_assert_msg(m && sscanf(m, "minflt %lf", &v) == 1, "no minflt line: %s", r->out);
    return v;
}

START_TEST(test_quiet_image_start_pages)
{
    char *fx = at_fixture_path("start_pages");
    const char *argv[] = {fx, SPAWNS, NULL};
    at_run_opts o = {.argv = argv, .no_preload = true, .deadline_s = 120};
    at_run_result plain;
    ck_assert_int_eq(at_run(&o, &plain), 0);
    free(fx);
    char d[1024];
    ck_assert_msg(plain.exited && plain.status == 0, "untraced: exit %d: %s", plain.status, plain.err);
    double pu = minflt(&plain), pt = 1e9;
    const char *sargv[] = {"start_pages", SPAWNS, NULL};
    at_session s;
    /* the fewest of up to three runs: where the loader places the library moves a run's mean by a
     * fault or two (fault-around maps 64 KiB windows of its code) */
    for (int run = 0; run < 3; run++) {
        at_session r;
        ck_assert_int_eq(at_session_run_deadline(&r, "startpages", sargv, NULL, 120), 0);
        ck_assert_msg(r.r.exited && r.r.status == 0, "%s", at_session_describe(&r, d, sizeof d));
        ck_assert_str_eq(r.r.err, plain.err);
        double v = minflt(&r.r);
        pt = v < pt ? v : pt;
        if (run == 0)
            s = r;
        else
            at_session_free(&r);
        if (pt <= pu + EXTRA_FAULTS)
            break;
    }
    if (!getenv("ACTTRACE_ASAN")) /* the sanitizers' shadow memory takes faults of its own */
        ck_assert_msg(pt <= pu + EXTRA_FAULTS, "%.2f page faults per image traced, %.2f untraced", pt,
                      pu);
    /* nothing was recorded, by the spawner or its images: no file, no writer thread anywhere */
    char **files = at_trace_files(s.dir);
    ck_assert_uint_eq(at_strv_len(files), 0);
    at_strv_free(files);
    fprintf(stderr, "start pages: %.2f page faults per image traced, %.2f untraced\n", pt, pu);
    at_run_result_free(&plain);
    at_session_free(&s);
}
END_TEST

START_TEST(test_start_makes_no_heap)
{
    char *fx = at_fixture_path("heap_probe");
    const char *argv[] = {fx, NULL};
    at_run_opts o = {.argv = argv, .no_preload = true, .deadline_s = 60};
    at_run_result plain;
    ck_assert_int_eq(at_run(&o, &plain), 0);
    free(fx);
    ck_assert_msg(plain.exited && plain.status == 0 && !strcmp(plain.out, "heap at main: untouched\n"),
                  "untraced: '%s'", plain.out);
    const char *sargv[] = {"heap_probe", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run_deadline(&s, "heap", sargv, NULL, 60), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0, "%s", at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(s.r.out, plain.out);
    ck_assert_str_eq(s.r.err, plain.err);
    at_run_result_free(&plain);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("harm_startpages");
    TCase *tc = tcase_create("pages");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_quiet_image_start_pages);
    tcase_add_test(tc, test_start_makes_no_heap);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
