/* stacks.c: which events of the shim carry a stack, and taking it (runtime/stack.h). The walker is
 * set up in the constructor (at_shim_stacks_init), so lazy binding and libunwind's one-time work never
 * land on a traced thread. Settings: ACTTRACE_STACKS (start|stop|both|none), ACTTRACE_STACK_WALKER,
 * ACTTRACE_STACK_DEPTH; a config file can override per activity. */
#include <dlfcn.h>
#include <ffi.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "shim.h"
#include "stack.h"
#include "xstate.h"

static bool at_stacks_ready;

/* ---- the program's frames only ----
 * A stack taken inside the shim holds its machinery wherever hooks nest: the stub, the handlers,
 * libffi's closure and call code, the thread-start trampoline. (libffi's closure trampolines jump,
 * they make no frame.) Each run of such frames that holds one
 * of the shim's own is dropped, wherever it stands; a run of libffi frames alone is the program's
 * own use of libffi and stays. */
static uintptr_t own_lo[2], own_hi[2]; /* [shim, libffi] executable segments */
static bool own_ready;

static int own_range(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size, (void)data;
    static int anchor;
    int which = -1;
    uintptr_t self = (uintptr_t)&anchor, ffi = (uintptr_t)&ffi_call;
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


uint32_t at_shim_stack_trim(uintptr_t *ips, uint32_t n, uint32_t depth)
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

AT_NOINLINE uint32_t at_shim_capture(uintptr_t *ips, uint32_t depth, uint32_t skip)
{
    /* the shim's frames do not count against the program's depth: take room for some (the
     * callers' arrays hold AT_STACK_MAX_DEPTH, a hook's from its second entry) */
    uint32_t want = depth + 32 < AT_STACK_MAX_DEPTH - 1 ? depth + 32 : AT_STACK_MAX_DEPTH - 1;
    uint32_t n = at_stack_capture(ips, want, skip + 1);
    __asm__ volatile("" ::: "memory"); /* no tail call: this frame counts in skip */
    n = at_shim_stack_trim(ips, n, depth);
    /* Files hold call sites, not return addresses: the last byte of each call instruction. A call
     * that ends its function (a noreturn call) returns to the first byte of the next function, which
     * TraceEvent, looking the stored address up as it is, would name. Readers that look up
     * address - 1 (ours, which also read older files of return addresses) still land in the call,
     * never shorter than 2 bytes. */
    for (uint32_t i = 0; i < n; i++)
        ips[i]--;
    return n;
}

void at_shim_stacks_init(void)
{
    if (at_cfg.stacks == AT_CFG_STACKS_NONE || at_cfg.stack_depth == 0)
        return;
    char err[256];
    if (at_stack_init((enum at_stack_mode)at_cfg.stack_walker, err, sizeof err) != 0)
        fprintf(stderr, "acttrace: stacks: %s; using the %s walker\n", err,
                at_stack_mode_name(at_stack_mode_in_use()));
    at_shim_stack_own_init();
    at_stacks_ready = true;
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
