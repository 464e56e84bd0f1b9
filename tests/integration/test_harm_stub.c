/* test_harm_stub: a function hooked by entry patching computes what it computes untraced. GCC's
 * IPA register allocation lets a caller in the same file keep values in call-clobbered registers
 * across the call of a callee known not to touch them, so the stub must leave every register, flag
 * and vector/x87/MXCSR state as the unhooked function does, not only what the ABI promises.
 *   hk_matrix at -O1 (one object) and -O0/-O2/-O3 (two objects): int, pointer, float/double and
 *     struct (registers, memory) arguments and returns, callers in the same file and in another,
 *     an OpenMP region calling a hooked static function: stdout, stderr and exit code as untraced,
 *     and every call's Start and Stop in the trace.
 *   hk_regs: assembly leaves whose callers check r10, r11, rcx, rdx, rsi, rdi, r8, r9, the flags,
 *     xmm/ymm/zmm0-31, k0-7, MXCSR and the x87 control word after the call, and what the leaf
 *     was entered with (r10, r11, flags), hooked without a signature, with one, and with stacks.
 *   hk_errno: errno after each hooked call is what the function left (untouched, or its own
 *     failure), through every way out of the hook's one-pass path, on two threads.
 *   libacttrace.so itself: no code the stub's C calls reach touches vector/x87 state, and it calls
 *     out only to functions known not to, or through the XSAVE guard (runtime/xstate.h). */
#include <check.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_testlib.h"

#define MATRIX_N 200

static char *conf_path(const char *name)
{
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/tests/data/hooks/%s", AT_SOURCE_DIR, name);
    return p;
}

/* Run fixture traced under conf and untraced; assert the same exit, stdout, and stderr but for the
 * shim's one line. A hang (the OpenMP case once spun for minutes) is killed at the deadline. */
static void run_both(at_session *s, const char *fixture, const char *conf, const char *arg)
{
    char env0[4200];
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s", conf);
    const char *env[] = {env0, NULL};
    const char *argv[] = {fixture, arg, NULL};
    ck_assert_int_eq(at_session_run_deadline(s, "harmstub", argv, env, 300), 0);
    char *fx = at_fixture_path(fixture);
    const char *av[] = {fx, arg, NULL};
    at_run_opts o = {.argv = av, .no_preload = true, .deadline_s = 300};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    char d[1024];
    ck_assert_msg(r.exited && r.status == 0, "%s untraced: %s", fixture,
                  at_run_describe(&r, d, sizeof d));
    ck_assert_msg(s->r.exited && s->r.status == r.status, "%s traced: %s\nstdout:\n%s", fixture,
                  at_session_describe(s, d, sizeof d), s->r.out);
    ck_assert_msg(!strcmp(s->r.out, r.out), "%s: traced stdout differs\ntraced:\n%s\nuntraced:\n%s",
                  fixture, s->r.out, r.out);
    /* stderr: the untraced run's, after the shim's summary line */
    const char *e = s->r.err;
    if (!strncmp(e, "acttrace: ", 10) && strchr(e, '\n'))
        e = strchr(e, '\n') + 1;
    ck_assert_msg(!strcmp(e, r.err), "%s: traced stderr differs: %s", fixture, s->r.err);
    ck_assert_msg(s->has_trace && s->load_rc == 0 && s->t.complete, "%s: %s", fixture,
                  at_session_describe(s, d, sizeof d));
    ck_assert_msg(s->t.events_lost == 0, "%s: %llu events lost", fixture,
                  (unsigned long long)s->t.events_lost);
    at_run_result_free(&r);
    free(fx);
}

static void expect_calls(const at_trace *t, const char *act, size_t n)
{
    char st[64], sp[64];
    snprintf(st, sizeof st, "%sStart", act);
    snprintf(sp, sizeof sp, "%sStop", act);
    ck_assert_msg(at_count(t, NULL, st) == n && at_count(t, NULL, sp) == n,
                  "%s: %zu Start, %zu Stop, want %zu each", act, at_count(t, NULL, st),
                  at_count(t, NULL, sp), n);
}

static const char *const matrix[] = {"hk_matrix", "hk_matrix-O0", "hk_matrix-O2", "hk_matrix-O3"};

