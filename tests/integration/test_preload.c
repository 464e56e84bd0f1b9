/* test_preload: the preload core as a program sees it: same output and exit status as untraced,
 * a trace in the working folder by default, settings from the environment, one "acttrace:" line
 * and an untraced run on every failure, errno untouched by interposed calls, signal dispositions
 * reported as the program set them; nothing at all in a secure-execution (setgid) program. */
#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "at_testlib.h"

static int count_lines_with(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

START_TEST(test_same_output_and_status)
{
    at_session a, b;
    const char *argv[] = {"exit_paths", "return", "5", NULL};
    ck_assert_int_eq(at_session_run(&a, "same", argv, NULL), 0);
    /* untraced reference run of the same program */
    char *fx = at_fixture_path("exit_paths");
    const char *av[] = {fx, "return", "5", NULL};
    at_run_opts o = {.argv = av, .no_preload = true};
    memset(&b, 0, sizeof b);
    ck_assert_int_eq(at_run(&o, &b.r), 0);
    char d[512];
    ck_assert_msg(a.r.exited && a.r.status == 3, "%s", at_session_describe(&a, d, sizeof d));
    ck_assert(b.r.exited && b.r.status == 3);
    ck_assert_str_eq(a.r.out, b.r.out);
    ck_assert_str_eq(a.r.err, "");
    free(fx);
    at_run_result_free(&b.r);
    at_session_free(&a);
}
END_TEST

START_TEST(test_default_file_in_cwd)
{
    at_session s;
    const char *argv[] = {"exit_paths", "return", "3", NULL};
    ck_assert_int_eq(at_session_run(&s, "deffile", argv, (const char *const[]){"ACTTRACE_OUTPUT", NULL}), 0);
    char path[4096], d[512];
    snprintf(path, sizeof path, "%s/acttrace-%d.nettrace", s.dir, s.r.pid);
    ck_assert_msg(at_file_exists(path), "no %s: %s", path, at_session_describe(&s, d, sizeof d));
    ck_assert_msg(s.has_trace && s.load_rc == 0, "%s", at_session_describe(&s, d, sizeof d));
    ck_assert_int_eq(s.t.pid, s.r.pid);
    ck_assert_uint_eq(at_count(&s.t, NULL, "Before"), 3);
    at_session_free(&s);
}
END_TEST

START_TEST(test_output_setting)
{
    at_session s;
    const char *argv[] = {"exit_paths", "return", "2", NULL};
    const char *env[] = {"ACTTRACE_OUTPUT=custom-%p.out.nettrace", NULL};
    ck_assert_int_eq(at_session_run(&s, "output", argv, env), 0);
    char path[4096], d[512];
    snprintf(path, sizeof path, "%s/custom-%d.out.nettrace", s.dir, s.r.pid);
    ck_assert_msg(at_file_exists(path), "no %s: %s", path, at_session_describe(&s, d, sizeof d));
    at_session_free(&s);
}
END_TEST

/* The output pattern as given, made absolute at the start (a relative one in the folder the program
 * started in): the usual forms are checked in place, the rest expanded as the open will; a folder
 * that cannot take the file is one line naming the file, and the program runs untraced. */
static const struct {
    const char *cwd;     /* under the test's folder */
    const char *pattern; /* ACTTRACE_OUTPUT; NULL: a relative name of over 256 bytes */
    const char *file;    /* expected, relative to cwd ("%d": the pid); NULL: none */
    const char *err;     /* expected in the one "acttrace:" line ("%s": the cwd, "%d": the pid) */
} forms[] = {
    {"plain", "t-%p.nettrace", "t-%d.nettrace", NULL},
    {"plain", "./t.nettrace", "t.nettrace", NULL},
    {"per%cent", "t-%p.nettrace", "t-%d.nettrace", NULL},
    {"long", NULL, NULL, NULL},
    {"plain", "nosub/t.nettrace", NULL, "cannot create %s/nosub/t.nettrace"},
    {"plain", "d%p/t.nettrace", NULL, "cannot create %s/d%d/t.nettrace"},
};

START_TEST(test_output_folder_forms)
{
    char *top = at_tmpdir("outforms");
    char cwd[4096], pat[4096], want[8400], d[512];
    snprintf(cwd, sizeof cwd, "%s/%s", top, forms[_i].cwd);
    ck_assert_int_eq(mkdir(cwd, 0755), 0);
    if (forms[_i].pattern) {
        snprintf(pat, sizeof pat, "ACTTRACE_OUTPUT=%s", forms[_i].pattern);
    } else { /* 30 folders of 10 bytes: a relative name longer than the start keeps on its stack */
        size_t n = (size_t)snprintf(pat, sizeof pat, "ACTTRACE_OUTPUT=");
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", cwd);
        for (int k = 0; k < 30; k++) {
            n += (size_t)snprintf(pat + n, sizeof pat - n, "folder%03d/", k);
            snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/folder%03d", k);
            ck_assert_int_eq(mkdir(dir, 0755), 0);
        }
        snprintf(pat + n, sizeof pat - n, "t.nettrace");
    }
    const char *argv[] = {at_fixture_path("exit_paths"), "return", "2", NULL};
    const char *env[] = {pat, NULL};
    at_run_opts o = {.argv = argv, .env = env, .cwd = cwd, .deadline_s = 60};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 3, "%s", at_run_describe(&r, d, sizeof d));
    ck_assert_str_eq(r.out, "before return\n");
    if (forms[_i].err) {
        char msg[4200];
        if (strstr(forms[_i].err, "%d"))
            snprintf(msg, sizeof msg, forms[_i].err, cwd, (int)r.pid);
        else
            snprintf(msg, sizeof msg, forms[_i].err, cwd);
        ck_assert_int_eq(count_lines_with(r.err, "acttrace:"), 1);
        ck_assert_msg(strstr(r.err, msg) && strstr(r.err, "untraced"), "want '%s' in: %s", msg,
                      r.err);
        char **files = at_trace_files(cwd);
        ck_assert_uint_eq(at_strv_len(files), 0);
        at_strv_free(files);
    } else {
        ck_assert_msg(r.err[0] == 0, "stderr: %s", r.err);
        if (forms[_i].file) {
            char f[256];
            snprintf(f, sizeof f, forms[_i].file, (int)r.pid);
            snprintf(want, sizeof want, "%s/%s", cwd, f);
        } else {
            snprintf(want, sizeof want, "%s/%s", cwd, pat + strlen("ACTTRACE_OUTPUT="));
        }
        at_trace t;
        ck_assert_msg(at_trace_load(want, &t) == 0 && t.complete, "%s: %s", want, t.err);
        ck_assert_int_eq(t.pid, r.pid);
        at_trace_free(&t);
    }
    free((char *)argv[0]);
    at_run_result_free(&r);
    at_rmtree(top);
    free(top);
}
END_TEST

