/* limits.c: the shim's reservations under the program's RLIMIT_AS. Every mapping of ours, even a
 * reserved range nothing has touched, counts against the address-space limit, and a program sized
 * to its limit (threads' stacks, a large malloc) must not find its own call failing because we took
 * the room: under a finite limit each large reservation takes at most a small share of it. */
#include <sys/resource.h>

#include "trace_int.h"

size_t at_as_cap(size_t want, unsigned share)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || share == 0)
        return want;
    size_t cap = (size_t)(rl.rlim_cur / share) & ~(size_t)4095;
    return cap < want ? cap : want;
}

bool at_as_limited(void)
{
    struct rlimit rl;
    return getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY;
}
