/* test_crossproc: requests followed from one traced process into another through a socket, with
 * nothing added to the bytes on the wire. A real client (Debian's curl, each request an activity
 * Fetch around curl_easy_perform by a config) asks a real server (python3's http.server, a
 * Connection per accepted socket), both traced, over IPv4 and over IPv6 loopback. Each side writes
 * its connected socket's two ends (SocketEndpoints, in the activity the socket is tagged with), and
 * `acttrace tree` given both processes' files puts each server Connection under the Fetch that
 * connected it: three curls, three Fetches, each with the one Connection whose ends are its own the
 * other way round; the server's file alone keeps every Connection a root, and the listening probe's
 * connection, which no traced client made, stays one. `acttrace breakdown` over the same files adds
 * the Connection into its Fetch's figures with its children. A kept-alive connection's second
 * request, from a second Fetch, goes to that Fetch (a ConnectionExchange of the server's
 * Connection).
 *
 * Then three "hosts": network namespaces made by the test (and removed after), joined by veth pairs,
 * each with its own address: curl on the first through an nginx proxy on the second (its upstream
 * connection kept alive) to the http.server (HTTP/1.1) on the third, all traced: each request one
 * tree, Fetch over nginx's Connection over the server's Connection or an exchange of it, and one
 * trace in `acttrace export --format otlp`, read with the OpenTelemetry
 * protocol's own definitions (tests/consumers/otlp-check.js): curl's Fetch span the root, nginx's
 * Connection span (kind SERVER) its child, the server's its grandchild, one trace id; and the same
 * spans sent with --endpoint as OTLP/HTTP protobuf to a receiver that decodes them with those
 * definitions (tests/consumers/otlp-receiver.js); a receiver that is not there is one line. */
#include <check.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "at_testlib.h"
#include "at_tracegen.h"
#include "at_web.h"

#define NCURL 3

/* the program's threads (the shim's own, named acttrace-*, not counted) */
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

typedef struct row {
    long serial, parent, pid;
    char name[32];
} row;

/* `acttrace tree --tsv` activity lines */
static int read_tree(const char *out, row *rows, int max)
{
    int n = 0;
    for (const char *l = out; l && *l && n < max; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        row r;
        if (sscanf(l, "activity\t%ld\t%ld\t%ld\t%*s\t%*s\t%31s", &r.serial, &r.parent, &r.pid, r.name) == 4)
            rows[n++] = r;
    }
    return n;
}

/* a server (http.server) stopped once its handlers ended (bounded) */
static void stop_server(at_proc *sp)
{
    for (int i = 0; i < 400 && task_count(sp->pid) > 1; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    kill(sp->pid, SIGINT);
    at_run_result sr;
    ck_assert_int_eq(at_wait(sp, &sr), 0);
    at_run_result_free(&sr);
}

/* dir/curl.conf (each curl_easy_perform an activity Fetch), and the environment of curl
 * (ACTTRACE_CONFIG, cenv; its file, oenv) and of a server writing dir/srv.nettrace (senv): 4300
 * bytes each */
static void curl_env(const char *dir, char *cenv, char *senv, char *oenv)
{
    char conf[4200];
    snprintf(conf, sizeof conf, "%s/curl.conf", dir);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fputs("[activity Fetch]\nfunction = curl_easy_perform\nsignature = int curl_easy_perform(void *h)\n", f);
    fclose(f);
    snprintf(cenv, 4300, "ACTTRACE_CONFIG=%s", conf);
    snprintf(senv, 4300, "ACTTRACE_OUTPUT=%s/srv.nettrace", dir);
    snprintf(oenv, 4300, "ACTTRACE_OUTPUT=%s/cli-%%p.nettrace", dir);
}

static void run_case(bool v6)
{
    char *dir = at_tmpdir("xproc");
    ck_assert(dir);
    char cenv[4300], senv[4300], oenv[4300];
    curl_env(dir, cenv, senv, oenv);
    int port = at_free_port();
    ck_assert(port > 0);
    char ps[16], url[128];
    snprintf(ps, sizeof ps, "%d", port);
    snprintf(url, sizeof url, v6 ? "http://[::1]:%d/" : "http://127.0.0.1:%d/", port);
    const char *py = at_file_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    const char *sargv[] = {py, "-m", "http.server", "--bind", v6 ? "::1" : "127.0.0.1", ps, NULL};
    const char *sev[] = {"PYTHONUNBUFFERED=1", "ACTTRACE_ACCEPT_ACTIVITY=1", senv, NULL};
    at_run_opts so = {.argv = sargv, .env = sev, .cwd = dir};
    at_proc sp;
    ck_assert_int_eq(at_spawn(&so, &sp), 0);
    bool up = false;
    for (int i = 0; i < 500 && !up; i++) { /* at_wait_listening knows IPv4 only: curl asks */
        const char *pargv[] = {"curl", "-s", "-o", "/dev/null", "--max-time", "5", url, NULL};
        at_run_opts po = {.argv = pargv, .cwd = dir, .no_preload = true};
        at_run_result pr;
        up = at_run(&po, &pr) == 0 && pr.exited && pr.status == 0;
        at_run_result_free(&pr);
        if (!up)
            nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    int curl_pid[NCURL] = {0};
    for (int i = 0; up && i < NCURL; i++) {
        const char *cargv[] = {"curl", "-s", "-o", "/dev/null", "--max-time", "10", url, NULL};
        const char *cev[] = {cenv, oenv, NULL};
        at_run_opts co = {.argv = cargv, .env = cev, .cwd = dir};
        at_run_result cr;
        ck_assert_int_eq(at_run(&co, &cr), 0);
        ck_assert_msg(cr.exited && cr.status == 0, "curl %s: exit %d: %s", url, cr.status, cr.err);
        ck_assert_msg(strstr(cr.err, "1 of 1 functions hooked"), "curl: %s", cr.err);
        curl_pid[i] = (int)cr.pid;
        at_run_result_free(&cr);
    }
    for (int i = 0; i < 400 && task_count(sp.pid) > 1; i++) /* the handlers end (bounded) */
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    kill(sp.pid, SIGINT);
    at_run_result sr;
    ck_assert_int_eq(at_wait(&sp, &sr), 0);
    ck_assert_msg(up, "http.server never answered on %s: %s", url, sr.err);
    at_run_result_free(&sr);

    /* each side's ends, the other way round */
    char srv[4300];
    snprintf(srv, sizeof srv, "%s/srv.nettrace", dir);
    at_trace t;
    ck_assert_msg(at_trace_load(srv, &t) == 0, "%s: %s", srv, t.err);
    char want_local[64];
    snprintf(want_local, sizeof want_local, v6 ? "\"[0:0:0:0:0:0:0:1]:%d\"" : "\"127.0.0.1:%d\"", port);
    size_t accepts = 0;
    for (size_t i = 0; i < t.n; i++) {
        if (strcmp(t.ev[i].name, "SocketEndpoints"))
            continue;
        accepts++;
        ck_assert_str_eq(at_ev_field(&t.ev[i], "Role"), "\"accept\"");
        ck_assert_str_eq(at_ev_field(&t.ev[i], "Local"), want_local);
        ck_assert_msg(t.ev[i].act_path[0], "SocketEndpoints outside any activity");
    }
    ck_assert_uint_ge(accepts, NCURL + 1);
    at_trace_free(&t);

    char **files = at_trace_files(dir);
    ck_assert_uint_eq(at_strv_len(files), NCURL + 1);
    const char *targs[NCURL + 5] = {"tree", "--tsv"};
    for (int i = 0; files[i]; i++)
        targs[2 + i] = files[i];
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, targs), 0);
    ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
    row rows[64];
    int n = read_tree(r.out, rows, 64);
    int fetches = 0, linked = 0, roots = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(rows[i].name, "Fetch")) {
            fetches++;
            bool ours = false;
            for (int k = 0; k < NCURL; k++)
                ours |= rows[i].pid == curl_pid[k];
            ck_assert_msg(ours, "a Fetch of pid %ld, no curl's", rows[i].pid);
            int under = 0;
            for (int j = 0; j < n; j++)
                if (rows[j].parent == rows[i].serial) {
                    ck_assert_str_eq(rows[j].name, "Connection");
                    ck_assert_int_eq(rows[j].pid, sp.pid);
                    under++;
                }
            ck_assert_msg(under == 1, "Fetch %ld has %d Connections under it:\n%s", rows[i].serial, under, r.out);
            linked += under;
        } else if (!strcmp(rows[i].name, "Connection") && rows[i].parent == 0) {
            roots++;
        }
    }
    ck_assert_msg(fetches == NCURL && linked == NCURL && roots >= 1, "%d Fetches, %d linked, %d roots:\n%s",
                  fetches, linked, roots, r.out);
    at_run_result_free(&r);

    /* the server's file alone: nothing to link to */
    const char *sargs[] = {"tree", "--tsv", srv, NULL};
    ck_assert_int_eq(at_tool_run(&r, sargs), 0);
    n = read_tree(r.out, rows, 64);
    for (int i = 0; i < n; i++)
        ck_assert_msg(rows[i].parent == 0, "the server's file alone: %s under %ld", rows[i].name, rows[i].parent);
    ck_assert_int_ge(n, NCURL + 1);
    at_run_result_free(&r);

    /* breakdown: each Fetch's figures with its children include its Connection */
    const char *bargs[NCURL + 8] = {"breakdown"};
    for (int i = 0; files[i]; i++)
        bargs[1 + i] = files[i];
    ck_assert_int_eq(at_tool_run(&r, bargs), 0);
    ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
    int with = 0;
    for (const char *l = r.out; (l = strstr(l, "\nFetch ")); l++) {
        const char *next = strstr(l + 1, "\nFetch ");
        const char *c = strstr(l, "\n  Connection ");
        with += c && (!next || c < next);
    }
    if (!strncmp(r.out, "Fetch ", 6)) {
        const char *next = strstr(r.out, "\nFetch ");
        const char *c = strstr(r.out, "\n  Connection ");
        with += c && (!next || c < next);
    }
    ck_assert_msg(with == NCURL, "%d Fetches with their Connection in breakdown:\n%s", with, r.out);
    at_run_result_free(&r);
    at_strv_free(files);
    at_rmtree(dir);
    free(dir);
}

