/* trace.h: the event model and the nettrace writer's API (runtime/).
 *
 * A trace session owns one output (file, rotating files or a circular set of segment files). Threads
 * write events into their own buffers (no lock, no syscall, no allocation, async-signal-safe); a
 * background flusher merges the buffers in timestamp order into nettrace V5 blocks. After every flush
 * the file on disk is complete (ends with the end-of-stream tag), so a SIGKILLed process leaves a
 * readable file. See ../shared/nettrace-v5.md for every byte. */
#ifndef AT_TRACE_H
#define AT_TRACE_H

#include <signal.h>
#include <stdatomic.h>

#include "at_common.h"
#include "asroom.h"
#include "nt_format.h"

/* One payload field of an event type. type is an NT_TYPE_* code (int32/uint32/int64/uint64/double/
 * Guid/String at least; String payloads are UTF-16LE NUL-terminated as nettrace requires). */
typedef struct at_field {
    const char *name;
    uint32_t type;
} at_field;

typedef struct at_event_desc {
    const char *provider; /* provider name; readers derive the GUID from it (EventSource name hash) */
    uint32_t event_id;    /* 0: the next free id of that provider, starting at 1 (unless id_given) */
    bool id_given;        /* event_id as it is, 0 included (another writer's event, such as the
                           * .NET runtime's SampleProfiler ThreadSample, id 0) */
    const char *name;     /* e.g. "RequestStart" */
    uint8_t version;
    uint8_t level;        /* NT_LEVEL_* */
    uint8_t opcode;       /* NT_OPCODE_*; written as the V5 OpCode tag when non-zero */
    uint64_t keywords;
    uint32_t nfields;
    const at_field *fields;
} at_event_desc;

/* Opaque. Its first member is this head, so the enabled test is one load and a branch. */
typedef struct at_event_type at_event_type;
struct at_event_type_head {
    volatile uint8_t enabled; /* level/keyword filter of the session applied; 0 = filtered out */
};

static inline bool at_event_enabled(const at_event_type *t)
{
    return ((const struct at_event_type_head *)t)->enabled != 0;
}

/* Register an event type. Thread-safe; allocates (not for the hot path). The pointer stays valid for
 * the life of the process; registering the same (provider, name, version) twice returns the same type.
 * Metadata goes into the file lazily, before the first event of the type, with an id never reused.
 * May be called before at_trace_start. Returns NULL (and sets errno) on invalid input. */
at_event_type *at_event_type_register(const at_event_desc *d);
/* The types registered from now on keep the struct a hot path reads (not their names and metadata)
 * in [p, p + n) while it has room: zeroed memory the caller gives for the life of the process (the
 * hook logic's, beside its rules, so that a hooked call's event reads no page more for its type).
 * NULL, 0: back to the registry's own blocks. */
void at_event_type_hot_region(void *p, size_t n);

/* Write one event into the calling thread's buffer. Hot path: no lock, no syscall, no allocation,
 * async-signal-safe. activity/related may be NULL (all-zero id). payload is the raw nettrace payload
 * (little-endian fields in declaration order). ips: stack, leaf first, interned by the flusher;
 * nips may be 0. Returns 0, or -1 when the event was dropped (buffer full / cap reached / no session):
 * drops are counted and the per-thread sequence number still advances, so readers see the gap. */
int at_event_write(const at_event_type *t, const at_guid *activity, const at_guid *related,
                   const void *payload, uint32_t payload_len, const uintptr_t *ips, uint32_t nips);
/* The same with a payload of 8 bytes (head8) followed by payload[payload_len]: an activity event's
 * id value and its captured fields, without a copy into a buffer first. */
int at_event_write_head(const at_event_type *t, const at_guid *activity, const at_guid *related,
                        uint64_t head8, const void *payload, uint32_t payload_len,
                        const uintptr_t *ips, uint32_t nips);
