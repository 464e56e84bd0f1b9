/* acttrace.h: mark activities by hand in a program traced with libacttrace.so.
 *
 * Include this header and call acttrace_start("Request") / acttrace_stop("Request"); link nothing.
 * The calls resolve to libacttrace.so when it is preloaded (LD_PRELOAD) and otherwise cost one load
 * and one branch: the library's entry points are weak references that stay null when it is absent.
 * The program must be position-independent (PIE, Debian's default, or -fPIC) for a weak reference to
 * be bound at load time.
 *
 * Semantics are .NET EventSource's: a Start makes a child of the thread's current activity (or a new
 * root //1/<n>) and makes it current; the matching Stop restores what was current before. A Start of a
 * name already live on the thread's chain stops the old one first unless ACTTRACE_RECURSIVE is given.
 * New threads, thread pools and callback APIs inherit the current activity. Events: <Name>Start and
 * <Name>Stop with a first payload field <Name>Id, under the provider "acttrace". */
#ifndef ACTTRACE_H
#define ACTTRACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ACTTRACE_RECURSIVE 0x1u

/* Entry points of libacttrace.so (weak: null when it is not loaded). Use the inline functions. */
extern int acttrace_api_start(const char *name, unsigned flags) __attribute__((weak));
extern int acttrace_api_stop(const char *name) __attribute__((weak));
extern int acttrace_api_event(const char *name, const char *field, int type, const void *value)
    __attribute__((weak));
extern int acttrace_api_current_path(char *buf, size_t n) __attribute__((weak));
extern void *acttrace_api_capture(void) __attribute__((weak));
extern void *acttrace_api_enter(void *captured) __attribute__((weak));
extern void acttrace_api_leave(void *prev) __attribute__((weak));
extern void acttrace_api_release(void *captured) __attribute__((weak));

#define ACTTRACE_FIELD_NONE 0
#define ACTTRACE_FIELD_I64 1
#define ACTTRACE_FIELD_STR 2
#define ACTTRACE_FIELD_DOUBLE 3

/* Is the tracer loaded? */
static inline int acttrace_loaded(void)
{
    return acttrace_api_start != 0;
}

/* Start an activity "name" (events nameStart/nameStop). 1 if started, 0 if not (not loaded, tracing
 * off, or the depth cap of 100 reached). */
static inline int acttrace_start(const char *name)
{
    return acttrace_api_start ? acttrace_api_start(name, 0) : 0;
}
static inline int acttrace_start_recursive(const char *name)
{
    return acttrace_api_start ? acttrace_api_start(name, ACTTRACE_RECURSIVE) : 0;
}
/* Stop the newest live activity "name" of this thread's chain (EventSource rules). 1 if stopped. */
static inline int acttrace_stop(const char *name)
{
    return acttrace_api_stop ? acttrace_api_stop(name) : 0;
}
/* An informational event "name" (no payload, or one field) inside the current activity. */
static inline void acttrace_event(const char *name)
{
    if (acttrace_api_event)
        acttrace_api_event(name, NULL, ACTTRACE_FIELD_NONE, NULL);
}
static inline void acttrace_event_i64(const char *name, const char *field, int64_t value)
{
    if (acttrace_api_event)
        acttrace_api_event(name, field, ACTTRACE_FIELD_I64, &value);
}
static inline void acttrace_event_double(const char *name, const char *field, double value)
{
    if (acttrace_api_event)
        acttrace_api_event(name, field, ACTTRACE_FIELD_DOUBLE, &value);
}
static inline void acttrace_event_str(const char *name, const char *field, const char *value)
{
    if (acttrace_api_event)
        acttrace_api_event(name, field, ACTTRACE_FIELD_STR, value);
}
/* The current activity as "//1/5/1" into buf; its length, or -1 (none, not loaded, buf too small). */
static inline int acttrace_current_path(char *buf, size_t n)
{
    if (acttrace_api_current_path)
        return acttrace_api_current_path(buf, n);
    if (n)
        buf[0] = 0;
    return -1;
}

/* Flow through a queue of the program's own: capture where work is queued, enter/leave around
 * running it (on any thread), release once it can no longer run. NULL captures are valid. */
static inline void *acttrace_capture(void)
{
    return acttrace_api_capture ? acttrace_api_capture() : 0;
}
static inline void *acttrace_enter(void *captured)
{
    return acttrace_api_enter ? acttrace_api_enter(captured) : 0;
}
static inline void acttrace_leave(void *prev)
{
    if (acttrace_api_leave)
        acttrace_api_leave(prev);
}
static inline void acttrace_release(void *captured)
{
    if (acttrace_api_release)
        acttrace_api_release(captured);
}

#ifdef __cplusplus
}
#endif
#endif
