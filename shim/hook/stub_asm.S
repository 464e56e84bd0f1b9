/* stub_asm.S: the signature-less wrapper, and the return trampolines it leaves in place of a hooked
 * call's return address.
 *
 * The hooked function runs on its caller's own stack, as if unhooked: whatever the size of its stack
 * arguments (a struct passed by value, a variadic call with 30 arguments), the function reads them
 * where its caller put them. The wrapper only replaces the return address:
 *   - a table of AT_STUB_MAX entry trampolines (one per hook, no code generated at run time):
 *     `call at_stub_common` (which learns the hook's index from its return address, saves the
 *     caller's registers and flags, calls at_stub_enter, and restores them all), then an indirect
 *     jump through at_stub_orig[i] to the original function, with every register as the caller set
 *     it and the stack as the caller left it;
 *   - at_stub_enter records the call and replaces the return address in the caller's frame by the
 *     address of a return trampoline (one of AT_RET_MAX: `movw $k, -16(%rsp); jmp at_ret_common`), keeping
 *     the real one in at_ret_ra[k];
 *   - when the function returns there, at_ret_common saves every general register and the flags
 *     the function returned with, puts the real return address back where the call put it, calls
 *     at_ret_exit, restores everything and jumps to the caller: the caller sees what the function
 *     left.
 * GCC's IPA register allocation lets a caller in the same file keep values in call-clobbered
 * registers the callee is known not to touch, so nothing the caller can observe may change: no
 * instruction between the caller's state and the restore of it relies on flags it has not saved
 * (lea, not add, adjusts rsp). Vector, x87 and MXCSR state is not saved: the C code called here is
 * built with -mgeneral-regs-only and wraps each call into code that may use those registers in an
 * XSAVE/XRSTOR pair (runtime/xstate.h). xmm0-7 are stored (never reloaded) for typed arguments, and
 * xmm0-1 after the call for a typed floating-point return value.
 *
 * Unwinders: the return trampolines are covered by one FDE whose rules make each of them a frame of
 * no size (CFA = rsp) whose return address is at_ret_ra[k], computed by a DWARF expression from the
 * trampoline's own address (still in the return slot, just below the CFA) and the offset to its
 * cell stored in the trampoline's last bytes. So C++ exceptions, pthread_exit's forced unwind,
 * backtrace(3), libunwind and debuggers walk through a hooked call to its real caller, also from a
 * signal handler that interrupted any instruction of the return path; the FDE's personality writes
 * the Stop of a call an exception unwinds through. The stack walker of runtime/stack.c replaces the
 * trampoline by the real return address itself. */

#define NSTUB 512               /* AT_STUB_MAX in hook.h */
#define NRET 16384              /* AT_RET_MAX in hook.h */

/* at_stub_common, rsp-based (after realignment) */
#define REGS 0                  /* at_hook_regs: gp[6], rax, r10, xmm[8] (192 bytes) */
#define R11 192                 /* the caller's r11 */
#define LOCALS 208
/* rbp-based */
#define TRAMP_RET 8             /* the entry trampoline's return address (its index) */
#define SLOT 16                 /* the caller's return address: the hooked call's */
#define SAVED_RAX (-8)
#define FLAGS (-16)             /* al = OF, ah = SF ZF AF PF CF (seto, lahf) */
#define RESERVE (LOCALS + 16 + 16)

/* at_ret_common, rsp-based */
#define RETS 0                  /* rax, rdx, xmm0, xmm1 as the function returned them (48 bytes) */
#define OUT 48                  /* rcx rsi rdi r8 r9 r10 r11 (56 bytes) */
#define RLOCALS 112
/* rbp-based */
#define KSLOT 8                 /* k, written by the trampoline below its rsp */
#define RSLOT 16                /* the hooked call's return slot: the real return address again */
#define RRESERVE (RLOCALS + 16 + 16)

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
    call at_stub_common
    jmp *at_stub_orig + 8 * i(%rip)
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
    pushq %rbp
    .cfi_def_cfa_offset 16
    .cfi_offset %rbp, -16
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
    /* the hook's index from the trampoline that called */
    movq TRAMP_RET(%rbp), %rax
    leaq at_stub_tramps+5(%rip), %rdi
    subq %rdi, %rax
    shrl $4, %eax
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
1:  movl %eax, %edi
    movq %rsp, %rsi                 /* regs (typed pointer arguments may be rewritten there) */
    leaq SLOT(%rbp), %rdx           /* the caller's return address; its stack arguments above */
    call at_stub_enter
    /* the caller's state exactly (pointer arguments as the hook may have replaced them) */
    RESTORE_FLAGS
    movq REGS+0(%rsp), %rdi
    movq REGS+8(%rsp), %rsi
    movq REGS+16(%rsp), %rdx
    movq REGS+24(%rsp), %rcx
    movq REGS+32(%rsp), %r8
    movq REGS+40(%rsp), %r9
    movq REGS+48(%rsp), %rax
    movq REGS+56(%rsp), %r10
    movq R11(%rsp), %r11
    movq %rbp, %rsp
    popq %rbp
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_endproc
    .size at_stub_common, . - at_stub_common

/* The return trampolines. Trampoline k (1 <= k < NRET) is at at_ret_pool + 16k:
 *   movw $k, -16(%rsp) ; jmp at_ret_common (rel32) ; .long &at_ret_ra[k] - .
 * k goes below rsp, into the red zone no signal frame is written to, so that rsp, and the rules
 * that find the caller, are the same at every instruction until at_ret_common has a frame.
 * The first 16 bytes hold no trampoline: an unwinder looks up the byte before a return address. */
    .section .text.at_ret,"ax",@progbits
    .p2align 4
    .globl at_ret_pool
    .hidden at_ret_pool
    .type at_ret_pool, @function
