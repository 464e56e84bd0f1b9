/* cmd_dump.c: `acttrace dump FILE`: the trace header, the metadata, one line per event (time from the
 * trace start, thread, provider/event, opcode, activity ids with their decoded paths, stack, payload
 * fields) and a summary. A regular file is read twice so all metadata can be listed before the
 * events; from a pipe ("-") metadata lines appear where they are defined. */
#include "actpath.h"
#include "cliopt.h"
#include "cmds.h"
#include "guid.h"
#include "ntreader.h"
#include "ntsym.h"
#include "ntsym_clr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void dump_usage(FILE *f)
{
    fprintf(f, "usage: acttrace dump [--no-events] [--no-stacks] [--no-lines] [--raw-frames] [--counts]\n"
               "                     [--frame-names] FILE\n"
               "  FILE is a .nettrace file (V4/V5) or - for standard input.\n"
               "  --no-events   print the header, metadata and summary only\n"
               "  --no-stacks   leave stack frames out of event lines\n"
               "  --no-lines    frames without (file:line) even when DWARF is on this machine\n"
               "  --raw-frames  frames as addresses, not module!function+0xoff\n"
               "  --counts      instead of event lines: per provider and event id, the events read\n"
               "                (\"count<TAB>guid<TAB>provider<TAB>id<TAB>n<TAB>name\"), and the lost events\n"
               "                that precede their thread's first one in the file (\"lost-before-first<TAB>n\"),\n"
               "                and the events per capture processor (\"cpu<TAB>n|none<TAB>events\")\n"
               "  --frame-names instead of event lines: every address of every stack once, named from\n"
               "                the whole file as written (\"frame<TAB>0xaddr<TAB>module!function\", no\n"
               "                offset, not demangled; module+0xoff or ? when no symbol covers it)\n");
    at_cli_exit_codes(f);
}

static void print_fields(FILE *f, const nt_field *fl, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        fprintf(f, "%s%s:%s", i ? ", " : "", fl[i].name ? fl[i].name : "?", nt_type_name(fl[i].type));
        if (fl[i].type == NT_TYPE_ARRAY) fprintf(f, "<%s>", nt_type_name(fl[i].elem_type));
        if (fl[i].nfields) {
            fputc('{', f);
            print_fields(f, fl[i].fields, fl[i].nfields);
            fputc('}', f);
        }
    }
}

static void print_meta(void *ctx, const nt_metadata *m)
{
    FILE *f = ctx;
    char g[37];
    at_guid_format(&m->provider_guid, g);
    const char *op = nt_opcode_name(m->opcode);
    fprintf(f, "meta %u: %s {%s} event %u \"%s\" opcode ", m->id, m->provider, g, m->event_id, m->name);
    if (op) fputs(op, f);
    else fprintf(f, "%u", m->opcode);
    fprintf(f, "%s level %u keywords 0x%llx version %u fields (", !m->has_opcode_tag && m->opcode ? " (implied from the name)" : "", m->level,
            (unsigned long long)m->keywords, m->version);
    print_fields(f, m->fields, m->nfields);
    fprintf(f, ")\n");
}

static void print_problem(void *ctx, uint64_t off, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "acttrace dump: warning at offset %llu (0x%llx): %s\n", (unsigned long long)off,
            (unsigned long long)off, msg);
}

static void print_activity(FILE *f, const char *label, const at_guid *g, uint32_t pid)
{
    if (at_guid_is_zero(g)) {
        fprintf(f, " %s=-", label);
        return;
    }
    char s[37], path[256];
    at_guid_format(g, s);
    fprintf(f, " %s=%s", label, s);
    if (at_actpath_format(g, pid, path, sizeof path) > 0) fprintf(f, " %s", path);
}

