/* test_man: the man pages (man/acttrace.1, man/acttrace.conf.5) render without a warning, and
 * cannot drift from the program and the reference: every command and every option that `acttrace
 * --help` and `acttrace CMD --help` list is in acttrace.1, in that command's section, and no option
 * there is one the command does not have; the exit codes and the environment variables match
 * (docs/tracing.md's settings table, the commands' help); every section and key of docs/config.md is
 * a tagged entry of acttrace.conf.5, and every key there is one docs/config.md names. */
#include <check.h>
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"
#include "at_tracegen.h"

#define MAN1 AT_SOURCE_DIR "/man/acttrace.1"
#define MAN5 AT_SOURCE_DIR "/man/acttrace.conf.5"

/* ---------------- small string sets ---------------- */

typedef struct mn_set {
    char *v[256];
    int n;
} mn_set;

static bool mn_has(const mn_set *s, const char *w)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->v[i], w))
            return true;
    return false;
}

static void mn_add(mn_set *s, const char *w, size_t len)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%.*s", (int)len, w);
    if (!mn_has(s, buf) && s->n < 256)
        s->v[s->n++] = strdup(buf);
}

static void mn_free(mn_set *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->v[i]);
    s->n = 0;
}

static char *mn_join(const mn_set *s, char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < s->n && o + 2 < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? " " : "", s->v[i]);
    return buf;
}

/* ---------------- roff and help text ---------------- */

/* Roff source as plain text: font escapes gone, \- as -, \(en as -, \e as \, \& gone. */
static char *mn_plain(const char *roff)
{
    size_t n = strlen(roff);
    char *o = malloc(n + 1), *p = o;
    for (size_t i = 0; i < n;) {
        if (roff[i] == '\\' && i + 1 < n) {
            char c = roff[i + 1];
            if (c == 'f') { /* \fB, \fR, \f(CW */
                i += 2;
                i += (i < n && roff[i] == '(') ? 3 : 1;
                continue;
            }
            if (c == '-') { *p++ = '-'; i += 2; continue; }
            if (c == '&') { i += 2; continue; }
            if (c == 'e') { *p++ = '\\'; i += 2; continue; }
            if (c == '(') { *p++ = '-'; i += 4; continue; } /* \(en and the like */
        }
        *p++ = roff[i++];
    }
    *p = 0;
    return o;
}

/* Options in a text: "--name" and "-o" where an option can start (line start, blank, '[', '(',
 * ',', '|'); "--" alone is not one. */
static void mn_options(const char *t, mn_set *out)
{
    for (const char *p = t; *p; p++) {
        if (*p != '-' || (p > t && !strchr(" \t\n[(,|\"", p[-1])))
            continue;
        const char *q = p + 1;
        bool dbl = *q == '-';
        if (dbl)
            q++;
        if (!isalpha((unsigned char)*q))
            continue;
        const char *e = q;
        if (dbl)
            while (isalnum((unsigned char)*e) || *e == '-')
                e++;
        else
            e++;
        if (!dbl && (isalnum((unsigned char)*e) || *e == '-'))
            continue; /* "-exec1", "-rdynamic": not an option of ours */
        mn_add(out, p, (size_t)(e - p));
        p = e - 1;
    }
}

/* The text of a man page section: from the line starting with head up to the next .SH or .SS. */
static char *mn_section(const char *roff, const char *head)
{
    const char *s = roff;
    size_t hl = strlen(head);
    while (s && strncmp(s, head, hl))
        s = (s = strchr(s, '\n')) ? s + 1 : NULL;
    if (!s)
        return NULL;
    const char *e = strchr(s, '\n');
    while (e && strncmp(e + 1, ".SH", 3) && strncmp(e + 1, ".SS", 3))
        e = strchr(e + 1, '\n');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    char *raw = strndup(s, len), *plain = mn_plain(raw);
    free(raw);
    return plain;
}

