/* activity.h: the activity engine: EventSource activity semantics with activity-path ids and a
 * per-thread current activity that flows like .NET's AsyncLocal (../shared/reference/000_*.txt
 * sections 2, 4, 5, 8). Knows nothing of LD_PRELOAD; the shim, the tools and the tests use it. */
#ifndef AT_ACTIVITY_H
#define AT_ACTIVITY_H

#include "at_common.h"
#include "trace.h"

typedef struct at_activity at_activity;
typedef struct at_activity_kind at_activity_kind;

#define AT_ACT_RECURSIVE 0x1u /* a new Start of this name does not auto-stop a live one on the chain */

#define AT_ACTIVITY_PROVIDER "acttrace" /* default provider of activity events */
#define AT_ACTIVITY_MAX_DEPTH 100

typedef struct at_activity_kind_desc {
    const char *provider; /* NULL: AT_ACTIVITY_PROVIDER */
    const char *name;     /* "Request": events RequestStart (opcode 1) / RequestStop (opcode 2),
                             first payload field "RequestId" (uint64, same on Start and Stop) */
    unsigned flags;       /* AT_ACT_* */
    uint8_t level;        /* 0 = NT_LEVEL_INFO */
    uint64_t keywords;
    uint32_t nstart_fields; /* extra payload fields on Start, after <Name>Id */
    const at_field *start_fields;
    uint32_t nstop_fields;  /* extra payload fields on Stop, after <Name>Id */
    const at_field *stop_fields;
} at_activity_kind_desc;

/* Thread-safe, allocates; same name+provider returns the same kind. NULL on invalid input. */
at_activity_kind *at_activity_kind_register(const at_activity_kind_desc *d);

/* Start a new activity: child of the thread's current one (or a root //1/<n>); it becomes current.
 * Writes <Name>Start with ActivityId = new id, RelatedActivityId = id current before, payload =
 * <Name>Id then extra. ips: optional stack for the event. Returns the activity (owned by the thread's
 * current chain; take a reference to keep it) or NULL if none could be made (then nothing changes). */
at_activity *at_activity_start(at_activity_kind *k, const void *extra, uint32_t extra_len,
                               const uintptr_t *ips, uint32_t nips);

/* The same, and the caller gets a reference of its own (as at_activity_ref, without its atomic
 * operation: nobody else can see the new activity yet). For a hooked call that keeps its activity
 * until the function returns; end it with at_activity_stop_held or the reference with
 * at_activity_unref. */
at_activity *at_activity_start_held(at_activity_kind *k, const void *extra, uint32_t extra_len,
                                    const uintptr_t *ips, uint32_t nips);
/* The common end of such a call, without atomic operations: when a is still the thread's current
 * activity, live, and held only by the thread and the caller, write its Stop, make its creator
 * current, drop both references and return true. Otherwise change nothing and return false (the
 * caller stops it by kind or with at_activity_stop_ref, then drops its reference). */
bool at_activity_stop_held(at_activity *a, const void *extra, uint32_t extra_len,
                           const uintptr_t *ips, uint32_t nips);
/* The two for the commonest shape, a Start with no fields and a Stop with one 32-bit field, neither
 * with a stack: the same work with the shape known when compiled (a hooked call of a plain rule).
 * at_activity_end_held_u32 always ends the call's activity and drops the caller's reference: as
 * at_activity_stop_held when it can, else by kind when a is still current (it was captured), else
 * with at_activity_stop_ref (a child of it is current, or another thread stopped it). */
at_activity *at_activity_start_held_plain(at_activity_kind *k);
/* What the held starts return when the Start was logged without an id, past
 * AT_ACTIVITY_MAX_DEPTH (EventSource's rule): nothing is tracked, and the call's Stop is logged
 * without an id too (at_activity_stop_untracked), as EventSource logs a Stop it cannot match.
 * Never dereferenced. */
extern at_activity at_act_untracked;
#define AT_ACTIVITY_UNTRACKED (&at_act_untracked)
void at_activity_stop_untracked(at_activity_kind *k, const void *extra, uint32_t extra_len,
                                const uintptr_t *ips, uint32_t nips);
void at_activity_end_held_u32(at_activity *a, uint32_t v);

/* Stop by name, EventSource rules: current is of this kind -> stop it, restore its creator; else the
 * newest live activity of this kind on the current chain is stopped and those passed over are killed
 * (no Stop events); none -> a Stop event with the current id is logged and nothing changes.
 * Returns true if an activity was stopped. */
bool at_activity_stop(at_activity_kind *k, const void *extra, uint32_t extra_len,
                      const uintptr_t *ips, uint32_t nips);

