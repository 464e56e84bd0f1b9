/* stack.c: stack capture (see stack.h): the shared-rule walker, libunwind's unw_backtrace and the
 * frame-pointer walk. The capture functions keep a frame pointer (the pragma below) so that each
 * walk starts from exact registers of its caller without a context save. */
#pragma GCC optimize("no-omit-frame-pointer")
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ucontext.h>
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include "asroom.h"
#include "stack.h"
#include "unwmem.h"
#include "xstate.h"

#define NO_ASAN __attribute__((no_sanitize_address))

/* ---- libunwind, loaded at run time ---- */
static struct {
    int (*getcontext)(unw_context_t *);
    int (*init_local)(unw_cursor_t *, unw_context_t *);
    int (*step)(unw_cursor_t *);
    int (*get_reg)(unw_cursor_t *, unw_regnum_t, unw_word_t *);
    int (*get_save_loc)(unw_cursor_t *, int, unw_save_loc_t *);
    int (*is_signal_frame)(unw_cursor_t *);
    int (*backtrace)(void **, int);
    bool ok;
} U;

/* the walker in use, plus one (0: none set up) */
static _Atomic int mode_in_use AT_WALK_BSS;

/* ---- return trampolines (shim/hook/stub_asm.S) ----
 * A hooked call's return address is replaced by trampoline k at pool + size*k, whose frame has no
 * size: a walk reads the real return address from ra[stride*k] instead, with the same registers. */
static uintptr_t tr_pool AT_WALK_BSS, tr_len AT_WALK_BSS, tr_shift AT_WALK_BSS, tr_stride AT_WALK_BSS;
static const uint64_t *tr_ra AT_WALK_BSS;

void at_stack_set_trampolines(uintptr_t pool, uintptr_t len, uintptr_t size, const uint64_t *ra,
                              uintptr_t stride)
{
    tr_ra = ra;
    tr_stride = stride;
    tr_pool = pool;
    tr_shift = (uintptr_t)__builtin_ctzl(size);
    __atomic_store_n(&tr_len, len, __ATOMIC_RELEASE);
}

static inline bool is_tramp(uint64_t ip)
{
    uint64_t off = ip - tr_pool;
    /* a return address, or where a signal interrupted one (the first record holds no code) */
    return off < tr_len && (off >> tr_shift) != 0;
}

/* the real return address behind any chain of trampolines (a tail call from one hooked call to
 * another leaves one trampoline's address in the other's record) */
static inline uint64_t tramp_fix(uint64_t ip)
{
    for (int i = 0; i < 64 && is_tramp(ip); i++)
        ip = tr_ra[((ip - tr_pool) >> tr_shift) * tr_stride];
    return ip;
}

/* ---- the shared rule table ----
 * A rule says, for one return address, how to get the caller's registers:
 *   CFA = (rsp or rbp) + off; return address at CFA-8; caller's rbp at CFA-8*boff (boff 0: unchanged);
 *   caller's rsp = CFA. Kinds END (outermost frame) and SLOW (a signal frame or a rule this table cannot
 *   express: walk with libunwind) stop the fast walk. Slots are claimed with a CAS on the address and
 *   the rule is published after it; a slot whose rule is still 0 reads as a miss. Never removed. */
#define RULE_SLOTS (1u << 16)
#define RULE_PROBES 8u
enum { K_NONE = 0, K_RSP = 1, K_RBP = 2, K_END = 3, K_SLOW = 4, K_SIGRETURN = 5 };

/* K_SIGRETURN: the kernel's signal trampoline (__restore_rt). The handler's return popped the frame's
 * return address, so rsp points at the ucontext the kernel saved: the interrupted registers are there. */
#define UC_RIP offsetof(ucontext_t, uc_mcontext.gregs[REG_RIP])
#define UC_RSP offsetof(ucontext_t, uc_mcontext.gregs[REG_RSP])
#define UC_RBP offsetof(ucontext_t, uc_mcontext.gregs[REG_RBP])

