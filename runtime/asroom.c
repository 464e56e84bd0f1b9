/* asroom.c: the shim's mappings under the program's RLIMIT_AS. Every mapping counts against the
 * address-space limit, even a reserved range nothing has touched, and a program sized to its limit
 * (threads' stacks, a large malloc) must not find one of its own calls failing because the shim took
 * the room. One accounting for every bulk mapping of the shim's:
 *   - while the shim starts (before the program's main), a mapping gets at most a share of the limit,
 *     the shim at most AT_AS_TOTAL_SHARE of it in all, and never more than half of the room left
 *     (the limit less the process's VmSize, /proc/self/statm): it shrinks to fit, or is skipped;
 *   - the start begins by reserving one range (PROT_NONE) for what the shim maps later (alternate
 *     signal stacks, symbol files, per-thread tables): later mappings are placed inside it
 *     (MAP_FIXED), so the VmSize the program sees from main on already holds all the shim will take,
 *     and the shim never maps beside the program's allocations. What does not fit is skipped (with
 *     no range at all, everything later is);
 *   - the limit is read at every mapping: raised later, the shim maps beyond the range once it is
 *     full (at most half of the room left; freely with no limit); set later by the program
 *     (setrlimit, shim/rlimit.c), the range is reserved right then, a share of the new limit and
 *     at most half of the room left.
 * What was reduced is said on one `acttrace:` line: the start's all together, or else the first
 * later one. Not on a hot path: a mapping here costs a few system calls. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "trace_int.h"

#define AT_AS_SHARE 8        /* one mapping: at most this part of the limit by default */
#define AT_AS_TOTAL_SHARE 4  /* all of the shim's mappings together */
#define AT_AS_LATER_SHARE 32 /* the range reserved for later mappings */
#define AT_AS_LATER_MIN (1u << 20)
#define AT_AS_LATER_MAX (32u << 20)
#define AT_AS_FREE_MAX 64    /* free pieces of the range (it is carved in few, long-lived pieces) */

static size_t as_held AT_START_DATA;       /* under as_lock: bytes of the shim's mappings (the range counts whole) */
static bool as_started AT_START_DATA;      /* the shim's start is over */
static bool as_said AT_START_DATA;         /* the one line was written */
static char as_note[384];    /* the start's reductions, for its one line */
static size_t as_note_len AT_START_DATA;
static uintptr_t as_lo AT_START_DATA;      /* the range for later mappings: [as_lo, as_lo + as_len) */
static size_t as_len AT_START_DATA;
static size_t as_lim AT_START_DATA;        /* the limit the range was sized for (or the start's, with none) */
static bool as_reserving AT_START_DATA;    /* reserve_range is mapping the range */
static struct { size_t off, len; } as_free[AT_AS_FREE_MAX]; /* by offset, none adjacent */
static int as_nfree AT_START_DATA;
static atomic_flag as_lock AT_FORK_DATA = ATOMIC_FLAG_INIT; /* cleared in a fork child */

/* A try-lock with a bounded wait: a later mapping may be asked for from a signal handler that
 * interrupted the holder on its own thread; it is then skipped rather than waited for forever. */
static bool lock_try(void)
{
    for (int i = 0; i < 1000; i++) {
        if (!atomic_flag_test_and_set_explicit(&as_lock, memory_order_acquire))
            return true;
        if (i > 50)
            sched_yield();
    }
    return false;
}

static void unlock(void)
{
    atomic_flag_clear_explicit(&as_lock, memory_order_release);
}

static size_t soft_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return SIZE_MAX;
    return (size_t)rl.rlim_cur;
}

bool at_as_limited(void)
{
    return soft_limit() != SIZE_MAX;
}