/* The tag of every .TP entry of a text (the line after .TP), as plain words. */
static void mn_tp_words(const char *roff, mn_set *out)
{
    for (const char *p = strstr(roff, ".TP\n"); p; p = strstr(p + 1, ".TP\n")) {
        const char *l = p + 4, *e = strchr(l, '\n');
        if (!e)
            break;
        char *raw = strndup(l, (size_t)(e - l)), *t = mn_plain(raw);
        /* ".BR start \", \" stop" -> start, stop: identifiers only, the macro name skipped */
        for (char *w = t + (*t == '.' ? strcspn(t, " ") : 0); *w;) {
            size_t k = strspn(w, "abcdefghijklmnopqrstuvwxyz_0123456789");
            if (k && (w == t || !isalnum((unsigned char)w[-1])))
                mn_add(out, w, k);
            w += k ? k : 1;
        }
        free(raw);
        free(t);
    }
}

static char *mn_read(const char *path)
{
    char *s = at_read_file(path, NULL);
    ck_assert_msg(s, "cannot read %s", path);
    return s;
}

static char *mn_help(const char *cmd)
{
    at_run_result r;
    const char *args[] = {cmd ? cmd : "--help", cmd ? "--help" : NULL, NULL};
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(r.exited && r.status == 0, "acttrace %s --help: exit %d: %s", cmd ? cmd : "", r.status, r.err);
    char *out = strdup(r.out);
    at_run_result_free(&r);
    return out;
}

/* The commands `acttrace --help` lists (the lines under "commands:"). */
static void mn_commands(const char *help, mn_set *out)
{
    const char *p = strstr(help, "commands:\n");
    ck_assert(p);
    for (p = strchr(p, '\n') + 1; !strncmp(p, "  ", 2); p = strchr(p, '\n') + 1) {
        const char *w = p + 2;
        mn_add(out, w, strcspn(w, " "));
    }
}

/* ---------------- rendering ---------------- */

static void renders_cleanly(const char *page)
{
    at_run_result r;
    const char *groff[] = {"groff", "-man", "-ww", "-z", page, NULL};
    at_run_opts o = {.argv = groff, .no_preload = true};
    ck_assert_msg(at_run(&o, &r) == 0, "groff cannot run (.ci/deps installs groff-base): %s", r.err);
    ck_assert_msg(r.exited && r.status == 0 && r.errlen == 0, "groff -man -ww -z %s: %s", page, r.err);
    at_run_result_free(&r);
    /* man-db as a user reads it, with its own checks */
    const char *man[] = {"man", "--warnings", "-E", "UTF-8", "-l", page, NULL};
    const char *env[] = {"MANWIDTH=80", "MANPAGER=cat", "PAGER=cat", "LANG=C.UTF-8", NULL};
    at_run_opts m = {.argv = man, .env = env, .no_preload = true};
    ck_assert_msg(at_run(&m, &r) == 0, "man cannot run (.ci/deps installs man-db): %s", r.err);
    ck_assert_msg(r.exited && r.status == 0 && r.errlen == 0, "man --warnings -l %s: %s", page, r.err);
    ck_assert_msg(strstr(r.out, "NAME") && strstr(r.out, "SEE ALSO") && r.outlen > 2000,
                  "man -l %s printed too little:\n%.2000s", page, r.out);
    at_run_result_free(&r);
}

START_TEST(pages_render_without_warnings)
{
    renders_cleanly(MAN1);
    renders_cleanly(MAN5);
}
END_TEST

/* Both pages name the version `acttrace --version` prints (the Makefile's VERSION). */
START_TEST(pages_name_the_version)
{
    const char *args[] = {"--version", NULL};
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert(r.exited && r.status == 0 && !strncmp(r.out, "acttrace ", 9));
    char want[64];
    snprintf(want, sizeof want, "\"%.*s\"", (int)strcspn(r.out, "\n"), r.out); /* "acttrace 0.9.0" */
    at_run_result_free(&r);
    static const char *pages[] = {MAN1, MAN5};
    for (int i = 0; i < 2; i++) {
        char *roff = mn_read(pages[i]);
        const char *th = strstr(roff, "\n.TH ");
        ck_assert(th);
        ck_assert_msg(strstr(th, want) && strstr(th, want) < strchr(th + 1, '\n'),
                      "%s: its .TH line does not name %s", pages[i], want);
        free(roff);
    }
}
END_TEST

