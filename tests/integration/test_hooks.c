/* test_hooks: config-driven Start/Stop on functions by name (issue 5), through real fixture programs
 * under the shim: library calls across modules (GOT), the program's own static functions (entry
 * patching), a plugin loaded with dlopen, -z now / non-PIE / stripped builds, argument and return
 * capture (int, double, pointer, string), start/stop pairs by key, recursion with and without
 * 'recursive', a longjmp over a hooked call, C++ exceptions through both wrappers, acttrace check,
 * and bad configs (one message each, the program runs as without the shim). */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "at_testlib.h"
#include "at_tracegen.h"

static char *data_path(const char *name)
{
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/tests/data/hooks/%s", AT_SOURCE_DIR, name);
    return p;
}

static char *plugin_path(void)
{
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/fixtures/libhkplug.so", at_build_dir());
    return p;
}

/* Run fixture (with the plugin's path, or plugin_arg, as argument) under config; asserts exit 3 and
 * stdout equal to an untraced run. */
static void run_hk_plugin_opt(at_session *s, const char *fixture, const char *config_path,
                              const char *plugin_arg, bool need_trace);
static void run_hk_plugin(at_session *s, const char *fixture, const char *config_path,
                          const char *plugin_arg)
{
    run_hk_plugin_opt(s, fixture, config_path, plugin_arg, true);
}

/* need_trace false: a program that records nothing (no function hooked) writes no file */
static void run_hk_plugin_opt(at_session *s, const char *fixture, const char *config_path,
                              const char *plugin_arg, bool need_trace)
{
    char *plug = plugin_arg ? strdup(plugin_arg) : plugin_path();
    char env0[4200];
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s", config_path);
    const char *env[] = {env0, NULL};
    const char *argv[] = {fixture, plug, NULL};
    ck_assert_int_eq(at_session_run(s, "hooks", argv, env), 0);
    char d[512];
    ck_assert_msg(s->r.exited && s->r.status == 3 && (need_trace ? s->has_trace && s->t.complete
                                                                  : !s->has_trace),
                  "%s: %s", fixture, at_session_describe(s, d, sizeof d));
    /* the same program untraced */
    char *fx = at_fixture_path(fixture);
    const char *av[] = {fx, plug, NULL};
    at_run_opts o = {.argv = av, .no_preload = true};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 3, "%s untraced", fixture);
    ck_assert_str_eq(s->r.out, r.out);
    at_run_result_free(&r);
    free(fx);
    free(plug);
}

static void run_hk(at_session *s, const char *fixture, const char *config_path)
{
    run_hk_plugin(s, fixture, config_path, NULL);
}

static char *write_conf(const char *dir, const char *name, const char *text);

static const at_tev *find_ev(const at_trace *t, const char *name, const char *field,
                             const char *value)
{
    long i = field ? at_find_field(t, name, field, value, 0) : at_find(t, NULL, name, 0);
    if (i < 0) {
        at_trace_dump(t, stderr);
        ck_abort_msg("no %s with %s=%s", name, field ? field : "-", value ? value : "-");
    }
    return &t->ev[i];
}

static void expect_field(const at_tev *e, const char *f, const char *want)
{
    const char *v = at_ev_field(e, f);
    ck_assert_msg(v && !strcmp(v, want), "%s.%s = %s, want %s", e->name, f, v ? v : "(none)", want);
}

/* The Stop matching a Start (same activity id). */
static const at_tev *stop_of(const at_trace *t, const at_tev *start, const char *stop_name)
{
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->ev[i].name, stop_name) && !strcmp(t->ev[i].act_path, start->act_path))
            return &t->ev[i];
    ck_abort_msg("no %s for %s", stop_name, start->act_path);
    return NULL;
}

static const char *const variants[] = {"hk_calls", "hk_calls-now", "hk_calls-nopie"};

START_TEST(test_got_tier)
{
    at_session s;
    char *conf = data_path("got.conf");
    run_hk(&s, variants[_i], conf);
    const at_trace *t = &s.t;
    ck_assert_msg(strstr(s.r.err, "acttrace: 8 of 8 functions hooked (8 GOT, 0 entry)"), "%s",
                  s.r.err);
    /* int arguments and return */
    const at_tev *a = find_ev(t, "AddStart", "a", "2");
    expect_field(a, "b", "3");
    const at_tev *as = stop_of(t, a, "AddStop");
    expect_field(as, "Return", "5");
    expect_field(as, "Status", "0");
    /* doubles */
    const at_tev *sc = find_ev(t, "ScaleStart", NULL, NULL);
    expect_field(sc, "x", "1.5");
    expect_field(sc, "f", "4");
    expect_field(stop_of(t, sc, "ScaleStop"), "Return", "6");
    /* through dlsym(RTLD_DEFAULT)'s pointer: the wrapper; RTLD_NEXT still resolves from the caller */
    ck_assert_msg(strstr(s.r.out, "dlsym add 15 next 2\n"), "%s", s.r.out);
    expect_field(stop_of(t, find_ev(t, "AddStart", "a", "7"), "AddStop"), "Return", "15");
    /* a string return value */
    const at_tev *nm = find_ev(t, "NameStart", "id", "1");
    expect_field(stop_of(t, nm, "NameStop"), "Return", "\"one\"");
    /* the signature-less stub: a recursion through the library's PLT, nested */
    ck_assert_uint_eq(at_count(t, NULL, "RecurseStart"), 4);
    ck_assert_uint_eq(at_count(t, NULL, "RecurseStop"), 4);
    const at_tev *r0 = find_ev(t, "RecurseStart", NULL, NULL);
    long r1 = at_find(t, NULL, "RecurseStart", (size_t)(r0 - t->ev) + 1);
    ck_assert(r1 >= 0 && at_path_is_below(t->ev[r1].act_path, r0->act_path));
    /* nine arguments, three on the stack, through the stub: the program printed the right sum */
    ck_assert_uint_eq(at_count(t, NULL, "ManyStart"), 1);
    ck_assert_msg(strstr(s.r.out, "many 45\n"), "%s", s.r.out);
    const at_tev *mt = find_ev(t, "ManyTyped", "a", "1");
    expect_field(mt, "g", "7");
    expect_field(mt, "h", "8");
    expect_field(mt, "x", "9");
    expect_field(mt, "Return", "45");
    /* a pair by key: the failed open (-1) starts nothing; each close stops its own */
    ck_assert_uint_eq(at_count(t, NULL, "ConnStart"), 2);
    ck_assert_uint_eq(at_count(t, NULL, "ConnStop"), 2);
    const at_tev *c1 = find_ev(t, "ConnStart", "Return", "101");
    expect_field(c1, "n", "1");
    const at_tev *c0 = find_ev(t, "ConnStart", "Return", "100");
    ck_assert_msg(!at_path_is_below(c1->act_path, c0->act_path), "pairs nest: %s under %s",
                  c1->act_path, c0->act_path);
    const at_tev *st1 = stop_of(t, c1, "ConnStop");
    const at_tev *st0 = stop_of(t, c0, "ConnStop");
    ck_assert(st1 < st0); /* closed in reverse order */
    /* the Stop is made at the close's entry: nothing to do at its return, so the stub took no
     * return record and the function returned straight to its caller (run_hk also compared the
     * whole output with the untraced run's) */
    ck_assert_msg(strstr(s.r.out, "close returns home\n"), "%s", s.r.out);
    at_session_free(&s);
    free(conf);
}
END_TEST

