/* test_truth_flow: the tree read back from the trace is the right one where work crosses (or seems
 * to cross) threads: the fd hand-off never makes a tree worse (a single-threaded client gets the
 * same tree with it on and off, in the fixture and in the real curl), a transfer is recorded only
 * when work changes thread and names its real sender, an fd-keyed pair started in an adopted
 * connection is its child, re-entrant hooked functions nest, and a libc function hooked by name
 * catches its LFS and fortified aliases. Each run is also compared with an untraced run of the same
 * program (exit code and output). */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "at_testlib.h"
#include "at_tracegen.h"

static char *data_path(const char *name)
{
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/tests/data/hooks/%s", AT_SOURCE_DIR, name);
    return p;
}

/* Run argv traced under config conf (a file of tests/data/hooks, or NULL) with env extra; asserts
 * it ended as the same program untraced does (exit 0, the same stdout). */
static void run_traced(at_session *s, const char *const *argv, const char *conf, const char *extra)
{
    char env0[4200];
    const char *env[3] = {NULL};
    int n = 0;
    char *cp = conf ? data_path(conf) : NULL;
    if (cp) {
        snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s", cp);
        env[n++] = env0;
    }
    if (extra)
        env[n++] = extra;
    ck_assert_int_eq(at_session_run_deadline(s, "truth", argv, env, 120), 0);
    char d[1024];
    ck_assert_msg(s->r.exited && s->r.status == 0 && s->has_trace && s->t.complete, "%s",
                  at_session_describe(s, d, sizeof d));
    char *fx = strchr(argv[0], '/') ? strdup(argv[0]) : at_fixture_path(argv[0]);
    const char *av[8];
    int k = 0;
    av[k++] = fx;
    for (int i = 1; argv[i] && k < 7; i++)
        av[k++] = argv[i];
    av[k] = NULL;
    at_run_opts o = {.argv = av, .no_preload = true, .deadline_s = 120};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 0, "untraced: %s", at_run_describe(&r, d, sizeof d));
    ck_assert_str_eq(s->r.out, r.out);
    at_run_result_free(&r);
    free(fx);
    free(cp);
}

/* The event whose activity path is path and whose name ends in Start, or NULL. */
static const at_tev *start_of(const at_trace *t, const char *path)
{
    for (size_t i = 0; i < t->n; i++) {
        size_t l = strlen(t->ev[i].name);
        if (t->ev[i].opcode == 1 && l > 5 && !strcmp(t->ev[i].name + l - 5, "Start") &&
            !strcmp(t->ev[i].act_path, path))
            return &t->ev[i];
    }
    return NULL;
}

/* The tree as text, in Start order: "Name<Parent>" per activity ("-" for a root), then "!" when it
 * has no Stop; threads are numbered in order of first appearance. The same program gives the same
 * text whatever its timing. */
static char *tree_text(const at_trace *t, const char *only)
{
    size_t cap = 65536, len = 0;
    char *out = calloc(1, cap);
    for (size_t i = 0; i < t->n; i++) {
        const at_tev *e = &t->ev[i];
        size_t l = strlen(e->name);
        if (e->opcode != 1 || l <= 5 || strcmp(e->name + l - 5, "Start") || !e->act_path[0])
            continue;
        if (only && strncmp(e->name, only, strlen(only)))
            continue;
        char parent[96];
        at_path_parent(e->act_path, parent, sizeof parent);
        const at_tev *p = parent[0] ? start_of(t, parent) : NULL;
        char stop[80];
        snprintf(stop, sizeof stop, "%.*sStop", (int)(l - 5), e->name);
        bool stopped = false;
        for (size_t k = i + 1; k < t->n && !stopped; k++)
            stopped = t->ev[k].opcode == 2 && !strcmp(t->ev[k].name, stop) &&
                      !strcmp(t->ev[k].act_path, e->act_path);
        len += (size_t)snprintf(out + len, cap - len, "%.*s<%.*s>%s ", (int)(l - 5), e->name,
                                p ? (int)strlen(p->name) - 5 : 1, p ? p->name : "-",
                                stopped ? "" : "!");
        if (len >= cap - 128)
            break;
    }
    return out;
}

static size_t count_op(const at_trace *t, uint8_t op)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n; i++)
        n += !strcmp(t->ev[i].provider, "acttrace-flow") && t->ev[i].opcode == op;
    return n;
}

