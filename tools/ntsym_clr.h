/* ntsym_clr.h: the .NET runtime's ModuleLoad and MethodLoadVerbose events as the symbolizer's
 * mappings and symbols (ntsym_clr.c; the encoding ACTTRACE_SYMBOLS=methods writes, and what a .NET
 * runtime writes for its jitted code). */
#ifndef NT_SYM_CLR_H
#define NT_SYM_CLR_H

#include "ntreader.h"

typedef struct nt_clr_sym {
    bool is_module;    /* ModuleLoad: id and name (the module's path); else a method */
    uint64_t id;       /* ModuleID */
    uint64_t start, size; /* a method's range [start, start + size) */
    char *name;        /* malloc'd UTF-8: a module's path, a method's Namespace.Name (Name alone
                        * when the namespace is empty, as acttrace writes native functions) */
} nt_clr_sym;

/* True if ev is one of those events (decoded or not). */
bool nt_clr_is_symbol_event(const nt_event *ev);
/* Decode ev into *out; false if it is not one or is malformed. */
bool nt_clr_decode(const nt_event *ev, nt_clr_sym *out);

#endif
