/* progcheck.h: whether the shim can be loaded into a program at all, before check or run starts it.
 * The dynamic loader reads LD_PRELOAD; a program it does not load (statically linked), one it loads
 * in secure-execution mode (setuid or setgid to another user or group, or with file capabilities:
 * LD_PRELOAD is then ignored for a path with a slash) or one of another machine (a 32-bit program)
 * never gets the shim: check would run its main, run would trace nothing. */
#ifndef AT_PROGCHECK_H
#define AT_PROGCHECK_H

#include <stddef.h>

/* The program file at path: NULL when the shim can be loaded into it (or when path is not an ELF
 * file, which the kernel runs some other way), else the end of a sentence about it, in buf
 * ("is statically linked: ..."). */
const char *at_prog_preload_blocked(const char *path, char *buf, size_t n);
/* prog as execvp finds it (a name without '/' looked up in PATH) into out: 0, or an errno. */
int at_prog_find(const char *prog, char *out, size_t n);

#endif