static void print_header(FILE *f, const char *path, const nt_trace_info *in)
{
    const uint16_t *t = in->sync_time_utc;
    fprintf(f, "trace %s\n", path);
    fprintf(f, "  sync time      %04u-%02u-%02u %02u:%02u:%02u.%03u UTC\n", t[0], t[1], t[3], t[4], t[5], t[6], t[7]);
    fprintf(f, "  sync qpc       %lld\n", (long long)in->sync_time_qpc);
    fprintf(f, "  qpc frequency  %lld\n", (long long)in->qpc_freq);
    fprintf(f, "  pid            %d\n", in->pid);
    fprintf(f, "  pointer size   %d\n", in->pointer_size);
    fprintf(f, "  cpus           %d\n", in->num_processors);
    fprintf(f, "  sampling rate  %d\n", in->sampling_rate);
}

/* Universal.System payloads (varuints and uint16-length UTF-8 strings, nettrace-v5.md §9): the field
 * lists are in the parser, not in the metadata, so they are named here. */
static void print_universal(FILE *f, const nt_event *ev)
{
    static const char *const names[][6] = {
        [NT_US_PROCESS_MAPPING] = {"Id", "StartAddress", "EndAddress", "FileOffset", "$FileName", "MetadataId"},
        [NT_US_PROCESS_SYMBOL] = {"Id", "MappingId", "StartAddress", "EndAddress", "$Name"},
        [NT_US_PROCESS_MAPPING_METADATA] = {"Id", "$SymbolMetadata", "$VersionMetadata"},
    };
    const uint8_t *p = ev->payload, *end = p + ev->payload_len;
    for (int i = 0; i < 6 && names[ev->meta->event_id][i]; i++) {
        const char *n = names[ev->meta->event_id][i];
        if (n[0] == '$') {
            if (end - p < 2) break;
            uint16_t len = (uint16_t)(p[0] | p[1] << 8);
            p += 2;
            if (end - p < len) break;
            fprintf(f, " %s=%.*s", n + 1, (int)len, (const char *)p);
            p += len;
        } else {
            uint64_t v = 0;
            int sh = 0;
            while (p < end && sh < 64) {
                v |= (uint64_t)(*p & 0x7f) << sh;
                sh += 7;
                if (!(*p++ & 0x80)) break;
            }
            fprintf(f, strstr(n, "Address") || strstr(n, "Offset") ? " %s=0x%llx" : " %s=%llu", n, (unsigned long long)v);
        }
    }
}

static void print_event(FILE *f, const nt_trace_info *in, const nt_event *ev, bool stacks, nt_symbolizer *sym,
                        char *buf, size_t buflen)
{
    double freq = in->qpc_freq > 0 ? (double)in->qpc_freq : 1.0;
    double ms = (double)((__int128)ev->timestamp - in->sync_time_qpc) * 1000.0 / freq; /* exact, and no overflow on corrupt values */
    const nt_metadata *m = ev->meta;
    const char *op = nt_opcode_name(m->opcode);
    fprintf(f, "%12.6f ms  tid %llu  %s/%s", ms, (unsigned long long)ev->thread, m->provider,
            m->name[0] ? m->name : "(unnamed)");
    if (op) fprintf(f, "  %s", op);
    else fprintf(f, "  Opcode(%u)", m->opcode);
    print_activity(f, "act", &ev->activity, (uint32_t)in->pid);
    print_activity(f, "rel", &ev->related, (uint32_t)in->pid);
    if (stacks && ev->nframes) {
        fprintf(f, " stack=[");
        /* frames named from the trace's own Universal.System events (addresses when it has none) */
        bool sample = nt_event_cpu_sample(ev, NULL); /* its leaf is the instruction itself */
        for (uint32_t i = 0; i < ev->nframes; i++)
            fprintf(f, "%s%s", i ? "," : "",
                    i == 0 && sample ? nt_sym_format_exact(sym, ev->frames[i], buf, buflen)
                                     : nt_sym_format(sym, ev->frames[i], buf, buflen));
        fputc(']', f);
    }
    if (nt_clr_is_symbol_event(ev)) { /* the .NET runtime's layout: decoded as the symbolizer reads it */
        nt_clr_sym c;
        if (!nt_clr_decode(ev, &c)) fprintf(f, " payload=%u bytes (malformed)", ev->payload_len);
        else if (c.is_module) fprintf(f, " ModuleID=%llu ModuleILPath=%s", (unsigned long long)c.id, c.name);
        else fprintf(f, " ModuleID=%llu MethodStartAddress=0x%llx MethodSize=%llu Name=%s", (unsigned long long)c.id,
                     (unsigned long long)c.start, (unsigned long long)c.size, c.name);
        free(c.name);
        fputc('\n', f);
        return;
    }
    if (nt_sym_is_symbol_event(ev)) {
        print_universal(f, ev);
        fputc('\n', f);
        return;
    }
    uint32_t off = 0;
    for (uint32_t i = 0; i < m->nfields; i++) {
        if (!nt_field_format(&m->fields[i], ev->payload, ev->payload_len, &off, buf, buflen)) {
            fprintf(f, " %s=<payload too short>", m->fields[i].name);
            off = ev->payload_len;
            break;
        }
        fprintf(f, " %s=%s", m->fields[i].name, buf);
    }
    if (m->nfields == 0 && ev->payload_len) fprintf(f, " payload=%u bytes", ev->payload_len);
    else if (off < ev->payload_len) fprintf(f, " (+%u bytes)", ev->payload_len - off);
    fputc('\n', f);
}

