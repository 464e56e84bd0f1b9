/* payload.c: building event payloads into a caller's buffer (little-endian fields, UTF-16LE strings),
 * bounded: a field that does not fit sets overflow and is left out whole. */
#include <string.h>
#include "saferead.h"
#include "trace.h"

AT_PATH_ACT void at_payload_u32(at_payload *pl, uint32_t v) { at_payload_put(pl, &v, 4); }
AT_PATH_ACT void at_payload_u64(at_payload *pl, uint64_t v) { at_payload_put(pl, &v, 8); }
AT_PATH_ACT void at_payload_i32(at_payload *pl, int32_t v) { at_payload_put(pl, &v, 4); }
AT_PATH_ACT void at_payload_i64(at_payload *pl, int64_t v) { at_payload_put(pl, &v, 8); }
AT_PATH_ACT void at_payload_guid(at_payload *pl, const at_guid *g)
{
    static const at_guid zero;
    at_payload_put(pl, g ? g : &zero, 16);
}

/* Decode one UTF-8 sequence at s; returns its length (>= 1) and the code point in *cp (U+FFFD for
 * anything invalid: overlongs, surrogates, truncated sequences, > U+10FFFF). */
static size_t utf8_next(const unsigned char *s, uint32_t *cp)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t n;
    uint32_t v, min;
    if ((c & 0xE0) == 0xC0) { n = 2; v = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { n = 3; v = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { n = 4; v = c & 0x07; min = 0x10000; }
    else { *cp = 0xFFFD; return 1; }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) { /* also stops at the NUL */
            *cp = 0xFFFD;
            return i;
        }
        v = (v << 6) | (s[i] & 0x3F);
    }
    /* U+FFFF never comes out: it marks the shim's note on an unreadable string (see trace.h) */
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF) || v == 0xFFFF)
        v = 0xFFFD;
    *cp = v;
    return n;
}

/* The string at s as UTF-16 code units, then (bad != 0) the note AT_PAYLOAD_UNREADABLE
 * "<unreadable 0xADDR>", then the NUL. Left out whole when it does not fit. */
static void put_str(at_payload *pl, const char *s, size_t max_chars, uintptr_t bad)
{
    if (pl->overflow)
        return;
    uint8_t *start = pl->p;
    size_t units = 0;
    const unsigned char *u = (const unsigned char *)(s ? s : "");
    while (*u) {
        uint32_t cp;
        size_t n = utf8_next(u, &cp);
        uint16_t w[2];
        size_t nw;
        if (cp >= 0x10000) {
            cp -= 0x10000;
            w[0] = (uint16_t)(0xD800 + (cp >> 10));
            w[1] = (uint16_t)(0xDC00 + (cp & 0x3FF));
            nw = 2;
        } else {
            w[0] = (uint16_t)cp;
            nw = 1;
        }
        if (units + nw > max_chars)
            break; /* never split a surrogate pair */
        if ((size_t)(pl->end - pl->p) < nw * 2 + 2) {
            pl->p = start; /* the string does not fit with its NUL: leave it out whole */
            pl->overflow = true;
            return;
        }
        memcpy(pl->p, w, nw * 2);
        pl->p += nw * 2;
        units += nw;
        u += n;
    }
    if (bad) {
        /* "unchecked" when the kernel would not copy at all: the memory may well be readable */
        bool denied = at_saferead_denied();
        char note[40];
        const char *word = denied ? "<unchecked 0x" : "<unreadable 0x";
        size_t k = strlen(word);
        memcpy(note, word, k);
        int shift = 60;
        while (shift > 0 && !((bad >> shift) & 0xF))
            shift -= 4;
        for (; shift >= 0; shift -= 4)
            note[k++] = "0123456789abcdef"[(bad >> shift) & 0xF];
        note[k++] = '>';
        if ((size_t)(pl->end - pl->p) < 2 * (k + 1) + 2) {
            pl->p = start;
            pl->overflow = true;
            return;
        }
        uint16_t w = AT_PAYLOAD_UNREADABLE;
        memcpy(pl->p, &w, 2);
        pl->p += 2;
        for (size_t i = 0; i < k; i++) {
            w = (uint16_t)note[i];
            memcpy(pl->p, &w, 2);
            pl->p += 2;
        }
    }
    if ((size_t)(pl->end - pl->p) < 2) {
        pl->p = start;
        pl->overflow = true;
        return;
    }
    pl->p[0] = pl->p[1] = 0;
    pl->p += 2;
}

AT_PATH_EVENT void at_payload_str(at_payload *pl, const char *s, size_t max_chars)
{
    put_str(pl, s, max_chars, 0);
}

void at_payload_str_safe(at_payload *pl, const char *s, size_t max_chars)
{
    if (!s || pl->overflow) {
        put_str(pl, NULL, max_chars, 0);
        return;
    }
    /* at most 3 bytes of UTF-8 per UTF-16 code unit, and no more than a payload can hold */
    char tmp[AT_PAYLOAD_STR_BYTES + 1];
    size_t want = max_chars < AT_PAYLOAD_STR_BYTES / 3 ? 3 * max_chars + 3 : AT_PAYLOAD_STR_BYTES;
    uintptr_t bad;
    size_t n = at_saferead_str(tmp, s, want, &bad);
    tmp[n] = 0;
    put_str(pl, tmp, max_chars, bad);
}
