/* test_config: the shim's settings: defaults, each ACTTRACE_* override, and one precise message
 * for each bad value (the setting named, the other defaults kept). */
#include <check.h>
#include <string.h>

#include "config.h"
#include "trace.h"

static const char *const *fake_env;

static const char *fake_getenv(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; fake_env && fake_env[i]; i++)
        if (!strncmp(fake_env[i], name, n) && fake_env[i][n] == '=')
            return fake_env[i] + n + 1;
    return NULL;
}

static int load(at_config *c, const char *const *env, char *err, size_t n)
{
    fake_env = env;
    at_config_defaults(c);
    return at_config_from_env(c, fake_getenv, err, n);
}

START_TEST(test_defaults)
{
    at_config c;
    char err[256];
    ck_assert_int_eq(load(&c, NULL, err, sizeof err), 0);
    ck_assert_str_eq(c.output, "acttrace-%p.nettrace");
    ck_assert_str_eq(c.config_file, "");
    ck_assert(c.fdflow);
    ck_assert(!c.accept_activity);
    ck_assert(c.thread_events);
    ck_assert(c.fatal_signals);
    ck_assert_uint_eq(c.buffer_bytes, 0);
    ck_assert_uint_eq(c.flush_ms, 0);
    ck_assert_int_eq(c.stacks, AT_CFG_STACKS_START);
    ck_assert_int_eq(c.stack_walker, AT_CFG_WALKER_SHARED);
    ck_assert_uint_eq(c.stack_depth, 32);
    ck_assert(c.symbols);
    ck_assert_int_eq(c.clock, AT_CLOCK_AUTO);
    ck_assert_int_eq(c.follow, AT_CFG_FOLLOW_ALL);
    ck_assert(!c.quiet);
}
END_TEST

START_TEST(test_stack_settings)
{
    at_config c;
    char err[256];
    const char *env[] = {"ACTTRACE_STACKS=both", "ACTTRACE_STACK_WALKER=fp", "ACTTRACE_STACK_DEPTH=64",
                         "ACTTRACE_SYMBOLS=0", NULL};
    ck_assert_int_eq(load(&c, env, err, sizeof err), 0);
    ck_assert_int_eq(c.stacks, AT_CFG_STACKS_BOTH);
    ck_assert_int_eq(c.stack_walker, AT_CFG_WALKER_FP);
    ck_assert_uint_eq(c.stack_depth, 64);
    ck_assert(!c.symbols);
    const char *bad1[] = {"ACTTRACE_STACKS=sometimes", NULL};
    ck_assert_int_eq(load(&c, bad1, err, sizeof err), -1);
    ck_assert_str_eq(err, "ACTTRACE_STACKS=sometimes: expected one of start|stop|both|none");
    const char *bad2[] = {"ACTTRACE_STACK_DEPTH=257", NULL};
    ck_assert_int_eq(load(&c, bad2, err, sizeof err), -1);
    ck_assert_str_eq(err, "ACTTRACE_STACK_DEPTH=257: expected a number from 0 to 256");
    const char *clk[] = {"ACTTRACE_CLOCK=tsc", NULL};
    ck_assert_int_eq(load(&c, clk, err, sizeof err), 0);
    ck_assert_int_eq(c.clock, AT_CLOCK_TSC);
    const char *bad4[] = {"ACTTRACE_CLOCK=rdtsc", NULL};
    ck_assert_int_eq(load(&c, bad4, err, sizeof err), -1);
    ck_assert_str_eq(err, "ACTTRACE_CLOCK=rdtsc: expected one of auto|monotonic|tsc");
    const char *bad3[] = {"ACTTRACE_STACK_WALKER=dwarf", NULL};
    ck_assert_int_eq(load(&c, bad3, err, sizeof err), -1);
    ck_assert_str_eq(err, "ACTTRACE_STACK_WALKER=dwarf: expected one of shared|libunwind|fp");
    const char *wt[] = {"ACTTRACE_WRITER_TABLE=shared", NULL};
    ck_assert_int_eq(load(&c, wt, err, sizeof err), 0);
    ck_assert(c.writer_table_shared);
    const char *wt_own[] = {"ACTTRACE_WRITER_TABLE=own", NULL};
    ck_assert_int_eq(load(&c, wt_own, err, sizeof err), 0);
    ck_assert(!c.writer_table_shared);
    const char *bad5[] = {"ACTTRACE_WRITER_TABLE=private", NULL};
    ck_assert_int_eq(load(&c, bad5, err, sizeof err), -1);
    ck_assert_str_eq(err, "ACTTRACE_WRITER_TABLE=private: expected one of own|shared");
}
END_TEST

