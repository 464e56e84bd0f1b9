/* test_clock_order.c: the file time base (runtime/clock.c) never contradicts a time it gave out.
 * The flusher converts TSC values to file ns through (TSC, CLOCK_MONOTONIC) pairs that it adds at
 * every flush; the segments between pairs have slightly different slopes (the pairs' read error,
 * the kernel's own adjustments). Here the pairs come from the test, with slopes chosen to expose
 * every way a change of the pairs could lower a value already written: an event older than the
 * whole window once a preempted writer held the merge back for more flushes than the window holds,
 * values extrapolated past the newest pair by an explicit flush followed by a slower segment, and
 * random mixes of both. The promise checked: a conversion is never earlier than one made before it
 * for an equal or earlier TSC value. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "at_common.h"
#include "clock.h"

/* 3 ticks per ns; a segment's slope in ns per tick is (1 + ppm / 1e6) / 3 */
#define TPN 3u

typedef struct {
    uint64_t t, n;
} pair;

/* the real clock the pairs are read from: piecewise linear through the truth pairs */
static pair truth[4096];
static uint32_t ntruth;

static uint64_t truth_at(uint64_t t)
{
    uint32_t i = 1;
    while (i + 1 < ntruth && truth[i].t < t)
        i++;
    const pair *a = &truth[i - 1], *b = &truth[i];
    return a->n + (uint64_t)((unsigned __int128)(t - a->t) * (b->n - a->n) / (b->t - a->t));
}

/* the next truth pair, dt ticks on at ppm */
static pair truth_next(uint64_t dt, double ppm)
{
    pair p = truth[ntruth - 1];
    p.t += dt;
    p.n += (uint64_t)((double)dt / TPN * (1.0 + ppm / 1e6) + 0.5);
    truth[ntruth++] = p;
    return p;
}

static void truth_start(void)
{
    ntruth = 0;
    truth[ntruth++] = (pair){1000000000000ull, 333333333333ull};
    pair p = truth_next(60000, 0); /* the two pairs 20 us apart, as at start */
    at_clock_test_reset(truth[0].t, truth[0].n, p.t, p.n);
}

/* a flush: a new pair dt ticks on at ppm; returns the cut */
static uint64_t flush_pair(uint64_t dt, double ppm)
{
    pair p = truth_next(dt, ppm);
    uint64_t cut = at_clock_test_mark(p.t, p.n);
    ck_assert_uint_le(cut, p.t);
    return cut;
}

/* every value given out, to hold later conversions against */
static pair given[20000];
static uint32_t ngiven;

static uint64_t convert(uint64_t t)
{
    uint64_t v = at_clock_file_ts(t);
    for (uint32_t i = 0; i < ngiven; i++)
        if (given[i].t <= t && given[i].n > v)
            ck_abort_msg("tick %llu converts to %llu ns, earlier than the %llu ns given before "
                         "to tick %llu (%lld ticks before it)",
                         (unsigned long long)t, (unsigned long long)v, (unsigned long long)given[i].n,
                         (unsigned long long)given[i].t, (long long)(t - given[i].t));
    if (ngiven < sizeof given / sizeof given[0])
        given[ngiven++] = (pair){t, v};
    return v;
}

/* A writer read the clock (tick tb) just after its previous event (ta, written), then stayed
 * preempted before publishing while the flusher went on: each flush converts the horizon tb (the
 * merge stops there) and adds a pair, twice the window's worth, whose segments run fast after
 * running slow: extrapolated back from them, tb would come out microseconds early. When the writer
 * publishes, tb still converts between the pairs around it. */
