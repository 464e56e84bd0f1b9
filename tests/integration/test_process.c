/* test_process: process boundaries and exit paths, read back from the files: a fork child writes
 * its own file (its pid) and keeps its activity, the hooked call it forked in (fork itself, or a
 * function of the program's) stopped in the parent's file only; exec chains link each new image's root activity
 * to the activity current at exec (RelatedActivityId), also through fork+exec, posix_spawn and
 * vfork; every exit path (return from main, exit from another thread, _exit, _Exit, SIGSEGV,
 * SIGABRT, SIGTERM, SIGBUS, SIGFPE by default action) leaves the same status as without the shim and
 * a file that reads to its end with every event before the end; a program's own handlers run. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"

#define NBEFORE 200

static void check_complete(at_session *s, const char *mode)
{
    char d[1024];
    ck_assert_msg(s->has_trace, "%s: no trace: %s", mode, at_session_describe(s, d, sizeof d));
    ck_assert_msg(s->load_rc == 0 && s->t.complete, "%s: trace does not read to its end: %s", mode,
                  at_session_describe(s, d, sizeof d));
    ck_assert_msg(at_count(&s->t, NULL, "Before") == NBEFORE, "%s: %zu of %d Before events", mode,
                  at_count(&s->t, NULL, "Before"), NBEFORE);
    ck_assert_msg(s->t.events_lost == 0, "%s: %llu events lost", mode,
                  (unsigned long long)s->t.events_lost);
    /* the marks are in the Work activity */
    long w = at_find(&s->t, NULL, "WorkStart", 0);
    ck_assert(w >= 0);
    long b = at_find(&s->t, NULL, "Before", 0);
    ck_assert_str_eq(s->t.ev[b].act_path, s->t.ev[w].act_path);
}

static void run_exit(at_session *s, const char *mode)
{
    char n[16];
    snprintf(n, sizeof n, "%d", NBEFORE);
    const char *argv[] = {"exit_paths", mode, n, NULL};
    ck_assert_int_eq(at_session_run(s, "exit", argv, NULL), 0);
}

static const struct {
    const char *mode;
    int code;   /* exit code, or -1 */
    int sig;    /* terminating signal, or 0 */
} exits[] = {
    {"return", 3, 0},  {"exit-thread", 4, 0}, {"_exit", 5, 0},        {"_Exit", 6, 0},
    {"segv", -1, SIGSEGV}, {"abort", -1, SIGABRT}, {"term", -1, SIGTERM}, {"bus", -1, SIGBUS},
    {"fpe", -1, SIGFPE},
};

START_TEST(test_exit_path)
{
    at_session s;
    run_exit(&s, exits[_i].mode);
    char d[1024];
    if (exits[_i].sig)
        ck_assert_msg(s.r.signaled && s.r.sig == exits[_i].sig, "%s: %s", exits[_i].mode,
                      at_session_describe(&s, d, sizeof d));
    else
        ck_assert_msg(s.r.exited && s.r.status == exits[_i].code, "%s: %s", exits[_i].mode,
                      at_session_describe(&s, d, sizeof d));
    ck_assert_msg(strstr(s.r.out, "before "), "%s: stdout '%s'", exits[_i].mode, s.r.out);
    check_complete(&s, exits[_i].mode);
    if (exits[_i].sig) {
        long f = at_find(&s.t, "acttrace-shim", "FatalSignal", 0);
        ck_assert_msg(f >= 0, "%s: no FatalSignal event", exits[_i].mode);
        uint64_t sig = 0;
        ck_assert(at_field_u64(&s.t.ev[f], "Signal", &sig));
        ck_assert_uint_eq(sig, (uint64_t)exits[_i].sig);
    }
    at_session_free(&s);
}
END_TEST