START_TEST(test_matrix)
{
    at_session s;
    char *conf = conf_path("matrix.conf");
    char n[16];
    snprintf(n, sizeof n, "%d", MATRIX_N);
    run_both(&s, matrix[_i], conf, n);
    ck_assert_msg(strstr(s.r.err, "acttrace: 8 of 8 functions hooked (0 GOT, 8 entry)"), "%s: %s",
                  matrix[_i], s.r.err);
    const at_trace *t = &s.t;
    expect_calls(t, "Leaf", MATRIX_N);
    expect_calls(t, "Dbl", MATRIX_N);
    expect_calls(t, "Ptr", MATRIX_N);
    expect_calls(t, "Pair", MATRIX_N);
    expect_calls(t, "Big", MATRIX_N);
    expect_calls(t, "Ext", 2 * MATRIX_N);
    expect_calls(t, "ExtPair", 2 * MATRIX_N);
    expect_calls(t, "Work", MATRIX_N);
    /* typed arguments read from the registers the stub saved: a float widened without a vector
     * instruction, a double, an int and a string */
    long i = at_find_field(t, "DblStart", "x", "0", 0);
    ck_assert_msg(i >= 0, "no DblStart with x=0");
    const char *y = at_ev_field(&t->ev[i], "y");
    ck_assert_msg(y && !strcmp(y, "8"), "DblStart y = %s, want 8", y ? y : "(none)");
    i = at_find_field(t, "ExtStart", "d", "\"xyz\"", 0);
    ck_assert_msg(i >= 0, "no ExtStart with d=xyz");
    const char *e = at_ev_field(&t->ev[i], "e");
    ck_assert_msg(e && !strcmp(e, "1.5"), "ExtStart e = %s, want 1.5", e ? e : "(none)");
    at_session_free(&s);
    free(conf);
}
END_TEST

START_TEST(test_registers)
{
    at_session s;
    char *conf = conf_path("regs.conf");
    run_both(&s, "hk_regs", conf, NULL);
    ck_assert_msg(strstr(s.r.err, "acttrace: 3 of 3 functions hooked (0 GOT, 3 entry)"), "%s",
                  s.r.err);
    /* one line per call, each "ok" (the same as untraced, asserted above) */
    size_t n[3] = {0};
    for (const char *p = s.r.out; (p = strstr(p, "hkr_leaf")); p++)
        if (p[8] >= '1' && p[8] <= '3')
            n[p[8] - '1']++;
    ck_assert(n[0] >= 3 && n[1] == 3 && n[2] >= 3);
    expect_calls(&s.t, "Leaf1", n[0]);
    expect_calls(&s.t, "Leaf2", n[1]);
    ck_assert_uint_eq(at_count(&s.t, NULL, "Leaf3"), n[2]);
    at_session_free(&s);
    free(conf);
}
END_TEST

/* ---------------- the hook's code, read from the shim's disassembly ---------------- */

typedef struct fn {
    char *name;
    char **ins;
    size_t n, cap;
} fn;

/* What the hook's C code may call in libc: small functions with no vector instruction on their path
 * (glibc 2.36: disassembled), and what the XSAVE guards call (a guard listed with "*" may call
 * anything, its own functions included: they run with the state saved). */
static const char *const ext_ok[] = {
    "__errno_location", "clock_gettime", "pthread_getspecific", "pthread_mutex_lock",
    "pthread_mutex_unlock", "pthread_self", "sem_post", "sched_yield", "syscall", "mmap", "mmap64",
    "munmap", "getpid", "gettid",
    "__x86_get_cpuid_feature_leaf", /* a pointer into the loader's CPU data: lea, cmp, shl, ret */
    NULL};
static const char *const guarded[][2] = {{"at_xs_malloc", "*"},   /* smalloc.c */
                                         {"at_xs_free", "*"},
                                         {"at_xs_as_map", "*"},   /* asroom.c */
                                         {"at_xs_once", "pthread_once"},
                                         {"at_xs_setspecific", "pthread_setspecific"},
                                         {"at_xs_call", "*"},           /* the rare work it guards */
                                         {"walk_libunwind", "*"},       /* libunwind, guarded */
                                         {"walk_slow_unguarded", "*"}}; /* only from walk_slow */

/* Functions whose one indirect call has a single possible target, one of ext_ok: the monotonic
 * event clock's pointer (runtime/clock.c at_clock_gettime) is only ever set to clock_gettime. */
static const char *const indirect_to_ok[] = {"at_clock_mono_ns", NULL};
#define ERRNO_N 5000

START_TEST(test_errno)
{
    at_session s;
    char *conf = conf_path("errno.conf");
    char n[16];
    snprintf(n, sizeof n, "%d", ERRNO_N);
    run_both(&s, "hk_errno", conf, n);
    ck_assert_msg(strstr(s.r.out, "ok 5000"), "hk_errno: %s", s.r.out);
    ck_assert_msg(strstr(s.r.err, "acttrace: 5 of 5 functions hooked (0 GOT, 5 entry)"), "%s",
                  s.r.err);
    const at_trace *t = &s.t;
    expect_calls(t, "Keep", 2 * (2 * ERRNO_N + ERRNO_N / 100));
    expect_calls(t, "Fail", 2 * 2 * ERRNO_N);
    expect_calls(t, "Nested", 2 * ERRNO_N);
    expect_calls(t, "Stacked", 2 * ERRNO_N);
    expect_calls(t, "Jump", 2 * (ERRNO_N / 100));
    at_session_free(&s);
    free(conf);
}
END_TEST