START_TEST(held_back_event_keeps_its_segment)
{
    truth_start();
    ngiven = 0;
    for (int i = 0; i < 10; i++)
        convert(flush_pair(3000000, 0) - 5); /* 1 ms flushes, events written up to each cut */
    uint64_t ta = truth[ntruth - 1].t + 3000;
    uint64_t tb = ta + 3;
    flush_pair(3000000, 0);
    uint64_t fa = convert(ta);
    for (int i = 0; i < 140; i++) {
        flush_pair(3000000, i < 40 ? -200 : 200);
        convert(tb); /* the flusher's horizon: nothing newer is written */
    }
    uint64_t fb = convert(tb);
    ck_assert_uint_ge(fb, fa);
    uint64_t want = truth_at(tb);
    ck_assert_msg(fb + 2 >= want && fb <= want + 2, "held-back event at %llu ns, the clock read %llu",
                  (unsigned long long)fb, (unsigned long long)want);
    /* the merge goes on: later events convert at the real clock again */
    uint64_t cut = flush_pair(3000000, 0);
    cut = flush_pair(3000000, 0);
    uint64_t fc = convert(cut);
    ck_assert_uint_ge(fc + 2, truth_at(cut));
    ck_assert_uint_le(fc, truth_at(cut) + 2);
}
END_TEST

/* An explicit flush writes what was published after its pair: those values are extrapolated along
 * the newest segment. The next segment is slower: the same thread's next event, a tick later, must
 * not come out earlier than the extrapolated ones. */
START_TEST(extrapolated_values_hold_after_a_slower_segment)
{
    truth_start();
    ngiven = 0;
    for (int i = 0; i < 5; i++)
        convert(flush_pair(3000000, 300) - 7);
    uint64_t cut = flush_pair(3000000, 300);
    uint64_t last = 0;
    for (uint64_t t = cut + 3000; t <= cut + 6000000; t += 3000) /* 2 ms past the pair */
        last = convert(t);
    uint64_t cut2 = flush_pair(9000000, -300);
    ck_assert_uint_ge(convert(cut + 6000001), last);
    ck_assert_uint_ge(convert(cut2), last);
    /* and a time base that follows the clock again once real pairs are past the values given */
    for (int i = 0; i < 3; i++)
        cut2 = flush_pair(3000000, 0);
    uint64_t v = convert(cut2), want = truth_at(cut2);
    ck_assert_msg(v <= want + 1000 && v + 1000 >= want, "%llu ns where the clock read %llu",
                  (unsigned long long)v, (unsigned long long)want);
}
END_TEST

/* Events older than the whole window (a late event, or a caller's timestamp) go back from the
 * oldest pair: as pairs are dropped that conversion must not fall below what it gave before. */
START_TEST(older_than_the_window_never_drops)
{
    truth_start();
    ngiven = 0;
    uint64_t t0 = truth[1].t + 1000;
    convert(t0);
    for (int i = 0; i < 300; i++) {
        uint64_t cut = flush_pair(3000000 + (uint64_t)(i % 7) * 100000, (i % 3 == 0) ? 400 : -400);
        convert(cut - 1);
        convert(t0 + (uint64_t)i * 1000); /* older than the window after 64 flushes */
    }
}
END_TEST

/* Random mixes: segments from 10 us to 5 ms at -1000..1000 ppm, periodic flushes (values up to the
 * cut, or up to a writer's held-back clock read), explicit flushes (values past the pair), disturbed
 * pair reads (no time passed), and conversions of any earlier tick. */
START_TEST(random_flush_orders_never_go_back)
{
    srandom(12345 + (unsigned)_i);
    for (int round = 0; round < 4; round++) {
        truth_start();
        ngiven = 0;
        uint64_t held = 0;
        for (int f = 0; f < 600 && ngiven + 16 < sizeof given / sizeof given[0]; f++) {
            uint64_t dt = 30000 + (uint64_t)random() % 15000000;
            double ppm = (double)(random() % 2001) - 1000.0;
            uint64_t cut;
            if (random() % 20 == 0) { /* a disturbed read: the clock's ns seem not to advance */
                pair p = truth[ntruth - 1];
                cut = at_clock_test_mark(p.t + dt, p.n);
                ck_assert_uint_le(cut, p.t + dt);
            } else {
                cut = flush_pair(dt, ppm);
            }
            int kind = (int)(random() % 10);
            if (held == 0 && kind == 0)
                held = cut - (uint64_t)random() % 1000; /* a writer stays preempted for a while */
            uint64_t limit = held ? held : cut;
            if (kind == 1) { /* explicit flush: everything published, some of it after the pair */
                for (int k = 0; k < 8; k++)
                    convert(cut + (uint64_t)random() % (dt / 2 + 1));
                held = 0;
            } else {
                for (int k = 0; k < 6; k++)
                    convert(limit - (uint64_t)random() % 20000);
                convert(limit);
            }
            if (kind == 2) /* a late event or a caller's old timestamp */
                convert(truth[0].t + (uint64_t)random() % (cut - truth[0].t));
            if (held && random() % 60 == 0)
                held = 0; /* published: the merge goes on */
        }
    }
}
END_TEST

