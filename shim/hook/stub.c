/* stub.c: the C side of the signature-less wrapper (stub_asm.S): the table of hooks by stub index, the
 * enter/exit calls the stub makes, and the personality routine that writes the Stop of a call a
 * C++ exception unwinds through (then lets the unwind continue: the exception is unchanged). */
#include <stddef.h>
#include <unwind.h>

#include "hook.h"

extern char at_stub_tramps[];
static at_hook *at_stub_table[AT_STUB_MAX];
static int at_stub_used;

/* Frame offsets shared with stub_asm.S, from the stub's rbp: the index at rbp-8, the call state at
 * rbp-8-280+192. (The personality reads rbp, which the unwind context holds for the stub's frame;
 * its CFA field is still the callee's when a personality runs.) */
#define STUB_INDEX_FROM_RBP 8
#define STUB_CALL_FROM_RBP (8 + 280 - 192)
#define DWARF_RBP 6

_Static_assert(sizeof(at_hook_regs) == 192, "stub_asm.S saves 192 bytes of registers");
_Static_assert(sizeof(at_hook_call) <= 32, "stub_asm.S keeps 32 bytes of call state");

int at_stub_make(at_hook *h)
{
    int i = __atomic_fetch_add(&at_stub_used, 1, __ATOMIC_RELAXED);
    if (i >= AT_STUB_MAX)
        return -1;
    h->stub_index = i;
    __atomic_store_n(&at_stub_table[i], h, __ATOMIC_RELEASE);
    h->wrapper = at_stub_tramps + 16 * i;
    return 0;
}

void *at_stub_enter(unsigned index, at_hook_regs *regs, at_hook_call *c, uintptr_t cfa);
void at_stub_exit(unsigned index, at_hook_call *c, uint64_t ret);
_Unwind_Reason_Code at_stub_personality(int version, _Unwind_Action actions, uint64_t cls,
                                        struct _Unwind_Exception *ue, struct _Unwind_Context *ctx);

void *at_stub_enter(unsigned index, at_hook_regs *regs, at_hook_call *c, uintptr_t cfa)
{
    (void)regs;
    at_hook *h = at_stub_table[index];
    c->act = NULL;
    c->key = 0;
    c->sp = cfa;
    c->started = c->done = c->at_entry_event = 0;
    at_hook_enter(h, c, NULL);
    return h->orig;
}

void at_stub_exit(unsigned index, at_hook_call *c, uint64_t ret)
{
    at_hook *h = at_stub_table[index];
    c->done = 1;
    at_hook_exit(h, c, NULL, ret, AT_HOOK_RETURNED);
}

_Unwind_Reason_Code at_stub_personality(int version, _Unwind_Action actions, uint64_t cls,
                                        struct _Unwind_Exception *ue, struct _Unwind_Context *ctx)
{
    (void)version, (void)cls, (void)ue;
    if ((actions & _UA_CLEANUP_PHASE) && ctx) {
        uintptr_t rbp = _Unwind_GetGR(ctx, DWARF_RBP);
        unsigned index = (unsigned)*(uint64_t *)(rbp - STUB_INDEX_FROM_RBP);
        at_hook_call *c = (at_hook_call *)(rbp - STUB_CALL_FROM_RBP);
        if (index < AT_STUB_MAX && at_stub_table[index] && !c->done) {
            c->done = 1;
            at_hook_exit(at_stub_table[index], c, NULL, 0, AT_HOOK_UNWOUND);
        }
    }
    return _URC_CONTINUE_UNWIND;
}