START_TEST(test_entry_tier)
{
    at_session s;
    char *conf = data_path("entry.conf");
    run_hk(&s, variants[_i], conf);
    const at_trace *t = &s.t;
    ck_assert_msg(strstr(s.r.err, "acttrace: 12 of 15 functions hooked (1 GOT, 11 entry)"), "%s",
                  s.r.err);
    ck_assert_msg(strstr(s.r.err, "ident (function too short to patch (3 bytes, 5 needed))"), "%s",
                  s.r.err);
    ck_assert_msg(strstr(s.r.err, "backjump (the branch at +0x6 jumps back into the patched bytes)"),
                  "%s", s.r.err);
    ck_assert_msg(strstr(s.r.err, "hkplug_run hooked (entry) after dlopen("), "%s", s.r.err);
    /* int and string arguments of a static function */
    const at_tev *h = find_ev(t, "HandleStart", "fd", "4");
    expect_field(h, "url", "\"/a/b/c\"");
    expect_field(stop_of(t, h, "HandleStop"), "Return", "43");
    const at_tev *w = find_ev(t, "WeighStart", "w", "2");
    expect_field(w, "k", "3");
    expect_field(stop_of(t, w, "WeighStop"), "Return", "6.5");
    /* direct recursion, 'recursive': nested four deep */
    ck_assert_uint_eq(at_count(t, NULL, "FactStart"), 4);
    ck_assert_uint_eq(at_count(t, NULL, "FactStop"), 4);
    long f = at_find(t, NULL, "FactStart", 0);
    for (int k = 1; k < 4; k++) {
        long g = at_find(t, NULL, "FactStart", (size_t)f + 1);
        ck_assert(at_path_is_below(t->ev[g].act_path, t->ev[f].act_path));
        f = g;
    }
    ck_assert_uint_eq(at_count(t, NULL, "TinyStart"), 1);
    /* stacks: 'both' on Handle, the default (ACTTRACE_STACKS=start) on Fact, 'none' on Tiny; the
     * hooked function is the leaf, its caller next */
    ck_assert_uint_ge(h->nframes, 2);
    ck_assert_uint_ge(stop_of(t, h, "HandleStop")->nframes, 2);
    const at_tev *f0 = find_ev(t, "FactStart", NULL, NULL);
    ck_assert_uint_ge(f0->nframes, 2);
    ck_assert_uint_eq(stop_of(t, f0, "FactStop")->nframes, 0);
    ck_assert_uint_eq(find_ev(t, "TinyStart", NULL, NULL)->nframes, 0);
    /* longjmp over jumper: its Stop says abandoned, before the next hooked call */
    const at_tev *j = find_ev(t, "JumperStart", NULL, NULL);
    const at_tev *js = stop_of(t, j, "JumperStop");
    expect_field(js, "Status", "2");
    /* 20 live at once, all jumped over: each stopped as abandoned, innermost first, each inside
     * the one that called it */
    ck_assert_uint_eq(at_count(t, NULL, "DeepStart"), 20);
    ck_assert_uint_eq(at_count(t, NULL, "DeepStop"), 20);
    long deep[20];
    deep[0] = at_find(t, NULL, "DeepStart", 0);
    for (int k = 1; k < 20; k++) {
        deep[k] = at_find(t, NULL, "DeepStart", (size_t)deep[k - 1] + 1);
        ck_assert(at_path_is_below(t->ev[deep[k]].act_path, t->ev[deep[k - 1]].act_path));
    }
    const at_tev *prev_stop = NULL;
    for (int k = 19; k >= 0; k--) {
        const at_tev *st = stop_of(t, &t->ev[deep[k]], "DeepStop");
        expect_field(st, "Status", "2");
        if (prev_stop)
            ck_assert(prev_stop < st); /* innermost first */
        prev_stop = st;
    }
    const at_tev *add2 = &t->ev[at_find(t, NULL, "AddStart", (size_t)(j - t->ev))];
    ck_assert(js < add2);
    ck_assert_msg(!at_path_is_below(add2->act_path, j->act_path), "the call after the longjmp "
                  "runs inside the abandoned activity");
    /* the dlopen'ed plugin, called through dlsym's pointer */
    const at_tev *p = find_ev(t, "PlugStart", "x", "5");
    expect_field(stop_of(t, p, "PlugStop"), "Return", "15");
    /* relocated first instructions: the program computed the same (run_hk compared its output)
     * and each call was seen with its arguments and results */
    ck_assert_msg(strstr(s.r.out, "rip 11 6 call 10 jcc 5 -1 endbr 42\n"), "%s", s.r.out);
    expect_field(stop_of(t, find_ev(t, "RipStart", "x", "5"), "RipStop"), "Return", "11");
    ck_assert_uint_eq(at_count(t, NULL, "CallFirstStop"), 1);
    expect_field(stop_of(t, find_ev(t, "JccStart", "x", "0"), "JccStop"), "Return", "-1");
    expect_field(stop_of(t, find_ev(t, "JccStart", "x", "4"), "JccStop"), "Return", "5");
    expect_field(stop_of(t, find_ev(t, "EndbrStart", "x", "40"), "EndbrStop"), "Return", "42");
    /* the typed stub reads stack arguments from the caller's frame */
    ck_assert_msg(strstr(s.r.out, "wide 61\n"), "%s", s.r.out);
    const at_tev *wd = find_ev(t, "WideStart", "a", "1");
    expect_field(wd, "f", "6");
    expect_field(wd, "g", "7"); /* on the stack */
    expect_field(wd, "x0", "1");
    expect_field(wd, "x8", "2.5"); /* on the stack */
    expect_field(stop_of(t, wd, "WideStop"), "Return", "61");
    ck_assert_uint_eq(at_count(t, NULL, "IdentStart"), 0);
    ck_assert_uint_eq(at_count(t, NULL, "BackStart"), 0);
    at_session_free(&s);
    free(conf);
}
END_TEST

/* dlopen by a bare name that only the executable's DT_RUNPATH finds: glibc searches the caller's
 * RUNPATH, so the shim's dlopen wrapper must leave the caller's return address in place; the
 * plugin's function is hooked at the program's next dlsym. */
START_TEST(test_dlopen_bare_name)
{
    /* ASan's own dlopen interceptor calls dlopen from libasan: the caller's RUNPATH is lost with
     * or without the shim (the program alone fails the same under LD_PRELOAD=libasan.so) */
    if (getenv("ACTTRACE_ASAN"))
        return;
    at_session s;
    char *conf = data_path("entry.conf");
    run_hk_plugin(&s, "hk_calls", conf, "libhkplug.so");
    ck_assert_msg(strstr(s.r.out, "plugin 15\n"), "%s", s.r.out);
    ck_assert_msg(strstr(s.r.err, "hkplug_run hooked (entry) after dlopen("), "%s", s.r.err);
    expect_field(stop_of(&s.t, find_ev(&s.t, "PlugStart", "x", "5"), "PlugStop"), "Return", "15");
    at_session_free(&s);
    free(conf);
}
END_TEST

