/* cmd_check.c: `acttrace check CONFIG -- PROGRAM [ARGS]`: is the config right, and how will each
 * of its functions be hooked in this program? The config is parsed here first (its errors are
 * printed as the shim would print them); then the program is loaded under the shim with
 * ACTTRACE_CHECK=1, which resolves every entry once every library is loaded, prints per entry
 * where the function was found and how it will be hooked (or why not), and exits before main. It
 * also says where it found each function with a signature; the signature is then compared here with
 * the function's DWARF prototype, where debug info can be found (sigcheck.c). A script (#!) is
 * checked in its interpreter, the binary the hooks apply to. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cliopt.h"
#include "cmds.h"
#include "hookconf.h"
#include "progcheck.h"
#include "sigcheck.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: acttrace check CONFIG -- PROGRAM [ARGS...]\n"
               "Parses CONFIG, loads PROGRAM under libacttrace.so without running its main, and\n"
               "prints for every configured function where it was found and how it will be hooked\n"
               "(GOT or entry patching, typed wrapper or stub), or why it cannot be.\n"
               "Each declared signature is compared with the function's DWARF prototype when debug\n"
               "info is found (the module's own, or under /usr/lib/debug by build-id or\n"
               ".gnu_debuglink); a line says when it is not.\n"
               "A script (#!) is checked in the interpreter it names (through /usr/bin/env too): the\n"
               "hooks apply to that binary and the libraries it loads.\n"
               "The shim is $ACTTRACE_SHIM, else libacttrace.so beside this program or in ../lib.\n"
               "Exit status: 0 every function can be hooked and no signature contradicts its\n"
               "prototype; 1 otherwise, or a config error, or a PROGRAM that cannot run; 2 usage error.\n");
}

/* Why path (found for what, at_prog_find's err) cannot run as a program, as the end of a sentence
 * about it ("is a directory"); NULL when it can. */
static const char *why_not(const char *what, const char *path, int err, char *buf, size_t n)
{
    struct stat st;
    if (err == ENOENT) return strchr(what, '/') ? "does not exist" : "is not found in PATH";
    if (err) snprintf(buf, n, "cannot be run: %s", strerror(err));
    else if (stat(path, &st) != 0) snprintf(buf, n, "cannot be run: %s", strerror(errno));
    else if (S_ISDIR(st.st_mode)) return "is a directory";
    else if (!S_ISREG(st.st_mode)) return "is not a regular file";
    else if (access(path, X_OK) != 0) snprintf(buf, n, "is not executable (mode %04o)", (unsigned)(st.st_mode & 07777));
    else return NULL;
    return buf;
}

/* The program to load: PROGRAM itself, or for a script the interpreter its #! line names (env's
 * NAME resolved in PATH), given the script and its arguments as the kernel would. Fills argv_out
 * (room for nargs + 2; its strings in exe, script, iarg, each PATH_MAX) and returns 0; 1 after a
 * message. */
