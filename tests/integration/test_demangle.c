/* test_demangle: C++ names are demangled in the file itself, so every reader shows the same name.
 * dm_names (a C++ program: namespaces, a class template's operator() and operator+, a function
 * template, a lambda) starts activities whose stacks pass through those functions. The file's
 * ProcessSymbol events, read back with the project's reader, name them demangled and mark the names
 * final; our tools print the same names; TraceEvent (the checker of tests/compat, oldest and newest
 * version) names every frame as our tools do. The same when the program dies of a signal before any
 * periodic flush: the emergency flush writes the names, on the signal handler's alternate stack.
 * The program sees no libstdc++ the shim would have loaded (dm_names itself links none). */
#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "at_testlib.h"
#include "at_tracegen.h"
#include "ntreader.h"
#include "nt_format.h"

static const char *const want_names[] = {
    "dmns::inner::Box<long>::operator()(int) const",
    "dmns::inner::Box<long>::operator+(dmns::inner::Box<long> const&) const",
    "int dmns::inner::scaled<short, 3>(short)",
    "main::{lambda(int)#1}::operator()(int) const",
};
#define NWANT (sizeof want_names / sizeof want_names[0])

static uint64_t rd_var(const uint8_t **p, const uint8_t *end)
{
    uint64_t v = 0;
    for (int sh = 0; *p < end && sh < 64; sh += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80))
            break;
    }
    return v;
}

/* Every ProcessSymbol of the file: each wanted name is there with the final flag, and no name is
 * left mangled (every symbol of this run is short and valid). */
static void check_file_names(const char *path)
{
    char err[512];
    nt_reader *r = nt_open(path, err, sizeof err);
    ck_assert_msg(r, "%s: %s", path, err);
    bool seen[NWANT] = {0};
    int nsym = 0;
    nt_event ev;
    while (nt_next(r, &ev) == 1) {
        if (!ev.meta || strcmp(ev.meta->provider, NT_UNIVERSAL_SYSTEM) || ev.meta->event_id != NT_US_PROCESS_SYMBOL)
            continue;
        const uint8_t *p = ev.payload, *end = ev.payload + ev.payload_len;
        for (int i = 0; i < 4; i++)
            (void)rd_var(&p, end); /* Id, MappingId, Start, End */
        ck_assert_int_ge(end - p, 2);
        uint16_t n;
        memcpy(&n, p, 2);
        p += 2;
        ck_assert_int_le(n, end - p);
        char name[4096];
        memcpy(name, p, n);
        name[n] = 0;
        p += n;
        ck_assert_msg(p < end && (rd_var(&p, end) & NT_US_SYMBOL_NAME_FINAL), "%s: no final flag", name);
        ck_assert_msg(strncmp(name, "_Z", 2) != 0, "left mangled: %s", name);
        ck_assert_msg(!strchr(name, '@'), "a version suffix: %s", name);
        for (size_t k = 0; k < NWANT; k++)
            seen[k] |= strcmp(name, want_names[k]) == 0;
        nsym++;
    }
    nt_close(r);
    for (size_t k = 0; k < NWANT; k++)
        ck_assert_msg(seen[k], "no ProcessSymbol named %s among %d in %s", want_names[k], nsym, path);
}

static char *tool_out(const char *const *args)
{
    at_run_result r;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(r.exited && r.status == 0, "%s %s: exit %d: %s", args[0], args[1], r.status, r.err);
    char *out = strdup(r.out);
    at_run_result_free(&r);
    return out;
}

/* Our tools: the stacks of `dump` and the names of `dump --frame-names` (as written) */
static void check_tools(const char *path)
{
    const char *dargs[] = {"dump", "--no-lines", path, NULL};
    char *dump = tool_out(dargs);
    const char *fargs[] = {"dump", "--frame-names", path, NULL};
    char *frames = tool_out(fargs);
    for (size_t k = 0; k < NWANT; k++) {
        char s[512];
        snprintf(s, sizeof s, "dm_names!%s+0x", want_names[k]);
        ck_assert_msg(strstr(dump, s), "no frame %s in the dump:\n%.4000s", s, dump);
        snprintf(s, sizeof s, "\tdm_names!%s\n", want_names[k]);
        ck_assert_msg(strstr(frames, s), "no frame %s in --frame-names:\n%s", s, frames);
    }
    ck_assert_msg(!strstr(frames, "!_Z"), "a mangled name:\n%s", frames);
    free(frames);
    free(dump);
}

