/* saferead.h: reading memory the shim was only given an address of (a captured char * argument or
 * return value) without ever faulting, whatever the address holds. */
#ifndef AT_SAFEREAD_H
#define AT_SAFEREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Copy n bytes from src to dst. Returns how many leading bytes could be read (n when all); the
 * byte at src + return value is unreadable. Async-signal-safe, no allocation, no lock. */
size_t at_saferead(void *dst, const void *src, size_t n);

/* Copy the NUL-terminated string at src into dst, at most n bytes (no NUL added). Returns the
 * bytes copied before the NUL (n when none was found within n). *bad is set to the address of the
 * first byte that could not be read before the NUL or the bound was reached, or to 0. */
size_t at_saferead_str(char *dst, const char *src, size_t n, uintptr_t *bad);

/* [lo, hi) stays mapped and readable for the life of the process (a segment of an object loaded at
 * start): reads there are plain copies. Not thread-safe: call before the first read (at start). */
void at_saferead_add_range(uintptr_t lo, uintptr_t hi);

/* Whether the kernel refused a copy outright (EPERM or ENOSYS: a seccomp filter forbids
 * process_vm_readv): memory outside the permanent ranges then counts as unreadable unread. */
bool at_saferead_denied(void);

/* The main thread's stack zone: [lo, hi), where hi is at or below the top of its stack mapping and
 * no other mapping can lie in between (the kernel keeps the stack's rlimit free below it). While a
 * thread's stack pointer is in the zone, the memory from it to hi is read directly. */
void at_saferead_main_stack(uintptr_t lo, uintptr_t hi);

/* How many reads took the system call (tests, bench). */
uint64_t at_saferead_syscalls(void);

#endif
