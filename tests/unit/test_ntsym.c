/* test_ntsym: the symbolizer on hand-made Universal.System events (no file): names, offsets, inclusive
 * ends, module+offset with and without build-id metadata, demangling, many symbols arriving
 * interleaved with lookups, and malformed payloads ignored. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ntsym.h"

static nt_metadata meta_map = {.provider = NT_UNIVERSAL_SYSTEM, .event_id = NT_US_PROCESS_MAPPING, .name = "ProcessMapping"};
static nt_metadata meta_sym = {.provider = NT_UNIVERSAL_SYSTEM, .event_id = NT_US_PROCESS_SYMBOL, .name = "ProcessSymbol"};
static nt_metadata meta_md = {.provider = NT_UNIVERSAL_SYSTEM, .event_id = NT_US_PROCESS_MAPPING_METADATA,
                              .name = "ProcessMappingMetadata"};
static nt_metadata meta_other = {.provider = "Other", .event_id = NT_US_PROCESS_SYMBOL, .name = "ProcessSymbol"};

typedef struct pay {
    uint8_t b[1024];
    uint32_t n;
} pay;

static void var(pay *p, uint64_t v)
{
    while (v >= 0x80) {
        p->b[p->n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p->b[p->n++] = (uint8_t)v;
}

static void str(pay *p, const char *s)
{
    uint16_t n = (uint16_t)strlen(s);
    memcpy(p->b + p->n, &n, 2);
    memcpy(p->b + p->n + 2, s, n);
    p->n += 2 + n;
}

static void feed(nt_symbolizer *s, nt_metadata *m, const pay *p)
{
    nt_event ev = {.meta = m, .payload = p->b, .payload_len = p->n};
    nt_sym_observe(s, &ev);
}

static void mapping(nt_symbolizer *s, uint64_t id, uint64_t start, uint64_t end_incl, uint64_t off, const char *file,
                    uint64_t md)
{
    pay p = {.n = 0};
    var(&p, id);
    var(&p, start);
    var(&p, end_incl);
    var(&p, off);
    str(&p, file);
    var(&p, md);
    feed(s, &meta_map, &p);
}

static void symbol(nt_symbolizer *s, uint64_t id, uint64_t map, uint64_t start, uint64_t end_incl, const char *name)
{
    pay p = {.n = 0};
    var(&p, id);
    var(&p, map);
    var(&p, start);
    var(&p, end_incl);
    str(&p, name);
    feed(s, &meta_sym, &p);
}

/* A symbol as the writer now writes it: its Flags after the name */
static void symbol_flags(nt_symbolizer *s, uint64_t id, uint64_t map, uint64_t start, uint64_t end_incl,
                         const char *name, uint64_t flags)
{
    pay p = {.n = 0};
    var(&p, id);
    var(&p, map);
    var(&p, start);
    var(&p, end_incl);
    str(&p, name);
    var(&p, flags);
    feed(s, &meta_sym, &p);
}

static const char *fmt(nt_symbolizer *s, uint64_t ip)
{
    static char buf[512];
    return nt_sym_format(s, ip, buf, sizeof buf);
}

