/* test_symclr_read: the method-event symbol encoding (ACTTRACE_SYMBOLS=methods) on our side: the setting
 * from the environment and from the config file, and the symbolizer naming addresses from hand-made
 * ModuleLoad / MethodLoadVerbose payloads laid out as the .NET runtime writes them (fixed integers,
 * NUL-terminated UTF-16LE), including non-ASCII names and malformed payloads. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "hookconf.h"
#include "ntsym.h"

/* ---- the setting ---- */
static const char *env_value;

static const char *fake_getenv(const char *name)
{
    return !strcmp(name, "ACTTRACE_SYMBOLS") ? env_value : NULL;
}

static int env(const char *v, at_config *c, char *err, size_t n)
{
    env_value = v;
    at_config_defaults(c);
    return at_config_from_env(c, fake_getenv, err, n);
}

START_TEST(test_env_values)
{
    at_config c;
    char err[256];
    ck_assert_int_eq(env(NULL, &c, err, sizeof err), 0);
    ck_assert(c.symbols && !c.symbols_methods); /* default: Universal.System */
    ck_assert_int_eq(env("methods", &c, err, sizeof err), 0);
    ck_assert(c.symbols && c.symbols_methods);
    ck_assert_int_eq(env("1", &c, err, sizeof err), 0);
    ck_assert(c.symbols && !c.symbols_methods);
    ck_assert_int_eq(env("0", &c, err, sizeof err), 0);
    ck_assert(!c.symbols && !c.symbols_methods);
    ck_assert_int_eq(env("off", &c, err, sizeof err), 0);
    ck_assert(!c.symbols);
    ck_assert_int_eq(env("method", &c, err, sizeof err), -1);
    ck_assert_str_eq(err, "ACTTRACE_SYMBOLS=method: expected 0, 1 or methods");
}
END_TEST

START_TEST(test_config_file_key)
{
    static const struct {
        const char *text;
        int want;
    } ok[] = {{"[trace]\nsymbols = methods\n", 3}, {"[trace]\nsymbols = on\n", 2}, {"[trace]\nsymbols = off\n", 1},
              {"[trace]\noutput = x.nettrace\n", 0}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        at_hookconf c;
        char err[512];
        ck_assert_msg(at_hookconf_parse("t.conf", ok[i].text, &c, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(c.symbols, ok[i].want);
        at_hookconf_free(&c);
    }
    at_hookconf c;
    char err[512];
    ck_assert_int_eq(at_hookconf_parse("t.conf", "[trace]\nsymbols = clr\n", &c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "t.conf:2:") && strstr(err, "'clr': expected on, off or methods"), "%s", err);
    ck_assert_int_eq(at_hookconf_parse("t.conf", "[trace]\nsymbolz = on\n", &c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "symbols,"), "the message lists the key: %s", err);
}
END_TEST

/* ---- the symbolizer ---- */
static nt_metadata meta_module = {.provider = NT_CLR_RUNTIME, .event_id = NT_CLR_MODULE_LOAD, .name = "ModuleLoad", .version = 1};
static nt_metadata meta_method = {.provider = NT_CLR_RUNTIME, .event_id = NT_CLR_METHOD_LOAD_VERBOSE,
                                  .name = "MethodLoadVerbose", .version = 1};
static nt_metadata meta_other = {.provider = "Other", .event_id = NT_CLR_METHOD_LOAD_VERBOSE, .name = "MethodLoadVerbose"};

typedef struct pay {
    uint8_t b[1024];
    uint32_t n;
} pay;

static void u64(pay *p, uint64_t v)
{
    memcpy(p->b + p->n, &v, 8);
    p->n += 8;
}

static void u32(pay *p, uint32_t v)
{
    memcpy(p->b + p->n, &v, 4);
    p->n += 4;
}

/* UTF-16 code units, then the NUL */
static void w16(pay *p, const uint16_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        memcpy(p->b + p->n, &s[i], 2);
        p->n += 2;
    }
    memset(p->b + p->n, 0, 2);
    p->n += 2;
}

static void ascii(pay *p, const char *s)
{
    uint16_t w[256];
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++)
        w[i] = (uint8_t)s[i];
    w16(p, w, n);
}

static void feed(nt_symbolizer *s, nt_metadata *m, const pay *p)
{
    nt_event ev = {.meta = m, .payload = p->b, .payload_len = p->n};
    ck_assert(nt_sym_is_symbol_event(&ev) == (m != &meta_other));
    nt_sym_observe(s, &ev);
}

static void module(nt_symbolizer *s, uint64_t id, const char *path)
{
    pay p = {.n = 0};
    u64(&p, id);
    u64(&p, id);
    u32(&p, 0);
    u32(&p, 0);
    ascii(&p, path);
    ascii(&p, "");
    p.n += 2; /* ClrInstanceID */
    feed(s, &meta_module, &p);
}

