/* test_install: `make install` into a scratch DESTDIR puts exactly the files the README lists (the
 * tool, the shim beside it in ../lib, acttrace.h, the two man pages, every config/examples/ config)
 * with their modes; the installed acttrace runs, `acttrace run` preloads the installed shim (not the
 * build's) and traces Debian's sqlite3 with the installed example config, the installed tools read
 * that trace, man finds the installed pages; `make uninstall` then leaves no file behind, only
 * the standard folders install made (empty), and none of our own. */
#include <check.h>
#include <dirent.h>
#include <glob.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "at_testlib.h"

#define PREFIX "/usr/local"

/* Files (and symlinks) below root, as paths relative to it, sorted, one per line. */
static void in_walk(const char *root, const char *rel, char ***v, size_t *n)
{
    char path[2048];
    snprintf(path, sizeof path, "%s%s", root, rel);
    DIR *d = opendir(path);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char r[2048], full[4096];
        snprintf(r, sizeof r, "%s/%s", rel, e->d_name);
        snprintf(full, sizeof full, "%s%s", root, r);
        struct stat st;
        ck_assert_int_eq(lstat(full, &st), 0);
        if (S_ISDIR(st.st_mode)) {
            in_walk(root, r, v, n);
        } else {
            *v = realloc(*v, (*n + 1) * sizeof **v);
            (*v)[(*n)++] = strdup(r);
        }
    }
    closedir(d);
}

static char *in_files(const char *root)
{
    char **v = NULL;
    size_t n = 0;
    in_walk(root, "", &v, &n);
    return at_strv_join_sorted(v, n);
}

/* make TARGET DESTDIR=dir PREFIX=/usr/local in the source tree, against the build under test. */
static void in_make(const char *target, const char *dest)
{
    char d[1100], b[1100];
    snprintf(d, sizeof d, "DESTDIR=%s", dest);
    snprintf(b, sizeof b, "BUILD=%s", at_build_dir());
    const char *argv[] = {"make", "--no-print-directory", target, d, "PREFIX=" PREFIX, b, NULL};
    const char *env[] = {"MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES", NULL};
    at_run_opts o = {.argv = argv, .env = env, .no_preload = true, .cwd = AT_SOURCE_DIR};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 0, "make %s: exit %d\n%s\n%s", target, r.status, r.out, r.err);
    at_run_result_free(&r);
}

static at_run_result in_run(const char *const *argv, const char *cwd)
{
    at_run_opts o = {.argv = argv, .no_preload = true, .cwd = cwd};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    return r;
}

