#include "cmds.h"
int at_cmd_report(int argc, char **argv) { (void)argc; (void)argv; return 2; }
