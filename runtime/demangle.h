/* demangle.h: C++ names as people read them, made without allocating (demangle.c). */
#ifndef AT_DEMANGLE_H
#define AT_DEMANGLE_H

#include <stdbool.h>
#include <stddef.h>

/* Map the demangler's own stack (address space: at session start, or once in a tool). Returns 0, or
 * -1 when there was no room: at_demangle then demangles nothing. */
int at_demangle_init(void);

/* The demangled form of the C++ name mangled[0..len) ("_Z..."; the GNU C++ ABI) into out: at most
 * cap - 1 bytes, cut at a UTF-8 character boundary when longer, NUL-terminated. Returns its length,
 * or 0 when the name is left as it is: not a C++ name, longer than the stack allows (at_demangle_max),
 * not valid, or no stack. No allocation, no lock, no system call: async-signal-safe. Not reentrant:
 * its callers hold the flush lock (the writer) or are single-threaded (the tools). */
size_t at_demangle(const char *mangled, size_t len, char *out, size_t cap);

/* The longest mangled name at_demangle takes (0 before at_demangle_init). */
size_t at_demangle_max(void);

#endif
