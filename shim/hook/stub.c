/* stub.c: the C side of the register-saving wrapper (stub_asm.S): the table of hooks by stub index,
 * the enter/exit calls the stub makes, typed arguments and return values read from the registers
 * the stub saved (the x86-64 System V classification: integers and pointers in rdi rsi rdx rcx r8
 * r9, floating point in xmm0-7, the rest on the caller's stack, in order), the return trampolines'
 * records (one per hooked call in progress, in any thread), and the personality routine that
 * writes the Stop of a call a C++ exception or a forced unwind goes through (then lets the unwind go
 * on: the exception is unchanged). */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <unwind.h>

#include "hook.h"
#include "stack.h"
#include "trace.h"

extern char at_stub_tramps_end[];
/* What every hooked call reads here, together (AT_PATH_BSS, with the first return records right
 * after it, shim/start.ld): first the typed flags, then the first hooks' table; the hooks past
 * those are in a table of their own, so that a process's first records share the page. */
/* 1 for a hook with a signature: the stub stores xmm0-7 (typed arguments) and xmm0-1 (a typed
 * return value) for it only */
uint8_t at_stub_typed[AT_STUB_MAX] __attribute__((visibility("hidden"))) AT_PATH_BSS_1;
#define STUB_NEAR 64
static at_hook *at_stub_near[STUB_NEAR] AT_PATH_BSS_2;
static at_hook *at_stub_far[AT_STUB_MAX - STUB_NEAR];
static int at_stub_used;
/* hook.h: the hook each interposer runs itself (real.h's AT_DIRECT_LIST order), on the page of the
 * interposers' own state (the interposer read its bit there) and of at_rt_hot (the event reads it):
 * such a call reads nothing of the stub's tables */
at_hook *at_direct_hooks[AT_DIRECT_N] __attribute__((visibility("hidden"))) AT_HOT_PAGE_RT;

static inline at_hook **stub_slot(unsigned index)
{
    return AT_LIKELY(index < STUB_NEAR) ? &at_stub_near[index] : &at_stub_far[index - STUB_NEAR];
}

_Static_assert(sizeof(at_hook_regs) == 192, "stub_asm.S saves 192 bytes of registers");

/* The System V places of the typed parameters, computed once per hook. */
static void slots_plan(at_hook *h)
{
    const at_sig *s = h->sig;
    int ngp = 0, nxmm = 0, nstack = 0;
    h->nparams = s ? (uint8_t)s->nparams : 0;
    h->ret_type = s ? (uint8_t)s->ret : 0;
    h->ptypes = 0;
    _Static_assert(AT_SIG_MAX_PARAMS <= 16 && AT_CT_STR < 16, "4 bits per parameter type");
    for (int k = 0; s && k < s->nparams; k++)
        h->ptypes |= (uint64_t)s->p[k].type << 4 * k;
    for (int k = 0; s && k < s->nparams; k++) {
        bool fp = s->p[k].type == AT_CT_F32 || s->p[k].type == AT_CT_F64;
        if (fp && nxmm < 8)
            h->arg_slot[k] = (uint8_t)(8 + 2 * nxmm++);
        else if (!fp && ngp < 6)
            h->arg_slot[k] = (uint8_t)ngp++;
        else
            h->arg_slot[k] = (uint8_t)(32 + nstack++);
    }
}

/* ---------------- return records ----------------
 * One record per hooked call in progress: the return address it replaced (ra, read by the records'
 * CFI expression and by the stack walker), the function its call runs, the call's state between
 * entry and return, and where the return address sits, on one line with all the untyped call
 * reads (the stub's code reaches them as at_ret_rec + AT_RET_REC * k). Record k's code is at
 * at_ret_pool + 32k.
 * A thread takes records from its own free list (refilled 32 at a time from the process's) and
 * keeps the ones in use on its own stack of records, innermost on top: a return on top pops it. A
 * record is given back only when its call is over for certain:
 *   - the call returned through its trampoline;
 *   - an unwind went through it (the personality marks it dead; it goes when it reaches the top);
 *   - a longjmp left it: a new hooked call whose return slot, on the thread's own stack, is at or
 *     above the record's slot, proves the frame gone;
 *   - the thread ends (records on its own stack).
 * A call whose frame lives on another stack (a coroutine's) keeps its record until it returns,
 * possibly on another thread, which marks it dead for its owner to give back. Signal handlers may
 * take and give records between any two instructions here: every list change is one store after
 * its reads, and a handler's own takes and gives balance before the interrupted code goes on; the
 * pruning and the process's list, which do not balance, are never entered twice. */
