/* at_web.h: running the browser tests of `acttrace report` (tests/web: node scripts that drive
 * Debian's Chromium with playwright-core) from a Check test, and reading what they print: one fact
 * per line, "key value...". Header-only: it needs the test's AT_SOURCE_DIR. Check-agnostic, like
 * at_testlib.h: the tests do the ck_assert. */
#ifndef AT_WEB_H
#define AT_WEB_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "at_testlib.h"

#define AT_WEB_DIR AT_SOURCE_DIR "/tests/web"

static inline const char *at_web_chromium(void)
{
    const char *c = getenv("AT_CHROMIUM");
    return c && *c ? c : "/usr/bin/chromium";
}

/* NULL when node scripts that drive Chromium can run here with the packages of dir (a folder of
 * the source tree with its own package-lock.json, installed by `make check` with npm ci; module: a
 * package it must hold); else what is missing, said so a person can act on it. */
static inline const char *at_web_missing_in(const char *dir, const char *module)
{
    static char why[4600];
    if (access(at_web_chromium(), X_OK) != 0) {
        snprintf(why, sizeof why, "no Chromium at %s (Debian package chromium; .ci/deps installs it)", at_web_chromium());
        return why;
    }
    const char *argv[] = {"node", "--version", NULL};
    at_run_opts o = {.argv = argv, .no_preload = true};
    at_run_result r;
    if (at_run(&o, &r) != 0 || !r.exited || r.status != 0) {
        at_run_result_free(&r);
        return "node is not on PATH";
    }
    at_run_result_free(&r);
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/node_modules/%s/package.json", dir, module);
    if (!at_file_exists(probe)) {
        snprintf(why, sizeof why, "%s is not installed in %s/node_modules (make check runs npm ci there; it "
                 "needs the npm registry)", module, dir);
        return why;
    }
    return NULL;
}

/* The same for the report's browser tests (tests/web). */
static inline const char *at_web_missing(void)
{
    return at_web_missing_in(AT_WEB_DIR, "playwright-core");
}

/* Where a test's screenshots go: $AT_REPORT_SHOTS/<tag> when set (kept), else <tmp>/shots. */
static inline void at_web_shots(const char *tag, const char *tmp, char *out, size_t n)
{
    const char *keep = getenv("AT_REPORT_SHOTS");
    if (keep && *keep) snprintf(out, n, "%s/%s", keep, tag);
    else snprintf(out, n, "%s/shots", tmp);
}

/* node tests/web/<script> html shots args... to completion (no time limit). */
static inline int at_web_run(at_run_result *r, const char *script, const char *html, const char *shots,
                             const char *const *args)
{
    char js[4096];
    snprintf(js, sizeof js, "%s/%s", AT_WEB_DIR, script);
    const char *argv[32] = {"node", js, html, shots};
    int n = 4;
    for (int i = 0; args && args[i] && n < 31; i++) argv[n++] = args[i];
    argv[n] = NULL;
    at_run_opts o = {.argv = argv, .no_preload = true};
    return at_run(&o, r);
}

/* Whether a script's run went well: it exited 0 after "done", the page raised no error, and every
 * screenshot it took holds more than a few colours (it is not blank). Else false, why in why. */
static inline bool at_web_ok(const at_run_result *r, const char *script, char *why, size_t n)
{
    if (!r->exited || r->status != 0 || !strstr(r->out, "\ndone\n")) {
        snprintf(why, n, "%s: exit %d\n%.20000s\n%.4000s", script, r->status, r->out, r->err);
        return false;
    }
    if (strstr(r->out, "pageerror") || strstr(r->out, "console-error")) {
        snprintf(why, n, "%s: the page failed:\n%.20000s", script, r->out);
        return false;
    }
    int shots = 0;
    for (const char *p = r->out; (p = strstr(p, "shot ")); p++) {
        if (p != r->out && p[-1] != '\n') continue;
        char name[128];
        int w, h, colours;
        if (sscanf(p, "shot %127s %d %d %d", name, &w, &h, &colours) != 4 || w < 300 || h < 100 || colours <= 40) {
            snprintf(why, n, "%s: a screenshot looks blank: %.200s", script, p);
            return false;
        }
        shots++;
    }
    if (!shots) {
        snprintf(why, n, "%s took no screenshot", script);
        return false;
    }
    return true;
}

/* The first line of out that starts with key and a space (after the line at from, when from is given),
 * NUL-terminated into buf without the key; NULL when there is none. */
static inline const char *at_web_line(const char *out, const char *key, const char **from, char *buf, size_t n)
{
    size_t kl = strlen(key);
    for (const char *p = from && *from ? *from : out; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l > kl && !strncmp(p, key, kl) && p[kl] == ' ') {
            snprintf(buf, n, "%.*s", (int)(l - kl - 1), p + kl + 1);
            if (from) *from = e ? e + 1 : p + l;
            return buf;
        }
        p = e ? e + 1 : NULL;
    }
    return NULL;
}

/* How many lines of out start with key and a space. */
static inline int at_web_count(const char *out, const char *key)
{
    int k = 0;
    char b[8];
    for (const char *p = out; at_web_line(out, key, &p, b, sizeof b);) k++;
    return k;
}

#endif
