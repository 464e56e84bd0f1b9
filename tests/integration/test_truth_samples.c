/* test_truth_samples: CPU samples tell where the CPU went. tests/fixtures/samples burn runs three
 * threads, each through four "Burn" activities of known CPU time, and a "Nap" that sleeps, at
 * ACTTRACE_SAMPLE_HZ=1000. Read back:
 *   - every sample is the .NET runtime's ThreadSample (Type 2) and carries the activity running on
 *     its thread at its time: a Burn of that thread, between its Start and Stop, or none;
 *   - the CPU the samples stand for (their CpuNs) adds up, per thread, to what the thread measured
 *     inside its Burns, within a quarter (the kernel samples at its tick);
 *   - the sleeping Nap gets at most one sample;
 *   - the samples' stacks go through burn_cpu, named by acttrace dump;
 *   - acttrace stacks --samples folds them under their activity, weighed in CPU microseconds that
 *     add up to what the threads measured (within a quarter), with burn_cpu in the Burn stacks. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_harmcmp.h"
#include "at_testlib.h"
#include "at_tracegen.h"

typedef struct span {
    char path[96];
    uint64_t thread, t0, t1;
    bool burn;
} span;

START_TEST(test_samples_in_activities)
{
    const char *argv[] = {"samples", "burn", NULL};
    const char *env[] = {"ACTTRACE_SAMPLE_HZ=1000", NULL};
    at_session s;
    ck_assert_int_eq(at_session_run_deadline(&s, "tsamp", argv, env, 300), 0);
    char d[1024];
    ck_assert_msg(s.r.exited && s.r.status == 0 && s.has_trace && s.load_rc == 0, "%s",
                  at_session_describe(&s, d, sizeof d));
    /* what each thread measured: "cpu I MS" for the first thread (0) and the two it started */
    double measured = 0;
    for (const char *p = s.r.err; (p = strstr(p, "cpu ")) != NULL; p += 4) {
        int i;
        double ms;
        if (sscanf(p, "cpu %d %lf", &i, &ms) == 2)
            measured += ms;
    }
    ck_assert_msg(measured > 600, "the fixture measured %.1f ms: %s", measured, s.r.err);
    const at_trace *t = &s.t;
    span *sp = calloc(t->n, sizeof *sp);
    size_t ns = 0;
    for (size_t i = 0; i < t->n; i++) {
        const at_tev *e = &t->ev[i];
        bool burn = !strcmp(e->name, "BurnStart"), nap = !strcmp(e->name, "NapStart");
        if (!burn && !nap)
            continue;
        const char *stop = burn ? "BurnStop" : "NapStop";
        for (size_t j = i + 1; j < t->n; j++)
            if (!strcmp(t->ev[j].name, stop) && !strcmp(t->ev[j].act_path, e->act_path)) {
                span *x = &sp[ns++];
                snprintf(x->path, sizeof x->path, "%s", e->act_path);
                x->thread = e->thread;
                x->t0 = e->timestamp;
                x->t1 = t->ev[j].timestamp;
                x->burn = burn;
                break;
            }
    }
    ck_assert_int_eq(ns, 13);
    size_t nsamp = 0, in_burn = 0, in_nap = 0, stacked = 0;
    double sampled_ms = 0;
    for (size_t i = 0; i < t->n; i++) {
        const at_tev *e = &t->ev[i];
        if (strcmp(e->provider, "Microsoft-DotNETCore-SampleProfiler"))
            continue;
        nsamp++;
        ck_assert_int_eq(e->event_id, 0);
        ck_assert_int_eq(e->payload_len, 12);
        int32_t type;
        uint64_t cpu_ns;
        memcpy(&type, e->head, 4);
        memcpy(&cpu_ns, e->head + 4, 8);
        ck_assert_int_eq(type, 2);
        /* a period at least; more when the kernel folded expirations into one signal (it checks
         * CPU timers at its tick, and a virtual CPU the host took away for a while comes back with
         * the time charged: one sample of a CI run stood for 121 ms). The sum is checked below. */
        ck_assert_msg(cpu_ns >= 1000000 && cpu_ns <= 1000000000, "CpuNs %llu",
                      (unsigned long long)cpu_ns);
        stacked += e->nframes > 0;
        if (!e->act_path[0])
            continue; /* in no activity: the threads' own start and end */
        const span *x = NULL;
        for (size_t k = 0; k < ns; k++)
            if (!strcmp(sp[k].path, e->act_path))
                x = &sp[k];
        ck_assert_msg(x, "sample in %s, which is no Burn or Nap", e->act_path);
        ck_assert_msg(x->thread == e->thread && e->timestamp >= x->t0 && e->timestamp <= x->t1,
                      "sample of thread %llu at %llu in %s, which thread %llu ran over %llu-%llu",
                      (unsigned long long)e->thread, (unsigned long long)e->timestamp, x->path,
                      (unsigned long long)x->thread, (unsigned long long)x->t0,
                      (unsigned long long)x->t1);
        if (x->burn) {
            in_burn++;
            sampled_ms += cpu_ns / 1e6;
        } else {
            in_nap++;
        }
    }
    ck_assert_msg(in_burn >= 60, "%zu samples in Burns (of %zu)", in_burn, nsamp);
    ck_assert_msg(in_nap <= 1, "%zu samples in the sleeping Nap", in_nap);
    ck_assert_msg(stacked == nsamp, "%zu of %zu samples with a stack", stacked, nsamp);
    ck_assert_msg(sampled_ms > measured * 0.75 && sampled_ms < measured * 1.25,
                  "samples stand for %.1f ms of CPU in Burns, the threads measured %.1f ms",
                  sampled_ms, measured);
    /* the stacks, as acttrace names them: burn_cpu in (nearly) every Burn sample */
    at_run_result r;
    const char *args[] = {"dump", t->path, NULL};
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    size_t lines = 0, named = 0;
    for (char *l = r.out; l && *l;) {
        char *nl = strchr(l, '\n');
        if (nl)
            *nl = 0;
        if (strstr(l, "SampleProfiler/") && strstr(l, "act=") && !strstr(l, "act=-")) {
            lines++;
            named += strstr(l, "samples!burn_cpu") != NULL;
        }
        l = nl ? nl + 1 : NULL;
    }
    ck_assert_msg(lines >= 60 && named >= lines * 9 / 10, "%zu of %zu samples in activities name burn_cpu",
                  named, lines);
    at_run_result_free(&r);
    const char *sargs[] = {"stacks", "--samples", t->path, NULL};
    ck_assert_int_eq(at_tool_run(&r, sargs), 0);
    ck_assert_msg(r.exited && r.status == 0, "%s", r.err);
    double burn_us = 0, burn_cpu_us = 0;
    for (char *l = r.out; l && *l;) {
        char *nl = strchr(l, '\n');
        if (nl)
            *nl = 0;
        char *sp_ = strrchr(l, ' ');
        ck_assert_msg(sp_ && (!strncmp(l, "Burn;", 5) || !strncmp(l, "Nap;", 4)), "line %s", l);
        double us = atof(sp_ + 1);
        if (!strncmp(l, "Burn;", 5)) {
            burn_us += us;
            if (strstr(l, ";samples!burn_cpu"))
                burn_cpu_us += us;
        }
        l = nl ? nl + 1 : NULL;
    }
    ck_assert_msg(burn_us > measured * 750 && burn_us < measured * 1250,
                  "stacks --samples: %.0f us under Burn, the threads measured %.1f ms", burn_us, measured);
    ck_assert_msg(burn_cpu_us >= burn_us * 0.9, "%.0f of %.0f us under burn_cpu", burn_cpu_us, burn_us);
    at_run_result_free(&r);
    const char *bad = at_harm_verify(t->path);
    ck_assert_msg(!bad, "%s", bad);
    free(sp);
    at_session_free(&s);
}
END_TEST

