/* test_tools_damage.c: every analysis subcommand on truncated and corrupted copies of a trace
 * analyses what was read before the damage and says in one line where it starts (exit 3), or gives
 * a clear one-line error naming the file and the offset when not even the header can be read
 * (exit 1), or, for damage the format cannot see (a flipped payload byte), a normal result; never a
 * crash. Also: missing, empty and non-trace files (exit 1, each said as such), and usage errors
 * (exit 2). */
#include <check.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "at_testlib.h"
#include "at_tracegen.h"

static char *dir;
static char good[4096];
static size_t good_len;
static char *good_data;

static const char *const cmds[][4] = {
    {"events", NULL}, {"tree", NULL}, {"stats", NULL}, {"stacks", "--all", NULL},
    {"export", "--format", "chrome", NULL}, {"export", "--format", "speedscope", NULL},
    {"report", "-o", NULL, NULL}, /* the output path is filled in */
};
#define NCMDS (sizeof cmds / sizeof cmds[0])

static void *worker(void *arg)
{
    int k = (int)(intptr_t)arg;
    char p[32];
    snprintf(p, sizeof p, "//%d", k + 1);
    at_gen_recv(p, NULL, 2 + k);
    return NULL;
}

/* 60 requests with children, stacks and transfers: several blocks of each kind. */
static void gen_mix(void *ctx)
{
    (void)ctx;
    uintptr_t st[] = {0x401234, 0x401100, 0x400f00};
    for (int k = 0; k < 60; k++) {
        char p[32], c[40];
        snprintf(p, sizeof p, "//%d", k + 1);
        snprintf(c, sizeof c, "//%d/1", k + 1);
        double t = 1 + k * 3;
        at_gen_start("Request", p, NULL, t);
        at_gen_send(p, t + 0.1);
        at_gen_start("Parse", c, p, t + 0.2);
        at_gen_info("Sample", c, t + 0.3, st, 3);
        at_gen_stop("Parse", c, t + 0.5);
        if (k % 7) at_gen_stop("Request", p, t + 1);
    }
    pthread_t th;
    pthread_create(&th, NULL, worker, (void *)(intptr_t)200);
    pthread_join(th, NULL);
}

static void setup(void)
{
    dir = at_tmpdir("tools-damage");
    snprintf(good, sizeof good, "%s/good.nettrace", dir);
    ck_assert_int_gt(at_gen_trace(good, gen_mix, NULL), 0);
    good_data = at_read_file(good, &good_len);
    ck_assert_ptr_nonnull(good_data);
}

static void teardown(void)
{
    free(good_data);
    if (!getenv("AT_KEEP_TMP")) at_rmtree(dir);
    free(dir);
}

static void write_copy(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(data, 1, len, f), len);
    fclose(f);
}

/* Runs command i on file; returns its exit status after checking it did not crash and that an error
 * is one clear line. */
/* Command i's arguments on file (out: the report's output path, filled in). */
static void cmd_args(size_t i, const char *file, const char **args, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/report.html", dir);
    int n = 0;
    for (int k = 0; cmds[i][k]; k++) args[n++] = cmds[i][k];
    if (!strcmp(cmds[i][0], "report")) args[n++] = out;
    args[n++] = file;
    args[n] = NULL;
}

/* The same, keeping stderr in *err (malloc'd) when err is not NULL. */
static int run_cmd_err(size_t i, const char *file, const char *what, char **err)
{
    const char *args[8];
    char out[4200];
    cmd_args(i, file, args, out, sizeof out);
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    char how[128];
    ck_assert_msg(r.exited && (r.status == 0 || r.status == 1 || r.status == 3), "acttrace %s on %s: %s\n%s",
                  cmds[i][0], what, at_run_describe(&r, how, sizeof how), r.err);
    int st = r.status;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "acttrace %s: ", cmds[i][0]);
    if (st == 3) {
        /* one line names the damage: where it starts and how much was read */
        char want[96];
        snprintf(want, sizeof want, "%sdamaged file: the results cover its first ", cmds[i][0]);
        const char *l = strstr(r.err, want + strlen(cmds[i][0]));
        ck_assert_msg(l && l - r.err >= (ptrdiff_t)strlen(prefix) && !strncmp(l - strlen(prefix), prefix, strlen(prefix))
                          && strstr(l, " bytes (") && strstr(l, "offset"),
                      "acttrace %s on %s: no damage line: %s", cmds[i][0], what, r.err);
    }
    if (st == 1) {
        ck_assert_msg(!strncmp(r.err, prefix, strlen(prefix)) && strstr(r.err, "offset") &&
                          strchr(r.err, '\n') == r.err + r.errlen - 1,
                      "acttrace %s on %s: unclear error: %s", cmds[i][0], what, r.err);
    }
    if (err) *err = strdup(r.err);
    at_run_result_free(&r);
    return st;
}

