/* output.c: the files a session writes: path pattern expansion, file / rotate / circular modes, and
 * error reporting. Everything past session start is async-signal-safe (no stdio, no malloc) because
 * the emergency flush may rotate.
 *
 * Naming. The pattern is expanded once per process (%p = pid, %t = session start as UTC
 * YYYYMMDD-HHMMSS, %% = %) into the base path B, e.g. "trace.nettrace". The first file is B itself.
 * rotate:SIZE  file k (k = 1, 2, ...) is B with ".k" inserted before the extension:
 *              trace.nettrace, trace.1.nettrace, trace.2.nettrace, ... (never deleted).
 * circular:SIZE the same names; a new segment starts when one reaches SIZE/4 and at most 4 segments
 *              exist: opening segment k deletes segment k-4, so about the last SIZE bytes are kept.
 * A fork child of a pattern without %p writes to B with "-<childpid>" before the extension.
 *
 * Files are only ever created, never opened as they are: O_CREAT|O_EXCL|O_NOFOLLOW, so a symlink or a
 * file someone planted at a trace's name (in a shared folder) never receives a byte. A name taken by
 * a file of ours from an earlier run is reused (that file is removed first); one taken by anything
 * else makes the trace take the next -dup<n>. A relative pattern is resolved against the working
 * directory once, at the session's start: the program's chdir moves neither later segments nor the
 * segments circular mode removes. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "nt_format.h"
#include "trace_int.h"

/* The trace file's descriptor (-1: none), for the preload library to keep out of the program's
 * closes and dup2s. Set here before the descriptor is used and cleared before it is closed. */
int at_trace_fd AT_FORK_DATA = -1;

/* Where the writer's descriptors go: far above the low numbers programs reach for (a shell's
 * `exec 3>file`, a daemon's dup2 onto 3, a program counting on open() returning the lowest free
 * number), below the soft limit and select()'s 1024: 7/8 of min(soft limit, 1024), 896 by default.
 * -1 when the limit is too low to spare a far number. */
int at_fd_high_base(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    rlim_t soft = rl.rlim_cur;
    if (soft == RLIM_INFINITY || soft > 1024)
        soft = 1024;
    if (soft < 64)
        return -1;
    return (int)(soft - soft / 8);
}

/* fd moved to a high number (close-on-exec), or fd itself when that cannot be done. */
int at_fd_move_high(int fd)
{
    int base = at_fd_high_base();
    if (fd < 0 || base < 0 || fd >= base)
        return fd;
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, base);
    if (hi < 0)
        return fd;
    close(fd);
    return hi;
}

/* at_trace_options.manifest: each file created is named there, for `acttrace run` to say exactly
 * which files the run wrote (and not an earlier run's beside them). */
const char *at_output_manifest AT_START_DATA;

/* One whole line in one O_APPEND write, so the lines of processes writing at once never mix; the
 * file opened and closed around it (no descriptor kept), by system calls (async-signal-safe, and no
 * hook or the preload library's close sees them). Failures are ignored: the trace goes on. */
