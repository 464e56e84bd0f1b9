/* process.c: the process boundaries: fork (the child keeps its current activity and, through the
 * writer's own pthread_atfork handlers, gets its own file and flusher), exec* and posix_spawn (the
 * new program's root activities link to the activity current here, passed in its environment),
 * _exit/_Exit, and fatal signals whose action is the default (flush, then die exactly as without
 * the shim). vfork children share our memory: every path checks the real pid and touches nothing
 * there, and the exec path builds the new environment on the stack only. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "real.h"
#include "shim.h"

extern char **environ;

/* Code an image's start never runs (exec, spawn, system, popen, a process left untraced): out of
 * the start's code, which shim/start.ld takes this object's .text into whole; the start then maps
 * one 64 KiB window of code fewer */
#define AT_COLD __attribute__((cold, noinline))

#define AT_ENV_PARENT "ACTTRACE_PARENT_ACTIVITY"
#define AT_ENV_GEN "ACTTRACE_EXEC_GEN"
#define AT_ENV_MANIFEST "ACTTRACE_MANIFEST"
#define AT_ENV_STARTDIR "ACTTRACE_START_DIR"
#define AT_ENV_PRELOAD "LD_PRELOAD"
/* Environments larger than this are passed through unchanged (the link is then lost, not the exec). */
#define AT_ENV_MAX 8192

int at_exec_generation AT_FORK_DATA; /* how many execs of this pid precede this image (preload.c) */
bool at_process_descendant AT_FORK_DATA; /* this pid began as a fork child of a traced process */
static at_guid at_process_parent;  /* the activity of the process that exec'd us, or zero */

/* ACTTRACE_MANIFEST=<file> (acttrace run): each process of the run appends the path of every trace
 * file it creates to that file (runtime/output.c). The variable leaves the program's environment
 * at start and is given back to the images and children that are traced; kept here whole, as the
 * environment entry exec_env passes on. */
static char manifest_entry[sizeof AT_ENV_MANIFEST + 4096];
const char *at_manifest_path AT_START_DATA; /* in manifest_entry, or NULL */

/* ACTTRACE_START_DIR=<folder>: the folder relative settings (the output pattern, the config file)
 * are resolved against, given to the images and children of a process that had one (the folder the
 * first traced process started in): a child that starts elsewhere (a server's worker that chdir'd,
 * git's helpers in the repository they serve) reads the same config and writes its file beside the
 * others, never into the folder it works in. Taken out of environ at start like the others; kept
 * here whole, as the entry passed on. */
static char startdir_entry[sizeof AT_ENV_STARTDIR + 4096];
static const char *startdir; /* in startdir_entry: inherited, or this process's own start folder
                              * when its config was named relative to it; else NULL */

/* ACTTRACE_FOLLOW=exec|none: this process is a fork child left untraced (the shim is off in it),
 * whose own children and images get an environment without the shim either. */
static bool at_untraced AT_FORK_DATA;
static int fork_follow AT_FORK_DATA; /* at_cfg.follow, on the fork data page */

/* ---------------- the activity link carried through exec ---------------- */

static const char hexd[] = "0123456789abcdef";

/* ACTTRACE_PARENT_ACTIVITY=<32 hex digits: the 16 GUID bytes in file order>. */
static bool parse_hex_guid(const char *s, at_guid *g)
{
    for (int i = 0; i < 16; i++) {
        int v = 0;
        for (int k = 0; k < 2; k++) {
            char c = s[2 * i + k];
            const char *p = c ? strchr(hexd, c) : NULL;
            if (!p)
                return false;
            v = v * 16 + (int)(p - hexd);
        }
        g->b[i] = (uint8_t)v;
    }
    return s[32] == 0;
}

void at_exec_env_init(void)
{
    at_activity_set_exec_generation((uint32_t)at_exec_generation); /* ids unique across images */
    const char *m = at_env(AT_ENV_MANIFEST);
    if (m) {
        size_t n = strlen(m);
        if (*m && n + sizeof AT_ENV_MANIFEST + 1 <= sizeof manifest_entry) {
            memcpy(manifest_entry, AT_ENV_MANIFEST "=", sizeof AT_ENV_MANIFEST);
            memcpy(manifest_entry + sizeof AT_ENV_MANIFEST, m, n + 1);
            at_manifest_path = manifest_entry + sizeof AT_ENV_MANIFEST;
        }
        unsetenv(AT_ENV_MANIFEST);
    }
    const char *d = at_env(AT_ENV_STARTDIR);
    if (d) {
        size_t n = strlen(d);
        if (d[0] == '/' && n + sizeof AT_ENV_STARTDIR + 1 <= sizeof startdir_entry) {
            memcpy(startdir_entry, AT_ENV_STARTDIR "=", sizeof AT_ENV_STARTDIR);
            memcpy(startdir_entry + sizeof AT_ENV_STARTDIR, d, n + 1);
            startdir = startdir_entry + sizeof AT_ENV_STARTDIR;
        }
        unsetenv(AT_ENV_STARTDIR);
    }
    const char *v = at_env(AT_ENV_PARENT);
    if (!v)
        return;
    at_guid g;
    if (parse_hex_guid(v, &g) && !at_guid_is_zero(&g)) {
        at_process_parent = g;
        at_activity_set_process_parent(&g);
    } else {
        fprintf(stderr, "acttrace: %s=%s is not 32 hex digits; root activities stay unlinked\n",
                AT_ENV_PARENT, v);
    }
    unsetenv(AT_ENV_PARENT); /* the program sees the environment it was given */
}