/* The conversion's multiply-and-correct gives exactly what the 128-bit division gives, for any
 * operands: ticks and spans of every size, slopes above and below one ns per tick. */
START_TEST(muldiv_is_the_exact_division)
{
    srandom(777);
    static const uint64_t edge[] = {0, 1, 2, 3, 999999999, 1000000000, 3000000000ull,
                                    (1ull << 32) - 1, 1ull << 32, (1ull << 63) - 1, 1ull << 63,
                                    (1ull << 63) + 1, UINT64_MAX - 1, UINT64_MAX};
    const unsigned ne = sizeof edge / sizeof edge[0];
    for (unsigned i = 0; i < ne; i++)
        for (unsigned j = 0; j < ne; j++)
            for (unsigned k = 0; k < ne; k++) {
                if (edge[k] == 0)
                    continue;
                uint64_t x = edge[i], n = edge[j], d = edge[k];
                uint64_t want = (uint64_t)((unsigned __int128)x * n / d);
                ck_assert_msg(at_clock_test_muldiv(x, n, d) == want,
                              "%llu * %llu / %llu: %llu, want %llu", (unsigned long long)x,
                              (unsigned long long)n, (unsigned long long)d,
                              (unsigned long long)at_clock_test_muldiv(x, n, d),
                              (unsigned long long)want);
            }
    for (int i = 0; i < 3000000; i++) {
        /* random widths: a span of ticks, a segment's ns and ticks of 1 to 64 bits each */
        uint64_t v[3];
        for (int k = 0; k < 3; k++) {
            uint64_t r = ((uint64_t)random() << 42) ^ ((uint64_t)random() << 21) ^ (uint64_t)random();
            unsigned bits = 1 + (unsigned)random() % 64;
            v[k] = bits == 64 ? r : r & ((1ull << bits) - 1);
        }
        if (v[2] == 0)
            v[2] = 1;
        uint64_t want = (uint64_t)((unsigned __int128)v[0] * v[1] / v[2]);
        uint64_t got = at_clock_test_muldiv(v[0], v[1], v[2]);
        ck_assert_msg(got == want, "%llu * %llu / %llu: %llu, want %llu", (unsigned long long)v[0],
                      (unsigned long long)v[1], (unsigned long long)v[2], (unsigned long long)got,
                      (unsigned long long)want);
    }
}
END_TEST

/* Between two pairs, an event's file time is the pair's ns plus the segment's slope times the
 * ticks since the pair, rounded down: at 3 ticks per ns, and at 0.7 (a clock slower than 1 GHz). */