START_TEST(test_config_file_missing)
{
    at_session s;
    const char *argv[] = {"exit_paths", "return", "2", NULL};
    const char *env[] = {"ACTTRACE_CONFIG=/some/where.conf", NULL};
    ck_assert_int_eq(at_session_run(&s, "config", argv, env), 0);
    char d[512];
    ck_assert_msg(strstr(s.r.err, "acttrace: /some/where.conf: cannot open") &&
                      strstr(s.r.err, "no function is hooked"),
                  "stderr: %s", s.r.err);
    ck_assert_int_eq(count_lines_with(s.r.err, "acttrace:"), 1);
    /* and it still traces with the defaults */
    ck_assert_msg(s.has_trace && s.load_rc == 0, "%s", at_session_describe(&s, d, sizeof d));
    ck_assert(s.r.exited && s.r.status == 3);
    at_session_free(&s);
}
END_TEST

START_TEST(test_bad_setting_runs_untraced)
{
    at_session s;
    const char *argv[] = {"exit_paths", "return", "2", NULL};
    const char *env[] = {"ACTTRACE_FDFLOW=maybe", NULL};
    ck_assert_int_eq(at_session_run(&s, "badset", argv, env), 0);
    ck_assert_int_eq(count_lines_with(s.r.err, "acttrace:"), 1);
    ck_assert_msg(strstr(s.r.err, "ACTTRACE_FDFLOW=maybe"), "stderr: %s", s.r.err);
    ck_assert(s.r.exited && s.r.status == 3);
    ck_assert_str_eq(s.r.out, "before return\n");
    char **files = at_trace_files(s.dir);
    ck_assert_uint_eq(at_strv_len(files), 0);
    at_strv_free(files);
    at_session_free(&s);
}
END_TEST

