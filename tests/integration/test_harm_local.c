/* test_harm_local: plugins loaded with dlopen(RTLD_LOCAL), whose GLib, libgomp or other library is
 * in their own scope only (the host links none of it), run traced exactly as untraced (exit
 * status, stdout, stderr), and the activity still flows into their callbacks and OpenMP threads.
 * Plugins that bring different copies of one library each reach the copy they bind to, as
 * untraced; a call nothing defines ends the process as the dynamic linker ends it. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"

/* argv[0]: a fixture name or an absolute program path; the other arguments name fixtures
 * (lib*.so) when they start with "lib", and are passed as they are otherwise. Runs it traced into
 * s and untraced into u. */
static void run_both(at_session *s, at_run_result *u, const char *tag, const char *const *args)
{
    const char *argv[16];
    char *own[16] = {0};
    size_t n = 0;
    for (; args[n] && n < 15; n++) {
        own[n] = n == 0 && args[0][0] != '/' ? at_fixture_path(args[0])
                 : n > 0 && strncmp(args[n], "lib", 3) == 0 ? at_fixture_path(args[n])
                                                              : NULL;
        argv[n] = own[n] ? own[n] : args[n];
    }
    argv[n] = NULL;
    ck_assert_int_eq(at_session_run_deadline(s, tag, argv, NULL, 120), 0);
    at_run_opts o = {.argv = argv, .no_preload = true, .deadline_s = 120};
    memset(u, 0, sizeof *u);
    ck_assert_int_eq(at_run(&o, u), 0);
    for (size_t i = 0; i < n; i++)
        free(own[i]);
}

/* Traced and untraced did the same: status, stdout, and stderr (err_too). */
static void same(const at_session *s, const at_run_result *u, bool err_too)
{
    char d[1024], e[256];
    ck_assert_msg(s->r.exited == u->exited && s->r.status == u->status &&
                      s->r.signaled == u->signaled && s->r.sig == u->sig,
                  "traced: %s; untraced: %s", at_session_describe(s, d, sizeof d),
                  at_run_describe(u, e, sizeof e));
    ck_assert_str_eq(s->r.out, u->out);
    if (err_too)
        ck_assert_str_eq(s->r.err, u->err);
}

static void ok_traced(const at_session *s)
{
    char d[1024];
    ck_assert_msg(s->r.exited && s->r.status == 0 && s->has_trace && s->load_rc == 0, "%s",
                  at_session_describe(s, d, sizeof d));
}

static const char *start_path(const at_trace *t, const char *name)
{
    long i = at_find(t, NULL, name, 0);
    ck_assert_msg(i >= 0, "no %s", name);
    return t->ev[i].act_path;
}

/* The marks named name with Value v: how many, each in path; *off: how many ran on a thread
 * other than tid. */
static int marks_in(const at_trace *t, const char *name, const char *v, const char *path,
                    uint64_t tid, int *off)
{
    int n = 0;
    for (long i = at_find_field(t, name, "Value", v, 0); i >= 0;
         i = at_find_field(t, name, "Value", v, (size_t)i + 1)) {
        ck_assert_msg(strcmp(t->ev[i].act_path, path) == 0, "%s %s ran in '%s', want '%s'", name, v,
                      t->ev[i].act_path, path);
        if (off)
            *off += t->ev[i].thread != tid;
        n++;
    }
    return n;
}

/* OJob's region and tasks ran in OJob, on the team's threads too. */
static void omp_flowed(const at_trace *t)
{
    long job = at_find(t, NULL, "OJobStart", 0);
    ck_assert(job >= 0);
    const char *jp = t->ev[job].act_path;
    uint64_t main_tid = t->ev[job].thread;
    int off = 0;
    char v[16];
    for (int k = 0; k < 4; k++) {
        snprintf(v, sizeof v, "%d", k);
        ck_assert_int_eq(marks_in(t, "OPar", v, jp, main_tid, &off), 1);
    }
    ck_assert_int_eq(off, 3); /* threads 1..3 of the team are libgomp's */
    for (int k = 0; k < 8; k++) {
        snprintf(v, sizeof v, "%d", k);
        ck_assert_int_eq(marks_in(t, "OTask", v, jp, main_tid, NULL), 1);
    }
}