/* ---------------- acttrace.1 against the program ---------------- */

START_TEST(every_command_and_option_is_in_acttrace_1)
{
    char *roff = mn_read(MAN1), *plain = mn_plain(roff), *help = mn_help(NULL);
    char buf[2048];
    mn_set cmds = {0};
    mn_commands(help, &cmds);
    ck_assert_int_ge(cmds.n, 10);
    /* the overview's own options are in OPTIONS */
    mn_set opts = {0}, man = {0};
    mn_options(help, &opts);
    char *sec = mn_section(roff, ".SH OPTIONS");
    ck_assert(sec);
    mn_options(sec, &man);
    for (int i = 0; i < opts.n; i++)
        ck_assert_msg(mn_has(&man, opts.v[i]), "acttrace --help lists %s; acttrace.1's OPTIONS does not", opts.v[i]);
    free(sec);
    mn_free(&opts);
    mn_free(&man);
    /* every command has its section, with exactly the options its help lists */
    for (int i = 0; i < cmds.n; i++) {
        char head[64];
        snprintf(head, sizeof head, ".SS \"acttrace %s", cmds.v[i]);
        sec = mn_section(roff, head);
        ck_assert_msg(sec, "acttrace.1 has no section %s\"", head);
        char *h = mn_help(cmds.v[i]);
        /* the closing exit-code lines are the same for all and hold no option */
        mn_options(h, &opts);
        mn_options(sec, &man);
        for (int k = 0; k < opts.n; k++)
            ck_assert_msg(mn_has(&man, opts.v[k]), "acttrace %s --help lists %s; acttrace.1's section does "
                          "not (it has: %s)", cmds.v[i], opts.v[k], mn_join(&man, buf, sizeof buf));
        for (int k = 0; k < man.n; k++)
            ck_assert_msg(mn_has(&opts, man.v[k]), "acttrace.1 gives %s an option %s that its --help does "
                          "not list (it lists: %s)", cmds.v[i], man.v[k], mn_join(&opts, buf, sizeof buf));
        mn_free(&opts);
        mn_free(&man);
        free(h);
        free(sec);
    }
    /* and no section for a command that does not exist */
    for (const char *p = strstr(roff, ".SS \"acttrace "); p; p = strstr(p + 1, ".SS \"acttrace ")) {
        const char *w = p + strlen(".SS \"acttrace ");
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(w, " \""), w);
        ck_assert_msg(mn_has(&cmds, name), "acttrace.1 has a section for '%s', which acttrace --help does not list", name);
    }
    /* the exit codes: those the overview gives ("Exit status: 0 ok; 1 error ...;\n  2 usage error;
     * 3 ..."), each a tagged entry of EXIT STATUS, and no other */
    const char *ex = strstr(help, "Exit status:");
    const char *ex_end = ex ? strstr(ex, "`run`") : NULL;
    ck_assert(ex && ex_end);
    sec = strndup(strstr(roff, ".SH EXIT STATUS"), (size_t)(strstr(roff, ".SH ENVIRONMENT") - strstr(roff, ".SH EXIT STATUS")));
    int in_help = 0;
    for (int code = 0; code <= 9; code++) {
        bool h = false;
        for (const char *q = ex + 2; q < ex_end; q++)
            h |= *q == '0' + code && q[1] == ' ' && (!strncmp(q - 2, ": ", 2) || !strncmp(q - 2, "; ", 2) ||
                                                    !strncmp(q - 3, "\n  ", 3));
        char tag[16];
        snprintf(tag, sizeof tag, ".TP\n.B %d\n", code);
        bool m = strstr(sec, tag) != NULL;
        ck_assert_msg(h == m, "exit code %d: in acttrace --help %s, in acttrace.1's EXIT STATUS %s", code,
                      h ? "yes" : "no", m ? "yes" : "no");
        in_help += h;
    }
    ck_assert_int_eq(in_help, 4);
    free(sec);
    mn_free(&cmds);
    free(help);
    free(plain);
    free(roff);
}
END_TEST

