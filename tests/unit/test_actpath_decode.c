/* test_actpath_decode.c: the activity-path decoder against every row of
 * tests/data/activity-path-vectors.tsv (copy of shared/) (PerfView form and our //1/... form) and the worked examples of
 * nettrace-v5.md §7 (checksum, quirks of the encoder, overflow ids). */
#include "actpath.h"
#include "guid.h"
#include "at_livevec.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VECTORS AT_SOURCE_DIR "/tests/data/activity-path-vectors.tsv"

static const char *vectors_path(void)
{
    const char *p = getenv("AT_ACTPATH_VECTORS");
    return p ? p : VECTORS;
}

static void hex_to_guid(const char *hex, at_guid *g)
{
    ck_assert_uint_eq(strlen(hex), 32);
    for (int i = 0; i < 16; i++) {
        unsigned v;
        ck_assert_int_eq(sscanf(hex + 2 * i, "%2x", &v), 1);
        g->b[i] = (uint8_t)v;
    }
}

/* Writes the checksum for pid into bytes 12..15 the way the encoder does. */
static void seal(at_guid *g, uint32_t pid)
{
    uint32_t u[3];
    memcpy(u, g->b, 12);
    uint32_t c = (u[0] + u[1] + u[2] + 0x599D99ADu) ^ pid;
    memcpy(g->b + 12, &c, 4);
}


/* A test-local encoder following the pseudocode of nettrace-v5.md §7 (the runtime's AddIdToGuid), used
 * to round-trip many random paths through the decoder. It is checked against the vector file first. */
static void wnib(uint8_t *g, int *p, uint32_t v)
{
    if (g[*p] != 0) {
        g[*p] |= (uint8_t)v;
        (*p)++;
    } else {
        g[*p] = (uint8_t)(v << 4);
    }
}

static int ref_add_id(uint8_t *g, int where, uint32_t id, bool overflow)
{
    int p = where;
    if (p >= 12) return 13;
    if (id > 0 && id <= 10 && !overflow) {
        wnib(g, &p, id);
    } else {
        int len = id <= 0xFF ? 1 : id <= 0xFFFF ? 2 : id <= 0xFFFFFF ? 3 : 4;
        if (overflow) {
            if (p + 2 >= 12) return 13;
            wnib(g, &p, 0xB);
        }
        wnib(g, &p, 0xC + (uint32_t)len - 1);
        if (p < 12 && g[p] != 0) {
            if (id < 4096) { /* .NET 10: one byte fewer (but for 11..255, which it loses: at_actpath_add_id) */
                g[p] = (uint8_t)(0xC0 + (id >> 8));
                if (id > 0xFF) len--;
                id &= 0xFF;
            }
            p++;
        }
        for (int i = 0; i < len; i++) {
            if (p >= 12) {
                p++;
                break;
            }
            g[p++] = (uint8_t)(id & 0xFF);
            id >>= 8;
        }
    }
    return p;
}

/* Encodes "/1/5/1" style paths; returns the end offset (13 = does not fit). */
static int ref_encode(const char *path, uint32_t pid, at_guid *g)
{
    uint8_t b[20] = {0}; /* slack: the encoder may touch bytes past 11 before it gives up */
    int off = 0;
    const char *s = path;
    while (*s == '/') {
        uint32_t id = (uint32_t)strtoul(s + 1, (char **)&s, 10);
        off = ref_add_id(b, off, id, false);
        if (off > 12) return off;
    }
    memset(g, 0, sizeof *g);
    memcpy(g->b, b, 12);
    seal(g, pid);
    return off;
}

