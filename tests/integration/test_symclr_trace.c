/* test_symclr_trace: ACTTRACE_SYMBOLS=methods end to end. stk_noreturn runs under the shim with the
 * Universal.System encoding and with the method-event one: the second file has no Universal.System
 * event but ModuleLoad and MethodLoadVerbose events, and our tools name every frame of it as they
 * name the first file's (including the caller whose call site is its last byte); the config file's
 * `symbols` key picks the same encoding and the environment wins over it. TraceEvent itself checks
 * the file (tests/clrsym, built here when dotnet is on PATH; AT_TRACEEVENT_REQUIRED=1 makes that
 * mandatory): it names the same frames and PerfView's activity view holds them.
 *
 * Rotated segments (demo_server, `mode = rotate`) each name their own frames the same way.
 *
 * The method-encoded files are written as *.mtrace, outside the set of kept *.nettrace files that
 * tests/compat's checker compares with its own (Universal.System) naming rule. */
#include <check.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "at_testlib.h"
#include "at_tracegen.h"

static char *dir;

static void setup(void) { dir = at_tmpdir("symclr"); }

static void teardown(void)
{
    at_rmtree(dir);
    free(dir);
}

static char *tool_out(const char *const *args)
{
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(r.exited && r.status == 0, "%s %s: exit %d: %s", args[0], args[1], r.status, r.err);
    char *out = strdup(r.out);
    at_run_result_free(&r);
    return out;
}

/* Runs stk_noreturn with its config (or conf), writing out; returns after_caller's address. */
static uint64_t run_fixture(const char *out, const char *conf, const char *symbols)
{
    char c[4200], o[4200], sy[64];
    if (conf)
        snprintf(c, sizeof c, "ACTTRACE_CONFIG=%s", conf);
    else
        snprintf(c, sizeof c, "ACTTRACE_CONFIG=%s/tests/data/hooks/compat_noreturn.conf", AT_SOURCE_DIR);
    snprintf(o, sizeof o, "ACTTRACE_OUTPUT=%s/%s", dir, out);
    snprintf(sy, sizeof sy, "ACTTRACE_SYMBOLS%s%s", symbols ? "=" : "", symbols ? symbols : "");
    const char *env[] = {c, o, sy, NULL};
    char *fx = at_fixture_path("stk_noreturn");
    const char *argv[] = {fx, NULL};
    at_run_opts opts = {.argv = argv, .env = env, .cwd = dir};
    at_run_result r;
    ck_assert_int_eq(at_run(&opts, &r), 0);
    char d[256];
    ck_assert_msg(r.exited && r.status == 0, "%s: %s", at_run_describe(&r, d, sizeof d), r.err);
    uint64_t caller = 0, after = 0;
    ck_assert_msg(sscanf(r.out, "caller=%" SCNx64 " after_caller=%" SCNx64, &caller, &after) == 2, "%s", r.out);
    at_run_result_free(&r);
    free(fx);
    return after;
}

typedef struct counts {
    size_t universal, modules, methods, stacked;
    size_t placed; /* stacked in an activity whose Start is in the file */
} counts;

static counts count(const char *path)
{
    at_trace t;
    ck_assert_msg(at_trace_load(path, &t) == 0, "%s: %s", path, t.err);
    counts c = {0};
    for (size_t i = 0; i < t.n; i++) {
        const at_tev *e = &t.ev[i];
        c.universal += !strcmp(e->provider, "Universal.System");
        bool clr = !strcmp(e->provider, "Microsoft-Windows-DotNETRuntime");
        c.modules += clr && e->event_id == 152;
        c.methods += clr && e->event_id == 143;
        /* a stack the activity view can place: in an activity whose Start is in this file (a
         * rotated segment's waits in the Serve activity begun segments earlier it cannot) */
        bool started = false;
        for (size_t j = 0; e->nframes && e->act_path[0] && j <= i && !started; j++)
            started = t.ev[j].opcode == 1 && !strcmp(t.ev[j].act_path, e->act_path);
        c.stacked += e->nframes > 0;
        c.placed += e->nframes > 0 && started;
    }
    at_trace_free(&t);
    return c;
}

