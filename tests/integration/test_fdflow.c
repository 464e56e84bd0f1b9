/* test_fdflow: the fd-keyed hand-off on a server with a home-grown queue and eventfd wake-ups
 * (tests/fixtures/queue_server.c), read back from the trace: workers started before any request
 * pick up each accepted socket and their events land in the activity the socket was accepted in,
 * with a Receive transfer on the worker and a Send on the accepting thread; with
 * ACTTRACE_ACCEPT_ACTIVITY=1 each connection is its own activity and each request's events land in
 * exactly that connection's; ambiguous use of one fd by two activities is reported, not guessed. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"

#define NREQ 12
#define NWORKERS 3

static void run_server_w(at_session *s, const char *const *env, int workers)
{
    char w[8], r[8];
    snprintf(w, sizeof w, "%d", workers);
    snprintf(r, sizeof r, "%d", NREQ);
    const char *argv[] = {"queue_server", w, r, NULL};
    ck_assert_int_eq(at_session_run(s, "queue", argv, env), 0);
    char d[1024];
    ck_assert_msg(s->r.exited && s->r.status == 0 && s->has_trace && s->t.complete, "%s",
                  at_session_describe(s, d, sizeof d));
}

static void run_server(at_session *s, const char *const *env)
{
    run_server_w(s, env, NWORKERS);
}

static bool has_transfer(const at_trace *t, const char *name, uint64_t thread, const at_guid *act)
{
    for (long i = at_find(t, "acttrace-flow", NULL, 0); i >= 0;
         i = at_find(t, "acttrace-flow", NULL, (size_t)i + 1)) {
        const at_tev *e = &t->ev[i];
        bool kind = !strcmp(name, "Receive") ? e->opcode == 240 : e->opcode == 9;
        if (kind && e->thread == thread && at_guid_eq(&e->activity, act))
            return true;
    }
    return false;
}

/* Every request lands in Serve, on a worker, with its transfers; high: the connections' fds were
 * all above 100 (the shim keeps the lowest fds' tags apart from the rest). */
static void check_shared_activity(const char *const *env, bool high)
{
    at_session s;
    run_server(&s, env);
    const at_trace *t = &s.t;
    if (high)
        for (long i = at_find(t, NULL, "Accepted", 0); i >= 0;
             i = at_find(t, NULL, "Accepted", (size_t)i + 1)) {
            uint64_t fd = 0;
            ck_assert(at_field_u64(&t->ev[i], "Value", &fd));
            ck_assert_uint_ge(fd, 100);
        }
    long serve = at_find(t, NULL, "ServeStart", 0);
    ck_assert(serve >= 0);
    uint64_t main_tid = t->ev[serve].thread;
    const char *sp = t->ev[serve].act_path;
    ck_assert_uint_eq(at_count(t, NULL, "Handled"), NREQ);
    ck_assert_uint_eq(at_count(t, "acttrace-shim", "FdTagged"), NREQ); /* the client side is untagged */
    /* each tag says what made it and names the fd the program marked as accepted */
    for (long i = at_find(t, "acttrace-shim", "FdTagged", 0); i >= 0;
         i = at_find(t, "acttrace-shim", "FdTagged", (size_t)i + 1)) {
        const char *src = at_ev_field(&t->ev[i], "Source"), *fd = at_ev_field(&t->ev[i], "Fd");
        ck_assert_msg(src && strcmp(src, "\"accept\"") == 0, "Source %s", src ? src : "(none)");
        ck_assert_msg(fd && at_find_field(t, "Accepted", "Value", fd, (size_t)i) >= 0,
                      "no Accepted mark of fd %s after its tag", fd ? fd : "(none)");
    }
    for (long i = at_find(t, NULL, "Handled", 0); i >= 0; i = at_find(t, NULL, "Handled", (size_t)i + 1)) {
        const at_tev *e = &t->ev[i];
        ck_assert_msg(e->thread != main_tid, "Handled on the main thread");
        ck_assert_msg(strcmp(e->act_path, sp) == 0, "Handled in '%s', accepted in Serve '%s'",
                      e->act_path, sp);
        ck_assert_msg(has_transfer(t, "Receive", e->thread, &t->ev[serve].activity),
                      "no Receive transfer on worker %llu", (unsigned long long)e->thread);
    }
    ck_assert(has_transfer(t, "Send", main_tid, &t->ev[serve].activity));
    at_session_free(&s);
}

START_TEST(test_queue_server_shared_activity)
{
    check_shared_activity(NULL, false);
}
END_TEST

