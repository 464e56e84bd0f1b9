/* test_truth_damage.c: a damaged file is analysed up to its damage, and the damage is named.
 * Torn tail: the writer's files as a process killed in the middle of a flush leaves them (the
 * previous end tag, then the next part without its held first byte, cut at every block boundary
 * and between): the reader recovers every complete block of the torn part, names the tail ("torn
 * tail: N bytes after the last complete block at offset X"), and stats/verify exit 3 after their
 * results. Truncated: stats, tree, export and report print their analysis of what was read, then
 * one line saying where the damage starts and how much was read (exit 3). A corrupt sync time is
 * clamped, not overflowed. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "at_testlib.h"
#include "at_tracegen.h"
#include "ntreader.h"
#include "trace.h"

static char *dir;
static char snap_a[4200], snap_b[4200], good[4200];

static void copy_file(const char *from, const char *to)
{
    size_t n;
    char *d = at_read_file(from, &n);
    if (!d)
        _exit(90);
    FILE *f = fopen(to, "wb");
    if (!f || fwrite(d, 1, n, f) != n || fclose(f) != 0)
        _exit(91);
    free(d);
}

/* In the writing child: part 1 (20 requests), flushed and copied; part 2 (300 requests with stacks,
 * several blocks of each kind), flushed and copied before the session's end adds anything. */
static void gen_two_parts(void *ctx)
{
    (void)ctx;
    uintptr_t st[] = {0x401234, 0x401100, 0x400f00};
    for (int k = 0; k < 320; k++) {
        char p[32];
        snprintf(p, sizeof p, "//%d", k + 1);
        double t = 1 + k * 2;
        at_gen_start("Request", p, NULL, t);
        at_gen_info("Sample", p, t + 0.5, st, 3);
        at_gen_stop("Request", p, t + 1);
        if (k == 19) {
            at_trace_flush();
            copy_file(at_trace_path(), snap_a);
        }
    }
    at_trace_flush();
    copy_file(at_trace_path(), snap_b);
}

static void setup(void)
{
    dir = at_tmpdir("truth-damage");
    snprintf(snap_a, sizeof snap_a, "%s/a.nettrace", dir);
    snprintf(snap_b, sizeof snap_b, "%s/b.nettrace", dir);
    snprintf(good, sizeof good, "%s/good.nettrace", dir);
    ck_assert_int_gt(at_gen_trace(good, gen_two_parts, NULL), 0);
}

static void teardown(void)
{
    if (!getenv("AT_KEEP_TMP"))
        at_rmtree(dir);
    free(dir);
}

typedef struct readout {
    int rc;
    uint64_t events;
    nt_damage d;
    char text[600];
} readout;