/* Names: a static function of a stripped executable found in its separate debug file, lib!sym,
 * sym@VERSION (an event on return, capturing the return value), and the [trace] settings
 * (provider, output pattern). */
START_TEST(test_names_and_trace_settings)
{
    at_session s;
    char *conf = data_path("names.conf");
    run_hk(&s, "hk_calls-dbg", conf);
    const at_trace *t = &s.t;
    ck_assert_msg(strstr(s.r.err, "acttrace: 3 of 3 functions hooked (2 GOT, 1 entry)"), "%s",
                  s.r.err);
    ck_assert_msg(strstr(t->path, "/names-"), "trace file %s", t->path);
    const at_tev *h = find_ev(t, "HandleStart", "fd", "4");
    ck_assert_str_eq(h->provider, "Names");
    expect_field(stop_of(t, h, "HandleStop"), "Return", "43");
    find_ev(t, "AddStart", "a", "10");
    /* close(dup(1)): an Info event written on return, with the fd and the result */
    const at_tev *c = find_ev(t, "Close", "Return", "0");
    ck_assert_uint_eq(c->opcode, 0);
    ck_assert_int_ge(atoi(at_ev_field(c, "fd")), 3);
    at_session_free(&s);
    free(conf);
}
END_TEST

/* hk_many under the config text, traced; it computes what it computes untraced */
static void run_many(at_session *s, const char *tag, const char *config_text)
{
    char *dir = at_tmpdir(tag);
    char *conf = write_conf(dir, "many.conf", config_text);
    char env0[4200];
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s", conf);
    const char *env[] = {env0, NULL};
    const char *argv[] = {"hk_many", NULL};
    ck_assert_int_eq(at_session_run(s, tag, argv, env), 0);
    char d[512];
    ck_assert_msg(s->r.exited && s->r.status == 0 && s->has_trace && s->t.complete, "%s",
                  at_session_describe(s, d, sizeof d));
    ck_assert_str_eq(s->r.out, "sum 259120\nnarrow 4000035241\n");
    at_rmtree(dir);
    free(dir);
    free(conf);
}

/* More hooks than the stub's first table holds (64, on the page of its other tables): every one of
 * 80 entry-patched functions gets its own Start and Stop, with the result the program computes
 * untraced. */
START_TEST(test_many_hooks)
{
    char text[80 * 48] = "";
    for (int i = 0; i < 80; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text),
                 "[activity Many%d]\nfunction = many_%d\n", i, i);
    at_session s;
    run_many(&s, "hkmany", text);
    ck_assert_msg(strstr(s.r.err, "80 of 80 functions hooked"), "%s", s.r.err);
    for (int i = 0; i < 80; i++) {
        char start[32], stop[32];
        snprintf(start, sizeof start, "Many%dStart", i);
        snprintf(stop, sizeof stop, "Many%dStop", i);
        ck_assert_msg(at_count(&s.t, NULL, start) == 1 && at_count(&s.t, NULL, stop) == 1,
                      "many_%d: %zu Start, %zu Stop", i, at_count(&s.t, NULL, start),
                      at_count(&s.t, NULL, stop));
    }
    at_session_free(&s);
}
END_TEST

/* Parameters narrower than their registers, captured as the function sees them: sign- or
 * zero-extended from their own width, and a float as a double. */
START_TEST(test_narrow_captures)
{
    at_session s;
    run_many(&s, "hknarrow",
             "[event Narrow]\nfunction = narrow\n"
             "signature = long narrow(signed char a, unsigned char b, short c, unsigned short d, "
             "int e, unsigned f, float g)\n"
             "capture = a, b, c, d, e, f, g, return\n");
    const at_tev *e = find_ev(&s.t, "Narrow", NULL, NULL);
    expect_field(e, "a", "-5");
    expect_field(e, "b", "250");
    expect_field(e, "c", "-30000");
    expect_field(e, "d", "65000");
    expect_field(e, "e", "-7");
    expect_field(e, "f", "4000000000");
    expect_field(e, "g", "1.5");
    expect_field(e, "Return", "4000035241");
    at_session_free(&s);
}
END_TEST

/* [trace] level filters: activities at info are filtered out at level = warning; an event declared
 * at warning passes. The program runs the same. */
START_TEST(test_level_filter)
{
    char *dir = at_tmpdir("hklevel");
    char *conf = write_conf(dir, "level.conf",
                            "[trace]\nlevel = warning\n"
                            "[activity Add]\nfunction = hkfx_add\n"
                            "[event Handled]\nfunction = handle\nlevel = warning\n");
    at_session s;
    run_hk(&s, "hk_calls", conf);
    ck_assert_uint_eq(at_count(&s.t, NULL, "AddStart"), 0);
    ck_assert_uint_eq(at_count(&s.t, NULL, "Handled"), 1);
    at_session_free(&s);
    at_rmtree(dir);
    free(dir);
    free(conf);
}
END_TEST

/* Hooking functions the shim's own machinery also calls (malloc, free and close: libelf, libunwind
 * while stacks are taken, the dlopen rescan): those inner calls pass straight through, the
 * program's own are seen, and the program runs the same. */
START_TEST(test_reentrant_libc_hooks)
{
    char *dir = at_tmpdir("hkreent");
    char *conf = write_conf(dir, "libc.conf",
                            "[activity Malloc]\nfunction = malloc\n"
                            "signature = void *malloc(size_t n)\ncapture = n, return\n"
                            "stacks = both\nrecursive = yes\n"
                            "[activity Free]\nfunction = free\nstacks = both\n"
                            "[activity Close]\nfunction = close\n"
                            "signature = int close(int fd)\ncapture = fd, return\nstacks = both\n"
                            "[event Closing]\nfunction = close\n"
                            "signature = int close(int fd)\ncapture = fd\n");
    at_session s;
    run_hk(&s, "hk_calls", conf);
    ck_assert_msg(strstr(s.r.err, "acttrace: 4 of 4 functions hooked (4 GOT, 0 entry)"), "%s",
                  s.r.err);
    ck_assert_uint_ge(at_count(&s.t, NULL, "CloseStart"), 1); /* close(dup(1)) */
    /* one function, two entries: both see every call (the second wrapper calls the first) */
    ck_assert_uint_eq(at_count(&s.t, NULL, "Closing"), at_count(&s.t, NULL, "CloseStart"));
    ck_assert_uint_eq(at_count(&s.t, NULL, "CloseStart"), at_count(&s.t, NULL, "CloseStop"));
    ck_assert_uint_eq(at_count(&s.t, NULL, "MallocStart"), at_count(&s.t, NULL, "MallocStop"));
    at_session_free(&s);
    at_rmtree(dir);
    free(dir);
    free(conf);
}
END_TEST

