/* at_common.h: small things every part of acttrace shares: visibility, TLS model, branch hints,
 * the GUID type and the event clock. Header-only; no state. */
#ifndef AT_COMMON_H
#define AT_COMMON_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>
#include <time.h>

/* Everything is built with -fvisibility=hidden; only the interposed API and acttrace.h are exported. */
#define AT_EXPORT __attribute__((visibility("default")))
/* Initial-exec TLS: no __tls_get_addr call and no allocation on first touch (hot path rule). */
#define AT_TLS __thread __attribute__((tls_model("initial-exec")))
#define AT_LIKELY(x) __builtin_expect(!!(x), 1)
#define AT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define AT_NOINLINE __attribute__((noinline))

/* The thread-local state a hooked call's path reads, in one object. In a shared library each
 * initial-exec variable is reached through its offset in the GOT, a load per variable per function;
 * one object is one load per function, its fields at constant offsets from it, and its fields are
 * ordered so that a call reads few of its lines. Each part's own name is a macro on its field (its
 * type, for the parts whose type is private to their file, from the bytes given here: each file
 * checks size and alignment). */
typedef struct at_path_tls {
    /* Ordered by what a call reads: an event reads the first line (the buffer's state and the
     * counters every call tests), an event in an activity the second (the engine's state: the
     * current activity first), a read or write on an adopted connection the third (the
     * innermost adoption). Lines the kernel's work between two calls evicted are each a miss. */
    uint64_t tbuf[6];         /* runtime/tbuf_hot.h at_tbuf_thr (at_thr) */
    int internal;             /* at_internal (below) */
    int nadopt;               /* shim/fdflow.c at_nadopt */
    int hk_nlive;             /* shim/hooks.c: calls in progress with something at their return */
    int thread_noflow;        /* shim/thread.c at_thread_noflow */
    uint64_t act[10];         /* runtime/activity_inline.h at_act_t (at_act_tls) */
    uint64_t adopt[12];       /* shim/fdflow.c at_adopt (at_adoption[AT_ADOPT_MAX]) */
    uint64_t hk[25];          /* shim/hooks.c hk_t: the list of those calls */
    int tid_cache;            /* at_tid_cache (tid.c), a pid_t */
    uint32_t rt_free, rt_top; /* shim/hook/stub.c: the thread's return records */
    bool hk_adopting;         /* shim/hooks.c: keyed flow */
    struct at_activity *hk_adopt_prev, *hk_adopt_cap;
    void *slot_cache;         /* shim/slots.c tl_cache */
    unsigned slot_ncache;     /* shim/slots.c tl_ncache */
    void *pool_last;          /* shim/callbacks.c tl_last_item */
    uint64_t tasks[8];        /* runtime/activity.c: the hand-offs open as tasks (at_flow_task_start) */
    uint64_t idc[4] __attribute__((aligned(64))); /* runtime/activity_inline.h at_act_idcache
                                                   * (at_act_idc): a line of its own */
} at_path_tls;
_Static_assert(offsetof(at_path_tls, act) == 64 && offsetof(at_path_tls, adopt) % 64 == 16,
               "at_path_tls: the buffer's state and the counters on one line, the current activity "
               "first on the next");
extern AT_TLS at_path_tls at_path_tls_v;
/* at_path_tls_v's offset from the thread pointer (the same in every thread), on the interposers'
 * page (runtime/ptls.c; set first thing at start, 0 before): the initial-exec way reads it from
 * the GOT, a page of its own that each call between two system calls which empty the TLB walked
 * again, before and after the system call. */
extern const long at_ptls_off; /* written once, by at_ptls_init (runtime/ptls.c) */
static inline __attribute__((always_inline)) at_path_tls *at_ptls(void)
{
    long off = at_ptls_off; /* a constant to the compiler: read once in a function */
    if (AT_UNLIKELY(off == 0)) /* before the start: the GOT's way */
        return &at_path_tls_v;
    return (at_path_tls *)((char *)__builtin_thread_pointer() + off);
}
/* Sets at_ptls_off (the library's constructor, first) */
void at_ptls_init(void);
#define AT_PTLS (*at_ptls())
/* a field of AT_PTLS as the type its file gives it */
#define AT_PTLS_AS(type, field)                                                                    \
    (*(type *)AT_PTLS.field)
