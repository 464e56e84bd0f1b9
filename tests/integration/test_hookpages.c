/* test_hookpages: a server's hooked call runs between two system calls, and on a kernel that
 * isolates page tables without PCID each system call empties the TLB: every page the shim's side
 * of the call touches is a page walk, whatever its instruction count. The path's code is laid out
 * in the order a call runs it (shim/start.ld), and what it reads is gathered on few pages (the
 * hooks' fields apart from their names and resolution, the rules beside the probes, the stub's
 * tables, the runtime's hot words). This counts those pages with valgrind's lackey, which lists
 * every instruction and data access: tests/fixtures/hook_pages.c makes the calls nginx makes per
 * request in a loop (the open and close of the file it serves, a writev on an accepted socket and a
 * recv on its peer) under nginx's per-request config of make bench (a Connection activity from
 * accept4 to close, fd-keyed, and writev and recv as events with captures), and one iteration of the
 * loop, after the trace's writer has started, may run on at most MAX_CODE pages of the shim's code
 * and touch at most MAX_DATA pages (MAX_DATA_LINES cache lines) of data other than the stack, in at
 * most MAX_INSNS of the shim's instructions, its calls on at most MAX_CODE_LINES lines of code (each
 * call's lines counted); the same with the default stacks (the _STK bounds). The trace holds every
 * event the calls make. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "at_testlib.h"

#define ITERS 12
/* Measured without stacks: 3 code pages (the interposers', and the interposers' twins with the rules'
 * finish and the event write on two) and 7 data pages: the interposers' page with the runtime's hot
 * words and the thread state's offset, the rules' page (probes, rules, event types), the thread's
 * TLS, its ring, the record's page of its chunk and the chunk's first page, the pair's keys (the
 * close). Neither the GOT (the TLS offset, at_ptls_off) nor the connection's activity (its id kept
 * in the thread's state, at_act_idc) is read. One page of slack for the code: where a page
 * boundary falls moves with any change to the path's code. */
#define MAX_CODE 4
#define MAX_DATA 8
/* The shim's instructions in one iteration (the three hooked calls, their events, the interposed
 * calls). Measured: 1,079 with an event at the return written from the interposer's own
 * registers and the close of a file whose fd holds no Connection skipped at a load (hooks.c,
 * hk_fast), the event's id from the thread's state, and writev and recv timed as waits (the thread
 * is in the Connection: ~50 instructions a call, two clock reads among them; 935 before waits
 * were timed); 1,166 with both through the hook logic's general way, before waits; 1,118 with each
 * receive's test of its socket's traceparent state and each close's of its connection's parked
 * time (1,762 while a receive on a socket that was no accepted HTTP connection's was scanned);
 * 1,124 with the one-pass record's test of the clock (it takes the monotonic one too); 1,151 with
 * the connection's exchanges counted (the accepted socket's ends are recorded now that the rule's
 * Start tags it: each answer's send is timed, each receive tests whether it turns the socket). */
#define MAX_INSNS 1180
/* The cache lines of data besides the stack (each a miss when the kernel's work between two calls
 * evicted it). Measured: 29 (39 through the general way: per call the rule's line and the probe's
 * and hook's three besides the probe's first). */
#define MAX_DATA_LINES 36
/* The cache lines of the shim's code each call runs on, summed over the iteration's calls (a line
 * two calls run is a miss for each: between them the kernel's work evicts it). Measured: 72-82 (99
 * through the general way), 94 with the waits timed, 95-97 since, 100 with the exchanges counted. Where blocks fall moves a few lines with any
 * change to the path's code: slack for that. */
#define MAX_CODE_LINES 106
/* With the monotonic clock (ACTTRACE_CLOCK=monotonic, or a machine whose TSC is not trusted): each
 * of the iteration's clock reads is a call to clock_gettime (its own instructions, libc's and the
 * vDSO's, are not the shim's) through at_clock_mono_ns, and the one-pass record's through a stub
 * that saves the registers a call may clobber. Measured: 1,263 instructions, 111 lines, 4 code
 * pages; 1,302, 117 lines and 5 code pages with the exchanges counted (the interposers' runs grew
 * by their tests: the monotonic read's code, which only this clock runs, moved after them to keep
 * them on their pages with the TSC, and is a page of its own here). */
#define MAX_CODE_MONO 5
#define MAX_INSNS_MONO 1330
#define MAX_CODE_LINES_MONO 124

/* The same loop with the default stacks (each event carries its caller's stack, served from a kept
 * walk while the words it read are unchanged, and written as a reference to the ring's definition
 * of it). Measured: 6 code pages (165 lines) and 9 data pages (46 lines), 1,908 instructions with
 * the traceparent and parked-time tests (1,869 before them; 1,914 with the record's clock test; 1,941 with the exchanges counted) and the waits timed (5 code pages, 142-146 lines and 1,729 instructions before; 2,001 on 4 code pages
 * when each stack was trimmed and copied in full), with what such an event runs besides on a page
 * of its own (AT_PATH_STACK), the walker's words on the page of the rules and a kept walk in a half
 * page. */
