/* bench_callbacks: what carrying the activity costs per task through a callback API (issue 4: a GLib
 * pool task and an OpenMP task, target <= 60 ns). tests/fixtures/glib_cbbench runs 100000 tasks with
 * an activity current at submit and with none, in one process under the shim; the row is the
 * difference (capture, registry, enter/leave, and the Send/Receive transfer events of each hop). The
 * untraced program's figure is given for scale. Prints rows "metric<TAB>measured<TAB>target". */
#include <stdio.h>
#include <stdlib.h>

#include "at_testlib.h"

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

int main(void)
{
    char *dir = at_tmpdir("benchcb");
    double t[6], u[6];
    if (!dir || !run(true, dir, t) || !run(false, dir, u)) {
        printf("callback flow per task\tfailed to run\t<= 60 ns\n");
        return 0;
    }
    printf("GLib pool task: flow added (ns)\t%.1f (median of 9 round pairs; %.1f with an activity vs "
           "%.1f without; untraced %.1f)\t<= 60\n", t[0], t[1], t[2], u[2]);
    printf("OpenMP task: flow added (ns)\t%.1f (median of 9 round pairs; %.1f with an activity vs "
           "%.1f without; untraced %.1f)\t<= 60\n", t[3], t[4], t[5], u[5]);
    at_rmtree(dir);
    free(dir);
    return 0;
}
