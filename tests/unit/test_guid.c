/* test_guid.c: GUID text form and TraceEvent's provider GUID from a name, against the four values
 * verified in nettrace-v5.md §4.4. */
#include "guid.h"

#include <check.h>
#include <string.h>

static const struct {
    const char *name, *guid;
} known[] = {
    {"Universal.System", "8c107b6c-79f8-5231-4de6-2a0e20a3f562"},
    {"Universal.Events", "bc5e5d63-9799-5873-33d9-fba8316cef71"},
    {"Microsoft-Diagnostics-ActivityTracking", "3b268b3d-903f-5835-c77e-790d518a26c4"},
    {"Microsoft-DotNETCore-EventPipe", "92f528a6-f5b8-5160-a7ee-b33da7739e29"},
};

START_TEST(provider_guid_known_values)
{
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        at_guid g;
        char s[37];
        at_guid_from_provider_name(known[i].name, &g);
        at_guid_format(&g, s);
        ck_assert_str_eq(s, known[i].guid);
    }
}
END_TEST

START_TEST(provider_guid_is_case_insensitive)
{
    at_guid a, b;
    at_guid_from_provider_name("universal.system", &a);
    at_guid_from_provider_name("UNIVERSAL.SYSTEM", &b);
    ck_assert(at_guid_eq(&a, &b));
    char s[37];
    at_guid_format(&a, s);
    ck_assert_str_eq(s, "8c107b6c-79f8-5231-4de6-2a0e20a3f562");
    at_guid_from_provider_name("Universal.System2", &b);
    ck_assert(!at_guid_eq(&a, &b));
}
END_TEST

START_TEST(format_is_dotnet_memory_order)
{
    /* activity-path-vectors.tsv row 1: bytes 11 00 .. 00 da 99 9c 59 (memory order; nettrace-v5.md §7
     * lists the last four reversed) */
    at_guid g = {{0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xda, 0x99, 0x9c, 0x59}};
    char s[37];
    at_guid_format(&g, s);
    ck_assert_str_eq(s, "00000011-0000-0000-0000-0000da999c59");
    at_guid h = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};
    at_guid_format(&h, s);
    ck_assert_str_eq(s, "04030201-0605-0807-090a-0b0c0d0e0f10");
}
END_TEST

START_TEST(parse_round_trip_and_rejects)
{
    at_guid g, back;
    for (int i = 0; i < 16; i++) g.b[i] = (uint8_t)(i * 37 + 5);
    char s[37];
    at_guid_format(&g, s);
    ck_assert(at_guid_parse(s, &back));
    ck_assert(at_guid_eq(&g, &back));
    ck_assert(at_guid_parse("{3B268B3D-903F-5835-C77E-790D518A26C4}", &back));
    at_guid_from_provider_name("Microsoft-Diagnostics-ActivityTracking", &g);
    ck_assert(at_guid_eq(&g, &back));
    ck_assert(!at_guid_parse("", &back));
    ck_assert(!at_guid_parse("3b268b3d-903f-5835-c77e-790d518a26c", &back));   /* short */
    ck_assert(!at_guid_parse("3b268b3d-903f-5835-c77e-790d518a26c44", &back)); /* long */
    ck_assert(!at_guid_parse("3b268b3d903f-5835-c77e-790d518a26c4x", &back));  /* dash missing */
    ck_assert(!at_guid_parse("3b268b3d-903f-5835-c77e-790d518a26cg", &back));  /* not hex */
    ck_assert(!at_guid_parse("{3b268b3d-903f-5835-c77e-790d518a26c4", &back)); /* brace */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("guid");
    TCase *tc = tcase_create("guid");
    tcase_add_test(tc, provider_guid_known_values);
    tcase_add_test(tc, provider_guid_is_case_insensitive);
    tcase_add_test(tc, format_is_dotnet_memory_order);
    tcase_add_test(tc, parse_round_trip_and_rejects);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