/* A callback flow hooked through the GOT (the typed stub, then a libffi closure as
 * ACTTRACE_HOOK_WRAPPER=ffi makes it): the job deferred inside Submit and run from inside Other
 * (nested in Submit) is Submit's child, not Other's. */
START_TEST(test_callback_flow_got)
{
    setenv("ACTTRACE_HOOK_WRAPPER", _i ? "ffi" : "stub", 1);
    at_session s;
    char *conf = data_path("defer.conf");
    run_hk(&s, "hk_calls", conf);
    const at_trace *t = &s.t;
    ck_assert_msg(strstr(s.r.err, "acttrace: 4 of 4 functions hooked (1 GOT, 3 entry)"), "%s",
                  s.r.err);
    ck_assert_msg(strstr(s.r.out, "deferred 12\n"), "%s", s.r.out);
    const at_tev *sub = find_ev(t, "SubmitStart", NULL, NULL);
    const at_tev *oth = find_ev(t, "OtherStart", NULL, NULL);
    const at_tev *job = find_ev(t, "DeferredStart", NULL, NULL);
    ck_assert(at_path_is_below(oth->act_path, sub->act_path));
    char parent[96];
    at_path_parent(job->act_path, parent, sizeof parent);
    ck_assert_msg(!strcmp(parent, sub->act_path), "job %s, submit %s, other %s", job->act_path,
                  sub->act_path, oth->act_path);
    at_session_free(&s);
    free(conf);
}
END_TEST

/* tier = entry on a library function catches the library's own calls too (hkfx_step calls
 * hkfx_recurse through its PLT, hkfx_recurse is patched itself); tier = got on a static function
 * is refused with its reason. */
START_TEST(test_tier_setting)
{
    char *dir = at_tmpdir("hktier");
    char *conf = write_conf(dir, "tier.conf",
                            "[activity Rec]\nfunction = hkfx_recurse\ntier = entry\nrecursive = yes\n"
                            "[activity Handle]\nfunction = handle\ntier = got\n");
    at_session s;
    run_hk(&s, "hk_calls", conf);
    ck_assert_msg(strstr(s.r.err, "acttrace: 1 of 2 functions hooked (0 GOT, 1 entry); skipped: "
                                  "handle (no module imports it through a GOT slot (tier = got))"),
                  "%s", s.r.err);
    ck_assert_uint_eq(at_count(&s.t, NULL, "RecStart"), 4);
    ck_assert_uint_eq(at_count(&s.t, NULL, "RecStop"), 4);
    at_session_free(&s);
    at_rmtree(dir);
    free(dir);
    free(conf);
}
END_TEST

/* A traced program's children stay quiet unless something is refused there: a shell running the
 * fixture prints one summary line (its own: nothing of the config is in sh), the fixture none (all
 * hooked), and the fixture's trace still has its activities. */
START_TEST(test_child_summary_quiet)
{
    char *conf = data_path("got.conf");
    char *fx = at_fixture_path("hk_calls");
    char cmd[4300], env0[4200];
    snprintf(cmd, sizeof cmd, "%s; exit $?", fx);
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s", conf);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    const char *env[] = {env0, NULL};
    at_session s;
    ck_assert_int_eq(at_session_run(&s, "hkchild", argv, env), 0);
    ck_assert_msg(s.r.exited && s.r.status == 3, "%s", s.r.err);
    int lines = 0;
    for (const char *q = s.r.err; (q = strstr(q, "acttrace:")); q++)
        lines++;
    ck_assert_msg(lines == 1, "%d lines: %s", lines, s.r.err);
    ck_assert_msg(strstr(s.r.err, "acttrace: 0 of 8 functions hooked"), "%s", s.r.err);
    at_session_free(&s);
    free(fx);
    free(conf);
}
END_TEST

/* Without 'recursive' a Start of a live name stops it first (EventSource): no nesting. */
START_TEST(test_not_recursive)
{
    at_session s;
    char *conf = data_path("norec.conf");
    run_hk(&s, "hk_calls", conf);
    const at_trace *t = &s.t;
    const char *names[] = {"FactStart", "RecurseStart"};
    for (int n = 0; n < 2; n++) {
        ck_assert_uint_eq(at_count(t, NULL, names[n]), 4);
        for (long i = at_find(t, NULL, names[n], 0); i >= 0;
             i = at_find(t, NULL, names[n], (size_t)i + 1))
            for (long k = at_find(t, NULL, names[n], 0); k >= 0;
                 k = at_find(t, NULL, names[n], (size_t)k + 1))
                ck_assert_msg(!at_path_is_below(t->ev[i].act_path, t->ev[k].act_path),
                              "%s nests: %s under %s", names[n], t->ev[i].act_path,
                              t->ev[k].act_path);
    }
    at_session_free(&s);
    free(conf);
}
END_TEST

/* Declared flow rules: a callback pool and a keyed queue of the program's own, whose threads exist
 * before any request: the job and the item of request N run in request N's activity. */
START_TEST(test_flow_rules)
{
    at_session s;
    char *conf = data_path("pool.conf");
    char env0[4200];
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s", conf);
    const char *env[] = {env0, NULL};
    const char *argv[] = {"hk_pool", NULL};
    ck_assert_int_eq(at_session_run(&s, "hkpool", argv, env), 0);
    char d[512];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace, "%s",
                  at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(s.r.out, "sum 318\n");
    ck_assert_msg(strstr(s.r.err, "acttrace: 6 of 6 functions hooked (0 GOT, 6 entry)"), "%s",
                  s.r.err);
    const at_trace *t = &s.t;
    for (int id = 1; id <= 3; id++) {
        char v[16], it[16];
        snprintf(v, sizeof v, "%d", id);
        snprintf(it, sizeof it, "%d", id + 100);
        const at_tev *req = find_ev(t, "ReqStart", "id", v);
        const at_tev *job = find_ev(t, "JobStart", "id", v);
        const at_tev *item = find_ev(t, "ItemStart", "id", it);
        expect_field(job, "weight", "2");
        ck_assert_msg(at_path_is_below(job->act_path, req->act_path), "job %d in %s, request %s", id,
                      job->act_path, req->act_path);
        ck_assert_msg(at_path_is_below(item->act_path, req->act_path), "item %d in %s, request %s",
                      id, item->act_path, req->act_path);
        ck_assert(job->thread != req->thread && item->thread != req->thread);
    }
    at_session_free(&s);
    free(conf);
}
END_TEST

/* ---- libmicrohttpd ---- */

#define MHD_NREQ 4

/* One HTTP/1.0 GET (the server closes after answering); true when it answered 200. */
static bool http_get(int port, int i)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return false;
    }
    struct timeval tv = {10, 0}; /* a server that never answers fails the test, not hangs it */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char req[128], buf[1024];
    int n = snprintf(req, sizeof req, "GET /r%d HTTP/1.0\r\n\r\n", i);
    bool ok = write(fd, req, (size_t)n) == n;
    size_t got = 0;
    ssize_t r;
    while (ok && (r = read(fd, buf + got, sizeof buf - 1 - got)) > 0 && got < sizeof buf - 1)
        got += (size_t)r;
    buf[got] = 0;
    close(fd);
    return ok && strstr(buf, " 200 ");
}

