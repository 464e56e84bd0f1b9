/* at_tracegen.h: writes small traces with known content for the analysis-tool tests, through the
 * project's writer (runtime/trace.h) in a child process (one session per process). Events carry
 * activity-path ids built with the path encoder, exactly as the activity engine writes them:
 * <Name>Start/<Name>Stop (opcode 1/2, first field <Name>Id), acttrace-flow Send (9) / Receive (240).
 * Times are given in ms from the file's sync time, so outputs are predictable. */
#ifndef AT_TRACEGEN_H
#define AT_TRACEGEN_H

#include <stdint.h>
#include <sys/types.h>
#include "at_common.h"

/* Thread ids the generator saw, shared with the test process (slot k set by at_gen_note_thread; the
 * last slot: the thread that wrote the ProcessInfo event). */
#define AT_GEN_SLOTS 16
extern volatile uint64_t *at_gen_tids; /* at_gen_note_thread(k) fills slot k */

/* Fork; the child starts a session writing path, calls fn(ctx), stops the session and exits.
 * Returns the child's pid (the trace's pid) or -1. */
pid_t at_gen_trace(const char *path, void (*fn)(void *ctx), void *ctx);
/* The same with times counted from base (ns, the clock of the events) instead of the file's own sync
 * time: a second process's events on the first one's time line. */
pid_t at_gen_trace_at(const char *path, uint64_t base, void (*fn)(void *ctx), void *ctx);
/* A file's sync time (ns), 0 on error. */
uint64_t at_gen_sync_time(const char *path);
/* In fn: fork a child process that runs fn2(ctx) in the same session (the runtime gives it its own
 * file, <path without .nettrace>-<pid>.nettrace, and its own sync time), then stops it and exits.
 * Waits for it; returns its pid (also stored in slot AT_GEN_SLOTS - 2) or -1. */
pid_t at_gen_fork(void (*fn2)(void *ctx), void *ctx);
/* In fn: what exec does to the trace: this file ends (its open activities never stop) and the same
 * process goes on writing path, on the same time base. */
void at_gen_exec(const char *path);
/* In fn: record the calling thread's tid in slot k. */
void at_gen_note_thread(int k);
/* The activity-path id of "//1/5/1" in process pid (0 = this process). */
at_guid at_gen_id(uint32_t pid, const char *path);

/* In fn (any thread). ms: time from the sync time; non-decreasing per thread. */
void at_gen_start(const char *name, const char *path, const char *rel_path, double ms);
void at_gen_start_rel(const char *name, const char *path, const at_guid *rel, double ms);
void at_gen_stop(const char *name, const char *path, double ms);
void at_gen_send(const char *path, double ms);
void at_gen_recv(const char *path, const char *prev_path, double ms);
/* An informational event inside path (NULL: none), with a stack (leaf first). */
void at_gen_info(const char *name, const char *path, double ms, const uintptr_t *ips, uint32_t nips);

/* Replace whole-number tokens equal to the tids of slots 0..n-1 with "T<k>" and the pids given with
 * "P<k>" (k from 1); a number after "pid " is looked up among the pids only. Returns malloc'd text. */
char *at_gen_normalize(const char *text, int ntids, const pid_t *pids, int npids);

/* Run <build>/acttrace with args (NULL-terminated, without the program name) to completion, as
 * at_run does (at_toolrun.c: at_testlib.h's at_field() clashes with trace.h's type of that name). */
struct at_run_result;
int at_tool_run(struct at_run_result *r, const char *const *args);

#endif
