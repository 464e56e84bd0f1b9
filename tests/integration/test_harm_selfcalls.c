/* test_harm_selfcalls: no hook ever fires for the shim's own work. libc's open, openat, write,
 * pwrite64, read, mmap and close are hooked (entry patching, and the GOT), every Start and Stop with
 * a stack, while the program does file I/O it counts itself (hs_selfio): the Starts and Stops equal
 * its own calls exactly (none of the flusher's pwrite64, libunwind's reads, the symbol reader's
 * mmaps), the file verifies, and the program's files are the bytes of an untraced run. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_harmcmp.h"
#include "at_testlib.h"

static const char *const tiers[] = {"entry", "got"};

START_TEST(test_own_calls_unseen)
{
    char conf[4096], env0[4200];
    snprintf(conf, sizeof conf, "%s/tests/data/hooks/selfio-%s.conf", AT_SOURCE_DIR, tiers[_i]);
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s", conf);
    const char *env[] = {env0, NULL};
    const char *argv[] = {"hs_selfio", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run_deadline(&s, "selfio", argv, env, 120), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.t.complete, "%s: %s", tiers[_i],
                  at_session_describe(&s, d, sizeof d));
    char hooked[64];
    snprintf(hooked, sizeof hooked, "7 of 7 functions hooked (%s)",
             _i == 0 ? "0 GOT, 7 entry" : "7 GOT, 0 entry");
    ck_assert_msg(strstr(s.r.err, hooked), "%s", s.r.err);
    const char *bad = at_harm_verify(s.t.path);
    ck_assert_msg(!bad, "%s: %s", tiers[_i], bad);
    ck_assert_uint_eq(s.t.events_lost, 0);

    /* the program's own counts against the trace's */
    char path[4200];
    snprintf(path, sizeof path, "%s/counts.txt", s.dir);
    char *counts = at_read_file(path, NULL);
    ck_assert_msg(counts != NULL, "no counts.txt");
    static const struct {
        const char *key, *act;
    } fns[] = {{"open", "Open"},   {"openat", "Openat"}, {"write", "Write"}, {"pwrite64", "Pwrite"},
               {"read", "Read"},   {"mmap", "Mmap"},     {"close", "Close"}};
    for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++) {
        char key[32], start[32], stop[32];
        snprintf(key, sizeof key, "%s ", fns[k].key);
        const char *p = strstr(counts, key);
        if (p > counts && p[-1] != ' ') /* "open " inside "openat "? no: that one ends in "at " */
            p = NULL;
        ck_assert_msg(p, "%s not in %s", key, counts);
        size_t want = strtoul(p + strlen(key), NULL, 10);
        ck_assert_uint_gt(want, 0);
        snprintf(start, sizeof start, "%sStart", fns[k].act);
        snprintf(stop, sizeof stop, "%sStop", fns[k].act);
        ck_assert_msg(at_count(&s.t, NULL, start) == want && at_count(&s.t, NULL, stop) == want,
                      "%s: %zu %s and %zu %s for the program's %zu calls", tiers[_i],
                      at_count(&s.t, NULL, start), start, at_count(&s.t, NULL, stop), stop, want);
    }
    free(counts);

    /* the same files as untraced */
    at_run_result r;
    char *udir;
    ck_assert_int_eq(at_harm_untraced("selfio-u", argv, NULL, &r, &udir), 0);
    ck_assert_msg(r.exited && r.status == 0, "untraced: %s", at_run_describe(&r, d, sizeof d));
    ck_assert_str_eq(s.r.out, r.out);
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof name, "f%02d.dat", i);
        const char *diff = at_harm_file_diff(s.dir, udir, name);
        ck_assert_msg(!diff, "%s", diff);
    }
    const char *diff = at_harm_file_diff(s.dir, udir, "counts.txt");
    ck_assert_msg(!diff, "%s", diff);
    at_run_result_free(&r);
    at_rmtree(udir);
    free(udir);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("harm_selfcalls");
    TCase *tc = tcase_create("selfcalls");
    tcase_set_timeout(tc, 0);
    tcase_add_loop_test(tc, test_own_calls_unseen, 0, 2);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