static void run_mhd(at_session *s, const char *mode)
{
    memset(s, 0, sizeof *s);
    s->dir = at_tmpdir("mhd");
    int port = at_free_port();
    char ps[16], ns[16], env0[4200];
    snprintf(ps, sizeof ps, "%d", port);
    snprintf(ns, sizeof ns, "%d", MHD_NREQ);
    char *fx = at_fixture_path("mhd_server");
    char *conf = data_path("mhd.conf");
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s", conf);
    const char *argv[] = {fx, mode, ps, ns, NULL};
    const char *env[] = {env0, NULL};
    at_run_opts o = {.argv = argv, .env = env, .cwd = s->dir};
    at_proc p;
    ck_assert_int_eq(at_spawn(&o, &p), 0);
    /* wait for "listening" on its stdout (no probe connection: it would be a connection too) */
    bool up = false;
    for (int i = 0; i < 400 && !up; i++) {
        char *out = at_read_file(p.outpath, NULL);
        up = out && strstr(out, "listening");
        free(out);
        if (!up)
            nanosleep(&(struct timespec){0, 25 * 1000 * 1000}, NULL);
    }
    int ok = 0;
    for (int i = 0; i < MHD_NREQ && up; i++)
        ok += http_get(port, i);
    ck_assert_int_eq(at_wait(&p, &s->r), 0);
    char d[1024];
    ck_assert_msg(up && ok == MHD_NREQ, "%d of %d answered: %s", ok, MHD_NREQ, s->r.err);
    ck_assert_msg(s->r.exited && s->r.status == 0, "%s", at_run_describe(&s->r, d, sizeof d));
    ck_assert_msg(strstr(s->r.err, "acttrace: 3 of 3 functions hooked (2 GOT, 1 entry)"), "%s",
                  s->r.err);
    char *path = at_trace_file_for_pid(s->dir, s->r.pid);
    ck_assert(path);
    s->has_trace = true;
    s->load_rc = at_trace_load(path, &s->t);
    ck_assert_msg(s->t.complete, "%s", s->t.err);
    free(path);
    free(conf);
    free(fx);
}

/* Thread per connection: the listener accepts, each connection's thread begins inside that
 * connection's activity and its requests are children of it. */
START_TEST(test_mhd_thread_per_connection)
{
    at_session s;
    run_mhd(&s, "thread");
    const at_trace *t = &s.t;
    ck_assert_uint_eq(at_count(t, "Mhd", "ConnectionStart"), MHD_NREQ);
    ck_assert_uint_eq(at_count(t, "Mhd", "ConnectionStop"), MHD_NREQ);
    for (long c = at_find(t, "Mhd", "ConnectionStart", 0); c >= 0;
         c = at_find(t, "Mhd", "ConnectionStart", (size_t)c + 1)) {
        const at_tev *cs = &t->ev[c];
        long b = at_find(t, "acttrace-shim", "ThreadBegin", 0);
        for (; b >= 0; b = at_find(t, "acttrace-shim", "ThreadBegin", (size_t)b + 1))
            if (!strcmp(t->ev[b].act_path, cs->act_path))
                break;
        ck_assert_msg(b >= 0, "no connection thread began in %s", cs->act_path);
        ck_assert(t->ev[b].thread != cs->thread);
        size_t reqs = 0;
        for (long r = at_find(t, "Mhd", "RequestStart", 0); r >= 0;
             r = at_find(t, "Mhd", "RequestStart", (size_t)r + 1))
            if (at_path_is_below(t->ev[r].act_path, cs->act_path)) {
                ck_assert(t->ev[r].thread == t->ev[b].thread);
                reqs++;
            }
        ck_assert_msg(reqs > 0, "no request inside %s", cs->act_path);
    }
    at_session_free(&s);
}
END_TEST

/* Thread pool: every pool thread accepts for itself, so no activity may cross threads: each
 * connection starts, runs its requests and stops on one thread, and no thread begins inside one. */
START_TEST(test_mhd_thread_pool)
{
    at_session s;
    run_mhd(&s, "pool");
    const at_trace *t = &s.t;
    ck_assert_uint_eq(at_count(t, "Mhd", "ConnectionStart"), MHD_NREQ);
    for (long c = at_find(t, "Mhd", "ConnectionStart", 0); c >= 0;
         c = at_find(t, "Mhd", "ConnectionStart", (size_t)c + 1)) {
        const at_tev *cs = &t->ev[c];
        size_t inside = 0;
        for (size_t i = 0; i < t->n; i++)
            if (at_path_within(t->ev[i].act_path, cs->act_path)) {
                ck_assert_msg(t->ev[i].thread == cs->thread, "%s of %s on another thread",
                              t->ev[i].name, cs->act_path);
                inside++;
            }
        ck_assert_msg(inside >= 4, "%zu events in %s", inside, cs->act_path);
        ck_assert(stop_of(t, cs, "ConnectionStop")->thread == cs->thread);
    }
    for (long b = at_find(t, "acttrace-shim", "ThreadBegin", 0); b >= 0;
         b = at_find(t, "acttrace-shim", "ThreadBegin", (size_t)b + 1))
        ck_assert_str_eq(t->ev[b].act_path, "");
    at_session_free(&s);
}
END_TEST

static char *write_conf(const char *dir, const char *name, const char *text)
{
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    ck_assert(f);
    fputs(text, f);
    fclose(f);
    return p;
}

static char *handle_offset(void)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "nm %s/fixtures/hk_calls | awk '$3 == \"handle\" {print $1}'",
             at_build_dir());
    FILE *f = popen(cmd, "r");
    ck_assert(f);
    static char off[64];
    ck_assert(fgets(off, sizeof off, f));
    pclose(f);
    off[strcspn(off, "\n")] = 0;
    char *z = off;
    while (*z == '0' && z[1])
        z++;
    return z;
}

/* A stripped binary, hooked by module+offset (the offset nm gives for the unstripped build of the
 * same source), guarded by its build-id: the right id hooks, a wrong one refuses. */