START_TEST(test_own_handlers_run)
{
    at_session s;
    run_exit(&s, "handler-term");
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 7, "%s", at_session_describe(&s, d, sizeof d));
    ck_assert_msg(strstr(s.r.out, "handled 15\n"), "stdout '%s'", s.r.out);
    check_complete(&s, "handler-term");
    ck_assert_int_eq(at_find(&s.t, "acttrace-shim", "FatalSignal", 0), -1);
    at_session_free(&s);
    run_exit(&s, "handler-segv");
    ck_assert_msg(s.r.exited && s.r.status == 9, "%s", at_session_describe(&s, d, sizeof d));
    ck_assert_msg(strstr(s.r.out, "handled 11\n"), "stdout '%s'", s.r.out);
    check_complete(&s, "handler-segv");
    at_session_free(&s);
}
END_TEST

/* pids printed by proc_chain ("pid <n> <mode>"), in order */
static const char *start_path_of(const at_trace *t, const char *name)
{
    long i = at_find(t, NULL, name, 0);
    ck_assert_msg(i >= 0, "no %s", name);
    return t->ev[i].act_path;
}

static int pids_of(const char *out, int *pids, int max)
{
    int n = 0;
    for (const char *p = out; (p = strstr(p, "pid ")) && n < max; p += 4)
        pids[n++] = atoi(p + 4);
    return n;
}

/* proc_chain in mode, which must exit 0 with a complete trace of its own. */
static void run_chain(at_session *s, const char *mode)
{
    const char *argv[] = {"proc_chain", mode, NULL};
    ck_assert_int_eq(at_session_run(s, mode, argv, NULL), 0);
    char d[1024];
    ck_assert_msg(s->r.exited && s->r.status == 0 && s->has_trace && s->t.complete, "%s",
                  at_session_describe(s, d, sizeof d));
}

START_TEST(test_fork_child_file)
{
    at_session s;
    run_chain(&s, "fork");
    int pids[4];
    ck_assert_int_eq(pids_of(s.r.out, pids, 4), 2);
    long ps = at_find(&s.t, NULL, "ParentStart", 0);
    ck_assert(ps >= 0);
    const char *pp = s.t.ev[ps].act_path;
    ck_assert_int_eq(at_find(&s.t, NULL, "ChildStart", 0), -1); /* not in the parent's file */
    at_trace c;
    ck_assert_msg(at_session_load_pid(&s, pids[1], &c), "no file for the child pid %d in %s", pids[1], s.dir);
    ck_assert_msg(c.complete, "child file: %s", c.err);
    ck_assert_int_eq(c.pid, pids[1]);
    long cs = at_find(&c, NULL, "ChildStart", 0);
    ck_assert(cs >= 0);
    /* the child kept its current activity: Child is a child of Parent */
    ck_assert_msg(strcmp(c.ev[cs].rel_path, pp) == 0, "child's ChildStart related %s, parent's activity %s",
                  c.ev[cs].rel_path, pp);
    /* the parent's buffered events are not written twice */
    ck_assert_int_eq(at_find(&c, NULL, "ParentStart", 0), -1);
    ck_assert_int_eq(at_find(&c, NULL, "Parent", 0), -1);
    ck_assert(at_find(&c, "acttrace-shim", "ProcessForked", 0) >= 0);
    at_trace_free(&c);
    at_session_free(&s);
}
END_TEST

/* fork() made inside a hooked call (the program's spawn_worker, or libc's fork hooked itself): the
 * call is the parent's. Its Start and its one Stop are in the parent's file; the child's return from
 * it writes nothing (a second Stop, which no Start matched, and the child's work made a root), so the
 * child's own hooked work is a child of that activity. */