/* at_event_write_head without a stack (t not NULL): the hot path of an activity's Start and Stop. */
int at_event_write_act(const at_event_type *t, const at_guid *activity, const at_guid *related,
                       uint64_t head8, const void *payload, uint32_t payload_len);
/* The same with the clock read inside, not before floor; ordered: the read waits for the loads
 * before it (an event that follows what another thread published). */
int at_event_write_now(uint64_t floor, bool ordered, const at_event_type *t, const at_guid *activity,
                       const at_guid *related, const void *payload, uint32_t payload_len,
                       const uintptr_t *ips, uint32_t nips);
/* The same, with the timestamp the event gets also written into its payload at byte offset stamp
 * (8 bytes; -1: nowhere): an id that is the event's time. */
int at_event_write_stamped(uint64_t floor, bool ordered, const at_event_type *t,
                           const at_guid *activity, const at_guid *related, const void *payload,
                           uint32_t payload_len, int stamp);
int at_event_write_stamped_ips(uint64_t floor, bool ordered, const at_event_type *t,
                               const at_guid *activity, const at_guid *related,
                               const void *payload, uint32_t payload_len, const uintptr_t *ips,
                               uint32_t nips, int stamp);
/* The same with a timestamp taken by the caller (at_ticks()); ts must not go backwards per thread.
 * The flusher's ordering guarantee covers clock reads made inside the writer: an event whose
 * timestamp is older than what was flushed already is written unsorted. */
/* An event the caller cannot record (a hooked call with no room to be traced): counted as dropped,
 * and its sequence number makes a gap readers see, as for a dropped write. */
void at_event_lost(void);
int at_event_write_ts(uint64_t ts, const at_event_type *t, const at_guid *activity,
                      const at_guid *related, const void *payload, uint32_t payload_len,
                      const uintptr_t *ips, uint32_t nips);
/* Stacks by reference (tbuf.c). A stack array whose first word is a marker (never an address of
 * user space) is one of the calling thread's earlier stacks: AT_STKREF_USE names it alone, one
 * word; AT_STKREF_DEF before up to AT_STKREF_MAX frames defines it. A marker holds a tag (one of
 * AT_STKREF_TAGS) at bit 32 and the definition's number (the process's) in its low 32 bits. */
#define AT_STKREF_TAGS 8u
#define AT_STKREF_MAX 64u
#define AT_STKREF_DEF 0xFFFD000000000000ull
#define AT_STKREF_USE 0xFFFE000000000000ull
static inline bool at_stkref_marker(uint64_t w)
{
    return w >= AT_STKREF_DEF;
}
/* For a stack of frames from the kept walk `walk` (at_stack_capture_from_kept), with leaf and depth
 * the rest of what made them: the USE marker of the thread's definition of it, or 0 (none usable:
 * the caller writes the frames, with a DEF marker from at_stkref_def before them when it gives one). */
uint64_t at_stkref_use(uint64_t walk, uintptr_t leaf, uint32_t depth);
uint64_t at_stkref_def(uint64_t walk, uintptr_t leaf, uint32_t depth, uint32_t nframes);

/* The end of a thread with at_thread_managed set: its buffer goes to the flusher now (what the
 * thread key's destructor does for other threads). Events written after it take a new buffer. */
void at_tbuf_thread_exit(void);
/* The calling thread is inside a write of its own (a signal handler's event now would be dropped). */
bool at_trace_thread_writing(void);
/* The timestamp the calling thread's last written event got (a caller's ts is raised to keep each
 * thread's events in order). */
uint64_t at_event_last_ts(void);

/* --- payload building (a bounded cursor over a caller's buffer) --- */
typedef struct at_payload {
    uint8_t *p;
    uint8_t *end;
    bool overflow; /* set when a field did not fit; the payload is then truncated at a field boundary */
} at_payload;