START_TEST(test_stripped_offset)
{
    char *dir = at_tmpdir("hkstrip");
    char exe[4200], id[128] = "";
    snprintf(exe, sizeof exe, "%s/fixtures/hk_calls-stripped", at_build_dir());
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "readelf -n %s | awk '/Build ID/ {print $3}'", exe);
    FILE *f = popen(cmd, "r");
    ck_assert(f && fgets(id, sizeof id, f));
    pclose(f);
    id[strcspn(id, "\n")] = 0;
    const char *off = handle_offset();
    char text[1024];
    snprintf(text, sizeof text,
             "[activity Handle]\nfunction = hk_calls-stripped+0x%s\nbuild_id = %s\n"
             "signature = int f(int fd, const char *url)\ncapture = fd, url, return\n",
             off, id);
    char *good = write_conf(dir, "good.conf", text);
    at_session s;
    run_hk(&s, "hk_calls-stripped", good);
    const at_tev *h = find_ev(&s.t, "HandleStart", "fd", "4");
    expect_field(h, "url", "\"/a/b/c\"");
    expect_field(stop_of(&s.t, h, "HandleStop"), "Return", "43");
    at_session_free(&s);

    /* acttrace check on an unguarded offset: it prints the build-id to pin */
    if (!getenv("ACTTRACE_ASAN")) {
        snprintf(text, sizeof text, "[activity Handle]\nfunction = hk_calls-stripped+0x%s\n", off);
        char *unguarded = write_conf(dir, "unguarded.conf", text);
        char acttrace[4200];
        snprintf(acttrace, sizeof acttrace, "%s/acttrace", at_build_dir());
        const char *cargv[] = {acttrace, "check", unguarded, "--", exe, NULL};
        at_run_opts co = {.argv = cargv, .no_preload = true};
        at_run_result cr;
        ck_assert_int_eq(at_run(&co, &cr), 0);
        char want[512];
        snprintf(want, sizeof want, "(module+offset, +0x%s); unguarded: add 'build_id = %s'; hooked "
                                    "by entry patching", off, id);
        ck_assert_msg(cr.exited && cr.status == 0 && strstr(cr.out, want), "%s\nwant %s", cr.out,
                      want);
        at_run_result_free(&cr);
        free(unguarded);
    }

    snprintf(text, sizeof text, "[activity Handle]\nfunction = hk_calls-stripped+0x%s\n"
                                "build_id = 00112233445566778899\n", off);
    char *bad = write_conf(dir, "bad.conf", text);
    run_hk_plugin_opt(&s, "hk_calls-stripped", bad, NULL, false); /* nothing hooked: no file */
    ck_assert_msg(strstr(s.r.err, "the config names 00112233445566778899"), "%s", s.r.err);
    at_session_free(&s);
    free(good);
    free(bad);
    at_rmtree(dir);
    free(dir);
}
END_TEST

START_TEST(test_cxx_exception)
{
    setenv("ACTTRACE_HOOK_WRAPPER", _i ? "ffi" : "stub", 1); /* the typed GOT hook's two wrappers */
    at_session s;
    char *conf = data_path("throw.conf");
    char env0[4200];
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s", conf);
    const char *env[] = {env0, NULL};
    const char *argv[] = {"hk_throw", NULL};
    ck_assert_int_eq(at_session_run(&s, "hkthrow", argv, env), 0);
    char d[512];
    ck_assert_msg(s.r.exited && s.r.status == 4 && s.has_trace, "%s",
                  at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(s.r.out, "ret -1\ncaught boom\nret 1\ncaught 42\ncall 1\ncaught 10\n");
    ck_assert_msg(strstr(s.r.err, "acttrace: 3 of 3 functions hooked (1 GOT, 2 entry)"), "%s",
                  s.r.err);
    const at_trace *t = &s.t;
    /* stub: one call returned (0), one unwound (1) */
    ck_assert_uint_eq(at_count(t, NULL, "ThrowStart"), 2);
    ck_assert_int_ge(at_find_field(t, "ThrowStop", "Status", "0", 0), 0);
    ck_assert_int_ge(at_find_field(t, "ThrowStop", "Status", "1", 0), 0);
    /* typed stub: the same */
    const at_tev *ty = find_ev(t, "TypedStart", "x", "21");
    expect_field(stop_of(t, ty, "TypedStop"), "Status", "1");
    const at_tev *ty0 = find_ev(t, "TypedStart", "x", "0");
    expect_field(stop_of(t, ty0, "TypedStop"), "Return", "1");
    /* the wrapper of a GOT slot: returned (Return 1), then unwound; the typed_thrower
     * inside it ran in its activity */
    const at_tev *c0 = find_ev(t, "CallStart", "x", "0");
    expect_field(stop_of(t, c0, "CallStop"), "Return", "1");
    const at_tev *c5 = find_ev(t, "CallStart", "x", "5");
    expect_field(stop_of(t, c5, "CallStop"), "Status", "1");
    const at_tev *inner = find_ev(t, "TypedStart", "x", "5");
    ck_assert(at_path_is_below(inner->act_path, c5->act_path));
    expect_field(stop_of(t, inner, "TypedStop"), "Status", "1");
    at_session_free(&s);
    free(conf);
}
END_TEST

START_TEST(test_check_command)
{
    /* acttrace check preloads the shim alone; the ASan-built shim needs the sanitizer runtime
     * loaded first, which the command does not know about */
    if (getenv("ACTTRACE_ASAN"))
        return;
    char acttrace[4200], fx[4200];
    snprintf(acttrace, sizeof acttrace, "%s/acttrace", at_build_dir());
    snprintf(fx, sizeof fx, "%s/fixtures/hk_calls", at_build_dir());
    char *conf = data_path("entry.conf");
    const char *argv[] = {acttrace, "check", conf, "--", fx, NULL};
    at_run_opts o = {.argv = argv, .no_preload = true};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 1, "status %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.out, "[activity Handle] handle: found in ") &&
                      strstr(r.out, "hk_calls (.symtab, +0x"),
                  "%s", r.out);
    ck_assert_msg(strstr(r.out, "hooked by entry patching, typed stub (arguments from the saved "
                                "registers)"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "[activity Add] hkfx_add: found in ") &&
                      strstr(r.out, "libhkfx.so (.dynsym, +0x") &&
                      strstr(r.out, "hooked by GOT (1 slot), signature-less stub"),
                  "%s", r.out);
    ck_assert_msg(strstr(r.out, "NOT hooked: function too short to patch (3 bytes, 5 needed)"),
                  "%s", r.out);
    ck_assert_msg(strstr(r.out, "[activity Plug] hkplug_run: not found now"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "12 of 15 functions can be hooked"), "%s", r.out);
    /* main never ran */
    ck_assert_msg(!strstr(r.out, "add 5"), "%s", r.out);
    at_run_result_free(&r);
    /* the GOT config: everything hookable, exit 0 */
    char *got = data_path("got.conf");
    argv[2] = got;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 0, "status %d: %s %s", r.status, r.out, r.err);
    ck_assert_msg(strstr(r.out, "8 of 8 functions can be hooked"), "%s", r.out);
    at_run_result_free(&r);
    /* a config error is reported by the tool itself */
    char *dir = at_tmpdir("hkcheck");
    char *bad = write_conf(dir, "bad.conf", "[activity A]\nfunction = f\nbogus = 1\n");
    argv[2] = bad;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert_msg(r.exited && r.status == 1 && strstr(r.err, "bad.conf:3:1: unknown key 'bogus'"),
                  "%s", r.err);
    at_run_result_free(&r);
    at_rmtree(dir);
    free(dir);
    free(bad);
    free(got);
    free(conf);
}
END_TEST

/* Bad configs: one "acttrace:" line naming FILE:LINE:COLUMN, nothing hooked, the program runs
 * with its own output and exit status (and is still traced by the core). */
