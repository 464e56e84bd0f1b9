/* test_reader_damage.c: damaged versions of real samples, read in-process through the reader API:
 * every truncation point of the smallest sample and of the first 64 KiB of a bigger one, and
 * thousands of seeded random byte flips. Each must end in a clean parse or one clear error that names
 * a file offset inside the input - never a crash (ASan in make check-asan), an overrun or a hang. */
#include "ntreader.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLES AT_SOURCE_DIR "/tests/data/nettrace-samples"
#define SMALL SAMPLES "/eventpipe-dotnetcore6.0-win-x64-executioncheckpoints.nettrace"
#define BIGGER SAMPLES "/dotnet-5.0-SampleProfiler-single-thread.golden.nettrace"
#define PREFIX_LEN (64 * 1024)

/* ck_assert reports every passing check to the runner through a pipe; in loops of millions of
 * checks that dominates, so hot loops only call into Check on failure. */
#define REQUIRE(cond, ...)                                                                           \
    do {                                                                                             \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);                                                      \
    } while (0)

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)n);
    ck_assert(p != NULL);
    ck_assert_uint_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

static void ignore_problem(void *ctx, uint64_t off, const char *msg)
{
    (void)msg;
    /* a problem offset always lies within the input */
    REQUIRE(off <= *(size_t *)ctx, "problem offset %llu beyond the input", (unsigned long long)off);
}

typedef struct outcome {
    int rc;               /* 0 clean end, -1 error */
    uint64_t events;
    char err[512];
} outcome;

/* Reads data fully. The input is copied to an exactly-sized heap block so ASan sees any overrun. */
static outcome read_all(const uint8_t *data, size_t len, bool strict, bool deep)
{
    outcome o = {0, 0, ""};
    uint8_t *copy = malloc(len ? len : 1);
    REQUIRE(copy != NULL, "out of memory");
    memcpy(copy, data, len);
    nt_options opt = {.strict = strict, .problem = ignore_problem, .ctx = &len};
    nt_reader *r = nt_open_mem(copy, len, &opt, o.err, sizeof o.err);
    if (!r) {
        o.rc = -1;
    } else {
        nt_event ev;
        int rc;
        uint64_t guard = 0;
        while ((rc = nt_next(r, &ev)) == 1) {
            if (!deep) continue;
            /* touch everything the event points at */
            volatile uint8_t sink = 0;
            for (uint32_t i = 0; i < ev.payload_len; i++) sink ^= ev.payload[i];
            for (uint32_t i = 0; i < ev.nframes; i++) sink ^= (uint8_t)ev.frames[i];
            (void)sink;
            char buf[256];
            uint32_t off = 0;
            for (uint32_t i = 0; i < ev.meta->nfields; i++)
                if (!nt_field_format(&ev.meta->fields[i], ev.payload, ev.payload_len, &off, buf, sizeof buf)) break;
            REQUIRE(off <= ev.payload_len, "field offset past the payload");
            REQUIRE(ev.file_offset < len, "event offset outside the input");
            /* an event blob takes at least 2 bytes: more events than bytes would mean a loop */
            REQUIRE(++guard <= len, "more events than bytes");
        }
        o.rc = rc;
        o.events = nt_get_counts(r)->events;
        if (rc < 0) snprintf(o.err, sizeof o.err, "%s", nt_error(r));
        nt_close(r);
    }
    free(copy);
    if (o.rc < 0) {
        /* one clear message naming an offset inside the input */
        const char *p = strstr(o.err, "offset ");
        REQUIRE(p != NULL, "error without an offset: %s", o.err);
        unsigned long long off = strtoull(p + 7, NULL, 10);
        REQUIRE(off <= len, "offset %llu beyond the %zu-byte input: %s", off, len, o.err);
    }
    return o;
}

START_TEST(every_truncation_of_the_small_sample)
{
    size_t len;
    uint8_t *data = slurp(SMALL, &len);
    outcome full = read_all(data, len, true, true);
    ck_assert_int_eq(full.rc, 0);
    ck_assert_uint_eq(full.events, 3);
    for (size_t cut = 0; cut < len; cut++) {
        outcome o = read_all(data, cut, cut & 1, true);
        /* the end-of-stream tag is the last byte: any shorter input is an error, never a silent success */
        REQUIRE(o.rc == -1, "truncation at %zu parsed cleanly", cut);
    }
    free(data);
}
END_TEST

