/* actmodel.h: the activity model the analysis commands share (tools/). It reads one or several
 * .nettrace files as one time-ordered stream (a process and the children it forked or executed),
 * matches <Name>Start/<Name>Stop events by ActivityId, finds each activity's parent (the path prefix
 * of its id, else its RelatedActivityId, which across processes names an activity of the parent
 * process), records the threads it visited and the transfers between them (acttrace-flow Send 9 /
 * Receive 240), and hands finished activities to the command. Memory is bounded by the activities
 * still open (and, for tree output, by at most o.hold finished activities under open ancestors),
 * never by the size of the files: about 120 bytes per open activity (its slot and its share of the id
 * table), plus its rare fields when it has them. */
#ifndef AM_ACTMODEL_H
#define AM_ACTMODEL_H

#include "ntreader.h"

#include <stdbool.h>
#include <stdint.h>

#include <stdio.h>

typedef struct am_visit {
    uint64_t tid;
    int64_t first, last;  /* ns from the origin: first and last event of the activity on the thread */
} am_visit;

typedef struct am_transfer {
    uint64_t from_tid, to_tid; /* from_tid 0: the sending side was not seen */
    int64_t send, recv;        /* ns from the origin */
} am_transfer;

/* Pending sends (FIFO) of an activity, for matching receives: allocated at its first Send. */
typedef struct am_sends {
    uint64_t tid[8];
    int64_t ts[8];
    uint32_t head, n;
    uint64_t last_tid;
    int64_t last_ts;
} am_sends;

/* What few activities have, out of line (allocated at first use, freed with the activity). */
typedef struct am_extra {
    am_visit *visits;         /* every thread visited (start thread first), once a second one is */
    uint32_t nvisits, cvisits;
    uint32_t nxfers, cxfers;
    uint32_t nxfers_dropped;  /* beyond the per-activity cap */
    am_transfer *xfers;
    am_sends *sends;
    at_guid related;          /* a root whose RelatedActivityId names an unknown activity (has_link) */
    uint64_t start_tid;       /* when it does not fit the 32 bits in line */
    uint64_t stop_tid;        /* of its Stop, when moved */
    uint64_t events_hi;       /* carries of the 32-bit event count */
    /* an exchange of a kept-alive connection (a segment, under the client activity that sent it):
     * the accepting activity it is part of, and the exchange's index (0: not a segment) */
    at_guid seg_of;
    uint32_t seg_index;
    struct am_activity *seg;  /* of an accepting activity: its segment open now (NULL: none) */
} am_extra;

/* An activity, kept small (memory is bounded by the open ones: millions in a long trace): its name
 * is interned, its path formatted from the id only when printed (am_act_path), rare fields are in x.
 * Read visits, transfers, the link and counts through the accessors below. */
typedef struct am_activity am_activity;
struct am_activity {
    at_guid id;
    const char *name;         /* "Request" for RequestStart; one copy per distinct name, valid until
                               * am_close */
    /* structure (children only in tree mode, in start order once handed to a callback) */
    am_activity *parent, *first_child, *next_sibling;
    int64_t start, stop;      /* ns from the origin; stop = last event of the stream if never stopped
                               * (while open: the activity's last event on its start thread) */
    uint64_t unique_id;       /* the <Name>Id payload field (0 if none) */
    uint64_t serial;          /* 1, 2, ... in start order: names an activity after it is freed */
    am_extra *x;              /* NULL while it has no rare field */
    uint32_t pid;             /* of the process that wrote it (the file header's) */
    uint32_t events_lo;       /* events with this ActivityId: am_events() */
    uint32_t start_tid32;     /* am_start_tid() */
    uint32_t open_below;      /* activities of this subtree (itself included) not yet stopped */
    uint32_t live_children;   /* children not yet freed */
    uint32_t file : 13;       /* index of the input file that has its Start (AM_MAX_FILES) */
    uint32_t depth : 10;      /* 0 for a root (below AM_MAX_DEPTH) */
    bool stopped : 1;
    bool moved : 1;           /* stopped on another thread than its start thread */
    bool has_link : 1;        /* a root whose RelatedActivityId names an unknown activity */
    bool done_reported : 1;
    bool spilled : 1;         /* model-internal mark */
    bool keep : 1;            /* a root under which a process was started: other files may link to
                               * it later, so its tree is reported at the end (several files) */
    bool spilled_kept : 1;    /* listed among the kept roots */
    bool used : 1;            /* model-internal: the slot holds an activity */
    bool in_tab : 1;          /* model-internal: found by its id (not replaced by a newer one) */
};

#define AM_MAX_FILES 8192
#define AM_MAX_DEPTH 1000 /* deeper activities become roots (with their link): recursion and walks stay bounded */
#define AM_PATH_MAX 80 /* an activity path "//1/5/1" or a GUID, formatted (with its NUL) */
#define AM_LINK_MAX 96

/* Is a an activity of an accepted connection whose client another given file holds (the
 * connection's, or an exchange of it under the client activity that sent it)? */
