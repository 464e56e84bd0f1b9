/* bench_servers: what tracing costs a real server under load. Debian's nginx (a master and one worker,
 * a small static file, keep-alive) is loaded by wrk (-t1 -c8) on loopback in rounds of 3 s, each
 * configuration once per round in turn, so that the machine's drift hits them alike:
 *   untraced;
 *   the shim without a config;
 *   the per-request config tests/data/hooks/nginx.conf (a Connection activity from accept4 to close,
 *   fd-keyed, and events on recv and writev with signatures), without stacks;
 *   the same with the default stacks.
 * Each row is the median over the rounds of the per-round ratio to the untraced run, for requests per
 * second and for CPU per request (nginx's master and worker, from wait4's rusage: what the server
 * itself spent, its trace writer thread included, whatever the load generator did); the extra CPU per
 * hooked call is the CPU per request added over the shim without a config, divided by the three
 * hooked calls a keep-alive request makes (recv, writev, and the close of the file nginx opens for
 * it, which the Connection's stop sees). Needs nginx and wrk
 * (Debian packages); says so when either is missing. Prints rows "metric<TAB>measured<TAB>target". */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "at_testlib.h"

#define ROUNDS 5
#define SECONDS "3"
enum { UNTRACED, NOCONF, NOSTACKS, STACKS, NCONF };
static const char *const conf_name[NCONF] = {"untraced", "shim without a config",
                                             "per-request config, no stacks",
                                             "per-request config, default stacks"};

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmpd);
    return n ? v[n / 2] : 0;
}

static bool port_open(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = connect(s, (struct sockaddr *)&a, sizeof a) == 0;
    close(s);
    return ok;
}

static pid_t start_nginx(const char *dir, int conf, const char *hooks)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    char cfg[4200], shim[4200], out[4300];
    snprintf(cfg, sizeof cfg, "%s/nginx.conf", dir);
    if (conf != UNTRACED) {
        snprintf(shim, sizeof shim, "%s", at_shim_path());
        setenv("LD_PRELOAD", shim, 1);
        snprintf(out, sizeof out, "%s/t-%%p.nettrace", dir);
        setenv("ACTTRACE_OUTPUT", out, 1);
    }
    if (conf == NOSTACKS || conf == STACKS)
        setenv("ACTTRACE_CONFIG", hooks, 1);
    if (conf == NOSTACKS)
        setenv("ACTTRACE_STACKS", "none", 1);
    int null = open("/dev/null", O_RDWR);
    dup2(null, 1);
    dup2(null, 2);
    execl("/usr/sbin/nginx", "nginx", "-p", dir, "-c", cfg, "-e", "stderr", (char *)NULL);
    _exit(127);
}

