/* cmd_run.c: `acttrace run [OPTIONS] [--] PROGRAM ARGS`: runs a program under the shim
 * (LD_PRELOAD=<folder of this acttrace>/libacttrace.so, or ../lib/ for an installed layout) with the
 * settings its options give, passes its exit status through (128+N for a signal, as shells do) and
 * says on stderr which trace files the run wrote, as `strace -o` and `uftrace record` do. The shim
 * names them: every traced process appends the path of each file it creates to a manifest in a
 * private folder (ACTTRACE_MANIFEST), read once the program has ended. */
#include "cmds.h"
#include "hookconf.h"
#include "ntreader.h"
#include "progcheck.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void run_usage(FILE *f)
{
    fprintf(f, "usage: acttrace run [OPTIONS] [--] PROGRAM [ARGS...]\n"
               "  Runs PROGRAM under the shim and exits with its status, then names the trace files\n"
               "  the run wrote.\n"
               "  -c, --config FILE     the config file of functions to hook (ACTTRACE_CONFIG)\n"
               "  -o, --output PATTERN  the trace path pattern (ACTTRACE_OUTPUT; %%p = pid, %%t = start\n"
               "                        time; default acttrace-%%p.nettrace)\n"
               "      --sample HZ       CPU samples per second of each thread's CPU time, with its stack\n"
               "                        and activity (ACTTRACE_SAMPLE_HZ; 0 = off, at most 10000)\n"
               "      --follow WHICH    which processes the program starts are traced: all (default),\n"
               "                        exec (the images it execs, not its children), none (only\n"
               "                        PROGRAM itself) (ACTTRACE_FOLLOW)\n"
               "  -q, --quiet           no start-up line from the shim and no closing lines; errors\n"
               "                        still print (ACTTRACE_QUIET)\n"
               "  -h, --help            this text\n"
               "  SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to acttrace run go to the program, whose end\n"
               "  it waits for (a terminal's ^C reaches the program once).\n");
}

/* One line naming the mistake, then the usage: exit status 2. */
static int run_usage_error(const char *fmt, const char *what)
{
    fputs("acttrace run: ", stderr);
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
    run_usage(stderr);
    return 2;
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

/* The output pattern can take the files: its folder exists, is a folder and can be written; a name
 * without %p or %t is not something else already (the shim creates its files anew and never writes
 * through a link or into a device: it would take another name beside it). false with one line said. */
static bool output_ok(const char *what, const char *pat)
{
    if (!*pat) {
        fprintf(stderr, "acttrace run: %s: the pattern is empty\n", what);
        return false;
    }
    if (!strcmp(pat, "-")) {
        fprintf(stderr, "acttrace run: %s -: each traced process writes a file of its own; give a "
                        "file name pattern such as acttrace-%%p.nettrace\n", what);
        return false;
    }
    size_t n = strlen(pat);
    if (n >= PATH_MAX) {
        fprintf(stderr, "acttrace run: %s: the pattern is longer than %d bytes\n", what, PATH_MAX - 1);
        return false;
    }
    const char *slash = strrchr(pat, '/');
    bool fixed = true; /* no %p or %t: one name for every process */
    for (const char *p = pat; *p; p++)
        if (*p == '%') {
            fixed &= p[1] == '%';
            if (p[1] != 'p' && p[1] != 't' && p[1] != '%') {
                fprintf(stderr, "acttrace run: %s %s: unknown %% sequence '%%%.1s' (use %%p, %%t or "
                                "%%%%)\n", what, pat, p[1] ? p + 1 : "");
                return false;
            }
            /* %p or %t before the last '/': a folder per process or per start, which nothing
             * makes (the shim creates files, never folders) */
            if (p[1] != '%' && slash && p < slash) {
                fprintf(stderr, "acttrace run: %s %s: %%%c names a folder here, and folders are not made "
                                "for traces; put %%p and %%t in the file name, in a folder that exists\n",
                        what, pat, p[1]);
                return false;
            }
            p++;
        }
    if (pat[n - 1] == '/') {
        fprintf(stderr, "acttrace run: %s %s: names a folder; give a file name pattern such as "
                        "%sacttrace-%%p.nettrace\n", what, pat, pat);
        return false;
    }
    char dir[PATH_MAX];
    size_t dl = 0; /* the folder as a path: '%%' is one '%' */
    if (!slash) dir[dl++] = '.';
    else if (slash == pat) dir[dl++] = '/';
    else
        for (const char *p = pat; p < slash && dl + 1 < sizeof dir; p++) {
            dir[dl++] = *p;
            if (p[0] == '%' && p[1] == '%') p++;
        }
    dir[dl] = 0;
    struct stat st;
    if (stat(dir, &st) != 0) {
        fprintf(stderr, "acttrace run: %s %s: the folder %s %s\n", what, pat, dir,
                errno == ENOENT ? "does not exist" : strerror(errno));
        return false;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "acttrace run: %s %s: %s is not a folder\n", what, pat, dir);
        return false;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        fprintf(stderr, "acttrace run: %s %s: the folder %s %s\n", what, pat, dir,
                errno == EROFS ? "is on a read-only file system" : errno == EACCES ? "is not writable" : strerror(errno));
        return false;
    }
    if (fixed && lstat(pat, &st) == 0 && !S_ISREG(st.st_mode)) {
        fprintf(stderr, "acttrace run: %s %s: %s, not a file the trace can replace (it writes new "
                        "regular files only)\n", what, pat,
                S_ISDIR(st.st_mode) ? "is a folder" : S_ISLNK(st.st_mode) ? "is a symbolic link"
                : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "is a device" : S_ISFIFO(st.st_mode) ? "is a FIFO"
                : "is not a regular file");
        return false;
    }
    return true;
}

