/* stub_asm.S: the signature-less wrapper. A table of AT_STUB_MAX tiny trampolines (one per hook: push
 * the hook's index, jump to the common stub) means no code is generated at run time; pushing the index
 * rather than loading it into a register leaves every register as the caller set it.
 *
 * A hooked function must look exactly like the unhooked one to its caller: GCC's IPA register
 * allocation lets a caller in the same file keep values in call-clobbered registers the callee is
 * known not to touch, so the ABI's list of clobbers is no licence. The common stub therefore
 *   - saves every call-clobbered general register and the arithmetic flags on entry, calls
 *     at_stub_enter (which reads typed arguments from the saved registers when the hook has a
 *     signature, and returns the function to run), and restores all of them before calling that
 *     function, so it sees the caller's exact state (with a copy of the first 128 bytes of stack
 *     arguments);
 *   - saves every general register and the flags the function returned with, calls at_stub_exit,
 *     and restores all of them before returning: the caller sees what the function left.
 * Vector, x87 and MXCSR state is not saved here: the C code the stub calls is built with
 * -mgeneral-regs-only and wraps each call into code that may use those registers (malloc, libunwind)
 * in an XSAVE/XRSTOR pair (runtime/xstate.h), which costs far less than saving them on every call.
 * xmm0-7 are only stored (never reloaded), for typed arguments, and xmm0-1 after the call for a
 * typed floating-point return value: only for hooks with a signature (at_stub_typed). No
 * instruction between the caller's state and the restore of it relies on flags it has not saved:
 * lea, not add, adjusts rsp.
 * Its frame is an ordinary rbp frame described by CFI, so unwinders and debuggers walk through it;
 * its personality routine writes the Stop when a C++ exception unwinds through it. */

#define NSTUB 512               /* AT_STUB_MAX in hook.h */
/* rsp-based (after realignment) */
#define REGS 0                  /* at_hook_regs: gp[6], rax, r10, xmm[8] (192 bytes) */
#define R11 192                 /* the caller's r11 */
#define RETS 208                /* rax, rdx, xmm0, xmm1 after the call (48 bytes) */
#define OUT 256                 /* rcx rsi rdi r8 r9 r10 r11 after the call (56 bytes) */
#define ARGS 320                /* the typed arguments as 64-bit values (128 bytes) */
#define LOCALS 448
/* rbp-based */
#define INDEX 8                 /* the hook's index, pushed by the trampoline (the personality reads it) */
#define CALLER 24               /* the caller's stack: its stack arguments (rbp+16 is the return address) */
#define SAVED_RAX (-8)
#define FLAGS (-16)             /* al = OF, ah = SF ZF AF PF CF (seto, lahf) */
#define CALL (-48)              /* at_hook_call (32 bytes) */
#define FN (-56)                /* the function to run */
#define RESERVE (LOCALS + 56 + 16 + 8)
#define ARGCOPY 128             /* bytes of stack arguments passed on */

/* the arithmetic flags into FLAGS(%rbp); needs rax already saved */
.macro SAVE_FLAGS
    lahf
    seto %al
    movw %ax, FLAGS(%rbp)
.endm
/* and back: OF from adding 0x7f to 0 or 1, then the others with sahf (which leaves OF alone) */
.macro RESTORE_FLAGS
    movzbl FLAGS(%rbp), %eax
    addb $0x7f, %al
    movb FLAGS+1(%rbp), %ah
    sahf
.endm

    .text
    .p2align 4
    .globl at_stub_tramps
    .hidden at_stub_tramps
    .type at_stub_tramps, @function
at_stub_tramps:
    .cfi_startproc
    .set i, 0
    .rept NSTUB
    .p2align 4
    pushq $i
    .cfi_adjust_cfa_offset 8
    jmp at_stub_common
    .cfi_adjust_cfa_offset -8
    .set i, i + 1
    .endr
    .cfi_endproc
    .size at_stub_tramps, . - at_stub_tramps

    .p2align 4
    .globl at_stub_common
    .hidden at_stub_common
    .type at_stub_common, @function
