/* test_activity: the activity engine against EventSource's worked examples (reference 000, sections
 * 2.1, 4.1, 4.3, 5) with the exact ids they print (modulo the root counter), every row of the
 * activity-path oracle, overflow and the depth cap, flow across threads (including into a stopped
 * activity), transfers, concurrency, and a 10-million-Start soak with flat memory. Events are read
 * back from a real trace file with the project's reader. */
#include "activity.h"
#include "activity_int.h"
#include "actpath.h"
#include "at_testlib.h"
#include "at_livevec.h"

#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define VECTORS AT_SOURCE_DIR "/../shared/activity-path-vectors.tsv"

static char *g_dir;
static char g_file[512];

static void begin(const char *tag)
{
    g_dir = at_tmpdir(tag);
    snprintf(g_file, sizeof g_file, "%s/t.nettrace", g_dir);
    at_trace_options o = {.path = g_file};
    char err[256];
    ck_assert_msg(at_trace_start(&o, err, sizeof err) == 0, "%s", err);
}

static void end(at_trace *t)
{
    at_trace_stop();
    ck_assert_msg(at_trace_load(g_file, t) == 0, "%s", t->err);
}

static void finish(at_trace *t)
{
    at_trace_free(t);
    at_rmtree(g_dir);
    free(g_dir);
}

static at_activity_kind *kind(const char *name, unsigned flags)
{
    at_activity_kind_desc d = {.name = name, .flags = flags};
    at_activity_kind *k = at_activity_kind_register(&d);
    ck_assert_ptr_nonnull(k);
    return k;
}

static at_event_type *mark_type(void)
{
    static const at_field f[] = {{"Value", NT_TYPE_INT64}};
    at_event_desc d = {.provider = "test", .name = "Mark", .level = NT_LEVEL_INFO, .nfields = 1,
                       .fields = f};
    return at_event_type_register(&d);
}

static void mark(long v)
{
    int64_t x = v;
    at_activity_event(mark_type(), &x, sizeof x, NULL, 0);
}

/* The current activity's path, "" when none (static buffer). */
static const char *cur(void)
{
    static char b[128];
    b[0] = 0;
    at_activity *a = at_activity_current();
    if (a)
        ck_assert_int_gt(at_activity_path(a, b, sizeof b), 0);
    return b;
}

static const char *path_of(at_activity *a)
{
    static char b[4][128];
    static int i;
    char *s = b[i++ & 3];
    ck_assert_int_gt(at_activity_path(a, s, 128), 0);
    return s;
}

/* Substitute the root number: "R/6/1" -> "//1/<root>/6/1". */
static const char *rp(unsigned root, const char *rest)
{
    static char b[4][128];
    static int i;
    char *s = b[i++ & 3];
    snprintf(s, 128, "//1/%u%s", root, rest);
    return s;
}

static unsigned root_of(at_activity *a)
{
    unsigned r = 0;
    ck_assert_int_eq(sscanf(path_of(a), "//1/%u", &r), 1);
    return r;
}

/* Events of the trace named name (any provider), in order; their paths in out. */
static size_t events_named(const at_trace *t, const char *name, const char **out, size_t max)
{
    size_t n = 0;
    for (long i = at_find(t, NULL, name, 0); i >= 0 && n < max; i = at_find(t, NULL, name, (size_t)i + 1))
        out[n++] = t->ev[i].act_path;
    return n;
}

/* ---- 2.1: the ten-row table ---- */

typedef struct hop {
    at_activity *cap;
    void (*fn)(void *);
    void *arg;
} hop;

static void *hop_main(void *p)
{
    hop *h = p;
    at_activity *prev = at_flow_enter(h->cap);
    h->fn(h->arg);
    at_flow_leave(prev);
    return NULL;
}

/* Run fn on a new thread inside the activity current here (what a Task does). */
static void on_thread(void (*fn)(void *), void *arg)
{
    hop h = {at_flow_capture(), fn, arg};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, hop_main, &h), 0);
    pthread_join(th, NULL);
    at_flow_release(h.cap);
}

static at_activity_kind *K_loop, *K_fork, *K_req, *K_sec, *K_db, *K_step;

static void security(void *unused)
{
    (void)unused;
    at_activity_start(K_sec, NULL, 0, NULL, 0);
    at_activity_stop(K_sec, NULL, 0, NULL, 0);
}

static void database(void *unused)
{
    (void)unused;
    at_activity_start(K_db, NULL, 0, NULL, 0);
    at_activity_stop(K_db, NULL, 0, NULL, 0);
}

static void step_with(void *which)
{
    at_activity_start(K_step, NULL, 0, NULL, 0);
    if (which) { /* //…/1/1 is another Step's child, then Security //…/1/2 */
        at_activity_start(K_step, NULL, 0, NULL, 0);
        at_activity_stop(K_step, NULL, 0, NULL, 0);
        on_thread(security, NULL);
    } else {       /* DatabaseCommand //…/3/1 then Security //…/3/2 on the same thread */
        database(NULL);
        security(NULL);
    }
    at_activity_stop(K_step, NULL, 0, NULL, 0);
}

START_TEST(table_2_1)
{
    begin("t21");
    K_loop = kind("Loop", 0);
    K_fork = kind("ForkJoin", 0);
    K_req = kind("Request", 0);
    K_sec = kind("Security", 0);
    K_db = kind("DatabaseCommand", 0);
    K_step = kind("Step", AT_ACT_RECURSIVE);
    at_activity *loop = at_activity_start(K_loop, NULL, 0, NULL, 0);
    unsigned r = root_of(loop);
    for (int i = 1; i <= 5; i++) { /* ForkJoin 1..5, then the sixth holds the request */
        at_activity_start(K_fork, NULL, 0, NULL, 0);
        at_activity_stop(K_fork, NULL, 0, NULL, 0);
    }
    at_activity_start(K_fork, NULL, 0, NULL, 0);
    at_activity_start(K_req, NULL, 0, NULL, 0);
    ck_assert_str_eq(cur(), rp(r, "/6/1"));
    step_with((void *)1);              /* //…/6/1/1 with Security //…/6/1/1/2 on another thread */
    on_thread(database, NULL);         /* DatabaseCommand //…/6/1/2 on another thread */
    on_thread(step_with, NULL);        /* //…/6/1/3: DatabaseCommand /3/1, Security /3/2 */
    at_activity_stop(K_req, NULL, 0, NULL, 0);
    at_activity_stop(K_fork, NULL, 0, NULL, 0);
    at_activity_stop(K_loop, NULL, 0, NULL, 0);
    ck_assert_str_eq(cur(), "");
    at_trace t;
    end(&t);
    /* The table's rows, in order, with //1/1 (a Loop root) replaced by our root. */
    static const struct { const char *ev, *rest; } rows[] = {
        {"RequestStart", "/6/1"},
        {"SecurityStart", "/6/1/1/2"},
        {"SecurityStop", "/6/1/1/2"},
        {"DatabaseCommandStart", "/6/1/2"},
        {"DatabaseCommandStop", "/6/1/2"},
        {"DatabaseCommandStart", "/6/1/3/1"},
        {"DatabaseCommandStop", "/6/1/3/1"},
        {"SecurityStart", "/6/1/3/2"},
        {"SecurityStop", "/6/1/3/2"},
        {"RequestStop", "/6/1"},
    };
    size_t k = 0;
    for (size_t i = 0; i < t.n; i++) {
        const at_tev *e = &t.ev[i];
        if (strncmp(e->name, "Request", 7) && strncmp(e->name, "Security", 8) &&
            strncmp(e->name, "DatabaseCommand", 15))
            continue;
        ck_assert_msg(k < AT_ARRAY_LEN(rows), "extra event %s", e->name);
        ck_assert_str_eq(e->name, rows[k].ev);
        ck_assert_str_eq(e->act_path, rp(r, rows[k].rest));
        ck_assert_uint_eq(e->opcode, strstr(e->name, "Start") ? 1 : 2);
        k++;
    }
    ck_assert_uint_eq(k, AT_ARRAY_LEN(rows));
    /* the Security and DatabaseCommand rows of /1/… ran on threads other than the Request's */
    long rq = at_find(&t, NULL, "RequestStart", 0), s1 = at_find(&t, NULL, "SecurityStart", 0);
    ck_assert_uint_ne(t.ev[rq].thread, t.ev[s1].thread);
    finish(&t);
}
END_TEST

