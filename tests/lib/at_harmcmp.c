/* at_harmcmp.c: see at_harmcmp.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_harmcmp.h"

int at_harm_untraced(const char *tag, const char *const *argv, const char *const *env,
                     at_run_result *r, char **dir)
{
    *dir = at_tmpdir(tag);
    char *fx = strchr(argv[0], '/') ? strdup(argv[0]) : at_fixture_path(argv[0]);
    const char *av[32];
    size_t n = 0;
    av[n++] = fx;
    for (size_t i = 1; argv[i] && n < 31; i++)
        av[n++] = argv[i];
    av[n] = NULL;
    at_run_opts o = {.argv = av, .env = env, .no_preload = true, .cwd = *dir, .deadline_s = 120};
    int rc = at_run(&o, r);
    free(fx);
    return rc;
}

const char *at_harm_file_diff(const char *dir_a, const char *dir_b, const char *name)
{
    static char msg[512];
    char pa[4096], pb[4096];
    snprintf(pa, sizeof pa, "%s/%s", dir_a, name);
    snprintf(pb, sizeof pb, "%s/%s", dir_b, name);
    size_t la = 0, lb = 0;
    char *a = at_read_file(pa, &la), *b = at_read_file(pb, &lb);
    const char *res = NULL;
    if (!a || !b) {
        snprintf(msg, sizeof msg, "%s: %s", name, !a ? "missing traced" : "missing untraced");
        res = msg;
    } else if (la != lb || memcmp(a, b, la)) {
        size_t k = 0;
        while (k < la && k < lb && a[k] == b[k])
            k++;
        snprintf(msg, sizeof msg, "%s differs: %zu bytes traced, %zu untraced, first difference at %zu",
                 name, la, lb, k);
        res = msg;
    }
    free(a);
    free(b);
    return res;
}

const char *at_harm_verify(const char *path)
{
    static char msg[2048];
    char tool[4096];
    snprintf(tool, sizeof tool, "%s/acttrace", at_build_dir());
    const char *argv[] = {tool, "verify", path, NULL};
    at_run_opts o = {.argv = argv, .no_preload = true, .deadline_s = 120};
    at_run_result r;
    if (at_run(&o, &r) != 0)
        return "acttrace verify did not start";
    const char *res = NULL;
    if (!(r.exited && r.status == 0)) {
        snprintf(msg, sizeof msg, "acttrace verify %s: %s%s", path, r.out, r.err);
        res = msg;
    }
    at_run_result_free(&r);
    return res;
}

char *at_harm_program_err(const char *err)
{
    char *out = malloc(strlen(err) + 1);
    size_t n = 0;
    for (const char *l = err; *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l + 1) : strlen(l);
        if (strncmp(l, "acttrace:", 9) != 0) {
            memcpy(out + n, l, len);
            n += len;
        }
        l += len;
    }
    out[n] = 0;
    return out;
}