static void manifest_note(const char *path)
{
    const char *m = at_output_manifest;
    if (!m || !*m)
        return;
    char line[sizeof at_out.path + 1];
    size_t n = strlen(path);
    if (n + 1 > sizeof line)
        return;
    memcpy(line, path, n);
    line[n] = '\n';
    int e = errno;
    long fd = syscall(SYS_openat, AT_FDCWD, m, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
    if (fd >= 0) {
        (void)syscall(SYS_write, (int)fd, line, n + 1);
        (void)syscall(SYS_close, (int)fd);
    }
    errno = e;
}

/* A number of the program's table the writer took the file over from (fd_here): still guarded
 * as at_trace_fd until a program thread closes it (at_output_leftover_close). */
static int out_leftover = -1;

static void remember(at_output *o, int fd)
{
    struct stat st;
    o->fd = fd;
    o->fd_private = at_fd_private_thread;
    o->detached = false;
    if (fstat(fd, &st) == 0) {
        o->dev = (uint64_t)st.st_dev;
        o->ino = (uint64_t)st.st_ino;
    } else {
        o->dev = o->ino = 0;
    }
    o->seg_dev[o->index % 4] = o->dev;
    o->seg_ino[o->index % 4] = o->ino;
    if (!at_fd_private_thread)
        at_trace_fd = fd; /* the writer's own numbers are nothing of the program's to guard */
}

size_t at_fmt_u64(char *out, uint64_t v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    out[n] = 0;
    return n;
}

/* Days-from-civil inverse (proleptic Gregorian), so no gmtime (it may take a lock). */
void at_civil_from_unix(int64_t secs, int *y, int *mo, int *d, int *h, int *mi, int *s, int *dow)
{
    int64_t days = secs / 86400, rem = secs % 86400;
    if (rem < 0) {
        rem += 86400;
        days--;
    }
    *h = (int)(rem / 3600);
    *mi = (int)(rem % 3600 / 60);
    *s = (int)(rem % 60);
    *dow = (int)((days % 7 + 11) % 7); /* 1970-01-01 was a Thursday (4) */
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *mo = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = (int)(yoe + era * 400 + (*mo <= 2));
}

static void put2(char *p, int v)
{
    p[0] = (char)('0' + v / 10 % 10);
    p[1] = (char)('0' + v % 10);
}

/* One line on stderr, async-signal-safe. */
void at_errmsg(const char *a, const char *b, int err)
{
    char line[1024];
    size_t n = 0;
#define ADD(s)                                                                                     \
    for (const char *q_ = (s); q_ && *q_ && n < sizeof line - 2; q_++)                             \
        line[n++] = *q_;
    ADD("acttrace: ");
    ADD(a);
    ADD(b);
    if (err) {
        ADD(": ");
        /* strerror is not async-signal-safe; name the common ones, number the rest */
        const char *m = err == ENOSPC ? "No space left on device"
                      : err == EDQUOT ? "Disk quota exceeded"
                      : err == EIO    ? "Input/output error"
                      : err == EACCES ? "Permission denied"
                      : err == ENOENT ? "No such file or directory"
                      : err == EFBIG  ? "File too large"
                      : err == EROFS  ? "Read-only file system" : NULL;
        if (m) {
            ADD(m);
        } else {
            char num[24];
            at_fmt_u64(num, (uint64_t)err);
            ADD("errno ");
            ADD(num);
        }
    }
#undef ADD
    line[n++] = '\n';
    AT_INTERNAL_BEGIN();
    /* the writer thread's table has no stderr of the program's: it borrows the program's for the
     * line (the same open file, so the line lands where the program's own would), or opens it
     * again through /proc where pidfd_getfd is refused (a filter) */
    int fd = 2;
    if (at_fd_private_thread) {
        fd = at_fd_program(2);
        if (fd < 0)
            fd = open("/proc/self/fd/2", O_WRONLY | O_APPEND | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    }
    if (fd >= 0) {
        ssize_t w = write(fd, line, n);
        (void)w;
        if (fd != 2)
            close(fd);
    }
    AT_INTERNAL_END();
}

void at_output_report(at_output *o, const char *what, int err)
{
    o->failed = true;
    if (o->reported)
        return; /* one line per output, then drops are counted silently */
    o->reported = true;
    at_errmsg(what, o->path, err);
    at_errmsg("the file keeps its last complete part; lost events are counted in it", "", 0);
}

static bool fd_here(at_output *o);

int at_output_cut(at_output *o, uint64_t len)
{
    if (!fd_here(o))
        return -1;
    int rc;
    do {
        rc = ftruncate(o->fd, (off_t)len);
    } while (rc != 0 && errno == EINTR);
    return rc;
}

/* Insert sfx before the extension of the file name in base (a dot that starts the name is not one). */
static int insert_suffix(char *base, size_t cap, const char *sfx)
{
    size_t n = strlen(base), sl = strlen(sfx);
    char *slash = strrchr(base, '/');
    char *dot = strrchr(base, '.');
    if (!dot || (slash && dot < slash) || dot == (slash ? slash + 1 : base))
        dot = base + n;
    if (n + sl >= cap)
        return -1;
    memmove(dot + sl, dot, strlen(dot) + 1);
    memcpy(dot, sfx, sl);
    return 0;
}

/* Expand the pattern into o->base. */
static int expand(at_output *o, char *err, size_t errlen)
{
    const char *s = o->pattern;
    size_t n = 0, cap = sizeof o->base;
    bool has_pid = false;
    int y, mo, d, h, mi, se, dow;
    at_civil_from_unix((int64_t)o->start_time_s, &y, &mo, &d, &h, &mi, &se, &dow);
    for (; *s; s++) {
        char tmp[32];
        size_t tl = 0;
        if (*s != '%') {
            tmp[0] = *s;
            tl = 1;
        } else if (s[1] == 'p') {
            tl = at_fmt_u64(tmp, (uint64_t)at_raw_getpid());
            has_pid = true;
            s++;
        } else if (s[1] == 't') {
            at_fmt_u64(tmp, (uint64_t)y);
            put2(tmp + 4, mo);
            put2(tmp + 6, d);
            tmp[8] = '-';
            put2(tmp + 9, h);
            put2(tmp + 11, mi);
            put2(tmp + 13, se);
            tl = 15;
            s++;
        } else if (s[1] == '%') {
            tmp[0] = '%';
            tl = 1;
            s++;
        } else {
            if (err)
                snprintf(err, errlen, "output path '%s': unknown %% sequence (use %%p, %%t or %%%%)",
                         o->pattern);
            return -1;
        }
        if (n + tl >= cap) {
            if (err)
                snprintf(err, errlen, "output path '%s' is too long", o->pattern);
            return -1;
        }
        memcpy(o->base + n, tmp, tl);
        n += tl;
    }
    o->base[n] = 0;
    if (n == 0) {
        if (err)
            snprintf(err, errlen, "output path is empty");
        return -1;
    }
    if (o->child_suffix && !has_pid) {
        char sfx[24] = "-";
        at_fmt_u64(sfx + 1, (uint64_t)at_raw_getpid());
        if (insert_suffix(o->base, cap, sfx) < 0)
            goto too_long;
    }
    if (o->exec_gen > 0) {
        char sfx[32] = "-exec";
        at_fmt_u64(sfx + 5, o->exec_gen);
        if (insert_suffix(o->base, cap, sfx) < 0)
            goto too_long;
    }
    if (o->dup > 0) {
        char sfx[32] = "-dup";
        at_fmt_u64(sfx + 4, o->dup);
        if (insert_suffix(o->base, cap, sfx) < 0)
            goto too_long;
    }
    return 0;
too_long:
    if (err)
        snprintf(err, errlen, "output path '%s' is too long", o->pattern);
    return -1;
}

/* Name of file number k (see the top comment). */
static void file_name(const at_output *o, unsigned k, char *out, size_t cap)
{
    size_t n = strlen(o->base);
    if (k == 0 || n + 12 >= cap) {
        memcpy(out, o->base, n + 1);
        return;
    }
    const char *slash = strrchr(o->base, '/');
    const char *dot = strrchr(o->base, '.');
    if (!dot || (slash && dot < slash) || dot == (slash ? slash + 1 : o->base))
        dot = o->base + n;
    size_t pre = (size_t)(dot - o->base);
    memcpy(out, o->base, pre);
    out[pre] = '.';
    size_t nl = at_fmt_u64(out + pre + 1, k);
    memcpy(out + pre + 1 + nl, dot, strlen(dot) + 1);
}

/* The file starts as every trace does (NT_FILE_HEAD); a text that merely begins with the word
 * "Nettrace" is not one. */
static bool starts_as_trace(int fd)
{
    static const char want[] = NT_FILE_HEAD;
    char head[sizeof want - 1];
    ssize_t n;
    while ((n = pread(fd, head, sizeof head, 0)) < 0 && errno == EINTR) {
    }
    return n == (ssize_t)sizeof head && !memcmp(head, want, sizeof head);
}

/* The name is taken (EEXIST). A file of ours from an earlier run may go: a regular file of this
 * user, with no other link, that its owner may write and nobody else may, that starts as a trace
 * does (starts_as_trace: a program's own file that happens to bear the name, or an output named after
 * one of the user's files, is never replaced) and that no live writer holds (each holds an flock on
 * its file).
 * 0: removed, *held is the old file's descriptor, locked, for the caller to close once
 * its new file exists (a process that waited for that lock then finds another file at the name and
 * leaves it). -EBUSY: a live writer's. -EEXIST: anything else, left alone. */
static int remove_stale(const char *path, int *held)
{
    struct stat st, st2;
    *held = -1;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -EEXIST;
    /* a file its owner made read-only is one they mean to keep */
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1 ||
        (st.st_mode & (S_IWGRP | S_IWOTH)) || !(st.st_mode & S_IWUSR))
        return -EEXIST;
    /* Empty: another process may have just created it and not yet taken its lock (two pid 1s of
     * two pid namespaces name their files alike); a file of ours has its header once locked. */
    if (st.st_size == 0)
        return -EBUSY;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -EEXIST;
    int rc = -EEXIST;
    if (fstat(fd, &st2) == 0 && st2.st_dev == st.st_dev && st2.st_ino == st.st_ino) {
        if (flock(fd, LOCK_EX | LOCK_NB) != 0)
            rc = errno == EWOULDBLOCK ? -EBUSY : -EEXIST;
        else if (lstat(path, &st2) != 0 || st2.st_dev != st.st_dev || st2.st_ino != st.st_ino)
            rc = -EBUSY; /* a process that had it locked put its new file there meanwhile */
        else if (!starts_as_trace(fd))
            rc = -EEXIST;
        else if (unlink(path) == 0 || errno == ENOENT)
            rc = 0;
    }
    if (rc == 0)
        *held = fd;
    else
        close(fd);
    return rc;
}

/* Create file number k anew (see the top comment): 0, or -errno (-EBUSY: a live process writes that
 * name; -EEXIST: something not ours has it). */
static int open_index(at_output *o, unsigned k)
{
    file_name(o, k, o->path, sizeof o->path);
    mode_t mode = o->file_mode ? (mode_t)o->file_mode : 0600;
    int held = -1, fd = -1;
    for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
        fd = open(o->path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, mode);
        if (fd >= 0)
            break;
        if (errno != EEXIST || attempt > 0)
            break;
        int rc = remove_stale(o->path, &held);
        if (rc < 0)
            return rc;
    }
    if (fd < 0) {
        int e = errno == ELOOP ? EEXIST : errno; /* a symlink raced in: not ours either */
        if (held >= 0)
            close(held);
        return -e;
    }
    /* A child glibc spawns itself (system(), popen()) carries nothing of ours and may name its file
     * like its parent: the lock, held as long as the writer's descriptor, tells it the name is a
     * live writer's. Fresh, nobody else holds it. */
    (void)flock(fd, LOCK_EX | LOCK_NB);
    if (held >= 0)
        close(held);
    /* still the name's file: otherwise another process took it away before the lock was ours */
    struct stat mine, there;
    if (fstat(fd, &mine) != 0 || lstat(o->path, &there) != 0 || mine.st_dev != there.st_dev ||
        mine.st_ino != there.st_ino) {
        close(fd);
        return -EBUSY;
    }
    /* the mode asked for, whatever the program's umask */
    (void)fchmod(fd, mode);
    o->index = k;
    remember(o, at_fd_move_high(fd));
    o->pos = 0;
    atomic_fetch_add(&at_stat_files, 1);
    manifest_note(o->path);
    return 0;
}

