/* test_readme: every command of README.md, run as a user would run it, and every output it shows
 * compared with what the commands print. The convention the README follows:
 *   - a ```sh block is commands: all of them run, in order, in one bash (set -e -o pipefail, so a
 *     command that fails anywhere, in a pipeline too, fails the test), starting in the source tree
 *     with HOME a scratch folder and BUILD the built tree (make then uses it, and `make install
 *     PREFIX=$HOME/.local` installs into the scratch folder);
 *   - a ```text block is output: its lines must appear, one after the other, in what one sh block
 *     printed, numbers masked (times, durations, thread ids, counts: '#') and all else exact;
 *   - no other fenced block is allowed, so no command can escape the test;
 *   - one command is not run as written: `make check` is the suite this test belongs to, so it is
 *     replaced by `make -n check` (the target and its recipe must exist).
 * Then the commands' key results are asserted: the demo traced and verified, acttrace installed
 * and found in PATH, the walk-through's checks, run, tree, stats and report, and its config equal to
 * config/examples/sqlite.conf (shipped and installed for users to start from). Also: every relative
 * link of the README and of docs/ names a file that exists. */
#include <check.h>
#include <ctype.h>
#include <glob.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "at_testlib.h"

typedef struct rd_block {
    bool sh;      /* sh (commands) or text (output) */
    int line;     /* README line of the opening fence */
    char *body;   /* the lines between the fences */
} rd_block;

typedef struct rd_readme {
    rd_block b[64];
    int n;
    char err[256];
} rd_readme;

/* The fenced blocks of the README; false with err set for a fence of another kind or unclosed. */
static bool rd_parse(const char *text, rd_readme *r)
{
    r->n = 0;
    const char *p = text;
    int line = 0;
    rd_block *open = NULL;
    size_t cap = 0, len = 0;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        line++;
        if (l >= 3 && !strncmp(p, "```", 3)) {
            if (!open) {
                char info[32] = "";
                snprintf(info, sizeof info, "%.*s", (int)(l - 3), p + 3);
                if (strcmp(info, "sh") && strcmp(info, "text")) {
                    snprintf(r->err, sizeof r->err, "README.md:%d: a ```%s block: only sh (run) and "
                             "text (compared) blocks are allowed", line, info);
                    return false;
                }
                if (r->n == (int)(sizeof r->b / sizeof r->b[0])) {
                    snprintf(r->err, sizeof r->err, "README.md:%d: too many blocks", line);
                    return false;
                }
                open = &r->b[r->n++];
                open->sh = !strcmp(info, "sh");
                open->line = line;
                open->body = calloc(1, 1);
                cap = 1;
                len = 0;
            } else {
                open = NULL;
            }
        } else if (open) {
            if (len + l + 2 > cap) {
                cap = (len + l + 2) * 2;
                open->body = realloc(open->body, cap);
            }
            memcpy(open->body + len, p, l);
            len += l;
            open->body[len++] = '\n';
            open->body[len] = 0;
        }
        p = e ? e + 1 : p + l;
    }
    if (open) {
        snprintf(r->err, sizeof r->err, "README.md:%d: the block is never closed", open->line);
        return false;
    }
    return true;
}

static void rd_free(rd_readme *r)
{
    for (int i = 0; i < r->n; i++)
        free(r->b[i].body);
}

/* A line with its numbers masked: a number that does not continue a word or a path ("sqlite3",
 * "//1/2") becomes '#', with its unit (us, ms, s) if one is glued on; "#,#,#" becomes "#". */
static void rd_mask(const char *in, size_t n, char *out, size_t outn)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 2 < outn;) {
        char prev = i ? in[i - 1] : ' ';
        if (isdigit((unsigned char)in[i]) && !isalnum((unsigned char)prev) && prev != '_' &&
            prev != '/' && prev != '.') {
            while (i < n && (isdigit((unsigned char)in[i]) || in[i] == '.'))
                i++;
            for (const char *u = "us\0ms\0s\0"; *u; u += strlen(u) + 1) {
                size_t ul = strlen(u);
                if (i + ul <= n && !strncmp(in + i, u, ul) && (i + ul == n || !isalnum((unsigned char)in[i + ul]))) {
                    i += ul;
                    break;
                }
            }
            if (o >= 2 && out[o - 1] == ',' && out[o - 2] == '#')
                o--; /* "#,#" -> "#" */
            else
                out[o++] = '#';
            continue;
        }
        out[o++] = in[i++];
    }
    out[o] = 0;
}