static void read_mem(const void *data, size_t len, readout *o)
{
    memset(o, 0, sizeof *o);
    char err[512];
    nt_reader *r = nt_open_mem(data, len, NULL, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_event ev;
    while ((o->rc = nt_next(r, &ev)) == 1)
        o->events++;
    const nt_damage *d = nt_get_damage(r);
    if (d) {
        o->d = *d;
        snprintf(o->text, sizeof o->text, "%s", d->text);
        o->d.text = o->text;
    }
    nt_close(r);
}

START_TEST(torn_tail_recovered)
{
    size_t la, lb;
    char *a = at_read_file(snap_a, &la), *b = at_read_file(snap_b, &lb);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_gt(lb, la + 1000);
    ck_assert_int_eq(a[la - 1], 1);              /* part 1 ends with its end tag */
    ck_assert_mem_eq(a, b, la - 1);              /* part 2 starts over it */
    ck_assert_int_eq((unsigned char)b[la - 1], 5); /* with a BeginPrivateObject: the held byte */
    readout ra, rb;
    read_mem(a, la, &ra);
    read_mem(b, lb, &rb);
    ck_assert(ra.rc == 0 && rb.rc == 0 && !ra.d.kind && !rb.d.kind);
    ck_assert_uint_gt(rb.events, ra.events + 600);

    /* the file a kill leaves: part 1, then part 2 without its first byte, cut at `cut` */
    char *t = malloc(lb);
    memcpy(t, b, lb);
    t[la - 1] = 1;
    uint64_t prev = 0;
    int steps = 0;
    for (size_t cut = la; cut <= lb; cut += cut + 97 < lb ? 97 : (cut < lb ? lb - cut : 1), steps++) {
        readout o;
        read_mem(t, cut, &o);
        ck_assert_msg(o.rc == 0, "cut %zu: %s", cut, o.text);
        if (cut == la) {
            /* only the end tag: not torn (a byte or two of nothing is not a part) */
            ck_assert_int_eq(o.d.kind, NT_DAMAGE_NONE);
            ck_assert_uint_eq(o.events, ra.events);
            continue;
        }
        ck_assert_msg(o.d.kind == NT_DAMAGE_TORN, "cut %zu: kind %d", cut, o.d.kind);
        /* the events of complete blocks, never fewer as the cut moves on, all of them at the end */
        ck_assert_uint_ge(o.events, ra.events);
        ck_assert_uint_ge(o.events, prev);
        ck_assert_uint_eq(o.d.recovered, o.events - ra.events);
        prev = o.events;
        if (cut < lb) {
            char want[200];
            snprintf(want, sizeof want,
                     "torn tail: %llu bytes after the last complete block at offset %llu, the process was killed "
                     "while writing",
                     (unsigned long long)(cut - o.d.offset), (unsigned long long)o.d.offset);
            ck_assert_msg(strstr(o.text, want), "cut %zu: %s", cut, o.text);
            ck_assert_uint_ge(o.d.offset, la - 1);
            ck_assert_uint_le(o.d.offset, cut);
        } else {
            ck_assert_uint_eq(o.events, rb.events);
            ck_assert_msg(strstr(o.text, "complete but was never committed"), "%s", o.text);
        }
    }
    ck_assert_int_gt(steps, 20);

    /* the tools: the analysis of everything recovered, the torn tail named, exit 3 */
    char path[4300];
    snprintf(path, sizeof path, "%s/torn.nettrace", dir);
    size_t cut = la + (lb - la) * 2 / 3;
    FILE *f = fopen(path, "wb");
    ck_assert_int_eq(fwrite(t, 1, cut, f), cut);
    fclose(f);
    at_run_result r;
    const char *stats[] = {"stats", path, NULL};
    ck_assert_int_eq(at_tool_run(&r, stats), 0);
    ck_assert_msg(r.exited && r.status == 3, "stats: %d %s", r.status, r.err);
    ck_assert_msg(strstr(r.out, "Request "), "stats printed no analysis: %s", r.out);
    ck_assert_msg(strstr(r.err, "torn tail: ") && strstr(r.err, "the process was killed while writing"), "%s", r.err);
    at_run_result_free(&r);
    const char *verify[] = {"verify", path, NULL};
    ck_assert_int_eq(at_tool_run(&r, verify), 0);
    ck_assert_msg(r.exited && r.status == 3 && strstr(r.out, "torn tail: "), "verify: %d %s", r.status, r.out);
    ck_assert_msg(strstr(r.out, "OK up to the end tag (torn tail)"), "%s", r.out);
    at_run_result_free(&r);
    free(t);
    free(a);
    free(b);
}
END_TEST

START_TEST(truncated_analysed)
{
    size_t lg;
    char *g = at_read_file(good, &lg);
    ck_assert_ptr_nonnull(g);
    size_t cut = lg / 2;
    char path[4300], html[4300], json[4300];
    snprintf(path, sizeof path, "%s/cut.nettrace", dir);
    snprintf(html, sizeof html, "%s/cut.html", dir);
    snprintf(json, sizeof json, "%s/cut.json", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_int_eq(fwrite(g, 1, cut, f), cut);
    fclose(f);
    readout o;
    read_mem(g, cut, &o);
    ck_assert_int_eq(o.rc, -1);
    ck_assert_int_eq(o.d.kind, NT_DAMAGE_BROKEN);
    ck_assert_uint_gt(o.events, 10);
    char line[200];
    snprintf(line, sizeof line, "damaged file: the results cover its first %llu of %zu bytes (%llu events); ",
             (unsigned long long)o.d.offset, cut, (unsigned long long)o.events);
    /* each command: its analysis on stdout (or in its file), then the damage line, exit 3 */
    const char *cmds[][6] = {{"stats", path}, {"tree", path}, {"export", "--format", "chrome", "-o", json},
                             {"report", "-o", html, path}};
    const char *shows[] = {"Request ", "Request //", NULL, NULL};
    for (int i = 0; i < 4; i++) {
        const char *args[8];
        int n = 0;
        for (int k = 0; cmds[i][k]; k++) args[n++] = cmds[i][k];
        if (i == 2) args[n++] = path;
        args[n] = NULL;
        at_run_result r;
        ck_assert_int_eq(at_tool_run(&r, args), 0);
        ck_assert_msg(r.exited && r.status == 3, "%s: exit %d: %s", cmds[i][0], r.status, r.err);
        char pre[300];
        snprintf(pre, sizeof pre, "acttrace %s: %s", cmds[i][0], line);
        ck_assert_msg(strstr(r.err, pre) && strstr(r.err, "offset "), "%s: want '%s' in: %s", cmds[i][0], pre, r.err);
        if (shows[i])
            ck_assert_msg(strstr(r.out, shows[i]), "%s printed no analysis: %s", cmds[i][0], r.out);
        at_run_result_free(&r);
    }
    size_t n;
    char *j = at_read_file(json, &n);
    /* complete JSON: the events' array closed, then the metadata */
    ck_assert_msg(j && strstr(j, "\"name\":\"Request\"") && strstr(j, "\n],\n\"metadata\":{") && n > 2 &&
                      !strcmp(j + n - 3, "}}\n"),
                  "export: %s", j ? j : "(none)");
    free(j);
    char *h = at_read_file(html, &n);
    ck_assert_msg(h && strstr(h, "\"damaged\":1"), "report: no damage in its meta");
    free(h);
    free(g);
}
END_TEST

/* A corrupt header (sync time INT64_MIN, 1 GHz): times are clamped, not overflowed (the ASan/UBSan
 * build aborts on a signed overflow in the model's time arithmetic), and the commands end normally. */
START_TEST(corrupt_sync_time)
{
    size_t lg;
    char *g = at_read_file(good, &lg);
    ck_assert_ptr_nonnull(g);
    int64_t q = INT64_MIN, f = 1000000000;
    memcpy(g + 0x35 + 16, &q, 8);
    memcpy(g + 0x35 + 24, &f, 8);
    char path[4300];
    snprintf(path, sizeof path, "%s/sync.nettrace", dir);
    FILE *fp = fopen(path, "wb");
    ck_assert_int_eq(fwrite(g, 1, lg, fp), lg);
    fclose(fp);
    const char *cmds[][3] = {{"stats", path}, {"tree", path}, {"events", path}, {"dump", path}};
    for (int i = 0; i < 4; i++) {
        at_run_result r;
        ck_assert_int_eq(at_tool_run(&r, cmds[i]), 0);
        ck_assert_msg(r.exited && r.status == 0, "%s: %d %s", cmds[i][0], r.status, r.err);
        at_run_result_free(&r);
    }
    free(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("truth_damage");
    TCase *tc = tcase_create("damage");
    tcase_set_timeout(tc, 0);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, torn_tail_recovered);
    tcase_add_test(tc, truncated_analysed);
    tcase_add_test(tc, corrupt_sync_time);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
