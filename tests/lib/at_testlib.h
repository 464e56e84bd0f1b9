/* at_testlib.h: the integration-test harness. Runs a program (a fixture or any real program) under
 * LD_PRELOAD=<build>/libacttrace.so with a given environment and arguments, captures its exit status
 * or signal, stdout and stderr; then reads the trace file(s) it left back through the project's own
 * reader (tools/ntreader.h) into an array of decoded events that tests search and assert on.
 * Check-agnostic: functions return values and descriptions; the tests do the ck_assert. */
#ifndef AT_TESTLIB_H
#define AT_TESTLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "at_common.h"

/* ---------------- paths ---------------- */

/* The build folder the tests run against: $AT_TEST_BUILD_DIR (set by tests/run-tests.sh, e.g.
 * build-asan under make check-asan), else AT_BUILD_DIR. Absolute. */
const char *at_build_dir(void);
/* <build>/libacttrace.so and <build>/fixtures/<name> (static buffers owned by the harness). */
const char *at_shim_path(void);
char *at_fixture_path(const char *name); /* malloc'd */
/* A fresh empty folder under <build>/tests/tmp/<tag>-XXXXXX (malloc'd path); removed by at_rmtree. */
char *at_tmpdir(const char *tag);
void at_rmtree(const char *dir);

/* ---------------- running a program ---------------- */

typedef struct at_run_opts {
    const char *const *argv;  /* argv[0] is the program (a path, or a name looked up in PATH) */
    const char *const *env;   /* extra "NAME=value" entries (NULL-terminated list, may be NULL);
                                 "NAME" alone removes NAME from the inherited environment */
    bool no_preload;          /* true: run untraced (the harness then sets no LD_PRELOAD) */
    const char *cwd;          /* working directory of the program (NULL: the test's own) */
    const char *stdin_data;   /* written to its stdin, then closed (NULL: /dev/null) */
    unsigned deadline_s;      /* at_run only: a program (and its process group, of its own then)
                                 still running this many seconds after its start is SIGKILLed and
                                 the result says timed_out: a hang fails a test rather than hangs it.
                                 0: no limit */
} at_run_opts;

typedef struct at_run_result {
    pid_t pid;
    bool exited;              /* exited normally: status holds the exit code */
    int status;
    bool signaled;            /* killed by a signal: sig holds it */
    int sig;
    bool core;
    bool timed_out;           /* killed at the run's deadline (then signaled, sig = SIGKILL) */
    char *out;                /* NUL-terminated captured stdout / stderr */
    size_t outlen;
    char *err;
    size_t errlen;
} at_run_result;

/* Run to completion (no time limit unless o->deadline_s). Returns 0, or -1 if the program could not be started
 * (message in r->err). The LD_PRELOAD used is the shim of at_build_dir(); under ACTTRACE_ASAN=1
 * the sanitizer runtimes the test binary itself loaded are preloaded first. */
int at_run(const at_run_opts *o, at_run_result *r);
void at_run_result_free(at_run_result *r);
/* "exit 3" / "signal 11 (Segmentation fault)" into buf. */
const char *at_run_describe(const at_run_result *r, char *buf, size_t n);

/* Start a program in the background (same options); at_wait collects it like at_run. The
 * program's stdout/stderr go to files in a harness temp folder so nothing blocks. */
typedef struct at_proc {
    pid_t pid;
    char *outpath, *errpath;
} at_proc;
int at_spawn(const at_run_opts *o, at_proc *p);
int at_wait(at_proc *p, at_run_result *r);

/* ---------------- reading a trace back ---------------- */

typedef struct at_tfield {
    char *name;
    uint32_t type;            /* NT_TYPE_* */
    char *value;              /* printable form (nt_field_format) */
} at_tfield;

typedef struct at_tev {
    const char *provider;     /* owned by the trace */
    const char *name;         /* e.g. "RequestStart" */
    uint8_t opcode;
    uint32_t event_id;
    uint64_t keywords;
    uint32_t seq;
    uint64_t thread;
    uint64_t timestamp;
    at_guid activity, related;
    char act_path[96];        /* "//1/2/1" when an activity-path id, "" when zero, else the GUID */
    char rel_path[96];
    uint32_t act_pid, rel_pid;/* pid encoded in the path id (0 if none) */
    uint32_t nfields;
    at_tfield *fields;
    uint32_t nframes;
    uint32_t payload_len;
    uint8_t head[16];         /* the payload's first bytes (fields the metadata does not declare) */
} at_tev;

typedef struct at_trace {
    char *path;
    int32_t pid;              /* from the trace header */
    at_tev *ev;
    size_t n;
    bool complete;            /* the reader reached the clean end of stream */
    uint64_t events_lost;
    char err[512];            /* reader error (with offset) when !complete */
    void *reader_;            /* private: the reader owning provider/name strings */
} at_trace;

/* Read every event of a file. Returns 0 when the stream ended cleanly, -1 otherwise (then t->err
 * says why and t->ev holds what was read before the error). Always call at_trace_free. */
