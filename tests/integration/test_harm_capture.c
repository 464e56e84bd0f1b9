/* test_harm_capture: a capture never reads memory in a way that can fault. A signature that calls
 * write's fd a string (the shell's writes then hand the hook 1 as a char *) leaves sh's exit code,
 * output and files as without the shim, and the trace says the fd was unreadable; a string that runs
 * into a PROT_NONE page is recorded up to the page and marked; literals, heap strings and NULL are
 * recorded as before. acttrace check compares signatures with the DWARF prototype: a wrong one is
 * named parameter by parameter and fails the check, a right one passes, and a binary without debug
 * info is said to be unchecked. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_harmcmp.h"
#include "at_testlib.h"

static char *write_conf(const char *dir, const char *text)
{
    char *p = malloc(4200);
    snprintf(p, 4200, "%s/capture.conf", dir);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return p;
}

static void assert_same_file(const char *d1, const char *d2, const char *name)
{
    char p1[4200], p2[4200];
    snprintf(p1, sizeof p1, "%s/%s", d1, name);
    snprintf(p2, sizeof p2, "%s/%s", d2, name);
    size_t n1 = 0, n2 = 0;
    char *a = at_read_file(p1, &n1), *b = at_read_file(p2, &n2);
    ck_assert_msg(a && b, "%s missing (traced %d, untraced %d)", name, a != NULL, b != NULL);
    ck_assert_msg(n1 == n2 && memcmp(a, b, n1) == 0, "%s differs: '%s' vs '%s'", name, a, b);
    free(a);
    free(b);
}

static const at_tev *field_ev(const at_trace *t, const char *name, const char *f, const char *v)
{
    long i = at_find_field(t, name, f, v, 0);
    if (i < 0) {
        at_trace_dump(t, stderr);
        ck_abort_msg("no %s with %s=%s", name, f, v);
    }
    return &t->ev[i];
}

START_TEST(test_wrong_signature_shell)
{
    char *cdir = at_tmpdir("hcconf");
    char *conf = write_conf(cdir, "[event W]\nfunction = write\n"
                                  "signature = ssize_t write(const char *fd, const void *buf, size_t n)\n"
                                  "capture = fd\n");
    char env0[4300];
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s", conf);
    const char *env[] = {env0, NULL};
    const char *script = "echo hi > f.txt; echo out; echo err >&2; exit 7";
    const char *argv[] = {"/bin/sh", "-c", script, NULL};
    at_session s;
    ck_assert_int_eq(at_session_run(&s, "hcsh", argv, env), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 7, "traced: %s", at_session_describe(&s, d, sizeof d));
    char *udir = at_tmpdir("hcshu");
    at_run_opts o = {.argv = argv, .no_preload = true, .cwd = udir};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert(r.exited && r.status == 7);
    ck_assert_str_eq(s.r.out, r.out);
    char *e1 = at_harm_program_err(s.r.err);
    ck_assert_str_eq(e1, r.err);
    assert_same_file(s.dir, udir, "f.txt");
    /* the writes were captured, the fd marked as memory that could not be read */
    ck_assert_msg(s.has_trace && s.t.complete, "%s", at_session_describe(&s, d, sizeof d));
    /* dash writes every line through fd 1 (its redirections dup2 onto it) */
    ck_assert_uint_eq(at_count(&s.t, NULL, "W"), 3);
    for (size_t i = 0; i < s.t.n; i++)
        if (!strcmp(s.t.ev[i].name, "W"))
            ck_assert_str_eq(at_ev_field(&s.t.ev[i], "fd"), "<unreadable 0x1>");
    free(e1);
    at_run_result_free(&r);
    at_session_free(&s);
    at_rmtree(udir);
    at_rmtree(cdir);
    free(udir);
    free(cdir);
    free(conf);
}
END_TEST

