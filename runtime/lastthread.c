/* lastthread.c: the process ends with its last thread. glibc counts a process's threads and, when
 * the last one ends, that thread calls exit(0) (atexit handlers, stdio flushed, status 0). The
 * flusher is counted and never ends: a program whose first thread leaves through pthread_exit,
 * thrd_exit or cancellation would wait for ever after its other threads are done, deaf to every
 * signal (the flusher blocks them all). So once the shim says that first thread has left, the
 * flusher looks whether any thread but itself is alive: soon after each program thread ends (it is
 * kicked, and looks again at growing intervals while the ending thread finishes leaving), and every
 * 100 ms besides, for threads that ended without passing through the shim. When none is, a new
 * thread with the first thread's signal mask calls exit(0). /proc is the authority (glibc's own
 * count is private): a thread is alive unless its task is gone, a zombie or dead, and whatever
 * /proc cannot tell counts as alive, so the process never ends early. Until the first thread
 * leaves, this costs an ending thread one load. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "trace_int.h"

#define LOOK_FIRST_NS 100000ull    /* the first look again after a kick: 0.1 ms, then doubling */
#define LOOK_EVERY_NS 100000000ull /* and at least every 100 ms while watching */

_Atomic int at_last_thread_watch AT_FORK_DATA;
static _Atomic int kicked AT_FORK_DATA;
static sigset_t exit_mask;

/* The keeper: a thread the first thread makes as it leaves, when the writer works in a descriptor
 * table of its own (flusher.c). A descriptor table lives as long as a thread shares it: once the
 * program's last thread had ended, its table, and with it stdout and every file the atexit
 * handlers write, would be gone before exit(0). The keeper shares the program's table, waits, and
 * is the thread that calls exit(0) when no program thread is left. */
static _Atomic uint32_t keeper_go AT_FORK_DATA;
static _Atomic long keeper_tid AT_FORK_DATA; /* 0: none; -1: being made */

static void *keeper_main(void *arg)
{
    (void)arg;
    at_internal = 1;
    atomic_store(&keeper_tid, (long)syscall(SYS_gettid));
    while (!atomic_load(&keeper_go))
        syscall(SYS_futex, (uint32_t *)&keeper_go, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    pthread_sigmask(SIG_SETMASK, &exit_mask, NULL);
    at_internal = 0; /* the program's atexit handlers run here: their calls are its own */
    exit(0);
}

static void keeper_start(void)
{
    long none = 0;
    if (!at_flusher_owns_table() || !atomic_compare_exchange_strong(&keeper_tid, &none, -1))
        return;
    pthread_attr_t a;
    pthread_t t;
    sigset_t all, old;
    sigfillset(&all);
    /* signals go to the program's threads: the keeper inherits this mask. Not through
     * pthread_attr_setsigmask_np, which allocates: another thread may fork meanwhile, and a child
     * of a sanitizer's allocator then finds it locked */
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_attr_init(&a);
    if (rc == 0) {
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&a, 1u << 16);
        at_rt_own_thread++;
        rc = pthread_create(&t, &a, keeper_main, NULL);
        at_rt_own_thread--;
        pthread_attr_destroy(&a);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        atomic_store(&keeper_tid, 0);
    /* not waited for: the leaving thread's own exit goes on (until the keeper has said its id, the
     * writer counts it among the program's threads) */
}
static uint64_t look_step AT_FORK_DATA, look_next AT_FORK_DATA; /* the flusher's */

/* The shim: the process's first thread is leaving (pthread_exit, thrd_exit, cancellation), with
 * mask as its signal mask; from its thread-specific data's destructor. */
void at_trace_exit_with_last_thread(const sigset_t *mask)
{
    if (!atomic_load(&at_last_thread_watch)) {
        exit_mask = *mask;
        keeper_start();
        atomic_store(&at_last_thread_watch, 1);
    }
    at_trace_thread_ending_slow();
}

/* A program thread is ending while watching: look soon (the flusher looks again before it sleeps,
 * so a kick while it is awake is not lost). Async-signal-safe. */
void at_trace_thread_ending_slow(void)
{
    atomic_store(&kicked, 1);
    at_flusher_kick();
}

bool at_lastthread_kicked(void) { return atomic_load(&kicked) != 0; }

/* A new flusher (session start, fork child: the child's first thread is the one that forked). */
AT_FORK_TEXT void at_lastthread_reset(void)
{
    atomic_store(&at_last_thread_watch, 0);
    atomic_store(&kicked, 0);
    atomic_store(&keeper_go, 0);
    atomic_store(&keeper_tid, 0);
    look_step = 0;
    look_next = 0;
}

/* Read a small /proc file whole into b (NUL-terminated); its length, or -1 with errno. */
static ssize_t read_small(const char *path, char *b, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, b, cap - 1);
    int e = errno;
    close(fd);
    errno = e;
    if (n >= 0)
        b[n] = 0;
    return n;
}

