/* asroom.h: the shim's address space under the program's RLIMIT_AS (asroom.c). */
#ifndef AT_ASROOM_H
#define AT_ASROOM_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* A bulk mapping of the shim's (mmap's prot, flags, fd and offset), named `what` in the one line
 * that says what was reduced. *len is what the caller wants on entry and what it got on return: under
 * a finite RLIMIT_AS it may shrink (page-rounded) down to min (0: no shrinking). At most 1/share of
 * the limit (0: the default share). Returns NULL (errno ENOMEM) when skipped. */
void *at_as_map(const char *what, size_t *len, size_t min, unsigned share, int prot, int flags,
                int fd, off_t off);
/* Objects carved in order out of blocks mapped through at_as_map and never given back (the
 * shim's small objects, the event registry). */
typedef struct at_as_carver {
    unsigned char *cur; /* the block being carved */
    size_t left;
} at_as_carver;
/* n bytes from c's block, or from a new one of `block` bytes mapped as `what` when fewer than n are
 * left there (the old block's tail stays unused); NULL when none can be mapped. Not thread-safe: the
 * caller serialises. */
void *at_as_carve(at_as_carver *c, size_t n, size_t block, const char *what);
/* Give back a mapping at_as_map made (the exact address and the length it returned). */
void at_as_unmap(void *p, size_t len);
/* The shim's start begins: under a finite limit, reserve the range later mappings come from (first,
 * before the start's own reservations take their shares). */
void at_as_start_begin(void);
/* The shim's start is over: from now on mappings come from that range; say in one line what the
 * start reduced. */
void at_as_start_done(void);
/* The program changed its RLIMIT_AS (shim/rlimit.c): a limit set where there was none reserves the
 * range for later mappings now, before the program's next step plans with its VmSize. */
void at_as_limit_changed(void);
/* Whether a finite soft RLIMIT_AS is set now. */
bool at_as_limited(void);

#endif
