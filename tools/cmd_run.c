/* cmd_run.c: `acttrace run [-c CONFIG] [-o OUTPUT] -- PROGRAM ARGS`: runs a program under the shim
 * (LD_PRELOAD=<folder of this acttrace>/libacttrace.so, or ../lib/ for an installed layout) with
 * ACTTRACE_CONFIG and ACTTRACE_OUTPUT set, passes its exit status through (128+N for a signal, as
 * shells do) and says on stderr which trace files it left, as `strace -o` and `uftrace record` do. */
#include "cmds.h"
#include "ntreader.h"

#include <errno.h>
#include <fnmatch.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUN_DEFAULT_OUTPUT "acttrace-%p.nettrace" /* the shim's default (config/config.h) */

static void run_usage(FILE *f)
{
    fprintf(f, "usage: acttrace run [-c CONFIG] [-o OUTPUT] [--sample HZ] -- PROGRAM [ARGS...]\n"
               "  Runs PROGRAM under the shim and exits with its status. Then names the trace files.\n"
               "  -c CONFIG     the config file (ACTTRACE_CONFIG)\n"
               "  -o OUTPUT     the trace path pattern (ACTTRACE_OUTPUT; %%p = pid, %%t = start time;\n"
               "                default %s)\n"
               "  --sample HZ   CPU samples per second of each thread's CPU time, with its stack and\n"
               "                activity (ACTTRACE_SAMPLE_HZ; 0 = off, at most 10000)\n", RUN_DEFAULT_OUTPUT);
}

/* The shim beside this executable, or in ../lib (make install). */
static bool find_shim(char *out, size_t n)
{
    char self[PATH_MAX];
    ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
    if (l <= 0) return false;
    self[l] = 0;
    char *slash = strrchr(self, '/');
    if (!slash) return false;
    *slash = 0;
    snprintf(out, n, "%s/libacttrace.so", self);
    if (access(out, R_OK) == 0) return true;
    snprintf(out, n, "%s/../lib/libacttrace.so", self);
    if (access(out, R_OK) == 0) return true;
    snprintf(out, n, "%s/libacttrace.so", self);
    return false;
}

/* pattern with %p -> pid (or '*' when pid is 0), %t -> '*', %% -> %; glob-escaped otherwise. */
static void pattern_glob(const char *pat, long pid, char *out, size_t n)
{
    size_t k = 0;
    for (const char *s = pat; *s && k + 24 < n; s++) {
        if (s[0] == '%' && s[1] == 'p') {
            k += pid ? (size_t)snprintf(out + k, n - k, "%ld", pid) : (size_t)snprintf(out + k, n - k, "*");
            s++;
        } else if (s[0] == '%' && s[1] == 't') {
            out[k++] = '*';
            s++;
        } else if (s[0] == '%' && s[1] == '%') {
            out[k++] = '%';
            s++;
        } else {
            if (strchr("*?[\\", *s)) out[k++] = '\\';
            out[k++] = *s;
        }
    }
    out[k] = 0;
}

/* What a file holds, as its readers will see it: events, events lost, damage. */
static void file_summary(const char *path, char *out, size_t n)
{
    char err[512];
    nt_options o = {.skip_events = true};
    nt_reader *r = nt_open_ex(path, &o, err, sizeof err);
    if (!r) {
        snprintf(out, n, "unreadable (%s)", err);
        return;
    }
    nt_event ev;
    while (nt_next(r, &ev) == 1) {}
    const nt_counts *c = nt_get_counts(r);
    const nt_damage *d = nt_get_damage(r);
    int k = snprintf(out, n, "%llu events, %llu lost", (unsigned long long)c->events,
                     (unsigned long long)c->events_lost);
    if (d && k > 0 && (size_t)k < n)
        snprintf(out + k, n - (size_t)k, "; %s", d->text);
    nt_close(r);
}

/* Name the files the run left: the program's own, then those of its children (forks get
 * "-<pid>" or their own %p, exec'ed images "-exec<n>"), written since the run started. */
