/* test_truth_waits: blocked time and acttrace breakdown tell where a request's time went.
 * tests/fixtures/glib_waits runs two rounds of requests whose time goes to known places (CPU, a
 * sleep, a mutex another thread holds, a condition variable, a semaphore, a pipe read, a child
 * process, a queue behind a busy GLib pool) and prints what it measured itself. Traced with CPU
 * samples at 1000 Hz:
 *   - every wait of a request is a WaitSuspend (opcode 8, with its stack) and a WaitResume (opcode
 *     7) on the main thread, in the request's activity, with the reason its call implies; the
 *     helper and pool threads, which block in no activity, record none; the files pass acttrace
 *     verify (a Suspend written when its call returns is not older than what the writer wrote
 *     meanwhile);
 *   - acttrace breakdown --format tsv gives each request wall, cpu, blocked and queued times within
 *     10% of what the fixture measured (or 5 ms where that is more, 8 ms for CPU: samples come at
 *     the kernel's tick), and the text format names the blocking calls with their callers;
 *   - the round's figures with its children add up its requests';
 *   - ACTTRACE_WAITS=0 records no wait, and ACTTRACE_WAIT_MIN_US keeps only the longer waits. */
#include <check.h>
#include <inttypes.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"
#include "at_tracegen.h"

#define NREQ 16 /* two rounds of eight */

typedef struct truth {
    char name[16];
    double wall, cpu, waited, queued;
} truth;

static int read_truths(const char *out, truth *t, int max)
{
    int n = 0;
    for (const char *p = out; n < max && (p = strstr(p, "truth ")) != NULL; p += 6) {
        truth *x = &t[n];
        if (sscanf(p, "truth %15s %lf %lf %lf %lf", x->name, &x->wall, &x->cpu, &x->waited,
                   &x->queued) == 5)
            n++;
    }
    return n;
}

typedef struct row {
    char name[16], path[96];
    double wall, cpu, blocked, queued, other;
} row;

static int read_rows(char *out, row *r, int max)
{
    int n = 0;
    for (char *l = out; l && *l && n < max;) {
        char *nl = strchr(l, '\n');
        if (nl)
            *nl = 0;
        row *x = &r[n];
        if (sscanf(l, "%15s\t%95s\t%lf\t%lf\t%lf\t%lf\t%lf", x->name, x->path, &x->wall, &x->cpu,
                   &x->blocked, &x->queued, &x->other) == 7)
            n++;
        l = nl ? nl + 1 : NULL;
    }
    return n;
}

/* within 10% of the truth, or 5 ms where that is more (8 ms for CPU: a sample stands for the CPU
 * since the thread's last one, which the kernel's 4 ms tick may have taken just before the
 * request began) */
static void near(const char *what, const row *r, double got, double want)
{
    double tol = fmax(want * 0.10, strcmp(what, "cpu") ? 5.0 : 8.0);
    ck_assert_msg(fabs(got - want) <= tol, "%s %s: %s %.3f ms, the fixture measured %.3f ms",
                  r->name, r->path, what, got, want);
}

static const char *reason_of(const char *name)
{
    static const char *const map[][2] = {{"Sleep", "\"sleep\""},    {"Lock", "\"lock\""},
                                         {"Cond", "\"condition\""}, {"Sem", "\"semaphore\""},
                                         {"Read", "\"read\""},      {"Child", "\"child\""},
                                         {"Queue", "\"semaphore\""}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i][0], name))
            return map[i][1];
    return NULL;
}

