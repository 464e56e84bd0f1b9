/* fuzz_reader.c: libFuzzer target for the nettrace reader: any input must end in a clean parse or
 * one error naming an offset inside the input, in both the plain and the strict (verify) mode, with
 * every returned event's payload, stack and fields readable, and the symbolizer fed with every event
 * names every frame. Built by `make fuzz`. */
#include "ntreader.h"
#include "ntsym.h"

#include <stdlib.h>
#include <string.h>

static void on_problem(void *ctx, uint64_t off, const char *msg)
{
    (void)msg;
    if (off > *(const size_t *)ctx) abort();
}

static void read_all(const uint8_t *data, size_t size, bool strict)
{
    /* the symbolizer reads Universal.System payloads from the same input (no libdw: paths are input) */
    nt_sym_options so = {.lines = false, .demangle = true};
    nt_symbolizer *sym = strict ? NULL : nt_sym_new(&so);
    nt_options opt = {.strict = strict, .problem = on_problem, .ctx = &size};
    char err[512];
    nt_reader *r = nt_open_mem(data, size, &opt, err, sizeof err);
    if (!r) {
        if (!strstr(err, "offset ")) abort();
        nt_sym_free(sym);
        return;
    }
    nt_event ev;
    int rc;
    size_t n = 0;
    while ((rc = nt_next(r, &ev)) == 1) {
        if (++n > size) abort(); /* each event takes bytes: more events than bytes is a loop */
        volatile uint64_t sink = 0;
        for (uint32_t i = 0; i < ev.payload_len; i++) sink += ev.payload[i];
        for (uint32_t i = 0; i < ev.nframes; i++) sink += ev.frames[i];
        char buf[256];
        nt_sym_observe(sym, &ev);
        for (uint32_t i = 0; i < ev.nframes && sym; i++)
            if (strlen(nt_sym_format(sym, ev.frames[i], buf, sizeof buf)) >= sizeof buf) abort();
        uint32_t off = 0;
        for (uint32_t i = 0; i < ev.meta->nfields; i++)
            if (!nt_field_format(&ev.meta->fields[i], ev.payload, ev.payload_len, &off, buf, sizeof buf)) break;
        if (off > ev.payload_len) abort();
    }
    if (rc < 0) {
        const char *p = strstr(nt_error(r), "offset ");
        if (!p || strtoull(p + 7, NULL, 10) > size) abort();
    }
    for (size_t i = 0; i < nt_thread_count(r); i++)
        if (!nt_thread_at(r, i)) abort();
    nt_sym_free(sym);
    nt_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    read_all(data, size, false);
    read_all(data, size, true);
    return 0;
}
