/* test_reader.c: the reader on the real runtime-written samples: every count of expected.tsv exactly,
 * from a path, from memory and from a pipe; V3 and V6 refused by name; decoded metadata, payloads,
 * stacks and activity paths of known events; and the dump / verify subcommands on samples. */
#include "actpath.h"
#include "guid.h"
#include "ntreader.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SAMPLES AT_SOURCE_DIR "/tests/data/nettrace-samples"
#define ACTTRACE AT_BUILD_DIR "/acttrace"

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)n + 1);
    ck_assert(p != NULL);
    ck_assert_uint_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

static unsigned long long problems_seen;
static void count_problem(void *ctx, uint64_t off, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "problem at %llu: %s\n", (unsigned long long)off, msg);
    problems_seen++;
}

typedef struct expect_row {
    char file[128];
    unsigned long long v[11]; /* events metadata EventBlock MetadataBlock SPBlock StackBlock first last ptr pid freq */
} expect_row;

static int load_expected(expect_row *rows, int max)
{
    FILE *f = fopen(SAMPLES "/expected.tsv", "r");
    ck_assert(f != NULL);
    char line[1024];
    int n = 0;
    ck_assert(fgets(line, sizeof line, f) != NULL); /* header */
    static const char hdr[] = "file\tevents\tmetadata\tEventBlock\tMetadataBlock\tSPBlock\tStackBlock\tfirst_ts\t"
                              "last_ts\tpointer_size\tpid\tqpc_freq";
    ck_assert(strncmp(line, hdr, sizeof hdr - 1) == 0);
    while (n < max && fgets(line, sizeof line, f)) {
        expect_row *r = &rows[n];
        int k = sscanf(line, "%127s %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", r->file, &r->v[0],
                       &r->v[1], &r->v[2], &r->v[3], &r->v[4], &r->v[5], &r->v[6], &r->v[7], &r->v[8], &r->v[9],
                       &r->v[10]);
        ck_assert_int_eq(k, 12);
        n++;
    }
    fclose(f);
    return n;
}

static void check_counts(nt_reader *r, const expect_row *e)
{
    nt_event ev;
    int rc;
    uint64_t n = 0;
    while ((rc = nt_next(r, &ev)) == 1) {
        ck_assert(ev.meta != NULL);
        n++;
    }
    ck_assert_msg(rc == 0, "%s: %s", e->file, nt_error(r));
    const nt_counts *c = nt_get_counts(r);
    const nt_trace_info *in = nt_info(r);
    ck_assert_uint_eq(n, e->v[0]);
    ck_assert_uint_eq(c->events, e->v[0]);
    ck_assert_uint_eq(c->metadata, e->v[1]);
    ck_assert_uint_eq(c->event_blocks, e->v[2]);
    ck_assert_uint_eq(c->metadata_blocks, e->v[3]);
    ck_assert_uint_eq(c->sp_blocks, e->v[4]);
    ck_assert_uint_eq(c->stack_blocks, e->v[5]);
    ck_assert_uint_eq(c->first_ts, e->v[6]);
    ck_assert_uint_eq(c->last_ts, e->v[7]);
    ck_assert_uint_eq((unsigned long long)in->pointer_size, e->v[8]);
    ck_assert_uint_eq((unsigned long long)in->pid, e->v[9]);
    ck_assert_uint_eq((unsigned long long)in->qpc_freq, e->v[10]);
    ck_assert_uint_eq(c->events_lost, 0);
    ck_assert_uint_eq(nt_metadata_count(r), e->v[1]);
}

START_TEST(samples_match_expected_from_path_strict)
{
    expect_row rows[16];
    int n = load_expected(rows, 16);
    ck_assert_int_eq(n, 6);
    for (int i = 0; i < n; i++) {
        char path[4096], err[512];
        snprintf(path, sizeof path, SAMPLES "/%s", rows[i].file);
        problems_seen = 0;
        nt_options opt = {.strict = true, .problem = count_problem};
        nt_reader *r = nt_open_ex(path, &opt, err, sizeof err);
        ck_assert_msg(r != NULL, "%s", err);
        check_counts(r, &rows[i]);
        ck_assert_uint_eq(problems_seen, 0); /* every real sample is structurally clean */
        ck_assert_uint_eq(nt_problem_count(r), 0);
        nt_close(r);
        /* and the plain API */
        r = nt_open(path, err, sizeof err);
        ck_assert_msg(r != NULL, "%s", err);
        check_counts(r, &rows[i]);
        nt_close(r);
    }
}
END_TEST