static void hooked_fork(const char *conf, const char *name)
{
    char cpath[4200], env0[4300];
    snprintf(cpath, sizeof cpath, "%s/tests/data/hooks/%s", AT_SOURCE_DIR, conf);
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s", cpath);
    const char *env[] = {env0, NULL};
    const char *argv[] = {"fork_hooked", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run(&s, "forkhook", argv, env), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.t.complete && strstr(s.r.out, "child ok"),
                  "%s", at_session_describe(&s, d, sizeof d));
    int pids[4];
    ck_assert_int_eq(pids_of(s.r.out, pids, 4), 2);
    char start[64], stop[64];
    snprintf(start, sizeof start, "%sStart", name);
    snprintf(stop, sizeof stop, "%sStop", name);
    ck_assert_uint_eq(at_count(&s.t, NULL, start), 1);
    ck_assert_uint_eq(at_count(&s.t, NULL, stop), 1);
    long fs = at_find(&s.t, NULL, start, 0);
    const char *fp = s.t.ev[fs].act_path;
    at_trace c;
    ck_assert_msg(at_session_load_pid(&s, pids[1], &c), "no file for the child pid %d in %s", pids[1], s.dir);
    ck_assert_msg(c.complete, "child file: %s", c.err);
    ck_assert_msg(at_count(&c, NULL, stop) == 0, "the child wrote a %s of the parent's call", stop);
    long ws = at_find(&c, NULL, "WorkStart", 0);
    ck_assert(ws >= 0);
    ck_assert_msg(!strcmp(c.ev[ws].rel_path, fp), "%s: the child's WorkStart is related to '%s', not to %s %s", conf,
                  c.ev[ws].rel_path, name, fp);
    ck_assert_uint_eq(at_count(&c, NULL, "WorkStop"), 1);
    /* the parent's own Work, after the call returned there: a root */
    long pw = at_find(&s.t, NULL, "WorkStart", 0);
    ck_assert(pw >= 0);
    ck_assert_str_eq(s.t.ev[pw].rel_path, "");
    at_trace_free(&c);
    at_session_free(&s);
}

START_TEST(test_hooked_fork_own)
{
    hooked_fork("fork-spawn.conf", "Spawn");
}
END_TEST

START_TEST(test_hooked_fork_libc)
{
    hooked_fork("fork-libc.conf", "Fork");
}
END_TEST

/* Children forked while another thread keeps the callback registry's lock busy (libuv timer
 * restarts in a loop) use the registry at once: none inherits the lock held (each would die of its
 * own SIGALRM instead of waiting for ever), and each one's timer fires in its own activity. The
 * parent records nothing of its own (its thread's begin and end, forks in no activity): no file. */
START_TEST(test_fork_while_registry_busy)
{
    at_session s;
    const char *argv[] = {"uv_forklocks", NULL};
    ck_assert_int_eq(at_session_run(&s, "forklocks", argv, NULL), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && !s.has_trace, "%s",
                  at_session_describe(&s, d, sizeof d));
    int last = 0;
    ck_assert_msg(sscanf(s.r.out, "forks 100 ok 100\nlast %d\n", &last) == 1, "%s%s", s.r.out,
                  s.r.err);
    ck_assert_str_eq(s.r.err, "");
    at_trace c;
    ck_assert_msg(at_session_load_pid(&s, last, &c), "no file for the child pid %d in %s", last, s.dir);
    ck_assert_msg(c.complete, "child file: %s", c.err);
    long cs = at_find(&c, NULL, "ChildStart", 0), f = at_find(&c, NULL, "Fired", 0);
    ck_assert(cs >= 0 && f > cs);
    ck_assert_str_eq(c.ev[f].act_path, c.ev[cs].act_path);
    at_trace_free(&c);
    at_session_free(&s);
}
END_TEST

/* A fork glibc makes itself (daemon()) rather than through the shim's fork(): the daemon gets its
 * own complete file with ProcessForked, keeps the parent's activity, and can start threads (the
 * writer's fork handler once started the child's flusher through the shim's pthread_create while
 * another handler still held its lock, and the daemon hung there). */
