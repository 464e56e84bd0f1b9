/* stacks.c: which events of the shim carry a stack, and taking it (runtime/stack.h). The walker
 * (libunwind, loaded with dlopen, and its one-time work) is set up when the first stack is taken,
 * once, by that thread: a process that records no stack never loads it. Settings: ACTTRACE_STACKS (start|stop|both|none), ACTTRACE_STACK_WALKER,
 * ACTTRACE_STACK_DEPTH; a config file can override per activity. */
#include <dlfcn.h>
#include <errno.h>
#include <ffi.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shim.h"
#include "stack.h"
#include "trace.h"
#include "xstate.h"

static bool at_stacks_ready AT_START_DATA;

/* ---- the program's frames only ----
 * A stack taken inside the shim holds its machinery wherever hooks nest: the stub, the handlers,
 * libffi's closure and call code, the thread-start trampoline. (libffi's closure trampolines jump,
 * they make no frame.) Each run of such frames that holds one
 * of the shim's own is dropped, wherever it stands; a run of libffi frames alone is the program's
 * own use of libffi and stays. */
static uintptr_t own_lo[2] AT_WALK_BSS, own_hi[2] AT_WALK_BSS; /* [shim, libffi] executable segments */
static bool own_ready AT_WALK_BSS;

static int own_range(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size, (void)data;
    static int anchor;
    int which = -1;
    /* libffi's own ffi_call (the name here is the shim's trampoline): none before hooks load it */
    uintptr_t self = (uintptr_t)&anchor, ffi = (uintptr_t)at_dynlib_ffi_call();
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (self >= lo && self < hi)
            which = 0;
        else if (ffi >= lo && ffi < hi)
            which = 1;
    }
    if (which < 0)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            own_lo[which] = info->dlpi_addr + ph->p_vaddr;
            own_hi[which] = own_lo[which] + ph->p_memsz;
        }
    }
    return 0;
}

void at_shim_stack_own_init(void)
{
    if (!own_ready) {
        dl_iterate_phdr(own_range, NULL);
        own_ready = true;
    }
}

/* 2: the shim's; 1: libffi's; 0: the program's */
static inline int frame_kind(uintptr_t ip)
{
    if (ip - 1 - own_lo[0] < own_hi[0] - own_lo[0])
        return 2;
    if (ip - 1 - own_lo[1] < own_hi[1] - own_lo[1])
        return 1;
    return 0;
}


AT_PATH_STACK uint32_t at_shim_stack_trim(uintptr_t *ips, uint32_t n, uint32_t depth)
{
    uint32_t out = 0;
    for (uint32_t i = 0; i < n && out < depth;) {
        int k = frame_kind(ips[i]);
        if (k == 0) {
            ips[out++] = ips[i++];
            continue;
        }
        uint32_t j = i;
        bool shim = false;
        for (; j < n; j++) {
            int kj = j == i ? k : frame_kind(ips[j]);
            if (kj == 0)
                break;
            shim |= kj == 2;
        }
        if (!shim)
            for (; i < j && out < depth; i++)
                ips[out++] = ips[i];
        i = j;
    }
    return out;
}

/* "acttrace: " and line on stderr in one write, with no stdio (a hook, a signal handler) */
static void at_shim_say(const char *line)
{
    char b[340] = "acttrace: ";
    size_t n = strlen(b), l = strlen(line);
    if (l > sizeof b - n)
        l = sizeof b - n;
    memcpy(b + n, line, l);
    ssize_t w = write(2, b, n + l);
    (void)w;
}

/* 0 not set up, 1 a thread is setting it up, 2 ready */
static _Atomic int stacks_stage AT_WALK_BSS;

static void stacks_setup(void)
{
    AT_INTERNAL_BEGIN(); /* dlopen's and libunwind's calls reach no hook */
    char err[256], line[320];
    if (at_stack_init((enum at_stack_mode)at_cfg.stack_walker, err, sizeof err) != 0) {
        snprintf(line, sizeof line, "stacks: %s; using the %s walker\n", err,
                 at_stack_mode_name(at_stack_mode_in_use()));
        at_shim_say(line);
    }
    at_shim_stack_own_init();
    AT_INTERNAL_END();
}

/* The first stack of the process: the caller may be a hook whose caller keeps values in vector
 * registers (xstate.h), so the set-up runs inside the guard. Another thread (or a signal handler
 * that interrupted the set-up) meanwhile takes no stack rather than wait. */
static AT_NOINLINE bool stacks_first(void)
{
    int expect = 0;
    if (atomic_compare_exchange_strong(&stacks_stage, &expect, 1)) {
        int e = errno;
        at_xs_call(stacks_setup);
        errno = e;
        atomic_store(&stacks_stage, 2);
        return true;
    }
    return expect == 2;
}