/* ---------------- 1: a single-threaded client ---------------- */

/* tf_transfer (Transfer) connects (Connect around connect()), polls, writes, calls tf_work (Work):
 * the tree is three roots with a Connect and a Work each, all stopped, none adopted: the same
 * tree as with the hand-off off. */
START_TEST(test_client_same_tree_on_and_off)
{
    const char *want = "Transfer<-> Connect<Transfer> Work<Transfer> "
                       "Transfer<-> Connect<Transfer> Work<Transfer> "
                       "Transfer<-> Connect<Transfer> Work<Transfer> ";
    const char *argv[] = {"truth_flow", "client", NULL};
    at_session on, off;
    run_traced(&on, argv, "truth_client.conf", NULL);
    ck_assert_str_eq(on.r.out, "transfers 3\n");
    char *ton = tree_text(&on.t, NULL);
    if (strcmp(ton, want))
        at_trace_dump(&on.t, stderr);
    ck_assert_str_eq(ton, want);
    ck_assert_uint_eq(at_count(&on.t, "acttrace-shim", "FdTagged"), 3);
    ck_assert_uint_eq(count_op(&on.t, 240), 0); /* nothing changed thread */
    run_traced(&off, argv, "truth_client.conf", "ACTTRACE_FDFLOW=0");
    char *toff = tree_text(&off.t, NULL);
    ck_assert_str_eq(toff, ton);
    free(ton);
    free(toff);
    at_session_free(&on);
    at_session_free(&off);
}
END_TEST

/* The same with the real curl fetching three URLs from a local server in one command, with
 * Transfer on libcurl's curl_easy_perform and Connect on connect. */