/* A relative pattern becomes absolute, against the working directory now ('%' in it escaped for
 * expand). An absolute path rather than a descriptor of the folder: nothing more for the program to
 * close or reuse, and a folder removed or renamed under a running program makes the next segment
 * fail, reported, never land somewhere the program chdir'd to. */
static int resolve_dir(at_output *o, char *err, size_t errlen)
{
    if (o->pattern[0] == '/')
        return 0;
    /* the working directory goes into base, which expand() writes next anyway, and the pattern is
     * rebuilt in place: no 4 KiB buffers on the stack (stack pages a start touches are faults) */
    char *cwd = o->base;
    if (!getcwd(cwd, sizeof o->base) || cwd[0] != '/')
        return 0; /* no reachable working directory: the name stays relative (it will fail there) */
    size_t n = 0;
    for (const char *c = cwd; *c; c++)
        n += *c == '%' ? 2 : 1;
    if (n > 1)
        n++; /* the '/' */
    const char *p = o->pattern;
    if (p[0] == '.' && p[1] == '/')
        p += 2;
    size_t pl = strlen(p);
    if (n + pl >= sizeof o->pattern)
        goto too_long;
    memmove(o->pattern + n, p, pl + 1);
    size_t k = 0;
    for (const char *c = cwd; *c; c++) {
        if (*c == '%')
            o->pattern[k++] = '%';
        o->pattern[k++] = *c;
    }
    o->rel_dir_len = (unsigned)k;
    if (k < n)
        o->pattern[k] = '/';
    return 0;
too_long:
    if (err)
        snprintf(err, errlen, "output path '%s' is too long in %s", o->pattern, cwd);
    return -1;
}