/* rel (a relative path, "./" dropped) made startdir/rel in place, '%' doubled for a pattern; left as
 * it is when it would not fit. */
static void join_startdir(char *rel, size_t size, bool pattern)
{
    const char *p = rel[0] == '.' && rel[1] == '/' ? rel + 2 : rel;
    size_t pl = strlen(p), dl = 0;
    for (const char *c = startdir; *c; c++)
        dl += pattern && *c == '%' ? 2 : 1;
    if (dl + 1 + pl >= size)
        return;
    memmove(rel + dl + 1, p, pl + 1);
    size_t k = 0;
    for (const char *c = startdir; *c; c++) {
        if (pattern && *c == '%')
            rel[k++] = '%';
        rel[k++] = *c;
    }
    rel[k] = '/';
}

void at_exec_config_base(char *path, size_t size)
{
    if (!path[0] || path[0] == '/')
        return;
    if (!startdir) { /* this process's own start folder, for the images and children after it */
        char *d = startdir_entry + sizeof AT_ENV_STARTDIR;
        if (!getcwd(d, sizeof startdir_entry - sizeof AT_ENV_STARTDIR) || d[0] != '/')
            return;
        memcpy(startdir_entry, AT_ENV_STARTDIR "=", sizeof AT_ENV_STARTDIR);
        startdir = d;
    }
    join_startdir(path, size, false);
}

void at_exec_output_base(char *pattern, size_t size)
{
    if (startdir && pattern[0] && pattern[0] != '/')
        join_startdir(pattern, size, true); /* too long: the start folder's, as without it */
}

static bool in_vfork_child(void)
{
    return (pid_t)syscall(SYS_getpid) != at_pid;
}

static bool env_is(const char *e, const char *name, size_t namesz)
{
    return !strncmp(e, name, namesz - 1) && e[namesz - 1] == '=';
}
#define ENV_IS(e, name) env_is(e, name, sizeof name)

static bool env_ours(const char *e)
{
    return ENV_IS(e, AT_ENV_PARENT) || ENV_IS(e, AT_ENV_GEN) || ENV_IS(e, AT_ENV_MANIFEST) ||
           ENV_IS(e, AT_ENV_STARTDIR);
}

/* Whether the process an exec or a spawn starts is traced (ACTTRACE_FOLLOW): same_pid, an exec of
 * this process's own; otherwise a new process (posix_spawn, a vfork child's exec). */
static bool child_traced(bool same_pid)
{
    if (at_untraced || at_cfg.follow == AT_CFG_FOLLOW_NONE)
        return false;
    return at_cfg.follow == AT_CFG_FOLLOW_ALL || same_pid;
}

/* The length of envp's LD_PRELOAD entry (0: none), for the stack buffer of untraced_env. */
AT_COLD static size_t preload_len(char *const envp[], size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ENV_IS(envp[i], AT_ENV_PRELOAD))
            return strlen(envp[i]);
    return 0;
}

/* An LD_PRELOAD entry (separated by ':' or ' ', as ld.so reads them) that names this library. */
AT_COLD static bool preload_is_shim(const char *w, size_t n)
{
    static const char lib[] = "libacttrace.so";
    size_t l = sizeof lib - 1;
    return n >= l && !memcmp(w + n - l, lib, l) && (n == l || w[n - l - 1] == '/');
}

/* Fill out (n+1 slots) with envp for a process that runs untraced: none of our variables, and
 * LD_PRELOAD without the shim (left out when nothing else is in it; buf: room for the entry). Only
 * the stack: this runs in vfork children. */
AT_COLD static char *const *untraced_env(char *const envp[], const char **out, size_t n, char *buf)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *e = envp[i];
        if (env_ours(e))
            continue;
        if (ENV_IS(e, AT_ENV_PRELOAD)) {
            char *p = buf;
            memcpy(p, AT_ENV_PRELOAD "=", sizeof AT_ENV_PRELOAD);
            p += sizeof AT_ENV_PRELOAD;
            bool any = false;
            for (const char *w = e + sizeof AT_ENV_PRELOAD; *w;) {
                size_t len = strcspn(w, ": ");
                if (len && !preload_is_shim(w, len)) {
                    if (any)
                        *p++ = ':';
                    memcpy(p, w, len);
                    p += len;
                    any = true;
                }
                w += len;
                if (*w)
                    w++;
            }
            *p = 0;
            if (!any)
                continue;
            e = buf;
        }
        out[k++] = e;
    }
    out[k] = NULL;
    return (char *const *)out;
}

/* Fill out (n+5 slots) with envp minus our variables plus the current link, the exec generation, the
 * manifest and the start folder. Only the stack: this runs in vfork children. Returns out. */
