/* trace.c: the session: start (output, ProcessInfo, flusher, now or at the first event that counts),
 * flush, stop, the emergency flush for fatal signals and _exit, fork handling and statistics. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "symrun.h"
#include "symrun_clr.h"
#include "xstate.h"

AT_TLS at_path_tls at_path_tls_v; /* at_common.h */

/* Not start code (shim/start.ld takes this object's .text into the start's whole) */
#define AT_COLD_RT __attribute__((cold, noinline))

char *at_command_line;
static _Atomic int sess_state AT_FORK_DATA; /* 0 none, 1 running, 2 stopping */
/* Set by the one thread that won sess_state in trace_start: a flag, not pthread_once (whose wake-up
 * is a system call at every traced image's start). */
static bool atfork_done AT_START_DATA;

static const at_field pi_fields[] = {
    {"CommandLine", NT_TYPE_STRING},
    {"OSInformation", NT_TYPE_STRING},
    {"ArchInformation", NT_TYPE_STRING},
};
static const at_event_desc pi_desc = {
    .provider = "Microsoft-DotNETCore-EventPipe",
    .event_id = 1,
    .name = "ProcessInfo",
    .version = 1,
    .level = NT_LEVEL_ALWAYS,
    .nfields = 3,
    .fields = pi_fields,
};

/* /proc/self/cmdline with the NULs between arguments turned into spaces, into a mapping of its own,
 * without malloc: the file of a session that waited for its first event is opened in whatever thread
 * records it (a signal handler, a hook). At most 64 KiB (the event keeps 30000 characters). */
static char *cmdline_mapped(void)
{
    static char *buf;
    static size_t cap;
    if (!buf) {
        size_t len = 64u << 10;
        buf = at_as_map("command line", &len, 4096, 0, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (!buf)
            return NULL;
        cap = len;
    }
    size_t len = 0;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        for (ssize_t n; len < cap - 1 && (n = read(fd, buf + len, cap - 1 - len)) > 0;)
            len += (size_t)n;
        close(fd);
    }
    while (len && buf[len - 1] == 0)
        len--;
    for (size_t i = 0; i < len; i++)
        if (buf[i] == 0)
            buf[i] = ' ';
    buf[len] = 0;
    return buf;
}

static bool cmdline_is_mapped AT_FORK_DATA; /* at_command_line is cmdline_mapped()'s: never freed */

/* A session whose file waits for its first event (at_trace_options.lazy) sets up the writer in two
 * steps there: its memory (the buffers, the serialiser's blocks, the symbol tables: mappings only)
 * before the event is written, and the file (command line, ProcessInfo) when it is opened. A fork
 * child inherits whichever step its parent had done. */
static bool writer_mem AT_FORK_DATA;
static bool writer_pi AT_FORK_DATA;
static bool sess_forked AT_FORK_DATA; /* this process began as a fork child of the session's */
static size_t sess_cap AT_START_DATA;

static int writer_mem_init(char *err, size_t errlen)
{
    if (writer_mem)
        return 0;
    at_clock_calibrate(); /* before any event's time is converted */
    if (at_pool_init(sess_cap, err, errlen) < 0)
        return -1;
    at_ntw_init();
    if (!at_ntw_ready()) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* no room for the symbol tables (a tight RLIMIT_AS, said by asroom.c): stacks stay addresses */
    if (at_symrun_on && at_symrun_init() < 0)
        at_symrun_on = false;
    writer_mem = true;
    return 0;
}

/* writer_mem_init for the first event that counts (any thread, maybe a hook: see child_begin) */
static void writer_mem_gate(void)
{
    char err[160];
    AT_INTERNAL_BEGIN();
    if (writer_mem_init(err, sizeof err) < 0)
        at_errmsg("no trace: ", err, 0);
    AT_INTERNAL_END();
}

/* ProcessInfo's command line (given, or the process's own) and the payload built from it */
static void writer_pi_init(const char *given)
{
    if (writer_pi)
        return;
    if (at_command_line && !cmdline_is_mapped)
        free(at_command_line);
    cmdline_is_mapped = !given;
    at_command_line = given ? strdup(given) : cmdline_mapped();
    at_ntw_init(); /* builds ProcessInfo's payload from it */
    writer_pi = true;
}

static _Atomic int child_stage AT_FORK_DATA;    /* buffers: 0 the parent's, 1 being reset, 2 ours */