typedef struct rule_slot {
    _Atomic uint64_t ip;
    _Atomic uint64_t rule; /* kind:3 | boff:16 << 3 | off:32 << 19 */
} rule_slot;

static rule_slot *rules;
static _Atomic uint32_t nrules, nslow;

static inline uint64_t rule_make(unsigned kind, uint64_t boff, uint64_t off)
{
    return (uint64_t)kind | boff << 3 | off << 19;
}
static inline uint32_t rule_hash(uint64_t ip)
{
    return (uint32_t)((ip * 0x9E3779B97F4A7C15ull) >> 40) & (RULE_SLOTS - 1);
}

static inline uint64_t rule_get(uint64_t ip)
{
    uint32_t h = rule_hash(ip);
    for (uint32_t i = 0; i < RULE_PROBES; i++) {
        rule_slot *s = &rules[(h + i) & (RULE_SLOTS - 1)];
        uint64_t k = atomic_load_explicit(&s->ip, memory_order_acquire);
        if (k == ip)
            return atomic_load_explicit(&s->rule, memory_order_acquire);
        if (k == 0)
            return 0;
    }
    return 0;
}

static void rule_put(uint64_t ip, uint64_t rule)
{
    uint32_t h = rule_hash(ip);
    for (uint32_t i = 0; i < RULE_PROBES; i++) {
        rule_slot *s = &rules[(h + i) & (RULE_SLOTS - 1)];
        uint64_t k = atomic_load_explicit(&s->ip, memory_order_acquire);
        if (k == 0 && atomic_compare_exchange_strong(&s->ip, &k, ip)) {
            atomic_store_explicit(&s->rule, rule, memory_order_release);
            atomic_fetch_add_explicit(&nrules, 1, memory_order_relaxed);
            return;
        }
        if (k == ip)
            return; /* another thread learned it */
    }
}

uint32_t at_stack_rules_learned(void) { return atomic_load(&nrules); }
uint32_t at_stack_slow_walks(void) { return atomic_load(&nslow); }

/* A plausible caller frame: above the current one, not absurdly far (a wrong rule or a corrupt stack
 * ends the walk rather than reading wild memory). */
static inline bool frame_ok(uint64_t sp, uint64_t cfa)
{
    return cfa > sp && cfa - sp < (64u << 20) && (cfa & 7) == 0;
}

static bool same_loc(const unw_save_loc_t *a, const unw_save_loc_t *b)
{
    if (a->type != b->type)
        return false;
    if (a->type == UNW_SLT_MEMORY)
        return a->u.addr == b->u.addr;
    if (a->type == UNW_SLT_REG)
        return a->u.regnum == b->u.regnum;
    return true;
}

/* The rule of the cursor's frame, learned from where unw_step took it. c was at frame i (regs sp, bp,
 * save location of rbp loc) and has been stepped to frame i+1; sig: libunwind flags frame i+1 as
 * interrupted by a signal, so frame i is the signal trampoline. */
NO_ASAN static uint64_t rule_learn(uint64_t sp, uint64_t bp, const unw_save_loc_t *loc, bool sig,
                                   unw_cursor_t *c)
{
    unw_word_t ip1, sp1, bp1;
    unw_save_loc_t loc1;
    if (U.get_reg(c, UNW_REG_IP, &ip1) < 0 || U.get_reg(c, UNW_REG_SP, &sp1) < 0
        || U.get_reg(c, UNW_X86_64_RBP, &bp1) < 0 || U.get_save_loc(c, UNW_X86_64_RBP, &loc1) < 0)
        return rule_make(K_SLOW, 0, 0);
    if (sig) {
        const uint8_t *uc = (const uint8_t *)(uintptr_t)sp;
        if (*(const uint64_t *)(uc + UC_RIP) == ip1 && *(const uint64_t *)(uc + UC_RSP) == sp1
            && *(const uint64_t *)(uc + UC_RBP) == bp1)
            return rule_make(K_SIGRETURN, 0, 0);
        return rule_make(K_SLOW, 0, 0);
    }
    uint64_t cfa = sp1;
    if (!frame_ok(sp, cfa) || *(const uint64_t *)(cfa - 8) != ip1)
        return rule_make(K_SLOW, 0, 0);
    uint64_t boff = 0;
    if (same_loc(loc, &loc1)) {
        if (bp1 != bp)
            return rule_make(K_SLOW, 0, 0);
    } else if (loc1.type == UNW_SLT_MEMORY && loc1.u.addr < cfa && ((cfa - loc1.u.addr) & 7) == 0
               && (cfa - loc1.u.addr) / 8 < 0xFFFF && *(const uint64_t *)loc1.u.addr == bp1) {
        boff = (cfa - loc1.u.addr) / 8;
    } else {
        return rule_make(K_SLOW, 0, 0);
    }
    /* rbp is this frame's frame pointer (push rbp; mov rbp, rsp): rbp-based survives alloca */
    if (boff == 2 && bp + 16 == cfa)
        return rule_make(K_RBP, boff, 16);
    if (cfa - sp >= (1ull << 32))
        return rule_make(K_SLOW, 0, 0);
    return rule_make(K_RSP, boff, cfa - sp);
}

