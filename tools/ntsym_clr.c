/* ntsym_clr.c: decoding the .NET runtime's loader and method events for the symbolizer (ntsym_clr.h).
 * Layout as the runtime writes them and TraceEvent reads them (runtime/nt_format.h): fixed
 * little-endian integers, then NUL-terminated UTF-16LE strings. */
#include "ntsym_clr.h"

#include <stdlib.h>
#include <string.h>

bool nt_clr_is_symbol_event(const nt_event *ev)
{
    const nt_metadata *m = ev->meta;
    return m && strcmp(m->provider, NT_CLR_RUNTIME) == 0
           && (m->event_id == NT_CLR_MODULE_LOAD || m->event_id == NT_CLR_METHOD_LOAD_VERBOSE);
}

/* The UTF-16LE string at *off, NUL-terminated, appended to out (UTF-8) at *olen; false if the
 * payload ends before its NUL. */
static bool u16z(const uint8_t *p, uint32_t len, uint32_t *off, char *out, size_t *olen, size_t cap)
{
    uint32_t i = *off;
    for (;;) {
        if (i > len || len - i < 2)
            return false;
        uint32_t c = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8;
        i += 2;
        if (c == 0)
            break;
        if (c >= 0xD800 && c < 0xDC00 && len - i >= 2) {
            uint32_t lo = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8;
            if (lo >= 0xDC00 && lo < 0xE000) {
                c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
                i += 2;
            }
        }
        char b[4];
        size_t n;
        if (c < 0x80)
            b[0] = (char)c, n = 1;
        else if (c < 0x800)
            b[0] = (char)(0xC0 | c >> 6), b[1] = (char)(0x80 | (c & 0x3F)), n = 2;
        else if (c < 0x10000)
            b[0] = (char)(0xE0 | c >> 12), b[1] = (char)(0x80 | (c >> 6 & 0x3F)), b[2] = (char)(0x80 | (c & 0x3F)), n = 3;
        else
            b[0] = (char)(0xF0 | c >> 18), b[1] = (char)(0x80 | (c >> 12 & 0x3F)),
            b[2] = (char)(0x80 | (c >> 6 & 0x3F)), b[3] = (char)(0x80 | (c & 0x3F)), n = 4;
        if (*olen + n < cap) {
            memcpy(out + *olen, b, n);
            *olen += n;
        }
    }
    out[*olen] = 0;
    *off = i;
    return true;
}

bool nt_clr_decode(const nt_event *ev, nt_clr_sym *out)
{
    memset(out, 0, sizeof *out);
    if (!nt_clr_is_symbol_event(ev))
        return false;
    const uint8_t *p = ev->payload;
    uint32_t len = ev->payload_len, off;
    char buf[4096];
    size_t n = 0;
    if (ev->meta->event_id == NT_CLR_MODULE_LOAD) {
        if (len < 24)
            return false;
        memcpy(&out->id, p, 8);
        off = 24;
        if (!u16z(p, len, &off, buf, &n, sizeof buf))
            return false;
        out->is_module = true;
    } else {
        if (len < 36)
            return false;
        uint32_t size;
        memcpy(&out->id, p + 8, 8);
        memcpy(&out->start, p + 16, 8);
        memcpy(&size, p + 24, 4);
        out->size = size;
        off = 36;
        /* Namespace "." Name, as TraceEvent joins them; an empty namespace adds no dot */
        if (!u16z(p, len, &off, buf, &n, sizeof buf))
            return false;
        if (n > 0 && n + 1 < sizeof buf)
            buf[n++] = '.';
        if (!u16z(p, len, &off, buf, &n, sizeof buf) || size == 0)
            return false;
    }
    out->name = strdup(buf);
    return out->name != NULL;
}