/* GJob's idle, timeout, pool items and GTask (thread and completion) ran in GJob, elsewhere. */
static void glib_flowed(const at_trace *t)
{
    const char *jp = start_path(t, "GJobStart");
    uint64_t main_tid = t->ev[at_find(t, NULL, "GJobStart", 0)].thread;
    static const char *const one[] = {"GIdle", "GTimeout", "GTaskThread", "GTaskDone"};
    for (size_t k = 0; k < sizeof one / sizeof *one; k++) {
        int off = 0;
        ck_assert_msg(marks_in(t, one[k], "1", jp, main_tid, &off) == 1, "%s", one[k]);
        ck_assert_int_eq(off, 1);
    }
    char v[16];
    for (int k = 1; k <= 4; k++) {
        int off = 0;
        snprintf(v, sizeof v, "%d", k);
        ck_assert_int_eq(marks_in(t, "GItem", v, jp, main_tid, &off), 1);
        ck_assert_int_eq(off, 1);
    }
}

START_TEST(omp_plugin_local)
{
    at_session s;
    at_run_result u;
    run_both(&s, &u, "local-omp", (const char *const[]){"harm_local", "liblocal_omp.so", NULL});
    same(&s, &u, true);
    ok_traced(&s);
    ck_assert_str_eq(s.r.out, "liblocal_omp.so: 2804\n");
    omp_flowed(&s.t);
    at_run_result_free(&u);
    at_session_free(&s);
}
END_TEST

START_TEST(glib_plugin_local)
{
    at_session s;
    at_run_result u;
    run_both(&s, &u, "local-glib", (const char *const[]){"harm_local", "liblocal_glib.so", NULL});
    same(&s, &u, true);
    ok_traced(&s);
    ck_assert_str_eq(s.r.out, "liblocal_glib.so: 7\n");
    glib_flowed(&s.t);
    at_run_result_free(&u);
    at_session_free(&s);
}
END_TEST

/* Two plugins, a copy of the library each: each reaches its own (11), in its own activity. */
START_TEST(two_local_copies)
{
    at_session s;
    at_run_result u;
    run_both(&s, &u, "local-copies",
             (const char *const[]){"harm_local", "liblocal_plug2.so", "liblocal_plug.so", NULL});
    same(&s, &u, true);
    ok_traced(&s);
    ck_assert_str_eq(s.r.out, "liblocal_plug2.so: 11\nliblocal_plug.so: 11\n");
    ck_assert_uint_eq(at_count(&s.t, NULL, "CRegion"), 2);
    for (long i = at_find(&s.t, NULL, "CRegion", 0); i >= 0;
         i = at_find(&s.t, NULL, "CRegion", (size_t)i + 1))
        ck_assert_str_ne(s.t.ev[i].act_path, "");
    at_run_result_free(&u);
    at_session_free(&s);
}
END_TEST

/* The same, each plugin unloaded (with its copy) after its run, so that the next may be loaded in
 * its place: no call reaches a copy that is gone. */
START_TEST(local_copies_unloaded)
{
    at_session s;
    at_run_result u;
    run_both(&s, &u, "local-close",
             (const char *const[]){"harm_local", "-close", "liblocal_plug.so", "liblocal_plug2.so",
                                   "liblocal_plug.so", "liblocal_plug2.so", NULL});
    same(&s, &u, true);
    ok_traced(&s);
    ck_assert_str_eq(s.r.out, "liblocal_plug.so: 11\nliblocal_plug2.so: 11\nliblocal_plug.so: 11\n"
                              "liblocal_plug2.so: 11\n");
    ck_assert_uint_eq(at_count(&s.t, NULL, "CRegion"), 4);
    at_run_result_free(&u);
    at_session_free(&s);
}
END_TEST