#define AT_PTLS_FITS(type, field)                                                                  \
    _Static_assert(sizeof(type) <= sizeof(((at_path_tls *)0)->field) &&                            \
                       _Alignof(type) <= _Alignof(uint64_t),                                       \
                   #field " in at_path_tls holds a " #type)
/* Code on the path of every interposed system call: the compiler groups it (.text.hot), so the calls
 * between two system calls (whose kernel may empty the TLB each time) touch few code pages. */
#define AT_HOT_FN __attribute__((hot, section("at_path_text"))) /* see AT_PATH_TEXT */
#define AT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* What a fork runs and writes, gathered on as few pages as possible. A fork child maps afresh each
 * code page it runs (the kernel copies no page table of file-backed code) and copies each data page
 * it writes; the parent copies each data page it writes after the fork (its child still shares it)
 * or takes a fault to reclaim it (the child has gone). With shadow paging each such fault costs tens
 * of microseconds. Sections the default linker script does not name are kept whole by the linker. */
#define AT_FORK_TEXT __attribute__((section("at_fork_text"), noinline))
/* The code of a hooked call's path (stub, hook logic, payload, activity and event write) on pages of
 * its own, together (shim/start.ld): between two system calls of a server that flush the TLB, each
 * page the path touches is a miss; spread over the library it touched a dozen pages. */
#define AT_PATH_TEXT __attribute__((section("at_path_text")))
/* Of the rest of the path, the interposed calls a server makes per request on a connection (its
 * reads, writes and close, and the hand-off check of a tagged fd) on one page of their own
 * (shim/start.ld): in two halves they cost every tagged read or write a second page. */
#define AT_PATH_IO __attribute__((hot, section("at_path_io")))
/* An interposer's own run of a rule on its function (shim/fdflow.c, AT_DIRECT_FN): right after the
 * core and the event write it calls (shim/start.ld). */
#define AT_PATH_DIRECT __attribute__((hot, section("at_path_direct")))
/* The core of that path, first on its pages (shim/start.ld): what every hooked call runs (the stub
 * and its return, the hook logic, payload, the activity engine's held Start and Stop and the event
 * write). */
#define AT_PATH_CORE __attribute__((section("at_path_core")))
#define AT_CORE_FN __attribute__((hot, section("at_path_core")))
/* Of the core, the event of a rule with fields (payload, record, its activity): right after the
 * stub's entry and return (shim/start.ld). */
#define AT_PATH_EVENT __attribute__((hot, section("at_path_event")))
/* Of the core, what only an activity rule with fields runs (its Stop, its key's entry): after the
 * event and the return records, beside the activity engine's held Start and Stop
 * (shim/start.ld). */
#define AT_PATH_ACT __attribute__((section("at_path_act")))
/* What an event with a stack runs besides (the hook's stack, the walk from the caller, a kept walk's
 * check, the trim of the shim's frames, the general writer of a record with addresses): right after
 * the interposers' runs (shim/start.ld), on one page rather than six across the library. */
#define AT_PATH_STACK __attribute__((hot, section("at_path_stack")))
#define AT_FORK_DATA __attribute__((section("at_fork_data")))
/* Small variables an image's start writes (settings, event types, one-time flags), together on one
 * page instead of a page each wherever the linker put them in .bss: with shadow paging the first
 * touch of each page costs tens of microseconds, paid by every traced process image. Read-mostly
 * after the start: nothing here is written per event or per thread. */
#define AT_START_DATA __attribute__((section("at_start_data")))
/* Zero-initialised tables whose first bytes the start writes (the clock's first pair, the safe-read
 * ranges): placed by shim/start.ld right after AT_START_DATA, on the page the loader zeroes anyway
 * and the next one (which crtstuff's exit flag shares), instead of a page each in .bss. Only the
 * head of each is written at start; the rest stays untouched. */
#define AT_START_BSS __attribute__((section(".bss.at_start")))
/* The same, placed in this order before the others (shim/start.ld): the settings (their head on
 * the start data's page), the event registry's first block (a page of its own, written nearly
 * whole), the safe-read ranges (their head on the rest of that page). */
#define AT_START_BSS_1 __attribute__((section(".bss.at_start.1")))
#define AT_START_BSS_2 __attribute__((section(".bss.at_start.2")))
#define AT_START_BSS_3 __attribute__((section(".bss.at_start.3")))
/* The runtime's words every event reads (at_rt_hot), on the page of the shim's interposers' state
 * (shim/real.c at_hot; shim/start.ld at_hot_bss): one page for both. The hook logic's own words every
 * call reads (the errno offset, the stack depth) and the interposers' hooks are there too. */
#define AT_HOT_PAGE_RT __attribute__((section(".bss.at_hot.2")))
/* Last on that page, a line of its own: a word any thread may write (runtime/activity.c
 * at_act_epoch), apart from the words every call only reads. */
#define AT_HOT_PAGE_SHARED __attribute__((section(".bss.at_hot.3"), aligned(64)))
/* The stack walker's words every walk reads (the mode, the return trampolines' pool, the shim's own
 * code ranges, the set-up stage: under 128 bytes), at the start of the page the rules and probes
 * begin on (shim/start.ld at_hot_bss): an event with a stack reads them on its rule's page. */
#define AT_WALK_BSS __attribute__((section(".bss.at_walk")))
/* The variables every hooked call reads (the stub's tables, the hooks' settings), together on one
 * page (shim/start.ld): _1 first, then _2. */
#define AT_PATH_BSS_1 __attribute__((section(".bss.at_path.1")))
#define AT_PATH_BSS_2 __attribute__((section(".bss.at_path.2")))

/* A fork child's copy of a lock that a thread of the parent may have held: made afresh only when it
 * is not as initialised, so a lock that was free costs the child no copied page (such locks go on
 * the fork data page all the same: reading a page the parent never touched maps it). */
#include <pthread.h>
static inline void at_mutex_fork_reset(pthread_mutex_t *m)
{
    const pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER; /* not a read-only page of the library */
    const unsigned char *a = (const unsigned char *)m, *b = (const unsigned char *)&init;
    for (size_t i = 0; i < sizeof *m; i++)
        if (a[i] != b[i]) {
            /* as initialised, by the bytes (pthread_mutex_init would map a page of libc's code) */
            *m = init; /* 40 bytes: moves, no call */
            return;
        }
}

/* The calling thread's kernel id, cached once per thread for the writer, the engine and the shim
 * (one look-up per thread, not one per user; a fork child clears it). Threads the shim's trampoline
 * started read it from glibc's thread descriptor instead of making a system call (tid.c). */
#include <sys/types.h>
#define at_tid_cache (AT_PTLS.tid_cache)
pid_t at_tid_slow(void);
/* Where in glibc's thread descriptor the id was found (bytes from pthread_self()), -1 until two
 * threads that made the system call agreed on one place (tests, acttrace check). */
int at_tid_offset(void);
unsigned at_tid_syscalls(void); /* how many look-ups made the system call (tests) */
/* getpid without libc's code: a fork child maps each code page it runs, libc's included. */
static inline pid_t at_raw_getpid(void)
{
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "0"(39L /* SYS_getpid */) : "rcx", "r11", "memory");
    return (pid_t)r;
}

