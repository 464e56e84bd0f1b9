/* cmds.h: the acttrace subcommands (one file each, tools/cmd_*.c) as main.c dispatches them.
 * Each takes the arguments after its name (argv[0] = subcommand name), reads them with cliopt.h,
 * and returns the exit code (cliopt.h's AT_EXIT_*): 0 success; 1 the input is bad, the check failed
 * or a filter matched nothing; 2 usage error; 3 an input file is damaged (cut short, corrupt, or
 * with a torn tail a killed writer left): the output covers what was read before the damage and one
 * line on stderr says where it starts. `run` returns the program's own status. */
#ifndef AT_CMDS_H
#define AT_CMDS_H

int at_cmd_dump(int argc, char **argv);
int at_cmd_verify(int argc, char **argv);
int at_cmd_run(int argc, char **argv);
int at_cmd_events(int argc, char **argv);
int at_cmd_tree(int argc, char **argv);
int at_cmd_stats(int argc, char **argv);
int at_cmd_breakdown(int argc, char **argv);
int at_cmd_stacks(int argc, char **argv);
int at_cmd_export(int argc, char **argv);
int at_cmd_report(int argc, char **argv);
int at_cmd_check(int argc, char **argv);

#endif
