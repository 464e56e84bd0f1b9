/* bench_servers: what tracing costs real servers under load. Two servers, each loaded over loopback
 * by the bench's own client (below: one thread, 8 keep-alive connections, one request in flight on
 * each, every response checked):
 *   Debian's nginx (a master and one worker, a small static file, keep-alive): GET of the file;
 *   Debian's memcached (one worker thread, `-t 1`): ASCII gets and sets 9:1 over 1024 keys per
 *   connection (all set first), keys of 16 bytes, values of 100.
 * Each configuration has a server of its own, all of them started at once and left running:
 *   untraced, twice (the second one measures the machine's own noise, below);
 *   the shim without a config;
 *   the server's per-request config, without stacks: tests/data/hooks/nginx.conf (a Connection
 *   activity from accept4 to close, fd-keyed, and events on recv and writev) or memcached.conf (the
 *   same activity, which memcached's worker thread adopts when the main thread hands it the fd
 *   through its pipe, and events on read and sendmsg); all with signatures and fd/return captured;
 *   the same with the default stacks;
 *   the floor: tests/fixtures/libatfloor.so preloaded instead of the shim (the hooked calls taken
 *   and a record stored for each, nothing else), and the same with an idle thread in the server.
 * The servers are pinned to the last CPU and the client to the first; every server has the same
 * fixed address layout (no ASLR: with a random layout each, two servers of the same configuration
 * stayed 1-2 points apart over hundreds of rounds). Each is warmed by one load, then loaded in
 * ROUNDS rounds of SLICE requests: in each round each server once, in turn, each round starting
 * with another configuration. Short rounds many times over: the machine's speed drifts and jumps
 * (the same untraced server took 18, 21 or 30 us of CPU per request, for seconds or minutes at a
 * time), and a round of wrk's seconds that saw it change speed moved its servers' figures by up to
 * 40%, in no order; a round of the five here takes ~0.3 s. A round counts only when its two
 * untraced servers' CPU per request agree within STEADY (the figures are over all the rounds when
 * fewer than MIN_STEADY do), and its base is their mean.
 * Each row is the median over those rounds of the per-round ratio to the untraced base, for requests per
 * second (the client's) and for CPU per request (the server's processes and threads, their CPU
 * time from /proc, from the start of one of its loads to the start of its next: what the server
 * spent on the load's requests, its trace writer's flushes after them included, whatever the
 * client did), with the page faults per request (minor and
 * major, from wait4's rusage over its whole life and every request it served) beside them. What the
 * server's start and exit cost (its whole life's CPU from wait4 outside the timed loads: the shim's
 * set-up, the last flush and the symbols of the trace's stacks) is a row of its own, not spread
 * over the requests. The extra CPU per hooked
 * call is the CPU per request added over the shim without a config, divided by the hooked calls a
 * request makes: for nginx three (recv, writev, and the close of the file nginx opens for it, which
 * the Connection's stop sees but which writes no event); for memcached every hooked call writes an
 * event, so they are counted in each traced run's own trace (one read and one sendmsg per request,
 * plus a connection's few). Needs nginx and memcached (Debian packages); says so for a server that
 * is missing. Prints rows "metric<TAB>measured<TAB>target". With AT_BENCH_BASE_LIB set to another
 * build of libacttrace.so (the library before a change), the two per-request configurations run
 * through it too, in the same rounds, with rows of this library against it (median of the
 * per-round differences); AT_BENCH_ROUNDS=1 prints each round's figures on stderr. */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
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