/* The slow path: libunwind's DWARF walk from here, skipping frames up to the one that starts at
 * (ip0, sp0), recording from there and learning the rule of every frame it passes. */
AT_NOINLINE NO_ASAN static uint32_t walk_slow_unguarded(uintptr_t *ips, uint32_t max, uint32_t skip,
                                                        uint64_t ip0, uint64_t sp0, uint64_t bp0,
                                                        bool from)
{
    unw_context_t uc;
    unw_cursor_t c;
    if (!U.ok || U.getcontext(&uc) < 0)
        return 0;
    if (from) {
        /* the walk starts at the given frame: its registers in the context (x86-64 libunwind's
         * context is a ucontext_t), the other callee-saved ones as they are here (a frame whose
         * CFA rests on one of them is rare; the walk then ends early) */
        ucontext_t *u = (ucontext_t *)(void *)&uc;
        u->uc_mcontext.gregs[REG_RIP] = (greg_t)ip0;
        u->uc_mcontext.gregs[REG_RSP] = (greg_t)sp0;
        u->uc_mcontext.gregs[REG_RBP] = (greg_t)bp0;
    }
    if (U.init_local(&c, &uc) < 0)
        return 0;
    atomic_fetch_add_explicit(&nslow, 1, memory_order_relaxed);
    uint32_t n = 0;
    bool found = from, after_tramp = false;
    for (int guard = 0; guard < 4096; guard++) {
        unw_word_t ip, sp, bp;
        unw_save_loc_t loc;
        if (U.get_reg(&c, UNW_REG_IP, &ip) < 0 || U.get_reg(&c, UNW_REG_SP, &sp) < 0
            || U.get_reg(&c, UNW_X86_64_RBP, &bp) < 0)
            break;
        /* a trampoline's CFI gives its caller as the call's last byte: back to the return address */
        if (after_tramp)
            ip++;
        after_tramp = is_tramp(ip);
        if (!found && ip == ip0 && sp == sp0)
            found = true;
        bool tramp = after_tramp;
        if (found && !tramp) {
            if (ip == 0)
                break;
            if (skip)
                skip--;
            else if (n < max)
                ips[n++] = ip;
        }
        if (found && n >= max)
            break;
        if (U.get_save_loc(&c, UNW_X86_64_RBP, &loc) < 0)
            loc.type = UNW_SLT_NONE;
        int r = U.step(&c);
        if (r < 0)
            break;
        if (found && !tramp && rules && rule_get(ip) == 0)
            rule_put(ip, r == 0 ? rule_make(K_END, 0, 0)
                                : rule_learn(sp, bp, &loc, U.is_signal_frame(&c) > 0, &c));
        if (r == 0)
            break;
    }
    return n;
}

/* libunwind uses vector registers (its context, libc's memcpy): keep the caller's (xstate.h) */
AT_NOINLINE NO_ASAN static uint32_t walk_slow(uintptr_t *ips, uint32_t max, uint32_t skip,
                                              uint64_t ip0, uint64_t sp0, uint64_t bp0, bool from)
{
    at_xstate x;
    at_xstate_save(&x);
    uint32_t n = walk_slow_unguarded(ips, max, skip, ip0, sp0, bp0, from);
    at_xstate_restore(&x);
    return n;
}