/* ---- --counts and --frame-names: what a second reader of the same file must agree with ---- */
typedef struct dump_count {
    const char *provider, *name; /* owned by the reader's metadata (alive until nt_close) */
    at_guid guid;
    uint32_t event_id;
    uint64_t n;
} dump_count;

typedef struct dump_tally {
    dump_count *c;
    size_t nc, capc;
    uint64_t *addr;   /* frame addresses; sorted and made unique when the array fills */
    size_t na, capa;
    uint32_t cpu[64]; /* capture processors seen (0xFFFFFFFF: unknown), with their counts */
    uint64_t ncpu_ev[64];
    uint32_t ncpu;
} dump_tally;

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void tally_unique(dump_tally *t)
{
    if (t->na == 0)
        return;
    qsort(t->addr, t->na, sizeof *t->addr, u64_cmp);
    size_t k = 0;
    for (size_t i = 0; i < t->na; i++)
        if (k == 0 || t->addr[k - 1] != t->addr[i])
            t->addr[k++] = t->addr[i];
    t->na = k;
}

static bool tally_event(dump_tally *t, const nt_event *ev)
{
    const nt_metadata *m = ev->meta;
    size_t i = 0;
    while (i < t->nc && (t->c[i].event_id != m->event_id || strcmp(t->c[i].provider, m->provider) != 0))
        i++;
    if (i == t->nc) {
        if (t->nc == t->capc) {
            size_t nc = t->capc ? 2 * t->capc : 32;
            dump_count *q = realloc(t->c, nc * sizeof *q);
            if (!q) return false;
            t->c = q;
            t->capc = nc;
        }
        t->c[t->nc++] = (dump_count){m->provider, m->name, m->provider_guid, m->event_id, 0};
    }
    t->c[i].n++;
    uint32_t j = 0;
    while (j < t->ncpu && t->cpu[j] != ev->proc) j++;
    if (j == t->ncpu && t->ncpu < 64) t->cpu[t->ncpu++] = ev->proc;
    if (j < t->ncpu) t->ncpu_ev[j]++;
    for (uint32_t k = 0; k < ev->nframes; k++) {
        if (t->na == t->capa) {
            tally_unique(t);
            if (t->na * 2 >= t->capa) {
                size_t nc = t->capa ? 2 * t->capa : 4096;
                uint64_t *q = realloc(t->addr, nc * sizeof *q);
                if (!q) return false;
                t->addr = q;
                t->capa = nc;
            }
        }
        t->addr[t->na++] = ev->frames[k];
    }
    return true;
}