/* The checker of tests/compat built against TraceEvent version (at_dotnet_built), or NULL without
 * dotnet, which AT_TRACEEVENT_REQUIRED=1 (CI) refuses. */
static char *checker_path(const char *version)
{
    char err[4600];
    char *p = at_dotnet_built(AT_SOURCE_DIR "/tests/compat/AtCompat.csproj", version,
                              "te-%s/bin/Release/net10.0/atcompat", err, sizeof err);
    ck_assert_msg(p || !err[0], "%s", err);
    ck_assert_msg(p || !at_traceevent_required(), "dotnet is not on PATH (AT_TRACEEVENT_REQUIRED=1)");
    return p;
}

/* TraceEvent names every frame as `acttrace dump --frame-names` does (the checker compares them) */
static void check_traceevent(const char *path)
{
    const char *versions[] = {"3.1.21", "4.0.0"};
    for (int v = 0; v < 2; v++) {
        char *chk = checker_path(versions[v]);
        if (!chk) {
            printf("test_demangle: dotnet is not on PATH: TraceEvent %s did not check the file\n", versions[v]);
            continue;
        }
        char tool[4200];
        snprintf(tool, sizeof tool, "%s/acttrace", at_build_dir());
        const char *cargv[] = {chk, "--acttrace", tool, path, NULL};
        at_run_opts o = {.argv = cargv, .no_preload = true};
        at_run_result r;
        ck_assert_int_eq(at_run(&o, &r), 0);
        ck_assert_msg(r.exited && r.status == 0 && strstr(r.out, "PASS ") && strstr(r.out, " named frames agree"),
                      "TraceEvent %s: %s%s", versions[v], r.out, r.err);
        at_run_result_free(&r);
        free(chk);
    }
}

START_TEST(test_names_demangled_in_the_file)
{
    const char *argv[] = {"dm_names", NULL};
    char *fx = at_fixture_path("dm_names");
    const char *uargv[] = {fx, NULL};
    at_run_opts uo = {.argv = uargv, .no_preload = true};
    at_run_result u;
    ck_assert_int_eq(at_run(&uo, &u), 0);
    at_session s;
    ck_assert_int_eq(at_session_run(&s, "demangle", argv, NULL), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.t.complete, "%s",
                  at_session_describe(&s, d, sizeof d));
    /* the same output: the shim loaded no libstdc++ into a program that has none (under
     * ACTTRACE_ASAN=1 the preloaded libubsan brings one) */
    const char *asan = getenv("ACTTRACE_ASAN");
    if (!(asan && !strcmp(asan, "1")))
        ck_assert_str_eq(s.r.out, u.out);
    else
        ck_assert_int_eq(strncmp(s.r.out, u.out, strcspn(u.out, " ")), 0);
    ck_assert_msg(strstr(u.out, "libstdc++=no"), "dm_names links libstdc++ now: %s", u.out);
    char *path = at_trace_file_for_pid(s.dir, s.r.pid);
    check_file_names(path);
    check_tools(path);
    check_traceevent(path);
    free(path);
    free(fx);
    at_run_result_free(&u);
    at_session_free(&s);
}
END_TEST

START_TEST(test_names_demangled_by_the_emergency_flush)
{
    /* no periodic flush: everything is written by the fatal-signal handler's flush */
    const char *env[] = {"ACTTRACE_FLUSH_MS=3600000", NULL};
    const char *argv[] = {"dm_names", "crash", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run(&s, "demangle-crash", argv, env), 0);
    char d[1024];
    ck_assert_msg(s.r.signaled && s.r.sig == SIGSEGV && s.has_trace && s.t.complete, "%s",
                  at_session_describe(&s, d, sizeof d));
    char *path = at_trace_file_for_pid(s.dir, s.r.pid);
    check_file_names(path);
    check_tools(path);
    free(path);
    at_session_free(&s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("demangle");
    TCase *tc = tcase_create("demangle");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_names_demangled_in_the_file);
    tcase_add_test(tc, test_names_demangled_by_the_emergency_flush);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
