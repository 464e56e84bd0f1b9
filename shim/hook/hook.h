/* hook.h: the mechanics of hooking a function by name (issue 5), apart from what a hook *does*
 * (shim/hooks.c decides that with the activity engine):
 *   resolve.c  a name (sym, lib!sym, sym@VER, module+0xOFF) -> the loaded module and address (libelf)
 *   got.c      tier 1: rewrite the GOT slots of every module importing the symbol (RELRO too)
 *   entry.c    tier 2: patch the function's first instructions (Zydis), relocating what they displace
 *   stub_asm.S the register-saving wrapper (every register and flag the caller can see kept as the
 *   stub.c     unhooked function leaves it; the function runs on its caller's stack, its return
 *              address replaced by a return trampoline that unwinders walk through by CFI, with a
 *              personality for unwinds); with a signature it reads typed arguments from the saved
 *              registers (entry tier: callers in the same file may leave the stack unaligned)
 *   ffiwrap.c  the typed wrapper of GOT slots: a libffi closure built from the signature
 * A wrapper calls h->orig to run the original: the definition itself (GOT tier) or the relocated
 * first instructions followed by a jump back (entry tier). */
#ifndef AT_HOOK_H
#define AT_HOOK_H

#include <ffi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "at_common.h"
#include "signature.h"

/* ---------------- resolution ---------------- */

typedef enum at_sym_table { AT_SYM_DYNSYM = 1, AT_SYM_SYMTAB, AT_SYM_DEBUG, AT_SYM_OFFSET } at_sym_table;

typedef struct at_resolved {
    char module[4096];   /* path of the module that defines it ("" = the executable's own path) */
    uintptr_t base;      /* the module's load bias */
    uintptr_t addr;      /* the function's address */
    size_t size;         /* st_size (0 when unknown: module+offset) */
    at_sym_table table;
    bool is_exe;         /* defined in the main executable */
    bool exported;       /* in .dynsym with default visibility: other modules may import it */
    char sym[256];       /* the bare name (no lib!, no @VER); "" for module+offset */
    char version[64];    /* the @VERSION asked for, or "" */
    char defver[64];     /* the version of the definition found in .dynsym, or "" */
} at_resolved;

/* Resolve spec among the loaded modules. Returns 0, or -1 with the reason in why. */
int at_resolve(const char *spec, at_resolved *r, char *why, size_t whylen);
/* The other names of the function r found in .dynsym (a plain or lib! name): the exported,
 * default-version names at its address (open64 and __open for open; private versions left out),
 * then the fortified variants the module defines for each name (__open_2, __open64_2,
 * __read_chk). Fills up to max names; returns how many. */
int at_resolve_aliases(const at_resolved *r, char (*names)[64], int max);
/* Does a loaded module whose path ends in name exist (for lib!sym)? */
bool at_module_loaded(const char *name);
/* Hex build-id of the module file path ("" when it has none). */
void at_module_build_id(const char *path, char *hex, size_t n);

/* ---------------- the hook ---------------- */

/* The registers the stub saved on entry; the layout is stub_asm.S's. */
typedef struct at_hook_regs {
    uint64_t gp[6];  /* rdi rsi rdx rcx r8 r9 */
    uint64_t rax, r10;
    uint8_t xmm[8][16];
} at_hook_regs;

/* One call of a hooked function, as the wrappers see it: state the semantics keep between entry
 * and return (in the libffi wrapper's frame, or the stub's return record). */
typedef struct at_hook_call {
    void *act;       /* the activity this call started (a reference) */
    uintptr_t sp;    /* the wrapper's frame: deeper frames than a live one are abandoned (longjmp) */
    uint8_t started, done;
    /* Set by the stub's return path for the call's exit (ret_ip 0 otherwise): the caller's
     * registers as the function returned to it. A stack taken then starts from the caller, rather
     * than walking up through the return trampoline, whose unwind rule (a DWARF expression) the
     * shared walker cannot hold and would send every such walk to libunwind. */
    uint64_t ret_ip, ret_sp, ret_bp;
} at_hook_call;

enum at_hook_status { AT_HOOK_RETURNED = 0, AT_HOOK_UNWOUND = 1, AT_HOOK_ABANDONED = 2 };

/* A hook's names and resolution (over 5 KiB, a module's path among them), apart from the hook: the
 * hooks a server calls between two system calls then share a page or two rather than taking one
 * each. */
typedef struct at_hook_text {
    char spec[512];    /* what to hook */
    at_resolved res;
    char why[512];     /* why it is not hooked (tier 0), or a note */
} at_hook_text;