int at_output_open_first(at_output *o, char *err, size_t errlen)
{
    o->fd = -1;
    o->failed = false;
    o->reported = false;
    o->dup = 0;
    if (resolve_dir(o, err, errlen) < 0 || expand(o, err, errlen) < 0)
        return -1;
    o->max_files = 0;
    o->seg_size = 0;
    if (o->mode == AT_OUTPUT_ROTATE) {
        o->seg_size = o->mode_size;
    } else if (o->mode == AT_OUTPUT_CIRCULAR) {
        o->seg_size = o->mode_size / 4;
        o->max_files = 4;
    }
    if ((o->mode == AT_OUTPUT_ROTATE || o->mode == AT_OUTPUT_CIRCULAR) && o->seg_size < 4096) {
        if (err)
            snprintf(err, errlen, "%s size %llu is too small (at least %u bytes per file)",
                     o->mode == AT_OUTPUT_ROTATE ? "rotate" : "circular",
                     (unsigned long long)o->mode_size, o->mode == AT_OUTPUT_ROTATE ? 4096u : 16384u);
        return -1;
    }
    int rc = open_index(o, 0);
    if (rc == -EBUSY && !o->child_suffix) { /* a live process writes that name: ours gets -<pid> */
        o->child_suffix = true;
        if (expand(o, err, errlen) < 0)
            return -1;
        rc = open_index(o, 0);
    }
    /* still held: the same pid in another pid namespace (each namespace's first process is 1); or
     * the name is taken by something not ours (a link, another user's file) */
    for (unsigned d = 2; (rc == -EBUSY || rc == -EEXIST) && d < 100; d++) {
        o->dup = d;
        if (expand(o, err, errlen) < 0)
            return -1;
        rc = open_index(o, 0);
    }
    if (rc < 0) {
        if (err)
            snprintf(err, errlen, "cannot create %s: %s", o->path,
                     rc == -EBUSY ? "another process is writing it"
                     : rc == -EEXIST ? "a file that is not the trace's has that name"
                                     : strerror(-rc));
        return -1;
    }
    return 0;
}

