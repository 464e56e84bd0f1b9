/* at_tracegen.c: see at_tracegen.h. */
#include "at_tracegen.h"

#include "actpath.h"
#include "ntreader.h"
#include "trace.h"

#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

volatile uint64_t *at_gen_tids;
static void finish(void) __attribute__((noreturn));
static uint64_t gen_base;   /* sync time of the child's session (ns) */
static uint64_t gen_next_id;
static _Atomic uint64_t gen_last; /* latest time given (ns) */

static void shared_init(void)
{
    if (!at_gen_tids) {
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        at_gen_tids = p == MAP_FAILED ? calloc(AT_GEN_SLOTS, sizeof(uint64_t)) : p;
    }
}

pid_t at_gen_trace(const char *path, void (*fn)(void *ctx), void *ctx)
{
    return at_gen_trace_at(path, 0, fn, ctx);
}

uint64_t at_gen_sync_time(const char *path)
{
    char err[256];
    nt_reader *r = nt_open(path, err, sizeof err);
    if (!r) return 0;
    uint64_t t = (uint64_t)nt_info(r)->sync_time_qpc;
    nt_close(r);
    return t;
}

pid_t at_gen_trace_at(const char *path, uint64_t base, void (*fn)(void *ctx), void *ctx)
{
    shared_init();
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) {
        int st;
        if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
        return pid;
    }
    at_trace_options o = {.path = path, .flush_interval_ms = 100000, .command_line = "tracegen",
                         .clock = AT_CLOCK_MONOTONIC}; /* times given in ns */
    char err[256];
    if (at_trace_start(&o, err, sizeof err) != 0) {
        fprintf(stderr, "tracegen: %s\n", err);
        _exit(1);
    }
    at_trace_flush();
    nt_reader *r = nt_open(path, err, sizeof err);
    if (!r) {
        fprintf(stderr, "tracegen: %s\n", err);
        _exit(1);
    }
    gen_base = base ? base : (uint64_t)nt_info(r)->sync_time_qpc;
    nt_event ev;
    if (nt_next(r, &ev) == 1) at_gen_tids[AT_GEN_SLOTS - 1] = ev.thread; /* ProcessInfo's writer */
    nt_close(r);
    fn(ctx);
    finish();
}

