/* ntsym.h: naming the addresses of a trace's stacks (tools/). Fed with every event of a trace in
 * order, it keeps what the file says about the process's modules and symbols (Universal.System
 * ProcessMapping / ProcessSymbol / ProcessMappingMetadata, spec section 9) and formats addresses as
 * PerfView does: module!function+0xoff, with file:line when DWARF is available on this machine (libdw),
 * C++ names demangled; module+0xoff for stripped modules; 0x... when nothing covers the address. */
#ifndef NT_SYM_H
#define NT_SYM_H

#include "ntreader.h"

typedef struct nt_symbolizer nt_symbolizer;

typedef struct nt_sym_options {
    bool lines;    /* append " (file:line)" when DWARF for the module is found on this machine */
    bool demangle; /* C++ names demangled */
    bool no_offset; /* "module!function" without "+0x.." where a function is named (grouping) */
} nt_sym_options;

nt_symbolizer *nt_sym_new(const nt_sym_options *o); /* o may be NULL: no lines, demangle */
/* Feed every event of the trace, in file order (cheap for events that are not symbol events). */
void nt_sym_observe(nt_symbolizer *s, const nt_event *ev);
/* True if ev is one of the symbol events (tools may hide them from listings). */
bool nt_sym_is_symbol_event(const nt_event *ev);
/* Format one address of process pid (the trace's pid). Returns buf. */
const char *nt_sym_format(nt_symbolizer *s, uint64_t ip, char *buf, size_t n);
/* The same for an address that is the instruction itself, not a call site or return address: a CPU
 * sample's leaf (nt_event_cpu_sample), which may be a function's first byte. */
const char *nt_sym_format_exact(nt_symbolizer *s, uint64_t ip, char *buf, size_t n);
void nt_sym_free(nt_symbolizer *s);

#endif