START_TEST(test_waits_and_breakdown)
{
    const char *argv[] = {"glib_waits", "2", NULL};
    const char *env[] = {"ACTTRACE_SAMPLE_HZ=1000", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run_deadline(&s, "twaits", argv, env, 300), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.load_rc == 0, "%s",
                  at_session_describe(&s, d, sizeof d));
    truth tr[NREQ];
    ck_assert_int_eq(read_truths(s.r.out, tr, NREQ), NREQ);
    const at_trace *t = &s.t;

    /* the events: each request's wait a Suspend and a Resume on the main thread, in its activity */
    size_t nres = 0;
    for (size_t i = 0; i < t->n; i++) {
        const at_tev *e = &t->ev[i];
        if (strcmp(e->provider, "acttrace-shim") != 0 || strncmp(e->name, "Wait", 4) != 0)
            continue;
        ck_assert_msg(e->thread == (uint64_t)t->pid, "%s on thread %llu, not the main thread",
                      e->name, (unsigned long long)e->thread);
        ck_assert_msg(e->act_path[0], "%s outside any activity", e->name);
        if (strcmp(e->name, "WaitResume") != 0)
            continue;
        /* the round's own: handing the helper its next job (short, but a wait) */
        long st = (long)i;
        while (st >= 0 && (strcmp(t->ev[st].act_path, e->act_path) != 0 ||
                           t->ev[st].opcode != 1))
            st--;
        ck_assert_msg(st >= 0, "a WaitResume in %s, which never started", e->act_path);
        if (!strcmp(t->ev[st].name, "RoundStart"))
            continue;
        ck_assert_int_eq(e->opcode, 7);
        nres++;
        uint64_t ns = 0;
        ck_assert(at_field_u64(e, "BlockedNs", &ns));
        /* its Suspend: the thread's previous wait event, in the same activity, with a stack */
        long k = (long)i - 1;
        while (k >= 0 && (strcmp(t->ev[k].provider, "acttrace-shim") != 0 ||
                          strncmp(t->ev[k].name, "Wait", 4) != 0 || t->ev[k].thread != e->thread))
            k--;
        ck_assert_msg(k >= 0, "a WaitResume without its WaitSuspend");
        const at_tev *su = &t->ev[k];
        ck_assert_str_eq(su->name, "WaitSuspend");
        ck_assert_int_eq(su->opcode, 8);
        ck_assert_str_eq(su->act_path, e->act_path);
        ck_assert_str_eq(at_ev_field(su, "Reason"), at_ev_field(e, "Reason"));
        ck_assert_msg(su->nframes > 0, "a WaitSuspend without a stack");
        ck_assert_msg(ns >= 40000000 && ns < 1000000000, "BlockedNs %llu", (unsigned long long)ns);
    }
    /* per round: sleep, lock, condition, semaphore, read, child, and the Queue's semaphore */
    ck_assert_msg(nres == 14, "%zu waits recorded, the requests made 14", nres);
    for (size_t i = 0; i < t->n; i++) { /* each request's wait has its request's reason */
        const at_tev *e = &t->ev[i];
        size_t len = strlen(e->name);
        if (len < 6 || strcmp(e->name + len - 5, "Start") != 0 || !strcmp(e->name, "RoundStart"))
            continue;
        char name[16];
        snprintf(name, sizeof name, "%.*s", (int)(len - 5), e->name);
        const char *want = reason_of(name);
        size_t waits = 0;
        for (size_t j = i + 1; j < t->n; j++)
            if (!strcmp(t->ev[j].name, "WaitResume") && !strcmp(t->ev[j].act_path, e->act_path)) {
                waits++;
                ck_assert_msg(want && !strcmp(at_ev_field(&t->ev[j], "Reason"), want),
                              "%s waited for %s", name, at_ev_field(&t->ev[j], "Reason"));
            }
        ck_assert_msg(waits == (want ? 1u : 0u), "%s %s: %zu waits", name, e->act_path, waits);
    }

    /* the breakdown of the main process's file against the fixture's own figures */
    at_run_result r;
    const char *args[] = {"breakdown", "--format", "tsv", t->path, NULL};
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
    static const char head[] = "name\tpath\twall_ms\tcpu_ms\tblocked_ms\tqueued_ms\tother_ms\n";
    ck_assert_msg(!strncmp(r.out, head, sizeof head - 1), "%s", r.out);
    row rows[64];
    int nrows = read_rows(r.out, rows, 64);
    ck_assert_msg(nrows == NREQ + 2, "%d rows:\n%s", nrows, r.out);
    int seen[NREQ] = {0};
    for (int i = 0; i < nrows; i++) {
        const row *x = &rows[i];
        if (!strcmp(x->name, "Round"))
            continue;
        /* the k-th request of that name is the fixture's k-th truth of that name */
        int k = 0;
        for (int j = 0; j < i; j++)
            k += !strcmp(rows[j].name, x->name);
        int ti = -1;
        for (int j = 0, m = 0; j < NREQ; j++)
            if (!strcmp(tr[j].name, x->name) && m++ == k)
                ti = j;
        ck_assert_msg(ti >= 0, "row %s %s has no truth", x->name, x->path);
        seen[ti]++;
        const truth *w = &tr[ti];
        near("wall", x, x->wall, w->wall);
        near("cpu", x, x->cpu, w->cpu);
        near("blocked", x, x->blocked, w->waited);
        near("queued", x, x->queued, w->queued);
        double other = x->wall - x->cpu - x->blocked - x->queued;
        ck_assert_msg(x->other == fmax(0, other) || fabs(x->other - fmax(0, other)) < 0.01,
                      "%s other %.3f", x->name, x->other);
    }
    for (int j = 0; j < NREQ; j++)
        ck_assert_msg(seen[j] == 1, "request %s (%d) has %d rows", tr[j].name, j, seen[j]);
    at_run_result_free(&r);

    /* text: a round with its children, and the blocking calls with their callers */
    const char *targs[] = {"breakdown", "--name", "Round", t->path, NULL};
    ck_assert_int_eq(at_tool_run(&r, targs), 0);
    ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
    double sum_blocked = 0;
    for (int j = 0; j < NREQ / 2; j++)
        sum_blocked += tr[j].waited;
    const char *wc = strstr(r.out, "with its children: cpu ");
    double ccpu, cblocked, cqueued;
    ck_assert_msg(wc && sscanf(wc, "with its children: cpu %lf, blocked %lf, queued %lf", &ccpu,
                               &cblocked, &cqueued) == 3, "%s", r.out);
    ck_assert_msg(fabs(cblocked - sum_blocked) <= sum_blocked * 0.1,
                  "the first round's requests were blocked %.1f ms, its children say %.1f:\n%s",
                  sum_blocked, cblocked, r.out);
    at_run_result_free(&r);
    const char *sargs[] = {"breakdown", "--name", "Lock", t->path, NULL};
    ck_assert_int_eq(at_tool_run(&r, sargs), 0);
    ck_assert_msg(strstr(r.out, "blocked by: lock ") &&
                      strstr(r.out, "pthread_mutex_lock <- glib_waits!main"),
                  "%s", r.out);
    at_run_result_free(&r);
    const char *nargs[] = {"breakdown", "--name", "Sleep", t->path, NULL};
    ck_assert_int_eq(at_tool_run(&r, nargs), 0);
    ck_assert_msg(strstr(r.out, "nanosleep <- glib_waits!sleep_ms <- glib_waits!main"), "%s",
                  r.out);
    at_run_result_free(&r);

    /* with the child's file: the Child request also holds the child process's sleep */
    char **files = at_trace_files(s.dir);
    ck_assert_msg(at_strv_len(files) == 3, "%zu files", at_strv_len(files)); /* two children */
    for (int i = 0; i < 3; i++) { /* each Suspend in order with the events written before it */
        const char *vargs[] = {"verify", files[i], NULL};
        ck_assert_int_eq(at_tool_run(&r, vargs), 0);
        ck_assert_msg(r.exited && r.status == 0, "acttrace verify %s: %s%s", files[i], r.out, r.err);
        at_run_result_free(&r);
    }
    const char *margs[] = {"breakdown", "--format", "tsv", "--name", "Child", files[0], files[1],
                           files[2], NULL};
    ck_assert_int_eq(at_tool_run(&r, margs), 0);
    ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
    nrows = read_rows(r.out, rows, 64);
    ck_assert_int_eq(nrows, 2);
    for (int i = 0; i < 2; i++)
        ck_assert_msg(rows[i].blocked >= 2 * 60 * 0.9, "Child with its child process: %.1f ms",
                      rows[i].blocked);
    at_run_result_free(&r);
    at_strv_free(files);
    at_session_free(&s);
}
END_TEST