AT_FORK_TEXT static void fork_prepare(void)
{
    /* a thread is setting up the buffers of a session that waited for its first event: a child
     * must not copy them half made (a few microseconds; bounded, should it be this very thread) */
    for (int i = 0; i < 10000 && atomic_load(&child_stage) == 1; i++)
        sched_yield();
    at_event_type_fork_prepare();
    if (atomic_load(&sess_state) == 1)
        at_fork_lock(&at_flush_lock); /* the child must not inherit a half-written flush */
}

AT_FORK_TEXT static void fork_parent(void)
{
    at_event_type_fork_parent();
    at_fork_unlock(&at_flush_lock);
}

/* A fork child's file and flusher wait for its first event: a child that records nothing (fork
 * then _exit, a worker that only computes) opens no file and starts no thread, which is most of what
 * a fork cost traced. A new image's session started lazily waits the same way (its "fork" is its
 * start: no ProcessForked, its file named as at the start, and its buffers mapped by the first
 * event that counts). Until then at_sess_active is AT_SESS_PENDING and the child has touched no
 * buffer: the parent's rings, chunks and file state are set aside by the first event that counts
 * (child_buffers), which writes ProcessForked (saved at the fork, at_trace_child_prologue) before
 * itself. An event that is quiet (at_trace_quiet) makes no file alone: before the first that counts
 * it is left out (the exit of a child that recorded nothing). The first event that is not quiet
 * opens the file, named as it would have been at the fork, and starts the flusher; the exit paths
 * open it themselves when something was recorded and no flusher runs. What the fork itself writes
 * here lies on the fork data page (AT_FORK_DATA). */
#define AT_SESS_PENDING 2
AT_TLS int at_trace_quiet;
AT_TLS bool at_trace_thread_done;
static _Atomic int child_claim AT_FORK_DATA;    /* a thread has taken the job of opening the file */
static _Atomic int child_recorded AT_FORK_DATA; /* an event that counts was written */
static uint64_t child_fork_ts AT_FORK_DATA;     /* the file's sync time: its first events are the fork's */
static struct {
    const at_event_type *type; /* NULL: none */
    at_guid activity;
    uint32_t len;
    uint8_t payload[16];
} child_prologue AT_FORK_DATA;

/* A new image's session that waits for its first event chooses its event clock there too: whether
 * the TSC can be trusted is a file read in sysfs, and the first clock read through the vDSO faults
 * its data pages in, about 100 us of a start under a hypervisor that an image recording nothing
 * never needs. Until then the start's times are taken by system calls (CLOCK_MONOTONIC ns, the file
 * time base) and converted to event ticks once the clock is chosen. */
static bool clock_deferred AT_START_DATA;
static enum at_clock_kind clock_want AT_START_DATA;
static uint64_t child_fork_ns AT_START_DATA; /* the start, while the clock is deferred */

