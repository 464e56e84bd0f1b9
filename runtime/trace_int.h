/* trace_int.h: state shared by the writer's files (runtime/): the per-thread chunk buffers, the event
 * type registry, the block serialiser and the output. Not a contract: only trace.h is. */
#ifndef AT_TRACE_INT_H
#define AT_TRACE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include "trace.h"
#include "clock.h"

/* ---- event types (event_type.c) ---- */
#define AT_MAX_TYPES 65536

struct at_event_type {
    struct at_event_type_head head; /* first member: at_event_enabled() reads it */
    uint32_t index;                 /* 1-based; also the metadata id in every file, never reused */
    uint32_t event_id;
    uint8_t level;
    uint64_t keywords;
    char *provider, *name;
    uint8_t version;
    uint8_t *meta;                  /* encoded V5 metadata payload (id + provider + ... + tags) */
    uint32_t meta_len;
    uint32_t file_gen;              /* flusher only: file generation its metadata was written to */
    uint32_t meta_part;             /* flusher only: the file part that holds it (a part whose write
                                     * failed is cut off: its metadata must be written again) */
};

extern _Atomic uint32_t at_ntypes;
/* The registry (event_type.c): index -> type; NULL for 0 and for indexes not registered yet. The
 * table a start fills lies on the start data page; it moves to a full-size one past its size. */
extern at_event_type **at_types_tab;
static inline at_event_type *at_type_at(uint32_t i)
{
    if (i > atomic_load_explicit(&at_ntypes, memory_order_acquire))
        return NULL;
    return __atomic_load_n(&at_types_tab, __ATOMIC_ACQUIRE)[i];
}
/* Recompute every type's enabled flag for a level/keyword filter. */
void at_event_type_apply_filter(uint8_t level, uint64_t keywords);
/* The registry's own memory (event types, activity kinds): zeroed, never freed, not the program's
 * malloc. NULL when out of memory. */
void *at_reg_alloc(size_t n);
char *at_reg_strdup(const char *s);
void at_event_type_fork_prepare(void);
void at_event_type_fork_parent(void);
void at_event_type_fork_child(void);

/* ---- per-thread buffers (tbuf.c) ---- */
/* A record in a thread's buffer: this header, then [activity 16][related 16][ips nips*8][payload],
 * padded to 8 bytes. Records never straddle chunks. 24 bytes, not 32: a flow hop writes two records
 * and reads them back on another core, so every line counts (type indexes, payload lengths and
 * frame counts all fit 16 bits: the asserts below and in tbuf.c). */
typedef struct at_rec {
    uint32_t size;
    uint16_t type_index;
    uint16_t flags; /* AT_REC_ACT, AT_REC_REL */
    uint64_t ts;
    uint32_t seq;
    uint16_t payload_len;
    uint16_t nips;
} at_rec;
_Static_assert(sizeof(at_rec) == 24, "a record header is 24 bytes");
_Static_assert(AT_MAX_TYPES - 1 <= UINT16_MAX, "type indexes fit at_rec.type_index");
#define AT_REC_ACT 1u
#define AT_REC_REL 2u
/* flags' upper 14 bits: the CPU the event was recorded on (AT_REC_CPU_NONE: unknown) */
#define AT_REC_CPU_SHIFT 2
#define AT_REC_CPU_NONE 0x3FFFu
/* The capture processor of a record as the file writes it (0xFFFFFFFF: unknown). */
static inline uint32_t at_rec_cpu(const at_rec *r)
{
    uint32_t c = (uint32_t)r->flags >> AT_REC_CPU_SHIFT;
    return c == AT_REC_CPU_NONE ? 0xFFFFFFFFu : c;
}
/* type_index of an owner record: a ring changed hands (tbuf.c, ring_acquire); payload: the new
 * owner's tid (8 bytes). The flusher consumes it; it is not an event. Event types start at 1. */
#define AT_REC_OWNER_TYPE 0u

/* Buffer memory is a pool of fixed-size chunks; a thread's buffer is a chain of chunks. The owner
 * appends records and publishes them with a release store of `used`; it links the next chunk with a
 * release store of `next` only after its last record in this chunk is published. */
