/* entry.c: tier 2, entry patching, for functions called directly inside their own module (a
 * server's own functions, calls within one library, functions reached through pointers). The first
 * instructions are decoded with Zydis and replaced by a 5-byte jmp to an island page allocated
 * within ±2 GB: the island holds an absolute jump to the wrapper, then the displaced instructions
 * relocated (RIP-relative operands re-aimed, relative jumps and calls made absolute) and a jump back.
 * An endbr64 stays at the entry (indirect-branch tracking) and starts the relocated copy too.
 * Refused, with the reason: too short a function, a branch elsewhere in it that lands inside the
 * displaced bytes, and instructions that cannot move (loop/jrcxz, a RIP-relative operand out of
 * reach). Patching happens before main or on the dlopen path, never while another thread may be
 * running the bytes. */
#include <Zydis/Zydis.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hook.h"

#define JMP_REL32 5
#define JMP_ABS 14          /* jmp *0(%rip); .quad target */
#define ISLAND_SIZE 4096
#define MAX_DISPLACED 32
#define SCAN_MAX 4096       /* bytes of a function scanned for branches into the patched ones */

static const uint8_t endbr64[4] = {0xf3, 0x0f, 0x1e, 0xfa};

static size_t put_jmp_abs(uint8_t *p, uintptr_t target)
{
    p[0] = 0xff;
    p[1] = 0x25;
    memset(p + 2, 0, 4);
    memcpy(p + 6, &target, 8);
    return JMP_ABS;
}

static bool fits_rel32(uintptr_t from, uintptr_t to)
{
    int64_t d = (int64_t)(to - from);
    return d >= INT32_MIN && d <= INT32_MAX;
}