static uint64_t raw_clock_ns(clockid_t id)
{
    struct timespec ts = {0, 0};
    at_raw_syscall3(SYS_clock_gettime, id, (long)&ts, 0);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The first event that counts (one thread; the others wait at the gate): the clock, its
 * calibration, and the start's time in its ticks, before any event is timed in it. */
static void clock_resolve(void)
{
    if (!clock_deferred)
        return;
    at_clock_select(clock_want);
    at_clock_calibrate();
    child_fork_ts = at_clock_ticks_at_ns(child_fork_ns);
    clock_deferred = false;
}

/* The session waits for its first event that counts from now (a fork child's, or a new image's that
 * starts lazily): nothing recorded, nothing claimed, the buffers not yet this process's. */
static inline __attribute__((always_inline)) void pending_arm_inline(void)
{
    if (AT_UNLIKELY(clock_deferred))
        child_fork_ns = raw_clock_ns(CLOCK_MONOTONIC);
    else
        child_fork_ts = at_ticks();
    child_prologue.type = NULL;
    atomic_store(&child_stage, 0);
    atomic_store(&child_claim, 0);
    atomic_store(&child_recorded, 0);
    atomic_store(&at_sess_active, AT_SESS_PENDING);
}
/* a fork child's copy on the fork page; an image's start runs its own inline (start code) */
AT_FORK_TEXT static void pending_arm(void)
{
    pending_arm_inline();
}

/* The writer's thread left its task to a thread the program makes under RLIMIT_NPROC
 * (at_trace_flusher_yield): nothing starts one again, the file is written by the program's threads
 * (a fork child starts anew). */
static bool writer_yielded AT_FORK_DATA;

AT_FORK_TEXT static void fork_child(void)
{
    at_event_type_fork_child();
    if (atomic_load(&sess_state) != 1)
        return;
    at_mutex_fork_reset(&at_flush_lock);
    at_tbuf_fork_child_thread();
    atomic_fetch_add(&at_sess_gen, 1); /* the parent's buffers are no thread's here */
    atomic_store(&at_stat_written, 0);
    atomic_store(&at_stat_dropped_io, 0);
    atomic_store(&at_stat_bytes, 0);
    atomic_store(&at_stat_files, 0);
    atomic_store(&at_drops_noring, 0);
    atomic_store(&at_drops_retired, 0);
    atomic_store(&at_drops_damaged, 0);
    at_flusher_forget();
    writer_yielded = false;
    at_lastthread_reset(); /* the child's first thread has not left (process.c watches it) */
    at_output_close_in_child();
    sess_forked = true;
    pending_arm();
}

AT_FORK_TEXT void at_trace_child_prologue(const at_event_type *t, const at_guid *activity,
                                          const void *payload, uint32_t len)
{
    if (atomic_load(&at_sess_active) != AT_SESS_PENDING || atomic_load(&child_stage) != 0 || !t ||
        len > sizeof child_prologue.payload)
        return;
    child_prologue.activity = activity ? *activity : (at_guid){0};
    child_prologue.len = len;
    for (uint32_t i = 0; i < len; i++) /* not libc's memcpy: a code page more for the child */
        child_prologue.payload[i] = ((const uint8_t *)payload)[i];
    child_prologue.type = t;
}

/* The first event that counts, before it is written (one thread; any other waits, a few
 * microseconds): none of the parent's buffered events, which are the parent's to write, and the
 * saved ProcessForked first in this thread's buffer, before a flusher exists that could write a
 * later event ahead of it. */
static void child_buffers(void)
{
    int expect = 0;
    if (!atomic_compare_exchange_strong(&child_stage, &expect, 1)) {
        while (atomic_load(&child_stage) != 2)
            sched_yield();
        return;
    }
    int e = errno;
    if (sess_forked) { /* the parent's descriptor, of a table this process does not have */
        at_out.fd = -1;
        at_out.fd_private = at_out.detached = false;
    }
    if (clock_deferred) /* libc code (strcmp): inside the extended-state guard */
        at_xs_call(clock_resolve);
    if (!writer_mem) {
        /* mappings and libc code: inside the extended-state guard, as child_begin */
        at_xs_call(writer_mem_gate);
        if (!writer_mem) {
            /* no buffers: the session ends (events are counted as dropped), as a failed start */
            atomic_store(&at_sess_active, 0);
            atomic_store(&child_stage, 2);
            errno = e;
            return;
        }
    } else {
        at_pool_reset_child();
    }
    at_rings_barrier_init(); /* a new address space is registered anew */
    errno = e;
    if (child_prologue.type && at_event_enabled(child_prologue.type)) /* read now, not at the fork */
        at_tbuf_put_saved(child_prologue.type, &child_prologue.activity, child_prologue.payload,
                          child_prologue.len, child_fork_ts);
    atomic_store(&child_stage, 2);
}

/* Under at_flush_lock, while pending: open the child's file (and start its flusher). On failure the
 * session ends, as a failed start would have. */
static int child_open(bool flusher)
{
    char err[256] = "";
    at_out.fd = -1; /* the parent's, closed at the fork */
    at_out.fd_private = at_out.detached = false;
    if (sess_forked) {
        at_out.child_suffix = true;
        at_out.exec_gen = 0; /* a new pid: its first image, whatever the parent's generation */
    }
    writer_pi_init(NULL);
    if (at_output_open_first(&at_out, err, sizeof err) < 0) {
        at_errmsg(sess_forked ? "fork child: no trace: " : "no trace: ", err, 0);
        atomic_store(&at_sess_active, 0);
        atomic_store(&sess_state, 0);
        at_output_close(&at_out);
        return -1;
    }
    atomic_store(&at_stat_files, 1);
    /* refused after the child entered a new pid namespace (no thread can be made there): its
     * events then stay in the buffers until exit, as when a paused flusher cannot come back.
     * Started first (it waits for the lock held here): ProcessInfo is written under its thread id,
     * which the symbol rundown's events number on from */
    if (flusher && !at_flusher_is_running())
        (void)at_flusher_start();
    /* the fork's time through a pair taken now, not extrapolated from the parent's last one */
    at_clock_mark();
    at_ntw_file_begin_first(at_clock_file_ts(child_fork_ts));
    return 0;
}

/* The caller may be a hook whose caller keeps values in any register the hook's own code leaves
 * alone: opening a file and starting a thread run libc code that uses vector registers, so it runs
 * inside the extended-state guard (xstate.h; once per process, one thread at a time by the claim). */
static void child_begin(void)
{
    int e = errno;
    AT_INTERNAL_BEGIN(); /* the file's open, reads and writes are the shim's own: no hook sees them */
    pthread_mutex_lock(&at_flush_lock);
    /* a writer thread with a table of its own opens the file (at_trace_file_wanted), so that no
     * number of the program's is taken for it even for a moment; without one, this thread does */
    bool writer = atomic_load(&at_sess_active) == AT_SESS_PENDING && !at_flusher_is_running() &&
                  !writer_yielded && at_flusher_start() == 0 && at_flusher_owns_table();
    pthread_mutex_unlock(&at_flush_lock);
    /* opened now all the same, with this thread's identity (a setuid may come next), and before
     * anything the caller does after (a system() whose child names its file after ours) */
    bool started = writer;
    if (writer && !at_flusher_request_open())
        writer = false;
    if (!writer) {
        /* a writer that went meanwhile (stopped to leave its task to a thread the program makes
         * under RLIMIT_NPROC) is not started again here */
        pthread_mutex_lock(&at_flush_lock);
        if (atomic_load(&at_sess_active) == AT_SESS_PENDING && child_open(!started && !writer_yielded) == 0)
            atomic_store(&at_sess_active, 1);
        pthread_mutex_unlock(&at_flush_lock);
        at_flusher_adopt();
    }
    AT_INTERNAL_END();
    errno = e;
}

AT_FORK_TEXT bool at_trace_keeps_quiet(void)
{
    return atomic_load(&at_sess_active) != AT_SESS_PENDING || atomic_load(&child_recorded);
}

AT_NOINLINE bool at_trace_child_gate(void)
{
    if (at_trace_quiet == 1)
        return atomic_load(&child_recorded) != 0;
    child_buffers();
    if (!atomic_load(&at_sess_active))
        return false; /* no buffers could be had */
    if (at_trace_quiet == 3)
        return true; /* kept for the file the first event that counts makes; none by itself */
    atomic_store(&child_recorded, 1);
    if (at_trace_thread_done && !at_flusher_is_running())
        return true; /* the exit path opens the file (or a live thread's next event does) */
    int expect = 0;
    if (at_trace_quiet == 0 && atomic_compare_exchange_strong(&child_claim, &expect, 1)) {
        /* a writer's thread is there (a start with hooks or samples, whose first event may come in
         * a signal handler): it opens the file, not the thread that recorded */
        if (at_flusher_is_running())
            at_flusher_wake();
        else
            at_xs_call(child_begin);
    }
    return true;
}

/* The flusher, under at_flush_lock: the file an event that counts asked for (at_trace_child_gate). */
AT_COLD_RT bool at_trace_file_wanted(void)
{
    return atomic_load_explicit(&at_sess_active, memory_order_relaxed) == AT_SESS_PENDING &&
           atomic_load(&child_recorded) && atomic_load(&child_stage) == 2;
}

/* Under at_flush_lock: a session still waiting for its first event opens its file now. */
void at_trace_open_pending_locked(void)
{
    if (atomic_load(&sess_state) == 1 && atomic_load(&at_sess_active) == AT_SESS_PENDING &&
        child_open(false) == 0)
        atomic_store(&at_sess_active, 1);
}

AT_COLD_RT void at_trace_file_open_locked(void)
{
    if (at_trace_file_wanted())
        at_trace_open_pending_locked();
}

/* The file waits for its first event that counts: buffers filling meanwhile are no reason to flush. */
bool at_trace_file_waits(void)
{
    return atomic_load_explicit(&at_sess_active, memory_order_relaxed) == AT_SESS_PENDING;
}

/* Exit paths, under at_flush_lock: true when there is a file to flush to (opening a pending child's
 * now, without a flusher, if it recorded anything). */
AT_FORK_TEXT static bool child_ready_for_exit(void)
{
    if (!writer_mem)
        return false; /* a session that waited for its first event and never had buffers */
    if (atomic_load(&at_sess_active) != AT_SESS_PENDING)
        return true;
    if (!atomic_load(&child_recorded) || child_open(false) < 0)
        return false;
    atomic_store(&at_sess_active, 1);
    return true;
}

bool at_trace_ready_locked(void) { return child_ready_for_exit(); }

static void released_wait(uint64_t tid);

/* Pausing the writer's thread (at_trace_flusher_pause): one caller at a time; a fork child, alone
 * in its process, starts with the lock free. */
static pthread_mutex_t pause_lock AT_FORK_DATA = PTHREAD_MUTEX_INITIALIZER;
static bool pause_restart AT_FORK_DATA;

AT_FORK_TEXT static void fork_child_pause(void)
{
    at_mutex_fork_reset(&pause_lock);
    if (pause_restart)
        pause_restart = false;
}

static void register_atfork(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    pthread_atfork(NULL, NULL, fork_child_pause);
}

/* a session has started before: the first finds at_out zero, its 12 KiB of pages untouched but for
 * what is set */
static bool out_used AT_START_DATA;

static int trace_start(const at_trace_options *o, char *errbuf, size_t errlen)
{
    char dummy[8];
    if (!errbuf || errlen == 0) {
        errbuf = dummy;
        errlen = sizeof dummy;
    }
    errbuf[0] = 0;
    if (!o || !o->path || !o->path[0]) {
        snprintf(errbuf, errlen, "no output path");
        return -1;
    }
    if (o->mode != AT_OUTPUT_FILE && o->mode != AT_OUTPUT_ROTATE && o->mode != AT_OUTPUT_CIRCULAR) {
        snprintf(errbuf, errlen, "unknown output mode %d", (int)o->mode);
        return -1;
    }
    if (strlen(o->path) >= sizeof at_out.pattern) {
        snprintf(errbuf, errlen, "output path is too long");
        return -1;
    }
    int expect = 0;
    if (!atomic_compare_exchange_strong(&sess_state, &expect, 1)) {
        snprintf(errbuf, errlen, "a trace session is already active");
        return -1;
    }
    at_tbuf_init_key();
    /* Under a finite RLIMIT_AS everything starts now, as without lazy: from main on, the program's
     * VmSize holds the buffers and the flusher's stack and plans with it (asroom.c); and a flusher
     * started from a program's thread that never allocated would give that thread a malloc arena
     * of its own (pthread_create allocates), 64 MiB of the program's room */
    bool lazy = o->lazy && !at_as_limited();
    clock_deferred = lazy && !out_used; /* a later session keeps the clock the first one chose */
    clock_want = o->clock;
    if (!clock_deferred)
        at_clock_select(o->clock);
    if (!atfork_done) {
        atfork_done = true;
        register_atfork();
    }
    if (!at_processinfo_type)
        at_processinfo_type = at_event_type_register(&pi_desc);
    at_symrun_on = !o->no_symbols;
    at_symrun_clr = o->symbols_methods;
    if (at_symrun_on && at_symrun_types() < 0)
        at_symrun_on = false;
    if (!at_processinfo_type) {
        snprintf(errbuf, errlen, "out of memory");
        goto fail;
    }
    sess_cap = o->buffer_cap;
    writer_mem = writer_pi = sess_forked = false;
    if (!lazy) {
        at_rings_barrier_init();
        if (writer_mem_init(errbuf, errlen) < 0)
            goto fail;
        writer_pi_init(o->command_line);
    }
    bool again = out_used;
    if (again)
        memset(&at_out, 0, sizeof at_out);
    out_used = true;
    strcpy(at_out.pattern, o->path);
    at_out.mode = o->mode;
    at_out.mode_size = o->mode_size;
    at_out.file_mode = o->file_mode;
    at_out.child_suffix = o->descendant;
    at_out.exec_gen = o->exec_generation;
    at_out.start_time_s = raw_clock_ns(CLOCK_REALTIME) / 1000000000u; /* not the vDSO: see above */
    at_output_manifest = o->manifest;
    at_flush_interval_ms = o->flush_interval_ms ? o->flush_interval_ms : 100;
    at_event_type_apply_filter(o->level, o->keywords);
    if (lazy) {
        /* the name is fixed now (the working directory, the start time); the file, the writer's
         * memory and the flusher wait for the first event that counts, as in a fork child */
        at_out.fd = -1;
        if (at_output_prepare(&at_out, errbuf, errlen) < 0)
            goto fail;
        atomic_store(&at_stat_files, 0);
        pthread_mutex_lock(&at_flush_lock);
        if (again) /* the first session finds it zero: its code is on the fork page */
            at_lastthread_reset();
        atomic_fetch_add(&at_sess_gen, 1);
        pending_arm_inline();
        pthread_mutex_unlock(&at_flush_lock);
        return 0;
    }
    if (o->defer_file) {
        /* everything but the file starts now; the flusher opens it at the first event that counts,
         * and a process that records none (a wrapper script that execs, a shell that forks) leaves
         * no file. The name is fixed now, as in a lazy start. */
        at_out.fd = -1;
        if (at_output_prepare(&at_out, errbuf, errlen) < 0)
            goto fail;
    } else if (at_output_open_first(&at_out, errbuf, errlen) < 0) {
        goto fail;
    }
    atomic_store(&at_stat_written, 0);
    atomic_store(&at_stat_dropped_io, 0);
    atomic_store(&at_stat_bytes, 0);
    atomic_store(&at_stat_files, o->defer_file ? 0 : 1);
    atomic_store(&at_drops_noring, 0);
    atomic_store(&at_drops_retired, 0);
    atomic_store(&at_drops_damaged, 0);

    pthread_mutex_lock(&at_flush_lock);
    at_lastthread_reset();
    if (at_flusher_start() < 0 && errno != EAGAIN) { /* EAGAIN: as in a fork child */
        pthread_mutex_unlock(&at_flush_lock);
        snprintf(errbuf, errlen, "cannot start the flusher thread: %s", strerror(errno));
        at_output_close(&at_out);
        goto fail;
    }
    if (o->defer_file) {
        atomic_fetch_add(&at_sess_gen, 1);
        pending_arm_inline();
        atomic_store(&child_stage, 2); /* the buffers are this process's already */
        pthread_mutex_unlock(&at_flush_lock);
        return 0;
    }
    if (at_ntw_file_begin(at_clock_file_now()) < 0) {
        pthread_mutex_unlock(&at_flush_lock);
        at_flusher_stop();
        snprintf(errbuf, errlen, "cannot write %s", at_out.path);
        at_output_close(&at_out);
        goto fail;
    }
    atomic_fetch_add(&at_sess_gen, 1);
    atomic_store(&at_sess_active, 1);
    pthread_mutex_unlock(&at_flush_lock);
    at_flusher_adopt(); /* the writer's table takes the file; the program's number is closed */
    return 0;
fail:
    atomic_store(&sess_state, 0);
    return -1;
}

int at_trace_start(const at_trace_options *o, char *errbuf, size_t errlen)
{
    AT_INTERNAL_BEGIN(); /* the file is opened, the command line read, the flusher started */
    int rc = trace_start(o, errbuf, errlen);
    AT_INTERNAL_END();
    return rc;
}

void at_trace_flush(void)
{
    if (atomic_load(&sess_state) != 1)
        return;
    AT_INTERNAL_BEGIN();
    /* a writer with a table of its own does it; otherwise this thread: a session still waiting
     * for its first event opens its file now, with no writer thread, when something was recorded
     * (an exec's event, just before the image goes) */
    if (!at_flusher_request_flush(false)) {
        pthread_mutex_lock(&at_flush_lock);
        if (child_ready_for_exit())
            at_flush_locked(false, false);
        pthread_mutex_unlock(&at_flush_lock);
    }
    AT_INTERNAL_END();
}

/* The last flush and the file's close, by a writer with a table of its own as it ends. */
static void final_locked(void)
{
    bool write = writer_mem && child_ready_for_exit();
    atomic_store(&at_sess_active, 0);
    if (write)
        at_flush_locked(false, true);
    at_output_close(&at_out);
    atomic_fetch_add(&at_sess_gen, 1);
}

void at_trace_stop(void)
{
    int expect = 1;
    if (!atomic_compare_exchange_strong(&sess_state, &expect, 2))
        return;
    /* a writer with a table of its own makes the last flush (asked only where there is a writer:
     * a process that recorded nothing runs none of the writer's code at its exit) */
    bool done = false;
    if (at_flusher_is_running()) {
        AT_INTERNAL_BEGIN();
        done = at_flusher_stop_final(final_locked);
        AT_INTERNAL_END();
    }
    if (done) {
        atomic_store(&sess_state, 0);
        return;
    }
    /* events from now on are dropped and counted; then everything published is written (a pending
     * fork child has no flusher that could hold the lock) */
    bool write = true;
    if (atomic_load(&at_sess_active) == AT_SESS_PENDING || !writer_mem) {
        AT_INTERNAL_BEGIN(); /* a file opened now is the shim's own work */
        pthread_mutex_lock(&at_flush_lock);
        /* no buffers: nothing recorded (read here, not on the fork page: a fault at every exit) */
        write = writer_mem && child_ready_for_exit();
        pthread_mutex_unlock(&at_flush_lock);
        AT_INTERNAL_END();
        if (!write && (atomic_load(&at_sess_active) == AT_SESS_PENDING || !writer_mem)) {
            /* a process that recorded nothing: no file; a writer's thread waiting for one goes */
            atomic_store(&at_sess_active, 0);
            if (at_flusher_is_running()) {
                AT_INTERNAL_BEGIN();
                at_flusher_stop();
                AT_INTERNAL_END();
            }
            atomic_store(&sess_state, 0);
            return;
        }
    }
    atomic_store(&at_sess_active, 0);
    AT_INTERNAL_BEGIN();
    at_flusher_stop();
    /* a flusher that did not stop may hold the lock for ever: exit waits a bounded time for it */
    int rc = 0;
    if (at_flusher_is_stuck()) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 5;
        rc = pthread_mutex_timedlock(&at_flush_lock, &dl);
    } else {
        pthread_mutex_lock(&at_flush_lock);
    }
    if (rc == 0) {
        if (write)
            at_flush_locked(false, true);
        at_output_close(&at_out);
        atomic_fetch_add(&at_sess_gen, 1);
        pthread_mutex_unlock(&at_flush_lock);
    }
    AT_INTERNAL_END();
    atomic_store(&sess_state, 0);
}