static int program_argv(char **args, int nargs, char *exe, char *script, char *iarg, const char **argv_out)
{
    int n = 0;
    char why[128];
    const char *no = why_not(args[0], script, at_prog_find(args[0], script, PATH_MAX), why, sizeof why);
    if (no) {
        fprintf(stderr, "acttrace check: %s %s\n", strchr(args[0], '/') ? script : args[0], no);
        return 1;
    }
    snprintf(exe, PATH_MAX, "%s", script);
    char head[256] = "";
    FILE *f = fopen(script, "re");
    size_t k = f ? fread(head, 1, sizeof head - 1, f) : 0;
    if (f) fclose(f);
    head[k] = 0;
    if (f && (k < 2 || head[0] != '#' || head[1] != '!') && (k < 4 || memcmp(head, "\177ELF", 4))) {
        fprintf(stderr, "acttrace check: %s is neither an ELF program nor a script starting with #!\n", script);
        return 1;
    }
    if (!f || head[0] != '#') { /* a program (or one only the kernel may read) */
        argv_out[n++] = args[0];
        for (int i = 1; i < nargs; i++) argv_out[n++] = args[i];
        argv_out[n] = NULL;
        return 0;
    }
    /* "#!interpreter [one argument]" up to the end of the line */
    char *line = head + 2, *nl = strchr(line, '\n');
    if (!nl) {
        fprintf(stderr, "acttrace check: %s: its #! line is longer than %zu bytes\n", script, sizeof head - 3);
        return 1;
    }
    *nl = 0;
    if (nl > line && nl[-1] == '\r') { /* the kernel keeps the CR: it looks for "/bin/sh\r" */
        fprintf(stderr, "acttrace check: %s: its #! line ends with a carriage return (DOS line ends), which the "
                        "kernel takes as part of the interpreter's name: it cannot run (dos2unix mends it)\n",
                script);
        return 1;
    }
    line += strspn(line, " \t");
    char *end = line + strcspn(line, " \t");
    char *arg = *end ? end + 1 : end;
    *end = 0;
    arg += strspn(arg, " \t");
    for (char *t = arg + strlen(arg); t > arg && strchr(" \t\r", t[-1]);) *--t = 0;
    if (!*line) {
        fprintf(stderr, "acttrace check: %s: its #! line names no interpreter\n", script);
        return 1;
    }
    const char *base = strrchr(line, '/') ? strrchr(line, '/') + 1 : line;
    char shebang[256]; /* as written, for the messages */
    snprintf(shebang, sizeof shebang, "%s%s%s", line, *arg ? " " : "", arg);
    /* "#!/usr/bin/env -S NAME ARGS": env splits the rest and runs NAME from PATH as well */
    if (!strcmp(base, "env") && !strncmp(arg, "-S", 2)) {
        /* its words: options (-i, -u NAME, ...) and NAME=VALUE settings first, then the program */
        char *w = arg + 2;
        for (;;) {
            w += strspn(w, " \t");
            size_t l = strcspn(w, " \t");
            if (!l) break;
            bool takes = l == 2 && (!strncmp(w, "-u", 2) || !strncmp(w, "-C", 2));
            if (w[0] != '-' && !memchr(w, '=', l)) {
                w[l] = 0;
                arg = w;
                break;
            }
            w += l;
            if (takes) { /* and the option's value */
                w += strspn(w, " \t");
                w += strcspn(w, " \t");
            }
        }
    }
    bool via_env = !strcmp(base, "env") && *arg && arg[0] != '-' && !strpbrk(arg, " \t");
    if (via_env) /* #!/usr/bin/env NAME: env runs NAME from PATH */
        no = why_not(arg, exe, at_prog_find(arg, exe, PATH_MAX), why, sizeof why);
    else {
        snprintf(exe, PATH_MAX, "%s", line);
        no = why_not(exe, exe, access(exe, F_OK) == 0 ? 0 : errno, why, sizeof why);
    }
    if (no) {
        fprintf(stderr, "acttrace check: %s is a script for %s (#!%s), which %s\n", script, via_env ? arg : exe,
                shebang, no);
        return 1;
    }
    char inner[256] = "";
    FILE *g = fopen(exe, "re");
    size_t gk = g ? fread(inner, 1, sizeof inner - 1, g) : 0;
    if (g) fclose(g);
    inner[gk] = 0;
    if (gk > 2 && inner[0] == '#' && inner[1] == '!') {
        /* a wrapper script (pyenv's and asdf's shims, a virtualenv launcher): the kernel runs its own
         * interpreter, which is what loads the shim; the program it then starts is not known here */
        inner[strcspn(inner, "\n")] = 0;
        printf("%s is a script: its interpreter is %s (#!%s), itself a script (%s): the program checked "
               "here is the one that script runs first; if it only starts the real interpreter (as pyenv's "
               "and asdf's shims do), check that one instead: acttrace check CONFIG -- /path/to/it\n",
               script, exe, shebang, inner);
    } else {
        printf("%s is a script: its interpreter is %s (#!%s); the hooks apply to that binary and the "
               "libraries it loads, so it is the one checked here\n",
               script, exe, shebang);
    }
    snprintf(iarg, PATH_MAX, "%s", arg);
    argv_out[n++] = exe;
    if (!via_env && *arg) argv_out[n++] = iarg;
    argv_out[n++] = script;
    for (int i = 1; i < nargs; i++) argv_out[n++] = args[i];
    argv_out[n] = NULL;
    return 0;
}

/* libacttrace.so beside the acttrace executable, or in ../lib of it */
static int find_shim(char *out, size_t n)
{
    const char *env = getenv("ACTTRACE_SHIM");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return access(out, R_OK);
    }
    char self[PATH_MAX - 64];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0)
        return -1;
    self[k] = 0;
    char *slash = strrchr(self, '/');
    if (!slash)
        return -1;
    *slash = 0;
    snprintf(out, n, "%s/libacttrace.so", self);
    if (access(out, R_OK) == 0)
        return 0;
    snprintf(out, n, "%s/../lib/libacttrace.so", self);
    return access(out, R_OK);
}

/* The shim's "ENTRY PROBE OFFSET MODULE" lines: each function with a signature where it was found.
 * Prints the DWARF comparison of each; returns 1 when a signature contradicts its prototype. */
static int check_signatures(const at_hookconf *hc, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    static const char *const kinds[] = {"", "activity", "event", "flow", "flow"};
    char line[PATH_MAX + 64], module[PATH_MAX];
    int errors = 0;
    while (fgets(line, sizeof line, f)) {
        int e, k;
        unsigned long off;
        if (sscanf(line, "%d %d %lx %4095[^\n]", &e, &k, &off, module) != 4 || e < 0 ||
            e >= hc->nentries || k < 0 || k > 1 || !hc->entries[e].probe[k].has_sig)
            continue;
        const at_hc_entry *en = &hc->entries[e];
        char prefix[AT_HC_NAME_MAX + 32];
        snprintf(prefix, sizeof prefix, "[%s %s] ", kinds[en->kind], en->name);
        at_sigcheck_result r;
        at_sigcheck(module, off, &en->probe[k].sig, prefix, stdout, &r);
        errors += r.errors;
    }
    fclose(f);
    if (errors)
        printf("%d signature error%s: the hooks would read or pass these values wrongly\n", errors,
               errors > 1 ? "s" : "");
    return errors ? 1 : 0;
}

