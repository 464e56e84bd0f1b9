/* test_harm_files: the trace files can never be turned against the user the program runs as. Each
 * case runs the program (fixture harm_files) traced and untraced, each in a fresh folder prepared
 * the same way, and compares exit status, stdout, stderr and the file the program wrote; then looks
 * at what the trace did to the folder:
 *   - a symlink planted at the trace's name (to a victim file, or dangling) is never followed: the
 *     victim is unchanged, nothing is created at the link's target, the trace takes -dup2;
 *   - a file of another user planted at the name (world-writable) is untouched;
 *   - a trace file of ours from an earlier run is replaced by a fresh one; a file of ours at the
 *     name that is not a trace (the user's own notes, or an output pattern that names one of their
 *     files, notes that begin with the word Nettrace) is untouched, and so is an earlier trace made
 *     read-only, the trace taking -dup2;
 *   - trace files are 0600 under umask 022 and 000, or what ACTTRACE_FILE_MODE asks for;
 *   - a program that changes folder and execs another: the new image's files (and its children's)
 *     land in the folder the first traced process started in, never in the one it works in, and a
 *     relative config is found there too;
 *   - a program that chdir()s: every rotated segment still lands in the start folder, and circular
 *     mode removes only its own segments there (same-named files in the new folder stay). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "at_testlib.h"

#define DEADLINE_S 60

typedef void (*prep_fn)(const char *dir);

typedef struct pair {
    char *dir[2];       /* [0] traced, [1] untraced */
    at_run_result r[2];
    char *conf;         /* a config file of the case, or NULL */
} pair;

static void put_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
    ck_assert_int_eq(chmod(path, mode), 0);
}

static char *path2(const char *dir, const char *name)
{
    char *p = NULL;
    ck_assert(asprintf(&p, "%s/%s", dir, name) > 0);
    return p;
}

static bool file_is(const char *path, const char *want)
{
    size_t n = 0;
    char *s = at_read_file(path, &n);
    bool ok = s && n == strlen(want) && memcmp(s, want, n) == 0;
    free(s);
    return ok;
}

/* Run harm_files (chdir to `into` unless "-", n marks) traced and untraced, each in a fresh folder
 * with a sub/ folder, prepared by prep; compare what the program did in both. */
static void run_pair(pair *p, const char *tag, const char *into, long n, const char *conf_text,
                     const char *const *extra_env, prep_fn prep)
{
    memset(p, 0, sizeof *p);
    if (conf_text) {
        char *cdir = at_tmpdir("harmfiles-conf");
        p->conf = path2(cdir, "t.conf");
        put_file(p->conf, conf_text, 0644);
        free(cdir);
    }
    char nbuf[32], cenv[4200];
    snprintf(nbuf, sizeof nbuf, "%ld", n);
    snprintf(cenv, sizeof cenv, "ACTTRACE_CONFIG=%s", p->conf ? p->conf : "");
    const char *env[16] = {"ACTTRACE_OUTPUT=t.nettrace"};
    size_t k = 1;
    if (p->conf)
        env[k++] = cenv;
    for (size_t i = 0; extra_env && extra_env[i] && k < 15; i++)
        env[k++] = extra_env[i];
    env[k] = NULL;
    char *fx = at_fixture_path("harm_files");
    for (int u = 0; u < 2; u++) {
        p->dir[u] = at_tmpdir(tag);
        char *sub = path2(p->dir[u], "sub");
        ck_assert_int_eq(mkdir(sub, 0755), 0);
        free(sub);
        if (prep)
            prep(p->dir[u]);
        const char *argv[] = {fx, into, nbuf, NULL};
        at_run_opts o = {.argv = argv, .env = env, .no_preload = u == 1, .cwd = p->dir[u],
                         .deadline_s = DEADLINE_S};
        ck_assert_int_eq(at_run(&o, &p->r[u]), 0);
    }
    free(fx);
    char d0[256], d1[256];
    at_run_describe(&p->r[0], d0, sizeof d0);
    at_run_describe(&p->r[1], d1, sizeof d1);
    ck_assert_msg(p->r[0].exited && p->r[1].exited && p->r[0].status == 7 && p->r[1].status == 7,
                  "traced %s, untraced %s; stderr '%s'", d0, d1, p->r[0].err);
    ck_assert_str_eq(p->r[0].out, p->r[1].out);
    ck_assert_str_eq(p->r[0].err, p->r[1].err);
    /* the file the program wrote, where it wrote it */
    char want[64];
    snprintf(want, sizeof want, "marks %ld\n", n);
    for (int u = 0; u < 2; u++) {
        char *out = path2(p->dir[u], strcmp(into, "-") ? "sub/out.txt" : "out.txt");
        ck_assert_msg(file_is(out, want), "%s: not the program's output", out);
        free(out);
    }
}