/* ---- 4.1: forking and sequential ---- */

/* Make the root //1/5 current (the fifth root of the process: the counter set to 4). */
static at_activity *enter_1_5(at_activity_kind *k)
{
    at_activity_test_set_last_child(NULL, 4);
    at_activity *a = at_activity_start(k, NULL, 0, NULL, 0);
    ck_assert_str_eq(cur(), "//1/5");
    return a;
}

typedef struct task {
    at_activity *cap;
    at_activity_kind *k;
    pthread_barrier_t *order;
    int turn;
    char path[128];
} task;

static pthread_mutex_t turn_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_cv = PTHREAD_COND_INITIALIZER;
static int turn_now;

static void *task_main(void *p)
{
    task *t = p;
    at_activity *prev = at_flow_enter(t->cap);
    pthread_mutex_lock(&turn_lock);
    while (turn_now != t->turn)
        pthread_cond_wait(&turn_cv, &turn_lock);
    at_activity_start(t->k, NULL, 0, NULL, 0);
    snprintf(t->path, sizeof t->path, "%s", cur());
    turn_now++;
    pthread_cond_broadcast(&turn_cv);
    pthread_mutex_unlock(&turn_lock);
    at_activity_stop(t->k, NULL, 0, NULL, 0);
    at_flow_leave(prev);
    return NULL;
}

START_TEST(forking_4_1)
{
    at_activity_kind *job = kind("Job", 0), *req = kind("Request", 0), *sec = kind("Security", 0);
    enter_1_5(job);
    /* Thread A spawns task B then task C; B logs RequestStart first, C SecurityStart next. */
    task b = {.cap = at_flow_capture(), .k = req, .turn = 0};
    task c = {.cap = at_flow_capture(), .k = sec, .turn = 1};
    turn_now = 0;
    pthread_t tb, tc;
    pthread_create(&tc, NULL, task_main, &c);
    pthread_create(&tb, NULL, task_main, &b);
    pthread_join(tb, NULL);
    pthread_join(tc, NULL);
    ck_assert_str_eq(b.path, "//1/5/1");
    ck_assert_str_eq(c.path, "//1/5/2");
    ck_assert_str_eq(cur(), "//1/5"); /* A's own copy never moved */
    at_flow_release(b.cap);
    at_flow_release(c.cap);
    at_activity_stop(job, NULL, 0, NULL, 0);
}
END_TEST

START_TEST(sequential_4_1)
{
    at_activity_kind *job = kind("Job", 0), *req = kind("Request", 0), *sec = kind("Security", 0);
    enter_1_5(job);
    at_activity_start(req, NULL, 0, NULL, 0);
    ck_assert_str_eq(cur(), "//1/5/1");
    at_activity_start(sec, NULL, 0, NULL, 0);
    ck_assert_str_eq(cur(), "//1/5/1/1");
    /* properly nested (4.2): each Stop restores what was current before its Start */
    ck_assert(at_activity_stop(sec, NULL, 0, NULL, 0));
    ck_assert_str_eq(cur(), "//1/5/1");
    ck_assert(at_activity_stop(req, NULL, 0, NULL, 0));
    ck_assert_str_eq(cur(), "//1/5");
}
END_TEST

/* ---- 4.3: non-nested stops, with the ids the events carry ---- */

START_TEST(non_nested_4_3)
{
    begin("t43");
    at_activity_kind *job = kind("Job", 0), *req = kind("Request", 0), *sec = kind("Security", 0);
    enter_1_5(job);
    mark(1);                                      /* //1/5 */
    at_activity *rq = at_activity_start(req, NULL, 0, NULL, 0);
    mark(2);                                      /* //1/5/1 */
    at_activity *sc = at_activity_start(sec, NULL, 0, NULL, 0);
    mark(3);                                      /* //1/5/1/1 */
    at_activity_ref(sc);
    ck_assert(at_activity_stop(req, NULL, 0, NULL, 0)); /* kills Security, stops Request */
    (void)rq;
    ck_assert(at_activity_is_stopped(sc));
    at_activity_unref(sc);
    mark(4);                                      /* //1/5 (Security was killed) */
    ck_assert(!at_activity_stop(sec, NULL, 0, NULL, 0)); /* not alive: logged, ignored */
    mark(5);                                      /* //1/5 */
    ck_assert_str_eq(cur(), "//1/5");
    at_activity_stop(job, NULL, 0, NULL, 0);
    at_trace t;
    end(&t);
    const char *m[8];
    ck_assert_uint_eq(events_named(&t, "Mark", m, 8), 5);
    ck_assert_str_eq(m[0], "//1/5");
    ck_assert_str_eq(m[1], "//1/5/1");
    ck_assert_str_eq(m[2], "//1/5/1/1");
    ck_assert_str_eq(m[3], "//1/5");
    ck_assert_str_eq(m[4], "//1/5");
    const char *s[4];
    ck_assert_uint_eq(events_named(&t, "RequestStop", s, 4), 1);
    ck_assert_str_eq(s[0], "//1/5/1");
    /* the killed Security has no Stop of its own; the stray SecurityStop carries //1/5 */
    ck_assert_uint_eq(events_named(&t, "SecurityStop", s, 4), 1);
    ck_assert_str_eq(s[0], "//1/5");
    long i = at_find(&t, NULL, "SecurityStop", 0);
    ck_assert_str_eq(at_ev_field(&t.ev[i], "SecurityId"), "0");
    finish(&t);
}
END_TEST

/* ---- 5: recursion ---- */

START_TEST(recursion_5_default)
{
    begin("t5");
    at_activity_kind *job = kind("Job", 0), *req = kind("Request", 0);
    enter_1_5(job);
    at_activity *first = at_activity_start(req, NULL, 0, NULL, 0);
    at_activity_ref(first);
    ck_assert_str_eq(cur(), "//1/5/1");
    at_activity_start(req, NULL, 0, NULL, 0);
    ck_assert_str_eq(cur(), "//1/5/2"); /* auto stop //1/5/1 */
    ck_assert(at_activity_is_stopped(first));
    at_activity_unref(first);
    at_activity_start(req, NULL, 0, NULL, 0);
    ck_assert_str_eq(cur(), "//1/5/3");
    at_activity_start(req, NULL, 0, NULL, 0);
    ck_assert_str_eq(cur(), "//1/5/4");
    /* the auto-stop also stops what the old one started on this chain */
    at_activity_kind *sec = kind("Security", 0);
    at_activity *s = at_activity_start(sec, NULL, 0, NULL, 0);
    at_activity_ref(s);
    ck_assert_str_eq(cur(), "//1/5/4/1");
    at_activity_start(req, NULL, 0, NULL, 0);
    ck_assert_str_eq(cur(), "//1/5/5");
    ck_assert(at_activity_is_stopped(s));
    at_activity_unref(s);
    at_trace t;
    end(&t);
    const char *p[8];
    ck_assert_uint_eq(events_named(&t, "RequestStart", p, 8), 5);
    ck_assert_str_eq(p[0], "//1/5/1");
    ck_assert_str_eq(p[3], "//1/5/4");
    ck_assert_str_eq(p[4], "//1/5/5");
    ck_assert_uint_eq(at_count(&t, NULL, "RequestStop"), 0); /* auto-stops write no Stop */
    /* every Start's RelatedActivityId is what is current when it starts: after an auto-stop, the
     * stopped one's creator (what .NET 10 writes: test_actpath_live) */
    long i = at_find(&t, NULL, "RequestStart", 0);
    ck_assert_str_eq(t.ev[i].rel_path, "//1/5");
    i = at_find(&t, NULL, "RequestStart", (size_t)i + 1);
    ck_assert_str_eq(t.ev[i].rel_path, "//1/5");
    finish(&t);
}
END_TEST

