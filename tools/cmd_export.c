#include "cmds.h"
int at_cmd_export(int argc, char **argv) { (void)argc; (void)argv; return 2; }
