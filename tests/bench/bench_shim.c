/* bench_shim: what the preload core adds to a program, as same-run differences against the
 * untraced program: pthread_create+join of an empty thread, and read(2) on an untagged fd. Runs
 * tests/fixtures/bench_ops with and without LD_PRELOAD, alternating, and keeps each side's best of
 * a few runs (the machine is shared). Prints rows "metric<TAB>measured<TAB>target"; never fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"

#define ROUNDS 3

/* ns per op printed by bench_ops, or -1. */
static double run_op(const char *op, const char *n, bool traced, const char *dir)
{
    char *fx = at_fixture_path("bench_ops");
    const char *argv[] = {fx, op, n, NULL};
    const char *env[] = {"ACTTRACE_OUTPUT=bench-%p.nettrace", NULL};
    at_run_opts o = {.argv = argv, .env = env, .no_preload = !traced, .cwd = dir};
    at_run_result r;
    double v = -1;
    if (at_run(&o, &r) == 0 && r.exited && r.status == 0) {
        const char *sp = strchr(r.out, ' ');
        if (sp)
            v = atof(sp + 1);
    }
    at_run_result_free(&r);
    free(fx);
    return v;
}

static void measure(const char *op, const char *n, const char *metric, const char *target,
                    double unit, const char *unit_name, const char *dir)
{
    double base = 1e30, traced = 1e30;
    for (int i = 0; i < ROUNDS; i++) {
        double b = run_op(op, n, false, dir), t = run_op(op, n, true, dir);
        if (b > 0 && b < base)
            base = b;
        if (t > 0 && t < traced)
            traced = t;
    }
    if (base >= 1e30 || traced >= 1e30) {
        printf("%s\tfailed to run\t%s\n", metric, target);
        return;
    }
    printf("%s\t%.2f %s (%.1f vs %.1f ns, x%.2f)\t%s\n", metric, (traced - base) / unit, unit_name,
           traced, base, traced / base, target);
}

int main(void)
{
    char *dir = at_tmpdir("bench");
    if (!dir)
        return 1;
    measure("thread", "20000", "shim: pthread_create+join added per thread", "<= 3 us", 1000.0, "us",
            dir);
    measure("read", "2000000", "shim: read() on an untagged fd added", "<= 5 ns", 1.0, "ns", dir);
    at_rmtree(dir);
    free(dir);
    return 0;
}
