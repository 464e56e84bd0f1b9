/* dynlib.c: the libraries only the hooks use (libffi, libelf, Zydis, and libgcc_s for the typed
 * wrappers' and the stubs' unwinding) are loaded with dlopen(RTLD_LOCAL) when a config has hooks,
 * not linked: a process with no hooks maps none of them (each costs its start page faults and
 * relocations). The shim calls their functions by their own names through trampolines defined here
 * (hidden: the program binds to the real libraries as before), each one indirect jump through a
 * slot filled by at_dynlib_load; nothing reaches a trampoline before that (every caller is in the
 * hook installation or in a hook it made). libffi's basic type descriptors are data: the shim has
 * its own (libffi reads their size, alignment and kind, never their address). */
#include <dlfcn.h>
#include <ffi.h>
#include <stdalign.h>
#include <stdint.h>
#include <stdio.h>

#include "shim.h"
#include "hook.h"

#ifndef AT_SONAME_FFI
#define AT_SONAME_FFI "libffi.so.8"
#endif
#ifndef AT_SONAME_ELF
#define AT_SONAME_ELF "libelf.so.1"
#endif
#ifndef AT_SONAME_ZYDIS
#define AT_SONAME_ZYDIS "libZydis.so.4.0"
#endif

enum { L_FFI, L_ELF, L_ZYDIS, L_GCC, L_N };
static const char *const lib_name[L_N] = {AT_SONAME_FFI, AT_SONAME_ELF, AT_SONAME_ZYDIS,
                                          "libgcc_s.so.1"};

/* X(index, library, name): the order is the slot's index */
#define AT_DYN_FUNCS(X)                                                                            \
    X(0, L_FFI, ffi_call)                                                                          \
    X(1, L_FFI, ffi_closure_alloc)                                                                 \
    X(2, L_FFI, ffi_closure_free)                                                                  \
    X(3, L_FFI, ffi_prep_cif)                                                                      \
    X(4, L_FFI, ffi_prep_closure_loc)                                                              \
    X(5, L_ELF, elf_begin)                                                                         \
    X(6, L_ELF, elf_end)                                                                           \
    X(7, L_ELF, elf_getdata)                                                                       \
    X(8, L_ELF, elf_getshdrstrndx)                                                                 \
    X(9, L_ELF, elf_kind)                                                                          \
    X(10, L_ELF, elf_nextscn)                                                                      \
    X(11, L_ELF, elf_strptr)                                                                       \
    X(12, L_ELF, elf_version)                                                                      \
    X(13, L_ELF, gelf_getnote)                                                                     \
    X(14, L_ELF, gelf_getshdr)                                                                     \
    X(15, L_ELF, gelf_getsym)                                                                      \
    X(16, L_ELF, gelf_getverdaux)                                                                  \
    X(17, L_ELF, gelf_getverdef)                                                                   \
    X(18, L_ELF, gelf_getversym)                                                                   \
    X(19, L_ZYDIS, ZydisCalcAbsoluteAddress)                                                       \
    X(20, L_ZYDIS, ZydisDecoderDecodeFull)                                                         \
    X(21, L_ZYDIS, ZydisDecoderInit)                                                               \
    X(22, L_ZYDIS, ZydisMnemonicGetString)                                                         \
    X(23, L_GCC, _Unwind_GetIP)                                                                    \
    X(24, L_GCC, _Unwind_Resume)                                                                   \
    X(25, L_GCC, __gcc_personality_v0)
#define AT_DYN_N 26

/* the slots the trampolines jump through (read-mostly: written once, before any use) */
__attribute__((used, visibility("hidden"))) void *at_dyn_slot[AT_DYN_N];

static const struct {
    int lib;
    const char *name;
} dyn_fn[AT_DYN_N] = {
#define AT_DYN_ENTRY(i, lib, name) [i] = {lib, #name},
    AT_DYN_FUNCS(AT_DYN_ENTRY)
#undef AT_DYN_ENTRY
};

/* name: jmp *at_dyn_slot[i]. Arguments, return value and unwinding are the real function's (the
 * trampoline has no frame of its own; its CFI says the return address is at the stack top). */
#define AT_DYN_TRAMPOLINE(i, lib, name)                                                            \
    __asm__(".text\n"                                                                              \
            ".globl " #name "\n"                                                                   \
            ".hidden " #name "\n"                                                                  \
            ".type " #name ", @function\n" #name ":\n"                                             \
            ".cfi_startproc\n"                                                                     \
            "jmp *at_dyn_slot+8*" #i "(%rip)\n"                                                    \
            ".cfi_endproc\n"                                                                       \
            ".size " #name ", .-" #name "\n");
AT_DYN_FUNCS(AT_DYN_TRAMPOLINE)
#undef AT_DYN_TRAMPOLINE

/* libffi's basic types, as libffi defines them: size and alignment of the C type, and its kind */
#define AT_FFI_TYPE(name, ctype, kind)                                                             \
    ffi_type ffi_type_##name = {sizeof(ctype), alignof(ctype), kind, NULL};
AT_FFI_TYPE(uint8, uint8_t, FFI_TYPE_UINT8)
AT_FFI_TYPE(sint8, int8_t, FFI_TYPE_SINT8)
AT_FFI_TYPE(uint16, uint16_t, FFI_TYPE_UINT16)
AT_FFI_TYPE(sint16, int16_t, FFI_TYPE_SINT16)
AT_FFI_TYPE(uint32, uint32_t, FFI_TYPE_UINT32)
AT_FFI_TYPE(sint32, int32_t, FFI_TYPE_SINT32)
AT_FFI_TYPE(uint64, uint64_t, FFI_TYPE_UINT64)
AT_FFI_TYPE(sint64, int64_t, FFI_TYPE_SINT64)
AT_FFI_TYPE(float, float, FFI_TYPE_FLOAT)
AT_FFI_TYPE(double, double, FFI_TYPE_DOUBLE)
AT_FFI_TYPE(pointer, void *, FFI_TYPE_POINTER)
ffi_type ffi_type_void = {1, 1, FFI_TYPE_VOID, NULL};

static bool dyn_loaded;

int at_dynlib_load(char *err, size_t n)
{
    if (dyn_loaded)
        return 0;
    void *h[L_N];
    for (int l = 0; l < L_N; l++) {
        h[l] = dlopen(lib_name[l], RTLD_NOW | RTLD_LOCAL);
        if (!h[l]) {
            snprintf(err, n, "cannot load %s: %s", lib_name[l], dlerror());
            return -1;
        }
    }
    void *got[AT_DYN_N];
    for (int i = 0; i < AT_DYN_N; i++) {
        got[i] = dlsym(h[dyn_fn[i].lib], dyn_fn[i].name);
        if (!got[i]) {
            snprintf(err, n, "%s has no %s", lib_name[dyn_fn[i].lib], dyn_fn[i].name);
            return -1; /* the handles stay open: nothing else to release */
        }
    }
    for (int i = 0; i < AT_DYN_N; i++)
        __atomic_store_n(&at_dyn_slot[i], got[i], __ATOMIC_RELEASE);
    dyn_loaded = true;
    return 0;
}

void *at_dynlib_ffi_call(void)
{
    return __atomic_load_n(&at_dyn_slot[0], __ATOMIC_ACQUIRE);
}
