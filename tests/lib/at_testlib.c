/* at_testlib.c: the integration-test harness (see at_testlib.h): run a program under the shim and
 * read its trace back through the project's reader into decoded events. */
#include "at_testlib.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/close_range.h>

#include "actpath.h"
#include "guid.h"
#include "ntreader.h"

extern char **environ;

#ifndef AT_BUILD_DIR
#define AT_BUILD_DIR "build"
#endif

/* ---------------- paths ---------------- */

const char *at_build_dir(void)
{
    static char dir[PATH_MAX];
    if (dir[0])
        return dir;
    const char *b = getenv("AT_TEST_BUILD_DIR");
    if (!b || !*b)
        b = AT_BUILD_DIR;
    if (!realpath(b, dir))
        snprintf(dir, sizeof dir, "%s", b);
    return dir;
}

const char *at_shim_path(void)
{
    static char p[PATH_MAX + 32];
    if (!p[0])
        snprintf(p, sizeof p, "%s/libacttrace.so", at_build_dir());
    return p;
}

char *at_fixture_path(const char *name)
{
    char *p;
    if (asprintf(&p, "%s/fixtures/%s", at_build_dir(), name) < 0)
        return NULL;
    return p;
}

char *at_tmpdir(const char *tag)
{
    char base[PATH_MAX + 16];
    snprintf(base, sizeof base, "%s/tests", at_build_dir());
    mkdir(base, 0755);
    snprintf(base, sizeof base, "%s/tests/tmp", at_build_dir());
    mkdir(base, 0755);
    char *p;
    if (asprintf(&p, "%s/%s-XXXXXX", base, tag) < 0)
        return NULL;
    if (!mkdtemp(p)) {
        free(p);
        return NULL;
    }
    return p;
}

/* AT_KEEP_TRACES=DIR: every trace a test wrote is kept there before its folder goes (make
 * check-traceevent reads them with TraceEvent), named <test binary>-<pid>-<n>-<file name>. */
static void keep_trace(const char *path, const char *name)
{
    const char *keep = getenv("AT_KEEP_TRACES");
    size_t l = strlen(name);
    if (!keep || !*keep || l < 9 || strcmp(name + l - 9, ".nettrace") != 0)
        return;
    static unsigned n;
    char to[PATH_MAX];
    snprintf(to, sizeof to, "%s/%s-%d-%u-%s", keep, program_invocation_short_name, (int)getpid(), n++, name);
    if (link(path, to) == 0)
        return;
    int in = open(path, O_RDONLY | O_CLOEXEC);
    int out = in < 0 ? -1 : open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    char buf[65536];
    ssize_t r;
    while (out >= 0 && (r = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)r) != r)
            break;
    if (out >= 0)
        close(out);
    if (in >= 0)
        close(in);
}

void at_rmtree(const char *dir)
{
    if (!dir)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        bool known = lstat(p, &st) == 0;
        if (known && S_ISDIR(st.st_mode)) {
            at_rmtree(p);
        } else {
            if (known && S_ISREG(st.st_mode))
                keep_trace(p, de->d_name);
            unlink(p);
        }
    }
    closedir(d);
    rmdir(dir);
}

/* ---------------- running a program ---------------- */

/* Under check-asan the shim is built with ASan+UBSan while fixtures and real programs are not: the
 * sanitizer runtimes must come first in LD_PRELOAD. Take the very files the test binary loaded. */
static int find_san_lib(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    char *out = arg;
    const char *n = info->dlpi_name;
    if (n && (strstr(n, "libasan.so") || strstr(n, "libubsan.so"))) {
        size_t l = strlen(out);
        snprintf(out + l, PATH_MAX * 2 - l, "%s%s", l ? " " : "", n);
    }
    return 0;
}

static bool env_name_eq(const char *entry, const char *name, size_t nlen)
{
    return strncmp(entry, name, nlen) == 0 && (entry[nlen] == '=' || entry[nlen] == 0);
}