START_TEST(names_and_offsets)
{
    nt_sym_options o = {.lines = false, .demangle = true};
    nt_symbolizer *s = nt_sym_new(&o);
    pay md = {.n = 0};
    var(&md, 7);
    str(&md, "{\"type\":\"ELF\",\"build_id\":\"abcd\",\"p_vaddr\":\"0x3000\",\"p_offset\":\"0x2000\"}");
    str(&md, "{}");
    feed(s, &meta_md, &md);
    mapping(s, 1, 0x10000, 0x1ffff, 0x2000, "/usr/lib/libx.so.1", 7);
    mapping(s, 2, 0x40000, 0x4ffff, 0x1000, "/opt/app", 0);
    symbol(s, 1, 1, 0x10100, 0x101ff, "plain_c");
    symbol(s, 2, 1, 0x10200, 0x102ff, "_ZN2ns6Walker4deepEiPFvvE");
    symbol(s, 3, 1, 0x10300, 0x103ff, "versioned@@GLIBC_2.34");
    /* return addresses: the call is the byte before */
    ck_assert_str_eq(fmt(s, 0x10150), "libx.so.1!plain_c+0x50");
    ck_assert_str_eq(fmt(s, 0x10200), "libx.so.1!plain_c+0x100"); /* a call ending plain_c */
    ck_assert_str_eq(fmt(s, 0x10201), "libx.so.1!ns::Walker::deep(int, void (*)())+0x1");
    ck_assert_str_eq(fmt(s, 0x10310), "libx.so.1!versioned+0x10");
    /* no symbol: module + ELF address (metadata: vaddr 0x3000 at file offset 0x2000) */
    ck_assert_str_eq(fmt(s, 0x10500), "libx.so.1+0x3500");
    /* no metadata: module + file offset */
    ck_assert_str_eq(fmt(s, 0x40010), "app+0x1010");
    ck_assert_str_eq(fmt(s, 0x4ffff), "app+0x10fff"); /* end inclusive */
    ck_assert_str_eq(fmt(s, 0x50001), "0x50001");
    nt_sym_free(s);

    o.demangle = false;
    s = nt_sym_new(&o);
    mapping(s, 1, 0x10000, 0x1ffff, 0, "/l.so", 0);
    symbol(s, 2, 1, 0x10200, 0x102ff, "_ZN2ns6Walker4deepEiPFvvE");
    ck_assert_str_eq(fmt(s, 0x10201), "l.so!_ZN2ns6Walker4deepEiPFvvE+0x1");
    nt_sym_free(s);
}
END_TEST

/* What symrun writes now: mappings with an exclusive end, symbols one byte past their function, call
 * sites (return address - 1) in stacks. Each address is named by its own function, also the call
 * site of a call that ends its function and a hooked function's entry + 1 right after it. */
START_TEST(call_sites_and_exclusive_ends)
{
    nt_sym_options o = {.no_offset = true};
    nt_symbolizer *s = nt_sym_new(&o);
    mapping(s, 1, 0x10000, 0x20000, 0, "/app", 0);
    mapping(s, 2, 0x20000, 0x21000, 0, "/lib.so", 0);
    symbol(s, 1, 1, 0x10100, 0x10110, "caller");   /* 0x10100..0x1010f, written one past */
    symbol(s, 2, 1, 0x10110, 0x10120, "next");
    ck_assert_str_eq(fmt(s, 0x1010f), "app!caller");   /* the call ending caller */
    ck_assert_str_eq(fmt(s, 0x10111), "app!next");     /* next's entry + 1 (a hook's own frame) */
    ck_assert_str_eq(fmt(s, 0x1fff0), "app+0xfff0");
    ck_assert_str_eq(fmt(s, 0x20001), "lib.so+0x1");   /* the exclusive end is the next mapping's */
    nt_sym_free(s);
    /* the same symbols arriving in the other order (the unsorted tail is searched too) */
    s = nt_sym_new(&o);
    mapping(s, 1, 0x10000, 0x20000, 0, "/app", 0);
    symbol(s, 2, 1, 0x10110, 0x10120, "next");
    symbol(s, 1, 1, 0x10100, 0x10110, "caller");
    ck_assert_str_eq(fmt(s, 0x10111), "app!next");
    ck_assert_str_eq(fmt(s, 0x1010f), "app!caller");
    nt_sym_free(s);
}
END_TEST

