/* preload.c: the library's entry and exit. The constructor reads the settings once (some servers
 * clear environ before main), refuses to do anything in secure-execution mode, starts the trace
 * session and the fd and signal machinery, and only then switches the interposed functions on.
 * Any failure prints one "acttrace:" line and leaves the program untraced. The destructor, run
 * after the program's own destructors on exit() or return from main (from any thread), closes the
 * file complete; _exit and fatal signals are handled in process.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "hookconf.h"
#include "real.h"
#include "shim.h"
#include "waits.h"

/* The start writes its head only (the settings, the output pattern) and, without ACTTRACE_CONFIG,
 * nothing past it: each page an image touches at start is a fault, tens of microseconds under
 * shadow paging (at_common.h). */
at_config at_cfg AT_START_BSS_1;
pid_t at_pid AT_FORK_DATA;

/* getenv by hand: libc's is a code page a plain start never maps (a fault, tens of microseconds
 * under shadow paging), for the twenty-odd settings looked up at start. */
const char *at_env(const char *name)
{
    for (char **e = environ; e && *e; e++) {
        const char *a = *e, *b = name;
        while (*b && *a == *b) /* not strncmp: another page of libc's */
            a++, b++;
        if (!*b && *a == '=')
            return a + 1;
    }
    return NULL;
}

static const char *env_lookup(const char *name)
{
    return at_env(name);
}

extern int at_exec_generation;   /* process.c */
extern bool at_process_descendant; /* process.c */

/* An exec'd image of a traced process has the pid of the image before it, whose file must not be
 * overwritten: process.c passes ACTTRACE_EXEC_GEN=<pid>.<n>.<d> and the new image writes
 * <pattern>-exec<n> (before the extension; the writer adds it, see runtime/output.c). d = 1 when
 * that pid began as a fork child, whose files a pattern without %p tells apart by "-<pid>". The
 * generation is not written into the pattern: a fork child of this image starts again at 0, and the
 * writer's fork handler names its file from the pattern before the shim's own handler runs.
 * Consumed here so the program never sees it. */
static void exec_generation_read(void)
{
    const char *g = at_env("ACTTRACE_EXEC_GEN");
    if (!g)
        return;
    long v[3] = {0, 0, 0};
    int k = 0;
    /* "<pid>.<n>.<d>" by hand: sscanf would map libc pages a traced start otherwise never reads */
    for (const char *p = g; k < 3 && *p >= '0' && *p <= '9';) {
        long x = 0;
        for (; *p >= '0' && *p <= '9'; p++)
            if (x < 100000000000L)
                x = x * 10 + (*p - '0');
        v[k++] = x;
        if (*p != '.')
            break;
        p++;
    }
    long pid = v[0], gen = v[1];
    int desc = (int)v[2];
    if (k >= 2 && pid == (long)at_pid && gen > 0 && gen < 1000000) {
        at_exec_generation = (int)gen;
        at_process_descendant = k == 3 && desc == 1;
    } else if (k >= 2 && pid != (long)at_pid) {
        at_process_descendant = true; /* started by a traced process (posix_spawn, vfork + exec) */
    }
    unsetenv("ACTTRACE_EXEC_GEN");
}

/* The config file's [trace] settings, where the environment did not set the same thing. */
static void hookconf_apply(const at_hookconf *hc, at_config *c)
{
    if (hc->output[0] && !at_env("ACTTRACE_OUTPUT"))
        snprintf(c->output, sizeof c->output, "%s", hc->output);
    if (hc->buffer_bytes && !at_env("ACTTRACE_BUFFER_KB"))
        c->buffer_bytes = hc->buffer_bytes;
    if (hc->flush_ms && !at_env("ACTTRACE_FLUSH_MS"))
        c->flush_ms = hc->flush_ms;
    if (hc->clock && !at_env("ACTTRACE_CLOCK"))
        c->clock = hc->clock - 1;
    if (hc->file_mode && !at_env("ACTTRACE_FILE_MODE"))
        c->file_mode = hc->file_mode;
    if (hc->sample_hz >= 0 && !at_env("ACTTRACE_SAMPLE_HZ"))
        c->sample_hz = (unsigned)hc->sample_hz;
    if (hc->waits >= 0 && !at_env("ACTTRACE_WAITS"))
        c->waits = hc->waits != 0;
    if (hc->traceparent >= 0 && !at_env("ACTTRACE_TRACEPARENT"))
        c->traceparent = hc->traceparent != 0;
    if (hc->traceparent_inject >= 0 && !at_env("ACTTRACE_TRACEPARENT_INJECT"))
        c->traceparent_inject = hc->traceparent_inject != 0;
    if (hc->exchanges >= 0 && !at_env("ACTTRACE_EXCHANGES"))
        c->exchanges = hc->exchanges != 0;
    if (hc->tasks >= 0 && !at_env("ACTTRACE_TASKS"))
        c->tasks = hc->tasks == 2 ? -1 : hc->tasks;
    if (hc->wait_min_us >= 0 && !at_env("ACTTRACE_WAIT_MIN_US"))
        c->wait_min_us = (unsigned)hc->wait_min_us;
    if (hc->symbols && !at_env("ACTTRACE_SYMBOLS")) {
        c->symbols = hc->symbols != 1;
        c->symbols_methods = hc->symbols == 3;
    }
}

static void at_preload_fail(const char *what, const char *why)
{
    fprintf(stderr, "acttrace: %s: %s; the program runs untraced\n", what, why);
}