/* ---- walks already made ----
 * A server takes the same stack at the same place again and again, and each frame's rule is a line
 * on a page of its own in the rule table (1 MiB, hashed): between two system calls that empty the
 * TLB, a walk of 14 frames was 14 misses. A fast walk is a function of its start (ip, sp, bp),
 * its skip and max, the rules of the addresses it meets (never changed once learned) and the
 * words it reads from memory (return addresses, saved rbp, a signal frame's registers, a return
 * record's address). So a walk is kept with the words it read, and a walk from the same start
 * that finds every one of them unchanged gives the same frames. The words are compared in the
 * order the walk read them, each only when all before it matched: the very words the walk itself
 * would read next, so the check reads no memory the walk would not.
 * Slots are shared by all threads, chosen by the start; each has a sequence number, odd while
 * written (a reader then walks; a writer that finds it odd, or loses the race for it, keeps
 * nothing), so a signal handler may walk at any point of another walk. */
#define WC_SLOTS 128u
#define WC_IPS 48u  /* frames kept (the default depth, 32, and the shim's own frames skipped) */
#define WC_READS 96u
typedef struct wc_slot {
    _Atomic uint32_t seq;
    uint16_t n, nreads;
    uint32_t skip, max;
    uint32_t bp_used; /* the walk's result depends on its start's rbp (else any rbp serves) */
    uint64_t ip, sp, bp;
    struct {
        uint64_t addr, val; /* side by side: a check reads one line per four words, not two */
    } rd[WC_READS];
    uint64_t ips[WC_IPS];
} __attribute__((aligned(2048))) wc_slot; /* 1968 bytes: a slot on one page, never across two */
_Static_assert(sizeof(wc_slot) == 2048, "a kept walk's slot is half a page");
static wc_slot wc_slots[WC_SLOTS] __attribute__((section(".bss.at_walks")));
static _Atomic uint32_t wc_kept; /* walks kept (each one a walk no kept one served) */
uint32_t at_stack_walks_kept(void) { return atomic_load(&wc_kept); }

/* what a walk read, while it is made */
typedef struct wc_log {
    uint32_t n;
    bool full;
    uint64_t addr[WC_READS], val[WC_READS];
} wc_log;

NO_ASAN static inline uint64_t wc_read(wc_log *l, const uint64_t *p)
{
    uint64_t v = *p;
    if (l->n < WC_READS) {
        l->addr[l->n] = (uint64_t)(uintptr_t)p;
        l->val[l->n++] = v;
    } else {
        l->full = true;
    }
    return v;
}

static inline wc_slot *wc_slot_of(uint64_t ip, uint64_t sp)
{
    return &wc_slots[((ip ^ sp * 0x9E3779B97F4A7C15ull) * 0xD6E8FEB86659FD93ull >> 40) & (WC_SLOTS - 1)];
}

/* A kept walk's identity: its slot and the slot's sequence number while it held that walk (never 0) */
static inline uint64_t wc_id(const wc_slot *w, uint32_t seq)
{
    return (uint64_t)(w - wc_slots + 1) << 32 | seq;
}