START_TEST(recursion_5_recursive)
{
    at_activity_kind *job = kind("Job", 0), *req = kind("RequestR", AT_ACT_RECURSIVE);
    enter_1_5(job);
    at_activity_start(req, NULL, 0, NULL, 0);
    ck_assert_str_eq(cur(), "//1/5/1");
    at_activity_start(req, NULL, 0, NULL, 0);
    ck_assert_str_eq(cur(), "//1/5/1/1");
    at_activity_start(req, NULL, 0, NULL, 0);
    ck_assert_str_eq(cur(), "//1/5/1/1/1");
    /* a non-recursive enclosing activity is the backstop: starting it again clears them all */
    at_activity_start(job, NULL, 0, NULL, 0);
    ck_assert_str_eq(cur(), "//1/6"); /* Job //1/5 auto-stopped with its recursive children */
}
END_TEST

/* ---- the oracle ---- */

START_TEST(every_vector_row)
{
    FILE *f = fopen(VECTORS, "r");
    ck_assert_msg(f != NULL, "cannot open %s", VECTORS);
    at_activity_kind *k = kind("V", AT_ACT_RECURSIVE);
    char line[1024];
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        char pidc[32], path[256], endc[16], want[64];
        ck_assert_int_eq(sscanf(line, "%31s %255s %15s %63s", pidc, path, endc, want), 4);
        if (at_vector_row_superseded(path)) /* the live runtime's bytes differ: test_actpath_live */
            continue;
        at_activity_test_set_pid((uint32_t)atol(pidc));
        /* /1/a/b/c: AppDomain 1, root a, then children: set each counter one below the id */
        const char *s = path + 2;
        ck_assert_msg(strncmp(path, "/1/", 3) == 0, "%s", path);
        at_activity *prev = at_flow_enter(NULL);
        at_activity *parent = NULL, *a = NULL;
        int depth = 0;
        while (*s == '/') {
            char *e;
            unsigned long id = strtoul(s + 1, &e, 10);
            at_activity_test_set_last_child(parent, (uint32_t)(id - 1));
            a = at_activity_start(k, NULL, 0, NULL, 0);
            ck_assert_ptr_nonnull(a);
            parent = a;
            depth++;
            s = e;
        }
        char got[33];
        for (int i = 0; i < 16; i++)
            sprintf(got + 2 * i, "%02x", at_activity_id(a)->b[i]);
        if (strcmp(want, "DOES_NOT_FIT") == 0) {
            /* overflow: a '$' id after the nearest ancestor with room, not the path */
            char p[128];
            ck_assert_int_gt(at_activity_path(a, p, sizeof p), 0);
            ck_assert_msg(strchr(p, '$') != NULL, "%s: overflow id %s has no $", path, p);
        } else {
            ck_assert_msg(strcmp(got, want) == 0, "%s pid %s: got %s want %s", path, pidc, got, want);
        }
        at_flow_leave(prev);
        rows++;
    }
    fclose(f);
    at_activity_test_set_pid(0);
    ck_assert_int_ge(rows, 25);
}
END_TEST

/* ---- overflow and the depth cap ---- */

START_TEST(overflow_and_depth_cap)
{
    begin("tdeep");
    at_activity_kind *k = kind("Deep", AT_ACT_RECURSIVE);
    at_activity *chain[AT_ACTIVITY_MAX_DEPTH + 1];
    char paths[AT_ACTIVITY_MAX_DEPTH + 1][128];
    for (int i = 0; i <= AT_ACTIVITY_MAX_DEPTH; i++) {
        chain[i] = at_activity_start(k, NULL, 0, NULL, 0);
        ck_assert_msg(chain[i] != NULL, "level %d refused", i);
        snprintf(paths[i], 128, "%s", path_of(chain[i]));
        at_activity_ref(chain[i]);
    }
    /* level 100 is the last: the next Start is refused, logged without an id, nothing changes */
    ck_assert_ptr_null(at_activity_start(k, NULL, 0, NULL, 0));
    ck_assert_ptr_eq(at_activity_current(), chain[AT_ACTIVITY_MAX_DEPTH]);
    /* ids stay unique; the first ~23 are paths (//1/r/1/1/...), later ones overflow ids */
    int overflow = 0;
    for (int i = 0; i <= AT_ACTIVITY_MAX_DEPTH; i++) {
        for (int j = 0; j < i; j++)
            ck_assert_msg(!at_guid_eq(at_activity_id(chain[i]), at_activity_id(chain[j])),
                          "levels %d and %d share %s", i, j, paths[i]);
        if (strchr(paths[i], '$')) {
            overflow++;
            /* made under the nearest ancestor with at least two bytes of room */
            ck_assert_msg(strncmp(paths[i], paths[0], strlen(paths[0])) == 0, "%s", paths[i]);
        } else {
            ck_assert_msg(i == 0 || strncmp(paths[i], paths[i - 1], strlen(paths[i - 1])) == 0,
                          "%s is not below %s", paths[i], paths[i - 1]);
        }
    }
    ck_assert_int_gt(overflow, 50);
    while (at_activity_current())
        ck_assert(at_activity_stop(k, NULL, 0, NULL, 0));
    for (int i = 0; i <= AT_ACTIVITY_MAX_DEPTH; i++) {
        ck_assert(at_activity_is_stopped(chain[i]));
        at_activity_unref(chain[i]);
    }
    at_trace t;
    end(&t);
    ck_assert_uint_eq(at_count(&t, NULL, "DeepStart"), AT_ACTIVITY_MAX_DEPTH + 2);
    ck_assert_uint_eq(at_count(&t, NULL, "DeepStop"), AT_ACTIVITY_MAX_DEPTH + 1);
    long last = -1;
    for (long i = at_find(&t, NULL, "DeepStart", 0); i >= 0; i = at_find(&t, NULL, "DeepStart", (size_t)i + 1))
        last = i;
    ck_assert(at_guid_is_zero(&t.ev[last].activity)); /* the refused one */
    finish(&t);
}
END_TEST

/* Overflow ids stay unique across many siblings deep in the tree. */
START_TEST(overflow_siblings_unique)
{
    at_activity_kind *k = kind("Deep", AT_ACT_RECURSIVE), *leaf = kind("Leaf", 0);
    at_activity *prev = at_flow_enter(NULL);
    for (int i = 0; i < 30; i++)
        at_activity_start(k, NULL, 0, NULL, 0);
    enum { N = 5000 };
    at_guid *ids = malloc(N * sizeof *ids);
    for (int i = 0; i < N; i++) {
        at_activity *a = at_activity_start(leaf, NULL, 0, NULL, 0);
        ids[i] = *at_activity_id(a);
        at_activity_stop(leaf, NULL, 0, NULL, 0);
    }
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++)
            ck_assert(!at_guid_eq(&ids[i], &ids[j]));
    free(ids);
    at_flow_leave(prev);
}
END_TEST

