/* unwmem.c: libunwind's memory checks without a descriptor. When a frame has no unwind info,
 * libunwind (1.6) checks each page it is about to read by writing its first byte into a pipe of its
 * own (made with pipe2 at its first use, drained with read, remade with close + pipe2 when a read
 * fails): two descriptors held for the whole run, that a program reusing numbers (dup2 onto them, a
 * raw close_range and then open) would see its own bytes consumed and written by stack walks. We
 * loaded libunwind ourselves, so we rewrite its own GOT slots of pipe2, pipe, read, write, close and
 * syscall (it writes through syscall(SYS_write, ...)): its "pipe" is two negative numbers no
 * descriptor can have, a read of it finds it empty (EAGAIN, as a drained non-blocking pipe), a
 * write to it asks the kernel whether the byte is readable without any descriptor, and everything
 * else goes to the function the slot held.
 *
 * The probe: rt_sigprocmask with an invalid `how` copies the 8-byte set from the address before it
 * looks at `how`: EFAULT when the memory is not readable, else EINVAL with the mask untouched. One
 * system call, no descriptor, no pid (process_vm_readv on our own pid would need the pid after every
 * fork). libunwind probes a page's first byte, so 8 bytes never cross into the next page. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "stack.h"
#include "unwmem.h"

#define FAKE_RD (-4090) /* the fake pipe's ends: negative, so even a call we do not see fails EBADF */
#define FAKE_WR (-4091)
#define HOW_INVALID 0x7f1d

static ssize_t (*orig_read)(int, void *, size_t);
static ssize_t (*orig_write)(int, const void *, size_t);
static int (*orig_close)(int);
static long (*orig_syscall)(long, ...);
static int (*orig_pipe2)(int *, int);
static int (*orig_pipe)(int *);
static uintptr_t unw_base;
static int unw_patched; /* slots rewritten */

static inline long raw4(long nr, long a, long b, long c, long d)
{
    long r;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall" : "=a"(r) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10)
                     : "rcx", "r11", "memory");
    return r;
}

int at_unwmem_probe(const void *addr)
{
    long r = raw4(SYS_rt_sigprocmask, HOW_INVALID, (long)(uintptr_t)addr, 0, sizeof(uint64_t));
    return r == -EFAULT ? -1 : 0;
}

/* write(2) of one byte as the pipe would take it: 1, or -1 with EFAULT */
static ssize_t fake_write_byte(const void *addr)
{
    if (at_unwmem_probe(addr) == 0)
        return 1;
    errno = EFAULT;
    return -1;
}

static int fake_pipe2(int *fds, int flags)
{
    (void)flags;
    fds[0] = FAKE_RD;
    fds[1] = FAKE_WR;
    return 0;
}

static int fake_pipe(int *fds) { return fake_pipe2(fds, 0); }

static ssize_t fake_read(int fd, void *buf, size_t n)
{
    if (fd == FAKE_RD) {
        errno = EAGAIN; /* nothing was ever written into it */
        return -1;
    }
    return orig_read(fd, buf, n);
}

static ssize_t fake_write(int fd, const void *buf, size_t n)
{
    if (fd == FAKE_WR)
        return fake_write_byte(buf);
    return orig_write(fd, buf, n);
}

static int fake_close(int fd)
{
    if (fd == FAKE_RD || fd == FAKE_WR)
        return 0;
    return orig_close(fd);
}

static long fake_syscall(long nr, ...)
{
    va_list ap;
    va_start(ap, nr);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (nr == SYS_write && (int)a[0] == FAKE_WR)
        return fake_write_byte((const void *)(uintptr_t)a[1]);
    return orig_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}

static const struct {
    const char *name;
    void *fake;
    void **orig;
} fakes[] = {
    {"pipe2", (void *)fake_pipe2, (void **)&orig_pipe2}, {"pipe", (void *)fake_pipe, (void **)&orig_pipe},
    {"read", (void *)fake_read, (void **)&orig_read},    {"write", (void *)fake_write, (void **)&orig_write},
    {"close", (void *)fake_close, (void **)&orig_close}, {"syscall", (void *)fake_syscall, (void **)&orig_syscall},
};

typedef struct scan_job {
    uintptr_t base;
    int found;
    int failed;
} scan_job;

static void put_slot(struct dl_phdr_info *info, void **slot, size_t k, scan_job *j)
{
    if (*slot == fakes[k].fake)
        return;
    bool relro = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_GNU_RELRO && (uintptr_t)slot >= a && (uintptr_t)slot < a + ph->p_memsz)
            relro = true;
    }
    uintptr_t page = (uintptr_t)slot & ~(uintptr_t)4095;
    if (relro && mprotect((void *)page, 4096, PROT_READ | PROT_WRITE) != 0) {
        j->failed++;
        return;
    }
    *fakes[k].orig = *slot; /* the definition the dynamic linker bound (RTLD_NOW) */
    __atomic_store_n(slot, fakes[k].fake, __ATOMIC_RELEASE);
    if (relro)
        mprotect((void *)page, 4096, PROT_READ);
    j->found++;
}

static int scan(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    scan_job *j = data;
    if (info->dlpi_addr != j->base)
        return 0;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn)
        return 1;
    uintptr_t base = info->dlpi_addr;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *tabs[2] = {NULL, NULL};
    size_t sizes[2] = {0, 0};
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        /* glibc relocates the d_ptr values of a writable .dynamic in place */
        uintptr_t p = d->d_un.d_ptr < base ? d->d_un.d_ptr + base : d->d_un.d_ptr;
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)p; break;
        case DT_STRTAB: strtab = (const char *)p; break;
        case DT_JMPREL: tabs[0] = (const ElfW(Rela) *)p; break;
        case DT_PLTRELSZ: sizes[0] = d->d_un.d_val; break;
        case DT_RELA: tabs[1] = (const ElfW(Rela) *)p; break;
        case DT_RELASZ: sizes[1] = d->d_un.d_val; break;
        }
    }
    if (!symtab || !strtab)
        return 1;
    for (int t = 0; t < 2; t++)
        for (size_t i = 0; tabs[t] && i < sizes[t] / sizeof(ElfW(Rela)); i++) {
            const ElfW(Rela) *r = &tabs[t][i];
            unsigned type = ELF64_R_TYPE(r->r_info);
            unsigned si = ELF64_R_SYM(r->r_info);
            if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) || !si)
                continue;
            const char *name = strtab + symtab[si].st_name;
            for (size_t k = 0; k < AT_ARRAY_LEN(fakes); k++)
                if (!strcmp(name, fakes[k].name))
                    put_slot(info, (void **)(base + r->r_offset), k, j);
        }
    return 1;
}

int at_unwmem_install(void *handle)
{
    struct link_map *lm = NULL;
    if (!handle || dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm)
        return -1;
    /* the probe must tell readable from unreadable here, or libunwind keeps its pipe */
    int probe_ok = 0;
    if (at_unwmem_probe(&probe_ok) != 0 || at_unwmem_probe((const void *)16) == 0)
        return -1;
    scan_job j = {.base = (uintptr_t)lm->l_addr};
    dl_iterate_phdr(scan, &j);
    unw_base = j.base;
    unw_patched = j.found;
    return j.found > 0 && !j.failed ? 0 : -1;
}

uintptr_t at_unwmem_module_base(void)
{
    return unw_base;
}

int at_unwmem_slots(void)
{
    return unw_patched;
}