/* The walker ready (set up by the first stack of the process, in at_shim_capture's caller). */
static inline bool stacks_ready(void)
{
    return AT_LIKELY(atomic_load_explicit(&stacks_stage, memory_order_acquire) == 2) ||
           stacks_first();
}

/* The shim's frames do not count against the program's depth: room for some (the callers' arrays
 * hold AT_STACK_MAX_DEPTH, a hook's from its second entry). */
static inline uint32_t room_for(uint32_t depth)
{
    return depth + 32 < AT_STACK_MAX_DEPTH - 1 ? depth + 32 : AT_STACK_MAX_DEPTH - 1;
}

/* A walk's return addresses as the program's frames, as files hold them: call sites, the last
 * byte of each call instruction. A call that ends its function (a noreturn call) returns to the
 * first byte of the next function, which TraceEvent, looking the stored address up as it is, would
 * name. Readers that look up address - 1 (ours, which also read older files of return addresses)
 * still land in the call, never shorter than 2 bytes. */
static uint32_t program_frames(uintptr_t *ips, uint32_t n, uint32_t depth)
{
    n = at_shim_stack_trim(ips, n, depth);
    for (uint32_t i = 0; i < n; i++)
        ips[i]--;
    return n;
}

AT_NOINLINE AT_PATH_STACK uint32_t at_shim_capture(uintptr_t *ips, uint32_t depth, uint32_t skip)
{
    if (!stacks_ready())
        return 0;
    uint32_t n = at_stack_capture(ips, room_for(depth), skip + 1);
    __asm__ volatile("" ::: "memory"); /* no tail call: this frame counts in skip */
    return program_frames(ips, n, depth);
}

void at_shim_stacks_setup(void)
{
    (void)stacks_first();
}

/* A hooked call's stack with leaf (the hooked function) first, as a stack array (trace.h) in
 * ips[0..return): at its return from the caller's registers (ip non-zero: the walk starts at that
 * frame), else from here, the shim's frames dropped (as at_shim_capture). A walk that is a kept one the
 * thread has already written with this leaf and depth is a reference to that stack, one word, and
 * is neither trimmed nor copied again; a kept walk written for the first time is a definition, its
 * marker before the frames. ips has room for AT_STACK_MAX_DEPTH + 1 words. (A kept walk's
 * identity says its raw frames, the shim's included from here; the trim of them is the same every
 * time, so the identity, the leaf and the depth say the stack.) */
AT_NOINLINE AT_PATH_STACK uint32_t at_shim_capture_call(uintptr_t *ips, uint32_t depth, uint64_t ip,
                                                        uint64_t sp, uint64_t bp, uintptr_t leaf)
{
    uint32_t n = 0;
    uint64_t walk = 0;
    if (stacks_ready()) {
        n = ip ? at_stack_capture_from_kept(ips + 2, room_for(depth), ip, sp, bp, &walk)
               : at_stack_capture_kept(ips + 2, room_for(depth), 1, &walk); /* not this frame */
        if (walk) {
            uint64_t use = at_stkref_use(walk, leaf, depth);
            if (use) {
                ips[0] = use;
                return 1;
            }
        }
        n = program_frames(ips + 2, n, depth);
    }
    ips[1] = leaf;
    uint64_t def = walk ? at_stkref_def(walk, leaf, depth, n + 1) : 0;
    if (def) {
        ips[0] = def;
        return n + 2;
    }
    for (uint32_t i = 0; i <= n; i++) /* the frames from ips[0] */
        ips[i] = ips[i + 1];
    return n + 1;
}

/* now: set the walker up here, in the constructor (a process whose first event may come from a
 * signal handler); otherwise when the first stack is taken (at_shim_capture) */
void at_shim_stacks_init(bool now)
{
    if (at_cfg.stacks == AT_CFG_STACKS_NONE || at_cfg.stack_depth == 0)
        return;
    at_stacks_ready = true;
    if (now)
        (void)stacks_first();
}

AT_NOINLINE uint32_t at_shim_stack(int which, uintptr_t *ips, uint32_t max, uint32_t skip)
{
    if (!at_stacks_ready)
        return 0;
    int s = at_cfg.stacks;
    if (s == AT_CFG_STACKS_NONE || (s != AT_CFG_STACKS_BOTH && s != which))
        return 0;
    uint32_t depth = at_cfg.stack_depth < max ? at_cfg.stack_depth : max;
    uint32_t n = at_shim_capture(ips, depth, skip + 1); /* + this function's own frame */
    __asm__ volatile("" ::: "memory"); /* no tail call: that frame must exist for the count */
    return n;
}
