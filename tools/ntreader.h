/* ntreader.h: a streaming reader of nettrace V4/V5 files (tools/). Memory is bounded by open state
 * (metadata, the current stack interval, one block), never by file size. Refuses V3 "netperf" and
 * V6 with a clear message. Used by the acttrace subcommands and by the tests. */
#ifndef NT_READER_H
#define NT_READER_H

#include "at_common.h"
#include "nt_format.h"

typedef struct nt_trace_info {
    uint16_t sync_time_utc[8]; /* SYSTEMTIME: year, month, dow, day, hour, minute, second, ms */
    int64_t sync_time_qpc;
    int64_t qpc_freq;
    int32_t pointer_size;
    int32_t pid;
    int32_t num_processors;
    int32_t sampling_rate;
} nt_trace_info;

typedef struct nt_field {
    char *name;               /* UTF-8 */
    uint32_t type;            /* NT_TYPE_* */
    uint32_t elem_type;       /* for NT_TYPE_ARRAY */
    uint32_t nfields;         /* for NT_TYPE_OBJECT (and arrays of objects) */
    struct nt_field *fields;
} nt_field;

typedef struct nt_metadata {
    uint32_t id;
    char *provider;           /* UTF-8 */
    at_guid provider_guid;    /* derived from the name as TraceEvent does */
    uint32_t event_id;
    char *name;               /* UTF-8, as written (e.g. "RequestStart") */
    uint64_t keywords;
    uint32_t version;
    uint32_t level;
    uint8_t opcode;           /* tag, or implied from a Start/Stop name suffix as TraceEvent does */
    bool has_opcode_tag;
    uint32_t nfields;
    nt_field *fields;
} nt_metadata;

typedef struct nt_event {
    const nt_metadata *meta;  /* never NULL for a returned event */
    uint32_t seq;
    uint64_t capture_thread;
    uint32_t proc;
    uint64_t thread;
    uint32_t stack_id;
    uint64_t timestamp;
    at_guid activity;
    at_guid related;
    bool sorted;
    const uint8_t *payload;   /* valid until the next nt_next call */
    uint32_t payload_len;
    const uint64_t *frames;   /* the event's stack, leaf first; valid until the next nt_next call */
    uint32_t nframes;
    uint64_t file_offset;     /* of the blob */
} nt_event;

typedef struct nt_counts {
    uint64_t events, metadata;
    uint64_t event_blocks, metadata_blocks, sp_blocks, stack_blocks;
    uint64_t first_ts, last_ts;   /* earliest / latest event timestamp (dispatch order, as expected.tsv) */
    uint64_t events_lost;     /* from sequence-number gaps and sequence points */
    uint64_t events_lost_first; /* of those, before a thread's first number in the file: TraceEvent
                                 * (V5) takes a thread's last number 0 for a recycled id, so it does
                                 * not count these */
} nt_counts;

typedef struct nt_reader nt_reader;

/* Open a file (path "-" = stdin). NULL on failure with a message in err ("file: reason"). */
nt_reader *nt_open(const char *path, char *err, size_t errlen);
/* Next event: 1 = ev filled, 0 = clean end of stream, -1 = error (nt_error says what, with offset).
 * Events come in file order (per capture thread that is time order; TraceEvent additionally merges
 * threads by timestamp). */
int nt_next(nt_reader *r, nt_event *ev);
const char *nt_error(const nt_reader *r);

/* Damage: where a file stops being readable, for commands that analyse what came before it.
 * NT_DAMAGE_TORN: after an end tag, a part whose first byte was never written (a writer killed while
 * flushing: it writes that byte last); the part's complete blocks are read (nt_next goes on into it
 * and ends cleanly at its first incomplete block). NT_DAMAGE_BROKEN: the file ends early or holds
 * bytes no reader accepts (nt_next returned -1). */
enum { NT_DAMAGE_NONE = 0, NT_DAMAGE_TORN = 1, NT_DAMAGE_BROKEN = 2 };
typedef struct nt_damage {
    int kind;
    uint64_t offset;          /* end of the last complete object: the damage starts here */
    uint64_t file_size;       /* 0 if unknown (pipe) */
    uint64_t events_before;   /* events read before the damage */
    uint64_t recovered;       /* TORN: events read from the torn part */
    const char *text;         /* one line: what and where (no file name prefix for TORN, the reader's
                               * "file: offset N: ..." message for BROKEN) */
} nt_damage;
/* NULL while the file is sound (or not read to its end yet). */
const nt_damage *nt_get_damage(const nt_reader *r);
const nt_trace_info *nt_info(const nt_reader *r);
const nt_counts *nt_get_counts(const nt_reader *r);
/* Metadata by id (NULL if unknown). */
const nt_metadata *nt_metadata_get(const nt_reader *r, uint32_t id);
void nt_close(nt_reader *r);

/* ---- extensions (reader helper): options, in-memory input, per-thread state, iteration ---- */

