/* cmd_check.c: `acttrace check CONFIG -- PROGRAM [ARGS]`: is the config right, and how will each
 * of its functions be hooked in this program? The config is parsed here first (its errors are
 * printed as the shim would print them); then the program is loaded under the shim with
 * ACTTRACE_CHECK=1, which resolves every entry once every library is loaded, prints per entry
 * where the function was found and how it will be hooked (or why not), and exits before main. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmds.h"
#include "hookconf.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: acttrace check CONFIG -- PROGRAM [ARGS...]\n"
               "Parses CONFIG, loads PROGRAM under libacttrace.so without running its main, and\n"
               "prints for every configured function where it was found and how it will be hooked\n"
               "(GOT or entry patching, typed wrapper or stub), or why it cannot be.\n"
               "Exit status: 0 every function can be hooked, 1 some cannot (or a config error),\n"
               "2 usage. The shim is $ACTTRACE_SHIM, else libacttrace.so beside this program or in\n"
               "../lib.\n");
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

int at_cmd_check(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (argc < 4 || strcmp(argv[2], "--")) {
        usage(stderr);
        return 2;
    }
    const char *conf = argv[1];
    at_hookconf hc;
    char err[1024];
    if (at_hookconf_load(conf, &hc, err, sizeof err) != 0) {
        fprintf(stderr, "acttrace: %s\n", err);
        return 1;
    }
    at_hookconf_free(&hc);
    char shim[PATH_MAX], confabs[PATH_MAX];
    if (find_shim(shim, sizeof shim) != 0) {
        fprintf(stderr, "acttrace: cannot find libacttrace.so (set ACTTRACE_SHIM)\n");
        return 1;
    }
    if (!realpath(conf, confabs))
        snprintf(confabs, sizeof confabs, "%s", conf);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "acttrace: fork: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        const char *old = getenv("LD_PRELOAD");
        char pre[2 * PATH_MAX];
        snprintf(pre, sizeof pre, "%s%s%s", shim, old && *old ? ":" : "", old ? old : "");
        setenv("LD_PRELOAD", pre, 1);
        setenv("ACTTRACE_CONFIG", confabs, 1);
        setenv("ACTTRACE_CHECK", "1", 1);
        execvp(argv[3], argv + 3);
        fprintf(stderr, "acttrace: cannot run %s: %s\n", argv[3], strerror(errno));
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return 1;
    if (WIFEXITED(st))
        return WEXITSTATUS(st) == 127 ? 1 : WEXITSTATUS(st);
    fprintf(stderr, "acttrace: %s died of signal %d while loading\n", argv[3], WTERMSIG(st));
    return 1;
}