/* acttrace run --sample HZ turns sampling on for the program it runs */
START_TEST(test_run_sample_option)
{
    char *dir = at_tmpdir("tsamprun");
    char *fx = at_fixture_path("samples");
    char out[4200];
    snprintf(out, sizeof out, "%s/run-%%p.nettrace", dir);
    const char *args[] = {"run", "--sample", "500", "-o", out, "--", fx, "burn", NULL};
    at_run_result r;
    /* acttrace run sets LD_PRELOAD itself: under check-asan the sanitizer runtime would not come
     * first, so only the refusal below runs there */
    if (getenv("ACTTRACE_ASAN"))
        goto refusal;
    ck_assert_int_eq(at_tool_run(&r, args), 0);
    ck_assert_msg(r.exited && r.status == 0 && strstr(r.out, "burned"), "%s", r.err);
    char **files = at_trace_files(dir);
    ck_assert_msg(files && files[0], "no trace in %s: %s", dir, r.err);
    at_trace t;
    ck_assert_int_eq(at_trace_load(files[0], &t), 0);
    size_t n = at_count(&t, "Microsoft-DotNETCore-SampleProfiler", NULL);
    ck_assert_msg(n >= 60, "%zu samples", n);
    at_trace_free(&t);
    at_strv_free(files);
    at_run_result_free(&r);
refusal:
    /* and a rate that is not one is refused before the program runs */
    const char *bad[] = {"run", "--sample", "fast", "--", fx, "burn", NULL};
    ck_assert_int_eq(at_tool_run(&r, bad), 0);
    ck_assert_msg(r.exited && r.status == 2 && strstr(r.err, "--sample fast") && !strstr(r.out, "burned"),
                  "%s", r.err);
    at_run_result_free(&r);
    free(fx);
    at_rmtree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("truth_samples");
    TCase *tc = tcase_create("samples");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, test_samples_in_activities);
    tcase_add_test(tc, test_run_sample_option);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