/* A relative pattern made absolute in the pattern itself: the working directory read into it, the
 * name (short, as names are) kept on the stack meanwhile. Leaves base alone: at a start whose file
 * waits for its first event, base is a page nothing else writes. false: not done (a long name, a
 * directory that a '%' would have to be escaped in): resolve_dir does it. */
static bool resolve_dir_inplace(at_output *o)
{
    const char *p = o->pattern;
    if (p[0] == '/')
        return true;
    if (p[0] == '.' && p[1] == '/')
        p += 2;
    char name[256];
    size_t pl = strlen(p);
    if (pl >= sizeof name)
        return false;
    memcpy(name, p, pl + 1);
    if (!getcwd(o->pattern, sizeof o->pattern) || o->pattern[0] != '/' ||
        strchr(o->pattern, '%')) {
        memcpy(o->pattern, name, pl + 1); /* as it was, but for the "./" resolve_dir drops too */
        return false;
    }
    size_t n = strlen(o->pattern);
    size_t dir = n;
    if (n > 1)
        o->pattern[n++] = '/';
    if (n + pl >= sizeof o->pattern) {
        memcpy(o->pattern, name, pl + 1);
        return false;
    }
    memcpy(o->pattern + n, name, pl + 1);
    o->rel_dir_len = (unsigned)dir;
    return true;
}

