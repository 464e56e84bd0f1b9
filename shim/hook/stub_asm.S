/* stub_asm.S: the signature-less wrapper. A table of AT_STUB_MAX tiny trampolines (one per hook: load
 * the hook's index into r11, jump to the common stub) means no code is generated at run time. The
 * common stub keeps every argument register (rdi rsi rdx rcx r8 r9, rax for varargs, r10, xmm0-7),
 * realigns the stack (a caller in the same file may not have), calls at_stub_enter (which reads
 * typed arguments from the saved registers when the hook has a signature, and returns the function
 * to run), calls that function with the registers as they were and a copy of the caller's first
 * 128 bytes of stack arguments, keeps its return registers (rax rdx xmm0 xmm1) across at_stub_exit,
 * and returns. Its frame is an ordinary rbp frame
 * described by CFI, so unwinders and debuggers walk through it; its personality routine writes the
 * Stop when a C++ exception unwinds through it. */

#define NSTUB 512               /* AT_STUB_MAX in hook.h */
#define REGS 0                  /* rsp-based: at_hook_regs: gp[6], rax, r10, xmm[8] (192 bytes) */
#define RETS 192                /* rsp-based: rax, rdx, xmm0, xmm1 after the call (48 bytes) */
#define ARGS 240                /* rsp-based: the typed arguments as 64-bit values (128 bytes) */
#define LOCALS 368
#define INDEX (-8)              /* rbp-based: the hook's index (the personality reads it) */
#define CALL (-48)              /* rbp-based: at_hook_call (32 bytes) */
#define RESERVE (LOCALS + 48 + 16)
#define ARGCOPY 128             /* bytes of stack arguments passed on */

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
    movl $i, %r11d
    jmp at_stub_common
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
    pushq %rbp
    .cfi_def_cfa_offset 16
    .cfi_offset %rbp, -16
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    /* Functions of one file may be called with the stack not 16-byte aligned (gcc's
     * -fipa-stack-alignment knows the callee does not need it): realign for the C we call. */
    subq $RESERVE, %rsp
    andq $-16, %rsp
    movq %r11, INDEX(%rbp)
    movq %rdi, REGS+0(%rsp)
    movq %rsi, REGS+8(%rsp)
    movq %rdx, REGS+16(%rsp)
    movq %rcx, REGS+24(%rsp)
    movq %r8, REGS+32(%rsp)
    movq %r9, REGS+40(%rsp)
    movq %rax, REGS+48(%rsp)
    movq %r10, REGS+56(%rsp)
    movdqu %xmm0, REGS+64(%rsp)
    movdqu %xmm1, REGS+80(%rsp)
    movdqu %xmm2, REGS+96(%rsp)
    movdqu %xmm3, REGS+112(%rsp)
    movdqu %xmm4, REGS+128(%rsp)
    movdqu %xmm5, REGS+144(%rsp)
    movdqu %xmm6, REGS+160(%rsp)
    movdqu %xmm7, REGS+176(%rsp)
    movl %r11d, %edi
    movq %rsp, %rsi                 /* regs (the typed arguments may be rewritten there) */
    leaq CALL(%rbp), %rdx
    leaq 16(%rbp), %rcx             /* the caller's stack: stack arguments, and the call's depth */
    leaq ARGS(%rsp), %r8
    call at_stub_enter
    movq %rax, %r11                 /* the function to run */
    subq $ARGCOPY, %rsp
    .set k, 0
    .rept ARGCOPY / 8
    movq 16+k(%rbp), %rax
    movq %rax, k(%rsp)
    .set k, k + 8
    .endr
    movdqu ARGCOPY+REGS+64(%rsp), %xmm0
    movdqu ARGCOPY+REGS+80(%rsp), %xmm1
    movdqu ARGCOPY+REGS+96(%rsp), %xmm2
    movdqu ARGCOPY+REGS+112(%rsp), %xmm3
    movdqu ARGCOPY+REGS+128(%rsp), %xmm4
    movdqu ARGCOPY+REGS+144(%rsp), %xmm5
    movdqu ARGCOPY+REGS+160(%rsp), %xmm6
    movdqu ARGCOPY+REGS+176(%rsp), %xmm7
    movq ARGCOPY+REGS+0(%rsp), %rdi
    movq ARGCOPY+REGS+8(%rsp), %rsi
    movq ARGCOPY+REGS+16(%rsp), %rdx
    movq ARGCOPY+REGS+24(%rsp), %rcx
    movq ARGCOPY+REGS+32(%rsp), %r8
    movq ARGCOPY+REGS+40(%rsp), %r9
    movq ARGCOPY+REGS+48(%rsp), %rax
    movq ARGCOPY+REGS+56(%rsp), %r10
    call *%r11
    addq $ARGCOPY, %rsp
    movq %rax, RETS+0(%rsp)
    movq %rdx, RETS+8(%rsp)
    movdqu %xmm0, RETS+16(%rsp)
    movdqu %xmm1, RETS+32(%rsp)
    movl INDEX(%rbp), %edi
    leaq CALL(%rbp), %rsi
    leaq RETS(%rsp), %rdx
    leaq ARGS(%rsp), %rcx
    call at_stub_exit
    movq RETS+0(%rsp), %rax
    movq RETS+8(%rsp), %rdx
    movdqu RETS+16(%rsp), %xmm0
    movdqu RETS+32(%rsp), %xmm1
    movq %rbp, %rsp
    popq %rbp
    .cfi_def_cfa %rsp, 8
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
