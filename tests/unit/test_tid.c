/* test_tid.c: at_tid (runtime/tid.c): the kernel id of the calling thread, read from glibc's thread
 * descriptor once two threads that made the system call agreed where it sits there, and only in
 * threads the shim's trampoline started (at_thread_managed); everyone else keeps gettid(2). Each test
 * runs in its own process (Check forks), so each starts with nothing learned. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "at_common.h"

static pid_t sys_tid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

typedef struct {
    bool managed;
    pid_t got, want;
    int off_seen;
    long clear_off; /* where the kernel clears the id at exit (glibc's &pd->tid), from the descriptor */
} probe;

static void *probe_main(void *p)
{
    probe *pr = p;
    at_thread_managed = pr->managed;
    pr->off_seen = at_tid_offset();
    pr->got = at_tid();
    pr->want = sys_tid();
    int *addr = NULL;
    pr->clear_off = prctl(PR_GET_TID_ADDRESS, &addr) == 0 && addr
                        ? (long)((char *)addr - (char *)(void *)pthread_self()) : -1;
    return NULL;
}

static probe run_probe(bool managed)
{
    probe pr = {.managed = managed};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, probe_main, &pr), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    return pr;
}

START_TEST(learns_from_two_threads_then_managed_threads_read_the_descriptor)
{
    ck_assert_int_eq(at_tid_offset(), -1);
    ck_assert_int_eq(at_tid(), sys_tid()); /* main: the system call, the first look */
    ck_assert_int_eq(at_tid_offset(), -1); /* one thread is not enough */
    probe second = run_probe(false);
    ck_assert_int_eq(second.got, second.want);
    int off = at_tid_offset();
    ck_assert_int_ge(off, 0);
    ck_assert_int_eq(off % 4, 0);
    /* the offset is glibc's tid field: the address it gave the kernel to clear at thread exit
     * (PR_GET_TID_ADDRESS needs CONFIG_CHECKPOINT_RESTORE; -1 when the kernel lacks it) */
    if (second.clear_off >= 0)
        ck_assert_int_eq(off, second.clear_off);
    /* threads that never looked find their id there, without the system call */
    unsigned calls = at_tid_syscalls();
    for (int i = 0; i < 50; i++) {
        probe pr = run_probe(true);
        ck_assert_int_eq(pr.off_seen, off);
        ck_assert_int_eq(pr.got, pr.want);
        ck_assert_int_gt(pr.got, 0);
    }
    ck_assert_uint_eq(at_tid_syscalls(), calls);
}
END_TEST

START_TEST(unmanaged_threads_keep_the_system_call)
{
    at_tid();
    run_probe(false);
    ck_assert_int_ge(at_tid_offset(), 0);
    unsigned calls = at_tid_syscalls();
    for (int i = 0; i < 20; i++) {
        probe pr = run_probe(false);
        ck_assert_int_eq(pr.got, pr.want);
    }
    ck_assert_uint_eq(at_tid_syscalls(), calls + 20);
}
END_TEST

START_TEST(managed_thread_before_anything_is_learned)
{
    /* no offset yet: a managed thread makes the system call too, and is the first to look */
    probe pr = run_probe(true);
    ck_assert_int_eq(pr.off_seen, -1);
    ck_assert_int_eq(pr.got, pr.want);
    ck_assert_int_eq(at_tid(), sys_tid());
    ck_assert_int_ge(at_tid_offset(), 0);
}
END_TEST

static void *fork_from_managed(void *unused)
{
    (void)unused;
    at_thread_managed = true;
    pid_t before = at_tid();
    pid_t c = fork();
    if (c == 0) {
        at_tid_cache = 0; /* what the shim's fork wrapper does in the child */
        pid_t t = at_tid();
        _exit(t == getpid() && t != before ? 0 : 1);
    }
    int st = 0;
    waitpid(c, &st, 0);
    return (void *)(intptr_t)(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

START_TEST(fork_child_of_a_managed_thread_reads_its_own_id)
{
    at_tid();
    run_probe(false);
    ck_assert_int_ge(at_tid_offset(), 0);
    pthread_t t;
    void *ok = NULL;
    ck_assert_int_eq(pthread_create(&t, NULL, fork_from_managed, NULL), 0);
    pthread_join(t, &ok);
    ck_assert_msg(ok != NULL, "the child's id read from its descriptor is not its pid");
}
END_TEST

typedef struct {
    pthread_barrier_t *go;
    pid_t got, want;
} racer;

static void *race_main(void *p)
{
    racer *r = p;
    pthread_barrier_wait(r->go);
    r->got = at_tid();
    r->want = sys_tid();
    return NULL;
}

START_TEST(threads_learning_at_once_agree)
{
    enum { N = 8 };
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N);
    pthread_t t[N];
    racer r[N];
    for (int i = 0; i < N; i++) {
        r[i].go = &go;
        ck_assert_int_eq(pthread_create(&t[i], NULL, race_main, &r[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(r[i].got, r[i].want);
    }
    ck_assert_int_ge(at_tid_offset(), 0);
    probe pr = run_probe(true);
    ck_assert_int_eq(pr.got, pr.want);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tid");
    TCase *tc = tcase_create("tid");
    tcase_add_test(tc, learns_from_two_threads_then_managed_threads_read_the_descriptor);
    tcase_add_test(tc, unmanaged_threads_keep_the_system_call);
    tcase_add_test(tc, managed_thread_before_anything_is_learned);
    tcase_add_test(tc, fork_child_of_a_managed_thread_reads_its_own_id);
    tcase_add_test(tc, threads_learning_at_once_agree);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
