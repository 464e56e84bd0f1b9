/* ntsym.c: interim symbolizer: addresses only. The stacks work (issue 6) replaces this with the
 * ProcessMapping/ProcessSymbol reader described in ntsym.h. */
#include "ntsym.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

struct nt_symbolizer {
    nt_sym_options o;
};

nt_symbolizer *nt_sym_new(const nt_sym_options *o)
{
    nt_symbolizer *s = calloc(1, sizeof *s);
    if (s && o)
        s->o = *o;
    return s;
}

void nt_sym_observe(nt_symbolizer *s, const nt_event *ev)
{
    (void)s;
    (void)ev;
}

bool nt_sym_is_symbol_event(const nt_event *ev)
{
    (void)ev;
    return false;
}

const char *nt_sym_format(nt_symbolizer *s, uint64_t ip, char *buf, size_t n)
{
    (void)s;
    snprintf(buf, n, "0x%" PRIx64, ip);
    return buf;
}

void nt_sym_free(nt_symbolizer *s)
{
    free(s);
}
