/* traceids.h: the W3C trace context ids of activities, as the OTLP export names its spans
 * (tools/cmd_otlp.c) and the shim writes them into the traceparent headers it adds
 * (shim/fdflow.c): one function for both, so a downstream service's spans hang under the span the
 * export makes of the activity that sent the request. */
#ifndef AT_TRACEIDS_H
#define AT_TRACEIDS_H

#include <stdint.h>
#include <string.h>

#include "guid.h"

static inline uint64_t at_tid_fnv64(const void *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h ? h : 1;
}

static inline void at_tid_hex(char *out, const uint8_t *p, size_t n)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[p[i] >> 4];
        out[2 * i + 1] = d[p[i] & 15];
    }
    out[2 * n] = 0;
}

/* an activity's span id: FNV-1a-64 of its id, 16 lowercase hex digits */
static inline void at_span_id_hex(const at_guid *g, char out[17])
{
    uint64_t h = at_tid_fnv64(g, sizeof *g);
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(h >> (56 - 8 * i));
    at_tid_hex(out, b, 8);
}

/* the trace id of a tree whose root has id g: 16 bytes that look random to a backend that samples
 * by trace id (two hashes of the root's id), 32 lowercase hex digits */
static inline void at_trace_id_hex(const at_guid *g, char out[33])
{
    uint64_t h1 = at_tid_fnv64(g, sizeof *g);
    uint8_t salted[sizeof *g + 1];
    memcpy(salted, g, sizeof *g);
    salted[sizeof *g] = 0x5a;
    uint64_t h2 = at_tid_fnv64(salted, sizeof salted);
    uint8_t b[16];
    for (int i = 0; i < 8; i++) {
        b[i] = (uint8_t)(h1 >> (56 - 8 * i));
        b[8 + i] = (uint8_t)(h2 >> (56 - 8 * i));
    }
    at_tid_hex(out, b, 16);
}

#endif
