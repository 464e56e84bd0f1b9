/* test_tools_export.c: `acttrace export` and `acttrace report` on a known cross-thread trace with
 * stacks. The Chrome and speedscope files are parsed (python3's json) and checked for the structure
 * Perfetto and speedscope need; the HTML report is opened in Chromium by the browser tests' scripts
 * (tests/web, Playwright): its timeline, waterfall and flame graph show the trace's threads,
 * activities, transfers and stacks, and their screenshots are not blank. Also `acttrace run` with a
 * stand-in shim. */
#include <check.h>
#include <fcntl.h>
#include <pty.h>
#include <sys/wait.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "at_testlib.h"
#include "at_tracegen.h"
#include "at_web.h"

static char *dir;
static char trace[4096];
static pid_t gen_pid; /* the trace's process */

static void *worker(void *arg)
{
    (void)arg;
    at_gen_note_thread(1);
    uintptr_t st[] = {0x2002, 0x2001};
    at_gen_recv("//1", NULL, 3);
    at_gen_start("Work", "//1/1", "//1", 4);
    at_gen_info("Sample", "//1/1", 4.5, st, 2);
    at_gen_stop("Work", "//1/1", 5);
    at_gen_send("//1", 5.5);
    return NULL;
}

/* Request //1 on T1 hands over to T2 (Work //1/1) and back; Request //2 stays on T1, never stops. */
static void gen(void *ctx)
{
    (void)ctx;
    at_gen_note_thread(0);
    uintptr_t st[] = {0x1003, 0x1002, 0x1001};
    at_gen_start("Request", "//1", NULL, 1);
    at_gen_info("Sample", "//1", 1.5, st, 3);
    at_gen_send("//1", 2);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    at_gen_recv("//1", NULL, 6);
    at_gen_stop("Request", "//1", 8);
    at_gen_start("Request", "//2", NULL, 9);
}

static void setup(void)
{
    dir = at_tmpdir("tools-export");
    snprintf(trace, sizeof trace, "%s/t.nettrace", dir);
    gen_pid = at_gen_trace(trace, gen, NULL);
    ck_assert_int_gt(gen_pid, 0);
}

static void teardown(void)
{
    if (!getenv("AT_KEEP_TMP")) at_rmtree(dir);
    free(dir);
}

static void tool_ok(const char *const *args)
{
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    char how[128];
    ck_assert_msg(r.exited && r.status == 0, "acttrace %s: %s: %s", args[0], at_run_describe(&r, how, sizeof how), r.err);
    at_run_result_free(&r);
}

/* Runs python3 with a script on file; returns its stdout (malloc'd) after asserting exit 0. */
static char *python(const char *script, const char *file)
{
    const char *argv[] = {"python3", "-c", script, file, NULL};
    at_run_opts o = {.argv = argv, .no_preload = true};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 0, "python check failed on %s: %s%s", file, r.out, r.err);
    char *out = strdup(r.out);
    at_run_result_free(&r);
    return out;
}

static const char chrome_check[] =
    "import json,sys\n"
    "d=json.load(open(sys.argv[1]))\n"
    "assert sorted(d)==['metadata','traceEvents'], sorted(d)\n"
    "ev=d['traceEvents']\n"
    "for e in ev:\n"
    "  assert e['ph'] in 'XsfM', e\n"
    "  for k in ('pid','tid','ts'): assert isinstance(e[k],(int,float)), e\n"
    "  assert isinstance(e['cat'],str) and isinstance(e['name'],str) and isinstance(e['args'],dict), e\n"
    "  if e['ph']=='X': assert e['dur']>=0\n"
    "ts=[e['ts'] for e in ev if e['ph']!='M']\n"
    "assert ts==sorted(ts), 'not in time order'\n"
    "def pl(a): return ' '.join('%s=%s'%(k,v) for k,v in a.items() if k!='acttrace')\n"
    "xs=sorted((e['name'],e['args']['acttrace']['path'],e['ts'],e['dur'],e['args']['acttrace'].get('visit',False),e['args']['acttrace']['stopped'],pl(e['args'])) for e in ev if e['ph']=='X')\n"
    "for x in xs: print('X %s %s ts=%.1f dur=%.1f visit=%s stopped=%s %s'%x)\n"
    "s={e['id']:e for e in ev if e['ph']=='s'}; f={e['id']:e for e in ev if e['ph']=='f'}\n"
    "assert s.keys()==f.keys()\n"
    "for i in sorted(s):\n"
    "  assert isinstance(i,str) and f[i]['bp']=='e' and s[i]['tid']!=f[i]['tid'] and s[i]['ts']<=f[i]['ts']\n"
    "  print('flow %s ts=%.1f -> ts=%.1f'%(s[i]['name'],s[i]['ts'],f[i]['ts']))\n"
    "for e in ev:\n"
    "  if e['ph']=='M' and e['name'] in ('process_name','thread_name'): print(e['name'], e['args']['name'], e['pid']==e['tid'])\n";