START_TEST(reference_encoder_matches_the_vectors)
{
    FILE *f = fopen(vectors_path(), "r");
    ck_assert(f != NULL);
    char line[1024];
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char pidc[32], path[256], endc[16], hex[64];
        ck_assert_int_eq(sscanf(line, "%31s %255s %15s %63s", pidc, path, endc, hex), 4);
        if (at_vector_row_superseded(path)) continue; /* the live runtime's bytes differ: test_actpath_live */
        at_guid g, want;
        int end = ref_encode(path, (uint32_t)atoi(pidc), &g);
        /* row 1 is a GUID taken from a real trace; its end_offset column is not the encoder's state */
        if (rows > 0 || strcmp(pidc, "65636") != 0) ck_assert_int_eq(end, atoi(endc));
        if (strcmp(hex, "DOES_NOT_FIT") == 0) continue;
        hex_to_guid(hex, &want);
        ck_assert_msg(at_guid_eq(&g, &want), "encoder disagrees on %s", path);
        rows++;
    }
    fclose(f);
    ck_assert_int_ge(rows, 25);
}
END_TEST

START_TEST(random_paths_round_trip)
{
    uint64_t x = 0x853c49e6748fea9bULL;
    int fitted = 0;
    for (int n = 0; n < 200000; n++) {
        char path[512];
        size_t len = 0;
        int depth = 1 + (int)(n % 9);
        len += (size_t)snprintf(path + len, sizeof path - len, "/1");
        for (int d = 0; d < depth; d++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            uint32_t id;
            switch (x % 6) { /* small ids dominate, as in real traces, but every size class occurs */
            case 0: case 1: case 2: id = 1 + (uint32_t)(x >> 8) % 10; break;
            case 3: id = 11 + (uint32_t)(x >> 8) % 245; break;
            case 4: id = 256 + (uint32_t)(x >> 8) % 65280; break;
            default: id = 1 + (uint32_t)(x >> 16); break;
            }
            len += (size_t)snprintf(path + len, sizeof path - len, "/%u", id);
        }
        at_guid g;
        uint32_t pid = 1 + (uint32_t)(x % 4194303);
        if (ref_encode(path, pid, &g) > 12) continue;
        fitted++;
        char buf[256], want[520];
        snprintf(want, sizeof want, "/%s", path);
        int k = at_actpath_format(&g, pid, buf, sizeof buf);
        if (k < 0 || strcmp(buf, want) != 0)
            ck_abort_msg("path %s decoded as %s", path, k < 0 ? "(not a path)" : buf);
        if (at_actpath_pid(&g) != pid) ck_abort_msg("pid of %s", path);
        /* PerfView's decoding is a prefix of ours (it stops at the padding byte). PerfView recognises a
         * path without the pid only by the checksum's top 12 bits, so a pid >= 2^20 shows as a GUID. */
        k = at_actpath_format_perfview(&g, buf, sizeof buf);
        if (pid >= (1u << 20)) {
            if (k != 36) ck_abort_msg("pid %u: PerfView form %s", pid, buf);
            continue;
        }
        char *slash = strchr(buf + 2, '/');
        if (k < 0 || !slash || strncmp(want + 1, slash, strlen(slash) - 1) != 0)
            ck_abort_msg("PerfView form %s of %s", buf, path);
    }
    ck_assert_int_gt(fitted, 50000);
}
END_TEST