static void report_files(const char *pattern, long pid, time_t since)
{
    char g[3][PATH_MAX + 64];
    pattern_glob(pattern, pid, g[0], PATH_MAX);
    pattern_glob(pattern, 0, g[1], PATH_MAX);
    /* stem-<anything>.ext for forks/exec images of a pattern without %p */
    const char *dot = strrchr(g[1], '.'), *sl = strrchr(g[1], '/');
    if (dot && (!sl || dot > sl)) snprintf(g[2], sizeof g[2], "%.*s-*%.32s", (int)(dot - g[1]) & 0xfff, g[1], dot);
    else snprintf(g[2], sizeof g[2], "%.4000s-*", g[1]);
    glob_t gl;
    memset(&gl, 0, sizeof gl);
    for (int i = 0; i < 3; i++) glob(g[i], i ? GLOB_APPEND : 0, NULL, &gl);
    int shown = 0;
    for (int pass = 0; pass < 2; pass++) /* the program's own file first, then its children's */
        for (size_t i = 0; i < gl.gl_pathc; i++) {
            struct stat st;
            const char *p = gl.gl_pathv[i];
            bool dup = false;
            for (size_t j = 0; j < i; j++) dup |= !strcmp(gl.gl_pathv[j], p);
            if (dup || stat(p, &st) != 0 || !S_ISREG(st.st_mode) || st.st_mtime < since) continue;
            if ((fnmatch(g[0], p, 0) == 0) != (pass == 0)) continue;
            char what[700];
            file_summary(p, what, sizeof what);
            fprintf(stderr, "acttrace: trace written to %s%s: %s\n", p, pass ? " (a child process or an exec'ed image)" : "",
                    what);
            shown++;
        }
    /* the shim opens a process's file at its first event: no file is what a run that recorded
     * nothing leaves (a failure to trace is said by the shim's own "acttrace:" line) */
    if (!shown)
        fprintf(stderr, "acttrace: the program recorded no event, so no trace file was written (none matches %s)\n",
                g[0]);
    globfree(&gl);
}

int at_cmd_run(int argc, char **argv)
{
    const char *config = NULL, *output = NULL, *sample = NULL;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            run_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-c") && i + 1 < argc) {
            config = argv[++i];
        } else if (!strcmp(a, "-o") && i + 1 < argc) {
            output = argv[++i];
        } else if ((!strcmp(a, "--sample") && i + 1 < argc) || !strncmp(a, "--sample=", 9)) {
            const char *v = a[8] == '=' ? a + 9 : argv[++i];
            char *end;
            errno = 0;
            unsigned long hz = strtoul(v, &end, 10);
            if (!*v || *end || errno || hz > 10000 || v[0] == '-') {
                fprintf(stderr, "acttrace run: --sample %s: expected a rate from 0 to 10000 (per second)\n", v);
                return 2;
            }
            sample = v;
        } else if (a[0] == '-') {
            fprintf(stderr, "acttrace run: unknown option '%s'\n", a);
            run_usage(stderr);
            return 2;
        } else {
            break;
        }
    }
    if (i >= argc) {
        run_usage(stderr);
        return 2;
    }
    char shim[PATH_MAX + 32];
    if (!find_shim(shim, sizeof shim)) {
        fprintf(stderr, "acttrace run: %s not found (build it with make, or install with make install)\n", shim);
        return 2;
    }
    char cfg[PATH_MAX];
    if (config) {
        if (!realpath(config, cfg)) {
            fprintf(stderr, "acttrace run: config %s: %s\n", config, strerror(errno));
            return 2;
        }
        setenv("ACTTRACE_CONFIG", cfg, 1);
    }
    if (output) setenv("ACTTRACE_OUTPUT", output, 1);
    if (sample) setenv("ACTTRACE_SAMPLE_HZ", sample, 1);
    const char *pattern = output ? output : getenv("ACTTRACE_OUTPUT");
    if (!pattern || !*pattern) pattern = RUN_DEFAULT_OUTPUT;
    const char *old = getenv("LD_PRELOAD");
    char *pre = NULL;
    if (asprintf(&pre, "%s%s%s", shim, old && *old ? ":" : "", old && *old ? old : "") < 0) return 1;
    time_t since = time(NULL);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "acttrace run: fork: %s\n", strerror(errno));
        free(pre);
        return 1;
    }
    if (pid == 0) {
        setenv("LD_PRELOAD", pre, 1);
        execvp(argv[i], argv + i);
        fprintf(stderr, "acttrace run: cannot run %s: %s\n", argv[i], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    free(pre);
    /* like system(): the terminal's ^C and ^\ are for the program; we wait for it */
    struct sigaction ign = {.sa_handler = SIG_IGN}, oint, oquit;
    sigaction(SIGINT, &ign, &oint);
    sigaction(SIGQUIT, &ign, &oquit);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    sigaction(SIGINT, &oint, NULL);
    sigaction(SIGQUIT, &oquit, NULL);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
    if (WIFSIGNALED(st))
        fprintf(stderr, "acttrace: %s was killed by signal %d (%s)\n", argv[i], WTERMSIG(st), strsignal(WTERMSIG(st)));
    report_files(pattern, (long)pid, since);
    return code;
}