START_TEST(every_truncation_of_a_64k_prefix)
{
    size_t len;
    uint8_t *data = slurp(BIGGER, &len);
    ck_assert_uint_gt(len, PREFIX_LEN);
    uint64_t max_events = 0;
    for (size_t cut = 0; cut <= PREFIX_LEN; cut++) {
        outcome o = read_all(data, cut, cut % 5 == 0, cut % 7 == 0);
        REQUIRE(o.rc == -1, "truncation at %zu parsed cleanly", cut);
        if (o.events > max_events) max_events = o.events;
    }
    /* the prefix holds whole blocks: their events were read before the error */
    ck_assert_uint_gt(max_events, 100);
    free(data);
}
END_TEST

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void flips(const char *path, size_t limit, int rounds, uint64_t seed)
{
    size_t len;
    uint8_t *data = slurp(path, &len);
    if (limit && len > limit) len = limit;
    uint8_t *work = malloc(len);
    ck_assert(work != NULL);
    rng_state = seed;
    int clean = 0, errors = 0;
    for (int i = 0; i < rounds; i++) {
        memcpy(work, data, len);
        int n = 1 + (int)(rnd() % 4);
        for (int k = 0; k < n; k++) {
            size_t at = rnd() % len;
            switch (rnd() % 3) {
            case 0: work[at] ^= (uint8_t)(1u << (rnd() % 8)); break; /* one bit */
            case 1: work[at] = (uint8_t)rnd(); break;                /* random byte */
            default: work[at] = (rnd() & 1) ? 0xFF : 0x00; break;    /* extreme */
            }
        }
        outcome o = read_all(work, len, i & 1, true);
        if (o.rc == 0) clean++;
        else errors++;
    }
    /* both outcomes occur: flips in payload bytes parse, flips in framing are caught */
    ck_assert_int_gt(errors, 0);
    free(work);
    free(data);
}

START_TEST(random_flips_in_the_small_sample)
{
    flips(SMALL, 0, 3000, 0x9E3779B97F4A7C15ULL);
}
END_TEST

START_TEST(random_flips_in_a_64k_prefix)
{
    flips(BIGGER, PREFIX_LEN, 1500, 0xD1B54A32D192ED03ULL);
}
END_TEST

START_TEST(random_flips_in_a_whole_sample)
{
    /* the whole file parses cleanly, so payload flips give clean parses and framing flips errors */
    size_t len;
    uint8_t *data = slurp(BIGGER, &len);
    ck_assert_int_eq(read_all(data, len, true, true).rc, 0);
    free(data);
    flips(BIGGER, 0, 300, 0x2545F4914F6CDD1DULL);
}
END_TEST

START_TEST(huge_declared_sizes_do_not_allocate)
{
    /* a block claiming 2 GiB in a tiny input: refused before allocating, with the offset */
    size_t len;
    uint8_t *data = slurp(SMALL, &len);
    /* the MetadataBlock size field sits at 0x83 in this file (nettrace-v5.md §2 layout) */
    ck_assert_uint_eq(data[0x83], 0x97);
    data[0x83] = 0x00; data[0x84] = 0x00; data[0x85] = 0x10; data[0x86] = 0x00; /* 1 MiB */
    outcome o = read_all(data, len, false, true);
    ck_assert_int_eq(o.rc, -1);
    ck_assert_msg(strstr(o.err, "runs past the end of the file") && strstr(o.err, "offset 136"), "%s", o.err);
    data[0x83] = 0xF0; data[0x84] = 0xFF; data[0x85] = 0xFF; data[0x86] = 0x7F; /* ~2 GiB */
    o = read_all(data, len, false, true);
    ck_assert_int_eq(o.rc, -1);
    ck_assert_msg(strstr(o.err, "over the reader's limit") && strstr(o.err, "offset 131"), "%s", o.err);
    data[0x86] = 0xFF; /* negative */
    o = read_all(data, len, false, true);
    ck_assert_int_eq(o.rc, -1);
    ck_assert_msg(strstr(o.err, "negative block size"), "%s", o.err);
    free(data);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("reader_damage");
    TCase *tc = tcase_create("damage");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, every_truncation_of_the_small_sample);
    tcase_add_test(tc, every_truncation_of_a_64k_prefix);
    tcase_add_test(tc, random_flips_in_the_small_sample);
    tcase_add_test(tc, random_flips_in_a_64k_prefix);
    tcase_add_test(tc, random_flips_in_a_whole_sample);
    tcase_add_test(tc, huge_declared_sizes_do_not_allocate);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
