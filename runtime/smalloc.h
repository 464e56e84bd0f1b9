/* smalloc.h: the shim's small objects, out of the program's malloc (smalloc.c). */
#ifndef AT_SMALLOC_H
#define AT_SMALLOC_H

#include <stddef.h>

/* n bytes (at most 1008), 16-byte aligned, or NULL. */
void *at_sm_alloc(size_t n);
/* An object of at_sm_alloc's, or NULL. */
void at_sm_free(void *p);

#endif