/* The pattern's '%' sequences are those expand() knows, and its folder has none: the folder is
 * the pattern's own, checked without expanding into base. */
static bool pattern_plain_dir(const at_output *o)
{
    const char *slash = strrchr(o->pattern, '/');
    for (const char *c = o->pattern; *c; c++)
        if (*c == '%') {
            if (slash && c < slash)
                return false;
            if (c[1] != 'p' && c[1] != 't' && c[1] != '%')
                return false; /* expand() says which */
            c++;
        }
    /* the longest expansion of a name this short fits base: expand() would not refuse it */
    return strlen(o->pattern) + 64 < sizeof o->base;
}

int at_output_prepare(at_output *o, char *err, size_t errlen)
{
    uint64_t seg = o->mode == AT_OUTPUT_ROTATE ? o->mode_size
                 : o->mode == AT_OUTPUT_CIRCULAR ? o->mode_size / 4 : 4096;
    /* the usual pattern is checked in place, the unusual one expanded as the open will */
    bool plain = resolve_dir_inplace(o) && pattern_plain_dir(o);
    if (!plain && (resolve_dir(o, err, errlen) < 0 || expand(o, err, errlen) < 0))
        return -1;
    if (seg < 4096) { /* as at_output_open_first would say it */
        if (err)
            snprintf(err, errlen, "%s size %llu is too small (at least %u bytes per file)",
                     o->mode == AT_OUTPUT_ROTATE ? "rotate" : "circular",
                     (unsigned long long)o->mode_size, o->mode == AT_OUTPUT_ROTATE ? 4096u : 16384u);
        return -1;
    }
    /* a folder that cannot take the file is said now, while the program can still run untraced
     * with one line, rather than at its first event */
    /* the folder: the name cut at its last '/' for the call (no 4 KiB copy on the stack) */
    char *name = plain ? o->pattern : o->base;
    char *slash = strrchr(name, '/');
    int rc;
    if (!slash)
        rc = access(".", W_OK | X_OK);
    else if (slash == name)
        rc = access("/", W_OK | X_OK);
    else {
        *slash = 0;
        rc = access(name, W_OK | X_OK);
        *slash = '/';
    }
    if (rc != 0) {
        if (err) {
            int e = errno;
            if (plain) /* the message names the file as the open would have */
                (void)expand(o, NULL, 0);
            snprintf(err, errlen, "cannot create %s: %s", o->base, strerror(e));
        }
        return -1;
    }
    return 0;
}

/* What at_output_open_first would decide about "-<pid>" without creating anything: the plain name
 * is a live writer's (it holds the file's lock). */