START_TEST(chrome)
{
    char out[4200];
    snprintf(out, sizeof out, "%s/t.json", dir);
    tool_ok((const char *const[]){"export", "--format", "chrome", "-o", out, trace, NULL});
    char *got = python(chrome_check, out);
    /* Request //1 started and stopped on T1: its slice there spans it; on T2 it spans its visit */
    /* Request //1 started and stopped on T1: its slice there spans it; on T2 it spans its visit,
     * with Work inside; the payload fields as args; names for the process and both threads */
    ck_assert_str_eq(got, "X Request //1 ts=1000.0 dur=7000.0 visit=False stopped=True RequestId=1\n"
                          "X Request //1 ts=3000.0 dur=2500.0 visit=True stopped=True RequestId=1\n"
                          "X Request //2 ts=9000.0 dur=0.0 visit=False stopped=False RequestId=2\n"
                          "X Work //1/1 ts=4000.0 dur=1000.0 visit=False stopped=True WorkId=11\n"
                          "flow transfer ts=2000.0 -> ts=3000.0\n"
                          "flow transfer ts=5500.0 -> ts=6000.0\n"
                          "process_name tracegen True\n"
                          "thread_name main True\n"
                          "thread_name thread False\n");
    free(got);
}
END_TEST

/* A fork child whose image starts three root activities under the parent's Spawn: Main first,
 * Side (it ends first) and Last */
static void gen_pchild(void *ctx)
{
    (void)ctx;
    at_gen_note_thread(1);
    at_guid rel = at_gen_id((uint32_t)getppid(), "//1/1");
    at_gen_start_rel("Main", "//1", &rel, 300);
    at_gen_start_rel("Side", "//2", &rel, 302);
    at_gen_stop("Side", "//2", 303);
    at_gen_start_rel("Last", "//3", &rel, 304);
    at_gen_stop("Last", "//3", 305);
    at_gen_stop("Main", "//1", 306);
}

static void gen_pparent(void *ctx)
{
    (void)ctx;
    at_gen_note_thread(0);
    at_gen_start("Request", "//1", NULL, 1);
    at_gen_start("Spawn", "//1/1", "//1", 2);
    ck_assert_int_gt(at_gen_fork(gen_pchild, NULL), 0);
    at_gen_stop("Spawn", "//1/1", 310);
    at_gen_stop("Request", "//1", 315);
}

/* One process-start arrow per child image, to its first root under the parent's activity, however
 * many roots it has (an exec'd program with thousands of roots drew thousands of arrows from one
 * point) */
START_TEST(chrome_one_arrow_per_child)
{
    char parent[4200], child[4200], out[4200];
    snprintf(parent, sizeof parent, "%s/p.nettrace", dir);
    snprintf(out, sizeof out, "%s/p.json", dir);
    ck_assert_int_gt(at_gen_trace(parent, gen_pparent, NULL), 0);
    snprintf(child, sizeof child, "%s/p-%d.nettrace", dir, (int)at_gen_tids[AT_GEN_SLOTS - 2]);
    ck_assert_msg(at_file_exists(child), "%s", child);
    tool_ok((const char *const[]){"export", "--format", "chrome", "-o", out, parent, child, NULL});
    char *got = python(chrome_check, out);
    char *flows = strstr(got, "flow ");
    ck_assert_ptr_nonnull(flows);
    char *end = strstr(flows, "process_name");
    ck_assert_ptr_nonnull(end);
    *end = 0;
    ck_assert_str_eq(flows, "flow process start ts=300000.0 -> ts=300000.0\n");
    free(got);
}
END_TEST

