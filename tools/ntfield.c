/* ntfield.c: turns one payload field (as described by the event's metadata) into printable UTF-8,
 * or into a JSON value (exports). Bounds-checked against the payload: a short payload is reported,
 * never read past. Printable output that does not fit is cut with "..." but the payload offset still
 * advances over the whole field; JSON output that does not fit is refused (a cut value is no JSON). */
#include "ntreader.h"
#include "guid.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct out {
    char *p;
    size_t n, len;
    bool cut;
    uint32_t budget; /* values left to visit: nested arrays of empty objects must not spin for ages */
    bool json;       /* a JSON value: strings, chars, GUIDs and dates quoted, objects as "name": value */
} out;

static void put(out *o, const char *s, size_t k)
{
    if (o->cut) return;
    if (o->len + k + 4 > o->n) { /* keep room for "..." and NUL */
        o->cut = true;
        if (o->n >= 4) {
            memcpy(o->p + (o->len < o->n - 4 ? o->len : o->n - 4), "...", 4);
        }
        return;
    }
    memcpy(o->p + o->len, s, k);
    o->len += k;
    o->p[o->len] = 0;
}

static void puts_(out *o, const char *s) { put(o, s, strlen(s)); }

static void putf(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static void putf(out *o, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0) put(o, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

static void put_cp(out *o, uint32_t c)
{
    char b[4];
    size_t k;
    if (c < 0x20 || c == '"' || c == '\\') {
        if (c == '"' || c == '\\') { b[0] = '\\'; b[1] = (char)c; put(o, b, 2); }
        else if (c == '\n') puts_(o, "\\n");
        else if (c == '\t') puts_(o, "\\t");
        else if (c == '\r') puts_(o, "\\r");
        else putf(o, "\\u%04x", c);
        return;
    }
    if (c < 0x80) { b[0] = (char)c; k = 1; }
    else if (c < 0x800) { b[0] = (char)(0xC0 | c >> 6); b[1] = (char)(0x80 | (c & 0x3F)); k = 2; }
    else if (c < 0x10000) {
        b[0] = (char)(0xE0 | c >> 12); b[1] = (char)(0x80 | ((c >> 6) & 0x3F)); b[2] = (char)(0x80 | (c & 0x3F)); k = 3;
    } else {
        b[0] = (char)(0xF0 | c >> 18); b[1] = (char)(0x80 | ((c >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((c >> 6) & 0x3F)); b[3] = (char)(0x80 | (c & 0x3F)); k = 4;
    }
    put(o, b, k);
}

static uint64_t ldn(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static size_t fixed_size(uint32_t t)
{
    switch (t) {
    case NT_TYPE_SBYTE: case NT_TYPE_BYTE: return 1;
    case NT_TYPE_CHAR: case NT_TYPE_INT16: case NT_TYPE_UINT16: return 2;
    case NT_TYPE_BOOLEAN: case NT_TYPE_INT32: case NT_TYPE_UINT32: case NT_TYPE_SINGLE: return 4;
    case NT_TYPE_INT64: case NT_TYPE_UINT64: case NT_TYPE_DOUBLE: case NT_TYPE_DATETIME: return 8;
    case NT_TYPE_DECIMAL: case NT_TYPE_GUID: return 16;
    default: return 0;
    }
}

static void put_decimal(out *o, const uint8_t *p)
{
    /* System.Decimal in memory: int32 flags (scale in bits 16..23, sign in bit 31), uint32 hi, uint64 lo */
    uint32_t flags = (uint32_t)ldn(p, 4), hi = (uint32_t)ldn(p + 4, 4);
    uint64_t lo = ldn(p + 8, 8);
    unsigned scale = (flags >> 16) & 0xFF;
    unsigned __int128 v = (unsigned __int128)hi << 64 | lo;
    char digits[64];
    int n = 0;
    do {
        digits[n++] = (char)('0' + (int)(v % 10));
        v /= 10;
    } while (v && n < 40);
    if (scale > 28) scale = 28;
    while ((unsigned)n <= scale) digits[n++] = '0';
    char s[80];
    int k = 0;
    if (flags & 0x80000000u) s[k++] = '-';
    for (int i = n - 1; i >= 0; i--) {
        s[k++] = digits[i];
        if (i == (int)scale && scale) s[k++] = '.';
    }
    put(o, s, (size_t)k);
}

static bool fmt_value(const nt_field *f, uint32_t type, const uint8_t *pl, uint32_t len, uint32_t *off, out *o,
                      int depth);

/* A UTF-8 name as a JSON string (metadata names are UTF-8 already). */
static void put_json_name(out *o, const char *s)
{
    puts_(o, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == '"' || *p == '\\') put_cp(o, *p);
        else put(o, (const char *)p, 1);
    }
    puts_(o, "\"");
}

/* A double as JSON: a number, or a string for what JSON has no number for. */
static void put_real(out *o, double v, const char *fmt)
{
    if (!o->json || isfinite(v)) putf(o, fmt, v);
    else puts_(o, isnan(v) ? "\"NaN\"" : v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
}

static bool fmt_object(const nt_field *f, const uint8_t *pl, uint32_t len, uint32_t *off, out *o, int depth)
{
    puts_(o, "{");
    for (uint32_t i = 0; i < f->nfields; i++) {
        if (i) puts_(o, ", ");
        if (o->json) {
            put_json_name(o, f->fields[i].name ? f->fields[i].name : "?");
            puts_(o, ": ");
        } else {
            puts_(o, f->fields[i].name ? f->fields[i].name : "?");
            puts_(o, "=");
        }
        if (!fmt_value(&f->fields[i], f->fields[i].type, pl, len, off, o, depth + 1)) return false;
    }
    puts_(o, "}");
    return true;
}

static bool fmt_value(const nt_field *f, uint32_t type, const uint8_t *pl, uint32_t len, uint32_t *off, out *o,
                      int depth)
{
    if (depth > 32 || o->budget == 0) return false;
    o->budget--;
    uint32_t p = *off;
    size_t fs = fixed_size(type);
    if (fs) {
        if (len < p || len - p < fs) return false;
        const uint8_t *b = pl + p;
        switch (type) {
        case NT_TYPE_BOOLEAN: puts_(o, ldn(b, 4) ? "true" : "false"); break;
        case NT_TYPE_CHAR:
            puts_(o, o->json ? "\"" : "'");
            put_cp(o, (uint32_t)ldn(b, 2));
            puts_(o, o->json ? "\"" : "'");
            break;
        case NT_TYPE_SBYTE: putf(o, "%d", (int8_t)b[0]); break;
        case NT_TYPE_BYTE: putf(o, "%u", b[0]); break;
        case NT_TYPE_INT16: putf(o, "%d", (int16_t)ldn(b, 2)); break;
        case NT_TYPE_UINT16: putf(o, "%u", (unsigned)ldn(b, 2)); break;
        case NT_TYPE_INT32: putf(o, "%d", (int32_t)ldn(b, 4)); break;
        case NT_TYPE_UINT32: putf(o, "%u", (uint32_t)ldn(b, 4)); break;
        case NT_TYPE_INT64: putf(o, "%lld", (long long)ldn(b, 8)); break;
        case NT_TYPE_UINT64: putf(o, "%llu", (unsigned long long)ldn(b, 8)); break;
        case NT_TYPE_SINGLE: {
            uint32_t u = (uint32_t)ldn(b, 4);
            float fv;
            memcpy(&fv, &u, 4);
            put_real(o, (double)fv, "%.9g");
            break;
        }
        case NT_TYPE_DOUBLE: {
            uint64_t u = ldn(b, 8);
            double dv;
            memcpy(&dv, &u, 8);
            put_real(o, dv, "%.17g");
            break;
        }
        case NT_TYPE_DECIMAL: put_decimal(o, b); break;
        case NT_TYPE_DATETIME: {
            /* FILETIME: 100 ns ticks since 1601-01-01 UTC */
            uint64_t ft = ldn(b, 8);
            int64_t secs = (int64_t)(ft / 10000000u) - 11644473600LL;
            struct tm tm;
            time_t tt = (time_t)secs;
            if (o->json) puts_(o, "\"");
            if (ft == 0 || !gmtime_r(&tt, &tm)) {
                putf(o, "filetime:%llu", (unsigned long long)ft);
            } else {
                putf(o, "%04d-%02d-%02dT%02d:%02d:%02d.%07uZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, (unsigned)(ft % 10000000u));
            }
            if (o->json) puts_(o, "\"");
            break;
        }
        case NT_TYPE_GUID: {
            at_guid g;
            char s[37];
            memcpy(g.b, b, 16);
            at_guid_format(&g, s);
            if (o->json) puts_(o, "\"");
            puts_(o, s);
            if (o->json) puts_(o, "\"");
            break;
        }
        }
        *off = p + (uint32_t)fs;
        return true;
    }
    if (type == NT_TYPE_STRING) {
        /* U+FFFF starts the shim's note on memory it could not read: "abc"<unreadable 0x7f..>, or
         * <unreadable 0x1> alone when nothing was readable (never part of a captured string). In
         * JSON the note stays inside the one string: "abc<unreadable 0x7f..>". */
        bool quoted = o->json || !(len >= p && len - p >= 2 && ldn(pl + p, 2) == 0xFFFF);
        if (quoted) puts_(o, "\"");
        for (;;) {
            if (len < p || len - p < 2) return false;
            uint32_t c = (uint32_t)ldn(pl + p, 2);
            p += 2;
            if (c == 0) break;
            if (c == 0xFFFF) {
                if (quoted && !o->json) {
                    puts_(o, "\"");
                    quoted = false;
                }
                continue;
            }
            if (c >= 0xD800 && c < 0xDC00 && len - p >= 2) {
                uint32_t c2 = (uint32_t)ldn(pl + p, 2);
                if (c2 >= 0xDC00 && c2 < 0xE000) {
                    c = 0x10000 + ((c - 0xD800) << 10) + (c2 - 0xDC00);
                    p += 2;
                }
            }
            if (c >= 0xD800 && c < 0xE000) c = 0xFFFD;
            put_cp(o, c);
        }
        if (quoted) puts_(o, "\"");
        *off = p;
        return true;
    }
    if (type == NT_TYPE_OBJECT) return fmt_object(f, pl, len, off, o, depth);
    if (type == NT_TYPE_ARRAY) {
        if (len < p || len - p < 2) return false;
        uint32_t count = (uint32_t)ldn(pl + p, 2);
        *off = p + 2;
        puts_(o, "[");
        for (uint32_t i = 0; i < count; i++) {
            if (i) puts_(o, ", ");
            if (!fmt_value(f, f->elem_type, pl, len, off, o, depth + 1)) return false;
        }
        puts_(o, "]");
        return true;
    }
    return false; /* unknown type: the payload layout is unknown from here on */
}

bool nt_field_format(const nt_field *f, const uint8_t *payload, uint32_t len, uint32_t *off, char *outbuf,
                     size_t outlen)
{
    out o = {outbuf, outlen, 0, false, 1u << 20, false};
    if (outlen) outbuf[0] = 0;
    if (outlen < 8) o.cut = true;
    return fmt_value(f, f->type, payload, len, off, &o, 0);
}

int nt_field_json(const nt_field *f, const uint8_t *payload, uint32_t len, uint32_t *off, char *outbuf,
                  size_t outlen)
{
    out o = {outbuf, outlen, 0, false, 1u << 20, true};
    if (outlen) outbuf[0] = 0;
    if (outlen < 8) o.cut = true;
    if (!fmt_value(f, f->type, payload, len, off, &o, 0)) return -1;
    return o.cut ? 0 : 1;
}
