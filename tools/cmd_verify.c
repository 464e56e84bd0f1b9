/* cmd_verify.c: `acttrace verify FILE`: reads the whole file in the reader's strict mode, which checks
 * every structural rule of nettrace-v5.md §12 and the FastSerialization framing, and prints each
 * problem with its file offset. Exit status: 0 = structurally clean, 1 = problems or a fatal error,
 * 2 = usage. Dropped events (sequence gaps) are data the writer recorded on purpose, not a structural
 * fault: they are reported per capture thread ("N events dropped") and do not change the exit status. */
#include "cliopt.h"
#include "cmds.h"
#include "ntreader.h"

#include <stdio.h>
#include <string.h>

#define VERIFY_MAX_PRINTED 1000

typedef struct vctx {
    const char *path;
    unsigned long long printed, total;
} vctx;

static void on_problem(void *ctx, uint64_t off, const char *msg)
{
    vctx *v = ctx;
    v->total++;
    if (v->printed >= VERIFY_MAX_PRINTED) return;
    v->printed++;
    printf("%s: offset %llu (0x%llx): %s\n", v->path, (unsigned long long)off, (unsigned long long)off, msg);
}

static void verify_usage(FILE *f)
{
    fprintf(f, "usage: acttrace verify FILE\n"
               "  Checks a .nettrace file (or - for standard input) against the structural rules of the\n"
               "  format: tags, object versions, the 48-byte Trace payload, padding, block sizes, header\n"
               "  compression, metadata and stack ids, block timestamps, per-thread order, sequence\n"
               "  points, the end tag and trailing bytes. Each problem is printed with its file offset.\n"
               "  Exit 0 only for a clean file; dropped events are reported but are not a problem.\n"
               "  Exit status: 0 a clean file; 1 problems, or a file that cannot be read; 2 usage error;\n"
               "  3 a damaged file with no problem before the damage: cut short or broken from some point,\n"
               "  bytes after its end tag, or a torn tail (a writer killed while flushing).\n");
}

int at_cmd_verify(int argc, char **argv)
{
    at_cli cli;
    at_cli_init(&cli, "verify", verify_usage, "", NULL, argc, argv);
    int o;
    while ((o = at_cli_next(&cli)) > 0) {}
    if (o == AT_CLI_EXIT) return cli.status;
    int nfiles;
    char **files = at_cli_operands(&cli, &nfiles);
    if (nfiles != 1) return at_cli_usage_error(&cli, nfiles ? "one FILE only" : "give the trace FILE");
    const char *path = files[0];
    int status = at_cli_check_inputs("verify", files, 1);
    if (status) return status;
    vctx v = {path, 0, 0};
    nt_options opt = {.strict = true, .order = true, .problem = on_problem, .ctx = &v};
    char err[512];
    nt_reader *r = nt_open_ex(path, &opt, err, sizeof err);
    if (!r) {
        printf("%s\n", err);
        printf("%s: FAILED (cannot be read)\n", path);
        return 1;
    }
    nt_event ev;
    int rc;
    while ((rc = nt_next(r, &ev)) == 1) {}
    if (rc < 0) printf("%s\n", nt_error(r));
    if (v.total > v.printed) printf("%s: ... and %llu more problems\n", path, v.total - v.printed);

    const nt_counts *c = nt_get_counts(r);
    printf("%s: %llu events, %llu metadata, blocks: %llu event, %llu metadata, %llu stack, %llu SP\n", path,
           (unsigned long long)c->events, (unsigned long long)c->metadata, (unsigned long long)c->event_blocks,
           (unsigned long long)c->metadata_blocks, (unsigned long long)c->stack_blocks,
           (unsigned long long)c->sp_blocks);
    if (c->events_lost) {
        printf("%s: %llu events dropped\n", path, (unsigned long long)c->events_lost);
        for (size_t i = 0; i < nt_thread_count(r); i++) {
            const nt_thread_stat *t = nt_thread_at(r, i);
            if (t && t->dropped)
                printf("  capture thread %llu: %llu dropped, %llu written\n", (unsigned long long)t->capture_thread,
                       (unsigned long long)t->dropped, (unsigned long long)t->events);
        }
    }
    const nt_damage *d = nt_get_damage(r);
    if (d && d->kind == NT_DAMAGE_TORN) {
        /* what TraceEvent reads (up to the end tag) is checked above; the tail is a killed writer's */
        printf("%s: %s\n", path, d->text);
        printf("%s: %s (torn tail)\n", path, v.total ? "FAILED" : "OK up to the end tag");
        status = v.total ? 1 : 3;
    } else if (rc < 0) {
        printf("%s: FAILED (fatal error above; %llu other problem(s))\n", path, v.total);
        status = v.total ? 1 : 3; /* damaged, sound before the damage: as every command says it */
    } else if (v.total) {
        printf("%s: FAILED (%llu problem(s))\n", path, v.total);
        status = d && v.total == 1 ? 3 : 1; /* the one problem: bytes after the end tag (damage) */
    } else {
        printf("%s: OK\n", path);
        status = 0;
    }
    nt_close(r);
    return status;
}
