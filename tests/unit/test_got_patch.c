/* test_got_patch: the GOT tier in this very process (shim/hook/got.c compiled in): counting the
 * slots importing a name, rewriting them (calls through the PLT reach the new target), leaving slots
 * already rewritten alone, and taking only imports of the version asked for. */
#include <check.h>
#include <string.h>
#include <unistd.h>

#include "../../shim/hook/got.c"

static pid_t fake_getppid(void)
{
    return 4242;
}

START_TEST(test_patch_own_slot)
{
    pid_t real = getppid();
    ck_assert_int_ne(real, 4242);
    int slots = at_got_patch("getppid", NULL, NULL, NULL, 0);
    ck_assert_int_ge(slots, 1);
    ck_assert_int_eq(at_got_patch("getppid", "GLIBC_9.9", NULL, NULL, 0), 0);
    ck_assert_int_eq(at_got_patch("getppid", "GLIBC_2.2.5", NULL, NULL, 0), slots);
    char why[128] = "";
    ck_assert_int_eq(at_got_patch("getppid", "GLIBC_2.2.5", (void *)fake_getppid, why, sizeof why),
                     slots);
    ck_assert_int_eq(getppid(), 4242);
    /* a second pass finds them rewritten already */
    ck_assert_int_eq(at_got_patch("getppid", NULL, (void *)fake_getppid, why, sizeof why), 0);
    ck_assert_int_eq(at_got_patch("no_such_import_xyz", NULL, NULL, NULL, 0), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("got_patch");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_patch_own_slot);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK); /* the rewritten slot stays in the test's child */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
