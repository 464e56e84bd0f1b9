/* config.h: the shim's settings as a plain struct: built-in defaults, then ACTTRACE_* environment
 * overrides. No side effects (the shim prints what at_config_load reports). The config *file*
 * (ACTTRACE_CONFIG: functions to hook, [trace] settings) is parsed by hookconf.h. */
#ifndef AT_CONFIG_H
#define AT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AT_CONFIG_PATH_MAX 4096
#define AT_SAMPLE_HZ_MAX 10000u
#define AT_WAIT_MIN_US_DEFAULT 20u
#define AT_WAIT_MIN_US_MAX 60000000u /* a minute */

/* Which events of an activity carry a stack (ACTTRACE_STACKS; a config file's 'stacks' key
 * overrides it per activity). */
enum at_cfg_stacks { AT_CFG_STACKS_START = 0, AT_CFG_STACKS_STOP, AT_CFG_STACKS_BOTH, AT_CFG_STACKS_NONE };
/* The stack walker (ACTTRACE_STACK_WALKER); same order as runtime/stack.h's at_stack_mode. */
enum at_cfg_walker { AT_CFG_WALKER_SHARED = 0, AT_CFG_WALKER_LIBUNWIND, AT_CFG_WALKER_FP };
/* Which processes started from a traced one are traced too (ACTTRACE_FOLLOW). */
enum at_cfg_follow { AT_CFG_FOLLOW_ALL = 0, AT_CFG_FOLLOW_EXEC, AT_CFG_FOLLOW_NONE };

typedef struct at_config {
    bool fdflow;            /* ACTTRACE_FDFLOW=0|1: fd-keyed hand-off (default 1) */
    bool traceparent;       /* ACTTRACE_TRACEPARENT=0|1: an accepted socket's HTTP/1.x requests
                               read for a W3C traceparent header (default 1) */
    bool traceparent_inject; /* ACTTRACE_TRACEPARENT_INJECT=0|1: a traceparent header added to each
                                plain-text HTTP/1.x request sent in an activity (default 0) */
    bool exchanges;         /* ACTTRACE_EXCHANGES=0|1: a connected socket's exchanges counted
                               (SocketExchange; default 1) */
    bool accept_activity;   /* ACTTRACE_ACCEPT_ACTIVITY=0|1: accept/accept4 start a Connection
                               activity per accepted socket, stopped at close (default 0) */
    bool thread_events;     /* ACTTRACE_THREAD_EVENTS=0|1: ThreadStart/ThreadStop events (default 1) */
    bool fatal_signals;     /* ACTTRACE_SIGNALS=0|1: flush the trace on fatal default-action signals (1) */
    uint64_t buffer_bytes;  /* ACTTRACE_BUFFER_KB: total thread buffers (0 = writer default) */
    unsigned flush_ms;      /* ACTTRACE_FLUSH_MS: flush interval (0 = writer default) */
    enum at_cfg_stacks stacks; /* ACTTRACE_STACKS=start|stop|both|none (default start) */
    enum at_cfg_walker stack_walker; /* ACTTRACE_STACK_WALKER=shared|libunwind|fp (default shared) */
    unsigned stack_depth;   /* ACTTRACE_STACK_DEPTH: frames per stack, up to 256 (default 32;
                               0 = no stacks, as ACTTRACE_STACKS=none) */
    int clock;              /* ACTTRACE_CLOCK=auto|monotonic|tsc: the event clock, as runtime/trace.h's
                               enum at_clock_kind (default auto: the TSC when the machine keeps it
                               one clock for every CPU) */
    unsigned file_mode;     /* ACTTRACE_FILE_MODE: octal permissions of the trace files, whatever the
                               umask (0 = the default, 0600) */
    bool symbols;           /* ACTTRACE_SYMBOLS=0|1|methods: symbol rundown in the file (default 1,
                               Universal.System events; 0 none) */
    bool hook_wrapper_ffi;  /* ACTTRACE_HOOK_WRAPPER=direct|stub|ffi: what serves a typed hook on a
                               GOT slot (default direct: the shim's interposer of the function when
                               it has one and the rule allows, else the stub; stub: always the stub;
                               ffi: a libffi closure; both for comparison) */
    bool hook_wrapper_stub; /* ACTTRACE_HOOK_WRAPPER=stub */
    bool writer_table_shared; /* ACTTRACE_WRITER_TABLE=shared: the writer's files in the program's
                               * descriptor table (as where the kernel refuses it one of its own) */
    unsigned sample_hz;     /* ACTTRACE_SAMPLE_HZ: CPU samples per second of each thread's CPU time,
                               with its stack and current activity (0 = off, the default; at most
                               10000, and the kernel's tick bounds the rate it delivers) */
    bool waits;             /* ACTTRACE_WAITS=0|1: blocked time (default 1): a thread in an activity
                               that blocks in a call the shim takes (reads and writes, polls,
                               sleeps, locks, condition variables, semaphores, joins, fsync, waits
                               for children and signals, futex waits) for at least wait_min_us writes a WaitSuspend at the
                               call's start and a WaitResume at its end */
    int tasks;              /* ACTTRACE_TASKS=0|1|auto: hand-offs also written as TPL tasks
                               (TaskScheduled, TaskExecute Start/Stop), which PerfView follows to
                               give a thread's samples to the activity a hand-off brought; auto (-1,
                               the default): when CPU sampling is on */
    unsigned wait_min_us;   /* ACTTRACE_WAIT_MIN_US: the shortest wait recorded (default 20 us; at
                               most AT_WAIT_MIN_US_MAX) */
    bool symbols_methods;   /* ACTTRACE_SYMBOLS=methods: the rundown as .NET runtime method events,
                               which keep PerfView's "Thread Time (with StartStop Activities)" view */
    enum at_cfg_follow follow; /* ACTTRACE_FOLLOW=all|exec|none: which processes the program starts
                               are traced (default all: every descendant; exec: the images the
                               program execs, not the processes it forks or spawns; none: only this
                               image) */
    bool quiet;             /* ACTTRACE_QUIET=0|1: no start-up line (what was hooked); errors still
                               print (default 0) */
    /* The paths last: a process that sets neither touches only the first page of a static
     * at_config (the scalars and the start of the default output pattern). */
    char output[AT_CONFIG_PATH_MAX]; /* ACTTRACE_OUTPUT; pattern with %p/%t (default acttrace-%p.nettrace) */
    char config_file[AT_CONFIG_PATH_MAX]; /* ACTTRACE_CONFIG (parsed by hookconf.h) */
} at_config;

void at_config_defaults(at_config *c);
/* The same for a struct that is all zeros already (a static one): only the fields that are not
 * zero by default are written, so the pages of the rest are never touched. */
void at_config_defaults_zeroed(at_config *c);
/* Apply ACTTRACE_* overrides read through getenv_fn (getenv, or a test's own lookup).
 * Returns 0, or -1 with one precise message in err (the setting named; c keeps its defaults
 * for that setting). Never reads a file. */
/* "0644" (octal, at most 0777) into *mode; -1 when it is not one. */
int at_config_parse_file_mode(const char *v, unsigned *mode);
int at_config_from_env(at_config *c, const char *(*getenv_fn)(const char *name), char *err,
                       size_t errlen);

#endif