#define AT_STARTDIR_BUF (sizeof AT_ENV_STARTDIR + 4096)
AT_COLD static char *const *exec_env(char *const envp[], const char **out, size_t n, char *pbuf,
                             char *gbuf, char *obuf, bool same_pid)
{
    const at_activity *cur = at_activity_current();
    const at_guid *id = cur ? at_activity_id(cur) : &at_process_parent;

    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *e = envp[i];
        if (env_ours(e))
            continue;
        out[k++] = e;
    }
    if (at_manifest_path)
        out[k++] = manifest_entry;
    if (startdir) {
        out[k++] = startdir_entry;
    } else if (at_trace_output_dir(obuf + sizeof AT_ENV_STARTDIR, AT_STARTDIR_BUF - sizeof AT_ENV_STARTDIR)) {
        memcpy(obuf, AT_ENV_STARTDIR "=", sizeof AT_ENV_STARTDIR);
        out[k++] = obuf;
    }
    if (!at_guid_is_zero(id)) {
        char *p = pbuf;
        memcpy(p, AT_ENV_PARENT "=", sizeof AT_ENV_PARENT);
        p += sizeof AT_ENV_PARENT;
        for (int i = 0; i < 16; i++) {
            *p++ = hexd[id->b[i] >> 4];
            *p++ = hexd[id->b[i] & 15];
        }
        *p = 0;
        out[k++] = pbuf;
    }
    {
        /* "<pid>.<n>.<d>" by hand: no stdio in a vfork child. A new process (posix_spawn, vfork:
         * this process's pid, which the child does not have) starts at 0 as a descendant, which a
         * pattern without %p tells apart by "-<pid>" */
        char tmp[48];
        int t = 0;
        /* the file is (or will be) named after the pid (another live process writes the plain
         * name: this is a child glibc spawned for system() or popen()): the images this pid execs
         * keep the pid as well */
        tmp[t++] = !same_pid || at_process_descendant || at_trace_pid_named() ? '1' : '0';
        tmp[t++] = '.';
        unsigned long v = same_pid ? (unsigned long)at_exec_generation + 1 : 0;
        do
            tmp[t++] = (char)('0' + v % 10);
        while ((v /= 10));
        tmp[t++] = '.';
        v = (unsigned long)at_pid;
        do
            tmp[t++] = (char)('0' + v % 10);
        while ((v /= 10));
        char *p = gbuf;
        memcpy(p, AT_ENV_GEN "=", sizeof AT_ENV_GEN);
        p += sizeof AT_ENV_GEN;
        while (t)
            *p++ = tmp[--t];
        *p = 0;
        out[k++] = gbuf;
    }
    out[k] = NULL;
    return (char *const *)out;
}

static size_t env_count(char *const envp[])
{
    size_t n = 0;
    while (envp && envp[n])
        n++;
    return n;
}

/* Before the image is replaced: record the exec and make the file durable (not in a vfork child,
 * whose memory and flusher are the parent's). */
AT_COLD static void exec_before(const char *path)
{
    int e = errno;
    uint8_t buf[512];
    at_payload pl;
    at_payload_init(&pl, buf, sizeof buf);
    at_payload_str_safe(&pl, path, 200);
    /* Made in an activity, a file still waiting for its first event is opened by the flush below,
     * with no writer thread (the image ends here; exec may be called in a signal handler):
     * at_trace_exec_failed starts one if the program goes on. Made in no activity, it is written only
     * when the process has a file, as a fork's is (parent_event): a shell's or make's fork children
     * that only exec another program leave no file of their own (the new image's names the path) */
    int q = at_trace_quiet;
    at_trace_quiet = at_activity_current() ? 2 : 1;
    at_shim_event(at_ev.exec, buf, (uint32_t)(pl.p - buf));
    at_trace_quiet = q;
    at_trace_flush();
    errno = e;
}

/* Declares the stack buffers and computes `env` for an exec wrapper: the link and the rest for a
 * traced image, or an environment without the shim for an untraced one (ACTTRACE_FOLLOW). */
#define AT_EXEC_ENV(envp_in, path)                                                                 \
    char *const *env_ = (envp_in);                                                                 \
    size_t n_ = env_count(env_);                                                                   \
    bool on_ = at_on();                                                                            \
    bool ok_ = (on_ || at_untraced) && n_ <= AT_ENV_MAX;                                           \
    bool vf_ = ok_ && in_vfork_child();                                                            \
    bool tr_ = ok_ && child_traced(!vf_);                                                          \
    bool rec_ = on_ && ok_ && !vf_; /* this image records the exec */                              \
    const char *slots_[ok_ ? n_ + 5 : 1];                                                          \
    char pbuf_[sizeof AT_ENV_PARENT + 34], gbuf_[sizeof AT_ENV_GEN + 32];                          \
    char obuf_[ok_ ? AT_STARTDIR_BUF : 1];                                                           \
    char ldbuf_[ok_ && !tr_ ? preload_len(env_, n_) + 1 : 1];                                      \
    char *const *env = !ok_ ? env_                                                                 \
                       : tr_ ? exec_env(env_, slots_, n_, pbuf_, gbuf_, obuf_, !vf_)               \
                             : untraced_env(env_, slots_, n_, ldbuf_);                             \
    if (rec_) {                                                                                    \
        exec_before(path);                                                                         \
        at_sampler_exec_before();                                                                  \
    }
