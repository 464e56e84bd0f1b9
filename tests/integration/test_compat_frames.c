/* test_compat_frames: every frame named the same by our tools and by TraceEvent, and rightly. The
 * hard case is a frame whose return address is one past its function's end: stk_noreturn's caller()
 * ends with a call of a noreturn function, so its return address is after_caller's first byte.
 * Our tools (acttrace dump, which names frames from the file's own symbol events) must name it
 * caller; TraceEvent, which looks stored addresses up as they are, must too: the checker of
 * tests/compat runs over the same file when it is built (make check-traceevent builds it). */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "at_testlib.h"
#include "at_tracegen.h"

static char *tool_out(const char *const *args, int want_status)
{
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(r.exited && r.status == want_status, "%s %s: exit %d: %s", args[0], args[1], r.status, r.err);
    char *out = strdup(r.out);
    at_run_result_free(&r);
    return out;
}

/* The stack=[...] of the first line holding event, comma-separated names */
static void first_stack(const char *dump, const char *event, char *out, size_t n)
{
    out[0] = 0;
    const char *p = strstr(dump, event);
    ck_assert_msg(p, "no %s in the dump", event);
    const char *st = strstr(p, "stack=[");
    ck_assert_msg(st && (!strchr(p, '\n') || st < strchr(p, '\n')), "%s has no stack", event);
    st += 7;
    const char *e = strchr(st, ']');
    size_t l = (size_t)(e - st) < n - 1 ? (size_t)(e - st) : n - 1;
    memcpy(out, st, l);
    out[l] = 0;
}

/* frame i of a "a,b,c" stack, without its "+0x.." */
static void frame_fn(const char *stack, int i, char *out, size_t n)
{
    const char *p = stack;
    for (int k = 0; k < i && p; k++)
        if ((p = strchr(p, ',')))
            p++;
    ck_assert_msg(p, "stack too short: %s", stack);
    size_t l = strcspn(p, ",+ ");
    l = l < n - 1 ? l : n - 1;
    memcpy(out, p, l);
    out[l] = 0;
}

/* The TraceEvent checker of tests/compat, if built; NULL otherwise */
static char *checker_path(const char *version)
{
    char *p;
    if (asprintf(&p, "%s/compat/te-%s/bin/Release/net10.0/atcompat", at_build_dir(), version) < 0)
        return NULL;
    if (access(p, X_OK) != 0) {
        free(p);
        return NULL;
    }
    return p;
}

START_TEST(test_noreturn_caller_named_by_both)
{
    char conf[4200];
    snprintf(conf, sizeof conf, "ACTTRACE_CONFIG=%s/tests/data/hooks/compat_noreturn.conf", AT_SOURCE_DIR);
    const char *env[] = {conf, NULL};
    const char *argv[] = {"stk_noreturn", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run(&s, "compat", argv, env), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.t.complete, "%s",
                  at_session_describe(&s, d, sizeof d));
    uint64_t caller = 0, after = 0;
    ck_assert_msg(sscanf(s.r.out, "caller=%" SCNx64 " after_caller=%" SCNx64, &caller, &after) == 2, "%s",
                  s.r.out);
    char *path = at_trace_file_for_pid(s.dir, s.r.pid);

    /* our tools: the hooked function, then the noreturn helper, then caller, then main */
    const char *dargs[] = {"dump", "--no-lines", path, NULL};
    char *dump = tool_out(dargs, 0);
    const char *events[] = {"acttrace/WorkStart", "acttrace/ApiStart"};
    const char *want[] = {"stk_noreturn!nr_work", "stk_noreturn!finish", "stk_noreturn!caller", "stk_noreturn!main"};
    for (int e = 0; e < 2; e++) {
        char st[4096], fn[256];
        first_stack(dump, events[e], st, sizeof st);
        for (int i = 0; i < 4; i++) {
            frame_fn(st, i, fn, sizeof fn);
            ck_assert_msg(strcmp(fn, want[i]) == 0, "%s frame %d is %s, want %s: %s", events[e], i, fn, want[i], st);
        }
    }

    /* the real reader agrees, oldest and newest TraceEvent */
    const char *versions[] = {"3.1.21", "4.0.0"};
    for (int v = 0; v < 2; v++) {
        char *chk = checker_path(versions[v]);
        if (!chk) {
            fprintf(stderr, "test_compat_frames: TraceEvent %s checker not built (make check-traceevent)\n",
                    versions[v]);
            continue;
        }
        const char *cargv[] = {chk, "--acttrace", "", path, NULL};
        char tool[4200];
        snprintf(tool, sizeof tool, "%s/acttrace", at_build_dir());
        cargv[2] = tool;
        at_run_opts o = {.argv = cargv, .no_preload = true};
        at_run_result r;
        ck_assert_int_eq(at_run(&o, &r), 0);
        ck_assert_msg(r.exited && r.status == 0 && strstr(r.out, "PASS "), "TraceEvent %s: %s%s", versions[v],
                      r.out, r.err);
        at_run_result_free(&r);
        free(chk);
    }
    /* the caller frame is the case at hand: one byte before after_caller, which nothing names */
    const char *fargs[] = {"dump", "--frame-names", path, NULL};
    char *frames = tool_out(fargs, 0);
    char line[128];
    snprintf(line, sizeof line, "frame\t0x%" PRIx64 "\tstk_noreturn!caller\n", after - 1);
    ck_assert_msg(after > caller && strstr(frames, line), "want the call site %s in:\n%s", line, frames);
    ck_assert_msg(!strstr(frames, "!after_caller"), "%s", frames);

    free(frames);
    free(dump);
    free(path);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("compat_frames");
    TCase *tc = tcase_create("frames");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_noreturn_caller_named_by_both);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