/* ACTTRACE_WAITS=0: no wait; ACTTRACE_WAIT_MIN_US=100000: only the Queue's (180 ms) */
START_TEST(test_waits_settings)
{
    const char *argv[] = {"glib_waits", "1", NULL};
    const char *off[] = {"ACTTRACE_WAITS=0", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run_deadline(&s, "twoff", argv, off, 300), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace, "%s",
                  at_session_describe(&s, d, sizeof d));
    ck_assert_uint_eq(at_count(&s.t, "acttrace-shim", "WaitSuspend"), 0);
    ck_assert_uint_eq(at_count(&s.t, "acttrace-shim", "WaitResume"), 0);
    ck_assert_uint_eq(at_count(&s.t, NULL, "SleepStart"), 1);
    at_session_free(&s);
    const char *longer[] = {"ACTTRACE_WAIT_MIN_US=100000", NULL};
    ck_assert_int_eq(at_session_run_deadline(&s, "twmin", argv, longer, 300), 0);
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace, "%s",
                  at_session_describe(&s, d, sizeof d));
    ck_assert_uint_eq(at_count(&s.t, "acttrace-shim", "WaitResume"), 1);
    long i = at_find(&s.t, "acttrace-shim", "WaitResume", 0);
    ck_assert_str_eq(at_ev_field(&s.t.ev[i], "Call"), "\"sem_wait\"");
    at_session_free(&s);
    /* a bad value: one line, the program unchanged */
    const char *bad[] = {"ACTTRACE_WAIT_MIN_US=soon", NULL};
    ck_assert_int_eq(at_session_run_deadline(&s, "twbad", argv, bad, 300), 0);
    ck_assert_msg(s.r.exited && s.r.status == 0 && strstr(s.r.err, "ACTTRACE_WAIT_MIN_US"), "%s",
                  s.r.err);
    ck_assert_msg(strstr(s.r.out, "truth Queue"), "%s", s.r.out);
    at_session_free(&s);
}
END_TEST