struct am_model;
bool am_accepted_from(const struct am_model *m, const am_activity *a);
/* The activity's path into out (AM_PATH_MAX bytes): "//1/5/1", or the GUID; an exchange of a
 * kept-alive connection: its connection's and "#index" ("//1/3#2"). */
void am_act_path(const am_activity *a, char *out, size_t n);
/* A root whose RelatedActivityId names an unknown activity: "pid N //1/2" into out (AM_LINK_MAX);
 * false (out "") otherwise. */
bool am_act_link(const am_activity *a, char *out, size_t n);
static inline uint64_t am_start_tid(const am_activity *a)
{
    return a->start_tid32 != UINT32_MAX ? a->start_tid32 : a->x->start_tid;
}
/* The thread of its Stop (0 while never stopped). */
static inline uint64_t am_stop_tid(const am_activity *a)
{
    if (!a->stopped) return 0;
    return a->moved && a->x ? a->x->stop_tid : am_start_tid(a);
}
static inline uint64_t am_events(const am_activity *a)
{
    return a->events_lo + (a->x ? a->x->events_hi << 32 : 0);
}
/* Threads the activity visited (capped), at least its start thread. */
/* A CPU sample stands for the CPU its thread used since its last one (cpu ns); of that, no more is
 * activity a's than the time a has been on the thread (from its Start there, or its first event
 * there: the Receive that brought it) up to the sample at t. Defined below the visit accessors. */
static inline uint64_t am_sample_cpu(const am_activity *a, uint64_t tid, int64_t t, uint64_t cpu);
static inline uint32_t am_nvisits(const am_activity *a) { return a->x && a->x->visits ? a->x->nvisits : 1; }
/* Visit i < am_nvisits(a) (0: the start thread). Without other threads, visit 0 ends at a->stop. */
static inline am_visit am_visit_at(const am_activity *a, uint32_t i)
{
    if (a->x && a->x->visits) return a->x->visits[i];
    return (am_visit){.tid = am_start_tid(a), .first = a->start, .last = a->stop};
}

static inline uint64_t am_sample_cpu(const am_activity *a, uint64_t tid, int64_t t, uint64_t cpu)
{
    for (uint32_t i = 0; i < am_nvisits(a); i++) {
        am_visit v = am_visit_at(a, i);
        if (v.tid != tid) continue;
        if (v.first < t && (uint64_t)(t - v.first) < cpu) return (uint64_t)(t - v.first);
        return cpu;
    }
    return cpu;
}
static inline uint32_t am_nxfers(const am_activity *a) { return a->x ? a->x->nxfers : 0; }
static inline const am_transfer *am_xfer_at(const am_activity *a, uint32_t i) { return &a->x->xfers[i]; }
static inline uint32_t am_xfers_dropped(const am_activity *a) { return a->x ? a->x->nxfers_dropped : 0; }

/* One event as the model saw it, for commands that list events or fold stacks. */
typedef struct am_event {
    const nt_event *ev;
    int file;                 /* index of the input file */
    uint32_t pid;
    int64_t time;             /* ns from the origin */
    am_activity *act;         /* the activity of ActivityId (NULL if zero or unknown) */
    am_activity *stopped;     /* for a Stop: the activity it stopped (duration = stop - start) */
} am_event;

typedef struct am_callbacks {
    /* Every event, after the model applied it. */
    void (*event)(void *ctx, const am_event *e);
    /* An activity is final (stopped, or the stream ended): its visits, transfers and counts no longer
     * change. In tree mode called for every node of a finished subtree, parents before children. */
    void (*activity)(void *ctx, const am_activity *a);
    /* Tree mode: a root whose whole subtree has finished (children linked, in start order). */
    void (*tree)(void *ctx, const am_activity *root);
    /* Tree mode: a finished subtree handed over early because more than o.hold finished activities
     * were waiting for ancestors still open; its parent chain is alive (and still open). It is not
     * part of its root's tree any more. */
    void (*spill)(void *ctx, const am_activity *sub);
    void *ctx;
} am_callbacks;

typedef struct am_options {
    bool tree;        /* keep finished subtrees until their root's subtree is complete */
    bool progress;    /* allow a progress bar on stderr (only when it is a terminal, files large) */
    bool need_events; /* call cb.event for every event (else only activities are tracked) */
    uint64_t hold;    /* tree mode: finished activities held for open ancestors before cb.spill
                         (0: AM_HOLD_DEFAULT) */
} am_options;

#define AM_HOLD_DEFAULT 20000

typedef struct am_model am_model;

/* Open files (one or more; "-" = stdin for a single file). NULL with a message in err. */
am_model *am_open(char *const *paths, int npaths, const am_options *o, const am_callbacks *cb,
                  char *err, size_t errlen);
/* Read everything. 0 = clean end of every file; -1 = a file is truncated/corrupt: err has the
 * reader's message ("file: ... at offset N"); what was read before is reported as if the stream
 * ended there (open activities are reported as never stopped), and the other files are read on. */
int am_run(am_model *m, char *err, size_t errlen);
/* After am_run: one line on stderr per damaged file (where the damage starts, how much was read,
 * or the torn tail a killed writer left) and per file with lost events. Returns AM_EXIT_DAMAGED
 * when a file is damaged (torn or broken), else 0. */