#define WC_LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define WC_STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* The kept walk from this start, checked: its frame count, or -1 */
NO_ASAN AT_PATH_STACK static int wc_find(uintptr_t *ips, uint32_t max, uint32_t skip, uint64_t ip, uint64_t sp,
                           uint64_t bp, uint64_t *walk)
{
    wc_slot *w = wc_slot_of(ip, sp);
    uint32_t s1 = atomic_load_explicit(&w->seq, memory_order_acquire);
    if ((s1 & 1) || WC_LOAD(w->ip) != ip || WC_LOAD(w->sp) != sp ||
        (WC_LOAD(w->bp_used) && WC_LOAD(w->bp) != bp) || WC_LOAD(w->skip) != skip ||
        WC_LOAD(w->max) != max)
        return -1;
    uint32_t nr = WC_LOAD(w->nreads), n = WC_LOAD(w->n);
    if (nr > WC_READS || n > WC_IPS || n > max)
        return -1;
    for (uint32_t i = 0; i < nr; i++) {
        uint64_t a = WC_LOAD(w->rd[i].addr);
        /* the slot may be rewritten meanwhile: the sequence, unchanged after the address was read,
         * says the address is the kept walk's (a writer makes the sequence odd before it writes),
         * so it is read only when the walk itself would read it */
        atomic_thread_fence(memory_order_acquire); /* the address before the sequence */
        if (atomic_load_explicit(&w->seq, memory_order_acquire) != s1 ||
            *(const uint64_t *)(uintptr_t)a != WC_LOAD(w->rd[i].val))
            return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        ips[i] = (uintptr_t)WC_LOAD(w->ips[i]);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&w->seq, memory_order_relaxed) != s1)
        return -1;
    *walk = wc_id(w, s1);
    return (int)n;
}

NO_ASAN static uint64_t wc_keep(const wc_log *l, const uintptr_t *ips, uint32_t n, uint32_t max,
                                uint32_t skip, uint64_t ip, uint64_t sp, uint64_t bp, bool bp_used)
{
    if (l->full || n > WC_IPS)
        return 0;
    wc_slot *w = wc_slot_of(ip, sp);
    uint32_t s = atomic_load_explicit(&w->seq, memory_order_relaxed);
    if ((s & 1) || !atomic_compare_exchange_strong_explicit(&w->seq, &s, s + 1, memory_order_acquire,
                                                            memory_order_relaxed))
        return 0;
    atomic_thread_fence(memory_order_release);
    WC_STORE(w->ip, ip);
    WC_STORE(w->sp, sp);
    WC_STORE(w->bp, bp);
    WC_STORE(w->bp_used, (uint32_t)bp_used);
    WC_STORE(w->skip, skip);
    WC_STORE(w->max, max);
    WC_STORE(w->n, (uint16_t)n);
    WC_STORE(w->nreads, (uint16_t)l->n);
    for (uint32_t i = 0; i < n; i++)
        WC_STORE(w->ips[i], (uint64_t)ips[i]);
    for (uint32_t i = 0; i < l->n; i++) {
        WC_STORE(w->rd[i].addr, l->addr[i]);
        WC_STORE(w->rd[i].val, l->val[i]);
    }
    atomic_store_explicit(&w->seq, s + 2, memory_order_release);
    atomic_fetch_add_explicit(&wc_kept, 1, memory_order_relaxed);
    return wc_id(w, s + 2);
}

/* tramp_fix, its reads logged */
NO_ASAN static inline uint64_t tramp_fix_logged(wc_log *l, uint64_t ip)
{
    for (int i = 0; i < 64 && is_tramp(ip); i++)
        ip = wc_read(l, &tr_ra[((ip - tr_pool) >> tr_shift) * tr_stride]);
    return ip;
}

/* The fast walk over learned rules; falls back to walk_slow on the first address without a usable
 * rule. (ip, sp, bp) are the caller's registers, exact. A walk made in full is kept (above). */