START_TEST(test_strings_of_every_kind)
{
    char *cdir = at_tmpdir("hcconf");
    char *conf = write_conf(cdir, "[event Take]\nfunction = hc_take\n"
                                  "signature = int hc_take(int n, const char *s)\n"
                                  "capture = n, s\n");
    char env0[4300];
    snprintf(env0, sizeof env0, "ACTTRACE_CONFIG=%s", conf);
    const char *env[] = {env0, NULL};
    const char *argv[] = {"hc_capture", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run(&s, "hccap", argv, env), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 27, "traced: %s", at_session_describe(&s, d, sizeof d));
    char *udir = at_tmpdir("hccapu");
    char *fx = at_fixture_path("hc_capture");
    const char *uargv[] = {fx, NULL};
    at_run_opts o = {.argv = uargv, .no_preload = true, .cwd = udir};
    at_run_result r;
    ck_assert_int_eq(at_run(&o, &r), 0);
    ck_assert(r.exited && r.status == 27);
    /* the same output but for the page's address (each run has its own layout) */
    ck_assert_ptr_nonnull(strstr(s.r.out, "\nsum 27\n"));
    ck_assert_ptr_nonnull(strstr(r.out, "\nsum 27\n"));
    assert_same_file(s.dir, udir, "out.txt");
    unsigned long long page = 0;
    ck_assert_int_eq(sscanf(s.r.out, "edge %llx", &page), 1);
    ck_assert_msg(s.has_trace && s.t.complete, "%s", at_session_describe(&s, d, sizeof d));
    char want[96];
    ck_assert_str_eq(at_ev_field(field_ev(&s.t, "Take", "n", "1"), "s"), "\"literal\"");
    ck_assert_str_eq(at_ev_field(field_ev(&s.t, "Take", "n", "2"), "s"), "\"heap string\"");
    /* what was readable, then where it stopped */
    snprintf(want, sizeof want, "\"edge\"<unreadable 0x%llx>", page);
    ck_assert_str_eq(at_ev_field(field_ev(&s.t, "Take", "n", "3"), "s"), want);
    ck_assert_str_eq(at_ev_field(field_ev(&s.t, "Take", "n", "4"), "s"), "<unreadable 0x1>");
    snprintf(want, sizeof want, "<unreadable 0x%llx>", page);
    ck_assert_str_eq(at_ev_field(field_ev(&s.t, "Take", "n", "5"), "s"), want);
    ck_assert_str_eq(at_ev_field(field_ev(&s.t, "Take", "n", "6"), "s"), "\"\"");
    ck_assert_str_eq(at_ev_field(field_ev(&s.t, "Take", "n", "7"), "s"), "\"stack\"");
    at_run_result_free(&r);
    at_session_free(&s);
    at_rmtree(udir);
    at_rmtree(cdir);
    free(fx);
    free(udir);
    free(cdir);
    free(conf);
}
END_TEST

/* acttrace check CONFIG -- PROGRAM; the result in r */
static void run_check(const char *dir, const char *text, const char *program, at_run_result *r)
{
    char acttrace[4200];
    snprintf(acttrace, sizeof acttrace, "%s/acttrace", at_build_dir());
    char *conf = write_conf(dir, text);
    const char *argv[] = {acttrace, "check", conf, "--", program, NULL};
    at_run_opts o = {.argv = argv, .no_preload = true};
    ck_assert_int_eq(at_run(&o, r), 0);
    free(conf);
}

static const char take_conf[] = "[event Take]\nfunction = hc_take\nsignature = %s\ncapture = %s\n";

START_TEST(test_check_against_dwarf)
{
    /* acttrace check preloads the shim alone; the ASan-built shim needs the sanitizer runtime
     * loaded first, which the command does not know about */
    if (getenv("ACTTRACE_ASAN"))
        return;
    char *dir = at_tmpdir("hccheck");
    char *fx = at_fixture_path("hc_capture");
    char text[512];
    at_run_result r;
    /* the prototype is int hc_take(int n, const char *s) */
    snprintf(text, sizeof text, take_conf, "int hc_take(const char *n, int s)", "n");
    run_check(dir, text, fx, &r);
    ck_assert_msg(r.exited && r.status == 1, "status %d: %s", r.status, r.out);
    ck_assert_msg(strstr(r.out, "[event Take] hc_take: error: parameter 1 'n' is declared const "
                                "char * but the function's DWARF prototype has int"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "hc_take: error: parameter 2 's' is declared int but the "
                                "function's DWARF prototype has const char *"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "2 signature errors"), "%s", r.out);
    at_run_result_free(&r);
    /* arity and return type */
    snprintf(text, sizeof text, take_conf, "long hc_take(int n, const char *s, int more)", "n");
    run_check(dir, text, fx, &r);
    ck_assert_msg(r.exited && r.status == 1, "status %d: %s", r.status, r.out);
    ck_assert_msg(strstr(r.out, "hc_take: error: 3 parameters are declared but the function's "
                                "DWARF prototype has 2"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "hc_take: error: the return type is declared long but the "
                                "function's DWARF prototype has int"), "%s", r.out);
    at_run_result_free(&r);
    /* signedness alone is a warning: the value is read right, shown with the other sign */
    snprintf(text, sizeof text, take_conf, "int hc_take(unsigned n, const char *s)", "n");
    run_check(dir, text, fx, &r);
    ck_assert_msg(r.exited && r.status == 0, "status %d: %s", r.status, r.out);
    ck_assert_msg(strstr(r.out, "hc_take: warning: parameter 1 'n' is declared unsigned but the "
                                "function's DWARF prototype has int"), "%s", r.out);
    at_run_result_free(&r);
    /* the right signature */
    snprintf(text, sizeof text, take_conf, "int hc_take(int n, const char *s)", "n, s");
    run_check(dir, text, fx, &r);
    ck_assert_msg(r.exited && r.status == 0, "status %d: %s", r.status, r.out);
    ck_assert_msg(strstr(r.out, "[event Take] hc_take: the signature matches the function's DWARF "
                                "prototype"), "%s", r.out);
    at_run_result_free(&r);
    /* the same binary without its debug info: found (.symtab), not checked, not an error */
    char nodebug[4300], cmd[9000];
    snprintf(nodebug, sizeof nodebug, "%s/hc_nodebug", dir);
    snprintf(cmd, sizeof cmd, "objcopy --strip-debug '%s' '%s'", fx, nodebug);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(text, sizeof text, take_conf, "int hc_take(const char *n, int s)", "n");
    run_check(dir, text, nodebug, &r);
    ck_assert_msg(r.exited && r.status == 0, "status %d: %s", r.status, r.out);
    char want[4500];
    snprintf(want, sizeof want, "[event Take] no debug info for hc_take in %s: signature not checked",
             nodebug);
    ck_assert_msg(strstr(r.out, want), "%s", r.out);
    at_run_result_free(&r);
    at_rmtree(dir);
    free(dir);
    free(fx);
}
END_TEST

