/* test_callbacks: the current activity flows through callback APIs of real Debian libraries (GLib,
 * libuv, libevent, gcc's libgomp) and POSIX SIGEV_THREAD, read back from the trace: each callback runs in the activity current
 * where it was submitted, on the thread the API runs it on; a pool thread carries nothing from one
 * item to the next; the APIs' own semantics (destroy notify once, removal by data, sigev values,
 * repeated timeouts) are unchanged. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"

static void run(at_session *s, const char *fixture, const char *tag)
{
    const char *argv[] = {fixture, NULL};
    ck_assert_int_eq(at_session_run(s, tag, argv, NULL), 0);
    char d[1024];
    ck_assert_msg(s->r.exited && s->r.status == 0 && s->has_trace && s->load_rc == 0, "%s",
                  at_session_describe(s, d, sizeof d));
}

/* The path of the first Start named name ("" if none). */
static const char *start_path(const at_trace *t, const char *name)
{
    long i = at_find(t, NULL, name, 0);
    ck_assert_msg(i >= 0, "no %s", name);
    return t->ev[i].act_path;
}

/* The marks named name with Value v, all in path, on thread tid (0: any but main). */
static int marks_in(const at_trace *t, const char *name, const char *v, const char *path,
                    uint64_t not_tid, uint64_t *tid_out)
{
    int n = 0;
    for (long i = at_find_field(t, name, "Value", v, 0); i >= 0;
         i = at_find_field(t, name, "Value", v, (size_t)i + 1)) {
        ck_assert_msg(strcmp(t->ev[i].act_path, path) == 0, "%s %s ran in '%s', want '%s'", name, v,
                      t->ev[i].act_path, path);
        if (not_tid)
            ck_assert_uint_ne(t->ev[i].thread, not_tid);
        if (tid_out)
            *tid_out = t->ev[i].thread;
        n++;
    }
    return n;
}

/* Every Receive in path comes after a Send in path, on another thread, by the file's timestamps: a
 * hop never looks as if it arrived before it left. Returns the Receives seen. */
static int receives_after_sends(const at_trace *t, const char *path)
{
    int n = 0;
    for (long r = at_find(t, "acttrace-flow", "TransferReceive", 0); r >= 0;
         r = at_find(t, "acttrace-flow", "TransferReceive", (size_t)r + 1)) {
        if (strcmp(t->ev[r].act_path, path) != 0)
            continue;
        bool before = false;
        for (long s = at_find(t, "acttrace-flow", "TransferSend", 0); s >= 0;
             s = at_find(t, "acttrace-flow", "TransferSend", (size_t)s + 1))
            before |= strcmp(t->ev[s].act_path, path) == 0 && t->ev[s].thread != t->ev[r].thread &&
                      t->ev[s].timestamp < t->ev[r].timestamp;
        ck_assert_msg(before, "Receive in %s at %llu has no earlier Send", path,
                      (unsigned long long)t->ev[r].timestamp);
        n++;
    }
    return n;
}

/* Transfer events (TransferSend/TransferReceive) in path, all on thread tid (0: any thread). */
static int transfers(const at_trace *t, const char *name, const char *path, uint64_t tid)
{
    int n = 0;
    for (long i = at_find(t, "acttrace-flow", name, 0); i >= 0;
         i = at_find(t, "acttrace-flow", name, (size_t)i + 1))
        if (strcmp(t->ev[i].act_path, path) == 0) {
            if (tid)
                ck_assert_uint_eq(t->ev[i].thread, tid);
            n++;
        }
    return n;
}