/* A kept-alive connection: one curl asks twice (two URLs, two Fetches, the second request on the
 * first one's connection) an HTTP/1.1 http.server. Each side counts the connection's exchanges
 * (SocketExchange: curl's second send after it received, in the second Fetch; the server's second
 * receive after it sent, in its Connection), and the merged tree gives the second exchange to the
 * second Fetch: the server's Connection under the first Fetch, a ConnectionExchange of it (path
 * "#1") under the second. */
static void keep_alive_case(bool off)
{
    char *dir = at_tmpdir("xkeep");
    ck_assert(dir);
    char cenv[4300], senv[4300], oenv[4300];
    curl_env(dir, cenv, senv, oenv);
    int port = at_free_port();
    ck_assert(port > 0);
    char ps[16], url1[128], url2[128];
    snprintf(ps, sizeof ps, "%d", port);
    snprintf(url1, sizeof url1, "http://127.0.0.1:%d/", port);
    snprintf(url2, sizeof url2, "http://127.0.0.1:%d/?second", port);
    const char *py = at_file_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    const char *sargv[] = {py, "-m", "http.server", "-p", "HTTP/1.1", "--bind", "127.0.0.1", ps, NULL};
    const char *sev[] = {"PYTHONUNBUFFERED=1", "ACTTRACE_ACCEPT_ACTIVITY=1", senv, off ? "ACTTRACE_EXCHANGES=0" : NULL,
                         NULL};
    at_run_opts so = {.argv = sargv, .env = sev, .cwd = dir};
    at_proc sp;
    ck_assert_int_eq(at_spawn(&so, &sp), 0);
    ck_assert_msg(at_wait_listening(port), "http.server never listened on %d", port);
    const char *cargv[] = {"curl", "-s", "-w", "connects %{num_connects}\n", "-o", "/dev/null", "-o", "/dev/null",
                           "--max-time", "10", url1, url2, NULL};
    const char *cev[] = {cenv, oenv, NULL};
    at_run_opts co = {.argv = cargv, .env = cev, .cwd = dir};
    at_run_result cr;
    ck_assert_int_eq(at_run(&co, &cr), 0);
    ck_assert_msg(cr.exited && cr.status == 0, "curl: exit %d: %s", cr.status, cr.err);
    /* the second request made no connection of its own */
    ck_assert_msg(strstr(cr.out, "connects 1\nconnects 0\n"), "curl did not keep the connection: %s", cr.out);
    int curl_pid = (int)cr.pid;
    at_run_result_free(&cr);
    stop_server(&sp);

    /* each side's exchange 1, in the activity that made it */
    char **files = at_trace_files(dir);
    ck_assert_uint_eq(at_strv_len(files), 2);
    int ex_srv = 0, ex_cli = 0, ex_end = 0;
    for (int k = 0; files[k]; k++) {
        at_trace t;
        ck_assert_msg(at_trace_load(files[k], &t) == 0, "%s: %s", files[k], t.err);
        bool server = strstr(files[k], "srv.nettrace") != NULL;
        for (size_t i = 0; i < t.n; i++) {
            /* curl's requests carry no traceparent unless asked (ACTTRACE_TRACEPARENT_INJECT) */
            ck_assert_msg(strcmp(t.ev[i].name, "TraceContext"), "a traceparent the shim was not asked to add");
            if (strcmp(t.ev[i].name, "SocketExchange"))
                continue;
            ck_assert_msg(t.ev[i].act_path[0], "SocketExchange outside any activity");
            /* the server's connection closed after exchanges: its end (-1) */
            if (server && !strcmp(at_ev_field(&t.ev[i], "Index"), "-1")) {
                ex_end++;
                continue;
            }
            ck_assert_str_eq(at_ev_field(&t.ev[i], "Index"), "1");
            if (server)
                ex_srv++;
            else
                ex_cli++;
        }
        at_trace_free(&t);
    }
    ck_assert_msg(ex_srv == !off && ex_cli == 1 && ex_end == !off, "SocketExchange: %d in the server (%d ends), %d in curl",
                  ex_srv, ex_end, ex_cli);

    const char *targs[6] = {"tree", "--tsv", files[0], files[1], NULL};
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, targs), 0);
    ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
    row rows[32];
    int n = read_tree(r.out, rows, 32);
    long fetch[2] = {0, 0};
    int nf = 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[i].name, "Fetch") && nf < 2) {
            ck_assert_int_eq(rows[i].pid, curl_pid);
            ck_assert_int_eq(rows[i].parent, 0);
            fetch[nf++] = rows[i].serial;
        }
    ck_assert_msg(nf == 2, "%d Fetches:\n%s", nf, r.out);
    if (fetch[0] > fetch[1]) { /* in start order (the tree lists roots as they end) */
        long x = fetch[0];
        fetch[0] = fetch[1];
        fetch[1] = x;
    }
    int conn_under_first = 0, exch_under_second = 0, other = 0;
    for (int i = 0; i < n; i++) {
        if (rows[i].parent == fetch[0] && !strcmp(rows[i].name, "Connection") && rows[i].pid == sp.pid)
            conn_under_first++;
        else if (rows[i].parent == fetch[1] && !strcmp(rows[i].name, "ConnectionExchange") && rows[i].pid == sp.pid)
            exch_under_second++;
        else if (rows[i].parent == fetch[0] || rows[i].parent == fetch[1])
            other++;
    }
    ck_assert_msg(conn_under_first == 1 && exch_under_second == !off && other == 0,
                  "the kept-alive connection's exchanges:\n%s", r.out);
    ck_assert_msg(off || strstr(r.out, "#1\t"), "the exchange's path has no #1:\n%s", r.out);
    at_run_result_free(&r);
    at_strv_free(files);
    at_rmtree(dir);
    free(dir);
}