/* Hand-offs as TPL tasks (ACTTRACE_TASKS): with sampling on, each Send of glib_waits' two pool
 * pushes has its TaskScheduled on the sending thread, each Receive its TaskExecute Start on the
 * pool thread with the same TaskID, closed by a Stop on that thread before the next Start; none
 * carries an ActivityId, and the tree stays as it was (no Stop it cannot match). Without sampling,
 * none, unless ACTTRACE_TASKS=1 or [trace] tasks = on; ACTTRACE_TASKS=0 turns them off; a bad value
 * is one line and the program runs unchanged. */
static size_t count_tpl(const at_trace *t, const char *name)
{
    return at_count(t, "System.Threading.Tasks.TplEventSource", name);
}

START_TEST(test_tasks_setting)
{
    const char *argv[] = {"glib_waits", "1", NULL};
    const char *sampled[] = {"ACTTRACE_SAMPLE_HZ=1000", NULL};
    at_session s;
    char d[1024];
    ck_assert_int_eq(at_session_run_deadline(&s, "tks", argv, sampled, 300), 0);
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace, "%s", at_session_describe(&s, d, sizeof d));
    const at_trace *t = &s.t;
    ck_assert_uint_eq(count_tpl(t, "TaskScheduled"), 2);
    ck_assert_uint_eq(count_tpl(t, "TaskStarted"), 2);
    ck_assert_uint_eq(count_tpl(t, "TaskCompleted"), 2);
    uint64_t main_tid = 0, pool_tid = 0;
    const char *open_id = NULL;
    for (size_t i = 0; i < t->n; i++) {
        const at_tev *e = &t->ev[i];
        if (strcmp(e->provider, "System.Threading.Tasks.TplEventSource"))
            continue;
        ck_assert_msg(e->act_path[0] == 0, "%s with ActivityId %s", e->name, e->act_path);
        const char *id = at_ev_field(e, "TaskID");
        ck_assert_ptr_nonnull(id);
        if (!strcmp(e->name, "TaskScheduled")) {
            ck_assert(!main_tid || main_tid == e->thread);
            main_tid = e->thread;
            /* beside its Send, on the same thread */
            ck_assert_msg(i > 0 && !strcmp(t->ev[i - 1].name, "TransferSend") && t->ev[i - 1].thread == e->thread,
                          "TaskScheduled not right after a TransferSend");
        } else if (!strcmp(e->name, "TaskStarted")) {
            ck_assert_msg(!open_id, "a Start while another task is open");
            ck_assert(!pool_tid || pool_tid == e->thread);
            pool_tid = e->thread;
            bool scheduled = false;
            for (size_t j = 0; j < i && !scheduled; j++)
                scheduled = !strcmp(t->ev[j].name, "TaskScheduled") && !strcmp(at_ev_field(&t->ev[j], "TaskID"), id);
            ck_assert_msg(scheduled, "TaskStarted %s with no TaskScheduled before it", id);
            open_id = id;
        } else {
            ck_assert_msg(open_id && !strcmp(open_id, id) && e->thread == pool_tid,
                          "TaskCompleted %s does not close the open task %s", id, open_id ? open_id : "-");
            open_id = NULL;
        }
    }
    ck_assert_msg(main_tid && pool_tid && main_tid != pool_tid, "tasks: sender %" PRIu64 ", runner %" PRIu64,
                  main_tid, pool_tid);
    at_run_result r;
    char **files = at_trace_files(s.dir);
    const char *targs[16] = {"tree"};
    for (size_t i = 0; files[i] && i < 14; i++)
        targs[i + 1] = files[i];
    ck_assert_int_eq(at_tool_run(&r, targs), 0);
    ck_assert_msg(r.exited && r.status == 0 && !strstr(r.err, "matched no open activity") &&
                      !strstr(r.out, "Task"),
                  "%s%s", r.out, r.err);
    at_run_result_free(&r);
    at_strv_free(files);
    at_session_free(&s);

    static const struct {
        const char *env, *conf;
        size_t want;
    } cases[] = {
        {NULL, NULL, 0},                    /* no sampling: auto is off */
        {"ACTTRACE_TASKS=1", NULL, 2},      /* always */
        {NULL, "[trace]\ntasks = on\n", 2}, /* the config file's key */
        {"ACTTRACE_TASKS=0", "[trace]\ntasks = on\nsample_hz = 1000\n", 0}, /* the environment wins */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char conf[4200], cenv[4300];
        const char *env[3] = {cases[k].env, NULL, NULL};
        if (cases[k].conf) {
            snprintf(conf, sizeof conf, "%s/tasks%zu.conf", at_build_dir(), k);
            FILE *f = fopen(conf, "w");
            ck_assert_ptr_nonnull(f);
            fputs(cases[k].conf, f);
            fclose(f);
            snprintf(cenv, sizeof cenv, "ACTTRACE_CONFIG=%s", conf);
            env[cases[k].env ? 1 : 0] = cenv;
        }
        ck_assert_int_eq(at_session_run_deadline(&s, "tkc", argv, env, 300), 0);
        ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace, "case %zu: %s", k,
                      at_session_describe(&s, d, sizeof d));
        ck_assert_msg(count_tpl(&s.t, "TaskScheduled") == cases[k].want, "case %zu: %zu TaskScheduled", k,
                      count_tpl(&s.t, "TaskScheduled"));
        at_session_free(&s);
        if (cases[k].conf)
            unlink(conf);
    }
    const char *bad[] = {"ACTTRACE_TASKS=sometimes", NULL};
    ck_assert_int_eq(at_session_run_deadline(&s, "tkbad", argv, bad, 300), 0);
    ck_assert_msg(s.r.exited && s.r.status == 0 && strstr(s.r.err, "ACTTRACE_TASKS=sometimes: expected 0, 1 or auto"),
                  "%s", s.r.err);
    ck_assert_msg(strstr(s.r.out, "truth Queue"), "%s", s.r.out);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("truth_waits");
    TCase *tc = tcase_create("waits");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_waits_and_breakdown);
    tcase_add_test(tc, test_waits_settings);
    tcase_add_test(tc, test_tasks_setting);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
