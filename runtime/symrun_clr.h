/* symrun_clr.h: the symbol rundown as .NET runtime method events (symrun_clr.c), the encoding
 * ACTTRACE_SYMBOLS=methods picks; symrun.c calls it where it would write Universal.System events. */
#ifndef AT_SYMRUN_CLR_H
#define AT_SYMRUN_CLR_H

#include "trace_int.h"

extern bool at_symrun_clr; /* session option (at_trace_options.symbols_methods) */

/* Register the ModuleLoad and MethodLoadVerbose event types (allocates; at session start). */
int at_symrun_clr_types(void);
/* ModuleLoad for a module (one executable mapping) of the process. Flusher only. */
void at_symrun_clr_module(uint64_t module_id, const char *path);
/* MethodLoadVerbose naming [start, start + size) as name (UTF-8, nlen bytes) of module_id. */
void at_symrun_clr_method(uint64_t method_id, uint64_t module_id, uint64_t start, uint64_t size,
                          const char *name, size_t nlen);

#endif
