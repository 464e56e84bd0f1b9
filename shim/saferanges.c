/* saferanges.c: tells the safe reader (runtime/saferead.c) which memory stays readable for the life of
 * the process, so that captured strings there are copied without a system call: the readable
 * segments of the objects loaded when the shim starts (the program and its libraries, which hold
 * the string literals most captures point to). Objects a later dlopen brings can be closed again
 * and are left to the kernel copy. */
#include <link.h>

#include "saferead.h"
#include "shim.h"

static int add_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size, (void)data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_R) || !ph->p_memsz)
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        /* the kernel maps whole pages: the segment's first and last page are readable throughout */
        at_saferead_add_range(lo & ~(uintptr_t)4095, (hi + 4095) & ~(uintptr_t)4095);
    }
    return 0;
}

void at_saferanges_init(void)
{
    dl_iterate_phdr(add_object, NULL);
}
