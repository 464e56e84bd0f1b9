/* config.c: defaults and ACTTRACE_* environment overrides of the shim's settings (config.h). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void at_config_defaults(at_config *c)
{
    memset(c, 0, sizeof *c);
    at_config_defaults_zeroed(c);
}

void at_config_defaults_zeroed(at_config *c)
{
    /* copies, not snprintf: the shim's start would map printf's pages of libc for them */
    static const char def_output[] = "acttrace-%p.nettrace";
    memcpy(c->output, def_output, sizeof def_output);
    c->fdflow = true;
    c->traceparent = true;
    c->exchanges = true;
    c->accept_activity = false;
    c->thread_events = true;
    c->fatal_signals = true;
    c->stacks = AT_CFG_STACKS_START;
    c->stack_walker = AT_CFG_WALKER_SHARED;
    c->stack_depth = 32;
    c->symbols = true;
    c->waits = true;
    c->tasks = -1;
    c->wait_min_us = AT_WAIT_MIN_US_DEFAULT;
}

/* v one of the '|'-separated words of `words`: its index, else -1 with the message */
static int parse_word(const char *name, const char *v, const char *words, int *out, char *err, size_t errlen)
{
    int i = 0;
    for (const char *w = words;; i++) {
        const char *e = strchr(w, '|');
        size_t n = e ? (size_t)(e - w) : strlen(w);
        if (strlen(v) == n && strncmp(v, w, n) == 0) {
            *out = i;
            return 0;
        }
        if (!e)
            break;
        w = e + 1;
    }
    snprintf(err, errlen, "%s=%s: expected one of %s", name, v, words);
    return -1;
}

static int parse_bool(const char *name, const char *v, bool *out, char *err, size_t errlen)
{
    if (!strcmp(v, "1") || !strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "on")) {
        *out = true;
        return 0;
    }
    if (!strcmp(v, "0") || !strcmp(v, "no") || !strcmp(v, "false") || !strcmp(v, "off")) {
        *out = false;
        return 0;
    }
    snprintf(err, errlen, "%s=%s: expected 0 or 1", name, v);
    return -1;
}

static int parse_uint(const char *name, const char *v, uint64_t max, uint64_t *out, char *err,
                      size_t errlen)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || x > max) {
        snprintf(err, errlen, "%s=%s: expected a number from 0 to %llu", name, v,
                 (unsigned long long)max);
        return -1;
    }
    *out = x;
    return 0;
}

int at_config_parse_file_mode(const char *v, unsigned *mode)
{
    char *end;
    errno = 0;
    unsigned long x = strtoul(v, &end, 8);
    if (errno || end == v || *end || v[0] == '-' || v[0] == '+' || x > 0777)
        return -1;
    *mode = (unsigned)x;
    return 0;
}

