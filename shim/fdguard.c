/* fdguard.c: keeps the trace's own file descriptor alive. Daemons commonly close every descriptor
 * they did not open (a loop of close(), closefrom, close_range) right after start; the trace would
 * then stop, or worse, its number would be reused and the flusher would write into the program's
 * own file. So the shim learns which descriptor holds the trace (after the session starts and in a
 * fork child, which has a new file) and leaves it out of every close the program makes, as if the
 * program had never had it. The writer's own closes (it is linked into this library, so its close()
 * comes here too) run under at_internal and pass. */
#include <dirent.h>
#include <stdio.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "real.h"
#include "shim.h"

int at_trace_fd = -1;

void at_fdguard_refresh(void)
{
    int e = errno;
    at_trace_fd = -1;
    const char *p = at_trace_path();
    char want[PATH_MAX];
    if (!p || !realpath(p, want))
        goto out;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        goto out;
    struct dirent *de;
    while ((de = readdir(d))) {
        char lp[64], target[PATH_MAX];
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        int fd = atoi(de->d_name);
        if (fd == dirfd(d))
            continue;
        snprintf(lp, sizeof lp, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(lp, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = 0;
        if (!strcmp(target, want)) {
            at_trace_fd = fd;
            break;
        }
    }
    closedir(d);
out:
    errno = e;
}

/* close_range and closefrom close many at once: split the range around ours. */
AT_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
    at_fdflow_untag_range(first, last);
    int ours = at_internal ? -1 : at_trace_fd;
    if (ours < 0 || (unsigned)ours < first || (unsigned)ours > last || (flags & CLOSE_RANGE_CLOEXEC))
        return AT_REAL(close_range)(first, last, flags);
    int r = 0;
    if ((unsigned)ours > first)
        r = AT_REAL(close_range)(first, (unsigned)ours - 1, flags);
    if (r == 0 && (unsigned)ours < last)
        r = AT_REAL(close_range)((unsigned)ours + 1, last, flags);
    return r;
}

AT_EXPORT void closefrom(int low)
{
    if (low < 0)
        low = 0;
    at_fdflow_untag_range((unsigned)low, ~0u);
    int ours = at_internal ? -1 : at_trace_fd;
    if (ours < low) {
        AT_REAL(closefrom)(low);
        return;
    }
    if (ours > low)
        AT_REAL(close_range)((unsigned)low, (unsigned)ours - 1, 0);
    AT_REAL(closefrom)(ours + 1);
}
