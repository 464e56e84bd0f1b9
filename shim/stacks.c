/* stacks.c: which events of the shim carry a stack, and taking it (runtime/stack.h). The walker is
 * set up in the constructor (at_shim_stacks_init), so lazy binding and libunwind's one-time work never
 * land on a traced thread. Settings: ACTTRACE_STACKS (start|stop|both|none), ACTTRACE_STACK_WALKER,
 * ACTTRACE_STACK_DEPTH; a config file can override per activity. */
#include <stdio.h>

#include "shim.h"
#include "stack.h"

static bool at_stacks_ready;

void at_shim_stacks_init(void)
{
    if (at_cfg.stacks == AT_CFG_STACKS_NONE || at_cfg.stack_depth == 0)
        return;
    char err[256];
    if (at_stack_init((enum at_stack_mode)at_cfg.stack_walker, err, sizeof err) != 0)
        fprintf(stderr, "acttrace: stacks: %s; using the %s walker\n", err,
                at_stack_mode_name(at_stack_mode_in_use()));
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
    uint32_t n = at_stack_capture(ips, depth, skip + 1); /* + this function's own frame */
    __asm__ volatile("" ::: "memory"); /* no tail call: that frame must exist for the count */
    return n;
}
