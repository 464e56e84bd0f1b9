/* test_truth_files: what the file says about itself is true, read back through the project's reader.
 * Drops: with a 256 KiB buffer and 8, 16 or 200 threads, every event a program tried to write is in
 * the file or counted there as lost (written + lost == attempts, exactly). Full disk: tracing into a
 * 256 KiB tmpfs leaves a file that ends at its end tag, counts what it lost, and every command says
 * so (the program runs as untraced). Killed mid-flush: SIGKILL at random points of a writer flushing
 * large events every millisecond leaves a file every reader ends cleanly (a torn tail is reported as
 * such, its complete blocks recovered), never a broken one. Exec: the images of one pid never give
 * out the same activity id (the pid is in the id's checksum). */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "at_testlib.h"
#include "at_tracegen.h"
#include "ntreader.h"

typedef struct tally {
    uint64_t ticks;   /* Tick events written */
    uint64_t events;  /* all events */
    uint64_t lost;    /* the reader's count of lost events (sequence gaps and sequence points) */
    uint64_t problems;
    int rc;           /* nt_next's last result */
    int damage;       /* NT_DAMAGE_* */
    char text[600];
} tally;

static void count_problem(void *ctx, uint64_t off, const char *msg)
{
    tally *t = ctx;
    if (!t->problems++)
        snprintf(t->text, sizeof t->text, "offset %llu: %s", (unsigned long long)off, msg);
}

static void read_tally(const char *path, tally *t, bool strict)
{
    memset(t, 0, sizeof *t);
    char err[512];
    nt_options o = {.strict = strict, .problem = count_problem, .ctx = t};
    nt_reader *r = nt_open_ex(path, &o, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_event ev;
    while ((t->rc = nt_next(r, &ev)) == 1) {
        t->events++;
        if (!strcmp(ev.meta->name, "Tick"))
            t->ticks++;
    }
    if (t->rc < 0)
        snprintf(t->text, sizeof t->text, "%s", nt_error(r));
    t->lost = nt_get_counts(r)->events_lost;
    const nt_damage *d = nt_get_damage(r);
    t->damage = d ? d->kind : NT_DAMAGE_NONE;
    if (d)
        snprintf(t->text, sizeof t->text, "%s", d->text);
    nt_close(r);
}

static uint64_t attempts_of(const char *out)
{
    const char *a = strstr(out, "attempts ");
    ck_assert_msg(a != NULL, "no attempts line in: %s", out);
    return strtoull(a + 9, NULL, 10);
}

/* ---- drops counted exactly ---- */

static const int drop_threads[] = {8, 16, 200};

START_TEST(test_drops_counted_exactly)
{
    int nt = drop_threads[_i];
    char threads[16];
    snprintf(threads, sizeof threads, "%d", nt);
    const char *argv[] = {"truth_burst", threads, "20000", NULL};
    const char *env[] = {"ACTTRACE_BUFFER_KB=256", "ACTTRACE_THREAD_EVENTS=no", NULL};
    at_session s;
    char d[1024];
    ck_assert_int_eq(at_session_run_deadline(&s, "truth-drops", argv, env, 300), 0);
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace, "%s", at_session_describe(&s, d, sizeof d));
    uint64_t attempts = attempts_of(s.r.out);
    ck_assert_uint_eq(attempts, (uint64_t)nt * 20000);
    tally t;
    read_tally(s.t.path, &t, true);
    ck_assert_msg(t.rc == 0 && t.problems == 0, "%d threads: %s", nt, t.text);
    /* a 256 KiB buffer cannot hold a burst of this size: drops happen, and each is counted */
    ck_assert_uint_gt(t.lost, 0);
    ck_assert_msg(t.ticks + t.lost == attempts,
                  "%d threads: %llu written + %llu counted lost != %llu attempted (%llu missing)", nt,
                  (unsigned long long)t.ticks, (unsigned long long)t.lost, (unsigned long long)attempts,
                  (unsigned long long)(attempts - t.ticks - t.lost));
    at_session_free(&s);
}
END_TEST

/* ---- full disk ---- */

/* A 256 KiB tmpfs, mounted (root only) and unmounted by main, outside the forked test: it goes away
 * whatever the test does. Empty when it could not be mounted (then the test says so). */
static char full_dir[4096], small[4200];