static inline void at_payload_init(at_payload *pl, void *buf, size_t cap)
{
    pl->p = (uint8_t *)buf;
    pl->end = (uint8_t *)buf + cap;
    pl->overflow = false;
}
/* n bytes of v as the next field, or overflow set and nothing written when they do not fit (or an
 * earlier field did not): inline, for the callers that write a few words per event */
static inline void at_payload_put(at_payload *pl, const void *v, size_t n)
{
    if (pl->overflow || (size_t)(pl->end - pl->p) < n) {
        pl->overflow = true;
        return;
    }
    __builtin_memcpy(pl->p, v, n); /* x86-64 is little-endian: the native layout is the wire one */
    pl->p += n;
}
void at_payload_u32(at_payload *pl, uint32_t v);
void at_payload_u64(at_payload *pl, uint64_t v);
void at_payload_i32(at_payload *pl, int32_t v);
void at_payload_i64(at_payload *pl, int64_t v);
/* A double is its 8 bytes, as a u64 of the same bits: the runtime is built without vector registers
 * (runtime/xstate.h), so the double stays in the caller's code. */
static inline void at_payload_double(at_payload *pl, double v)
{
    uint64_t b;
    __builtin_memcpy(&b, &v, 8);
    at_payload_u64(pl, b);
}
void at_payload_guid(at_payload *pl, const at_guid *g);
/* UTF-8 in, UTF-16LE + NUL out, at most max_chars code units copied (invalid UTF-8 -> U+FFFD);
 * s == NULL writes an empty string. */
void at_payload_str(at_payload *pl, const char *s, size_t max_chars);
/* The same for a string the caller does not own (a captured argument): read without ever faulting
 * (saferead.h), at most AT_PAYLOAD_STR_BYTES bytes of it. Where the memory is unreadable (the
 * address is not a string at all, or the string runs into an unmapped page) the field holds what
 * could be read, then U+FFFF (AT_PAYLOAD_UNREADABLE: never part of a captured string, whose U+FFFF
 * become U+FFFD) and the note "<unreadable 0xADDR>" naming the first unreadable byte
 * ("<unchecked 0xADDR>" where a seccomp filter forbids the kernel copy, see saferead.h). */
void at_payload_str_safe(at_payload *pl, const char *s, size_t max_chars);
#define AT_PAYLOAD_UNREADABLE 0xFFFFu
#define AT_PAYLOAD_STR_BYTES 1024u

/* --- the session --- */
enum at_output_mode {
    AT_OUTPUT_FILE = 0,     /* one file */
    AT_OUTPUT_ROTATE = 1,   /* a new complete file each time one reaches mode_size bytes */
    AT_OUTPUT_CIRCULAR = 2, /* a ring of complete segment files holding the last mode_size bytes */
};

/* The event clock (clock.c). */
enum at_clock_kind {
    AT_CLOCK_AUTO = 0,      /* the TSC when trusted (see clock.c), else CLOCK_MONOTONIC */
    AT_CLOCK_MONOTONIC = 1, /* ticks are CLOCK_MONOTONIC ns, frequency 1e9 */
    AT_CLOCK_TSC = 2,       /* ticks are the TSC, frequency calibrated */
};

