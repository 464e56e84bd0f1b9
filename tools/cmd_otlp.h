/* cmd_otlp.h: acttrace export --format otlp (cmd_otlp.c) */
#ifndef AT_CMD_OTLP_H
#define AT_CMD_OTLP_H

#include <stdint.h>
#include <stdio.h>

#include "guid.h"

/* The files' activities as OTLP/JSON into outpath (NULL: standard output), made only once there is
 * something to write; with endpoint (http://HOST[:PORT][/PATH]), sent there as OTLP/HTTP protobuf
 * instead (and written to outpath too when it is given). name: only activities named so and those below them
 * (*named says how many). 0: written; 1: nothing named so (nothing written); 3: written, a file was
 * damaged (said on stderr); -1: error (err says why); -2: the output failed (said on stderr). */
int at_export_otlp(char **files, int nfiles, const char *name, const char *outpath, const char *endpoint,
                   char *err, size_t errlen, uint64_t *named);
/* An activity id as a span id (16 hex digits) and a root's as a trace id (32) */
void ot_span_id(const at_guid *g, char out[17]);
void ot_trace_id(const at_guid *g, char out[33]);

#endif