START_TEST(every_vector_row)
{
    FILE *f = fopen(vectors_path(), "r");
    ck_assert_msg(f != NULL, "cannot open %s", vectors_path());
    char line[1024];
    int rows = 0, fitting = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        line[strcspn(line, "\n")] = 0;
        char *col[6] = {0};
        int n = 0;
        for (char *s = line, *tab; n < 6; s = tab + 1) {
            col[n++] = s;
            tab = strchr(s, '\t');
            if (!tab) break;
            *tab = 0;
        }
        ck_assert_int_eq(n, 6);
        rows++;
        if (strcmp(col[3], "DOES_NOT_FIT") == 0) continue;
        if (at_vector_row_superseded(col[1])) continue; /* the live runtime's bytes differ: test_actpath_live */
        fitting++;
        uint32_t pid = (uint32_t)strtoul(col[0], NULL, 10);
        at_guid g, parsed;
        hex_to_guid(col[3], &g);
        /* the string column is the same GUID */
        ck_assert(at_guid_parse(col[4], &parsed));
        ck_assert(at_guid_eq(&g, &parsed));
        ck_assert(at_actpath_is_path(&g, pid));
        ck_assert(at_actpath_is_path(&g, 0));
        ck_assert(!at_actpath_is_path(&g, pid + 1));
        ck_assert_uint_eq(at_actpath_pid(&g), pid);
        char buf[256];
        int k = at_actpath_format_perfview(&g, buf, sizeof buf);
        ck_assert_int_eq(k, (int)strlen(col[5]));
        ck_assert_str_eq(buf, col[5]);
        /* our form: the full path the encoder wrote, "//" + path without the leading '/' */
        char want[256];
        snprintf(want, sizeof want, "/%s", col[1]);
        k = at_actpath_format(&g, pid, buf, sizeof buf);
        ck_assert_msg(k == (int)strlen(want) && strcmp(buf, want) == 0, "row %s: got %s want %s", col[1], buf, want);
        /* not a path for another pid */
        ck_assert_int_eq(at_actpath_format(&g, pid + 1, buf, sizeof buf), -1);
        /* too small a buffer is reported, never overrun */
        ck_assert_int_eq(at_actpath_format(&g, pid, buf, 3), -1);
        ck_assert_int_eq(at_actpath_format_perfview(&g, buf, 4), -1);
    }
    fclose(f);
    ck_assert_int_ge(rows, 30);
    ck_assert_int_ge(fitting, 25);
}
END_TEST