/* The names of `dump --frame-names` (addresses dropped), sorted, one a line. */
static char *names(const char *frames)
{
    size_t n = 0, cap = 64;
    char **v = malloc(cap * sizeof *v);
    for (const char *l = frames; (l = strstr(l, "frame\t")); l++) {
        const char *a = strchr(l + 6, '\t');
        const char *e = a ? strchr(a, '\n') : NULL;
        if (!e)
            break;
        if (n == cap)
            v = realloc(v, (cap *= 2) * sizeof *v);
        v[n++] = strndup(a + 1, (size_t)(e - a - 1));
    }
    return at_strv_join_sorted(v, n);
}

/* The checker of tests/clrsym built against TraceEvent version (at_dotnet_built), or NULL without
 * dotnet, which AT_TRACEEVENT_REQUIRED=1 (CI) refuses. */
static char *checker_path(const char *version)
{
    char err[4600];
    char *p = at_dotnet_built(AT_SOURCE_DIR "/tests/clrsym/AtClrSym.csproj", version,
                              "clrsym-%s/bin/Release/net10.0/atclrsym", err, sizeof err);
    ck_assert_msg(p || !err[0], "%s", err);
    ck_assert_msg(p || !at_traceevent_required(), "dotnet is not on PATH (AT_TRACEEVENT_REQUIRED=1)");
    return p;
}

/* demo_server under tests/demo/demo.conf with [trace] mode = rotate 32K, symbols = methods: the
 * segments' paths (NULL-terminated, malloc'd), at least two. */
static char **run_rotated(void)
{
    char src[4200], conf[4200], out[4200];
    snprintf(src, sizeof src, "%s/tests/demo/demo.conf", AT_SOURCE_DIR);
    snprintf(conf, sizeof conf, "%s/rot.conf", dir);
    char *text = at_read_file(src, NULL);
    ck_assert_ptr_nonnull(text);
    char *tr = strstr(text, "[trace]\n");
    ck_assert_ptr_nonnull(tr);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%.*s[trace]\nmode = rotate 32K\nsymbols = methods\n%s", (int)(tr - text), text, tr + 8);
    fclose(f);
    free(text);
    char c[4300], o[4300];
    snprintf(c, sizeof c, "ACTTRACE_CONFIG=%s", conf);
    snprintf(o, sizeof o, "ACTTRACE_OUTPUT=%s/rot/r.mtrace", dir);
    snprintf(out, sizeof out, "%s/rot", dir);
    ck_assert_int_eq(mkdir(out, 0700), 0);
    const char *env[] = {c, o, "ACTTRACE_SYMBOLS", NULL};
    char *fx = at_fixture_path("demo_server");
    const char *argv[] = {fx, "200", "4", "8", NULL};
    at_run_opts opts = {.argv = argv, .env = env, .cwd = dir};
    at_run_result r;
    ck_assert_int_eq(at_run(&opts, &r), 0);
    char d[256];
    ck_assert_msg(r.exited && r.status == 0, "%s: %s", at_run_describe(&r, d, sizeof d), r.err);
    at_run_result_free(&r);
    free(fx);
    DIR *dd = opendir(out);
    ck_assert_ptr_nonnull(dd);
    char **v = calloc(64, sizeof *v);
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(dd)) && n < 63)
        if (de->d_name[0] != '.')
            ck_assert_int_gt(asprintf(&v[n++], "%s/%s", out, de->d_name), 0);
    closedir(dd);
    ck_assert_msg(n >= 2, "%zu segments", n);
    return v;
}

