/* test_httpserver: a real multi-threaded program no one on the project wrote: python3's
 * http.server (ThreadingHTTPServer: the main thread accepts, each connection gets a new thread).
 * Loopback only, a free port, a few bounded requests with a receive timeout on the client side.
 *
 * With no configuration nothing is current at accept and the server records nothing of its own (its
 * threads' begin and end alone make no file): it serves as untraced and leaves no file. With
 * ACTTRACE_ACCEPT_ACTIVITY=1 each accepted socket starts a Connection activity: the handler thread
 * for it, created by the main thread, begins inside exactly that Connection, and the Connection is
 * stopped when the handler closes the socket, on the handler's thread. Clients that wait before
 * sending their request show as blocked time in the handlers' Connections. */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "at_testlib.h"
#include "at_tracegen.h"

#define NREQ 4


/* ms a client waits between its connect and its request (test_blocked_time_in_handlers) */
static int client_delay_ms;

/* One GET; returns the HTTP status code or -1. */
static int get(int port)
{
    int s = at_connect_port(port);
    if (s < 0)
        return -1;
    if (client_delay_ms)
        nanosleep(&(struct timespec){0, client_delay_ms * 1000L * 1000L}, NULL);
    const char req[] = "GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(s, req, sizeof req - 1) != (ssize_t)sizeof req - 1) {
        close(s);
        return -1;
    }
    char buf[4096];
    size_t n = 0;
    ssize_t r;
    while ((r = read(s, buf + n, sizeof buf - 1 - n)) > 0 && n < sizeof buf - 1)
        n += (size_t)r;
    while (r > 0)
        r = read(s, buf, sizeof buf); /* drain the listing */
    close(s);
    buf[n] = 0;
    int code = -1;
    if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1)
        return -1;
    return code;
}

/* Threads of process pid but the shim's own (its /proc/<pid>/task entries, by name). */
static int task_count(pid_t pid)
{
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char comm[64] = "";
        snprintf(path, sizeof path, "/proc/%d/task/%.16s/comm", (int)pid, e->d_name);
        FILE *f = fopen(path, "r");
        if (f) {
            if (!fgets(comm, sizeof comm, f))
                comm[0] = 0;
            fclose(f);
        }
        n += strncmp(comm, "acttrace-", 9) != 0;
    }
    closedir(d);
    return n;
}

