/* actpath_decode.c: the decoding half of the activity-path codec (actpath.h): recognising a path GUID
 * by its checksum, and printing it either exactly as PerfView does ("/#pid/1/5/1/", quirks included)
 * or in EventSource notation ("//1/5/1"), which decodes what the runtime's encoder really wrote.
 * The encoder (at_actpath_add_id) lives in actpath.c. */
#include "actpath.h"
#include "guid.h"

#include <stdio.h>
#include <string.h>

#define AT_ACTPATH_MAGIC 0x599D99ADu

static void words(const at_guid *g, uint32_t u[4])
{
    for (int i = 0; i < 4; i++)
        u[i] = (uint32_t)g->b[4 * i] | (uint32_t)g->b[4 * i + 1] << 8 | (uint32_t)g->b[4 * i + 2] << 16 |
               (uint32_t)g->b[4 * i + 3] << 24;
}

bool at_actpath_is_path(const at_guid *g, uint32_t pid)
{
    uint32_t u[4];
    words(g, u);
    uint32_t sum = u[0] + u[1] + u[2] + AT_ACTPATH_MAGIC;
    if (pid == 0) /* pid unknown: a pid < 2^20 leaves the top 12 bits of the checksum untouched */
        return (sum & 0xFFF00000u) == (u[3] & 0xFFF00000u);
    return (sum ^ pid) == u[3] || sum == u[3];
}

uint32_t at_actpath_pid(const at_guid *g)
{
    uint32_t u[4];
    words(g, u);
    return (u[0] + u[1] + u[2] + AT_ACTPATH_MAGIC) ^ u[3];
}

/* Bounded appender: remembers overflow instead of writing past n. */
typedef struct sbuf {
    char *p;
    size_t n, len;
    bool full;
} sbuf;

/* sep then v in decimal; no printf: the analysis commands decode an id per activity */
static void sb_put(sbuf *s, char sep, uint32_t v)
{
    char tmp[16];
    int k = 16;
    do tmp[--k] = (char)('0' + v % 10);
    while ((v /= 10));
    tmp[--k] = sep;
    size_t len = (size_t)(16 - k);
    if (s->len + len + 1 > s->n) {
        s->full = true;
        return;
    }
    memcpy(s->p + s->len, tmp + k, len);
    s->len += len;
    s->p[s->len] = 0;
}

static void sb_str(sbuf *s, const char *str)
{
    size_t k = strlen(str);
    if (s->len + k + 1 > s->n) {
        s->full = true;
        return;
    }
    memcpy(s->p + s->len, str, k + 1);
    s->len += k;
}

int at_actpath_format_perfview(const at_guid *g, char *buf, size_t n)
{
    sbuf s = {buf, n, 0, n == 0};
    if (n) buf[0] = 0;
    if (!at_actpath_is_path(g, 0)) { /* PerfView shows such a GUID as a GUID */
        char t[37];
        at_guid_format(g, t);
        sb_str(&s, t);
        return s.full ? -1 : (int)s.len;
    }
    uint32_t pid = at_actpath_pid(g);
    if (pid != 0) {
        char t[24];
        snprintf(t, sizeof t, "/#%u", pid);
        sb_str(&s, t);
    } else {
        sb_str(&s, "/");
    }
    /* A faithful port of PerfView's CreateActivityPathString walk, including where it differs from the
     * encoder (an overflow id whose 0xB prefix sits in a high nibble keeps the size nibble as the top
     * bits of the value; a low-half size nibble of a 1-byte id drops its value nibble). */
    const uint8_t *p = g->b, *end = g->b + AT_ACTPATH_END;
    char sep = '/';
    while (p < end) {
        uint32_t nib = *p >> 4;
        bool second = false;
    next_nibble:
        if (nib == 0) break;
        if (nib <= 0xA) {
            sb_put(&s, '/', nib);
            if (!second) {
                nib = *p & 0xF;
                second = true;
                goto next_nibble;
            }
            p++;
            continue;
        } else if (nib == 0xB) {
            if (!second) {
                nib = *p & 0xF;
            } else {
                p++;
                if (p >= end) break;
                nib = *p >> 4;
            }
            if (nib < 0xC) { /* undefined: PerfView gives up and shows the GUID */
                char t[37];
                at_guid_format(g, t);
                s.len = 0;
                if (n) buf[0] = 0;
                s.full = n == 0;
                sb_str(&s, t);
                return s.full ? -1 : (int)s.len;
            }
            sep = '$';
        }
        uint32_t nbytes = nib - 0xC + 1;
        uint32_t value = 0;
        if (!second) value = *p & 0xF;
        p++;
        if (p + nbytes > end) break;
        for (int i = (int)nbytes - 1; i >= 0; i--) value = (value << 8) + p[i];
        sb_put(&s, sep, value);
        p += nbytes;
    }
    sb_str(&s, "/");
    return s.full ? -1 : (int)s.len;
}

