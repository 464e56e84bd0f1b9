/* stack.h: capturing the call stack of the calling thread (runtime/). Stacks are arrays of return
 * addresses, leaf first, as at_event_write takes them.
 *
 * Three walkers:
 * - AT_STACK_SHARED (default): walks with a process-wide table of per-address unwind rules (where the
 *   caller's frame and return address are, relative to rsp or rbp). Rules are learned once per address
 *   per process through libunwind's DWARF unwinder (unw_step), so a new thread pays nothing extra.
 * - AT_STACK_LIBUNWIND: libunwind's own fast path, unw_backtrace. Its rule cache is per thread: on every
 *   new thread the first capture builds a 256 KiB table (64 page faults) and walks the slow DWARF path
 *   for every frame, ~100 us. Kept for comparison (bench_stack) and as a fallback.
 * - AT_STACK_FP: follows the rbp chain; ~1 ns per frame, correct only for code built with frame
 *   pointers (a frame without one is skipped or ends the walk).
 * libunwind.so.8 is loaded with dlopen(RTLD_LOCAL), never linked: linked, its _Unwind_* and backtrace
 * exports would take over C++ exception handling in the target. Without libunwind the SHARED and
 * LIBUNWIND modes fall back to the frame-pointer walk (at_stack_mode_in_use says which runs). */
#ifndef AT_STACK_H
#define AT_STACK_H

#include "at_common.h"

enum at_stack_mode {
    AT_STACK_SHARED = 0,
    AT_STACK_LIBUNWIND = 1,
    AT_STACK_FP = 2,
};

#define AT_STACK_MAX_DEPTH 256u

/* Load libunwind (if the mode needs it), set up the shared rule table and take one stack so lazy
 * binding and libunwind's one-time set-up happen here, not on a traced thread. Not async-signal-safe;
 * idempotent (a later call may change the mode). Returns 0, or -1 with a message in err when the
 * mode cannot work (the frame-pointer walk is then used). */
int at_stack_init(enum at_stack_mode mode, char *err, size_t errlen);
enum at_stack_mode at_stack_mode_in_use(void);
const char *at_stack_mode_name(enum at_stack_mode m);

/* The calling thread's stack: ips[0] is the return address into the function that called
 * at_stack_capture (so the leaf is the caller itself), then its caller, and so on; `skip` drops that
 * many more leaf frames (a hook's own frames). At most max (<= AT_STACK_MAX_DEPTH) entries. No lock, no
 * allocation, async-signal-safe once at_stack_init returned; also from a signal handler (the walk
 * crosses the signal frame). Returns the number of entries written (0 before at_stack_init). */
uint32_t at_stack_capture(uintptr_t *ips, uint32_t max, uint32_t skip);
/* The same, and *walk the walk's identity as at_stack_capture_from_kept gives it. */
uint32_t at_stack_capture_kept(uintptr_t *ips, uint32_t max, uint32_t skip, uint64_t *walk);
/* The stack of a frame of the calling thread's that is not the caller's: ip, sp and bp as that
 * frame has them (ip a return address into it: the walk goes up from there). The same walkers.
 * *walk is the walk's identity when it is a kept one (a walk from the same start kept earlier, or
 * this one, kept now), else 0: two walks of the same non-zero identity gave the same frames (a
 * slot taken by another walk changes the identity). */
uint32_t at_stack_capture_from_kept(uintptr_t *ips, uint32_t max, uint64_t ip, uint64_t sp,
                                    uint64_t bp, uint64_t *walk);
/* Return trampolines: a return address in [pool + size*k, pool + size*(k+1)) (0 < k, size a power
 * of two) stands for ra[stride*k] (the shim's hooked calls in progress); walks name the real caller
 * and leave the trampoline out. */
void at_stack_set_trampolines(uintptr_t pool, uintptr_t len, uintptr_t size, const uint64_t *ra,
                              uintptr_t stride);
/* The same with an explicit walker (benchmarks, tests). */
uint32_t at_stack_capture_with(enum at_stack_mode m, uintptr_t *ips, uint32_t max, uint32_t skip);

/* Rules in the shared table, and walks that took libunwind's slow path to learn some (tests,
 * diagnostics). */
uint32_t at_stack_rules_learned(void);
uint32_t at_stack_slow_walks(void);
/* Fast walks kept for their start (stack.c: a walk from the same start that finds the words it
 * read unchanged is served from it, and keeps nothing) */
uint32_t at_stack_walks_kept(void);

#endif