START_TEST(glib_sources_and_thread_pool)
{
    at_session s;
    run(&s, "glib_flow", "glib");
    const at_trace *t = &s.t;
    /* semantics unchanged: removal by data, destroy notify once, a timeout three times; a pool's
     * sort function, item-free function and move-to-front see the program's own pointers */
    ck_assert_str_eq(s.r.out, "removed 3/1 destroyed 4 ran 3\n"
                              "sorted 14,11,12,13 moved 1 freed 43 bad 0\n");
    ck_assert_uint_eq(at_count(t, NULL, "Ran") , 5);
    long job = at_find(t, NULL, "JobStart", 0);
    uint64_t main_tid = t->ev[job].thread;
    const char *jp = t->ev[job].act_path;
    uint64_t loop_tid = 0;
    ck_assert_int_eq(marks_in(t, "Ran", "1", jp, main_tid, &loop_tid), 1);  /* g_idle_add */
    ck_assert_int_eq(marks_in(t, "Ran", "2", jp, main_tid, NULL), 3);       /* g_timeout_add x3 */
    ck_assert_int_eq(marks_in(t, "Ran", "3", jp, main_tid, NULL), 1);       /* invoke */
    ck_assert_int_eq(marks_in(t, "Ran", "-1", "", 0, NULL), 0);
    ck_assert_int_eq(marks_in(t, "Child", "1", jp, main_tid, NULL), 1); /* g_thread_new inherits */
    uint64_t io_tid = 0, reap_tid = 0; /* I/O and child watches: on the loop thread, in Job */
    ck_assert_int_eq(marks_in(t, "Io", "1", jp, main_tid, &io_tid), 1);
    ck_assert_int_eq(marks_in(t, "Reaped", "7", jp, main_tid, &reap_tid), 1);
    ck_assert_int_eq(marks_in(t, "Io2", "1", jp, main_tid, NULL), 1); /* g_source_set_callback */
    ck_assert_uint_eq(io_tid, loop_tid);
    ck_assert_uint_eq(reap_tid, loop_tid);
    /* g_timeout_add_once and glib-unix.h's fd watches and signal sources: on the loop thread, in
     * Job, with the program's data and the source's own arguments */
    static const char *const more[] = {"Once", "UnixFd", "UnixFd2", "Sig"};
    for (size_t k = 0; k < sizeof more / sizeof *more; k++) {
        uint64_t tid = 0;
        ck_assert_msg(marks_in(t, more[k], "1", jp, main_tid, &tid) == 1, "%s", more[k]);
        ck_assert_uint_eq(tid, loop_tid);
    }
    /* the pool: one thread ran all three items, each in its own submitter's activity or none */
    uint64_t pool_tid = 0, t2 = 0, t3 = 0;
    ck_assert_int_eq(marks_in(t, "Item", "1", start_path(t, "P1Start"), main_tid, &pool_tid), 1);
    ck_assert_int_eq(marks_in(t, "Item", "2", "", main_tid, &t2), 1);
    ck_assert_int_eq(marks_in(t, "Item", "3", start_path(t, "P3Start"), main_tid, &t3), 1);
    ck_assert_uint_eq(pool_tid, t2);
    ck_assert_uint_eq(pool_tid, t3);
    ck_assert_uint_ne(pool_tid, loop_tid);
    /* GLib made the pool thread lazily inside the push under P1: it began in no activity */
    for (long i = at_find(t, "acttrace-shim", "ThreadBegin", 0); i >= 0;
         i = at_find(t, "acttrace-shim", "ThreadBegin", (size_t)i + 1))
        if (t->ev[i].thread == pool_tid)
            ck_assert_str_eq(t->ev[i].act_path, "");
    /* each hop is a transfer: a Receive on the running thread naming the activity */
    bool recv = false;
    for (long i = at_find(t, "acttrace-flow", "TransferReceive", 0); i >= 0;
         i = at_find(t, "acttrace-flow", "TransferReceive", (size_t)i + 1))
        recv |= t->ev[i].thread == loop_tid && strcmp(t->ev[i].act_path, jp) == 0;
    ck_assert(recv);
    /* the sorted pool's items ran in their own submitter's activity or none; the dropped ones were
     * given to the item-free function without running */
    const char *sp = start_path(t, "SStart");
    ck_assert_int_eq(marks_in(t, "Item", "13", sp, main_tid, NULL), 1);
    ck_assert_int_eq(marks_in(t, "Item", "12", sp, main_tid, NULL), 1);
    ck_assert_int_eq(marks_in(t, "Item", "14", sp, main_tid, NULL), 1);
    ck_assert_int_eq(marks_in(t, "Item", "11", "", main_tid, NULL), 1);
    ck_assert_uint_eq(at_count(t, NULL, "Item"), 9);
    /* the thread set_max_threads started inside G is the pool's: it began in none, and ran item 32
     * (pushed in none) in none */
    uint64_t gt = 0, gt2 = 0;
    ck_assert_int_eq(marks_in(t, "Item", "31", start_path(t, "GStart"), main_tid, &gt), 1);
    ck_assert_int_eq(marks_in(t, "Item", "32", "", main_tid, &gt2), 1);
    ck_assert_uint_eq(gt, gt2);
    int gbegin = 0;
    for (long i = at_find(t, "acttrace-shim", "ThreadBegin", 0); i >= 0;
         i = at_find(t, "acttrace-shim", "ThreadBegin", (size_t)i + 1))
        if (t->ev[i].thread == gt) {
            ck_assert_str_eq(t->ev[i].act_path, "");
            gbegin++;
        }
    ck_assert_int_eq(gbegin, 1);
    ck_assert_int_eq(at_find_field(t, "Item", "Value", "21", 0), -1);
    ck_assert_int_eq(at_find_field(t, "Item", "Value", "22", 0), -1);
    ck_assert_uint_eq(at_count(t, NULL, "Freed"), 2);
    ck_assert_int_ge(receives_after_sends(t, sp), 3);
    ck_assert_int_ge(receives_after_sends(t, start_path(t, "P1Start")), 1);
    at_session_free(&s);
}
END_TEST