at_stub_common:
    .cfi_startproc
    .cfi_personality 0x9b, DW.ref.at_stub_personality
    .cfi_def_cfa_offset 16          /* the index, then the return address */
    pushq %rbp
    .cfi_def_cfa_offset 24
    .cfi_offset %rbp, -24
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    movq %rax, SAVED_RAX(%rbp)
    SAVE_FLAGS
    /* Functions of one file may be called with the stack not 16-byte aligned (gcc's
     * -fipa-stack-alignment knows the callee does not need it): realign for the C we call. */
    leaq -RESERVE(%rbp), %rsp
    andq $-16, %rsp
    movq %rdi, REGS+0(%rsp)
    movq %rsi, REGS+8(%rsp)
    movq %rdx, REGS+16(%rsp)
    movq %rcx, REGS+24(%rsp)
    movq %r8, REGS+32(%rsp)
    movq %r9, REGS+40(%rsp)
    movq SAVED_RAX(%rbp), %rax
    movq %rax, REGS+48(%rsp)
    movq %r10, REGS+56(%rsp)
    movq %r11, R11(%rsp)
    movl INDEX(%rbp), %eax
    leaq at_stub_typed(%rip), %rdi
    cmpb $0, (%rdi,%rax)
    je 1f
    movdqu %xmm0, REGS+64(%rsp)
    movdqu %xmm1, REGS+80(%rsp)
    movdqu %xmm2, REGS+96(%rsp)
    movdqu %xmm3, REGS+112(%rsp)
    movdqu %xmm4, REGS+128(%rsp)
    movdqu %xmm5, REGS+144(%rsp)
    movdqu %xmm6, REGS+160(%rsp)
    movdqu %xmm7, REGS+176(%rsp)
1:  movl INDEX(%rbp), %edi
    movq %rsp, %rsi                 /* regs (the typed arguments may be rewritten there) */
    leaq CALL(%rbp), %rdx
    leaq CALLER(%rbp), %rcx         /* the caller's stack: stack arguments, and the call's depth */
    leaq ARGS(%rsp), %r8
    call at_stub_enter
    movq %rax, FN(%rbp)
    leaq -ARGCOPY(%rsp), %rsp
    .set k, 0
    .rept ARGCOPY / 8
    movq CALLER+k(%rbp), %rax
    movq %rax, k(%rsp)
    .set k, k + 8
    .endr
    /* the caller's state exactly (pointer arguments as the hook may have replaced them) */
    RESTORE_FLAGS
    movq ARGCOPY+REGS+0(%rsp), %rdi
    movq ARGCOPY+REGS+8(%rsp), %rsi
    movq ARGCOPY+REGS+16(%rsp), %rdx
    movq ARGCOPY+REGS+24(%rsp), %rcx
    movq ARGCOPY+REGS+32(%rsp), %r8
    movq ARGCOPY+REGS+40(%rsp), %r9
    movq ARGCOPY+REGS+48(%rsp), %rax
    movq ARGCOPY+REGS+56(%rsp), %r10
    movq ARGCOPY+R11(%rsp), %r11
    call *FN(%rbp)
    leaq ARGCOPY(%rsp), %rsp
    movq %rax, RETS+0(%rsp)
    SAVE_FLAGS
    movq %rdx, RETS+8(%rsp)
    movq %rcx, OUT+0(%rsp)
    movq %rsi, OUT+8(%rsp)
    movq %rdi, OUT+16(%rsp)
    movq %r8, OUT+24(%rsp)
    movq %r9, OUT+32(%rsp)
    movq %r10, OUT+40(%rsp)
    movq %r11, OUT+48(%rsp)
    movl INDEX(%rbp), %edi
    leaq at_stub_typed(%rip), %rax
    cmpb $0, (%rax,%rdi)
    je 1f
    movdqu %xmm0, RETS+16(%rsp)
    movdqu %xmm1, RETS+32(%rsp)
1:
    leaq CALL(%rbp), %rsi
    leaq RETS(%rsp), %rdx
    leaq ARGS(%rsp), %rcx
    call at_stub_exit
    /* what the function left, exactly */
    RESTORE_FLAGS
    movq RETS+0(%rsp), %rax
    movq RETS+8(%rsp), %rdx
    movq OUT+0(%rsp), %rcx
    movq OUT+8(%rsp), %rsi
    movq OUT+16(%rsp), %rdi
    movq OUT+24(%rsp), %r8
    movq OUT+32(%rsp), %r9
    movq OUT+40(%rsp), %r10
    movq OUT+48(%rsp), %r11
    movq %rbp, %rsp
    popq %rbp
    .cfi_def_cfa %rsp, 16
    leaq 8(%rsp), %rsp              /* the index */
    .cfi_def_cfa_offset 8
    ret
    .cfi_endproc
    .size at_stub_common, . - at_stub_common

    .hidden DW.ref.at_stub_personality
    .weak DW.ref.at_stub_personality
    .section .data.rel.local.DW.ref.at_stub_personality,"awG",@progbits,DW.ref.at_stub_personality,comdat
    .align 8
    .type DW.ref.at_stub_personality, @object
    .size DW.ref.at_stub_personality, 8
DW.ref.at_stub_personality:
    .quad at_stub_personality

    .section .note.GNU-stack,"",@progbits
