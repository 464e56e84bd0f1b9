/* at_toolrun.c: running the acttrace binary of the build under test (see at_tracegen.h). */
#include "at_testlib.h"
#include "at_tracegen.h"
#include <stdio.h>

int at_tool_run(at_run_result *r, const char *const *args)
{
    const char *argv[64];
    char tool[4096];
    snprintf(tool, sizeof tool, "%s/acttrace", at_build_dir());
    int n = 0;
    argv[n++] = tool;
    for (int i = 0; args[i] && n < 63; i++) argv[n++] = args[i];
    argv[n] = NULL;
    at_run_opts o = {.argv = argv, .no_preload = true};
    return at_run(&o, r);
}