/* The real exec: it returns only when it failed, and the program goes on traced. */
#define AT_EXEC_RETURN(call)                                                                       \
    do {                                                                                           \
        int r_ = (call);                                                                           \
        if (rec_) {                                                                                \
            at_trace_exec_failed();                                                                \
            at_sampler_exec_failed();                                                              \
        }                                                                                          \
        return r_;                                                                                 \
    } while (0)

AT_COLD AT_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    AT_EXEC_ENV(envp, path);
    AT_EXEC_RETURN(AT_REAL(execve)(path, argv, env));
}

AT_COLD AT_EXPORT int execv(const char *path, char *const argv[])
{
    AT_EXEC_ENV(environ, path);
    AT_EXEC_RETURN(AT_REAL(execve)(path, argv, env));
}

AT_COLD AT_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    AT_EXEC_ENV(envp, file);
    AT_EXEC_RETURN(AT_REAL(execvpe)(file, argv, env));
}

AT_COLD AT_EXPORT int execvp(const char *file, char *const argv[])
{
    AT_EXEC_ENV(environ, file);
    AT_EXEC_RETURN(AT_REAL(execvpe)(file, argv, env));
}

AT_COLD AT_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
    AT_EXEC_ENV(envp, path);
    AT_EXEC_RETURN(AT_REAL(execveat)(dirfd, path, argv, env, flags));
}

AT_COLD AT_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    AT_EXEC_ENV(envp, "(fd)");
    AT_EXEC_RETURN(AT_REAL(fexecve)(fd, argv, env));
}

/* execl* are variadic and glibc implements them with an internal execve we cannot see: gather the
 * arguments on the stack and go through the wrappers above. */
#define AT_GATHER_ARGS(arg0, ap, argv, envp_out)                                                   \
    size_t argc_ = 1;                                                                              \
    va_list cnt_;                                                                                  \
    va_copy(cnt_, ap);                                                                             \
    while (va_arg(cnt_, const char *))                                                             \
        argc_++;                                                                                   \
    va_end(cnt_);                                                                                  \
    const char *argv[argc_ + 1];                                                                   \
    argv[0] = arg0;                                                                                \
    for (size_t i_ = 1; i_ <= argc_; i_++)                                                         \
        argv[i_] = va_arg(ap, const char *);                                                       \
    envp_out

AT_COLD AT_EXPORT int execl(const char *path, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    AT_GATHER_ARGS(arg, ap, argv, ;);
    va_end(ap);
    return execv(path, (char *const *)argv);
}

AT_COLD AT_EXPORT int execlp(const char *file, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    AT_GATHER_ARGS(arg, ap, argv, ;);
    va_end(ap);
    return execvp(file, (char *const *)argv);
}

AT_COLD AT_EXPORT int execle(const char *path, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    AT_GATHER_ARGS(arg, ap, argv, char *const *envp = va_arg(ap, char *const *));
    va_end(ap);
    return execve(path, (char *const *)argv, envp);
}

/* The parent's side of a new process (ProcessFork, ProcessSpawn). Made in an activity, it opens the
 * file if none is open yet: the tools keep that activity for the child's files, which link under it.
 * Made in no activity it is written only when the process has a file (at_trace_quiet 1): a process
 * that only starts others (a shell, make, a pre-forking server before its first request) stays
 * without a file and a writer thread, so its forks stay those of a one-thread process; the child's
 * own file names its parent (ProcessForked, ProcessInfo). */
static void parent_event(const at_event_type *t, const void *payload, uint32_t len)
{
    if (at_activity_current()) {
        at_shim_event(t, payload, len);
        return;
    }
    if (!at_trace_keeps_quiet())
        return; /* left out, as a quiet event is (and no page of the shim's is written) */
    int q = at_trace_quiet;
    at_trace_quiet = 1;
    at_shim_event(t, payload, len);
    at_trace_quiet = q;
}

/* posix_spawn: the parent adds the link to the child's environment; the child itself (a CLONE_VM
 * child inside glibc) is never touched. */
