/* clock.h: choosing and calibrating the event clock (at_ticks() in at_common.h). */
#ifndef AT_CLOCK_H
#define AT_CLOCK_H

#include <stdatomic.h>
#include "trace.h"


/* Choose the event clock; only while no session is writing. Returns the clock chosen. */
enum at_clock_kind at_clock_select(enum at_clock_kind want);
/* The TSC's calibration completed (a second pair, 20 us or more after the one at_clock_select
 * took): before any file time is computed. Once per process; async-signal-safe. */
void at_clock_calibrate(void);
/* Ticks per second of the event clock: 1e9, or the TSC's best estimate so far (for spans in ticks;
 * file times go through at_clock_file_ts). */
uint64_t at_clock_freq(void);
/* The file time base (CLOCK_MONOTONIC ns). at_clock_mark takes a new (TSC, CLOCK_MONOTONIC) pair
 * and returns the cut (its TSC value, or the newest pair's when no time passed); at_clock_file_ts
 * converts event ticks to file ns through the pairs around them, and no later conversion of an
 * equal or later tick gives less. Both under at_flush_lock (the flusher and the emergency flush);
 * async-signal-safe. */
uint64_t at_clock_mark(void);
uint64_t at_clock_file_ts(uint64_t ticks);
/* The newest tick at or below hi whose file time is at or below ns, into *upto; false when no
 * tick has (under at_flush_lock; nothing counts as given out). */
bool at_clock_ticks_upto(uint64_t ns, uint64_t hi, uint64_t *upto);
/* A file's start time: now, through a pair taken for it (under at_flush_lock too). */
uint64_t at_clock_file_now(void);
uint64_t at_clock_ns_to_ticks(uint64_t ns);
/* The event ticks at a CLOCK_MONOTONIC time (a time taken before the clock was chosen), through the
 * base pair and the frequency: after at_clock_calibrate. */
uint64_t at_clock_ticks_at_ns(uint64_t ns);
/* Tests only: the file time base in TSC mode from two pairs of the caller's; a pair added as a
 * flush adds one (returns the cut at_clock_mark would). */
void at_clock_test_reset(uint64_t tsc, uint64_t ns, uint64_t tsc2, uint64_t ns2);
uint64_t at_clock_test_mark(uint64_t tsc, uint64_t ns);
/* Tests only: floor(x * num / den) as the conversion computes it (without a 128-bit division). */
uint64_t at_clock_test_muldiv(uint64_t x, uint64_t num, uint64_t den);

#endif