#define AM_EXIT_DAMAGED 3
int am_report_damage(const am_model *m, const char *cmd);
void am_close(am_model *m);

/* Trace facts for the commands. */
int am_nfiles(const am_model *m);
/* Files of more than one clock (hosts, or time namespaces): a line per other clock saying how it
 * was put on the first file's time line and how well the connections between them bound that
 * ("clocks: ..."), into out; "" for files of one clock. Returns the length. */
int am_clock_note(const am_model *m, char *out, size_t n);
const nt_trace_info *am_info(const am_model *m, int file);
const char *am_path(const am_model *m, int file);
nt_reader *am_reader(const am_model *m, int file);
int64_t am_origin_ns(const am_model *m); /* absolute ns of time 0: the earliest file's sync time */
int64_t am_end_ns(const am_model *m);    /* time of the last event seen (ns from the origin) */
/* Convert a file's timestamp to ns from the origin. */
int64_t am_time(const am_model *m, int file, uint64_t ts);
/* Activities that were never stopped, and Stops that matched no open activity. */
uint64_t am_never_stopped(const am_model *m);
uint64_t am_unmatched_stops(const am_model *m);
/* The first of them ("ForkStop of //1/7 in pid 22058, thread 22058, at 14.668 ms: why"), "" when none. */
const char *am_unmatched_first(const am_model *m);

/* Helpers the commands share. */
/* Activity name from an event name: "RequestStart" -> "Request" (copied into out). */
void am_activity_name(const char *event_name, char *out, size_t n);
/* "//1/5/1" (an id of process pid, or of another process: its pid is in the checksum), or the GUID
 * (or "" for zero) into out. */
void am_format_id(const at_guid *g, uint32_t pid, char *out, size_t n);
/* Is path equal to prefix or below it ("//1/5/1" within "//1/5")? */
bool am_path_within(const char *path, const char *prefix);
/* Find the index of a thread in a's visits (-1 if none). */
int am_visit_index(const am_activity *a, uint64_t tid);
/* Peak bytes the model allocated for activities, their table, names and rare fields (the files'
 * readers aside). */
size_t am_mem_peak(const am_model *m);

/* Percentiles of durations: exact up to AM_EXACT samples, then a log histogram (1% precision). */
#define AM_EXACT 65536
typedef struct am_dist {
    uint64_t n;
    int64_t min, max;
    double sum;
    int64_t *exact;           /* while n <= AM_EXACT */
    uint32_t nexact, cexact;
    uint64_t *hist;           /* AM_HIST_BUCKETS, allocated when exact overflows */
} am_dist;
void am_dist_add(am_dist *d, int64_t v);
int64_t am_dist_pct(am_dist *d, double p); /* nearest rank, p in 0..100 */
void am_dist_free(am_dist *d);

/* Write s as a JSON string literal (quotes included; control characters escaped). */
void am_json_string(FILE *f, const char *s);
/* The slices an activity leaves on threads, as timelines draw them: on its start thread from its
 * start to its stop (or to its last event there when it stopped elsewhere), on every other thread it
 * visited from its first to its last event there. Calls fn for each. */
void am_slices(const am_activity *a, void (*fn)(void *ctx, const am_activity *a, uint64_t tid, int64_t from,
                                                  int64_t to), void *ctx);

/* A fast output buffer for the listing commands (printf's float formatting dominated them). */
typedef struct am_buf {
    FILE *f;
    size_t n;
    char b[1 << 16];
} am_buf;
void am_buf_flush(am_buf *b);
void am_buf_write_slow(am_buf *b, const char *s, size_t n);
static inline void am_buf_mem(am_buf *b, const char *s, size_t n)
{
    if (__builtin_expect(b->n + n > sizeof b->b, 0)) {
        am_buf_write_slow(b, s, n);
        return;
    }
    __builtin_memcpy(b->b + b->n, s, n);
    b->n += n;
}
static inline void am_buf_str(am_buf *b, const char *s)
{
    am_buf_mem(b, s, __builtin_strlen(s));
}
static inline void am_buf_chr(am_buf *b, char c)
{
    if (__builtin_expect(b->n == sizeof b->b, 0)) am_buf_flush(b);
    b->b[b->n++] = c;
}
void am_buf_u64(am_buf *b, uint64_t v);
/* ns as milliseconds with 3 decimals (as "%*.3f"), right-aligned in width (0: none). */
void am_buf_ms(am_buf *b, int64_t ns, int width);
/* A duration for people: ns in the unit that shows it with 3 significant digits, the unit glued on:
 * "412us" (below 1 ms), "9.00ms", "19.0ms", "314ms" (below 1 s), "1.50s", "1234s"; "0us" for 0.
 * am_fmt_dur writes it with its NUL into out (AM_DUR_MAX bytes) and returns its length;
 * am_buf_dur right-aligns it in width (0: none). Machine formats keep their numeric units. */
#define AM_DUR_MAX 32
size_t am_fmt_dur(char *out, int64_t ns);
void am_buf_dur(am_buf *b, int64_t ns, int width);

/* Common error line: "acttrace CMD: msg". */
void am_errorf(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
