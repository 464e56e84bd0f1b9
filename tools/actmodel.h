/* actmodel.h: the activity model the analysis commands share (tools/). It reads one or several
 * .nettrace files as one time-ordered stream (a process and the children it forked or executed),
 * matches <Name>Start/<Name>Stop events by ActivityId, finds each activity's parent (the path prefix
 * of its id, else its RelatedActivityId, which across processes names an activity of the parent
 * process), records the threads it visited and the transfers between them (acttrace-flow Send 9 /
 * Receive 240), and hands finished activities to the command. Memory is bounded by the activities
 * still open (and, for tree output, by at most o.hold finished activities under open ancestors),
 * never by the size of the files. */
#ifndef AM_ACTMODEL_H
#define AM_ACTMODEL_H

#include "ntreader.h"

#include <stdio.h>

typedef struct am_visit {
    uint64_t tid;
    int64_t first, last;  /* ns from the origin: first and last event of the activity on the thread */
    uint32_t events;
} am_visit;

typedef struct am_transfer {
    uint64_t from_tid, to_tid; /* from_tid 0: the sending side was not seen */
    int64_t send, recv;        /* ns from the origin */
} am_transfer;

typedef struct am_activity am_activity;
struct am_activity {
    at_guid id;
    char path[80];            /* "//1/5/1", or the GUID when the id is not an activity path */
    char name[64];            /* "Request" for RequestStart */
    uint32_t pid;             /* of the process that wrote it (the file header's) */
    int file;                 /* index of the input file that has its Start */
    uint32_t depth;           /* 0 for a root */
    uint64_t unique_id;       /* the <Name>Id payload field (0 if none) */
    int64_t start, stop;      /* ns from the origin; stop = last event of the stream if never stopped */
    bool stopped;
    uint64_t start_tid, stop_tid;
    at_guid related;          /* RelatedActivityId of the Start */
    char link[96];            /* a root whose RelatedActivityId names an unknown activity: "pid N //1/2" */
    uint64_t events;          /* events with this ActivityId (Start, Stop, transfers, informational) */
    uint64_t stack_events;    /* of them, with a stack */
    am_visit *visits;
    uint32_t nvisits, cvisits;
    am_transfer *xfers;
    uint32_t nxfers, cxfers;
    uint32_t nxfers_dropped;  /* beyond the per-activity cap */
    /* structure */
    am_activity *parent, *first_child, *last_child, *next_sibling;
    uint32_t open_below;      /* activities of this subtree (itself included) not yet stopped */
    uint32_t live_children;   /* children not yet freed */
    bool done_reported;
    bool spilled;             /* model-internal mark */
    bool keep;                /* a root under which a process was started: other files may link to
                               * it later, so its tree is reported at the end (several files) */
    bool spilled_kept;        /* listed among the kept roots */
    uint64_t serial;          /* 1, 2, ... in start order: names an activity after it is freed */
    /* pending sends (FIFO) for matching receives */
    uint64_t send_tid[8];
    int64_t send_ts[8];
    uint32_t send_head, send_n;
    uint64_t last_send_tid;
    int64_t last_send_ts;
};

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

/* Helpers the commands share. */
/* Activity name from an event name: "RequestStart" -> "Request" (copied into out). */
void am_activity_name(const char *event_name, char *out, size_t n);
/* "//1/5/1" (an id of process pid, or of another process: its pid is in the checksum), or the GUID
 * (or "" for zero) into out. */
void am_format_id(const at_guid *g, uint32_t pid, char *out, size_t n);
/* Is path equal to prefix or below it ("//1/5/1" within "//1/5")? */
bool am_path_within(const char *path, const char *prefix);
/* Parse "12.5" (ms) into ns; false if not a number. */
bool am_parse_ms(const char *s, int64_t *ns);
/* Find the index of a thread in a's visits (-1 if none). */
int am_visit_index(const am_activity *a, uint64_t tid);

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
/* Counts of nbins equal-width bins from min to max (counts must hold nbins). */
void am_dist_bins(const am_dist *d, int nbins, uint64_t *counts);
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

/* Common error line: "acttrace CMD: msg". */
void am_errorf(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