typedef struct at_trace_options {
    const char *path;          /* pattern: %p = pid, %t = start time (YYYYMMDD-HHMMSS), %% = % */
    enum at_output_mode mode;
    uint64_t mode_size;        /* bytes, for ROTATE and CIRCULAR */
    size_t buffer_cap;         /* total bytes of all thread buffers; 0 = default */
    unsigned flush_interval_ms;/* 0 = default (100) */
    uint8_t level;             /* events above this level are filtered out; 0 = everything */
    uint64_t keywords;         /* 0 = everything; else an event passes if it has no keywords or shares one */
    const char *command_line;  /* for the ProcessInfo event; NULL = read /proc/self/cmdline */
    enum at_clock_kind clock;  /* AT_CLOCK_AUTO: the TSC when it can be trusted */
    bool no_symbols;           /* true: no Universal.System symbol rundown (ProcessMapping/ProcessSymbol
                                  events naming the stacks' addresses). Note that PerfView shows a file
                                  with these events in its "universal" views only (no "Thread Time (with
                                  StartStop Activities)") */
    bool symbols_methods;      /* with symbols: name them through the .NET runtime's ModuleLoad and
                                  MethodLoadVerbose events instead (symrun_clr.c): no Universal.System
                                  event, so PerfView keeps the activity view */
    unsigned exec_generation;  /* how many execs of this pid came before this image: n > 0 names the
                                  file "-exec<n>" before the extension (a fork child restarts at 0) */
    bool descendant;           /* a process below the one the trace began in (a fork child, or a later
                                  image of one): a pattern without %p gets "-<pid>" too */
    unsigned file_mode;        /* permissions of the trace files, applied whatever the umask; 0 = 0600 */
    bool lazy;                 /* the file, the flusher and the buffers wait for the first event that
                                  counts (see at_trace_quiet), as a fork child's do: a process that
                                  records nothing writes no file and starts no thread */
    bool defer_file;           /* without lazy: the buffers and the flusher start now, the file waits
                                  for the first event that counts, which the flusher then opens (the
                                  event may come in a signal handler); none without one */
    const char *manifest;      /* a file to which the path of each trace file created (by this process
                                  and its fork children) is appended, one line each; NULL: none */
} at_trace_options;

/* Start the session: open the output, write header and ProcessInfo, start the flusher thread.
 * Returns 0, or -1 with a message in errbuf. Only one session per process. */
int at_trace_start(const at_trace_options *o, char *errbuf, size_t errlen);
/* The writer's thread counts against the program's RLIMIT_NPROC (and takes a stack): when a
 * program's thread or process creation failed with EAGAIN, the shim stops it for good (events then
 * wait in the buffers for exit; what does not fit is dropped and counted) and the call is tried
 * again, once the kernel has released the thread. true when there was a flusher to stop. */
bool at_trace_flusher_yield(void);
/* Make everything written so far (by every thread) durable in the file; returns when done.
 * Not for signal handlers. */
void at_trace_flush(void);
/* After an exec that failed (the program goes on): the writer's thread, if the exec's event opened
 * the file of a session that waited for its first event (at_trace_flush opens it with none). */
void at_trace_exec_failed(void);
/* Final flush and close (idempotent). Normal exit paths call this. */
void at_trace_stop(void);
/* Best-effort flush from a fatal-signal handler or _exit: async-signal-safe, never blocks forever. */
void at_trace_emergency_flush(void);
bool at_trace_active(void);
/* The path of the file currently being written (NULL if none). */
const char *at_trace_path(void);
/* The trace file's descriptor (-1: none): the preload library keeps it out of the program's closes.
 * at_trace_move_fd puts the file on another descriptor (far from the low numbers) and leaves the
 * old one open for a dup2 the program is about to make onto it; 0 or -1. */
extern int at_trace_fd;
int at_trace_move_fd(void);
/* fd moved to a high number, close-on-exec (the writer's and the shim's own descriptors), or fd
 * itself when that cannot be done. */
int at_fd_move_high(int fd);
/* ACTTRACE_WRITER_TABLE=shared: the writer thread keeps the program's descriptor table (its files
 * on high numbers, guarded), as where the kernel refuses it one of its own. Set before a start. */
extern bool at_writer_table_shared;
/* For calls the kernel or glibc apply to every thread of the process or refuse to a multithreaded
 * one (setuid and the like through glibc's broadcast, which aborts when one thread's result differs
 * from another's, as it does when capset raised the caller's capabilities alone; unshare of a user
 * namespace, setns): the writer's thread is stopped and joined before, and started again after,
 * when it then takes the caller's credentials, capabilities and namespaces. One caller at a time. */
