/* main.c: the acttrace command-line dispatcher: `acttrace <command> ...`. Each command lives in its
 * own file (tools/cmd_*.c, declared in cmds.h) and reads its own options (cliopt.h); this file reads
 * the options before the command (--help, --version), picks the command and prints the overview. */
#include "cliopt.h"
#include "cmds.h"

#include <stdio.h>
#include <string.h>

#ifndef AT_VERSION
#define AT_VERSION "unknown"
#endif

typedef struct at_subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} at_subcommand;

static const at_subcommand commands[] = {
    {"run", at_cmd_run, "run a program under the shim and say where its trace went"},
    {"check", at_cmd_check, "resolve a config's functions in a program and say how each will be hooked"},
    {"events", at_cmd_events, "list events in time order with activity paths and durations"},
    {"tree", at_cmd_tree, "print the activity tree: durations, threads, transfers, children"},
    {"stats", at_cmd_stats, "per activity name: count, p50/p90/p99/max duration, threads, events"},
    {"breakdown", at_cmd_breakdown, "per activity: wall time split into cpu, blocked, queued and other"},
    {"stacks", at_cmd_stacks, "folded stacks per activity name (flamegraph.pl / inferno input)"},
    {"export", at_cmd_export, "write Chrome trace-event (Perfetto) or speedscope JSON"},
    {"report", at_cmd_report, "write one HTML page to browse: timeline, search, waterfalls, flame graphs"},
    {"dump", at_cmd_dump, "print a .nettrace file: header, metadata, every event, summary"},
    {"verify", at_cmd_verify, "check a .nettrace file against every structural rule of the format"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: acttrace [--version] [--help] <command> [options] [FILE...]\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++) fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`acttrace <command> --help` (or `acttrace help <command>`) describes a command. Options\n"
               "take --opt=value or --opt value, may follow the files, and -- ends them.\n"
               "  -V, --version  print the version\n"
               "  -h, --help     print this overview\n\n");
    at_cli_exit_codes(f);
    fprintf(f, "  `run` exits with the program's own status.\n");
}

static const at_subcommand *find(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(name, commands[i].name)) return &commands[i];
    return NULL;
}

static int main_cmd(int argc, char **argv);

int main(int argc, char **argv)
{
    int status = main_cmd(argc, argv);
    /* what was printed to standard output reached it (a full disk, /dev/full): help and --version
     * too; a command that reported its own failure is not reported twice */
    if (at_cli_close_output(argc > 1 && find(argv[1]) ? argv[1] : "", stdout, NULL))
        return AT_EXIT_ERROR;
    return status;
}

static int main_cmd(int argc, char **argv)
{
    static const struct option opts[] = {{"version", no_argument, NULL, 'V'}, {0}};
    /* acttrace --help CMD: CMD's help, as acttrace help CMD and acttrace CMD --help */
    if (argc == 3 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) && find(argv[2])) {
        char *hargv[] = {argv[2], "--help", NULL};
        return find(argv[2])->run(2, hargv);
    }
    /* '+': stop at the command's name; what follows it is the command's to read */
    at_cli cli;
    at_cli_init(&cli, "", usage, "+V", opts, argc, argv);
    for (int o; (o = at_cli_next(&cli)) != AT_CLI_END;) {
        if (o == AT_CLI_EXIT) return cli.status;
        if (o == 'V') {
            printf("acttrace %s\n", AT_VERSION);
            return AT_EXIT_OK;
        }
    }
    int n;
    char **rest = at_cli_operands(&cli, &n);
    if (!n) {
        fprintf(stderr, "acttrace: say which command to run\n");
        usage(stderr);
        return AT_EXIT_USAGE;
    }
    if (!strcmp(rest[0], "help")) {
        if (n < 2) {
            usage(stdout);
            return AT_EXIT_OK;
        }
        if (n > 2) {
            fprintf(stderr, "acttrace help: one command at a time (not '%s')\n", rest[2]);
            usage(stderr);
            return AT_EXIT_USAGE;
        }
        const at_subcommand *c = find(rest[1]);
        if (!c) {
            fprintf(stderr, "acttrace help: unknown command '%s'\n", rest[1]);
            usage(stderr);
            return AT_EXIT_USAGE;
        }
        char *hargv[] = {rest[1], "--help", NULL};
        return c->run(2, hargv);
    }
    const at_subcommand *c = find(rest[0]);
    if (!c) {
        fprintf(stderr, "acttrace: unknown command '%s'\n", rest[0]);
        usage(stderr);
        return AT_EXIT_USAGE;
    }
    return c->run(n, rest);
}
