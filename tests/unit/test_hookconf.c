/* test_hookconf: the config file format (docs/config.md) and C-like signatures: every section
 * kind parses into the struct the hooks use, and each kind of mistake gives its own message with
 * FILE:LINE:COLUMN. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "hookconf.h"
#include "trace.h"
#include "nt_format.h"
#include "signature.h"

static at_sig sig_ok(const char *s)
{
    at_sig g;
    int col = -1;
    char err[256] = "";
    int rc = at_sig_parse(s, &g, &col, err, sizeof err);
    ck_assert_msg(rc == 0, "%s: %s (col %d)", s, err, col);
    return g;
}

static void sig_bad(const char *s, int want_col, const char *want_msg)
{
    at_sig g;
    int col = -1;
    char err[256] = "";
    ck_assert_msg(at_sig_parse(s, &g, &col, err, sizeof err) == -1, "%s parsed", s);
    ck_assert_msg(col == want_col, "%s: col %d, want %d (%s)", s, col, want_col, err);
    ck_assert_msg(strstr(err, want_msg), "%s: '%s' lacks '%s'", s, err, want_msg);
}

START_TEST(test_signature_types)
{
    at_sig g = sig_ok("int handle(int fd, const char *url)");
    ck_assert_str_eq(g.fname, "handle");
    ck_assert_int_eq(g.ret, AT_CT_I32);
    ck_assert_int_eq(g.nparams, 2);
    ck_assert_str_eq(g.p[0].name, "fd");
    ck_assert_int_eq(g.p[0].type, AT_CT_I32);
    ck_assert_str_eq(g.p[1].name, "url");
    ck_assert_int_eq(g.p[1].type, AT_CT_STR);
    /* the types as written, for acttrace check's messages */
    ck_assert_str_eq(g.ret_text, "int");
    ck_assert_str_eq(g.p[1].text, "const char *");
    g = sig_ok("unsigned long f(char**argv, const  char*const s, int)");
    ck_assert_str_eq(g.ret_text, "unsigned long");
    ck_assert_str_eq(g.p[0].text, "char **");
    ck_assert_str_eq(g.p[1].text, "const char *const");
    ck_assert_str_eq(g.p[2].text, "int");

    g = sig_ok("double scale(double x, float f, unsigned long n, size_t len, void *p, "
               "unsigned char *bytes, char **argv, struct sockaddr *sa, long long ll, short s)");
    ck_assert_int_eq(g.ret, AT_CT_F64);
    ck_assert_int_eq(g.nparams, 10);
    at_ctype want[] = {AT_CT_F64, AT_CT_F32, AT_CT_U64, AT_CT_U64, AT_CT_PTR,
                       AT_CT_PTR, AT_CT_PTR, AT_CT_PTR, AT_CT_I64, AT_CT_I16};
    for (int i = 0; i < 10; i++)
        ck_assert_msg(g.p[i].type == want[i], "param %d: %s", i, at_ctype_name(g.p[i].type));
    ck_assert_str_eq(g.p[7].name, "sa");

    g = sig_ok("void submit(void (*fn)(void *), void *arg)");
    ck_assert_int_eq(g.ret, AT_CT_VOID);
    ck_assert_int_eq(g.nparams, 2);
    ck_assert_str_eq(g.p[0].name, "fn");
    ck_assert_int_eq(g.p[0].type, AT_CT_PTR);

    g = sig_ok("int accept4(int, struct sockaddr *, socklen_t *, int)");
    ck_assert_int_eq(g.nparams, 4);
    ck_assert_str_eq(g.p[0].name, "");
    ck_assert_int_eq(at_sig_param_index(&g, "arg3"), 3);
    ck_assert_int_eq(at_sig_param_index(&g, "arg4"), -1);

    g = sig_ok("const char *name(void)");
    ck_assert_int_eq(g.ret, AT_CT_STR);
    ck_assert_int_eq(g.nparams, 0);
    g = sig_ok("unsigned f(char buf[16], enum color c, int64_t t)");
    ck_assert_int_eq(g.ret, AT_CT_U32);
    ck_assert_int_eq(g.p[0].type, AT_CT_STR); /* a char array parameter is a string */
    ck_assert_int_eq(g.p[1].type, AT_CT_I32);
    ck_assert_int_eq(g.p[2].type, AT_CT_I64);
    ck_assert_uint_eq(at_ctype_nt(AT_CT_STR), NT_TYPE_STRING);
    ck_assert_uint_eq(at_ctype_nt(AT_CT_F32), NT_TYPE_DOUBLE);
}
END_TEST