/* What a file holds, as its readers will see it: events, events lost, damage. false: it cannot be
 * read or is damaged (worth saying even under --quiet). */
static bool file_summary(const char *path, char *out, size_t n)
{
    char err[512];
    nt_options o = {.skip_events = true};
    nt_reader *r = nt_open_ex(path, &o, err, sizeof err);
    if (!r) {
        snprintf(out, n, "unreadable (%s)", err);
        return false;
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
    return !d;
}

/* The private folder of the run's manifest: made at the start, removed at the end. */
typedef struct run_manifest {
    char dir[PATH_MAX];
    char path[PATH_MAX + 16];
} run_manifest;

static bool manifest_make(run_manifest *m)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || tmp[0] != '/') tmp = "/tmp";
    snprintf(m->dir, sizeof m->dir, "%s/acttrace-run-XXXXXX", tmp);
    if (!mkdtemp(m->dir)) { /* mode 0700: only this user's processes name their files there */
        fprintf(stderr, "acttrace run: cannot make a folder in %s: %s\n", tmp, strerror(errno));
        return false;
    }
    snprintf(m->path, sizeof m->path, "%s/files", m->dir);
    int fd = open(m->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "acttrace run: cannot create %s: %s\n", m->path, strerror(errno));
        rmdir(m->dir);
        return false;
    }
    close(fd);
    return true;
}

/* Name the files the run wrote, in the order they were created, each once; then the folder goes. */
static void manifest_report(run_manifest *m, bool quiet)
{
    FILE *f = fopen(m->path, "re");
    char cwd[PATH_MAX];
    size_t cl = getcwd(cwd, sizeof cwd) ? strlen(cwd) : 0;
    char **seen = NULL;
    size_t nseen = 0;
    char line[PATH_MAX + 8];
    while (f && fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        if (!n || line[n - 1] != '\n') continue; /* a torn line: a process killed while writing it */
        line[n - 1] = 0;
        bool dup = false;
        for (size_t i = 0; i < nseen && !dup; i++) dup = !strcmp(seen[i], line);
        struct stat st;
        if (dup || lstat(line, &st) != 0 || !S_ISREG(st.st_mode)) continue; /* a circular segment gone */
        char **ns = realloc(seen, (nseen + 1) * sizeof *seen);
        if (!ns) break;
        seen = ns;
        seen[nseen++] = strdup(line);
        char what[700];
        bool sound = file_summary(line, what, sizeof what);
        /* under the working folder: named from there, as the pattern named it */
        const char *shown = line;
        if (cl > 1 && !strncmp(line, cwd, cl) && line[cl] == '/') shown = line + cl + 1;
        if (!quiet || !sound) fprintf(stderr, "acttrace: trace written to %s: %s\n", shown, what);
    }
    /* the shim opens a process's file at its first event of the program's own: no file is what a
     * run that recorded nothing leaves (a failure to trace is said by the shim's own line) */
    if (!nseen && !quiet) fprintf(stderr, "acttrace: the program recorded no event, so no trace file was written\n");
    for (size_t i = 0; i < nseen; i++) free(seen[i]);
    free(seen);
    if (f) fclose(f);
    unlink(m->path);
    rmdir(m->dir);
}

/* Signals sent to acttrace run go to the program. The terminal's (^C, ^\, a hangup) reach the
 * whole foreground process group, the program with us: those (si_code SI_KERNEL) are not sent again.
 * A signal a process sends to our pid is passed on; one it sends to the whole group reaches the
 * program twice (nothing tells the two apart). */