/* GLib's own service threads (GIO's D-Bus worker here) begin in no activity, whoever's call made
 * GLib start them: the worker serves every connection and activity after. A thread of the
 * program's own (g_thread_new of a program function) inherits. */
START_TEST(glib_service_thread_begins_in_none)
{
    at_session s;
    run(&s, "glib_dbus", "gdbus");
    const at_trace *t = &s.t;
    ck_assert_str_eq(s.r.out, "ok 3 filters 6\n");
    long first = at_find(t, NULL, "FirstStart", 0);
    uint64_t main_tid = t->ev[first].thread;
    const char *fp = t->ev[first].act_path, *sp = start_path(t, "SecondStart");
    uint64_t server_tid = 0, in_tid = 0, out_tid = 0;
    ck_assert_int_eq(marks_in(t, "Server", "1", fp, main_tid, &server_tid), 1);
    /* replies come in from the socket: the worker runs their filter in none, not in First */
    ck_assert_int_eq(marks_in(t, "Filter", "1", "", main_tid, &in_tid), 3);
    /* what main sends inside Second, the worker writes for Second */
    ck_assert_int_eq(marks_in(t, "Filter", "0", sp, main_tid, &out_tid), 3);
    ck_assert_uint_eq(in_tid, out_tid);
    ck_assert_uint_ne(in_tid, server_tid);
    /* the worker began in none, though the thread whose call started it was in First */
    long begin = -1;
    for (long i = at_find(t, "acttrace-shim", "ThreadBegin", 0); i >= 0;
         i = at_find(t, "acttrace-shim", "ThreadBegin", (size_t)i + 1))
        if (t->ev[i].thread == in_tid)
            begin = i;
    ck_assert_msg(begin >= 0, "no ThreadBegin of the D-Bus worker");
    ck_assert_str_eq(t->ev[begin].act_path, "");
    uint64_t parent = 0;
    ck_assert(at_field_u64(&t->ev[begin], "ParentThread", &parent));
    ck_assert_msg(parent == server_tid || parent == main_tid, "worker made by %llu",
                  (unsigned long long)parent);
    /* GLib's own worker "gmain" (GIO's GTask attaches to it when the connections are set up) is
     * started from inside libglib, never through g_thread_new's symbol: the shim tells it by the
     * GThread pthread_create is handed, which a sanitizer's pthread_create hides. Every thread but
     * the program's server thread began in none. */
    int others = 0;
    for (long i = at_find(t, "acttrace-shim", "ThreadBegin", 0); i >= 0;
         i = at_find(t, "acttrace-shim", "ThreadBegin", (size_t)i + 1)) {
        if (t->ev[i].thread == server_tid || t->ev[i].thread == in_tid)
            continue;
        others++;
        if (!getenv("ACTTRACE_ASAN"))
            ck_assert_msg(strcmp(t->ev[i].act_path, "") == 0, "thread %llu began in %s",
                          (unsigned long long)t->ev[i].thread, t->ev[i].act_path);
    }
    ck_assert_int_ge(others, 1);
    at_session_free(&s);
}
END_TEST