START_TEST(test_full_disk)
{
    if (!small[0]) {
        fprintf(stderr, "test_truth_files: no tmpfs could be mounted: the full-disk case did not run\n");
        return;
    }
    const char *dir = full_dir;
    char out[4300];
    snprintf(out, sizeof out, "ACTTRACE_OUTPUT=%s/full.nettrace", small);
    char *fx = at_fixture_path("truth_burst");
    /* 4 threads x 20000 events of ~200 bytes: 16 MB into 256 KiB, flushed every 5 ms */
    const char *argv[] = {fx, "4", "20000", "200", NULL};
    const char *env[] = {out, "ACTTRACE_THREAD_EVENTS=no", "ACTTRACE_FLUSH_MS=5", NULL};
    at_run_opts o = {.argv = argv, .env = env, .deadline_s = 300};
    at_run_result traced, plain;
    ck_assert_int_eq(at_run(&o, &traced), 0);
    at_run_opts u = {.argv = argv, .no_preload = true, .deadline_s = 300};
    ck_assert_int_eq(at_run(&u, &plain), 0);
    /* the program is not harmed: same status and output as untraced */
    ck_assert_msg(traced.exited && traced.status == 0, "traced: %s", traced.err);
    ck_assert_int_eq(plain.status, traced.status);
    ck_assert_str_eq(plain.out, traced.out);
    ck_assert_msg(strstr(traced.err, "No space left on device"), "no full-disk line: %s", traced.err);
    uint64_t attempts = attempts_of(traced.out);

    char path[4300];
    snprintf(path, sizeof path, "%s/full.nettrace", small);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_le(st.st_size, 256 * 1024);
    /* cut back to a complete file: it ends at its end tag (strict: no trailing bytes), and every
     * event it could not hold is counted in it */
    tally t;
    read_tally(path, &t, true);
    ck_assert_msg(t.rc == 0 && t.problems == 0 && t.damage == NT_DAMAGE_NONE, "%s", t.text);
    ck_assert_uint_gt(t.lost, 0);
    ck_assert_msg(t.ticks + t.lost == attempts, "%llu written + %llu lost != %llu attempted",
                  (unsigned long long)t.ticks, (unsigned long long)t.lost, (unsigned long long)attempts);

    /* every command says how much was lost */
    char lostnum[32];
    snprintf(lostnum, sizeof lostnum, "%llu events lost", (unsigned long long)t.lost);
    const char *cmds[][5] = {{"stats", path}, {"tree", path}, {"events", path}, {"stacks", "--all", path},
                             {"export", "--format", "chrome", path}, {"dump", "--no-events", path}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        at_run_result r;
        ck_assert_int_eq(at_tool_run(&r, cmds[i]), 0);
        ck_assert_msg(r.exited && r.status == 0, "acttrace %s: exit %d: %s", cmds[i][0], r.status, r.err);
        ck_assert_msg(strstr(r.err, lostnum), "acttrace %s does not say '%s': %s", cmds[i][0], lostnum, r.err);
        at_run_result_free(&r);
    }
    char html[4300];
    snprintf(html, sizeof html, "%s/r.html", dir);
    const char *rep[] = {"report", "-o", html, path, NULL};
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, rep), 0);
    ck_assert_msg(r.exited && r.status == 0 && strstr(r.err, lostnum), "report: %s", r.err);
    at_run_result_free(&r);
    size_t hl;
    char *h = at_read_file(html, &hl);
    char meta[64];
    snprintf(meta, sizeof meta, "\"lost\":%llu", (unsigned long long)t.lost);
    ck_assert_msg(h && strstr(h, meta), "the report does not carry %s", meta);
    free(h);

    /* acttrace run's closing line (run preloads the shim itself, without the sanitizer runtimes an
     * ASan build of it needs in front) */
    if (getenv("ACTTRACE_ASAN"))
        goto done;
    unlink(path);
    const char *run[] = {"run", "-o", path, "--", fx, "4", "20000", "200", NULL};
    ck_assert_int_eq(at_tool_run(&r, run), 0);
    ck_assert_msg(r.exited && r.status == 0, "run: %s", r.err);
    read_tally(path, &t, false);
    char closing[128];
    snprintf(closing, sizeof closing, ": %llu events, %llu lost", (unsigned long long)t.events,
             (unsigned long long)t.lost);
    ck_assert_msg(t.lost > 0 && strstr(r.err, closing), "run's closing line lacks '%s': %s", closing, r.err);
    at_run_result_free(&r);
done:
    at_run_result_free(&traced);
    at_run_result_free(&plain);
    free(fx);
}
END_TEST

/* ---- killed mid-flush ---- */