static void pin_to(int cpu)
{
    if (ncpus() < 2)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

#define ROUNDS 200
/* TWIN: a second untraced server, the machine's own noise: a round where the two untraced servers'
 * CPU per request differ by more than STEADY is one where the machine changed speed under it */
/* BASE_NOSTACKS, BASE_STACKS: with AT_BENCH_BASE_LIB set to another build of the library (the one
 * before a change), the two per-request configurations again through it, in the same rounds: a
 * change is judged beside the library before in one run (between runs a configuration's figure
 * moves by 1-2 points with the machine). */
/* FLOOR, FLOOR_THREAD: the machine's floor for the hooked calls, no shim: a library that takes the
 * calls the per-request config hooks and stores a record for each, nothing else
 * (tests/fixtures/libatfloor.c); the same with an idle thread in the server, which any tracer that
 * writes from a thread of its own adds. What the shim costs above them is its own. */
enum { UNTRACED, NOCONF, NOSTACKS, STACKS, TWIN, FLOOR, FLOOR_THREAD, BASE_NOSTACKS, BASE_STACKS,
       NCONF };
static const char *const conf_name[NCONF] = {"untraced", "shim without a config",
                                             "per-request config, no stacks",
                                             "per-request config, default stacks",
                                             "a second untraced server",
                                             "floor: the hooked calls interposed, a record stored "
                                             "each, no shim (libatfloor)",
                                             "floor with an idle thread (libatfloor, "
                                             "AT_FLOOR_THREAD=1)",
                                             "per-request config, no stacks, AT_BENCH_BASE_LIB",
                                             "per-request config, default stacks, AT_BENCH_BASE_LIB"};
static const char *const target[NCONF] = {"", "<= 1%", "<= 3%", "<= 5%", "", "-", "-", "-", "-"};
static int nconf = FLOOR_THREAD + 1; /* NCONF with AT_BENCH_BASE_LIB */
static char *floor_lib;
static const char *base_lib;
static bool per_request(int conf)
{
    return conf == NOSTACKS || conf == STACKS || conf == BASE_NOSTACKS || conf == BASE_STACKS;
}
#define STEADY 0.02
#define MIN_STEADY 5 /* fewer steady rounds than this: the medians are over all rounds */

/* ---------------- the load: a client of our own ----------------
 * One thread (the bench's own, on the first CPU), CONNS keep-alive connections per server, one
 * request in flight on each: the shape of wrk -t1 -c8 and memcaslap -T1 -c8. A load is a slice of
 * SLICE requests; a server's connections stay open from one slice to the next (a connection the
 * server closes is opened again). Requests and responses are checked: a wrong answer fails the run. */
#define CONNS 8
#define SLICE 3000

typedef struct conn {
    int fd;
    size_t have;     /* bytes of the response read so far */
    unsigned next;   /* memcached: the request's number on this connection */
    unsigned id;     /* the connection's number among the client's */
    bool set;        /* memcached: the request in flight is a set */
    char buf[2048];
} conn;

static int tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static bool send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* HTTP/1.1: the request, and whether buf[0..n) holds a whole response (1), not yet (0) or a wrong
 * one (-1); *close when the server ends the connection after it */
static bool http_send(conn *c)
{
    static const char req[] = "GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    return send_all(c->fd, req, sizeof req - 1);
}

static int http_done(conn *c, bool *close_after)
{
    c->buf[c->have] = 0;
    const char *end = strstr(c->buf, "\r\n\r\n");
    if (!end)
        return c->have + 1 >= sizeof c->buf ? -1 : 0;
    if (strncmp(c->buf, "HTTP/1.1 200 ", 13) != 0)
        return -1;
    const char *cl = strcasestr(c->buf, "\r\nContent-Length:");
    if (!cl || cl > end)
        return -1;
    size_t len = strtoul(cl + 17, NULL, 10), whole = (size_t)(end + 4 - c->buf) + len;
    if (whole >= sizeof c->buf)
        return -1;
    *close_after = strcasestr(c->buf, "\r\nConnection: close") != NULL;
    return c->have >= whole ? (c->have > whole ? -1 : 1) : 0;
}

/* memcached's ASCII protocol: sets of every key first, then gets and sets 9:1 over 1024 keys per
 * connection, keys of 16 bytes, values of 100 */
#define MC_KEYS 1024
static bool mc_send(conn *c)
{
    char req[256];
    unsigned k = c->next % MC_KEYS, slot = c->id % 100; /* each connection its own keys */
    c->set = c->next < MC_KEYS || c->next % 10 == 0;
    int n = c->set ? snprintf(req, sizeof req, "set k%02u-%012u 0 0 100\r\n%0100u\r\n", slot, k, k)
                   : snprintf(req, sizeof req, "get k%02u-%012u\r\n", slot, k);
    c->next++;
    return send_all(c->fd, req, (size_t)n);
}

static int mc_done(conn *c, bool *close_after)
{
    *close_after = false;
    if (c->have < 2 || memcmp(c->buf + c->have - 2, "\r\n", 2) != 0)
        return c->have + 1 >= sizeof c->buf ? -1 : 0;
    c->buf[c->have] = 0;
    if (c->set)
        return strcmp(c->buf, "STORED\r\n") == 0 ? 1 : -1;
    if (c->have >= 5 && memcmp(c->buf + c->have - 5, "END\r\n", 5) == 0)
        return c->have == 5 || strncmp(c->buf, "VALUE ", 6) == 0 ? 1 : -1;
    return strncmp(c->buf, "VALUE ", 6) == 0 ? 0 : -1;
}

typedef struct client {
    bool (*send)(conn *c);
    int (*done)(conn *c, bool *close_after);
    int port;
    conn c[CONNS];
} client;

static bool client_open(client *cl, conn *c)
{
    c->fd = tcp_connect(cl->port);
    c->have = 0;
    return c->fd >= 0;
}

/* nreq requests over the client's connections; false on an error or a wrong response */
static bool client_load(client *cl, int nreq)
{
    struct pollfd pf[CONNS];
    int sent = 0, done = 0, inflight = 0;
    for (int i = 0; i < CONNS; i++) {
        if (cl->c[i].fd < 0 && !client_open(cl, &cl->c[i]))
            return false;
        pf[i].fd = -1;
        pf[i].events = POLLIN;
    }
    for (int i = 0; i < CONNS && sent < nreq; i++, sent++, inflight++) {
        if (!cl->send(&cl->c[i]))
            return false;
        pf[i].fd = cl->c[i].fd;
    }
    while (inflight) {
        int r = poll(pf, CONNS, 10000);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        for (int i = 0; i < CONNS; i++) {
            if (pf[i].fd < 0 || !pf[i].revents)
                continue;
            conn *c = &cl->c[i];
            ssize_t n = recv(c->fd, c->buf + c->have, sizeof c->buf - 1 - c->have, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return false;
            c->have += (size_t)n;
            bool close_after = false;
            int d = cl->done(c, &close_after);
            if (d < 0)
                return false;
            if (!d)
                continue;
            c->have = 0;
            done++;
            inflight--;
            pf[i].fd = -1;
            if (close_after) {
                close(c->fd);
                if (!client_open(cl, c))
                    return false;
            }
            if (sent < nreq) {
                if (!cl->send(c))
                    return false;
                pf[i].fd = c->fd;
                sent++;
                inflight++;
            }
        }
    }
    return done == nreq;
}

static void client_close(client *cl)
{
    for (int i = 0; i < CONNS; i++)
        if (cl->c[i].fd >= 0) {
            close(cl->c[i].fd);
            cl->c[i].fd = -1;
        }
}

/* One server and its load generator. */
typedef struct server server;
struct server {
    const char *name;      /* row prefix: "nginx" */
    const char *load;      /* the load generator's settings, for the untraced row */
    const char *needs;     /* what to install when missing */
    const char *hooks_name;/* its per-request config, under tests/data/hooks */
    int calls_per_req;     /* hooked calls a request makes; 0: count the events in each trace */
    int stop_sig;          /* ends it gracefully, its trace file complete */
    bool (*installed)(void);
    void (*prepare)(server *s, int conf);             /* its files, in dir[conf] */
    void (*exec)(const server *s, int conf);          /* in the child, the environment set */
    bool (*send)(conn *c);                             /* the client's request */
    int (*done)(conn *c, bool *close_after);           /* and its response: 1 whole, 0 not yet, -1 wrong */
    char *dir[NCONF];
    int port[NCONF];
    pid_t pid[NCONF];
    double reqs[NCONF];  /* every request it served, the warm-up's included */
    double window_ns[NCONF]; /* its CPU within the timed loads */
    double cpu0[NCONF];      /* its CPU when its last load began */
    client cl[NCONF];
    char hooks[4300];
};

/* What one load measured, per request except rps. */
typedef struct run {
    double rps, cpu_ns;
} run;

/* What a server's whole life measured, once it has ended. */
typedef struct life {
    double faults;  /* page faults per request served, its start and exit included */
    double calls;   /* hooked calls per request */
    double life_ms; /* CPU of its whole life outside the timed loads: start, idle between loads, exit */
    bool ok;
} life;

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

/* ---------------- nginx ---------------- */

static bool nginx_installed(void)
{
    return access("/usr/sbin/nginx", X_OK) == 0;
}

static void nginx_prepare(server *s, int conf)
{
    const char *dir = s->dir[conf];
    char path[4300];
    snprintf(path, sizeof path, "%s/nginx.conf", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "user root;\ndaemon off;\nmaster_process on;\nworker_processes 1;\npid %s/nginx.pid;\n"
               "error_log stderr crit;\nevents { worker_connections 256; }\n"
               "http {\n access_log off;\n sendfile off;\n keepalive_requests 1000000;\n"
               " client_body_temp_path %s/tmp; proxy_temp_path %s/tmp; fastcgi_temp_path %s/tmp;\n"
               " uwsgi_temp_path %s/tmp; scgi_temp_path %s/tmp;\n"
               " server { listen 127.0.0.1:%d; root %s; }\n}\n",
            dir, dir, dir, dir, dir, dir, s->port[conf], dir);
    fclose(f);
    snprintf(path, sizeof path, "%s/index.html", dir);
    f = fopen(path, "w");
    for (int i = 0; i < 12; i++)
        fprintf(f, "<p>acttrace bench page, a small static file of about six hundred bytes.</p>\n");
    fclose(f);
    snprintf(path, sizeof path, "%s/tmp", dir);
    mkdir(path, 0700);
}

static void nginx_exec(const server *s, int conf)
{
    char cfg[4300];
    snprintf(cfg, sizeof cfg, "%s/nginx.conf", s->dir[conf]);
    execl("/usr/sbin/nginx", "nginx", "-p", s->dir[conf], "-c", cfg, "-e", "stderr", (char *)NULL);
}

/* ---------------- memcached ---------------- */

static bool memcached_installed(void)
{
    return access("/usr/bin/memcached", X_OK) == 0;
}

static void memcached_prepare(server *s, int conf)
{
    (void)s, (void)conf;
}

static void memcached_exec(const server *s, int conf)
{
    char port[16];
    snprintf(port, sizeof port, "%d", s->port[conf]);
    /* memcached refuses to run as root unless told whom to run as */
    execl("/usr/bin/memcached", "memcached", "-t", "1", "-U", "0", "-l", "127.0.0.1", "-p", port,
          geteuid() == 0 ? "-u" : (char *)NULL, "root", (char *)NULL);
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

/* Starts s's server in configuration conf (its pid in s->pid[conf]); false when it did not. */
static bool start_server(server *s, int conf)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (conf == FLOOR || conf == FLOOR_THREAD) {
            setenv("LD_PRELOAD", floor_lib, 1);
            if (conf == FLOOR_THREAD)
                setenv("AT_FLOOR_THREAD", "1", 1);
        } else if (conf != UNTRACED && conf != TWIN) {
            char out[4400];
            setenv("LD_PRELOAD", conf >= BASE_NOSTACKS ? base_lib : at_shim_path(), 1);
            snprintf(out, sizeof out, "%s/t-%%p.nettrace", s->dir[conf]);
            setenv("ACTTRACE_OUTPUT", out, 1);
        }
        if (per_request(conf))
            setenv("ACTTRACE_CONFIG", s->hooks, 1);
        if (conf == NOSTACKS || conf == BASE_NOSTACKS)
            setenv("ACTTRACE_STACKS", "none", 1);
        int null = open("/dev/null", O_RDWR);
        dup2(null, 1);
        dup2(null, 2);
        pin_to(ncpus() - 1);
        /* every server with the same address layout (setarch -R): with each one's own random
         * layout, two servers of the same configuration kept 1-2 points apart over hundreds of
         * rounds (where their stacks, heaps and libraries fall in the caches), and a configuration
         * took its server's luck */
        personality((unsigned long)personality(0xffffffff) | ADDR_NO_RANDOMIZE);
        s->exec(s, conf);
        _exit(127);
    }
    s->pid[conf] = pid;
    if (pid < 0)
        return false;
    for (int i = 0; i < 500 && !port_open(s->port[conf]); i++) {
        struct timespec d = {0, 10000000};
        nanosleep(&d, NULL);
    }
    return port_open(s->port[conf]);
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* Takes s's server in configuration conf's CPU so far: the end of the window of its last load (r,
 * its CPU per request) and the start of the next. A window runs from the start of one load to the
 * start of the next one of the same server, so that it holds everything the server did for the
 * load's requests, the trace writer's flushes after them included. */
static void load_mark(server *s, int conf, run *r)
{
    double cpu = tree_cpu_ns(s->pid[conf]);
    if (r) {
        r->cpu_ns = (cpu - s->cpu0[conf]) / SLICE;
        s->window_ns[conf] += cpu - s->cpu0[conf];
    }
    s->cpu0[conf] = cpu;
}

/* One load of n requests of s's server in configuration conf; false when it did not run. */
static bool one_load(server *s, int conf, int n, run *r)
{
    double t0 = now_ns();
    errno = 0;
    if (!client_load(&s->cl[conf], n)) { /* the rows then say it failed; this says where */
        fprintf(stderr, "bench_servers: %s, %s: a load of %d requests failed (%s)\n", s->name,
                conf_name[conf], n, errno ? strerror(errno) : "a wrong or short response");
        return false;
    }
    s->reqs[conf] += n;
    if (r)
        r->rps = n / ((now_ns() - t0) / 1e9);
    return true;
}

/* Ends s's server in configuration conf: what its whole life cost besides the timed loads. */
static life stop_server(server *s, int conf)
{
    life l = {0};
    if (s->pid[conf] <= 0)
        return l;
    kill(s->pid[conf], s->stop_sig);
    int st;
    struct rusage ru;
    while (wait4(s->pid[conf], &st, 0, &ru) < 0 && errno == EINTR) {}
    double cpu_ns = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 +
                    (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3;
    double reqs = s->reqs[conf];
    l.calls = s->calls_per_req;
    if (reqs > 0 && per_request(conf) && !s->calls_per_req)
        l.calls = config_events(s->dir[conf]) / reqs;
    char **files = at_trace_files(s->dir[conf]);
    for (size_t i = 0; files && files[i]; i++)
        unlink(files[i]);
    at_strv_free(files);
    l.ok = reqs > 0 && (!per_request(conf) || l.calls > 0);
    l.life_ms = (cpu_ns - s->window_ns[conf]) / 1e6;
    l.faults = reqs > 0 ? (double)(ru.ru_minflt + ru.ru_majflt) / reqs : 0;
    return l;
}

/* ---------------- rows ---------------- */

static void report(const server *s, run res[][NCONF], int n, const life *lf)
{
    if (!n || !lf[UNTRACED].ok || !lf[TWIN].ok) {
        printf("%s: requests/s traced vs untraced\tfailed to run\t<= 3%%\n", s->name);
        return;
    }
    /* the rounds the figures are taken over: the steady ones, when there are enough */
    int use[ROUNDS], m = 0;
    double tw[ROUNDS];
    for (int i = 0; i < n; i++) {
        tw[i] = res[i][TWIN].cpu_ns / res[i][UNTRACED].cpu_ns;
        if (tw[i] >= 1 - STEADY && tw[i] <= 1 + STEADY)
            use[m++] = i;
    }
    int nsteady = m;
    bool steady = m >= MIN_STEADY;
    if (!steady)
        for (m = 0; m < n; m++)
            use[m] = m;
    /* each round's base: the two untraced servers' mean */
    double v[ROUNDS], w[ROUNDS];
    for (int k = 0; k < m; k++) {
        const run *a = &res[use[k]][UNTRACED], *b = &res[use[k]][TWIN];
        v[k] = (a->rps + b->rps) / 2;
        w[k] = (a->cpu_ns + b->cpu_ns) / 2;
    }
    printf("%s %s, untraced (median of the steady rounds of %d requests)\t%.0f req/s, %.1f us "
           "CPU/req, %.4f faults/req (%d rounds%s)\t-\n", s->name, s->load, SLICE, median(v, m),
           median(w, m) / 1000, lf[UNTRACED].faults, m, steady ? "" : ": all, too few steady");
    double tws[ROUNDS];
    for (int i = 0; i < n; i++)
        tws[i] = fabs(tw[i] - 1) * 100;
    /* the instrument's own error: the second untraced server against the first, signed, over all
     * rounds (a configuration's figure is not resolved closer than this) */
    printf("  the machine: two untraced servers' CPU per request apart (median of all rounds; rounds "
           "within %.0f%%, the steady ones; the second against the first)\t%.1f%% (%d of %d; %+.2f%%)"
           "\t-\n", STEADY * 100, median(tws, n), nsteady, n, (median(tw, n) - 1) * 100);
    /* each configuration's median extra CPU per request over the base, for the rows that compare
     * two of them */
    double mdc_of[NCONF] = {0};
    for (int c = 1; c < nconf; c++) {
        double dc[ROUNDS];
        for (int k = 0; k < m; k++)
            dc[k] = res[use[k]][c].cpu_ns - w[k];
        mdc_of[c] = median(dc, m);
    }
    double d_noconf = 0;
    for (int c = 1; c < nconf; c++) {
        if (c == TWIN)
            continue;
        if (!lf[c].ok) {
            printf("%s, %s: fewer req/s\tfailed to run\t%s\n", s->name, conf_name[c], target[c]);
            continue;
        }
        double rr[ROUNDS], rc[ROUNDS], dc[ROUNDS];
        for (int k = 0; k < m; k++) {
            const run *t = &res[use[k]][c];
            rr[k] = t->rps / v[k];
            rc[k] = t->cpu_ns / w[k];
            dc[k] = t->cpu_ns - w[k];
        }
        double mdc = median(dc, m);
        if (c == NOCONF)
            d_noconf = mdc;
        printf("%s, %s: fewer req/s (CPU per request; page faults per request)\t%.1f%% (%+.1f%%, "
               "%+.0f ns/req; %+.4f faults/req)\t%s\n", s->name, conf_name[c],
               (1 - median(rr, m)) * 100, (median(rc, m) - 1) * 100, mdc,
               lf[c].faults - lf[UNTRACED].faults, target[c]);
        printf("  %s: its start and exit, CPU added (the server's whole life outside the timed "
               "loads)\t%+.1f ms\t-\n", conf_name[c], lf[c].life_ms - lf[UNTRACED].life_ms);
        if (c >= BASE_NOSTACKS) { /* this library against the base, per round */
            int ours = c == BASE_NOSTACKS ? NOSTACKS : STACKS;
            double dd[ROUNDS];
            for (int k = 0; k < m; k++)
                dd[k] = (res[use[k]][ours].cpu_ns - res[use[k]][c].cpu_ns) / w[k] * 100;
            printf("  this library against AT_BENCH_BASE_LIB, %s (median of per-round differences in "
                   "CPU per request)\t%+.2f points\t-\n", conf_name[ours], median(dd, m));
        }
        if (c == NOSTACKS || c == STACKS) {
            double k = lf[c].calls;
            printf("  extra CPU per hooked call, %s (%.*f per request%s)\t%.0f ns\t<= 150 ns\n",
                   conf_name[c], s->calls_per_req ? 0 : 2, k,
                   s->calls_per_req ? "" : ", counted in its traces", (mdc - d_noconf) / k);
            if (nconf > FLOOR_THREAD && lf[FLOOR_THREAD].ok)
                printf("  the shim's own, above the floor with an idle thread, per hooked call, %s\t"
                       "%.0f ns\t-\n", conf_name[c], (mdc - mdc_of[FLOOR_THREAD]) / k);
        }
        /* the floor per hooked call: over untraced (no shim in it), the calls the per-request
         * config hooks */
        if ((c == FLOOR || c == FLOOR_THREAD) && lf[NOSTACKS].ok && lf[NOSTACKS].calls > 0)
            printf("  %s: extra CPU per hooked call (as many as the per-request config's)\t%.0f ns"
                   "\t-\n", c == FLOOR ? "floor" : "floor with an idle thread",
                   mdc / lf[NOSTACKS].calls);
    }
}

int main(void)
{
    server servers[] = {
        {.name = "nginx", .load = "8 connections", .needs = "nginx",
         .hooks_name = "nginx.conf",
         .calls_per_req = 3, .stop_sig = SIGQUIT, /* graceful: the worker ends its connections */
         .installed = nginx_installed, .prepare = nginx_prepare, .exec = nginx_exec,
         .send = http_send, .done = http_done},
        {.name = "memcached", .load = "8 connections", .needs = "memcached", .hooks_name = "memcached.conf", .calls_per_req = 0,
         .stop_sig = SIGTERM, .installed = memcached_installed, .prepare = memcached_prepare,
         .exec = memcached_exec, .send = mc_send, .done = mc_done},
    };
    enum { NSRV = sizeof servers / sizeof servers[0] };
    pin_to(0); /* the client; each server is moved to the last CPU as it starts */
    static run res[ROUNDS][NCONF];
    base_lib = getenv("AT_BENCH_BASE_LIB");
    if (base_lib && *base_lib) {
        if (access(base_lib, R_OK) != 0) {
            fprintf(stderr, "bench_servers: AT_BENCH_BASE_LIB: cannot read %s\n", base_lib);
            return 2;
        }
        nconf = NCONF;
    }
    floor_lib = at_fixture_path("libatfloor.so");
    if (access(floor_lib, R_OK) != 0) {
        fprintf(stderr, "bench_servers: cannot read %s (make tests builds it)\n", floor_lib);
        return 2;
    }
    for (int i = 0; i < NSRV; i++) {
        server *s = &servers[i];
        if (!s->installed()) {
            printf("%s: requests/s traced vs untraced\t%s not installed\t<= 3%%\n", s->name,
                   s->needs);
            continue;
        }
        snprintf(s->hooks, sizeof s->hooks, "%s/tests/data/hooks/%s", AT_SOURCE_DIR, s->hooks_name);
        bool up = true;
        for (int c = 0; c < nconf; c++) {
            s->dir[c] = at_tmpdir("benchsrv");
            s->port[c] = at_free_port();
            s->prepare(s, c);
            up = start_server(s, c) && up;
        }
        /* warm: the page cache, the binaries, each server's buffers, its connections (and
         * memcached's keys: every one set before the first get) */
        for (int c = 0; c < nconf && up; c++) {
            s->cl[c].port = s->port[c];
            s->cl[c].send = s->send;
            s->cl[c].done = s->done;
            for (int k = 0; k < CONNS; k++) {
                s->cl[c].c[k].fd = -1;
                s->cl[c].c[k].id = (unsigned)k;
            }
            up = one_load(s, c, 4 * SLICE, NULL);
        }
        /* rounds of SLICE requests to each server in turn, each round starting with another
         * configuration (none always first or last); a last round of marks ends the windows */
        int n = 0;
        for (int round = 0; round <= ROUNDS && up; round++) {
            bool ok = true;
            for (int k = 0; k < nconf && ok; k++) {
                int c = (k + round) % nconf;
                load_mark(s, c, round ? &res[round - 1][c] : NULL);
                if (round < ROUNDS)
                    ok = one_load(s, c, SLICE, &res[round][c]);
            }
            up = ok;
            n = round;
        }
        if (getenv("AT_BENCH_ROUNDS")) /* each round's figures, for a look at the spread */
            for (int i = 0; i < n; i++) {
                fprintf(stderr, "%s round %d: CPU ns/req", s->name, i);
                for (int c = 0; c < nconf; c++)
                    fprintf(stderr, " %.0f", res[i][c].cpu_ns);
                fprintf(stderr, ", req/s");
                for (int c = 0; c < nconf; c++)
                    fprintf(stderr, " %.0f", res[i][c].rps);
                fprintf(stderr, "\n");
            }
        for (int c = 0; c < nconf; c++)
            client_close(&s->cl[c]);
        life lf[NCONF];
        for (int c = 0; c < nconf; c++)
            lf[c] = stop_server(s, c);
        report(s, res, up ? n : 0, lf);
        for (int c = 0; c < nconf; c++) {
            at_rmtree(s->dir[c]);
            free(s->dir[c]);
        }
    }
    return 0;
}
