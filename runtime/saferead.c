/* saferead.c: copies of memory at addresses the shim was handed but does not own (a char * argument
 * that a wrong signature turns into an fd, a size or a freed block). A plain load there can fault and
 * kill the program; here it cannot:
 *   - addresses no mapping can have (below mmap_min_addr's floor, beyond user space) are refused;
 *   - ranges that stay mapped for the life of the process (the segments of the objects loaded at
 *     start, where string literals live) are copied directly, and so is the main thread's stack
 *     from the current stack pointer up (its buffers, argv and the environment) when the thread runs
 *     on it;
 *   - anything else is copied by the kernel with process_vm_readv on our own thread: one system call,
 *     no descriptor, no signal, and it stops at the first unreadable page (EFAULT or a short count).
 * A signal-recovered copy would be cheaper for heap strings, but a fault taken while the thread has
 * SIGSEGV blocked (every thread of a program that blocks all signals in its workers, any handler
 * installed with sigfillset) kills the process whatever handler is installed, and the shim cannot
 * know the thread's mask without a system call: the kernel copy is the one way that never faults. */
#include <errno.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "at_common.h"
#include "saferead.h"

#define SR_PAGE 4096u
/* The kernel never maps page 0 for a user (vm.mmap_min_addr is at least a page on every distribution
 * kernel; should root set 0 and map it, a string there is recorded as unreadable, never read). */
#define SR_MIN_ADDR ((uintptr_t)SR_PAGE)
/* The top of user space with 5-level paging; 4-level tables end lower, the kernel says so there. */
#define SR_MAX_ADDR ((uintptr_t)0x00fffffffffff000ull)
#define SR_MAX_RANGES 256
#define SR_IOV 16 /* remote pieces per system call (one per page, so a short count is exact) */

typedef struct sr_range {
    uintptr_t lo, hi;
} sr_range;

static sr_range sr_ranges[SR_MAX_RANGES] AT_START_BSS_3; /* the start adds the loaded objects */
static int sr_nranges AT_START_DATA;
static uint64_t sr_syscalls;
/* the zone only the main thread's stack can occupy (set at start) */
static uintptr_t sr_main_lo AT_START_DATA, sr_main_hi AT_START_DATA;
static bool sr_denied; /* the kernel refused the copy itself (a seccomp filter): nothing was tried */

void at_saferead_add_range(uintptr_t lo, uintptr_t hi)
{
    if (lo >= hi || lo < SR_MIN_ADDR || hi > SR_MAX_ADDR)
        return;
    int n = sr_nranges, i = 0;
    while (i < n && sr_ranges[i].lo < lo)
        i++;
    /* joins a neighbour it touches or overlaps (the segments of one object often do) */
    if (i > 0 && sr_ranges[i - 1].hi >= lo) {
        if (hi > sr_ranges[i - 1].hi)
            sr_ranges[i - 1].hi = hi;
        i--;
    } else {
        if (n == SR_MAX_RANGES)
            return; /* the kernel copy serves the rest */
        memmove(&sr_ranges[i + 1], &sr_ranges[i], (size_t)(n - i) * sizeof *sr_ranges);
        sr_ranges[i] = (sr_range){lo, hi};
        n++;
    }
    while (i + 1 < n && sr_ranges[i + 1].lo <= sr_ranges[i].hi) {
        if (sr_ranges[i + 1].hi > sr_ranges[i].hi)
            sr_ranges[i].hi = sr_ranges[i + 1].hi;
        memmove(&sr_ranges[i + 1], &sr_ranges[i + 2], (size_t)(n - i - 2) * sizeof *sr_ranges);
        n--;
    }
    __atomic_store_n(&sr_nranges, n, __ATOMIC_RELEASE);
}

void at_saferead_main_stack(uintptr_t lo, uintptr_t hi)
{
    if (lo < hi && lo >= SR_MIN_ADDR && hi <= SR_MAX_ADDR) {
        sr_main_lo = lo;
        sr_main_hi = hi;
    }
}

