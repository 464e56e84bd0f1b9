/* entry.c: tier 2, entry patching (in progress). */
#include <stdio.h>

#include "hook.h"

int at_entry_patch(at_hook *h, char *why, size_t n)
{
    (void)h;
    snprintf(why, n, "entry patching is not implemented yet");
    return -1;
}

int at_entry_check(uintptr_t addr, size_t size, char *why, size_t n)
{
    (void)addr, (void)size;
    snprintf(why, n, "entry patching is not implemented yet");
    return -1;
}
