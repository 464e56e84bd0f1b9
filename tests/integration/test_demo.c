/* test_demo: what `make demo` shows, read back from the trace: tests/fixtures/demo_server (a program
 * that knows nothing of tracing) under the shim with tests/demo/demo.conf. Each request's activity
 * tree crosses from the accepting main thread into a pool worker through the server's own queue, with
 * the transfers recorded; the hooked functions nest; every Start has its Stop with the same id. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"

#define NREQ 64

START_TEST(requests_follow_their_connection_into_the_workers)
{
    at_session s;
    char n[16];
    snprintf(n, sizeof n, "%d", NREQ);
    const char *argv[] = {"demo_server", n, "4", "8", NULL};
    const char *env[] = {"ACTTRACE_CONFIG=" AT_SOURCE_DIR "/tests/demo/demo.conf", NULL};
    ck_assert_int_eq(at_session_run(&s, "demo", argv, env), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.load_rc == 0, "%s",
                  at_session_describe(&s, d, sizeof d));
    const at_trace *t = &s.t;
    long serve = at_find(t, NULL, "ServeStart", 0);
    ck_assert(serve >= 0);
    uint64_t main_tid = t->ev[serve].thread;
    const char *sp = t->ev[serve].act_path;
    ck_assert_uint_eq(at_count(t, NULL, "ConnectionStart"), NREQ);
    ck_assert_uint_eq(at_count(t, NULL, "RequestStart"), NREQ);
    ck_assert_uint_eq(at_count(t, NULL, "RequestStop"), NREQ);
    int seen = 0;
    for (long r = at_find(t, NULL, "RequestStart", 0); r >= 0;
         r = at_find(t, NULL, "RequestStart", (size_t)r + 1)) {
        const at_tev *e = &t->ev[r];
        /* a stack on every Start by default (the program's frames, then the thread's start) */
        ck_assert_uint_ge(e->nframes, 3);
        /* a child of a Connection, which is a child of Serve, started on the main thread */
        char conn[96];
        at_path_parent(e->act_path, conn, sizeof conn);
        ck_assert_str_eq(e->rel_path, conn);
        long c = -1;
        for (long i = at_find(t, NULL, "ConnectionStart", 0); i >= 0;
             i = at_find(t, NULL, "ConnectionStart", (size_t)i + 1))
            if (strcmp(t->ev[i].act_path, conn) == 0)
                c = i;
        ck_assert_msg(c >= 0 && c < r, "Request %s has no earlier Connection", e->act_path);
        ck_assert_uint_eq(t->ev[c].thread, main_tid);
        char up[96];
        at_path_parent(conn, up, sizeof up);
        ck_assert_str_eq(up, sp);
        /* handled on a worker, which received the connection by a transfer first */
        ck_assert_uint_ne(e->thread, main_tid);
        bool received = false;
        for (long i = at_find(t, "acttrace-flow", "TransferReceive", 0); i >= 0 && i < r;
             i = at_find(t, "acttrace-flow", "TransferReceive", (size_t)i + 1))
            received |= t->ev[i].thread == e->thread && strcmp(t->ev[i].act_path, conn) == 0;
        ck_assert_msg(received, "no TransferReceive of %s on thread %llu", conn,
                      (unsigned long long)e->thread);
        ck_assert_str_eq(e->provider, "DemoServer");
        /* its three steps, in order, below it on the same thread */
        static const char *steps[] = {"ParseStart", "LookupStart", "RenderStart"};
        long from = r;
        for (int k = 0; k < 3; k++) {
            long i = from;
            do
                i = at_find(t, NULL, steps[k], (size_t)i + 1);
            while (i >= 0 && !at_path_is_below(t->ev[i].act_path, e->act_path));
            ck_assert_msg(i >= 0, "no %s under %s", steps[k], e->act_path);
            ck_assert_uint_eq(t->ev[i].thread, e->thread);
            from = i;
        }
        seen++;
    }
    ck_assert_int_eq(seen, NREQ);
    /* the cache misses (every seventh key) are events inside their Lookup */
    size_t misses = 0;
    for (long i = at_find(t, NULL, "CacheMiss", 0); i >= 0; i = at_find(t, NULL, "CacheMiss", (size_t)i + 1)) {
        uint64_t key;
        ck_assert(at_field_u64(&t->ev[i], "key", &key));
        ck_assert_uint_eq(key % 7, 0);
        char up[96];
        at_path_parent(t->ev[i].act_path, up, sizeof up);
        long lk = at_find_field(t, "LookupStart", "key", at_ev_field(&t->ev[i], "key"), 0);
        ck_assert(lk >= 0);
        ck_assert_str_eq(t->ev[i].act_path, t->ev[lk].act_path);
        misses++;
    }
    ck_assert_uint_eq(misses, (NREQ + 6) / 7);
    /* every Stop names the activity and the <Name>Id of a Start */
    for (size_t i = 0; i < t->n; i++) {
        const at_tev *e = &t->ev[i];
        if (e->opcode != 2)
            continue;
        char start[64];
        snprintf(start, sizeof start, "%.*sStart", (int)(strlen(e->name) - 4), e->name);
        char idf[64];
        snprintf(idf, sizeof idf, "%.*sId", (int)(strlen(e->name) - 4), e->name);
        long m = at_find_field(t, start, idf, at_ev_field(e, idf), 0);
        ck_assert_msg(m >= 0 && m < (long)i, "%s %s=%s has no Start", e->name, idf, at_ev_field(e, idf));
        ck_assert_str_eq(t->ev[m].act_path, e->act_path);
        ck_assert_uint_eq(e->nframes, 0); /* stacks on Starts only, by default */
    }
    at_session_free(&s);
}
END_TEST