/* The end of the permanent range holding a, or 0. */
static inline uintptr_t range_end(uintptr_t a)
{
    uintptr_t sp;
    __asm__("mov %%rsp, %0" : "=r"(sp));
    /* on the main stack, everything from the stack pointer to its top is mapped (one mapping) */
    if (sp >= sr_main_lo && sp < sr_main_hi && a >= sp && a < sr_main_hi)
        return sr_main_hi;
    int lo = 0, hi = __atomic_load_n(&sr_nranges, __ATOMIC_ACQUIRE);
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (sr_ranges[mid].hi <= a)
            lo = mid + 1;
        else if (sr_ranges[mid].lo > a)
            hi = mid;
        else
            return sr_ranges[mid].hi;
    }
    return 0;
}

/* The kernel's copy of [a, a + n) into dst: how many leading bytes were readable. The remote side is
 * cut at page boundaries, so a copy that stops short stops exactly at the first unreadable page. */
static AT_NOINLINE size_t kernel_copy(void *dst, uintptr_t a, size_t n)
{
    int e = errno;
    size_t done = 0;
    while (done < n) {
        struct iovec local = {(char *)dst + done, 0}, remote[SR_IOV];
        int k = 0;
        uintptr_t p = a + done;
        size_t left = n - done;
        while (k < SR_IOV && left) {
            size_t piece = SR_PAGE - (p & (SR_PAGE - 1));
            if (piece > left)
                piece = left;
            remote[k].iov_base = (void *)p;
            remote[k].iov_len = piece;
            local.iov_len += piece;
            p += piece;
            left -= piece;
            k++;
        }
        __atomic_add_fetch(&sr_syscalls, 1, __ATOMIC_RELAXED);
        /* our own thread id: a thread of this process, so no ptrace permission is involved */
        long r = syscall(SYS_process_vm_readv, (long)at_tid(), &local, 1L, remote, (long)k, 0L);
        if (r < 0 && (errno == EPERM || errno == ENOSYS))
            __atomic_store_n(&sr_denied, true, __ATOMIC_RELAXED);
        if (r <= 0)
            break;
        done += (size_t)r;
        if ((size_t)r < local.iov_len)
            break;
    }
    errno = e;
    return done;
}

static inline bool plausible(uintptr_t a)
{
    return a >= SR_MIN_ADDR && a < SR_MAX_ADDR;
}

size_t at_saferead(void *dst, const void *src, size_t n)
{
    uintptr_t a = (uintptr_t)src;
    if (!n || !plausible(a))
        return 0;
    if (n > SR_MAX_ADDR - a)
        n = SR_MAX_ADDR - a;
    uintptr_t end = range_end(a);
    if (end && end - a >= n) {
        memcpy(dst, src, n);
        return n;
    }
    return kernel_copy(dst, a, n);
}

size_t at_saferead_str(char *dst, const char *src, size_t n, uintptr_t *bad)
{
    uintptr_t a = (uintptr_t)src;
    *bad = 0;
    if (!n)
        return 0;
    if (!plausible(a)) {
        *bad = a;
        return 0;
    }
    if (n > SR_MAX_ADDR - a)
        n = SR_MAX_ADDR - a;
    size_t i = 0;
    uintptr_t end = range_end(a);
    if (end) {
        size_t lim = end - a < n ? end - a : n;
        for (; i < lim; i++) {
            char c = src[i];
            if (!c)
                return i;
            dst[i] = c;
        }
        if (i == n)
            return n;
    }
    size_t got = kernel_copy(dst + i, a + i, n - i);
    for (size_t k = i; k < i + got; k++) /* no memchr: libc's uses vector registers */
        if (dst[k] == 0)
            return k;
    if (i + got < n)
        *bad = a + i + got;
    return i + got;
}

bool at_saferead_denied(void)
{
    return __atomic_load_n(&sr_denied, __ATOMIC_RELAXED);
}

uint64_t at_saferead_syscalls(void)
{
    return __atomic_load_n(&sr_syscalls, __ATOMIC_RELAXED);
}
