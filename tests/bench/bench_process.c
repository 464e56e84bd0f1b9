/* bench_process: what the shim adds to starting a process: a fork child that records nothing (fork,
 * _exit, wait), the same when the parent has recorded an event (its file and flusher thread exist),
 * one that records one event, and a new traced image (posix_spawn of /bin/true and
 * wait: the shim's constructor, its file and its exit). tests/fixtures/fork_loop runs the starts one
 * by one, traced and untraced in turn (which goes first alternates), and reports the CPU time per
 * start of the parent and its children, every thread (wall time swings by milliseconds on a loaded
 * machine; CPU time does not); a row is the median over rounds of each round's difference, beside
 * the two sides' own medians, the median of each round's ratio and the traced side's median wall
 * time per start. Prints rows
 * "metric<TAB>measured<TAB>target"; never fails on a time. */
#include <stdio.h>
#include <stdlib.h>

#include "../fixtures/fx_median.h"
#include "at_testlib.h"

static bool run_loop(const char *mode, const char *n, bool traced, const char *dir, double *cpu,
                     double *wall)
{
    char *fx = at_fixture_path("fork_loop");
    const char *argv[] = {fx, n, mode, NULL};
    const char *env[] = {"ACTTRACE_OUTPUT=bench-%p.nettrace", NULL};
    at_run_opts o = {.argv = argv, .env = env, .no_preload = !traced, .cwd = dir, .deadline_s = 600};
    at_run_result r;
    bool ok = at_run(&o, &r) == 0 && r.exited && r.status == 0 &&
              sscanf(r.out, "cpu_us %lf median_us %lf", cpu, wall) == 2;
    at_run_result_free(&r);
    free(fx);
    return ok;
}

#define ROUNDS 9
static void measure(const char *mode, const char *n, const char *metric, const char *target)
{
    double diff[ROUNDS], base[ROUNDS], traced[ROUNDS], wall[ROUNDS];
    int k = 0;
    for (int i = 0; i < ROUNDS; i++) {
        double b, t, bw, tw;
        char *dir = at_tmpdir("benchproc"); /* the round's files go with it */
        if (!dir)
            continue;
        bool ok = i % 2 ? run_loop(mode, n, true, dir, &t, &tw) && run_loop(mode, n, false, dir, &b, &bw)
                        : run_loop(mode, n, false, dir, &b, &bw) && run_loop(mode, n, true, dir, &t, &tw);
        at_rmtree(dir);
        free(dir);
        if (!ok)
            continue;
        diff[k] = t - b;
        base[k] = b;
        wall[k] = tw;
        traced[k++] = t;
    }
    if (k < ROUNDS / 2 + 1) {
        printf("%s\tfailed to run\t%s\n", metric, target);
        return;
    }
    /* the ratio beside the difference: a host that slows every start moves the difference with
     * it, the ratio much less */
    double ratio[ROUNDS];
    for (int i = 0; i < k; i++)
        ratio[i] = base[i] > 0 ? traced[i] / base[i] : 0;
    printf("%s\t%+.3f ms CPU, x%.2f (median of %d rounds of %s; untraced %.3f ms, traced %.3f ms; "
           "traced wall %.3f ms)\t%s\n", metric, fx_median(diff, k) / 1000, fx_median(ratio, k), k,
           n, fx_median(base, k) / 1000, fx_median(traced, k) / 1000, fx_median(wall, k) / 1000,
           target);
}

int main(void)
{
    measure("quiet", "200", "process: fork child that records nothing, added per fork (fork+_exit+wait)",
            "<= 0.1 ms");
    measure("parent-mark", "200",
            "process: fork child that records nothing, of a parent that has recorded events (its "
            "flusher thread running), added per fork", "-");
    measure("mark", "200", "process: fork child that records one event, added per fork (its file)", "-");
    measure("spawn", "100", "process: a traced image's start, added (posix_spawn /bin/true + wait)",
            "<= 0.5 ms");
    return 0;
}
