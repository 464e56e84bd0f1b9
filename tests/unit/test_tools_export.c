/* test_tools_export.c: `acttrace export` and `acttrace report` on a known cross-thread trace with
 * stacks. The Chrome and speedscope files are parsed (python3's json) and checked for the structure
 * Perfetto and speedscope need; the HTML report is opened in headless Chromium: after its scripts
 * ran, the DOM holds the expected timeline slices, transfer arrows, histograms and flame graphs, and a
 * screenshot is not blank. Also `acttrace run` with a stand-in shim. */
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

static char *dir;
static char trace[4096];

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
    ck_assert_int_gt(at_gen_trace(trace, gen, NULL), 0);
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

static const char png_check[] =
    "import sys,zlib,struct\n"
    "b=open(sys.argv[1],'rb').read()\n"
    "assert b[:8]==b'\\x89PNG\\r\\n\\x1a\\n'\n"
    "i=8; idat=b''\n"
    "while i<len(b):\n"
    "  n,t=struct.unpack('>I4s',b[i:i+8])\n"
    "  if t==b'IHDR': w,h,depth,ct=struct.unpack('>IIBB',b[i+8:i+18])\n"
    "  if t==b'IDAT': idat+=b[i+8:i+8+n]\n"
    "  i+=12+n\n"
    "raw=zlib.decompress(idat)\n"
    "bpp={2:3,6:4}[ct]; stride=w*bpp+1\n"
    "prev=bytearray(w*bpp); colors=set()\n"
    "for y in range(h):\n"
    "  f=raw[y*stride]; line=bytearray(raw[y*stride+1:(y+1)*stride])\n"
    "  for x in range(len(line)):\n"
    "    a=line[x-bpp] if x>=bpp else 0; up=prev[x]; c=prev[x-bpp] if x>=bpp else 0\n"
    "    if f==1: line[x]=(line[x]+a)&255\n"
    "    elif f==2: line[x]=(line[x]+up)&255\n"
    "    elif f==3: line[x]=(line[x]+(a+up)//2)&255\n"
    "    elif f==4:\n"
    "      p=a+up-c; pa,pb,pc=abs(p-a),abs(p-up),abs(p-c)\n"
    "      line[x]=(line[x]+(a if pa<=pb and pa<=pc else up if pb<=pc else c))&255\n"
    "  prev=line\n"
    "  if y%4==0: colors.update(bytes(line[x:x+3]) for x in range(0,len(line),bpp*2))\n"
    "print(w,h,len(colors)>8)\n";

START_TEST(report_in_chromium)
{
    char out[4200], url[4300], png[4200];
    snprintf(out, sizeof out, "%s/report.html", dir);
    snprintf(png, sizeof png, "%s/report.png", dir);
    snprintf(url, sizeof url, "file://%s", out);
    tool_ok((const char *const[]){"report", "-o", out, trace, NULL});
    size_t len;
    char *html = at_read_file(out, &len);
    ck_assert_ptr_nonnull(html);
    /* self-contained: no external resource */
    ck_assert_int_eq(count(html, "src=") + count(html, "href=") + count(html, "@import"), 0);
    free(html);

    const char *dump[] = {"chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url, NULL};
    at_run_opts o = {.argv = dump, .no_preload = true};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 0, "chromium: %s", r.err);
    const char *dom = r.out;
    ck_assert_msg(strstr(dom, "data-rendered=\"1\""), "the report's script did not finish:\n%.2000s", dom);
    /* slices: Request //1 on T1 and T2, Work on T2, Request //2 on T1 */
    ck_assert_int_eq(count(dom, "class=\"act\""), 4);
    ck_assert_int_eq(count(dom, "class=\"thread-label\""), 2);
    ck_assert_int_eq(count(dom, "class=\"xfer\""), 2);
    ck_assert_int_eq(count(dom, "class=\"hist\""), 2);
    ck_assert_int_eq(count(dom, "class=\"bar\""), 2 * 20);
    ck_assert(strstr(dom, "<div class=\"hist\" data-name=\"Request\"><h3>Request</h3><p>2 activities (1 never stopped)"));
    ck_assert_int_eq(count(dom, "class=\"flame\""), 2);
    ck_assert(strstr(dom, "<div class=\"flame\" data-name=\"Work\">"));
    /* Request's flame graph: Request (2) > 0x1001 > 0x1002 > 0x1003 and Request > Work > 0x2001 > 0x2002 */
    ck_assert_int_eq(count(dom, "class=\"frame\""), 7 + 3);
    ck_assert_int_eq(count(dom, "<title>0x2002 (1)</title>"), 2);
    at_run_result_free(&r);

    const char *shot[] = {"chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          "--window-size=1280,900", NULL, url, NULL};
    char sarg[4300];
    snprintf(sarg, sizeof sarg, "--screenshot=%s", png);
    shot[6] = sarg;
    o.argv = shot;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 0 && at_file_exists(png), "chromium --screenshot: %s", r.err);
    at_run_result_free(&r);
    char *px = python(png_check, png);
    ck_assert_str_eq(px, "1280 900 True\n");
    free(px);
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
    char want[9000];
    snprintf(want, sizeof want, "%s/libacttrace.so|%s|out-%%p.nettrace\n", bin, cfg);
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
