/* test_resolve: names to loaded functions (shim/hook/resolve.c compiled in; the module it is
 * compiled into counts as the shim and is never searched): plain, lib!sym and sym@VERSION names in
 * libc's .dynsym, IFUNCs resolved to what the dynamic linker chose, and one message per failure. */
#include <check.h>
#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

#include "../../shim/hook/resolve.c"

START_TEST(test_libc_names)
{
    at_resolved r;
    char why[256];
    ck_assert_int_eq(at_resolve("close", &r, why, sizeof why), 0);
    ck_assert_int_eq(r.table, AT_SYM_DYNSYM);
    ck_assert_msg(strstr(r.module, "libc.so"), "%s", r.module);
    ck_assert(r.exported && !r.is_exe);
    ck_assert_str_eq(r.sym, "close");
    ck_assert_str_eq(r.defver, "GLIBC_2.2.5"); /* the version GOT slots must import */
    ck_assert_uint_eq(r.addr, (uintptr_t)dlsym(RTLD_DEFAULT, "close"));
    ck_assert_uint_gt(r.size, 0);

    ck_assert_int_eq(at_resolve("libc!close", &r, why, sizeof why), 0);
    ck_assert_msg(strstr(r.module, "libc.so"), "%s", r.module);
    ck_assert_int_eq(at_resolve("libc.so.6!close", &r, why, sizeof why), 0);

    ck_assert_int_eq(at_resolve("close@GLIBC_2.2.5", &r, why, sizeof why), 0);
    ck_assert_str_eq(r.version, "GLIBC_2.2.5");
    ck_assert_uint_eq(r.addr, (uintptr_t)dlvsym(RTLD_DEFAULT, "close", "GLIBC_2.2.5"));

    /* memcpy is an IFUNC: the address is the implementation the dynamic linker picked */
    ck_assert_int_eq(at_resolve("libc!memcpy", &r, why, sizeof why), 0);
    Dl_info d1, d2;
    void *mp = dlsym(RTLD_DEFAULT, "memcpy");
    dladdr((void *)r.addr, &d1);
    dladdr(mp, &d2);
    ck_assert_msg(r.addr == (uintptr_t)mp, "%lx %s %s / %p %s %s", (unsigned long)r.addr, d1.dli_fname, d1.dli_sname, mp, d2.dli_fname, d2.dli_sname);

    /* module+offset: the offset of close in libc */
    at_resolved c;
    ck_assert_int_eq(at_resolve("close", &c, why, sizeof why), 0);
    char spec[128];
    snprintf(spec, sizeof spec, "libc.so.6+0x%lx", (unsigned long)(c.addr - c.base));
    ck_assert_int_eq(at_resolve(spec, &r, why, sizeof why), 0);
    ck_assert_int_eq(r.table, AT_SYM_OFFSET);
    ck_assert_uint_eq(r.addr, c.addr);

    char id[128];
    at_module_build_id(c.module, id, sizeof id);
    ck_assert_uint_eq(strlen(id), 40); /* Debian's libc has a SHA-1 build-id */
    ck_assert(at_module_loaded("libc.so.6") && at_module_loaded("libc"));
    ck_assert(!at_module_loaded("libnothere"));
}
END_TEST

START_TEST(test_failures)
{
    at_resolved r;
    char why[256];
    ck_assert_int_eq(at_resolve("no_such_function_xyz", &r, why, sizeof why), -1);
    ck_assert_str_eq(why, "no function 'no_such_function_xyz' in any loaded module (.dynsym, "
                          ".symtab, debug files)");
    ck_assert_int_eq(at_resolve("libnothere!close", &r, why, sizeof why), -1);
    ck_assert_str_eq(why, "no loaded module is called 'libnothere'");
    ck_assert_int_eq(at_resolve("close@GLIBC_9.9", &r, why, sizeof why), -1);
    ck_assert_str_eq(why, "no function 'close' with version GLIBC_9.9 in any loaded module");
    ck_assert_int_eq(at_resolve("libnothere+0x10", &r, why, sizeof why), -1);
    ck_assert_str_eq(why, "no loaded module is called 'libnothere'");
    /* a data object is not a function */
    ck_assert_int_eq(at_resolve("libc!environ", &r, why, sizeof why), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("resolve");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_libc_names);
    tcase_add_test(tc, test_failures);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
