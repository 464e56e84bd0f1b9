/* real.c: resolving the next definitions of the interposed functions (real.h).
 *
 * dlsym can itself allocate or read (error strings, a program's own malloc replacement that reads
 * /proc), which could call back into an interposed read/write/close on the same thread while its
 * pointer is still being resolved. A per-thread guard detects that recursion and answers those few
 * calls with raw system calls instead of recursing forever. */
#include "real.h"

#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/syscall.h>

at_hot_page at_hot __attribute__((aligned(4096), section(".bss.at_hot.1")));
_Static_assert(sizeof(at_hot_page) + sizeof(at_rt_hot_t) <= 4096,
               "the hot state and the runtime's hot words fit one page");

static AT_TLS int at_resolving;

static ssize_t raw_read(int fd, void *b, size_t n)
{
    return syscall(SYS_read, fd, b, n);
}
static ssize_t raw_write(int fd, const void *b, size_t n)
{
    return syscall(SYS_write, fd, b, n);
}
static int raw_close(int fd)
{
    return (int)syscall(SYS_close, fd);
}

static void *raw_fallback(const char *name)
{
    if (!strcmp(name, "read"))
        return (void *)raw_read;
    if (!strcmp(name, "write"))
        return (void *)raw_write;
    if (!strcmp(name, "close"))
        return (void *)raw_close;
    return NULL;
}

static void die_unresolved(const char *name)
{
    /* Nothing sensible can be called: say so and stop rather than jump to address 0. */
    static const char pre[] = "acttrace: cannot find the real ";
    raw_write(2, pre, sizeof pre - 1);
    raw_write(2, name, strlen(name));
    raw_write(2, "\n", 1);
    syscall(SYS_exit_group, 127);
}

void *at_real_resolve(const char *name, void **slot)
{
    if (at_resolving) {
        void *f = raw_fallback(name);
        if (f)
            return f;
    }
    int e = errno;
    at_resolving++;
    void *f = dlsym(RTLD_NEXT, name);
    at_resolving--;
    errno = e;
    if (!f)
        f = raw_fallback(name);
    if (!f)
        die_unresolved(name);
    __atomic_store_n(slot, f, __ATOMIC_RELAXED);
    return f;
}

/* The names at_real_init looks up, one after the other at the end of the start's code: as string
 * literals the linker shares their tails with longer names ("read" inside "uv_fs_read"), and the
 * lookups read pages of .rodata across the library, a fault-around window each. */
#define AT_REAL_NAME(fn) #fn "\0"
static const char real_names[] __attribute__((section("at_start_rodata"))) =
    AT_REAL_LIST(AT_REAL_NAME);
#undef AT_REAL_NAME

void at_real_init(void)
{
    int e = errno;
    at_resolving++;
    const char *name = real_names;
    /* Symbols a libc may lack (epoll_pwait2 before glibc 2.35...) stay NULL here and are only
     * looked up, and reported, if the program calls them. */
#define AT_REAL_INIT(fn)                                                                           \
    if (!at_real.fn)                                                                               \
        __atomic_store_n(&at_real.fn, (__typeof__(fn) *)dlsym(RTLD_NEXT, name), __ATOMIC_RELAXED); \
    name += sizeof #fn;
    AT_REAL_LIST(AT_REAL_INIT)
#undef AT_REAL_INIT
    at_resolving--;
    errno = e;
}