__attribute__((constructor)) static void at_preload_init(void)
{
    at_ptls_init(); /* before anything reads the thread's state */
    int saved_errno = errno;
    AT_INTERNAL_BEGIN(); /* set-up: hooks installed here see none of its own calls */
    at_real_init();
    if (getauxval(AT_SECURE)) /* setuid/setgid/capabilities: never write files for such a program */
        goto out;
    at_pid = at_raw_getpid(); /* not libc's getpid: a code page a plain start never maps */
    /* our own variables leave the environment first, whatever happens next */
    exec_generation_read();
    at_exec_env_init();
    at_config_defaults_zeroed(&at_cfg); /* static: zero, and its pages untouched but for these */
    char err[512];
    if (at_config_from_env(&at_cfg, env_lookup, err, sizeof err) != 0) {
        at_preload_fail("bad setting", err);
        goto out;
    }
    static at_hookconf hc; /* lives as long as the hooks made from it */
    bool have_hc = false;
    const char *check = at_env("ACTTRACE_CHECK");
    const char *cfg_env = at_env("ACTTRACE_CONFIG"); /* not config_file[0]: a page of its own */
    if (cfg_env && *cfg_env && at_cfg.config_file[0]) {
        at_exec_config_base(at_cfg.config_file, sizeof at_cfg.config_file);
        if (at_hookconf_load(at_cfg.config_file, &hc, err, sizeof err) != 0)
            fprintf(stderr, "acttrace: %s; no function is hooked\n", err);
        else {
            have_hc = true;
            hookconf_apply(&hc, &at_cfg);
        }
    }
    at_exec_output_base(at_cfg.output, sizeof at_cfg.output); /* the first traced process's folder */
    if (check && *check) {
        /* acttrace check: the program is loaded, its main never runs */
        int rc = have_hc ? at_hooks_check(&hc, stdout) : 2;
        fflush(stdout);
        _exit(rc);
    }
    if (at_shim_events_register(err, sizeof err) != 0) {
        at_preload_fail("setup", err);
        goto out;
    }
    at_writer_table_shared = at_cfg.writer_table_shared;
    at_trace_options o = {
        .path = at_cfg.output,
        .mode = AT_OUTPUT_FILE,
        .buffer_cap = at_cfg.buffer_bytes,
        .flush_interval_ms = at_cfg.flush_ms,
        .no_symbols = !at_cfg.symbols,
        .symbols_methods = at_cfg.symbols_methods,
        .clock = (enum at_clock_kind)at_cfg.clock,
        .exec_generation = (unsigned)at_exec_generation,
        .descendant = at_process_descendant,
        .file_mode = at_cfg.file_mode,
        .manifest = at_manifest_path,
    };
    if (have_hc) {
        if (hc.mode)
            o.mode = (enum at_output_mode)(hc.mode - 1), o.mode_size = hc.mode_size;
        if (hc.level >= 0)
            o.level = (uint8_t)hc.level;
        if (hc.has_keywords)
            o.keywords = hc.keywords;
    }
    /* Hooks go in before the trace's flusher thread exists: entry patching rewrites code while
     * nothing else can be running it (the wrappers stay inert until at_hot.shim_on) */
    at_as_start_begin(); /* the room for what the shim maps after main, before the rest takes its share */
    at_saferanges_init();
    if (have_hc && at_hooks_install(&hc, err, sizeof err) != 0)
        fprintf(stderr, "acttrace: hooks disabled: %s\n", err);
    /* A program that records nothing costs no file, no thread, no buffers: its session waits for its
     * first event. Not with hooks: a hooked function may record the first event inside a signal
     * handler that interrupted malloc or the loader, where starting the writer thread or loading
     * libunwind could deadlock; with hooks everything starts here. The shim's other first events
     * (a thread's creation, fork, exec, a callback's flow, the API) come from ordinary calls. */
    o.lazy = !(have_hc && at_hooks_any()) && !at_cfg.sample_hz; /* samples: from a handler */
    o.defer_file = !o.lazy; /* either way a process that records nothing leaves no file */
    if (at_trace_start(&o, err, sizeof err) != 0) {
        at_preload_fail("cannot start the trace", err);
        goto out;
    }
    at_process_fork_init(); /* after the writer's own fork handlers: see process.c */
    at_thread_watch_leader_start();
    at_shim_stacks_init(!o.lazy);
    if (at_cfg.sample_hz && at_cfg.stacks != AT_CFG_STACKS_NONE && at_cfg.stack_depth)
        at_shim_stacks_setup(); /* the first sample's stack is taken in a signal handler */
    if (at_cfg.fdflow && at_fdflow_init(err, sizeof err) != 0) {
        if (err[0])
            fprintf(stderr, "acttrace: fd hand-off disabled: %s\n", err);
        at_cfg.fdflow = false;
    }
    if (at_cfg.fatal_signals) {
        at_signals_install();
        at_altstack_init();
    }
    bool sampling = at_cfg.sample_hz != 0;
    if (at_sampler_init(at_cfg.sample_hz, err, sizeof err) != 0) {
        fprintf(stderr, "acttrace: sampling off: %s\n", err);
        sampling = false;
    }
    at_flow_tasks_enable(at_cfg.tasks > 0 || (at_cfg.tasks < 0 && sampling));
    at_waits_init();
    at_as_start_done(); /* what the shim maps from now on comes out of room reserved here */
    __atomic_store_n(&at_hot.shim_on, 1, __ATOMIC_RELEASE);
out:
    AT_INTERNAL_END();
    errno = saved_errno;
}

__attribute__((destructor)) static void at_preload_fini(void)
{
    if (!at_on())
        return;
    int e = errno;
    /* A vfork child that returned from main instead of calling _exit shares our memory: hands off. */
    if (at_raw_getpid() != at_pid)
        return;
    at_sampler_stop(); /* before the writer stops: no sample meets a closing file */
    at_internal++; /* the writer closes its own file */
    at_trace_stop();
    at_internal--;
    errno = e;
}
