/* test_demangler: runtime/demangle.c, the writer's allocation-free demangler: the text c++filt gives,
 * plain and invalid names left alone, names longer than its stack allows left alone (also a deeply
 * nested one, which takes the most stack per character), output cut to the caller's room at a
 * character boundary, and the deepest name it takes demangled on its own stack while the caller is
 * on a small one. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demangle.h"

static size_t dm(const char *m, char *out, size_t cap) { return at_demangle(m, strlen(m), out, cap); }

START_TEST(names_as_cxxfilt_gives_them)
{
    ck_assert_int_eq(at_demangle_init(), 0);
    char out[4000];
    ck_assert_uint_gt(dm("_Z13typed_throweri", out, sizeof out), 0);
    ck_assert_str_eq(out, "typed_thrower(int)");
    ck_assert_uint_gt(dm("_ZZ4mainENKUliE_clEi", out, sizeof out), 0);
    ck_assert_str_eq(out, "main::{lambda(int)#1}::operator()(int) const");
    ck_assert_uint_gt(dm("_ZNSt6vectorIiSaIiEE9push_backERKi", out, sizeof out), 0);
    ck_assert_str_eq(out, "std::vector<int, std::allocator<int> >::push_back(int const&)");
    ck_assert_uint_gt(dm("_Z3fooi.constprop.0", out, sizeof out), 0);
    ck_assert_str_eq(out, "foo(int) [clone .constprop.0]");
    /* the length given, not the NUL: a name cut out of a longer string */
    ck_assert_uint_gt(at_demangle("_Z1fv@@V1", 5, out, sizeof out), 0);
    ck_assert_str_eq(out, "f()");
}
END_TEST

START_TEST(left_alone)
{
    ck_assert_int_eq(at_demangle_init(), 0);
    char out[64] = "untouched";
    ck_assert_uint_eq(dm("main", out, sizeof out), 0);
    ck_assert_uint_eq(dm("i", out, sizeof out), 0); /* a type to the demangler, a C name here */
    ck_assert_uint_eq(dm("_Z", out, sizeof out), 0);
    ck_assert_uint_eq(dm("_Zxyz", out, sizeof out), 0);
    ck_assert_uint_eq(dm("_ZN2ns", out, sizeof out), 0);
    ck_assert_uint_eq(at_demangle("_Z1f\0v", 6, out, sizeof out), 0);
    /* longer than the stack allows: left mangled, whatever it is */
    size_t max = at_demangle_max();
    ck_assert_uint_ge(max, 256);
    char *big = malloc(max + 8);
    memcpy(big, "_Z1f", 4);
    memset(big + 4, 'P', max - 3);
    big[max + 1] = 'i';
    big[max + 2] = 0;
    ck_assert_uint_eq(strlen(big), max + 2);
    char *o2 = malloc(1 << 16);
    ck_assert_uint_eq(dm(big, o2, 1 << 16), 0);
    free(big);
    free(o2);
}
END_TEST

START_TEST(cut_to_the_room)
{
    ck_assert_int_eq(at_demangle_init(), 0);
    char out[8];
    ck_assert_uint_eq(dm("_Z13typed_throweri", out, sizeof out), 7);
    ck_assert_str_eq(out, "typed_t");
    /* a UTF-8 identifier (GCC writes its bytes as they are): never half a character */
    char big[64];
    const char *m = "_Z7f\xc3\xa9\xc3\xa9\xc3\xa9v"; /* fééé() */
    size_t n = dm(m, big, sizeof big);
    ck_assert_uint_gt(n, 0);
    ck_assert_str_eq(big, "f\xc3\xa9\xc3\xa9\xc3\xa9()");
    char four[5]; /* room for "f", one é and half of the next */
    ck_assert_uint_eq(dm(m, four, sizeof four), 3);
    ck_assert_str_eq(four, "f\xc3\xa9");
}
END_TEST

/* The deepest name it takes (pointer upon pointer: the most stack per character), on a thread with a
 * 64 KiB stack, as a signal handler's alternate stack is: its own stack takes the depth. */
static void *deep(void *arg)
{
    size_t max = at_demangle_max();
    char *m = malloc(max + 1);
    memcpy(m, "_Z1f", 4);
    memset(m + 4, 'P', max - 5);
    m[max - 1] = 'i';
    m[max] = 0;
    static char out[4000];
    size_t n = at_demangle(m, max, out, sizeof out);
    free(m);
    *(size_t *)arg = n;
    return NULL;
}

START_TEST(deepest_name_on_a_small_stack)
{
    ck_assert_int_eq(at_demangle_init(), 0);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64u << 10);
    pthread_t t;
    size_t n = 0;
    ck_assert_int_eq(pthread_create(&t, &a, deep, &n), 0);
    pthread_join(t, NULL);
    ck_assert_uint_gt(n, at_demangle_max());
}
END_TEST

int main(void)
{
    Suite *s = suite_create("demangler");
    TCase *c = tcase_create("demangler");
    tcase_add_test(c, names_as_cxxfilt_gives_them);
    tcase_add_test(c, left_alone);
    tcase_add_test(c, cut_to_the_room);
    tcase_add_test(c, deepest_name_on_a_small_stack);
    suite_add_tcase(s, c);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