at_ret_pool:
    .cfi_startproc
    .cfi_personality 0x9b, DW.ref.at_ret_personality
    .cfi_def_cfa %rsp, 0
    /* The caller's address is given as the call's last byte and the frame marked as a signal
     * frame, which tells unwinders to take that address as it is (not minus 1) and gives the
     * caller an identity of its own: libgcc tells frames apart by CFA, and this frame of no size
     * shares its CFA with the hooked function's. */
    .cfi_signal_frame
    /* DW_CFA_val_expression r16 (return address), 24 bytes, from the CFA the unwinder pushes
     * (rsp there: one above the return slot, which still holds the trampoline's address):
     *   DW_OP_lit8; DW_OP_minus; DW_OP_deref   the trampoline's address
     *   DW_OP_plus_uconst 12; DW_OP_dup; DW_OP_deref_size 4   where its offset is, and the offset
     *   DW_OP_const4u 0x80000000; DW_OP_xor; DW_OP_const4u 0x80000000; DW_OP_minus   (sign-extend)
     *   DW_OP_plus; DW_OP_deref   the cell's value: the real return address
     *   DW_OP_lit1; DW_OP_minus   its call's last byte */
    .cfi_escape 0x16, 0x10, 0x18, 0x38, 0x1c, 0x06, 0x23, 0x0c, 0x12, 0x94, 0x04, 0x0c, 0x00, 0x00, 0x00, 0x80, 0x27, 0x0c, 0x00, 0x00, 0x00, 0x80, 0x1c, 0x22, 0x06, 0x31, 0x1c
    .fill 16, 1, 0xcc
    .set k, 1
    .rept NRET - 1
    .byte 0x66, 0xc7, 0x44, 0x24, 0xf0   /* movw $k, -16(%rsp) */
    .short k
    .byte 0xe9
    .long at_ret_common - (. + 4)
    .long at_ret_ra + 8 * k - .
    .set k, k + 1
    .endr
    .cfi_endproc
    .size at_ret_pool, . - at_ret_pool
    .globl at_ret_pool_end
    .hidden at_ret_pool_end
at_ret_pool_end:

    .p2align 4
    .globl at_ret_common
    .hidden at_ret_common
    .type at_ret_common, @function
at_ret_common:
    /* rsp = one above the hooked call's return slot (which holds the trampoline's address), k at
     * -16(%rsp). Until the slot holds the real return address again, the CFI is the trampolines'. */
    .cfi_startproc
    .cfi_signal_frame
    .cfi_def_cfa %rsp, 0
    .cfi_escape 0x16, 0x10, 0x18, 0x38, 0x1c, 0x06, 0x23, 0x0c, 0x12, 0x94, 0x04, 0x0c, 0x00, 0x00, 0x00, 0x80, 0x27, 0x0c, 0x00, 0x00, 0x00, 0x80, 0x1c, 0x22, 0x06, 0x31, 0x1c
    leaq -16(%rsp), %rsp            /* rsp at k */
    .cfi_def_cfa_offset 16
    pushq %rbp
    .cfi_def_cfa_offset 24
    .cfi_offset %rbp, -24
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    movq %rax, SAVED_RAX(%rbp)
    SAVE_FLAGS
    leaq -RRESERVE(%rbp), %rsp
    andq $-16, %rsp
    movq SAVED_RAX(%rbp), %rax
    movq %rax, RETS+0(%rsp)
    movq %rdx, RETS+8(%rsp)
    movdqu %xmm0, RETS+16(%rsp)
    movdqu %xmm1, RETS+32(%rsp)
    movq %rcx, OUT+0(%rsp)
    movq %rsi, OUT+8(%rsp)
    movq %rdi, OUT+16(%rsp)
    movq %r8, OUT+24(%rsp)
    movq %r9, OUT+32(%rsp)
    movq %r10, OUT+40(%rsp)
    movq %r11, OUT+48(%rsp)
    /* the real return address back where the call put it */
    movzwl KSLOT(%rbp), %edi
    leaq at_ret_ra(%rip), %rax
    movq (%rax,%rdi,8), %rax
    movq %rax, RSLOT(%rbp)
    /* DW_CFA_val_expression r16: DW_OP_lit8; DW_OP_minus; DW_OP_deref; DW_OP_lit1; DW_OP_minus
     * (the call's last byte, as the trampolines give it) */
    .cfi_escape 0x16, 0x10, 0x05, 0x38, 0x1c, 0x06, 0x31, 0x1c
    leaq RETS(%rsp), %rsi
    call at_ret_exit
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
    /* a jump, not a ret: the return stack predictor stays in step with the program's calls. The
     * address is read from below rsp, inside the red zone no signal frame is written to. */
    leaq 16(%rsp), %rsp
    .cfi_def_cfa_offset 0
    jmp *-8(%rsp)
    .cfi_endproc
    .size at_ret_common, . - at_ret_common

    .hidden DW.ref.at_ret_personality
    .weak DW.ref.at_ret_personality
    .section .data.rel.local.DW.ref.at_ret_personality,"awG",@progbits,DW.ref.at_ret_personality,comdat
    .align 8
    .type DW.ref.at_ret_personality, @object
    .size DW.ref.at_ret_personality, 8
DW.ref.at_ret_personality:
    .quad at_ret_personality

    .section .note.GNU-stack,"",@progbits
