/* test_tools_sscomp.c: `acttrace tree --tsv` on a trace written with known content, and TraceEvent's
 * StartStopActivityComputer agreeing with it through the checker of tests/compat (when it is built:
 * make check-traceevent builds it). The trace holds the cases where TraceEvent's rules differ from
 * acttrace's by design (a root started while another activity runs on its thread, a Stop of another
 * name, a Stop on another thread, a path PerfView prints otherwise than the runtime encoded it) and a
 * stack whose frames lie on the first and last bytes of libc's code mapping and the byte after it,
 * where an inclusive mapping end would be read one byte short. The program's events are recorded on
 * one CPU (the last it may use), which the file gives as their capture processor. */
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "at_testlib.h"
#include "at_tracegen.h"

extern const unsigned int __rseq_size __attribute__((weak));

static char *dir;
static char path[4096];

static void setup(void)
{
    dir = at_tmpdir("tools-sscomp");
    snprintf(path, sizeof path, "%s/ss.nettrace", dir);
}

static void teardown(void)
{
    if (!getenv("AT_KEEP_TMP")) at_rmtree(dir);
    free(dir);
}

/* The first executable mapping of libc in this process: [start, end). */
static bool libc_text(uintptr_t *start, uintptr_t *end)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return false;
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long s, e;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &s, &e, perms) == 3 && perms[2] == 'x' && strstr(line, "/libc.so.6")) {
            *start = s;
            *end = e;
            found = true;
        }
    }
    fclose(f);
    return found;
}

static void *stopper(void *arg)
{
    (void)arg;
    at_gen_note_thread(1);
    at_gen_stop("E", "//4", 11); /* stopped on another thread than its start */
    return NULL;
}

/* Pins the calling thread (and the threads it creates) to its last allowed CPU; returns it. */
static int pin_last_cpu(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
    int last = -1;
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set)) last = i;
    CPU_ZERO(&set);
    CPU_SET(last, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 ? last : -1;
}

static __attribute__((noinline)) void gen(void *ctx)
{
    (void)ctx;
    if (pin_last_cpu() < 0) _exit(4);
    at_gen_note_thread(0);
    at_gen_start("A", "//1", NULL, 1);
    at_gen_start("C", "//1/1", "//1", 2);
    at_gen_stop("C", "//1/1", 3);
    /* a root while A still runs here (the thread left A, as acttrace_enter(NULL) does): TraceEvent
     * makes the thread's running A its creator */
    at_gen_start("B", "//2", NULL, 4);
    at_gen_stop("B", "//2", 5);
    at_gen_stop("A", "//1", 6);
    at_gen_start("D", "//3", NULL, 7);
    at_gen_stop("X", "//3", 8); /* another name: acttrace leaves D running, TraceEvent stops it */
    at_gen_stop("D", "//3", 9);
    at_gen_start("E", "//4", NULL, 10);
    pthread_t t;
    pthread_create(&t, NULL, stopper, NULL);
    pthread_join(t, NULL);
    at_gen_start("F", "//300", NULL, 12);
    at_gen_start("G", "//300/1", "//300", 13); /* PerfView's decoder prints this path its own way */
    at_gen_stop("G", "//300/1", 14);
    at_gen_stop("F", "//300", 15);
    uintptr_t s = 0, e = 0;
    if (!libc_text(&s, &e)) _exit(3);
    uintptr_t ips[] = {(uintptr_t)&gen + 1, s, e - 1, e};
    at_gen_info("Edges", NULL, 16, ips, 4);
}

typedef struct act {
    char serial[24], parent[24], start_tid[24], stop_tid[24], name[32], path[64], start[32], dur[32],
        pvpath[96];
} act;

/* The tsv line of the activity named name. */
static act find(const char *tsv, const char *name)
{
    act a;
    char want[64];
    snprintf(want, sizeof want, "\t%s\t//", name);
    const char *l = tsv;
    for (; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, "activity\t", 9) != 0) continue;
        const char *nl = strchr(l, '\n');
        const char *hit = strstr(l, want);
        if (!hit || (nl && hit > nl)) continue;
        char pid[24], guid[64];
        int n = sscanf(l, "activity\t%23[^\t]\t%23[^\t]\t%23[^\t]\t%23[^\t]\t%23[^\t]\t%31[^\t]\t%63[^\t]\t%31[^\t]\t%31[^\t]\t%63[^\t]\t%95[^\t\n]",
                       a.serial, a.parent, pid, a.start_tid, a.stop_tid, a.name, a.path, a.start, a.dur, guid,
                       a.pvpath);
        ck_assert_msg(n == 11, "%d fields in %.200s", n, l);
        return a;
    }
    ck_abort_msg("no activity %s in:\n%s", name, tsv);
    return a;
}

/* The checker of tests/compat built against TraceEvent version (at_dotnet_built), or NULL without
 * dotnet, which AT_TRACEEVENT_REQUIRED=1 (CI) refuses. */