START_TEST(test_curl_same_tree_on_and_off)
{
    if (access("/usr/bin/curl", X_OK) != 0 || access("/usr/bin/python3", X_OK) != 0) {
        fprintf(stderr, "test_curl_same_tree_on_and_off: curl or python3 missing, skipped\n");
        return;
    }
    const char *san = getenv("ACTTRACE_ASAN");
    if (san && *san == '1') { /* curl hangs with the sanitizer runtimes preloaded, shim or not */
        fprintf(stderr, "test_curl_same_tree_on_and_off: skipped under ACTTRACE_ASAN=1\n");
        return;
    }
    char *dir = at_tmpdir("truthcurl");
    char path[4200];
    snprintf(path, sizeof path, "%s/a.txt", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("hello\n", f);
    fclose(f);
    int port = at_free_port();
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    const char *sv[] = {"/usr/bin/python3", "-m", "http.server", ps, "--bind", "127.0.0.1", NULL};
    at_run_opts so = {.argv = sv, .no_preload = true, .cwd = dir};
    at_proc p;
    ck_assert_int_eq(at_spawn(&so, &p), 0);
    ck_assert(at_wait_listening(port));
    char url[3][64];
    for (int i = 0; i < 3; i++)
        snprintf(url[i], sizeof url[i], "http://127.0.0.1:%d/a.txt", port);
    const char *argv[] = {"/usr/bin/curl", "-sS", url[0], url[1], url[2], NULL};
    at_session on, off;
    run_traced(&on, argv, "truth_curl.conf", NULL);
    run_traced(&off, argv, "truth_curl.conf", "ACTTRACE_FDFLOW=0");
    kill(p.pid, SIGTERM);
    at_run_result r;
    at_wait(&p, &r);
    at_run_result_free(&r);
    at_rmtree(dir);
    free(dir);
    ck_assert_str_eq(on.r.out, "hello\nhello\nhello\n");
    char *ton = tree_text(&on.t, NULL), *toff = tree_text(&off.t, NULL);
    if (strcmp(ton, toff))
        at_trace_dump(&on.t, stderr);
    ck_assert_str_eq(ton, toff);
    ck_assert_uint_eq(at_count(&on.t, NULL, "TransferStart"), 3);
    /* every Connect inside a Transfer, every activity stopped */
    ck_assert_msg(!strstr(ton, "Connect<-") && !strchr(ton, '!'), "%s", ton);
    ck_assert_uint_ge(at_count(&on.t, NULL, "ConnectStart"), 1);
    ck_assert_uint_eq(count_op(&on.t, 240), 0);
    free(ton);
    free(toff);
    at_session_free(&on);
    at_session_free(&off);
}
END_TEST

/* ---------------- 2, 6: transfers only across threads, naming the sender ---------------- */

/* One thread accepts (a Connection per accepted socket) and serves the connection itself, a
 * request after each wait point: every request in the Connection, and no Receive at all. */
START_TEST(test_accepting_thread_no_receive)
{
    const char *argv[] = {"truth_flow", "accept", NULL};
    at_session s;
    run_traced(&s, argv, NULL, "ACTTRACE_ACCEPT_ACTIVITY=1");
    ck_assert_str_eq(s.r.out, "rounds 3\n");
    const at_trace *t = &s.t;
    long c = at_find(t, NULL, "ConnectionStart", 0);
    ck_assert(c >= 0);
    ck_assert_uint_eq(at_count(t, NULL, "Got"), 3);
    for (long i = at_find(t, NULL, "Got", 0); i >= 0; i = at_find(t, NULL, "Got", (size_t)i + 1))
        ck_assert_str_eq(t->ev[i].act_path, t->ev[c].act_path);
    ck_assert_uint_eq(count_op(t, 240), 0);
    at_session_free(&s);
}
END_TEST

/* main accepts, a worker serves: one Receive, on the worker, naming main as its sender and the
 * TransferId of main's Send; `acttrace tree` shows the hop main->worker. */
START_TEST(test_handoff_names_sender)
{
    const char *argv[] = {"truth_flow", "handoff", NULL};
    at_session s;
    run_traced(&s, argv, NULL, "ACTTRACE_ACCEPT_ACTIVITY=1");
    ck_assert_str_eq(s.r.out, "rounds 3\n");
    const at_trace *t = &s.t;
    long c = at_find(t, NULL, "ConnectionStart", 0);
    ck_assert(c >= 0);
    uint64_t main_tid = t->ev[c].thread, worker = 0;
    for (long i = at_find(t, NULL, "Got", 0); i >= 0; i = at_find(t, NULL, "Got", (size_t)i + 1)) {
        ck_assert_str_eq(t->ev[i].act_path, t->ev[c].act_path);
        worker = t->ev[i].thread;
    }
    ck_assert_uint_ne(worker, main_tid);
    ck_assert_uint_eq(count_op(t, 240), 1);
    long rv = at_find(t, "acttrace-flow", "TransferReceive", 0), sd = -1;
    ck_assert(rv >= 0);
    uint64_t from = 0, id = 0, sid = 0;
    ck_assert_uint_eq(t->ev[rv].thread, worker);
    ck_assert_msg(at_field_u64(&t->ev[rv], "SenderThreadId", &from), "no SenderThreadId");
    ck_assert_msg(at_field_u64(&t->ev[rv], "TransferId", &id), "no TransferId");
    ck_assert_uint_eq(from, main_tid);
    ck_assert_uint_ne(id, 0);
    for (long i = at_find(t, "acttrace-flow", "TransferSend", 0); i >= 0 && sd < 0;
         i = at_find(t, "acttrace-flow", "TransferSend", (size_t)i + 1))
        if (at_field_u64(&t->ev[i], "TransferId", &sid) && sid == id)
            sd = i;
    ck_assert_msg(sd >= 0, "no Send with TransferId %llu", (unsigned long long)id);
    ck_assert_uint_eq(t->ev[sd].thread, main_tid);
    ck_assert(at_guid_eq(&t->ev[sd].activity, &t->ev[rv].activity));
    /* the tool pairs by that */
    const char *args[] = {"tree", s.t.path, NULL};
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    char hop[64];
    snprintf(hop, sizeof hop, "transfers %llu->%llu@", (unsigned long long)main_tid,
             (unsigned long long)worker);
    ck_assert_msg(strstr(r.out, hop), "no '%s' in:\n%s", hop, r.out);
    ck_assert_msg(!strstr(r.out, "?->"), "%s", r.out);
    at_run_result_free(&r);
    at_session_free(&s);
}
END_TEST

/* libmicrohttpd in pool mode: each pool thread accepts for itself (Connection: accept4 ... close,
 * fd_key = yes) and serves the connection after its wait points: work never changes thread, so
 * there is no Receive (one per connection before, on the accepting thread itself). */
START_TEST(test_mhd_pool_no_receive)
{
    enum { NREQ = 4 };
    at_session s;
    memset(&s, 0, sizeof s);
    s.dir = at_tmpdir("truthmhd");
    int port = at_free_port();
    char ps[16], ns[16], env0[4200];
    snprintf(ps, sizeof ps, "%d", port);
    snprintf(ns, sizeof ns, "%d", NREQ);
    char *fx = at_fixture_path("mhd_server"), *conf = data_path("mhd.conf");
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s", conf);
    const char *argv[] = {fx, "pool", ps, ns, NULL}, *env[] = {env0, NULL};
    at_run_opts o = {.argv = argv, .env = env, .cwd = s.dir};
    at_proc p;
    ck_assert_int_eq(at_spawn(&o, &p), 0);
    bool up = false; /* "listening" on its stdout: a probe connection would be a connection too */
    for (int i = 0; i < 400 && !up; i++) {
        char *out = at_read_file(p.outpath, NULL);
        up = out && strstr(out, "listening");
        free(out);
        if (!up)
            usleep(25000);
    }
    int ok = 0;
    for (int i = 0; i < NREQ && up; i++) {
        int fd = at_connect_port(port);
        char buf[512];
        const char req[] = "GET /r HTTP/1.0\r\n\r\n";
        ssize_t r = fd >= 0 && write(fd, req, sizeof req - 1) == (ssize_t)sizeof req - 1
                        ? read(fd, buf, sizeof buf - 1)
                        : -1;
        ok += r > 12 && !memcmp(buf + 8, " 200", 4);
        if (fd >= 0)
            close(fd);
    }
    ck_assert_int_eq(at_wait(&p, &s.r), 0);
    ck_assert_msg(up && ok == NREQ && s.r.exited && s.r.status == 0, "%d answered: %s", ok, s.r.err);
    char *path = at_trace_file_for_pid(s.dir, s.r.pid);
    ck_assert(path);
    s.has_trace = true;
    ck_assert_int_eq(at_trace_load(path, &s.t), 0);
    ck_assert_uint_eq(at_count(&s.t, "Mhd", "ConnectionStart"), NREQ);
    ck_assert_uint_eq(count_op(&s.t, 240), 0);
    free(path);
    free(conf);
    free(fx);
    at_session_free(&s);
}
END_TEST

/* OpenMP: each region's start is a hop from the thread that starts it to each team thread, and
 * `acttrace tree` names that thread (it had paired each Receive with the activity's oldest pending
 * Send, which one team thread's Receive had already taken: ?->T, or a hop from a team thread). */
START_TEST(test_omp_region_hops_from_master)
{
    const char *argv[] = {"omp_flow", NULL};
    at_session s;
    run_traced(&s, argv, NULL, NULL);
    long rg = at_find(&s.t, NULL, "RegionStart", 0);
    ck_assert(rg >= 0);
    char master[32];
    snprintf(master, sizeof master, "%llu", (unsigned long long)s.t.ev[rg].thread);
    const char *args[] = {"tree", s.t.path, NULL};
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(!strstr(r.out, "?->"), "%s", r.out);
    static const char *const regions[] = {"Region ", "Loop ", "Outer ", "Sect ", "Red "};
    int hops = 0;
    for (char *line = r.out; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        bool region = false;
        for (size_t k = 0; k < sizeof regions / sizeof *regions; k++)
            region |= !strncmp(line, regions[k], strlen(regions[k]));
        char *x = strstr(line, "  transfers "), *end = strchr(line, '\n');
        if (!region || !x || (end && x > end))
            continue;
        for (char *h = x + 12; h && (!end || h < end) && *h != '\n';) {
            ck_assert_msg(!strncmp(h, master, strlen(master)) && h[strlen(master)] == '-',
                          "a region hop not from the master %s: %.60s", master, h);
            hops++;
            h = strchr(h, ',');
            h = h && (!end || h < end) ? h + 1 : NULL;
        }
    }
    ck_assert_int_ge(hops, 5);
    at_run_result_free(&r);
    at_session_free(&s);
}
END_TEST

/* The worker in the adopted Connection calls tf_handle (Handle), which polls: that wait point
 * does not end the adoption under the running Handle (its "Inside" mark stays in Handle, a child
 * of the Connection), and after Handle returns the request goes on in the Connection. */
START_TEST(test_wait_inside_own_activity)
{
    const char *argv[] = {"truth_flow", "handler", NULL};
    at_session s;
    run_traced(&s, argv, "truth_handle.conf", "ACTTRACE_ACCEPT_ACTIVITY=1");
    ck_assert_str_eq(s.r.out, "rounds 3\n");
    const at_trace *t = &s.t;
    long c = at_find(t, NULL, "ConnectionStart", 0);
    ck_assert(c >= 0);
    char *tt = tree_text(t, NULL);
    ck_assert_str_eq(tt, "Connection<-> Handle<Connection> Handle<Connection> Handle<Connection> ");
    free(tt);
    ck_assert_uint_eq(at_count(t, NULL, "Inside"), 3);
    for (long i = at_find(t, NULL, "Inside", 0); i >= 0; i = at_find(t, NULL, "Inside", (size_t)i + 1)) {
        const at_tev *h = start_of(t, t->ev[i].act_path);
        ck_assert_msg(h && !strcmp(h->name, "HandleStart"), "Inside in '%s'", t->ev[i].act_path);
    }
    for (long i = at_find(t, NULL, "After", 0); i >= 0; i = at_find(t, NULL, "After", (size_t)i + 1))
        ck_assert_str_eq(t->ev[i].act_path, t->ev[c].act_path);
    at_session_free(&s);
}
END_TEST

/* ---------------- 3: a keyed pair inside an adopted connection ---------------- */

/* The worker adopts the Connection by reading its socket, then opens a file (File: open ... close,
 * fd_key = yes) for each request: each File is a child of the Connection, its read inside it. */
START_TEST(test_file_in_adopted_connection)
{
    const char *argv[] = {"truth_flow", "file", "/etc/hostname", NULL};
    at_session s;
    run_traced(&s, argv, "truth_file.conf", "ACTTRACE_ACCEPT_ACTIVITY=1");
    ck_assert_str_eq(s.r.out, "rounds 3\n");
    const at_trace *t = &s.t;
    long c = at_find(t, NULL, "ConnectionStart", 0);
    ck_assert(c >= 0);
    ck_assert_uint_eq(at_count(t, NULL, "FileStart"), 3);
    ck_assert_uint_eq(at_count(t, NULL, "FileStop"), 3);
    for (long i = at_find(t, NULL, "FileStart", 0); i >= 0;
         i = at_find(t, NULL, "FileStart", (size_t)i + 1)) {
        char parent[96];
        at_path_parent(t->ev[i].act_path, parent, sizeof parent);
        if (strcmp(parent, t->ev[c].act_path))
            at_trace_dump(t, stderr);
        ck_assert_str_eq(parent, t->ev[c].act_path);
    }
    ck_assert_uint_eq(at_count(t, NULL, "Read"), 3);
    for (long i = at_find(t, NULL, "Read", 0); i >= 0; i = at_find(t, NULL, "Read", (size_t)i + 1)) {
        ck_assert(at_path_is_below(t->ev[i].act_path, t->ev[c].act_path));
        const at_tev *st = start_of(t, t->ev[i].act_path);
        ck_assert_msg(st && !strcmp(st->name, "FileStart"), "Read in %s", t->ev[i].act_path);
    }
    /* the request after each file still runs in the Connection */
    for (long i = at_find(t, NULL, "Got", 0); i >= 0; i = at_find(t, NULL, "Got", (size_t)i + 1))
        ck_assert_str_eq(t->ev[i].act_path, t->ev[c].act_path);
    at_session_free(&s);
}
END_TEST

/* ---------------- 4: function hooks nest ---------------- */

/* tf_prepare -> tf_exec -> tf_prepare ..., and tf_sync calling itself on a thread it waits for:
 * with the default config each call is a child of its caller, stopped on its own thread. */
START_TEST(test_reentrant_functions_nest)
{
    const char *argv[] = {"truth_flow", "nest", NULL};
    at_session s;
    run_traced(&s, argv, "truth_nest.conf", NULL);
    ck_assert_str_eq(s.r.out, "prepare 3 sync 2\n");
    char *tt = tree_text(&s.t, NULL);
    ck_assert_str_eq(tt, "Prepare<-> Exec<Prepare> Prepare<Exec> Exec<Prepare> Prepare<Exec> "
                         "Exec<Prepare> Prepare<Exec> Sync<-> Sync<Sync> Sync<Sync> ");
    free(tt);
    const at_trace *t = &s.t;
    for (long i = at_find(t, NULL, "SyncStart", 0); i >= 0;
         i = at_find(t, NULL, "SyncStart", (size_t)i + 1)) {
        long k = -1;
        for (long j = at_find(t, NULL, "SyncStop", 0); j >= 0 && k < 0;
             j = at_find(t, NULL, "SyncStop", (size_t)j + 1))
            if (!strcmp(t->ev[j].act_path, t->ev[i].act_path))
                k = j;
        ck_assert_msg(k >= 0, "Sync %s never stopped", t->ev[i].act_path);
        ck_assert_uint_eq(t->ev[k].thread, t->ev[i].thread);
    }
    at_session_free(&s);
}
END_TEST

/* ---------------- 5: aliases ---------------- */

/* open and read hooked by name catch the program's calls of open64, __open64_2 and __read_chk,
 * with the captures of the variant's own parameters (the size __read_chk adds is not taken for
 * n; __open64_2 has no mode: 0). */
START_TEST(test_aliases_caught)
{
    const char *argv[] = {"truth_alias", "/etc/hostname", NULL};
    at_session s;
    run_traced(&s, argv, "truth_alias.conf", NULL);
    const at_trace *t = &s.t;
    char hooked[256];
    snprintf(hooked, sizeof hooked,
             "acttrace: 2 of 2 functions hooked (2 GOT, 0 entry); aliases: open64 (open, 1 slot), __open64_2 (open, "
             "1 slot), __read_chk (read, 1 slot) [in truth_alias, pid %d]\n",
             (int)s.r.pid);
    ck_assert_msg(strstr(s.r.err, hooked), "%s", s.r.err);
    ck_assert_uint_eq(at_count(t, NULL, "OpenStart"), 3);
    ck_assert_uint_eq(at_count(t, NULL, "OpenStop"), 3);
    int late = 0;
    for (long i = at_find(t, NULL, "OpenStart", 0); i >= 0;
         i = at_find(t, NULL, "OpenStart", (size_t)i + 1)) {
        ck_assert_str_eq(at_ev_field(&t->ev[i], "path"), "\"/etc/hostname\"");
        if (!strcmp(at_ev_field(&t->ev[i], "flags"), "524288")) { /* O_CLOEXEC: __open64_2 */
            ck_assert_str_eq(at_ev_field(&t->ev[i], "mode"), "0");
            late++;
        }
    }
    ck_assert_int_eq(late, 1);
    ck_assert_uint_eq(at_count(t, NULL, "ReadStart"), 2);
    ck_assert(at_find_field(t, "ReadStart", "n", "4", 0) >= 0);
    ck_assert(at_find_field(t, "ReadStart", "n", "5", 0) >= 0);
    at_session_free(&s);
}
END_TEST

/* acttrace check names each alias and how it is bound. */
START_TEST(test_check_lists_aliases)
{
    /* acttrace check preloads the shim itself, without the sanitizer runtimes an ASan build of it
     * needs in front */
    if (getenv("ACTTRACE_ASAN"))
        return;
    char *conf = data_path("truth_alias.conf"), *fx = at_fixture_path("truth_alias");
    const char *args[] = {"check", conf, "--", fx, "/etc/hostname", NULL};
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(strstr(r.out, "  alias open64: hooked by GOT (1 slot)\n") &&
                      strstr(r.out, "  alias __open64_2: hooked by GOT (1 slot), parameters mapped") &&
                      strstr(r.out, "  alias __read_chk: hooked by GOT (1 slot), parameters mapped") &&
                      strstr(r.out, "  alias __open_2: no module imports it now"),
                  "%s", r.out);
    at_run_result_free(&r);
    free(conf);
    free(fx);
}
END_TEST

Suite *truth_flow_suite(void);
Suite *truth_flow_suite(void)
{
    Suite *s = suite_create("truth_flow");
    TCase *tc = tcase_create("flow");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_client_same_tree_on_and_off);
    tcase_add_test(tc, test_curl_same_tree_on_and_off);
    tcase_add_test(tc, test_accepting_thread_no_receive);
    tcase_add_test(tc, test_handoff_names_sender);
    tcase_add_test(tc, test_mhd_pool_no_receive);
    tcase_add_test(tc, test_omp_region_hops_from_master);
    tcase_add_test(tc, test_wait_inside_own_activity);
    tcase_add_test(tc, test_file_in_adopted_connection);
    tcase_add_test(tc, test_reentrant_functions_nest);
    tcase_add_test(tc, test_aliases_caught);
    tcase_add_test(tc, test_check_lists_aliases);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(truth_flow_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
