/* bench_callbacks: what carrying the activity costs per task through a callback API (issue 4: a GLib
 * pool task and an OpenMP task, target <= 60 ns). tests/fixtures/glib_cbbench runs the tasks with an
 * activity current at submit and with none, in one process under the shim, every task crossing to
 * another thread with no system call per task (see the fixture); a process's figure is the median
 * of its rounds' differences (capture, Send, enter, Receive, leave, release). How fast a process is
 * depends on where its memory landed (libgomp's own per-task time comes in modes ~145/280/380 ns
 * between processes here), so the row is the median over PROCS processes, with their range. The
 * untraced program's figure is given for scale. Prints rows "metric<TAB>measured<TAB>target". */
#include <stdio.h>
#include <stdlib.h>

#include "../fixtures/fx_median.h"
#include "at_testlib.h"

#define PROCS 9

static bool run(bool traced, const char *dir, double v[6])
{
    char *fx = at_fixture_path("glib_cbbench");
    const char *argv[] = {fx, NULL};
    const char *env[] = {"ACTTRACE_OUTPUT=bench-%p.nettrace", NULL};
    at_run_opts o = {.argv = argv, .env = env, .no_preload = !traced, .cwd = dir};
    at_run_result r;
    bool ok = at_run(&o, &r) == 0 && r.exited && r.status == 0 &&
              sscanf(r.out, "glib %lf %lf %lf\nomp %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4],
                     &v[5]) == 6;
    at_run_result_free(&r);
    free(fx);
    return ok;
}

static void row(const char *metric, double (*t)[6], double (*u)[6], int n, int k)
{
    double added[PROCS], with[PROCS], without[PROCS], plain[PROCS];
    for (int i = 0; i < n; i++) {
        added[i] = t[i][k];
        with[i] = t[i][k + 1];
        without[i] = t[i][k + 2];
        plain[i] = u[i][k + 2];
    }
    double a = fx_median(added, n);
    printf("%s\t%.1f (median of %d processes, %.1f..%.1f; %.1f with an activity vs %.1f without; "
           "untraced %.1f)\t<= 60\n", metric, a, n, added[0], added[n - 1], fx_median(with, n),
           fx_median(without, n), fx_median(plain, n));
}

int main(void)
{
    char *dir = at_tmpdir("benchcb");
    double t[PROCS][6], u[PROCS][6];
    int n = 0;
    for (int i = 0; dir && i < PROCS; i++)
        if (run(true, dir, t[n]) && run(false, dir, u[n]))
            n++;
    if (n < PROCS / 2 + 1) {
        printf("callback flow per task\tfailed to run\t<= 60 ns\n");
        return 0;
    }
    row("GLib pool task: flow added (ns)", t, u, n, 0);
    row("OpenMP task: flow added (ns)", t, u, n, 3);
    at_rmtree(dir);
    free(dir);
    return 0;
}
