/* bench_servers: what tracing costs real servers under load. Two servers, each loaded over loopback
 * by a client with 8 connections on one thread:
 *   Debian's nginx (a master and one worker, a small static file, keep-alive) by wrk -t1 -c8;
 *   Debian's memcached (one worker thread, `-t 1`) by memcaslap -T1 -c8 (libmemcached-tools):
 *   ASCII gets and sets 9:1 over a key set of fixed size (a task window of 1024 keys per
 *   connection, keys of 16 bytes, values of 100).
 * The server is pinned to the last CPU and the client to the first (pin_server). They run in rounds
 * of 3 s: in each round each server runs once in each configuration in turn (each
 * round starting with another one), so that the machine's drift hits them alike:
 *   untraced;
 *   the shim without a config;
 *   the server's per-request config, without stacks: tests/data/hooks/nginx.conf (a Connection
 *   activity from accept4 to close, fd-keyed, and events on recv and writev) or memcached.conf (the
 *   same activity, which memcached's worker thread adopts when the main thread hands it the fd
 *   through its pipe, and events on read and sendmsg); all with signatures and fd/return captured;
 *   the same with the default stacks.
 * Each row is the median over the rounds of the per-round ratio to the untraced run, for requests per
 * second and for CPU per request (the server's processes and threads, their CPU time from /proc
 * before and after the timed load: what the server itself spent on the requests, its trace writer
 * thread included, whatever the load generator did), with the page faults per request (minor and
 * major, from wait4's rusage) beside them. What the server's start and exit cost (its whole life's
 * CPU from wait4 outside the timed load: the shim's set-up, the last flush and the symbols of the
 * trace's stacks) is a row of its own, not spread over the requests. The extra CPU per hooked
 * call is the CPU per request added over the shim without a config, divided by the hooked calls a
 * request makes: for nginx three (recv, writev, and the close of the file nginx opens for it, which
 * the Connection's stop sees but which writes no event); for memcached every hooked call writes an
 * event, so they are counted in each traced run's own trace (one read and one sendmsg per request,
 * plus a connection's few). Needs nginx and wrk, memcached and memcaslap (Debian packages); says so
 * for a server whose tools are missing. Prints rows "metric<TAB>measured<TAB>target". */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
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
#include "ntreader.h"

/* With two CPUs or more, the server runs on the last one (its trace writer thread with it, so that
 * the writer's CPU is the server's) and the load generator on the first. Left to the scheduler,
 * the two moved between the CPUs from round to round, and a CPU that went idle under the load
 * generator made each of the server's wake-ups of it an interrupt to an idle virtual CPU: rounds of
 * one configuration differed by half, more than tracing costs. */
static int ncpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void pin_server(void)
{
    if (ncpus() < 2)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(ncpus() - 1, &set);
    sched_setaffinity(0, sizeof set, &set);
}

/* the load generator's command line, pinned to the first CPU (taskset, util-linux) */
static const char *client_prefix(void)
{
    return ncpus() >= 2 && access("/usr/bin/taskset", X_OK) == 0 ? "/usr/bin/taskset -c 0 " : "";
}

#define ROUNDS 5
#define SECONDS "3"
enum { UNTRACED, NOCONF, NOSTACKS, STACKS, NCONF };
static const char *const conf_name[NCONF] = {"untraced", "shim without a config",
                                             "per-request config, no stacks",
                                             "per-request config, default stacks"};
static const char *const target[NCONF] = {"", "<= 1%", "<= 3%", "<= 5%"};

/* One server and its load generator. */
typedef struct server server;
struct server {
    const char *name;      /* row prefix: "nginx + wrk" */
    const char *load;      /* the load generator's settings, for the untraced row */
    const char *needs;     /* what to install when missing */
    const char *hooks_name;/* its per-request config, under tests/data/hooks */
    int calls_per_req;     /* hooked calls a request makes; 0: count the events in each trace */
    int stop_sig;          /* ends it gracefully, its trace file complete */
    bool (*installed)(void);
    void (*prepare)(server *s);                       /* its files, in dir */
    void (*exec)(const server *s);                    /* in the child, the environment set */
    bool (*drive)(const server *s, double *rps, double *reqs); /* one timed load */
    char *dir;
    int port;
    char hooks[4300];
};

/* What one run measured, per request except rps and life_ms. */
typedef struct run {
    double rps, cpu_ns, faults, calls;
    double life_ms; /* CPU of the server's whole life outside the timed load: start and exit */
} run;

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[0..n) (sorts a copy: callers keep their per-round order). */
static double median(const double *v, int n)
{
    double c[ROUNDS];
    memcpy(c, v, (size_t)n * sizeof *v);
    qsort(c, (size_t)n, sizeof *c, cmpd);
    return n ? c[n / 2] : 0;
}