/* The child's environment: inherited, minus/overridden by o->env, plus LD_PRELOAD. */
static char **build_env(const at_run_opts *o)
{
    size_t n = 0, extra = 0;
    while (environ[n])
        n++;
    if (o->env)
        while (o->env[extra])
            extra++;
    char **e = calloc(n + extra + 4, sizeof *e);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *cur = environ[i];
        const char *eq = strchr(cur, '=');
        size_t nl = eq ? (size_t)(eq - cur) : strlen(cur);
        bool drop = env_name_eq(cur, "LD_PRELOAD", 10) && nl == 10;
        for (size_t j = 0; j < extra && !drop; j++) {
            const char *x = o->env[j];
            const char *xe = strchr(x, '=');
            size_t xl = xe ? (size_t)(xe - x) : strlen(x);
            if (xl == nl && strncmp(x, cur, nl) == 0)
                drop = true;
        }
        if (!drop)
            e[k++] = strdup(cur);
    }
    for (size_t j = 0; j < extra; j++)
        if (strchr(o->env[j], '='))
            e[k++] = strdup(o->env[j]);
    bool user_preload = false;
    for (size_t j = 0; j < extra; j++)
        if (env_name_eq(o->env[j], "LD_PRELOAD", 10))
            user_preload = true;
    if (!o->no_preload && !user_preload) {
        char san[PATH_MAX * 2] = "";
        const char *a = getenv("ACTTRACE_ASAN");
        if (a && *a == '1')
            dl_iterate_phdr(find_san_lib, san);
        char *p;
        if (asprintf(&p, "LD_PRELOAD=%s%s%s", san, san[0] ? " " : "", at_shim_path()) >= 0)
            e[k++] = p;
        /* The program itself is not instrumented: no leak reports about it, and its faults are left
         * to the program and the shim, as they are without a sanitizer. */
        if (san[0] && !getenv("ASAN_OPTIONS"))
            e[k++] = strdup("ASAN_OPTIONS=detect_leaks=0:handle_segv=0:handle_sigbus=0:handle_sigfpe=0");
    }
    e[k] = NULL;
    return e;
}

static void free_env(char **e)
{
    for (size_t i = 0; e[i]; i++)
        free(e[i]);
    free(e);
}

static void exec_child(const at_run_opts *o, char **env)
{
    if (o->cwd && chdir(o->cwd) != 0) {
        dprintf(2, "at_run: chdir %s: %s\n", o->cwd, strerror(errno));
        _exit(127);
    }
    /* A test harness may block signals (Check does not, but be sure): the program starts clean. */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            signal(s, SIG_DFL);
    /* nor any descriptor of the harness's (Check's own files, the output files just dup'ed) */
    close_range(3, ~0u, 0);
    environ = env;
    execvp(o->argv[0], (char *const *)o->argv);
    dprintf(2, "at_run: exec %s: %s\n", o->argv[0], strerror(errno));
    _exit(127);
}

static void fill_status(at_run_result *r, int st)
{
    if (WIFEXITED(st)) {
        r->exited = true;
        r->status = WEXITSTATUS(st);
    } else if (WIFSIGNALED(st)) {
        r->signaled = true;
        r->sig = WTERMSIG(st);
        r->core = WCOREDUMP(st);
    }
}

static void append(char **buf, size_t *len, size_t *cap, const char *d, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap * 2 : 4096;
        while (c < *len + n + 1)
            c *= 2;
        *buf = realloc(*buf, c);
        *cap = c;
    }
    memcpy(*buf + *len, d, n);
    *len += n;
    (*buf)[*len] = 0;
}