static const char speedscope_check[] =
    "import json,sys\n"
    "d=json.load(open(sys.argv[1]))\n"
    "assert d['$schema']=='https://www.speedscope.app/file-format-schema.json'\n"
    "fr=[f['name'] for f in d['shared']['frames']]\n"
    "for p in d['profiles']:\n"
    "  assert p['type']=='evented' and p['unit']=='milliseconds'\n"
    "  st=[]; last=p['startValue']\n"
    "  for e in p['events']:\n"
    "    assert e['at']>=last, 'not in time order'; last=e['at']\n"
    "    if e['type']=='O': st.append(e['frame'])\n"
    "    else: assert st.pop()==e['frame'], 'not nested'\n"
    "  assert not st and last<=p['endValue']\n"
    "  print(p['name'].split(', ')[1].split(' (')[0], p['startValue'], len(p['events']), ' '.join('%s%s@%.1f'%(e['type'],fr[e['frame']],e['at']) for e in p['events']))\n";

START_TEST(speedscope)
{
    char out[4200];
    snprintf(out, sizeof out, "%s/t.speedscope.json", dir);
    tool_ok((const char *const[]){"export", "--format", "speedscope", "-o", out, trace, NULL});
    char *got = python(speedscope_check, out);
    char *norm = at_gen_normalize(got, AT_GEN_SLOTS, NULL, 0);
    /* one profile per thread, the main thread's first, activities nested as frames, all from the
     * trace's start */
    ck_assert_str_eq(norm, "main 0.0 4 ORequest@1.0 CRequest@8.0 ORequest@9.0 CRequest@9.0\n"
                           "thread 0.0 4 ORequest@3.0 OWork@4.0 CWork@5.0 CRequest@5.5\n");
    free(norm);
    free(got);
}
END_TEST