static void pair_free(pair *p)
{
    for (int u = 0; u < 2; u++) {
        at_run_result_free(&p->r[u]);
        if (!getenv("AT_KEEP_TMP"))
            at_rmtree(p->dir[u]);
        free(p->dir[u]);
    }
    if (p->conf) {
        char *slash = strrchr(p->conf, '/');
        *slash = 0;
        if (!getenv("AT_KEEP_TMP"))
            at_rmtree(p->conf);
        free(p->conf);
    }
}

static void verify(const char *path)
{
    char tool[4096];
    snprintf(tool, sizeof tool, "%s/acttrace", at_build_dir());
    const char *argv[] = {tool, "verify", path, NULL};
    at_run_opts o = {.argv = argv, .no_preload = true};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 0, "acttrace verify %s: %s%s", path, r.out, r.err);
    at_run_result_free(&r);
}

/* The trace at dir/name: complete, verified, all n marks in it. */
static void check_trace(const char *dir, const char *name, long n)
{
    char *p = path2(dir, name);
    at_trace t;
    int rc = at_trace_load(p, &t);
    ck_assert_msg(rc == 0 && t.complete, "%s: %s", p, t.err);
    ck_assert_uint_eq(at_count(&t, NULL, "Mark"), (size_t)n);
    at_trace_free(&t);
    verify(p);
    free(p);
}

/* ---- a symlink at the trace's name ---- */

static void prep_symlink(const char *dir)
{
    char *victim = path2(dir, "victim.txt"), *link = path2(dir, "t.nettrace");
    put_file(victim, "precious\n", 0644);
    ck_assert_int_eq(symlink(victim, link), 0);
    free(victim);
    free(link);
}

START_TEST(test_symlink_not_followed)
{
    pair p;
    run_pair(&p, "harm-symlink", "-", 50, NULL, NULL, prep_symlink);
    char *victim = path2(p.dir[0], "victim.txt"), *link = path2(p.dir[0], "t.nettrace");
    ck_assert_msg(file_is(victim, "precious\n"), "the symlink's target was written");
    struct stat st;
    ck_assert_int_eq(lstat(link, &st), 0);
    ck_assert_msg(S_ISLNK(st.st_mode), "the planted symlink was replaced");
    check_trace(p.dir[0], "t-dup2.nettrace", 50);
    free(victim);
    free(link);
    pair_free(&p);
}
END_TEST

static void prep_dangling(const char *dir)
{
    char *target = path2(dir, "created.txt"), *link = path2(dir, "t.nettrace");
    ck_assert_int_eq(symlink(target, link), 0);
    free(target);
    free(link);
}

START_TEST(test_dangling_symlink_not_followed)
{
    pair p;
    run_pair(&p, "harm-dangling", "-", 50, NULL, NULL, prep_dangling);
    char *target = path2(p.dir[0], "created.txt");
    ck_assert_msg(!at_file_exists(target), "a file was created through the dangling symlink");
    check_trace(p.dir[0], "t-dup2.nettrace", 50);
    free(target);
    pair_free(&p);
}
END_TEST

/* ---- a file planted at the name ---- */

static void prep_planted(const char *dir)
{
    char *f = path2(dir, "t.nettrace");
    put_file(f, "planted\n", 0666);
    if (geteuid() == 0)
        ck_assert_int_eq(chown(f, 65534, 65534), 0); /* another user's, as an attacker's would be */
    free(f);
}