typedef struct at_hook at_hook;
struct at_hook {
    /* What a hooked call reads, first and on one cache line: between two system calls of a server
     * (which may empty the TLB and the caches) each line and page a call touches is a miss. */
    void *orig;        /* call this to run the original function */
    void *user;        /* the semantics' own data (hooks.c) */
    const at_sig *sig; /* NULL: the signature-less stub */
    uintptr_t addr;    /* res.addr: the function (a stack's leaf) */
    /* where the stub finds typed parameter i: its 8-byte slot in at_hook_regs (0-23: gp[6], rax,
     * r10, then xmm0..7 at 8, 10, ..) or, from 32 on, stack slot (n - 32) */
    uint8_t arg_slot[AT_SIG_MAX_PARAMS];
    /* sig's parameter and return types, for the stub (at_ctype values, parameter i's in bits
     * 4i..4i+3 of ptypes): the signature itself spreads them over a page */
    uint8_t nparams, ret_type;
    bool sets_args;    /* the rule may replace pointer arguments (a callback flow) */
    /* how many leading parameters the semantics reads, plus one (0: all of them): the stub
     * converts no more */
    uint8_t args_read;
    /* what the semantics does at each end of a call (hooks.c, set once): enter_noop, nothing at its
     * entry but keep the arguments for its return; exit_noop, nothing at its return, so the stub
     * lets the function return straight to its caller (no return record) */
    bool enter_noop, exit_noop;
    uint64_t ptypes;
    /* what to hook, its resolution, and why it is not hooked: read at install and in reports */
    at_hook_text *text;
    /* installation */
    void *wrapper;     /* the address installed in GOT slots / jumped to from the patched entry */
    int tier;          /* 0 not hooked, 1 GOT, 2 entry */
    int nslots;        /* GOT slots rewritten */
    /* libffi */
    ffi_cif cif;
    ffi_type *atypes[AT_SIG_MAX_PARAMS];
    ffi_closure *closure;
    int stub_index;
    /* entry patching */
    void *patched_at;
    uint8_t saved[32];
    size_t saved_len;
};
_Static_assert(offsetof(struct at_hook, ptypes) + 8 <= 64, "a hook's hot head is one line");

/* Called by the wrappers; implemented by the semantics (hooks.c). args: the arguments as 64-bit
 * values (integers extended, pointers, doubles' bits), NULL for the stub. enter may replace
 * pointer arguments (a callback flow wraps the callback): the typed wrapper passes them on. */
void at_hook_enter(at_hook *h, at_hook_call *c, uint64_t *args);
void at_hook_exit(at_hook *h, at_hook_call *c, const uint64_t *args, uint64_t ret, int status);

/* ---------------- wrappers ---------------- */

#define AT_STUB_MAX 512
/* Hooked calls in progress through the stub at once, in all threads (return trampolines): a call
 * beyond that is not traced (its two events are counted as lost). */
#define AT_RET_MAX 8192
/* bytes per return record (stub.c's ret_rec; stub_asm.S reads its first two words) */
#define AT_RET_REC 256
/* Give h a register-saving stub wrapper (h->wrapper; typed when h->sig is set). 0, or -1 when all
 * stubs are taken. */
int at_stub_make(at_hook *h);
/* A new thread gives the bounds of its own stack (at_stub_thread_start: any range within it),
 * which tell a frame a longjmp left; at_stub_thread_exit gives its return records back. */
/* Learn the first thread's stack (when hooks are installed, before any runs). */
void at_stub_main_bounds(void);
void at_stub_thread_start(uintptr_t lo, uintptr_t hi);
void at_stub_thread_exit(void);
/* The bits of the double equal to the float of bits f (integer arithmetic only). */
uint64_t at_stub_f32_bits_to_f64(uint32_t f);
/* Give h a libffi closure built from h->sig. 0 or -1 with why. */
int at_ffi_make(at_hook *h, char *why, size_t n);

/* ---------------- direct: the shim's own interposer runs the rule ---------------- */

/* A hook on a function the shim interposes anyway (shim/real.h, AT_DIRECT_LIST: the reads, writes,
 * close and accept a server makes per request): the modules' GOT slots lead to the interposer, which
 * runs the rule around the real function itself, with its C arguments, instead of a stub doing it
 * from saved registers around a return trampoline. Only for rules whose work is all at one end of
 * the call (at_hook.enter_noop or exit_noop: an unwind through it, such as a thread's cancellation,
 * leaves nothing to close) and whose signature has its parameters read in general registers (at
 * most six, no floating point). That end alone runs anything: the entry of an event written at the
 * return does nothing (a system call between the two would make whatever it touched a miss again). */
/* Can h be run by its function's interposer? (Computes where its parameters are, as at_stub_make.) */
bool at_direct_ok(at_hook *h);
/* The hook run by interposer idx (AT_DIRECT_*), NULL for none; set once it is complete. */
extern at_hook *at_direct_hooks[];
/* The rule's work, all at the call's entry (at_direct_entry) or all at its return (at_direct_return,
 * with the function's return value extended to 64 bits): raw are its arguments as the registers held
 * them (integers extended), frame the interposer's frame (__builtin_frame_address(0): the caller's
 * rbp, then its return address). Both keep errno. */
void at_direct_entry(unsigned idx, const uint64_t *raw, uint64_t *frame);
void at_direct_return(unsigned idx, const uint64_t *raw, uint64_t *frame, uint64_t ret);

/* ---------------- installing ---------------- */

/* Rewrite every GOT slot importing sym (of that version, when one is given and the module's import
 * names one) in every loaded module but the shim (slots already holding wrapper are left: the
 * dlopen re-scan). Returns the number of slots rewritten; wrapper NULL only
 * counts them (acttrace check). */
int at_got_patch(const char *sym, const char *version, void *wrapper, char *why, size_t n);
/* Nothing is undone: slots are never restored (a wrapper lives as long as the process). */

/* Tier 2: patch h->text->res.addr to jump to h->wrapper; sets h->orig to the relocated entry.
 * 0, or -1 with the reason (too short, jump back into the patched bytes, ...) in why. */
int at_entry_patch(at_hook *h, char *why, size_t n);
/* Only decide whether the function could be patched (acttrace check): 0 or -1 with why. */
int at_entry_check(uintptr_t addr, size_t size, char *why, size_t n);

#endif