/* g_task_run_in_thread (GIO): the task function runs on GIO's pool thread in the activity current
 * at submit, and its completion comes back to main's context (an idle source GIO makes by hand) in
 * that same activity; the task submitted in none runs and completes in none. main runs its loop in
 * no activity, so nothing here can be in T1 or T2 except by flow. */
START_TEST(glib_gtask_run_in_thread)
{
    at_session s;
    run(&s, "glib_gtask", "gtask");
    const at_trace *t = &s.t;
    ck_assert_str_eq(s.r.out, "ok 100\n");
    long t1 = at_find(t, NULL, "T1Start", 0);
    uint64_t main_tid = t->ev[t1].thread;
    const char *p1 = t->ev[t1].act_path, *p2 = start_path(t, "T2Start");
    uint64_t w1 = 0, w2 = 0, w3 = 0, d1 = 0, d2 = 0, d3 = 0;
    ck_assert_int_eq(marks_in(t, "Work", "1", p1, main_tid, &w1), 1);
    ck_assert_int_eq(marks_in(t, "Work", "2", p2, main_tid, &w2), 1);
    ck_assert_int_eq(marks_in(t, "Work", "3", "", main_tid, &w3), 1);
    ck_assert_int_eq(marks_in(t, "Done", "1", p1, 0, &d1), 1);
    ck_assert_int_eq(marks_in(t, "Done", "2", p2, 0, &d2), 1);
    ck_assert_int_eq(marks_in(t, "Done", "3", "", 0, &d3), 1);
    ck_assert_uint_eq(d1, main_tid); /* back on main's context */
    ck_assert_uint_eq(d2, main_tid);
    ck_assert_uint_eq(d3, main_tid);
    /* each hop is a transfer: Receive on the pool thread, then on main, naming T1 */
    int recv_pool = 0, recv_main = 0;
    for (long i = at_find(t, "acttrace-flow", "TransferReceive", 0); i >= 0;
         i = at_find(t, "acttrace-flow", "TransferReceive", (size_t)i + 1))
        if (strcmp(t->ev[i].act_path, p1) == 0) {
            recv_pool += t->ev[i].thread == w1;
            recv_main += t->ev[i].thread == main_tid;
        }
    ck_assert_int_eq(recv_pool, 1);
    ck_assert_int_eq(recv_main, 1);
    /* run_in_thread_sync: on a pool thread, in T4 */
    ck_assert_int_eq(marks_in(t, "Work", "4", start_path(t, "T4Start"), main_tid, NULL), 1);
    at_session_free(&s);
}
END_TEST

START_TEST(sigev_thread_timer_and_mq_notify)
{
    at_session s;
    run(&s, "sigev_flow", "sigev");
    const at_trace *t = &s.t;
    ck_assert_str_eq(s.r.out, "ok\n");
    long tm = at_find(t, NULL, "TimerStart", 0);
    uint64_t main_tid = t->ev[tm].thread;
    ck_assert_int_eq(marks_in(t, "Tick", "42", t->ev[tm].act_path, main_tid, NULL), 1);
    ck_assert_int_eq(marks_in(t, "Notified", "7", start_path(t, "QueueStart"), main_tid, NULL), 1);
    at_session_free(&s);
}
END_TEST