START_TEST(test_planted_file_untouched)
{
    pair p;
    run_pair(&p, "harm-planted", "-", 50, NULL, NULL, prep_planted);
    char *f = path2(p.dir[0], "t.nettrace");
    ck_assert_msg(file_is(f, "planted\n"), "the planted file was written");
    struct stat st;
    ck_assert_int_eq(lstat(f, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0666);
    check_trace(p.dir[0], "t-dup2.nettrace", 50);
    free(f);
    pair_free(&p);
}
END_TEST

/* an earlier run's trace of our own (torn: its run was killed; it starts as every trace does):
 * replaced, as a re-run is expected to */
static void prep_stale(const char *dir)
{
    char *f = path2(dir, "t.nettrace");
    put_file(f, "Nettrace\x14", 0600); /* the rest of the header: put_file writes text */
    FILE *a = fopen(f, "ab");
    ck_assert_ptr_nonnull(a);
    fwrite("\0\0\0!FastSerialization.1, torn after its header", 1, 46, a);
    fclose(a);
    free(f);
}

START_TEST(test_own_stale_file_replaced)
{
    pair p;
    run_pair(&p, "harm-stale", "-", 50, NULL, NULL, prep_stale);
    check_trace(p.dir[0], "t.nettrace", 50);
    char *d2 = path2(p.dir[0], "t-dup2.nettrace");
    ck_assert(!at_file_exists(d2));
    free(d2);
    pair_free(&p);
}
END_TEST

/* a file of the user's own at the name, not a trace: never replaced, whatever its mode (notes about
 * the format that begin with its magic word are notes) */
static void prep_own_notes(const char *dir)
{
    char *f = path2(dir, "t.nettrace");
    put_file(f, "Nettrace notes: my notes\n", 0644);
    free(f);
}

/* an earlier trace its owner made read-only: kept, the trace taking -dup2 */
static void prep_readonly_trace(const char *dir)
{
    char *f = path2(dir, "t.nettrace");
    put_file(f, "Nettrace\x14", 0600);
    FILE *a = fopen(f, "ab");
    ck_assert_ptr_nonnull(a);
    fwrite("\0\0\0!FastSerialization.1, kept", 1, 29, a);
    fclose(a);
    ck_assert_int_eq(chmod(f, 0444), 0);
    free(f);
}

START_TEST(test_readonly_trace_kept)
{
    pair p;
    run_pair(&p, "harm-rotrace", "-", 50, NULL, NULL, prep_readonly_trace);
    char *f = path2(p.dir[0], "t.nettrace");
    struct stat st;
    ck_assert_int_eq(lstat(f, &st), 0);
    ck_assert_msg(st.st_size == 38 && (st.st_mode & 07777) == 0444, "the read-only trace was replaced");
    check_trace(p.dir[0], "t-dup2.nettrace", 50);
    free(f);
    pair_free(&p);
}
END_TEST

START_TEST(test_own_other_file_kept)
{
    pair p;
    run_pair(&p, "harm-notes", "-", 50, NULL, NULL, prep_own_notes);
    char *f = path2(p.dir[0], "t.nettrace");
    ck_assert_msg(file_is(f, "Nettrace notes: my notes\n"), "the user's own file at the trace's name was replaced");
    struct stat st;
    ck_assert_int_eq(lstat(f, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0644);
    check_trace(p.dir[0], "t-dup2.nettrace", 50);
    free(f);
    pair_free(&p);
}
END_TEST

/* ---- an image that starts in another folder ---- */

/* A relative pattern is the folder the first traced process started in: a program that changes
 * folder and execs another (a wrapper script, a server's worker, git's helpers in the repository
 * they serve) gets its trace files there, never in the folder it works in, which holds only what it
 * holds untraced. */
START_TEST(test_exec_elsewhere)
{
    char *fx = at_fixture_path("proc_chain");
    char *dir[2];
    at_run_result r[2];
    for (int u = 0; u < 2; u++) {
        dir[u] = at_tmpdir("harm-elsewhere");
        char *sub = path2(dir[u], "sub");
        ck_assert_int_eq(mkdir(sub, 0755), 0);
        free(sub);
        const char *argv[] = {"sh", "-c", "cd sub && exec \"$0\" fork", fx, NULL};
        const char *env[] = {"ACTTRACE_OUTPUT=t-%p.nettrace", NULL};
        at_run_opts o = {.argv = argv, .env = env, .no_preload = u == 1, .cwd = dir[u], .deadline_s = DEADLINE_S};
        ck_assert_int_eq(at_run(&o, &r[u]), 0);
        ck_assert_msg(r[u].exited && r[u].status == 0, "%s: %s", u ? "untraced" : "traced", r[u].err);
    }
    char *sub0 = path2(dir[0], "sub");
    char **in_sub = at_trace_files(sub0), **in_start = at_trace_files(dir[0]);
    ck_assert_msg(at_strv_len(in_sub) == 0, "a trace file was written into the folder the program works in: %s",
                  in_sub[0]);
    ck_assert_msg(at_strv_len(in_start) == 2, "the start folder holds %zu trace files, not the exec'd image's and "
                                              "its fork child's", at_strv_len(in_start));
    for (size_t i = 0; in_start[i]; i++) {
        at_trace t;
        ck_assert_msg(at_trace_load(in_start[i], &t) == 0 && t.complete, "%s: %s", in_start[i], t.err);
        at_trace_free(&t);
    }
    at_strv_free(in_sub);
    at_strv_free(in_start);
    free(sub0);
    for (int u = 0; u < 2; u++) {
        at_run_result_free(&r[u]);
        if (!getenv("AT_KEEP_TMP"))
            at_rmtree(dir[u]);
        free(dir[u]);
    }
    free(fx);
}
END_TEST

/* A relative ACTTRACE_CONFIG is the folder the first traced process started in too: the image that
 * starts elsewhere reads the same config (it said "cannot open" and hooked nothing) */
START_TEST(test_config_elsewhere)
{
    char *dir = at_tmpdir("harm-confelse");
    char *sub = path2(dir, "sub"), *conf = path2(dir, "demo.conf"), *out = path2(dir, "t-%p.nettrace");
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    char src[4200];
    snprintf(src, sizeof src, "%s/tests/demo/demo.conf", AT_SOURCE_DIR);
    char *text = at_read_file(src, NULL);
    ck_assert_ptr_nonnull(text);
    put_file(conf, text, 0644);
    free(text);
    char *fx = at_fixture_path("demo_server");
    char env_out[4300];
    snprintf(env_out, sizeof env_out, "ACTTRACE_OUTPUT=%s", out);
    const char *env[] = {"ACTTRACE_CONFIG=demo.conf", env_out, NULL};
    const char *argv[] = {"sh", "-c", "cd sub && exec \"$0\" 4 1 2 > /dev/null", fx, NULL};
    at_run_opts o = {.argv = argv, .env = env, .cwd = dir, .deadline_s = DEADLINE_S};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 0 && !strstr(r.err, "cannot open"), "%s", r.err);
    char **files = at_trace_files(dir);
    ck_assert_msg(at_strv_len(files) == 1, "%zu trace files: %s", at_strv_len(files), r.err);
    at_trace t;
    ck_assert_msg(at_trace_load(files[0], &t) == 0 && t.complete, "%s", t.err);
    ck_assert_msg(at_count(&t, NULL, "ConnectionStart") == 4, "the exec'd image hooked nothing: %s", r.err);
    at_trace_free(&t);
    at_strv_free(files);
    at_run_result_free(&r);
    free(fx);
    free(sub);
    free(conf);
    free(out);
    if (!getenv("AT_KEEP_TMP"))
        at_rmtree(dir);
    free(dir);
}
END_TEST

/* ---- permissions ---- */

static void check_mode(mode_t umask_v, const char *const *env, unsigned want)
{
    mode_t old = umask(umask_v); /* the programs inherit it */
    pair p;
    run_pair(&p, "harm-mode", "-", 10, NULL, env, NULL);
    umask(old);
    char *f = path2(p.dir[0], "t.nettrace");
    struct stat st;
    ck_assert_int_eq(stat(f, &st), 0);
    ck_assert_msg((st.st_mode & 07777) == want, "umask %03o: the trace is %04o, not %04o",
                  (unsigned)umask_v, (unsigned)(st.st_mode & 07777), want);
    check_trace(p.dir[0], "t.nettrace", 10);
    free(f);
    pair_free(&p);
}

START_TEST(test_mode_0600)
{
    check_mode(022, NULL, 0600);
    check_mode(0, NULL, 0600);
    const char *env[] = {"ACTTRACE_FILE_MODE=0640", NULL};
    check_mode(077, env, 0640);
}
END_TEST

/* ---- chdir ---- */

/* The trace files (t*.nettrace) in dir, sorted; how many. */
static size_t traces_in(const char *dir, char ***out)
{
    *out = at_trace_files(dir);
    return at_strv_len(*out);
}

START_TEST(test_rotate_after_chdir)
{
    pair p;
    run_pair(&p, "harm-rotate", "sub", 2000, "[trace]\nmode = rotate 16K\n", NULL, NULL);
    char *sub = path2(p.dir[0], "sub");
    char **in_sub, **in_start;
    ck_assert_msg(traces_in(sub, &in_sub) == 0, "a segment in the folder the program moved to: %s",
                  in_sub[0]);
    size_t n = traces_in(p.dir[0], &in_start);
    ck_assert_msg(n >= 3, "%zu segments in the start folder", n);
    size_t marks = 0;
    for (size_t i = 0; i < n; i++) {
        at_trace t;
        ck_assert_msg(at_trace_load(in_start[i], &t) == 0 && t.complete, "%s: %s", in_start[i],
                      t.err);
        marks += at_count(&t, NULL, "Mark");
        at_trace_free(&t);
    }
    ck_assert_uint_eq(marks, 2000);
    char *seg1 = path2(p.dir[0], "t.1.nettrace");
    ck_assert(at_file_exists(seg1));
    free(seg1);
    at_strv_free(in_sub);
    at_strv_free(in_start);
    free(sub);
    pair_free(&p);
}
END_TEST

#define PLANTED 60

/* files in sub/ named as the circular segments: what the old code's relative unlink removed */
static void prep_circular(const char *dir)
{
    for (int k = 0; k < PLANTED; k++) {
        char name[64];
        if (k)
            snprintf(name, sizeof name, "sub/t.%d.nettrace", k);
        else
            snprintf(name, sizeof name, "sub/t.nettrace");
        char *f = path2(dir, name);
        put_file(f, "mine\n", 0644);
        free(f);
    }
}

START_TEST(test_circular_after_chdir)
{
    pair p;
    run_pair(&p, "harm-circular", "sub", 2000, "[trace]\nmode = circular 64K\n", NULL,
             prep_circular);
    for (int k = 0; k < PLANTED; k++) {
        char name[64];
        if (k)
            snprintf(name, sizeof name, "sub/t.%d.nettrace", k);
        else
            snprintf(name, sizeof name, "sub/t.nettrace");
        char *f = path2(p.dir[0], name);
        ck_assert_msg(file_is(f, "mine\n"), "%s was removed or written", name);
        free(f);
    }
    char **in_start;
    size_t n = traces_in(p.dir[0], &in_start);
    ck_assert_msg(n >= 1 && n <= 4, "%zu segments in the start folder", n);
    char *first = path2(p.dir[0], "t.nettrace");
    ck_assert_msg(!at_file_exists(first), "circular mode did not go round in the start folder");
    for (size_t i = 0; i < n; i++) {
        at_trace t;
        ck_assert_msg(at_trace_load(in_start[i], &t) == 0 && t.complete, "%s: %s", in_start[i],
                      t.err);
        at_trace_free(&t);
    }
    free(first);
    at_strv_free(in_start);
    pair_free(&p);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("harm_files");
    TCase *tc = tcase_create("files");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_symlink_not_followed);
    tcase_add_test(tc, test_dangling_symlink_not_followed);
    tcase_add_test(tc, test_planted_file_untouched);
    tcase_add_test(tc, test_own_stale_file_replaced);
    tcase_add_test(tc, test_own_other_file_kept);
    tcase_add_test(tc, test_readonly_trace_kept);
    tcase_add_test(tc, test_exec_elsewhere);
    tcase_add_test(tc, test_config_elsewhere);
    tcase_add_test(tc, test_mode_0600);
    tcase_add_test(tc, test_rotate_after_chdir);
    tcase_add_test(tc, test_circular_after_chdir);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
