/* symrun.h: the symbol rundown the flusher writes into each file (symrun.c; nettrace-v5.md §9). */
#ifndef AT_SYMRUN_H
#define AT_SYMRUN_H

#include "trace_int.h"

extern bool at_symrun_on; /* session option: write the rundown (at_trace_options.no_symbols clears it) */

/* Register the Universal.System event types (allocates; at session start). */
int at_symrun_types(void);
/* The same, and map the tables (mappings only once the types exist: a session that waits for its
 * first event maps them then). */
int at_symrun_init(void);
/* Describe, in the current file (generation file_gen), every address of ips not described there yet:
 * its module (ProcessMappingMetadata + ProcessMapping) and its function (ProcessSymbol). Flusher only;
 * async-signal-safe. */
void at_symrun_cover(const uintptr_t *ips, uint32_t n, uint32_t file_gen);
/* Mapping and symbol events written so far (all files). */
void at_symrun_stats(uint64_t *mappings, uint64_t *symbols);

#endif