static int run_cmd(size_t i, const char *file, const char *what)
{
    return run_cmd_err(i, file, what, NULL);
}

/* Command i on file exits 1 with the one line "acttrace CMD: FILE <says>". */
static void not_a_trace(size_t i, const char *file, const char *says)
{
    const char *args[8];
    char out[4200], want[8600];
    cmd_args(i, file, args, out, sizeof out);
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    snprintf(want, sizeof want, "acttrace %s: %s %s\n", cmds[i][0], file, says);
    ck_assert_msg(r.exited && r.status == 1 && !strcmp(r.err, want), "acttrace %s on %s: exit %d: %s", cmds[i][0],
                  file, r.status, r.err);
    at_run_result_free(&r);
}

START_TEST(good_file_passes)
{
    for (size_t i = 0; i < NCMDS; i++) ck_assert_int_eq(run_cmd(i, good, "the good file"), 0);
}
END_TEST

/* Files the .NET runtime wrote (no activity Start/Stop in them): every command runs clean. */
START_TEST(runtime_samples)
{
    const char *samples[] = {"dotnet-5.0-SampleProfiler-single-thread.golden.nettrace",
                             "eventpipe-dotnetcore3.0-win-x64-objver4.nettrace",
                             "eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace",
                             "eventpipe-dotnetcore6.0-win-x64-executioncheckpoints.nettrace",
                             "mixed_managed_external_samples.nettrace", "only_managed_samples.nettrace"};
    for (size_t k = 0; k < sizeof samples / sizeof samples[0]; k++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/tests/data/nettrace-samples/%s", AT_SOURCE_DIR, samples[k]);
        for (size_t i = 0; i < NCMDS; i++) ck_assert_int_eq(run_cmd(i, path, samples[k]), 0);
    }
}
END_TEST

/* A whole trace with bytes after its end tag (another file appended to it): every command reads the
 * trace, names the bytes it did not read and where the trace ends, exit 3 */
START_TEST(appended_bytes)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/appended.nettrace", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(good_data, 1, good_len, f), good_len);
    fputs("another file", f);
    fclose(f);
    for (size_t i = 0; i < NCMDS; i++) {
        char *err = NULL;
        ck_assert_int_eq(run_cmd_err(i, path, "a trace with 12 bytes appended", &err), 3);
        char want[600];
        snprintf(want, sizeof want, "the results cover its first %zu of %zu bytes", good_len, good_len + 12);
        ck_assert_msg(strstr(err, want) && strstr(err, "12 byte(s) after the end-of-stream tag are not part of the trace"),
                      "acttrace %s on an appended trace: %s", cmds[i][0], err);
        free(err);
    }
}
END_TEST

START_TEST(truncated)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/cut.nettrace", dir);
    /* cuts at 13 places from inside the header to one byte short of the end */
    size_t cuts[13];
    for (int k = 0; k < 12; k++) cuts[k] = 5 + (good_len - 5) * (size_t)k / 12;
    cuts[12] = good_len - 1;
    for (int k = 0; k < 13; k++) {
        write_copy(path, good_data, cuts[k]);
        char what[64];
        snprintf(what, sizeof what, "a copy cut at %zu of %zu bytes", cuts[k], good_len);
        /* past the header every command analyses what it read (exit 3); inside it, nothing can be */
        int want = cuts[k] < 120 ? 1 : 3;
        for (size_t i = 0; i < NCMDS; i++) {
            int st = run_cmd(i, path, what);
            ck_assert_msg(st == want, "%s: acttrace %s exits %d, not %d", what, cmds[i][0], st, want);
        }
    }
}
END_TEST

START_TEST(corrupted)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/bad.nettrace", dir);
    char *copy = malloc(good_len);
    int errors = 0;
    for (int k = 0; k < 16; k++) {
        size_t at = 20 + (good_len - 40) * (size_t)k / 16;
        memcpy(copy, good_data, good_len);
        for (int j = 0; j < 8; j++) copy[at + j] = (char)(0xff ^ (j * 37));
        write_copy(path, copy, good_len);
        char what[64];
        snprintf(what, sizeof what, "a copy with 8 bytes overwritten at %zu", at);
        for (size_t i = 0; i < NCMDS; i++) errors += run_cmd(i, path, what);
    }
    free(copy);
    ck_assert_int_gt(errors, 0); /* most of them are seen */
}
END_TEST