/* CPU time (ns) the threads of pid and of its children have used so far: each thread's time on a
 * CPU from its schedstat (ns), or from its stat (clock ticks) where the kernel keeps no schedstat. */
static double task_cpu_ns(const char *taskdir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/schedstat", taskdir);
    FILE *f = fopen(path, "r");
    unsigned long long ns;
    if (f) {
        bool ok = fscanf(f, "%llu", &ns) == 1;
        fclose(f);
        if (ok)
            return (double)ns;
    }
    snprintf(path, sizeof path, "%s/stat", taskdir);
    f = fopen(path, "r");
    if (!f)
        return 0;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
        return (double)(ut + st) * 1e9 / (double)sysconf(_SC_CLK_TCK);
    return 0;
}

static double proc_cpu_ns(pid_t pid)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    double sum = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char t[512];
        snprintf(t, sizeof t, "%s/%s", dir, e->d_name);
        sum += task_cpu_ns(t);
    }
    if (d)
        closedir(d);
    return sum;
}

static double tree_cpu_ns(pid_t pid)
{
    double sum = proc_cpu_ns(pid);
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int child = atoi(e->d_name);
        if (child <= 0)
            continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%d/stat", child);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const char *p = strrchr(buf, ')');
        int ppid = 0;
        if (p && sscanf(p + 2, "%*c %d", &ppid) == 1 && ppid == pid)
            sum += proc_cpu_ns(child);
    }
    if (d)
        closedir(d);
    return sum;
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

static bool on_path(const char *tool)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", tool);
    return system(cmd) == 0;
}

/* ---------------- nginx + wrk ---------------- */

static bool nginx_installed(void)
{
    return access("/usr/sbin/nginx", X_OK) == 0 && on_path("wrk");
}

static void nginx_prepare(server *s)
{
    const char *dir = s->dir;
    char path[4300];
    snprintf(path, sizeof path, "%s/nginx.conf", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "user root;\ndaemon off;\nmaster_process on;\nworker_processes 1;\npid %s/nginx.pid;\n"
               "error_log stderr crit;\nevents { worker_connections 256; }\n"
               "http {\n access_log off;\n sendfile off;\n keepalive_requests 1000000;\n"
               " client_body_temp_path %s/tmp; proxy_temp_path %s/tmp; fastcgi_temp_path %s/tmp;\n"
               " uwsgi_temp_path %s/tmp; scgi_temp_path %s/tmp;\n"
               " server { listen 127.0.0.1:%d; root %s; }\n}\n",
            dir, dir, dir, dir, dir, dir, s->port, dir);
    fclose(f);
    snprintf(path, sizeof path, "%s/index.html", dir);
    f = fopen(path, "w");
    for (int i = 0; i < 12; i++)
        fprintf(f, "<p>acttrace bench page, a small static file of about six hundred bytes.</p>\n");
    fclose(f);
    snprintf(path, sizeof path, "%s/tmp", dir);
    mkdir(path, 0700);
}

static void nginx_exec(const server *s)
{
    char cfg[4300];
    snprintf(cfg, sizeof cfg, "%s/nginx.conf", s->dir);
    execl("/usr/sbin/nginx", "nginx", "-p", s->dir, "-c", cfg, "-e", "stderr", (char *)NULL);
}

static bool nginx_drive(const server *s, double *rps, double *reqs)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "%swrk -t1 -c8 -d" SECONDS "s http://127.0.0.1:%d/index.html 2>&1",
             client_prefix(), s->port);
    FILE *p = popen(cmd, "r");
    char line[512];
    while (p && fgets(line, sizeof line, p)) {
        if (!strncmp(line, "Requests/sec:", 13))
            *rps = atof(line + 13);
        if (strstr(line, " requests in "))
            *reqs = atof(line);
    }
    return p && pclose(p) == 0;
}

/* ---------------- memcached + memcaslap ---------------- */

static bool memcached_installed(void)
{
    return access("/usr/bin/memcached", X_OK) == 0 && on_path("memcaslap");
}

static void memcached_prepare(server *s)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/memcaslap.cnf", s->dir);
    FILE *f = fopen(path, "w"); /* key and value sizes (min max proportion), then get/set 9:1 */
    fprintf(f, "key\n16 16 1\nvalue\n100 100 1\ncmd\n0 0.1\n1 0.9\n");
    fclose(f);
}

