/* bench_sampling: what CPU sampling costs the program it samples. tests/fixtures/samples work does a
 * fixed amount of work in activities and prints the process's CPU time; it runs under the shim with
 * ACTTRACE_SAMPLE_HZ=1000 and without it (the same shim, the same activities), interleaved, nine
 * rounds. The row is the median of the per-round ratios (sampled / not sampled), as the added share
 * of the program's CPU. Prints rows "metric<TAB>measured<TAB>target". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "at_testlib.h"

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double cpu_of(const char *dir, const char *const *env)
{
    const char *argv[] = {"samples", "work", "300", NULL};
    char *fx = at_fixture_path("samples");
    argv[0] = fx;
    at_run_opts o = {.argv = argv, .env = env, .cwd = dir};
    at_run_result r;
    double ms = -1;
    if (at_run(&o, &r) == 0 && r.exited && r.status == 0) {
        const char *c = strstr(r.err, "cpu_ms ");
        if (c)
            ms = atof(c + 7);
    }
    at_run_result_free(&r);
    free(fx);
    char **files = at_trace_files(dir);
    for (size_t i = 0; files && files[i]; i++)
        unlink(files[i]);
    at_strv_free(files);
    return ms;
}

int main(void)
{
    char *dir = at_tmpdir("benchsamp");
    const char *on[] = {"ACTTRACE_SAMPLE_HZ=1000", NULL};
    const char *off[] = {"ACTTRACE_SAMPLE_HZ=0", NULL};
    enum { ROUNDS = 9 };
    double ratio[ROUNDS], base[ROUNDS];
    int n = 0;
    for (int i = 0; i < ROUNDS; i++) {
        double a = cpu_of(dir, off), b = cpu_of(dir, on);
        if (a > 0 && b > 0) {
            ratio[n] = b / a;
            base[n++] = a;
        }
    }
    if (n) {
        qsort(ratio, (size_t)n, sizeof *ratio, cmp);
        qsort(base, (size_t)n, sizeof *base, cmp);
        double m = ratio[n / 2];
        printf("CPU sampling at 1000 Hz: program CPU added (median of %d rounds, x%.3f; %.0f ms "
               "run)\t%+.2f%%\t<= 2%%\n", n, m, base[n / 2], (m - 1) * 100);
    } else {
        printf("CPU sampling at 1000 Hz: program CPU added\tfailed to run\t<= 2%%\n");
    }
    at_rmtree(dir);
    free(dir);
    return 0;
}
