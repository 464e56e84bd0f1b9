/* test_thread: activity flow through pthread_create and thrd_create, several levels deep, read back
 * from the trace: each level's activity is a child of its creator's activity path, each thread
 * begins (ThreadBegin) in a copy of its creator's current activity, and a thread created before any
 * activity starts in none. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"

#define DEPTH 5

/* The Depth mark with Value v whose activity is (or is not) below path under. */
static long find_depth(const at_trace *t, long v, const char *under, bool below)
{
    char val[32];
    snprintf(val, sizeof val, "%ld", v);
    for (long i = at_find_field(t, "Depth", "Value", val, 0); i >= 0;
         i = at_find_field(t, "Depth", "Value", val, (size_t)i + 1))
        if (at_path_is_below(t->ev[i].act_path, under) == below)
            return i;
    return -1;
}

/* The latest ThreadBegin written by thread tid before event index before (tids are reused). */
static long find_begin(const at_trace *t, uint64_t tid, long before)
{
    long found = -1;
    for (long i = at_find(t, "acttrace-shim", "ThreadBegin", 0); i >= 0 && i < before;
         i = at_find(t, "acttrace-shim", "ThreadBegin", (size_t)i + 1))
        if (t->ev[i].thread == tid)
            found = i;
    return found;
}

START_TEST(test_nested_threads)
{
    at_session s;
    char depth[8];
    snprintf(depth, sizeof depth, "%d", DEPTH);
    const char *argv[] = {"threads_nested", depth, NULL};
    ck_assert_int_eq(at_session_run(&s, "nested", argv, NULL), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.load_rc == 0, "%s",
                  at_session_describe(&s, d, sizeof d));
    const at_trace *t = &s.t;
    long job = at_find(t, NULL, "JobStart", 0);
    ck_assert_msg(job >= 0, "no JobStart");
    const char *jp = t->ev[job].act_path;
    ck_assert_msg(jp[0] == '/', "JobStart has no activity path: '%s'", jp);
    uint64_t main_tid = t->ev[job].thread;

    const char *parent_path = jp;
    uint64_t parent_tid = main_tid;
    for (long lv = 1; lv <= DEPTH; lv++) {
        long i = find_depth(t, lv, jp, true);
        if (i < 0)
            at_trace_dump(t, stderr);
        ck_assert_msg(i >= 0, "no Depth %ld mark under Job %s", lv, jp);
        const at_tev *e = &t->ev[i];
        /* the level's own activity, a child of the creator's */
        char up[96];
        at_path_parent(e->act_path, up, sizeof up);
        ck_assert_msg(strcmp(up, parent_path) == 0, "level %ld activity %s is not a child of %s", lv,
                      e->act_path, parent_path);
        ck_assert_msg(e->thread != parent_tid, "level %ld ran on its creator's thread", lv);
        /* the thread began in a copy of the creator's current activity */
        long b = find_begin(t, e->thread, i);
        ck_assert_msg(b >= 0, "no ThreadBegin on thread %llu", (unsigned long long)e->thread);
        ck_assert_msg(strcmp(t->ev[b].act_path, parent_path) == 0,
                      "level %ld thread began in '%s', creator was in '%s'", lv, t->ev[b].act_path,
                      parent_path);
        uint64_t ptid = 0;
        ck_assert(at_field_u64(&t->ev[b], "ParentThread", &ptid));
        ck_assert_uint_eq(ptid, parent_tid);
        parent_path = e->act_path;
        parent_tid = e->thread;
    }
    /* the thread created before any activity: began in none, its Level is a root */
    long pre = find_depth(t, DEPTH, jp, false);
    ck_assert_msg(pre >= 0, "no Depth mark outside Job");
    long b = find_begin(t, t->ev[pre].thread, pre);
    ck_assert(b >= 0);
    ck_assert_msg(t->ev[b].act_path[0] == 0, "pre-activity thread began in '%s'", t->ev[b].act_path);
    char up[96];
    at_path_parent(t->ev[pre].act_path, up, sizeof up);
    ck_assert_msg(up[0] == 0, "pre-activity Level %s is not a root", t->ev[pre].act_path);
    /* every thread that began also ended */
    ck_assert_uint_eq(at_count(t, "acttrace-shim", "ThreadBegin"), DEPTH + 1);
    ck_assert_uint_eq(at_count(t, "acttrace-shim", "ThreadEnd"), DEPTH + 1);
    /* the creator's activity is untouched by what its threads did */
    long jstop = at_find(t, NULL, "JobStop", 0);
    ck_assert(jstop >= 0);
    ck_assert_str_eq(t->ev[jstop].act_path, jp);
    ck_assert_uint_eq(t->ev[jstop].thread, main_tid);
    at_session_free(&s);
}
END_TEST

/* ThreadEnd of each way out: 0 return, 1 pthread_exit / thrd_exit, 2 cancelled, on the thread that
 * ended, in the activity it began in (Main). */
START_TEST(test_thread_exits)
{
    at_session s;
    const char *argv[] = {"thread_exits", NULL};
    ck_assert_int_eq(at_session_run(&s, "texits", argv, NULL), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.t.complete, "%s",
                  at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(s.r.out, "cancelled 5\n");
    const at_trace *t = &s.t;
    long m = at_find(t, NULL, "MainStart", 0);
    ck_assert(m >= 0);
    static const uint64_t want[] = {0, 1, 2, 1}; /* by the fixture's Kind */
    int seen = 0;
    for (long k = at_find(t, NULL, "Kind", 0); k >= 0; k = at_find(t, NULL, "Kind", (size_t)k + 1)) {
        uint64_t kind;
        ck_assert(at_field_u64(&t->ev[k], "Value", &kind));
        ck_assert(kind < 4);
        uint64_t tid = t->ev[k].thread;
        long e = at_find(t, "acttrace-shim", "ThreadEnd", (size_t)k); /* its next end: tids are reused */
        for (; e >= 0; e = at_find(t, "acttrace-shim", "ThreadEnd", (size_t)e + 1))
            if (t->ev[e].thread == tid)
                break;
        ck_assert_msg(e >= 0, "no ThreadEnd for the thread of kind %llu", (unsigned long long)kind);
        uint64_t ek;
        ck_assert(at_field_u64(&t->ev[e], "ExitKind", &ek));
        ck_assert_msg(ek == want[kind], "kind %llu: ExitKind %llu", (unsigned long long)kind,
                      (unsigned long long)ek);
        ck_assert_str_eq(t->ev[e].act_path, t->ev[m].act_path);
        seen++;
    }
    ck_assert_int_eq(seen, 4);
    ck_assert_uint_eq(at_count(t, "acttrace-shim", "ThreadEnd"), 4);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("thread");
    TCase *tc = tcase_create("flow");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_nested_threads);
    tcase_add_test(tc, test_thread_exits);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