START_TEST(install_runs_and_uninstall_removes_it_all)
{
    /* the installed tool preloads the installed shim into a program, which an ASan build of it
     * cannot be (the sanitizer runtime must come first) */
    if (getenv("ACTTRACE_ASAN")) {
        printf("test_install: skipped under ASan: the installed shim is preloaded as a user does, "
               "which an ASan build cannot be\n");
        return;
    }
    ck_assert_msg(at_file_exists("/usr/bin/sqlite3"), "sqlite3 is missing (.ci/deps installs it)");
    char *dir = at_tmpdir("install");
    char dest[1024], root[1100];
    snprintf(dest, sizeof dest, "%s/dest", dir);
    snprintf(root, sizeof root, "%s" PREFIX, dest);
    in_make("install", dest);

    /* exactly these files */
    char want[8192] = "";
    glob_t g;
    ck_assert_int_eq(glob(AT_SOURCE_DIR "/config/examples/*.conf", 0, NULL, &g), 0);
    ck_assert_uint_ge(g.gl_pathc, 4);
    strcat(want, PREFIX "/bin/acttrace\n" PREFIX "/include/acttrace.h\n" PREFIX "/lib/libacttrace.so\n");
    for (size_t i = 0; i < g.gl_pathc; i++) {
        strcat(want, PREFIX "/share/acttrace/examples/");
        strcat(want, strrchr(g.gl_pathv[i], '/') + 1);
        strcat(want, "\n");
    }
    globfree(&g);
    strcat(want, PREFIX "/share/man/man1/acttrace.1\n" PREFIX "/share/man/man5/acttrace.conf.5\n");
    char *got = in_files(dest);
    ck_assert_str_eq(got, want);
    free(got);
    static const struct { const char *f; mode_t mode; } modes[] = {
        {"/bin/acttrace", 0755}, {"/lib/libacttrace.so", 0755}, {"/include/acttrace.h", 0644},
        {"/share/man/man1/acttrace.1", 0644}, {"/share/man/man5/acttrace.conf.5", 0644},
        {"/share/acttrace/examples/sqlite.conf", 0644}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        char p[1200];
        struct stat st;
        snprintf(p, sizeof p, "%s%s", root, modes[i].f);
        ck_assert_int_eq(stat(p, &st), 0);
        ck_assert_msg((st.st_mode & 07777) == modes[i].mode, "%s: mode %o, not %o", modes[i].f,
                      st.st_mode & 07777, modes[i].mode);
    }

    /* the installed acttrace */
    char tool[1200], conf[1200], shim[1200];
    snprintf(tool, sizeof tool, "%s/bin/acttrace", root);
    snprintf(conf, sizeof conf, "%s/share/acttrace/examples/sqlite.conf", root);
    snprintf(shim, sizeof shim, "%s/bin/../lib/libacttrace.so", root);
    const char *ver[] = {tool, "--version", NULL};
    at_run_result r = in_run(ver, dir);
    ck_assert_msg(r.exited && r.status == 0 && !strncmp(r.out, "acttrace ", 9), "%s --version: %s%s", tool, r.out, r.err);
    at_run_result_free(&r);
    /* run preloads the shim installed beside it */
    const char *env_argv[] = {tool, "run", "-q", "--", "/bin/sh", "-c", "printf '%s' \"$LD_PRELOAD\"", NULL};
    r = in_run(env_argv, dir);
    ck_assert_msg(r.exited && r.status == 0 && !strcmp(r.out, shim), "acttrace run preloaded '%s', not %s (%s)",
                  r.out, shim, r.err);
    at_run_result_free(&r);
    /* and traces with it: sqlite3 under the installed example config */
    const char *run[] = {tool, "run", "-c", conf, "-o", "t.nettrace", "--", "/usr/bin/sqlite3", ":memory:",
                         "CREATE TABLE t(x); INSERT INTO t VALUES(42); SELECT x FROM t;", NULL};
    r = in_run(run, dir);
    ck_assert_msg(r.exited && r.status == 0 && strstr(r.out, "42") && strstr(r.err, "trace written to t.nettrace"),
                  "acttrace run: exit %d\n%s\n%s", r.status, r.out, r.err);
    at_run_result_free(&r);
    const char *verify[] = {tool, "verify", "t.nettrace", NULL};
    r = in_run(verify, dir);
    ck_assert_msg(r.exited && r.status == 0 && strstr(r.out, ": OK"), "acttrace verify: %s%s", r.out, r.err);
    at_run_result_free(&r);
    const char *tree[] = {tool, "tree", "--name", "Step", "t.nettrace", NULL};
    r = in_run(tree, dir);
    ck_assert_msg(r.exited && r.status == 0 && strstr(r.out, "Step //1/"),
                  "acttrace tree --name Step: %s%s", r.out, r.err);
    at_run_result_free(&r);
    const char *stats[] = {tool, "stats", "t.nettrace", NULL};
    r = in_run(stats, dir);
    ck_assert_msg(r.exited && r.status == 0 && strstr(r.out, "\nPrepare ") && strstr(r.out, "\nStep "),
                  "acttrace stats: %s%s", r.out, r.err);
    at_run_result_free(&r);
    /* man finds the installed pages */
    char mandir[1200];
    snprintf(mandir, sizeof mandir, "%s/share/man", root);
    static const char *pages[][2] = {{"1", "acttrace"}, {"5", "acttrace.conf"}};
    for (int i = 0; i < 2; i++) {
        const char *man[] = {"man", "-M", mandir, pages[i][0], pages[i][1], NULL};
        const char *env[] = {"MANPAGER=cat", "PAGER=cat", "MANWIDTH=80", NULL};
        at_run_opts o = {.argv = man, .env = env, .no_preload = true};
        ck_assert_int_eq(at_run(&o, &r), 0);
        ck_assert_msg(r.exited && r.status == 0 && strstr(r.out, "NAME") && strstr(r.out, pages[i][1]),
                      "man -M %s %s %s: %s", mandir, pages[i][0], pages[i][1], r.err);
        at_run_result_free(&r);
    }

    /* uninstall: no file left, no folder of ours; the standard folders install made stay, empty */
    in_make("uninstall", dest);
    got = in_files(dest);
    ck_assert_msg(!*got, "make uninstall left:\n%s", got);
    free(got);
    char p[1200];
    snprintf(p, sizeof p, "%s/share/acttrace", root);
    ck_assert_msg(!at_file_exists(p), "make uninstall left the folder %s", p);
    snprintf(p, sizeof p, "%s/bin", root);
    ck_assert(at_file_exists(p));
    at_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("install");
    TCase *c = tcase_create("install");
    tcase_set_timeout(c, 0);
    tcase_add_test(c, install_runs_and_uninstall_removes_it_all);
    suite_add_tcase(s, c);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