AT_COLD static int spawn_common(bool search, pid_t *pid, const char *path,
                        const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *attr,
                        char *const argv[], char *const envp[])
{
    __typeof__(posix_spawn) *real = search ? AT_REAL(posix_spawnp) : AT_REAL(posix_spawn);
    bool on = at_on();
    if ((!on && !at_untraced) || in_vfork_child())
        return real(pid, path, fa, attr, argv, envp);
    char *const *in = envp ? envp : environ;
    size_t n = env_count(in);
    if (n > AT_ENV_MAX)
        return real(pid, path, fa, attr, argv, envp);
    const char *slots[n + 5];
    char pbuf[sizeof AT_ENV_PARENT + 34], gbuf[sizeof AT_ENV_GEN + 32];
    bool traced = child_traced(false);
    char ldbuf[traced ? 1 : preload_len(in, n) + 1], obuf[traced ? AT_STARTDIR_BUF : 1];
    char *const *env = traced ? exec_env(in, slots, n, pbuf, gbuf, obuf, false) : untraced_env(in, slots, n, ldbuf);
    if (!on)
        return real(pid, path, fa, attr, argv, env);
    pid_t child = 0;
    /* glibc's child runs on a stack of its own but on this thread's thread-local storage until it
     * execs: marked as the shim's own work, its calls of hooked functions (an entry-patched execve)
     * go straight through, touching none of this thread's hook records */
    AT_INTERNAL_BEGIN();
    int r = real(&child, path, fa, attr, argv, env);
    AT_INTERNAL_END();
    if (r == EAGAIN && at_trace_flusher_yield()) { /* see at_trace_flusher_yield */
        AT_INTERNAL_BEGIN();
        r = real(&child, path, fa, attr, argv, env);
        AT_INTERNAL_END();
    }
    if (pid)
        *pid = child;
    if (r == 0) {
        int e = errno;
        uint8_t buf[512];
        at_payload pl;
        at_payload_init(&pl, buf, sizeof buf);
        at_payload_i32(&pl, child);
        at_payload_str_safe(&pl, path, 200);
        parent_event(at_ev.spawn, buf, (uint32_t)(pl.p - buf));
        errno = e;
    }
    return r;
}

AT_COLD AT_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                          const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    return spawn_common(false, pid, path, fa, attr, argv, envp);
}

AT_COLD AT_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                           const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    return spawn_common(true, pid, file, fa, attr, argv, envp);
}

/* system() and popen(): glibc starts the shell itself, through its internal posix_spawn, with
 * environ as it is: nothing of ours (the link, the manifest, a shim-less LD_PRELOAD for an untraced
 * child) unless environ is the environment exec_env makes for the call's length. That is done only
 * when no other thread of the program exists to see it (the writer's aside): otherwise the shell gets
 * what environ holds, its root activities link to nothing, its files are not named in the manifest,
 * and it is traced whatever ACTTRACE_FOLLOW says. With a pattern without %p the shell would then name
 * its file like ours, and the first to open takes the plain name: ours opens first (it does not wait
 * for its first event then), so the shell and what it runs take "-<pid>" as they always have. */
AT_COLD static bool program_alone(void)
{
    char b[512];
    AT_INTERNAL_BEGIN(); /* the shim's own reads: no hook sees them */
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, b, sizeof b - 1) : -1;
    if (fd >= 0)
        close(fd);
    AT_INTERNAL_END();
    if (n <= 0)
        return false;
    b[n] = 0;
    const char *p = strrchr(b, ')'); /* the name may hold anything; the fields follow its ')' */
    for (int f = 3; p && f <= 20; f++) /* to the space before field 20, num_threads */
        p = strchr(p + 1, ' ');
    return p && strtol(p + 1, NULL, 10) - at_trace_writer_threads() == 1;
}

/* Declares the stack buffers and puts the child's environment in environ (undone by
 * SPAWN_ENV_END) when the program has no other thread to see it. */
#define SPAWN_ENV_BEGIN(use)                                                                       \
    char **saved_env_ = environ;                                                                   \
    size_t sn_ = env_count(environ);                                                               \
    bool sw_ = (use) && (at_on() || at_untraced) && sn_ <= AT_ENV_MAX && program_alone();          \
    bool str_ = sw_ && child_traced(false);                                                        \
    const char *sslots_[sw_ ? sn_ + 5 : 1];                                                        \
    char spbuf_[sizeof AT_ENV_PARENT + 34], sgbuf_[sizeof AT_ENV_GEN + 32];                        \
    char sobuf_[str_ ? AT_STARTDIR_BUF : 1];                                                         \
    char sldbuf_[sw_ && !str_ ? preload_len(environ, sn_) + 1 : 1];                                \
    if (sw_)                                                                                       \
        environ = (char **)(str_ ? exec_env(saved_env_, sslots_, sn_, spbuf_, sgbuf_, sobuf_, false) \
                                 : untraced_env(saved_env_, sslots_, sn_, sldbuf_));
#define SPAWN_ENV_END()                                                                            \
    do {                                                                                           \
        if (sw_ && environ == (char **)sslots_)                                                    \
            environ = saved_env_;                                                                  \
    } while (0)

AT_LAZY_REAL(system, int, (const char *))
AT_COLD AT_EXPORT int system(const char *cmd)
{
    bool use = cmd && !at_internal && !in_vfork_child();
    if (use && at_on()) {
        int e = errno;
        at_trace_open_now();
        errno = e;
    }
    SPAWN_ENV_BEGIN(use);
    int r = real_system()(cmd);
    SPAWN_ENV_END();
    return r;
}

AT_LAZY_REAL(popen, FILE *, (const char *, const char *))
AT_COLD AT_EXPORT FILE *popen(const char *cmd, const char *mode)
{
    bool use = !at_internal && !in_vfork_child();
    if (use && at_on()) {
        int e = errno;
        at_trace_open_now();
        errno = e;
    }
    SPAWN_ENV_BEGIN(use);
    FILE *r = real_popen()(cmd, mode);
    SPAWN_ENV_END();
    return r;
}