START_TEST(test_keep_alive_exchanges)
{
    keep_alive_case(false);
}
END_TEST

/* The server's exchanges not counted (ACTTRACE_EXCHANGES=0): the whole connection stays the first
 * Fetch's */
START_TEST(test_keep_alive_exchanges_off)
{
    keep_alive_case(true);
}
END_TEST

START_TEST(test_curl_to_http_server_v4)
{
    run_case(false);
}
END_TEST

START_TEST(test_curl_to_http_server_v6)
{
    run_case(true);
}
END_TEST

/* The same over a Unix socket: curl --unix-socket into an HTTP server on a Unix socket (python3,
 * tests/data/unix_http_server.py), both traced. Each end's SocketEndpoints names the listening
 * path and the connecting process (unix:PATH, unix:pid=N: what each end knows, the other through
 * SO_PEERCRED), and the tree hangs each server Connection under the Fetch that connected it. */
START_TEST(test_curl_over_unix_socket)
{
    char *dir = at_tmpdir("xprocu");
    ck_assert(dir);
    char conf[4200], cenv[4300], senv[4300], oenv[4300], sock[4300];
    snprintf(conf, sizeof conf, "%s/curl.conf", dir);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fputs("[activity Fetch]\nfunction = curl_easy_perform\nsignature = int curl_easy_perform(void *h)\n", f);
    fclose(f);
    snprintf(cenv, sizeof cenv, "ACTTRACE_CONFIG=%s", conf);
    snprintf(senv, sizeof senv, "ACTTRACE_OUTPUT=%s/srv.nettrace", dir);
    snprintf(oenv, sizeof oenv, "ACTTRACE_OUTPUT=%s/cli-%%p.nettrace", dir);
    snprintf(sock, sizeof sock, "%s/s.sock", dir);
    const char *py = at_file_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    const char *sargv[] = {py, AT_SOURCE_DIR "/tests/data/unix_http_server.py", sock, NULL};
    const char *sev[] = {"PYTHONUNBUFFERED=1", "ACTTRACE_ACCEPT_ACTIVITY=1", senv, NULL};
    at_run_opts so = {.argv = sargv, .env = sev, .cwd = dir};
    at_proc sp;
    ck_assert_int_eq(at_spawn(&so, &sp), 0);
    bool up = false;
    for (int i = 0; i < 1000 && !up; i++) {
        char *o = at_read_file(sp.outpath, NULL);
        up = o && strstr(o, "listening");
        free(o);
        if (!up)
            nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    ck_assert_msg(up, "the Unix-socket server never listened");
    int curl_pid[NCURL];
    for (int i = 0; i < NCURL; i++) {
        const char *cargv[] = {"curl", "-sf", "-o", "/dev/null", "--max-time", "10", "--unix-socket", sock,
                               "http://localhost/", NULL};
        const char *cev[] = {cenv, oenv, NULL};
        at_run_opts co = {.argv = cargv, .env = cev, .cwd = dir};
        at_run_result cr;
        ck_assert_int_eq(at_run(&co, &cr), 0);
        ck_assert_msg(cr.exited && cr.status == 0, "curl: exit %d: %s", cr.status, cr.err);
        curl_pid[i] = (int)cr.pid;
        at_run_result_free(&cr);
    }
    stop_server(&sp);

    char srv[4300], want[4400];
    snprintf(srv, sizeof srv, "%s/srv.nettrace", dir);
    snprintf(want, sizeof want, "\"unix:%s\"", sock);
    at_trace t;
    ck_assert_msg(at_trace_load(srv, &t) == 0, "%s: %s", srv, t.err);
    int accepts = 0;
    for (size_t i = 0; i < t.n; i++) {
        if (strcmp(t.ev[i].name, "SocketEndpoints"))
            continue;
        ck_assert_str_eq(at_ev_field(&t.ev[i], "Local"), want);
        int pid = 0;
        ck_assert_msg(sscanf(at_ev_field(&t.ev[i], "Peer"), "\"unix:pid=%d\"", &pid) == 1, "%s",
                      at_ev_field(&t.ev[i], "Peer"));
        bool ours = false;
        for (int k = 0; k < NCURL; k++)
            ours |= pid == curl_pid[k];
        ck_assert_msg(ours, "a peer pid %d, no curl's", pid);
        accepts++;
    }
    ck_assert_int_eq(accepts, NCURL);
    at_trace_free(&t);

    char **files = at_trace_files(dir);
    ck_assert_uint_eq(at_strv_len(files), NCURL + 1);
    const char *targs[NCURL + 5] = {"tree", "--tsv"};
    for (int i = 0; files[i]; i++)
        targs[2 + i] = files[i];
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, targs), 0);
    ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
    row rows[64];
    int n = read_tree(r.out, rows, 64), linked = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (!strcmp(rows[i].name, "Fetch") && rows[j].parent == rows[i].serial &&
                !strcmp(rows[j].name, "Connection") && rows[j].pid == sp.pid)
                linked++;
    ck_assert_msg(linked == NCURL, "%d Connections under Fetches:\n%s", linked, r.out);
    at_run_result_free(&r);
    at_strv_free(files);
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* Files of two clocks: the server runs in a time namespace whose CLOCK_MONOTONIC is a day ahead
 * (unshare --time --monotonic 86400) and writes its events on that clock (ACTTRACE_CLOCK=monotonic),
 * as another host's would be: unrelated to the client's. The tree puts the server's files on the
 * client's time line by their SyncTimeUTC, refines that with the connections (each accept after
 * its connect, before its Fetch stopped), says so in a "clocks:" line, and each Connection starts
 * inside the Fetch that connected it. */