#define AT_CHUNK_SIZE (64u << 10)
#define AT_CHUNK_HDR 64u
typedef struct at_chunk {
    _Atomic uint32_t used; /* bytes from the chunk start that hold published records: final once
                            * next is linked; before that the ring's wpub may say more */
    _Atomic int32_t next;  /* index of the next chunk of the same thread, -1 while this is current */
} at_chunk;

enum { AT_RING_FREE = 0, AT_RING_USED = 1, AT_RING_RETIRED = 2 };

#define AT_PENDING_CLOCK UINT64_MAX
#define AT_WAIT_ANNOUNCE UINT64_MAX
#define AT_WAIT_LATE (1ull << 63)
/* How long the flusher holds its horizon for a thread's wait (at_rings_horizon): a wait that lasts
 * longer gets, in the file, a Suspend at the horizon the flusher reached (its BlockedNs exact). */
#define AT_WAIT_HOLD_NS 1000000000ull

typedef struct at_ring {
    /* written by the owning thread */
    int32_t wchunk;            /* current chunk (-1: none yet) */
    uint32_t wpos;
    _Atomic uint32_t seq_pub;  /* last sequence number the thread used (written or dropped) */
    _Atomic uint64_t drops;
    uint64_t tid;              /* the ring's first owner (later ones: owner records) */
    uint64_t hand_ts;          /* the last owner's last timestamp, when it handed the ring over */
    uint8_t warm_seen;         /* owned by whoever popped it from the warm stack (tbuf.c) */
    uint8_t inited;            /* the fields below were set once (a ring never used is still the
                                * mapping's zeros: its first owner sets them) */
    uint32_t stkref_busy;      /* the owner is updating stkref (a signal handler writes in full) */
    _Atomic uint32_t stkref_epoch; /* the flusher met a reference it could not resolve: every
                                    * definition made before is void (tbuf.c) */
    /* The owner is writing an event whose clock read the flusher may not have seen published:
     * 0 none, AT_PENDING_CLOCK about to read the clock, else the timestamp read (tbuf.c) */
    _Atomic uint64_t pending;
    /* What the owner has published of its current chunk, (wchunk + 1) << 32 | wpos, stored after
     * each record (0: nothing yet). On the ring's page, which every event reads anyway, where the
     * chunk's own `used` is on the chunk's first line, a page away from most records (it is
     * written when the owner leaves the chunk, and is final then: at_ring_chunk_used). A line of
     * its own: the flusher reads it, and reading the owner's line above would take that away
     * from the owner between its stores. */
    _Atomic uint64_t wpub __attribute__((aligned(64)));
    /* The owner is in a call that may block (shim/waits.c), since this time (at_ticks): the flusher
     * goes no further than it while the wait is young, so the wait's Suspend, written when the call
     * returns, is never older than what was written. 0: none; AT_WAIT_ANNOUNCE: about to read the
     * clock; AT_WAIT_LATE | t: the wait grew old and the flusher went on, up to at most t (tbuf.c
     * at_tbuf_wait_end, at_rings_horizon). On wpub's line: written by the owner, read by the
     * flusher. */
    _Atomic uint64_t wait_since;
    char pad1[48];
    /* written by the owning thread: the stacks its records defined (tbuf.c, stacks by reference),
     * on the page of the ring every event reads */
    struct at_stkref_ent {
        uint64_t walk; /* 0: empty */
        uintptr_t leaf;
        uint32_t depth, gen, sess;
        uint32_t written; /* the definition's record is in the ring */
        uint32_t epoch;   /* stkref_epoch when it was made */
    } stkref[8];
    /* written by the flusher */
    _Atomic uint32_t state;
    int32_t rchunk;            /* chunk being read (-1: the owner has none yet) */
    uint32_t rpos;
    uint32_t rused;            /* `used` of rchunk as last read */
    uint32_t rused_pass;       /* the flush pass that read it (once per pass while the writer writes) */
    uint32_t last_seq;         /* seq of the last record written to the file */
    _Atomic int32_t first;     /* owner -> flusher: the first chunk, set once */
    uint64_t rtid;             /* tid, copied when first is taken and from owner records: the
                                * flusher reads it per record, and reading the writer's line then
                                * would take it away from the writer at each event */
    uint32_t rowners;          /* owner records consumed (at_ring_sp_seq: did the owner change?) */
    uint32_t rseq_base;        /* the file's numbers for the current owner: its own plus this (the
                                * last number of an ended thread whose id it took, flusher.c) */
    /* The record peeked, copied after checking it: a ring two writers share (a clone(CLONE_VM)
     * child runs with its parent's thread-local storage, hence its ring) may change under the
     * reader, which then still reads within the chunk what the copy says. */
    at_rec rcopy;
    const uint8_t *rbody;
    uint64_t rlast_ts;         /* timestamp of the last record taken (a thread's never go back) */
    struct at_stkmap *stkmap;  /* the stacks its records defined (ntw_block.c), NULL: none yet */
    char pad2[64];
} at_ring;