AT_FORK_TEXT void at_trace_emergency_flush(void)
{
    if (atomic_load(&sess_state) != 1)
        return;
    int saved = errno;
    AT_INTERNAL_BEGIN();
    /* a writer with a table of its own does it; otherwise this thread, bounded: about 200 ms if
     * another thread holds the lock, at once if this thread does */
    bool asked = at_flusher_request_emergency();
    for (int i = 0; i < 200 && !asked; i++) {
        int rc = pthread_mutex_trylock(&at_flush_lock);
        if (rc == 0) {
            if (child_ready_for_exit())
                at_flush_locked(false, true);
            pthread_mutex_unlock(&at_flush_lock);
            break;
        }
        if (rc == EDEADLK)
            break;
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
    AT_INTERNAL_END();
    errno = saved;
}

bool at_trace_active(void) { return atomic_load(&sess_state) == 1; }

const char *at_trace_path(void) { return atomic_load(&sess_state) == 1 ? at_out.path : NULL; }

void at_trace_get_stats(at_trace_stats *s)
{
    s->events_written = atomic_load(&at_stat_written);
    s->events_dropped = at_tbuf_total_drops() + atomic_load(&at_stat_dropped_io);
    s->bytes_written = atomic_load(&at_stat_bytes);
    s->files = atomic_load(&at_stat_files);
}

int at_trace_move_fd(void)
{
    AT_INTERNAL_BEGIN();
    pthread_mutex_lock(&at_flush_lock);
    int rc = at_output_move_fd(&at_out);
    pthread_mutex_unlock(&at_flush_lock);
    AT_INTERNAL_END();
    return rc;
}

void at_trace_flusher_pause(void)
{
    AT_INTERNAL_BEGIN();
    pthread_mutex_lock(&pause_lock);
    pthread_mutex_lock(&at_flush_lock); /* the flusher is between passes when this is held */
    pause_restart = atomic_load(&sess_state) == 1 && at_flusher_is_running();
    pthread_mutex_unlock(&at_flush_lock);
    if (pause_restart) {
        uint64_t tid = at_flusher_tid;
        at_flusher_stop(); /* joined: the process has one thread fewer until resume */
        /* gone from the thread group only once its descriptor table is closed, after the join */
        released_wait(tid);
        /* the file's descriptor went with the writer's table: opened again now, while the caller's
         * identity is still the one that may (a setuid to come); the next writer takes it over */
        pthread_mutex_lock(&at_flush_lock);
        if (at_out.detached && atomic_load(&at_sess_active) == 1)
            (void)at_output_reattach(&at_out);
        pthread_mutex_unlock(&at_flush_lock);
    }
    AT_INTERNAL_END();
}

void at_trace_exec_failed(void)
{
    if (atomic_load(&sess_state) != 1 || atomic_load(&at_sess_active) != 1)
        return;
    int e = errno;
    AT_INTERNAL_BEGIN();
    pthread_mutex_lock(&pause_lock); /* not while a pause holds the writer stopped */
    pthread_mutex_lock(&at_flush_lock);
    if (atomic_load(&sess_state) == 1 && !at_flusher_is_running())
        (void)at_flusher_start(); /* refused in a new pid namespace: the buffers wait for exit */
    pthread_mutex_unlock(&at_flush_lock);
    at_flusher_adopt();
    pthread_mutex_unlock(&pause_lock);
    AT_INTERNAL_END();
    errno = e;
}

void at_trace_flusher_resume(void)
{
    AT_INTERNAL_BEGIN();
    if (pause_restart) {
        pthread_mutex_lock(&at_flush_lock);
        /* a new thread takes the caller's credentials, capabilities and namespaces as they are now */
        /* refused after entering a new pid namespace (no thread can be made there): the events
         * stay in the buffers until exit (drops beyond them are counted in the file) */
        if (atomic_load(&sess_state) == 1 && !at_flusher_is_running())
            (void)at_flusher_start();
        pthread_mutex_unlock(&at_flush_lock);
        at_flusher_adopt();
        pause_restart = false;
    }
    pthread_mutex_unlock(&pause_lock);
    AT_INTERNAL_END();
}

/* The writer's thread, joined, is gone from the process once the kernel has released its task:
 * only then does it stop counting against RLIMIT_NPROC (its tid word is cleared, and the join
 * returns, a little before). Waits for its /proc entry to go, at most about a second; no wait where
 * /proc is not mounted. */
static void released_wait(uint64_t tid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%llu", (unsigned long long)tid);
    struct stat st;
    if (!tid || stat("/proc/self/task", &st) != 0)
        return;
    for (int i = 0; i < 2000 && stat(path, &st) == 0; i++) {
        struct timespec d = {0, 500000};
        nanosleep(&d, NULL);
    }
}

bool at_trace_flusher_yield(void)
{
    int e = errno;
    pthread_mutex_lock(&pause_lock);
    pthread_mutex_lock(&at_flush_lock);
    bool run = atomic_load(&sess_state) == 1 && at_flusher_is_running();
    pthread_mutex_unlock(&at_flush_lock);
    uint64_t tid = at_flusher_tid;
    if (run) {
        writer_yielded = true;
        at_flusher_stop();
        AT_INTERNAL_BEGIN(); /* stat and nanosleep may be hooked functions */
        released_wait(tid);
        AT_INTERNAL_END();
    }
    pthread_mutex_unlock(&pause_lock);
    errno = e;
    return run;
}

size_t at_trace_output_dir(char *out, size_t n)
{
    size_t len = at_out.rel_dir_len, k = 0;
    if (!len || len >= sizeof at_out.pattern)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (k + 1 >= n)
            return 0;
        out[k++] = at_out.pattern[i];
        if (at_out.pattern[i] == '%' && i + 1 < len && at_out.pattern[i + 1] == '%')
            i++; /* '%' was doubled for the pattern */
    }
    out[k] = 0;
    return k;
}