START_TEST(conversion_is_exact_between_pairs)
{
    srandom(4242 + (unsigned)_i);
    const double tpn = _i == 0 ? 3.0 : 0.7;
    pair p[40];
    p[0] = (pair){5000000000000ull, 777000000000ull};
    p[1] = (pair){p[0].t + 60000, p[0].n + (uint64_t)(60000 / tpn)};
    at_clock_test_reset(p[0].t, p[0].n, p[1].t, p[1].n);
    for (int i = 2; i < 40; i++) {
        uint64_t dt = 1 + (uint64_t)random() % 300000000;
        double ppm = (double)(random() % 4001) - 2000.0;
        uint64_t dn = (uint64_t)((double)dt / tpn * (1.0 + ppm / 1e6));
        p[i] = (pair){p[i - 1].t + dt, p[i - 1].n + (dn ? dn : 1)};
        ck_assert_uint_eq(at_clock_test_mark(p[i].t, p[i].n), p[i].t);
    }
    uint64_t last = 0;
    for (int i = 1; i < 40; i++)
        for (int k = 0; k < 2000; k++) {
            uint64_t dt = p[i].t - p[i - 1].t;
            uint64_t t = p[i - 1].t + (k == 0 ? 0 : k == 1 ? dt - 1 : (uint64_t)random() % dt);
            uint64_t want = p[i - 1].n + (uint64_t)((unsigned __int128)(t - p[i - 1].t)
                                                    * (p[i].n - p[i - 1].n) / dt);
            ck_assert_uint_eq(at_clock_file_ts(t), want);
            if (k < 2) {
                ck_assert_uint_ge(want, last);
                last = want;
            }
        }
}
END_TEST

/* The merge's limit in ticks (at_clock_ticks_upto) takes exactly the ticks whose file time is at
 * most the limit's: the newest such tick, and the next one past it. */
START_TEST(merge_limit_in_ticks_is_the_file_time_limit)
{
    srandom(99 + (unsigned)_i);
    truth_start();
    ngiven = 0;
    for (int f = 0; f < 200; f++) {
        uint64_t dt = 30000 + (uint64_t)random() % 15000000;
        uint64_t cut = flush_pair(dt, (double)(random() % 2001) - 1000.0);
        uint64_t lim = at_clock_file_ts(cut);
        for (int k = 0; k < 20; k++) {
            uint64_t ns = lim - (k == 0 ? 1 : (uint64_t)random() % 50000);
            uint64_t upto;
            ck_assert(at_clock_ticks_upto(ns, cut, &upto));
            ck_assert_uint_le(upto, cut);
            ck_assert_uint_le(at_clock_file_ts(upto), ns);
            if (upto < cut)
                ck_assert_uint_gt(at_clock_file_ts(upto + 1), ns);
        }
    }
}
END_TEST

/* The monotonic clock read without a call the compiler sees (at_ticks_nocall, for the one-pass
 * record on a machine whose TSC is not trusted): every general register but rax and rdx comes back
 * as it was, whatever the stack's alignment, the red zone below rsp is untouched, and the value is
 * CLOCK_MONOTONIC's ns. _i: 0 enters with rsp 16-aligned, 1 with it 8 off. */