/* Counts occurrences of needle in s. */
static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* Runs tests/web/<script> on the report with args; its output with the generator's threads as T<k>
 * and its pid after "pid " as P1 (malloc'd, after a newline), NULL when the browser tests cannot run here (said why). */
static char *web(const char *script, const char *html, const char *const *args)
{
    const char *why = at_web_missing();
    if (why) {
        ck_assert_msg(!at_traceevent_required(), "report_in_chromium: %s (AT_TRACEEVENT_REQUIRED=1: CI runs the browser tests)", why);
        printf("report_in_chromium skipped: %s\n", why);
        return NULL;
    }
    char shots[4400], problem[25000];
    at_web_shots("tools-export", dir, shots, sizeof shots);
    at_run_result r;
    ck_assert_int_eq(at_web_run(&r, script, html, shots, args), 0);
    ck_assert_msg(at_web_ok(&r, script, problem, sizeof problem), "%s", problem);
    char *norm = at_gen_normalize(r.out, AT_GEN_SLOTS, &gen_pid, 1);
    char *out = malloc(strlen(norm) + 2);
    out[0] = '\n';
    strcpy(out + 1, norm);
    free(norm);
    at_run_result_free(&r);
    return out;
}

/* The report of the cross-thread trace, opened in Chromium by the scripts of tests/web: what each
 * part of the page shows is what the trace holds (the generator's thread ids read T1, T2; the
 * process's main thread is T1, its tid its pid). */
START_TEST(report_in_chromium)
{
    char out[4200];
    snprintf(out, sizeof out, "%s/report.html", dir);
    tool_ok((const char *const[]){"report", "-o", out, trace, NULL});
    size_t len;
    char *html = at_read_file(out, &len);
    ck_assert_ptr_nonnull(html);
    /* self-contained: no external resource */
    ck_assert_int_eq(count(html, "src=") + count(html, "href=") + count(html, "@import"), 0);
    free(html);

    /* the timeline: Request //1 on T1 and, handed over, on T2 with Work //1/1 nested; Request //2 */
    char *got = web("timeline.js", out, (const char *const[]){"//1/1", NULL});
    if (!got) return;
    ck_assert_msg(strstr(got, "\nactivities 3\nname Request 2\nname Work 1\nthread T1 T1 1 2\nthread T1 T2 2 2\n"), "%s", got);
    ck_assert_msg(strstr(got, "\ntarget Work //1/1 T1 4000000 1000000\n"), "%s", got);
    ck_assert_msg(strstr(got, "\ntooltip \"Work //1/1  (pid P1)\"\nclicked Work //1/1 T1\n"), "%s", got);
    free(got);
    /* the waterfall of Request //1 (the longer Request): both threads, both transfers, Work below;
     * the transfers' 1.5 ms are Request's queued time, and the trace has no samples or waits */
    got = web("waterfall.js", out, (const char *const[]){"Request", NULL});
    ck_assert_msg(strstr(got, "\nroot Request //1 T1\n"
                              "row 0 Request //1 T1 1000000 7000000 T1,T2 T1>T2@2000000-3000000,T2>T1@5500000-6000000\n"
                              "row 1 Work //1/1 T1 4000000 1000000 T2 -\n"
                              "split //1 0 0 1500000 \"7.00 ms (cpu 0 ns, blocked 0 ns, queued 1.50 ms)\"\n"
                              "split //1/1 0 0 0 \"1.00 ms\"\n"
                              "bars 2 visits 2 arrows 2 more 0\n"),
                  "%s", got);
    /* Request //1's own event with its stack (none on its Start) */
    ck_assert_msg(strstr(got, "\nevent \"+500 µs  Sample  (stack of 3 frames)\"\n"), "%s", got);
    free(got);
    /* the flame graph of Request: its Sample (0x1001 > 0x1002 > 0x1003) and Work's (Work > 0x2001 > 0x2002) */
    got = web("flame.js", out, (const char *const[]){"Request", NULL});
    ck_assert_msg(strstr(got, "\ntotal 2\nchild \"0x1001\" 1 0.4996\nchild \"Work\" 1 0.4996\n"), "%s", got);
    ck_assert_msg(strstr(got, "\nfocus \"0x1001\"\nzoomed \"0x1001\" 1 0.9996\ngrandchild \"0x1002\" 1 0.9996\nancestors Request\n"), "%s", got);
    ck_assert_msg(strstr(got, "\nreset \"Request\" 2\n"), "%s", got);
    free(got);
}
END_TEST

START_TEST(run_passes_status)
{
    /* a copy of acttrace beside a stand-in shim (an empty shared object) */
    char bin[4200], cmd[20000];
    snprintf(bin, sizeof bin, "%s/bin", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/acttrace' '%s/' && cc -shared -o '%s/libacttrace.so' -x c /dev/null",
             bin, at_build_dir(), bin, bin);
    ck_assert_int_eq(system(cmd), 0);
    char tool[4300], cfg[4300];
    snprintf(tool, sizeof tool, "%s/acttrace", bin);
    snprintf(cfg, sizeof cfg, "%s/my.conf", dir);
    FILE *f = fopen(cfg, "w");
    fputs("# config\n", f);
    fclose(f);
    /* the stand-in names its file in the manifest as the shim does */
    const char *argv[] = {tool, "run", "-c", cfg, "-o", "out-%p.nettrace", "--", "sh", "-c",
                          "echo \"$LD_PRELOAD|$ACTTRACE_CONFIG|$ACTTRACE_OUTPUT\"; : > out-$$.nettrace; "
                          "echo \"$PWD/out-$$.nettrace\" >> \"$ACTTRACE_MANIFEST\"; exit 3", NULL};
    at_run_opts o = {.argv = argv, .no_preload = true, .cwd = dir};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 3, "%s", r.err);
    char want[13000];
    char real[4096];
    ck_assert(realpath(dir, real) != NULL);
    snprintf(want, sizeof want, "%s/libacttrace.so|%s|%s/out-%%p.nettrace\n", bin, cfg, real); /* made absolute */
    ck_assert_str_eq(r.out, want);
    int child = 0;
    ck_assert_msg(sscanf(r.err, "acttrace: trace written to out-%d.nettrace\n", &child) == 1 && child > 0, "%s", r.err);
    /* the closing line names the file and what it holds (here: the empty file sh made) */
    snprintf(want, sizeof want, "acttrace: trace written to out-%d.nettrace: unreadable (", child);
    ck_assert_msg(!strncmp(r.err, want, strlen(want)) && strchr(r.err, '\n') == r.err + r.errlen - 1, "%s", r.err);
    at_run_result_free(&r);

    const char *killed[] = {tool, "run", "--", "sh", "-c", "kill -TERM $$", NULL};
    o.argv = killed;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 128 + 15, "%s", r.err);
    ck_assert(strstr(r.err, "killed by signal 15"));
    at_run_result_free(&r);

    const char *missing[] = {tool, "run", "--", "/nonexistent/program", NULL};
    o.argv = missing;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert(r.exited && r.status == 127);
    ck_assert(strstr(r.err, "acttrace run: cannot run /nonexistent/program: No such file or directory\n"));
    at_run_result_free(&r);
}
END_TEST

