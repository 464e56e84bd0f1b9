/* test_entry_patch: the entry patcher's decisions and relocations on byte sequences (no code is run
 * or patched): each refusal with its reason, and what the displaced instructions become in the
 * island (a RIP-relative operand keeps its absolute target, a short jcc becomes the opposite jcc
 * over an absolute jump, a call becomes movabs/call r11, an endbr64 stays first). White-box: the
 * patcher's file is compiled into this test. */
#include <check.h>
#include <string.h>

#include "../../shim/hook/entry.c"

/* Functions laid out in a buffer at a known address (16-byte slots). */
static uint8_t code[4096] __attribute__((aligned(16)));

static uintptr_t put(size_t off, const uint8_t *b, size_t n)
{
    memset(code + off, 0xcc, 64);
    memcpy(code + off, b, n);
    return (uintptr_t)(code + off);
}

static void refused(const uint8_t *b, size_t n, size_t size, const char *want)
{
    uintptr_t a = put(0, b, n);
    char why[256] = "";
    ck_assert_int_eq(at_entry_check(a, size, why, sizeof why), -1);
    ck_assert_msg(strstr(why, want), "got '%s', want '%s'", why, want);
}

START_TEST(test_refusals)
{
    /* mov %edi,%eax; ret */
    refused((const uint8_t[]){0x89, 0xf8, 0xc3}, 3, 3, "function too short to patch (3 bytes, 5 needed)");
    /* unknown size, ends after 3 bytes: xor %eax,%eax; ret */
    refused((const uint8_t[]){0x31, 0xc0, 0xc3}, 3, 0, "function too short to patch (it ends after 3 bytes)");
    /* endbr64 then 3 bytes: 9 needed */
    refused((const uint8_t[]){0xf3, 0x0f, 0x1e, 0xfa, 0x89, 0xf8, 0xc3}, 7, 7,
            "function too short to patch (7 bytes, 9 needed)");
    /* xor; 1: add %edi,%eax; dec %edi; jnz 1b; ret: the loop lands at +2 */
    refused((const uint8_t[]){0x31, 0xc0, 0x01, 0xf8, 0xff, 0xcf, 0x75, 0xfa, 0xc3}, 9, 9,
            "the branch at +0x6 jumps back into the patched bytes");
    /* jrcxz and loop cannot move */
    refused((const uint8_t[]){0xe3, 0x05, 0x90, 0x90, 0x90, 0x90, 0x90, 0xc3}, 8, 8,
            "cannot be relocated");
    refused((const uint8_t[]){0xe2, 0x05, 0x90, 0x90, 0x90, 0x90, 0x90, 0xc3}, 8, 8,
            "cannot be relocated");
    /* a jump in the displaced bytes whose target is inside them */
    refused((const uint8_t[]){0xeb, 0x01, 0x90, 0x90, 0x90, 0x90, 0xc3}, 7, 7,
            "lands inside the patched bytes");
}
END_TEST

START_TEST(test_relocations)
{
    char why[256] = "";
    plan pl;
    uintptr_t island = (uintptr_t)code + 2048; /* within reach */
    /* mov 0x100(%rip),%eax; add %edi,%eax; ret */
    const uint8_t rip[] = {0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, 0x01, 0xf8, 0xc3};
    uintptr_t a = put(0, rip, sizeof rip);
    ck_assert_int_eq(plan_make(a, sizeof rip, island, &pl, why, sizeof why), 0);
    ck_assert_uint_eq(pl.len, 6);
    ck_assert(!pl.has_endbr);
    int32_t d;
    memcpy(&d, pl.code + 2, 4);
    ck_assert_uint_eq(island + 6 + (intptr_t)d, a + 6 + 0x100); /* same absolute operand */
    /* then jmp *0(%rip) back to a+6 */
    ck_assert(pl.code[6] == 0xff && pl.code[7] == 0x25);
    uintptr_t back;
    memcpy(&back, pl.code + 12, 8);
    ck_assert_uint_eq(back, a + 6);

    /* test %edi,%edi; jz +3; lea 1(%rdi),%eax; ret; mov $-1,%eax; ret */
    const uint8_t jcc[] = {0x85, 0xff, 0x74, 0x04, 0x8d, 0x47, 0x01, 0xc3, 0xb8,
                           0xff, 0xff, 0xff, 0xff, 0xc3};
    a = put(64, jcc, sizeof jcc);
    ck_assert_int_eq(plan_make(a, sizeof jcc, island, &pl, why, sizeof why), 0);
    ck_assert_uint_eq(pl.len, 7);
    ck_assert(pl.code[0] == 0x85 && pl.code[1] == 0xff);
    ck_assert_uint_eq(pl.code[2], 0x75); /* jnz: the opposite condition... */
    ck_assert_uint_eq(pl.code[3], 14);   /* ...over the absolute jump to the jz target */
    uintptr_t target;
    memcpy(&target, pl.code + 4 + 6, 8);
    ck_assert_uint_eq(target, a + 8);

    /* call rel32; add %edi,%eax; ret */
    const uint8_t call[] = {0xe8, 0x10, 0x00, 0x00, 0x00, 0x01, 0xf8, 0xc3};
    a = put(128, call, sizeof call);
    ck_assert_int_eq(plan_make(a, sizeof call, island, &pl, why, sizeof why), 0);
    /* the call made by hand: lea -8(%rsp),%rsp; movl $lo,(%rsp); movl $hi,4(%rsp); jmp *0(%rip) */
    static const uint8_t lea[] = {0x48, 0x8d, 0x64, 0x24, 0xf8};
    ck_assert(!memcmp(pl.code, lea, sizeof lea));
    uint32_t lo, hi;
    ck_assert(pl.code[5] == 0xc7 && pl.code[6] == 0x04 && pl.code[7] == 0x24);
    memcpy(&lo, pl.code + 8, 4);
    ck_assert(pl.code[12] == 0xc7 && pl.code[13] == 0x44 && pl.code[14] == 0x24 && pl.code[15] == 0x04);
    memcpy(&hi, pl.code + 16, 4);
    ck_assert_uint_eq(((uint64_t)hi << 32) | lo, a + 5); /* it returns into the function itself */
    ck_assert(pl.code[20] == 0xff && pl.code[21] == 0x25); /* jmp *0(%rip) */
    memcpy(&target, pl.code + 26, 8);
    ck_assert_uint_eq(target, a + 5 + 0x10);

    /* endbr64; mov %edi,%eax; add $2,%eax; ret: the jmp goes after the endbr64 */
    const uint8_t eb[] = {0xf3, 0x0f, 0x1e, 0xfa, 0x89, 0xf8, 0x83, 0xc0, 0x02, 0xc3};
    a = put(192, eb, sizeof eb);
    ck_assert_int_eq(plan_make(a, sizeof eb, island, &pl, why, sizeof why), 0);
    ck_assert(pl.has_endbr);
    ck_assert_uint_eq(pl.patch_at, a + 4);
    ck_assert(!memcmp(pl.code, eb, 9)); /* endbr64 + the two displaced instructions */
    ck_assert_int_eq(at_entry_check(a, sizeof eb, why, sizeof why), 0);

    /* a RIP-relative operand out of reach of the island */
    a = put(0, rip, sizeof rip);
    ck_assert_int_eq(plan_make(a, sizeof rip, a + (3ull << 30), &pl, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "out of reach of the island"), "%s", why);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("entry_patch");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_relocations);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