START_TEST(test_daemon_child)
{
    at_session s;
    run_chain(&s, "daemon");
    ck_assert_ptr_null(strstr(s.r.out, "hung"));
    int pids[4];
    ck_assert_int_eq(pids_of(s.r.out, pids, 4), 2);
    const char *pp = start_path_of(&s.t, "ParentStart");
    at_trace c;
    ck_assert_msg(at_session_load_pid(&s, pids[1], &c), "no file for the daemon pid %d in %s", pids[1],
                  s.dir);
    ck_assert_msg(c.complete, "daemon file: %s", c.err);
    ck_assert_int_eq(c.pid, pids[1]);
    long cs = at_find(&c, NULL, "ChildStart", 0), th = at_find(&c, NULL, "DaemonThread", 0);
    ck_assert(cs >= 0 && th > cs);
    ck_assert_str_eq(c.ev[cs].rel_path, pp); /* kept the activity across the fork */
    ck_assert_str_eq(c.ev[th].act_path, c.ev[cs].act_path);
    ck_assert_uint_ne(c.ev[th].thread, c.ev[cs].thread);
    ck_assert_uint_eq(c.ev[cs].thread, (uint64_t)pids[1]); /* its own thread id, not the parent's */
    ck_assert(at_find(&c, "acttrace-shim", "ProcessForked", 0) >= 0);
    at_trace_free(&c);
    at_session_free(&s);
}
END_TEST

/* Calls glibc applies to every thread (a privilege drop whose capset raised the caller's thread
 * alone: glibc aborted the process when the shim's thread failed the setresgid the program's passed)
 * and calls the kernel refuses to a multithreaded process (unshare of a user namespace): the program
 * gets what it gets untraced, and the trace keeps the events from before and after. Whatever the
 * machine allows (not root, no user namespaces) the traced run matches the untraced one. */
