/* main.c: the acttrace command-line dispatcher: `acttrace <subcommand> ...`. Each subcommand lives in
 * its own file (tools/cmd_*.c, declared in cmds.h); this file only picks one and prints the help. */
#include "cmds.h"

#include <stdio.h>
#include <string.h>

typedef struct at_subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} at_subcommand;

static const at_subcommand commands[] = {
    {"dump", at_cmd_dump, "print a .nettrace file: header, metadata, every event, summary"},
    {"verify", at_cmd_verify, "check a .nettrace file against every structural rule of the format"},
    {"run", at_cmd_run, "run a program under the shim and say where its trace went"},
    {"events", at_cmd_events, "list events in time order with activity paths and durations"},
    {"tree", at_cmd_tree, "print the activity tree: durations, threads, transfers, children"},
    {"stats", at_cmd_stats, "per activity name: count, p50/p90/p99/max duration, threads, events"},
    {"stacks", at_cmd_stacks, "folded stacks per activity name (flamegraph.pl / inferno input)"},
    {"export", at_cmd_export, "write Chrome trace-event (Perfetto) or speedscope JSON"},
    {"report", at_cmd_report, "write a self-contained HTML report: timeline, histograms, flame graphs"},
    {"check", at_cmd_check, "resolve a config's functions in a program and say how each will be hooked"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: acttrace <subcommand> [options] ...\n\nsubcommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`acttrace <subcommand> --help` describes a subcommand.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "acttrace: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