/* Nibble cursor over bytes 0..11: index k = byte k/2, high half first. */
static uint32_t nib_at(const at_guid *g, int k) { return k & 1 ? g->b[k / 2] & 0xF : g->b[k / 2] >> 4; }

/* The ids of path g (pid: its process) in order, with the separator each is printed after ('/', or
 * '$' for the overflow form): how many, at most max, or -1 when g is not a path. Decodes what the
 * runtime's AddIdToGuid writes: immediate nibbles 1..10, size codes 0xC..0xF followed by whole
 * bytes (a size code in a high half carries the top 4 bits of the value), the 0xB overflow prefix;
 * a size code in a high half of an id below 4096 is 0xC, the id's top 4 bits in the low half, and
 * one byte. */
static int decode_ids(const at_guid *g, uint32_t pid, char *seps, uint32_t *vals, int max)
{
    if (!at_actpath_is_path(g, pid)) return -1;
    const int nend = 2 * AT_ACTPATH_END;
    int k = 0, n = 0;
    while (k < nend && n < max) {
        uint32_t nib = nib_at(g, k);
        if (nib == 0) break;
        char sep = '/';
        if (nib <= 0xA) {
            seps[n] = '/';
            vals[n++] = nib;
            k++;
            continue;
        }
        if (nib == 0xB) {
            k++;
            if (k >= nend) break;
            nib = nib_at(g, k);
            if (nib < 0xC) return -1; /* not something the encoder writes */
            sep = '$';
        }
        uint32_t nbytes = nib - 0xC + 1;
        uint32_t value = 0;
        bool code_high = (k & 1) == 0;
        if (code_high) {
            /* a 1-byte code in a high half carries the top 4 bits of its value in the low half */
            value = g->b[k / 2] & 0xF;
            k += 2;
        } else {
            k += 1;
        }
        int byte = k / 2;
        if (byte + (int)nbytes > AT_ACTPATH_END) break;
        for (int i = (int)nbytes - 1; i >= 0; i--) value = (value << 8) + g->b[byte + i];
        k += 2 * (int)nbytes;
        seps[n] = sep;
        vals[n++] = value;
    }
    return n;
}

#define MAX_IDS (2 * AT_ACTPATH_END) /* a nibble each at most */

int at_actpath_format(const at_guid *g, uint32_t pid, char *buf, size_t n)
{
    if (n) buf[0] = 0;
    char seps[MAX_IDS];
    uint32_t vals[MAX_IDS];
    int ids = decode_ids(g, pid, seps, vals, MAX_IDS);
    if (ids < 0) return -1;
    sbuf s = {buf, n, 0, n == 0};
    sb_str(&s, "/");
    for (int i = 0; i < ids; i++) sb_put(&s, seps[i], vals[i]);
    if (ids == 0) sb_str(&s, "/");
    return s.full ? -1 : (int)s.len;
}

bool at_actpath_within(const at_guid *inner, const at_guid *outer)
{
    char si[MAX_IDS], so[MAX_IDS];
    uint32_t vi[MAX_IDS], vo[MAX_IDS];
    int ni = decode_ids(inner, at_actpath_pid(inner), si, vi, MAX_IDS);
    int no = decode_ids(outer, at_actpath_pid(outer), so, vo, MAX_IDS);
    if (ni < 0 || no < 0) return false;
    if (no == 0) return ni == 0; /* "//" is no other path's start */
    if (ni < no) return false;
    for (int i = 0; i < no; i++)
        if (si[i] != so[i] || vi[i] != vo[i]) return false;
    return ni == no || si[no] == '/';
}