static bool in_list(const char *const *l, const char *s)
{
    for (; *l; l++)
        if (!strcmp(*l, s))
            return true;
    return false;
}

/* "name.part.0" -> "name" */
static void base_name(const char *s, char *out, size_t n)
{
    snprintf(out, n, "%s", s);
    char *d = strchr(out, '.');
    if (d)
        *d = 0;
}

static bool guard_allows(const char *f, const char *target)
{
    char b[256];
    base_name(f, b, sizeof b);
    for (size_t i = 0; i < sizeof guarded / sizeof guarded[0]; i++)
        if (!strcmp(guarded[i][0], b) && (!strcmp(guarded[i][1], "*") || !strcmp(guarded[i][1], target)))
            return true;
    return false;
}

START_TEST(test_hook_code_is_vector_free)
{
    if (getenv("ACTTRACE_ASAN"))
        return; /* the sanitizers' own calls are everywhere */
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "objdump -d --no-show-raw-insn '%s' 2>/dev/null", at_shim_path());
    FILE *p = popen(cmd, "r");
    ck_assert(p);
    fn *fns = NULL;
    size_t nf = 0, cap = 0;
    char line[1024];
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        char name[512];
        unsigned long long a;
        if (sscanf(line, "%llx <%511[^>]>:", &a, name) == 2 && line[strlen(line) - 1] == ':') {
            if (nf == cap)
                fns = realloc(fns, (cap = cap ? 2 * cap : 1024) * sizeof *fns);
            fns[nf++] = (fn){.name = strdup(name)};
        } else if (nf && line[0] == ' ' && strchr(line, ':')) {
            fn *f = &fns[nf - 1];
            if (f->n == f->cap)
                f->ins = realloc(f->ins, (f->cap = f->cap ? 2 * f->cap : 64) * sizeof *f->ins);
            f->ins[f->n++] = strdup(line);
        }
    }
    pclose(p);
    ck_assert_msg(nf > 100, "no disassembly of %s (objdump)", at_shim_path());
    regex_t vec, call, ind;
    ck_assert(!regcomp(&vec, "%[xyz]mm|%k[0-7]|%st|\\bf(ld|st|nst|ldcw)[a-z]* |mxcsr|vzero",
                       REG_EXTENDED | REG_NOSUB));
    ck_assert(!regcomp(&call, "\\b(call|jmp)[a-z]*[ \t]+[0-9a-f]+ <([^>+]+)(\\+0x[0-9a-f]+)?>",
                       REG_EXTENDED));
    ck_assert(!regcomp(&ind, "\\bcall[a-z]*[ \t]+\\*", REG_EXTENDED | REG_NOSUB));
    /* a call through the GOT (-fno-plt), which objdump names: checked as a call through the PLT */
    regex_t got;
    ck_assert(!regcomp(&got, "\\bcall[a-z]*[ \t]+\\*0x[0-9a-f]+\\(%rip\\)[ \t]+# [0-9a-f]+ <([^@>+]+)[@>]",
                       REG_EXTENDED));
    bool *seen = calloc(nf, 1);
    size_t *stack = malloc(nf * sizeof *stack), sp = 0, reached = 0;
    for (size_t i = 0; i < nf; i++)
        if (!strcmp(fns[i].name, "at_stub_enter") || !strcmp(fns[i].name, "at_ret_exit"))
            seen[i] = true, stack[sp++] = i;
    ck_assert_uint_eq(sp, 2);
    char bad[1500] = ""; /* Check passes at most a few KiB of message */
    size_t nb = 0;
