/* stub_asm.S: the signature-less wrapper, and the return trampolines it puts in place of a hooked
 * call's return address.
 *
 * The hooked function runs on its caller's own stack, as if unhooked: whatever the size of its stack
 * arguments (a struct passed by value, a variadic call with 30 arguments), the function reads them
 * where its caller put them. Only the return address changes:
 *   - a table of AT_STUB_MAX entry trampolines (one per hook: push the hook's index, jump to
 *     at_stub_common) means no code is generated at run time;
 *   - at_stub_common saves the caller's registers and flags and calls at_stub_enter (or, for a
 *     hook with a signature, at_stub_enter_typed, after storing xmm0-7), which records the call in
 *     return record k, keeps the real return address in its ra and puts the
 *     address of record k's return point R_k in its place. With every register and flag restored,
 *     it jumps to record k's call C_k, `call *fn` (record k's: the original function), placed so that
 *     the call pushes R_k exactly where the caller's return address was: the function sees its
 *     caller's stack, and returns to R_k as the processor's return predictor expects;
 *   - R_k stores k below rsp and jumps to at_ret_common, which saves every general register and
 *     the flags the function returned with, puts the real return address back, calls at_ret_exit,
 *     restores everything and returns to the caller with `ret` (its call's prediction).
 * A call that is not recorded (the shim's own, one whose rule has nothing to do at its return, or
 * one that finds no record left) jumps straight to the original.
 * GCC's IPA register allocation lets a caller in the same file keep values in call-clobbered
 * registers the callee is known not to touch, so nothing the caller can observe may change: no
 * instruction between the caller's state and the restore of it relies on flags it has not saved
 * (lea, not add, adjusts rsp). Vector, x87 and MXCSR state is not saved: the C code called here is
 * built with -mgeneral-regs-only and wraps each call into code that may use those registers in an
 * XSAVE/XRSTOR pair (runtime/xstate.h). xmm0-7 are stored (never reloaded) for typed arguments, and
 * xmm0-1 after the call for a typed floating-point return value. Jumps to addresses kept in memory
 * read them from below rsp, inside the red zone no signal frame is written to.
 *
 * Unwinders: the records' code is covered by one FDE whose rules make it a frame of no size (CFA =
 * rsp) whose return address is record k's ra, computed by a DWARF expression from R_k (still in the
 * return slot, just below the CFA) and the offset to its cell stored in R_k's last bytes. So C++
 * exceptions, pthread_exit's forced unwind, backtrace(3), libunwind and debuggers walk through a
 * hooked call to its real caller, also from a signal handler that interrupted any instruction of
 * the entry or return path; the FDE's personality writes the Stop of a call an exception unwinds
 * through. The stack walker of runtime/stack.c replaces a record's address by the real one itself. */

#define NSTUB 512               /* AT_STUB_MAX in hook.h */
#define NRET 8192               /* AT_RET_MAX in hook.h */
#define RREC 256                /* AT_RET_REC in hook.h: record k at at_ret_rec + RREC * k */
#define RREC_SHIFT 8
#define RA 0                    /* a record's real return address */
#define FN 8                    /* and the function its call runs */
#define RSIZE 32                /* bytes of code per return record */

/* at_stub_common, rsp-based (after realignment) */
#define REGS 0                  /* at_hook_regs: gp[6], rax, r10, xmm[8] (192 bytes) */
#define R11 192                 /* the caller's r11 */
#define LOCALS 208
/* rbp-based */
#define INDEX 8                 /* the hook's index, pushed by the trampoline; then where to jump */
#define SLOT 16                 /* the caller's return address: the hooked call's */
#define SAVED_RAX (-8)
#define FLAGS (-16)             /* al = OF, ah = SF ZF AF PF CF (seto, lahf) */
#define RESERVE (LOCALS + 16 + 16)

/* at_ret_common, rsp-based */
#define RETS 0                  /* rax, rdx, xmm0, xmm1 as the function returned them (48 bytes) */
#define OUT 48                  /* rcx rsi rdi r8 r9 r10 r11 (56 bytes) */
#define RLOCALS 112
/* rbp-based */
#define KSLOT 8                 /* RREC * k (record k's offset), written by the trampoline below its rsp */
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