START_TEST(test_clocks_of_two_hosts)
{
    char *dir = at_tmpdir("xprocclk");
    ck_assert(dir);
    char conf[4200], cenv[4300], senv[4300], oenv[4300];
    snprintf(conf, sizeof conf, "%s/curl.conf", dir);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fputs("[activity Fetch]\nfunction = curl_easy_perform\nsignature = int curl_easy_perform(void *h)\n", f);
    fclose(f);
    snprintf(cenv, sizeof cenv, "ACTTRACE_CONFIG=%s", conf);
    snprintf(senv, sizeof senv, "ACTTRACE_OUTPUT=%s/srv-%%p.nettrace", dir);
    snprintf(oenv, sizeof oenv, "ACTTRACE_OUTPUT=%s/cli-%%p.nettrace", dir);
    int port = at_free_port();
    ck_assert(port > 0);
    char ps[16], url[96];
    snprintf(ps, sizeof ps, "%d", port);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    const char *py = at_file_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    const char *sargv[] = {"unshare", "--time", "--monotonic", "86400", "--fork", "--kill-child", py, "-m",
                           "http.server", "--bind", "127.0.0.1", ps, NULL};
    const char *sev[] = {"PYTHONUNBUFFERED=1", "ACTTRACE_ACCEPT_ACTIVITY=1", "ACTTRACE_CLOCK=monotonic", senv, NULL};
    at_run_opts so = {.argv = sargv, .env = sev, .cwd = dir};
    at_proc sp;
    ck_assert_int_eq(at_spawn(&so, &sp), 0);
    ck_assert_msg(at_wait_listening(port), "http.server in a time namespace never listened (unshare --time needs root and Linux 5.6)");
    for (int i = 0; i < NCURL; i++) {
        const char *cargv[] = {"curl", "-sf", "-o", "/dev/null", "--max-time", "10", url, NULL};
        const char *cev[] = {cenv, oenv, NULL};
        at_run_opts co = {.argv = cargv, .env = cev, .cwd = dir};
        at_run_result cr;
        ck_assert_int_eq(at_run(&co, &cr), 0);
        ck_assert_msg(cr.exited && cr.status == 0, "curl: exit %d: %s", cr.status, cr.err);
        at_run_result_free(&cr);
    }
    /* the server is unshare's child: it is the one told to stop (unshare then ends with it) */
    char cpath[128];
    snprintf(cpath, sizeof cpath, "/proc/%d/task/%d/children", (int)sp.pid, (int)sp.pid);
    char *kids = at_read_file(cpath, NULL);
    int server = kids ? atoi(kids) : 0;
    free(kids);
    ck_assert_msg(server > 0, "no child of unshare");
    for (int i = 0; i < 400 && task_count(server) > 1; i++) /* the handlers end (bounded) */
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    kill(server, SIGINT);
    at_run_result sr;
    ck_assert_int_eq(at_wait(&sp, &sr), 0);
    ck_assert_msg(sr.exited && sr.status == 0, "unshare: exit %d signal %d: %s", sr.status, sr.sig, sr.err);
    at_run_result_free(&sr);

    char **files = at_trace_files(dir);
    size_t nf = at_strv_len(files);
    ck_assert_msg(nf >= NCURL + 1 && nf < 12, "%zu files", nf);
    const char *targs[16] = {"tree", "--tsv"};
    for (size_t i = 0; i < nf; i++)
        targs[2 + i] = files[i];
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, targs), 0);
    ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
    /* activity serial parent pid tid tid tid name path start_ns duration_ns ... */
    struct { long serial, parent; char name[32]; long long start, dur; } a[64];
    int n = 0;
    for (const char *l = r.out; l && *l && n < 64; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
        if (sscanf(l, "activity\t%ld\t%ld\t%*s\t%*s\t%*s\t%31s\t%*s\t%lld\t%lld", &a[n].serial, &a[n].parent,
                   a[n].name, &a[n].start, &a[n].dur) == 5)
            n++;
    int inside = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(a[i].name, "Fetch"))
            continue;
        for (int j = 0; j < n; j++)
            if (a[j].parent == a[i].serial) {
                /* accepted after the connect began, before the Fetch had its answer (the server's
                 * close may come after the client's end) */
                ck_assert_msg(a[j].start >= a[i].start && a[j].start <= a[i].start + a[i].dur,
                              "Connection [%lld, +%lld] does not start in its Fetch [%lld, +%lld]:\n%s", a[j].start,
                              a[j].dur, a[i].start, a[i].dur, r.out);
                inside++;
            }
    }
    ck_assert_msg(inside == NCURL, "%d Connections under their Fetch:\n%s", inside, r.out);
    at_run_result_free(&r);
    for (size_t i = 0; i <= nf; i++) /* the text tree: the note */
        targs[1 + i] = targs[2 + i];
    ck_assert_int_eq(at_tool_run(&r, targs), 0);
    ck_assert_msg(strstr(r.out, "clocks: pid ") && strstr(r.out, "by their SyncTimeUTC (") &&
                      strstr(r.out, "connections, aligned within "),
                  "%s", r.out);
    at_run_result_free(&r);
    at_strv_free(files);
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* ---------------- W3C trace context ---------------- */