extern char at_ret_pool[] __attribute__((visibility("hidden")));
extern char at_ret_pool_end[] __attribute__((visibility("hidden")));
/* record k's code: its call C_k, and the return point R_k that call pushes */
#define RET_CODE 32
#define RET_POINT 6
static inline char *ret_call(uint32_t k) { return at_ret_pool + RET_CODE * k; }
static inline uint64_t ret_point(uint32_t k) { return (uint64_t)(uintptr_t)(ret_call(k) + RET_POINT); }

typedef struct ret_rec {
    uint64_t ra;           /* the real return address (R_k's last bytes give its offset) */
    void *fn;              /* what record k's call runs (C_k: call *fn) */
    at_hook_call c;
    uint64_t *slot;        /* the hooked call's return slot */
    uint32_t next;         /* the free list, or the thread's stack of records in use */
    uint8_t dead;
    at_hook *h;            /* the call's hook (its stub's table read once, at the entry) */
    uint64_t args[AT_SIG_MAX_PARAMS];
} __attribute__((aligned(64))) ret_rec;
_Static_assert(sizeof(ret_rec) == AT_RET_REC && offsetof(ret_rec, ra) == 0 &&
                   offsetof(ret_rec, fn) == 8 && offsetof(ret_rec, c) + sizeof(at_hook_call) <= 64,
               "stub_asm.S reads a record's ra and fn at at_ret_rec + AT_RET_REC * k");
ret_rec at_ret_rec[AT_RET_MAX] __attribute__((visibility("hidden"), section(".bss.at_ret")));
#define rt_rec at_ret_rec

#define rt_free (AT_PTLS.rt_free) /* at_common.h */
#define rt_top (AT_PTLS.rt_top)
static AT_TLS uintptr_t rt_lo, rt_hi; /* the thread's own stack, when known */
static AT_TLS uint8_t rt_pruning;

static uint32_t g_free, g_fresh = 1;
static pid_t g_lock;                  /* the holder's thread id, 0 free */
static uintptr_t main_lo, main_hi;    /* the first thread's stack */

/* The process's list, held for a few stores at a time. A holder that is this thread (a signal
 * handler interrupted it) or gone (a fork child of a process where another thread held it) would
 * never let go: after a short spin, the first gives up and the second is taken over. */