START_TEST(test_killed_mid_flush)
{
    char *dir = at_tmpdir("truth-kill");
    char *fx = at_fixture_path("truth_burst");
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    int torn = 0, runs = 40;
    for (int k = 0; k < runs; k++) {
        char out[4300], path[4200];
        snprintf(path, sizeof path, "%s/k%d.nettrace", dir, k);
        snprintf(out, sizeof out, "ACTTRACE_OUTPUT=%s", path);
        /* 2 threads of 30000 events of 2000 bytes, flushed every millisecond: flushes of megabytes */
        const char *argv[] = {fx, "2", "30000", "2000", NULL};
        const char *env[] = {out, "ACTTRACE_FLUSH_MS=1", NULL};
        at_run_opts o = {.argv = argv, .env = env};
        at_proc p;
        ck_assert_int_eq(at_spawn(&o, &p), 0);
        struct timespec d = {0, (long)(20 + rand() % 180) * 1000000L};
        nanosleep(&d, NULL);
        kill(p.pid, SIGKILL);
        at_run_result r;
        at_wait(&p, &r);
        at_run_result_free(&r);
        struct stat st;
        if (stat(path, &st) != 0 || st.st_size == 0)
            continue; /* killed before the file was made, or before its header (one write) */
        tally t;
        read_tally(path, &t, false);
        ck_assert_msg(t.rc == 0 && t.damage != NT_DAMAGE_BROKEN, "seed %u run %d: %s", seed, k, t.text);
        if (t.damage == NT_DAMAGE_TORN) {
            torn++;
            ck_assert_msg(strstr(t.text, "torn tail: ") && strstr(t.text, "the process was killed while writing"),
                          "%s", t.text);
            /* verify: sound up to the end tag, then the torn tail (exit 3) */
            const char *v[] = {"verify", path, NULL};
            ck_assert_int_eq(at_tool_run(&r, v), 0);
            ck_assert_msg(r.exited && r.status == 3 && strstr(r.out, "torn tail: "), "verify: %d %s", r.status,
                          r.out);
            at_run_result_free(&r);
        }
    }
    fprintf(stderr, "test_truth_files: %d of %d killed writers left a torn tail (seed %u)\n", torn, runs, seed);
    free(fx);
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* ---- exec keeps the pid: no activity id is given out twice ---- */

START_TEST(test_exec_ids_unique)
{
    at_session s;
    const char *argv[] = {"proc_chain", "exec", "3", NULL};
    ck_assert_int_eq(at_session_run(&s, "truth-exec", argv, NULL), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0, "%s", at_session_describe(&s, d, sizeof d));
    char **files = at_trace_files(s.dir);
    ck_assert_uint_eq(at_strv_len(files), 4);
    at_guid ids[8];
    int n = 0;
    for (size_t f = 0; files[f]; f++) {
        at_trace t;
        ck_assert_int_eq(at_trace_load(files[f], &t), 0);
        for (long i = at_find(&t, NULL, "HopStart", 0); i >= 0 && n < 8; i = at_find(&t, NULL, "HopStart", (size_t)i + 1)) {
            ids[n] = t.ev[i].activity;
            n++;
            /* the new image's first root is related to the activity that exec'd it, never that id itself */
            ck_assert_msg(!at_guid_eq(&t.ev[i].activity, &t.ev[i].related), "%s: HopStart %s is its own parent",
                          files[f], t.ev[i].act_path);
        }
        at_trace_free(&t);
    }
    ck_assert_int_eq(n, 4);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            ck_assert_msg(!at_guid_eq(&ids[i], &ids[j]), "two images gave out the same activity id");
    at_strv_free(files);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    char *fd = at_tmpdir("truth-full");
    snprintf(full_dir, sizeof full_dir, "%s", fd);
    snprintf(small, sizeof small, "%s/small", fd);
    if (mkdir(small, 0700) != 0 || mount("tmpfs", small, "tmpfs", 0, "size=256k") != 0) {
        fprintf(stderr, "test_truth_files: cannot mount a tmpfs on %s: %s\n", small, strerror(errno));
        small[0] = 0;
    }
    Suite *su = suite_create("truth_files");
    TCase *tc = tcase_create("files");
    tcase_set_timeout(tc, 0);
    tcase_add_loop_test(tc, test_drops_counted_exactly, 0, 3);
    tcase_add_test(tc, test_full_disk);
    tcase_add_test(tc, test_killed_mid_flush);
    tcase_add_test(tc, test_exec_ids_unique);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (small[0])
        umount2(small, MNT_DETACH);
    at_rmtree(fd);
    free(fd);
    return failed ? 1 : 0;
}