/* A structural problem that does not stop the parse (strict mode) or that the reader tolerates like
 * TraceEvent does (an undefined stack id). offset = absolute file offset of the offending bytes. */
typedef void (*nt_problem_fn)(void *ctx, uint64_t offset, const char *msg);
/* Called once per metadata record as it is defined (in file order). */
typedef void (*nt_metadata_fn)(void *ctx, const nt_metadata *m);

typedef struct nt_options {
    bool strict;              /* check every rule of the writer checklist (acttrace verify) */
    bool skip_events;         /* do not decode event blobs (metadata/stack/SP blocks still parsed) */
    bool order;               /* with strict: no event older than an IsSorted event or a sequence
                               * point before it (acttrace's writer promises it; the .NET runtime
                               * does not always: readers then dispatch out of order) */
    nt_problem_fn problem;    /* may be NULL */
    nt_metadata_fn on_metadata; /* may be NULL */
    void *ctx;
} nt_options;

nt_reader *nt_open_ex(const char *path, const nt_options *opt, char *err, size_t errlen);
/* Read from an already open descriptor (pipe, socket, file); name is used in messages. The reader
 * does not close fd. */
nt_reader *nt_open_fd(int fd, const char *name, const nt_options *opt, char *err, size_t errlen);
/* Read from memory (tests, fuzzing). data must stay valid until nt_close. */
nt_reader *nt_open_mem(const void *data, size_t len, const nt_options *opt, char *err, size_t errlen);

/* Capture threads seen so far (events and sequence points), for drop reports. */
typedef struct nt_thread_stat {
    uint64_t capture_thread;
    uint32_t last_seq;
    uint64_t events;
    uint64_t dropped;         /* sequence gaps attributed to this thread */
} nt_thread_stat;
size_t nt_thread_count(const nt_reader *r);
const nt_thread_stat *nt_thread_at(const nt_reader *r, size_t i);

/* Metadata in definition order. */
size_t nt_metadata_count(const nt_reader *r);
const nt_metadata *nt_metadata_at(const nt_reader *r, size_t i);
/* Byte offset of the next unread byte of the input. */
uint64_t nt_offset(const nt_reader *r);
/* Problems reported through opt->problem so far. */
uint64_t nt_problem_count(const nt_reader *r);
/* "Info", "Start", "Stop", ... or NULL for an unnamed opcode. */
const char *nt_opcode_name(uint8_t opcode);
/* A CPU sample: the .NET runtime's Microsoft-DotNETCore-SampleProfiler ThreadSample (event 0), as
 * the runtime and the shim's sampler write it; its first frame is the interrupted instruction.
 * *cpu_ns: the CPU time it stands for (the shim's CpuNs after the runtime's Type), 0 when the file
 * does not say (the runtime's own samples, one per sampling period). */
bool nt_event_cpu_sample(const nt_event *ev, uint64_t *cpu_ns);
/* A wait the shim recorded (acttrace-shim WaitSuspend or WaitResume, shim/waits.c): *resume says
 * which; its Reason and Call (UTF-8, cut to fit; either may be NULL) and, for a Resume, BlockedNs
 * (0 for a Suspend). False for any other event, or a payload too short for its fields. */
/* The shim's SocketExchange event (acttrace-shim): true with its Fd, Index (-1: the connection's
 * end) and IdleNs (the time since the server's last answer; 0 when not given); false for any other
 * event, or a payload too short for them. */
bool nt_event_exchange(const nt_event *ev, int *fd, int *index, uint64_t *idle_ns);
/* The shim's SocketEndpoints event (acttrace-shim): true with its role (accept or connect) and its
 * two ends ("address:port") copied into local and peer, and its Fd into *fd (when fd is not NULL);
 * false for any other event. */
bool nt_event_endpoints(const nt_event *ev, int *fd, bool *accepted, char *local, size_t ln, char *peer,
                        size_t pn);
bool nt_event_wait(const nt_event *ev, bool *resume, char *reason, size_t rn, char *call, size_t cn,
                   uint64_t *blocked_ns);
/* Name of a field type code ("int32", "string", ...). */
const char *nt_type_name(uint32_t type);

/* Payload decoding helper: read field f at *off of ev's payload into a printable UTF-8 form.
 * Returns false if the payload is too short, or if the field needs more than 2^20 values visited
 * (nested arrays of empty objects), so a hostile payload cannot make formatting spin. */
bool nt_field_format(const nt_field *f, const uint8_t *payload, uint32_t len, uint32_t *off,
                     char *out, size_t outlen);
/* The same field as one JSON value: integers and reals as numbers (NaN and infinities as strings),
 * booleans, strings (a note on unreadable memory inside the string), chars, GUIDs and dates as
 * strings, decimals as numbers, arrays and objects as JSON's. 1: done; 0: it does not fit in out
 * (the offset still advances over the field); -1: as nt_field_format's false. */
int nt_field_json(const nt_field *f, const uint8_t *payload, uint32_t len, uint32_t *off, char *out,
                  size_t outlen);

#endif