START_TEST(test_check_write_with_libc_debug_info)
{
    if (getenv("ACTTRACE_ASAN"))
        return;
    char *dir = at_tmpdir("hccheckw");
    at_run_result r;
    run_check(dir, "[event W]\nfunction = write\n"
                   "signature = ssize_t write(const char *fd, const void *buf, size_t n)\n"
                   "capture = fd\n", "/bin/sh", &r);
    /* with libc's debug info (libc6-dbg, found by build-id under /usr/lib/debug) the signature is
     * refused; without it the check says it could not look */
    bool refused = strstr(r.out, "[event W] write: error: parameter 1 'fd' is declared const char * "
                                 "but the function's DWARF prototype has int") != NULL;
    ck_assert_msg(refused || strstr(r.out, "[event W] no debug info for write in "), "%s", r.out);
    ck_assert_msg(r.exited && r.status == (refused ? 1 : 0), "status %d: %s", r.status, r.out);
    at_run_result_free(&r);
    at_rmtree(dir);
    free(dir);
}
END_TEST

/* glibc's own socket calls: accept and connect take __SOCKADDR_ARG unions (a pointer as the ABI
 * passes it), getpeername is a system call stub written in assembly (debug info without a
 * prototype): with libc's debug info the first two match a pointer declaration and the third is
 * said not to be checked, never refused; without it every one says it could not look */
START_TEST(test_check_libc_socket_calls)
{
    if (getenv("ACTTRACE_ASAN"))
        return;
    char *dir = at_tmpdir("hchecks");
    at_run_result r;
    run_check(dir,
              "[event A]\nfunction = accept\n"
              "signature = int accept(int fd, struct sockaddr *addr, socklen_t *len)\n"
              "[event C]\nfunction = connect\n"
              "signature = int connect(int fd, const struct sockaddr *addr, socklen_t len)\n"
              "[event G]\nfunction = getpeername\n"
              "signature = int getpeername(int fd, struct sockaddr *addr, socklen_t *len)\n",
              "/bin/sh", &r);
    ck_assert_msg(r.exited && r.status == 0, "status %d: %s", r.status, r.out);
    ck_assert_msg(!strstr(r.out, "error:"), "%s", r.out);
    if (!strstr(r.out, "[event A] no debug info for accept in ")) {
        ck_assert_msg(strstr(r.out, "[event A] accept: the signature matches the function's DWARF "
                                    "prototype"), "%s", r.out);
        ck_assert_msg(strstr(r.out, "[event C] connect: the signature matches the function's DWARF "
                                    "prototype"), "%s", r.out);
        ck_assert_msg(strstr(r.out, "is written in assembly (its debug info has no prototype): "
                                    "signature not checked"), "%s", r.out);
    }
    at_run_result_free(&r);
    at_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("harm_capture");
    TCase *tc = tcase_create("capture");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_wrong_signature_shell);
    tcase_add_test(tc, test_strings_of_every_kind);
    tcase_add_test(tc, test_check_against_dwarf);
    tcase_add_test(tc, test_check_write_with_libc_debug_info);
    tcase_add_test(tc, test_check_libc_socket_calls);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
