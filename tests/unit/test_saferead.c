/* test_saferead.c: the safe reader copies what is readable and stops exactly where memory ends:
 * heap strings (kernel copy), registered permanent ranges (no system call), addresses that are no
 * mapping at all, a string running into a PROT_NONE or unmapped page, a string without a NUL (the
 * bound), errno untouched; and the payload's marking of what could not be read. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "saferead.h"
#include "trace.h"

static size_t pg;

/* Two pages, the second one PROT_NONE (or unmapped), with text ending at the first one's end. */
static char *edge_pages(const char *text, bool unmap)
{
    char *m = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(m, MAP_FAILED);
    if (unmap)
        ck_assert_int_eq(munmap(m + pg, pg), 0);
    else
        ck_assert_int_eq(mprotect(m + pg, pg, PROT_NONE), 0);
    size_t n = strlen(text);
    memcpy(m + pg - n, text, n);
    return m;
}

START_TEST(heap_string)
{
    char *s = strdup("heap string");
    char buf[64];
    uintptr_t bad = 1;
    uint64_t before = at_saferead_syscalls();
    ck_assert_uint_eq(at_saferead_str(buf, s, sizeof buf, &bad), 11);
    ck_assert_uint_eq(bad, 0);
    ck_assert_int_eq(memcmp(buf, "heap string", 11), 0);
    ck_assert_uint_eq(at_saferead_syscalls(), before + 1);
    free(s);
}
END_TEST

START_TEST(registered_range_needs_no_syscall)
{
    static const char lit[] = "a literal in a permanent range";
    uintptr_t a = (uintptr_t)lit;
    at_saferead_add_range(a & ~(uintptr_t)(pg - 1), ((a + sizeof lit) | (pg - 1)) + 1);
    char buf[64];
    uintptr_t bad = 1;
    uint64_t before = at_saferead_syscalls();
    ck_assert_uint_eq(at_saferead_str(buf, lit, sizeof buf, &bad), sizeof lit - 1);
    ck_assert_uint_eq(bad, 0);
    ck_assert_uint_eq(at_saferead(buf, lit, 8), 8);
    ck_assert_uint_eq(at_saferead_syscalls(), before);
    ck_assert_int_eq(memcmp(buf, lit, 8), 0);
}
END_TEST

START_TEST(range_then_kernel_copy)
{
    /* a string that starts in a registered range and goes on in the next (unregistered) page */
    char *m = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(m, MAP_FAILED);
    memcpy(m + pg - 3, "abcdef", 7);
    at_saferead_add_range((uintptr_t)m, (uintptr_t)m + pg);
    char buf[64];
    uintptr_t bad = 1;
    ck_assert_uint_eq(at_saferead_str(buf, m + pg - 3, sizeof buf, &bad), 6);
    ck_assert_uint_eq(bad, 0);
    ck_assert_int_eq(memcmp(buf, "abcdef", 6), 0);
}
END_TEST

static uintptr_t main_top; /* an address in main's frame: the zone's top for the stack test */

START_TEST(main_stack_needs_no_syscall)
{
    char buf[64];
    strcpy(buf, "on the stack");
    char out[64];
    uintptr_t bad = 1;
    uint64_t before = at_saferead_syscalls();
    at_saferead_main_stack(main_top - ((uintptr_t)8 << 20), main_top);
    ck_assert_uint_eq(at_saferead_str(out, buf, sizeof out, &bad), 12);
    ck_assert_uint_eq(bad, 0);
    ck_assert_int_eq(memcmp(out, "on the stack", 12), 0);
    ck_assert_uint_eq(at_saferead_syscalls(), before);
    /* the heap is not the stack */
    char *h = strdup("heap");
    ck_assert_uint_eq(at_saferead_str(out, h, sizeof out, &bad), 4);
    ck_assert_uint_eq(at_saferead_syscalls(), before + 1);
    free(h);
}
END_TEST

START_TEST(no_mapping_at_all)
{
    char buf[16];
    uintptr_t bad = 0;
    static const uintptr_t addrs[] = {1, 4095, 0x10000, 0xffff800000000000ull, (uintptr_t)-1};
    for (size_t i = 0; i < sizeof addrs / sizeof *addrs; i++) {
        ck_assert_uint_eq(at_saferead_str(buf, (const char *)addrs[i], sizeof buf, &bad), 0);
        ck_assert_uint_eq(bad, addrs[i]);
        ck_assert_uint_eq(at_saferead(buf, (const void *)addrs[i], sizeof buf), 0);
    }
}
END_TEST

