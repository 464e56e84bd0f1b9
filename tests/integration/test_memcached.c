/* test_memcached: a second real multi-threaded program no one on the project wrote: Debian's
 * memcached (libevent; its main thread accepts and hands each connection to one of its worker
 * threads through a pipe, the hand-off of its own the fd flow follows). Loopback only, a free
 * port, a few bounded requests with a receive timeout on the client side.
 *
 * With ACTTRACE_ACCEPT_ACTIVITY=1 each accepted socket starts a Connection activity on the main
 * thread. What the trace must show: the protocol worked (every set STORED, every get found its
 * value), each Connection crossed to a worker thread exactly once (one Receive on a thread other
 * than main, however many requests the worker took up after its wait points), and memcached's
 * exit status on SIGTERM is the one it has untraced (0). */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "at_testlib.h"

#define NCONN 3
#define NREQ 5


/* Send req, read until the reply ends with end; true when the reply is exactly want. */
static bool ask(int s, const char *req, const char *want)
{
    size_t rl = strlen(req), wl = strlen(want), n = 0;
    if (write(s, req, rl) != (ssize_t)rl)
        return false;
    char buf[256];
    while (n < wl && n < sizeof buf - 1) {
        ssize_t r = read(s, buf + n, sizeof buf - 1 - n);
        if (r <= 0)
            return false;
        n += (size_t)r;
    }
    buf[n] = 0;
    return strcmp(buf, want) == 0;
}

/* One connection: NREQ sets and gets, each answered before the next is sent. */
static int session(int port, int c)
{
    int s = at_connect_port(port);
    if (s < 0)
        return 0;
    int ok = 0;
    for (int i = 0; i < NREQ; i++) {
        char req[96], want[96];
        snprintf(req, sizeof req, "set k%d_%d 0 0 2\r\nv%d\r\n", c, i, i);
        ok += ask(s, req, "STORED\r\n");
        snprintf(req, sizeof req, "get k%d_%d\r\n", c, i);
        snprintf(want, sizeof want, "VALUE k%d_%d 0 2\r\nv%d\r\nEND\r\n", c, i, i);
        ok += ask(s, req, want);
    }
    close(s);
    return ok;
}

START_TEST(test_connections_cross_once)
{
    ck_assert_msg(at_file_exists("/usr/bin/memcached"), "memcached is missing (.ci/deps installs it)");
    at_session s;
    memset(&s, 0, sizeof s);
    s.dir = at_tmpdir("memcached");
    ck_assert(s.dir);
    int port = at_free_port();
    ck_assert(port > 0);
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    const char *argv[] = {"/usr/bin/memcached", "-p", ps, "-U", "0", "-l", "127.0.0.1", "-t", "2",
                          geteuid() == 0 ? "-u" : NULL, "root", NULL};
    const char *env[] = {"ACTTRACE_ACCEPT_ACTIVITY=1", NULL};
    at_run_opts o = {.argv = argv, .env = env, .cwd = s.dir};
    at_proc p;
    ck_assert_int_eq(at_spawn(&o, &p), 0);
    bool up = at_wait_listening(port); /* its probe is a connection too */
    int ok[NCONN];
    for (int c = 0; c < NCONN; c++)
        ok[c] = up ? session(port, c) : 0;
    kill(p.pid, SIGTERM);
    ck_assert_int_eq(at_wait(&p, &s.r), 0);
    ck_assert_msg(up, "memcached never listened on %d: %s", port, s.r.err);
    for (int c = 0; c < NCONN; c++)
        ck_assert_msg(ok[c] == 2 * NREQ, "connection %d: %d of %d replies right", c, ok[c], 2 * NREQ);
    char *path = at_trace_file_last_image(s.dir, s.r.pid);
    if (path) {
        s.has_trace = true;
        s.load_rc = at_trace_load(path, &s.t);
        free(path);
    }
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0, "%s", at_session_describe(&s, d, sizeof d));
    ck_assert_msg(s.has_trace && s.t.complete, "%s", at_session_describe(&s, d, sizeof d));
    const at_trace *t = &s.t;
    uint64_t main_tid = (uint64_t)s.r.pid;
    int conns = 0, crossed = 0;
    for (long c = at_find(t, NULL, "ConnectionStart", 0); c >= 0;
         c = at_find(t, NULL, "ConnectionStart", (size_t)c + 1)) {
        ck_assert_uint_eq(t->ev[c].thread, main_tid); /* accepted on the main thread */
        conns++;
        int recv = 0;
        for (long r = at_find(t, "acttrace-flow", "TransferReceive", 0); r >= 0;
             r = at_find(t, "acttrace-flow", "TransferReceive", (size_t)r + 1))
            if (strcmp(t->ev[r].act_path, t->ev[c].act_path) == 0) {
                ck_assert_uint_ne(t->ev[r].thread, main_tid);
                recv++;
            }
        ck_assert_msg(recv <= 1, "Connection %s received %d times", t->ev[c].act_path, recv);
        crossed += recv;
    }
    ck_assert_int_eq(conns, NCONN + 1);
    ck_assert_int_ge(crossed, NCONN); /* the probe may close before a worker reads it */
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("memcached");
    TCase *tc = tcase_create("real");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_connections_cross_once);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
