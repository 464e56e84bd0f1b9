/* bench_tools.c: throughput and peak memory of `acttrace events`, `tree` and `stats` on a large
 * activity trace written through the writer (tests/lib/at_tracegen.h): requests with a child, a
 * stacked sample and a string payload, 5 events each. Output goes to /dev/null; the figures are wall
 * time of the acttrace process and its peak RSS. Prints "metric\tmeasured\ttarget" rows; never fails
 * on a time. BENCH_TOOLS_REQUESTS overrides the size (default 2 M requests, ~350 MB). */
#include "at_tracegen.h"
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

static long requests;

static void gen(void *ctx)
{
    (void)ctx;
    at_field f1[] = {{"RequestId", NT_TYPE_UINT64}, {"Url", NT_TYPE_STRING}};
    at_field f2[] = {{"ParseId", NT_TYPE_UINT64}};
    at_event_desc d[] = {
        {.provider = "acttrace", .name = "RequestStart", .opcode = 1, .nfields = 2, .fields = f1, .level = 4},
        {.provider = "acttrace", .name = "RequestStop", .opcode = 2, .nfields = 1, .fields = f1, .level = 4},
        {.provider = "acttrace", .name = "ParseStart", .opcode = 1, .nfields = 1, .fields = f2, .level = 4},
        {.provider = "acttrace", .name = "ParseStop", .opcode = 2, .nfields = 1, .fields = f2, .level = 4},
        {.provider = "app", .name = "Sample", .level = 4},
    };
    at_event_type *t[5];
    for (int i = 0; i < 5; i++) t[i] = at_event_type_register(&d[i]);
    uintptr_t st[] = {0x401234, 0x401100, 0x400f00, 0x400e00};
    for (long k = 0; k < requests; k++) {
        char p[32], q[40];
        snprintf(p, sizeof p, "//%ld", k % 1000000 + 1);
        snprintf(q, sizeof q, "%s/1", p);
        at_guid a = at_gen_id(0, p), b = at_gen_id(0, q);
        uint8_t pl[128];
        at_payload P;
        at_payload_init(&P, pl, sizeof pl);
        at_payload_u64(&P, (uint64_t)k);
        at_payload_str(&P, "/index.html?q=12345", 64);
        uint64_t id = (uint64_t)k;
        at_event_write(t[0], &a, NULL, pl, (uint32_t)(P.p - pl), NULL, 0);
        at_event_write(t[2], &b, &a, &id, 8, NULL, 0);
        at_event_write(t[4], &b, NULL, NULL, 0, st, 4);
        at_event_write(t[3], &b, NULL, &id, 8, NULL, 0);
        at_event_write(t[1], &a, NULL, &id, 8, NULL, 0);
        if ((k & 4095) == 0) at_trace_flush(); /* keep the buffers from filling: no drops */
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs acttrace cmd file > /dev/null; returns seconds (or -1) and the peak RSS in KB. */
static double run(const char *cmd, const char *file, long *rss_kb)
{
    char tool[4096];
    snprintf(tool, sizeof tool, "%s/acttrace", at_build_dir());
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        execl(tool, tool, cmd, file, (char *)NULL);
        _exit(127);
    }
    int st;
    struct rusage ru;
    if (pid < 0 || wait4(pid, &st, 0, &ru) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
    *rss_kb = ru.ru_maxrss;
    return now_s() - t0;
}

int main(void)
{
    const char *n = getenv("BENCH_TOOLS_REQUESTS");
    requests = n ? atol(n) : 2000000;
    char path[4200];
    snprintf(path, sizeof path, "%s/bench/bench_tools.nettrace", at_build_dir());
    if (at_gen_trace(path, gen, NULL) <= 0) {
        fprintf(stderr, "bench_tools: could not write %s\n", path);
        return 1;
    }
    struct stat sb;
    stat(path, &sb);
    double mb = (double)sb.st_size / 1e6;
    const char *cmds[] = {"events", "tree", "stats"};
    for (int i = 0; i < 3; i++) {
        long rss = 0;
        double s = run(cmds[i], path, &rss);
        if (s < 0) {
            printf("acttrace %s\tfailed\t\n", cmds[i]);
            continue;
        }
        printf("acttrace %s on %.0f MB (%ld M events): throughput\t%.0f MB/s\t%s\n", cmds[i], mb,
               requests * 5 / 1000000, mb / s, i < 2 ? ">= 200 MB/s" : "");
        printf("acttrace %s: peak memory\t%.1f MB\tbounded by open activities\n", cmds[i], rss / 1024.0);
    }
    unlink(path);
    return 0;
}
