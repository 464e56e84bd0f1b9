/* test_actpath.c: the activity-path encoder against the oracle (../shared/activity-path-vectors.tsv,
 * every row) and the worked quirks of nettrace-v5.md §7, and encoder -> decoder round trips. */
#include "actpath.h"
#include "guid.h"
#include "at_livevec.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VECTORS AT_SOURCE_DIR "/../shared/activity-path-vectors.tsv"

/* "/1/5/1" -> GUID the way the runtime builds a path: appdomain 1 first, then each id.
 * Returns the end offset or AT_ACTPATH_NOFIT. */
static int encode(const char *path, uint32_t pid, at_guid *g)
{
    memset(g, 0, sizeof *g);
    int off = 0;
    const char *s = path;
    while (*s == '/') {
        uint32_t id = (uint32_t)strtoul(s + 1, (char **)&s, 10);
        off = at_actpath_add_id(g, off, id, false, pid);
        if (off == AT_ACTPATH_NOFIT)
            return off;
    }
    return off;
}

static void hex(const at_guid *g, char out[33])
{
    for (int i = 0; i < 16; i++)
        sprintf(out + 2 * i, "%02x", g->b[i]);
}

START_TEST(every_vector_row_is_byte_identical)
{
    FILE *f = fopen(VECTORS, "r");
    ck_assert_msg(f != NULL, "cannot open %s", VECTORS);
    char line[1024];
    int rows = 0, nofit = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        char pidc[32], path[256], endc[16], want[64];
        ck_assert_int_eq(sscanf(line, "%31s %255s %15s %63s", pidc, path, endc, want), 4);
        if (at_vector_row_superseded(path)) /* the live runtime's bytes differ: test_actpath_live */
            continue;
        at_guid g;
        int end = encode(path, (uint32_t)atoi(pidc), &g);
        if (strcmp(want, "DOES_NOT_FIT") == 0) {
            ck_assert_msg(end == AT_ACTPATH_NOFIT, "%s should not fit (end %d)", path, end);
            nofit++;
            rows++;
            continue;
        }
        char got[33];
        hex(&g, got);
        ck_assert_msg(strcmp(got, want) == 0, "%s pid %s: got %s want %s", path, pidc, got, want);
        /* row 1 comes from a real trace; its end column is not encoder state */
        if (rows > 0)
            ck_assert_msg(end == atoi(endc), "%s: end %d want %s", path, end, endc);
        rows++;
    }
    fclose(f);
    ck_assert_int_ge(rows, 25);
    ck_assert_int_ge(nofit, 1);
}
END_TEST

START_TEST(quirks_of_the_runtime_encoder)
{
    at_guid g;
    /* 256..4095 with the length code in a high half: 0xC, the top 4 bits, one byte (.NET 10 writes
     * no 0x00 byte after it, as the table says: test_actpath_live) */
    ck_assert_int_eq(encode("/1/1/300", 1, &g), 3);
    ck_assert(memcmp(g.b, "\x11\xc1\x2c\x00", 4) == 0);
    ck_assert_int_eq(encode("/1/1/300/5", 1, &g), 3); /* a high nibble does not advance */
    ck_assert(memcmp(g.b, "\x11\xc1\x2c\x50", 4) == 0);
    /* 11..255 there: .NET 10 writes 0xC0 alone and loses the id; we keep its byte (unique ids) */
    ck_assert_int_eq(encode("/1/1/11", 1, &g), 3);
    ck_assert(memcmp(g.b, "\x11\xc0\x0b\x00", 4) == 0);
    /* length code in a low half */
    ck_assert_int_eq(encode("/1/1/3/300", 1, &g), 4);
    ck_assert(memcmp(g.b, "\x11\x3d\x2c\x01", 4) == 0);
    /* roots: appdomain nibble first */
    encode("/1/2", 1, &g);
    ck_assert_uint_eq(g.b[0], 0x12);
    encode("/1/1/3", 1, &g);
    ck_assert(memcmp(g.b, "\x11\x30", 2) == 0);
    /* checksum binds the pid */
    encode("/1/5/1", 4242, &g);
    ck_assert(at_actpath_is_path(&g, 4242));
    ck_assert(!at_actpath_is_path(&g, 4243));
    ck_assert_uint_eq(at_actpath_pid(&g), 4242);
}
END_TEST

