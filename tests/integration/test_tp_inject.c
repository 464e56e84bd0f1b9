/* test_tp_inject: the traceparent header the shim adds to HTTP/1.x requests when asked
 * (ACTTRACE_TRACEPARENT_INJECT=1), and nothing else changed. tests/fixtures/tp_send sends one
 * 200 kB request in an activity Req (a config) with each kind of call (write, send, sendto, writev,
 * sendmsg), on a non-blocking socket whose small buffers make the call send part of it and the
 * program go on from where the call said it stopped, to a server in the same process that reads it
 * all. With the setting: the program is told it sent its own 200,000 bytes; the server reads 70
 * more, the line "traceparent: 00-TRACE-SPAN-01" right after the request line, the request's other
 * bytes unchanged; SPAN is the span the OTLP export makes of Req, TRACE its trace (Req is a root).
 * Without it (the default): the bytes as sent. The config's [trace] traceparent_inject = yes asks
 * the same. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"
#include "at_tracegen.h"
#include "traceids.h"

#define SIZE "200000"

/* inject: 0 not asked, 1 by the environment, 2 by the config's [trace] traceparent_inject */
static void run_mode(const char *mode, int inject)
{
    char *fx = at_fixture_path("tp_send");
    char conf[4200], cenv[4300];
    char *dir = at_tmpdir("tpinj");
    ck_assert(dir);
    snprintf(conf, sizeof conf, "%s/req.conf", dir);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fputs("[activity Req]\nfunction = request\n"
          "signature = int request(const char *mode, const char *req, size_t n, int port)\n",
          f);
    if (inject == 2)
        fputs("[trace]\ntraceparent_inject = yes\n", f);
    fclose(f);
    snprintf(cenv, sizeof cenv, "ACTTRACE_CONFIG=%s", conf);
    const char *env[] = {cenv, inject == 1 ? "ACTTRACE_TRACEPARENT_INJECT=1" : NULL, NULL};
    const char *argv[] = {fx, mode, SIZE, NULL};
    at_session s;
    ck_assert_int_eq(at_session_run(&s, "tpinj", argv, env), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace, "%s", at_session_describe(&s, d, sizeof d));
    /* the program's own count, whatever was added */
    ck_assert_msg(strstr(s.r.out, "sent " SIZE "\n"), "%s: %s", mode, s.r.out);
    ck_assert_msg(strstr(s.r.out, "line GET /big HTTP/1.1\n") && strstr(s.r.out, "rest ok\n"), "%s: %s", mode,
                  s.r.out);
    if (!inject) {
        ck_assert_msg(strstr(s.r.out, "extra 0\n") && strstr(s.r.out, "header Host: x\n"), "%s: %s", mode,
                      s.r.out);
    } else {
        ck_assert_msg(strstr(s.r.out, "extra 70\n"), "%s: %s", mode, s.r.out);
        char trace[33], span[17];
        const char *h = strstr(s.r.out, "header traceparent: 00-");
        ck_assert_msg(h && sscanf(h, "header traceparent: 00-%32[0-9a-f]-%16[0-9a-f]-01\n", trace, span) == 2,
                      "%s: %s", mode, s.r.out);
        /* Req's ids, as the export names them */
        char path[4300];
        snprintf(path, sizeof path, "%s", s.t.path);
        const char *targs[] = {"tree", "--tsv", path, NULL};
        at_run_result r;
        ck_assert_int_eq(at_tool_run(&r, targs), 0);
        const char *l = strstr(r.out, "\tReq\t");
        ck_assert_msg(l, "no Req in the tree: %s", r.out);
        /* ... Req PATH START DUR GUID PERFVIEW */
        char g[40];
        ck_assert(sscanf(l, "\tReq\t%*s\t%*s\t%*s\t%39s", g) == 1);
        at_guid id;
        ck_assert_msg(at_guid_parse(g, &id), "%s", g);
        char want_trace[33], want_span[17];
        at_trace_id_hex(&id, want_trace);
        at_span_id_hex(&id, want_span);
        ck_assert_str_eq(trace, want_trace);
        ck_assert_str_eq(span, want_span);
        at_run_result_free(&r);
    }
    at_session_free(&s);
    at_rmtree(dir);
    free(dir);
    free(fx);
}

START_TEST(test_added_to_each_kind_of_send)
{
    static const char *const modes[] = {"write", "send", "sendto", "writev", "sendmsg"};
    run_mode(modes[_i], 1);
}
END_TEST

START_TEST(test_nothing_added_by_default)
{
    run_mode("write", 0);
    run_mode("sendmsg", 0);
}
END_TEST

START_TEST(test_asked_by_the_config)
{
    run_mode("send", 2);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("tp_inject");
    TCase *tc = tcase_create("send");
    tcase_set_timeout(tc, 0);
    tcase_add_loop_test(tc, test_added_to_each_kind_of_send, 0, 5);
    tcase_add_test(tc, test_nothing_added_by_default);
    tcase_add_test(tc, test_asked_by_the_config);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
