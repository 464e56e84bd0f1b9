/* xstate.h: calling code that may use vector, x87 or MXCSR state from code that must leave that state
 * exactly as it found it.
 *
 * A hooked function's wrapper (shim/hook/stub_asm.S) must leave every register as the unhooked
 * function would, and saving the whole extended state on every call costs more than the rest of the
 * hook (XSAVEC+XRSTOR of SSE|AVX: about 240 cycles; of SSE|AVX|AVX-512: 270). So the runtime and the
 * hook's C code are built with -mgeneral-regs-only (the Makefile) and never touch that state
 * themselves; the few calls they make into code that may (malloc and free, which may be any
 * allocator; libunwind; pthread_once and pthread_setspecific, which may allocate) go through these,
 * which save the state on the stack around the call. Small libc functions without vector code on
 * their path (clock_gettime, pthread mutexes, sem_post, sched_yield, syscall wrappers,
 * __errno_location) are called directly (tests/integration/test_harm_stub.c reads the shim's
 * disassembly for anything else on the hook's path); memcpy and friends are not called at all (glibc's use AVX and vzeroupper).
 * Async-signal-safe: no state but the CPU's feature bits, found on first use. */
#ifndef AT_XSTATE_H
#define AT_XSTATE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* x87, SSE (with MXCSR), AVX, AVX-512 opmask and upper halves: every component a compiler or libc
 * routine may touch, in XSAVE's standard-format layout at most this size */
#define AT_XSTATE_SIZE 2816

typedef struct at_xstate {
    _Alignas(64) uint8_t b[AT_XSTATE_SIZE];
} at_xstate;

void at_xstate_save(at_xstate *x);
void at_xstate_restore(const at_xstate *x);

/* the shim's small objects (smalloc.c, not the program's malloc: at most 1008 bytes), pthread_once
 * (whose routine registers event types, atfork handlers: allocations) and pthread_setspecific
 * (which allocates for keys past the first 32) with the extended state kept */
void *at_xs_malloc(size_t n);
void at_xs_free(void *p);
/* *len bytes, read-write, through asroom.c (the process's RLIMIT_AS), or NULL */
void *at_xs_as_map(const char *what, size_t *len);
void at_xs_once(pthread_once_t *once, void (*fn)(void));
int at_xs_setspecific(pthread_key_t key, const void *v);
/* fn() with the extended state kept: rare work that runs libc code (opening a file, starting a thread) */
void at_xs_call(void (*fn)(void));

/* Copy n 8-byte words without a call into libc (whose memcpy uses vector registers). */
static inline void at_copy_words(uint64_t *d, const uint64_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        d[i] = s[i];
        __asm__("" ::: "memory"); /* no conversion of the loop into a memcpy call */
    }
}
static inline void at_move_words(uint64_t *d, const uint64_t *s, size_t n)
{
    if (d <= s)
        at_copy_words(d, s, n);
    else
        for (size_t i = n; i-- > 0;) {
            d[i] = s[i];
            __asm__("" ::: "memory");
        }
}

#endif