/* Runs acttrace with args; returns its stdout normalised (T<k> for the generator's threads). */
static char *tool_out(const char *const *args)
{
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(r.exited && r.status == 0, "acttrace %s: %s", args[0], r.err);
    char *s = at_gen_normalize(r.out, AT_GEN_SLOTS, NULL, 0);
    at_run_result_free(&r);
    return s;
}

START_TEST(filters)
{
    char tid[32];
    snprintf(tid, sizeof tid, "%llu", (unsigned long long)at_gen_tids[1]);
    char *got = tool_out((const char *const[]){"events", "--thread", tid, trace, NULL});
    ck_assert_str_eq(got, "       3.000  T2  acttrace-flow/Receive  //1  -\n"
                          "       4.000  T2  acttrace/WorkStart  //1/1  //1  WorkId=11\n"
                          "       4.500  T2  test-app/Sample  //1/1  -\n"
                          "       5.000  T2  acttrace/WorkStop  //1/1  -  DURATION=1.00ms  WorkId=11\n"
                          "       5.500  T2  acttrace-flow/Send  //1  -\n");
    free(got);
    got = tool_out((const char *const[]){"events", "--from", "5.5", "--to", "8", "--activity", "//1", trace, NULL});
    ck_assert_str_eq(got, "       5.500  T2  acttrace-flow/Send  //1  -\n"
                          "       6.000  T1  acttrace-flow/Receive  //1  -\n"
                          "       8.000  T1  acttrace/RequestStop  //1  -  DURATION=7.00ms  RequestId=1\n");
    free(got);
    got = tool_out((const char *const[]){"stacks", "--name", "Work", trace, NULL});
    ck_assert_str_eq(got, "Work;0x2001;0x2002 1\n");
    free(got);
    got = tool_out((const char *const[]){"stacks", trace, NULL});
    ck_assert_str_eq(got, "Request;0x1001;0x1002;0x1003 1\nRequest;Work;0x2001;0x2002 1\n");
    free(got);
}
END_TEST

static void gen_many(void *ctx)
{
    (void)ctx;
    for (int k = 1; k <= 3000; k++) {
        char p[16];
        snprintf(p, sizeof p, "//%d", k);
        at_gen_start("Request", p, NULL, 1 + k * 0.01);
        at_gen_stop("Request", p, 1 + k * 0.01 + 0.005);
    }
}

/* The progress bar appears on a terminal only (the size threshold lowered for the test). */
START_TEST(progress_on_tty_only)
{
    char big[4200];
    snprintf(big, sizeof big, "%s/many.nettrace", dir);
    ck_assert_int_gt(at_gen_trace(big, gen_many, NULL), 0);
    char tool[4200];
    snprintf(tool, sizeof tool, "%s/acttrace", at_build_dir());
    int fd;
    pid_t pid = forkpty(&fd, NULL, NULL, NULL);
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        setenv("ACTTRACE_PROGRESS_MIN", "1", 1);
        execl(tool, tool, "stats", big, (char *)NULL);
        _exit(127);
    }
    char buf[65536];
    size_t n = 0;
    for (;;) {
        ssize_t k = read(fd, buf + n, sizeof buf - 1 - n);
        if (k <= 0) break; /* EIO once the child closed the terminal */
        n += (size_t)k;
    }
    buf[n] = 0;
    int st;
    waitpid(pid, &st, 0);
    close(fd);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    ck_assert_msg(strstr(buf, "\racttrace: [") && strstr(buf, "%"), "no progress bar on the terminal: %s", buf);
    /* stderr a pipe: nothing */
    const char *argv[] = {tool, "stats", big, NULL};
    const char *env[] = {"ACTTRACE_PROGRESS_MIN=1", NULL};
    at_run_opts o = {.argv = argv, .env = env, .no_preload = true};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert(r.exited && r.status == 0);
    ck_assert_str_eq(r.err, "");
    at_run_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tools_export");
    TCase *tc = tcase_create("export");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, chrome);
    tcase_add_test(tc, chrome_one_arrow_per_child);
    tcase_add_test(tc, speedscope);
    tcase_add_test(tc, report_in_chromium);
    tcase_add_test(tc, run_passes_status);
    tcase_add_test(tc, filters);
    tcase_add_test(tc, progress_on_tty_only);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
