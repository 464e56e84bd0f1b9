/* stub.c: the C side of the register-saving wrapper (stub_asm.S): the table of hooks by stub index,
 * the enter/exit calls the stub makes, typed arguments and return values read from the registers
 * the stub saved (the x86-64 System V classification: integers and pointers in rdi rsi rdx rcx r8
 * r9, floating point in xmm0-7, the rest on the caller's stack, in order), and the personality
 * routine that writes the Stop of a call a C++ exception unwinds through (then lets the unwind go
 * on: the exception is unchanged). */
#include <stddef.h>
#include <string.h>
#include <unwind.h>

#include "hook.h"

extern char at_stub_tramps[];
static at_hook *at_stub_table[AT_STUB_MAX];
/* 1 for a hook with a signature: the stub stores xmm0-7 (typed arguments) and xmm0-1 (a typed
 * return value) for it only */
uint8_t at_stub_typed[AT_STUB_MAX] __attribute__((visibility("hidden")));
static int at_stub_used;

/* Frame offsets shared with stub_asm.S, from the stub's rbp: the index the trampoline pushed is
 * above it, the call state below. (The personality reads rbp, which the unwind context holds for the
 * stub's frame; its CFA field is still the callee's then.) */
#define STUB_INDEX_ABOVE_RBP 8
#define STUB_CALL_FROM_RBP 48
#define DWARF_RBP 6

_Static_assert(sizeof(at_hook_regs) == 192, "stub_asm.S saves 192 bytes of registers");
_Static_assert(sizeof(at_hook_call) <= 32, "stub_asm.S keeps 32 bytes of call state");