START_TEST(test_queue_server_high_fds)
{
    const char *env[] = {"QS_LOW_FDS_TAKEN=1", NULL};
    check_shared_activity(env, true);
}
END_TEST

START_TEST(test_queue_server_connection_activity)
{
    at_session s;
    const char *env[] = {"ACTTRACE_ACCEPT_ACTIVITY=1", NULL};
    run_server(&s, env);
    const at_trace *t = &s.t;
    long serve = at_find(t, NULL, "ServeStart", 0);
    ck_assert(serve >= 0);
    uint64_t main_tid = t->ev[serve].thread;
    ck_assert_uint_eq(at_count(t, NULL, "ConnectionStart"), NREQ);
    ck_assert_uint_eq(at_count(t, NULL, "ConnectionStop"), NREQ);
    /* Accepted marks: one per connection, each in its own Connection, a child of Serve */
    char seen[NREQ][96];
    int nseen = 0;
    for (long i = at_find(t, NULL, "Accepted", 0); i >= 0; i = at_find(t, NULL, "Accepted", (size_t)i + 1)) {
        const at_tev *e = &t->ev[i];
        char up[96];
        at_path_parent(e->act_path, up, sizeof up);
        ck_assert_msg(!strcmp(up, t->ev[serve].act_path), "Accepted in %s, not a child of Serve %s",
                      e->act_path, t->ev[serve].act_path);
        long cs = -1;
        for (long j = at_find(t, NULL, "ConnectionStart", 0); j >= 0;
             j = at_find(t, NULL, "ConnectionStart", (size_t)j + 1))
            if (!strcmp(t->ev[j].act_path, e->act_path))
                cs = j;
        ck_assert_msg(cs >= 0, "Accepted in %s, which no ConnectionStart began", e->act_path);
        for (int k = 0; k < nseen; k++)
            ck_assert_msg(strcmp(seen[k], e->act_path), "two accepts in one activity %s", e->act_path);
        snprintf(seen[nseen++], 96, "%s", e->act_path);
    }
    ck_assert_int_eq(nseen, NREQ);
    /* every request handled on a worker, inside exactly one of those connections, and each
     * connection handled once */
    int used[NREQ] = {0};
    for (long i = at_find(t, NULL, "Handled", 0); i >= 0; i = at_find(t, NULL, "Handled", (size_t)i + 1)) {
        const at_tev *e = &t->ev[i];
        ck_assert(e->thread != main_tid);
        int k;
        for (k = 0; k < nseen; k++)
            if (!strcmp(seen[k], e->act_path))
                break;
        if (k == nseen)
            at_trace_dump(t, stderr);
        ck_assert_msg(k < nseen, "Handled in '%s', no connection's activity", e->act_path);
        used[k]++;
        ck_assert(has_transfer(t, "Receive", e->thread, &e->activity));
    }
    for (int k = 0; k < nseen; k++)
        ck_assert_msg(used[k] == 1, "connection %s handled %d times", seen[k], used[k]);
    /* between requests a worker carries nothing: its wake-up poll is a wait point */
    at_session_free(&s);
}
END_TEST

/* Thread per connection: the handler thread is created while the Connection is current on the
 * accepting thread, so it begins in it and its work lands there with no hand-off needed. */
START_TEST(test_thread_per_connection)
{
    at_session s;
    const char *env[] = {"ACTTRACE_ACCEPT_ACTIVITY=1", NULL};
    run_server_w(&s, env, 0);
    const at_trace *t = &s.t;
    ck_assert_uint_eq(at_count(t, NULL, "Handled"), NREQ);
    char seen[NREQ][96];
    int nseen = 0;
    for (long i = at_find(t, NULL, "Handled", 0); i >= 0; i = at_find(t, NULL, "Handled", (size_t)i + 1)) {
        const at_tev *e = &t->ev[i];
        long c = -1;
        for (long j = at_find(t, NULL, "ConnectionStart", 0); j >= 0;
             j = at_find(t, NULL, "ConnectionStart", (size_t)j + 1))
            if (at_guid_eq(&t->ev[j].activity, &e->activity))
                c = j;
        ck_assert_msg(c >= 0, "Handled in '%s', not a connection", e->act_path);
        long b = -1; /* the latest begin of that tid before the mark: tids are reused */
        for (long j = at_find(t, "acttrace-shim", "ThreadBegin", 0); j >= 0 && j < i;
             j = at_find(t, "acttrace-shim", "ThreadBegin", (size_t)j + 1))
            if (t->ev[j].thread == e->thread)
                b = j;
        ck_assert(b >= 0);
        ck_assert_str_eq(t->ev[b].act_path, e->act_path);
        for (int k = 0; k < nseen; k++)
            ck_assert_msg(strcmp(seen[k], e->act_path), "two requests in %s", e->act_path);
        snprintf(seen[nseen++], 96, "%s", e->act_path);
    }
    at_session_free(&s);
}
END_TEST

