/* rlimit.c: a program that sets its own RLIMIT_AS after the shim started (setrlimit, prlimit on
 * itself). The shim then reserves, right away, the room it will map from later (asroom.c): the
 * program's next look at its VmSize already holds it, as with a limit set before it started. The
 * call itself is the system call glibc makes, with the same result and errno. */
#include <errno.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim.h"

static int set_limit(pid_t pid, int res, const struct rlimit *nw, struct rlimit *old)
{
    long r = syscall(SYS_prlimit64, pid, res, nw, old);
    if (r == 0 && nw && res == RLIMIT_AS && (pid == 0 || pid == getpid()))
        at_as_limit_changed();
    return (int)r;
}

AT_EXPORT int setrlimit(__rlimit_resource_t res, const struct rlimit *rl)
{
    return set_limit(0, (int)res, rl, NULL);
}

AT_EXPORT int setrlimit64(__rlimit_resource_t res, const struct rlimit64 *rl)
{
    return set_limit(0, (int)res, (const struct rlimit *)rl, NULL);
}

AT_EXPORT int prlimit(pid_t pid, __rlimit_resource_t res, const struct rlimit *nw, struct rlimit *old)
{
    return set_limit(pid, (int)res, nw, old);
}

AT_EXPORT int prlimit64(pid_t pid, __rlimit_resource_t res, const struct rlimit64 *nw,
                        struct rlimit64 *old)
{
    return set_limit(pid, (int)res, (const struct rlimit *)nw, (struct rlimit *)old);
}