/* A copy in the global scope and a plugin with its own: the plugin binds to the global copy (the
 * global scope is searched first), traced as untraced (plug2: 1, its own copy never called). */
START_TEST(global_and_local_copy)
{
    at_session s;
    at_run_result u;
    run_both(&s, &u, "local-global",
             (const char *const[]){"harm_local", "-global", "liblocal_copy.so", "liblocal_plug2.so",
                                   "liblocal_plug.so", NULL});
    same(&s, &u, true);
    ok_traced(&s);
    ck_assert_str_eq(s.r.out, "liblocal_plug2.so: 1\nliblocal_plug.so: 21\n");
    at_run_result_free(&u);
    at_session_free(&s);
}
END_TEST

/* Nothing defines what the plugin calls: exit 127 with one line on stderr, as untraced. */
START_TEST(undefined_ends_like_the_linker)
{
    at_session s;
    at_run_result u;
    run_both(&s, &u, "local-under",
             (const char *const[]){"harm_local", "-lazy", "liblocal_under.so", NULL});
    same(&s, &u, false);
    ck_assert(u.exited && u.status == 127);
    ck_assert_msg(strstr(s.r.err, "acttrace: symbol lookup error: ") &&
                      strstr(s.r.err, "liblocal_under.so: undefined symbol: GOMP_parallel"),
                  "%s", s.r.err);
    ck_assert_ptr_null(strchr(s.r.err, '\n') ? strchr(strchr(s.r.err, '\n') + 1, '\n') : NULL);
    at_run_result_free(&u);
    at_session_free(&s);
}
END_TEST

/* Python's ctypes loads with RTLD_LOCAL: the same plugins from a Python program. */
START_TEST(python_ctypes_plugins)
{
    at_session s;
    at_run_result u;
    run_both(&s, &u, "local-py",
             (const char *const[]){"/usr/bin/python3", "-c",
                                   "import ctypes, sys\n"
                                   "print([ctypes.CDLL(p).plugin_run() for p in sys.argv[1:]])",
                                   "liblocal_omp.so", "liblocal_glib.so", NULL});
    same(&s, &u, true);
    ok_traced(&s);
    ck_assert_str_eq(s.r.out, "[2804, 7]\n");
    omp_flowed(&s.t);
    glib_flowed(&s.t);
    at_run_result_free(&u);
    at_session_free(&s);
}
END_TEST

/* dbus-python's GLib main loop binding (what python3 -m dbusmock uses) is an extension that links
 * GLib, loaded into its own local scope; connecting to a bus gives GLib its watch sources. */
START_TEST(python_dbus_glib)
{
    at_session s;
    at_run_result u;
    run_both(&s, &u, "local-dbus",
             (const char *const[]){"/usr/bin/dbus-run-session", "--", "/usr/bin/python3", "-c",
                                   "import dbus, dbus.mainloop.glib\n"
                                   "dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)\n"
                                   "bus = dbus.SessionBus()\n"
                                   "print('names', 'org.freedesktop.DBus' in bus.list_names())",
                                   NULL});
    same(&s, &u, false); /* the bus daemon's stderr names its pid */
    ck_assert_str_eq(s.r.out, "names True\n");
    /* no process of the session is in an activity: dbus-run-session forks and execs the bus and
     * python, which fork and exec in turn, and none records anything, so none writes a file */
    char **files = at_trace_files(s.dir);
    ck_assert_msg(at_strv_len(files) == 0, "%zu files, the first %s", at_strv_len(files),
                  files[0] ? files[0] : "");
    at_strv_free(files);
    at_run_result_free(&u);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("harm_local");
    TCase *tc = tcase_create("local");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, omp_plugin_local);
    tcase_add_test(tc, glib_plugin_local);
    tcase_add_test(tc, two_local_copies);
    tcase_add_test(tc, local_copies_unloaded);
    tcase_add_test(tc, global_and_local_copy);
    tcase_add_test(tc, undefined_ends_like_the_linker);
    tcase_add_test(tc, python_ctypes_plugins);
    tcase_add_test(tc, python_dbus_glib);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