/* The file of this process carries its pid though the pattern has no %p (a fork child, a process
 * another traced one started, or one that found a live process writing the plain name). */
bool at_trace_pid_named(void);
/* The folder a relative output pattern was resolved against at the session's start, into out
 * (NUL-terminated): its length, or 0 when the pattern was absolute (or is too long for out). No
 * call, no write: safe in a vfork child. */
size_t at_trace_output_dir(char *out, size_t n);
/* A lazy session whose file is not open yet opens it now (with its flusher), named as at the start:
 * before the program starts a child that carries nothing of ours (system(), popen()) and would
 * otherwise take the plain name first. */
void at_trace_open_now(void);
/* A session whose file waits for its first event that counts gets its buffers and its writer's
 * thread now (the file still waits), for a caller about to start a thread whose ThreadBegin would
 * otherwise map them and start the writer there: see shim/thread.c. One load when there is nothing
 * to start. */
void at_trace_writer_now(void);
/* The threads of the writer's in the process now (0 or 1), for a caller counting the program's. */
int at_trace_writer_threads(void);
void at_trace_flusher_pause(void);
void at_trace_flusher_resume(void);

/* The process's first thread is leaving (pthread_exit, thrd_exit, cancellation) with mask as its
 * signal mask. glibc ends a process with exit(0) when its last thread ends, and counts the flusher
 * among them: from now on the flusher does it, once no thread but itself is alive (lastthread.c).
 * at_trace_thread_ending: a program thread is about to end (one load while the first is alive).
 * Both async-signal-safe. */
void at_trace_exit_with_last_thread(const sigset_t *mask);
void at_trace_thread_ending_slow(void);
extern _Atomic int at_last_thread_watch;
static inline void at_trace_thread_ending(void)
{
    if (AT_UNLIKELY(atomic_load_explicit(&at_last_thread_watch, memory_order_relaxed)))
        at_trace_thread_ending_slow();
}

/* fork handling (the runtime registers these itself with pthread_atfork in at_trace_start): the child
 * gets its own file named from the pattern with its own pid (a pattern without %p gets "-<pid>" added
 * before the extension) and no exec generation (the child is the first image of its pid), its own
 * flusher, and none of the parent's buffered events. The file and the flusher wait for the child's
 * first event that is not quiet: set at_trace_quiet around an event the shim writes on the child's
 * behalf, 1 for one that alone does not make a file and is left out before one that does
 * (ProcessForked, the exit), 2 for one that does but must start no thread (a fatal signal: the
 * emergency flush then opens the file itself), 3 for one kept in the buffers that alone makes no
 * file (ThreadBegin/ThreadEnd: written with the first event that counts, dropped with the buffers
 * when none comes). */
extern AT_TLS int at_trace_quiet;
/* Set by the shim on a thread whose program part is over (its start routine returned, pthread_exit,
 * the process's first thread left): glibc no longer counts it, and when it was the last it goes on
 * into exit(0). A writer's thread started from there would be counted alone and end the process
 * again when it stops, so a file the thread's events ask for is opened by the exit path instead. */
extern AT_TLS bool at_trace_thread_done;
/* In a fork child, at the fork: the event that opens the child's part (ProcessForked, at most 16
 * bytes of payload), written with the fork's time before the child's first event that counts (if
 * enabled then), and never if there is none. */
/* false in a fork child that has recorded nothing: a quiet event would be left out */
bool at_trace_keeps_quiet(void);
void at_trace_child_prologue(const at_event_type *t, const at_guid *activity, const void *payload,
                             uint32_t len);

typedef struct at_trace_stats {
    uint64_t events_written; /* reached the file */
    uint64_t events_dropped; /* buffer full / cap */
    uint64_t bytes_written;
    uint64_t files;          /* files opened (rotation / circular segments) */
} at_trace_stats;
void at_trace_get_stats(at_trace_stats *s);

#endif