/* An island page within ±2 GB of near: the displaced code keeps its 32-bit displacements. */
static uint8_t *island_alloc(uintptr_t near)
{
    long pg = sysconf(_SC_PAGESIZE);
    for (int64_t step = 1; step < 2048; step++) {
        for (int sign = -1; sign <= 1; sign += 2) {
            uintptr_t hint = (near & ~(uintptr_t)(pg - 1)) + (uintptr_t)(sign * step * (1 << 20));
            if (!fits_rel32(near, hint) || !fits_rel32(near, hint + ISLAND_SIZE))
                continue;
            void *p = mmap((void *)hint, ISLAND_SIZE, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
            if (p == MAP_FAILED)
                continue;
            if ((uintptr_t)p != hint) { /* old kernels ignore NOREPLACE: a hint only */
                munmap(p, ISLAND_SIZE);
                continue;
            }
            return p;
        }
    }
    return NULL;
}

typedef struct plan {
    uintptr_t patch_at;   /* where the jmp goes (after an endbr64) */
    size_t len;           /* bytes displaced */
    bool has_endbr;
    uint8_t code[256];    /* the relocated instructions, for the island at code_at */
    size_t code_len;
} plan;

static int cc_of(const ZydisDecodedInstruction *in, const uint8_t *b, int *cc)
{
    unsigned immsz = in->raw.imm[0].size / 8;
    if (immsz == 1 && (b[in->length - 2] & 0xf0) == 0x70) {
        *cc = b[in->length - 2] & 0x0f;
        return 0;
    }
    if (immsz == 4 && b[in->length - 6] == 0x0f && (b[in->length - 5] & 0xf0) == 0x80) {
        *cc = b[in->length - 5] & 0x0f;
        return 0;
    }
    return -1;
}

/* Decode from addr until n bytes are covered and relocate them to run at code_at. */
static int plan_make(uintptr_t addr, size_t size, uintptr_t code_at, plan *pl, char *why, size_t wn)
{
    ZydisDecoder dec;
    ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    memset(pl, 0, sizeof *pl);
    const uint8_t *fn = (const uint8_t *)addr;
    pl->patch_at = addr;
    if (!memcmp(fn, endbr64, 4)) {
        pl->has_endbr = true;
        pl->patch_at = addr + 4;
        memcpy(pl->code, endbr64, 4);
        pl->code_len = 4;
    }
    if (size && size < (size_t)(pl->patch_at - addr) + JMP_REL32) {
        snprintf(why, wn, "function too short to patch (%zu bytes, %d needed)", size,
                 (int)(pl->patch_at - addr) + JMP_REL32);
        return -1;
    }
    size_t off = 0;
    while (off < JMP_REL32) {
        uintptr_t ip = pl->patch_at + off;
        ZydisDecodedInstruction in;
        ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
        if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&dec, (const void *)ip, 15, &in, ops))) {
            snprintf(why, wn, "cannot decode the instruction at +0x%zx", (size_t)(ip - addr));
            return -1;
        }
        const uint8_t *b = (const uint8_t *)ip;
        uint8_t *out = pl->code + pl->code_len;
        uintptr_t out_ip = code_at + pl->code_len;
        if (pl->code_len + 48 > sizeof pl->code) {
            snprintf(why, wn, "displaced instructions too long");
            return -1;
        }
        bool ends = in.meta.category == ZYDIS_CATEGORY_RET ||
                    in.meta.category == ZYDIS_CATEGORY_UNCOND_BR ||
                    in.mnemonic == ZYDIS_MNEMONIC_INT3 || in.mnemonic == ZYDIS_MNEMONIC_UD2 ||
                    in.mnemonic == ZYDIS_MNEMONIC_HLT;
        if (in.attributes & ZYDIS_ATTRIB_IS_RELATIVE) {
            /* a relative branch or call: made absolute */
            ZyanU64 target = 0;
            int k;
            for (k = 0; k < in.operand_count_visible; k++)
                if (ops[k].type == ZYDIS_OPERAND_TYPE_IMMEDIATE && ops[k].imm.is_relative)
                    break;
            if (k == in.operand_count_visible ||
                !ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&in, &ops[k], ip, &target))) {
                if (k == in.operand_count_visible) {
                    /* RIP-relative memory operand (lea, mov, cmp ... [rip+disp]) */
                    goto rip_mem;
                }
                snprintf(why, wn, "cannot compute the target of the branch at +0x%zx",
                         (size_t)(ip - addr));
                return -1;
            }
            if (target > pl->patch_at && target < pl->patch_at + JMP_REL32) {
                snprintf(why, wn, "a branch at +0x%zx lands inside the patched bytes",
                         (size_t)(ip - addr));
                return -1;
            }
            if (in.meta.category == ZYDIS_CATEGORY_CALL) {
                /* The call made by hand: the original return address pushed (lea and two movs
                 * leave the flags and every register alone), then an absolute jump. The callee
                 * returns into the function itself, whose CFI unwinders and exceptions follow,
                 * not into the island. A call is the last instruction displaced (it is 5 bytes),
                 * so it returns past the patched bytes. */
                uint64_t ret = ip + in.length;
                uint32_t lo = (uint32_t)ret, hi = (uint32_t)(ret >> 32);
                static const uint8_t lea[5] = {0x48, 0x8d, 0x64, 0x24, 0xf8}; /* lea -8(%rsp),%rsp */
                memcpy(out, lea, 5);
                out[5] = 0xc7, out[6] = 0x04, out[7] = 0x24; /* movl $lo, (%rsp) */
                memcpy(out + 8, &lo, 4);
                out[12] = 0xc7, out[13] = 0x44, out[14] = 0x24, out[15] = 0x04; /* movl $hi, 4(%rsp) */
                memcpy(out + 16, &hi, 4);
                pl->code_len += 20 + put_jmp_abs(out + 20, target);
            } else if (in.meta.category == ZYDIS_CATEGORY_UNCOND_BR) {
                pl->code_len += put_jmp_abs(out, target);
            } else if (in.meta.category == ZYDIS_CATEGORY_COND_BR) {
                int cc;
                if (cc_of(&in, b, &cc) < 0) {
                    snprintf(why, wn, "%s at +0x%zx cannot be relocated",
                             ZydisMnemonicGetString(in.mnemonic), (size_t)(ip - addr));
                    return -1;
                }
                out[0] = (uint8_t)(0x70 | (cc ^ 1)); /* the opposite condition skips the jump */
                out[1] = JMP_ABS;
                pl->code_len += 2 + put_jmp_abs(out + 2, target);
            } else {
                snprintf(why, wn, "%s at +0x%zx cannot be relocated",
                         ZydisMnemonicGetString(in.mnemonic), (size_t)(ip - addr));
                return -1;
            }
        } else {
        rip_mem:
            memcpy(out, b, in.length);
            for (int k = 0; k < in.operand_count_visible; k++) {
                if (ops[k].type != ZYDIS_OPERAND_TYPE_MEMORY || ops[k].mem.base != ZYDIS_REGISTER_RIP)
                    continue;
                ZyanU64 target;
                if (!ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&in, &ops[k], ip, &target)) ||
                    in.raw.disp.size != 32) {
                    snprintf(why, wn, "RIP-relative operand at +0x%zx cannot be relocated",
                             (size_t)(ip - addr));
                    return -1;
                }
                int64_t d = (int64_t)target - (int64_t)(out_ip + in.length);
                if (d < INT32_MIN || d > INT32_MAX) {
                    snprintf(why, wn, "RIP-relative operand at +0x%zx out of reach of the island",
                             (size_t)(ip - addr));
                    return -1;
                }
                int32_t d32 = (int32_t)d;
                memcpy(out + in.raw.disp.offset, &d32, 4);
            }
            pl->code_len += in.length;
        }
        off += in.length;
        if (ends && off < JMP_REL32) {
            snprintf(why, wn, "function too short to patch (it ends after %zu bytes)",
                     (size_t)(pl->patch_at - addr) + off);
            return -1;
        }
    }
    pl->len = off;
    pl->code_len += put_jmp_abs(pl->code + pl->code_len, pl->patch_at + off);
    return 0;
}