/* ACTTRACE_STACKS=both puts stacks on Stops too; none takes none (activities without a stacks key
 * in the config). */
START_TEST(stack_settings)
{
    static const char *modes[] = {"ACTTRACE_STACKS=both", "ACTTRACE_STACKS=none"};
    for (int m = 0; m < 2; m++) {
        at_session s;
        const char *argv[] = {"demo_server", "8", "2", "2", NULL};
        const char *env[] = {modes[m], "ACTTRACE_CONFIG=" AT_SOURCE_DIR "/tests/demo/demo.conf", NULL};
        ck_assert_int_eq(at_session_run(&s, "demostk", argv, env), 0);
        char d[1024];
        ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.load_rc == 0, "%s",
                      at_session_describe(&s, d, sizeof d));
        size_t with = 0, without = 0;
        for (size_t i = 0; i < s.t.n; i++)
            if (strncmp(s.t.ev[i].name, "Request", 7) == 0 && s.t.ev[i].opcode != 0)
                *(s.t.ev[i].nframes ? &with : &without) += 1;
        ck_assert_uint_eq(with + without, 2 * 8);
        if (m == 0)
            ck_assert_uint_eq(without, 0);
        else
            ck_assert_uint_eq(with, 0);
        at_session_free(&s);
    }
}
END_TEST

/* `make demo` itself, the README's first command: every step of tests/demo/run.sh succeeds (the
 * config's signatures agree with the DWARF prototypes of this machine's libc, glibc's
 * __SOCKADDR_ARG union included), and the trace it shows is complete and verified. */
START_TEST(make_demo_runs_end_to_end)
{
    /* acttrace check and run preload the shim themselves, without the sanitizer runtime an ASan
     * build of it needs in front: the script is the normal build's */
    if (getenv("ACTTRACE_ASAN"))
        return;
    const char *argv[] = {"bash", AT_SOURCE_DIR "/tests/demo/run.sh", at_build_dir(), NULL};
    at_run_opts o = {.argv = argv, .no_preload = true, .deadline_s = 600};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    char d[64];
    ck_assert_msg(r.exited && r.status == 0, "make demo: %s\n%s\n%s", at_run_describe(&r, d, sizeof d),
                  r.out, r.err);
    ck_assert_msg(strstr(r.out, "8 of 8 functions can be hooked"), "%s", r.out);
    ck_assert_msg(!strstr(r.out, "signature error") && !strstr(r.out, "error:"), "%s", r.out);
    ck_assert_msg(strstr(r.err, "trace written") || strstr(r.out, "trace written"), "%s", r.err);
    ck_assert_msg(strstr(r.out, "demo.nettrace: OK"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "Connection //1/1/"), "%s", r.out);
    at_run_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("demo");
    TCase *c = tcase_create("demo_server");
    tcase_set_timeout(c, 0);
    tcase_add_test(c, requests_follow_their_connection_into_the_workers);
    tcase_add_test(c, stack_settings);
    tcase_add_test(c, make_demo_runs_end_to_end);
    suite_add_tcase(s, c);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
