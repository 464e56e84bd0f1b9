/* test_truth_time.c: one time line for the files of one machine. Every file's timestamps are
 * CLOCK_MONOTONIC ns, whatever clock the events read (runtime/clock.c), so the files of separate
 * processes, each with its own TSC calibration, agree to the microsecond; and a child process's
 * activity nests under the activity that started it even when that one stopped first. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"
#include "at_tracegen.h"

typedef struct mark {
    char name[8];
    int pid;
    unsigned long long before, after;
} mark;

static int read_marks(const char *out, mark *m, int max)
{
    int n = 0;
    for (const char *p = strstr(out, "mark "); p && n < max; p = strstr(p + 1, "\nmark ")) {
        if (*p == '\n') p++;
        if (sscanf(p, "mark %7s %d %llu %llu", m[n].name, &m[n].pid, &m[n].before, &m[n].after) == 4)
            n++;
    }
    return n;
}

/* The file time of event name in process pid's file. */
static unsigned long long mark_time(const at_session *s, int pid, const char *name)
{
    at_trace t;
    ck_assert_msg(at_session_load_pid(s, pid, &t), "no file of pid %d in %s", pid, s->dir);
    long i = at_find(&t, NULL, name, 0);
    ck_assert_msg(i >= 0, "no %s event in pid %d's file", name, pid);
    unsigned long long ts = t.ev[i].timestamp;
    at_trace_free(&t);
    return ts;
}

START_TEST(test_files_share_one_time_line)
{
    at_session s;
    const char *argv[] = {"clock_procs", "parent", NULL};
    ck_assert_int_eq(at_session_run(&s, "clock", argv, NULL), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace, "%s", at_session_describe(&s, d, sizeof d));
    mark m[3];
    ck_assert_int_eq(read_marks(s.r.out, m, 3), 3);
    ck_assert_str_eq(m[0].name, "A");
    ck_assert_str_eq(m[1].name, "B");
    ck_assert_str_eq(m[2].name, "C");
    ck_assert_int_ne(m[0].pid, m[1].pid);
    unsigned long long prev = 0;
    for (int i = 0; i < 3; i++) {
        unsigned long long ts = mark_time(&s, m[i].pid, m[i].name);
        /* within the CLOCK_MONOTONIC reads around it, to the microsecond */
        ck_assert_msg(ts + 1000 >= m[i].before && ts <= m[i].after + 1000,
                      "%s (pid %d) at %llu ns in its file, read between %llu and %llu", m[i].name,
                      m[i].pid, ts, m[i].before, m[i].after);
        ck_assert_msg(ts > prev, "%s at %llu is not after the mark before it (%llu)", m[i].name, ts, prev);
        prev = ts;
    }
    at_session_free(&s);
}
END_TEST

START_TEST(test_child_nests_under_stopped_creator)
{
    at_session s;
    const char *argv[] = {"clock_procs", "parent", NULL};
    ck_assert_int_eq(at_session_run(&s, "nest", argv, NULL), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace, "%s", at_session_describe(&s, d, sizeof d));
    char **files = at_trace_files(s.dir);
    ck_assert_uint_eq(at_strv_len(files), 2);
    at_run_result r;
    const char *args[] = {"tree", files[0], files[1], NULL};
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(r.exited && r.status == 0, "tree: %s", r.err);
    /* the Parent stopped 20 ms before the Child started, in another process: still its child */
    const char *pl = strstr(r.out, "Parent //1/1 pid ");
    const char *cl = strstr(r.out, "\n  Child //1/1 pid ");
    ck_assert_msg(pl == r.out && cl && !strstr(r.out, "from pid"), "tree:\n%s", r.out);
    at_run_result_free(&r);
    at_strv_free(files);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("truth_time");
    TCase *tc = tcase_create("time");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_files_share_one_time_line);
    tcase_add_test(tc, test_child_nests_under_stopped_creator);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
