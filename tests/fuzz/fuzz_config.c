/* fuzz_config.c: libFuzzer target for the ACTTRACE_* environment settings (config/config.h). The input
 * is lines NAME=VALUE served to at_config_from_env as its environment: it ends with every setting in
 * range, or in one message naming the setting at fault. Built by `make fuzz`. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#define MAX_VARS 64
static char *names[MAX_VARS], *values[MAX_VARS];
static int nvars;

static const char *fuzz_getenv(const char *name)
{
    for (int i = nvars - 1; i >= 0; i--) /* the last definition wins, as in a real environment */
        if (!strcmp(names[i], name)) return values[i];
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    nvars = 0;
    for (char *line = text, *next; line && nvars < MAX_VARS; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = 0;
        names[nvars] = line;
        values[nvars++] = eq + 1;
    }
    at_config c;
    at_config_defaults(&c);
    char err[256];
    err[0] = 0;
    if (at_config_from_env(&c, fuzz_getenv, err, sizeof err) == 0) {
        if (!memchr(c.output, 0, sizeof c.output) || !memchr(c.config_file, 0, sizeof c.config_file))
            abort();
        if ((unsigned)c.stacks > AT_CFG_STACKS_NONE || (unsigned)c.stack_walker > AT_CFG_WALKER_FP)
            abort();
        if (c.stack_depth > 256 || c.flush_ms > 3600000 || c.clock < 0 || c.clock > 2) abort();
    } else if (strncmp(err, "ACTTRACE_", 9) != 0) {
        abort();
    }
    free(text);
    return 0;
}