static const struct {
    const char *text;
    const char *want;
} bad_configs[] = {
    {"[activity A]\nfunction = hkfx_add\nfuction = x\n", "bad.conf:3:1: unknown key 'fuction'"},
    {"[activty A]\n", "bad.conf:1:2: unknown section [activty]"},
    {"[activity A]\nfunction = hkfx_add\nsignature = int hkfx_add(int a, int b)\ncapture = c\n",
     "bad.conf:4:11: capture: 'c' is not a parameter of hkfx_add"},
    {"[activity A]\nfunction = hkfx_add\nsignature = int hkfx_add(blob a)\n",
     "bad.conf:3:26: unknown type 'blob'"},
    {"[activity A]\nstart = hkfx_open\n", "bad.conf:1:2: [activity A]: 'start' without 'stop'"},
    {"[trace]\nbuffer = huge\n", "bad.conf:2:10: 'huge': expected a size"},
    {"[activity A]\nfunction = hkfx_add\nrecursive = perhaps\n",
     "bad.conf:3:13: 'perhaps': expected yes or no"},
};

START_TEST(test_bad_config)
{
    char *dir = at_tmpdir("hkbad");
    char *conf = write_conf(dir, "bad.conf", bad_configs[_i].text);
    at_session s;
    /* nothing hooked, nothing recorded: no file */
    run_hk_plugin_opt(&s, "hk_calls", conf, NULL, false);
    ck_assert_msg(strstr(s.r.err, bad_configs[_i].want), "got: %s\nwant: %s", s.r.err,
                  bad_configs[_i].want);
    ck_assert_msg(strstr(s.r.err, "; no function is hooked\n"), "%s", s.r.err);
    int lines = 0;
    for (const char *p = s.r.err; (p = strstr(p, "acttrace:")); p++)
        lines++;
    ck_assert_int_eq(lines, 1);
    at_session_free(&s);
    at_rmtree(dir);
    free(dir);
    free(conf);
}
END_TEST

/* A symbol no module has: said once, the rest hooked, the program unchanged. */
START_TEST(test_missing_symbol)
{
    char *dir = at_tmpdir("hkmiss");
    char *conf = write_conf(dir, "miss.conf",
                            "[activity Ghost]\nfunction = no_such_function\n"
                            "[activity Add]\nfunction = hkfx_add\n"
                            "[activity Lib]\nfunction = libnothere!hkfx_add\n");
    at_session s;
    run_hk(&s, "hk_calls", conf);
    ck_assert_msg(strstr(s.r.err, "acttrace: 1 of 3 functions hooked (1 GOT, 0 entry); skipped: "
                                  "no_such_function (no function 'no_such_function' in any loaded "
                                  "module"),
                  "%s", s.r.err);
    ck_assert_msg(strstr(s.r.err, "libnothere!hkfx_add (no loaded module is called 'libnothere')"),
                  "%s", s.r.err);
    ck_assert_uint_eq(at_count(&s.t, NULL, "AddStart"), 3); /* two calls, one through dlsym */
    at_session_free(&s);
    at_rmtree(dir);
    free(dir);
    free(conf);
}
END_TEST

/* hk_io traced with config (io.conf, io_plain.conf) under wrapper; returns its dump's acttrace/ event
 * lines with what differs from run to run taken out (the time, the thread, the pid in each activity
 * id's checksum) (malloc'd). The program's output must equal the untraced run's; hooked: the
 * shim's count of the functions hooked. */