START_TEST(test_unwritable_output_runs_untraced)
{
    at_session s;
    const char *argv[] = {"exit_paths", "return", "2", NULL};
    const char *env[] = {"ACTTRACE_OUTPUT=/nonexistent-dir/x/t.nettrace", NULL};
    ck_assert_int_eq(at_session_run(&s, "unwritable", argv, env), 0);
    ck_assert_int_eq(count_lines_with(s.r.err, "acttrace:"), 1);
    ck_assert_msg(strstr(s.r.err, "untraced"), "stderr: %s", s.r.err);
    ck_assert(s.r.exited && s.r.status == 3);
    ck_assert_str_eq(s.r.out, "before return\n");
    at_session_free(&s);
}
END_TEST

START_TEST(test_errno_preserved)
{
    at_session s;
    const char *argv[] = {"errno_check", NULL};
    ck_assert_int_eq(at_session_run(&s, "errno", argv, NULL), 0);
    char d[512];
    ck_assert_msg(s.r.exited && s.r.status == 0, "%s / %s", s.r.out, at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(s.r.out, "ok\n");
    at_session_free(&s);
}
END_TEST

START_TEST(test_dispositions_as_set)
{
    at_session s;
    const char *argv[] = {"exit_paths", "query", "0", NULL};
    ck_assert_int_eq(at_session_run(&s, "query", argv, NULL), 0);
    ck_assert_str_eq(s.r.out, "before query\nquit default\nterm default\nterm-after ignored\n");
    ck_assert(s.r.exited && s.r.status == 0);
    at_session_free(&s);
}
END_TEST

START_TEST(test_threads_alone_make_no_file)
{
    /* a program that records nothing but its threads' begin and end writes no file (they are
     * written with the file of a program that records something: test_thread) */
    at_session s;
    const char *argv[] = {"bench_ops", "thread", "3", NULL};
    ck_assert_int_eq(at_session_run(&s, "plain", argv, NULL), 0);
    char d[512];
    ck_assert_msg(s.r.exited && s.r.status == 0 && !s.has_trace, "%s", at_session_describe(&s, d, sizeof d));
    char **files = at_trace_files(s.dir);
    ck_assert_uint_eq(at_strv_len(files), 0);
    at_strv_free(files);
    at_session_free(&s);
}
END_TEST

START_TEST(test_trace_survives_closing_all_fds)
{
    at_session s;
    const char *argv[] = {"closes_all", NULL};
    ck_assert_int_eq(at_session_run(&s, "closeall", argv, NULL), 0);
    char d[512];
    ck_assert_msg(s.r.exited && s.r.status == 0, "%s", at_session_describe(&s, d, sizeof d));
    char p[4096];
    snprintf(p, sizeof p, "%s/data.txt", s.dir);
    char *data = at_read_file(p, NULL);
    ck_assert_msg(data && !strcmp(data, "payload\n"), "the program's file holds '%s'", data ? data : "(none)");
    free(data);
    ck_assert_msg(s.has_trace && s.load_rc == 0, "%s", at_session_describe(&s, d, sizeof d));
    ck_assert_uint_eq(at_count(&s.t, NULL, "Done"), 100);
    /* the shim's descriptors (the trace, libunwind's pipe) sit far from the low numbers: the
     * program's first open gets 3, as untraced */
    ck_assert_str_eq(s.r.out, "first 3\n");
    at_session_free(&s);
}
END_TEST

/* A program puts its own file on the trace's descriptor: through dup2 or dup3 (the trace moves
 * first), or through raw system calls no wrapper sees (the writer finds the number is no longer its
 * file and opens the trace again). The program's file holds only its own bytes, and the trace holds
 * every event, from before and after. */
static const char *const clobber_modes[] = {"dup2", "dup3", "raw"};
START_TEST(test_trace_survives_fd_clobber)
{
    at_session s;
    const char *argv[] = {"closes_all", clobber_modes[_i % 3], NULL};
    /* the writer's own table (the trace is nowhere in the program's), and the program's table, as
     * where the kernel refuses one of its own */
    const char *env[] = {_i < 3 ? "ACTTRACE_WRITER_TABLE=own" : "ACTTRACE_WRITER_TABLE=shared", NULL};
    ck_assert_int_eq(at_session_run(&s, "clobber", argv, env), 0);
    char d[512];
    ck_assert_msg(s.r.exited && s.r.status == 0, "%s: %s", clobber_modes[_i % 3],
                  at_session_describe(&s, d, sizeof d));
    char p[4096];
    snprintf(p, sizeof p, "%s/data.txt", s.dir);
    size_t len = 0;
    char *data = at_read_file(p, &len);
    ck_assert_msg(data && len == 8 && !strcmp(data, "payload\n"),
                  "%s: the program's file holds %zu bytes", clobber_modes[_i % 3], len);
    free(data);
    ck_assert_msg(s.has_trace && s.load_rc == 0, "%s", at_session_describe(&s, d, sizeof d));
    ck_assert_uint_eq(at_count(&s.t, NULL, "Before"), 50);
    ck_assert_uint_eq(at_count(&s.t, NULL, "Done"), 100);
    ck_assert_msg(!strstr(s.r.err, "acttrace"), "%s: stderr: %s", clobber_modes[_i % 3], s.r.err);
    at_session_free(&s);
}
END_TEST

/* Calls that arrive before the shim's constructor (the executable's .preinit_array) reach the real
 * functions, and tracing then starts as usual. */
START_TEST(test_calls_before_constructor)
{
    /* Under check-asan the preloaded ASan runtime is itself not initialised yet in .preinit_array
     * and aborts in its own pthread_create (with or without the shim): nothing to learn there. */
    const char *asan = getenv("ACTTRACE_ASAN");
    if (asan && *asan == '1')
        return;
    at_session s;
    const char *argv[] = {"early_calls", NULL};
    ck_assert_int_eq(at_session_run(&s, "early", argv, NULL), 0);
    char d[512];
    ck_assert_msg(s.r.exited && s.r.status == 0, "%s", at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(s.r.out, "early ok\nmain ok\n");
    ck_assert_str_eq(s.r.err, "");
    ck_assert_msg(s.has_trace && s.load_rc == 0, "%s", at_session_describe(&s, d, sizeof d));
    long m = at_find(&s.t, NULL, "MainStart", 0), in = at_find(&s.t, NULL, "InThread", 0);
    ck_assert(m >= 0 && in >= 0);
    ck_assert_str_eq(s.t.ev[in].act_path, s.t.ev[m].act_path);
    /* only main's thread was traced: the early one ran before the shim was on */
    ck_assert_uint_eq(at_count(&s.t, "acttrace-shim", "ThreadBegin"), 1);
    at_session_free(&s);
}
END_TEST

/* The acttrace.h API takes names by pointer: names that change under the same pointer (a reused
 * buffer) mark and start under what the buffer holds at each call. */
START_TEST(test_api_names_by_content)
{
    at_session s;
    const char *argv[] = {"api_names", NULL};
    ck_assert_int_eq(at_session_run(&s, "apinames", argv, NULL), 0);
    char d[512];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.load_rc == 0, "%s",
                  at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(s.r.out, "marks 30\nthreads 8000\n");
    const at_trace *t = &s.t;
    for (int i = 0; i < 12; i++) {
        char name[16], v[16];
        snprintf(name, sizeof name, "Mark%d", i % 3);
        snprintf(v, sizeof v, "%d", i);
        ck_assert_msg(at_find_field(t, name, "Value", v, 0) >= 0, "no %s with Value %s", name, v);
        ck_assert_msg(at_find_field(t, "Lit", "Value", v, 0) >= 0, "no Lit with Value %s", v);
    }
    ck_assert_uint_eq(at_count(t, NULL, "Mark0"), 4 + 3);
    ck_assert_uint_eq(at_count(t, NULL, "Mark1"), 4);
    ck_assert_uint_eq(at_count(t, NULL, "Mark2"), 4);
    ck_assert(at_find_field(t, "Mark0", "Text", "\"hello\"", 0) >= 0);
    ck_assert(at_find_field(t, "Mark0", "Value", "102", 0) >= 0);
    for (int k = 0; k < 3; k++) {
        char start[32], stop[32], v[16];
        snprintf(start, sizeof start, "Job%dStart", k);
        snprintf(stop, sizeof stop, "Job%dStop", k);
        snprintf(v, sizeof v, "%d", 1000 + k);
        long a = at_find(t, NULL, start, 0), e = at_find_field(t, "Lit", "Value", v, 0);
        ck_assert_msg(a >= 0 && e > a, "%s", start);
        ck_assert_str_eq(t->ev[e].act_path, t->ev[a].act_path); /* the mark inside the job */
        ck_assert_msg(at_find(t, NULL, stop, (size_t)e) >= 0, "%s", stop);
    }
    /* four threads naming marks through their own buffers at once: each name as its text was */
    size_t seen = 0;
    for (size_t i = 0; i < t->n; i++) {
        long th, m;
        uint64_t v;
        if (sscanf(t->ev[i].name, "T%ldM%ld", &th, &m) != 2)
            continue;
        ck_assert(at_field_u64(&t->ev[i], "Value", &v));
        ck_assert_msg((long)(v / 100000) == th && (long)(v % 100000) % 5 == m, "%s with Value %llu",
                      t->ev[i].name, (unsigned long long)v);
        seen++;
    }
    ck_assert_uint_eq(seen, 8000);
    at_session_free(&s);
}
END_TEST

static bool copy_file(const char *from, const char *to, mode_t mode)
{
    size_t n;
    char *b = at_read_file(from, &n);
    FILE *f = b ? fopen(to, "wb") : NULL;
    bool ok = f && fwrite(b, 1, n, f) == n;
    ok = f && fclose(f) == 0 && ok;
    free(b);
    return ok && chmod(to, mode) == 0;
}

static int traces_in(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, ".nettrace") != NULL;
    if (d)
        closedir(d);
    return n;
}

/* A setgid program (secure-execution mode, AT_SECURE) under the shim: the shim is in the process
 * but does nothing, writes no file and says nothing; the same program without the setgid bit is
 * traced. glibc preloads into such a program only set-user-ID libraries from its own folders, so
 * the test puts a copy of the shim beside libc for the two runs (root only). */
START_TEST(test_secure_execution_untouched)
{
    if (getenv("ACTTRACE_ASAN")) { /* the sanitizer runtime cannot come first in such a program */
        fprintf(stderr, "test_secure_execution_untouched: skipped under check-asan\n");
        return;
    }
    Dl_info di;
    if (geteuid() != 0 || !dladdr((void *)printf, &di) || !di.dli_fname) {
        fprintf(stderr, "test_secure_execution_untouched: skipped (needs root)\n");
        return;
    }
    char libdir[4096], lib[4400], preload[256], prog[4200];
    snprintf(libdir, sizeof libdir, "%s", di.dli_fname);
    *strrchr(libdir, '/') = 0;
    snprintf(preload, sizeof preload, "LD_PRELOAD=libacttrace-sectest-%d.so", (int)getpid());
    snprintf(lib, sizeof lib, "%s/%s", libdir, preload + strlen("LD_PRELOAD="));
    char *dir = at_tmpdir("secure"), *fx = at_fixture_path("secure_probe");
    snprintf(prog, sizeof prog, "%s/probe", dir);
    bool set = copy_file(fx, prog, 0755) && chown(prog, 0, 65534) == 0 && chmod(prog, 02755) == 0;
    bool installed = set && copy_file(at_shim_path(), lib, 04755);
    const char *argv[] = {prog, NULL};
    const char *env[] = {preload, "ACTTRACE_OUTPUT=probe.nettrace", NULL};
    at_run_opts o = {.argv = argv, .env = env, .cwd = dir};
    at_run_result sec = {0}, plain = {0};
    int rc1 = installed ? at_run(&o, &sec) : -1;
    int files = traces_in(dir);
    int rc2 = installed && chmod(prog, 0755) == 0 ? at_run(&o, &plain) : -1;
    unlink(lib); /* before any assertion can end the test */
    ck_assert_msg(installed, "could not set up %s and %s", prog, lib);
    ck_assert_int_eq(rc1, 0);
    ck_assert_int_eq(rc2, 0);
    if (strcmp(sec.out, "secure=0 loaded=1\n") == 0) { /* a nosuid mount: no secure mode here */
        fprintf(stderr, "test_secure_execution_untouched: skipped (%s ignores setgid)\n", dir);
        goto out;
    }
    ck_assert_str_eq(sec.out, "secure=1 loaded=1\n");
    ck_assert(sec.exited && sec.status == 3);
    ck_assert_str_eq(sec.err, "");
    ck_assert_int_eq(files, 0);
    /* the control: the same program and library, traced */
    ck_assert_str_eq(plain.out, "secure=0 loaded=1\n");
    ck_assert(plain.exited && plain.status == 3);
    char path[4300];
    snprintf(path, sizeof path, "%s/probe.nettrace", dir);
    at_trace t;
    ck_assert_int_eq(at_trace_load(path, &t), 0);
    long ps = at_find(&t, NULL, "ProbeStart", 0), w = at_find(&t, NULL, "Worker", 0);
    ck_assert(ps >= 0 && w >= 0);
    ck_assert_str_eq(t.ev[w].act_path, t.ev[ps].act_path);
    ck_assert_uint_ne(t.ev[w].thread, t.ev[ps].thread);
    at_trace_free(&t);
out:
    at_run_result_free(&sec);
    at_run_result_free(&plain);
    at_rmtree(dir);
    free(dir);
    free(fx);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("preload");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_same_output_and_status);
    tcase_add_loop_test(tc, test_output_folder_forms, 0, sizeof forms / sizeof forms[0]);
    tcase_add_test(tc, test_secure_execution_untouched);
    tcase_add_test(tc, test_api_names_by_content);
    tcase_add_test(tc, test_default_file_in_cwd);
    tcase_add_test(tc, test_output_setting);
    tcase_add_test(tc, test_config_file_missing);
    tcase_add_test(tc, test_bad_setting_runs_untraced);
    tcase_add_test(tc, test_unwritable_output_runs_untraced);
    tcase_add_test(tc, test_errno_preserved);
    tcase_add_test(tc, test_dispositions_as_set);
    tcase_add_test(tc, test_threads_alone_make_no_file);
    tcase_add_test(tc, test_trace_survives_closing_all_fds);
    tcase_add_loop_test(tc, test_trace_survives_fd_clobber, 0, 6);
    tcase_add_test(tc, test_calls_before_constructor);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
