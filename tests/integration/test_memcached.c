/* test_memcached: a second real multi-threaded program no one on the project wrote: Debian's
 * memcached (libevent; its main thread accepts and hands each connection to one of its worker
 * threads through a pipe, the hand-off of its own the fd flow follows). Loopback only, a free
 * port, a few bounded requests with a receive timeout on the client side.
 *
 * With ACTTRACE_ACCEPT_ACTIVITY=1 each accepted socket starts a Connection activity on the main
 * thread. What the trace must show: the protocol worked (every set STORED, every get found its
 * value), each Connection crossed to a worker thread exactly once (one Receive on a thread other
 * than main, however many requests the worker took up after its wait points), and memcached's
 * exit status on SIGTERM is the one it has untraced (0).
 *
 * With bench_servers' per-request config (tests/data/hooks/memcached.conf) and one worker thread,
 * each request's read and its response's sendmsg must be events of its connection's activity on
 * the worker thread, with the connection's fd captured: one of each per request, which is what
 * the bench's cost per hooked call is divided by. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "at_testlib.h"
#include "at_tracegen.h"

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

/* Every connection got all its replies right; then memcached's trace (its last image) is loaded
 * into s, and memcached ended well with a complete trace. */
static void replies_and_trace(at_session *s, const int *ok)
{
    for (int c = 0; c < NCONN; c++)
        ck_assert_msg(ok[c] == 2 * NREQ, "connection %d: %d of %d replies right", c, ok[c], 2 * NREQ);
    at_session_load_last_image(s);
    char d[1024];
    ck_assert_msg(s->r.exited && s->r.status == 0, "%s", at_session_describe(s, d, sizeof d));
    ck_assert_msg(s->has_trace && s->t.complete, "%s", at_session_describe(s, d, sizeof d));
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
    replies_and_trace(&s, ok);
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

START_TEST(test_bench_config_requests_in_connections)
{
    ck_assert_msg(at_file_exists("/usr/bin/memcached"), "memcached is missing (.ci/deps installs it)");
    at_session s;
    memset(&s, 0, sizeof s);
    s.dir = at_tmpdir("memcached-conf");
    ck_assert(s.dir);
    int port = at_free_port();
    ck_assert(port > 0);
    char ps[16], conf[4200];
    snprintf(ps, sizeof ps, "%d", port);
    snprintf(conf, sizeof conf, "ACTTRACE_CONFIG=%s/tests/data/hooks/memcached.conf", AT_SOURCE_DIR);
    const char *argv[] = {"/usr/bin/memcached", "-p", ps, "-U", "0", "-l", "127.0.0.1", "-t", "1",
                          geteuid() == 0 ? "-u" : NULL, "root", NULL};
    const char *env[] = {conf, "ACTTRACE_STACKS=none", NULL};
    at_run_opts o = {.argv = argv, .env = env, .cwd = s.dir};
    at_proc p;
    ck_assert_int_eq(at_spawn(&o, &p), 0);
    bool up = at_wait_listening(port);
    int ok[NCONN];
    for (int c = 0; c < NCONN; c++)
        ok[c] = up ? session(port, c) : 0;
    kill(p.pid, SIGTERM);
    ck_assert_int_eq(at_wait(&p, &s.r), 0);
    ck_assert_msg(up, "memcached never listened on %d: %s", port, s.r.err);
    ck_assert_msg(strstr(s.r.err, "4 of 4 functions hooked"), "stderr: %s", s.r.err);
    replies_and_trace(&s, ok);
    const at_trace *t = &s.t;
    uint64_t main_tid = (uint64_t)s.r.pid;
    struct { const char *path, *fd; int reads, sends; } conn[NCONN + 1];
    int nconn = 0;
    for (long c = at_find(t, "acttrace", "ConnectionStart", 0); c >= 0;
         c = at_find(t, "acttrace", "ConnectionStart", (size_t)c + 1)) {
        ck_assert_int_lt(nconn, NCONN + 1); /* the sessions and the listening probe */
        ck_assert_uint_eq(t->ev[c].thread, main_tid);
        conn[nconn].path = t->ev[c].act_path;
        conn[nconn].fd = at_ev_field(&t->ev[c], "Return");
        ck_assert(conn[nconn].fd);
        conn[nconn].reads = conn[nconn].sends = 0;
        nconn++;
    }
    /* fds are reused (the probe's fd is the first session's), so each event is matched by its
     * activity, then its fd checked against that activity's */
    for (size_t i = 0; i < t->n; i++) {
        const at_tev *e = &t->ev[i];
        bool send = strcmp(e->name, "Sendmsg") == 0;
        if (strcmp(e->provider, "acttrace") != 0 || (!send && strcmp(e->name, "Read") != 0))
            continue;
        const char *fd = at_ev_field(e, "fd"), *ret = at_ev_field(e, "Return");
        ck_assert_msg(fd && ret, "%s without fd or Return", e->name);
        if (!e->act_path[0]) { /* the worker's wake-up from its pipe, between connections */
            ck_assert_msg(!send, "a response on fd %s outside any connection", fd);
            continue;
        }
        int k = 0;
        while (k < nconn && strcmp(conn[k].path, e->act_path) != 0)
            k++;
        ck_assert_msg(k < nconn, "%s on fd %s in %s, not a Connection", e->name, fd, e->act_path);
        ck_assert_msg(strcmp(fd, conn[k].fd) == 0, "%s on fd %s in the Connection of fd %s",
                      e->name, fd, conn[k].fd);
        ck_assert_uint_ne(e->thread, main_tid); /* on the worker the fd was handed to */
        if (atol(ret) > 0)
            *(send ? &conn[k].sends : &conn[k].reads) += 1;
    }
    int busy = 0; /* one read and one sendmsg per request; the probe has none */
    for (int k = 0; k < nconn; k++) {
        if (!conn[k].reads && !conn[k].sends)
            continue;
        ck_assert_int_eq(conn[k].reads, 2 * NREQ);
        ck_assert_int_eq(conn[k].sends, 2 * NREQ);
        busy++;
    }
    ck_assert_int_eq(busy, NCONN);
    at_session_free(&s);
}
END_TEST

/* Where a request of an event-driven server waits: in its event loop, with no thread in its
 * activity. memcached (two workers, the per-request config) serves three connections at once, each
 * sending a request every 60 ms and waiting for its answer; between two requests a connection's
 * activity is put back by its worker at epoll_wait and taken up again when the next request
 * arrives. Each such wait is a WaitResume of reason "event loop" on a worker thread in the
 * connection's activity, its Object the connection's fd, and `acttrace breakdown` puts, for each
 * connection, its idle time as the client measured it (from an answer to its next request) in
 * blocked, within 10% (5 ms floor). Then a fast client's 100 requests 0.3 ms apart: its waits are
 * written a millisecond's worth at a time (far fewer events than requests) and the rest at its
 * close, and its blocked time is its idle time as well. */
#define ROUNDS 6
#define GAP_MS 60
#define FAST_REQ 100
#define FAST_GAP_US 300
static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

START_TEST(test_waits_in_event_loop)
{
    ck_assert_msg(at_file_exists("/usr/bin/memcached"), "memcached is missing (.ci/deps installs it)");
    at_session s;
    memset(&s, 0, sizeof s);
    s.dir = at_tmpdir("memcached-loop");
    ck_assert(s.dir);
    int port = at_free_port();
    ck_assert(port > 0);
    char ps[16], conf[4200];
    snprintf(ps, sizeof ps, "%d", port);
    snprintf(conf, sizeof conf, "ACTTRACE_CONFIG=%s/tests/data/hooks/memcached.conf", AT_SOURCE_DIR);
    const char *argv[] = {"/usr/bin/memcached", "-p", ps, "-U", "0", "-l", "127.0.0.1", "-t", "2",
                          geteuid() == 0 ? "-u" : NULL, "root", NULL};
    const char *env[] = {conf, NULL};
    at_run_opts o = {.argv = argv, .env = env, .cwd = s.dir};
    at_proc p;
    ck_assert_int_eq(at_spawn(&o, &p), 0);
    bool up = at_wait_listening(port);
    int fd[NCONN], ok = 0;
    double idle[NCONN] = {0}, answered[NCONN] = {0};
    for (int c = 0; c < NCONN; c++)
        fd[c] = up ? at_connect_port(port) : -1;
    for (int r = 0; up && r < ROUNDS; r++) {
        if (r)
            usleep(GAP_MS * 1000);
        for (int c = 0; c < NCONN; c++) {
            char req[64];
            snprintf(req, sizeof req, "set k%d 0 0 1\r\nx\r\n", c);
            if (r)
                idle[c] += now_ms() - answered[c];
            ok += fd[c] >= 0 && ask(fd[c], req, "STORED\r\n");
            answered[c] = now_ms();
        }
    }
    for (int c = 0; c < NCONN; c++)
        if (fd[c] >= 0)
            close(fd[c]);
    /* a fast client: waits shorter than the quantum, written a few at a time, the rest at close */
    int ffd = up ? at_connect_port(port) : -1;
    double fidle = 0, fans = 0;
    for (int r = 0; r < FAST_REQ && ffd >= 0; r++) {
        if (r) {
            usleep(FAST_GAP_US);
            fidle += now_ms() - fans;
        }
        ok += ask(ffd, "set f 0 0 1\r\nx\r\n", "STORED\r\n");
        fans = now_ms();
    }
    if (ffd >= 0)
        close(ffd);
    usleep(100000); /* the workers see the closes */
    kill(p.pid, SIGTERM);
    ck_assert_int_eq(at_wait(&p, &s.r), 0);
    ck_assert_msg(up, "memcached never listened on %d: %s", port, s.r.err);
    ck_assert_int_eq(ok, NCONN * ROUNDS + FAST_REQ);
    at_session_load_last_image(&s);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace, "%s", at_session_describe(&s, d, sizeof d));
    const at_trace *t = &s.t;
    uint64_t main_tid = (uint64_t)s.r.pid;
    size_t loops = 0;
    for (size_t i = 0; i < t->n; i++) {
        const at_tev *e = &t->ev[i];
        const char *reason = strcmp(e->name, "WaitResume") ? NULL : at_ev_field(e, "Reason");
        if (!reason || strcmp(reason, "\"event loop\""))
            continue;
        loops++;
        ck_assert_uint_ne(e->thread, main_tid);
        long start = -1; /* its Connection, and that connection's fd */
        for (long c = at_find(t, "acttrace", "ConnectionStart", 0); c >= 0 && start < 0;
             c = at_find(t, "acttrace", "ConnectionStart", (size_t)c + 1))
            if (!strcmp(t->ev[c].act_path, e->act_path))
                start = c;
        ck_assert_msg(start >= 0, "an event-loop wait in %s, not a Connection", e->act_path);
        ck_assert_str_eq(at_ev_field(e, "Object"), at_ev_field(&t->ev[start], "Return"));
    }
    /* the slow connections' one each, the fast one's a few (each at least a millisecond's) */
    ck_assert_msg(loops >= (size_t)NCONN * (ROUNDS - 1) && loops < (size_t)NCONN * (ROUNDS - 1) + FAST_REQ / 2,
                  "%zu event-loop waits", loops);
    char **files = at_trace_files(s.dir);
    ck_assert_ptr_nonnull(files[0]);
    const char *bargs[] = {"breakdown", "--format", "tsv", "--name", "Connection", files[0], NULL};
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, bargs), 0);
    if (getenv("AT_PRINT"))
        printf("%s", r.out);
    ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
    /* the three connections, in the order they were accepted: name path wall cpu blocked ... */
    double blocked[NCONN + 1];
    int n = 0, fast = 0;
    for (const char *l = r.out; l && *l && n <= NCONN; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        double w, cpu, b;
        if (sscanf(l, "Connection\t%*s\t%lf\t%lf\t%lf", &w, &cpu, &b) != 3)
            continue;
        if (w > fidle && w < fidle * 3) { /* the fast client's: all of it, the rest at its close */
            double tol = fidle * 0.1 > 5 ? fidle * 0.1 : 5;
            ck_assert_msg(b >= fidle - tol && b <= fidle + tol, "the fast client's connection: blocked %.1f ms, idle %.1f ms:\n%s", b, fidle, r.out);
            fast++;
        } else if (w > GAP_MS) {
            blocked[n++] = b; /* not the listening probe's */
        }
    }
    ck_assert_msg(fast == 1, "%d connections of the fast client:\n%s", fast, r.out);
    ck_assert_msg(n == NCONN, "%d connections of the sessions:\n%s", n, r.out);
    /* the rows come as the connections end: both lists in order */
    for (int i = 0; i < NCONN; i++)
        for (int j = i + 1; j < NCONN; j++) {
            if (blocked[j] < blocked[i]) {
                double x = blocked[i];
                blocked[i] = blocked[j];
                blocked[j] = x;
            }
            if (idle[j] < idle[i]) {
                double x = idle[i];
                idle[i] = idle[j];
                idle[j] = x;
            }
        }
    for (int c = 0; c < NCONN; c++) {
        double tol = idle[c] * 0.1 > 5 ? idle[c] * 0.1 : 5;
        ck_assert_msg(blocked[c] >= idle[c] - tol && blocked[c] <= idle[c] + tol,
                      "connection %d: blocked %.1f ms, idle %.1f ms as the client measured:\n%s", c,
                      blocked[c], idle[c], r.out);
    }
    at_run_result_free(&r);
    at_strv_free(files);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("memcached");
    TCase *tc = tcase_create("real");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_connections_cross_once);
    tcase_add_test(tc, test_bench_config_requests_in_connections);
    tcase_add_test(tc, test_waits_in_event_loop);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