START_TEST(worked_examples_of_the_spec)
{
    char buf[128];
    /* the real runtime GUID: /#65636/1/1/ */
    at_guid g;
    ck_assert(at_guid_parse("00000011-0000-0000-0000-0000da999c59", &g));
    ck_assert_int_gt(at_actpath_format_perfview(&g, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "/#65636/1/1/");
    ck_assert_int_gt(at_actpath_format(&g, 65636, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "//1/1");

    /* /1/1/300 is 11 c1 2c 00: PerfView /#pid/1/1/300/ */
    memset(&g, 0, sizeof g);
    g.b[0] = 0x11; g.b[1] = 0xc1; g.b[2] = 0x2c;
    seal(&g, 4242);
    at_actpath_format_perfview(&g, buf, sizeof buf);
    ck_assert_str_eq(buf, "/#4242/1/1/300/");
    at_actpath_format(&g, 4242, buf, sizeof buf);
    ck_assert_str_eq(buf, "//1/1/300");
    /* its child /1/1/300/5 is 11 c1 2c 50 (.NET 10 writes no 0x00 after 300): PerfView reads it too */
    g.b[3] = 0x50;
    seal(&g, 4242);
    at_actpath_format_perfview(&g, buf, sizeof buf);
    ck_assert_str_eq(buf, "/#4242/1/1/300/5/");
    at_actpath_format(&g, 4242, buf, sizeof buf);
    ck_assert_str_eq(buf, "//1/1/300/5");

    /* roots: 11 00 = //1/1, 12 00 = //1/2, child 3 of root 1: 11 30 = //1/1/3 */
    memset(&g, 0, sizeof g); g.b[0] = 0x12; seal(&g, 7);
    at_actpath_format(&g, 7, buf, sizeof buf);
    ck_assert_str_eq(buf, "//1/2");
    memset(&g, 0, sizeof g); g.b[0] = 0x11; g.b[1] = 0x30; seal(&g, 7);
    at_actpath_format(&g, 7, buf, sizeof buf);
    ck_assert_str_eq(buf, "//1/1/3");
    /* /1/1/3/300 with the length nibble in a low half: 11 3d 2c 01 */
    memset(&g, 0, sizeof g); g.b[0] = 0x11; g.b[1] = 0x3d; g.b[2] = 0x2c; g.b[3] = 0x01; seal(&g, 7);
    at_actpath_format(&g, 7, buf, sizeof buf);
    ck_assert_str_eq(buf, "//1/1/3/300");
    at_actpath_format_perfview(&g, buf, sizeof buf);
    ck_assert_str_eq(buf, "/#7/1/1/3/300/");
}
END_TEST

START_TEST(checksum_styles_and_non_paths)
{
    char buf[128];
    at_guid g;
    memset(&g, 0, sizeof g);
    g.b[0] = 0x15; g.b[1] = 0x10; /* /1/5/1 */
    /* old style: checksum without the pid */
    seal(&g, 0);
    ck_assert(at_actpath_is_path(&g, 1234));
    ck_assert(at_actpath_is_path(&g, 0));
    ck_assert_uint_eq(at_actpath_pid(&g), 0);
    at_actpath_format_perfview(&g, buf, sizeof buf);
    ck_assert_str_eq(buf, "//1/5/1/");
    at_actpath_format(&g, 1234, buf, sizeof buf);
    ck_assert_str_eq(buf, "//1/5/1");
    /* a random GUID is not a path: PerfView shows it as a GUID, we refuse */
    ck_assert(at_guid_parse("6d9ec0e1-62e8-5486-db71-3463a902643d", &g));
    ck_assert(!at_actpath_is_path(&g, 26240));
    ck_assert(!at_actpath_is_path(&g, 0));
    ck_assert_int_eq(at_actpath_format(&g, 26240, buf, sizeof buf), -1);
    at_actpath_format_perfview(&g, buf, sizeof buf);
    ck_assert_str_eq(buf, "6d9ec0e1-62e8-5486-db71-3463a902643d");
    /* the zero GUID is not a path */
    memset(&g, 0, sizeof g);
    ck_assert(!at_actpath_is_path(&g, 5));
}
END_TEST

START_TEST(overflow_ids)
{
    char buf[128];
    at_guid g;
    /* //1/2 then an overflow id 7 with the 0xB prefix in a low half: 12 ... -> 1b c0 07? Build
     * /1/3/$7 as the encoder does: nibbles 1,3 | B (high of byte 1), C (low of byte 1), then 07. */
    memset(&g, 0, sizeof g);
    g.b[0] = 0x13; g.b[1] = 0xbc; g.b[2] = 0x07;
    seal(&g, 99);
    at_actpath_format(&g, 99, buf, sizeof buf);
    ck_assert_str_eq(buf, "//1/3$7");
    /* PerfView keeps the size nibble as the top bits of the value here (a decoder quirk we mirror) */
    at_actpath_format_perfview(&g, buf, sizeof buf);
    ck_assert_str_eq(buf, "/#99/1/3$3079/");
    /* prefix in a low half: 1b | c0 07 -> //1$7 (0xC code in a high half, 1-byte value) */
    memset(&g, 0, sizeof g);
    g.b[0] = 0x1b; g.b[1] = 0xc0; g.b[2] = 0x07;
    seal(&g, 99);
    at_actpath_format(&g, 99, buf, sizeof buf);
    ck_assert_str_eq(buf, "//1$7");
    at_actpath_format_perfview(&g, buf, sizeof buf);
    ck_assert_str_eq(buf, "/#99/1$7/");
    /* 0xB followed by something that is not a size code: not a path for us, a GUID for PerfView */
    memset(&g, 0, sizeof g);
    g.b[0] = 0x1b; g.b[1] = 0x30;
    seal(&g, 99);
    ck_assert_int_eq(at_actpath_format(&g, 99, buf, sizeof buf), -1);
    at_actpath_format_perfview(&g, buf, sizeof buf);
    ck_assert_int_eq((int)strlen(buf), 36);
}
END_TEST

/* at_actpath_within against the comparison of the printed paths it replaces (each GUID printed with
 * its own pid: outer's string a prefix of inner's, ending before a '/' or at inner's end): parents
 * and children, siblings, the same path in other processes, overflow ids, the empty path and GUIDs
 * that are no path. */
static bool within_by_strings(const at_guid *inner, const at_guid *outer)
{
    char pi[256], po[256];
    int li = at_actpath_format(inner, at_actpath_pid(inner), pi, sizeof pi);
    int lo = at_actpath_format(outer, at_actpath_pid(outer), po, sizeof po);
    if (li < 0 || lo < 0 || li < lo || memcmp(pi, po, (size_t)lo) != 0)
        return false;
    return li == lo || pi[lo] == '/';
}

static void random_path(at_guid *g, uint64_t *x, int depth, uint32_t pid, const at_guid *from, int where)
{
    if (from)
        *g = *from;
    else
        memset(g, 0, sizeof *g);
    int p = from ? where : 0;
    if (!from)
        p = at_actpath_add_id(g, 0, 1, false, pid);
    for (int d = 0; d < depth && p < AT_ACTPATH_END; d++) {
        *x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17;
        uint32_t id;
        switch (*x % 7) {
        case 0: case 1: case 2: id = 1 + (uint32_t)(*x >> 8) % 10; break;
        case 3: id = 11 + (uint32_t)(*x >> 8) % 245; break;
        case 4: id = 256 + (uint32_t)(*x >> 8) % 65280; break;
        case 5: id = 1 + (uint32_t)(*x >> 16); break;
        default: id = 1 + (uint32_t)(*x >> 8) % 300; break;
        }
        int q = at_actpath_add_id(g, p, id, (*x >> 40) % 9 == 0, pid);
        if (q == AT_ACTPATH_NOFIT)
            break;
        p = q;
    }
    /* the checksum for pid, whatever was appended */
    at_actpath_add_id(g, AT_ACTPATH_END, 1, false, pid);
}

START_TEST(within_as_the_printed_paths_say)
{
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    unsigned no = 0, children = 0;
    for (int n = 0; n < 100000; n++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        uint32_t pid = 1 + (uint32_t)(x % 100000), pid2 = (x >> 20) % 4 ? pid : pid + 1;
        at_guid p, c, r, e;
        random_path(&p, &x, (int)(x % 5), pid, NULL, 0);
        /* a child: p's bytes and more ids after its last one */
        int end = 0;
        while (end < AT_ACTPATH_END && p.b[end]) end++;
        if (end && (p.b[end - 1] & 0x0F) == 0) end--; /* a half-filled last byte takes more nibbles */
        random_path(&c, &x, (int)(x >> 33) % 4, pid2, &p, end);
        random_path(&r, &x, (int)(x >> 37) % 6, pid, NULL, 0);
        memset(&e, 0, sizeof e);
        at_actpath_add_id(&e, AT_ACTPATH_END, 1, false, pid); /* the empty path */
        const at_guid *pairs[][2] = {{&c, &p}, {&p, &c}, {&c, &r}, {&r, &c}, {&p, &p}, {&e, &p},
                                     {&p, &e}, {&e, &e}};
        for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
            bool want = within_by_strings(pairs[k][0], pairs[k][1]);
            bool got = at_actpath_within(pairs[k][0], pairs[k][1]);
            if (want != got) {
                char a[256], b[256];
                at_actpath_format(pairs[k][0], at_actpath_pid(pairs[k][0]), a, sizeof a);
                at_actpath_format(pairs[k][1], at_actpath_pid(pairs[k][1]), b, sizeof b);
                ck_abort_msg("pair %zu: %s within %s: %d, printed paths say %d", k, a, b, got, want);
            }
            no += !want;
            children += k == 0 && want && memcmp(&c, &p, sizeof c) != 0;
        }
    }
    /* a GUID that is no path is within nothing, and nothing is within it */
    at_guid g, p;
    memset(&g, 0, sizeof g);
    g.b[0] = 0x1b; g.b[1] = 0x30;
    seal(&g, 99);
    random_path(&p, &x, 2, 99, NULL, 0);
    ck_assert(!at_actpath_within(&g, &p) && !at_actpath_within(&p, &g));
    ck_assert_uint_gt(children, 20000); /* children that are not their parent */
    ck_assert_uint_gt(no, 100000);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("actpath_decode");
    TCase *tc = tcase_create("decode");
    tcase_add_test(tc, every_vector_row);
    tcase_add_test(tc, reference_encoder_matches_the_vectors);
    tcase_add_test(tc, random_paths_round_trip);
    tcase_add_test(tc, worked_examples_of_the_spec);
    tcase_add_test(tc, checksum_styles_and_non_paths);
    tcase_add_test(tc, overflow_ids);
    tcase_add_test(tc, within_as_the_printed_paths_say);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