/* Does a relative branch elsewhere in [addr, addr+size) land inside (patch_at, patch_at+len)? */
static int scan_branches(uintptr_t addr, size_t size, const plan *pl, char *why, size_t wn)
{
    if (!size)
        return 0; /* unknown extent (module+offset): only the displaced bytes were checked */
    if (size > SCAN_MAX)
        size = SCAN_MAX;
    ZydisDecoder dec;
    ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    for (uintptr_t ip = addr; ip < addr + size;) {
        ZydisDecodedInstruction in;
        ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
        if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&dec, (const void *)ip, addr + size - ip, &in,
                                                 ops)))
            break; /* data or padding: stop, as a disassembler would */
        if ((in.attributes & ZYDIS_ATTRIB_IS_RELATIVE) &&
            (in.meta.category == ZYDIS_CATEGORY_COND_BR ||
             in.meta.category == ZYDIS_CATEGORY_UNCOND_BR)) {
            for (int k = 0; k < in.operand_count_visible; k++) {
                ZyanU64 t;
                if (ops[k].type == ZYDIS_OPERAND_TYPE_IMMEDIATE && ops[k].imm.is_relative &&
                    ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&in, &ops[k], ip, &t)) &&
                    t > pl->patch_at && t < pl->patch_at + pl->len) {
                    snprintf(why, wn, "the branch at +0x%zx jumps back into the patched bytes",
                             (size_t)(ip - addr));
                    return -1;
                }
            }
        }
        ip += in.length;
    }
    return 0;
}

int at_entry_check(uintptr_t addr, size_t size, char *why, size_t n)
{
    plan pl;
    /* relocation reach is checked against the function itself: an island is always near it */
    if (plan_make(addr, size, addr, &pl, why, n) < 0)
        return -1;
    return scan_branches(addr, size, &pl, why, n);
}

static int write_code(uintptr_t at, const void *bytes, size_t len, char *why, size_t wn)
{
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t first = at & ~(uintptr_t)(pg - 1);
    size_t span = ((at + len + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1)) - first;
    /* writable and executable for the few instructions of the store: the program's other pages
     * keep running; where the system refuses W+X, writable alone (nothing else runs yet) */
    bool wx = mprotect((void *)first, span, PROT_READ | PROT_WRITE | PROT_EXEC) == 0;
    if (!wx && mprotect((void *)first, span, PROT_READ | PROT_WRITE) != 0) {
        snprintf(why, wn, "cannot make the code writable: %s", strerror(errno));
        return -1;
    }
    memcpy((void *)at, bytes, len);
    __builtin___clear_cache((char *)at, (char *)at + len);
    if (mprotect((void *)first, span, PROT_READ | PROT_EXEC) != 0) {
        snprintf(why, wn, "cannot make the code executable again: %s", strerror(errno));
        return -1;
    }
    return 0;
}

int at_entry_patch(at_hook *h, char *why, size_t n)
{
    uintptr_t addr = h->text->res.addr;
    uint8_t *isl = island_alloc(addr);
    if (!isl) {
        snprintf(why, n, "no free memory within 2 GB of the function for its island");
        return -1;
    }
    plan pl;
    uintptr_t code_at = (uintptr_t)isl + JMP_ABS;
    if (plan_make(addr, h->text->res.size, code_at, &pl, why, n) < 0 ||
        scan_branches(addr, h->text->res.size, &pl, why, n) < 0) {
        munmap(isl, ISLAND_SIZE);
        return -1;
    }
    put_jmp_abs(isl, (uintptr_t)h->wrapper);
    memcpy(isl + JMP_ABS, pl.code, pl.code_len);
    if (mprotect(isl, ISLAND_SIZE, PROT_READ | PROT_EXEC) != 0) {
        snprintf(why, n, "the system refuses executable memory for the island: %s",
                 strerror(errno));
        munmap(isl, ISLAND_SIZE);
        return -1;
    }
    uint8_t jmp[JMP_REL32];
    jmp[0] = 0xe9;
    int32_t rel = (int32_t)((intptr_t)isl - (intptr_t)(pl.patch_at + JMP_REL32));
    memcpy(jmp + 1, &rel, 4);
    memcpy(h->saved, (const void *)pl.patch_at, JMP_REL32);
    h->saved_len = JMP_REL32;
    h->orig = (void *)code_at;
    if (write_code(pl.patch_at, jmp, JMP_REL32, why, n) < 0) {
        munmap(isl, ISLAND_SIZE);
        return -1;
    }
    h->patched_at = (void *)pl.patch_at;
    return 0;
}