/* A system call without libc, errno untouched (returns -errno): for the start's own reads, which
 * through libc's read/close would run the shim's interposed wrappers, a code page more. */
static inline long at_raw_syscall3(long n, long a, long b, long c)
{
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "0"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return r;
}

static inline long at_raw_syscall4(long n, long a, long b, long c, long d)
{
    long r;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "0"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
                     : "rcx", "r11", "memory");
    return r;
}

static inline pid_t at_tid(void)
{
    pid_t t = at_tid_cache;
    return AT_LIKELY(t != 0) ? t : at_tid_slow();
}

/* memcpy for the few bytes of an event payload: inline moves instead of a call into libc for every
 * event (a variable-length memcpy is not inlined). */
static inline void at_copy_small(void *dst, const void *src, size_t n)
{
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    /* a hooked call's captures, 8 to 16 bytes, first and straight: each branch taken to code
     * placed elsewhere is one more line for a server's call to miss */
    if (AT_LIKELY(n - 8 <= 8)) {
        uint64_t a, b;
        __builtin_memcpy(&a, s, 8);
        __builtin_memcpy(&b, s + n - 8, 8);
        __builtin_memcpy(d, &a, 8);
        __builtin_memcpy(d + n - 8, &b, 8);
        return;
    }
    if (n >= 8 && n <= 32) { /* 17..32: one or two 8-byte moves, then the last 9..16 as above (the
                              * common case keeps its own copy of those moves, straight) */
        uint64_t a, b;
        while (n > 16) {
            __builtin_memcpy(&a, s, 8);
            __builtin_memcpy(d, &a, 8);
            s += 8, d += 8, n -= 8;
        }
        __builtin_memcpy(&a, s, 8);
        __builtin_memcpy(&b, s + n - 8, 8);
        __builtin_memcpy(d, &a, 8);
        __builtin_memcpy(d + n - 8, &b, 8);
        return;
    }
    if (n >= 4 && n < 8) {
        uint32_t a, b;
        __builtin_memcpy(&a, s, 4);
        __builtin_memcpy(&b, s + n - 4, 4);
        __builtin_memcpy(d, &a, 4);
        __builtin_memcpy(d + n - 4, &b, 4);
        return;
    }
    if (n < 4) {
        for (size_t i = 0; i < n; i++)
            d[i] = s[i];
        return;
    }
    /* longer (string captures): 8-byte moves and an overlapping last one, not libc's memcpy, which
     * uses vector registers a hooked call must leave alone (xstate.h) */
    uint64_t a;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __builtin_memcpy(&a, s + i, 8);
        __builtin_memcpy(d + i, &a, 8);
        __asm__("" ::: "memory"); /* not turned back into a memcpy call */
    }
    __builtin_memcpy(&a, s + n - 8, 8);
    __builtin_memcpy(d + n - 8, &a, 8);
}