NO_ASAN static uint32_t walk_shared(uintptr_t *ips, uint32_t max, uint32_t skip, uint64_t ip,
                                    uint64_t sp, uint64_t bp, bool from, uint64_t *walk)
{
    *walk = 0;
    int kept = wc_find(ips, max, skip, ip, sp, bp, walk);
    if (kept >= 0)
        return (uint32_t)kept;
    wc_log log;
    log.n = 0;
    log.full = false;
    uint64_t ip0 = ip, sp0 = sp, bp0 = bp;
    uint32_t n = 0, skip0 = skip;
    /* rbp is the start's until a frame's rule reloads it from memory: only a rule that takes the
     * CFA from it makes the walk depend on that value (code built without frame pointers keeps
     * anything in rbp, a request's pointer, different at every call). So the start's rbp is part
     * of what a kept walk needs only when such a rule used it, and a word reloaded into rbp is
     * logged only when such a rule uses it (its address came from words logged before it). */
    bool bp_start = true, bp_used = false, bp_pending = false;
    const uint64_t *bp_addr = NULL;
    while (n < max) {
        uint64_t r = rule_get(ip);
        unsigned kind = (unsigned)(r & 7);
        if (kind == K_NONE || kind == K_SLOW)
            return walk_slow(ips, max, skip0, ip0, sp0, bp0, from);
        if (skip)
            skip--;
        else
            ips[n++] = ip;
        if (kind == K_END)
            break;
        if (kind == K_SIGRETURN) {
            const uint8_t *uc = (const uint8_t *)(uintptr_t)sp;
            ip = tramp_fix_logged(&log, wc_read(&log, (const uint64_t *)(uc + UC_RIP)));
            bp_addr = (const uint64_t *)(uc + UC_RBP);
            bp = *bp_addr;
            bp_start = false;
            bp_pending = true;
            sp = wc_read(&log, (const uint64_t *)(uc + UC_RSP));
            if (ip == 0 || sp == 0 || (sp & 7))
                break;
            continue;
        }
        if (kind == K_RBP) {
            if (bp_start)
                bp_used = true;
            else if (bp_pending)
                wc_read(&log, bp_addr);
            bp_pending = false;
        }
        uint64_t cfa = (kind == K_RSP ? sp : bp) + (r >> 19);
        if (!frame_ok(sp, cfa))
            break;
        uint64_t boff = (r >> 3) & 0xFFFF;
        if (boff) {
            bp_addr = (const uint64_t *)(cfa - 8 * boff);
            bp = *bp_addr;
            bp_start = false;
            bp_pending = true;
        }
        ip = tramp_fix_logged(&log, wc_read(&log, (const uint64_t *)(cfa - 8)));
        sp = cfa;
        if (ip == 0)
            break;
    }
    *walk = wc_keep(&log, ips, n, max, skip0, ip0, sp0, bp0, bp_used);
    return n;
}

/* Frame pointers: [rbp] = caller's rbp, [rbp+8] = return address. rbp must point into the stack above
 * the caller's rsp and climb: a function without a frame pointer uses rbp for anything. */
NO_ASAN static uint32_t walk_fp(uintptr_t *ips, uint32_t max, uint32_t skip, uint64_t ip, uint64_t sp,
                                uint64_t bp)
{
    uint32_t n = 0;
    uint64_t lo = sp;
    for (;;) {
        if (skip)
            skip--;
        else if (n < max)
            ips[n++] = ip;
        if (n >= max || bp < lo || (bp & 7) || bp - lo > (64u << 20))
            break;
        uint64_t next = ((const uint64_t *)bp)[0];
        ip = tramp_fix(((const uint64_t *)bp)[1]);
        if (ip == 0 || next <= bp)
            break;
        lo = bp + 16;
        bp = next;
    }
    return n;
}

static uint32_t walk_libunwind(uintptr_t *ips, uint32_t max, uint32_t skip, uint64_t ip0)
{
    void *buf[AT_STACK_MAX_DEPTH + 8];
    int want = (int)(max + skip + 4);
    if (want > (int)AT_ARRAY_LEN(buf))
        want = (int)AT_ARRAY_LEN(buf);
    at_xstate x;
    at_xstate_save(&x);
    int got = U.backtrace(buf, want);
    at_xstate_restore(&x);
    int i = 0;
    while (i < got && i < 4 && (uint64_t)(uintptr_t)buf[i] != ip0)
        i++;
    if (i == got || i == 4)
        return 0;
    uint32_t n = 0;
    bool after_tramp = false;
    for (; i < got && n < max; i++) {
        /* a trampoline's CFI gives its caller as the call's last byte */
        uintptr_t a = (uintptr_t)buf[i] + (after_tramp ? 1 : 0);
        after_tramp = is_tramp(a);
        if (after_tramp)
            continue;
        if (skip)
            skip--;
        else
            ips[n++] = a;
    }
    return n;
}

