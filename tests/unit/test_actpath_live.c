/* test_actpath_live: activity ids from a live .NET runtime as the oracle. tests/liveids (built
 * and run here with dotnet) starts and stops nested, recursive and non-recursive EventSource
 * activities (thousands of siblings, the 12-byte overflow, the depth limit) and records the ids the
 * runtime made, with the runtime's own creation path of each. Checked here:
 *  - the encoder: every path that fits encodes (at_actpath_add_id, the runtime's pid) to the same 16
 *    bytes, and the decoder gives the path back from the runtime's bytes;
 *  - the engine: the same Starts and Stops replayed through at_activity_* give every activity (the
 *    overflow ids included) the runtime's path bytes, the same related id, and Stop the same activity.
 * Without dotnet it says so and passes, unless AT_TRACEEVENT_REQUIRED=1 (CI). AT_LIVEIDS_TSV names a
 * ready output to read instead. */
#include "activity.h"
#include "actpath.h"
#include "at_testlib.h"
#include "guid.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Builds and runs atliveids; returns the malloc'd path of its output, or NULL (skipped). */
static char *live_tsv(void)
{
    const char *given = getenv("AT_LIVEIDS_TSV");
    if (given && *given)
        return strdup(given);
    char err[4600];
    char *bin = at_dotnet_built(AT_SOURCE_DIR "/tests/liveids/LiveIds.csproj", NULL, "liveids/bin/Release/net10.0/atliveids",
                                err, sizeof err);
    ck_assert_msg(bin || !err[0], "%s", err);
    if (!bin) {
        ck_assert_msg(!at_traceevent_required(), "dotnet is not on PATH (AT_TRACEEVENT_REQUIRED=1)");
        printf("test_actpath_live: dotnet is not on PATH: activity ids were not checked against a live "
               "runtime (install the .NET SDK)\n");
        return NULL;
    }
    char cmd[9000], *out;
    ck_assert(asprintf(&out, "%s/compat/liveids/ids.tsv", at_build_dir()) > 0);
    snprintf(cmd, sizeof cmd, "rm -f '%s' && '%s' '%s'", out, bin, out);
    free(bin);
    ck_assert_msg(system(cmd) == 0, "atliveids failed");
    return out;
}

static void unhex(const char *s, at_guid *g)
{
    ck_assert_msg(strlen(s) == 32, "bad GUID %s", s);
    for (int i = 0; i < 16; i++) {
        unsigned v;
        ck_assert(sscanf(s + 2 * i, "%2x", &v) == 1);
        g->b[i] = (uint8_t)v;
    }
}

static bool zero(const at_guid *g)
{
    static const at_guid z;
    return memcmp(g, &z, sizeof z) == 0;
}

/* the runtime's creation path "/1/4203/1" through at_actpath_add_id; AT_ACTPATH_NOFIT if it overflows */
static int encode(const char *path, uint32_t pid, at_guid *g, int *depth)
{
    memset(g, 0, sizeof *g);
    int off = 0, n = 0;
    const char *s = path;
    while (*s == '/') {
        char *e;
        uint32_t id = (uint32_t)strtoul(s + 1, &e, 10);
        s = e;
        n++;
        if (off != AT_ACTPATH_NOFIT)
            off = at_actpath_add_id(g, off, id, false, pid);
    }
    *depth = n - 1; /* without the AppDomain */
    return off;
}

/* Does the runtime's id hold an id it lost? .NET 10 writes an id of 11..255 whose size code lands in
 * a high half as the code 0xC0 alone, without the byte (siblings 11..255 then share one id, and so
 * do the overflow ids of an ancestor whose path ends in a half byte). Our encoder keeps the byte:
 * such ids, and those made under them, differ from the runtime's on purpose. */
static bool runtime_lost_an_id(const at_guid *g)
{
    for (int k = 0; k < 2 * AT_ACTPATH_END;) {
        uint32_t nib = k & 1 ? g->b[k / 2] & 0xF : g->b[k / 2] >> 4;
        if (nib == 0) return false;
        if (nib <= 0xB) { k++; continue; }
        uint32_t len = nib - 0xC + 1;
        if ((k & 1) == 0) {
            if (nib == 0xC && (g->b[k / 2] & 0xF) == 0)
                return true;
            k += 2 + 2 * (nib == 0xC ? 1 : (int)len);
        } else {
            k += 1 + 2 * (int)len;
        }
    }
    return false;
}

/* By at_activity_unique_id: TAINT, an activity whose id differs from the runtime's because of a lost
 * id (its own or an ancestor's); DIVERGED, an activity whose child counter no longer matches the
 * runtime's because a tainted descendant took an overflow id from it (the lost id made the runtime's
 * path shorter, so the two may take it from different ancestors): children made after that are
 * tainted too. */