/* The masked lines of a text (malloc'd array of malloc'd strings, *count set). */
static char **rd_lines(const char *text, size_t len, size_t *count)
{
    size_t cap = 16, n = 0;
    char **v = malloc(cap * sizeof *v);
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        size_t l = e ? (size_t)(e - p) : (size_t)(end - p);
        if (n == cap)
            v = realloc(v, (cap *= 2) * sizeof *v);
        v[n] = malloc(2 * l + 8);
        rd_mask(p, l, v[n], 2 * l + 8);
        n++;
        p = e ? e + 1 : end;
    }
    *count = n;
    return v;
}

static void rd_lines_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* What each sh block printed: the script prints "@@block N@@" lines between blocks. */
static const char *rd_block_out(const char *all, int k, size_t *len)
{
    char m[32];
    snprintf(m, sizeof m, "@@block %d@@\n", k);
    const char *s = strstr(all, m);
    if (!s) {
        *len = 0;
        return "";
    }
    s += strlen(m);
    const char *e = strstr(s, "\n@@");
    *len = e ? (size_t)(e - s) : strlen(s);
    return s;
}

/* Whether the masked lines of want appear, one after another, in the masked lines of got. */
static bool rd_contains(char **got, size_t ng, char **want, size_t nw)
{
    for (size_t i = 0; i + nw <= ng; i++) {
        size_t k = 0;
        while (k < nw && !strcmp(got[i + k], want[k]))
            k++;
        if (k == nw)
            return true;
    }
    return false;
}

/* The script: every sh block in order, each announced on stdout and stderr. */
static char *rd_script(const rd_readme *r, int *make_checks)
{
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    *make_checks = 0;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        int need_ = snprintf(NULL, 0, __VA_ARGS__);                                                \
        if (len + (size_t)need_ + 1 > cap)                                                         \
            s = realloc(s, cap = (len + (size_t)need_ + 1) * 2);                                   \
        len += (size_t)snprintf(s + len, cap - len, __VA_ARGS__);                                  \
    } while (0)
    ADD("set -e -o pipefail\ncd '%s'\n", AT_SOURCE_DIR);
    for (int i = 0; i < r->n; i++) {
        if (!r->b[i].sh)
            continue;
        ADD("printf '\\n@@block %d@@\\n'; printf '\\n@@block %d@@\\n' >&2\n", i, i);
        for (const char *p = r->b[i].body; *p;) {
            const char *e = strchr(p, '\n');
            int l = (int)(e - p);
            /* `make check` alone on its line, with or without a comment */
            char cmd[64];
            snprintf(cmd, sizeof cmd, "%.*s", l < 63 ? l : 63, p);
            char *hash = strchr(cmd, '#');
            if (hash)
                *hash = 0;
            for (size_t k = strlen(cmd); k && isspace((unsigned char)cmd[k - 1]);)
                cmd[--k] = 0;
            if (!strcmp(cmd, "make check")) {
                ADD("make -n check >/dev/null\n");
                ++*make_checks;
            } else {
                ADD("%.*s\n", l, p);
            }
            p = e + 1;
        }
    }
    ADD("printf '\\n@@end@@\\n'\n");
#undef ADD
    return s;
}

/* A result the README promises; the commands' whole output goes to the log when it is missing. */
#define RD_EXPECT(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "stdout:\n%s\nstderr:\n%s\n", res.out, res.err);                      \
            ck_abort_msg(__VA_ARGS__);                                                             \
        }                                                                                          \
    } while (0)