START_TEST(test_signature_errors)
{
    sig_bad("int printf(const char *fmt, ...)", 28, "variadic");
    sig_bad("int f(my_handle h)", 6, "unknown type 'my_handle'");
    sig_bad("int f(struct big b)", 6, "by value");
    sig_bad("int f(int a", 11, "expected ')'");
    sig_bad("handle(int a)", 0, "return type");
    sig_bad("int f(int a) x", 13, "after the parameter list");
    sig_bad("int f(int a, int a)", 13, "named twice");
    sig_bad("int f(int a,)", 12, "expected a parameter");
    sig_bad("int f(int $)", 10, "unexpected '$'");
}
END_TEST

static const char *full =
    "# a server\n"
    "[trace]\n"
    "provider = MyServer\n"
    "output = /tmp/srv-%p.nettrace\n"
    "mode = circular 64M\n"
    "buffer = 8M   ; inline comment\n"
    "flush_ms = 50\n"
    "clock = monotonic\n"
    "level = verbose\n"
    "keywords = 0xff\n"
    "\n"
    "[activity Request]\n"
    "function = handle_request\n"
    "signature = int handle_request(int fd, const char *url, double w)\n"
    "capture = url, fd, return\n"
    "recursive = yes\n"
    "stacks = both\n"
    "level = warning\n"
    "keywords = 4\n"
    "\n"
    "[activity Connection]\n"
    "start = libc.so.6!accept4\n"
    "start_signature = int accept4(int lfd, struct sockaddr *a, socklen_t *l, int flags)\n"
    "start_key = return\n"
    "start_when = return >= 0\n"
    "start_capture = return\n"
    "stop = close@GLIBC_2.2.5\n"
    "stop_signature = int close(int fd)\n"
    "stop_key = fd\n"
    "\n"
    "[event Tick]\n"
    "function = server+0x1a2b\n"
    "\n"
    "[flow Pool]\n"
    "type = callback\n"
    "function = pool_submit\n"
    "signature = void pool_submit(void *pool, void (*fn)(void *), void *arg)\n"
    "callback = fn\n"
    "callback_arg = arg\n"
    "\n"
    "[flow Queue]\n"
    "type = keyed\n"
    "enqueue = q_push\n"
    "enqueue_signature = void q_push(struct q *q, void *item)\n"
    "enqueue_key = item\n"
    "dequeue = q_pop\n"
    "dequeue_signature = void *q_pop(struct q *q)\n"
    "dequeue_key = return\n";