static void memcached_exec(const server *s)
{
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    /* memcached refuses to run as root unless told whom to run as */
    execl("/usr/bin/memcached", "memcached", "-t", "1", "-U", "0", "-l", "127.0.0.1", "-p", port,
          geteuid() == 0 ? "-u" : (char *)NULL, "root", (char *)NULL);
}

static bool memcached_drive(const server *s, double *rps, double *reqs)
{
    char cmd[4500];
    snprintf(cmd, sizeof cmd,
             "%smemcaslap -s 127.0.0.1:%d -T 1 -c 8 -w 1k -t " SECONDS "s -F %s/memcaslap.cnf 2>&1",
             client_prefix(), s->port, s->dir);
    FILE *p = popen(cmd, "r");
    char line[512];
    while (p && fgets(line, sizeof line, p)) { /* "Run time: 3.0s Ops: 119504 TPS: 39672 ..." */
        const char *ops = strstr(line, " Ops: "), *tps = strstr(line, " TPS: ");
        if (!strncmp(line, "Run time:", 9) && ops && tps) {
            *reqs = atof(ops + 6);
            *rps = atof(tps + 6);
        }
    }
    return p && pclose(p) == 0;
}

/* ---------------- one run ---------------- */

/* Events of the config's provider in every trace file in dir, lost ones included (each is a hooked
 * call all the same). -1 when a file cannot be read. */
static double config_events(const char *dir)
{
    char **files = at_trace_files(dir);
    double n = 0;
    for (size_t i = 0; files && files[i] && n >= 0; i++) {
        char err[512];
        nt_reader *r = nt_open(files[i], err, sizeof err);
        if (!r) {
            n = -1;
            break;
        }
        nt_event ev;
        int rc;
        while ((rc = nt_next(r, &ev)) == 1)
            n += strcmp(ev.meta->provider, "acttrace") == 0;
        n = rc < 0 ? -1 : n + (double)nt_get_counts(r)->events_lost;
        nt_close(r);
    }
    at_strv_free(files);
    return n;
}

/* One run of s in configuration conf, r per request. false when it did not run. */
static bool one_run(const server *s, int conf, run *r)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (conf != UNTRACED) {
            char out[4400];
            setenv("LD_PRELOAD", at_shim_path(), 1);
            snprintf(out, sizeof out, "%s/t-%%p.nettrace", s->dir);
            setenv("ACTTRACE_OUTPUT", out, 1);
        }
        if (conf == NOSTACKS || conf == STACKS)
            setenv("ACTTRACE_CONFIG", s->hooks, 1);
        if (conf == NOSTACKS)
            setenv("ACTTRACE_STACKS", "none", 1);
        int null = open("/dev/null", O_RDWR);
        dup2(null, 1);
        dup2(null, 2);
        pin_server();
        s->exec(s);
        _exit(127);
    }
    if (pid < 0)
        return false;
    for (int i = 0; i < 500 && !port_open(s->port); i++) {
        struct timespec d = {0, 10000000};
        nanosleep(&d, NULL);
    }
    double rps = -1, reqs = -1;
    double cpu0 = tree_cpu_ns(pid);
    bool driven = s->drive(s, &rps, &reqs);
    double window_ns = tree_cpu_ns(pid) - cpu0;
    kill(pid, s->stop_sig);
    int st;
    struct rusage ru;
    while (wait4(pid, &st, 0, &ru) < 0 && errno == EINTR) {}
    double cpu_ns = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 +
                    (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3;
    r->calls = s->calls_per_req;
    if (driven && reqs > 0 && (conf == NOSTACKS || conf == STACKS) && !s->calls_per_req)
        r->calls = config_events(s->dir) / reqs;
    char **files = at_trace_files(s->dir);
    for (size_t i = 0; files && files[i]; i++)
        unlink(files[i]);
    at_strv_free(files);
    if (!driven || rps <= 0 || reqs <= 0 || (conf >= NOSTACKS && r->calls <= 0))
        return false;
    r->rps = rps;
    r->cpu_ns = window_ns / reqs;
    r->life_ms = (cpu_ns - window_ns) / 1e6;
    r->faults = (double)(ru.ru_minflt + ru.ru_majflt) / reqs;
    return true;
}

/* ---------------- rows ---------------- */

