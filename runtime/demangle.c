/* demangle.c: C++ names demangled by the writer, so that every reader of the file (PerfView and
 * TraceEvent show names exactly as given) shows "ns::f<int>(int)" rather than "_ZN2ns1fIiEEii".
 *
 * libstdc++'s __cxa_demangle allocates (and a first malloc on the writer thread may reserve a whole
 * arena against RLIMIT_AS); its allocation-free entry point is not exported. libiberty's callback
 * demangler, linked in (hidden), allocates nothing: it hands the name out in pieces. Its tables are
 * arrays on the stack sized by the name (measured: up to about 430 bytes per character for deeply
 * nested types), so it runs on a stack of its own, mapped once: the writer may be on a signal
 * handler's small alternate stack (the emergency flush) or on a program thread's small one (exit).
 * Names longer than that stack allows are left mangled. */
#include <libiberty/demangle.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "asroom.h"
#include "demangle.h"

#define DM_STACK ((512u << 10) + DM_GUARD)
#define DM_STACK_MIN ((64u << 10) + DM_GUARD) /* what a tight RLIMIT_AS may leave: shorter names only */
#define DM_GUARD 4096u                         /* PROT_NONE below the stack: an overflow faults */
#define DM_PER_CHAR 1024u                      /* stack allowed per character: over twice the worst seen */
#define DM_IN_MAX 1024u

static struct {
    uint8_t *stack;
    size_t len, max;
    char in[DM_IN_MAX + 1]; /* the name NUL-terminated, as the demangler wants it */
} D;

typedef struct dm_job {
    const char *in;
    char *out;
    size_t cap, n;
    bool over;
    int ok;
} dm_job;

/* fn(arg) with the stack pointer at top (16-byte aligned); the caller's stack is back on return */
void at_dm_on_stack(void *top, void (*fn)(void *), void *arg);
__asm__(".text\n.p2align 4\n.globl at_dm_on_stack\n.hidden at_dm_on_stack\n"
        ".type at_dm_on_stack, @function\n"
        "at_dm_on_stack:\n"
        "  .cfi_startproc\n"
        "  push %rbp\n"
        "  .cfi_def_cfa_offset 16\n"
        "  .cfi_offset %rbp, -16\n"
        "  mov %rsp, %rbp\n"
        "  .cfi_def_cfa_register %rbp\n"
        "  mov %rdi, %rsp\n"
        "  mov %rdx, %rdi\n"
        "  call *%rsi\n"
        "  mov %rbp, %rsp\n"
        "  pop %rbp\n"
        "  .cfi_def_cfa %rsp, 8\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size at_dm_on_stack, . - at_dm_on_stack\n");

int at_demangle_init(void)
{
    if (D.stack)
        return 0;
    size_t len = DM_STACK;
    uint8_t *p = at_as_map("demangler stack", &len, DM_STACK_MIN, 0, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (!p)
        return -1;
    if (mprotect(p, DM_GUARD, PROT_NONE) != 0) {
        at_as_unmap(p, len);
        return -1;
    }
    size_t max = (len - DM_GUARD) / DM_PER_CHAR;
    D.len = len;
    D.max = max < DM_IN_MAX ? max : DM_IN_MAX;
    D.stack = p;
    return 0;
}

size_t at_demangle_max(void) { return D.stack ? D.max : 0; }

static void dm_put(const char *s, size_t n, void *opaque)
{
    dm_job *j = opaque;
    size_t room = j->cap - j->n;
    if (n > room) {
        n = room;
        j->over = true;
    }
    memcpy(j->out + j->n, s, n);
    j->n += n;
}

static void dm_run(void *arg)
{
    dm_job *j = arg;
    /* the options of __cxa_demangle: the same text as the tools and c++filt show */
    j->ok = cplus_demangle_v3_callback(j->in, DMGL_PARAMS | DMGL_TYPES, dm_put, j);
}

size_t at_demangle(const char *mangled, size_t len, char *out, size_t cap)
{
    /* "_Z" only: the demangler would read a plain name such as "i" as a type ("int") */
    if (!D.stack || cap < 2 || len < 3 || len > D.max || mangled[0] != '_' || mangled[1] != 'Z'
        || memchr(mangled, 0, len))
        return 0;
    memcpy(D.in, mangled, len);
    D.in[len] = 0;
    dm_job j = {.in = D.in, .out = out, .cap = cap};
    at_dm_on_stack(D.stack + D.len, dm_run, &j);
    if (!j.ok || j.n == 0)
        return 0;
    if (j.over || j.n == cap) { /* cut before the character the limit falls in */
        size_t k = cap - 1;
        while (k > 0 && ((uint8_t)out[k] & 0xC0) == 0x80)
            k--;
        j.n = k;
    }
    out[j.n] = 0;
    return j.n;
}