#define AT_MAX_THREADS 4096u

typedef struct at_pool {
    uint8_t *chunks;
    uint32_t nchunks;
    uint32_t *free_next;
    _Atomic uint64_t free_head; /* tag << 32 | (index + 1); 0 index part = empty */
    _Atomic int32_t nfree;
    _Atomic uint32_t fresh;     /* chunks from here up were never handed out (tbuf.c: fresh_take) */
    at_ring *rings;             /* AT_MAX_THREADS */
    uint32_t nrings;
    /* One past the highest ring ever claimed: the flusher's scans stop there, so a program with a few
     * threads (or many short-lived ones reusing low rings) is not scanned 4096 rings deep. */
    _Atomic uint32_t hiwater;
    size_t map_len;
    void *map;
    bool wiped; /* a fork child finds the rings and chunks zero (MADV_WIPEONFORK) */
} at_pool;

/* The writer's way to a chunk: the base from the hot line, not from at_pool_g. */
static inline at_chunk *at_wchunk(int32_t i)
{
    return (at_chunk *)(at_rt_hot.chunks + (size_t)i * AT_CHUNK_SIZE);
}

static inline at_chunk *at_chunk_at(const at_pool *p, int32_t i)
{
    return (at_chunk *)(p->chunks + (size_t)i * AT_CHUNK_SIZE);
}

void at_flusher_undoze(void);
/* The owner's publication of chunk i, stored after each record (release). A writer thread that
 * dozes (nothing to write for a while) is woken by the first record published (its flag on the
 * line every record reads; flusher.c: doze_begin pairs with this through a process-wide barrier). */
static inline void at_ring_publish(at_ring *r, int32_t i, uint32_t wpos)
{
    atomic_store_explicit(&r->wpub, (uint64_t)(uint32_t)(i + 1) << 32 | wpos, memory_order_release);
    if (AT_UNLIKELY(atomic_load_explicit(&at_rt_hot.flusher_doze, memory_order_relaxed)))
        at_flusher_undoze();
}

/* How much of chunk i (c) of ring r holds published records: the ring's publication while the owner
 * writes there, else the chunk's own count (final once the owner left it: stored before it linked
 * the next chunk and published there). */
static inline uint32_t at_ring_chunk_used(at_ring *r, int32_t i, at_chunk *c)
{
    uint64_t p = atomic_load_explicit(&r->wpub, memory_order_acquire);
    uint32_t used = atomic_load_explicit(&c->used, memory_order_acquire);
    if ((int32_t)(uint32_t)(p >> 32) == i + 1 && (uint32_t)p > used)
        used = (uint32_t)p;
    return used;
}

extern at_pool at_pool_g;