/* The fields of a stat line after "(comm)" (comm may hold anything, ')' included). */
static const char *stat_fields(const char *b)
{
    const char *p = strrchr(b, ')');
    return p && p[1] == ' ' ? p + 2 : NULL;
}

/* /proc/self/stat's thread count (field 20: it counts the zombie first thread too), or -1. One read:
 * for a program with threads running, all a look costs. */
static long thread_count(void)
{
    char b[1024];
    if (read_small("/proc/self/stat", b, sizeof b) <= 0)
        return -1;
    const char *p = stat_fields(b); /* field 3, the state */
    for (int f = 3; p && f < 20; f++)
        if ((p = strchr(p, ' ')))
            p++;
    return p ? strtol(p, NULL, 10) : -1;
}

static bool task_alive(const char *tid)
{
    char path[300], b[512];
    snprintf(path, sizeof path, "/proc/self/task/%s/stat", tid);
    if (read_small(path, b, sizeof b) <= 0)
        return errno != ENOENT && errno != ESRCH; /* gone, or unknown: alive */
    const char *p = stat_fields(b);
    return !p || (*p != 'Z' && *p != 'X' && *p != 'x');
}

/* Whether a task of this process other than the calling one (the flusher) is alive. */
static bool others_alive(void)
{
    long keeper = atomic_load(&keeper_tid);
    if (keeper < 0)
        return true; /* the keeper has not said its id yet */
    long n = thread_count();
    if (n > (keeper > 0 ? 3 : 2)) /* the flusher, the keeper and the zombie first thread at most */
        return true;
    int dfd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return true;
    char self[24], kself[24];
    snprintf(self, sizeof self, "%llu", (unsigned long long)at_flusher_tid);
    snprintf(kself, sizeof kself, "%ld", keeper);
    union {
        struct dirent64 d;
        char b[4096];
    } u;
    bool alive = false;
    for (ssize_t nr; !alive && (nr = getdents64(dfd, u.b, sizeof u.b)) != 0;) {
        if (nr < 0) {
            alive = true;
            break;
        }
        for (ssize_t off = 0; off < nr && !alive;) {
            const struct dirent64 *d = (const struct dirent64 *)(u.b + off);
            off += d->d_reclen;
            if (d->d_name[0] >= '0' && d->d_name[0] <= '9' && strcmp(d->d_name, self) != 0 &&
                strcmp(d->d_name, kself) != 0)
                alive = task_alive(d->d_name);
        }
    }
    close(dfd);
    return alive;
}

static void *exit_thread(void *arg)
{
    (void)arg;
    exit(0);
}

/* What glibc's last thread does, from a thread of our own: the flusher stays a flusher (the exit's
 * destructors stop and join it after the program's atexit handlers, whose events it still takes).
 * Only if no thread can be made does the flusher itself exit. */
static void end_process(void)
{
    atomic_store(&at_last_thread_watch, 0);
    if (atomic_load(&keeper_tid) > 0) {
        atomic_store(&keeper_go, 1);
        syscall(SYS_futex, (uint32_t *)&keeper_go, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
        return;
    }
    pthread_attr_t a;
    pthread_t t;
    int rc = pthread_attr_init(&a);
    if (rc == 0) {
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_attr_setsigmask_np(&a, &exit_mask);
        at_rt_own_thread++;
        rc = pthread_create(&t, &a, exit_thread, NULL);
        at_rt_own_thread--;
        pthread_attr_destroy(&a);
    }
    if (rc != 0) {
        pthread_sigmask(SIG_SETMASK, &exit_mask, NULL);
        at_internal = 0; /* the program's atexit handlers run here: their calls are its own */
        exit(0);
    }
}

/* The flusher, while watching: look when due (or kicked) and return when to look next. */
uint64_t at_lastthread_poll(uint64_t now)
{
    if (atomic_exchange(&kicked, 0)) {
        look_step = LOOK_FIRST_NS;
        look_next = now;
    }
    if (now < look_next)
        return look_next;
    if (!others_alive()) {
        end_process();
        return UINT64_MAX;
    }
    look_step = look_step ? look_step * 2 : LOOK_EVERY_NS;
    if (look_step > LOOK_EVERY_NS)
        look_step = LOOK_EVERY_NS;
    look_next = now + look_step;
    return look_next;
}