START_TEST(test_full)
{
    at_hookconf c;
    char err[512] = "";
    int rc = at_hookconf_parse("full.conf", full, &c, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_str_eq(c.provider, "MyServer");
    ck_assert_str_eq(c.output, "/tmp/srv-%p.nettrace");
    ck_assert_int_eq(c.mode, 3);
    ck_assert_uint_eq(c.mode_size, 64ull << 20);
    ck_assert_uint_eq(c.buffer_bytes, 8ull << 20);
    ck_assert_uint_eq(c.flush_ms, 50);
    ck_assert_int_eq(c.clock, AT_CLOCK_MONOTONIC + 1);
    ck_assert_int_eq(c.level, 5);
    ck_assert_uint_eq(c.keywords, 0xff);
    ck_assert_int_eq(c.nentries, 5);

    at_hc_entry *e = &c.entries[0];
    ck_assert_int_eq(e->kind, AT_HC_ACTIVITY);
    ck_assert_str_eq(e->name, "Request");
    ck_assert(!e->paired);
    ck_assert_str_eq(e->probe[0].symbol, "handle_request");
    ck_assert(e->probe[0].has_sig);
    ck_assert_int_eq(e->probe[0].ncapture, 3);
    ck_assert_int_eq(e->probe[0].capture[0], 1);
    ck_assert_int_eq(e->probe[0].capture[1], 0);
    ck_assert_int_eq(e->probe[0].capture[2], AT_HC_RETURN);
    ck_assert(e->recursive);
    ck_assert_uint_eq(e->stacks, AT_HC_STACK_START | AT_HC_STACK_STOP);
    ck_assert_uint_eq(e->level, 3);
    ck_assert_uint_eq(e->keywords, 4);

    e = &c.entries[1];
    ck_assert(e->paired);
    ck_assert_str_eq(e->probe[0].symbol, "libc.so.6!accept4");
    ck_assert_int_eq(e->probe[0].key, AT_HC_RETURN);
    ck_assert(e->probe[0].has_when);
    ck_assert_int_eq(e->probe[0].when_what, AT_HC_RETURN);
    ck_assert_int_eq(e->probe[0].when_op, AT_HC_GE);
    ck_assert_int_eq(e->probe[0].when_value, 0);
    ck_assert_str_eq(e->probe[1].symbol, "close@GLIBC_2.2.5");
    ck_assert_int_eq(e->probe[1].key, 0);

    e = &c.entries[2];
    ck_assert_int_eq(e->kind, AT_HC_EVENT);
    ck_assert_str_eq(e->probe[0].symbol, "server+0x1a2b");
    ck_assert(!e->probe[0].has_sig);

    e = &c.entries[3];
    ck_assert_int_eq(e->kind, AT_HC_FLOW_CALLBACK);
    ck_assert_int_eq(e->callback, 1);
    ck_assert_int_eq(e->callback_arg, 2);

    e = &c.entries[4];
    ck_assert_int_eq(e->kind, AT_HC_FLOW_KEYED);
    ck_assert_int_eq(e->probe[0].key, 1);
    ck_assert_int_eq(e->probe[1].key, AT_HC_RETURN);
    at_hookconf_free(&c);
}
END_TEST

/* Each mistake: its message, at its line and column. */
static const struct {
    const char *text;
    const char *want; /* substring of the message, which starts with "t.conf:L:C: " */
} bad[] = {
    {"[activity A]\nfunction = f\nfuction = g\n", "t.conf:3:1: unknown key 'fuction' in [activity A]"},
    {"[trace]\nproviderr = x\n", "t.conf:2:1: unknown key 'providerr' in [trace]"},
    {"[trace]\nclock = hpet\n", "t.conf:2:9: 'hpet': expected auto, monotonic or tsc"},
    {"[probe A]\n", "t.conf:1:2: unknown section [probe]"},
    {"[activity]\n", "t.conf:1:10: [activity] needs a name"},
    {"[activity A]\nfunction f\n", "t.conf:2:1: expected 'key = value'"},
    {"[activity A\n", "t.conf:1:12: expected ']'"},
    {"function = f\n", "t.conf:1:1: 'function' outside a section"},
    {"[activity A]\nfunction = f\nrecursive = maybe\n", "t.conf:3:13: 'maybe': expected yes or no"},
    {"[activity A]\nfunction = f\nstacks = all\n", "t.conf:3:10: 'all': expected none, start"},
    {"[trace]\nbuffer = lots\n", "t.conf:2:10: 'lots': expected a size"},
    {"[trace]\nmode = rotate\n", "t.conf:2:8: 'rotate': expected file, rotate SIZE"},
    {"[trace]\nlevel = loud\n", "t.conf:2:9: 'loud': expected a level"},
    {"[activity A]\nfunction = f\nsignature = int f(int a)\ncapture = a, b\n",
     "t.conf:4:14: capture: 'b' is not a parameter of f; expected one of a or return"},
    {"[activity A]\nfunction = f\nsignature = void f(int fd, const char *)\ncapture = path\n",
     "t.conf:4:11: capture: 'path' is not a parameter of f; expected one of fd, arg1"},
    {"[activity A]\nfunction = f\nsignature = int f(void)\ncapture = x\n",
     "t.conf:4:11: capture: 'x' is not a parameter of f, which has none; expected return"},
    {"[activity A]\nfunction = f\ncapture = a\n", "t.conf:3:11: capture needs a signature"},
    {"[activity A]\nfunction = f\nsignature = int g(int a)\n",
     "t.conf:3:13: the signature is of 'g' but the function is 'f'"},
    {"[activity A]\nfunction = f\nsignature = int f(blob a)\n",
     "t.conf:3:19: unknown type 'blob'"},
    {"[activity A]\nstart = f\nstart_signature = int f(int a)\nstart_key = return\n",
     "t.conf:1:2: [activity A]: 'start' without 'stop'"},
    {"[activity A]\nfunction = f\nstart = g\n", "t.conf:3:1: an activity has either 'function'"},
    {"[activity A]\nstart = f\nstop = g\n", "a start/stop pair needs 'start_key'"},
    {"[activity A]\nstart = f\nstart_signature = int f(int a)\nstart_key = a\n"
     "start_when = return >= x\nstop = g\nstop_signature = void g(int k)\nstop_key = k\n",
     "t.conf:5:24: start_when: expected an integer after '>='"},
    {"[activity A]\nstart = f\nstart_signature = int f(int a)\nstart_key = a\n"
     "start_when = a ~ 0\nstop = g\nstop_signature = void g(int k)\nstop_key = k\n",
     "t.conf:5:16: start_when: expected 'NAME OP NUMBER'"},
    {"[activity A]\nfunction = f\nsignature = int f(double d)\nwhen = d > 1\n",
     "t.conf:4:8: when: 'd' is a double"},
    {"[activity A]\nfunction = f\nsignature = int f(int a)\nwhen = return > 1\n",
     "t.conf:4:8: when: the Start is written on entry"},
    {"[activity A]\nfunction = f\n[activity A]\nfunction = g\n",
     "t.conf:3:11: 'A' is already defined at line 1"},
    {"[activity A]\nfunction = f\nfunction = g\n", "t.conf:3:1: 'function' given twice"},
    {"[activity A]\nfunction = f x\n", "t.conf:2:13: 'f x': a symbol has no spaces"},
    {"[activity A]\nfunction = prog+12\n", "t.conf:2:16: 'prog+12': expected module+0xOFFSET"},
    {"[flow F]\nfunction = f\n", "t.conf:2:1: 'type = callback' or 'type = keyed' must come first"},
    {"[flow F]\ntype = pool\n", "t.conf:2:8: 'pool': expected callback or keyed"},
    {"[flow F]\ntype = callback\nfunction = f\nsignature = void f(int x)\ncallback = x\n",
     "t.conf:5:12: callback: 'x' is not a pointer"},
    {"[flow F]\ntype = callback\nfunction = f\nsignature = void f(void (*cb)(void *), void *a)\n"
     "callback = cb\n", "t.conf:1:2: [flow F]: expected 'callback_arg = ARGUMENT'"},
    {"[flow F]\ntype = callback\nfunction = f\nsignature = void f(void (*cb)(void *), int a)\n"
     "callback = cb\ncallback_arg = a\n", "t.conf:6:16: callback_arg: 'a' is not pointer-sized"},
    {"[flow F]\ntype = keyed\nenqueue = f\n",
     "[flow F]: a keyed flow needs 'enqueue' and 'dequeue'"},
    {"[event E]\nsignature = void f(void)\n", "t.conf:1:2: [event E]: expected 'function = NAME'"},
    {"[event E]\nfunction = f\nrecursive = yes\n", "t.conf:3:1: unknown key 'recursive' in [event E]"},
    {"[activity A]\nfunction = f\nsignature = int f(int a, ...)\n",
     "t.conf:3:26: a variadic function cannot take a signature"},
    {"[activity A]\nfunction = f\nkey = x\n", "t.conf:3:1: unknown key 'key'"},
    {"[activity A]\nfunction = f\ntier = plt\n", "t.conf:3:8: 'plt': expected auto, got or entry"},
    {"[activity A]\nfunction = f\nfd_key = yes\n", "t.conf:3:1: fd_key belongs to a start/stop pair"},
    {"[activity A]\nstart = f\nstart_signature = void *f(void)\nstart_key = return\n"
     "stop = g\nstop_signature = int g(void *k)\nstop_key = k\nfd_key = yes\n",
     "t.conf:8:1: fd_key: the start key is a pointer"},
    {"[activity A]\nstart = f\nstart_signature = int f(void)\nstart_key = return\n"
     "stop = g\nstop_signature = int g(int k)\nstop_key = k\nstop_when = return == 0\n",
     "t.conf:8:13: stop_when: the Stop is written on entry"},
    {"[activity A]\nstart = f\nstart_signature = int f(void)\nstart_key = return\n"
     "stop = g\nstop_signature = int g(int k)\nstop_key = k\nstop_capture = k, return\n",
     "t.conf:8:16: stop_capture: the Stop is written on entry"},
};

START_TEST(test_errors)
{
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        at_hookconf c;
        char err[512] = "";
        int rc = at_hookconf_parse("t.conf", bad[i].text, &c, err, sizeof err);
        ck_assert_msg(rc == -1, "case %zu parsed", i);
        ck_assert_msg(strstr(err, bad[i].want), "case %zu: got '%s', want '%s'", i, err,
                      bad[i].want);
        ck_assert_int_eq(c.nentries, 0);
    }
}
END_TEST

START_TEST(test_load_file)
{
    at_hookconf c;
    char err[512] = "";
    ck_assert_int_eq(at_hookconf_load("/nonexistent/x.conf", &c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/nonexistent/x.conf: cannot open"), "%s", err);
    /* every example config in config/examples parses */
    static const char *const ex[] = {"server.conf", "http-server.conf", "queue.conf"};
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/config/examples/%s", AT_SOURCE_DIR, ex[i]);
        int rc = at_hookconf_load(path, &c, err, sizeof err);
        ck_assert_msg(rc == 0, "%s", err);
        ck_assert_int_gt(c.nentries, 0);
        at_hookconf_free(&c);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hookconf");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_signature_types);
    tcase_add_test(tc, test_signature_errors);
    tcase_add_test(tc, test_full);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_load_file);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