static void tally_print(FILE *f, dump_tally *t, bool counts, bool frames, nt_symbolizer *sym, char *buf,
                        size_t buflen)
{
    if (counts)
        for (size_t i = 0; i < t->nc; i++) {
            char g[37];
            at_guid_format(&t->c[i].guid, g);
            fprintf(f, "count\t%s\t%s\t%u\t%llu\t%s\n", g, t->c[i].provider, t->c[i].event_id,
                    (unsigned long long)t->c[i].n, t->c[i].name);
        }
    if (counts)
        for (uint32_t i = 0; i < t->ncpu; i++) {
            if (t->cpu[i] == 0xFFFFFFFFu) fprintf(f, "cpu\tnone\t%llu\n", (unsigned long long)t->ncpu_ev[i]);
            else fprintf(f, "cpu\t%u\t%llu\n", t->cpu[i], (unsigned long long)t->ncpu_ev[i]);
        }
    if (frames) {
        tally_unique(t);
        /* each address named as stored, as TraceEvent looks it up: a call site (a call's last byte) or
         * a hooked entry + 1 names the same function either way, and a CPU sample's leaf (the
         * interrupted instruction, possibly a function's first byte) is named right only this way */
        for (size_t i = 0; i < t->na; i++) {
            const char *name = nt_sym_format_exact(sym, t->addr[i], buf, buflen);
            fprintf(f, "frame\t0x%llx\t%s\n", (unsigned long long)t->addr[i], strncmp(name, "0x", 2) == 0 ? "?" : name);
        }
    }
    free(t->c);
    free(t->addr);
}