START_TEST(every_command_of_the_readme_runs_and_shows_what_it_says)
{
    /* the README's commands preload the installed shim themselves, without the sanitizer runtime
     * an ASan build of it needs in front: they belong to the normal build */
    if (getenv("ACTTRACE_ASAN")) {
        printf("test_readme: skipped under ASan: the README installs and preloads the shim as a user "
               "does, which an ASan build cannot be\n");
        return;
    }
    ck_assert_msg(at_file_exists("/usr/bin/sqlite3"), "sqlite3 is missing (.ci/deps installs it)");
    size_t rlen;
    char *text = at_read_file(AT_SOURCE_DIR "/README.md", &rlen);
    ck_assert(text);
    rd_readme r;
    ck_assert_msg(rd_parse(text, &r), "%s", r.err);
    int make_checks;
    char *script = rd_script(&r, &make_checks);
    ck_assert_msg(make_checks == 1, "README.md should show `make check` once (found %d)", make_checks);

    char *dir = at_tmpdir("readme");
    char home[1024], path[1100], henv[1100], benv[1100];
    snprintf(home, sizeof home, "%s/home", dir);
    ck_assert_int_eq(mkdir(home, 0700), 0);
    snprintf(path, sizeof path, "%s/readme.sh", dir);
    FILE *f = fopen(path, "w");
    ck_assert(f);
    fputs(script, f);
    fclose(f);
    snprintf(henv, sizeof henv, "HOME=%s", home);
    snprintf(benv, sizeof benv, "BUILD=%s", at_build_dir());
    /* the test runs inside make check: the README's make runs as a user's would, not as its child */
    const char *env[] = {henv, benv, "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES", "LD_PRELOAD",
                         "ACTTRACE_OUTPUT", "ACTTRACE_CONFIG", NULL};
    const char *argv[] = {"bash", path, NULL};
    at_run_opts o = {.argv = argv, .env = env, .no_preload = true, .cwd = AT_SOURCE_DIR};
    at_run_result res;
    ck_assert_int_eq(at_run(&o, &res), 0);
    if (!(res.exited && res.status == 0)) {
        /* the block that failed: the last one announced */
        const char *last = res.out, *m;
        while ((m = strstr(last, "@@block ")))
            last = m + 1;
        int k = -1;
        sscanf(last - 1, "@@block %d@@", &k);
        char d[64];
        fprintf(stderr, "stdout:\n%s\nstderr:\n%s\n", res.out, res.err);
        ck_abort_msg("README.md:%d: a command of this block failed (%s; the script: %s; output above)",
                     k >= 0 && k < r.n ? r.b[k].line : 0, at_run_describe(&res, d, sizeof d), path);
    }
    RD_EXPECT(strstr(res.out, "\n@@end@@\n"), "the script did not reach its end (output above)");

    /* every text block is what a sh block printed */
    for (int i = 0; i < r.n; i++) {
        if (r.b[i].sh)
            continue;
        size_t nw;
        char **want = rd_lines(r.b[i].body, strlen(r.b[i].body), &nw);
        bool found = false;
        for (int k = 0; k < r.n && !found; k++) {
            if (!r.b[k].sh)
                continue;
            size_t ol, ng;
            const char *out = rd_block_out(res.out, k, &ol);
            char **got = rd_lines(out, ol, &ng);
            found = rd_contains(got, ng, want, nw);
            rd_lines_free(got, ng);
        }
        if (!found)
            fprintf(stderr, "README.md:%d: expected (numbers masked):\n%s\nwhat the commands printed:\n%s\n",
                    r.b[i].line, r.b[i].body, res.out);
        ck_assert_msg(found, "README.md:%d: no command of the README prints this text block (see above)",
                      r.b[i].line);
        rd_lines_free(want, nw);
    }

    /* the key results, beyond the exit codes */
    RD_EXPECT(strstr(res.out, "8 of 8 functions can be hooked") && strstr(res.out, "demo.nettrace: OK"),
              "make demo (output above)");
    char p[1200];
    snprintf(p, sizeof p, "%s/.local/bin/acttrace", home);
    ck_assert_msg(at_file_exists(p), "make install PREFIX=$HOME/.local left no %s", p);
    snprintf(p, sizeof p, "%s/.local/lib/libacttrace.so", home);
    ck_assert_msg(at_file_exists(p), "make install PREFIX=$HOME/.local left no %s", p);
    const char *v = strstr(res.out, "\nacttrace ");
    RD_EXPECT(v && isdigit((unsigned char)v[10]), "acttrace --version from PATH (output above)");
    RD_EXPECT(strstr(res.out, "1 of 1 functions can be hooked") && strstr(res.out, "4 of 4 functions can be hooked"),
              "acttrace check in the walk-through (output above)");
    RD_EXPECT(strstr(res.err, "trace written to orders.nettrace"), "acttrace run (output above)");
    RD_EXPECT(strstr(res.out, "sql=\"COMMIT;\""), "acttrace events --name PrepareStart (output above)");
    RD_EXPECT(strstr(res.out, "\n    Prepare //1/1/1/1  start"), "the full tree: SQLite's own SQL "
              "(Exec, then Prepare) inside the first statement (output above)");
    /* stats: the twelve syncs (four for each of three statements) */
    const char *st = strstr(res.out, "\nSync ");
    long syncs = -1;
    RD_EXPECT(st && sscanf(st, "\nSync %ld", &syncs) == 1 && syncs == 12, "acttrace stats (output above)");
    snprintf(p, sizeof p, "%s/sqlite-walk/orders.html", home);
    size_t hl;
    char *html = at_read_file(p, &hl);
    ck_assert_msg(html && hl > 1000 && strstr(html, "Sync"), "acttrace report wrote no report naming Sync");
    free(html);
    /* the config the walk-through built is the example shipped beside the others */
    snprintf(p, sizeof p, "%s/sqlite-walk/sqlite.conf", home);
    char *built = at_read_file(p, NULL);
    char *shipped = at_read_file(AT_SOURCE_DIR "/config/examples/sqlite.conf", NULL);
    ck_assert(built && shipped);
    ck_assert_msg(!strcmp(built, shipped), "the README's sqlite.conf differs from config/examples/sqlite.conf:\n%s",
                  built);
    free(built);
    free(shipped);

    at_run_result_free(&res);
    at_rmtree(dir);
    free(dir);
    free(script);
    rd_free(&r);
    free(text);
}
END_TEST

