/* test_run: `acttrace run` as strace, uftrace and dotnet-trace users expect it, run as a user runs
 * it (the tool sets LD_PRELOAD itself):
 *   - it names exactly the files the run wrote: a second run in the same folder names only its own,
 *     and a config file's output pattern is followed;
 *   - an output pattern that cannot take the files (a missing folder, a read-only one, /dev/null,
 *     an unknown % sequence, "-"), a config's output that cannot, and a config with a mistake are
 *     refused with one line and exit 2, the program never started;
 *   - a relative pattern is the folder run was started in: a child that starts in another folder
 *     writes its file beside the others, not into the folder it works in;
 *   - a program that cannot be started is one line (not found in PATH, a folder) and no more; one
 *     the shim cannot be loaded into (statically linked) runs untraced, run saying why;
 *   - SIGTERM sent to acttrace run reaches the program once, and run exits 143 once the program has
 *     ended (no orphan); ^C typed at a terminal reaches the program once too (the terminal sends it
 *     to both);
 *   - --follow exec and none: the children run untraced, with no file, and print and write what
 *     they do untraced (dispositions and alternate stack as the kernel holds them); the shells
 *     system() starts are named by run, and left untraced by --follow none, too;
 *   - with hooks or samples (the writer started whole), an image that records nothing of its own
 *     (a shell that only execs) writes no file, the one it execs does;
 *   - -q and ACTTRACE_QUIET=1: no start-up line and no closing lines, errors still said. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "at_harmcmp.h"
#include "at_testlib.h"

#define DEADLINE_S 120

/* acttrace run under ASan would preload the shim without the sanitizer runtimes in front */
#define SKIP_UNDER_ASAN()                                                                          \
    do {                                                                                           \
        if (getenv("ACTTRACE_ASAN")) {                                                             \
            fprintf(stderr, "%s: skipped under ACTTRACE_ASAN (acttrace run sets LD_PRELOAD)\n",   \
                    __func__);                                                                     \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* <build>/acttrace with args in cwd, untraced itself (it preloads the shim for the program). */
static void tool(at_run_result *r, const char *cwd, const char *const *env, const char *const *args)
{
    const char *argv[32];
    char path[4200];
    snprintf(path, sizeof path, "%s/acttrace", at_build_dir());
    int n = 0;
    argv[n++] = path;
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    at_run_opts o = {.argv = argv, .env = env, .no_preload = true, .cwd = cwd, .deadline_s = DEADLINE_S};
    ck_assert_int_eq(at_run(&o, r), 0);
}

/* The files run's closing lines name, as absolute paths (relative ones are cwd's), sorted. */
static char **named_files(const char *err, const char *cwd)
{
    char **v = calloc(64, sizeof *v);
    size_t n = 0;
    static const char pre[] = "acttrace: trace written to ";
    for (const char *p = strstr(err, pre); p && n < 63; p = strstr(p + 1, pre)) {
        const char *s = p + sizeof pre - 1, *e = strstr(s, ": ");
        ck_assert(e != NULL);
        char *f = NULL;
        if (*s == '/')
            ck_assert(asprintf(&f, "%.*s", (int)(e - s), s) > 0);
        else
            ck_assert(asprintf(&f, "%s/%.*s", cwd, (int)(e - s), s) > 0);
        v[n++] = f;
    }
    for (size_t i = 0; i < n; i++) /* sorted, as at_trace_files lists */
        for (size_t j = i + 1; j < n; j++)
            if (strcmp(v[j], v[i]) < 0) {
                char *t = v[i];
                v[i] = v[j];
                v[j] = t;
            }
    return v;
}

static bool strv_has(char *const *v, const char *s)
{
    for (; v && *v; v++)
        if (!strcmp(*v, s))
            return true;
    return false;
}

START_TEST(test_names_exactly_its_files)
{
    SKIP_UNDER_ASAN();
    char *dir = at_tmpdir("run-names");
    char *fx = at_fixture_path("proc_chain");
    const char *args[] = {"run", "--", fx, "fork", NULL};
    at_run_result r1, r2;
    tool(&r1, dir, NULL, args);
    ck_assert_msg(r1.exited && r1.status == 0, "%s", r1.err);
    char **first = named_files(r1.err, dir), **all1 = at_trace_files(dir);
    /* the parent's and the fork child's */
    ck_assert_uint_eq(at_strv_len(first), 2);
    ck_assert_uint_eq(at_strv_len(all1), 2);
    for (size_t i = 0; first[i]; i++)
        ck_assert_str_eq(first[i], all1[i]);
    tool(&r2, dir, NULL, args);
    ck_assert_msg(r2.exited && r2.status == 0, "%s", r2.err);
    char **second = named_files(r2.err, dir), **all2 = at_trace_files(dir);
    ck_assert_uint_eq(at_strv_len(all2), 4);
    ck_assert_msg(at_strv_len(second) == 2, "the second run named: %s", r2.err);
    for (size_t i = 0; second[i]; i++)
        ck_assert_msg(!strv_has(first, second[i]) && strv_has(all2, second[i]), "%s", second[i]);
    at_strv_free(first);
    at_strv_free(second);
    at_strv_free(all1);
    at_strv_free(all2);
    at_run_result_free(&r1);
    at_run_result_free(&r2);

    /* a config file's output: run names the files there, not around its own pattern */
    char *out = at_tmpdir("run-cfgout"), conf[4300];
    snprintf(conf, sizeof conf, "%s/out.conf", dir);
    FILE *f = fopen(conf, "w");
    ck_assert(f != NULL);
    fprintf(f, "[trace]\noutput = %s/cfg-%%p.nettrace\n", out);
    fclose(f);
    const char *cargs[] = {"run", "-c", conf, "--", fx, "fork", NULL};
    tool(&r1, dir, NULL, cargs);
    ck_assert_msg(r1.exited && r1.status == 0, "%s", r1.err);
    char **named = named_files(r1.err, dir), **there = at_trace_files(out);
    ck_assert_msg(at_strv_len(named) == 2 && at_strv_len(there) == 2, "%s", r1.err);
    for (size_t i = 0; named[i]; i++) {
        ck_assert_str_eq(named[i], there[i]);
        ck_assert(strstr(named[i], "/cfg-") != NULL);
    }
    at_strv_free(named);
    at_strv_free(there);
    at_run_result_free(&r1);
    at_rmtree(out);
    free(out);
    free(fx);
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* -o PATTERN refused: exit 2, one line saying why, and the program (which would leave ran.txt) never
 * started. */
static void refused(const char *dir, const char *pattern, const char *why)
{
    const char *args[] = {"run", "-o", pattern, "--", "sh", "-c", "echo ran > ran.txt", NULL};
    at_run_result r;
    tool(&r, dir, NULL, args);
    ck_assert_msg(r.exited && r.status == 2, "-o %s: %s", pattern, r.err);
    char want[4400];
    snprintf(want, sizeof want, "acttrace run: -o %s: ", pattern);
    ck_assert_msg(!strncmp(r.err, want, strlen(want)) && strstr(r.err, why) &&
                      strchr(r.err, '\n') == r.err + r.errlen - 1,
                  "-o %s: %s", pattern, r.err);
    char ran[4300];
    snprintf(ran, sizeof ran, "%s/ran.txt", dir);
    ck_assert_msg(!at_file_exists(ran), "-o %s: the program ran", pattern);
    at_run_result_free(&r);
}

START_TEST(test_output_checked_first)
{
    char *dir = at_tmpdir("run-out");
    char pat[4400];
    snprintf(pat, sizeof pat, "%s/missing/t-%%p.nettrace", dir);
    refused(dir, pat, "does not exist");
    refused(dir, "/dev/null", "is a device");
    refused(dir, "x-%x.nettrace", "unknown % sequence '%x' (use %p, %t or %%)");
    refused(dir, "-", "each traced process writes a file of its own");
    refused(dir, "run-%t/t-%p.nettrace", "%t names a folder here, and folders are not made for traces");
    snprintf(pat, sizeof pat, "%s/", dir);
    refused(dir, pat, "names a folder");
    /* a folder root may not write: on a read-only bind mount (the tests run as root, for whom
     * permission bits never refuse) */
    char ro[4300];
    snprintf(ro, sizeof ro, "%s/ro", dir);
    ck_assert_int_eq(mkdir(ro, 0755), 0);
    if (mount(ro, ro, NULL, MS_BIND, NULL) != 0) {
        fprintf(stderr, "test_output_checked_first: read-only folder skipped: cannot bind-mount %s: %s\n",
                ro, strerror(errno));
    } else if (mount(NULL, ro, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) != 0) {
        fprintf(stderr, "test_output_checked_first: read-only folder skipped: cannot remount %s read-only: %s\n",
                ro, strerror(errno));
        umount(ro);
    } else {
        snprintf(pat, sizeof pat, "%s/t-%%p.nettrace", ro);
        refused(dir, pat, "read-only");
        ck_assert_int_eq(umount(ro), 0);
    }
    /* and a folder that can take them: the run goes ahead */
    if (getenv("ACTTRACE_ASAN"))
        goto out;
    snprintf(pat, sizeof pat, "%s/t-%%p.nettrace", dir);
    const char *args[] = {"run", "-q", "-o", pat, "--", "sh", "-c", "echo ran > ran.txt", NULL};
    at_run_result r;
    tool(&r, dir, NULL, args);
    ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
    char ran[4300];
    snprintf(ran, sizeof ran, "%s/ran.txt", dir);
    ck_assert(at_file_exists(ran));
    at_run_result_free(&r);
out:
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* run -c CONF refused before the program starts: exit 2, the one line want_prefix... */
static void config_refused(const char *dir, const char *conf_text, const char *want_prefix)
{
    char conf[4300];
    snprintf(conf, sizeof conf, "%s/c.conf", dir);
    FILE *f = fopen(conf, "w");
    ck_assert(f != NULL);
    fputs(conf_text, f);
    fclose(f);
    const char *args[] = {"run", "-c", conf, "--", "sh", "-c", "echo ran > ran.txt", NULL};
    at_run_result r;
    tool(&r, dir, NULL, args);
    char want[4600];
    snprintf(want, sizeof want, want_prefix, conf);
    ck_assert_msg(r.exited && r.status == 2 && !strncmp(r.err, want, strlen(want)) &&
                      strchr(r.err, '\n') == r.err + r.errlen - 1,
                  "config %s: exit %d, stderr '%s' (not exit 2 and one line '%s...')", conf_text, r.status,
                  r.err, want);
    char ran[4300];
    snprintf(ran, sizeof ran, "%s/ran.txt", dir);
    ck_assert_msg(!at_file_exists(ran), "config %s: the program ran", conf_text);
    at_run_result_free(&r);
}

START_TEST(test_config_checked_first)
{
    char *dir = at_tmpdir("run-conf");
    config_refused(dir, "[activity A]\nfunctoin = x\n",
                   "acttrace run: %s:2:1: unknown key 'functoin' in [activity A]");
    config_refused(dir, "not a config\n", "acttrace run: %s:1:");
    char text[4400], want[4600];
    snprintf(text, sizeof text, "[trace]\noutput = %s/missing/t-%%p.nettrace\n", dir);
    snprintf(want, sizeof want, "acttrace run: the config's output %s/missing/t-%%p.nettrace: the folder %s/missing "
                                "does not exist", dir, dir);
    /* want holds no %s for the config's name: escape none */
    char esc[9300];
    size_t k = 0;
    for (const char *c = want; *c && k + 2 < sizeof esc; c++) {
        if (*c == '%')
            esc[k++] = '%';
        esc[k++] = *c;
    }
    esc[k] = 0;
    config_refused(dir, text, esc);
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* A relative -o, and the default pattern, are run's folder: the program's image that starts in
 * another folder (a shell that cd's, then execs it) and its fork child write there, not where they
 * work. */
START_TEST(test_children_elsewhere)
{
    SKIP_UNDER_ASAN();
    char *dir = at_tmpdir("run-elsewhere");
    char *fx = at_fixture_path("proc_chain");
    char other[4300], script[8800];
    snprintf(other, sizeof other, "%s/other", dir);
    ck_assert_int_eq(mkdir(other, 0755), 0);
    snprintf(script, sizeof script, "cd '%s' && exec '%s' fork", other, fx);
    const char *with_o[] = {"run", "-o", "t-%p.nettrace", "--", "sh", "-c", script, NULL};
    const char *plain[] = {"run", "--", "sh", "-c", script, NULL};
    const char *const *cases[] = {with_o, plain};
    for (int c = 0; c < 2; c++) {
        at_run_result r;
        tool(&r, dir, NULL, cases[c]);
        ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
        char **named = named_files(r.err, dir), **here = at_trace_files(dir), **there = at_trace_files(other);
        ck_assert_msg(at_strv_len(there) == 0, "%s: a trace file was written into the program's folder %s: %s",
                      c ? "the default pattern" : "-o t-%p.nettrace", other, there[0]);
        ck_assert_msg(at_strv_len(named) == 2 && at_strv_len(here) == 2 * (size_t)(c + 1),
                      "files named %zu, in run's folder %zu: %s", at_strv_len(named), at_strv_len(here), r.err);
        for (size_t i = 0; named[i]; i++)
            ck_assert_msg(strv_has(here, named[i]), "%s is not in %s", named[i], dir);
        at_strv_free(named);
        at_strv_free(here);
        at_strv_free(there);
        at_run_result_free(&r);
    }
    free(fx);
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* A program that cannot be started: exit 127 or 126 and the one line that says why */
START_TEST(test_not_run)
{
    char *dir = at_tmpdir("run-notrun");
    struct {
        const char *prog;
        int status;
        const char *line;
    } cases[] = {
        {"no-such-program-xyz", 127,
         "acttrace run: cannot run no-such-program-xyz: No such file or directory (not found in PATH)\n"},
        {"/", 126, "acttrace run: cannot run /: it is a folder\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[] = {"run", "--", cases[i].prog, NULL};
        at_run_result r;
        tool(&r, dir, NULL, args);
        ck_assert_msg(r.exited && r.status == cases[i].status && !strcmp(r.err, cases[i].line),
                      "run %s: exit %d, stderr '%s'", cases[i].prog, r.status, r.err);
        at_run_result_free(&r);
    }
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* A program the shim cannot be loaded into runs all the same, with its own output and status, and
 * run says in one line why it is untraced (not "recorded no event") */
START_TEST(test_unhookable_runs_untraced)
{
    char *dir = at_tmpdir("run-static");
    char *st = at_fixture_path("static_exit");
    const char *args[] = {"run", "--", st, NULL};
    at_run_result r;
    tool(&r, dir, NULL, args);
    char want[4600];
    snprintf(want, sizeof want, "acttrace run: %s is statically linked: no dynamic loader runs for it to read "
                                "LD_PRELOAD, so the shim cannot be loaded into it and nothing in it can be hooked; it "
                                "runs untraced\n", st);
    ck_assert_msg(r.exited && r.status == 3 && !strcmp(r.out, "static program ran\n") && !strcmp(r.err, want),
                  "run static_exit: exit %d, stdout '%s', stderr '%s'", r.status, r.out, r.err);
    at_run_result_free(&r);
    free(st);
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* Reads path until it holds want (polling: the program writes it once it is ready), at most 60 s. */
static bool wait_for_text(const char *path, const char *want)
{
    for (int i = 0; i < 6000; i++) {
        char *t = at_read_file(path, NULL);
        bool seen = t && strstr(t, want);
        free(t);
        if (seen)
            return true;
        struct timespec d = {0, 10000000};
        nanosleep(&d, NULL);
    }
    return false;
}

START_TEST(test_sigterm_forwarded)
{
    SKIP_UNDER_ASAN();
    char *dir = at_tmpdir("run-sig");
    char *fx = at_fixture_path("run_signals"), tool_path[4200], mark[4300];
    snprintf(tool_path, sizeof tool_path, "%s/acttrace", at_build_dir());
    snprintf(mark, sizeof mark, "%s/ended", dir);
    const char *argv[] = {tool_path, "run", "--", fx, mark, NULL};
    at_run_opts o = {.argv = argv, .no_preload = true, .cwd = dir};
    at_proc p;
    ck_assert_int_eq(at_spawn(&o, &p), 0);
    ck_assert_msg(wait_for_text(p.outpath, "ready "), "the program never got ready");
    char *out = at_read_file(p.outpath, NULL);
    int prog = 0;
    ck_assert(sscanf(out, "ready %d", &prog) == 1 && prog > 0);
    free(out);
    ck_assert_int_eq(kill(p.pid, SIGTERM), 0); /* acttrace run's pid alone */
    at_run_result r;
    ck_assert_int_eq(at_wait(&p, &r), 0);
    ck_assert_msg(r.exited && r.status == 128 + SIGTERM, "run: %s / %s", r.out, r.err);
    /* the program got it once, and had ended (its last act written) when run exited */
    ck_assert_msg(strstr(r.out, "got TERM 1\n") && !strstr(r.out, "got INT") && !strstr(r.out, "got HUP"),
                  "%s", r.out);
    ck_assert(at_file_exists(mark));
    ck_assert_msg(kill(prog, 0) != 0 && errno == ESRCH, "the program %d outlived acttrace run", prog);
    ck_assert(strstr(r.err, "killed by signal 15"));
    at_run_result_free(&r);
    free(fx);
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* ^C at a terminal: the kernel sends SIGINT to the foreground process group, acttrace run and the
 * program alike; run must not send it again. acttrace run is made a session leader on a new
 * pseudo-terminal, and ^C is typed on it. */
START_TEST(test_terminal_interrupt_once)
{
    SKIP_UNDER_ASAN();
    char *dir = at_tmpdir("run-tty");
    char *fx = at_fixture_path("run_signals"), tool_path[4200];
    snprintf(tool_path, sizeof tool_path, "%s/acttrace", at_build_dir());
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    ck_assert(m >= 0 && grantpt(m) == 0 && unlockpt(m) == 0);
    const char *slave = ptsname(m);
    ck_assert(slave != NULL);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        setsid();
        int s = open(slave, O_RDWR); /* the session's controlling terminal now */
        if (s < 0 || chdir(dir) != 0)
            _exit(120);
        dup2(s, 0);
        dup2(s, 1);
        dup2(s, 2);
        close(m);
        execl(tool_path, tool_path, "run", "-q", "--", fx, (char *)NULL);
        _exit(121);
    }
    char buf[8192];
    size_t n = 0;
    bool typed = false;
    for (int i = 0; i < 6000; i++) { /* 60 s at most */
        struct timespec d = {0, 10000000};
        ssize_t k = 0;
        int fl = fcntl(m, F_GETFL);
        fcntl(m, F_SETFL, fl | O_NONBLOCK);
        k = read(m, buf + n, sizeof buf - 1 - n);
        if (k > 0)
            n += (size_t)k;
        buf[n] = 0;
        if (!typed && strstr(buf, "ready")) {
            ck_assert_int_eq(write(m, "\003", 1), 1); /* ^C */
            typed = true;
        }
        int st;
        if (k <= 0 && waitpid(pid, &st, WNOHANG) == pid) {
            ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGINT, "run ended with %#x: %s", st, buf);
            pid = 0;
            break;
        }
        if (k <= 0)
            nanosleep(&d, NULL);
    }
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        ck_abort_msg("acttrace run did not end: %s", buf);
    }
    ck_assert_msg(typed, "the program never got ready: %s", buf);
    ck_assert_msg(strstr(buf, "got INT 1") && !strstr(buf, "got INT 2"), "%s", buf);
    close(m);
    free(fx);
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* --follow exec|none: the fork child and the spawned and exec'd leaves run untraced: no file of
 * theirs, and what they print and write is what they do untraced. */
static void follow_untraced(const char *which)
{
    const char *argv[] = {"run_follow", NULL};
    at_run_result u;
    char *udir;
    ck_assert_int_eq(at_harm_untraced("run-follow-plain", argv, NULL, &u, &udir), 0);
    ck_assert_msg(u.exited && u.status == 0, "untraced: %s", u.err);
    char *dir = at_tmpdir("run-follow"), *fx = at_fixture_path("run_follow");
    const char *args[] = {"run", "--follow", which, "--", fx, NULL};
    at_run_result r;
    tool(&r, dir, NULL, args);
    ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
    ck_assert_str_eq(r.out, u.out);
    const char *names[] = {"child.out", "leaf-exec.out", "leaf-spawn.out"};
    for (size_t i = 0; i < 3; i++) {
        const char *d = at_harm_file_diff(dir, udir, names[i]);
        ck_assert_msg(d == NULL, "--follow %s: %s: %s", which, names[i], d);
    }
    /* the program's own file only, the one run names */
    char **files = at_trace_files(dir), **named = named_files(r.err, dir);
    ck_assert_msg(at_strv_len(files) == 1 && at_strv_len(named) == 1 && !strcmp(files[0], named[0]),
                  "--follow %s: %s", which, r.err);
    at_trace t;
    ck_assert_int_eq(at_trace_load(files[0], &t), 0);
    ck_assert(at_find(&t, NULL, "ParentStart", 0) >= 0);
    at_trace_free(&t);
    at_strv_free(files);
    at_strv_free(named);
    at_run_result_free(&r);
    at_run_result_free(&u);
    free(fx);
    at_rmtree(dir);
    at_rmtree(udir);
    free(dir);
    free(udir);
}

START_TEST(test_follow_exec)
{
    SKIP_UNDER_ASAN();
    follow_untraced("exec");
}
END_TEST

START_TEST(test_follow_none)
{
    SKIP_UNDER_ASAN();
    follow_untraced("none");
}
END_TEST

/* The shells of system() (glibc spawns them itself) follow the same rules, for a program with no
 * other thread: named by run, untraced under --follow none. */
START_TEST(test_system_children)
{
    SKIP_UNDER_ASAN();
    char *fx = at_fixture_path("proc_chain");
    const char *const *which[] = {(const char *const[]){"run", "--", fx, "system", NULL},
                                  (const char *const[]){"run", "--follow", "none", "--", fx, "system", NULL}};
    for (int k = 0; k < 2; k++) {
        char *dir = at_tmpdir("run-system");
        at_run_result r;
        tool(&r, dir, NULL, which[k]);
        ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
        char **files = at_trace_files(dir), **named = named_files(r.err, dir);
        /* the parent's and each leaf's (twice system()), or the parent's alone */
        size_t want = k == 0 ? 3 : 1;
        ck_assert_msg(at_strv_len(files) == want && at_strv_len(named) == want, "%s", r.err);
        for (size_t i = 0; i < want; i++)
            ck_assert_str_eq(files[i], named[i]);
        at_strv_free(files);
        at_strv_free(named);
        at_run_result_free(&r);
        at_rmtree(dir);
        free(dir);
    }
    free(fx);
}
END_TEST

/* The default traces them all: the children find the shim's handlers and alternate stack in place
 * (the control of the cases above) and the leaves run under the shim. */
START_TEST(test_follow_all)
{
    SKIP_UNDER_ASAN();
    char *dir = at_tmpdir("run-follow-all"), *fx = at_fixture_path("run_follow");
    const char *args[] = {"run", "--", fx, NULL};
    at_run_result r;
    tool(&r, dir, NULL, args);
    ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
    ck_assert_msg(strstr(r.out, "child: term=handled") && strstr(r.out, "leaf exec: preload=/") &&
                      strstr(r.out, "shim=mapped vars=none"), "%s", r.out);
    at_run_result_free(&r);
    free(fx);
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* With hooks (or samples) every image starts its writer at once; one that records nothing of its
 * own (a shell that execs the program) still leaves no file, the program's own image does. */
static void wrapper_leaves_no_file(const char *opt, const char *val)
{
    char *dir = at_tmpdir("run-wrapper"), *fx = at_fixture_path("proc_chain"), conf[4300], cmd[4400];
    snprintf(conf, sizeof conf, "%s/hooks.conf", dir);
    FILE *f = fopen(conf, "w");
    ck_assert(f != NULL);
    /* a libc function the programs never call: hooked all the same */
    fputs("[activity Peer]\nfunction = getpeername\nsignature = int getpeername(int fd, void *a, void *l)\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "exec %s leaf", fx);
    const char *args[] = {"run", opt, strcmp(opt, "-c") ? val : conf, "--", "sh", "-c", cmd, NULL};
    at_run_result r;
    tool(&r, dir, NULL, args);
    ck_assert_msg(r.exited && r.status == 0 && strstr(r.out, "env clean"), "%s / %s", r.out, r.err);
    char **files = at_trace_files(dir), **named = named_files(r.err, dir);
    ck_assert_msg(at_strv_len(files) == 1 && at_strv_len(named) == 1 && !strcmp(files[0], named[0]),
                  "%s %s: %s", opt, val, r.err);
    ck_assert_msg(strstr(files[0], "-exec1.nettrace") != NULL, "%s", files[0]); /* the leaf's image */
    at_trace t;
    ck_assert_int_eq(at_trace_load(files[0], &t), 0);
    ck_assert(at_find(&t, NULL, "LeafStart", 0) >= 0);
    at_trace_free(&t);
    at_strv_free(files);
    at_strv_free(named);
    at_run_result_free(&r);
    free(fx);
    at_rmtree(dir);
    free(dir);
}

START_TEST(test_wrapper_no_file_hooks)
{
    SKIP_UNDER_ASAN();
    wrapper_leaves_no_file("-c", "hooks");
}
END_TEST

START_TEST(test_wrapper_no_file_samples)
{
    SKIP_UNDER_ASAN();
    wrapper_leaves_no_file("--sample", "200");
}
END_TEST

START_TEST(test_quiet)
{
    char *dir = at_tmpdir("run-quiet"), *fx = at_fixture_path("proc_chain"), conf[4300];
    snprintf(conf, sizeof conf, "%s/hooks.conf", dir);
    FILE *f = fopen(conf, "w");
    ck_assert(f != NULL);
    fputs("[activity Peer]\nfunction = getpeername\nsignature = int getpeername(int fd, void *a, void *l)\n", f);
    fclose(f);
    /* LD_PRELOAD users: ACTTRACE_QUIET=1 leaves out the start-up line */
    char cenv[4400];
    snprintf(cenv, sizeof cenv, "ACTTRACE_CONFIG=%s", conf);
    const char *argv[] = {"proc_chain", "leaf", NULL};
    const char *loud[] = {cenv, NULL}, *hushed[] = {cenv, "ACTTRACE_QUIET=1", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run(&s, "quiet-env", argv, loud), 0);
    ck_assert_msg(strstr(s.r.err, "acttrace: 1 of 1 functions hooked"), "%s", s.r.err);
    at_session_free(&s);
    ck_assert_int_eq(at_session_run(&s, "quiet-env", argv, hushed), 0);
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.r.errlen == 0, "%s", s.r.err);
    at_session_free(&s);
    if (getenv("ACTTRACE_ASAN"))
        goto out;
    /* acttrace run -q: neither the shim's line nor run's own closing lines */
    const char *args[] = {"run", "-q", "-c", conf, "--", fx, "leaf", NULL};
    at_run_result r;
    tool(&r, dir, NULL, args);
    ck_assert_msg(r.exited && r.status == 0 && r.errlen == 0, "%s", r.err);
    char **files = at_trace_files(dir);
    ck_assert_uint_eq(at_strv_len(files), 1);
    at_strv_free(files);
    at_run_result_free(&r);
    const char *loudrun[] = {"run", "-c", conf, "--", fx, "leaf", NULL};
    tool(&r, dir, NULL, loudrun);
    ck_assert_msg(strstr(r.err, "functions hooked") && strstr(r.err, "acttrace: trace written to "), "%s", r.err);
    at_run_result_free(&r);
    /* errors are still said */
    const char *bad[] = {"run", "-q", "-o", "/dev/null", "--", fx, "leaf", NULL};
    tool(&r, dir, NULL, bad);
    ck_assert_msg(r.exited && r.status == 2 && strstr(r.err, "acttrace run: -o /dev/null"), "%s", r.err);
    at_run_result_free(&r);
out:
    free(fx);
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* getopt_long's forms: --opt=value and --opt value alike; the program's own options are its own. */
START_TEST(test_option_forms)
{
    char *dir = at_tmpdir("run-opts");
    const char *eq[] = {"run", "--output=o-%p.nettrace", "--follow=none", "--quiet", "sh", "-c",
                        "echo \"$ACTTRACE_OUTPUT $ACTTRACE_FOLLOW $ACTTRACE_QUIET $0\"", "-x", NULL};
    const char *sp[] = {"run", "--output", "o-%p.nettrace", "--follow", "none", "-q", "--", "sh", "-c",
                        "echo \"$ACTTRACE_OUTPUT $ACTTRACE_FOLLOW $ACTTRACE_QUIET $0\"", "-x", NULL};
    const char *const *forms[] = {eq, sp};
    /* the pattern made absolute: run's folder */
    char real[4096], want[4200];
    ck_assert(realpath(dir, real) != NULL);
    snprintf(want, sizeof want, "%s/o-%%p.nettrace none 1 -x\n", real);
    for (int i = 0; i < 2 && !getenv("ACTTRACE_ASAN"); i++) {
        at_run_result r;
        tool(&r, dir, NULL, forms[i]);
        ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
        ck_assert_str_eq(r.out, want);
        at_run_result_free(&r);
    }
    /* usage errors: one line, then the usage, exit 2 */
    const char *const bads[][4] = {{"run", "--follow", "some", NULL}, {"run", "--bogus", NULL},
                                   {"run", "-c", NULL}, {"run", "-q", NULL}};
    const char *why[] = {"acttrace run: --follow some: expected all, exec or none\nusage: acttrace run",
                         "acttrace run: unknown option '--bogus'\nusage: acttrace run",
                         "acttrace run: option '-c' needs a value\nusage: acttrace run",
                         "acttrace run: no program to run\nusage: acttrace run"};
    for (int i = 0; i < 4; i++) {
        at_run_result r;
        tool(&r, dir, NULL, bads[i]);
        ck_assert_msg(r.exited && r.status == 2 && !strncmp(r.err, why[i], strlen(why[i])), "%s", r.err);
        at_run_result_free(&r);
    }
    at_run_result r;
    const char *help[] = {"run", "--help", NULL};
    tool(&r, dir, NULL, help);
    ck_assert(r.exited && r.status == 0 && strstr(r.out, "--follow") && r.errlen == 0);
    at_run_result_free(&r);
    at_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("run");
    TCase *tc = tcase_create("run");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_names_exactly_its_files);
    tcase_add_test(tc, test_output_checked_first);
    tcase_add_test(tc, test_config_checked_first);
    tcase_add_test(tc, test_children_elsewhere);
    tcase_add_test(tc, test_not_run);
    tcase_add_test(tc, test_unhookable_runs_untraced);
    tcase_add_test(tc, test_sigterm_forwarded);
    tcase_add_test(tc, test_terminal_interrupt_once);
    tcase_add_test(tc, test_follow_exec);
    tcase_add_test(tc, test_follow_none);
    tcase_add_test(tc, test_follow_all);
    tcase_add_test(tc, test_system_children);
    tcase_add_test(tc, test_wrapper_no_file_hooks);
    tcase_add_test(tc, test_wrapper_no_file_samples);
    tcase_add_test(tc, test_quiet);
    tcase_add_test(tc, test_option_forms);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
