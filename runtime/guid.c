/* guid.c: GUID text form (.NET "D" format) and the provider GUID TraceEvent derives from an
 * EventSource name (RFC 4122 name-based v5 over a fixed namespace, SHA-1). The SHA-1 here is a
 * small private implementation: it only ever hashes short provider names, never on a hot path. */
#include "guid.h"

#include <string.h>

/* ---- SHA-1 (FIPS 180-4) ---- */

typedef struct at_sha1 {
    uint32_t h[5];
    uint64_t len;       /* bytes hashed so far */
    uint8_t block[64];
    size_t fill;
} at_sha1;

static uint32_t rol32(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void sha1_compress(at_sha1 *s, const uint8_t *p)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
               p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) { f = (b & c) | (~b & d); k = 0x5A827999; }
        else if (i < 40) { f = b ^ c ^ d; k = 0x6ED9EBA1; }
        else if (i < 60) { f = (b & c) | (b & d) | (c & d); k = 0x8F1BBCDC; }
        else { f = b ^ c ^ d; k = 0xCA62C1D6; }
        uint32_t t = rol32(a, 5) + f + e + k + w[i];
        e = d; d = c; c = rol32(b, 30); b = a; a = t;
    }
    s->h[0] += a; s->h[1] += b; s->h[2] += c; s->h[3] += d; s->h[4] += e;
}

static void sha1_init(at_sha1 *s)
{
    static const uint32_t iv[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
    memcpy(s->h, iv, sizeof iv);
    s->len = 0;
    s->fill = 0;
}

static void sha1_update(at_sha1 *s, const uint8_t *p, size_t n)
{
    s->len += n;
    while (n > 0) {
        size_t take = 64 - s->fill;
        if (take > n) take = n;
        memcpy(s->block + s->fill, p, take);
        s->fill += take;
        p += take;
        n -= take;
        if (s->fill == 64) {
            sha1_compress(s, s->block);
            s->fill = 0;
        }
    }
}

static void sha1_final(at_sha1 *s, uint8_t out[20])
{
    uint64_t bits = s->len * 8;
    uint8_t pad = 0x80;
    sha1_update(s, &pad, 1);
    pad = 0;
    while (s->fill != 56) sha1_update(s, &pad, 1);
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)(bits >> (56 - 8 * i));
    sha1_update(s, lenb, 8);
    for (int i = 0; i < 5; i++) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

/* ---- text form ---- */

void at_guid_format(const at_guid *g, char out[37])
{
    static const char hex[] = "0123456789abcdef";
    /* Data1, Data2, Data3 are little-endian in memory; Data4 is a byte array. */
    static const int order[16] = {3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15};
    int o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
        uint8_t b = g->b[order[i]];
        out[o++] = hex[b >> 4];
        out[o++] = hex[b & 15];
    }
    out[o] = 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

bool at_guid_parse(const char *s, at_guid *g)
{
    static const int order[16] = {3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15};
    bool braces = s[0] == '{';
    if (braces) s++;
    int i = 0;
    for (int k = 0; k < 16; k++) {
        if (k == 4 || k == 6 || k == 8 || k == 10) {
            if (s[i] != '-') return false;
            i++;
        }
        int hi = hexval(s[i]), lo = hi < 0 ? -1 : hexval(s[i + 1]);
        if (hi < 0 || lo < 0) return false;
        g->b[order[k]] = (uint8_t)(hi << 4 | lo);
        i += 2;
    }
    if (braces) {
        if (s[i] != '}') return false;
        i++;
    }
    return s[i] == 0;
}

/* ---- provider GUID from name ---- */

/* Decode one UTF-8 sequence; invalid bytes map to U+FFFD and advance one byte. */
static uint32_t utf8_next(const unsigned char **pp)
{
    const unsigned char *p = *pp;
    uint32_t c = p[0];
    int n = 0;
    if (c < 0x80) n = 0;
    else if ((c & 0xE0) == 0xC0) { c &= 0x1F; n = 1; }
    else if ((c & 0xF0) == 0xE0) { c &= 0x0F; n = 2; }
    else if ((c & 0xF8) == 0xF0) { c &= 0x07; n = 3; }
    else { *pp = p + 1; return 0xFFFD; }
    for (int i = 1; i <= n; i++) {
        if ((p[i] & 0xC0) != 0x80) { *pp = p + 1; return 0xFFFD; }
        c = c << 6 | (p[i] & 0x3F);
    }
    *pp = p + 1 + n;
    return c;
}

/* ToUpperInvariant for the ranges provider names use (ASCII and Latin-1). */
static uint32_t upper_invariant(uint32_t c)
{
    if (c >= 'a' && c <= 'z') return c - 32;
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
    if (c == 0xFF) return 0x178;
    return c;
}

void at_guid_from_provider_name(const char *name, at_guid *out)
{
    /* EventSource's namespace GUID 482C2DB2-C390-47C8-87F8-1A15BFC130FB, hashed as big-endian bytes. */
    static const uint8_t ns[16] = {0x48, 0x2C, 0x2D, 0xB2, 0xC3, 0x90, 0x47, 0xC8,
                                   0x87, 0xF8, 0x1A, 0x15, 0xBF, 0xC1, 0x30, 0xFB};
    at_sha1 s;
    sha1_init(&s);
    sha1_update(&s, ns, sizeof ns);
    const unsigned char *p = (const unsigned char *)name;
    while (*p) {
        uint32_t c = upper_invariant(utf8_next(&p));
        uint8_t be[4];
        if (c >= 0x10000) { /* surrogate pair, each unit big-endian */
            c -= 0x10000;
            uint16_t hi = (uint16_t)(0xD800 + (c >> 10)), lo = (uint16_t)(0xDC00 + (c & 0x3FF));
            be[0] = (uint8_t)(hi >> 8); be[1] = (uint8_t)hi; be[2] = (uint8_t)(lo >> 8); be[3] = (uint8_t)lo;
            sha1_update(&s, be, 4);
        } else {
            be[0] = (uint8_t)(c >> 8); be[1] = (uint8_t)c;
            sha1_update(&s, be, 2);
        }
    }
    uint8_t h[20];
    sha1_final(&s, h);
    /* The first 16 hash bytes become the Guid's byte array (.NET memory order); version 5 nibble. */
    h[7] = (uint8_t)((h[7] & 0x0F) | 0x50);
    memcpy(out->b, h, 16);
}