/* Set by the shim's thread start trampoline: the thread's end calls at_activity_thread_exit() and
 * at_tbuf_thread_exit() itself, so the writer and the engine leave their thread-specific keys unset (a thread with any key value set
 * makes glibc walk every key slot at its exit: ~700 instructions per thread). Defined in tbuf.c. */
extern AT_TLS bool at_thread_managed;
/* Non-zero while the runtime starts a thread of its own (the flusher): an interposed pthread_create
 * (the shim's) passes it straight through. */
extern AT_TLS int at_rt_own_thread;
/* Depth of the shim's own work on this thread (writing the file, walking a stack, reading symbols,
 * setting up), and non-zero for the whole life of the shim's own threads. A hook or an interposed
 * wrapper reached from inside passes straight to the real function and records nothing: libc
 * functions hooked by entry patching are reached by the flusher's pwrite and libunwind's reads as
 * much as by the program. Defined in trace.c. */
#define at_internal (AT_PTLS.internal)
#define AT_INTERNAL_BEGIN() (at_internal++)
#define AT_INTERNAL_END() (at_internal--)

/* Locks the shim holds across a fork (pthread_atfork handlers), so that a child never inherits one
 * a thread of the parent held half-way through a change. A process with one thread (glibc's
 * __libc_single_threaded) has no other thread to hold or take them and takes none: each page the
 * parent writes during a fork costs it a fault (the child shares the page until it exits), so the
 * fork of a one-thread process writes no page of the shim's. The parent's handler releases only a
 * lock this thread holds; the child's makes afresh one that is not as initialised
 * (at_mutex_fork_reset), whoever held it. */
#include <sys/single_threaded.h>
static inline void at_fork_lock(pthread_mutex_t *m)
{
    if (__libc_single_threaded)
        return;
    at_internal++; /* the shim's own lock: no hook sees it */
    pthread_mutex_lock(m);
    at_internal--;
}

static inline void at_fork_unlock(pthread_mutex_t *m)
{
    pid_t owner = m->__data.__owner; /* glibc records the owner of every kind of mutex */
    if (!owner || owner != at_tid())
        return;
    at_internal++;
    pthread_mutex_unlock(m);
    at_internal--;
}

/* 16 bytes in .NET Guid memory order (Data1 LE, Data2 LE, Data3 LE, Data4[8]), as nettrace stores it. */
typedef struct at_guid {
    uint8_t b[16];
} at_guid;

static inline bool at_guid_is_zero(const at_guid *g)
{
    uint64_t a, b;
    __builtin_memcpy(&a, g->b, 8);
    __builtin_memcpy(&b, g->b + 8, 8);
    return (a | b) == 0;
}

static inline bool at_guid_eq(const at_guid *x, const at_guid *y)
{
    return __builtin_memcmp(x->b, y->b, 16) == 0;
}