int at_cmd_check(int argc, char **argv)
{
    /* the operands before "--" (the CONFIG), counted before getopt moves them */
    int dashes = 0, before = 0;
    for (int i = 1; i < argc && !dashes; i++) {
        if (!strcmp(argv[i], "--")) dashes = i;
        else if (argv[i][0] != '-' || !argv[i][1]) before++;
    }
    at_cli cli;
    at_cli_init(&cli, "check", usage, "", NULL, argc, argv);
    /* CONFIG PROGRAM without the --: said as such, before the program's own options would be taken
     * for check's ("unknown option '--version'") */
    if (!dashes && before >= 2)
        return at_cli_usage_error(&cli, "put -- between the CONFIG and the PROGRAM: acttrace check CONFIG -- PROGRAM [ARGS]");
    int o;
    while ((o = at_cli_next(&cli)) > 0) {}
    if (o == AT_CLI_EXIT) return cli.status;
    int nops;
    char **ops = at_cli_operands(&cli, &nops);
    if (dashes && before == 0)
        return at_cli_usage_error(&cli, "give the CONFIG before --: acttrace check CONFIG -- PROGRAM [ARGS]");
    if (!dashes || before != 1 || nops < 2)
        return at_cli_usage_error(&cli, !dashes || nops < 2 ? "give the program after --: acttrace check CONFIG -- PROGRAM"
                                                            : "one CONFIG before --");
    const char *conf = ops[0];
    at_hookconf hc;
    char err[1024];
    if (at_hookconf_load(conf, &hc, err, sizeof err) != 0) {
        fprintf(stderr, "acttrace check: %s\n", err);
        return AT_EXIT_ERROR;
    }
    static char exe[PATH_MAX], script[PATH_MAX], iarg[PATH_MAX];
    const char **pargv = calloc((size_t)nops + 4, sizeof *pargv);
    if (!pargv || program_argv(ops + 1, nops - 1, exe, script, iarg, pargv)) {
        free(pargv);
        at_hookconf_free(&hc);
        return AT_EXIT_ERROR;
    }
    char blocked[256];
    const char *no_shim = at_prog_preload_blocked(exe, blocked, sizeof blocked);
    if (no_shim) { /* it would run its main: the shim that stops it never loads */
        fprintf(stderr, "acttrace check: %s %s\n", exe, no_shim);
        at_hookconf_free(&hc);
        free(pargv);
        return AT_EXIT_ERROR;
    }
    char shim[PATH_MAX], confabs[PATH_MAX];
    if (find_shim(shim, sizeof shim) != 0) {
        fprintf(stderr, "acttrace check: cannot find libacttrace.so (set ACTTRACE_SHIM)\n");
        at_hookconf_free(&hc);
        free(pargv);
        return AT_EXIT_ERROR;
    }
    char sigs[] = "/tmp/acttrace-check-XXXXXX";
    int sfd = mkstemp(sigs);
    if (sfd >= 0)
        close(sfd);
    if (!realpath(conf, confabs))
        snprintf(confabs, sizeof confabs, "%s", conf);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "acttrace check: fork: %s\n", strerror(errno));
        at_hookconf_free(&hc);
        free(pargv);
        return AT_EXIT_ERROR;
    }
    if (pid == 0) {
        const char *old = getenv("LD_PRELOAD");
        char pre[2 * PATH_MAX];
        snprintf(pre, sizeof pre, "%s%s%s", shim, old && *old ? ":" : "", old ? old : "");
        setenv("LD_PRELOAD", pre, 1);
        setenv("ACTTRACE_CONFIG", confabs, 1);
        setenv("ACTTRACE_CHECK", "1", 1);
        if (sfd >= 0)
            setenv("ACTTRACE_CHECK_SIGS", sigs, 1);
        execv(exe, (char *const *)pargv);
        fprintf(stderr, "acttrace check: cannot run %s: %s\n", exe, strerror(errno));
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            st = -1;
            break;
        }
    int rc;
    if (st == -1)
        rc = 1;
    else if (WIFEXITED(st))
        rc = WEXITSTATUS(st) == 127 ? 1 : WEXITSTATUS(st);
    else {
        fprintf(stderr, "acttrace check: %s died of signal %d while loading\n", exe, WTERMSIG(st));
        rc = 1;
    }
    /* the program loaded and the shim said where it found each function */
    if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) != 127 && sfd >= 0 &&
        check_signatures(&hc, sigs))
        rc = 1;
    if (sfd >= 0)
        unlink(sigs);
    at_hookconf_free(&hc);
    free(pargv);
    return rc;
}