int at_config_from_env(at_config *c, const char *(*getenv_fn)(const char *name), char *err,
                       size_t errlen)
{
    int rc = 0;
    const char *v;
    err[0] = 0;
    if ((v = getenv_fn("ACTTRACE_OUTPUT")) && *v) {
        if (strlen(v) >= sizeof c->output) {
            snprintf(err, errlen, "ACTTRACE_OUTPUT: path longer than %zu bytes", sizeof c->output - 1);
            return -1;
        }
        memcpy(c->output, v, strlen(v) + 1);
    }
    if ((v = getenv_fn("ACTTRACE_CONFIG")) && *v) {
        if (strlen(v) >= sizeof c->config_file) {
            snprintf(err, errlen, "ACTTRACE_CONFIG: path longer than %zu bytes",
                     sizeof c->config_file - 1);
            return -1;
        }
        memcpy(c->config_file, v, strlen(v) + 1);
    }
    static const struct {
        const char *name;
        size_t off;
    } bools[] = {
        {"ACTTRACE_FDFLOW", offsetof(at_config, fdflow)},
        {"ACTTRACE_TRACEPARENT", offsetof(at_config, traceparent)},
        {"ACTTRACE_TRACEPARENT_INJECT", offsetof(at_config, traceparent_inject)},
        {"ACTTRACE_EXCHANGES", offsetof(at_config, exchanges)},
        {"ACTTRACE_ACCEPT_ACTIVITY", offsetof(at_config, accept_activity)},
        {"ACTTRACE_THREAD_EVENTS", offsetof(at_config, thread_events)},
        {"ACTTRACE_SIGNALS", offsetof(at_config, fatal_signals)},
        {"ACTTRACE_QUIET", offsetof(at_config, quiet)},
        {"ACTTRACE_WAITS", offsetof(at_config, waits)},
    };
    for (size_t i = 0; i < sizeof bools / sizeof bools[0] && rc == 0; i++)
        if ((v = getenv_fn(bools[i].name)) && *v)
            rc = parse_bool(bools[i].name, v, (bool *)((char *)c + bools[i].off), err, errlen);
    if (rc == 0 && (v = getenv_fn("ACTTRACE_TASKS")) && *v) {
        bool b;
        if (!strcmp(v, "auto"))
            c->tasks = -1;
        else if (parse_bool("ACTTRACE_TASKS", v, &b, err, errlen) == 0)
            c->tasks = b;
        else {
            snprintf(err, errlen, "ACTTRACE_TASKS=%s: expected 0, 1 or auto", v);
            rc = -1;
        }
    }
    if (rc == 0 && (v = getenv_fn("ACTTRACE_SYMBOLS")) && *v) {
        c->symbols_methods = !strcmp(v, "methods");
        if (c->symbols_methods)
            c->symbols = true;
        else if (parse_bool("ACTTRACE_SYMBOLS", v, &c->symbols, err, errlen) != 0) {
            snprintf(err, errlen, "ACTTRACE_SYMBOLS=%s: expected 0, 1 or methods", v);
            rc = -1;
        }
    }
    uint64_t x;
    if (rc == 0 && (v = getenv_fn("ACTTRACE_BUFFER_KB")) && *v) {
        rc = parse_uint("ACTTRACE_BUFFER_KB", v, 1u << 24, &x, err, errlen);
        if (rc == 0)
            c->buffer_bytes = x * 1024;
    }
    if (rc == 0 && (v = getenv_fn("ACTTRACE_FLUSH_MS")) && *v) {
        rc = parse_uint("ACTTRACE_FLUSH_MS", v, 3600000, &x, err, errlen);
        if (rc == 0)
            c->flush_ms = (unsigned)x;
    }
    int w;
    if (rc == 0 && (v = getenv_fn("ACTTRACE_STACKS")) && *v) {
        rc = parse_word("ACTTRACE_STACKS", v, "start|stop|both|none", &w, err, errlen);
        if (rc == 0)
            c->stacks = (enum at_cfg_stacks)w;
    }
    if (rc == 0 && (v = getenv_fn("ACTTRACE_STACK_WALKER")) && *v) {
        rc = parse_word("ACTTRACE_STACK_WALKER", v, "shared|libunwind|fp", &w, err, errlen);
        if (rc == 0)
            c->stack_walker = (enum at_cfg_walker)w;
    }
    if (rc == 0 && (v = getenv_fn("ACTTRACE_FOLLOW")) && *v) {
        rc = parse_word("ACTTRACE_FOLLOW", v, "all|exec|none", &w, err, errlen);
        if (rc == 0)
            c->follow = (enum at_cfg_follow)w;
    }
    if (rc == 0 && (v = getenv_fn("ACTTRACE_CLOCK")) && *v) {
        rc = parse_word("ACTTRACE_CLOCK", v, "auto|monotonic|tsc", &w, err, errlen);
        if (rc == 0)
            c->clock = w;
    }
    if (rc == 0 && (v = getenv_fn("ACTTRACE_FILE_MODE")) && *v) {
        unsigned m;
        if (at_config_parse_file_mode(v, &m) != 0 || m == 0) {
            snprintf(err, errlen, "ACTTRACE_FILE_MODE=%s: expected octal permissions such as 0600 or 0640", v);
            rc = -1;
        } else {
            c->file_mode = m;
        }
    }
    if (rc == 0 && (v = getenv_fn("ACTTRACE_HOOK_WRAPPER")) && *v) {
        rc = parse_word("ACTTRACE_HOOK_WRAPPER", v, "direct|stub|ffi", &w, err, errlen);
        if (rc == 0) {
            c->hook_wrapper_stub = w == 1;
            c->hook_wrapper_ffi = w == 2;
        }
    }
    if (rc == 0 && (v = getenv_fn("ACTTRACE_WRITER_TABLE")) && *v) {
        rc = parse_word("ACTTRACE_WRITER_TABLE", v, "own|shared", &w, err, errlen);
        if (rc == 0)
            c->writer_table_shared = w == 1;
    }
    if (rc == 0 && (v = getenv_fn("ACTTRACE_SAMPLE_HZ")) && *v) {
        rc = parse_uint("ACTTRACE_SAMPLE_HZ", v, AT_SAMPLE_HZ_MAX, &x, err, errlen);
        if (rc == 0)
            c->sample_hz = (unsigned)x;
    }
    if (rc == 0 && (v = getenv_fn("ACTTRACE_WAIT_MIN_US")) && *v) {
        rc = parse_uint("ACTTRACE_WAIT_MIN_US", v, AT_WAIT_MIN_US_MAX, &x, err, errlen);
        if (rc == 0)
            c->wait_min_us = (unsigned)x;
    }
    if (rc == 0 && (v = getenv_fn("ACTTRACE_STACK_DEPTH")) && *v) {
        rc = parse_uint("ACTTRACE_STACK_DEPTH", v, 256, &x, err, errlen);
        if (rc == 0)
            c->stack_depth = (unsigned)x;
    }
    return rc;
}