START_TEST(libuv_work_timer_async)
{
    at_session s;
    run(&s, "uv_flow", "uv");
    const at_trace *t = &s.t;
    ck_assert_str_eq(s.r.out, "ok\n");
    long job = at_find(t, NULL, "JobStart", 0);
    uint64_t main_tid = t->ev[job].thread;
    const char *jp = t->ev[job].act_path;
    uint64_t w = 0, a = 0, tm = 0, as = 0;
    ck_assert_int_eq(marks_in(t, "Work", "1", jp, main_tid, &w), 1);   /* on a pool thread */
    uint64_t w2 = 0;
    ck_assert_int_eq(marks_in(t, "Work", "2", "", main_tid, &w2), 1);  /* queued in none */
    ck_assert_int_eq(marks_in(t, "After", "0", jp, 0, &a), 1);         /* on the loop thread */
    ck_assert_uint_eq(a, main_tid);
    /* the after callback of work queued with none runs as it is, in the loop thread's activity
     * (Job): not in the none of the pool thread whose internal async send woke the loop */
    ck_assert_int_eq(marks_in(t, "After", "2", jp, 0, NULL), 1);
    ck_assert_int_eq(marks_in(t, "Timer", "1", jp, 0, &tm), 1);
    ck_assert_uint_eq(tm, main_tid);
    ck_assert_int_eq(marks_in(t, "Async", "1", start_path(t, "SenderStart"), 0, &as), 1);
    /* request callbacks ran on the loop thread (in Job) in Req, where the requests were made,
     * also along chains of requests made inside the callbacks */
    const char *rq = start_path(t, "ReqStart");
    static const char *const reqs[] = {"FsOpen", "FsRead", "FsClose", "Dns", "Random"};
    for (size_t i = 0; i < sizeof reqs / sizeof *reqs; i++) {
        uint64_t on = 0;
        ck_assert_int_eq(marks_in(t, reqs[i], "1", rq, 0, &on), 1);
        ck_assert_uint_eq(on, main_tid);
    }
    ck_assert_int_eq(marks_in(t, "Idle", "1", rq, 0, NULL), 1);
    ck_assert_int_eq(at_find_field(t, "Idle", "Value", "2", 0), -1);
    static const char *const tcp[] = {"Connect", "Wrote", "Shut"};
    for (size_t i = 0; i < sizeof tcp / sizeof *tcp; i++)
        ck_assert_int_eq(marks_in(t, tcp[i], "0", rq, 0, NULL), 1);
    /* per-handle callbacks run in the activity of the call that set them: the connection callback
     * in Srv (uv_listen), the connection's reads in Conn (uv_read_start), started in the former */
    const char *sv = start_path(t, "SrvStart"), *cn = start_path(t, "ConnStart");
    ck_assert_int_eq(marks_in(t, "Accepted", "0", sv, 0, NULL), 1);
    ck_assert_str_eq(t->ev[at_find(t, NULL, "ConnStart", 0)].rel_path, sv);
    ck_assert_int_eq(marks_in(t, "SrvRead", "5", cn, 0, NULL), 1);
    ck_assert_int_eq(marks_in(t, "SrvEof", "1", cn, 0, NULL), 1);
    ck_assert_int_ge(at_find(t, NULL, "ConnStop", 0), 0);
    /* the sender thread, made with uv_thread_create inside Job, inherited Job */
    long snd = at_find(t, NULL, "SenderStart", 0);
    ck_assert_str_eq(t->ev[snd].rel_path, jp);
    ck_assert_uint_ne(t->ev[snd].thread, main_tid);
    ck_assert_uint_eq(as, main_tid);
    /* libuv's pool threads, started by a uv_fs_stat inside Fs, began in none */
    int begins = 0;
    for (long i = at_find(t, "acttrace-shim", "ThreadBegin", 0); i >= 0;
         i = at_find(t, "acttrace-shim", "ThreadBegin", (size_t)i + 1))
        if (t->ev[i].thread == w || t->ev[i].thread == w2) {
            ck_assert_str_eq(t->ev[i].act_path, "");
            begins++;
        }
    ck_assert_int_eq(begins, w == w2 ? 1 : 2);
    at_session_free(&s);
}
END_TEST