START_TEST(string_into_protnone_page)
{
    for (int unmap = 0; unmap < 2; unmap++) {
        char *m = edge_pages("edge", unmap);
        char buf[64];
        uintptr_t bad = 0;
        ck_assert_uint_eq(at_saferead_str(buf, m + pg - 4, sizeof buf, &bad), 4);
        ck_assert_uint_eq(bad, (uintptr_t)(m + pg));
        ck_assert_int_eq(memcmp(buf, "edge", 4), 0);
        /* the page itself */
        ck_assert_uint_eq(at_saferead_str(buf, m + pg, sizeof buf, &bad), 0);
        ck_assert_uint_eq(bad, (uintptr_t)(m + pg));
        /* plain bytes across the edge: what lies before it */
        ck_assert_uint_eq(at_saferead(buf, m + pg - 10, 20), 10);
        /* a NUL just before the edge is a whole string */
        m[pg - 1] = 0;
        ck_assert_uint_eq(at_saferead_str(buf, m + pg - 4, sizeof buf, &bad), 3);
        ck_assert_uint_eq(bad, 0);
        munmap(m, unmap ? pg : 2 * pg);
    }
}
END_TEST

START_TEST(bounded_without_nul)
{
    char *s = malloc(300);
    memset(s, 'a', 300);
    char buf[300];
    uintptr_t bad = 1;
    ck_assert_uint_eq(at_saferead_str(buf, s, 10, &bad), 10);
    ck_assert_uint_eq(bad, 0);
    free(s);
}
END_TEST

START_TEST(errno_untouched)
{
    char buf[8];
    uintptr_t bad;
    errno = 1234;
    at_saferead_str(buf, (const char *)0x10000, sizeof buf, &bad);
    char *h = strdup("x");
    at_saferead_str(buf, h, sizeof buf, &bad);
    ck_assert_int_eq(errno, 1234);
    free(h);
}
END_TEST

/* UTF-16 units of a payload string field, as ASCII where they are (U+FFFF as '#') */
static void units(const uint8_t *p, size_t n, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i + 1 < n; i += 2) {
        unsigned u = p[i] | p[i + 1] << 8;
        out[k++] = u == 0xFFFF ? '#' : u == 0 ? '0' : u < 0x80 ? (char)u : '?';
    }
    out[k] = 0;
}

START_TEST(payload_marks_unreadable)
{
    char *m = edge_pages("edge", false);
    uint8_t buf[256];
    char got[128], want[128];
    at_payload pl;
    at_payload_init(&pl, buf, sizeof buf);
    at_payload_str_safe(&pl, m + pg - 4, 100);
    units(buf, (size_t)(pl.p - buf), got);
    snprintf(want, sizeof want, "edge#<unreadable %p>0", (void *)(m + pg));
    ck_assert_str_eq(got, want);
    at_payload_init(&pl, buf, sizeof buf);
    at_payload_str_safe(&pl, (const char *)1, 100);
    at_payload_str_safe(&pl, NULL, 100);
    at_payload_str_safe(&pl, "ok\xef\xbf\xbf", 100); /* U+FFFF in a string is not a mark */
    units(buf, (size_t)(pl.p - buf), got);
    ck_assert_str_eq(got, "#<unreadable 0x1>00ok?0");
    /* the bound still holds, and a mark that does not fit leaves the field out whole */
    at_payload_init(&pl, buf, sizeof buf);
    at_payload_str_safe(&pl, "abcdef", 3);
    units(buf, (size_t)(pl.p - buf), got);
    ck_assert_str_eq(got, "abc0");
    at_payload_init(&pl, buf, 20);
    at_payload_str_safe(&pl, (const char *)1, 100);
    ck_assert(pl.overflow);
    ck_assert_ptr_eq(pl.p, buf);
    munmap(m, 2 * pg);
}
END_TEST

int main(void)
{
    volatile char top = 0;
    main_top = (uintptr_t)&top;
    pg = (size_t)sysconf(_SC_PAGESIZE);
    Suite *s = suite_create("saferead");
    TCase *tc = tcase_create("saferead");
    tcase_add_test(tc, heap_string);
    tcase_add_test(tc, registered_range_needs_no_syscall);
    tcase_add_test(tc, range_then_kernel_copy);
    tcase_add_test(tc, main_stack_needs_no_syscall);
    tcase_add_test(tc, no_mapping_at_all);
    tcase_add_test(tc, string_into_protnone_page);
    tcase_add_test(tc, bounded_without_nul);
    tcase_add_test(tc, errno_untouched);
    tcase_add_test(tc, payload_marks_unreadable);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