/* Environment: every variable of docs/tracing.md's settings table is in ENVIRONMENT, and every one
 * there is documented (that table, or a command's help). */
START_TEST(environment_matches_the_settings)
{
    char *roff = mn_read(MAN1), *tracing = mn_read(AT_SOURCE_DIR "/docs/tracing.md");
    char *sec = mn_section(roff, ".SH ENVIRONMENT");
    ck_assert(sec);
    mn_set table = {0}, man = {0};
    for (const char *p = strstr(tracing, "\n| `ACTTRACE_"); p; p = strstr(p + 1, "\n| `ACTTRACE_")) {
        const char *w = p + 4;
        mn_add(&table, w, strspn(w, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_"));
    }
    ck_assert_int_ge(table.n, 15);
    for (const char *p = strstr(roff, ".TP\n.B "); p; p = strstr(p + 1, ".TP\n.B ")) {
        const char *w = p + 7;
        if (p < strstr(roff, ".SH ENVIRONMENT") || (strstr(roff, ".SH FILES") && p > strstr(roff, ".SH FILES")))
            continue;
        mn_add(&man, w, strcspn(w, "\n "));
    }
    for (int i = 0; i < table.n; i++)
        ck_assert_msg(mn_has(&man, table.v[i]), "docs/tracing.md sets %s; acttrace.1's ENVIRONMENT does not", table.v[i]);
    /* the rest must be documented where a user reads about the commands: their help or their pages */
    char *docs = calloc(1, 1);
    size_t dl = 0;
    static const char *cmds[] = {"run", "check", "events", "tree", "stats", "stacks", "export", "report", "dump", "verify"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, AT_SOURCE_DIR "/docs/commands/%s.md", cmds[i]);
        char *parts[2] = {mn_help(cmds[i]), mn_read(path)};
        for (int k = 0; k < 2; k++) {
            docs = realloc(docs, dl + strlen(parts[k]) + 1);
            strcpy(docs + dl, parts[k]);
            dl += strlen(parts[k]);
            free(parts[k]);
        }
    }
    for (int i = 0; i < man.n; i++)
        ck_assert_msg(mn_has(&table, man.v[i]) || strstr(docs, man.v[i]),
                      "acttrace.1's ENVIRONMENT names %s, which neither docs/tracing.md, docs/commands/ nor "
                      "any --help does", man.v[i]);
    free(docs);
    mn_free(&table);
    mn_free(&man);
    free(sec);
    free(tracing);
    free(roff);
}
END_TEST

/* ---------------- acttrace.conf.5 against docs/config.md ---------------- */

START_TEST(every_config_section_and_key_is_in_acttrace_conf_5)
{
    char *roff = mn_read(MAN5), *ref = mn_read(AT_SOURCE_DIR "/docs/config.md");
    char buf[2048];
    /* the sections: "## `[activity NAME]`" in the reference, ".SH [activity NAME]" in the page */
    int nsec = 0;
    for (const char *p = strstr(ref, "\n## `["); p; p = strstr(p + 1, "\n## `[")) {
        const char *w = p + 5;
        char head[64], want[80];
        snprintf(head, sizeof head, "%.*s", (int)strcspn(w, "`"), w);
        snprintf(want, sizeof want, "\n.SH %s\n", head);
        ck_assert_msg(strstr(roff, want), "docs/config.md has the section %s; acttrace.conf.5 has no .SH for it", head);
        nsec++;
    }
    ck_assert_int_eq(nsec, 4);
    /* the keys: first column of the reference's "| key |" tables, and every `key = value` it shows */
    mn_set keys = {0}, tags = {0};
    for (const char *t = strstr(ref, "\n| key |"); t; t = strstr(t + 1, "\n| key |")) {
        const char *row = strchr(t + 1, '\n');
        row = row ? strchr(row + 1, '\n') : NULL; /* past the |---| line */
        for (; row && !strncmp(row, "\n| `", 4); row = strchr(row + 1, '\n')) {
            const char *c = row + 3, *end = strchr(c, '|');
            for (const char *q = c; q < end;) { /* "`start`, `stop`" */
                q = memchr(q, '`', (size_t)(end - q));
                if (!q)
                    break;
                const char *e = memchr(q + 1, '`', (size_t)(end - q - 1));
                if (!e)
                    break;
                mn_add(&keys, q + 1, (size_t)(e - q - 1));
                q = e + 1;
            }
        }
    }
    for (const char *p = strchr(ref, '`'); p; p = strchr(p + 1, '`')) {
        size_t k = strspn(p + 1, "abcdefghijklmnopqrstuvwxyz_");
        if (k && !strncmp(p + 1 + k, " = ", 3) && strncmp(p + 1, "key = value", 11)) /* not the syntax's */
            mn_add(&keys, p + 1, k);
    }
    ck_assert_int_ge(keys.n, 30);
    char *from = strstr(roff, "\n.SH [trace]"), *to = strstr(roff, "\n.SH NAMES");
    ck_assert(from && to);
    char *part = strndup(from, (size_t)(to - from));
    mn_tp_words(part, &tags);
    for (int i = 0; i < keys.n; i++)
        ck_assert_msg(mn_has(&tags, keys.v[i]), "docs/config.md has the key %s; acttrace.conf.5 has no entry for it "
                      "(its entries: %s)", keys.v[i], mn_join(&tags, buf, sizeof buf));
    /* every entry is a key the reference names */
    for (int i = 0; i < tags.n; i++) {
        char quoted[80];
        snprintf(quoted, sizeof quoted, "`%s", tags.v[i]);
        ck_assert_msg(mn_has(&keys, tags.v[i]) || strstr(ref, quoted),
                      "acttrace.conf.5 has an entry %s that docs/config.md does not name", tags.v[i]);
    }
    free(part);
    mn_free(&keys);
    mn_free(&tags);
    free(ref);
    free(roff);
}
END_TEST

/* The helpers catch what they are meant to: an option a section lacks, a key not tagged. */
START_TEST(the_checks_can_fail)
{
    mn_set a = {0};
    mn_options("  --name NAME  only\n  -o, --output OUT\n  from->to@ms -exec1 [--tsv] --\n", &a);
    char buf[256];
    ck_assert_str_eq(mn_join(&a, buf, sizeof buf), "--name -o --output --tsv");
    mn_free(&a);
    char *p = mn_plain(".BR \\-\\-min\\-ms \" \\fIms\\fR\"");
    ck_assert_str_eq(p, ".BR --min-ms \" ms\"");
    free(p);
    mn_tp_words(".TP\n.BR start_when \", \" stop_when\nConditions\n.TP\n.B fd_key\n", &a);
    ck_assert_str_eq(mn_join(&a, buf, sizeof buf), "start_when stop_when fd_key");
    mn_free(&a);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("man");
    TCase *c = tcase_create("man");
    tcase_set_timeout(c, 0);
    tcase_add_test(c, the_checks_can_fail);
    tcase_add_test(c, pages_render_without_warnings);
    tcase_add_test(c, pages_name_the_version);
    tcase_add_test(c, every_command_and_option_is_in_acttrace_1);
    tcase_add_test(c, environment_matches_the_settings);
    tcase_add_test(c, every_config_section_and_key_is_in_acttrace_conf_5);
    suite_add_tcase(s, c);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