static char *io_run(const char *config, const char *wrapper, const char *untraced_out,
                    const char *hooked)
{
    char *conf = data_path(config), env0[4200], env1[64];
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s", conf);
    snprintf(env1, sizeof env1, "ACTTRACE_HOOK_WRAPPER=%s", wrapper);
    const char *env[] = {env0, env1, NULL};
    const char *argv[] = {"hk_io", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run(&s, "hookio", argv, env), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.t.complete, "%s: %s", wrapper,
                  at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(s.r.out, untraced_out);
    /* every rule hooked where the program imports the call (read with its alias __read_chk) */
    ck_assert_msg(strstr(s.r.err, hooked), "%s", s.r.err);
    at_run_result r;
    const char *args[] = {"dump", s.t.path, NULL};
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(r.exited && r.status == 0, "dump: %s", r.err);
    size_t cap = strlen(r.out) + 1, n = 0;
    char *out = malloc(cap);
    for (const char *l = r.out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *ev = strstr(l, "acttrace/"), *eol = strchr(l, '\n');
        if (!ev || (eol && ev > eol))
            continue;
        /* "acttrace/NAME OPCODE act=GUID PATH ..." without the GUID's last group (the checksum) */
        const char *act = strstr(ev, "act="), *sp = act ? strchr(act, ' ') : NULL;
        size_t len = eol ? (size_t)(eol - ev) : strlen(ev);
        if (act && sp && (!eol || sp < eol)) {
            n += (size_t)snprintf(out + n, cap - n, "%.*s%.*s\n", (int)(act - ev), ev,
                                  (int)(len - (size_t)(sp - ev)), sp);
        } else {
            n += (size_t)snprintf(out + n, cap - n, "%.*s\n", (int)len, ev);
        }
    }
    /* a related id's too (its checksum has the pid) */
    for (char *p = strstr(out, " rel="); p; p = strstr(p + 1, " rel="))
        if (strlen(p + 5) >= 36 && p[5 + 8] == '-' && p[5 + 13] == '-' && p[5 + 36] == ' ')
            memmove(p + 5, p + 5 + 36, strlen(p + 5 + 36) + 1);
    at_run_result_free(&r);
    at_session_free(&s);
    free(conf);
    return out;
}

/* Each line's " stack=[...]" taken out, in place. */
static void strip_stacks(char *s)
{
    for (char *p = strstr(s, " stack=["); p; p = strstr(p, " stack=[")) {
        char *e = strchr(p, ']');
        if (!e)
            break;
        memmove(p, e + 1, strlen(e + 1) + 1);
    }
}

static unsigned count_of(const char *s, const char *what)
{
    unsigned n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
        n++;
    return n;
}

/* hk_io under config through its interposers and through the typed stub: the two runs' event lines
 * must be equal (with their stacks taken out when stacks is false); returns the interposers' lines
 * (malloc'd). hooked: the shim's count of the functions hooked. */
static char *io_direct_as_stub(const char *config, const char *hooked, bool stacks)
{
    char *fx = at_fixture_path("hk_io");
    const char *av[] = {fx, NULL};
    at_run_opts o = {.argv = av, .no_preload = true};
    at_run_result u;
    ck_assert_int_eq(at_run(&o, &u), 0);
    ck_assert_msg(u.exited && u.status == 0 && strstr(u.out, "client got re:three"), "%s", u.err);
    char *direct = io_run(config, "direct", u.out, hooked);
    char *stub = io_run(config, "stub", u.out, hooked);
    if (!stacks) {
        strip_stacks(direct);
        strip_stacks(stub);
    }
    /* the first line that differs, if any */
    size_t k = 0;
    while (direct[k] && direct[k] == stub[k])
        k++;
    while (k && direct[k - 1] != '\n')
        k--;
    ck_assert_msg(!strcmp(direct, stub), "direct: %.300s\nstub:   %.300s", direct + k, stub + k);
    free(stub);
    at_run_result_free(&u);
    free(fx);
    return direct;
}

/* Rules on calls the shim interposes itself (a server's accept4, recv, writev, close; the client's
 * send and read), which its interposers run (no stub, no return trampoline): the same events,
 * fields, activities and stacks as the typed stub records for them (ACTTRACE_HOOK_WRAPPER=stub),
 * every stack starting at the hooked function and going on from the program's function that
 * called it, and the program's output as untraced. */
START_TEST(test_interposed_rules)
{
    /* Under the sanitizer build its interceptors of these calls, preloaded first, call the shim's
     * interposers: a rule run there has the interceptor for its caller, where the stub in the
     * program's slot has the program. The events and fields are compared without the stacks. */
    char *direct = io_direct_as_stub("io.conf", "acttrace: 6 of 6 functions hooked (6 GOT, 0 entry)",
                                     !getenv("ACTTRACE_ASAN"));
    ck_assert_uint_eq(count_of(direct, "acttrace/ConnectionStart "), 1);
    ck_assert_uint_eq(count_of(direct, "acttrace/ConnectionStop "), 1);
    static const char *calls[][2] = {{"acttrace/Send ", "hk_io!client_send+"},
                                     {"acttrace/Recv ", "hk_io!server_recv+"},
                                     {"acttrace/Writev ", "hk_io!server_reply+"},
                                     {"acttrace/Read ", "hk_io!client_read+"}};
    for (size_t i = 0; i < 4; i++) {
        ck_assert_uint_eq(count_of(direct, calls[i][0]), 3);
        if (getenv("ACTTRACE_ASAN"))
            continue;
        /* each in the connection's activity, its stack the libc function then its caller */
        const char *e = strstr(direct, calls[i][0]);
        const char *st = strstr(e, "stack=[libc.so.6!"), *eol = strchr(e, '\n');
        ck_assert_msg(st && st < eol && strstr(e, " //1/1 ") < eol, "%.*s", (int)(eol - e), e);
        const char *second = strstr(st, "),");
        ck_assert_msg(second && !strncmp(second + 2, calls[i][1], strlen(calls[i][1])), "%.*s",
                      (int)(eol - e), e);
    }
    ck_assert_msg(!strstr(direct, "libacttrace"), "a frame of the shim: %.300s", strstr(direct, "libacttrace"));
    ck_assert_msg(strstr(direct, "fd=5 iovcnt=2 Return=8"), "%.600s", direct);
    const char *cs = strstr(direct, "acttrace/ConnectionStart "), *ce = strchr(cs, '\n');
    const char *ca = strstr(cs, "stack=[libc.so.6!accept4+");
    ck_assert_msg((ca && ca < ce) || getenv("ACTTRACE_ASAN"), "%.*s", (int)(ce - cs), cs);
    ck_assert_msg(strstr(cs, " //1/1 ") < ce, "%.*s", (int)(ce - cs), cs);
    free(direct);
}
END_TEST

/* The same without stacks, where an interposer writes an event from its own registers (hooks.c,
 * hk_fast) and skips the Stop of a pair whose key holds nothing (the close of a file), and with a
 * hooked call in progress around the writev (its Reply activity): the same events in the same
 * activities as the stub's. */
START_TEST(test_interposed_rules_nostack)
{
    char *direct = io_direct_as_stub("io_plain.conf",
                                     "acttrace: 7 of 7 functions hooked (6 GOT, 1 entry)", true);
    ck_assert_msg(!strstr(direct, "stack=["), "%.300s", strstr(direct, "stack=["));
    ck_assert_uint_eq(count_of(direct, "acttrace/ConnectionStart "), 1);
    ck_assert_uint_eq(count_of(direct, "acttrace/ConnectionStop "), 1);
    ck_assert_uint_eq(count_of(direct, "acttrace/ReplyStart "), 3);
    for (const char *e = strstr(direct, "acttrace/Writev "); e; e = strstr(e + 1, "acttrace/Writev ")) {
        /* inside the reply, inside the connection */
        const char *eol = strchr(e, '\n');
        ck_assert_msg(strstr(e, " //1/1/") && strstr(e, " //1/1/") < eol, "%.*s", (int)(eol - e), e);
        ck_assert_msg(strstr(e, "fd=5 iovcnt=2 Return=") < eol, "%.*s", (int)(eol - e), e);
    }
    ck_assert_uint_eq(count_of(direct, "acttrace/Writev "), 3);
    ck_assert_uint_eq(count_of(direct, "acttrace/Recv "), 3);
    free(direct);
}
END_TEST

/* A thread cancelled while blocked in a read whose rule the interposer runs (an event at the return):
 * the unwind goes through the interposer's frames, the thread ends as untraced, the program goes
 * on, and only the read that returned has its event. */
START_TEST(test_interposed_cancel)
{
    char *dir = at_tmpdir("hkcancel");
    char *conf = write_conf(dir, "cancel.conf",
                            "[event Read]\nfunction = read\n"
                            "signature = ssize_t read(int fd, void *buf, size_t n)\n"
                            "capture = fd, return\nstacks = both\n");
    char env0[4200];
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s", conf);
    const char *env[] = {env0, NULL};
    const char *argv[] = {"hk_cancel", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run(&s, "hookcancel", argv, env), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.t.complete, "%s",
                  at_session_describe(&s, d, sizeof d));
    ck_assert_str_eq(s.r.out, "cancelled 1\nread x\n");
    ck_assert_uint_eq(at_count(&s.t, NULL, "Read"), 1);
    const at_tev *e = find_ev(&s.t, "Read", "Return", "1");
    ck_assert_uint_eq(e->nframes > 1, 1);
    at_session_free(&s);
    at_rmtree(dir);
    free(dir);
    free(conf);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hooks");
    TCase *tc = tcase_create("hooks");
    tcase_set_timeout(tc, 0);
    tcase_add_loop_test(tc, test_got_tier, 0, 3);
    tcase_add_loop_test(tc, test_entry_tier, 0, 3);
    tcase_add_test(tc, test_not_recursive);
    tcase_add_test(tc, test_dlopen_bare_name);
    tcase_add_test(tc, test_names_and_trace_settings);
    tcase_add_test(tc, test_level_filter);
    tcase_add_test(tc, test_reentrant_libc_hooks);
    tcase_add_test(tc, test_child_summary_quiet);
    tcase_add_loop_test(tc, test_callback_flow_got, 0, 2);
    tcase_add_test(tc, test_tier_setting);
    tcase_add_test(tc, test_stripped_offset);
    tcase_add_loop_test(tc, test_cxx_exception, 0, 2);
    tcase_add_test(tc, test_flow_rules);
    tcase_add_test(tc, test_mhd_thread_per_connection);
    tcase_add_test(tc, test_mhd_thread_pool);
    tcase_add_test(tc, test_check_command);
    tcase_add_loop_test(tc, test_bad_config, 0, (int)(sizeof bad_configs / sizeof bad_configs[0]));
    tcase_add_test(tc, test_missing_symbol);
    tcase_add_test(tc, test_many_hooks);
    tcase_add_test(tc, test_narrow_captures);
    tcase_add_test(tc, test_interposed_rules);
    tcase_add_test(tc, test_interposed_rules_nostack);
    tcase_add_test(tc, test_interposed_cancel);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