static char *checker_path(const char *version)
{
    char err[4600];
    char *p = at_dotnet_built(AT_SOURCE_DIR "/tests/compat/AtCompat.csproj", version,
                              "te-%s/bin/Release/net10.0/atcompat", err, sizeof err);
    ck_assert_msg(p || !err[0], "%s", err);
    ck_assert_msg(p || !at_traceevent_required(), "dotnet is not on PATH (AT_TRACEEVENT_REQUIRED=1)");
    return p;
}

START_TEST(tsv_and_traceevent_agree)
{
    pid_t pid = at_gen_trace(path, gen, NULL);
    ck_assert_int_gt(pid, 0);
    at_run_result r;
    const char *args[] = {"tree", "--tsv", path, NULL};
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(r.exited && r.status == 0, "tree --tsv: %s", r.err);
    const char *tsv = r.out;
    char t0[24], t1[24];
    snprintf(t0, sizeof t0, "%" PRIu64, at_gen_tids[0]);
    snprintf(t1, sizeof t1, "%" PRIu64, at_gen_tids[1]);

    act a = find(tsv, "A"), c = find(tsv, "C"), b = find(tsv, "B"), d = find(tsv, "D"), e = find(tsv, "E"),
        f = find(tsv, "F"), g = find(tsv, "G");
    ck_assert_str_eq(a.parent, "0");
    ck_assert_str_eq(a.start, "1000000");
    ck_assert_str_eq(a.dur, "5000000");
    ck_assert_str_eq(c.parent, a.serial);
    ck_assert_str_eq(c.path, "//1/1");
    ck_assert_str_eq(b.parent, "0"); /* a root for acttrace: its path is no child of //1 */
    ck_assert_str_eq(d.dur, "2000000"); /* stopped by its own name's Stop */
    ck_assert_str_eq(e.start_tid, t0);
    ck_assert_str_eq(e.stop_tid, t1);
    ck_assert_str_eq(e.dur, "1000000");
    ck_assert_str_eq(g.parent, f.serial);
    ck_assert_str_eq(g.path, "//300/1");
    char pv[64];
    snprintf(pv, sizeof pv, "/#%d/", (int)pid);
    ck_assert_msg(strncmp(g.pvpath, pv, strlen(pv)) == 0, "PerfView path %s", g.pvpath);
    /* the Stop of another name, listed for readers that pair by id alone */
    char stop[128];
    snprintf(stop, sizeof stop, "stop\t%d\t%s\tXStop\t8000000\t", (int)pid, t0);
    ck_assert_msg(strstr(tsv, stop), "no '%s' in:\n%s", stop, tsv);
    at_run_result_free(&r);

    /* every event of the program on the CPU it was pinned to (with rseq; the writer's own: none) */
    const char *cargs[] = {"dump", "--counts", path, NULL};
    ck_assert_int_eq(at_tool_run(&r, cargs), 0);
    ck_assert_msg(r.exited && r.status == 0, "dump --counts: %s", r.err);
    if (getenv("AT_PRINT")) printf("%s", r.out);
    cpu_set_t set;
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    int last = -1;
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set)) last = i;
    char cpu[64];
    snprintf(cpu, sizeof cpu, "cpu\t%d\t", last);
    bool rseq = &__rseq_size && __rseq_size >= 8; /* glibc registers rseq: the CPU is known */
    ck_assert_msg(strstr(r.out, cpu) || !rseq, "no events on CPU %d: %.300s", last, strstr(r.out, "cpu\t") ? strstr(r.out, "cpu\t") : r.out);
    for (const char *l = strstr(r.out, "cpu\t"); l; l = strstr(l + 1, "\ncpu\t")) {
        const char *c = l[0] == '\n' ? l + 1 : l;
        ck_assert_msg(!strncmp(c, cpu, strlen(cpu)) || !strncmp(c, "cpu\tnone\t", 9), "%.40s:\n%s", c, r.out);
    }
    at_run_result_free(&r);

    /* the real reader agrees, oldest and newest TraceEvent */
    const char *versions[] = {"3.1.21", "4.0.0"};
    for (int v = 0; v < 2; v++) {
        char *chk = checker_path(versions[v]);
        if (!chk) {
            printf("test_tools_sscomp: dotnet is not on PATH: TraceEvent %s did not check the file\n",
                   versions[v]);
            continue;
        }
        char tool[4200];
        snprintf(tool, sizeof tool, "%s/acttrace", at_build_dir());
        const char *cargv[] = {chk, "--acttrace", tool, path, NULL};
        at_run_opts o = {.argv = cargv, .no_preload = true};
        ck_assert_int_eq(at_run(&o, &r), 0);
        ck_assert_msg(r.exited && r.status == 0 && strstr(r.out, "PASS ") && strstr(r.out, ", 7 activities agree"),
                      "TraceEvent %s: %s%s", versions[v], r.out, r.err);
        at_run_result_free(&r);
        free(chk);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tools_sscomp");
    TCase *tc = tcase_create("sscomp");
    tcase_set_timeout(tc, 0);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, tsv_and_traceevent_agree);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