/* the caller's registers and flags, from at_stub_common's frame */
.macro RESTORE_CALLER
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
.endm

    /* right before the code every hooked call runs (AT_PATH_CORE, runtime/at_common.h, which
     * shim/start.ld puts next), in reverse: hook i's is at at_stub_tramps_end - 16 (i + 1), so a
     * process's hooks use the last trampolines only, on the core's first page */
    .section at_path_tramps,"ax",@progbits
    .p2align 4
    .globl at_stub_tramps
    .hidden at_stub_tramps
    .type at_stub_tramps, @function
at_stub_tramps:
    .cfi_startproc
    .set i, NSTUB - 1
    .rept NSTUB
    .p2align 4
    pushq $i
    .cfi_adjust_cfa_offset 8
    jmp at_stub_common
    .cfi_adjust_cfa_offset -8
    .set i, i - 1
    .endr
    .cfi_endproc
    .size at_stub_tramps, . - at_stub_tramps
    .globl at_stub_tramps_end
    .hidden at_stub_tramps_end
at_stub_tramps_end:

    /* with the C of every hooked call (AT_PATH_CORE) */
    .section at_path_core,"ax",@progbits
    .p2align 4
    .globl at_stub_common
    .hidden at_stub_common
    .type at_stub_common, @function
at_stub_common:
    .cfi_startproc
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
    movl INDEX(%rbp), %edi
    movq %rsp, %rsi                 /* regs (typed pointer arguments may be rewritten there) */
    leaq SLOT(%rbp), %rdx           /* the caller's return address; its stack arguments above */
    leaq INDEX(%rbp), %rcx          /* where to jump: C_k, or the original when not recorded */
    leaq at_stub_typed(%rip), %rax
    cmpb $0, (%rax,%rdi)
    jne 3f
    call at_stub_enter
1:  .cfi_remember_state
    testl %eax, %eax
    jz 2f
    /* recorded: the caller's state exactly (pointer arguments as the hook may have replaced them),
     * rsp where it is after the caller's return address, and on to C_k */
    RESTORE_CALLER
    movq %rbp, %rsp
    popq %rbp
    .cfi_def_cfa %rsp, 16
    leaq 16(%rsp), %rsp
    .cfi_def_cfa_offset 0
    jmp *-16(%rsp)
2:  .cfi_restore_state
    .cfi_remember_state
    /* not recorded: as the caller left everything, into the original */
    RESTORE_CALLER
    movq %rbp, %rsp
    popq %rbp
    .cfi_def_cfa %rsp, 16
    leaq 8(%rsp), %rsp
    .cfi_def_cfa_offset 8
    jmp *-8(%rsp)
3:  .cfi_restore_state
    /* a typed hook: its floating-point arguments too, and its own entry (the untyped one keeps
     * the plain rule's inline Start, which a typed call never runs) */
    movdqu %xmm0, REGS+64(%rsp)
    movdqu %xmm1, REGS+80(%rsp)
    movdqu %xmm2, REGS+96(%rsp)
    movdqu %xmm3, REGS+112(%rsp)
    movdqu %xmm4, REGS+128(%rsp)
    movdqu %xmm5, REGS+144(%rsp)
    movdqu %xmm6, REGS+160(%rsp)
    movdqu %xmm7, REGS+176(%rsp)
    call at_stub_enter_typed
    jmp 1b
    .cfi_endproc
    .size at_stub_common, . - at_stub_common

/* The return records' code. Record k (1 <= k < NRET) is at at_ret_pool + 32k:
 *   C_k: call *at_ret_rec[k].fn(%rip)
 *   R_k: movl $(RREC * k), -16(%rsp) ; jmp at_ret_common ; .long &at_ret_rec[k].ra - .
 * RREC * k goes below rsp, into the red zone, so that rsp, and the rules that find the caller, are the
 * same at every instruction until at_ret_common has a frame. Record 0 holds no code: an unwinder
 * looks up the byte before a return address. */
    .section .text.at_ret,"ax",@progbits
    .p2align 5
    .globl at_ret_pool
    .hidden at_ret_pool
    .type at_ret_pool, @function