/* ---- flow ---- */

typedef struct flow_arg {
    at_activity *cap;
    char before[128], inside[128], child[128], after[128];
} flow_arg;

static at_activity_kind *K_work;

static void *flow_worker(void *p)
{
    flow_arg *f = p;
    snprintf(f->before, 128, "%s", cur());
    at_activity *prev = at_flow_enter(f->cap);
    snprintf(f->inside, 128, "%s", cur());
    at_activity_start(K_work, NULL, 0, NULL, 0); /* left unstopped: must not leak out */
    snprintf(f->child, 128, "%s", cur());
    at_flow_leave(prev);
    snprintf(f->after, 128, "%s", cur());
    return NULL;
}

START_TEST(flow_into_live_and_stopped)
{
    at_activity_kind *req = kind("Request", 0), *sub = kind("Sub", 0);
    K_work = kind("Work", 0);
    at_activity *r = at_activity_start(req, NULL, 0, NULL, 0);
    char rpath[128];
    snprintf(rpath, sizeof rpath, "%s", path_of(r));
    at_activity_start(sub, NULL, 0, NULL, 0);
    char spath[128];
    snprintf(spath, sizeof spath, "%s", cur());
    flow_arg a = {.cap = at_flow_capture()};
    pthread_t th;
    pthread_create(&th, NULL, flow_worker, &a);
    pthread_join(th, NULL);
    ck_assert_str_eq(a.before, "");
    ck_assert_str_eq(a.inside, spath);
    ck_assert(at_path_is_below(a.child, spath));
    ck_assert_str_eq(a.after, "");
    ck_assert_str_eq(cur(), spath); /* the submitter is untouched */
    /* the captured activity stops before the work runs: it runs in the nearest live ancestor */
    ck_assert(at_activity_stop(sub, NULL, 0, NULL, 0));
    pthread_create(&th, NULL, flow_worker, &a);
    pthread_join(th, NULL);
    ck_assert_str_eq(a.inside, rpath);
    ck_assert(at_path_is_below(a.child, rpath));
    at_flow_release(a.cap);
    at_activity_stop(req, NULL, 0, NULL, 0);
    ck_assert_str_eq(cur(), "");
}
END_TEST

struct sr {
    at_activity *c;
    bool ok, again;
};

static void *stopper(void *p)
{
    struct sr *x = p;
    x->ok = at_activity_stop_ref(x->c, NULL, 0, NULL, 0);
    x->again = at_activity_stop_ref(x->c, NULL, 0, NULL, 0);
    return NULL;
}

/* Start on one thread, Stop of that very activity on another (at_activity_stop_ref): the first
 * thread continues in the creator. */
START_TEST(stop_ref_from_another_thread)
{
    begin("tref");
    at_activity_kind *conn = kind("Conn", AT_ACT_RECURSIVE), *job = kind("Job", 0);
    at_activity *j = at_activity_start(job, NULL, 0, NULL, 0);
    at_activity *c = at_activity_start(conn, NULL, 0, NULL, 0);
    at_activity_ref(c);
    pthread_t th;
    struct sr s = {c, false, false};
    pthread_create(&th, NULL, stopper, &s);
    pthread_join(th, NULL);
    ck_assert(s.ok);
    ck_assert(!s.again); /* only once */
    ck_assert_ptr_eq(at_activity_current(), j);
    mark(7);
    at_activity_unref(c);
    at_activity_stop(job, NULL, 0, NULL, 0);
    at_trace t;
    end(&t);
    long st = at_find(&t, NULL, "ConnStop", 0), cs = at_find(&t, NULL, "ConnStart", 0);
    ck_assert(st >= 0 && cs >= 0);
    ck_assert_str_eq(t.ev[st].act_path, t.ev[cs].act_path);
    ck_assert_str_eq(at_ev_field(&t.ev[st], "ConnId"), at_ev_field(&t.ev[cs], "ConnId"));
    ck_assert_uint_ne(t.ev[st].thread, t.ev[cs].thread);
    long m = at_find(&t, NULL, "Mark", 0);
    ck_assert_str_eq(t.ev[m].act_path, t.ev[at_find(&t, NULL, "JobStart", 0)].act_path);
    finish(&t);
}
END_TEST

/* An event takes the id of the current activity's nearest live one, which the thread keeps between
 * events (activity_inline.h at_act_idc): another thread's stop of the current activity, and a new
 * activity in the memory of one that ended, each give the next event the right id. */
START_TEST(event_id_kept_between_events)
{
    begin("evid");
    at_activity_kind *conn = kind("Conn", AT_ACT_RECURSIVE), *job = kind("Job", 0);
    at_activity_start(job, NULL, 0, NULL, 0);
    at_activity *c = at_activity_start(conn, NULL, 0, NULL, 0);
    at_activity_ref(c);
    mark(1); /* in c */
    mark(2); /* in c, from what the thread kept */
    pthread_t th;
    struct sr s = {c, false, false};
    pthread_create(&th, NULL, stopper, &s);
    pthread_join(th, NULL);
    ck_assert(s.ok);
    mark(3); /* c is stopped: in the job */
    at_activity_unref(c);
    /* a Start right after a Stop reuses the ended activity's memory */
    at_activity *x = at_activity_start(conn, NULL, 0, NULL, 0);
    mark(4);
    at_activity_stop(conn, NULL, 0, NULL, 0);
    at_activity *y = at_activity_start(conn, NULL, 0, NULL, 0);
    ck_assert_ptr_eq(x, y); /* else this test no longer tests the reuse */
    mark(5);
    at_activity_stop(conn, NULL, 0, NULL, 0);
    at_activity_stop(job, NULL, 0, NULL, 0);
    at_trace t;
    end(&t);
    const char *cs[3], *ms[5];
    ck_assert_uint_eq(events_named(&t, "ConnStart", cs, 3), 3);
    ck_assert_uint_eq(events_named(&t, "Mark", ms, 5), 5);
    const char *jp = t.ev[at_find(&t, NULL, "JobStart", 0)].act_path;
    ck_assert_str_eq(ms[0], cs[0]);
    ck_assert_str_eq(ms[1], cs[0]);
    ck_assert_str_eq(ms[2], jp);
    ck_assert_str_eq(ms[3], cs[1]);
    ck_assert_str_eq(ms[4], cs[2]);
    ck_assert_str_ne(cs[1], cs[2]);
    finish(&t);
}
END_TEST

/* A hooked call's own reference: start_held/stop_held end it without atomics when only the thread
 * and the caller hold it, and refuse (changing nothing) otherwise. */