static volatile sig_atomic_t run_child;
static const int run_forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

static void run_forward(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    int e = errno;
    if (run_child > 0 && (!si || si->si_code != SI_KERNEL)) kill((pid_t)run_child, sig);
    errno = e;
}

/* pat made absolute against the working directory of run ('%' in it doubled, as the pattern takes
 * it): the program's children that start in other folders (a server's workers, git's helpers) then
 * write their files beside the others, not into the folders they work in. false: no working
 * directory, or too long (pat stays as it is). */
static bool output_absolute(const char *pat, char *out, size_t n)
{
    if (pat[0] == '/') return false;
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd) || cwd[0] != '/') return false;
    size_t k = 0;
    for (const char *c = cwd; *c; c++) {
        if (k + 3 >= n) return false;
        if (*c == '%') out[k++] = '%';
        out[k++] = *c;
    }
    if (k > 1) out[k++] = '/';
    if (pat[0] == '.' && pat[1] == '/') pat += 2;
    size_t pl = strlen(pat);
    if (k + pl >= n || k + pl >= PATH_MAX) return false;
    memcpy(out + k, pat, pl + 1);
    return true;
}

/* The option getopt stopped at, as the user wrote it: "--name" whole, or the letter of a cluster. */
static const char *opt_named(const char *arg, int opt)
{
    static char o[3];
    if (!strncmp(arg, "--", 2) || opt <= 0 || opt > 255) return arg;
    o[0] = '-', o[1] = (char)opt, o[2] = 0;
    return o;
}