static inline uint32_t at_ring_limit(void)
{
    return atomic_load_explicit(&at_pool_g.hiwater, memory_order_acquire);
}
#define at_sess_gen (at_rt_hot.sess_gen)       /* at_common.h: on the runtime's hot line */
#define at_sess_active (at_rt_hot.sess_active)
extern _Atomic uint64_t at_drops_noring; /* events dropped with no buffer (cap reached, no session) */
extern _Atomic uint64_t at_drops_retired;
/* records skipped in damaged buffers (two writers on one ring, see at_ring.rcopy): their sequence
 * numbers show as gaps in the file */
extern _Atomic uint64_t at_drops_damaged;


int at_pool_init(size_t cap, char *err, size_t errlen);
/* trace.c: an event is written in a fork child whose file is not open yet (at_sess_active 2): false
 * when it is to be left out (quiet, and the child has recorded nothing). */
bool at_trace_child_gate(void);
/* A fork child's first recorded event: forget every buffered event of the parent and every buffer
 * owner (once, before anything is written there). */
void at_pool_reset_child(void);
/* After fork in the child, the forking thread's own buffer state (its thread-local part). */
void at_tbuf_fork_child_thread(void);
/* Write a saved event (a fork child's ProcessForked) into the calling thread's buffer at ts. */
void at_tbuf_put_saved(const at_event_type *t, const at_guid *activity, const void *payload,
                       uint32_t len, uint64_t ts);
void at_chunk_free(int32_t i);
/* Retire handed-over rings that found no new owner since the last sweep (all: every one). */
void at_rings_sweep_warm(bool all);
/* A recycled ring (its state already FREE) goes back on the free-ring stack. */
void at_ring_free(at_ring *r);
/* The flusher's way to free a chunk it has read: after a few newer ones (tbuf.c, cool). */
void at_chunk_retire(int32_t i);
void at_chunk_pass_begin(void); /* the flusher, at each pass: cooling follows the retire rate */
/* Free every cooling chunk (explicit flushes and stop leave none). */
void at_chunk_cool_drain(void);
uint32_t at_chunks_cooling(void);
void at_tbuf_init_key(void);
uint64_t at_tbuf_total_drops(void);
void at_tbuf_test_set_seq(uint32_t seq);
/* Tests only: every ring taken from now on is refused (as when all are held), or no longer. */
void at_tbuf_test_deny_rings(bool deny);

/* ---- output (output.c) ---- */
typedef struct at_output {
    enum at_output_mode mode;
    uint64_t mode_size;
    uint64_t seg_size;    /* size at which a new file is started (0: never) */
    unsigned index;       /* of the current file (0 = base path) */
    unsigned max_files;   /* circular: files kept */
    int fd;
    bool fd_private;      /* fd is a number of the writer thread's own descriptor table (flusher.c) */
    bool detached;        /* the file exists but no descriptor is open on it: the next write opens
                           * it again by its name (dev and ino say it is the same file) */
    uint64_t dev, ino;    /* the file fd was opened on: a number the program took over is not ours */
    bool failed;          /* the last write failed: nothing more is written until a loss record fits */
    bool reported;        /* the failure was reported on stderr (once per output) */
    bool child_suffix;    /* fork child (or a later image of one) of a pattern without %p: add -<pid> */
    unsigned exec_gen;    /* > 0: add -exec<n> (after -<pid>); 0 in a fork child */
    unsigned dup;         /* > 0: add -dup<n> last (another live process holds the name without
                           * it: the same pid in another pid namespace) */
    uint64_t pos;         /* logical end of the written content (where the end tag is) */
    uint64_t start_time_s;
    unsigned file_mode;   /* permissions of every file created (0: 0600) */
    uint64_t seg_dev[4], seg_ino[4]; /* circular: the files of the last segments (index % 4), so
                                      * only a file of ours is ever unlinked */
    unsigned rel_dir_len; /* a relative pattern made absolute: the bytes of pattern that name the
                           * folder it was resolved against ('%' doubled); 0: it was absolute */
    /* The names last: a session whose file waits for its first event writes the scalars, the
     * pattern and the base name at start, two pages of a page-aligned at_output, not four. */
    char pattern[4096];
    char base[4096];      /* pattern expanded (pid, time) */
    char path[4096];      /* current file */
} at_output;