/* The masking the comparison relies on: numbers go, names and paths stay. */
START_TEST(masking_keeps_names_and_paths)
{
    char out[256];
    const char *l = "  Connection //1/1/1  start 8.341  duration 3.27ms  threads 26205,26210  transfers 26205->26210@8.488";
    rd_mask(l, strlen(l), out, sizeof out);
    ck_assert_str_eq(out, "  Connection //1/1/1  start #  duration #  threads #  transfers #->#@#");
    l = "Sync                           12      359us  sqlite3_step PrepareId=18 x1";
    rd_mask(l, strlen(l), out, sizeof out);
    ck_assert_str_eq(out, "Sync                           #      #  sqlite3_step PrepareId=# x1");
    /* a different structure is told apart */
    const char *a = "    Request //1/1/1/1  start 8.888", *b = "    Request //1/1/2/1  start 8.888";
    char ma[64], mb[64];
    rd_mask(a, strlen(a), ma, sizeof ma);
    rd_mask(b, strlen(b), mb, sizeof mb);
    ck_assert_str_ne(ma, mb);
}
END_TEST

/* Every relative link ("](path)" or "](path#anchor)") of the README and the docs names a file. */
START_TEST(every_relative_link_resolves)
{
    glob_t g;
    ck_assert_int_eq(glob(AT_SOURCE_DIR "/README.md", 0, NULL, &g), 0);
    ck_assert_int_eq(glob(AT_SOURCE_DIR "/config/README.md", GLOB_APPEND, NULL, &g), 0);
    ck_assert_int_eq(glob(AT_SOURCE_DIR "/docs/*.md", GLOB_APPEND, NULL, &g), 0);
    ck_assert_int_eq(glob(AT_SOURCE_DIR "/docs/commands/*.md", GLOB_APPEND, NULL, &g), 0);
    ck_assert_uint_ge(g.gl_pathc, 20);
    int links = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        char *text = at_read_file(g.gl_pathv[i], NULL), *d = strdup(g.gl_pathv[i]);
        const char *dir = dirname(d);
        for (const char *p = strstr(text, "]("); p; p = strstr(p + 2, "](")) {
            const char *t = p + 2;
            size_t n = strcspn(t, ")# \n");
            if (!n || memchr(t, ':', n)) /* an anchor alone, or a URL */
                continue;
            char path[2048];
            snprintf(path, sizeof path, "%s/%.*s", dir, (int)n, t);
            ck_assert_msg(at_file_exists(path), "%s: the link to %.*s names no file", g.gl_pathv[i], (int)n, t);
            links++;
        }
        free(d);
        free(text);
    }
    ck_assert_int_ge(links, 40);
    globfree(&g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("readme");
    TCase *c = tcase_create("readme");
    tcase_set_timeout(c, 0);
    tcase_add_test(c, masking_keeps_names_and_paths);
    tcase_add_test(c, every_relative_link_resolves);
    tcase_add_test(c, every_command_of_the_readme_runs_and_shows_what_it_says);
    suite_add_tcase(s, c);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