int at_cmd_run(int argc, char **argv)
{
    const char *config = NULL, *output = NULL, *sample = NULL, *follow = NULL;
    bool quiet = false;
    enum { OPT_SAMPLE = 256, OPT_FOLLOW };
    static const struct option longs[] = {
        {"config", required_argument, NULL, 'c'}, {"output", required_argument, NULL, 'o'},
        {"sample", required_argument, NULL, OPT_SAMPLE}, {"follow", required_argument, NULL, OPT_FOLLOW},
        {"quiet", no_argument, NULL, 'q'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    opterr = 0;
    optind = 0; /* glibc: start afresh */
    int c;
    /* '+': the options end at the program, whose own options are its own */
    while ((c = getopt_long(argc, argv, "+:c:o:qh", longs, NULL)) != -1) {
        switch (c) {
        case 'c': config = optarg; break;
        case 'o': output = optarg; break;
        case 'q': quiet = true; break;
        case 'h': run_usage(stdout); return 0;
        case OPT_SAMPLE: {
            char *end;
            errno = 0;
            unsigned long hz = strtoul(optarg, &end, 10);
            if (!*optarg || *end || errno || hz > 10000 || optarg[0] == '-')
                return run_usage_error("--sample %s: expected a rate from 0 to 10000 (per second)", optarg);
            sample = optarg;
            break;
        }
        case OPT_FOLLOW:
            if (strcmp(optarg, "all") && strcmp(optarg, "exec") && strcmp(optarg, "none"))
                return run_usage_error("--follow %s: expected all, exec or none", optarg);
            follow = optarg;
            break;
        case ':':
            return run_usage_error("option '%s' needs a value", opt_named(argv[optind - 1], optopt));
        default:
            return run_usage_error("unknown option '%s'", opt_named(argv[optind - 1], optopt));
        }
    }
    if (optind >= argc) return run_usage_error("%s", "no program to run");
    if (!argv[optind][0]) return run_usage_error("%s", "the program's name is empty");
    char **prog = argv + optind;
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
    /* the config the program's processes will read (-c, or ACTTRACE_CONFIG as it is): a mistake in
     * it is said now, before the program starts, rather than by each process as it runs untraced */
    const char *conf = getenv("ACTTRACE_CONFIG");
    char conf_output[sizeof ((at_hookconf *)0)->output] = "";
    if (conf && *conf) {
        at_hookconf *hc = malloc(sizeof *hc);
        char err[1024];
        if (!hc) return 1;
        if (at_hookconf_load(conf, hc, err, sizeof err) != 0) {
            fprintf(stderr, "acttrace run: %s\n", err);
            free(hc);
            return 2;
        }
        snprintf(conf_output, sizeof conf_output, "%s", hc->output);
        at_hookconf_free(hc);
        free(hc);
    }
    /* the pattern in effect (-o, else ACTTRACE_OUTPUT, else the config's, else the default), checked
     * and made absolute */
    const char *what = "-o", *env_output = getenv("ACTTRACE_OUTPUT");
    if (!output && env_output && *env_output) output = env_output, what = "ACTTRACE_OUTPUT";
    if (!output && conf_output[0]) output = conf_output, what = "the config's output";
    if (!output) output = "acttrace-%p.nettrace", what = "the default output";
    if (!output_ok(what, output)) return 2;
    char absout[PATH_MAX];
    setenv("ACTTRACE_OUTPUT", output_absolute(output, absout, sizeof absout) ? absout : output, 1);
    if (sample) setenv("ACTTRACE_SAMPLE_HZ", sample, 1);
    if (follow) setenv("ACTTRACE_FOLLOW", follow, 1);
    if (quiet) setenv("ACTTRACE_QUIET", "1", 1);
    run_manifest m;
    if (!manifest_make(&m)) return 1;
    const char *old = getenv("LD_PRELOAD");
    char *pre = NULL;
    if (asprintf(&pre, "%s%s%s", shim, old && *old ? ":" : "", old && *old ? old : "") < 0) return 1;
    /* the handlers are in place before the program exists, the signals held until its pid is known */
    sigset_t hold, saved;
    sigemptyset(&hold);
    struct sigaction fwd = {.sa_sigaction = run_forward, .sa_flags = SA_SIGINFO | SA_RESTART}, was[4];
    sigemptyset(&fwd.sa_mask);
    for (size_t k = 0; k < sizeof run_forwarded / sizeof run_forwarded[0]; k++) {
        sigaddset(&hold, run_forwarded[k]);
        sigaddset(&fwd.sa_mask, run_forwarded[k]);
    }
    sigprocmask(SIG_BLOCK, &hold, &saved);
    for (size_t k = 0; k < sizeof run_forwarded / sizeof run_forwarded[0]; k++) {
        sigaction(run_forwarded[k], NULL, &was[k]);
        if (was[k].sa_handler != SIG_IGN) sigaction(run_forwarded[k], &fwd, NULL); /* nohup stays nohup */
    }
    /* a program the shim cannot be loaded into runs all the same, untraced, and run says why */
    char found[PATH_MAX], blocked[256];
    const char *no_shim = at_prog_find(prog[0], found, sizeof found) == 0
                              ? at_prog_preload_blocked(found, blocked, sizeof blocked)
                              : NULL;
    if (no_shim) fprintf(stderr, "acttrace run: %s %s; it runs untraced\n", prog[0], no_shim);
    /* a pipe the child's exec closes: the program ran, or the child says why it could not */
    int xp[2];
    if (pipe2(xp, O_CLOEXEC) != 0) {
        fprintf(stderr, "acttrace run: pipe: %s\n", strerror(errno));
        free(pre);
        manifest_report(&m, true);
        return 1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "acttrace run: fork: %s\n", strerror(errno));
        close(xp[0]);
        close(xp[1]);
        free(pre);
        manifest_report(&m, true);
        return 1;
    }
    if (pid == 0) {
        for (size_t k = 0; k < sizeof run_forwarded / sizeof run_forwarded[0]; k++)
            sigaction(run_forwarded[k], &was[k], NULL);
        sigprocmask(SIG_SETMASK, &saved, NULL);
        setenv("LD_PRELOAD", pre, 1);
        setenv("ACTTRACE_MANIFEST", m.path, 1);
        close(xp[0]);
        execvp(prog[0], prog);
        int e = errno;
        struct stat ps;
        if (e == EACCES && strchr(prog[0], '/') && stat(prog[0], &ps) == 0 && S_ISDIR(ps.st_mode))
            fprintf(stderr, "acttrace run: cannot run %s: it is a folder\n", prog[0]);
        else
            fprintf(stderr, "acttrace run: cannot run %s: %s%s\n", prog[0], strerror(e),
                    e == ENOENT && !strchr(prog[0], '/') ? " (not found in PATH)" : "");
        (void)!write(xp[1], &e, sizeof e);
        _exit(e == ENOENT ? 127 : 126);
    }
    close(xp[1]);
    free(pre);
    run_child = pid;
    sigprocmask(SIG_SETMASK, &saved, NULL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    run_child = 0;
    int exec_errno = 0;
    bool not_run = read(xp[0], &exec_errno, sizeof exec_errno) == (ssize_t)sizeof exec_errno;
    close(xp[0]);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
    if (WIFSIGNALED(st) && !quiet)
        fprintf(stderr, "acttrace: %s was killed by signal %d (%s)\n", prog[0], WTERMSIG(st), strsignal(WTERMSIG(st)));
    /* nothing ran, or untraced as said: no "recorded no event" */
    manifest_report(&m, quiet || not_run || no_shim);
    return code;
}