/* Stop one particular activity, from any thread (Start and Stop on different symbols/threads).
 * Writes <Name>Stop with its id. If it is current on the calling thread, its creator becomes current. */
bool at_activity_stop_ref(at_activity *a, const void *extra, uint32_t extra_len,
                          const uintptr_t *ips, uint32_t nips);

at_activity *at_activity_current(void);               /* NULL when none */
const at_guid *at_activity_id(const at_activity *a);  /* the activity-path GUID */
uint64_t at_activity_unique_id(const at_activity *a); /* the <Name>Id payload value */
bool at_activity_is_stopped(const at_activity *a);
/* "//1/5/1"-style path (EventSource notation). Returns length, or -1 if buf too small. */
int at_activity_path(const at_activity *a, char *buf, size_t n);
void at_activity_ref(at_activity *a);
void at_activity_unref(at_activity *a);

/* Write an informational event inside the current activity (ActivityId = current id or zero). */
int at_activity_event(const at_event_type *t, const void *payload, uint32_t len,
                      const uintptr_t *ips, uint32_t nips);
/* The same at a time the caller took (at_ticks()), such as the start of a wait it measured; kept
 * after the thread's last event (a thread's events never go back). */
int at_activity_event_ts(uint64_t ts, const at_event_type *t, const void *payload, uint32_t len,
                         const uintptr_t *ips, uint32_t nips);

/* --- flow: the API the shim uses to carry the current activity across threads ---
 * submit side:  cap = at_flow_capture();             (a reference; NULL when no activity: cheap)
 * run side:     prev = at_flow_enter(cap); work(); at_flow_leave(prev);
 * done:         at_flow_release(cap);               (once, when the work can no longer run)
 * prev is opaque (only for at_flow_leave). The capture must stay referenced until the matching leave:
 * enter borrows it rather than taking a reference (that keeps a flow hop at two atomic operations).
 * enter may be called many times on one capture (timers, repeated callbacks). If the captured
 * activity stopped meanwhile, the work runs in its nearest live ancestor (as EventSource does).
 * Whatever the work starts and leaves unstopped does not leak out: leave restores prev exactly. */

/* Transfers (WCF model): record that work moved between threads. send: on the giving side, opcode 9,
 * ActivityId = a's id. receive: on the taking side, opcode 240, ActivityId = a's id, RelatedActivityId
 * = the id that was current on this thread before. Under a flow provider/keyword users can turn off. */
/* at_flow_capture, at_flow_enter, at_flow_leave, at_flow_release: inline, in activity_inline.h */
#include "activity_inline.h"

#define AT_FLOW_PROVIDER "acttrace-flow"
#define AT_KEYWORD_FLOW 0x1ull
/* Returns the Send's timestamp, which is also its TransferId (0 when none was written). */
uint64_t at_flow_transfer_send(at_activity *a);
void at_flow_transfer_receive(at_activity *a, const at_guid *previous);
/* The same, given the timestamp of the Send this Receive answers (0: unknown): the clock is then read
 * without a fence, and kept after the Send's. */
void at_flow_transfer_receive_after(at_activity *a, const at_guid *previous, uint64_t send_ts);
/* The same, naming the sending thread (0: unknown) and the Send's id (at_flow_transfer_send's value,
 * 0: unknown) in the Receive, so readers pair each Receive with its own Send. */
void at_flow_transfer_receive_from(at_activity *a, const at_guid *previous, uint64_t from_tid,
                                   uint64_t send_id);

/* After a Receive written by at_flow_transfer_receive_from (the same from_tid and send_id), given
 * the value of the at_flow_enter it followed: the hand-off also opens a task as TPL writes them
 * (TaskExecute Start), closed by the at_flow_leave given that value (TaskExecute Stop), so TraceEvent
 * gives the samples this thread takes meanwhile to the activity (see activity.c). */
void at_flow_task_start(at_activity *prev, uint64_t from_tid, uint64_t send_id);
/* Whether hand-offs are written as tasks too (off until called; before the first transfer). */
void at_flow_tasks_enable(bool on);

/* Process start: root activities link to an activity of the parent process (exec chains). */
void at_activity_set_process_parent(const at_guid *parent_id);
/* Process start, before any activity: the image's exec generation (0 for a process's first image).
 * An exec keeps the pid, which activity ids carry in their checksum: image k numbers its roots
 * under //(k+1) rather than //1, so that no id of an earlier image (the one the new image's first
 * root is related to) is given out again. */
void at_activity_set_exec_generation(uint32_t gen);
/* After fork in the child: reset per-process counters' pid binding (checksums use the new pid). */
void at_activity_after_fork_child(void);
/* The end of a thread with at_thread_managed set: release its activities and caches now (what the
 * thread key's destructor does for other threads). */
void at_activity_thread_exit(void);

#endif