static bool g_take(void)
{
    pid_t me = (pid_t)syscall(SYS_gettid);
    for (int spin = 0;; spin++) {
        pid_t cur = 0;
        if (__atomic_compare_exchange_n(&g_lock, &cur, me, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return true;
        if (cur == me)
            return false;
        if (spin > 4000) {
            if (syscall(SYS_tgkill, getpid(), cur, 0) != 0 && errno == ESRCH &&
                __atomic_compare_exchange_n(&g_lock, &cur, me, false, __ATOMIC_ACQUIRE,
                                            __ATOMIC_RELAXED))
                return true;
            spin = 0;
        }
        __builtin_ia32_pause();
    }
}

static void g_give(void) { __atomic_store_n(&g_lock, 0, __ATOMIC_RELEASE); }

static AT_NOINLINE uint32_t ret_refill(void)
{
    int e = errno;
    bool ok = g_take();
    errno = e;
    if (!ok)
        return 0;
    /* pushed in the reverse of the order taken, so that the thread takes fresh records from the
     * lowest: a process's first records are on the page of the stub's tables */
    uint32_t got[32];
    int n = 0;
    for (; n < 32; n++) {
        if (g_free) {
            got[n] = g_free;
            g_free = rt_rec[got[n]].next;
        } else if (g_fresh < AT_RET_MAX) {
            got[n] = g_fresh++;
        } else {
            break;
        }
    }
    while (n > 0) {
        uint32_t k = got[--n];
        rt_rec[k].next = rt_free;
        rt_free = k;
    }
    g_give();
    return rt_free;
}

static inline void ret_free(uint32_t k)
{
    rt_rec[k].next = rt_free;
    rt_free = k;
}

/* Records on top of the thread's stack whose calls are over: marked dead, or left by a longjmp
 * (slot at or below the new call's, both on the thread's own stack). */
static bool own_stack(uintptr_t a, uintptr_t b);

static AT_NOINLINE void ret_prune(uintptr_t slot)
{
    if (rt_pruning)
        return;
    rt_pruning = 1;
    for (uint32_t k = rt_top; k; k = rt_top) {
        ret_rec *r = &rt_rec[k];
        uintptr_t s = (uintptr_t)r->slot;
        /* at the same slot, a call still in progress made a tail call: its return point is there */
        bool gone = own_stack(s, slot) &&
                    (s < slot || (s == slot && *(const uint64_t *)slot != ret_point(k)));
        if (!r->dead && !gone)
            break;
        rt_top = r->next;
        ret_free(k);
    }
    rt_pruning = 0;
}

/* A record for the call whose return address is at slot, on top of the thread's stack; 0 when none
 * is to be had. */
static inline uint32_t ret_take(uint64_t *slot)
{
    uint32_t t = rt_top;
    if (AT_UNLIKELY(t && ((uintptr_t)rt_rec[t].slot <= (uintptr_t)slot || rt_rec[t].dead)))
        ret_prune((uintptr_t)slot);
    uint32_t k = rt_free;
    if (AT_UNLIKELY(!k) && !(k = ret_refill()))
        return 0;
    ret_rec *r = &rt_rec[k];
    rt_free = r->next;
    r->slot = slot;
    r->dead = 0;
    r->next = rt_top;
    rt_top = k;
    return k;
}

/* The call of record k is over: off the thread's stack if on top (what a return normally finds),
 * else marked for its owner to give back when it reaches the top. */
static inline void ret_done(uint32_t k)
{
    ret_rec *r = &rt_rec[k];
    if (AT_LIKELY(rt_top == k)) {
        rt_top = r->next;
        ret_free(k);
    } else {
        r->dead = 1;
    }
}

/* The first thread's stack: from the top of its initial stack (where the kernel put the program's
 * file name, above every frame) down to its size limit (the kernel keeps that much room below the
 * stack free of other mappings, 128 MiB at least). Learned when hooks are installed. */
void at_stub_main_bounds(void)
{
    struct rlimit rl;
    uintptr_t hi = (uintptr_t)getauxval(AT_EXECFN);
    if (!hi || main_hi || getrlimit(RLIMIT_STACK, &rl) != 0)
        return;
    uintptr_t room = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (128u << 20) ? (128u << 20)
                                                                                  : rl.rlim_cur;
    main_lo = hi > room ? hi - room : 0;
    main_hi = hi;
}

/* Are both addresses on the running thread's own stack (as far as it knows its bounds)? */
static bool own_stack(uintptr_t a, uintptr_t b)
{
    uintptr_t lo = rt_lo, hi = rt_hi;
    if (!hi)
        lo = main_lo, hi = main_hi;
    return hi && a >= lo && a < hi && b >= lo && b < hi;
}

void at_stub_thread_start(uintptr_t lo, uintptr_t hi)
{
    rt_lo = lo;
    rt_hi = hi;
}

void at_stub_thread_exit(void)
{
    if (!rt_top && !rt_free)
        return;
    /* the thread's calls are over: records on its own stack go back (a coroutine's, on another
     * stack, stay with their calls) */
    for (uint32_t k = rt_top, n; k; k = n) {
        ret_rec *r = &rt_rec[k];
        n = r->next;
        uintptr_t s = (uintptr_t)r->slot;
        if (r->dead || (rt_hi && s >= rt_lo && s < rt_hi))
            ret_free(k);
    }
    rt_top = 0;
    int e = errno;
    bool taken = rt_free && g_take();
    errno = e;
    if (!taken)
        return;
    while (rt_free) {
        uint32_t k = rt_free;
        rt_free = rt_rec[k].next;
        rt_rec[k].next = g_free;
        g_free = k;
    }
    g_give();
}

int at_stub_make(at_hook *h)
{
    slots_plan(h);
    int i = __atomic_fetch_add(&at_stub_used, 1, __ATOMIC_RELAXED);
    if (i >= AT_STUB_MAX)
        return -1;
    h->stub_index = i;
    at_stub_typed[i] = h->sig != NULL;
    __atomic_store_n(stub_slot((unsigned)i), h, __ATOMIC_RELEASE);
    h->wrapper = at_stub_tramps_end - 16 * (i + 1);
    if (i == 0) {
        at_stub_main_bounds();
        at_stack_set_trampolines((uintptr_t)at_ret_pool, (uintptr_t)(at_ret_pool_end - at_ret_pool),
                                 RET_CODE, &at_ret_rec[0].ra, AT_RET_REC / 8);
    }
    return 0;
}



/* A float's bits as the double of the same value, in integer arithmetic: this file is built without
 * vector registers (stub_asm.S), and a conversion instruction would also raise MXCSR's flags (a
 * signalling NaN) where the program could see them. NaNs keep their payload and become quiet, as
 * cvtss2sd makes them. */
uint64_t at_stub_f32_bits_to_f64(uint32_t f)
{
    uint64_t sign = (uint64_t)(f >> 31) << 63;
    uint32_t exp = (f >> 23) & 0xff, man = f & 0x7fffff;
    if (exp == 0xff)
        return sign | 0x7ff0000000000000ull | ((uint64_t)man << 29) | (man ? 1ull << 51 : 0);
    if (exp == 0) {
        if (!man)
            return sign;
        int sh = __builtin_clz(man) - 8; /* normalise: the leading 1 to bit 23 */
        man = (man << sh) & 0x7fffff;
        return sign | ((uint64_t)(897 - sh) << 52) | ((uint64_t)man << 29);
    }
    return sign | ((uint64_t)(exp + 896) << 52) | ((uint64_t)man << 29);
}

/* A value of type t from a 64-bit register or stack slot (upper bits of narrow integers are
 * undefined in the ABI: extend them here), as hook.h's 64-bit argument form. Inline, without a
 * switch (a chain of compares here: no jump tables on the path): 64-bit values and pointers as they
 * are, the integer types of 8, 16 and 32 bits (AT_CT_I8..AT_CT_U32, signed first of each pair)
 * extended by two shifts, a float widened out of line. */
static inline __attribute__((always_inline)) uint64_t from_slot(at_ctype t, uint64_t v)
{
    _Static_assert(AT_CT_I8 == 1 && AT_CT_U8 == 2 && AT_CT_I16 == 3 && AT_CT_U16 == 4 &&
                       AT_CT_I32 == 5 && AT_CT_U32 == 6,
                   "from_slot's order of the narrow integer types");
    unsigned n = (unsigned)t - AT_CT_I8;
    if (AT_LIKELY(n >= 6)) {
        if (AT_UNLIKELY(t == AT_CT_F32))
            return at_stub_f32_bits_to_f64((uint32_t)v);
        return v;
    }
    unsigned shift = 64 - (8u << (n >> 1)); /* 56, 48 or 32 */
    return n & 1 ? v << shift >> shift : (uint64_t)((int64_t)(v << shift) >> shift);
}

static inline at_ctype ptype(const at_hook *h, int i)
{
    return (at_ctype)(h->ptypes >> 4 * i & 15);
}

/* Where parameter i lives: a gp register, an xmm register or a stack slot. */
static inline uint64_t *param_slot(const at_hook *h, int i, at_hook_regs *regs, uint64_t *stack)
{
    unsigned n = h->arg_slot[i];
    return n >= 32 ? &stack[n - 32] : (uint64_t *)regs + n;
}

int at_stub_enter(unsigned index, at_hook_regs *regs, uint64_t *slot, void **jump);
int at_stub_enter_typed(unsigned index, at_hook_regs *regs, uint64_t *slot, void **jump);
void at_ret_exit(unsigned k, const uint64_t *rets, uint64_t bp);
_Unwind_Reason_Code at_ret_personality(int version, _Unwind_Action actions, uint64_t cls,
                                       struct _Unwind_Exception *ue, struct _Unwind_Context *ctx);

/* Under a sanitizer (make check-asan) the hook's code calls into the sanitizer's runtime, which may
 * use any vector register: there the whole extended state is kept around the C side of the stub.
 * The production build needs none of this (its hook code touches no vector state). */
#if defined(__SANITIZE_ADDRESS__)
#include "xstate.h"
static int stub_enter(unsigned index, at_hook_regs *regs, uint64_t *slot, void **jump);
static int stub_enter_typed(unsigned index, at_hook_regs *regs, uint64_t *slot, void **jump);
static void ret_exit(unsigned k, const uint64_t *rets, uint64_t bp);
int at_stub_enter(unsigned index, at_hook_regs *regs, uint64_t *slot, void **jump)
{
    at_xstate x;
    at_xstate_save(&x);
    int r = stub_enter(index, regs, slot, jump);
    at_xstate_restore(&x);
    return r;
}
int at_stub_enter_typed(unsigned index, at_hook_regs *regs, uint64_t *slot, void **jump)
{
    at_xstate x;
    at_xstate_save(&x);
    int r = stub_enter_typed(index, regs, slot, jump);
    at_xstate_restore(&x);
    return r;
}
void at_ret_exit(unsigned k, const uint64_t *rets, uint64_t bp)
{
    at_xstate x;
    at_xstate_save(&x);
    ret_exit(k, rets, bp);
    at_xstate_restore(&x);
}
#define at_stub_enter stub_enter
#define at_stub_enter_typed stub_enter_typed
#define at_ret_exit ret_exit
#define AT_STUB_LINKAGE static
#else
#define AT_STUB_LINKAGE
#endif

/* A typed hook's entry: its arguments read from the registers and stack slots the caller used, into
 * args (the return record's, or the caller's frame for a call that keeps none). Out of line: the
 * untyped call's path keeps a small frame. */
AT_PATH_CORE static AT_NOINLINE void typed_enter(at_hook *h, at_hook_call *c, uint64_t *args,
                                                 at_hook_regs *regs, uint64_t *caller_sp)
{
    int n = h->nparams;
    if (h->args_read && h->args_read - 1 < n)
        n = h->args_read - 1;
    for (int i = 0; i < n; i++)
        args[i] = from_slot(ptype(h, i), *param_slot(h, i, regs, caller_sp));
    /* an event written at the return, most typed rules of a server: the arguments were all its
     * entry needed (enter_rule's test, first and straight here) */
    if (AT_LIKELY(h->enter_noop)) {
        if (AT_UNLIKELY(hk_nlive > 0)) /* calls a longjmp left may be over */
            hook_enter_tested(h, c, args, false);
        return;
    }
    /* at_hook_enter past its test of at_internal, which the stub's entry has just made (a typed
     * rule is never plain: its path stays a call) */
    hook_enter_tested(h, c, args, false);
    /* pointers the semantics replaced (a callback flow), in registers only: the original reads its
     * stack arguments where the caller put them */
    if (AT_LIKELY(!h->sets_args))
        return;
    for (int i = 0; i < n; i++) {
        uint64_t *p = param_slot(h, i, regs, caller_sp);
        if (ptype(h, i) == AT_CT_PTR && *p != args[i] && (uintptr_t)p >= (uintptr_t)regs &&
            (uintptr_t)p < (uintptr_t)(regs + 1))
            *p = args[i];
    }
}

/* The depth of a call whose return slot is slot: its caller's stack pointer, or, for a tail call
 * from a hooked call in progress (the same return slot, holding that call's return point), a
 * little deeper than that call: nested in it, not a sibling that replaced it. */
static inline uintptr_t call_sp(uint64_t *slot)
{
    uint64_t prev = *slot - (uint64_t)(uintptr_t)at_ret_pool;
    if (AT_UNLIKELY(prev < (uint64_t)(at_ret_pool_end - at_ret_pool) && prev % RET_CODE == RET_POINT))
        return rt_rec[prev / RET_CODE].c.sp - 1;
    return (uintptr_t)(slot + 1);
}

/* A call with nothing to do at its return (at_hook.exit_noop): its entry's work, with its state on
 * this frame, and no return record: the function returns straight to its caller. */
AT_PATH_CORE static AT_NOINLINE void enter_only(at_hook *h, at_hook_regs *regs, uint64_t *slot)
{
    at_hook_call c = {.sp = call_sp(slot)};
    uint64_t args[AT_SIG_MAX_PARAMS];
    if (h->sig)
        typed_enter(h, &c, args, regs, slot + 1);
    else
        hook_enter_tested(h, &c, NULL, false);
}

/* The stub's entry, one body for each kind of hook (stub_asm.S calls at_stub_enter_typed for a
 * hook with a signature, at_stub_enter for the others): the typed path does not run past the plain
 * rule's inline Start. 1: the call is recorded, *jump is C_k; 0: *jump is the original,
 * straight. */
static inline __attribute__((always_inline)) int stub_enter_body(unsigned index, at_hook_regs *regs,
                                                                 uint64_t *slot, void **jump,
                                                                 bool typed)
{
    at_hook *h = *stub_slot(index);
    /* The shim's own call (the flusher's pwrite, libunwind's read through an entry-patched libc):
     * straight to the original, nothing read or recorded, and its return left alone */
    if (AT_UNLIKELY(at_internal != 0)) {
        *jump = h->orig;
        return 0;
    }
    if (AT_UNLIKELY(h->exit_noop)) {
        enter_only(h, regs, slot);
        *jump = h->orig;
        return 0;
    }
    uint32_t k = ret_take(slot);
    if (AT_UNLIKELY(!k)) {
        /* the call's Start and Stop, lost: readers see the gap */
        at_event_lost();
        at_event_lost();
        *jump = h->orig;
        return 0;
    }
    ret_rec *r = &rt_rec[k];
    at_hook_call *c = &r->c;
    r->h = h;
    c->act = NULL;
    c->sp = call_sp(slot);
    c->started = 0;
    /* not merged with the store above: a 16-bit constant comes from a data page of its own */
    __atomic_store_n(&c->done, 0, __ATOMIC_RELAXED);
    c->ret_ip = 0; /* an exit through the personality (an unwind) walks from where it is */
    if (typed)
        typed_enter(h, c, r->args, regs, slot + 1);
    else
        hook_enter_tested(h, c, NULL, true); /* hooks.c's at_hook_enter, inline (hookpath.c) */
    /* the return comes back through R_k (the stack taken above saw the real caller) */
    r->fn = h->orig;
    r->ra = *slot;
    *slot = ret_point(k);
    *jump = ret_call(k);
    return 1;
}

AT_PATH_CORE AT_STUB_LINKAGE int at_stub_enter(unsigned index, at_hook_regs *regs, uint64_t *slot, void **jump)
{
    return stub_enter_body(index, regs, slot, jump, false);
}

AT_PATH_CORE AT_STUB_LINKAGE int at_stub_enter_typed(unsigned index, at_hook_regs *regs,
                                                     uint64_t *slot, void **jump)
{
    return stub_enter_body(index, regs, slot, jump, true);
}

/* The return of a call whose rule is plain: hooks.c's at_hook_exit with its plain path, inline
 * (hookpath.c); no stack, so no return point to keep. */
AT_PATH_CORE static AT_NOINLINE void ret_exit_plain(unsigned k, at_hook *h, at_hook_call *c,
                                                    uint64_t v)
{
    hook_exit_inline(h, c, NULL, v, AT_HOOK_RETURNED, true);
    ret_done(k);
}

/* The return of any other call: typed, or taking a stack, or already stopped (by an unwind). */
AT_PATH_CORE static AT_NOINLINE void ret_exit_other(unsigned k, ret_rec *r, at_hook *h,
                                                    const uint64_t *rets, uint64_t bp)
{
    at_hook_call *c = &r->c;
    if (AT_LIKELY(!c->done)) {
        c->done = 1;
        uint64_t v = rets[0];
        if (h->sig) {
            at_ctype t = (at_ctype)h->ret_type;
            v = from_slot(t, (t == AT_CT_F32 || t == AT_CT_F64) ? rets[2] : rets[0]);
        }
        /* the caller as the function returned to it, for a Stop's stack: its return address, its
         * stack pointer past the return slot, its rbp as the function left it */
        c->ret_ip = r->ra;
        c->ret_sp = (uint64_t)(uintptr_t)r->slot + 8;
        c->ret_bp = bp;
        /* hooks.c's at_hook_exit, inline (hookpath.c) */
        hook_exit_inline(h, c, h->sig ? r->args : NULL, v, AT_HOOK_RETURNED, false);
    }
    ret_done(k);
}

/* Each way is a function of its own, reached by a tail call: neither sets up the other's frame. */
AT_PATH_CORE AT_STUB_LINKAGE void at_ret_exit(unsigned k, const uint64_t *rets, uint64_t bp)
{
    ret_rec *r = &rt_rec[k];
    at_hook *h = r->h;
    if (AT_LIKELY(!r->c.done && !h->sig && hook_plain(h))) {
        r->c.done = 1;
        return ret_exit_plain(k, h, &r->c, rets[0]);
    }
    return ret_exit_other(k, r, h, rets, bp);
}

/* ---------------- the interposer's own hooked call (hook.h: at_direct_entry/return) ---------------- */

/* The parameters the rule reads: all of them, or the leading ones it names (at_hook.args_read). */
static inline int params_read(const at_hook *h)
{
    int n = h->nparams;
    if (h->args_read && h->args_read - 1 < n)
        n = h->args_read - 1;
    return n;
}

bool at_direct_ok(at_hook *h)
{
    slots_plan(h);
    /* a rule that opens something at the entry and closes it at the return needs the return
     * record's personality should an unwind go through the call; one that replaces arguments
     * rewrites registers the stub restores */
    if (!h->sig || h->sets_args || !(h->enter_noop || h->exit_noop))
        return false;
    if (h->ret_type == AT_CT_F32 || h->ret_type == AT_CT_F64)
        return false;
    for (int i = 0, n = params_read(h); i < n; i++)
        if (h->arg_slot[i] >= 6) /* a floating-point register or the stack */
            return false;
    return true;
}

/* The call as the stub would have seen it, from the interposer's arguments and frame: its return
 * slot is the interposer's (frame + 1); a stack, at either end, starts from the caller (its return
 * address, its stack pointer past the return slot, its rbp, which the interposer's frame keeps).
 * NULL for the shim's own call (the flusher's, libunwind's): nothing recorded. */
static inline __attribute__((always_inline)) at_hook *direct_call(unsigned idx, at_hook_call *c,
                                                                  uint64_t *args,
                                                                  const uint64_t *raw,
                                                                  uint64_t *frame)
{
    at_hook *h = __atomic_load_n(&at_direct_hooks[idx], __ATOMIC_ACQUIRE);
    if (AT_UNLIKELY(at_internal != 0 || !h))
        return NULL;
    c->act = NULL;
    c->sp = call_sp(frame + 1);
    c->started = 0;
    __atomic_store_n(&c->done, 0, __ATOMIC_RELAXED); /* as stub_enter_body: no 16-bit constant */
    c->ret_ip = frame[1];
    c->ret_sp = (uint64_t)(uintptr_t)(frame + 2);
    c->ret_bp = frame[0];
    for (int i = 0, n = params_read(h); i < n; i++)
        args[i] = from_slot(ptype(h, i), raw[h->arg_slot[i]]);
    return h;
}

/* hooks.c's hk_fast may finish the call: the shim is simply on and no call listed on this thread
 * was left by a longjmp (the general way's first step, inline: a call on the list is the common
 * case inside a hooked function's activity) */
static inline __attribute__((always_inline)) bool direct_fast_ok(uint64_t *frame)
{
    if (AT_UNLIKELY(__atomic_load_n(&at_hot.shim_on, __ATOMIC_RELAXED) != 1))
        return false;
    return AT_LIKELY(hk_nlive == 0) || !jumped_over(call_sp(frame + 1), true);
}

/* HK_FAST_EVENT: the event, its fields from the interposer's registers and return value (0 at the
 * entry, where no field is the return value), as hook_enter's and hook_exit's event cases write it (keeps errno; nothing the event write reaches calls a hooked
 * function, but a signal handler's call inside it records nothing, as inside hook_exit) */
static inline __attribute__((always_inline)) void direct_event(const at_hook *h, const hk_fast *f,
                                                              const uint64_t *raw,
                                                              const uint64_t *frame, uint64_t ret)
{
    const at_event_type *t = f->obj;
    if (!at_event_enabled(t))
        return;
    uint8_t buf[8 * HK_FAST_CAP];
    uint8_t *o = buf;
    for (unsigned i = 0; i < f->ncap; i++) {
        unsigned s = f->slot[i], ty = f->type[i];
        uint64_t v = from_slot((at_ctype)(ty & ~HK_FAST_WIDE), s == HK_FAST_RET ? ret : raw[s]);
        __builtin_memcpy(o, &v, 8);
        o += ty & HK_FAST_WIDE ? 8 : 4;
    }
    AT_INTERNAL_BEGIN();
    int err = errno_get();
    uintptr_t *ips = NULL;
    uint32_t nips = 0;
    if (f->stack) { /* from the interposer's caller, as direct_call's call would give it */
        const at_hook_call c = {.ret_ip = frame[1], .ret_sp = (uint64_t)(uintptr_t)(frame + 2),
                                .ret_bp = frame[0]};
        ips = __builtin_alloca(HK_STACK_WORDS * sizeof(uintptr_t));
        nips = hk_stack(ips, h, &c);
    }
    at_activity_event(t, buf, (uint32_t)(o - buf), ips, nips);
    AT_INTERNAL_END();
    errno_set(err);
}

/* Both beside the hook logic's return and the event write (AT_PATH_EVENT): what such a call runs
 * after its system call is then on two pages with the interposers' runs that follow them. */
AT_PATH_EVENT AT_NOINLINE void at_direct_entry(unsigned idx, const uint64_t *raw, uint64_t *frame)
{
    at_hook *hf = __atomic_load_n(&at_direct_hooks[idx], __ATOMIC_ACQUIRE);
    if (AT_LIKELY(hf != NULL) && AT_LIKELY(at_internal == 0)) {
        const hk_fast *f = &probe_of(hf)->fast;
        if (f->kind == HK_FAST_EVENT && direct_fast_ok(frame))
            return direct_event(hf, f, raw, frame, 0);
        /* HK_FAST_NOKEY: a pair's Stop whose key holds nothing does nothing (hook_enter would
         * take the key's slot, empty) */
        if (f->kind == HK_FAST_NOKEY && direct_fast_ok(frame)) {
            uint64_t key = from_slot((at_ctype)f->type[0], raw[f->slot[0]]);
            if (key < f->nkeys &&
                !__atomic_load_n(&((at_activity *const *)f->obj)[key], __ATOMIC_RELAXED))
                return;
        }
    }
    at_hook_call c;
    uint64_t args[AT_SIG_MAX_PARAMS];
    at_hook *h = direct_call(idx, &c, args, raw, frame);
    if (h)
        hook_enter_tested(h, &c, args, false);
}

AT_PATH_EVENT AT_NOINLINE void at_direct_return(unsigned idx, const uint64_t *raw, uint64_t *frame,
                                               uint64_t ret)
{
    at_hook *hf = __atomic_load_n(&at_direct_hooks[idx], __ATOMIC_ACQUIRE);
    if (AT_LIKELY(hf != NULL) && AT_LIKELY(at_internal == 0)) {
        const hk_fast *f = &probe_of(hf)->fast;
        if (f->kind == HK_FAST_EVENT && direct_fast_ok(frame))
            return direct_event(hf, f, raw, frame, ret);
    }
    at_hook_call c;
    uint64_t args[AT_SIG_MAX_PARAMS];
    at_hook *h = direct_call(idx, &c, args, raw, frame);
    if (!h)
        return;
    /* the entry's own step, made here: calls a longjmp left are over (enter_rule's enter_noop case) */
    if (AT_UNLIKELY(hk_nlive > 0))
        hook_enter_tested(h, &c, args, false);
    hook_exit_inline(h, &c, args, from_slot((at_ctype)h->ret_type, ret), AT_HOOK_RETURNED, false);
}

/* An exception (or pthread_exit's forced unwind) goes through a hooked call: its Stop, and the
 * record is marked dead. It is given back later: the unwinder reads the return address from
 * the record right after this returns. */
_Unwind_Reason_Code at_ret_personality(int version, _Unwind_Action actions, uint64_t cls,
                                       struct _Unwind_Exception *ue, struct _Unwind_Context *ctx)
{
    (void)version, (void)cls, (void)ue;
    if ((actions & _UA_CLEANUP_PHASE) && ctx) {
        uintptr_t ip = _Unwind_GetIP(ctx), off = ip - (uintptr_t)at_ret_pool;
        uint32_t k = (uint32_t)(off / RET_CODE);
        if (off % RET_CODE == RET_POINT && k > 0 && k < AT_RET_MAX) {
            ret_rec *r = &rt_rec[k];
            if (!r->c.done) {
                r->c.done = 1;
                /* no return value, and no typed arguments in the Stop */
                at_hook_exit(r->h, &r->c, NULL, 0, AT_HOOK_UNWOUND);
            }
            r->dead = 1;
        }
    }
    return _URC_CONTINUE_UNWIND;
}
