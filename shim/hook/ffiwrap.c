/* ffiwrap.c: the typed wrapper. A libffi closure built from the configured signature receives the
 * arguments with their C types, hands them to the semantics as 64-bit values, runs the original
 * with ffi_call and hands over the return value. Built with -fexceptions: a C++ exception thrown
 * by the original runs the cleanup below (the Stop, marked unwound) and propagates unchanged.
 * libffi allocates closures in memory that is never writable and executable at once when the
 * system forbids it (its trampoline table / memfd paths). */
#include <stdio.h>
#include <string.h>

#include "hook.h"

static uint64_t to_u64(at_ctype t, const void *p)
{
    switch (t) {
    case AT_CT_I8: return (uint64_t)(int64_t)*(const int8_t *)p;
    case AT_CT_U8: return *(const uint8_t *)p;
    case AT_CT_I16: return (uint64_t)(int64_t)*(const int16_t *)p;
    case AT_CT_U16: return *(const uint16_t *)p;
    case AT_CT_I32: return (uint64_t)(int64_t)*(const int32_t *)p;
    case AT_CT_U32: return *(const uint32_t *)p;
    case AT_CT_F32: {
        double d = *(const float *)p;
        uint64_t u;
        memcpy(&u, &d, 8);
        return u;
    }
    case AT_CT_I64: case AT_CT_U64: case AT_CT_F64: case AT_CT_PTR: case AT_CT_STR: {
        uint64_t u;
        memcpy(&u, p, 8);
        return u;
    }
    case AT_CT_VOID: break;
    }
    return 0;
}

typedef struct ffi_frame {
    at_hook *h;
    at_hook_call c;
    uint64_t args[AT_SIG_MAX_PARAMS];
} ffi_frame;

static void unwound(ffi_frame *f)
{
    if (f->h && !f->c.done) {
        f->c.done = 1;
        at_hook_exit(f->h, &f->c, f->args, 0, AT_HOOK_UNWOUND);
    }
}

static void handler(ffi_cif *cif, void *ret, void **args, void *user)
{
    (void)cif;
    at_hook *h = user;
    /* The shim's own call (a flusher or unwinder call through a GOT slot): the original only */
    if (AT_UNLIKELY(at_internal)) {
        ffi_arg rv[2] = {0, 0};
        bool fp = h->sig->ret == AT_CT_F32 || h->sig->ret == AT_CT_F64;
        ffi_call(&h->cif, FFI_FN(h->orig), h->sig->ret == AT_CT_VOID ? NULL : fp ? ret : rv, args);
        if (!fp && h->sig->ret != AT_CT_VOID)
            memcpy(ret, rv, sizeof(ffi_arg));
        return;
    }
    __attribute__((cleanup(unwound))) ffi_frame f;
    f.h = h;
    memset(&f.c, 0, sizeof f.c);
    f.c.sp = (uintptr_t)__builtin_frame_address(0);
    for (int i = 0; i < h->sig->nparams; i++)
        f.args[i] = to_u64(h->sig->p[i].type, args[i]);
    at_hook_enter(h, &f.c, f.args);
    for (int i = 0; i < h->sig->nparams; i++) /* pointers the semantics replaced */
        if (h->sig->p[i].type == AT_CT_PTR && memcmp(args[i], &f.args[i], 8))
            memcpy(args[i], &f.args[i], 8);
    /* libffi widens integral returns smaller than a register to ffi_arg */
    ffi_arg rv[2] = {0, 0};
    void *rp = h->sig->ret == AT_CT_VOID ? NULL : (h->sig->ret == AT_CT_F32 || h->sig->ret == AT_CT_F64 ? ret : rv);
    ffi_call(&h->cif, FFI_FN(h->orig), rp, args);
    uint64_t r = 0;
    if (h->sig->ret == AT_CT_F32 || h->sig->ret == AT_CT_F64)
        r = to_u64(h->sig->ret, ret);
    else if (h->sig->ret != AT_CT_VOID) {
        r = (uint64_t)rv[0];
        if (h->sig->ret == AT_CT_I32)
            r = (uint64_t)(int64_t)(int32_t)r;
        else if (h->sig->ret == AT_CT_I16)
            r = (uint64_t)(int64_t)(int16_t)r;
        else if (h->sig->ret == AT_CT_I8)
            r = (uint64_t)(int64_t)(int8_t)r;
        memcpy(ret, rv, sizeof(ffi_arg));
    }
    f.c.done = 1;
    at_hook_exit(h, &f.c, f.args, r, AT_HOOK_RETURNED);
}

int at_ffi_make(at_hook *h, char *why, size_t n)
{
    const at_sig *s = h->sig;
    at_stub_main_bounds(); /* which frames a longjmp left is told on the thread's own stack */
    for (int i = 0; i < s->nparams; i++)
        h->atypes[i] = at_ctype_ffi(s->p[i].type);
    if (ffi_prep_cif(&h->cif, FFI_DEFAULT_ABI, (unsigned)s->nparams, at_ctype_ffi(s->ret),
                     h->atypes) != FFI_OK) {
        snprintf(why, n, "libffi cannot describe %s", s->fname);
        return -1;
    }
    void *code = NULL;
    h->closure = ffi_closure_alloc(sizeof(ffi_closure), &code);
    if (!h->closure) {
        snprintf(why, n, "libffi cannot allocate a closure (executable memory refused?)");
        return -1;
    }
    if (ffi_prep_closure_loc(h->closure, &h->cif, handler, h, code) != FFI_OK) {
        ffi_closure_free(h->closure);
        h->closure = NULL;
        snprintf(why, n, "libffi cannot prepare the closure for %s", s->fname);
        return -1;
    }
    h->wrapper = code;
    return 0;
}