START_TEST(held_start_stop)
{
    begin("held");
    at_activity_kind *job = kind("Job", 0), *call = kind("Call", AT_ACT_RECURSIVE);
    at_activity *j = at_activity_start(job, NULL, 0, NULL, 0);
    /* the common case: current, nobody else holds it */
    at_activity *a = at_activity_start_held(call, NULL, 0, NULL, 0);
    ck_assert_ptr_eq(at_activity_current(), a);
    ck_assert(at_activity_stop_held(a, NULL, 0, NULL, 0));
    ck_assert_ptr_eq(at_activity_current(), j);
    /* captured by work meanwhile: not sole, refused; the caller's way still works */
    at_activity *b = at_activity_start_held(call, NULL, 0, NULL, 0);
    at_activity *capb = at_flow_capture();
    ck_assert(!at_activity_stop_held(b, NULL, 0, NULL, 0));
    ck_assert_ptr_eq(at_activity_current(), b);
    ck_assert(at_activity_stop_ref(b, NULL, 0, NULL, 0));
    at_activity_unref(b);
    ck_assert_ptr_eq(at_activity_current(), j);
    ck_assert(at_activity_is_stopped(capb)); /* the capture keeps it readable */
    at_flow_release(capb);
    /* not current (a child started inside the call): refused */
    at_activity *c = at_activity_start_held(call, NULL, 0, NULL, 0);
    at_activity_kind *ik = kind("Inner", 0);
    at_activity *inner = at_activity_start(ik, NULL, 0, NULL, 0);
    ck_assert(!at_activity_stop_held(c, NULL, 0, NULL, 0));
    ck_assert_ptr_eq(at_activity_current(), inner);
    at_activity_stop(ik, NULL, 0, NULL, 0);
    ck_assert(at_activity_stop_held(c, NULL, 0, NULL, 0));
    at_activity_stop(job, NULL, 0, NULL, 0);
    ck_assert_ptr_null(at_activity_current());
    at_trace t;
    end(&t);
    /* three Calls, each Start matched by a Stop with its id, children of the Job */
    long js = at_find(&t, NULL, "JobStart", 0), s = -1, e = -1;
    ck_assert(js >= 0);
    for (int i = 0; i < 3; i++) {
        s = at_find(&t, NULL, "CallStart", (size_t)(s + 1));
        e = at_find(&t, NULL, "CallStop", (size_t)(e + 1));
        ck_assert(s >= 0 && e > s);
        ck_assert_str_eq(at_ev_field(&t.ev[s], "CallId"), at_ev_field(&t.ev[e], "CallId"));
        ck_assert_str_eq(t.ev[s].act_path, t.ev[e].act_path);
        ck_assert_str_eq(t.ev[s].rel_path, t.ev[js].act_path);
    }
    ck_assert_int_lt(at_find(&t, NULL, "CallStart", (size_t)(s + 1)), 0);
    ck_assert_int_lt(at_find(&t, NULL, "CallStop", (size_t)(e + 1)), 0);
    finish(&t);
}
END_TEST

/* The plain shape's entry points (a hooked call of a plain rule: at_activity_start_held_plain,
 * at_activity_end_held_u32) write what the general held ones write, in each case their fast path
 * hands to the general body: roots across blocks of root numbers and <Name>Ids and across chunks,
 * nesting, a non-recursive namesake, a captured call, a child current at the end, a borrowed
 * current activity, the depth limit, a process parent. The same script runs both ways in one
 * trace; the two runs' events agree once root numbers and ids count from each run's first. */
static at_activity_kind *P_call, *P_once, *P_inner, *P_job;

static at_activity *p_start(at_activity_kind *k, bool plain)
{
    return plain ? at_activity_start_held_plain(k) : at_activity_start_held(k, NULL, 0, NULL, 0);
}

/* what the shim did before the plain entry points: the held Stop, else by kind or by reference */
static void p_end(at_activity *a, uint32_t v, bool plain)
{
    if (a == AT_ACTIVITY_UNTRACKED) { /* past the depth limit: the Stop has no id either */
        at_activity_stop_untracked(P_call, &v, sizeof v, NULL, 0);
        return;
    }
    if (plain) {
        at_activity_end_held_u32(a, v);
        return;
    }
    if (at_activity_stop_held(a, &v, sizeof v, NULL, 0))
        return;
    if (at_activity_current() == a) {
        at_activity_kind *k = a->kind;
        at_activity_unref(a);
        at_activity_stop(k, &v, sizeof v, NULL, 0);
        return;
    }
    at_activity_stop_ref(a, &v, sizeof v, NULL, 0);
    at_activity_unref(a);
}

static void plain_script(bool plain)
{
    mark(plain ? 1 : 2);
    for (uint32_t i = 0; i < 1200; i++) /* roots: blocks of numbers and ids, chunks */
        p_end(p_start(P_call, plain), i, plain);
    at_activity *a = p_start(P_call, plain), *b = p_start(P_call, plain);
    p_end(b, 7, plain);
    p_end(a, 8, plain);
    /* not recursive: the second Once kills the first, whose end finds it stopped */
    at_activity *o1 = p_start(P_once, plain), *o2 = p_start(P_once, plain);
    p_end(o2, 9, plain);
    p_end(o1, 10, plain);
    /* captured while it runs: held by more than the thread and the caller */
    at_activity *c = p_start(P_call, plain), *cap = at_flow_capture();
    p_end(c, 11, plain);
    at_activity *z = p_start(P_call, plain); /* the capture keeps c's memory from it */
    ck_assert_ptr_ne(z, cap);
    p_end(z, 15, plain);
    ck_assert(at_activity_is_stopped(cap));
    at_flow_release(cap);
    /* a child of it is current at its end */
    at_activity *d = p_start(P_call, plain);
    at_activity_start(P_inner, NULL, 0, NULL, 0);
    p_end(d, 12, plain);
    at_activity_stop(P_inner, NULL, 0, NULL, 0);
    /* the current activity is borrowed from a capture */
    at_activity_start(P_job, NULL, 0, NULL, 0);
    at_activity *jc = at_flow_capture();
    at_activity_stop(P_job, NULL, 0, NULL, 0);
    at_activity *prev = at_flow_enter(jc);
    p_end(p_start(P_call, plain), 13, plain);
    at_flow_leave(prev);
    at_flow_release(jc);
    /* past the depth limit */
    at_activity *deep[AT_ACTIVITY_MAX_DEPTH + 5];
    for (int i = 0; i < AT_ACTIVITY_MAX_DEPTH + 5; i++)
        deep[i] = p_start(P_call, plain);
    for (int i = AT_ACTIVITY_MAX_DEPTH + 4; i >= 0; i--)
        p_end(deep[i], (uint32_t)i, plain);
    /* roots with a process parent */
    at_guid parent;
    memset(&parent, 0x5a, sizeof parent);
    at_activity_set_process_parent(&parent);
    p_end(p_start(P_call, plain), 14, plain);
    at_activity_set_process_parent(NULL);
}

/* e's path with its root numbered from base ("R3/1"), or as it stands */
static void plain_norm(const char *path, unsigned base, char *out, size_t n)
{
    unsigned r;
    int off;
    if (sscanf(path, "//1/%u%n", &r, &off) == 1)
        snprintf(out, n, "R%d%s", (int)(r - base), path + off);
    else
        snprintf(out, n, "%s", path);
}