int at_output_open_first(at_output *o, char *err, size_t errlen);
extern const char *at_output_manifest; /* at_trace_options.manifest */
/* At a session's start, when the file waits for the first event: the pattern made absolute (once)
 * and checked; 0 or -1 with a message. */
int at_output_prepare(at_output *o, char *err, size_t errlen);
/* Before the file exists: would it take "-<pid>" (a live writer holds the plain name)? */
bool at_output_name_held(const at_output *o);
int at_output_open_next(at_output *o);   /* rotation/circular; -1 on error (reported) */
void at_output_close(at_output *o);
void at_output_close_in_child(void);
int at_output_pwrite(at_output *o, const void *buf, size_t len, uint64_t off);
void at_output_report(at_output *o, const char *what, int err);
/* Cut the file back to len bytes (after a failed write: its last complete state). */
int at_output_cut(at_output *o, uint64_t len);
/* Move the current file to another descriptor, leaving the old number open for the caller (who is
 * about to dup2 onto it); 0 or -1. Under at_flush_lock. */
int at_output_move_fd(at_output *o);
void at_output_leftover_close(void);
/* Is the file's descriptor one of the calling thread's table (taken over, or opened again by its
 * name, when it was not)? */
bool at_output_here(at_output *o);
/* trace.c, under at_flush_lock: the file is there to flush to (a waiting one opened now, as an exit
 * would open it when something was recorded). */
bool at_trace_ready_locked(void);
int at_fd_high_base(void);
/* A file that lost its descriptor (the writer thread that held it ended): open it again by its name
 * on the calling thread's table; 0, or -1 (reported). */
int at_output_reattach(at_output *o);
/* The writer thread works in a descriptor table of its own (flusher.c): nothing it opens ever takes
 * a number of the program's, even for a moment. True on that thread only. */
extern AT_TLS bool at_fd_private_thread;
/* On that thread: a descriptor for the program's own descriptor `fd` (its stderr for a message),
 * to be closed after use, or -1. */
int at_fd_program(int fd);
/* async-signal-safe small formatting helpers */
size_t at_fmt_u64(char *out, uint64_t v);
void at_civil_from_unix(int64_t secs, int *y, int *mo, int *d, int *h, int *mi, int *s, int *dow);
void at_errmsg(const char *a, const char *b, int err);

/* ---- serialiser (ntw_block.c) ---- */
void at_ntw_init(void);                  /* allocates the buffers (not async-signal-safe) */
int at_ntw_file_begin(uint64_t sync_qpc);   /* header + ProcessInfo into a fresh file */
/* The same for the first file of a session opened after its first events were buffered (a fork
 * child's, a lazy start's): its baseline lists no thread, so that what they dropped before it
 * counts as lost (a thread's numbers start with the session). */
int at_ntw_file_begin_first(uint64_t sync_qpc);
void at_ntw_flush_begin(void);
/* seq_base: added to the record's number (a thread that took an ended thread's id numbers on) */
int at_ntw_event(at_ring *ring, const at_rec *r, const uint8_t *body, uint64_t tid, uint32_t seq_base);
/* Forget the stacks ring's records defined (a ring cleared, its records lost). */
void at_ntw_stkmap_clear(at_ring *ring);
/* References to stacks whose definition the flusher never met (events written without a stack). */
uint64_t at_ntw_stkrefs_unresolved(void);
int at_ntw_flush_end(bool force_sp);     /* pending blocks, SP, end tag; -1 on write error */
/* After a failed write (at_out.failed): try to append a sequence point that counts what was lost,
 * and resume writing if it fits. */
void at_ntw_retry(void);
void at_ntw_write_sp(void);
/* An event of the flusher's own (the symbol rundown): capture thread = the flusher, the next sequence
 * number of its per-file count (ProcessInfo is 1), timestamp = the newest written so far. */
void at_ntw_flusher_event(at_event_type *t, const void *payload, uint32_t len);
extern at_output at_out;
extern at_event_type *at_processinfo_type;
extern uint64_t at_ntw_pending_events;