/* The caller's registers from this frame: it has a frame pointer (pragma above), so its CFA is
 * rbp+16, the caller's rsp is that CFA, the return address and the caller's rbp are saved below it. */
#define CALLER_REGS(ip, sp, bp)                                                                   \
    uint64_t *fp_ = (uint64_t *)__builtin_frame_address(0);                                     \
    uint64_t ip = (uint64_t)(uintptr_t)__builtin_return_address(0), sp = (uint64_t)(uintptr_t)(fp_ + 2), \
             bp = fp_[0]

AT_NOINLINE NO_ASAN AT_PATH_STACK uint32_t at_stack_capture_with(enum at_stack_mode m, uintptr_t *ips, uint32_t max,
                                                   uint32_t skip)
{
    CALLER_REGS(ip, sp, bp);
    if (max > AT_STACK_MAX_DEPTH)
        max = AT_STACK_MAX_DEPTH;
    if (max == 0 || atomic_load_explicit(&mode_in_use, memory_order_relaxed) == 0)
        return 0;
    if (m != AT_STACK_FP && !U.ok)
        m = AT_STACK_FP;
    if (m == AT_STACK_SHARED && !rules)
        m = AT_STACK_LIBUNWIND;
    uint32_t n;
    AT_INTERNAL_BEGIN(); /* libunwind reads files and probes memory: no hook may see it */
    if (m == AT_STACK_SHARED)
        n = walk_shared(ips, max, skip, ip, sp, bp, false, &(uint64_t){0});
    else if (m == AT_STACK_LIBUNWIND)
        n = walk_libunwind(ips, max, skip, ip);
    else
        n = walk_fp(ips, max, skip, ip, sp, bp);
    AT_INTERNAL_END();
    __asm__ volatile("" ::: "memory"); /* no tail call: our frame must exist during the walk */
    return n;
}

AT_NOINLINE NO_ASAN AT_PATH_STACK uint32_t at_stack_capture_from_kept(uintptr_t *ips, uint32_t max,
                                                                       uint64_t ip, uint64_t sp,
                                                                       uint64_t bp, uint64_t *walk)
{
    *walk = 0;
    if (max > AT_STACK_MAX_DEPTH)
        max = AT_STACK_MAX_DEPTH;
    int m = atomic_load_explicit(&mode_in_use, memory_order_relaxed) - 1;
    if (max == 0 || m < 0 || ip == 0)
        return 0;
    ip = tramp_fix(ip); /* a hooked call's own return point: its real caller */
    uint32_t n;
    AT_INTERNAL_BEGIN();
    if (m == AT_STACK_SHARED)
        n = walk_shared(ips, max, 0, ip, sp, bp, true, walk);
    else if (m == AT_STACK_LIBUNWIND)
        n = walk_slow(ips, max, 0, ip, sp, bp, true); /* libunwind from that frame */
    else
        n = walk_fp(ips, max, 0, ip, sp, bp);
    AT_INTERNAL_END();
    __asm__ volatile("" ::: "memory"); /* our frame exists during a slow walk */
    return n;
}

/* at_stack_capture's walk, from the caller's registers (the macro takes them in its caller) */
#define CAPTURE_HERE(ips, max, skip, walk)                                                          \
    do {                                                                                            \
        CALLER_REGS(ip, sp, bp);                                                                    \
        *(walk) = 0;                                                                                \
        if ((max) > AT_STACK_MAX_DEPTH)                                                             \
            (max) = AT_STACK_MAX_DEPTH;                                                             \
        int m = atomic_load_explicit(&mode_in_use, memory_order_relaxed) - 1;                     \
        if ((max) == 0 || m < 0)                                                                    \
            return 0;                                                                               \
        uint32_t n;                                                                                 \
        AT_INTERNAL_BEGIN(); /* libunwind reads files and probes memory: no hook may see it */      \
        if (m == AT_STACK_SHARED)                                                                   \
            n = walk_shared(ips, max, skip, ip, sp, bp, false, walk);                               \
        else if (m == AT_STACK_LIBUNWIND)                                                           \
            n = walk_libunwind(ips, max, skip, ip);                                                 \
        else                                                                                        \
            n = walk_fp(ips, max, skip, ip, sp, bp);                                                \
        AT_INTERNAL_END();                                                                          \
        __asm__ volatile("" ::: "memory");                                                          \
        return n;                                                                                   \
    } while (0)