at_ret_pool:
    .cfi_startproc
    .cfi_personality 0x9b, DW.ref.at_ret_personality
    /* The caller's address is given as the call's last byte and the frame marked as a signal
     * frame, which tells unwinders to take that address as it is (not minus 1) and gives the
     * caller an identity of its own: libgcc tells frames apart by CFA, and this frame of no size
     * shares its CFA with the hooked function's. */
    .cfi_signal_frame
    .cfi_def_cfa %rsp, 0
    /* DW_CFA_val_expression r16 (return address), 24 bytes, from the CFA the unwinder pushes
     * (rsp there: one above the return slot, which holds R_k):
     *   DW_OP_lit8; DW_OP_minus; DW_OP_deref   R_k
     *   DW_OP_plus_uconst 13; DW_OP_dup; DW_OP_deref_size 4   where its offset is, and the offset
     *   DW_OP_const4u 0x80000000; DW_OP_xor; DW_OP_const4u 0x80000000; DW_OP_minus   (sign-extend)
     *   DW_OP_plus; DW_OP_deref   the cell's value: the real return address
     *   DW_OP_lit1; DW_OP_minus   its call's last byte */
    .cfi_escape 0x16, 0x10, 0x18, 0x38, 0x1c, 0x06, 0x23, 0x0d, 0x12, 0x94, 0x04, 0x0c, 0x00, 0x00, 0x00, 0x80, 0x27, 0x0c, 0x00, 0x00, 0x00, 0x80, 0x1c, 0x22, 0x06, 0x31, 0x1c
    .fill RSIZE, 1, 0xcc
    .set k, 1
    .rept NRET - 1
    .byte 0xff, 0x15                    /* call *record k's fn(%rip) */
    .long at_ret_rec + RREC * k + FN - (. + 4)
    .byte 0xc7, 0x44, 0x24, 0xf0        /* movl $(RREC * k), -16(%rsp) */
    .long RREC * k
    .byte 0xe9                          /* jmp at_ret_common */
    .long at_ret_common - (. + 4)
    .long at_ret_rec + RREC * k + RA - .
    .fill RSIZE - 23, 1, 0xcc
    .set k, k + 1
    .endr
    .cfi_endproc
    .size at_ret_pool, . - at_ret_pool
    .globl at_ret_pool_end
    .hidden at_ret_pool_end
at_ret_pool_end:

    .section at_path_core,"ax",@progbits
    .p2align 4
    .globl at_ret_common
    .hidden at_ret_common
    .type at_ret_common, @function
at_ret_common:
    /* rsp = one above the hooked call's return slot (which holds R_k), k at -16(%rsp). Until the
     * slot holds the real return address again, the CFI is the records'. */
    .cfi_startproc
    .cfi_signal_frame
    .cfi_def_cfa %rsp, 0
    .cfi_escape 0x16, 0x10, 0x18, 0x38, 0x1c, 0x06, 0x23, 0x0d, 0x12, 0x94, 0x04, 0x0c, 0x00, 0x00, 0x00, 0x80, 0x27, 0x0c, 0x00, 0x00, 0x00, 0x80, 0x1c, 0x22, 0x06, 0x31, 0x1c
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
    movl KSLOT(%rbp), %ecx              /* record k's offset: its ra without a shift on the way */
    leaq at_ret_rec(%rip), %rax
    movq RA(%rax,%rcx), %rax
    movq %rax, RSLOT(%rbp)
    movl %ecx, %edi
    shrl $RREC_SHIFT, %edi              /* k (the flags are saved) */
    /* DW_CFA_val_expression r16: DW_OP_lit8; DW_OP_minus; DW_OP_deref; DW_OP_lit1; DW_OP_minus
     * (the call's last byte, as the trampolines give it) */
    .cfi_escape 0x16, 0x10, 0x05, 0x38, 0x1c, 0x06, 0x31, 0x1c
    leaq RETS(%rsp), %rsi
    movq (%rbp), %rdx               /* the caller's rbp, as the function returned it */
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
    leaq 8(%rsp), %rsp
    .cfi_def_cfa_offset 8
    ret
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