enum { TAINT = 1, DIVERGED = 2 };
static uint8_t *g_mark;
static size_t g_nmark;
static bool marked(const at_activity *a, uint8_t m)
{
    uint64_t u = at_activity_unique_id(a);
    return u < g_nmark && (g_mark[u] & m);
}
static void mark(const at_activity *a, uint8_t m)
{
    uint64_t u = at_activity_unique_id(a);
    if (u >= g_nmark) {
        size_t n = (size_t)u * 2 + 1024;
        g_mark = realloc(g_mark, n);
        memset(g_mark + g_nmark, 0, n - g_nmark);
        g_nmark = n;
    }
    g_mark[u] |= m;
}
static bool tainted(const at_activity *a) { return marked(a, TAINT); }

typedef struct live_stats {
    long starts, fitted, overflow, refused, stops, ticks, maxid, lost, restarts;
} live_stats;

static at_activity_kind *kind_of(const char *name)
{
    static at_activity_kind *deep, *leaf, *tick;
    if (!deep) {
        at_activity_kind_desc d = {.provider = "AtLive", .name = "Deep", .flags = AT_ACT_RECURSIVE};
        deep = at_activity_kind_register(&d);
        d.name = "Leaf", d.flags = 0;
        leaf = at_activity_kind_register(&d);
        d.name = "Tick";
        tick = at_activity_kind_register(&d);
    }
    return !strcmp(name, "Deep") ? deep : !strcmp(name, "Leaf") ? leaf : !strcmp(name, "Tick") ? tick : NULL;
}

/* The activity a Stop of k stops: the nearest live one of its kind on the current chain. */
static at_activity *stop_target(at_activity_kind *k)
{
    for (at_activity *a = at_activity_current(); a; a = a->creator)
        if (a->kind == k && !at_activity_is_stopped(a))
            return a;
    return NULL;
}