/* CLOCK_MONOTONIC in ns. clock_gettime goes through the vDSO: no syscall (~28 ns on a KVM guest). */
static inline uint64_t at_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The event clock (clock.c). Event timestamps are QPC ticks in nettrace: the file header names their
 * frequency. With an invariant TSC that the kernel itself trusts, the ticks are the raw TSC (rdtsc,
 * ~12 ns against clock_gettime's ~28 here) and the frequency is calibrated against CLOCK_MONOTONIC
 * over the whole run, the header being rewritten as the estimate improves; otherwise the ticks are
 * CLOCK_MONOTONIC ns (frequency 1e9), as the .NET runtime writes on Linux. */
/* The runtime's words every event reads, on one cache line (tbuf.c): after a system call on a
 * kernel that isolates page tables without PCID, each page an event touches costs a page walk, and
 * these lived on three (clock.c's, tbuf.c's and activity.c's variables). */
struct at_event_type;
typedef struct at_rt_hot {
    int clock_tsc;                 /* clock.c: 1 when the event clock is the TSC */
    _Atomic int flusher_armed;     /* flusher.c: it sleeps and wants a kick when buffers fill */
    union {
        struct {
            _Atomic int sess_active;   /* tbuf.c: a session is writing */
            _Atomic uint32_t sess_gen; /* bumped at start/stop/fork: thread buffers go stale */
        };
        uint64_t sess_word; /* both, read as one word by the record's fast path (tbuf_hot.h) */
    };
    int transfer_ready;            /* activity.c: the transfer types are registered */
    _Atomic int flusher_doze;      /* flusher.c: it dozes (idle a while); the next record wakes it */
    struct at_event_type *send_ev, *recv_ev; /* activity.c: TransferSend / TransferReceive */
    uint8_t *chunks;               /* tbuf.c: the buffer pool's chunks (at_pool_g.chunks) */
    int prefetchw;                 /* tbuf.c: the CPU has PREFETCHW (CPUID 0x80000001 ECX bit 8) */
    long rseq_cpu;                 /* tbuf.c: offset of the thread's rseq cpu_id from the thread
                                    * pointer (glibc registers rseq), or of a word that reads as no
                                    * CPU */
} at_rt_hot_t;
extern at_rt_hot_t at_rt_hot;
#define at_clock_tsc (at_rt_hot.clock_tsc) /* 1: the event clock is the TSC */
/* CLOCK_MONOTONIC ns through a pointer on at_rt_hot's page (clock.c, on the path's pages): neither
 * the GOT's page nor one of clock.c's other code is touched by an event on a machine whose TSC is
 * not trusted. */
uint64_t at_clock_mono_ns(void);
static inline __attribute__((always_inline)) uint64_t at_ticks(void)
{
    if (AT_LIKELY(__atomic_load_n(&at_clock_tsc, __ATOMIC_RELAXED))) {
        uint32_t lo, hi;
        __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
        return ((uint64_t)hi << 32) | lo;
    }
    return at_clock_mono_ns();
}

/* at_ticks() with no call the compiler sees, for code that keeps its state in registers a call may
 * clobber (the one-pass record, tbuf_hot.h): the monotonic clock is read through
 * at_clock_mono_ns_keep (clock.c), which saves every general register but rax and rdx and returns
 * like rdtsc (low half in eax, high in edx). It enters below the red zone (a leaf caller may keep
 * data there). Vector registers are not saved: only code built with -mgeneral-regs-only may use
 * this (the vDSO's clock_gettime uses none either). */
static inline __attribute__((always_inline)) uint64_t at_ticks_nocall(void)
{
    uint32_t lo, hi;
    if (AT_LIKELY(__atomic_load_n(&at_clock_tsc, __ATOMIC_RELAXED)))
        __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    else
        __asm__ volatile("lea -128(%%rsp), %%rsp\n\t"
                         "call at_clock_mono_ns_keep\n\t"
                         "lea 128(%%rsp), %%rsp"
                         : "=a"(lo), "=d"(hi)
                         :
                         : "cc");
    return ((uint64_t)hi << 32) | lo;
}

/* The same, not taken before the loads that precede it complete (rdtsc alone may run ahead of them
 * by a cache miss). For an event that follows something another thread published (a transfer's
 * Receive side), so that it never appears older than its cause. ~18 ns. */
static inline uint64_t at_ticks_ordered(void)
{
    if (AT_LIKELY(__atomic_load_n(&at_clock_tsc, __ATOMIC_RELAXED))) {
        uint32_t lo, hi;
        __asm__ volatile("lfence; rdtsc" : "=a"(lo), "=d"(hi)::"memory");
        return ((uint64_t)hi << 32) | lo;
    }
    return at_clock_mono_ns();
}

#endif