START_TEST(libevent_add_and_once)
{
    at_session s;
    run(&s, "ev_flow", "ev");
    const at_trace *t = &s.t;
    /* event_get_callback(_arg) and bufferevent_getcb still give the program's, and freeing a
     * bufferevent (whose finalizer reads its own events' arguments) did not crash */
    ck_assert_str_eq(s.r.out, "ok 1 1\n");
    long rd = at_find(t, NULL, "ReaderStart", 0);
    uint64_t main_tid = t->ev[rd].thread;
    /* the loop thread began in no activity; each callback ran in the activity of its add / once,
     * with its own argument (event_self_cbarg() gave the event itself) */
    ck_assert_int_eq(marks_in(t, "Read", "1", t->ev[rd].act_path, main_tid, NULL), 1);
    ck_assert_int_eq(marks_in(t, "Once", "1", start_path(t, "OnceStart"), main_tid, NULL), 1);
    /* a bufferevent's read callback runs in the activity of its bufferevent_setcb */
    ck_assert_int_eq(marks_in(t, "BufRead", "1", start_path(t, "BufStart"), main_tid, NULL), 1);
    at_session_free(&s);
}
END_TEST

START_TEST(openmp_regions_loops_tasks)
{
    at_session s;
    run(&s, "omp_flow", "omp");
    const at_trace *t = &s.t;
    ck_assert_str_eq(s.r.out, "ok 10\n"); /* the task reduction's descriptor reached libgomp */
    const char *rp = start_path(t, "RegionStart");
    char v[16];
    for (int i = 0; i < 4; i++) {
        snprintf(v, sizeof v, "%d", i);
        ck_assert_int_eq(marks_in(t, "Par", v, rp, 0, NULL), 1);
        ck_assert_int_eq(marks_in(t, "Bare", v, "", 0, NULL), 1); /* reused threads carry nothing */
    }
    for (int i = 0; i < 8; i++) {
        snprintf(v, sizeof v, "%d", i);
        ck_assert_int_eq(marks_in(t, "Iter", v, start_path(t, "LoopStart"), 0, NULL), 1);
        snprintf(v, sizeof v, "%d", i * 10); /* the task's firstprivate copy arrived intact */
        ck_assert_int_eq(marks_in(t, "Task", v, start_path(t, "TasksStart"), 0, NULL), 1);
    }
    /* copied through the program's copy function (a VLA) and at the data's own alignment */
    for (int i = 0; i < 4; i++) {
        int n = i + 3;
        snprintf(v, sizeof v, "%d", 100 * i * n + n * (n - 1) / 2);
        ck_assert_int_eq(marks_in(t, "VlaTask", v, start_path(t, "TasksStart"), 0, NULL), 1);
        snprintf(v, sizeof v, "%d", (1000 + i) * 2 + 1);
        ck_assert_int_eq(marks_in(t, "AlignedTask", v, start_path(t, "TasksStart"), 0, NULL), 1);
    }
    /* the team ran on more than one thread, and its threads began in no activity */
    uint64_t main_tid = t->ev[at_find(t, NULL, "RegionStart", 0)].thread;
    int others = 0;
    for (long i = at_find(t, NULL, "Par", 0); i >= 0; i = at_find(t, NULL, "Par", (size_t)i + 1))
        others += t->ev[i].thread != main_tid;
    ck_assert_int_ge(others, 1);
    for (long i = at_find(t, "acttrace-shim", "ThreadBegin", 0); i >= 0;
         i = at_find(t, "acttrace-shim", "ThreadBegin", (size_t)i + 1))
        ck_assert_str_eq(t->ev[i].act_path, "");
    /* tasks made in Inner by the single of a region in Outer run in Inner wherever they run; each
     * one another thread ran is a hop from the maker: a Send in Inner on the maker's thread, a
     * Receive in Inner on the thread that ran it, before the task's own event */
    long in = at_find(t, NULL, "InnerStart", 0);
    ck_assert_int_ge(in, 0);
    const char *ip = t->ev[in].act_path;
    uint64_t maker = t->ev[in].thread;
    int elsewhere = 0;
    for (int i = 0; i < 8; i++) {
        snprintf(v, sizeof v, "%d", i);
        uint64_t tid = 0;
        ck_assert_int_eq(marks_in(t, "InnerTask", v, ip, 0, &tid), 1);
        if (tid == maker)
            continue;
        elsewhere++;
        long mk = at_find_field(t, "InnerTask", "Value", v, 0);
        bool recv = false;
        for (long r = at_find(t, "acttrace-flow", "TransferReceive", 0); r >= 0 && r < mk;
             r = at_find(t, "acttrace-flow", "TransferReceive", (size_t)r + 1))
            recv |= t->ev[r].thread == tid && strcmp(t->ev[r].act_path, ip) == 0;
        ck_assert_msg(recv, "InnerTask %d on thread %llu has no Receive of Inner before it", i,
                      (unsigned long long)tid);
    }
    ck_assert_int_ge(elsewhere, 1);
    ck_assert_int_eq(transfers(t, "TransferSend", ip, maker), 8);
    ck_assert_int_eq(transfers(t, "TransferReceive", ip, 0), elsewhere);
    ck_assert_int_eq(receives_after_sends(t, ip), elsewhere);
    /* tasks run at a barrier inside their region, by threads already in their activity, adopt
     * nothing: Same is received once by each team thread other than main when the region starts,
     * not once per task as well (no Receive anywhere names the activity the thread was in) */
    const char *sp = start_path(t, "SameStart");
    uint64_t smaker = 0;
    for (long i = at_find(t, "acttrace-flow", "TransferSend", 0); i >= 0;
         i = at_find(t, "acttrace-flow", "TransferSend", (size_t)i + 1))
        if (strcmp(t->ev[i].act_path, sp) == 0)
            smaker = t->ev[i].thread;
    ck_assert_int_eq(transfers(t, "TransferSend", sp, smaker), 8);
    int same_elsewhere = 0;
    for (int i = 0; i < 8; i++) {
        snprintf(v, sizeof v, "%d", i);
        uint64_t tid = 0;
        ck_assert_int_eq(marks_in(t, "SameTask", v, sp, 0, &tid), 1);
        same_elsewhere += tid != smaker;
    }
    ck_assert_int_ge(same_elsewhere, 1);
    ck_assert_int_eq(transfers(t, "TransferReceive", sp, 0), 3);
    /* parallel sections and a region with task reductions (GOMP_parallel_sections,
     * GOMP_parallel_reductions) run in the activity they were started in, on every thread */
    ck_assert_int_eq(marks_in(t, "Section", "1", start_path(t, "SectStart"), 0, NULL), 1);
    ck_assert_int_eq(marks_in(t, "Section", "2", start_path(t, "SectStart"), 0, NULL), 1);
    for (int i = 0; i < 4; i++) {
        snprintf(v, sizeof v, "%d", i);
        ck_assert_int_eq(marks_in(t, "RedPar", v, start_path(t, "RedStart"), 0, NULL), 1);
    }
    for (long i = at_find(t, "acttrace-flow", "TransferReceive", 0); i >= 0;
         i = at_find(t, "acttrace-flow", "TransferReceive", (size_t)i + 1))
        ck_assert_str_ne(t->ev[i].act_path, t->ev[i].rel_path);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("callbacks");
    TCase *tc = tcase_create("apis");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, glib_sources_and_thread_pool);
    tcase_add_test(tc, glib_gtask_run_in_thread);
    tcase_add_test(tc, glib_service_thread_begins_in_none);
    tcase_add_test(tc, sigev_thread_timer_and_mq_notify);
    tcase_add_test(tc, libuv_work_timer_async);
    tcase_add_test(tc, libevent_add_and_once);
    tcase_add_test(tc, openmp_regions_loops_tasks);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