START_TEST(ids_of_a_live_runtime)
{
    char *tsv = live_tsv();
    if (!tsv)
        return;
    FILE *f = fopen(tsv, "r");
    ck_assert_msg(f != NULL, "cannot open %s", tsv);
    size_t cap = 1 << 16;
    char *line = malloc(cap);
    uint32_t pid = 0;
    live_stats st = {0};
    long lineno = 0;
    while (fgets(line, (int)cap, f)) {
        lineno++;
        line[strcspn(line, "\n")] = 0;
        char *col[8] = {0};
        int nc = 0;
        for (char *p = line, *tab; nc < 8 && p; p = tab ? tab + 1 : NULL) {
            tab = strchr(p, '\t');
            if (tab) *tab = 0;
            col[nc++] = p;
        }
        if (!strcmp(col[0], "pid")) {
            pid = (uint32_t)strtoul(col[1], NULL, 10);
            continue;
        }
        if (!strcmp(col[0], "ticks")) {
            long n = strtol(col[1], NULL, 10);
            at_activity_kind *k = kind_of("Tick");
            for (long i = 0; i < n; i++) {
                /* past the depth limit neither makes an activity; the Stop then stops nothing */
                at_activity *a = at_activity_start(k, NULL, 0, NULL, 0);
                ck_assert_int_eq(at_activity_stop(k, NULL, 0, NULL, 0), a != NULL);
            }
            st.ticks += n;
            continue;
        }
        ck_assert_msg(pid != 0, "line %ld before the pid", lineno);
        at_activity_kind *k = kind_of(col[1]);
        ck_assert_msg(k != NULL, "line %ld: kind %s", lineno, col[1]);
        if (!strcmp(col[0], "stop")) {
            ck_assert_int_eq(nc, 3);
            at_guid want;
            unhex(col[2], &want);
            at_activity *t = stop_target(k);
            at_activity *cur = at_activity_current();
            /* no live activity of the kind: the runtime logs the Stop under the current id */
            const at_guid *got = t ? at_activity_id(t) : cur ? at_activity_id(cur) : NULL;
            if ((t && tainted(t)) || (!t && cur && tainted(cur)))
                ;
            else if (got)
                ck_assert_msg(memcmp(got->b, want.b, AT_ACTPATH_END) == 0, "line %ld: Stop of another activity", lineno);
            else
                ck_assert_msg(zero(&want), "line %ld: Stop outside any activity has an id", lineno);
            ck_assert_int_eq(at_activity_stop(k, NULL, 0, NULL, 0), t != NULL);
            st.stops++;
            continue;
        }
        ck_assert_msg(!strcmp(col[0], "start") && nc == 6, "line %ld: %s", lineno, col[0]);
        st.starts++;
        int depth = atoi(col[2]);
        at_guid want, want_rel;
        unhex(col[4], &want);
        unhex(col[5], &want_rel);
        at_activity *before = at_act_live_from(at_activity_current());
        at_activity *a = at_activity_start(k, NULL, 0, NULL, 0);
        if (!strcmp(col[3], "-")) {
            /* past the runtime's depth limit it makes no activity; neither do we */
            ck_assert_msg(a == NULL, "line %ld: depth %d started past the limit", lineno, depth);
            ck_assert_int_gt(depth, AT_ACTIVITY_MAX_DEPTH + 1);
            st.refused++;
            continue;
        }
        ck_assert_msg(a != NULL, "line %ld: depth %d refused", lineno, depth);
        /* the engine: the runtime's path bytes (our pid makes our checksum) */
        char ours[256], theirs[256];
        at_activity_path(a, ours, sizeof ours);
        ck_assert_msg(at_actpath_is_path(&want, pid) && at_actpath_pid(&want) == pid,
                      "line %ld: %s is not a path id of pid %u", lineno, col[4], pid);
        ck_assert_msg(at_actpath_pid(at_activity_id(a)) == (uint32_t)getpid(), "line %ld", lineno);
        at_guid g;
        int pdepth;
        int end = encode(col[3], pid, &g, &pdepth);
        if ((a->creator && marked(a->creator, TAINT | DIVERGED)) || runtime_lost_an_id(&want)) {
            mark(a, TAINT);
            if (end == AT_ACTPATH_NOFIT || a->path_end > AT_ACTPATH_END)
                for (at_activity *up = a->creator; up; up = up->creator)
                    mark(up, DIVERGED);
            st.lost++;
            continue;
        }
        ck_assert_msg(at_actpath_format(&want, pid, theirs, sizeof theirs) > 0, "line %ld: %s does not decode",
                      lineno, col[4]);
        ck_assert_msg(memcmp(at_activity_id(a)->b, want.b, AT_ACTPATH_END) == 0,
                      "line %ld: %s (%s): runtime %s, engine %s", lineno, col[3], col[4], theirs, ours);
        /* related: the id current when the new one was made (after a non-recursive Start stopped
         * its namesake: the new activity's creator) */
        if (a->creator != before)
            st.restarts++;
        if (a->creator)
            ck_assert_msg(memcmp(at_activity_id(a->creator)->b, want_rel.b, AT_ACTPATH_END) == 0,
                          "line %ld: %s: related id differs", lineno, col[3]);
        else
            ck_assert_msg(zero(&want_rel), "line %ld: a root's related id", lineno);
        /* the encoder and decoder, from the runtime's own path */
        ck_assert_msg(pdepth == depth, "line %ld: path %s at depth %d", lineno, col[3], depth);
        if (end != AT_ACTPATH_NOFIT) {
            char hex[33];
            for (int i = 0; i < 16; i++) sprintf(hex + 2 * i, "%02x", g.b[i]);
            ck_assert_msg(memcmp(g.b, want.b, 16) == 0, "line %ld: %s: runtime %s, ours %s", lineno, col[3], col[4], hex);
            ck_assert_msg(!strcmp(theirs + 1, col[3]), "line %ld: decoded %s, path %s", lineno, theirs, col[3]);
            st.fitted++;
        } else {
            /* the path did not fit: an id handed out by an ancestor, whose path is a prefix */
            char *dollar = strchr(theirs, '$');
            if (dollar) {
                size_t n = (size_t)(dollar - (theirs + 1));
                ck_assert_msg(!strncmp(theirs + 1, col[3], n) && col[3][n] == '/',
                              "line %ld: %s is not under an ancestor of %s", lineno, theirs, col[3]);
            }
            st.overflow++;
        }
        for (const char *s = col[3]; (s = strchr(s, '/')); s++)
            if (strtol(s + 1, NULL, 10) > st.maxid) st.maxid = strtol(s + 1, NULL, 10);
    }
    fclose(f);
    free(line);
    printf("test_actpath_live: %ld Starts (%ld paths that fit, %ld overflow ids, %ld past the depth limit), "
           "%ld Stops, %ld more siblings; ids up to %ld; %ld ids under an id the runtime lost; %ld Starts that "
           "stopped their namesake first\n",
           st.starts, st.fitted, st.overflow, st.refused, st.stops, st.ticks, st.maxid, st.lost, st.restarts);
    ck_assert_int_gt(st.fitted, 1000);
    ck_assert_int_gt(st.overflow, 30);
    ck_assert_int_gt(st.refused, 0);
    ck_assert_int_gt(st.maxid, 65536);
    free(tsv);
    free(g_mark);
    g_mark = NULL;
    g_nmark = 0;
}
END_TEST

int main(void)
{
    Suite *s = suite_create("actpath_live");
    TCase *tc = tcase_create("live");
    tcase_set_timeout(tc, 0); /* dotnet builds the oracle first */
    tcase_add_test(tc, ids_of_a_live_runtime);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