int at_trace_load(const char *path, at_trace *t);
void at_trace_free(at_trace *t);

/* All *.nettrace files in dir, sorted (NULL-terminated, malloc'd; free with at_strv_free). */
char **at_trace_files(const char *dir);
void at_strv_free(char **v);
size_t at_strv_len(char *const *v);
/* The n strings of v sorted, one a line (each followed by '\n'), as one malloc'd string; v and its
 * strings are freed. */
char *at_strv_join_sorted(char **v, size_t n);
/* The trace file of process pid in dir (acttrace-<pid>.nettrace, or any file whose header pid is
 * pid). malloc'd, NULL when none. */
char *at_trace_file_for_pid(const char *dir, int pid);

/* The file of the last program image process pid ran: an exec keeps the pid, and each new image
 * writes <pattern>-exec<n> beside the first (acttrace-<pid>-exec<n>.nettrace). malloc'd or NULL. */
char *at_trace_file_last_image(const char *dir, int pid);

/* ---------------- searching events ---------------- */

/* Next event at index >= from whose name equals name (provider NULL = any); returns its index or -1. */
long at_find(const at_trace *t, const char *provider, const char *name, size_t from);
/* Next event named name with payload field fname == value (printable form). */
long at_find_field(const at_trace *t, const char *name, const char *fname, const char *value,
                   size_t from);
size_t at_count(const at_trace *t, const char *provider, const char *name);
/* Value (printable) of a payload field, or NULL. */
const char *at_ev_field(const at_tev *e, const char *fname);
bool at_field_u64(const at_tev *e, const char *fname, uint64_t *v);

/* Activity paths: is child strictly below ancestor ("//1/2/3" under "//1/2")? Equal -> false. */
bool at_path_is_below(const char *child, const char *ancestor);
/* Is child equal to or below ancestor? */
bool at_path_within(const char *child, const char *ancestor);
/* Parent path ("//1/2/3" -> "//1/2"; "//1" -> ""); out gets at least 96 bytes. */
void at_path_parent(const char *path, char *out, size_t n);

/* Print a readable table of the events (for a failing test's log). */
void at_trace_dump(const at_trace *t, FILE *f);

/* ---------------- one traced run ---------------- */

/* Run argv (argv[0] without a '/' is a fixture name) in a fresh folder with env added, then load
 * the trace of that process (acttrace-<pid>.nettrace there). */
typedef struct at_session {
    char *dir;              /* the program's working folder (kept when AT_KEEP_TMP is set) */
    at_run_result r;
    at_trace t;             /* loaded when has_trace */
    bool has_trace;
    int load_rc;            /* at_trace_load's result */
} at_session;
int at_session_run(at_session *s, const char *tag, const char *const *argv, const char *const *env);
/* The same with a deadline (at_run_opts.deadline_s): a program that hangs is killed, s->r.timed_out. */
int at_session_run_deadline(at_session *s, const char *tag, const char *const *argv,
                            const char *const *env, unsigned deadline_s);
/* Load the trace of the run's process as its last image left it (after an exec or rotation) into s
 * (s->has_trace, s->load_rc, s->t), for a run the test started itself. */
void at_session_load_last_image(at_session *s);
/* Load the trace of another process of the run (fork/exec children); returns has-file. */
bool at_session_load_pid(const at_session *s, int pid, at_trace *t);
void at_session_free(at_session *s);
/* A one-line summary for assertion messages: status, stderr's first line, trace state. */
const char *at_session_describe(const at_session *s, char *buf, size_t n);

/* ---------------- .NET programs of the tests ---------------- */

/* Build the C# project (its .csproj's path) with dotnet into BUILD/compat, against
 * TraceEvent te_version (NULL: the project's own packages); dotnet builds only what changed.
 * Returns the malloc'd path of its binary, binary_fmt under BUILD/compat with te_version in place of
 * its one %s (binary_fmt has none when te_version is NULL). NULL with err empty: dotnet is not on
 * PATH; NULL with err set: the build failed (err names its log). */
char *at_dotnet_built(const char *project, const char *te_version, const char *binary_fmt, char *err,
                      size_t errlen);
/* AT_TRACEEVENT_REQUIRED=1 (CI): the checks with .NET must run, dotnet or not. */
bool at_traceevent_required(void);

/* ---------------- misc ---------------- */

char *at_read_file(const char *path, size_t *len); /* malloc'd, NUL-terminated; NULL on error */
bool at_file_exists(const char *path);
/* A free TCP port on 127.0.0.1 (bound then released; a race is possible but unlikely). */
int at_free_port(void);
/* A connection to 127.0.0.1:port with a 10 s receive timeout (a server that never answers fails the
 * test rather than hangs it), or -1. */
int at_connect_port(int port);
/* Whether a server starts listening on port: connects until one succeeds, 400 tries 25 ms apart
 * (bounded, not a timing assertion), and closes that probe connection (a connection too). */
bool at_wait_listening(int port);

#endif