bool at_trace_pid_named(void)
{
    if (atomic_load(&sess_state) == 1 && atomic_load(&at_sess_active) == AT_SESS_PENDING &&
        !sess_forked && at_out.fd < 0)
        return at_output_name_held(&at_out); /* the decision the open will make */
    return at_out.child_suffix;
}

/* The pattern names the pid (%p, not %%p): no other process can take our name. */
static bool pattern_has_pid(const char *p)
{
    for (; *p; p++)
        if (*p == '%' && (*++p == 'p' || !*p))
            return *p == 'p';
    return false;
}

static void open_pending(void)
{
    child_buffers();
    if (atomic_load(&at_sess_active) != AT_SESS_PENDING)
        return;
    int expect = 0;
    if (atomic_compare_exchange_strong(&child_claim, &expect, 1))
        at_xs_call(child_begin);
}

void at_trace_open_now(void)
{
    if (atomic_load(&sess_state) != 1 || atomic_load(&at_sess_active) != AT_SESS_PENDING ||
        sess_forked || at_out.child_suffix || pattern_has_pid(at_out.pattern))
        return;
    open_pending();
}

AT_COLD_RT static void writer_thread_now(void)
{
    AT_INTERNAL_BEGIN();
    pthread_mutex_lock(&at_flush_lock);
    if (atomic_load(&at_sess_active) == AT_SESS_PENDING && !at_flusher_is_running() && !writer_yielded)
        (void)at_flusher_start(); /* refused: the file is opened by whoever records first */
    pthread_mutex_unlock(&at_flush_lock);
    AT_INTERNAL_END();
}

AT_COLD_RT int at_trace_writer_threads(void) { return at_flusher_is_running() ? 1 : 0; }

AT_COLD_RT void at_trace_writer_now(void)
{
    if (atomic_load_explicit(&at_sess_active, memory_order_relaxed) != AT_SESS_PENDING ||
        atomic_load(&sess_state) != 1 || at_flusher_is_running() || at_trace_thread_done)
        return;
    int e = errno;
    child_buffers();
    if (atomic_load(&at_sess_active) == AT_SESS_PENDING)
        at_xs_call(writer_thread_now);
    errno = e;
}
