/* test_truth_stacks.c: stacks show the program, not the machinery. Read back through acttrace dump
 * (which names each frame through the file's own symbol events): no frame of the shim or of the
 * libffi code its wrappers use, wherever hooks nest; the depth counts the program's frames; frames
 * named from a .gnu_debuglink debug file, and after the first thread has left. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"
#include "at_tracegen.h"

/* Run fixture traced with env, then acttrace dump its file; returns the dump (malloc'd). */
static char *traced_dump(const char *fixture, const char *arg, const char *const *env, int want_status)
{
    at_session s;
    const char *argv[] = {fixture, arg, NULL};
    ck_assert_int_eq(at_session_run(&s, "stacks", argv, env), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == want_status && s.has_trace && s.t.complete, "%s: %s",
                  fixture, at_session_describe(&s, d, sizeof d));
    at_run_result r;
    const char *args[] = {"dump", s.t.path, NULL};
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(r.exited && r.status == 0, "dump: %s", r.err);
    char *out = strdup(r.out);
    at_run_result_free(&r);
    at_session_free(&s);
    return out;
}

static char *conf_env(const char *name)
{
    char *e = malloc(4200);
    snprintf(e, 4200, "ACTTRACE_CONFIG=%s/tests/data/hooks/%s", AT_SOURCE_DIR, name);
    return e;
}

/* The stack of the first (or last) event line holding `event`, "" if none: "a,b,c" of
 * stack=[a,b,c]. */
static void find_stack(const char *dump, const char *event, char *out, size_t n, bool first)
{
    out[0] = 0;
    for (const char *p = strstr(dump, event); p; p = strstr(p + 1, event)) {
        const char *eol = strchr(p, '\n');
        const char *st = strstr(p, "stack=[");
        if (!st || (eol && st > eol)) continue;
        st += 7;
        const char *e = strchr(st, ']');
        size_t l = (size_t)(e - st) < n - 1 ? (size_t)(e - st) : n - 1;
        memcpy(out, st, l);
        out[l] = 0;
        if (first)
            return;
    }
}

static void last_stack(const char *dump, const char *event, char *out, size_t n)
{
    find_stack(dump, event, out, n, false);
}

static void first_stack(const char *dump, const char *event, char *out, size_t n)
{
    find_stack(dump, event, out, n, true);
}