START_TEST(not_traces)
{
    char empty[4200], text[4200];
    snprintf(empty, sizeof empty, "%s/empty.nettrace", dir);
    snprintf(text, sizeof text, "%s/text.nettrace", dir);
    write_copy(empty, "", 0);
    write_copy(text, "hello, this is not a trace\n", 27);
    /* each said as what it is, not as a trace the reader cannot parse */
    for (size_t i = 0; i < NCMDS; i++) {
        not_a_trace(i, empty, "is empty");
        not_a_trace(i, text, "is not a .nettrace file (it does not start with the Nettrace magic)");
    }
    /* a missing file: one line naming it */
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, (const char *const[]){"tree", "/nonexistent/x.nettrace", NULL}), 0);
    ck_assert(r.exited && r.status == 1);
    ck_assert_str_eq(r.err, "acttrace tree: /nonexistent/x.nettrace: No such file or directory\n");
    at_run_result_free(&r);
    /* usage errors */
    const char *const *bad[] = {(const char *const[]){"tree", NULL}, (const char *const[]){"stats", "--bogus", good, NULL},
                                (const char *const[]){"export", good, NULL},
                                (const char *const[]){"export", "--format", "svg", good, NULL},
                                (const char *const[]){"report", good, NULL}, (const char *const[]){"run", NULL},
                                (const char *const[]){"events", "--from", "soon", good, NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(at_tool_run(&r, bad[i]), 0);
        ck_assert_msg(r.exited && r.status == 2, "%s: status %d", bad[i][0], r.status);
        at_run_result_free(&r);
    }
}
END_TEST

/* 3000 root activities, each naming the previous one as its RelatedActivityId: a chain far deeper
 * than any real one. The model cuts it into trees of bounded depth. */
static void gen_chain(void *ctx)
{
    (void)ctx;
    for (int k = 1; k <= 3000; k++) {
        char p[16], r[16];
        snprintf(p, sizeof p, "//%d", k);
        snprintf(r, sizeof r, "//%d", k - 1);
        at_gen_start("Link", p, k > 1 ? r : NULL, 1 + k * 0.001);
    }
}

START_TEST(deep_chain)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/chain.nettrace", dir);
    ck_assert_int_gt(at_gen_trace(path, gen_chain, NULL), 0);
    at_run_result r;
    for (size_t i = 0; i < NCMDS; i++) {
        if (strcmp(cmds[i][0], "stacks")) {
            ck_assert_int_eq(run_cmd(i, path, "a 3000-deep chain"), 0);
            continue;
        }
        /* no event of the chain carries a stack: said (nothing to fold), exit 0 */
        ck_assert_int_eq(at_tool_run(&r, (const char *const[]){"stacks", "--all", path, NULL}), 0);
        ck_assert_msg(r.exited && r.status == 0 && strstr(r.err, "acttrace stacks: no event with a stack in ") &&
                          strchr(r.err, '\n') == r.err + r.errlen - 1,
                      "stacks on a chain without stacks: %s", r.err);
        at_run_result_free(&r);
    }
    ck_assert_int_eq(at_tool_run(&r, (const char *const[]){"tree", path, NULL}), 0);
    ck_assert(r.exited && r.status == 0);
    /* every activity printed once; the deepest indentation is below the cap of 1000 levels */
    int lines = 0, maxindent = 0;
    for (const char *l = r.out; *l; l = strchr(l, '\n') + 1) {
        int ind = (int)strspn(l, " ");
        if (ind > maxindent) maxindent = ind;
        lines++;
    }
    ck_assert_int_eq(lines, 3000);
    ck_assert_int_lt(maxindent, 2 * 1000);
    ck_assert_int_gt(maxindent, 2 * 900);
    at_run_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tools_damage");
    TCase *tc = tcase_create("damage");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, good_file_passes);
    tcase_add_test(tc, runtime_samples);
    tcase_add_test(tc, truncated);
    tcase_add_test(tc, corrupted);
    tcase_add_test(tc, not_traces);
    tcase_add_test(tc, deep_chain);
    tcase_add_test(tc, appended_bytes);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