/* ---------------- calls that must meet the program's threads only ---------------- */

/* glibc applies setuid and the like to every thread (a signal to each) and aborts the process when
 * one thread's result differs from another's: a program that raised its own capabilities with capset
 * (per thread, as setpriv and libcap-ng's capng_change_id do between setresuid and setresgid) had its
 * setresgid succeed on its thread and fail on the writer's, and died. The kernel refuses unshare of a
 * user namespace, and setns into a mount or user namespace, to a multithreaded process. Around these
 * the writer's thread is stopped, and started again after with the caller's new identity. Not in a
 * vfork child (the parent's flusher is not its to stop) nor on the shim's own behalf. */
static bool pause_writer(void)
{
    if (!at_on() || at_internal || in_vfork_child())
        return false;
    at_trace_flusher_pause();
    return true;
}

static void resume_writer(bool paused)
{
    if (paused) {
        int e = errno;
        at_trace_flusher_resume();
        errno = e;
    }
}

#define ALONE(ret, name, params, args)                                                             \
    AT_LAZY_REAL(name, ret, params)                                                                \
    AT_EXPORT ret name params                                                                      \
    {                                                                                              \
        bool p = pause_writer();                                                                   \
        ret r_ = real_##name() args;                                                               \
        resume_writer(p);                                                                          \
        return r_;                                                                                 \
    }

ALONE(int, setuid, (uid_t u), (u))
ALONE(int, setgid, (gid_t g), (g))
ALONE(int, seteuid, (uid_t u), (u))
ALONE(int, setegid, (gid_t g), (g))
ALONE(int, setreuid, (uid_t r, uid_t e), (r, e))
ALONE(int, setregid, (gid_t r, gid_t e), (r, e))
ALONE(int, setresuid, (uid_t r, uid_t e, uid_t s), (r, e, s))
ALONE(int, setresgid, (gid_t r, gid_t e, gid_t s), (r, e, s))
ALONE(int, setgroups, (size_t n, const gid_t *l), (n, l))
ALONE(int, initgroups, (const char *user, gid_t g), (user, g)) /* glibc's own setgroups call */
/* unshare and setns need the writer's thread out of the way only for a user namespace (and setns
 * for a mount namespace, or an fd whose kind it is not told). Entering a new pid namespace for the
 * children leaves the caller unable to make threads at all: the flusher is not stopped for that
 * alone, and when it had to be (a user and a pid namespace at once) it stays away, the events kept
 * in the buffers until exit. */
AT_LAZY_REAL(unshare, int, (int))
AT_EXPORT int unshare(int flags)
{
    bool p = (flags & (CLONE_NEWUSER | CLONE_THREAD | CLONE_SIGHAND | CLONE_VM)) && pause_writer();
    int r = real_unshare()(flags);
    resume_writer(p);
    return r;
}

AT_LAZY_REAL(setns, int, (int, int))
AT_EXPORT int setns(int fd, int nstype)
{
    bool p = (nstype == 0 || (nstype & (CLONE_NEWNS | CLONE_NEWUSER))) && pause_writer();
    int r = real_setns()(fd, nstype);
    resume_writer(p);
    return r;
}

/* ---------------- fork ---------------- */

/* The child's side of a fork: its own pid and thread id, a first exec generation (the writer's
 * fork handler, which ran first, named the child's file with none), and ProcessForked, which the
 * writer keeps until the child records something (alone it makes no file: a child that records
 * nothing costs no file and touches no buffer). */
/* ProcessForked's type and the real _exit, on the fork data page: a child that records nothing
 * reads no other page of the shim's (at_hot, at_ev) for them. */
static const at_event_type *fork_child_type AT_FORK_DATA;
static __typeof__(_exit) *fork_real_exit AT_FORK_DATA;
static __typeof__(_Exit) *fork_real_Exit AT_FORK_DATA;

AT_FORK_TEXT static void fork_child_fixup(pid_t parent)
{
    at_tid_cache = 0;
    at_pid = at_raw_getpid();
    at_exec_generation = 0;
    at_process_descendant = true;
    at_activity_after_fork_child();
    at_thread_watch_leader(); /* the child's first thread, whichever thread of ours forked */
    if (at_sample_sig)
        at_sampler_fork_child();
    if (fork_child_type) {
        const at_activity *cur = at_activity_current();
        at_trace_child_prologue(fork_child_type, cur ? at_activity_id(cur) : NULL, &parent, 4);
    }
}

AT_COLD static void signals_untrace(void);

/* ACTTRACE_FOLLOW=exec|none: a fork child runs untraced. The shim cannot leave its memory, so it
 * goes quiet there as if it had never started: every wrapper and hook passes straight through, no
 * file is made, the signal dispositions and the alternate stack the shim set go back to what the
 * program would find untraced, and the programs the child execs or spawns get an environment without
 * the shim (exec_env). */
AT_COLD static void fork_child_untraced(void)
{
    int e = errno;
    at_pid = at_raw_getpid();
    at_untraced = true;
    __atomic_store_n(&at_hot.shim_on, 0, __ATOMIC_RELEASE);
    signals_untrace();
    at_sampler_untrace();
    at_altstack_untrace();
    errno = e;
}

