/* actpath.c: the encoding half of the activity-path codec: appends an id to a path GUID exactly as
 * .NET's ActivityTracker does (AddIdToGuid/WriteNibble), quirks included, so our ids are
 * byte-identical to the runtime's and PerfView decodes them. Decoding is in actpath_decode.c. */
#include "actpath.h"

#include <string.h>

/* A nibble goes into the high half of an unused (zero) byte, or into the low half of a started one;
 * the offset only advances once a byte is full. Relies on 0 meaning "unused". */
static void write_nibble(uint8_t *g, int *p, uint32_t v)
{
    if (g[*p] != 0) {
        g[*p] |= (uint8_t)v;
        (*p)++;
    } else {
        g[*p] = (uint8_t)(v << 4);
    }
}

static void seal(at_guid *g, uint32_t pid)
{
    uint32_t u[4];
    memcpy(u, g->b, 16);
    u[3] = (u[0] + u[1] + u[2] + 0x599D99ADu) ^ pid;
    memcpy(g->b + 12, &u[3], 4);
}

int at_actpath_add_id(at_guid *g, int where, uint32_t id, bool overflow, uint32_t pid)
{
    uint8_t *b = g->b;
    int p = where;
    if (p >= AT_ACTPATH_END)
        return AT_ACTPATH_NOFIT;
    if (id > 0 && id <= 10 && !overflow) {
        write_nibble(b, &p, id);
    } else {
        int len = id <= 0xFF ? 1 : id <= 0xFFFF ? 2 : id <= 0xFFFFFF ? 3 : 4;
        if (overflow) {
            if (p + 2 >= AT_ACTPATH_END)
                return AT_ACTPATH_NOFIT;
            write_nibble(b, &p, 0xB);
        }
        write_nibble(b, &p, 0xC + (uint32_t)len - 1);
        /* The length code went into a high half: the runtime reuses the low half for the top 4 bits
         * of a 1-byte-plus-nibble value, but keeps len (the extra 0x00 byte of the 4095 quirk). */
        if (p < AT_ACTPATH_END && b[p] != 0) {
            if (id < 4096) {
                b[p] = (uint8_t)(0xC0 + (id >> 8));
                id &= 0xFF;
            }
            p++;
        }
        for (int i = 0; i < len; i++) {
            if (p >= AT_ACTPATH_END) {
                p++;
                break;
            }
            b[p++] = (uint8_t)(id & 0xFF);
            id >>= 8;
        }
    }
    if (p > AT_ACTPATH_END)
        return AT_ACTPATH_NOFIT;
    seal(g, pid);
    return p;
}