START_TEST(test_methods_name_frames_as_universal)
{
    uint64_t after_u = run_fixture("u.nettrace", NULL, NULL);
    uint64_t after_m = run_fixture("m.mtrace", NULL, "methods");
    char pu[4200], pm[4200];
    snprintf(pu, sizeof pu, "%s/u.nettrace", dir);
    snprintf(pm, sizeof pm, "%s/m.mtrace", dir);

    counts cu = count(pu), cm = count(pm);
    ck_assert_msg(cu.universal > 0 && cu.methods == 0 && cu.modules == 0, "default: %zu/%zu/%zu", cu.universal,
                  cu.modules, cu.methods);
    ck_assert_msg(cm.universal == 0, "methods: %zu Universal.System events", cm.universal);
    ck_assert_msg(cm.modules > 0 && cm.methods > 0 && cm.stacked > 0, "methods: %zu ModuleLoad, %zu MethodLoadVerbose, %zu stacked",
                  cm.modules, cm.methods, cm.stacked);

    /* the same names for the same stacks, and the call site on caller's last byte is caller's */
    const char *fu[] = {"dump", "--frame-names", pu, NULL}, *fm[] = {"dump", "--frame-names", pm, NULL};
    char *frames_u = tool_out(fu), *frames_m = tool_out(fm);
    char *nu = names(frames_u), *nm = names(frames_m);
    ck_assert_msg(strstr(nm, "stk_noreturn!caller\n") && strstr(nm, "stk_noreturn!nr_work\n"), "%s", nm);
    ck_assert_msg(!strcmp(nu, nm), "Universal.System names:\n%s\nmethod-event names:\n%s", nu, nm);
    char line[128];
    snprintf(line, sizeof line, "frame\t0x%" PRIx64 "\tstk_noreturn!caller\n", after_m - 1);
    ck_assert_msg(strstr(frames_m, line), "want %s in:\n%s", line, frames_m);
    (void)after_u;

    /* every rotated segment with stacks describes its own modules and functions (a segment may
     * hold none in activities it starts: the last few events of a slow run) */
    char **seg = run_rotated();
    size_t nstacked = 0;
    for (size_t i = 0; seg[i]; i++) {
        counts c = count(seg[i]);
        ck_assert_msg(c.universal == 0 && (c.stacked == 0 || (c.modules > 0 && c.methods > 0)),
                      "%s: %zu Universal.System, %zu ModuleLoad, %zu MethodLoadVerbose, %zu stacked", seg[i],
                      c.universal, c.modules, c.methods, c.stacked);
        if (c.placed > 0)
            seg[nstacked++] = seg[i];
        else
            free(seg[i]);
    }
    seg[nstacked] = NULL;
    ck_assert_msg(nstacked >= 2, "%zu segments with stacks", nstacked);

    /* the real reader: the same names, no Universal.System event, named frames in the activity view */
    const char *versions[] = {"3.1.21", "4.0.0"};
    for (int v = 0; v < 2; v++) {
        char *chk = checker_path(versions[v]);
        if (!chk) {
            printf("test_symclr_trace: dotnet is not on PATH: TraceEvent %s did not check the file\n", versions[v]);
            continue;
        }
        char tool[4200];
        snprintf(tool, sizeof tool, "%s/acttrace", at_build_dir());
        const char *cargv[80] = {chk, "--acttrace", tool, pm, pu};
        size_t k = 5;
        for (size_t i = 0; seg[i] && k < 79; i++)
            cargv[k++] = seg[i];
        at_run_opts o = {.argv = cargv, .no_preload = true};
        at_run_result r;
        ck_assert_int_eq(at_run(&o, &r), 0);
        /* the method-encoded file passes; the Universal.System one, as a control, fails for its
         * Universal.System events (PerfView would drop the activity view) */
        char want[64];
        snprintf(want, sizeof want, "\n%zu passed, 1 failed", k - 4);
        ck_assert_msg(r.exited && r.status == 1 && strstr(r.out, want)
                          && strstr(r.out, "Universal.System events: PerfView drops the activity view"),
                      "TraceEvent %s: %s%s", versions[v], r.out, r.err);
        if (getenv("AT_PRINT"))
            printf("%s", r.out);
        at_run_result_free(&r);
        free(chk);
    }
    at_strv_free(seg);
    free(nu);
    free(nm);
    free(frames_u);
    free(frames_m);
}
END_TEST

START_TEST(test_config_file_key_and_env_override)
{
    char conf[4200];
    snprintf(conf, sizeof conf, "%s/methods.conf", dir);
    char src[4200];
    snprintf(src, sizeof src, "%s/tests/data/hooks/compat_noreturn.conf", AT_SOURCE_DIR);
    char *text = at_read_file(src, NULL);
    ck_assert_ptr_nonnull(text);
    FILE *f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "[trace]\nsymbols = methods\n%s", text);
    fclose(f);
    free(text);

    static const struct {
        const char *env, *out;
        bool universal, methods;
    } cases[] = {
        {NULL, "file.mtrace", false, true},  /* the file's setting */
        {"1", "env1.nettrace", true, false}, /* the environment wins: Universal.System */
        {"0", "env0.nettrace", false, false}, /* ... or none */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_fixture(cases[i].out, conf, cases[i].env);
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, cases[i].out);
        counts c = count(p);
        ck_assert_msg((c.universal > 0) == cases[i].universal && (c.methods > 0) == cases[i].methods
                          && (c.modules > 0) == cases[i].methods && c.stacked > 0,
                      "ACTTRACE_SYMBOLS=%s: %zu Universal.System, %zu ModuleLoad, %zu MethodLoadVerbose",
                      cases[i].env ? cases[i].env : "(unset)", c.universal, c.modules, c.methods);
    }
}
END_TEST