/* The process's VmSize, or SIZE_MAX when it cannot be read. Raw calls: nothing interposed runs. */
static size_t vm_size(void)
{
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return SIZE_MAX;
    char b[64];
    long n = syscall(SYS_read, fd, b, sizeof b - 1);
    syscall(SYS_close, fd);
    if (n <= 0)
        return SIZE_MAX;
    size_t pages = 0;
    for (long i = 0; i < n && b[i] >= '0' && b[i] <= '9'; i++)
        pages = pages * 10 + (size_t)(b[i] - '0');
    return pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* What the shim may map now under limit lim: at most want, down to min; 0 when not even min. */
static size_t grant(size_t lim, size_t want, size_t min, unsigned share)
{
    size_t g = want, vm = vm_size();
    size_t room = vm < lim ? lim - vm : 0;
    size_t total = lim / AT_AS_TOTAL_SHARE;
    if (as_started) /* a limit set by the program: what the shim holds already is in its VmSize */
        total = as_held + lim / share;
    if (g > lim / share)
        g = lim / share;
    if (g > (total > as_held ? total - as_held : 0))
        g = total > as_held ? total - as_held : 0;
    if (g > room / 2)
        g = room / 2;
    if (g < want)
        g &= ~(size_t)4095;
    return g >= min && g ? g : 0;
}

static void say(const char *s, size_t n)
{
    while (n > 0) {
        long w = syscall(SYS_write, 2, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

/* A reduction: gathered for the start's line, or the one line after the start. */
static void note(const char *what, size_t want, size_t got, size_t lim)
{
    char one[128];
    int n = got ? snprintf(one, sizeof one, "%s %zu KiB of %zu", what, got >> 10, want >> 10)
                : snprintf(one, sizeof one, "no %s (%zu KiB)", what, want >> 10);
    if (n < 0)
        return;
    if (!as_started) {
        if (as_note_len + (size_t)n + 2 < sizeof as_note) {
            as_note_len += (size_t)snprintf(as_note + as_note_len, sizeof as_note - as_note_len,
                                            "%s%s", as_note_len ? ", " : "", one);
        }
        return;
    }
    if (as_said)
        return;
    as_said = true;
    char line[256];
    n = snprintf(line, sizeof line,
                 "acttrace: RLIMIT_AS %zu MiB leaves no more room for the trace: %s (later "
                 "reductions are not reported)\n", lim >> 20, one);
    if (n > 0)
        say(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* Under as_lock: len bytes of the reserved range (first fit), or SIZE_MAX. */
static size_t range_take(size_t len)
{
    for (int i = 0; i < as_nfree; i++) {
        if (as_free[i].len < len)
            continue;
        size_t off = as_free[i].off;
        as_free[i].off += len;
        as_free[i].len -= len;
        if (!as_free[i].len) {
            memmove(&as_free[i], &as_free[i + 1], sizeof as_free[0] * (size_t)(as_nfree - i - 1));
            as_nfree--;
        }
        return off;
    }
    return SIZE_MAX;
}

/* Under as_lock: the piece back to the free list, merged with its neighbours. false: no entry left
 * (the piece stays reserved, unused). */
static bool range_give(size_t off, size_t len)
{
    int i = 0;
    while (i < as_nfree && as_free[i].off < off)
        i++;
    bool prev = i > 0 && as_free[i - 1].off + as_free[i - 1].len == off;
    bool next = i < as_nfree && off + len == as_free[i].off;
    if (prev && next) {
        as_free[i - 1].len += len + as_free[i].len;
        memmove(&as_free[i], &as_free[i + 1], sizeof as_free[0] * (size_t)(as_nfree - i - 1));
        as_nfree--;
    } else if (prev) {
        as_free[i - 1].len += len;
    } else if (next) {
        as_free[i].off = off;
        as_free[i].len += len;
    } else {
        if (as_nfree == AT_AS_FREE_MAX)
            return false;
        memmove(&as_free[i + 1], &as_free[i], sizeof as_free[0] * (size_t)(as_nfree - i));
        as_free[i].off = off;
        as_free[i].len = len;
        as_nfree++;
    }
    return true;
}

static void *map_plain(size_t len, int prot, int flags, int fd, off_t off)
{
    void *p = mmap(NULL, len, prot, flags, fd, off);
    return p == MAP_FAILED ? NULL : p;
}

void *at_as_map(const char *what, size_t *len, size_t min, unsigned share, int prot, int flags,
                int fd, off_t off)
{
    int e = errno;
    size_t want = *len, lim = soft_limit();
    if (!min || min > want)
        min = want;
    if (!share)
        share = AT_AS_SHARE;
    void *p = NULL;
    if (lim == SIZE_MAX) {
        p = map_plain(want, prot, flags, fd, off);
        if (p && lock_try()) {
            as_held += want;
            unlock();
        }
        errno = p ? e : ENOMEM;
        return p;
    }
    if (!lock_try()) {
        errno = ENOMEM;
        return NULL;
    }
    size_t got = 0;
    if (as_started && as_len) {
        /* from the reserved range: the process's VmSize does not change. One that may shrink
         * takes a quarter of the range at most: the rest stays for the others */
        size_t take = want;
        if (min < want && take > as_len / 4)
            take = (as_len / 4) & ~(size_t)4095;
        if (take < min)
            take = want;
        size_t need = (take + 4095) & ~(size_t)4095, o = range_take(need);
        if (o == SIZE_MAX && lim > as_lim)
            goto raised; /* the range is full, but the program raised its limit since */
        unlock();
        if (o != SIZE_MAX) {
            p = mmap((void *)(as_lo + o), take, prot, flags | MAP_FIXED, fd, off);
            if (p == MAP_FAILED) { /* the piece is still ours (mmap replaces only on success) */
                p = NULL;
                if (lock_try()) {
                    range_give(o, need);
                    unlock();
                }
            } else {
                got = take;
            }
        }
        if (!lock_try()) { /* (only for the note) */
            *len = got;
            errno = p ? e : ENOMEM;
            return p;
        }
    } else if (as_started && !as_reserving && lim <= as_lim) {
        /* no range and the limit not raised: nothing beside the program's allocations */
    } else {
    raised:
        got = grant(lim, want, min, share);
        if (got) {
            p = map_plain(got, prot, flags, fd, off);
            if (p)
                as_held += got;
            else
                got = 0;
        }
    }
    if (got < want)
        note(what, want, got, lim);
    unlock();
    *len = got;
    errno = p ? e : ENOMEM;
    return p;
}

void *at_as_carve(at_as_carver *c, size_t n, size_t block, const char *what)
{
    if (n > block)
        return NULL;
    if (c->left < n) {
        size_t len = block;
        void *m = at_as_map(what, &len, 0, 0, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0);
        if (!m)
            return NULL;
        c->cur = m; /* the old block's tail stays unused */
        c->left = len;
    }
    void *p = c->cur;
    c->cur += n;
    c->left -= n;
    return p;
}

void at_as_unmap(void *p, size_t len)
{
    if (!p || !len)
        return;
    int e = errno;
    uintptr_t a = (uintptr_t)p;
    size_t need = (len + 4095) & ~(size_t)4095;
    if (as_len && a >= as_lo && a + need <= as_lo + as_len) {
        /* stays reserved: the piece goes back to the range, not to the process */
        if (mmap(p, need, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
                 0) != MAP_FAILED && lock_try()) {
            range_give(a - as_lo, need);
            unlock();
        }
    } else {
        munmap(p, len);
        if (lock_try()) {
            as_held = as_held > len ? as_held - len : 0;
            unlock();
        }
    }
    errno = e;
}

/* A fork child is one thread: another thread of the parent may have held the lock. */
AT_FORK_TEXT static void as_atfork_child(void)
{
    atomic_flag_clear(&as_lock);
}

/* Under a finite limit: the range later mappings come from, if there is none yet. */
static void reserve_range(size_t lim)
{
    if (as_len || lim == SIZE_MAX)
        return;
    size_t want = lim / AT_AS_LATER_SHARE;
    if (want > AT_AS_LATER_MAX)
        want = AT_AS_LATER_MAX;
    want &= ~(size_t)4095;
    if (want < AT_AS_LATER_MIN)
        want = AT_AS_LATER_MIN;
    size_t got = want;
    as_reserving = true;
    void *p = at_as_map("room for later mappings", &got, AT_AS_LATER_MIN, AT_AS_LATER_SHARE,
                        PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    as_reserving = false;
    if (!p || !lock_try())
        return;
    as_free[0].off = 0;
    as_free[0].len = got;
    as_nfree = 1;
    as_lo = (uintptr_t)p;
    as_lim = lim;
    __atomic_store_n(&as_len, got, __ATOMIC_RELEASE);
    unlock();
    static bool atfork_set;
    if (!atfork_set) {
        atfork_set = true;
        pthread_atfork(NULL, NULL, as_atfork_child);
    }
}

static size_t as_begin_lim AT_START_DATA; /* the limit at the start's beginning */

void at_as_start_begin(void)
{
    int e = errno;
    as_begin_lim = soft_limit();
    reserve_range(as_begin_lim);
    errno = e;
}

void at_as_start_done(void)
{
    if (as_started)
        return;
    int e = errno;
    size_t lim = soft_limit();
    if (lim != as_begin_lim)
        reserve_range(lim); /* the limit was set during the start */
    if (!as_len)
        as_lim = lim;
    if (lim != SIZE_MAX && as_note_len) {
        as_said = true;
        char line[512];
        int n = snprintf(line, sizeof line, "acttrace: RLIMIT_AS %zu MiB: the trace takes less "
                         "room: %s\n", lim >> 20, as_note);
        if (n > 0)
            say(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    }
    as_started = true;
    errno = e;
}

void at_as_limit_changed(void)
{
    if (!as_started)
        return;
    int e = errno;
    reserve_range(soft_limit());
    errno = e;
}