/* ---- session (trace.c / flusher.c) ---- */
extern pthread_mutex_t at_flush_lock;
extern _Atomic uint64_t at_stat_written, at_stat_dropped_io, at_stat_bytes, at_stat_files;
extern uint64_t at_flusher_tid;
void at_flush_locked(bool holdback, bool force_sp);
/* A sequence point that also lists tid with number 0 (ntw_block.c): its id now names a new thread. */
/* The newest timestamp the flusher may write up to: cut, lowered to the clock read of any event a
 * thread is writing (tbuf.c). */
uint64_t at_rings_horizon(uint64_t cut, uint64_t fallback);
/* A process-wide memory barrier (membarrier): every thread's stores before it are visible after
 * it, and its loads after it see what the caller stored before. false where the kernel refuses. */
bool at_rings_barrier(void);
/* The calling thread asks the writer for its last flush (exit, fatal signal): its ring holds
 * nothing back (on), until the answer (off). Async-signal-safe. */
void at_rings_skip_mine(bool on);
void at_rings_barrier_init(void);
bool at_ntw_ready(void);
int at_flusher_start(void);
void at_flusher_stop(void);
void at_flusher_forget(void);
/* The writer's thread runs: a load on the fork data page (the exit of a process that recorded
 * nothing asks, and maps no code page of the flusher's for it) */
extern bool at_flusher_up;
static inline bool at_flusher_is_running(void) { return __atomic_load_n(&at_flusher_up, __ATOMIC_ACQUIRE); }
bool at_flusher_is_stuck(void); /* it did not stop within its deadline: left alone */
/* Writers: the buffers are filling (a quarter of the chunks, at most 64, in use); wake the flusher. */
bool at_rings_filling(void);
#define at_flusher_armed (at_rt_hot.flusher_armed)
void at_flusher_kick(void);
/* Wake the flusher whether it sleeps or not (async-signal-safe): a file is wanted. */
void at_flusher_wake(void);
/* Requests a program thread makes of a writer thread that holds the file in its own table (it alone
 * can write it). */
/* Everything published written (and a waiting file opened, as an exit would), by the writer; waits
 * while it makes progress. false: no writer thread took it (the caller writes itself). */
bool at_flusher_request_flush(bool force_sp);
/* A session still waiting for its first event opens its file now, by the writer. */
bool at_flusher_request_open(void);
void at_trace_open_pending_locked(void); /* trace.c, under at_flush_lock */
/* A writer thread runs, in a descriptor table of its own. */
bool at_flusher_owns_table(void);
/* The same from a fatal signal's handler: a bounded wait, async-signal-safe. */
bool at_flusher_request_emergency(void);
/* The writer takes over a file the calling thread opened in the program's table, which the caller
 * then closes; no-op when there is none. Not under at_flush_lock. */
void at_flusher_adopt(void);
/* at_flusher_stop, with the last flush and the file's close done by the writer before it ends
 * (final, from trace.c); false when no writer thread holds the file. */
bool at_flusher_stop_final(void (*final)(void));
/* trace.c, for the flusher: the session's file waits for its first event that counts (buffers
 * filling are no reason to flush then); one counted and the file is to be opened, which
 * at_trace_file_open_locked does under at_flush_lock. */
bool at_trace_file_waits(void);
bool at_trace_file_wanted(void);
void at_trace_file_open_locked(void);
uint32_t at_ring_sp_seq(at_ring *r);
/* lastthread.c, for the flusher: while at_last_thread_watch, look whether it is alone when due or
 * kicked and return when to look next (ending the process when it is alone). */
uint64_t at_lastthread_poll(uint64_t now);
bool at_lastthread_kicked(void);
void at_lastthread_reset(void);
extern unsigned at_flush_interval_ms;
/* at_event_write trying the one-pass record first (tbuf.c): the activity engine's events */
int at_event_write_onepass(const at_event_type *t, const at_guid *activity, const at_guid *related,
                           const void *payload, uint32_t payload_len, const uintptr_t *ips,
                           uint32_t nips);
extern char *at_command_line;


#endif