/* One run: requests/s from wrk, nginx's CPU per request (ns). false when it did not run. */
static bool one_run(const char *dir, int port, int conf, const char *hooks, double *rps,
                    double *cpu_req)
{
    pid_t ng = start_nginx(dir, conf, hooks);
    for (int i = 0; i < 500 && !port_open(port); i++) {
        struct timespec d = {0, 10000000};
        nanosleep(&d, NULL);
    }
    char url[64], cmd[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/index.html", port);
    snprintf(cmd, sizeof cmd, "wrk -t1 -c8 -d" SECONDS "s %s 2>&1", url);
    FILE *p = popen(cmd, "r");
    char line[512];
    double r = -1, n = -1;
    while (p && fgets(line, sizeof line, p)) {
        if (!strncmp(line, "Requests/sec:", 13))
            r = atof(line + 13);
        const char *q = strstr(line, " requests in ");
        if (q)
            n = atof(line);
    }
    if (p)
        pclose(p);
    kill(ng, SIGQUIT); /* graceful: the worker ends its connections and exits, the master after */
    int st;
    struct rusage ru;
    while (wait4(ng, &st, 0, &ru) < 0 && errno == EINTR) {}
    double cpu_ns = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 +
                    (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3;
    char **files = at_trace_files(dir);
    for (size_t i = 0; files && files[i]; i++)
        unlink(files[i]);
    at_strv_free(files);
    if (r <= 0 || n <= 0)
        return false;
    *rps = r;
    *cpu_req = cpu_ns / n;
    return true;
}

int main(void)
{
    if (access("/usr/sbin/nginx", X_OK) != 0 || system("command -v wrk >/dev/null 2>&1") != 0) {
        printf("nginx + wrk: requests/s traced vs untraced\tnginx or wrk not installed\t<= 3%%\n");
        return 0;
    }
    char *dir = at_tmpdir("benchsrv");
    int port = 20000 + (int)(getpid() % 20000);
    char path[4300], hooks[4300];
    snprintf(hooks, sizeof hooks, "%s/tests/data/hooks/nginx.conf", AT_SOURCE_DIR);
    snprintf(path, sizeof path, "%s/nginx.conf", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "user root;\ndaemon off;\nmaster_process on;\nworker_processes 1;\npid %s/nginx.pid;\n"
               "error_log stderr crit;\nevents { worker_connections 256; }\n"
               "http {\n access_log off;\n sendfile off;\n keepalive_requests 1000000;\n"
               " client_body_temp_path %s/tmp; proxy_temp_path %s/tmp; fastcgi_temp_path %s/tmp;\n"
               " uwsgi_temp_path %s/tmp; scgi_temp_path %s/tmp;\n"
               " server { listen 127.0.0.1:%d; root %s; }\n}\n",
            dir, dir, dir, dir, dir, dir, port, dir);
    fclose(f);
    snprintf(path, sizeof path, "%s/index.html", dir);
    f = fopen(path, "w");
    for (int i = 0; i < 12; i++)
        fprintf(f, "<p>acttrace bench page, a small static file of about six hundred bytes.</p>\n");
    fclose(f);
    snprintf(path, sizeof path, "%s/tmp", dir);
    mkdir(path, 0700);
    double rps[NCONF][ROUNDS], cpu[NCONF][ROUNDS];
    double r_rps[NCONF][ROUNDS], r_cpu[NCONF][ROUNDS], d_cpu[NCONF][ROUNDS];
    int n = 0;
    one_run(dir, port, UNTRACED, hooks, &rps[0][0], &cpu[0][0]); /* warm the page cache */
    for (int round = 0; round < ROUNDS; round++) {
        bool ok = true;
        for (int c = 0; c < NCONF && ok; c++)
            ok = one_run(dir, port, c, hooks, &rps[c][n], &cpu[c][n]);
        if (!ok)
            continue;
        for (int c = 0; c < NCONF; c++) {
            r_rps[c][n] = rps[c][n] / rps[UNTRACED][n];
            r_cpu[c][n] = cpu[c][n] / cpu[UNTRACED][n];
            d_cpu[c][n] = cpu[c][n] - cpu[UNTRACED][n];
        }
        n++;
    }
    if (!n) {
        printf("nginx + wrk: requests/s traced vs untraced\tfailed to run\t<= 3%%\n");
        at_rmtree(dir);
        free(dir);
        return 0;
    }
    double base_rps[ROUNDS], base_cpu[ROUNDS];
    memcpy(base_rps, rps[UNTRACED], sizeof base_rps);
    memcpy(base_cpu, cpu[UNTRACED], sizeof base_cpu);
    printf("nginx + wrk -t1 -c8, untraced (median of %d rounds of " SECONDS " s)\t%.0f req/s, %.1f us "
           "CPU/req\t-\n", n, median(base_rps, n), median(base_cpu, n) / 1000);
    static const char *const target[NCONF] = {"", "<= 1%", "<= 3%", "<= 5%"};
    for (int c = 1; c < NCONF; c++) {
        double rr = median(r_rps[c], n), rc = median(r_cpu[c], n), dc = median(d_cpu[c], n);
        printf("nginx + wrk, %s: fewer req/s (CPU per request)\t%.1f%% (%+.1f%%, %+.0f ns/req)\t%s\n",
               conf_name[c], (1 - rr) * 100, (rc - 1) * 100, dc, target[c]);
        if (c == NOSTACKS || c == STACKS)
            printf("  extra CPU per hooked call, %s (3 per request)\t%.0f ns\t<= 150 ns\n", conf_name[c],
                   (dc - median(d_cpu[NOCONF], n)) / 3);
    }
    at_rmtree(dir);
    free(dir);
    return 0;
}