START_TEST(test_fdflow_off)
{
    at_session s;
    const char *env[] = {"ACTTRACE_FDFLOW=0", NULL};
    run_server(&s, env);
    ck_assert_uint_eq(at_count(&s.t, "acttrace-shim", "FdTagged"), 0);
    for (long i = at_find(&s.t, NULL, "Handled", 0); i >= 0; i = at_find(&s.t, NULL, "Handled", (size_t)i + 1))
        ck_assert_str_eq(s.t.ev[i].act_path, "");
    at_session_free(&s);
}
END_TEST

/* A worker that takes the same connection up again after each wait point adopts it each time
 * (its requests run in the connection's activity) but records the hop once: one Receive. */
START_TEST(test_readoption_one_receive)
{
    at_session s;
    const char *argv[] = {"fd_readopt", NULL};
    ck_assert_int_eq(at_session_run(&s, "readopt", argv, NULL), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.load_rc == 0, "%s",
                  at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(s.r.out, "rounds 3\n");
    const at_trace *t = &s.t;
    long sv = at_find(t, NULL, "ServeStart", 0);
    ck_assert(sv >= 0);
    const char *sp = t->ev[sv].act_path;
    uint64_t worker = 0;
    for (int n = 1; n <= 3; n++) {
        char v[16];
        snprintf(v, sizeof v, "%d", n);
        long g = at_find_field(t, "Got", "Value", v, 0);
        ck_assert_msg(g >= 0, "no Got %d", n);
        ck_assert_str_eq(t->ev[g].act_path, sp);
        ck_assert_uint_ne(t->ev[g].thread, t->ev[sv].thread);
        worker = t->ev[g].thread;
    }
    int recv = 0;
    for (long i = at_find(t, "acttrace-flow", "TransferReceive", 0); i >= 0;
         i = at_find(t, "acttrace-flow", "TransferReceive", (size_t)i + 1))
        recv += t->ev[i].thread == worker && strcmp(t->ev[i].act_path, sp) == 0;
    ck_assert_int_eq(recv, 1);
    at_session_free(&s);
}
END_TEST

START_TEST(test_ambiguous_reported)
{
    at_session s;
    const char *argv[] = {"fd_ambiguous", NULL};
    ck_assert_int_eq(at_session_run(&s, "ambig", argv, NULL), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.t.complete, "%s",
                  at_session_describe(&s, d, sizeof d));
    const at_trace *t = &s.t;
    int fd = atoi(s.r.out + 3);
    long owner = at_find(t, NULL, "OwnerStart", 0), other = at_find(t, NULL, "OtherStart", 0);
    ck_assert(owner >= 0 && other >= 0);
    long amb = at_find(t, "acttrace-shim", "FdAmbiguous", 0);
    if (amb < 0)
        at_trace_dump(t, stderr);
    ck_assert_msg(amb >= 0, "no FdAmbiguous event");
    uint64_t f;
    ck_assert(at_field_u64(&t->ev[amb], "Fd", &f));
    ck_assert_uint_eq(f, (uint64_t)fd);
    ck_assert_uint_eq(t->ev[amb].thread, t->ev[other].thread);
    /* not guessed: the writer stays in its own activity */
    long aw = at_find(t, NULL, "AfterWrite", 0);
    ck_assert(aw >= 0);
    ck_assert_str_eq(t->ev[aw].act_path, t->ev[other].act_path);
    /* a thread in no activity adopts the owner */
    long ad = at_find(t, NULL, "Adopted", 0);
    ck_assert(ad >= 0);
    ck_assert_str_eq(t->ev[ad].act_path, t->ev[owner].act_path);
    ck_assert_uint_eq(at_count(t, "acttrace-shim", "FdAmbiguous"), 1);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("fdflow");
    TCase *tc = tcase_create("handoff");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_queue_server_shared_activity);
    tcase_add_test(tc, test_queue_server_high_fds);
    tcase_add_test(tc, test_queue_server_connection_activity);
    tcase_add_test(tc, test_thread_per_connection);
    tcase_add_test(tc, test_fdflow_off);
    tcase_add_test(tc, test_ambiguous_reported);
    tcase_add_test(tc, test_readoption_one_receive);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