/* The child's side of every fork, fork() below and those glibc makes itself (daemon() calls it
 * without the PLT): registered after the writer's handlers (which make the child's session wait for
 * its first event), before any the program registers later, whose events then find the child's own
 * pid and thread. */
AT_FORK_TEXT static void fork_child_handler(void)
{
    if (at_on()) {
        if (fork_follow != AT_CFG_FOLLOW_ALL) {
            fork_child_untraced();
            return;
        }
        /* nothing here sets errno (whose look-up would map a page of libc's code more) */
        at_internal++; /* on the page the kernel writes in every child (rseq): no fault more */
        fork_child_fixup(at_pid); /* still the parent's */
        at_internal--;
    } else if (at_untraced) {
        at_pid = at_raw_getpid(); /* a fork of an untraced child: its execs are told apart from a vfork's */
    }
}

void at_process_fork_init(void)
{
    fork_follow = (int)at_cfg.follow;
    fork_child_type = at_ev.fork_child;
    fork_real_exit = AT_REAL(_exit);
    fork_real_Exit = AT_REAL(_Exit);
    pthread_atfork(NULL, NULL, fork_child_handler);
}

/* The parent writes no page of the shim's around the fork when it has one thread (each costs it a
 * fault while the child shares it): the handlers' locks are taken only with other threads
 * (at_fork_lock), and the handlers mark their own work as the shim's (at_internal) where they do
 * any; the program's own handlers run as the program's. */
AT_FORK_TEXT AT_EXPORT pid_t fork(void)
{
    if (!at_on())
        return AT_REAL(fork)();
    int *errp = &errno; /* the same in the child: it looks errno up in no code page of libc */
    pid_t p = AT_REAL(fork)(); /* the handlers run in here, the child's side included */
    if (p < 0 && *errp == EAGAIN && at_trace_flusher_yield()) /* see at_trace_flusher_yield */
        p = AT_REAL(fork)();
    if (p > 0) {
        int e = *errp;
        uint8_t buf[4];
        at_payload pl;
        at_payload_init(&pl, buf, sizeof buf);
        at_payload_i32(&pl, p);
        parent_event(at_ev.fork_parent, buf, (uint32_t)(pl.p - buf));
        if (*errp != e) /* a page the parent does not write otherwise */
            *errp = e;
    }
    return p;
}

/* ---------------- _exit ---------------- */

/* A fork child that recorded nothing ends here: its code goes with the fork's (AT_FORK_TEXT). */
AT_FORK_TEXT static void exit_now(int status)
{
    /* a fork child that recorded nothing has no file to write it to: it touches nothing */
    if (at_trace_keeps_quiet() && at_on() && !in_vfork_child()) {
        uint8_t buf[4];
        at_payload pl;
        at_payload_init(&pl, buf, sizeof buf);
        at_payload_i32(&pl, status);
        at_trace_quiet = 1; /* written when the process has a file; makes none */
        at_shim_event(at_ev.exit, buf, (uint32_t)(pl.p - buf));
        at_trace_quiet = 0;
        at_trace_emergency_flush();
    }
}

AT_FORK_TEXT AT_EXPORT void _exit(int status)
{
    exit_now(status);
    (fork_real_exit ? fork_real_exit : AT_REAL(_exit))(status);
    __builtin_unreachable();
}

AT_FORK_TEXT AT_EXPORT void _Exit(int status)
{
    exit_now(status);
    (fork_real_Exit ? fork_real_Exit : AT_REAL(_Exit))(status);
    __builtin_unreachable();
}

/* ---------------- fatal signals ----------------
 * Our handler is installed only while the program's disposition of a signal is the default. When
 * the program installs its own handler (or SIG_IGN), it goes to the kernel as asked and we are out
 * of the way; when it restores SIG_DFL, ours comes back. Queries report what the program set. */

static const int at_fatal_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS,
                                    SIGTERM, SIGQUIT, SIGINT, SIGHUP, SIGPIPE, SIGALRM, SIGUSR1,
                                    SIGUSR2, SIGXCPU, SIGXFSZ};

static bool watched(int sig)
{
    for (size_t i = 0; i < AT_ARRAY_LEN(at_fatal_sigs); i++)
        if (at_fatal_sigs[i] == sig)
            return true;
    return false;
}

static void at_fatal_handler(int sig, siginfo_t *si, void *uc);

static void our_action(struct sigaction *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sa_sigaction = at_fatal_handler;
    sa->sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa->sa_mask);
}

static bool is_ours(const struct sigaction *sa)
{
    return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == at_fatal_handler;
}

static void as_default(struct sigaction *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sa_handler = SIG_DFL;
    sigemptyset(&sa->sa_mask);
}

/* An untraced fork child: our handler goes, the default comes back (what the program saw all along). */
AT_COLD static void signals_untrace(void)
{
    for (size_t i = 0; i < AT_ARRAY_LEN(at_fatal_sigs); i++) {
        struct sigaction cur;
        if (AT_REAL(sigaction)(at_fatal_sigs[i], NULL, &cur) == 0 && is_ours(&cur)) {
            as_default(&cur);
            AT_REAL(sigaction)(at_fatal_sigs[i], &cur, NULL);
        }
    }
}