START_TEST(samples_match_expected_from_memory)
{
    expect_row rows[16];
    int n = load_expected(rows, 16);
    for (int i = 0; i < n; i++) {
        char path[4096], err[512];
        snprintf(path, sizeof path, SAMPLES "/%s", rows[i].file);
        size_t len;
        uint8_t *data = slurp(path, &len);
        nt_reader *r = nt_open_mem(data, len, NULL, err, sizeof err);
        ck_assert_msg(r != NULL, "%s", err);
        check_counts(r, &rows[i]);
        nt_close(r);
        free(data);
    }
}
END_TEST

START_TEST(samples_match_expected_from_a_pipe)
{
    expect_row rows[16];
    int n = load_expected(rows, 16);
    for (int i = 0; i < n; i++) {
        char path[4096], err[512];
        snprintf(path, sizeof path, SAMPLES "/%s", rows[i].file);
        size_t len;
        uint8_t *data = slurp(path, &len);
        int fds[2];
        ck_assert_int_eq(pipe(fds), 0);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) { /* writer in small odd chunks so reads see partial objects */
            close(fds[0]);
            size_t off = 0;
            while (off < len) {
                size_t k = len - off < 4093 ? len - off : 4093;
                ssize_t w = write(fds[1], data + off, k);
                if (w <= 0) _exit(1);
                off += (size_t)w;
            }
            _exit(0);
        }
        close(fds[1]);
        nt_reader *r = nt_open_fd(fds[0], "pipe", NULL, err, sizeof err);
        ck_assert_msg(r != NULL, "%s", err);
        check_counts(r, &rows[i]);
        nt_close(r);
        close(fds[0]);
        int st;
        waitpid(pid, &st, 0);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        free(data);
    }
}
END_TEST