START_TEST(plain_shape_as_general)
{
    begin("plain");
    static const at_field st[] = {{"Status", NT_TYPE_UINT32}};
    at_activity_kind_desc dc = {.name = "Call", .flags = AT_ACT_RECURSIVE, .nstop_fields = 1,
                                .stop_fields = st};
    at_activity_kind_desc d1 = {.name = "Once", .nstop_fields = 1, .stop_fields = st};
    P_call = at_activity_kind_register(&dc);
    P_once = at_activity_kind_register(&d1);
    P_inner = kind("Inner", 0);
    P_job = kind("Job", 0);
    plain_script(false);
    plain_script(true);
    at_trace t;
    end(&t);
    long m[2] = {at_find(&t, NULL, "Mark", 0), -1};
    ck_assert(m[0] >= 0);
    m[1] = at_find(&t, NULL, "Mark", (size_t)m[0] + 1);
    ck_assert(m[1] > m[0]);
    size_t n = (size_t)(m[1] - m[0]);
    ck_assert_uint_eq(t.n - (size_t)m[1], n); /* the same number of events each way */
    unsigned base[2];
    uint64_t id0[2];
    for (int k = 0; k < 2; k++) {
        const at_tev *f = &t.ev[m[k] + 1];
        ck_assert_int_eq(sscanf(f->act_path, "//1/%u", &base[k]), 1);
        id0[k] = strtoull(at_ev_field(f, "CallId"), NULL, 10);
    }
    for (size_t i = 1; i < n; i++) {
        const at_tev *x = &t.ev[(size_t)m[0] + i], *y = &t.ev[(size_t)m[1] + i];
        char xa[128], ya[128], xr[128], yr[128];
        ck_assert_str_eq(x->name, y->name);
        ck_assert_uint_eq(x->seq + (uint32_t)n, y->seq);
        plain_norm(x->act_path, base[0], xa, sizeof xa);
        plain_norm(y->act_path, base[1], ya, sizeof ya);
        plain_norm(x->rel_path, base[0], xr, sizeof xr);
        plain_norm(y->rel_path, base[1], yr, sizeof yr);
        ck_assert_msg(strcmp(xa, ya) == 0, "event %zu %s: %s vs %s", i, x->name, xa, ya);
        ck_assert_msg(strcmp(xr, yr) == 0, "event %zu %s: related %s vs %s", i, x->name, xr, yr);
        ck_assert_uint_eq(x->nfields, y->nfields);
        for (uint32_t j = 0; j < x->nfields; j++) {
            const char *fx = x->fields[j].value, *fy = y->fields[j].value;
            uint64_t vx = strtoull(fx, NULL, 10), vy = strtoull(fy, NULL, 10);
            if (j == 0 && x->opcode != 0 && vx) /* <Name>Id: counted from each run's first */
                ck_assert_msg(vx - id0[0] == vy - id0[1], "event %zu %s: id %s vs %s", i, x->name,
                              fx, fy);
            else
                ck_assert_msg(strcmp(fx, fy) == 0, "event %zu %s: %s vs %s", i, x->name, fx, fy);
        }
    }
    /* the script reached what it meant to: a Start past the depth limit (no id), a Once killed
     * (its Stop missing), the process parent as a root's related id */
    ck_assert(at_find_field(&t, "CallStop", "Status", "13", (size_t)m[1]) >= 0);
    ck_assert(at_find_field(&t, "CallStop", "Status", "14", (size_t)m[1]) >= 0);
    /* the Starts past the depth limit, logged without an id, each with its Stop without one */
    size_t idless_start = 0, idless_stop = 0;
    for (size_t i = 0; i < t.n; i++) {
        const at_tev *e = &t.ev[i];
        if (!at_guid_is_zero(&e->activity))
            continue;
        if (!strcmp(e->name, "CallStart"))
            idless_start++;
        else if (!strcmp(e->name, "CallStop"))
            idless_stop++;
    }
    ck_assert_uint_eq(idless_start, 2 * 4); /* of the 105 nested, levels 0 to 100 are tracked */
    ck_assert_uint_eq(idless_stop, idless_start);
    finish(&t);
}
END_TEST

/* A process whose engine was never used forks (the shim's fork wrapper resets the child's engine):
 * the child's first root activity is still //1/1 for the child's pid. */
START_TEST(fork_before_first_use)
{
    pid_t p = fork();
    ck_assert_int_ge(p, 0);
    if (p == 0) {
        at_activity_after_fork_child();
        at_activity_kind_desc d = {.name = "Root"};
        at_activity_kind *k = at_activity_kind_register(&d);
        at_activity *a = k ? at_activity_start(k, NULL, 0, NULL, 0) : NULL;
        char buf[64] = "";
        if (a)
            at_actpath_format(at_activity_id(a), (uint32_t)getpid(), buf, sizeof buf);
        if (strcmp(buf, "//1/1") != 0) {
            fprintf(stderr, "child's first root: '%s'\n", buf);
            _exit(1);
        }
        _exit(0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's root id is wrong");
}
END_TEST

/* Flow references come in prepaid blocks on the capturing thread and are owed in blocks by the
 * releasing one: the count stays exact (taken = given + what the caches hold), a thread that ends
 * settles what it owed, a stop asking whether it holds the only reference gets the true answer, and
 * a signal handler capturing and releasing in the middle of the thread's own cache updates leaves
 * the count exact. */
#define NCAP 1000
static at_activity *g_caps[NCAP];
static void *releaser(void *unused)
{
    (void)unused;
    for (int i = 0; i < NCAP; i++)
        at_flow_release(g_caps[i]);
    return NULL;
}

static volatile sig_atomic_t g_sig_hops;
static void on_prof_hop(int sig)
{
    (void)sig;
    at_activity *c = at_flow_capture();
    at_activity *c2 = at_flow_capture();
    at_flow_release(c);
    at_flow_release(c2);
    g_sig_hops++;
}

static uint32_t cached_on(const at_activity *a)
{
    return (at_pre_act == a ? at_pre_n : 0) + (at_rel_act == a ? at_rel_n : 0);
}

START_TEST(flow_reference_cache)
{
    begin("refc");
    at_activity_kind *job = kind("Job", 0);
    at_activity *j = at_activity_start_held(job, NULL, 0, NULL, 0); /* the thread's and ours: 2 */
    for (int i = 0; i < NCAP; i++) {
        g_caps[i] = at_flow_capture();
        ck_assert_ptr_eq(g_caps[i], j);
    }
    ck_assert_ptr_eq(at_pre_act, j);
    ck_assert_uint_lt(at_pre_n, AT_PREPAY);
    ck_assert_uint_eq(at_activity_test_refs(j), 2 + NCAP + at_pre_n);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, releaser, NULL), 0);
    pthread_join(t, NULL);
    ck_assert_uint_eq(at_activity_test_refs(j), 2 + at_pre_n);

    /* a profiling signal captures and releases while this thread does the same */
    struct sigaction sa = {.sa_handler = on_prof_hop}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, &old);
    struct itimerval it = {{0, 50}, {0, 50}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &it, NULL);
    for (long i = 0; i < 20000000 && g_sig_hops < 200; i++) {
        at_activity *c = at_flow_capture();
        at_flow_release(c);
    }
    setitimer(ITIMER_PROF, &off, NULL);
    sigaction(SIGPROF, &old, NULL);
    ck_assert_int_ge(g_sig_hops, 1);
    ck_assert_uint_eq(at_activity_test_refs(j), 2 + cached_on(j));

    /* only this thread and the caller hold it, whatever the caches held: the held stop succeeds */
    ck_assert(at_activity_stop_held(j, NULL, 0, NULL, 0));
    ck_assert_ptr_null(at_activity_current());
    ck_assert(at_pre_act != j && at_rel_act != j);
    at_trace tr;
    end(&tr);
    finish(&tr);
}
END_TEST