/* http.server (traced, a Connection per accepted socket) asked by an untraced curl: with a valid
 * traceparent header, with one whose trace id is all zero (invalid), with none, with a POST whose
 * body (not its headers) holds a traceparent line, and with ACTTRACE_TRACEPARENT=0 in a second
 * server run. Only the valid header is a TraceContext event, in
 * its request's Connection, with its ids and flags; the OTLP export makes that Connection a span of
 * the header's trace (kind SERVER) whose parent is the header's span, and the others spans of
 * traces of their own with no parent. */
#define TP_TRACE "4bf92f3577b34da6a3ce929d0e0e4736"
#define TP_PARENT "00f067aa0ba902b7"

static char *serve_and_ask(const char *dir, const char *const *extra_env, const char *const *headers, int n)
{
    char senv[4300];
    snprintf(senv, sizeof senv, "ACTTRACE_OUTPUT=%s/tp-%%p.nettrace", dir);
    int port = at_free_port();
    ck_assert(port > 0);
    char ps[16], url[96];
    snprintf(ps, sizeof ps, "%d", port);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    const char *py = at_file_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    const char *sargv[] = {py, "-m", "http.server", "--bind", "127.0.0.1", ps, NULL};
    const char *sev[6] = {"PYTHONUNBUFFERED=1", "ACTTRACE_ACCEPT_ACTIVITY=1", senv};
    for (int i = 0; extra_env && extra_env[i] && i < 2; i++)
        sev[3 + i] = extra_env[i];
    at_run_opts so = {.argv = sargv, .env = sev, .cwd = dir};
    at_proc sp;
    ck_assert_int_eq(at_spawn(&so, &sp), 0);
    ck_assert(at_wait_listening(port));
    for (int i = 0; i < n; i++) {
        /* "@BODY": a POST whose body is BODY (http.server answers 501: no -f) */
        bool post = headers[i][0] == '@';
        const char *cargv[] = {"curl", post ? "-s" : "-sf", "-o", "/dev/null", "--max-time", "10",
                               post ? "--data-binary" : "-H",
                               post ? headers[i] + 1 : headers[i][0] ? headers[i] : "X-None: 1", url, NULL};
        at_run_opts co = {.argv = cargv, .cwd = dir, .no_preload = true};
        at_run_result cr;
        ck_assert_int_eq(at_run(&co, &cr), 0);
        ck_assert_msg(cr.exited && cr.status == 0, "curl: exit %d: %s", cr.status, cr.err);
        at_run_result_free(&cr);
    }
    for (int i = 0; i < 400 && task_count(sp.pid) > 1; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    kill(sp.pid, SIGINT);
    at_run_result r;
    ck_assert_int_eq(at_wait(&sp, &r), 0);
    ck_assert_msg(r.exited && r.status == 0, "http.server: %d %s", r.status, r.err);
    at_run_result_free(&r);
    char *path;
    ck_assert_int_gt(asprintf(&path, "%s/tp-%d.nettrace", dir, (int)sp.pid), 0);
    return path;
}

START_TEST(test_traceparent)
{
    char *dir = at_tmpdir("xproctp");
    ck_assert(dir);
    const char *headers[] = {"traceparent: 00-" TP_TRACE "-" TP_PARENT "-01",
                             "traceparent: 00-00000000000000000000000000000000-" TP_PARENT "-01", "",
                             "@x\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n"};
    char *path = serve_and_ask(dir, NULL, headers, 4);
    at_trace t;
    ck_assert_msg(at_trace_load(path, &t) == 0, "%s: %s", path, t.err);
    size_t n = 0;
    char conn[96] = "";
    for (size_t i = 0; i < t.n; i++) {
        if (strcmp(t.ev[i].name, "TraceContext"))
            continue;
        n++;
        ck_assert_str_eq(at_ev_field(&t.ev[i], "TraceId"), "\"" TP_TRACE "\"");
        ck_assert_str_eq(at_ev_field(&t.ev[i], "ParentId"), "\"" TP_PARENT "\"");
        ck_assert_str_eq(at_ev_field(&t.ev[i], "Flags"), "1");
        ck_assert_msg(t.ev[i].act_path[0], "a TraceContext outside any activity");
        snprintf(conn, sizeof conn, "%s", t.ev[i].act_path);
    }
    ck_assert_uint_eq(n, 1);
    at_trace_free(&t);

    const char *why = at_web_missing_in(AT_SOURCE_DIR "/tests/consumers", "@opentelemetry/otlp-transformer");
    if (why && at_traceevent_required())
        ck_abort_msg("the OTLP check cannot run under CI: %s", why);
    if (!why) {
        char json[4400];
        snprintf(json, sizeof json, "%s/tp.json", dir);
        const char *eargs[] = {"export", "--format", "otlp", "-o", json, path, NULL};
        at_run_result r;
        ck_assert_int_eq(at_tool_run(&r, eargs), 0);
        ck_assert_msg(r.exited && r.status == 0, "export: %s", r.err);
        at_run_result_free(&r);
        const char *nargv[] = {"node", AT_SOURCE_DIR "/tests/consumers/otlp-check.js", json, NULL};
        at_run_opts no = {.argv = nargv, .no_preload = true};
        ck_assert_int_eq(at_run(&no, &r), 0);
        ck_assert_msg(r.exited && r.status == 0, "otlp-check: %s%s", r.out, r.err);
        int joined = 0, own = 0;
        for (const char *l = r.out; (l = strstr(l, "span python3 Connection ")); l++) {
            char trace[40], span[20], parent[20], p2[96];
            int kind;
            long long dur;
            ck_assert_int_eq(sscanf(l, "span python3 Connection %39s %19s %19s %d %lld %95s", trace, span, parent, &kind,
                                    &dur, p2), 6);
            if (!strcmp(trace, TP_TRACE)) {
                ck_assert_str_eq(parent, TP_PARENT);
                ck_assert_int_eq(kind, 2);
                ck_assert_str_eq(p2, conn);
                joined++;
            } else {
                ck_assert_str_eq(parent, "-");
                own++;
            }
        }
        ck_assert_msg(joined == 1 && own == 4, "%d spans in the header's trace, %d of their own:\n%s", joined, own, r.out);
        at_run_result_free(&r);
    }
    free(path);

    /* ACTTRACE_TRACEPARENT=0: no header is read */
    const char *off[] = {"ACTTRACE_TRACEPARENT=0", NULL};
    path = serve_and_ask(dir, off, headers, 1);
    ck_assert_msg(at_trace_load(path, &t) == 0, "%s: %s", path, t.err);
    ck_assert_uint_eq(at_count(&t, "acttrace-shim", "TraceContext"), 0);
    ck_assert_uint_ge(at_count(&t, "acttrace-shim", "ConnectionStart"), 2);
    at_trace_free(&t);
    free(path);
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* ---------------- three hosts: network namespaces joined by veth pairs ---------------- */

static bool sh(const char *cmd)
{
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    at_run_opts o = {.argv = argv, .no_preload = true};
    at_run_result r;
    bool ok = at_run(&o, &r) == 0 && r.exited && r.status == 0;
    if (!ok)
        fprintf(stderr, "test_crossproc: %s: %s", cmd, r.err ? r.err : "");
    at_run_result_free(&r);
    return ok;
}

static char ns_c[32], ns_p[32], ns_s[32];

static void netns_down(void)
{
    if (!ns_c[0])
        return;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ip netns del %s 2>/dev/null; ip netns del %s 2>/dev/null; ip netns del %s 2>/dev/null; true",
             ns_c, ns_p, ns_s);
    sh(cmd);
}

/* client 10.231.1.1 -- 10.231.1.2 proxy 10.231.2.1 -- 10.231.2.2 server */
static bool netns_up(void)
{
    int id = (int)getpid() % 100000;
    snprintf(ns_c, sizeof ns_c, "atc%d", id);
    snprintf(ns_p, sizeof ns_p, "atp%d", id);
    snprintf(ns_s, sizeof ns_s, "ats%d", id);
    netns_down();
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "set -e; ip netns add %1$s; ip netns add %2$s; ip netns add %3$s;"
             "ip link add a%4$d type veth peer name b%4$d; ip link add c%4$d type veth peer name d%4$d;"
             "ip link set a%4$d netns %1$s; ip link set b%4$d netns %2$s;"
             "ip link set c%4$d netns %2$s; ip link set d%4$d netns %3$s;"
             "ip -n %1$s addr add 10.231.1.1/24 dev a%4$d; ip -n %2$s addr add 10.231.1.2/24 dev b%4$d;"
             "ip -n %2$s addr add 10.231.2.1/24 dev c%4$d; ip -n %3$s addr add 10.231.2.2/24 dev d%4$d;"
             "for n in %1$s %2$s %3$s; do ip -n $n link set lo up; done;"
             "ip -n %1$s link set a%4$d up; ip -n %2$s link set b%4$d up;"
             "ip -n %2$s link set c%4$d up; ip -n %3$s link set d%4$d up",
             ns_c, ns_p, ns_s, id);
    return sh(cmd);
}