#define ADD_BAD(...)                                                                              \
    do {                                                                                          \
        if (nb < sizeof bad)                                                                      \
            nb += (size_t)snprintf(bad + nb, sizeof bad - nb, __VA_ARGS__);                       \
    } while (0)
    while (sp) {
        fn *f = &fns[stack[--sp]];
        reached++;
        for (size_t k = 0; k < f->n; k++) {
            const char *l = f->ins[k];
            regmatch_t m[4];
            if (!regexec(&vec, l, 0, NULL, 0)) /* (the guard's xsave/xrstor name no register) */
                ADD_BAD("\n  vector code in %s: %s", f->name, l);
            else if (!regexec(&got, l, 2, m, 0)) {
                char t[512];
                snprintf(t, sizeof t, "%.*s", (int)(m[1].rm_eo - m[1].rm_so), l + m[1].rm_so);
                if (!in_list(ext_ok, t) && !guard_allows(f->name, t))
                    ADD_BAD("\n  %s calls %s", f->name, t);
            }
            /* an indirect call (a jump through a register is a switch's table) */
            else if (!regexec(&ind, l, 0, NULL, 0) && !guard_allows(f->name, "*") &&
                     !strstr(l, "@plt") && !in_list(indirect_to_ok, f->name))
                ADD_BAD("\n  indirect call in %s: %s", f->name, l);
            else if (!regexec(&call, l, 4, m, 0)) {
                char t[512];
                snprintf(t, sizeof t, "%.*s", (int)(m[2].rm_eo - m[2].rm_so), l + m[2].rm_so);
                char *plt = strstr(t, "@plt");
                if (plt) {
                    *plt = 0;
                    if (!in_list(ext_ok, t) && !guard_allows(f->name, t))
                        ADD_BAD("\n  %s calls %s", f->name, t);
                } else if ((m[3].rm_so < 0 || !strncmp(l + m[1].rm_so, "call", 4)) &&
                           !guard_allows(f->name, "*")) {
                    for (size_t j = 0; j < nf; j++)
                        if (!seen[j] && !strcmp(fns[j].name, t)) {
                            seen[j] = true;
                            stack[sp++] = j;
                        }
                }
            }
        }
    }
    ck_assert_msg(reached > 20, "only %zu functions reached from the stub", reached);
    ck_assert_msg(!nb, "the hook's code may change the caller's vector/x87 state (build it with "
                       "-mgeneral-regs-only, call libc only through runtime/xstate.h's guard, or list "
                       "a function proven free of vector code):%s", bad);
    regfree(&vec);
    regfree(&call);
    regfree(&ind);
    regfree(&got);
    free(seen);
    free(stack);
    for (size_t i = 0; i < nf; i++) {
        for (size_t k = 0; k < fns[i].n; k++)
            free(fns[i].ins[k]);
        free(fns[i].ins);
        free(fns[i].name);
    }
    free(fns);
}
END_TEST

/* An interposer that runs a config's rule on its own function goes on to that run (X_direct, in
 * shim/fdflow.c) by a jump, in every build (the sanitizer build included): that function takes the
 * program's return address and frame from its own frame (a stack starts from the caller, a longjmp
 * is told by the caller's stack pointer), which a call from the interposer would make the
 * interposer's. */
START_TEST(test_interposers_jump_to_direct)
{
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "objdump -d --no-show-raw-insn '%s' 2>/dev/null", at_shim_path());
    FILE *p = popen(cmd, "r");
    ck_assert(p);
    regex_t ref;
    ck_assert(!regcomp(&ref, "\\b(call|jmp)[a-z]*[ \t]+[0-9a-f]+ <([a-z_0-9]+)_direct>", REG_EXTENDED));
    char line[1024], fn[512] = "", bad[1500] = "";
    size_t nb = 0;
    unsigned jumps = 0;
    while (fgets(line, sizeof line, p)) {
        unsigned long long a;
        char name[512];
        regmatch_t m[3];
        if (sscanf(line, "%llx <%511[^>]>:", &a, name) == 2)
            snprintf(fn, sizeof fn, "%s", name);
        else if (!regexec(&ref, line, 3, m, 0)) {
            char target[256];
            snprintf(target, sizeof target, "%.*s", (int)(m[2].rm_eo - m[2].rm_so), line + m[2].rm_so);
            if (strcmp(target, fn) || !strncmp(fn, "at_", 3))
                continue; /* a name that merely ends so (the shim's at_hk_dlopen_direct) */
            if (!strncmp(line + m[1].rm_so, "jmp", 3))
                jumps++;
            else if (nb < sizeof bad)
                nb += (size_t)snprintf(bad + nb, sizeof bad - nb, "\n  %s calls %s_direct", fn, fn);
        }
    }
    pclose(p);
    regfree(&ref);
    /* the calls real.h's AT_DIRECT_LIST names */
    ck_assert_msg(jumps >= 32, "only %u interposers jump to their run of a rule", jumps);
    ck_assert_msg(!nb, "an interposer calls its run of a rule rather than jumping to it:%s", bad);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("harm_stub");
    TCase *tc = tcase_create("harm_stub");
    tcase_set_timeout(tc, 0);
    tcase_add_loop_test(tc, test_matrix, 0, (int)(sizeof matrix / sizeof matrix[0]));
    tcase_add_test(tc, test_registers);
    tcase_add_test(tc, test_errno);
    tcase_add_test(tc, test_hook_code_is_vector_free);
    tcase_add_test(tc, test_interposers_jump_to_direct);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
