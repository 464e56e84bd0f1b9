/* saferanges.c: tells the safe reader (runtime/saferead.c) which memory stays readable for the life of
 * the process, so that captured strings there are copied without a system call: the readable
 * segments of the objects loaded when the shim starts (the program and its libraries, which hold
 * the string literals most captures point to), and the main thread's stack. Objects a later
 * dlopen brings can be closed again and are left to the kernel copy. */
#include <link.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/resource.h>

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

/* The main thread's stack: its top holds the strings the kernel put there at exec, the program's
 * path (AT_EXECFN) highest. Below, the kernel keeps at least the stack's soft limit (and never less
 * than 128 MiB) free of other mappings; with no limit it lays mappings out from the bottom of the
 * address space, and 8 MiB is the zone taken. */
static void main_stack(void)
{
    const char *fn = (const char *)getauxval(AT_EXECFN);
    if (!fn)
        return;
    uintptr_t hi = (uintptr_t)fn + strlen(fn) + 1;
    struct rlimit rl;
    uintptr_t zone = (uintptr_t)8 << 20;
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        zone = rl.rlim_cur < ((rlim_t)128 << 20) ? (uintptr_t)rl.rlim_cur : (uintptr_t)128 << 20;
    if (zone < hi)
        at_saferead_main_stack(hi - zone, hi);
}

void at_saferanges_init(void)
{
    dl_iterate_phdr(add_object, NULL);
    main_stack();
}
