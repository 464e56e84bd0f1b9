/* fdguard.c: keeps the shim's own file descriptors out of the program's way. Daemons commonly close
 * every descriptor they did not open (a loop of close(), closefrom, close_range) right after start,
 * shells and spawn helpers dup2 onto low numbers (`exec 3>file`, a child's fd 3); the trace would
 * then stop, or worse, its number would be reused and the flusher would write into the program's own
 * file. So the writer keeps its file on a high number (output.c) and publishes it (at_trace_fd),
 * libunwind's memory-check pipe is moved high as well, and:
 *   - closes of those numbers (one by one or in ranges) leave them open, as if the program had never
 *     had them: close() returns 0;
 *   - a dup2/dup3 onto the trace's number first moves the trace elsewhere, then lets the program
 *     have the number;
 *   - what no wrapper sees (a raw close_range system call, then an open on the number) the writer
 *     notices before it writes: the file is no longer the one it opened, and it opens it again.
 * The writer's own closes come here too (it is linked into this library): it clears at_trace_fd
 * first, and runs under at_internal in the places where the shim closes on its behalf. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "real.h"
#include "shim.h"

int at_unw_fds[2] = {-1, -1}; /* libunwind's pipe, once it made one */

/* The shim's descriptors inside [first, last], ascending; returns how many (at most 3). */
static int ours_in(unsigned first, unsigned last, int out[3])
{
    if (at_internal)
        return 0;
    int c[3] = {at_trace_fd, at_unw_fds[0], at_unw_fds[1]}, n = 0;
    for (int i = 0; i < 3; i++)
        if (c[i] >= 0 && (unsigned)c[i] >= first && (unsigned)c[i] <= last) {
            int k = n++;
            while (k > 0 && out[k - 1] > c[i]) { /* insertion: ascending */
                out[k] = out[k - 1];
                k--;
            }
            out[k] = c[i];
        }
    return n;
}

/* close_range and closefrom close many at once: close the stretches between ours. */
AT_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
    at_fdflow_untag_range(first, last);
    int ours[3];
    int n = (flags & CLOSE_RANGE_CLOEXEC) ? 0 : ours_in(first, last, ours);
    if (n == 0)
        return AT_REAL(close_range)(first, last, flags);
    unsigned from = first;
    for (int i = 0; i <= n; i++) {
        unsigned to = i < n ? (unsigned)ours[i] : last;
        if (i < n && (unsigned)ours[i] == from) { /* ours at the start of the stretch */
            from = (unsigned)ours[i] + 1;
            continue;
        }
        if (i < n)
            to--;
        if (from <= to && AT_REAL(close_range)(from, to, flags) != 0)
            return -1;
        if (i < n)
            from = (unsigned)ours[i] + 1;
        if (i < n && (unsigned)ours[i] == last)
            break;
    }
    return 0;
}

AT_EXPORT void closefrom(int low)
{
    if (low < 0)
        low = 0;
    at_fdflow_untag_range((unsigned)low, ~0u);
    int ours[3];
    int n = ours_in((unsigned)low, ~0u, ours);
    if (n == 0) {
        AT_REAL(closefrom)(low);
        return;
    }
    int from = low;
    for (int i = 0; i < n; i++) {
        if (ours[i] > from)
            AT_REAL(close_range)((unsigned)from, (unsigned)ours[i] - 1, 0);
        from = ours[i] + 1;
    }
    AT_REAL(closefrom)(from);
}

/* A dup2/dup3 onto the trace's number: the trace moves first (not in a vfork child, whose
 * descriptor table is its own while its memory is the parent's: the number changes for it alone). */
void at_fdguard_before_dup(int to)
{
    if (to < 0 || to != at_trace_fd || at_internal || (pid_t)syscall(SYS_getpid) != at_pid)
        return;
    int e = errno;
    at_trace_move_fd();
    errno = e;
}

/* libunwind checks addresses by writing them into a pipe of its own, made at its first use. Its
 * pipe2 is normally a fake that makes no descriptor (runtime/unwmem.c); if its slots could not be
 * rewritten, the pipe goes high (its read end would otherwise take a low number and could come to read a program's
 * file or socket once a close-all loop freed it). */
static void pipe_made(int fds[2], const void *ret)
{
    const char *n = at_object_name(ret);
    if (!n || strncmp(n, "libunwind", 9) != 0)
        return;
    int e = errno;
    for (int i = 0; i < 2; i++) {
        int hi = at_fd_move_high(fds[i]);
        fds[i] = hi;
        at_unw_fds[i] = hi;
    }
    errno = e;
}

AT_EXPORT int pipe2(int fds[2], int flags)
{
    int r = AT_REAL(pipe2)(fds, flags);
    if (r == 0) /* libunwind is loaded while the constructor runs, before at_on() */
        pipe_made(fds, __builtin_return_address(0));
    return r;
}

AT_EXPORT int pipe(int fds[2])
{
    int r = AT_REAL(pipe)(fds);
    if (r == 0) /* libunwind is loaded while the constructor runs, before at_on() */
        pipe_made(fds, __builtin_return_address(0));
    return r;
}
