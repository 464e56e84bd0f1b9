/* cliopt.h: the command-line conventions every acttrace command shares (tools/cmd_*.c): options read
 * by getopt_long (--opt=value and --opt value, options before or after the files, -- ends them),
 * -h/--help, a usage error as one line naming it then the usage on stderr (exit 2), strict number
 * and time values, the checks that tell a directory, an empty file or a file that is not a trace
 * from a damaged trace, and the exit codes. */
#ifndef AT_CLIOPT_H
#define AT_CLIOPT_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes of every command (main.c's --help and docs/commands.md list them). */
#define AT_EXIT_OK 0
#define AT_EXIT_ERROR 1   /* bad input, a check failed, a filter matched nothing */
#define AT_EXIT_USAGE 2
#define AT_EXIT_DAMAGED 3 /* an input file is damaged: the results cover what was read before it */

/* at_cli_next's results besides an option's val (always > 0). */
#define AT_CLI_END 0
#define AT_CLI_EXIT (-1) /* the command returns cli.status: help printed (0) or a usage error (2) */

#define AT_CLI_MAX_OPTS 24

typedef struct at_cli {
    const char *cmd;          /* "tree": messages start "acttrace tree: " */
    void (*usage)(FILE *f);
    int argc;
    char **argv;              /* permuted in place: the operands end up at argv[optind...] */
    const char *arg;          /* the current option's value */
    char opt[72];             /* the current option as its canonical spelling: "--thread", "-o" */
    int status;               /* with AT_CLI_EXIT */
    bool failed;              /* a value was refused: the next at_cli_next returns AT_CLI_EXIT */
    int first;                /* set by at_cli_init: the next call starts a fresh getopt scan */
    char shortopts[64];
    struct option opts[AT_CLI_MAX_OPTS + 2];
} at_cli;

/* shortopts as getopt's ("o:"; "+..." stops at the first operand), without 'h'; longopts ends with a zeroed entry, without "help"
 * (both are added). Vals of options without a short form are distinct values (>= 256 reads best). */
void at_cli_init(at_cli *c, const char *cmd, void (*usage)(FILE *f), const char *shortopts,
                 const struct option *longopts, int argc, char **argv);
/* The next option (its val), AT_CLI_END after the last, or AT_CLI_EXIT once help was printed on
 * stdout or a usage error was reported (its line, then the usage on stderr). */
int at_cli_next(at_cli *c);
/* After AT_CLI_END: the operands (files), in order. */
char **at_cli_operands(const at_cli *c, int *n);

/* "acttrace CMD: <msg>" then the usage on stderr; returns AT_EXIT_USAGE. */
int at_cli_usage_error(const at_cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Values of the current option. On a bad one: the usage error "--thread wants <what>, not 'abc'",
 * c->failed set, false returned (at_cli_next then returns AT_CLI_EXIT). */
bool at_cli_u64(at_cli *c, const char *what, uint64_t *out);
bool at_cli_ms(at_cli *c, bool negative_ok, int64_t *ns); /* a time in ms ("12.5") into ns */
/* c->arg is an activity path (//1/5, //1/5$300, //) or a GUID; else the usage error, c->failed set. */
bool at_cli_activity_path(at_cli *c);

/* Every input file of an analysis command can be read as a trace: a directory, an empty file and a
 * file that does not start with the Nettrace magic each get their own line ("acttrace tree: X is a
 * directory"); a missing file its system error. Returns AT_EXIT_OK, or AT_EXIT_ERROR after the line.
 * "-" (standard input) and other non-regular files are left to the reader. A file given twice (by
 * one name or two) is a line and AT_EXIT_ERROR too: read twice, its events would count twice. */
int at_cli_check_inputs(const char *cmd, char *const *files, int n);
/* An output file (-o PATH) that is one of the input files (the same file, by any name), or another
 * trace, is refused before anything is read: writing it would destroy the trace. AT_EXIT_OK, or
 * AT_EXIT_USAGE after one line. */
int at_cli_check_output(const at_cli *c, const char *path, char *const *files, int n);
/* Finish an output the command wrote: f is path's stream, or stdout when path is NULL. A write
 * that failed at any point (a full disk, /dev/full, a closed pipe with SIGPIPE ignored) gives one
 * line naming the output and AT_EXIT_ERROR, and an incomplete file is removed; else AT_EXIT_OK.
 * Standard output's failure has its line once (main checks it again after every command). */
int at_cli_close_output(const char *cmd, FILE *f, const char *path);
/* The files for a message: "t.nettrace", "a.nettrace and b.nettrace", "the 5 files". */
const char *at_cli_files_desc(char *const *files, int n, char *out, size_t len);

/* The closing paragraph of every command's help: the exit codes. */
void at_cli_exit_codes(FILE *f);

#endif
