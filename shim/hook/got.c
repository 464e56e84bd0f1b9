/* got.c: tier 1, the GOT. Every call one module makes to a function of another goes through a slot
 * of its GOT (JUMP_SLOT for PLT calls, GLOB_DAT for -fno-plt calls and address-taking); rewriting
 * the slots of every module that imports the symbol sends all those calls to the wrapper, whatever
 * thread runs them, with one aligned 8-byte store each (atomic on x86-64). Slots of a full-RELRO
 * module are read-only after start-up: the page is made writable for the store and put back.
 * Function pointers the program took before the rewrite keep the old target (a documented limit). */
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <dlfcn.h>

#include "hook.h"
#include "unwmem.h"

typedef struct got_job {
    const char *sym;
    const char *version; /* NULL or "": any */
    void *wrapper;
    int patched;
    int failed;
    char err[128];
} got_job;

static int self_anchor;

static uintptr_t dyn_ptr(uintptr_t v, uintptr_t base)
{
    /* glibc relocates the d_ptr values of a writable .dynamic in place; others are file addresses */
    return v < base ? v + base : v;
}

static void patch_slot(struct dl_phdr_info *info, uintptr_t slot, got_job *j)
{
    void **p = (void **)slot;
    if (!j->wrapper) { /* counting only (acttrace check) */
        j->patched++;
        return;
    }
    if (*p == j->wrapper)
        return; /* already ours (dlopen re-scan) */
    bool relro = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_GNU_RELRO && slot >= a && slot < a + ph->p_memsz)
            relro = true;
    }
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t page = slot & ~(uintptr_t)(pg - 1);
    if (relro && mprotect((void *)page, (size_t)pg, PROT_READ | PROT_WRITE) != 0) {
        j->failed++;
        snprintf(j->err, sizeof j->err, "cannot unprotect the RELRO GOT of %s",
                 *info->dlpi_name ? info->dlpi_name : "the executable");
        return;
    }
    __atomic_store_n(p, j->wrapper, __ATOMIC_RELEASE);
    if (relro)
        mprotect((void *)page, (size_t)pg, PROT_READ);
    j->patched++;
}

/* The version name a module requires for version index idx (its DT_VERNEED list), or NULL. */
static const char *import_version(unsigned idx, const ElfW(Verneed) *vn, size_t n, const char *strtab)
{
    if (idx < 2)
        return NULL; /* local / unversioned */
    for (size_t k = 0; vn && k < n; k++) {
        const ElfW(Vernaux) *a = (const ElfW(Vernaux) *)((const char *)vn + vn->vn_aux);
        for (unsigned m = 0; m < vn->vn_cnt; m++) {
            if (a->vna_other == idx)
                return strtab + a->vna_name;
            if (!a->vna_next)
                break;
            a = (const ElfW(Vernaux) *)((const char *)a + a->vna_next);
        }
        if (!vn->vn_next)
            break;
        vn = (const ElfW(Verneed) *)((const char *)vn + vn->vn_next);
    }
    return NULL;
}

static int scan(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    got_job *j = data;
    Dl_info self;
    if (dladdr(&self_anchor, &self) && info->dlpi_name && self.dli_fname &&
        !strcmp(self.dli_fname, info->dlpi_name))
        return 0; /* the shim's own calls go to the real functions */
    if (info->dlpi_name && strstr(info->dlpi_name, "linux-vdso"))
        return 0;
    if (info->dlpi_addr && info->dlpi_addr == at_unwmem_module_base())
        return 0; /* the shim's libunwind: its imports are the shim's own (unwmem.c) */
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn)
        return 0;
    uintptr_t base = info->dlpi_addr;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *jmprel = NULL, *rela = NULL;
    size_t jmprelsz = 0, relasz = 0;
    const ElfW(Half) *versym = NULL;
    const ElfW(Verneed) *verneed = NULL;
    size_t verneednum = 0;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)dyn_ptr(d->d_un.d_ptr, base); break;
        case DT_STRTAB: strtab = (const char *)dyn_ptr(d->d_un.d_ptr, base); break;
        case DT_JMPREL: jmprel = (const ElfW(Rela) *)dyn_ptr(d->d_un.d_ptr, base); break;
        case DT_PLTRELSZ: jmprelsz = d->d_un.d_val; break;
        case DT_RELA: rela = (const ElfW(Rela) *)dyn_ptr(d->d_un.d_ptr, base); break;
        case DT_RELASZ: relasz = d->d_un.d_val; break;
        case DT_VERSYM: versym = (const ElfW(Half) *)dyn_ptr(d->d_un.d_ptr, base); break;
        case DT_VERNEED: verneed = (const ElfW(Verneed) *)dyn_ptr(d->d_un.d_ptr, base); break;
        case DT_VERNEEDNUM: verneednum = d->d_un.d_val; break;
        }
    }
    if (!symtab || !strtab)
        return 0;
    const ElfW(Rela) *tabs[2] = {jmprel, rela};
    size_t sizes[2] = {jmprelsz, relasz};
    for (int t = 0; t < 2; t++) {
        if (!tabs[t])
            continue;
        for (size_t i = 0; i < sizes[t] / sizeof(ElfW(Rela)); i++) {
            const ElfW(Rela) *r = &tabs[t][i];
            unsigned type = ELF64_R_TYPE(r->r_info);
            if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT)
                continue;
            unsigned si = ELF64_R_SYM(r->r_info);
            if (!si || strcmp(strtab + symtab[si].st_name, j->sym))
                continue;
            /* a module that defines the symbol itself and binds locally has no slot for it; a
             * GLOB_DAT of a data object of the same name is not a function */
            if (ELF64_ST_TYPE(symtab[si].st_info) == STT_OBJECT)
                continue;
            if (j->version && *j->version && versym && verneed) {
                const char *v = import_version(versym[si] & 0x7fff, verneed, verneednum, strtab);
                if (v && strcmp(v, j->version))
                    continue; /* another version of the name: another function */
            }
            patch_slot(info, base + r->r_offset, j);
        }
    }
    return 0;
}

int at_got_patch(const char *sym, const char *version, void *wrapper, char *why, size_t n)
{
    got_job j = {.sym = sym, .version = version, .wrapper = wrapper};
    dl_iterate_phdr(scan, &j);
    if (j.failed && why)
        snprintf(why, n, "%s", j.err);
    return j.patched;
}