/* The flusher writes only events up to the present: let the last given time pass, then stop. */
static void finish(void)
{
    while (at_now_ns() <= gen_last + 1000000) {
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
    at_trace_stop();
    _exit(0);
}

void at_gen_exec(const char *path)
{
    while (at_now_ns() <= gen_last + 1000000) {
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
    at_trace_stop();
    at_trace_options o = {.path = path, .flush_interval_ms = 100000, .command_line = "tracegen exec",
                         .clock = AT_CLOCK_MONOTONIC};
    char err[256];
    if (at_trace_start(&o, err, sizeof err) != 0) {
        fprintf(stderr, "tracegen: %s\n", err);
        _exit(1);
    }
}

pid_t at_gen_fork(void (*fn)(void *ctx), void *ctx)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        fn(ctx);
        finish();
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
    at_gen_tids[AT_GEN_SLOTS - 2] = (uint64_t)pid;
    return pid;
}

void at_gen_note_thread(int k)
{
    at_gen_tids[k] = (uint64_t)syscall(SYS_gettid);
}

at_guid at_gen_id(uint32_t pid, const char *path)
{
    at_guid g;
    memset(&g, 0, sizeof g);
    if (!pid) pid = (uint32_t)getpid();
    const char *s = path + 2;
    int where = 0;
    while (*s) {
        char *e;
        unsigned long v = strtoul(s, &e, 10);
        where = at_actpath_add_id(&g, where, (uint32_t)v, false, pid);
        s = *e == '/' ? e + 1 : e;
    }
    return g;
}

static at_event_type *type(const char *provider, const char *name, uint8_t opcode, bool id_field)
{
    static at_field f[1];
    char fname[96];
    at_event_desc d = {.provider = provider, .name = name, .level = NT_LEVEL_INFO, .opcode = opcode};
    if (id_field) {
        /* <Name>Id: the activity name is the event name without Start/Stop */
        size_t l = strlen(name) - (opcode == NT_OPCODE_START ? 5 : 4);
        snprintf(fname, sizeof fname, "%.*sId", (int)l, name);
        f[0].name = strdup(fname);
        f[0].type = NT_TYPE_UINT64;
        d.nfields = 1;
        d.fields = f;
    }
    return at_event_type_register(&d);
}

static void write_ev(at_event_type *t, const at_guid *act, const at_guid *rel, double ms, const void *pl,
                     uint32_t plen, const uintptr_t *ips, uint32_t nips)
{
    uint64_t ts = gen_base + (uint64_t)(ms * 1e6);
    uint64_t l = gen_last;
    while (ts > l && !atomic_compare_exchange_weak(&gen_last, &l, ts)) {}
    at_event_write_ts(ts, t, act, rel, pl, plen, ips, nips);
}

/* Unique ids follow the path so Start and Stop agree: a small hash of the path string. */
static uint64_t path_uid(const char *path)
{
    (void)gen_next_id;
    uint64_t h = 0;
    for (const char *s = path; *s; s++)
        if (*s >= '0' && *s <= '9') h = h * 10 + (uint64_t)(*s - '0');
    return h;
}

void at_gen_start_rel(const char *name, const char *path, const at_guid *rel, double ms)
{
    char ev[96];
    snprintf(ev, sizeof ev, "%sStart", name);
    at_guid a = at_gen_id(0, path);
    uint64_t id = path_uid(path);
    write_ev(type("acttrace", ev, NT_OPCODE_START, true), &a, rel, ms, &id, 8, NULL, 0);
}

void at_gen_start(const char *name, const char *path, const char *rel_path, double ms)
{
    at_guid r = rel_path ? at_gen_id(0, rel_path) : (at_guid){{0}};
    at_gen_start_rel(name, path, rel_path ? &r : NULL, ms);
}

void at_gen_stop(const char *name, const char *path, double ms)
{
    char ev[96];
    snprintf(ev, sizeof ev, "%sStop", name);
    at_guid a = at_gen_id(0, path);
    uint64_t id = path_uid(path);
    write_ev(type("acttrace", ev, NT_OPCODE_STOP, true), &a, NULL, ms, &id, 8, NULL, 0);
}

void at_gen_send(const char *path, double ms)
{
    at_guid a = at_gen_id(0, path);
    write_ev(type("acttrace-flow", "Send", NT_OPCODE_SEND, false), &a, NULL, ms, NULL, 0, NULL, 0);
}

void at_gen_recv(const char *path, const char *prev_path, double ms)
{
    at_guid a = at_gen_id(0, path), p = prev_path ? at_gen_id(0, prev_path) : (at_guid){{0}};
    write_ev(type("acttrace-flow", "Receive", NT_OPCODE_RECEIVE, false), &a, prev_path ? &p : NULL, ms, NULL,
             0, NULL, 0);
}

void at_gen_info(const char *name, const char *path, double ms, const uintptr_t *ips, uint32_t nips)
{
    at_guid a = path ? at_gen_id(0, path) : (at_guid){{0}};
    write_ev(type("test-app", name, 0, false), path ? &a : NULL, NULL, ms, NULL, 0, ips, nips);
}

char *at_gen_normalize(const char *text, int ntids, const pid_t *pids, int npids)
{
    size_t n = strlen(text);
    char *out = malloc(n * 2 + 16), *o = out;
    const char *s = text;
    while (*s) {
        if (*s >= '0' && *s <= '9' && (s == text || (s[-1] != '.' && !(s[-1] >= '0' && s[-1] <= '9')))) {
            const char *e = s;
            while (*e >= '0' && *e <= '9') e++;
            if (*e != '.') {
                uint64_t v = strtoull(s, NULL, 10);
                int k;
                bool after_pid = s - text >= 4 && !strncmp(s - 4, "pid ", 4);
                for (k = 0; k < ntids && !after_pid; k++)
                    if (at_gen_tids[k] && at_gen_tids[k] == v) break;
                if (!after_pid && k < ntids) {
                    o += sprintf(o, "T%d", k + 1);
                    s = e;
                    continue;
                }
                for (k = 0; k < npids; k++)
                    if (pids[k] > 0 && (uint64_t)pids[k] == v) break;
                if (k < npids) {
                    o += sprintf(o, "P%d", k + 1);
                    s = e;
                    continue;
                }
            }
            memcpy(o, s, (size_t)(e - s));
            o += e - s;
            s = e;
            continue;
        }
        *o++ = *s++;
    }
    *o = 0;
    return out;
}