bool at_output_name_held(const at_output *o)
{
    if (o->child_suffix)
        return true;
    static at_output probe; /* 12 KiB: not on a program's stack; callers are one at a time (exec) */
    memcpy(probe.pattern, o->pattern, sizeof probe.pattern);
    probe.start_time_s = o->start_time_s;
    probe.child_suffix = false;
    probe.exec_gen = o->exec_gen;
    probe.dup = 0;
    if (expand(&probe, NULL, 0) < 0)
        return false;
    file_name(&probe, 0, probe.path, sizeof probe.path);
    int fd = open(probe.path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    return held;
}

int at_output_open_next(at_output *o)
{
    at_output_close(o);
    unsigned k = o->index + 1;
    if (o->max_files && k >= o->max_files) {
        /* only the file this output created: whatever took the name since stays */
        char old[sizeof o->path];
        struct stat st;
        unsigned j = (k - o->max_files) % 4;
        file_name(o, k - o->max_files, old, sizeof old);
        if (lstat(old, &st) == 0 && (uint64_t)st.st_dev == o->seg_dev[j] &&
            (uint64_t)st.st_ino == o->seg_ino[j])
            unlink(old);
    }
    int rc = open_index(o, k);
    if (rc < 0) {
        at_output_report(o, "cannot create ", -rc);
        return -1;
    }
    return 0;
}

static bool still_ours(at_output *o);

void at_output_close(at_output *o)
{
    int fd = o->fd;
    bool priv = o->fd_private;
    o->fd = -1;
    o->fd_private = false;
    o->detached = false;
    if (fd < 0 || priv != at_fd_private_thread)
        return; /* a number of another table (the writer's, gone or stuck; a fork child's stale copy) */
    if (!priv && at_trace_fd == fd)
        at_trace_fd = -1; /* first: the preload library's close() lets it through then */
    close(fd);
}

/* The number of the program's table the writer took the file over from: closed by the calling
 * (program's) thread. Under at_flush_lock. */
void at_output_leftover_close(void)
{
    int fd = out_leftover;
    if (fd < 0 || at_fd_private_thread)
        return;
    out_leftover = -1;
    if (at_trace_fd == fd)
        at_trace_fd = -1;
    close(fd);
}

bool at_output_here(at_output *o) { return fd_here(o); }

int at_output_reattach(at_output *o)
{
    if (o->fd >= 0)
        return 0;
    if (!o->detached)
        return -1;
    o->detached = false;
    if (!still_ours(o)) {
        at_output_report(o, "cannot open the trace file again: ", errno ? errno : EBADF);
        return -1;
    }
    /* a live writer's name again (see open_index); refused while the ended thread's descriptor
     * still holds it, which goes with that thread */
    (void)flock(o->fd, LOCK_EX | LOCK_NB);
    return 0;
}

/* Is o->fd a number of the calling thread's table? The writer thread takes over a file a program's
 * thread opened (the same open file, through a pidfd; the program's number stays guarded until a
 * program's thread closes it, at_output_leftover_close); a program's thread that finds the
 * writer's number (the writer ended without closing it) opens the file again by its name. */
static bool fd_here(at_output *o)
{
    if (o->fd < 0)
        return at_output_reattach(o) == 0;
    if (o->fd_private == at_fd_private_thread)
        return true;
    int old = o->fd;
    o->fd = -1;
    o->detached = true;
    if (at_fd_private_thread) {
        if (out_leftover < 0)
            out_leftover = old; /* (a second one stays open, guarded no more: never seen) */
        int fd = at_fd_program(old);
        if (fd >= 0) {
            o->fd = at_fd_move_high(fd);
            o->fd_private = true;
            o->detached = false;
            return true;
        }
    }
    o->fd_private = false;
    return at_output_reattach(o) == 0;
}

/* In a fork child: the parent's descriptor is closed at once (the program must not find it open),
 * and the struct is left alone (a page the child would read or copy) until the child opens a file
 * of its own: its fd is stale until then. at_trace_fd names the trace's number, if any (a child that
 * never opened its file and forks again may have put a file of its own on the old one). Closed by
 * the system call: the preload library's close() would look the number up in its tables. */
AT_FORK_TEXT void at_output_close_in_child(void)
{
    int fd = at_trace_fd;
    if (fd >= 0) {
        at_trace_fd = -1;
        syscall(SYS_close, fd);
    }
}

/* The program put another file on the trace's number (dup2/dup3 onto it, or a raw close_range
 * system call then an open), or closed it. Writing on would corrupt the program's file or lose the
 * trace: open the trace file again (its bytes so far are there; writes are at offsets) on a number
 * of its own, and leave the old number to the program. */
static bool still_ours(at_output *o)
{
    struct stat st;
    if (o->fd >= 0 && fstat(o->fd, &st) == 0 && (uint64_t)st.st_dev == o->dev &&
        (uint64_t)st.st_ino == o->ino)
        return true;
    /* never through a link, and never blocking on a FIFO put under our name */
    int fd = open(o->path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return false;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_dev != o->dev || (uint64_t)st.st_ino != o->ino ||
        fcntl(fd, F_SETFL, 0) != 0) {
        int e = errno;
        close(fd); /* another file under our name: the trace's own was removed */
        errno = e;
        return false;
    }
    remember(o, at_fd_move_high(fd));
    return true;
}

int at_output_move_fd(at_output *o)
{
    int base = at_fd_high_base();
    if (out_leftover >= 0 && out_leftover == at_trace_fd) {
        /* the guarded number is the one the writer took the file over from */
        int fd = fcntl(out_leftover, F_DUPFD_CLOEXEC, base > 0 ? base : 3);
        if (fd < 0)
            return -1;
        out_leftover = at_trace_fd = fd;
        return 0;
    }
    if (o->fd < 0 || o->fd_private)
        return 0;
    int fd = fcntl(o->fd, F_DUPFD_CLOEXEC, base > 0 ? base : 3);
    if (fd < 0)
        return -1;
    o->fd = fd; /* the old number is the caller's to replace: not closed here */
    at_trace_fd = fd;
    return 0;
}

static int pwrite_all(at_output *o, const uint8_t *p, size_t len, uint64_t off);

/* A write past RLIMIT_FSIZE raises SIGXFSZ, whose default action kills the process: the writer's
 * writes happen with it blocked (the flusher blocks everything; the final flush runs on a program's
 * thread), and the one a write of ours raised is taken back, unless the program's own was already
 * pending. The write then fails with EFBIG: reported once, the rest counted as dropped. */
int at_output_pwrite(at_output *o, const void *buf, size_t len, uint64_t off)
{
    sigset_t xf, old, pend;
    sigemptyset(&xf);
    sigaddset(&xf, SIGXFSZ);
    if (pthread_sigmask(SIG_BLOCK, &xf, &old) != 0)
        return pwrite_all(o, buf, len, off);
    bool was_pending = sigpending(&pend) == 0 && sigismember(&pend, SIGXFSZ);
    int e = errno;
    int rc = pwrite_all(o, buf, len, off);
    if (!was_pending && sigpending(&pend) == 0 && sigismember(&pend, SIGXFSZ)) {
        struct timespec zero = {0, 0};
        (void)sigtimedwait(&xf, NULL, &zero);
    }
    errno = e;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

static int pwrite_all(at_output *o, const uint8_t *p, size_t len, uint64_t off)
{
    if (len && !fd_here(o))
        return -1;
    if (len && o->fd >= 0 && !still_ours(o)) {
        at_output_report(o, "cannot open the trace file again after the program closed or "
                            "replaced its descriptor: ", errno ? errno : EBADF);
        o->fd = -1;
        at_trace_fd = -1;
        return -1;
    }
    while (len) {
        if (o->fd < 0)
            return -1;
        ssize_t w = pwrite(o->fd, p, len, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            at_output_report(o, "write failed: ", errno);
            return -1;
        }
        if (w == 0) {
            at_output_report(o, "write failed: ", ENOSPC);
            return -1;
        }
        p += w;
        len -= (size_t)w;
        off += (uint64_t)w;
        atomic_fetch_add_explicit(&at_stat_bytes, (uint64_t)w, memory_order_relaxed);
    }
    return 0;
}
