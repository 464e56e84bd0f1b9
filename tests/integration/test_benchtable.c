/* test_benchtable: tests/bench/table.sh, the script that remakes docs/performance.md's table from
 * saved `make bench` outputs, on a real one (tests/bench/samples/make-bench.txt, a full run on the
 * 2-core test VM) and on runs made by tests/bench/run.sh itself from benchmark rows
 * (tests/bench/samples/bench_hooks.tsv, what bench_hooks printed in another run): every row and
 * only rows, names with their numbers, ranges over runs, rows matched across runs whatever numbers
 * their names hold, the page's table replaced in place and nothing else of it, and one precise
 * message for each bad input. No benchmark runs here. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "at_testlib.h"

#define SCRIPT AT_SOURCE_DIR "/tests/bench/table.sh"
#define SAMPLE AT_SOURCE_DIR "/tests/bench/samples/make-bench.txt"

static at_run_result bt_run(const char *const *argv)
{
    at_run_opts o = {.argv = argv, .no_preload = true};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    return r;
}

static void bt_write(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    ck_assert(f);
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
}

static size_t bt_count(const char *s, const char *what)
{
    size_t n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

/* Each of the n rows is a line of the table out (printed whole when one is missing). */
static void bt_expect_rows(const char *out, const char *const *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strstr(out, rows[i])) {
            fprintf(stderr, "%s", out);
            ck_abort_msg("no row\n%s(the table is above)", rows[i]);
        }
}

/* One saved run: every row of the table, numbers as printed, targets as ≤/≥, noise left out. */
START_TEST(one_run_gives_every_row)
{
    const char *argv[] = {"bash", SCRIPT, SAMPLE, NULL};
    at_run_result r = bt_run(argv);
    ck_assert_msg(r.exited && r.status == 0, "table.sh: %s", r.err);
    ck_assert(!strncmp(r.out, "| what | measured | target |\n|---|---|---|\n", 42));
    /* the sample's rows: its lines below the header rule, but for the three report lines a
     * benchmark let through */
    size_t len;
    char *sample = at_read_file(SAMPLE, &len);
    size_t lines = bt_count(sample, "\n") - 2, noise = bt_count(sample, "acttrace report: wrote");
    ck_assert_uint_eq(noise, 3);
    /* "\n| " starts every row but the header, which is the first line */
    ck_assert_uint_eq(bt_count(r.out, "\n| "), lines - noise);
    ck_assert(!strstr(r.out, "wrote"));
    static const char *rows[] = {
        "| event write, no payload (ns, clock excluded) | 5.7 | ≤ 25 |\n",
        "| ↳ sustained, no pauses: stub (ns added) | 121.9 | ≤ 40 |\n",
        "| hooked call via stub, Start+Stop, no payload (ns added) | 59.0 (60.1 vs 1.1) | ≤ 80 |\n",
        "| process: fork child that records nothing, added per fork (fork+_exit+wait) | +0.754 ms CPU (median of "
        "9 rounds of 200; untraced 0.807 ms, traced 1.587 ms; traced wall 1.469 ms) | ≤ 0.1 ms |\n",
        "| stack: frame pointers, depth 10 (ns/frame) | 0.8 | ≤ 3 |\n",
        "| stack: frame pointers, depth 30 (ns/frame) | 0.9 | ≤ 3 |\n",
        "| reader writer-generated 1 GB trace: events read / written | 16000000 / 16000000 | all |\n",
        "| acttrace report, 1000000 open activities: time | 1.11 s (CPU 1.11 s, load 3.4) | < 10 s |\n",
        "| reader: max RSS growth over the 1 GB trace | 0 KiB | flat |\n",
        "| clock read clock_gettime(CLOCK_MONOTONIC) (ns) | 26.2 |  |\n",
    };
    bt_expect_rows(r.out, rows, sizeof rows / sizeof rows[0]);
    free(sample);
    at_run_result_free(&r);
}
END_TEST