int at_run(const at_run_opts *o, at_run_result *r)
{
    memset(r, 0, sizeof *r);
    int po[2], pe[2], pi[2] = {-1, -1};
    if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC))
        return -1;
    if (o->stdin_data && pipe2(pi, O_CLOEXEC))
        return -1;
    char **env = build_env(o);
    pid_t pid = fork();
    if (pid < 0) {
        free_env(env);
        return -1;
    }
    if (pid == 0) {
        if (o->deadline_s)
            setpgid(0, 0); /* killed as a group at the deadline, fork children too */
        dup2(po[1], 1);
        dup2(pe[1], 2);
        if (o->stdin_data)
            dup2(pi[0], 0);
        else {
            int nul = open("/dev/null", O_RDONLY);
            dup2(nul, 0);
        }
        exec_child(o, env);
    }
    free_env(env);
    r->pid = pid;
    close(po[1]);
    close(pe[1]);
    if (o->stdin_data) {
        close(pi[0]);
        /* Small inputs only: written before reading outputs. */
        size_t left = strlen(o->stdin_data);
        const char *s = o->stdin_data;
        signal(SIGPIPE, SIG_IGN);
        while (left) {
            ssize_t w = write(pi[1], s, left);
            if (w <= 0)
                break;
            s += w;
            left -= (size_t)w;
        }
        close(pi[1]);
    }
    size_t ocap = 0, ecap = 0;
    append(&r->out, &r->outlen, &ocap, "", 0);
    append(&r->err, &r->errlen, &ecap, "", 0);
    struct pollfd pf[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    int open_fds = 2;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (open_fds) {
        int wait_ms = -1;
        if (o->deadline_s && !r->timed_out) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            long ms = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
            if (ms >= (long)o->deadline_s * 1000) {
                r->timed_out = true;
                kill(-pid, SIGKILL);
                kill(pid, SIGKILL); /* in case setpgid had not run yet */
            } else {
                wait_ms = (int)((long)o->deadline_s * 1000 - ms);
            }
        }
        int pr = poll(pf, 2, wait_ms);
        if (pr == 0)
            continue;
        if (pr < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (pf[i].fd < 0 || !pf[i].revents)
                continue;
            char buf[8192];
            ssize_t n = read(pf[i].fd, buf, sizeof buf);
            if (n > 0) {
                if (i == 0)
                    append(&r->out, &r->outlen, &ocap, buf, (size_t)n);
                else
                    append(&r->err, &r->errlen, &ecap, buf, (size_t)n);
            } else if (n == 0 || errno != EINTR) {
                close(pf[i].fd);
                pf[i].fd = -1;
                open_fds--;
            }
        }
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    fill_status(r, st);
    return 0;
}