START_TEST(test_overrides)
{
    at_config c;
    char err[256];
    const char *env[] = {"ACTTRACE_OUTPUT=/tmp/x-%p.nettrace", "ACTTRACE_CONFIG=/etc/a.conf",
                         "ACTTRACE_FDFLOW=0", "ACTTRACE_ACCEPT_ACTIVITY=yes",
                         "ACTTRACE_THREAD_EVENTS=off", "ACTTRACE_SIGNALS=false",
                         "ACTTRACE_BUFFER_KB=512", "ACTTRACE_FLUSH_MS=20",
                         "ACTTRACE_FILE_MODE=0640", "ACTTRACE_FOLLOW=exec", "ACTTRACE_QUIET=1", NULL};
    ck_assert_int_eq(load(&c, env, err, sizeof err), 0);
    ck_assert_int_eq(c.follow, AT_CFG_FOLLOW_EXEC);
    ck_assert(c.quiet);
    ck_assert_uint_eq(c.file_mode, 0640);
    ck_assert_str_eq(c.output, "/tmp/x-%p.nettrace");
    ck_assert_str_eq(c.config_file, "/etc/a.conf");
    ck_assert(!c.fdflow);
    ck_assert(c.accept_activity);
    ck_assert(!c.thread_events);
    ck_assert(!c.fatal_signals);
    ck_assert_uint_eq(c.buffer_bytes, 512 * 1024);
    ck_assert_uint_eq(c.flush_ms, 20);
}
END_TEST

START_TEST(test_empty_values_keep_defaults)
{
    at_config c;
    char err[256];
    const char *env[] = {"ACTTRACE_OUTPUT=", "ACTTRACE_FDFLOW=", NULL};
    ck_assert_int_eq(load(&c, env, err, sizeof err), 0);
    ck_assert_str_eq(c.output, "acttrace-%p.nettrace");
    ck_assert(c.fdflow);
}
END_TEST

static const struct {
    const char *env;
    const char *msg;
} bad[] = {
    {"ACTTRACE_FDFLOW=maybe", "ACTTRACE_FDFLOW=maybe: expected 0 or 1"},
    {"ACTTRACE_ACCEPT_ACTIVITY=2", "ACTTRACE_ACCEPT_ACTIVITY=2: expected 0 or 1"},
    {"ACTTRACE_BUFFER_KB=-1", "ACTTRACE_BUFFER_KB=-1: expected a number from 0 to 16777216"},
    {"ACTTRACE_BUFFER_KB=12k", "ACTTRACE_BUFFER_KB=12k: expected a number from 0 to 16777216"},
    {"ACTTRACE_FLUSH_MS=99999999", "ACTTRACE_FLUSH_MS=99999999: expected a number from 0 to 3600000"},
    {"ACTTRACE_FILE_MODE=0999", "ACTTRACE_FILE_MODE=0999: expected octal permissions such as 0600 or 0640"},
    {"ACTTRACE_FILE_MODE=01777", "ACTTRACE_FILE_MODE=01777: expected octal permissions such as 0600 or 0640"},
    {"ACTTRACE_FOLLOW=children", "ACTTRACE_FOLLOW=children: expected one of all|exec|none"},
    {"ACTTRACE_QUIET=very", "ACTTRACE_QUIET=very: expected 0 or 1"},
};

START_TEST(test_bad_values)
{
    at_config c;
    char err[256];
    const char *env[] = {bad[_i].env, NULL};
    ck_assert_int_eq(load(&c, env, err, sizeof err), -1);
    ck_assert_str_eq(err, bad[_i].msg);
}
END_TEST

START_TEST(test_too_long_output)
{
    at_config c;
    char err[256];
    static char v[AT_CONFIG_PATH_MAX + 64];
    memcpy(v, "ACTTRACE_OUTPUT=", 16);
    memset(v + 16, 'a', AT_CONFIG_PATH_MAX + 10);
    const char *env[] = {v, NULL};
    ck_assert_int_eq(load(&c, env, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "ACTTRACE_OUTPUT: path longer than"), "%s", err);
    ck_assert_str_eq(c.output, "acttrace-%p.nettrace");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("env");
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_overrides);
    tcase_add_test(tc, test_stack_settings);
    tcase_add_test(tc, test_empty_values_keep_defaults);
    tcase_add_loop_test(tc, test_bad_values, 0, (int)(sizeof bad / sizeof bad[0]));
    tcase_add_test(tc, test_too_long_output);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
