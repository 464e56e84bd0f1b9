/* cmd_check.c: `acttrace check CONFIG -- PROGRAM [ARGS]`: is the config right, and how will each
 * of its functions be hooked in this program? The config is parsed here first (its errors are
 * printed as the shim would print them); then the program is loaded under the shim with
 * ACTTRACE_CHECK=1, which resolves every entry once every library is loaded, prints per entry
 * where the function was found and how it will be hooked (or why not), and exits before main. It
 * also says where it found each function with a signature; the signature is then compared here with
 * the function's DWARF prototype, where debug info can be found (sigcheck.c). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cliopt.h"
#include "cmds.h"
#include "hookconf.h"
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

               "The shim is $ACTTRACE_SHIM, else libacttrace.so beside this program or in ../lib.\n"
               "Exit status: 0 every function can be hooked and no signature contradicts its\n"
               "prototype; 1 otherwise (or a config error); 2 usage error.\n");
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
    int o;
    while ((o = at_cli_next(&cli)) > 0) {}
    if (o == AT_CLI_EXIT) return cli.status;
    int nops;
    char **ops = at_cli_operands(&cli, &nops);
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
    char shim[PATH_MAX], confabs[PATH_MAX];
    if (find_shim(shim, sizeof shim) != 0) {
        fprintf(stderr, "acttrace check: cannot find libacttrace.so (set ACTTRACE_SHIM)\n");
        at_hookconf_free(&hc);
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
        execvp(ops[1], ops + 1);
        fprintf(stderr, "acttrace check: cannot run %s: %s\n", ops[1], strerror(errno));
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
        fprintf(stderr, "acttrace check: %s died of signal %d while loading\n", ops[1], WTERMSIG(st));
        rc = 1;
    }
    /* the program loaded and the shim said where it found each function */
    if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) != 127 && sfd >= 0 &&
        check_signatures(&hc, sigs))
        rc = 1;
    if (sfd >= 0)
        unlink(sigs);
    at_hookconf_free(&hc);
    return rc;
}