/* at_flow_take: a reference from the thread's own caches, no atomic, exact counts kept. */
START_TEST(flow_take_from_caches)
{
    begin("take");
    at_activity_kind *job = kind("Job", 0);
    at_activity *j = at_activity_start_held(job, NULL, 0, NULL, 0); /* the thread's and ours: 2 */
    at_activity *c = at_flow_capture(); /* prepays AT_PREPAY: one handed out, the rest cached */
    ck_assert_ptr_eq(c, j);
    uint32_t refs = at_activity_test_refs(j);
    uint32_t pre = at_pre_n;
    ck_assert_uint_gt(pre, 0);
    /* from the prepaid cache: the count does not move, the cache gives one up */
    ck_assert(at_flow_take(j));
    ck_assert_uint_eq(at_pre_n, pre - 1);
    ck_assert_uint_eq(at_activity_test_refs(j), refs);
    at_flow_release(j); /* back where it came from */
    ck_assert_uint_eq(at_pre_n, pre);
    /* owed releases are references too: a take uses one of them first when nothing is prepaid */
    at_pre_n = 0;
    __atomic_sub_fetch(&j->refs, pre, __ATOMIC_RELAXED); /* as if the prepaid ones went elsewhere */
    at_flow_release_slow(c); /* owes one on j */
    ck_assert_ptr_eq(at_rel_act, j);
    ck_assert_uint_eq(at_rel_n, 1);
    ck_assert(at_flow_take(j));
    ck_assert_uint_eq(at_rel_n, 0);
    ck_assert(!at_flow_take(j)); /* nothing cached: the caller must take a reference itself */
    at_activity_kind *other = kind("Other", 0);
    at_activity *o = at_activity_start(other, NULL, 0, NULL, 0);
    ck_assert(!at_flow_take(o)); /* never another activity's */
    at_activity_stop(other, NULL, 0, NULL, 0);
    /* inside a cache update (a signal handler's view) nothing is taken */
    at_flow_release(j);
    ck_assert_uint_eq(at_rel_n, 1);
    at_refc_busy++;
    ck_assert(!at_flow_take(j));
    at_refc_busy--;
    ck_assert_uint_eq(at_rel_n, 1);
    ck_assert_uint_eq(at_activity_test_refs(j), 2 + cached_on(j));
    ck_assert(at_activity_stop_held(j, NULL, 0, NULL, 0));
    at_trace tr;
    end(&tr);
    finish(&tr);
}
END_TEST

/* ---- what PerfView needs (spec 8), transfers, process links ---- */

static void *receiver(void *c)
{
    at_guid before = {{0}};
    at_activity *prev = at_flow_enter(c);
    at_flow_transfer_receive(c, &before);
    at_flow_leave(prev);
    return NULL;
}

START_TEST(perfview_fields_and_transfers)
{
    begin("tpv");
    static const at_field extra[] = {{"Url", NT_TYPE_STRING}};
    at_activity_kind_desc d = {.provider = "MyCompany-MyService", .name = "Request",
                               .nstart_fields = 1, .start_fields = extra};
    at_activity_kind *req = at_activity_kind_register(&d);
    ck_assert_ptr_eq(at_activity_kind_register(&d), req); /* same name+provider, same kind */
    uint8_t pl[64];
    at_payload p;
    at_payload_init(&p, pl, sizeof pl);
    at_payload_str(&p, "/index", 64);
    at_activity *a = at_activity_start(req, pl, (uint32_t)(p.p - pl), NULL, 0);
    uint64_t uid = at_activity_unique_id(a);
    at_activity *cap = at_flow_capture();
    at_flow_transfer_send(cap);
    pthread_t th;
    pthread_create(&th, NULL, receiver, cap);
    pthread_join(th, NULL);
    at_flow_release(cap);
    at_activity_stop(req, NULL, 0, NULL, 0);
    at_trace t;
    end(&t);
    long s = at_find(&t, "MyCompany-MyService", "RequestStart", 0);
    long e = at_find(&t, "MyCompany-MyService", "RequestStop", 0);
    ck_assert(s >= 0 && e >= 0);
    ck_assert_uint_eq(t.ev[s].opcode, 1);
    ck_assert_uint_eq(t.ev[e].opcode, 2);
    ck_assert_str_eq(t.ev[s].fields[0].name, "RequestId");
    ck_assert_uint_eq(t.ev[s].fields[0].type, NT_TYPE_UINT64);
    ck_assert_str_eq(t.ev[e].fields[0].name, "RequestId");
    char u[32];
    snprintf(u, sizeof u, "%llu", (unsigned long long)uid);
    ck_assert_str_eq(t.ev[s].fields[0].value, u);
    ck_assert_str_eq(t.ev[e].fields[0].value, u);
    ck_assert_str_eq(at_ev_field(&t.ev[s], "Url"), "\"/index\"");
    ck_assert_str_eq(t.ev[s].act_path, t.ev[e].act_path);
    ck_assert_str_eq(t.ev[e].rel_path, "");
    long ts = at_find(&t, "acttrace-flow", "TransferSend", 0);
    long tr = at_find(&t, "acttrace-flow", "TransferReceive", 0);
    ck_assert(ts >= 0 && tr >= 0);
    ck_assert_uint_eq(t.ev[ts].opcode, 9);
    ck_assert_uint_eq(t.ev[tr].opcode, 240);
    ck_assert_str_eq(t.ev[ts].act_path, t.ev[s].act_path);
    ck_assert_str_eq(t.ev[tr].act_path, t.ev[s].act_path);
    ck_assert_uint_ne(t.ev[ts].thread, t.ev[tr].thread);
    ck_assert_uint_eq(t.ev[ts].keywords, AT_KEYWORD_FLOW);
    finish(&t);
}
END_TEST

START_TEST(process_parent_and_fork)
{
    begin("tproc");
    at_activity_kind *k = kind("Root", 0);
    at_guid parent;
    memset(&parent, 0, sizeof parent);
    at_actpath_add_id(&parent, at_actpath_add_id(&parent, 0, 1, false, 777), 9, false, 777);
    at_activity_set_process_parent(&parent);
    at_activity *a = at_activity_start(k, NULL, 0, NULL, 0);
    ck_assert_uint_eq(at_actpath_pid(at_activity_id(a)), (uint32_t)getpid());
    at_activity_stop(k, NULL, 0, NULL, 0);
    /* a fork child keeps its current activity; its new ids carry its own pid */
    at_activity_start(k, NULL, 0, NULL, 0);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t c = fork();
    if (c == 0) {
        at_activity_kind *ck = kind("Child", 0);
        at_activity *x = at_activity_start(ck, NULL, 0, NULL, 0);
        uint32_t pid = at_actpath_pid(at_activity_id(x));
        char p[128];
        at_activity_path(x, p, sizeof p);
        char msg[256];
        int n = snprintf(msg, sizeof msg, "%u %s", pid, p);
        if (write(fds[1], msg, (size_t)n) < 0)
            _exit(2);
        _exit(0);
    }
    close(fds[1]);
    char msg[256] = {0};
    ck_assert_int_gt(read(fds[0], msg, sizeof msg - 1), 0);
    close(fds[0]);
    int st;
    waitpid(c, &st, 0);
    unsigned cpid;
    char cp[128];
    ck_assert_int_eq(sscanf(msg, "%u %127s", &cpid, cp), 2);
    ck_assert_uint_eq(cpid, (unsigned)c);
    ck_assert(at_path_is_below(cp, cur()));
    at_activity_stop(k, NULL, 0, NULL, 0);
    at_activity_set_process_parent(NULL);
    at_trace t;
    end(&t);
    long s = at_find(&t, NULL, "RootStart", 0);
    ck_assert(at_guid_eq(&t.ev[s].related, &parent)); /* roots link to the process parent */
    finish(&t);
}
END_TEST

/* ---- concurrency and lifetimes ---- */