/* Several runs: run.sh's own output of benchmark rows, matched to the sample's rows by name. */
START_TEST(several_runs_give_ranges)
{
    char *dir = at_tmpdir("benchtable");
    char bench[1024], bench2[1024], out2[1024], out3[1024];
    snprintf(bench, sizeof bench, "%s/bench_a", dir);
    snprintf(bench2, sizeof bench2, "%s/bench_b", dir);
    snprintf(out2, sizeof out2, "%s/run2.txt", dir);
    snprintf(out3, sizeof out3, "%s/run3.txt", dir);
    /* a benchmark that prints the rows bench_hooks printed in another run, and one whose row names
     * carry other numbers than the sample's and a figure the sample does not have */
    char script[2048];
    snprintf(script, sizeof script, "#!/bin/sh\ncat '%s/tests/bench/samples/bench_hooks.tsv'\n", AT_SOURCE_DIR);
    bt_write(bench, script, 0755);
    bt_write(bench2, "#!/bin/sh\nprintf 'throughput 1 writer thread (M events/s; 7 of 20000000 dropped)\\t40.1\\t>= 10\\n'\n"
                     "printf 'throughput 2 writer threads (M events/s; 0 of 20000000 dropped)\\t51.0\\t>= 10\\n'\n"
                     "printf 'a row of its own (ns)\\t3.5\\t-\\n'\n", 0755);
    for (int k = 0; k < 2; k++) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "bash '%s/tests/bench/run.sh' '%s' '%s' > '%s'", AT_SOURCE_DIR, at_build_dir(),
                 k ? bench2 : bench, k ? out3 : out2);
        const char *argv[] = {"sh", "-c", cmd, NULL};
        at_run_result r = bt_run(argv);
        ck_assert_msg(r.exited && r.status == 0, "run.sh: %s", r.err);
        at_run_result_free(&r);
    }
    const char *argv[] = {"bash", SCRIPT, SAMPLE, out2, out3, NULL};
    at_run_result r = bt_run(argv);
    ck_assert_msg(r.exited && r.status == 0, "table.sh: %s", r.err);
    static const char *rows[] = {
        "| hooked call via stub, Start+Stop, no payload (ns added) | 38.0–59.0 (2 runs) | ≤ 80 |\n",
        "| ↳ sustained, no pauses: stub (ns added) | 39.5–121.9 (2 runs) | ≤ 40 |\n",
        "| stub overhead / uftrace overhead (same run of the bench) | 0.27–0.48 (2 runs) | ≤ 0.5 |\n",
        /* the name as the first run printed it, the range over both */
        "| throughput 1 writer thread (M events/s; 0 of 20000000 dropped) | 40.1–42.7 (2 runs) | ≥ 10 |\n",
        "| throughput 2 writer threads (M events/s; 0 of 20000000 dropped) | 25.5–51.0 (2 runs) | ≥ 10 |\n",
        /* rows one run alone has keep its figure */
        "| ↳ the CPU's floor: two TSC reads and two 24-byte records around the call, no tracer (ns added) | 19.6 |  |\n",
        "| a row of its own (ns) | 3.5 |  |\n",
        /* a row the other runs do not have stays as the sample printed it */
        "| event write, no payload (ns, clock excluded) | 5.7 | ≤ 25 |\n",
    };
    bt_expect_rows(r.out, rows, sizeof rows / sizeof rows[0]);
    /* depth 10 and depth 30 stay two rows */
    ck_assert_uint_eq(bt_count(r.out, "| stack: frame pointers, depth "), 2);
    at_run_result_free(&r);
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* --update: the page's table between its markers is replaced, the rest of the page is untouched. */
START_TEST(update_replaces_the_table_only)
{
    char *dir = at_tmpdir("benchtable");
    char page[1024];
    snprintf(page, sizeof page, "%s/performance.md", dir);
    size_t len;
    char *orig = at_read_file(AT_SOURCE_DIR "/docs/performance.md", &len);
    ck_assert(orig);
    bt_write(page, orig, 0644);
    const char *argv[] = {"bash", SCRIPT, "--update", page, SAMPLE, NULL};
    at_run_result r = bt_run(argv);
    ck_assert_msg(r.exited && r.status == 0 && strstr(r.err, "102 rows from 1 run"), "table.sh --update: %s", r.err);
    at_run_result_free(&r);
    char *now = at_read_file(page, NULL);
    const char *b = "<!-- make bench table: begin -->\n", *e = "<!-- make bench table: end -->\n";
    char *ob = strstr(orig, b), *oe = strstr(orig, e), *nb = strstr(now, b), *ne = strstr(now, e);
    ck_assert(ob && oe && nb && ne);
    ck_assert_int_eq(nb - now, ob - orig);
    ck_assert(!strncmp(now, orig, (size_t)(ob - orig)));
    ck_assert_str_eq(ne, oe);
    ck_assert(strstr(nb, "| event write, no payload (ns, clock excluded) | 5.7 | ≤ 25 |\n"));
    ck_assert(!strstr(nb, "| bytes on disk per payload-less event | 2.0 | ≤ 8 |")); /* the old table is gone */
    struct stat st;
    ck_assert_int_eq(stat(page, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0644);
    free(now);
    free(orig);
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* Bad input: one line saying what, and an exit status. */
START_TEST(bad_input_is_one_message)
{
    char *dir = at_tmpdir("benchtable");
    char plain[1024], nomark[1024];
    snprintf(plain, sizeof plain, "%s/notes.txt", dir);
    snprintf(nomark, sizeof nomark, "%s/page.md", dir);
    bt_write(plain, "no table here\n", 0644);
    bt_write(nomark, "# a page\n", 0644);
    static const struct {
        const char *args[4];
        int status;
        const char *msg;
    } cases[] = {
        {{NULL}, 2, "usage: tests/bench/table.sh"},
        {{"--update", "x.md", NULL}, 2, "usage: tests/bench/table.sh"},
        {{"/nonexistent/bench.txt", NULL}, 1, "table.sh: /nonexistent/bench.txt: no such file"},
        {{"@plain", NULL}, 1, "table.sh: no make bench table in the input"},
        {{"--update", "@nomark", SAMPLE, NULL}, 1, "has no '<!-- make bench table: begin -->'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[8] = {"bash", SCRIPT};
        int n = 2;
        for (int k = 0; cases[i].args[k]; k++)
            argv[n++] = !strcmp(cases[i].args[k], "@plain") ? plain : !strcmp(cases[i].args[k], "@nomark") ? nomark
                                                                                                              : cases[i].args[k];
        argv[n] = NULL;
        at_run_result r = bt_run(argv);
        ck_assert_msg(r.exited && r.status == cases[i].status && strstr(r.err, cases[i].msg) &&
                          bt_count(r.err, "\n") == 1 && !*r.out,
                      "case %zu: exit %d, stderr '%s', stdout '%s'", i, r.status, r.err, r.out);
        at_run_result_free(&r);
    }
    char *page = at_read_file(nomark, NULL);
    ck_assert_str_eq(page, "# a page\n");
    free(page);
    at_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("benchtable");
    TCase *c = tcase_create("benchtable");
    tcase_set_timeout(c, 0);
    tcase_add_test(c, one_run_gives_every_row);
    tcase_add_test(c, several_runs_give_ranges);
    tcase_add_test(c, update_replaces_the_table_only);
    tcase_add_test(c, bad_input_is_one_message);
    suite_add_tcase(s, c);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
