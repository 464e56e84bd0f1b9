/* actpath.c: the encoding half of the activity-path codec: appends an id to a path GUID exactly as
 * .NET's ActivityTracker does (AddIdToGuid/WriteNibble), quirks included, so our ids are
 * byte-identical to the runtime's and PerfView decodes them. Decoding is in actpath_decode.c. */
#include "actpath.h"

#include <string.h>

/* The checksum is a sum of the path's three 32-bit words, a linear function of its bytes: each byte
 * store adds its change to a running sum, so the checksum never reloads the words just written
 * byte by byte (a wide load of narrow stores stalls store forwarding: ~5 ns per id). */
typedef struct path_w {
    uint8_t *b;
    uint32_t sum; /* b's words 0..2 summed, as of the stores made through put */
} path_w;

static inline void put(path_w *w, int i, uint8_t v)
{
    if (i < AT_ACTPATH_END)
        w->sum += ((uint32_t)v - w->b[i]) << (8 * (i & 3));
    w->b[i] = v;
}

/* A nibble goes into the high half of an unused (zero) byte, or into the low half of a started one;
 * the offset only advances once a byte is full. Relies on 0 meaning "unused". */
static inline void write_nibble(path_w *w, int *p, uint32_t v)
{
    if (w->b[*p] != 0) {
        put(w, *p, (uint8_t)(w->b[*p] | v));
        (*p)++;
    } else {
        put(w, *p, (uint8_t)(v << 4));
    }
}

int at_actpath_add_id(at_guid *g, int where, uint32_t id, bool overflow, uint32_t pid)
{
    uint8_t *b = g->b;
    int p = where;
    if (p >= AT_ACTPATH_END)
        return AT_ACTPATH_NOFIT;
    uint32_t u[3];
    memcpy(u, b, 12); /* before any byte is stored */
    path_w w = {.b = b, .sum = u[0] + u[1] + u[2]};
    if (id > 0 && id <= 10 && !overflow) {
        write_nibble(&w, &p, id);
    } else {
        int len = id <= 0xFF ? 1 : id <= 0xFFFF ? 2 : id <= 0xFFFFFF ? 3 : 4;
        if (overflow) {
            if (p + 2 >= AT_ACTPATH_END)
                return AT_ACTPATH_NOFIT;
            write_nibble(&w, &p, 0xB);
        }
        write_nibble(&w, &p, 0xC + (uint32_t)len - 1);
        /* The length code went into a high half: an id below 4096 becomes a 1-byte code whose low
         * half holds the top 4 bits, and one byte fewer follows (what the .NET 10 runtime writes,
         * tests/liveids). For 11..255 the runtime writes no byte at all, so siblings 11..255
         * share one id; we keep that byte (PerfView decodes it as the same C code) so ids stay unique. */
        if (p < AT_ACTPATH_END && b[p] != 0) {
            if (id < 4096) {
                put(&w, p, (uint8_t)(0xC0 + (id >> 8)));
                if (id > 0xFF)
                    len--;
                id &= 0xFF;
            }
            p++;
        }
        for (int i = 0; i < len; i++) {
            if (p >= AT_ACTPATH_END) {
                p++;
                break;
            }
            put(&w, p++, (uint8_t)(id & 0xFF));
            id >>= 8;
        }
    }
    if (p > AT_ACTPATH_END)
        return AT_ACTPATH_NOFIT;
    uint32_t check = (w.sum + 0x599D99ADu) ^ pid;
    memcpy(b + AT_ACTPATH_END, &check, 4);
    return p;
}