enum { CT = 8, CN = 40000 };
static uint64_t g_uids[CT][CN];
static at_guid g_ids[CT][CN / 4];
static at_activity *g_shared_cap;
static int g_first_null;
static at_activity_kind *K_c1, *K_c2;

static void *conc_main(void *p)
{
    long ti = (long)p;
    at_activity *prev = at_flow_enter(g_shared_cap);
    for (int i = 0; i < CN; i++) {
        at_activity *a = at_activity_start(K_c1, NULL, 0, NULL, 0);
        g_uids[ti][i] = at_activity_unique_id(a);
        if (!a && !g_first_null)
            g_first_null = i + 1;
        if (i % 4 == 0)
            g_ids[ti][i / 4] = *at_activity_id(a);
        if (i % 3 == 0) { /* nested, non-nested and cross stops mixed */
            at_activity_start(K_c2, NULL, 0, NULL, 0);
            at_activity_stop(K_c1, NULL, 0, NULL, 0);
            at_activity_stop(K_c2, NULL, 0, NULL, 0);
        } else if (i % 3 == 1) {
            at_activity *c = at_flow_capture();
            at_activity_stop_ref(c, NULL, 0, NULL, 0);
            at_flow_release(c);
        } else {
            at_activity_stop(K_c1, NULL, 0, NULL, 0);
        }
    }
    at_flow_leave(prev);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_guid(const void *a, const void *b)
{
    return memcmp(a, b, 16);
}

START_TEST(concurrent_unique)
{
    K_c1 = kind("C1", 0);
    K_c2 = kind("C2", 0);
    at_activity_kind *top = kind("Top", 0);
    at_activity_start(top, NULL, 0, NULL, 0);
    g_shared_cap = at_flow_capture();
    pthread_t th[CT];
    for (long i = 0; i < CT; i++)
        pthread_create(&th[i], NULL, conc_main, (void *)i);
    for (int i = 0; i < CT; i++)
        pthread_join(th[i], NULL);
    at_flow_release(g_shared_cap);
    uint64_t *u = &g_uids[0][0];
    at_guid *g = &g_ids[0][0];
    size_t zeros = 0;
    for (size_t i = 0; i < CT * CN; i++)
        zeros += u[i] == 0;
    ck_assert_msg(zeros == 0, "%zu Starts refused (first at %d)", zeros, g_first_null);
    qsort(g_uids, CT * CN, sizeof(uint64_t), cmp_u64);
    for (size_t i = 1; i < CT * CN; i++)
        ck_assert_msg(u[i] != u[i - 1], "unique id %llu twice", (unsigned long long)u[i]);
    qsort(g_ids, CT * (CN / 4), sizeof(at_guid), cmp_guid);
    for (size_t i = 1; i < CT * (CN / 4); i++)
        ck_assert_msg(!at_guid_eq(&g[i], &g[i - 1]), "activity id twice");
    ck_assert(at_activity_stop(top, NULL, 0, NULL, 0));
}
END_TEST

/* RSS is no measure under ASan (its quarantine keeps freed memory); LeakSanitizer checks there. */
#ifdef __SANITIZE_ADDRESS__
#define RSS_CHECKS 0
#else
#define RSS_CHECKS 1
#endif

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Section 5's loop: 10 million Starts without Stops keep memory flat (recursion auto-stops), and so
 * do 10 million flows whose work leaves activities unstopped. */
START_TEST(soak_ten_million)
{
    at_activity_kind *req = kind("Request", 0), *w = kind("W", 0);
    at_activity *prev = at_flow_enter(NULL);
    long base = 0;
    for (long i = 0; i < 10000000; i++) {
        at_activity_start(req, NULL, 0, NULL, 0);
        if (i == 1000000)
            base = rss_kb();
    }
    long grew = rss_kb() - base;
    ck_assert_msg(!RSS_CHECKS || grew < 1024, "RSS grew %ld KiB over 9M unstopped Starts", grew);
    at_activity *cap = at_flow_capture();
    for (long i = 0; i < 10000000; i++) {
        at_activity *p2 = at_flow_enter(cap);
        at_activity_start(w, NULL, 0, NULL, 0);
        at_flow_leave(p2);
        if (i == 1000000)
            base = rss_kb();
    }
    grew = rss_kb() - base;
    ck_assert_msg(!RSS_CHECKS || grew < 1024, "RSS grew %ld KiB over 9M flows", grew);
    at_flow_release(cap);
    at_flow_leave(prev);
}
END_TEST

static at_activity_kind *K_t;

static void *body(void *p)
{
    (void)p;
    for (int i = 0; i < 100; i++)
        at_activity_start(K_t, NULL, 0, NULL, 0);
    return NULL;
}

/* Threads that end while holding activities, with or without a session, release them. */
START_TEST(thread_exit_releases)
{
    K_t = kind("T", 0);
    long base = 0;
    for (int i = 0; i < 3000; i++) {
        pthread_t th;
        pthread_create(&th, NULL, body, NULL);
        pthread_join(th, NULL);
        if (i == 300)
            base = rss_kb();
    }
    ck_assert_msg(!RSS_CHECKS || rss_kb() - base < 2048, "RSS grew %ld KiB", rss_kb() - base);
}
END_TEST

START_TEST(invalid_input)
{
    ck_assert_ptr_null(at_activity_kind_register(NULL));
    at_activity_kind_desc d = {.name = ""};
    ck_assert_ptr_null(at_activity_kind_register(&d));
    ck_assert_ptr_null(at_activity_start(NULL, NULL, 0, NULL, 0));
    ck_assert(!at_activity_stop(NULL, NULL, 0, NULL, 0));
    ck_assert(!at_activity_stop_ref(NULL, NULL, 0, NULL, 0));
    ck_assert_ptr_null(at_activity_current());
    char b[8];
    ck_assert_int_eq(at_activity_path(NULL, b, sizeof b), -1);
    at_activity_kind *k = kind("Tiny", 0);
    at_activity_start(k, NULL, 0, NULL, 0);
    ck_assert_int_eq(at_activity_path(at_activity_current(), b, 4), -1); /* buffer too small */
    at_activity_stop(k, NULL, 0, NULL, 0);
    at_flow_leave(at_flow_enter(NULL)); /* no activity anywhere: nothing happens */
    at_flow_release(NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("activity");
    TCase *c = tcase_create("engine");
    tcase_set_timeout(c, 0);
    tcase_add_test(c, table_2_1);
    tcase_add_test(c, forking_4_1);
    tcase_add_test(c, sequential_4_1);
    tcase_add_test(c, non_nested_4_3);
    tcase_add_test(c, recursion_5_default);
    tcase_add_test(c, recursion_5_recursive);
    tcase_add_test(c, every_vector_row);
    tcase_add_test(c, overflow_and_depth_cap);
    tcase_add_test(c, overflow_siblings_unique);
    tcase_add_test(c, flow_into_live_and_stopped);
    tcase_add_test(c, stop_ref_from_another_thread);
    tcase_add_test(c, event_id_kept_between_events);
    tcase_add_test(c, held_start_stop);
    tcase_add_test(c, plain_shape_as_general);
    tcase_add_test(c, flow_reference_cache);
    tcase_add_test(c, flow_take_from_caches);
    tcase_add_test(c, fork_before_first_use);
    tcase_add_test(c, perfview_fields_and_transfers);
    tcase_add_test(c, process_parent_and_fork);
    tcase_add_test(c, concurrent_unique);
    tcase_add_test(c, soak_ten_million);
    tcase_add_test(c, thread_exit_releases);
    tcase_add_test(c, invalid_input);
    suite_add_tcase(s, c);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
