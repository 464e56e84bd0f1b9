/* sigcheck.h: a config's declared signature against the function's DWARF prototype (acttrace check). */
#ifndef AT_SIGCHECK_H
#define AT_SIGCHECK_H

#include <stdint.h>
#include <stdio.h>

#include "signature.h"

typedef struct at_sigcheck_result {
    int errors, warnings;
    bool checked; /* false: no debug info for the function (a line says so) */
} at_sigcheck_result;

/* Compare sig with the prototype of the function at offset (its DWARF address: the symbol's value)
 * in the ELF file module, whose debug info is its own .debug_info or a separate file found through
 * its build-id or .gnu_debuglink (under /usr/lib/debug). Prints one line per finding to out, each
 * starting with prefix; an error means the hook would read or pass the values wrongly (an integer
 * declared as a pointer, a size or count that differs), a warning that it reads them right but as
 * another type (signedness, a string read from a void *). */
void at_sigcheck(const char *module, uint64_t offset, const at_sig *sig, const char *prefix,
                 FILE *out, at_sigcheck_result *res);

#endif
