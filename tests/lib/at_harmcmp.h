/* at_harmcmp.h: what the harm tests share: the same program run untraced in a folder of its own,
 * files compared byte for byte between a traced and an untraced run, and `acttrace verify`. */
#ifndef AT_HARMCMP_H
#define AT_HARMCMP_H

#include <stdbool.h>
#include <stddef.h>

#include "at_testlib.h"

/* Run argv (argv[0] a fixture name) untraced in a fresh folder; the folder (malloc'd) is returned
 * in *dir (at_rmtree it). 0, or -1 if it could not start. */
int at_harm_untraced(const char *tag, const char *const *argv, const char *const *env,
                     at_run_result *r, char **dir);
/* NULL when dir_a/name and dir_b/name hold the same bytes, else a description (static buffer). */
const char *at_harm_file_diff(const char *dir_a, const char *dir_b, const char *name);
/* A program's stderr without the shim's own "acttrace:" lines (malloc'd): what a traced run must
 * print as the untraced one does. */
char *at_harm_program_err(const char *err);
/* `acttrace verify path`: NULL when it passes, else its output (static buffer). */
const char *at_harm_verify(const char *path);

#endif