/* A pool thread's CPU in a flowed activity is the activity's in PerfView too: glib_waits pushes a
 * task that burns 120 ms on a GLib pool thread in Round and one that burns 60 ms in Queue. TraceEvent
 * gives a thread only the activities started on it or brought by a TPL task; the shim writes the
 * hand-off as one (TaskScheduled, TaskExecute Start/Stop), so the activity view puts the pool
 * thread's samples under Round and Queue, not under no activity. */
START_TEST(test_handoff_samples_in_activity_view)
{
    char o[4200];
    snprintf(o, sizeof o, "ACTTRACE_OUTPUT=%s/gw.mtrace", dir);
    const char *env[] = {o, "ACTTRACE_SAMPLE_HZ=1000", "ACTTRACE_SYMBOLS=methods", NULL};
    char *fx = at_fixture_path("glib_waits");
    const char *argv[] = {fx, "1", NULL};
    at_run_opts opts = {.argv = argv, .env = env, .cwd = dir};
    at_run_result r;
    ck_assert_int_eq(at_run(&opts, &r), 0);
    char d[256];
    ck_assert_msg(r.exited && r.status == 0, "%s: %s", at_run_describe(&r, d, sizeof d), r.err);
    at_run_result_free(&r);
    free(fx);
    char *chk = checker_path("4.0.0");
    if (!chk) {
        printf("test_symclr_trace: dotnet is not on PATH: TraceEvent did not check the hand-offs\n");
        return;
    }
    char path[4300];
    snprintf(path, sizeof path, "%s/gw.mtrace", dir);
    const char *cargv[] = {chk, "--view", path, NULL};
    at_run_opts vo = {.argv = cargv, .no_preload = true};
    ck_assert_int_eq(at_run(&vo, &r), 0);
    ck_assert_msg(r.exited && r.status == 0, "atclrsym --view: %s%s", r.out, r.err);
    /* view<TAB>Thread (N)<TAB>Activity Name(path)<TAB>ms: the main thread is Burn's */
    char main_thread[64] = "";
    double pool_round = 0, pool_queue = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (const char *l = r.out; (l = strstr(l, "view\t")); l++) {
            char thread[64], act[256];
            double n;
            if (sscanf(l, "view\t%63[^\t]\t%255[^\t]\t%lf", thread, act, &n) != 3)
                continue;
            if (pass == 0 && !strncmp(act, "Activity Burn(", 14))
                snprintf(main_thread, sizeof main_thread, "%s", thread);
            if (pass == 1 && main_thread[0] && strcmp(thread, main_thread)) {
                pool_round += !strncmp(act, "Activity Round(", 15) ? n : 0;
                pool_queue += !strncmp(act, "Activity Queue(", 15) ? n : 0;
            }
        }
    }
    ck_assert_msg(main_thread[0], "no sample under Activity Burn:\n%s", r.out);
    /* 120 ms and 60 ms of CPU: at least half of it */
    ck_assert_msg(pool_round >= 60 && pool_queue >= 30,
                  "the pool thread's samples: %.1f ms under Round, %.1f ms under Queue:\n%s", pool_round,
                  pool_queue, r.out);
    if (getenv("AT_PRINT"))
        printf("%s", r.out);
    at_run_result_free(&r);
    free(chk);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("symclr_trace");
    TCase *tc = tcase_create("symclr");
    tcase_set_timeout(tc, 0);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_methods_name_frames_as_universal);
    tcase_add_test(tc, test_config_file_key_and_env_override);
    tcase_add_test(tc, test_handoff_samples_in_activity_view);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