static void run_server(at_session *s, const char *const *extra_env, bool want_trace)
{
    memset(s, 0, sizeof *s);
    s->dir = at_tmpdir("http");
    ck_assert(s->dir);
    int port = at_free_port();
    ck_assert(port > 0);
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    /* Debian's python3 (.ci/deps) when present: a PATH "python3" may be a wrapper script that execs
     * the interpreter through several images (followed below all the same) */
    const char *py = at_file_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    const char *argv[] = {py, "-m", "http.server", "--bind", "127.0.0.1", ps, NULL};
    const char *env[8] = {"PYTHONUNBUFFERED=1", NULL};
    for (int i = 0; extra_env && extra_env[i]; i++)
        env[1 + i] = extra_env[i];
    at_run_opts o = {.argv = argv, .env = env, .cwd = s->dir};
    at_proc p;
    ck_assert_int_eq(at_spawn(&o, &p), 0);
    bool up = at_wait_listening(port); /* its probe is a connection too: NREQ + 1 in all */
    int codes[NREQ];
    for (int i = 0; i < NREQ; i++)
        codes[i] = up ? get(port) : -1;
    /* A handler closes its socket just after the client sees the end of the response (shutdown
     * comes first): wait for the handler threads to end, so an interrupt cannot cut a close off
     * (bounded; not a timing assertion) */
    for (int i = 0; i < 400 && task_count(p.pid) > 1; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    kill(p.pid, SIGINT); /* http.server's own KeyboardInterrupt handling ends it with exit 0 */
    ck_assert_int_eq(at_wait(&p, &s->r), 0);
    ck_assert_msg(up, "python3 http.server never listened on %d: %s", port, s->r.err);
    for (int i = 0; i < NREQ; i++)
        ck_assert_msg(codes[i] == 200, "request %d: status %d", i, codes[i]);
    at_session_load_last_image(s);
    char d[1024];
    ck_assert_msg(s->r.exited && s->r.status == 0, "%s", at_session_describe(s, d, sizeof d));
    ck_assert_msg(s->has_trace == want_trace && (!want_trace || s->t.complete), "%s",
                  at_session_describe(s, d, sizeof d));
}

START_TEST(test_no_config_no_file)
{
    at_session s;
    run_server(&s, NULL, false);
    char **files = at_trace_files(s.dir);
    ck_assert_uint_eq(at_strv_len(files), 0);
    at_strv_free(files);
    at_session_free(&s);
}
END_TEST

START_TEST(test_connection_activity_per_handler)
{
    at_session s;
    const char *env[] = {"ACTTRACE_ACCEPT_ACTIVITY=1", NULL};
    run_server(&s, env, true);
    const at_trace *t = &s.t;
    size_t nconn = at_count(t, NULL, "ConnectionStart");
    ck_assert_msg(nconn >= NREQ, "%zu connections for %d requests", nconn, NREQ);
    ck_assert_uint_eq(at_count(t, "acttrace-shim", "FdTagged"), nconn);
    int unfinished = 0;
    for (long c = at_find(t, NULL, "ConnectionStart", 0); c >= 0;
         c = at_find(t, NULL, "ConnectionStart", (size_t)c + 1)) {
        const at_tev *cs = &t->ev[c];
        ck_assert_uint_eq(cs->thread, (uint64_t)s.r.pid); /* accepted on the main thread */
        /* the handler thread began inside this connection's activity */
        long b = at_find(t, "acttrace-shim", "ThreadBegin", 0);
        for (; b >= 0; b = at_find(t, "acttrace-shim", "ThreadBegin", (size_t)b + 1))
            if (at_guid_eq(&t->ev[b].activity, &cs->activity))
                break;
        if (b < 0)
            at_trace_dump(t, stderr);
        ck_assert_msg(b >= 0, "no handler thread began in Connection %s", cs->act_path);
        uint64_t handler = t->ev[b].thread, parent = 0;
        ck_assert_uint_ne(handler, (uint64_t)s.r.pid);
        ck_assert(at_field_u64(&t->ev[b], "ParentThread", &parent));
        ck_assert_msg(parent == (uint64_t)s.r.pid, "a handler thread created by %llu, not main",
                      (unsigned long long)parent);
        /* and closed it: the Connection stops on the handler thread */
        long stop = at_find(t, NULL, "ConnectionStop", 0);
        for (; stop >= 0; stop = at_find(t, NULL, "ConnectionStop", (size_t)stop + 1))
            if (at_guid_eq(&t->ev[stop].activity, &cs->activity))
                break;
        if (stop < 0) {
            /* The client sees EOF at the handler's shutdown(SHUT_WR), before its close(): the last
             * handler can still be between the two when SIGINT ends the process. Python then ends
             * that daemon thread with pthread_exit when it next wants the GIL (ExitKind 1), or
             * not at all. Only a handler that did not return may leave its Connection open. */
            bool ended = false;
            for (long e = at_find(t, "acttrace-shim", "ThreadEnd", (size_t)b + 1); e >= 0;
                 e = at_find(t, "acttrace-shim", "ThreadEnd", (size_t)e + 1)) {
                uint64_t kind = 1;
                ended |= t->ev[e].thread == handler && at_field_u64(&t->ev[e], "ExitKind", &kind) &&
                         kind == 0;
            }
            ck_assert_msg(!ended, "Connection %s never stopped though its handler ended", cs->act_path);
            unfinished++;
            continue;
        }
        ck_assert_msg(t->ev[stop].thread == handler, "Connection %s stopped on %llu, handler %llu",
                      cs->act_path, (unsigned long long)t->ev[stop].thread,
                      (unsigned long long)handler);
        /* one connection per handler: no other thread began in it */
        for (long o = at_find(t, "acttrace-shim", "ThreadBegin", (size_t)b + 1); o >= 0;
             o = at_find(t, "acttrace-shim", "ThreadBegin", (size_t)o + 1))
            ck_assert(!at_guid_eq(&t->ev[o].activity, &cs->activity));
    }
    ck_assert_msg(unfinished <= 1, "%d connections left open", unfinished);
    at_session_free(&s);
}
END_TEST

/* The same through a config file (issue 5): config/examples/http-server.conf hooks accept4 and
 * close by name (GOT), pairs them by fd and captures the fd. Each connection is an activity from
 * accept4's return to the close of that fd, and follows the connection into its handler thread. */
START_TEST(test_config_accept_close_pair)
{
    at_session s;
    char env0[4200];
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s/config/examples/http-server.conf", AT_SOURCE_DIR);
    const char *env[] = {env0, NULL};
    run_server(&s, env, true);
    const at_trace *t = &s.t;
    ck_assert_msg(strstr(s.r.err, "acttrace: 2 of 2 functions hooked (2 GOT, 0 entry)"), "%s",
                  s.r.err);
    size_t nconn = at_count(t, "PyHttp", "ConnectionStart");
    ck_assert_msg(nconn >= NREQ, "%zu connections for %d requests", nconn, NREQ);
    size_t handled = 0;
    for (long c = at_find(t, "PyHttp", "ConnectionStart", 0); c >= 0;
         c = at_find(t, "PyHttp", "ConnectionStart", (size_t)c + 1)) {
        const at_tev *cs = &t->ev[c];
        ck_assert_uint_eq(cs->thread, (uint64_t)s.r.pid);
        const char *fd = at_ev_field(cs, "Return");
        ck_assert_msg(fd && atoi(fd) >= 0, "Return=%s", fd ? fd : "(none)");
        long b = at_find(t, "acttrace-shim", "ThreadBegin", 0);
        for (; b >= 0; b = at_find(t, "acttrace-shim", "ThreadBegin", (size_t)b + 1))
            if (at_guid_eq(&t->ev[b].activity, &cs->activity))
                break;
        if (b < 0)
            continue; /* the readiness probe may close before a handler reads it */
        handled++;
        long stop = at_find(t, "PyHttp", "ConnectionStop", 0);
        for (; stop >= 0; stop = at_find(t, "PyHttp", "ConnectionStop", (size_t)stop + 1))
            if (at_guid_eq(&t->ev[stop].activity, &cs->activity))
                break;
        ck_assert_msg(stop >= 0, "Connection %s never stopped", cs->act_path);
        ck_assert_msg(t->ev[stop].thread == t->ev[b].thread, "Connection %s stopped on %llu, "
                      "handler %llu", cs->act_path, (unsigned long long)t->ev[stop].thread,
                      (unsigned long long)t->ev[b].thread);
    }
    ck_assert_msg(handled >= NREQ, "%zu connections reached a handler thread", handled);
    /* close() of other fds (files, the listening socket) stops nothing */
    ck_assert_uint_le(at_count(t, "PyHttp", "ConnectionStop"), nconn);
    at_session_free(&s);
}
END_TEST

/* Blocked time in a real server: clients that wait 120 ms between connecting and sending their
 * request keep each handler thread blocked in its read of the request, inside its Connection. The
 * handler records the wait (WaitSuspend and WaitResume, reason read, in the Connection, on the
 * handler's thread), and acttrace breakdown gives each handled Connection at least 100 ms blocked
 * by read. */
START_TEST(test_blocked_time_in_handlers)
{
    at_session s;
    const char *env[] = {"ACTTRACE_ACCEPT_ACTIVITY=1", NULL};
    client_delay_ms = 120;
    run_server(&s, env, true);
    client_delay_ms = 0;
    const at_trace *t = &s.t;
    size_t reads = 0;
    for (long w = at_find(t, "acttrace-shim", "WaitResume", 0); w >= 0;
         w = at_find(t, "acttrace-shim", "WaitResume", (size_t)w + 1)) {
        const at_tev *e = &t->ev[w];
        uint64_t ns = 0;
        ck_assert(at_field_u64(e, "BlockedNs", &ns));
        const char *reason = at_ev_field(e, "Reason");
        if (!reason || strcmp(reason, "\"read\"") != 0 || ns < 100000000)
            continue;
        ck_assert_uint_ne(e->thread, (uint64_t)s.r.pid); /* a handler's */
        long c = at_find(t, NULL, "ConnectionStart", 0);
        while (c >= 0 && !at_guid_eq(&t->ev[c].activity, &e->activity))
            c = at_find(t, NULL, "ConnectionStart", (size_t)c + 1);
        ck_assert_msg(c >= 0, "a read wait outside any Connection: %s", e->act_path);
        reads++;
    }
    ck_assert_msg(reads >= NREQ, "%zu handlers waited 100 ms or more in their read, %d clients made "
                  "them", reads, NREQ);
    at_run_result r;
    const char *args[] = {"breakdown", "--name", "Connection", s.t.path, NULL};
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
    size_t slow = 0;
    for (const char *p = r.out; (p = strstr(p, "blocked by:")) != NULL; p++) {
        /* "blocked by: semaphore 2.009 ms, read 114.941 ms, ...": the read's share */
        const char *end = strchr(p, '\n'), *rd = strstr(p, " read ");
        double ms = 0;
        if (rd && (!end || rd < end) && sscanf(rd, " read %lf", &ms) == 1 && ms >= 100)
            slow++;
    }
    ck_assert_msg(slow >= NREQ, "%zu Connections blocked 100 ms by read:\n%s", slow, r.out);
    at_run_result_free(&r);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("httpserver");
    TCase *tc = tcase_create("python3");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_no_config_no_file);
    tcase_add_test(tc, test_connection_activity_per_handler);
    tcase_add_test(tc, test_config_accept_close_pair);
    tcase_add_test(tc, test_blocked_time_in_handlers);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