START_TEST(corrupt_size_on_a_pipe)
{
    /* a block claiming 200 MB on a pipe holding 582 bytes: the buffer grows only with data that
     * arrives, and the error names where the data ended */
    size_t len;
    uint8_t *data = slurp(SAMPLES "/eventpipe-dotnetcore6.0-win-x64-executioncheckpoints.nettrace", &len);
    uint32_t big = 200u << 20;
    memcpy(data + 0x83, &big, 4);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    ck_assert_int_eq(write(fds[1], data, len), (ssize_t)len);
    close(fds[1]);
    char err[512];
    nt_reader *r = nt_open_fd(fds[0], "pipe", NULL, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_event ev;
    ck_assert_int_eq(nt_next(r, &ev), -1);
    char want[64];
    snprintf(want, sizeof want, "offset %zu", len);
    ck_assert_msg(strstr(nt_error(r), "file ends inside a MetadataBlock") && strstr(nt_error(r), want), "%s",
                  nt_error(r));
    nt_close(r);
    close(fds[0]);
    free(data);
}
END_TEST

/* A real file whose events reference an empty stack before any frame was stored: each such event
 * reads with no frames (the reader once computed an address from a NULL frame table, which UBSan
 * stops: make check-asan and the fuzz targets' seeds catch it). */
START_TEST(empty_stack_before_any_frame)
{
    char err[512];
    nt_reader *r = nt_open(SAMPLES "/eventpipe-dotnetcore6.0-win-x64-executioncheckpoints.nettrace", err,
                           sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_event ev;
    int rc, with_stack_id = 0;
    while ((rc = nt_next(r, &ev)) == 1) {
        if (ev.stack_id)
            with_stack_id++;
        if (ev.nframes == 0)
            ck_assert_ptr_null(ev.frames);
    }
    ck_assert_msg(rc == 0, "%s", nt_error(r));
    ck_assert_int_gt(with_stack_id, 0);
    nt_close(r);
}
END_TEST

START_TEST(v3_netperf_refused_by_name)
{
    char err[512];
    nt_reader *r = nt_open(SAMPLES "/eventpipe-dotnetcore2.1-linux-x64-tracelogging.netperf", err, sizeof err);
    ck_assert(r == NULL);
    ck_assert_msg(strstr(err, "V3") && strstr(err, "netperf") && strstr(err, "offset 0"), "%s", err);
}
END_TEST

START_TEST(v6_refused_by_name)
{
    /* "Nettrace", uint32 0, major 6, minor 0, then a V6 block header */
    uint8_t v6[] = {'N', 'e', 't', 't', 'r', 'a', 'c', 'e', 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0x30, 0, 0, 1};
    char err[512];
    nt_reader *r = nt_open_mem(v6, sizeof v6, NULL, err, sizeof err);
    ck_assert(r == NULL);
    ck_assert_msg(strstr(err, "V6") && strstr(err, "not supported"), "%s", err);
    /* a future major too */
    v6[12] = 7;
    r = nt_open_mem(v6, sizeof v6, NULL, err, sizeof err);
    ck_assert(r == NULL);
    ck_assert_msg(strstr(err, "V7"), "%s", err);
    /* not a trace at all */
    r = nt_open_mem("hello world, not a trace", 24, NULL, err, sizeof err);
    ck_assert(r == NULL);
    ck_assert_msg(strstr(err, "not a nettrace file"), "%s", err);
    r = nt_open_mem("", 0, NULL, err, sizeof err);
    ck_assert(r == NULL);
    ck_assert_msg(strstr(err, "offset 0"), "%s", err);
    r = nt_open("/nonexistent/x.nettrace", err, sizeof err);
    ck_assert(r == NULL);
    ck_assert_msg(strstr(err, "No such file"), "%s", err);
}
END_TEST

START_TEST(arraytypes_metadata_and_payloads)
{
    char err[512];
    nt_reader *r = nt_open(SAMPLES "/eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace", err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    const nt_trace_info *in = nt_info(r);
    ck_assert_uint_eq(in->sync_time_utc[0], 2020);
    ck_assert_uint_eq(in->sync_time_utc[1], 5);
    ck_assert_uint_eq(in->sync_time_utc[3], 19);
    ck_assert_int_eq(in->num_processors, 12);
    nt_event ev;
    ck_assert_int_eq(nt_next(r, &ev), 1);
    /* metadata 1: V2Params arrays */
    const nt_metadata *m = ev.meta;
    ck_assert_uint_eq(m->id, 1);
    ck_assert_str_eq(m->provider, "TestEventSource0");
    ck_assert_str_eq(m->name, "TestEvent1");
    ck_assert_uint_eq(m->event_id, 5);
    ck_assert_uint_eq(m->level, 2);
    ck_assert_uint_eq(m->keywords, 0xf00000000000ULL);
    ck_assert_uint_eq(m->nfields, 3);
    ck_assert_uint_eq(m->fields[0].type, NT_TYPE_ARRAY);
    ck_assert_uint_eq(m->fields[0].elem_type, NT_TYPE_UINT32);
    ck_assert_uint_eq(m->fields[1].elem_type, NT_TYPE_INT16);
    ck_assert_uint_eq(m->fields[2].type, NT_TYPE_INT64);
    at_guid g;
    at_guid_from_provider_name("TestEventSource0", &g);
    ck_assert(at_guid_eq(&g, &m->provider_guid));
    char buf[512];
    uint32_t off = 0;
    ck_assert(nt_field_format(&m->fields[0], ev.payload, ev.payload_len, &off, buf, sizeof buf));
    ck_assert_str_eq(buf, "[2032854139, 1608221689, 1470019200, 199494339, 1238846140, 1366609043]");
    ck_assert(nt_field_format(&m->fields[1], ev.payload, ev.payload_len, &off, buf, sizeof buf));
    ck_assert_str_eq(buf, "[26494, 17115, -7229, 18850, 27931]");
    ck_assert(nt_field_format(&m->fields[2], ev.payload, ev.payload_len, &off, buf, sizeof buf));
    ck_assert_str_eq(buf, "2033417279");
    ck_assert_uint_eq(off, ev.payload_len); /* every byte accounted for */
    /* a payload one byte short is refused, not overrun */
    off = 0;
    ck_assert(!nt_field_format(&m->fields[0], ev.payload, 10, &off, buf, sizeof buf));
    /* a tiny output buffer is cut, the offset still advances over the whole field */
    off = 0;
    ck_assert(nt_field_format(&m->fields[0], ev.payload, ev.payload_len, &off, buf, 12));
    ck_assert_uint_le(strlen(buf), 11);
    ck_assert(strstr(buf, "...") != NULL);
    ck_assert_uint_eq(off, 2 + 6 * 4);
    /* this event has a 10-frame stack, leaf first */
    ck_assert_uint_eq(ev.nframes, 10);
    ck_assert_uint_eq(ev.frames[0], 0x7ffdd7883bcdULL);
    ck_assert_uint_eq(ev.frames[9], 0x7ffd987a41d7ULL);
    ck_assert_uint_eq(ev.thread, 23560);
    /* metadata 3 carries an explicit OpCode tag (24) */
    const nt_metadata *m3 = nt_metadata_get(r, 3);
    ck_assert(m3 != NULL);
    ck_assert(m3->has_opcode_tag);
    ck_assert_uint_eq(m3->opcode, 24);
    ck_assert_uint_eq(m3->fields[0].elem_type, NT_TYPE_CHAR);
    ck_assert(nt_metadata_get(r, 999) == NULL);
    /* ProcessInfo string payload */
    int rc;
    bool seen = false;
    while ((rc = nt_next(r, &ev)) == 1) {
        if (strcmp(ev.meta->name, "ProcessInfo") == 0 && !seen) {
            seen = true;
            off = 0;
            ck_assert(nt_field_format(&ev.meta->fields[0], ev.payload, ev.payload_len, &off, buf, sizeof buf));
            ck_assert(strncmp(buf, "\"C:\\\\work\\\\arraytypes_test", 26) == 0);
            ck_assert_uint_eq(off, ev.payload_len);
        }
    }
    ck_assert_int_eq(rc, 0);
    ck_assert(seen);
    nt_close(r);
}
END_TEST

START_TEST(activity_paths_in_the_mixed_sample)
{
    char err[512];
    nt_reader *r = nt_open(SAMPLES "/mixed_managed_external_samples.nettrace", err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_event ev;
    int rc;
    unsigned paths = 0;
    uint32_t pid = (uint32_t)nt_info(r)->pid;
    while ((rc = nt_next(r, &ev)) == 1) {
        if (at_guid_is_zero(&ev.activity)) continue;
        char buf[128];
        if (at_actpath_format(&ev.activity, pid, buf, sizeof buf) > 0) {
            if (paths++ == 0) {
                char g[37];
                at_guid_format(&ev.activity, g);
                ck_assert_str_eq(g, "00000011-0000-0000-0000-0000da999c59");
                ck_assert_str_eq(buf, "//1/1");
                at_actpath_format_perfview(&ev.activity, buf, sizeof buf);
                ck_assert_str_eq(buf, "/#65636/1/1/");
            }
        }
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_gt(paths, 0);
    nt_close(r);
}
END_TEST

START_TEST(stacks_restart_after_sequence_points)
{
    /* only_managed has 6 SPs and stack ids restarting after each: every referenced id resolves */
    char err[512];
    unsigned long long with_stack = 0;
    problems_seen = 0;
    nt_options opt = {.problem = count_problem};
    nt_reader *r = nt_open_ex(SAMPLES "/only_managed_samples.nettrace", &opt, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_event ev;
    int rc;
    while ((rc = nt_next(r, &ev)) == 1)
        if (ev.nframes) with_stack++;
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_gt(with_stack, 1000);
    ck_assert_uint_eq(problems_seen, 0);
    ck_assert_uint_ge(nt_thread_count(r), 1);
    for (size_t i = 0; i < nt_thread_count(r); i++) ck_assert_uint_eq(nt_thread_at(r, i)->dropped, 0);
    nt_close(r);
}
END_TEST

/* Runs the acttrace binary, captures stdout+stderr, returns the exit status. */
static int run_tool(const char *args, char *out, size_t outlen)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", ACTTRACE, args);
    FILE *p = popen(cmd, "r");
    ck_assert(p != NULL);
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = 0;
    char sink[4096]; /* drain the rest so the tool never dies of SIGPIPE */
    while (fread(sink, 1, sizeof sink, p) > 0) {}
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(dump_of_a_sample)
{
    static char out[1 << 20];
    int rc = run_tool("dump " SAMPLES "/eventpipe-dotnetcore6.0-win-x64-executioncheckpoints.nettrace", out, sizeof out);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strstr(out, "sync time      2021-06-09 09:48:25.902 UTC\n"), "%s", out);
    ck_assert(strstr(out, "qpc frequency  10000000\n"));
    ck_assert(strstr(out, "pid            9832\n"));
    ck_assert(strstr(out, "pointer size   8\n"));
    ck_assert(strstr(out, "cpus           8\n"));
    ck_assert(strstr(out, "meta 1: Microsoft-Windows-DotNETRuntimeRundown {a669021c-c450-4609-a035-5af59af4df18} "
                          "event 300 \"\" opcode Info level 4 keywords 0x0 version 0 fields ()\n"));
    ck_assert(strstr(out, " 1753.790600 ms  tid 25112  Microsoft-Windows-DotNETRuntimeRundown/(unnamed)  Info act=- "
                          "rel=- payload=34 bytes\n"));
    ck_assert(strstr(out, "events 3, metadata 1\n"));
    ck_assert(strstr(out, "blocks: EventBlock 1, MetadataBlock 1, StackBlock 1, SPBlock 1\n"));
    ck_assert(strstr(out, "events lost 0\n"));
    /* metadata listed before the first event */
    ck_assert(strstr(out, "meta 1:") < strstr(out, "1753.790600 ms"));

    rc = run_tool("dump " SAMPLES "/eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace", out, sizeof out);
    ck_assert_int_eq(rc, 0);
    ck_assert(strstr(out, "TestEventSource0/TestEvent1  Info act=- rel=- stack=[0x7ffdd7883bcd,"));
    ck_assert(strstr(out, " arg0=[2032854139, 1608221689, 1470019200, 199494339, 1238846140, 1366609043] "
                          "arg1=[26494, 17115, -7229, 18850, 27931] arg2=2033417279\n"));
    ck_assert(strstr(out, "fields (arg0:array<uint32>, arg1:array<int16>, arg2:int64)"));
    ck_assert(strstr(out, "TestEvent3\" opcode 24 level 2"));

    rc = run_tool("dump --no-stacks " SAMPLES "/mixed_managed_external_samples.nettrace | grep -m1 ' act=0'", out,
                  sizeof out);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strstr(out, " act=00000011-0000-0000-0000-0000da999c59 //1/1 rel=-"), "%s", out);

    /* from a pipe: metadata where it is defined */
    rc = run_tool("dump - < " SAMPLES "/eventpipe-dotnetcore6.0-win-x64-executioncheckpoints.nettrace", out,
                  sizeof out);
    ck_assert_int_eq(rc, 0);
    ck_assert(strstr(out, "trace -\n"));
    ck_assert(strstr(out, "events 3, metadata 1\n"));

    rc = run_tool("dump " SAMPLES "/eventpipe-dotnetcore2.1-linux-x64-tracelogging.netperf", out, sizeof out);
    ck_assert_int_eq(rc, 1);
    ck_assert(strstr(out, "V3 \"netperf\""));
    ck_assert_int_eq(run_tool("dump", out, sizeof out), 2);
    ck_assert_int_eq(run_tool("dump --bogus x", out, sizeof out), 2);
    ck_assert_int_eq(run_tool("dump a b", out, sizeof out), 2);
    ck_assert_int_eq(run_tool("dump --help", out, sizeof out), 0);
    ck_assert(strstr(out, "usage: acttrace dump"));
    ck_assert_int_eq(run_tool("", out, sizeof out), 2);
    ck_assert_int_eq(run_tool("nosuchcommand", out, sizeof out), 2);
    ck_assert(strstr(out, "unknown command 'nosuchcommand'"));
    ck_assert_int_eq(run_tool("--help", out, sizeof out), 0);
    ck_assert(strstr(out, "verify"));
}
END_TEST

START_TEST(verify_of_samples)
{
    static char out[1 << 16];
    expect_row rows[16];
    int n = load_expected(rows, 16);
    for (int i = 0; i < n; i++) {
        char args[4096];
        snprintf(args, sizeof args, "verify " SAMPLES "/%s", rows[i].file);
        int rc = run_tool(args, out, sizeof out);
        ck_assert_msg(rc == 0, "%s", out);
        ck_assert(strstr(out, ": OK\n"));
        ck_assert(!strstr(out, "dropped"));
    }
    int rc = run_tool("verify " SAMPLES "/eventpipe-dotnetcore2.1-linux-x64-tracelogging.netperf", out, sizeof out);
    ck_assert_int_eq(rc, 1);
    ck_assert(strstr(out, "V3 \"netperf\""));
    ck_assert(strstr(out, "FAILED"));
    /* a truncated copy fails with the offset where the data ends */
    rc = run_tool("verify - < /dev/null", out, sizeof out);
    ck_assert_int_eq(rc, 1);
    ck_assert(strstr(out, "offset 0"));
    char tmp[] = "/tmp/at_verify_XXXXXX";
    int fd = mkstemp(tmp);
    ck_assert_int_ge(fd, 0);
    size_t len;
    uint8_t *data = slurp(SAMPLES "/eventpipe-dotnetcore6.0-win-x64-executioncheckpoints.nettrace", &len);
    ck_assert_int_eq(write(fd, data, 300), 300);
    close(fd);
    snprintf(out, sizeof out, "verify %s", tmp);
    char args[256];
    snprintf(args, sizeof args, "verify %s", tmp);
    rc = run_tool(args, out, sizeof out);
    ck_assert_int_eq(rc, 3); /* damaged, nothing wrong before the damage: as every command says it */
    ck_assert_msg(strstr(out, "offset 299 (0x12b): file ends inside type name length"), "%s", out);
    ck_assert(strstr(out, "FAILED"));
    /* one trailing byte: damage after a whole trace, reported with its offset */
    fd = open(tmp, O_WRONLY | O_TRUNC);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
    ck_assert_int_eq(write(fd, "x", 1), 1);
    close(fd);
    rc = run_tool(args, out, sizeof out);
    ck_assert_int_eq(rc, 3);
    char want[64];
    snprintf(want, sizeof want, "offset %zu", len);
    ck_assert_msg(strstr(out, want) && strstr(out, "trailing"), "%s", out);
    unlink(tmp);
    free(data);
    ck_assert_int_eq(run_tool("verify", out, sizeof out), 2);
    ck_assert_int_eq(run_tool("verify --help", out, sizeof out), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("reader");
    TCase *tc = tcase_create("samples");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, samples_match_expected_from_path_strict);
    tcase_add_test(tc, samples_match_expected_from_memory);
    tcase_add_test(tc, samples_match_expected_from_a_pipe);
    tcase_add_test(tc, corrupt_size_on_a_pipe);
    tcase_add_test(tc, empty_stack_before_any_frame);
    tcase_add_test(tc, v3_netperf_refused_by_name);
    tcase_add_test(tc, v6_refused_by_name);
    tcase_add_test(tc, arraytypes_metadata_and_payloads);
    tcase_add_test(tc, activity_paths_in_the_mixed_sample);
    tcase_add_test(tc, stacks_restart_after_sequence_points);
    tcase_add_test(tc, dump_of_a_sample);
    tcase_add_test(tc, verify_of_samples);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