int at_cmd_dump(int argc, char **argv)
{
    enum { O_NO_EVENTS = 256, O_NO_STACKS, O_NO_LINES, O_RAW_FRAMES, O_COUNTS, O_FRAME_NAMES };
    static const struct option opts[] = {{"no-events", no_argument, NULL, O_NO_EVENTS},
                                         {"no-stacks", no_argument, NULL, O_NO_STACKS},
                                         {"no-lines", no_argument, NULL, O_NO_LINES},
                                         {"raw-frames", no_argument, NULL, O_RAW_FRAMES},
                                         {"counts", no_argument, NULL, O_COUNTS},
                                         {"frame-names", no_argument, NULL, O_FRAME_NAMES},
                                         {0}};
    bool events = true, stacks = true, lines = true, raw = false, counts = false, frames = false;
    at_cli cli;
    at_cli_init(&cli, "dump", dump_usage, "", opts, argc, argv);
    int o;
    while ((o = at_cli_next(&cli)) > 0) {
        switch (o) {
        case O_NO_EVENTS: events = false; break;
        case O_NO_STACKS: stacks = false; break;
        case O_NO_LINES: lines = false; break;
        case O_RAW_FRAMES: raw = true; break;
        case O_COUNTS: counts = true; break;
        case O_FRAME_NAMES: frames = true; break;
        }
    }
    if (o == AT_CLI_EXIT) return cli.status;
    int nfiles;
    char **files = at_cli_operands(&cli, &nfiles);
    if (nfiles != 1) return at_cli_usage_error(&cli, nfiles ? "one FILE only" : "give the trace FILE");
    const char *path = files[0];
    int status = at_cli_check_inputs("dump", files, 1);
    if (status) return status;
    bool tally = counts || frames;
    if (tally)
        events = true; /* read every event, print none */
    FILE *out = stdout;
    char err[512];
    struct stat st;
    bool two_pass = strcmp(path, "-") != 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode);
    nt_options opt = {.problem = print_problem, .skip_events = !events, .ctx = out};

    if (two_pass) {
        /* pass 1: header and metadata only */
        nt_options o1 = {.skip_events = true, .on_metadata = NULL, .ctx = out};
        nt_reader *r = nt_open_ex(path, &o1, err, sizeof err);
        if (!r) {
            fprintf(stderr, "acttrace dump: %s\n", err);
            return 1;
        }
        print_header(out, path, nt_info(r));
        nt_event ev;
        int rc;
        while ((rc = nt_next(r, &ev)) == 1) {}
        fprintf(out, "metadata\n");
        for (size_t i = 0; i < nt_metadata_count(r); i++) {
            fputs("  ", out);
            print_meta(out, nt_metadata_at(r, i));
        }
        nt_close(r); /* an error here shows again, with its offset, in pass 2 */
    } else {
        opt.on_metadata = print_meta;
    }

    nt_reader *r = nt_open_ex(path, &opt, err, sizeof err);
    if (!r) {
        fprintf(stderr, "acttrace dump: %s\n", err);
        return 1;
    }
    const nt_trace_info *in = nt_info(r);
    if (!two_pass) {
        print_header(out, path, in);
        fprintf(out, "metadata (listed where defined)\n");
    }
    if (events && !tally) fprintf(out, "events (ms from sync time)\n");
    size_t buflen = 64 * 1024;
    char *buf = malloc(buflen);
    if (!buf) {
        nt_close(r);
        fprintf(stderr, "acttrace dump: out of memory\n");
        return 1;
    }
    /* --frame-names: as written (a second reader shows names as given) and whole-function */
    nt_sym_options so = tally ? (nt_sym_options){.no_offset = true}
                              : (nt_sym_options){.lines = lines, .demangle = true};
    nt_symbolizer *sym = raw ? NULL : nt_sym_new(&so);
    dump_tally t = {0};
    nt_event ev;
    int rc;
    while ((rc = nt_next(r, &ev)) == 1) {
        nt_sym_observe(sym, &ev);
        if (tally) {
            if (!tally_event(&t, &ev)) {
                fprintf(stderr, "acttrace dump: out of memory\n");
                rc = -2;
                break;
            }
        } else if (events) {
            print_event(out, in, &ev, stacks, sym, buf, buflen);
        }
    }
    /* named after the whole file is read, as TraceEvent applies symbols */
    if (tally && rc != -2) tally_print(out, &t, counts, frames, sym, buf, buflen);
    if (rc == -2) {
        free(t.c);
        free(t.addr);
        nt_sym_free(sym);
        free(buf);
        nt_close(r);
        return 1;
    }
    nt_sym_free(sym);
    free(buf);
    const nt_counts *c = nt_get_counts(r);
    fprintf(out, "summary\n");
    fprintf(out, "  events %llu, metadata %llu\n", (unsigned long long)c->events, (unsigned long long)c->metadata);
    fprintf(out, "  blocks: EventBlock %llu, MetadataBlock %llu, StackBlock %llu, SPBlock %llu\n",
            (unsigned long long)c->event_blocks, (unsigned long long)c->metadata_blocks,
            (unsigned long long)c->stack_blocks, (unsigned long long)c->sp_blocks);
    if (c->events) {
        double freq = in->qpc_freq > 0 ? (double)in->qpc_freq : 1.0;
        fprintf(out, "  first %.6f ms, last %.6f ms\n",
                (double)((__int128)c->first_ts - in->sync_time_qpc) * 1000.0 / freq,
                (double)((__int128)c->last_ts - in->sync_time_qpc) * 1000.0 / freq);
    }
    fprintf(out, "  events lost %llu\n", (unsigned long long)c->events_lost);
    if (counts) /* the part TraceEvent cannot count (ntreader.h) */
        fprintf(out, "lost-before-first\t%llu\n", (unsigned long long)c->events_lost_first);
    const nt_damage *d = nt_get_damage(r);
    if (d) {
        fflush(out);
        if (d->kind == NT_DAMAGE_TORN)
            fprintf(stderr, "acttrace dump: %s: %s\n", path, d->text);
        else if (d->file_size) /* as the analysis commands say it */
            fprintf(stderr, "acttrace dump: damaged file: the dump covers its first %llu of %llu bytes (%llu events); %s\n",
                    (unsigned long long)d->offset, (unsigned long long)d->file_size,
                    (unsigned long long)d->events_before, d->text);
        else
            fprintf(stderr, "acttrace dump: damaged input: the dump covers its first %llu bytes (%llu events); %s\n",
                    (unsigned long long)d->offset, (unsigned long long)d->events_before, d->text);
        status = 3;
    } else if (rc < 0) {
        fflush(out);
        fprintf(stderr, "acttrace dump: %s\n", nt_error(r));
        status = 1;
    }
    if (c->events_lost) {
        fflush(out);
        fprintf(stderr, "acttrace dump: %llu events lost by the writer (full buffers or a failed write)\n",
                (unsigned long long)c->events_lost);
    }
    nt_close(r);
    return status;
}