static const char *const creds_modes[] = {"capdrop", "userns", "pidns"};
START_TEST(test_creds_calls_as_untraced)
{
    const char *mode = creds_modes[_i];
    char *fx = at_fixture_path("creds");
    const char *argv[] = {fx, mode, NULL};
    at_run_opts o = {.argv = argv, .no_preload = true};
    at_run_result plain;
    ck_assert_int_eq(at_run(&o, &plain), 0);
    free(fx);
    at_session s;
    const char *sargv[] = {"creds", mode, NULL};
    ck_assert_int_eq(at_session_run(&s, "creds", sargv, NULL), 0);
    char d[1024];
    ck_assert_msg(s.r.exited == plain.exited && s.r.status == plain.status,
                  "%s: untraced exit %d, traced: %s", mode, plain.status,
                  at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(s.r.out, plain.out);
    if (plain.exited && plain.status == 0) {
        ck_assert_msg(s.has_trace && s.load_rc == 0 && s.t.complete, "%s: %s", mode,
                      at_session_describe(&s, d, sizeof d));
        ck_assert_uint_eq(at_count(&s.t, NULL, "Before"), 20);
        ck_assert_uint_eq(at_count(&s.t, NULL, "After"), 20);
        /* nothing on stderr (a flusher that cannot come back is no error); with two pid 1s, each
         * has a file of its own (the second named -dup2), every file complete */
        ck_assert_msg(!strstr(s.r.err, "acttrace"), "%s: stderr: %s", mode, s.r.err);
        char **files = at_trace_files(s.dir);
        size_t in_ns = 0;
        for (size_t i = 0; files && files[i]; i++) {
            at_trace t;
            ck_assert_msg(at_trace_load(files[i], &t) == 0 && t.complete, "%s: %s: %s", mode,
                          files[i], t.err);
            in_ns += at_count(&t, NULL, "InNs");
            at_trace_free(&t);
        }
        at_strv_free(files);
        ck_assert_uint_eq(in_ns, strcmp(mode, "pidns") ? 0 : 2);
    } else {
        fprintf(stderr, "test_creds_calls_as_untraced: %s fails untraced here (%s): compared only\n",
                mode, plain.out);
    }
    at_run_result_free(&plain);
    at_session_free(&s);
}
END_TEST

/* A pattern without %p: every process another one starts gets a file of its own, and the first
 * process's file stays whole. posix_spawn and vfork children learn they are new processes from the
 * environment; the shells glibc spawns for system() carry nothing of ours, and find the plain name
 * locked by the live parent, so they (and the images they exec) name theirs after their pid. */
static const char *const started_modes[] = {"spawn", "vfork", "system"};
START_TEST(test_started_children_keep_parent_file)
{
    const char *mode = started_modes[_i];
    at_session s;
    const char *argv[] = {"proc_chain", mode, NULL};
    const char *env[] = {"ACTTRACE_OUTPUT=trace.nettrace", NULL};
    ck_assert_int_eq(at_session_run(&s, "started", argv, env), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0, "%s: %s", mode, at_session_describe(&s, d, sizeof d));
    char p[4096];
    snprintf(p, sizeof p, "%s/trace.nettrace", s.dir);
    at_trace t;
    ck_assert_msg(at_trace_load(p, &t) == 0 && t.complete, "%s: the parent's file: %s", mode, t.err);
    ck_assert_msg(at_count(&t, NULL, "ParentStart") == 1 && at_count(&t, NULL, "LeafStart") == 0,
                  "%s: trace.nettrace is not the parent's alone", mode);
    at_trace_free(&t);
    /* each leaf ("pid N leaf") wrote trace-N.nettrace, complete, with its Leaf */
    int leaves = 0;
    for (const char *q = s.r.out; (q = strstr(q, "pid ")) != NULL; q += 4) {
        int pid = atoi(q + 4);
        const char *sp = strchr(q + 4, ' ');
        if (!sp || strncmp(sp + 1, "leaf", 4) != 0)
            continue;
        snprintf(p, sizeof p, "%s/trace-%d.nettrace", s.dir, pid);
        ck_assert_msg(at_trace_load(p, &t) == 0 && t.complete, "%s: leaf %d: %s", mode, pid, t.err);
        ck_assert_uint_eq(at_count(&t, NULL, "LeafStart"), 1);
        at_trace_free(&t);
        leaves++;
    }
    ck_assert_int_eq(leaves, strcmp(mode, "system") ? 1 : 2);
    char **files = at_trace_files(s.dir);
    for (size_t i = 0; files && files[i]; i++) { /* and no other file is broken */
        ck_assert_msg(at_trace_load(files[i], &t) == 0 && t.complete, "%s: %s: %s", mode, files[i], t.err);
        at_trace_free(&t);
    }
    at_strv_free(files);
    at_session_free(&s);
}
END_TEST

START_TEST(test_exec_chain)
{
    at_session s;
    const char *argv[] = {"proc_chain", "exec", "8", NULL}; /* every exec* function once */
    ck_assert_int_eq(at_session_run(&s, "exec", argv, NULL), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0, "%s", at_session_describe(&s, d, sizeof d));
    char **files = at_trace_files(s.dir);
    ck_assert_msg(at_strv_len(files) == 9, "%zu files for 9 images in %s", at_strv_len(files), s.dir);
    /* each image's root HopStart is related to the previous image's Hop; find by Hop value */
    at_guid prev_hop = {{0}};
    for (int hop = 8; hop >= 0; hop--) {
        char v[16];
        snprintf(v, sizeof v, "%d", hop);
        bool found = false;
        for (size_t f = 0; files[f] && !found; f++) {
            at_trace t;
            at_trace_load(files[f], &t);
            long m = at_find_field(&t, "Hop", "Value", v, 0);
            if (m >= 0) {
                found = true;
                ck_assert_msg(t.complete, "%s: %s", files[f], t.err);
                ck_assert_int_eq(t.pid, s.r.pid); /* exec keeps the pid; each image its own file */
                long st = at_find(&t, NULL, "HopStart", 0);
                ck_assert(st >= 0);
                if (hop == 8)
                    ck_assert_msg(at_guid_is_zero(&t.ev[st].related), "first HopStart related %s",
                                  t.ev[st].rel_path);
                else
                    ck_assert_msg(at_guid_eq(&t.ev[st].related, &prev_hop),
                                  "hop %d: HopStart related %s is not the previous image's Hop", hop,
                                  t.ev[st].rel_path);
                prev_hop = t.ev[st].activity;
                if (hop > 0)
                    ck_assert(at_find(&t, "acttrace-shim", "ProcessExec", 0) >= 0);
            }
            at_trace_free(&t);
        }
        ck_assert_msg(found, "no file holds Hop %d", hop);
    }
    at_strv_free(files);
    at_session_free(&s);
}
END_TEST

/* forkexec / spawn / vfork: the leaf program's LeafStart is related to the parent's Parent. */
START_TEST(test_child_program_linked)
{
    static const char *modes[] = {"forkexec", "spawn", "spawnp", "vfork"};
    const char *mode = modes[_i];
    at_session s;
    const char *argv[] = {"proc_chain", mode, NULL};
    ck_assert_int_eq(at_session_run(&s, mode, argv, NULL), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace, "%s: %s", mode,
                  at_session_describe(&s, d, sizeof d));
    long ps = at_find(&s.t, NULL, "ParentStart", 0);
    ck_assert(ps >= 0);
    int pids[4];
    ck_assert_int_eq(pids_of(s.r.out, pids, 4), 2);
    char **files = at_trace_files(s.dir);
    bool found = false;
    for (size_t f = 0; files[f]; f++) {
        at_trace t;
        at_trace_load(files[f], &t);
        long ls = at_find(&t, NULL, "LeafStart", 0);
        if (ls >= 0) {
            found = true;
            ck_assert_int_eq(t.pid, pids[1]);
            ck_assert_msg(at_guid_eq(&t.ev[ls].related, &s.t.ev[ps].activity),
                          "%s: LeafStart related '%s', parent activity '%s'", mode, t.ev[ls].rel_path,
                          s.t.ev[ps].act_path);
            ck_assert(t.complete);
        }
        at_trace_free(&t);
    }
    ck_assert_msg(found, "%s: no file with LeafStart in %s", mode, s.dir);
    /* the link travelled in the environment, but the program never sees the shim's variables */
    ck_assert_msg(strstr(s.r.out, "env clean\n") && !strstr(s.r.out, "env leaked"), "%s: %s", mode,
                  s.r.out);
    /* nothing of the program ran twice: exactly one Parent mark over all files */
    size_t parents = 0;
    for (size_t f = 0; files[f]; f++) {
        at_trace t;
        at_trace_load(files[f], &t);
        parents += at_count(&t, NULL, "Parent");
        at_trace_free(&t);
    }
    ck_assert_uint_eq(parents, 1);
    at_strv_free(files);
    at_session_free(&s);
}
END_TEST

/* The file image gen of process pid writes in dir (runtime/output.c): with the default pattern
 * acttrace-%p.nettrace, acttrace-<pid>[-exec<gen>].nettrace; with trace.nettrace (no %p), the run's
 * first process writes trace[-exec<gen>].nettrace and a fork child trace-<pid>[-exec<gen>].nettrace. */
static char *image_file(const char *dir, bool with_pid, int root, int pid, int gen)
{
    char ex[32] = "", px[32] = "";
    if (gen > 0)
        snprintf(ex, sizeof ex, "-exec%d", gen);
    if (!with_pid && pid != root)
        snprintf(px, sizeof px, "-%d", pid);
    char *p = NULL;
    int r = with_pid ? asprintf(&p, "%s/acttrace-%d%s.nettrace", dir, pid, ex)
                     : asprintf(&p, "%s/trace%s%s.nettrace", dir, px, ex);
    ck_assert(r > 0);
    return p;
}

static at_trace load_image(const char *path, int pid, const char *what)
{
    at_trace t;
    ck_assert_msg(at_file_exists(path), "%s: no file %s", what, path);
    at_trace_load(path, &t);
    ck_assert_msg(t.complete, "%s: %s: %s", what, path, t.err);
    ck_assert_msg(t.pid == pid, "%s: %s is pid %d's, not %d's", what, path, (int)t.pid, pid);
    return t;
}

/* Where `ls -v` (version order, as people list them) puts name, or -1. */
static int ls_v_index(char **ls, const char *path)
{
    const char *base = strrchr(path, '/') + 1;
    for (int i = 0; ls[i]; i++)
        if (!strcmp(ls[i], base))
            return i;
    return -1;
}

/* A fork child that execs, under a process that exec'd before it forked: env -> bash -> fork ->
 * /bin/true, sshd's per-connection children, a shell under timeout. proc_chain "exec H forkexec":
 * pid P runs H+1 Hop images and then forkexec (exec generation H+1), whose fork child Q execs leaf.
 * Every image has its own complete file: Q's first image (ProcessForked, ProcessExec) is not
 * overwritten by leaf's, leaf's root activity links to forkexec's Parent, and each pid's names list in
 * the order its images ran. Both kinds of pattern, with H = 0 (the fork child's file and its exec'd
 * image's once had the same name, "-exec1") and H = 1 (once "-exec2" then "-exec1"). */
START_TEST(test_fork_child_exec_files)
{
    int hops = _i % 2;
    bool with_pid = _i < 2;
    char h[8];
    snprintf(h, sizeof h, "%d", hops);
    const char *argv[] = {"proc_chain", "exec", h, "forkexec", NULL};
    const char *env[] = {"ACTTRACE_OUTPUT=trace.nettrace", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run(&s, "forkexecfiles", argv, with_pid ? NULL : env), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0, "%s", at_session_describe(&s, d, sizeof d));
    /* "pid P exec" for each hop, "pid P forkexec", "pid Q leaf" */
    int pids[8];
    int np = pids_of(s.r.out, pids, 8);
    ck_assert_msg(np == hops + 3, "stdout: %s", s.r.out);
    int P = pids[0], Q = pids[np - 1];
    for (int k = 1; k < np - 1; k++)
        ck_assert_int_eq(pids[k], P);
    ck_assert_int_ne(Q, P);

    /* one file per image: P's hops + 2, Q's 2 */
    char **files = at_trace_files(s.dir);
    char names[2048] = "";
    for (size_t f = 0; files[f]; f++)
        snprintf(names + strlen(names), sizeof names - strlen(names), " %s", strrchr(files[f], '/') + 1);
    ck_assert_msg(at_strv_len(files) == (size_t)hops + 4, "%zu files for %d images (pattern %s, %d exec%s before the fork):%s",
                  at_strv_len(files), hops + 4, with_pid ? "with %p" : "without %p", hops + 1,
                  hops ? "s" : "", names);
    at_strv_free(files);

    /* P: Hop hops .. Hop 0, then forkexec; each image's root links to the one before */
    at_guid prev = {{0}}, parent = {{0}};
    for (int g = 0; g <= hops + 1; g++) {
        char *path = image_file(s.dir, with_pid, P, P, g);
        at_trace t = load_image(path, P, "the exec'ing process");
        bool last = g == hops + 1;
        long st = at_find(&t, NULL, last ? "ParentStart" : "HopStart", 0);
        ck_assert_msg(st >= 0, "%s: no %s", path, last ? "ParentStart" : "HopStart");
        if (g == 0)
            ck_assert(at_guid_is_zero(&t.ev[st].related));
        else
            ck_assert_msg(at_guid_eq(&t.ev[st].related, &prev), "%s: root related %s, not the image before's",
                          path, t.ev[st].rel_path);
        prev = t.ev[st].activity;
        if (!last) {
            char v[16];
            snprintf(v, sizeof v, "%d", hops - g);
            ck_assert_msg(at_find_field(&t, "Hop", "Value", v, 0) >= 0, "%s: not Hop %s's file", path, v);
            ck_assert(at_find(&t, "acttrace-shim", "ProcessExec", 0) >= 0);
        } else {
            parent = t.ev[st].activity;
            char q[16];
            snprintf(q, sizeof q, "%d", Q);
            ck_assert_msg(at_find_field(&t, "ProcessFork", "ChildPid", q, 0) >= 0, "%s: no ProcessFork of %d",
                          path, Q);
        }
        at_trace_free(&t);
        free(path);
    }

    /* Q's first image: the fork child, with its own events, not leaf's */
    char *cpath = image_file(s.dir, with_pid, P, Q, 0);
    at_trace c = load_image(cpath, Q, "the fork child");
    char p[16];
    snprintf(p, sizeof p, "%d", P);
    ck_assert_msg(at_find_field(&c, "ProcessForked", "ParentPid", p, 0) >= 0, "%s: no ProcessForked from %d",
                  cpath, P);
    ck_assert_msg(at_find_field(&c, "ProcessExec", "Path", "\"/proc/self/exe\"", 0) >= 0, "%s: no ProcessExec",
                  cpath);
    ck_assert_msg(at_find(&c, NULL, "LeafStart", 0) < 0, "%s holds the exec'd program's events", cpath);
    at_trace_free(&c);

    /* Q's second image: leaf, its root linked to forkexec's Parent through the fork and the exec */
    char *lpath = image_file(s.dir, with_pid, P, Q, 1);
    at_trace l = load_image(lpath, Q, "the fork child's exec'd program");
    long ls = at_find(&l, NULL, "LeafStart", 0);
    ck_assert_msg(ls >= 0, "%s: no LeafStart", lpath);
    ck_assert_msg(at_guid_eq(&l.ev[ls].related, &parent), "%s: LeafStart related %s, not forkexec's Parent",
                  lpath, l.ev[ls].rel_path);
    ck_assert(at_find(&l, "acttrace-shim", "ProcessForked", 0) < 0);
    at_trace_free(&l);

    /* listed in version order (ls -v), each pid's images come in the order they ran */
    char cmd[1200], *ls_out[16] = {0}, line[512];
    snprintf(cmd, sizeof cmd, "ls -v '%s'", s.dir);
    FILE *f = popen(cmd, "r");
    ck_assert(f);
    for (int i = 0; i < 15 && fgets(line, sizeof line, f);) {
        line[strcspn(line, "\n")] = 0;
        if (strstr(line, ".nettrace"))
            ls_out[i++] = strdup(line);
    }
    pclose(f);
    for (int g = 0; g <= hops; g++) {
        char *a = image_file(s.dir, with_pid, P, P, g), *b = image_file(s.dir, with_pid, P, P, g + 1);
        int ia = ls_v_index(ls_out, a), ib = ls_v_index(ls_out, b);
        ck_assert_msg(ia >= 0 && ia < ib, "ls -v lists %s (%d) after %s (%d)", a, ia, b, ib);
        free(a);
        free(b);
    }
    int ic = ls_v_index(ls_out, cpath), il = ls_v_index(ls_out, lpath);
    ck_assert_msg(ic >= 0 && ic < il, "ls -v lists %s (%d) after %s (%d)", cpath, ic, lpath, il);
    for (int i = 0; ls_out[i]; i++)
        free(ls_out[i]);
    free(cpath);
    free(lpath);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("process");
    TCase *tc = tcase_create("exit");
    tcase_set_timeout(tc, 0);
    tcase_add_loop_test(tc, test_exit_path, 0, (int)(sizeof exits / sizeof exits[0]));
    tcase_add_test(tc, test_own_handlers_run);
    suite_add_tcase(su, tc);
    TCase *tp = tcase_create("children");
    tcase_set_timeout(tp, 0);
    tcase_add_test(tp, test_fork_child_file);
    tcase_add_test(tp, test_hooked_fork_own);
    tcase_add_test(tp, test_hooked_fork_libc);
    tcase_add_test(tp, test_exec_chain);
    tcase_add_loop_test(tp, test_started_children_keep_parent_file, 0, 3);
    tcase_add_loop_test(tp, test_creds_calls_as_untraced, 0, 3);
    tcase_add_test(tp, test_fork_while_registry_busy);
    tcase_add_test(tp, test_daemon_child);
    tcase_add_loop_test(tp, test_child_program_linked, 0, 4);
    tcase_add_loop_test(tp, test_fork_child_exec_files, 0, 4);
    suite_add_tcase(su, tp);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