#define MAX_CODE_STK 6
#define MAX_DATA_STK 10
#define MAX_INSNS_STK 1980
#define MAX_CODE_LINES_STK 170
#define MAX_DATA_LINES_STK 56

typedef struct range {
    unsigned long lo, hi;
} range;

static bool in(const range *r, int n, unsigned long a)
{
    for (int i = 0; i < n; i++)
        if (a >= r[i].lo && a < r[i].hi)
            return true;
    return false;
}

/* distinct pages (or cache lines), a small set */
typedef struct pageset {
    unsigned long p[512];
    int n;
} pageset;

static void add(pageset *s, unsigned long page)
{
    for (int i = 0; i < s->n; i++)
        if (s->p[i] == page)
            return;
    if (s->n < 512)
        s->p[s->n++] = page;
}

typedef struct bounds {
    int code, data, insns, code_lines, data_lines;
} bounds;

/* One run of the fixture under lackey with ACTTRACE_STACKS=stacks and ACTTRACE_CLOCK=clock, its
 * iteration held to b. The clock is named: left to choose, it follows the machine (the TSC when
 * the CPU as valgrind presents it says invariant and the kernel's clocksource is built on it). */
static void check_pages(const char *stacks, const char *clock, const bounds *b)
{
    ck_assert_msg(system("command -v valgrind >/dev/null 2>&1") == 0,
                  "valgrind is not installed (.ci/deps installs it)");
    char *fx = at_fixture_path("hook_pages");
    char conf[4200], iters[16];
    snprintf(conf, sizeof conf, "ACTTRACE_CONFIG=%s/tests/data/hooks/nginx.conf", AT_SOURCE_DIR);
    snprintf(iters, sizeof iters, "%d", ITERS);
    /* the trace's writer thread asleep through the loop: lackey lists every thread's instructions
     * in one stream, and the writer's would count as the calls' */
    char stk_env[64];
    snprintf(stk_env, sizeof stk_env, "ACTTRACE_STACKS=%s", stacks);
    char clk_env[64];
    snprintf(clk_env, sizeof clk_env, "ACTTRACE_CLOCK=%s", clock);
    /* the calls are timed as waits (the thread is in the Connection) but none is recorded: under
     * valgrind every call takes longer than the default threshold */
    const char *env[] = {conf, stk_env, clk_env, "ACTTRACE_FLUSH_MS=3600000", "ACTTRACE_WAIT_MIN_US=60000000",
                         NULL};
    const char *argv[] = {"valgrind", "--tool=lackey", "--trace-mem=yes", "--log-file=lackey.out",
                          fx, iters, NULL};
    at_session s;
    ck_assert_int_eq(at_session_run(&s, "hookpages", argv, env), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && strstr(s.r.out, "sent 1800") && s.has_trace,
                  "%s", at_session_describe(&s, d, sizeof d));
    /* every call's event, in the trace */
    int nw = 0, nr = 0;
    for (long i = at_find(&s.t, NULL, "Writev", 0); i >= 0; i = at_find(&s.t, NULL, "Writev", i + 1))
        nw++;
    for (long i = at_find(&s.t, NULL, "Recv", 0); i >= 0; i = at_find(&s.t, NULL, "Recv", i + 1))
        nr++;
    ck_assert_int_eq(nw, ITERS);
    ck_assert_int_eq(nr, ITERS);

    /* the fixture's mark, the shim's mappings and main's frame, from its stderr */
    unsigned long mark = 0, step = 0;
    range shim[16] = {{0, 0}}, stack[1] = {{0, 0}};
    int nshim = 0, nstack = 0;
    for (const char *l = s.r.err; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : "") {
        unsigned long lo, hi;
        char name[256];
        if (sscanf(l, "MARK %lx", &lo) == 1)
            mark = lo;
        else if (sscanf(l, "STEP %lx", &lo) == 1)
            step = lo;
        else if (sscanf(l, "STACK %lx", &lo) == 1 && !nstack)
            stack[nstack++] = (range){lo - (1ul << 20), lo + (1ul << 16)}; /* main's frame, below */
        else if (sscanf(l, "MAP %lx %lx %255s", &lo, &hi, name) == 3 && nshim < 16)
            shim[nshim++] = (range){lo, hi};
    }
    ck_assert_msg(mark && step && nshim && nstack, "no mark or mappings: %s", s.r.err);

    char path[4300];
    snprintf(path, sizeof path, "%s/lackey.out", s.dir);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f, "no lackey output at %s", path);
    /* iterations 5 to 10 (each call's first time is over): the fewest pages any of them took,
     * should another thread's instructions still fall between two marks */
    int iter = -1, best_code = 1 << 20, best_data = 1 << 20, best_stack = 1 << 20;
    long insns = 0, best_insns = 1 << 30;
    /* code lines: each call's own (between two steps), summed over the iteration's calls: a line
     * two calls share is a miss for each when the kernel's work between them evicted it */
    pageset lines = {0}, clines = {0};
    int best_lines = 1 << 20, best_clines = 1 << 20, clines_sum = 0;
    pageset code = {0}, data = {0}, stk = {0};
    bool shim_insn = false;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long a;
        if (line[0] == 'I' && sscanf(line + 1, " %lx", &a) == 1) {
            if (a == step || a == mark) {
                clines_sum += clines.n;
                clines.n = 0;
            }
            if (a == mark) {
                if (iter >= 5 && iter <= 10 && code.n + data.n < best_code + best_data) {
                    best_code = code.n;
                    best_data = data.n;
                    best_stack = stk.n;
                }
                if (iter >= 5 && iter <= 10 && insns < best_insns)
                    best_insns = insns;
                if (iter >= 5 && iter <= 10 && lines.n < best_lines)
                    best_lines = lines.n;
                if (iter >= 5 && iter <= 10 && clines_sum < best_clines)
                    best_clines = clines_sum;
                iter++;
                code.n = data.n = stk.n = 0;
                insns = 0;
                lines.n = 0;
                clines_sum = 0;
            }
            shim_insn = in(shim, nshim, a);
            if (shim_insn) {
                add(&code, a >> 12);
                add(&clines, a >> 6);
                insns++;
            }
        } else if (line[0] == ' ' && strchr("LSM", line[1]) && sscanf(line + 2, " %lx", &a) == 1) {
            if (shim_insn && in(stack, nstack, a))
                add(&stk, a >> 12);
            else if (shim_insn) {
                add(&data, a >> 12);
                add(&lines, a >> 6);
            }
        }
    }
    fclose(f);
    fprintf(stderr,
            "hooked calls, stacks %s, clock %s: %d code pages (%d lines, each call's summed), %d data pages (%d lines), %ld instructions an "
            "iteration\n", stacks, clock, best_code, best_clines, best_data, best_lines, best_insns);
    ck_assert_msg(iter >= 10, "only %d iterations marked in lackey's output", iter);
    ck_assert_msg(best_code >= 3, "the shim ran on %d code pages: the calls were not hooked",
                  best_code);
    ck_assert_msg(best_code <= b->code && best_data <= b->data,
                  "stacks %s: one iteration of the hooked calls ran on %d code pages (at most %d) and "
                  "touched %d data pages (at most %d) and %d of the stack", stacks, best_code,
                  b->code, best_data, b->data, best_stack);
    ck_assert_msg(best_insns <= b->insns,
                  "stacks %s: one iteration of the hooked calls ran %ld of the shim's instructions "
                  "(at most %d)", stacks, best_insns, b->insns);
    ck_assert_msg(best_clines <= b->code_lines,
                  "stacks %s: the hooked calls of one iteration ran on %d cache lines of the shim's "
                  "code, each call's counted (at most %d)", stacks, best_clines, b->code_lines);
    ck_assert_msg(best_lines <= b->data_lines,
                  "stacks %s: one iteration of the hooked calls touched %d cache lines of data "
                  "besides the stack (at most %d)", stacks, best_lines, b->data_lines);
    unlink(path);
    at_session_free(&s);
    free(fx);
}