static void report(const server *s, run res[][NCONF], int n)
{
    if (!n) {
        printf("%s: requests/s traced vs untraced\tfailed to run\t<= 3%%\n", s->name);
        return;
    }
    double v[ROUNDS], w[ROUNDS], f[ROUNDS];
    for (int i = 0; i < n; i++) {
        v[i] = res[i][UNTRACED].rps;
        w[i] = res[i][UNTRACED].cpu_ns;
        f[i] = res[i][UNTRACED].faults;
    }
    printf("%s %s, untraced (median of %d rounds of " SECONDS " s)\t%.0f req/s, %.1f us CPU/req, "
           "%.4f faults/req\t-\n", s->name, s->load, n, median(v, n), median(w, n) / 1000,
           median(f, n));
    double d_noconf = 0;
    for (int c = 1; c < NCONF; c++) {
        double rr[ROUNDS], rc[ROUNDS], dc[ROUNDS], df[ROUNDS], calls[ROUNDS], dl[ROUNDS];
        for (int i = 0; i < n; i++) {
            const run *b = &res[i][UNTRACED], *t = &res[i][c];
            rr[i] = t->rps / b->rps;
            rc[i] = t->cpu_ns / b->cpu_ns;
            dc[i] = t->cpu_ns - b->cpu_ns;
            df[i] = t->faults - b->faults;
            calls[i] = t->calls;
            dl[i] = t->life_ms - b->life_ms;
        }
        double mdc = median(dc, n);
        if (c == NOCONF)
            d_noconf = mdc;
        printf("%s, %s: fewer req/s (CPU per request; page faults per request)\t%.1f%% (%+.1f%%, "
               "%+.0f ns/req; %+.4f faults/req)\t%s\n", s->name, conf_name[c],
               (1 - median(rr, n)) * 100, (median(rc, n) - 1) * 100, mdc, median(df, n), target[c]);
        printf("  %s: its start and exit, CPU added (the server's whole life outside the timed "
               "load)\t%+.1f ms\t-\n", conf_name[c], median(dl, n));
        if (c == NOSTACKS || c == STACKS) {
            double k = median(calls, n);
            printf("  extra CPU per hooked call, %s (%.*f per request%s)\t%.0f ns\t<= 150 ns\n",
                   conf_name[c], s->calls_per_req ? 0 : 2, k,
                   s->calls_per_req ? "" : ", counted in its traces", (mdc - d_noconf) / k);
        }
    }
}

int main(void)
{
    server servers[] = {
        {.name = "nginx + wrk", .load = "-t1 -c8", .needs = "nginx or wrk",
         .hooks_name = "nginx.conf",
         .calls_per_req = 3, .stop_sig = SIGQUIT, /* graceful: the worker ends its connections */
         .installed = nginx_installed, .prepare = nginx_prepare, .exec = nginx_exec,
         .drive = nginx_drive},
        {.name = "memcached + memcaslap", .load = "-T1 -c8", .needs = "memcached or memcaslap "
         "(libmemcached-tools)", .hooks_name = "memcached.conf", .calls_per_req = 0,
         .stop_sig = SIGTERM, .installed = memcached_installed, .prepare = memcached_prepare,
         .exec = memcached_exec, .drive = memcached_drive},
    };
    enum { NSRV = sizeof servers / sizeof servers[0] };
    bool on[NSRV];
    int live = 0;
    for (int i = 0; i < NSRV; i++) {
        server *s = &servers[i];
        on[i] = s->installed();
        if (!on[i])
            continue;
        live++;
        s->dir = at_tmpdir("benchsrv");
        s->port = at_free_port();
        snprintf(s->hooks, sizeof s->hooks, "%s/tests/data/hooks/%s", AT_SOURCE_DIR, s->hooks_name);
        s->prepare(s);
        run warm;
        one_run(s, UNTRACED, &warm); /* the page cache, the server's and the client's binaries */
    }
    static run res[NSRV][ROUNDS][NCONF];
    int n[NSRV] = {0};
    for (int round = 0; round < ROUNDS && live; round++)
        for (int i = 0; i < NSRV; i++) {
            bool ok = on[i];
            /* each round starts with another configuration: none is always first or last */
            for (int k = 0; k < NCONF && ok; k++) {
                int c = (k + round) % NCONF;
                ok = one_run(&servers[i], c, &res[i][n[i]][c]);
            }
            n[i] += ok;
        }
    for (int i = 0; i < NSRV; i++) {
        if (on[i])
            report(&servers[i], res[i], n[i]);
        else
            printf("%s: requests/s traced vs untraced\t%s not installed\t<= 3%%\n", servers[i].name,
                   servers[i].needs);
        if (servers[i].dir) {
            at_rmtree(servers[i].dir);
            free(servers[i].dir);
        }
    }
    return 0;
}
