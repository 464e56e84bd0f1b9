/* actpath.h: the activity-path codec: EventSource ActivityTracker's encoding of a path such as
 * //1/5/1 into a GUID (AddIdToGuid/WriteNibble, checksum XOR pid), and the PerfView-style decoder.
 * Byte-identical to the runtime; ../shared/activity-path-vectors.tsv is the oracle. */
#ifndef AT_ACTPATH_H
#define AT_ACTPATH_H

#include "at_common.h"

#define AT_ACTPATH_END 12    /* bytes 0..11 hold the path, 12..15 the checksum */
#define AT_ACTPATH_NOFIT 13  /* add_id result when the id did not fit */

/* Append id to the path in g starting at byte offset where. Returns the new offset or
 * AT_ACTPATH_NOFIT. Recomputes the checksum with pid. overflow: write the '$' overflow form. */
int at_actpath_add_id(at_guid *g, int where, uint32_t id, bool overflow, uint32_t pid);
/* Is g an activity-path GUID for pid (new style: checksum ^ pid, or old style)? */
bool at_actpath_is_path(const at_guid *g, uint32_t pid);
/* The pid encoded in a path GUID's checksum. */
uint32_t at_actpath_pid(const at_guid *g);
/* Decode as PerfView does: "/#<pid>/1/5/1/". Returns length or -1 if buf too small. */
int at_actpath_format_perfview(const at_guid *g, char *buf, size_t n);
/* Decode in EventSource notation: "//1/5/1" (overflow ids shown with '$'). -1 if not a path. */
int at_actpath_format(const at_guid *g, uint32_t pid, char *buf, size_t n);
/* Is inner's path outer's, or below it, as their at_actpath_format strings (each with its own pid)
 * say: outer's string a prefix of inner's ending where an id ends, before a '/'. No string made. */
bool at_actpath_within(const at_guid *inner, const at_guid *outer);

/* *out = *parent with id appended at where (at_actpath_add_id's result, never overflow form): one
 * pass in registers for the shapes a Start makes, the general encoder otherwise. out and parent
 * must not overlap. Inline: every Start makes one. From where <= 7 on at most 5 bytes are appended,
 * so nothing can overflow, no byte is tested against the end, and the checksum is summed once from
 * the words (no byte stores read back: a wide load of narrow stores stalls store forwarding, ~5 ns
 * per id). The bytes after the path are zero (a path only grows), so new bytes are ORed in. */
static inline int at_actpath_child_near(at_guid *out, const at_guid *parent, int where,
                                        uint32_t id, uint32_t pid);
static inline int at_actpath_child(at_guid *out, const at_guid *parent, int where, uint32_t id,
                                   uint32_t pid)
{
    if (AT_UNLIKELY((unsigned)where > 7)) {
        *out = *parent;
        return at_actpath_add_id(out, where, id, false, pid);
    }
    return at_actpath_child_near(out, parent, where, id, pid);
}

/* at_actpath_child for where <= 7, without a call. */
static inline int at_actpath_child_near(at_guid *out, const at_guid *parent, int where,
                                        uint32_t id, uint32_t pid)
{
    uint64_t lo, hi;
    __builtin_memcpy(&lo, parent->b, 8);
    __builtin_memcpy(&hi, parent->b + 8, 8);
    hi &= 0xFFFFFFFFu; /* the path's bytes 8..11, not the old checksum */
    unsigned p = (unsigned)where;
    bool started = ((lo >> (8 * p)) & 0xFF) != 0;
    if (id - 1 < 10) { /* 1..10: a nibble */
        lo |= (uint64_t)(started ? id : id << 4) << (8 * p);
        p += started;
    } else {
        unsigned len = (unsigned)(39 - __builtin_clz(id | 1)) >> 3; /* bytes of id, 1 for 0 */
        uint64_t code = 0xC + (uint64_t)len - 1; /* the byte (or half) that goes to p */
        if (started) {
            /* the length code in the low half; the next byte is unused: no 4096 quirk */
        } else if (id < 4096) {
            /* the length code went into a high half: at_actpath_add_id's 1-byte code */
            code = 0xC0 + (id >> 8);
            len = 1;
            id &= 0xFF;
        } else {
            code <<= 4;
        }
        lo |= code << (8 * p);
        p++; /* 1..8: id's len bytes from there end by byte 11 */
        if (p < 8) {
            lo |= (uint64_t)id << (8 * p);
            if (p > 4)
                hi |= (uint64_t)id >> (64 - 8 * p);
        } else {
            hi |= id;
        }
        p += len;
    }
    uint32_t sum = (uint32_t)lo + (uint32_t)(lo >> 32) + (uint32_t)hi;
    uint64_t check = (uint32_t)((sum + 0x599D99ADu) ^ pid);
    hi = (uint32_t)hi | check << 32;
    __builtin_memcpy(out->b, &lo, 8);
    __builtin_memcpy(out->b + 8, &hi, 8);
    return (int)p;
}

#endif