/* valgrind runs no program with a sanitizer's runtime preloaded, and a sanitized shim's pages are
 * not the shipped one's: the normal build's checks */
START_TEST(test_hooked_call_pages)
{
    if (getenv("ACTTRACE_ASAN"))
        return;
    const bounds b = {MAX_CODE, MAX_DATA, MAX_INSNS, MAX_CODE_LINES, MAX_DATA_LINES};
    check_pages("none", "tsc", &b);
}
END_TEST

/* The same where the TSC is not trusted: the one-pass record and the waits read CLOCK_MONOTONIC
 * through a pointer on the runtime's hot page, from code on the path's pages (runtime/clock.c)
 * (it took 3 more code pages and one of data, the general writer's and the GOT's, when only the
 * TSC's events were written in one pass). */
START_TEST(test_hooked_call_pages_monotonic)
{
    if (getenv("ACTTRACE_ASAN"))
        return;
    const bounds b = {MAX_CODE_MONO, MAX_DATA, MAX_INSNS_MONO, MAX_CODE_LINES_MONO, MAX_DATA_LINES};
    check_pages("none", "monotonic", &b);
}
END_TEST

START_TEST(test_stacked_call_pages)
{
    if (getenv("ACTTRACE_ASAN"))
        return;
    const bounds b = {MAX_CODE_STK, MAX_DATA_STK, MAX_INSNS_STK, MAX_CODE_LINES_STK,
                      MAX_DATA_LINES_STK};
    check_pages("start", "tsc", &b);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("hookpages");
    TCase *tc = tcase_create("pages");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_hooked_call_pages);
    tcase_add_test(tc, test_hooked_call_pages_monotonic);
    tcase_add_test(tc, test_stacked_call_pages);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