static pay method_head(uint64_t module_id, uint64_t start, uint32_t size)
{
    pay p = {.n = 0};
    u64(&p, 7);
    u64(&p, module_id);
    u64(&p, start);
    u32(&p, size);
    u32(&p, 0);
    u32(&p, 8); /* jitted */
    return p;
}

static void method(nt_symbolizer *s, uint64_t module_id, uint64_t start, uint32_t size, const char *ns, const char *name)
{
    pay p = method_head(module_id, start, size);
    ascii(&p, ns);
    ascii(&p, name);
    ascii(&p, "");
    p.n += 2;
    feed(s, &meta_method, &p);
}

static const char *fmt(nt_symbolizer *s, uint64_t ip)
{
    static char buf[512];
    return nt_sym_format(s, ip, buf, sizeof buf);
}

START_TEST(test_names_from_method_events)
{
    nt_sym_options o = {.demangle = false};
    nt_symbolizer *s = nt_sym_new(&o);
    module(s, 1, "/usr/lib/libx.so.1");
    module(s, 2, "/opt/app/server");
    method(s, 1, 0x7000, 0x40, "", "do_work");
    method(s, 2, 0x1000, 0x10, "", "main");
    method(s, 2, 0x2000, 0x10, "Ns.Cls", "M"); /* a runtime's own method: Namespace.Name */
    /* the writer's stored addresses are call sites: the byte before names the same function */
    ck_assert_str_eq(fmt(s, 0x7001), "libx.so.1!do_work+0x1");
    ck_assert_str_eq(fmt(s, 0x7040), "libx.so.1!do_work+0x40"); /* one past a noreturn call's site */
    ck_assert_str_eq(fmt(s, 0x1005), "server!main+0x5");
    ck_assert_str_eq(fmt(s, 0x2003), "server!Ns.Cls.M+0x3");
    ck_assert_str_eq(fmt(s, 0x3000), "0x3000"); /* nothing names it, and modules have no range */
    /* a rotated segment repeats its modules: the first stays */
    module(s, 1, "/other/path");
    ck_assert_str_eq(fmt(s, 0x7001), "libx.so.1!do_work+0x1");
    nt_sym_free(s);
}
END_TEST

START_TEST(test_utf16_names)
{
    nt_sym_options o = {.demangle = false};
    nt_symbolizer *s = nt_sym_new(&o);
    module(s, 1, "/m");
    pay p = method_head(1, 0x100, 0x10);
    ascii(&p, "");
    static const uint16_t name[] = {'c', 0xE9, '_', 0x20AC, '_', 0xD83D, 0xDE00}; /* cé_€_😀 */
    w16(&p, name, sizeof name / sizeof name[0]);
    ascii(&p, "");
    p.n += 2;
    feed(s, &meta_method, &p);
    ck_assert_str_eq(fmt(s, 0x101), "m!c\xC3\xA9_\xE2\x82\xAC_\xF0\x9F\x98\x80+0x1");
    nt_sym_free(s);
}
END_TEST

START_TEST(test_malformed_ignored)
{
    nt_sym_options o = {.demangle = false};
    nt_symbolizer *s = nt_sym_new(&o);
    module(s, 1, "/m");
    /* a name with no NUL before the payload ends */
    pay p = method_head(1, 0x100, 0x10);
    ascii(&p, "");
    p.b[p.n++] = 'x';
    p.b[p.n++] = 0;
    p.b[p.n++] = 'y';
    feed(s, &meta_method, &p);
    /* too short for the fixed fields */
    pay q = {.n = 20};
    feed(s, &meta_method, &q);
    feed(s, &meta_module, &q);
    /* a size of 0 names nothing */
    method(s, 1, 0x200, 0, "", "empty");
    /* another provider's event of the same id is not ours */
    pay r = method_head(1, 0x300, 0x10);
    ascii(&r, "");
    ascii(&r, "other");
    ascii(&r, "");
    feed(s, &meta_other, &r);
    /* a method of a module no ModuleLoad named */
    method(s, 9, 0x400, 0x10, "", "orphan");
    ck_assert_str_eq(fmt(s, 0x401), "0x401");
    ck_assert_str_eq(fmt(s, 0x101), "0x101");
    ck_assert_str_eq(fmt(s, 0x200), "0x200");
    ck_assert_str_eq(fmt(s, 0x301), "0x301");
    nt_sym_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("symclr_read");
    TCase *tc = tcase_create("symclr");
    tcase_add_test(tc, test_env_values);
    tcase_add_test(tc, test_config_file_key);
    tcase_add_test(tc, test_names_from_method_events);
    tcase_add_test(tc, test_utf16_names);
    tcase_add_test(tc, test_malformed_ignored);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