/* A request from a traced curl on one "host" through a traced nginx proxy on a second to a traced
 * python3 http.server on a third, each in its own network namespace with its own address: the
 * merged tree is one tree per request, curl's Fetch over nginx's Connection over the server's. */
START_TEST(test_three_hosts)
{
    ck_assert_msg(at_file_exists("/usr/sbin/nginx") && at_file_exists("/usr/bin/curl"),
                  "nginx or curl is missing (.ci/deps installs them)");
    ck_assert_msg(netns_up(), "cannot make the network namespaces (root and ip from iproute2 are needed)");
    char *dir = at_tmpdir("xproc3");
    ck_assert(dir);
    char path[4300];
    snprintf(path, sizeof path, "%s/tmp", dir);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/nginx.conf", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "user root;\ndaemon off;\nmaster_process on;\nworker_processes 1;\npid %s/nginx.pid;\n"
               "error_log %s/error.log;\nevents { worker_connections 64; }\nhttp { access_log off;\n"
               "client_body_temp_path %s/tmp; proxy_temp_path %s/tmp; fastcgi_temp_path %s/tmp;\n"
               "uwsgi_temp_path %s/tmp; scgi_temp_path %s/tmp;\n"
               "upstream up { server 10.231.2.2:8081; keepalive 4; }\n"
               "server { listen 10.231.1.2:8080; location / { proxy_pass http://up;\n"
               "proxy_http_version 1.1; proxy_set_header Connection \"\"; } } }\n",
            dir, dir, dir, dir, dir, dir, dir);
    fclose(f);
    char conf[4300], cenv[4400], senv[4400], penv[4400], oenv[4400];
    snprintf(conf, sizeof conf, "%s/curl.conf", dir);
    f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fputs("[activity Fetch]\nfunction = curl_easy_perform\nsignature = int curl_easy_perform(void *h)\n", f);
    fclose(f);
    snprintf(cenv, sizeof cenv, "ACTTRACE_CONFIG=%s", conf);
    snprintf(senv, sizeof senv, "ACTTRACE_OUTPUT=%s/srv-%%p.nettrace", dir);
    snprintf(penv, sizeof penv, "ACTTRACE_OUTPUT=%s/proxy-%%p.nettrace", dir);
    snprintf(oenv, sizeof oenv, "ACTTRACE_OUTPUT=%s/cli-%%p.nettrace", dir);
    const char *py = at_file_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    const char *sargv[] = {"ip", "netns", "exec", ns_s, py, "-m", "http.server", "-p", "HTTP/1.1", "--bind",
                           "10.231.2.2", "8081", NULL};
    const char *sev[] = {"PYTHONUNBUFFERED=1", "ACTTRACE_ACCEPT_ACTIVITY=1", senv, NULL};
    at_run_opts so = {.argv = sargv, .env = sev, .cwd = dir};
    at_proc sp, pp;
    ck_assert_int_eq(at_spawn(&so, &sp), 0);
    const char *pargv[] = {"ip", "netns", "exec", ns_p, "/usr/sbin/nginx", "-p", dir, "-c", path, "-e", "stderr", NULL};
    const char *pev[] = {"ACTTRACE_ACCEPT_ACTIVITY=1", penv, NULL};
    at_run_opts po = {.argv = pargv, .env = pev, .cwd = dir};
    ck_assert_int_eq(at_spawn(&po, &pp), 0);
    bool up = false; /* the whole chain answers (untraced probes) */
    for (int i = 0; i < 500 && !up; i++) {
        const char *qargv[] = {"ip", "netns", "exec", ns_c, "curl", "-sf", "-o", "/dev/null", "--max-time", "5",
                               "http://10.231.1.2:8080/", NULL};
        at_run_opts qo = {.argv = qargv, .cwd = dir, .no_preload = true};
        at_run_result qr;
        up = at_run(&qo, &qr) == 0 && qr.exited && qr.status == 0;
        at_run_result_free(&qr);
        if (!up)
            nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    for (int i = 0; up && i < NCURL; i++) {
        const char *cargv[] = {"ip", "netns", "exec", ns_c, "curl", "-sf", "-o", "/dev/null", "--max-time", "10",
                               "http://10.231.1.2:8080/", NULL};
        const char *cev[] = {cenv, oenv, NULL};
        at_run_opts co = {.argv = cargv, .env = cev, .cwd = dir};
        at_run_result cr;
        ck_assert_int_eq(at_run(&co, &cr), 0);
        ck_assert_msg(cr.exited && cr.status == 0, "curl: exit %d: %s", cr.status, cr.err);
        at_run_result_free(&cr);
    }
    kill(pp.pid, SIGQUIT); /* nginx's graceful stop: the worker ends its connections */
    at_run_result r;
    ck_assert_int_eq(at_wait(&pp, &r), 0);
    at_run_result_free(&r);
    for (int i = 0; i < 400 && task_count(sp.pid) > 1; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    kill(sp.pid, SIGINT);
    ck_assert_int_eq(at_wait(&sp, &r), 0);
    at_run_result_free(&r);
    netns_down();
    ck_assert_msg(up, "the chain never answered");

    char **files = at_trace_files(dir);
    size_t nf = at_strv_len(files);
    ck_assert_msg(nf >= NCURL + 2 && nf < 16, "%zu trace files", nf);
    const char *targs[20] = {"tree", "--tsv"};
    for (size_t i = 0; i < nf; i++)
        targs[2 + i] = files[i];
    ck_assert_int_eq(at_tool_run(&r, targs), 0);
    ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
    row rows[128];
    int n = read_tree(r.out, rows, 128);
    int chains = 0, ends[2] = {0, 0};
    for (int i = 0; i < n; i++) {
        if (strcmp(rows[i].name, "Fetch"))
            continue;
        ck_assert_msg(rows[i].parent == 0, "a Fetch under %ld", rows[i].parent);
        int mid = -1, end = -1, nmid = 0;
        for (int j = 0; j < n; j++)
            if (rows[j].parent == rows[i].serial && !strcmp(rows[j].name, "Connection"))
                mid = j, nmid++;
        /* the server's end: its Connection, or an exchange of it (nginx keeps its upstream
         * connection alive: the later requests are exchanges of the first one's) */
        for (int j = 0; mid >= 0 && j < n; j++)
            if (rows[j].parent == rows[mid].serial &&
                (!strcmp(rows[j].name, "Connection") || !strcmp(rows[j].name, "ConnectionExchange")))
                end = j, ends[!strcmp(rows[j].name, "ConnectionExchange")]++;
        ck_assert_msg(nmid == 1 && end >= 0 && rows[mid].pid != rows[i].pid && rows[end].pid != rows[mid].pid &&
                          rows[end].pid != rows[i].pid,
                      "Fetch %ld: not curl -> nginx -> http.server:\n%s", rows[i].serial, r.out);
        chains++;
    }
    ck_assert_msg(chains == NCURL, "%d chains:\n%s", chains, r.out);
    /* one upstream connection, kept alive from the first request (the untraced probe's, or the
     * first Fetch's): every later request an exchange of it */
    int srv_conns = 0;
    long srv_pid = 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[i].name, "ConnectionExchange"))
            srv_pid = rows[i].pid;
    for (int i = 0; i < n; i++)
        srv_conns += rows[i].pid == srv_pid && !strcmp(rows[i].name, "Connection");
    ck_assert_msg(srv_conns == 1 && ends[1] >= NCURL - 1,
                  "%d server Connections, %d under the requests, %d exchanges of one under them:\n%s", srv_conns,
                  ends[0], ends[1], r.out);
    at_run_result_free(&r);

    /* one trace per request in OTLP too, read with the protocol's own definitions */
    const char *why = at_web_missing_in(AT_SOURCE_DIR "/tests/consumers", "@opentelemetry/otlp-transformer");
    if (why && at_traceevent_required())
        ck_abort_msg("the OTLP check cannot run under CI: %s", why);
    if (why) {
        printf("test_crossproc: the OTLP check skipped: %s\n", why);
    } else {
        char json[4400];
        snprintf(json, sizeof json, "%s/otlp.json", dir);
        const char *eargs[20] = {"export", "--format", "otlp", "-o", json};
        for (size_t i = 0; i < nf; i++)
            eargs[5 + i] = files[i];
        ck_assert_int_eq(at_tool_run(&r, eargs), 0);
        ck_assert_msg(r.exited && r.status == 0, "export: %s", r.err);
        at_run_result_free(&r);
        const char *nargv[] = {"node", AT_SOURCE_DIR "/tests/consumers/otlp-check.js", json, NULL};
        at_run_opts no = {.argv = nargv, .no_preload = true};
        ck_assert_int_eq(at_run(&no, &r), 0);
        ck_assert_msg(r.exited && r.status == 0, "otlp-check: %s%s", r.out, r.err);
        /* span SERVICE NAME TRACE SPAN PARENT KIND DUR PATH */
        struct { char svc[32], name[32], trace[40], span[20], parent[20]; int kind; } sp[64];
        int ns = 0;
        for (const char *l = r.out; (l = strstr(l, "span ")) && ns < 64; l++)
            if ((l == r.out || l[-1] == '\n') &&
                sscanf(l, "span %31s %31s %39s %19s %19s %d", sp[ns].svc, sp[ns].name, sp[ns].trace, sp[ns].span,
                       sp[ns].parent, &sp[ns].kind) == 6)
                ns++;
        int full = 0;
        for (int i = 0; i < ns; i++) {
            if (strcmp(sp[i].svc, "curl") || strcmp(sp[i].name, "Fetch"))
                continue;
            ck_assert_msg(!strcmp(sp[i].parent, "-") && sp[i].kind == 1, "Fetch %s: parent %s kind %d", sp[i].span,
                          sp[i].parent, sp[i].kind);
            for (int j = 0; j < ns; j++) {
                if (strcmp(sp[j].svc, "nginx") || strcmp(sp[j].parent, sp[i].span))
                    continue;
                ck_assert_str_eq(sp[j].trace, sp[i].trace);
                ck_assert_int_eq(sp[j].kind, 2);
                for (int k = 0; k < ns; k++)
                    if (!strcmp(sp[k].svc, "python3") && !strcmp(sp[k].parent, sp[j].span)) {
                        ck_assert_str_eq(sp[k].trace, sp[i].trace);
                        full++;
                    }
            }
        }
        ck_assert_msg(full == NCURL, "%d requests one trace through the three processes:\n%s", full, r.out);

        /* the same spans sent as OTLP/HTTP protobuf to a receiver that decodes them */
        const char *rargv[] = {"node", AT_SOURCE_DIR "/tests/consumers/otlp-receiver.js", NULL};
        at_run_opts ro = {.argv = rargv, .no_preload = true};
        at_proc rp;
        ck_assert_int_eq(at_spawn(&ro, &rp), 0);
        int port = 0;
        for (int i = 0; i < 1000 && !port; i++) {
            char *o = at_read_file(rp.outpath, NULL);
            if (o && sscanf(o, "listening %d", &port) != 1)
                port = 0;
            free(o);
            if (!port)
                nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
        }
        ck_assert_msg(port > 0, "the OTLP receiver never listened");
        char ep[64];
        snprintf(ep, sizeof ep, "http://127.0.0.1:%d", port);
        const char *pargs[24] = {"export", "--format", "otlp", "--endpoint", ep};
        for (size_t i = 0; i < nf; i++)
            pargs[5 + i] = files[i];
        at_run_result er, rr;
        ck_assert_int_eq(at_tool_run(&er, pargs), 0);
        ck_assert_msg(er.exited && er.status == 0 && er.outlen == 0, "export --endpoint: %s%s", er.out, er.err);
        at_run_result_free(&er);
        ck_assert_int_eq(at_wait(&rp, &rr), 0);
        ck_assert_msg(rr.exited && rr.status == 0, "otlp-receiver: %s%s", rr.out, rr.err);
        /* the receiver's spans are the JSON's, line for line (in any order) */
        int same = 0, sent = 0;
        for (const char *l = rr.out; (l = strstr(l, "span ")); l++) {
            const char *e = strchr(l, '\n');
            size_t len = e ? (size_t)(e - l) : strlen(l);
            char line[512];
            snprintf(line, sizeof line, "%.*s\n", (int)len, l);
            sent++;
            same += strstr(r.out, line) != NULL;
        }
        ck_assert_msg(sent == ns && same == ns, "%d of %d spans sent as in the JSON (%d there):\n%s\n--\n%s", same, sent,
                      ns, rr.out, r.out);
        at_run_result_free(&rr);
        /* a receiver that is not there: one line, exit 1 */
        snprintf(ep, sizeof ep, "http://127.0.0.1:%d", at_free_port());
        ck_assert_int_eq(at_tool_run(&er, pargs), 0);
        ck_assert_msg(er.exited && er.status == 1 && strstr(er.err, "Connection refused"), "%s", er.err);
        at_run_result_free(&er);
    }
    /* the report: a Fetch's waterfall goes down through nginx's Connection to the server's, in
     * Debian's Chromium */
    const char *wwhy = at_web_missing();
    if (wwhy && at_traceevent_required())
        ck_abort_msg("the report's browser check cannot run under CI: %s", wwhy);
    if (wwhy) {
        printf("test_crossproc: the report check skipped: %s\n", wwhy);
    } else {
        char html[4400], shots[4400];
        snprintf(html, sizeof html, "%s/report.html", dir);
        snprintf(shots, sizeof shots, "%s/shots", dir);
        const char *rargs[24] = {"report", "-o", html};
        for (size_t i = 0; i < nf; i++)
            rargs[3 + i] = files[i];
        at_run_result rr;
        ck_assert_int_eq(at_tool_run(&rr, rargs), 0);
        ck_assert_msg(rr.exited && rr.status == 0, "report: %s", rr.err);
        at_run_result_free(&rr);
        ck_assert_int_eq(at_web_run(&rr, "waterfall.js", html, shots, (const char *const[]){"Fetch", NULL}), 0);
        ck_assert_msg(rr.exited && rr.status == 0, "waterfall.js: %s%s", rr.out, rr.err);
        /* row DEPTH NAME PATH PID ... */
        int depth_pid[3] = {0, 0, 0};
        char nm[3][32] = {"", "", ""};
        for (const char *l = rr.out; (l = strstr(l, "row ")); l++) {
            int d, pid;
            char name[32], path[96];
            if ((l == rr.out || l[-1] == '\n') && sscanf(l, "row %d %31s %95s %d", &d, name, path, &pid) == 4 && d >= 0 &&
                d < 3 && !depth_pid[d]) {
                depth_pid[d] = pid;
                snprintf(nm[d], sizeof nm[d], "%s", name);
            }
        }
        ck_assert_msg(!strcmp(nm[0], "Fetch") && !strcmp(nm[1], "Connection") &&
                          (!strcmp(nm[2], "Connection") || !strcmp(nm[2], "ConnectionExchange")) &&
                          depth_pid[0] != depth_pid[1] && depth_pid[1] != depth_pid[2] && depth_pid[0] != depth_pid[2],
                      "the report's waterfall of a Fetch:\n%s", rr.out);
        at_run_result_free(&rr);
    }
    if (getenv("AT_PRINT")) {
        const char *pargs[20] = {"tree"};
        for (size_t i = 0; i < nf; i++)
            pargs[1 + i] = files[i];
        at_run_result pr;
        at_tool_run(&pr, pargs);
        printf("%s", pr.out);
        at_run_result_free(&pr);
    }
    if (!why)
        at_run_result_free(&r);
    at_strv_free(files);
    at_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    /* Debian's curl does not run with a sanitizer's runtime preloaded (it hangs in setlocale with
     * libasan alone, untraced), and every test here asks with curl */
    const char *asan = getenv("ACTTRACE_ASAN");
    bool skip = asan && *asan == '1';
    if (skip)
        printf("test_crossproc: skipped under the sanitizer: curl hangs with libasan preloaded, shim or not\n");
    Suite *su = suite_create("crossproc");
    TCase *tc = tcase_create("loopback");
    tcase_set_timeout(tc, 0);
    tcase_add_checked_fixture(tc, NULL, netns_down); /* a failed check leaves no namespace behind */
    if (!skip) {
        tcase_add_test(tc, test_curl_to_http_server_v4);
        tcase_add_test(tc, test_curl_to_http_server_v6);
        tcase_add_test(tc, test_curl_over_unix_socket);
        tcase_add_test(tc, test_keep_alive_exchanges);
        tcase_add_test(tc, test_keep_alive_exchanges_off);
        tcase_add_test(tc, test_traceparent);
        tcase_add_test(tc, test_clocks_of_two_hosts);
        tcase_add_test(tc, test_three_hosts);
    }
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