AT_NOINLINE NO_ASAN uint32_t at_stack_capture(uintptr_t *ips, uint32_t max, uint32_t skip)
{
    uint64_t walk;
    CAPTURE_HERE(ips, max, skip, &walk);
}

AT_NOINLINE NO_ASAN AT_PATH_STACK uint32_t at_stack_capture_kept(uintptr_t *ips, uint32_t max,
                                                                 uint32_t skip, uint64_t *walk)
{
    CAPTURE_HERE(ips, max, skip, walk);
}

static bool load_libunwind(char *err, size_t errlen)
{
    if (U.ok)
        return true;
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, errlen, "cannot load libunwind.so.8 (%s): stacks use frame pointers", dlerror());
        return false;
    }
    *(void **)&U.getcontext = dlsym(h, "_Ux86_64_getcontext");
    *(void **)&U.init_local = dlsym(h, "_ULx86_64_init_local");
    *(void **)&U.step = dlsym(h, "_ULx86_64_step");
    *(void **)&U.get_reg = dlsym(h, "_ULx86_64_get_reg");
    *(void **)&U.get_save_loc = dlsym(h, "_ULx86_64_get_save_loc");
    *(void **)&U.is_signal_frame = dlsym(h, "_ULx86_64_is_signal_frame");
    *(void **)&U.backtrace = dlsym(h, "unw_backtrace");
    if (!U.getcontext || !U.init_local || !U.step || !U.get_reg || !U.get_save_loc
        || !U.is_signal_frame || !U.backtrace) {
        snprintf(err, errlen, "libunwind.so.8 lacks the local unwinding API: stacks use frame pointers");
        return false; /* the handle stays open: nothing else to release */
    }
    /* before its first use: its memory checks then never make a pipe (a failure leaves the pipe to
     * the shim's descriptor guard) */
    (void)at_unwmem_install(h);
    U.ok = true;
    return true;
}

int at_stack_init(enum at_stack_mode mode, char *err, size_t errlen)
{
    char dummy[8];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = 0;
    int rc = 0;
    enum at_stack_mode use = mode;
    if (mode == AT_STACK_SHARED || mode == AT_STACK_LIBUNWIND) {
        if (!load_libunwind(err, errlen)) {
            use = AT_STACK_FP;
            rc = -1;
        }
    } else if (mode != AT_STACK_FP) {
        snprintf(err, errlen, "unknown stack mode %d", (int)mode);
        use = AT_STACK_FP;
        rc = -1;
    }
    if (use == AT_STACK_SHARED && !rules) {
        size_t len = RULE_SLOTS * sizeof(rule_slot);
        void *p = at_as_map("unwind rule table", &len, 0, 0, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (!p) {
            use = AT_STACK_LIBUNWIND;
            if (!at_as_limited()) { /* under a limit, asroom.c's line said so */
                snprintf(err, errlen, "no memory for the unwind rule table: libunwind's unw_backtrace is used");
                rc = -1;
            }
        } else {
            rules = p;
        }
    }
    atomic_store(&mode_in_use, (int)use + 1);
    /* one capture now: lazy binding, libunwind's own set-up and the rules of this thread's frames */
    uintptr_t tmp[64];
    at_stack_capture(tmp, 64, 0);
    return rc;
}

enum at_stack_mode at_stack_mode_in_use(void)
{
    int m = atomic_load(&mode_in_use) - 1;
    return m < 0 ? AT_STACK_FP : (enum at_stack_mode)m;
}

const char *at_stack_mode_name(enum at_stack_mode m)
{
    switch (m) {
    case AT_STACK_SHARED: return "shared";
    case AT_STACK_LIBUNWIND: return "libunwind";
    case AT_STACK_FP: return "fp";
    }
    return "?";
}