START_TEST(monotonic_read_keeps_the_callers_registers)
{
    ck_assert_int_eq(at_clock_select(AT_CLOCK_MONOTONIC), AT_CLOCK_MONOTONIC);
    uint64_t in[7], out[7], zone_in[16], zone_out[16];
    for (int k = 0; k < 7; k++)
        in[k] = 0x0101010101010101ull * (uint64_t)(k + 3) ^ 0x8000000000000001ull;
    for (int k = 0; k < 16; k++)
        zone_in[k] = 0xa5a5a5a500000000ull | (uint64_t)k;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    /* the 128 bytes below rsp hold zone_in while the stub runs; read back after. Every register
     * but rsp and rbp is named (the operands come in through rax: a sanitizer build keeps rbp) */
    uint64_t args[5] = {(uint64_t)(uintptr_t)in, (uint64_t)(uintptr_t)out, (uint64_t)(uintptr_t)zone_in,
                        (uint64_t)(uintptr_t)zone_out, _i ? 8 : 0};
    uint64_t ra = (uint64_t)(uintptr_t)args, rd = 0;
    __asm__ volatile("mov 0(%%rax), %%r12\n\t"
                     "mov 8(%%rax), %%r13\n\t"
                     "mov 16(%%rax), %%r14\n\t"
                     "mov 24(%%rax), %%r15\n\t"
                     "mov %%rsp, %%rbx\n\t"
                     "and $-16, %%rsp\n\t"
                     "sub 32(%%rax), %%rsp\n\t"
                     "xor %%eax, %%eax\n"
                     "1:\n\t"
                     "mov (%%r14,%%rax,8), %%rdx\n\t"
                     "mov %%rdx, -128(%%rsp,%%rax,8)\n\t"
                     "inc %%eax\n\t"
                     "cmp $16, %%eax\n\t"
                     "jne 1b\n\t"
                     "mov 0(%%r12), %%rcx\n\t"
                     "mov 8(%%r12), %%rsi\n\t"
                     "mov 16(%%r12), %%rdi\n\t"
                     "mov 24(%%r12), %%r8\n\t"
                     "mov 32(%%r12), %%r9\n\t"
                     "mov 40(%%r12), %%r10\n\t"
                     "mov 48(%%r12), %%r11\n\t"
                     "lea -128(%%rsp), %%rsp\n\t"
                     "call at_clock_mono_ns_keep\n\t"
                     "lea 128(%%rsp), %%rsp\n\t"
                     "mov %%rcx, 0(%%r13)\n\t"
                     "mov %%rsi, 8(%%r13)\n\t"
                     "mov %%rdi, 16(%%r13)\n\t"
                     "mov %%r8, 24(%%r13)\n\t"
                     "mov %%r9, 32(%%r13)\n\t"
                     "mov %%r10, 40(%%r13)\n\t"
                     "mov %%r11, 48(%%r13)\n\t"
                     "mov %%eax, %%r8d\n\t"
                     "mov %%edx, %%r9d\n\t"
                     "xor %%eax, %%eax\n"
                     "2:\n\t"
                     "mov -128(%%rsp,%%rax,8), %%rdx\n\t"
                     "mov %%rdx, (%%r15,%%rax,8)\n\t"
                     "inc %%eax\n\t"
                     "cmp $16, %%eax\n\t"
                     "jne 2b\n\t"
                     "mov %%r8d, %%eax\n\t"
                     "mov %%r9d, %%edx\n\t"
                     "mov %%rbx, %%rsp"
                     : "+a"(ra), "+d"(rd)
                     :
                     : "rbx", "rcx", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "memory",
                       "cc");
    uint32_t lo = (uint32_t)ra, hi = (uint32_t)rd;
    clock_gettime(CLOCK_MONOTONIC, &b);
    for (int k = 0; k < 7; k++)
        ck_assert_msg(out[k] == in[k], "register %d: %#llx, was %#llx", k,
                      (unsigned long long)out[k], (unsigned long long)in[k]);
    for (int k = 0; k < 16; k++)
        ck_assert_msg(zone_out[k] == zone_in[k], "red zone word %d: %#llx, was %#llx", k,
                      (unsigned long long)zone_out[k], (unsigned long long)zone_in[k]);
    uint64_t ns = (uint64_t)hi << 32 | lo;
    uint64_t na = (uint64_t)a.tv_sec * 1000000000u + (uint64_t)a.tv_nsec;
    uint64_t nb = (uint64_t)b.tv_sec * 1000000000u + (uint64_t)b.tv_nsec;
    ck_assert_msg(ns >= na && ns <= nb, "%llu ns, outside [%llu, %llu]", (unsigned long long)ns,
                  (unsigned long long)na, (unsigned long long)nb);
    /* and the inline read the record makes */
    uint64_t t = at_ticks_nocall();
    ck_assert_uint_ge(t, nb);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("clock_order");
    TCase *tc = tcase_create("clock_order");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, held_back_event_keeps_its_segment);
    tcase_add_test(tc, extrapolated_values_hold_after_a_slower_segment);
    tcase_add_test(tc, older_than_the_window_never_drops);
    tcase_add_loop_test(tc, random_flush_orders_never_go_back, 0, 8);
    tcase_add_test(tc, muldiv_is_the_exact_division);
    tcase_add_loop_test(tc, conversion_is_exact_between_pairs, 0, 2);
    tcase_add_loop_test(tc, merge_limit_in_ticks_is_the_file_time_limit, 0, 4);
    tcase_add_loop_test(tc, monotonic_read_keeps_the_callers_registers, 0, 2);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
