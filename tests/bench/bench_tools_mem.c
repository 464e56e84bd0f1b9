/* bench_tools_mem.c: memory per open activity of the analysis commands. Writes traces of N activities
 * that never stop (N/2 roots "//k", each with one child "//k/1"; every Start carries its <Name>Id),
 * then runs `acttrace stats`, `tree` and `report` on each and prints their wall time, peak RSS and
 * (peak RSS - the peak RSS on a 1000-activity trace) / N; and the model's own accounting
 * (am_mem_peak, in process). BENCH_MEM_SIZES overrides the sizes (default "1000000,10000000").
 * BENCH_MEM_KEEP leaves the last trace in <build>/bench/bench_tools_mem.nettrace.
 * Prints "metric\tmeasured\ttarget" rows; never fails on a figure. */
#include "at_tracegen.h"
#include "actmodel.h"
#include "trace.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *at_build_dir(void); /* at_testlib.h (not included: its at_field() clashes with trace.h) */
size_t am_mem_peak(const am_model *m) __attribute__((weak)); /* absent in older models */

static long nact;

static void gen(void *ctx)
{
    (void)ctx;
    at_field f1[] = {{"RequestId", NT_TYPE_UINT64}};
    at_field f2[] = {{"ParseId", NT_TYPE_UINT64}};
    at_event_desc d[] = {
        {.provider = "acttrace", .name = "RequestStart", .opcode = 1, .nfields = 1, .fields = f1, .level = 4},
        {.provider = "acttrace", .name = "ParseStart", .opcode = 1, .nfields = 1, .fields = f2, .level = 4},
    };
    at_event_type *t[2];
    for (int i = 0; i < 2; i++) t[i] = at_event_type_register(&d[i]);
    for (long k = 0; k < nact / 2; k++) {
        char p[32], q[40];
        snprintf(p, sizeof p, "//%ld", k + 1);
        snprintf(q, sizeof q, "%s/1", p);
        at_guid a = at_gen_id(0, p), b = at_gen_id(0, q);
        uint64_t id = (uint64_t)k + 1, id2 = id << 20;
        at_event_write(t[0], &a, NULL, &id, 8, NULL, 0);
        at_event_write(t[1], &b, &a, &id2, 8, NULL, 0);
        if ((k & 4095) == 0) at_trace_flush(); /* keep the buffers from filling: no drops */
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs acttrace cmd file (> /dev/null); returns seconds (or -1), the peak RSS in KB and the CPU
 * seconds (the machine may be shared: wall time then says little). */
static double run(const char *cmd, const char *file, long *rss_kb, double *cpu)
{
    char tool[4096], out[4200];
    snprintf(tool, sizeof tool, "%s/acttrace", at_build_dir());
    snprintf(out, sizeof out, "%s/bench/bench_tools_mem.html", at_build_dir());
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        if (!strcmp(cmd, "report")) execl(tool, tool, cmd, file, "-o", out, (char *)NULL);
        else execl(tool, tool, cmd, file, (char *)NULL);
        _exit(127);
    }
    int st;
    struct rusage ru;
    if (pid < 0 || wait4(pid, &st, 0, &ru) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
    *rss_kb = ru.ru_maxrss;
    *cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
    unlink(out);
    return now_s() - t0;
}

static const char *cmds[] = {"stats", "tree", "report"};

static void measure(long n, long *base_rss, bool print)
{
    char path[4200];
    nact = n;
    snprintf(path, sizeof path, "%s/bench/bench_tools_mem.nettrace", at_build_dir());
    if (at_gen_trace(path, gen, NULL) <= 0) {
        fprintf(stderr, "bench_tools_mem: could not write %s\n", path);
        exit(1);
    }
    if (print && am_mem_peak) {
        char err[600], *paths[] = {path};
        am_options o = {0};
        am_model *m = am_open(paths, 1, &o, NULL, err, sizeof err);
        if (m && am_run(m, err, sizeof err) == 0)
            printf("model, %ld open activities: accounted bytes per activity\t%.1f\t<= 128\n", n,
                   (double)am_mem_peak(m) / (double)n);
        am_close(m);
    }
    for (int i = 0; i < 3; i++) {
        long rss = 0;
        double cpu = 0, s = run(cmds[i], path, &rss, &cpu);
        if (!print) {
            base_rss[i] = rss;
            continue;
        }
        if (s < 0) {
            printf("acttrace %s, %ld activities\tfailed\t\n", cmds[i], n);
            continue;
        }
        double load[1] = {0};
        getloadavg(load, 1);
        printf("acttrace %s, %ld open activities: time\t%.2f s (CPU %.2f s, load %.1f)\t%s\n", cmds[i], n, s, cpu,
               load[0], !strcmp(cmds[i], "report") && n <= 1000000 ? "< 10 s" : "");
        printf("acttrace %s, %ld open activities: peak RSS\t%.1f MB\t\n", cmds[i], n, rss / 1024.0);
        printf("acttrace %s, %ld open activities: peak RSS per activity\t%.1f bytes\t<= 128\n", cmds[i], n,
               (double)(rss - base_rss[i]) * 1024.0 / (double)n);
        fflush(stdout);
    }
    if (!getenv("BENCH_MEM_KEEP")) unlink(path);
}

int main(void)
{
    const char *sz = getenv("BENCH_MEM_SIZES");
    char buf[256];
    snprintf(buf, sizeof buf, "%s", sz && *sz ? sz : "1000000,10000000");
    long base[3] = {0};
    measure(1000, base, false);
    for (char *s = strtok(buf, ","); s; s = strtok(NULL, ",")) measure(atol(s), base, true);
    return 0;
}