void at_run_result_free(at_run_result *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

const char *at_run_describe(const at_run_result *r, char *buf, size_t n)
{
    if (r->timed_out)
        snprintf(buf, n, "still running at the deadline: killed");
    else if (r->exited)
        snprintf(buf, n, "exit %d", r->status);
    else if (r->signaled)
        snprintf(buf, n, "signal %d (%s)", r->sig, strsignal(r->sig));
    else
        snprintf(buf, n, "unknown status");
    return buf;
}

int at_spawn(const at_run_opts *o, at_proc *p)
{
    memset(p, 0, sizeof *p);
    char *dir = at_tmpdir("spawn");
    if (!dir)
        return -1;
    if (asprintf(&p->outpath, "%s/stdout", dir) < 0 || asprintf(&p->errpath, "%s/stderr", dir) < 0) {
        free(dir);
        return -1;
    }
    free(dir);
    char **env = build_env(o);
    pid_t pid = fork();
    if (pid < 0) {
        free_env(env);
        return -1;
    }
    if (pid == 0) {
        int fo = open(p->outpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(p->errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int nul = open("/dev/null", O_RDONLY);
        dup2(fo, 1);
        dup2(fe, 2);
        dup2(nul, 0);
        exec_child(o, env);
    }
    free_env(env);
    p->pid = pid;
    return 0;
}

int at_wait(at_proc *p, at_run_result *r)
{
    memset(r, 0, sizeof *r);
    int st;
    while (waitpid(p->pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    r->pid = p->pid;
    fill_status(r, st);
    r->out = at_read_file(p->outpath, &r->outlen);
    r->err = at_read_file(p->errpath, &r->errlen);
    if (!r->out)
        r->out = strdup("");
    if (!r->err)
        r->err = strdup("");
    /* remove the spawn folder */
    char *slash = strrchr(p->outpath, '/');
    if (slash) {
        *slash = 0;
        at_rmtree(p->outpath);
    }
    free(p->outpath);
    free(p->errpath);
    p->outpath = p->errpath = NULL;
    return 0;
}

/* ---------------- reading a trace back ---------------- */

static void format_id(const at_guid *g, char *out, size_t n, uint32_t *pid)
{
    *pid = 0;
    if (at_guid_is_zero(g)) {
        out[0] = 0;
        return;
    }
    uint32_t p = at_actpath_pid(g);
    if (at_actpath_is_path(g, p) && at_actpath_format(g, p, out, n) > 0) {
        *pid = p;
        return;
    }
    char s[37];
    at_guid_format(g, s);
    snprintf(out, n, "%s", s);
}

int at_trace_load(const char *path, at_trace *t)
{
    memset(t, 0, sizeof *t);
    t->path = strdup(path);
    nt_reader *r = nt_open(path, t->err, sizeof t->err);
    if (!r)
        return -1;
    t->pid = nt_info(r)->pid;
    size_t cap = 0;
    nt_event ev;
    int rc;
    while ((rc = nt_next(r, &ev)) == 1) {
        if (t->n == cap) {
            cap = cap ? cap * 2 : 256;
            t->ev = realloc(t->ev, cap * sizeof *t->ev);
        }
        at_tev *e = &t->ev[t->n++];
        memset(e, 0, sizeof *e);
        const nt_metadata *m = ev.meta;
        e->provider = m->provider;
        e->name = m->name;
        e->opcode = m->opcode;
        e->event_id = m->event_id;
        e->keywords = m->keywords;
        e->seq = ev.seq;
        e->thread = ev.thread;
        e->timestamp = ev.timestamp;
        e->activity = ev.activity;
        e->related = ev.related;
        e->nframes = ev.nframes;
        e->payload_len = ev.payload_len;
        memcpy(e->head, ev.payload, ev.payload_len < sizeof e->head ? ev.payload_len : sizeof e->head);
        format_id(&ev.activity, e->act_path, sizeof e->act_path, &e->act_pid);
        format_id(&ev.related, e->rel_path, sizeof e->rel_path, &e->rel_pid);
        e->nfields = m->nfields;
        e->fields = calloc(m->nfields ? m->nfields : 1, sizeof *e->fields);
        uint32_t off = 0;
        for (uint32_t i = 0; i < m->nfields; i++) {
            char val[1024];
            e->fields[i].name = strdup(m->fields[i].name ? m->fields[i].name : "");
            e->fields[i].type = m->fields[i].type;
            if (!nt_field_format(&m->fields[i], ev.payload, ev.payload_len, &off, val, sizeof val)) {
                e->fields[i].value = NULL; /* truncated payload: field absent */
                for (uint32_t j = i + 1; j < m->nfields; j++)
                    e->fields[j].name = strdup(m->fields[j].name ? m->fields[j].name : "");
                break;
            }
            e->fields[i].value = strdup(val);
        }
    }
    t->events_lost = nt_get_counts(r)->events_lost;
    if (rc == 0)
        t->complete = true;
    else
        snprintf(t->err, sizeof t->err, "%s", nt_error(r));
    /* The metadata strings (provider, name) belong to the reader: keep it open until free. */
    t->reader_ = r;
    return rc == 0 ? 0 : -1;
}

void at_trace_free(at_trace *t)
{
    for (size_t i = 0; i < t->n; i++) {
        for (uint32_t j = 0; j < t->ev[i].nfields; j++) {
            free(t->ev[i].fields[j].name);
            free(t->ev[i].fields[j].value);
        }
        free(t->ev[i].fields);
    }
    free(t->ev);
    free(t->path);
    if (t->reader_)
        nt_close(t->reader_);
    memset(t, 0, sizeof *t);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char **at_trace_files(const char *dir)
{
    size_t n = 0, cap = 8;
    char **v = calloc(cap, sizeof *v);
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            size_t l = strlen(de->d_name);
            if (l < 9 || strcmp(de->d_name + l - 9, ".nettrace") != 0)
                continue;
            if (n + 2 > cap) {
                cap *= 2;
                v = realloc(v, cap * sizeof *v);
            }
            if (asprintf(&v[n], "%s/%s", dir, de->d_name) >= 0)
                n++;
        }
        closedir(d);
    }
    v[n] = NULL;
    qsort(v, n, sizeof *v, cmp_str);
    return v;
}

void at_strv_free(char **v)
{
    if (!v)
        return;
    for (size_t i = 0; v[i]; i++)
        free(v[i]);
    free(v);
}

char *at_strv_join_sorted(char **v, size_t n)
{
    if (n)
        qsort(v, n, sizeof *v, cmp_str);
    size_t len = 1;
    for (size_t i = 0; i < n; i++)
        len += strlen(v[i]) + 1;
    char *s = calloc(1, len);
    for (size_t i = 0; i < n; i++) {
        strcat(s, v[i]);
        strcat(s, "\n");
        free(v[i]);
    }
    free(v);
    return s;
}

size_t at_strv_len(char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

char *at_trace_file_for_pid(const char *dir, int pid)
{
    char *p;
    if (asprintf(&p, "%s/acttrace-%d.nettrace", dir, pid) >= 0 && at_file_exists(p))
        return p;
    free(p);
    char **v = at_trace_files(dir);
    char *found = NULL;
    for (size_t i = 0; v[i] && !found; i++) {
        char err[256];
        nt_reader *r = nt_open(v[i], err, sizeof err);
        if (!r)
            continue;
        if (nt_info(r)->pid == pid)
            found = strdup(v[i]);
        nt_close(r);
    }
    at_strv_free(v);
    return found;
}

char *at_trace_file_last_image(const char *dir, int pid)
{
    char *best = NULL;
    for (int n = 1; n < 1000; n++) {
        char *p;
        if (asprintf(&p, "%s/acttrace-%d-exec%d.nettrace", dir, pid, n) < 0)
            break;
        if (!at_file_exists(p)) {
            free(p);
            break;
        }
        free(best);
        best = p;
    }
    return best ? best : at_trace_file_for_pid(dir, pid);
}

/* ---------------- searching ---------------- */

long at_find(const at_trace *t, const char *provider, const char *name, size_t from)
{
    for (size_t i = from; i < t->n; i++) {
        if (provider && strcmp(t->ev[i].provider, provider) != 0)
            continue;
        if (name && strcmp(t->ev[i].name, name) != 0)
            continue;
        return (long)i;
    }
    return -1;
}

long at_find_field(const at_trace *t, const char *name, const char *fname, const char *value,
                   size_t from)
{
    for (size_t i = from; i < t->n; i++) {
        if (name && strcmp(t->ev[i].name, name) != 0)
            continue;
        const char *v = at_ev_field(&t->ev[i], fname);
        if (v && strcmp(v, value) == 0)
            return (long)i;
    }
    return -1;
}

size_t at_count(const at_trace *t, const char *provider, const char *name)
{
    size_t c = 0;
    for (long i = at_find(t, provider, name, 0); i >= 0; i = at_find(t, provider, name, (size_t)i + 1))
        c++;
    return c;
}

const char *at_ev_field(const at_tev *e, const char *fname)
{
    for (uint32_t i = 0; i < e->nfields; i++)
        if (e->fields[i].name && strcmp(e->fields[i].name, fname) == 0)
            return e->fields[i].value;
    return NULL;
}

bool at_field_u64(const at_tev *e, const char *fname, uint64_t *v)
{
    const char *s = at_ev_field(e, fname);
    if (!s)
        return false;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 0);
    if (errno || end == s)
        return false;
    *v = x;
    return true;
}

bool at_path_is_below(const char *child, const char *ancestor)
{
    size_t l = strlen(ancestor);
    if (l == 0)
        return child[0] != 0; /* everything is below "no activity" */
    return strncmp(child, ancestor, l) == 0 && child[l] == '/';
}

bool at_path_within(const char *child, const char *ancestor)
{
    return strcmp(child, ancestor) == 0 || at_path_is_below(child, ancestor);
}

void at_path_parent(const char *path, char *out, size_t n)
{
    snprintf(out, n, "%s", path);
    char *s = strrchr(out, '/');
    /* "//1/5" -> "": a root's first number is the AppDomain, not an activity */
    int slashes = 0;
    for (const char *p = out; *p; p++)
        slashes += *p == '/';
    if (!s || slashes <= 3)
        out[0] = 0;
    else
        *s = 0;
}

void at_trace_dump(const at_trace *t, FILE *f)
{
    fprintf(f, "trace %s: pid %d, %zu events%s%s\n", t->path ? t->path : "?", t->pid, t->n,
            t->complete ? "" : ", INCOMPLETE: ", t->complete ? "" : t->err);
    for (size_t i = 0; i < t->n; i++) {
        const at_tev *e = &t->ev[i];
        fprintf(f, "%4zu tid %-7llu op %-3u %s/%s act=%s rel=%s", i, (unsigned long long)e->thread,
                e->opcode, e->provider, e->name, e->act_path[0] ? e->act_path : "-",
                e->rel_path[0] ? e->rel_path : "-");
        for (uint32_t j = 0; j < e->nfields; j++)
            fprintf(f, " %s=%s", e->fields[j].name, e->fields[j].value ? e->fields[j].value : "?");
        fputc('\n', f);
    }
}

/* ---------------- misc ---------------- */

char *at_read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (n + 1 >= cap)
            b = realloc(b, cap *= 2);
        ssize_t r = read(fd, b + n, cap - n - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    b[n] = 0;
    if (len)
        *len = n;
    return b;
}

bool at_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int at_free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    int port = -1;
    if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(s, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    close(s);
    return port;
}

int at_connect_port(int port)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
        close(s);
        return -1;
    }
    struct timeval tv = {10, 0}; /* a server that never answers fails the test, not hangs it */
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return s;
}

bool at_wait_listening(int port)
{
    int up = -1;
    for (int i = 0; i < 400 && up < 0; i++) {
        up = at_connect_port(port);
        if (up < 0)
            nanosleep(&(struct timespec){0, 25 * 1000 * 1000}, NULL);
    }
    if (up < 0)
        return false;
    close(up);
    return true;
}

/* ---------------- one traced run ---------------- */

int at_session_run(at_session *s, const char *tag, const char *const *argv, const char *const *env)
{
    return at_session_run_deadline(s, tag, argv, env, 0);
}

int at_session_run_deadline(at_session *s, const char *tag, const char *const *argv,
                            const char *const *env, unsigned deadline_s)
{
    memset(s, 0, sizeof *s);
    s->dir = at_tmpdir(tag);
    if (!s->dir)
        return -1;
    size_t argc = 0;
    while (argv[argc])
        argc++;
    const char *av[argc + 1];
    char *fx = NULL;
    for (size_t i = 0; i <= argc; i++)
        av[i] = argv[i];
    if (!strchr(argv[0], '/') && (fx = at_fixture_path(argv[0])) && at_file_exists(fx))
        av[0] = fx;
    at_run_opts o = {.argv = av, .env = env, .cwd = s->dir, .deadline_s = deadline_s};
    int rc = at_run(&o, &s->r);
    free(fx);
    if (rc != 0)
        return -1;
    char *path = at_trace_file_for_pid(s->dir, s->r.pid);
    if (path) {
        s->has_trace = true;
        s->load_rc = at_trace_load(path, &s->t);
        free(path);
    }
    return 0;
}

void at_session_load_last_image(at_session *s)
{
    char *path = at_trace_file_last_image(s->dir, s->r.pid);
    if (path) {
        s->has_trace = true;
        s->load_rc = at_trace_load(path, &s->t);
        free(path);
    }
}

bool at_session_load_pid(const at_session *s, int pid, at_trace *t)
{
    memset(t, 0, sizeof *t);
    char *path = at_trace_file_for_pid(s->dir, pid);
    if (!path)
        return false;
    at_trace_load(path, t);
    free(path);
    return true;
}

void at_session_free(at_session *s)
{
    if (s->has_trace)
        at_trace_free(&s->t);
    at_run_result_free(&s->r);
    if (s->dir && !getenv("AT_KEEP_TMP"))
        at_rmtree(s->dir);
    free(s->dir);
    memset(s, 0, sizeof *s);
}

const char *at_session_describe(const at_session *s, char *buf, size_t n)
{
    char st[64];
    const char *err = s->r.err ? s->r.err : "";
    const char *nl = strchr(err, '\n');
    int el = nl ? (int)(nl - err) : (int)strlen(err);
    snprintf(buf, n, "%s; stderr: %.*s; trace: %s%s%s (%zu events) in %s",
             at_run_describe(&s->r, st, sizeof st), el > 200 ? 200 : el, err,
             s->has_trace ? "found" : "none", s->has_trace && !s->t.complete ? ", incomplete: " : "",
             s->has_trace && !s->t.complete ? s->t.err : "", s->has_trace ? s->t.n : 0,
             s->dir ? s->dir : "?");
    return buf;
}

/* ---------------- .NET programs of the tests ---------------- */

bool at_traceevent_required(void)
{
    const char *r = getenv("AT_TRACEEVENT_REQUIRED");
    return r && strcmp(r, "1") == 0;
}

char *at_dotnet_built(const char *project, const char *te_version, const char *binary_fmt, char *err,
                      size_t errlen)
{
    err[0] = 0;
    if (system("command -v dotnet >/dev/null 2>&1") != 0)
        return NULL;
    const char *b = at_build_dir();
    const char *name = strrchr(project, '/');
    name = name ? name + 1 : project;
    char log[4200], cmd[16384], prop[128] = "";
    snprintf(log, sizeof log, "%s/compat/build-%.*s%s%s.log", b, (int)strcspn(name, "."), name,
             te_version ? "-" : "", te_version ? te_version : "");
    if (te_version)
        snprintf(prop, sizeof prop, "-p:TraceEventVersion=%s ", te_version);
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/compat' && DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1 "
             "dotnet build '%s' -c Release -nologo -v q %s-p:AtBuildDir='%s/compat' >'%s' 2>&1",
             b, project, prop, b, log);
    if (system(cmd) != 0) {
        snprintf(err, errlen, "building %s%s%s failed: see %s", project, te_version ? " against TraceEvent " : "",
                 te_version ? te_version : "", log);
        return NULL;
    }
    char rel[512], *p;
    snprintf(rel, sizeof rel, binary_fmt, te_version ? te_version : "");
    if (asprintf(&p, "%s/compat/%s", b, rel) < 0)
        return NULL;
    if (access(p, X_OK) != 0) {
        snprintf(err, errlen, "%s built, but %s is not there", project, p);
        free(p);
        return NULL;
    }
    return p;
}
