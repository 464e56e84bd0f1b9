/* unwmem.h: libunwind's memory checks without a descriptor (unwmem.c). */
#ifndef AT_UNWMEM_H
#define AT_UNWMEM_H

#include <stdint.h>

/* Rewrite the GOT slots of the libunwind loaded as handle (dlopen's) so that its memory-check pipe
 * is a fake that holds no descriptor. 0, or -1 when it could not (libunwind then makes its pipe). */
int at_unwmem_install(void *handle);
/* Is the byte at addr (and the 7 after it) readable? 0 yes, -1 no. One system call, no descriptor. */
int at_unwmem_probe(const void *addr);
/* The load bias of that libunwind (0 before): its imports stay the shim's own (got.c skips it). */
uintptr_t at_unwmem_module_base(void);
/* How many slots were rewritten (tests). */
int at_unwmem_slots(void);

#endif