START_TEST(many_symbols_interleaved)
{
    nt_symbolizer *s = nt_sym_new(NULL);
    mapping(s, 1, 0x100000, 0x8fffff, 0, "/big", 0);
    enum { N = 5000 };
    /* symbols in a scrambled order, each named right after it arrives and all again at the end */
    for (uint64_t k = 0; k < N; k++) {
        uint64_t i = (k * 2654435761u) % N;
        char name[32];
        snprintf(name, sizeof name, "f%llu", (unsigned long long)i);
        symbol(s, k + 1, 1, 0x100000 + i * 0x100, 0x100000 + i * 0x100 + 0xff, name);
        char want[64];
        snprintf(want, sizeof want, "big!f%llu+0x11", (unsigned long long)i);
        ck_assert_str_eq(fmt(s, 0x100000 + i * 0x100 + 0x11), want);
    }
    for (uint64_t i = 0; i < N; i++) {
        char want[64];
        snprintf(want, sizeof want, "big!f%llu+0x80", (unsigned long long)i);
        ck_assert_str_eq(fmt(s, 0x100000 + i * 0x100 + 0x80), want);
    }
    nt_sym_free(s);
}
END_TEST

START_TEST(malformed_and_foreign_events_ignored)
{
    nt_symbolizer *s = nt_sym_new(NULL);
    mapping(s, 1, 0x1000, 0x1fff, 0, "/m", 0);
    pay p = {.n = 0};
    var(&p, 1);
    var(&p, 1);
    var(&p, 0x1100);
    feed(s, &meta_sym, &p); /* truncated: no end, no name */
    symbol(s, 2, 1, 0x1300, 0x1200, "backwards");
    pay q = {.n = 0};
    var(&q, 3);
    var(&q, 1);
    var(&q, 0x1100);
    var(&q, 0x11ff);
    str(&q, "other_provider");
    feed(s, &meta_other, &q);
    uint8_t huge[3] = {0xff, 0xff, 0xff}; /* string length beyond the payload */
    nt_event ev = {.meta = &meta_map, .payload = huge, .payload_len = sizeof huge};
    nt_sym_observe(s, &ev);
    ck_assert_str_eq(fmt(s, 0x1150), "m+0x150");
    ck_assert(nt_sym_is_symbol_event(&(nt_event){.meta = &meta_md}));
    ck_assert(!nt_sym_is_symbol_event(&(nt_event){.meta = &meta_other}));
    nt_sym_free(s);
    /* no symbolizer at all: bare addresses */
    char buf[64];
    ck_assert_str_eq(nt_sym_format(NULL, 0x1234, buf, sizeof buf), "0x1234");
}
END_TEST

/* A name the writer marked final is shown as given, as TraceEvent shows it: one it left mangled (too
 * long for its demangler) is not demangled here; an older file's (no flags) still is. */
START_TEST(final_names_shown_as_given)
{
    nt_sym_options o = {.lines = false, .demangle = true};
    nt_symbolizer *s = nt_sym_new(&o);
    mapping(s, 1, 0x10000, 0x1ffff, 0, "/l.so", 0);
    symbol_flags(s, 1, 1, 0x10100, 0x101ff, "_ZN2ns6Walker4deepEiPFvvE", NT_US_SYMBOL_NAME_FINAL);
    symbol_flags(s, 2, 1, 0x10200, 0x102ff, "ns::f(int)", NT_US_SYMBOL_NAME_FINAL);
    symbol_flags(s, 3, 1, 0x10300, 0x103ff, "_ZN2ns1gEv", 0); /* flags without the bit: demangled */
    symbol(s, 4, 1, 0x10400, 0x104ff, "_ZN2ns1hEv@@V_1");
    ck_assert_str_eq(fmt(s, 0x10101), "l.so!_ZN2ns6Walker4deepEiPFvvE+0x1");
    ck_assert_str_eq(fmt(s, 0x10201), "l.so!ns::f(int)+0x1");
    ck_assert_str_eq(fmt(s, 0x10301), "l.so!ns::g()+0x1");
    ck_assert_str_eq(fmt(s, 0x10401), "l.so!ns::h()+0x1");
    nt_sym_free(s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("ntsym");
    TCase *c = tcase_create("ntsym");
    tcase_add_test(c, names_and_offsets);
    tcase_add_test(c, call_sites_and_exclusive_ends);
    tcase_add_test(c, many_symbols_interleaved);
    tcase_add_test(c, malformed_and_foreign_events_ignored);
    tcase_add_test(c, final_names_shown_as_given);
    suite_add_tcase(su, c);
    SRunner *r = srunner_create(su);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