static void at_fatal_handler(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    int e = errno;
    uint8_t buf[16];
    at_payload pl;
    at_payload_init(&pl, buf, sizeof buf);
    at_payload_i32(&pl, sig);
    at_payload_i32(&pl, si ? si->si_code : 0);
    at_payload_u64(&pl, si ? (uint64_t)(uintptr_t)si->si_addr : 0);
    if (!in_vfork_child()) {
        AT_INTERNAL_BEGIN();
        int q = at_trace_quiet;
        at_trace_quiet = 2; /* a fork child's file is opened by the flush below, no thread started */
        at_shim_event(at_ev.fatal, buf, (uint32_t)(pl.p - buf));
        at_trace_quiet = q;
        at_trace_emergency_flush();
        AT_INTERNAL_END();
    }
    struct sigaction dfl;
    as_default(&dfl);
    AT_REAL(sigaction)(sig, &dfl, NULL);
    /* A fault raised by an instruction (si_code > 0 for SEGV/BUS/FPE/ILL/TRAP) happens again when we
     * return, now with the default action. Anything sent (kill, raise, abort, a pipe) is sent again:
     * it stays pending while this handler blocks it and acts on return. */
    bool fault = si && si->si_code > 0 &&
                 (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGTRAP);
    if (!fault)
        syscall(SYS_tgkill, (pid_t)syscall(SYS_getpid), (pid_t)syscall(SYS_gettid), sig);
    errno = e;
}

/* The kernel's own sigaction record (x86-64), to put back exactly what was read: glibc's sigaction
 * would add SA_RESTORER and its restorer to an inherited SIG_IGN, which the program would then read
 * back. */
struct at_ksigaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    uint64_t mask;
};

/* Ours where the default action is in force; an inherited SIG_IGN (nohup) or a handler installed by
 * an earlier constructor stays as it is. One call per signal sets ours and reads what was there,
 * which is put back (exactly, by a raw call) in the rare case it was not the default: a system call
 * each instead of a read and a write (17 fewer at every traced image's start). The signals are
 * blocked meanwhile, so none arrives at our handler where it should have been ignored or someone
 * else's: one sent then stays pending and meets the disposition put back (an ignored one is
 * discarded, as the kernel does when SIG_IGN is set). Raw calls: no page of libc's a start would
 * not otherwise map. */
void at_signals_install(void)
{
    uint64_t block = 0, saved = 0;
    for (size_t i = 0; i < AT_ARRAY_LEN(at_fatal_sigs); i++)
        block |= 1ull << (at_fatal_sigs[i] - 1);
    if (at_raw_syscall4(SYS_rt_sigprocmask, SIG_BLOCK, (long)&block, (long)&saved, 8) != 0)
        return;
    struct sigaction ours;
    our_action(&ours);
    for (size_t i = 0; i < AT_ARRAY_LEN(at_fatal_sigs); i++) {
        int s = at_fatal_sigs[i];
        struct sigaction cur;
        if (AT_REAL(sigaction)(s, &ours, &cur) != 0)
            continue;
        if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL)
            continue;
        struct at_ksigaction k = {.handler = (void *)cur.sa_handler,
                                  .flags = (unsigned long)cur.sa_flags,
                                  .restorer = (void *)cur.sa_restorer};
        memcpy(&k.mask, &cur.sa_mask, sizeof k.mask);
        at_raw_syscall4(SYS_rt_sigaction, s, (long)&k, 0, 8);
    }
    at_raw_syscall4(SYS_rt_sigprocmask, SIG_SETMASK, (long)&saved, 0, 8);
}

AT_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (AT_UNLIKELY(sig == at_sample_sig && sig) && at_on())
        return at_sampler_sigaction(sig, act, old);
    /* any other signal is no concern of sampling's (setting one's handler, as bash does for
     * SIGCHLD, must not stop it) */
    if (!at_on() || !at_cfg.fatal_signals || !watched(sig))
        return sig == at_sample_sig && sig ? at_sampler_sigaction(sig, act, old)
                                           : AT_REAL(sigaction)(sig, act, old);
    struct sigaction ours, prev;
    const struct sigaction *use = act;
    if (act && !(act->sa_flags & SA_SIGINFO) && act->sa_handler == SIG_DFL) {
        our_action(&ours);
        use = &ours;
    }
    int r = AT_REAL(sigaction)(sig, use, &prev);
    if (r == 0 && old) {
        if (is_ours(&prev))
            as_default(&prev);
        *old = prev;
    }
    return r;
}

AT_EXPORT sighandler_t signal(int sig, sighandler_t h)
{
    if ((!at_on() || !at_cfg.fatal_signals || !watched(sig)) && !(sig == at_sample_sig && sig))
        return AT_REAL(signal)(sig, h);
    /* glibc's signal(): BSD semantics, the signal blocked in its own handler */
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sig > 0 && sig < NSIG)
        sigaddset(&sa.sa_mask, sig);
    if (sigaction(sig, &sa, &old) != 0)
        return SIG_ERR;
    return old.sa_handler;
}