/* The System V places of the typed parameters, computed once per hook. */
static void slots_plan(at_hook *h)
{
    const at_sig *s = h->sig;
    int ngp = 0, nxmm = 0, nstack = 0;
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

int at_stub_make(at_hook *h)
{
    slots_plan(h);
    int i = __atomic_fetch_add(&at_stub_used, 1, __ATOMIC_RELAXED);
    if (i >= AT_STUB_MAX)
        return -1;
    h->stub_index = i;
    at_stub_typed[i] = h->sig != NULL;
    __atomic_store_n(&at_stub_table[i], h, __ATOMIC_RELEASE);
    h->wrapper = at_stub_tramps + 16 * i;
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
 * undefined in the ABI: extend them here), as hook.h's 64-bit argument form. */
static uint64_t from_slot(at_ctype t, uint64_t v)
{
    switch (t) {
    case AT_CT_I8: return (uint64_t)(int64_t)(int8_t)v;
    case AT_CT_U8: return (uint8_t)v;
    case AT_CT_I16: return (uint64_t)(int64_t)(int16_t)v;
    case AT_CT_U16: return (uint16_t)v;
    case AT_CT_I32: return (uint64_t)(int64_t)(int32_t)v;
    case AT_CT_U32: return (uint32_t)v;
    case AT_CT_F32: return at_stub_f32_bits_to_f64((uint32_t)v);
    default: return v;
    }
}

/* Where parameter i lives: a gp register, an xmm register or a stack slot. */
static inline uint64_t *param_slot(const at_hook *h, int i, at_hook_regs *regs, uint64_t *stack)
{
    unsigned n = h->arg_slot[i];
    return n >= 32 ? &stack[n - 32] : (uint64_t *)regs + n;
}

void *at_stub_enter(unsigned index, at_hook_regs *regs, at_hook_call *c, uint64_t *caller_sp,
                    uint64_t *args);
void at_stub_exit(unsigned index, at_hook_call *c, const uint64_t *rets, uint64_t *args);
_Unwind_Reason_Code at_stub_personality(int version, _Unwind_Action actions, uint64_t cls,
                                        struct _Unwind_Exception *ue, struct _Unwind_Context *ctx);

/* Under a sanitizer (make check-asan) the hook's code calls into the sanitizer's runtime, which may
 * use any vector register: there the whole extended state is kept around the C side of the stub.
 * The production build needs none of this (its hook code touches no vector state). */
#if defined(__SANITIZE_ADDRESS__)
#include "xstate.h"
static void *stub_enter(unsigned index, at_hook_regs *regs, at_hook_call *c, uint64_t *caller_sp,
                        uint64_t *args);
static void stub_exit(unsigned index, at_hook_call *c, const uint64_t *rets, uint64_t *args);
void *at_stub_enter(unsigned index, at_hook_regs *regs, at_hook_call *c, uint64_t *caller_sp,
                    uint64_t *args)
{
    at_xstate x;
    at_xstate_save(&x);
    void *fn = stub_enter(index, regs, c, caller_sp, args);
    at_xstate_restore(&x);
    return fn;
}
void at_stub_exit(unsigned index, at_hook_call *c, const uint64_t *rets, uint64_t *args)
{
    at_xstate x;
    at_xstate_save(&x);
    stub_exit(index, c, rets, args);
    at_xstate_restore(&x);
}
#define at_stub_enter stub_enter
#define at_stub_exit stub_exit
#define AT_STUB_LINKAGE static
#else
#define AT_STUB_LINKAGE
#endif

AT_STUB_LINKAGE void *at_stub_enter(unsigned index, at_hook_regs *regs, at_hook_call *c,
                                    uint64_t *caller_sp, uint64_t *args)
{
    at_hook *h = at_stub_table[index];
    c->act = NULL;
    c->sp = (uintptr_t)caller_sp;
    c->started = 0;
    /* The shim's own call (the flusher's pwrite, libunwind's read through an entry-patched libc):
     * straight to the original, nothing read or recorded, at exit either */
    c->done = at_internal != 0;
    if (AT_UNLIKELY(c->done))
        return h->orig;
    const at_sig *s = h->sig;
    if (!s) {
        at_hook_enter(h, c, NULL);
        return h->orig;
    }
    for (int i = 0; i < s->nparams; i++)
        args[i] = from_slot(s->p[i].type, *param_slot(h, i, regs, caller_sp));
    at_hook_enter(h, c, args);
    /* pointers the semantics replaced (a callback flow), in registers only: the stack arguments
     * the original receives are a copy taken after this */
    for (int i = 0; i < s->nparams; i++) {
        uint64_t *slot = param_slot(h, i, regs, caller_sp);
        if (s->p[i].type == AT_CT_PTR && *slot != args[i] &&
            (uintptr_t)slot >= (uintptr_t)regs && (uintptr_t)slot < (uintptr_t)(regs + 1))
            *slot = args[i];
    }
    return h->orig;
}

AT_STUB_LINKAGE void at_stub_exit(unsigned index, at_hook_call *c, const uint64_t *rets,
                                   uint64_t *args)
{
    at_hook *h = at_stub_table[index];
    if (AT_UNLIKELY(c->done))
        return; /* entered from the shim's own work */
    c->done = 1;
    uint64_t r = rets[0];
    if (h->sig) {
        at_ctype t = h->sig->ret;
        r = from_slot(t, (t == AT_CT_F32 || t == AT_CT_F64) ? rets[2] : rets[0]);
    }
    at_hook_exit(h, c, h->sig ? args : NULL, r, AT_HOOK_RETURNED);
}

_Unwind_Reason_Code at_stub_personality(int version, _Unwind_Action actions, uint64_t cls,
                                        struct _Unwind_Exception *ue, struct _Unwind_Context *ctx)
{
    (void)version, (void)cls, (void)ue;
    if ((actions & _UA_CLEANUP_PHASE) && ctx) {
        uintptr_t rbp = _Unwind_GetGR(ctx, DWARF_RBP);
        unsigned index = (unsigned)*(uint64_t *)(rbp + STUB_INDEX_ABOVE_RBP);
        at_hook_call *c = (at_hook_call *)(rbp - STUB_CALL_FROM_RBP);
        if (index < AT_STUB_MAX && at_stub_table[index] && !c->done) {
            c->done = 1;
            /* the typed arguments were saved below the registers, at a realigned rsp: not needed
             * for a Stop that carries no return value */
            at_hook_exit(at_stub_table[index], c, NULL, 0, AT_HOOK_UNWOUND);
        }
    }
    return _URC_CONTINUE_UNWIND;
}