START_TEST(overflow_ids_decode_with_a_dollar)
{
    at_guid g;
    int off = encode("/1/2", 77, &g);
    off = at_actpath_add_id(&g, off, 7, true, 77);
    ck_assert_int_lt(off, AT_ACTPATH_NOFIT);
    char buf[128];
    ck_assert_int_gt(at_actpath_format(&g, 77, buf, sizeof buf), 0);
    ck_assert_msg(strchr(buf, '$') != NULL, "overflow id not shown: %s", buf);
    /* no room for the prefix code near the end */
    at_guid full;
    ck_assert_int_eq(encode("/1/5000/5000/5000/5000", 77, &full), 12); /* exactly full */
    ck_assert_int_eq(encode("/1/5000/5000/5000/5000/5000", 77, &full), AT_ACTPATH_NOFIT);
}
END_TEST

START_TEST(deep_paths_round_trip_until_they_no_longer_fit)
{
    at_guid g;
    memset(&g, 0, sizeof g);
    int off = at_actpath_add_id(&g, 0, 1, false, 9);
    char want[256] = "//1";
    int depth = 0;
    for (uint32_t id = 1;; id = id * 7 + 3) {
        at_guid next = g;
        int o = at_actpath_add_id(&next, off, id % 70000 + 1, false, 9);
        if (o == AT_ACTPATH_NOFIT)
            break;
        g = next;
        off = o;
        size_t n = strlen(want);
        snprintf(want + n, sizeof want - n, "/%u", id % 70000 + 1);
        char buf[256];
        ck_assert_int_gt(at_actpath_format(&g, 9, buf, sizeof buf), 0);
        ck_assert_str_eq(buf, want);
        depth++;
    }
    ck_assert_int_ge(depth, 2);
}
END_TEST

/* The one-pass encoder a Start uses is the general one: every parent shape (each offset, a started
 * byte or not) with ids at every length boundary and the 4096 quirk, byte for byte and end offset. */
START_TEST(child_encoder_matches_the_general_one)
{
    static const uint32_t ids[] = {0,    1,     2,      9,      10,      11,       12,       15,
                                   16,   255,   256,    257,    4095,    4096,     4097,     65535,
                                   65536, 70000, 0xFFFFFF, 0x1000000, 0x7FFFFFFF, 0xFFFFFFFF};
    static const uint32_t steps[] = {1, 3, 10, 11, 200, 300, 5000, 70000, 0x1234567};
    int tried = 0;
    for (size_t s0 = 0; s0 < AT_ARRAY_LEN(steps); s0++)
        for (size_t s1 = 0; s1 < AT_ARRAY_LEN(steps); s1++) {
            /* parents //1, //1/a, //1/a/b, ... until they no longer fit */
            at_guid parent;
            memset(&parent, 0, sizeof parent);
            int where = at_actpath_add_id(&parent, 0, 1, false, 4242);
            for (int depth = 0; where <= AT_ACTPATH_END && depth < 8; depth++) {
                for (size_t k = 0; k < AT_ARRAY_LEN(ids); k++) {
                    at_guid want = parent, got;
                    memset(&got, 0x5A, sizeof got);
                    int w = at_actpath_add_id(&want, where, ids[k], false, 4242);
                    int g = at_actpath_child(&got, &parent, where, ids[k], 4242);
                    ck_assert_int_eq(g, w);
                    if (w <= AT_ACTPATH_END)
                        ck_assert_mem_eq(got.b, want.b, 16);
                    tried++;
                }
                at_guid next = parent;
                int o = at_actpath_add_id(&next, where, depth & 1 ? steps[s1] : steps[s0], false, 4242);
                if (o > AT_ACTPATH_END)
                    break;
                parent = next;
                where = o;
            }
        }
    ck_assert_int_gt(tried, 1000);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("actpath");
    TCase *tc = tcase_create("encoder");
    tcase_add_test(tc, every_vector_row_is_byte_identical);
    tcase_add_test(tc, quirks_of_the_runtime_encoder);
    tcase_add_test(tc, overflow_ids_decode_with_a_dollar);
    tcase_add_test(tc, deep_paths_round_trip_until_they_no_longer_fit);
    tcase_add_test(tc, child_encoder_matches_the_general_one);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