static unsigned count(const char *s, const char *what)
{
    unsigned n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

/* No frame of the machinery in any stack of the file, with entry-patched, GOT-patched, typed
 * (libffi) and signature-less (stub) hooks nesting four deep. */
START_TEST(test_no_machinery_frames)
{
    static const char *confs[] = {"entry.conf", "got.conf"};
    char *ce = conf_env(confs[_i]);
    const char *env[] = {ce, "ACTTRACE_STACKS=both", NULL};
    char *dump = traced_dump("hk_calls", NULL, env, 3);
    ck_assert_msg(count(dump, "stack=[") >= 8, "%s: too few stacks", confs[_i]);
    for (const char *p = strstr(dump, "stack=["); p; p = strstr(p + 1, "stack=[")) {
        const char *e = strchr(p, ']');
        char st[4096];
        size_t l = (size_t)(e - p) < sizeof st - 1 ? (size_t)(e - p) : sizeof st - 1;
        memcpy(st, p, l);
        st[l] = 0;
        ck_assert_msg(!strstr(st, "libacttrace.so") && !strstr(st, "libffi"), "%s: %s", confs[_i], st);
    }
    if (_i == 0) {
        char st[4096];
        last_stack(dump, "acttrace/FactStart", st, sizeof st);
        ck_assert_msg(!strncmp(st, "hk_calls!fact+", 14) && count(st, "hk_calls!fact+") == 4
                      && strstr(st, "),hk_calls!main+") ,
                      "innermost FactStart: %s", st);
        /* a Stop's stack is taken on the stub's return path, from the caller the function returned
         * to: the outermost fact's Stop, last in the file, goes up through main too (walked from
         * inside the return path, it used to stop at the return trampoline: one frame, and every
         * such walk through libunwind) */
        last_stack(dump, "acttrace/FactStop", st, sizeof st);
        ck_assert_msg(!strncmp(st, "hk_calls!fact+", 14) && count(st, "hk_calls!fact+") == 1
                      && strstr(st, "),hk_calls!main+"),
                      "outermost FactStop: %s", st);
    } else {
        /* through a GOT slot: the Stop's stack is the Start's, call site for call site (walked up
         * through the return trampoline's unwind rule it named the call one byte short) */
        char st0[4096], st1[4096];
        first_stack(dump, "acttrace/AddStart", st0, sizeof st0);
        first_stack(dump, "acttrace/AddStop", st1, sizeof st1);
        ck_assert_msg(strstr(st0, "hk_calls!main+") && !strcmp(st0, st1), "AddStart %s, AddStop %s",
                      st0, st1);
    }
    free(dump);
    free(ce);
}
END_TEST

/* ACTTRACE_STACK_DEPTH counts the program's frames: three fact frames, none of the stub's. */
START_TEST(test_depth_counts_program_frames)
{
    char *ce = conf_env("entry.conf");
    const char *env[] = {ce, "ACTTRACE_STACK_DEPTH=3", NULL};
    char *dump = traced_dump("hk_calls", NULL, env, 3);
    char st[4096];
    last_stack(dump, "acttrace/FactStart", st, sizeof st);
    ck_assert_msg(count(st, "hk_calls!fact+") == 3 && count(st, ",") == 2, "innermost FactStart: %s", st);
    free(dump);
    free(ce);
}
END_TEST

/* The same stacks again and again (a server's calls): after its first, a call site's stack is
 * written by reference (trace.h, stacks by reference). Every call of hk_sites' two hooked functions,
 * from two sites on two threads, reads back with its own site's stack, through the GOT's hook and
 * through entry patching alike. */
START_TEST(test_repeated_sites_keep_their_stacks)
{
    char *ce = conf_env("sites.conf");
    const char *env[] = {ce, NULL};
    char *dump = traced_dump("hk_sites", "3000", env, 0);
    unsigned n[2][2] = {{0}};
    for (char *p = strstr(dump, " acttrace/"); p; p = strstr(p + 1, " acttrace/")) {
        int fn = !strncmp(p, " acttrace/Add ", 14) ? 0 : !strncmp(p, " acttrace/Mul ", 14) ? 1 : -1;
        if (fn < 0)
            continue;
        char *eol = strchr(p, '\n');
        if (eol)
            *eol = 0;
        const char *b = strstr(p, " b=");
        const char *st = strstr(p, "stack=[");
        ck_assert_msg(b && st, "an event without its site or its stack: %s", p);
        int site = atoi(b + 3);
        ck_assert_msg(site == 1 || site == 2, "%s", p);
        const char *want = site == 1 ? "hk_sites!site_a+" : "hk_sites!site_b+";
        const char *other = site == 1 ? "hk_sites!site_b+" : "hk_sites!site_a+";
        const char *leaf = fn == 0 ? "stack=[libhkfx.so!hkfx_add+" : "stack=[hk_sites!own_mul+";
        ck_assert_msg(!strncmp(st, leaf, strlen(leaf)) && strstr(st, want) && !strstr(st, other)
                      && strstr(st, "hk_sites!run+"), "site %d: %s", site, p);
        n[fn][site - 1]++;
        if (eol)
            *eol = '\n';
    }
    /* per thread, calls i % 3 == 2 or i % 17 == 0 from site_b: 1,118 of 3,000 */
    for (int fn = 0; fn < 2; fn++) {
        ck_assert_msg(n[fn][1] == 2 * 1118 && n[fn][0] == 2 * (3000 - 1118), "fn %d: %u at a, %u at b",
                      fn, n[fn][0], n[fn][1]);
    }
    free(dump);
    free(ce);
}
END_TEST

/* A stripped program whose symbols are in the file its .gnu_debuglink names. */
START_TEST(test_debuglink_names_frames)
{
    char *ce = conf_env("entry.conf");
    const char *env[] = {ce, NULL};
    char *dump = traced_dump("hk_calls-dbg", NULL, env, 3);
    char st[4096];
    last_stack(dump, "acttrace/FactStart", st, sizeof st);
    ck_assert_msg(!strncmp(st, "hk_calls-dbg!fact+0x1 ", 22) && strstr(st, "hk_calls-dbg!main+"),
                  "FactStart: %s", st);
    free(dump);
    free(ce);
}
END_TEST

/* The first stack of the run is taken after main left through pthread_exit (its /proc/self/maps
 * then reads empty): still named. */
START_TEST(test_named_after_main_left)
{
    const char *env[] = {"ACTTRACE_STACKS=start", NULL};
    char *dump = traced_dump("stack_late", NULL, env, 0);
    char st[4096];
    last_stack(dump, "acttrace/LateStart", st, sizeof st);
    ck_assert_msg(strstr(st, "stack_late!late_work+") == st && strstr(st, "stack_late!worker+"),
                  "LateStart: %s", st);
    free(dump);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("truth_stacks");
    TCase *tc = tcase_create("stacks");
    tcase_set_timeout(tc, 0);
    tcase_add_loop_test(tc, test_no_machinery_frames, 0, 2);
    tcase_add_test(tc, test_depth_counts_program_frames);
    tcase_add_test(tc, test_repeated_sites_keep_their_stacks);
    tcase_add_test(tc, test_debuglink_names_frames);
    tcase_add_test(tc, test_named_after_main_left);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
