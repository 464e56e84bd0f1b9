/* symrun_clr.c: the symbol rundown's second encoding (ACTTRACE_SYMBOLS=methods). symrun.c finds the
 * modules and functions the stacks hit; here they are written as the .NET runtime's own Loader
 * ModuleLoad and MethodLoadVerbose events instead of Universal.System ones. TraceLog names any frame
 * from a "jitted" method's address range (TraceProcess.InsertJITTEDMethod, and at the end of the
 * file CodeAddresses.AddMethod, so order does not matter) and its module from the ModuleLoad of the
 * same ModuleID: PerfView then shows module!.function and, because the file has no Universal.System
 * event, still offers "Thread Time (with StartStop Activities)".
 *
 * Flusher only, like symrun.c: fixed buffers, no allocation, async-signal-safe. */
#include <string.h>
#include "symrun_clr.h"

bool at_symrun_clr AT_START_DATA; /* set at every session start */

static struct {
    at_event_type *t_module, *t_method;
    uint8_t payload[4096];
} C;

/* Level 0 and no keywords: a session's level/keyword filter never drops them, as it never drops the
 * Universal.System events. No fields: readers take the layout from the provider and event id. */
static const at_event_desc desc_module = {
    .provider = NT_CLR_RUNTIME, .event_id = NT_CLR_MODULE_LOAD, .name = "ModuleLoad", .version = 1};
static const at_event_desc desc_method = {
    .provider = NT_CLR_RUNTIME, .event_id = NT_CLR_METHOD_LOAD_VERBOSE, .name = "MethodLoadVerbose", .version = 1};

int at_symrun_clr_types(void)
{
    if (!C.t_module)
        C.t_module = at_event_type_register(&desc_module);
    if (!C.t_method)
        C.t_method = at_event_type_register(&desc_method);
    return C.t_module && C.t_method ? 0 : -1;
}

static uint8_t *put_u64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
    return p + 8;
}

static uint8_t *put_u32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
    return p + 4;
}

/* UTF-8 (n bytes) as NUL-terminated UTF-16LE, cut to what leaves `keep` bytes of the buffer free.
 * A byte that is not valid UTF-8 becomes U+FFFD (names are bytes in ELF). */
static uint8_t *put_utf16(uint8_t *p, const char *s, size_t n, size_t keep)
{
    const uint8_t *u = (const uint8_t *)s, *e = u + n;
    uint8_t *lim = C.payload + sizeof C.payload - keep - 6; /* a surrogate pair and the NUL */
    while (u < e && p < lim) {
        uint32_t c = *u, need = 0;
        if (c >= 0xF0 && c < 0xF5)
            c &= 7, need = 3;
        else if (c >= 0xE0)
            c &= 15, need = 2;
        else if (c >= 0xC2 && c < 0xE0)
            c &= 31, need = 1;
        else if (c >= 0x80)
            c = 0xFFFD, need = 0;
        u++;
        for (uint32_t k = 0; k < need; k++) {
            if (u >= e || (*u & 0xC0) != 0x80) {
                c = 0xFFFD;
                break;
            }
            c = c << 6 | (*u++ & 0x3F);
        }
        if (c >= 0x10000 && c < 0x110000) {
            c -= 0x10000;
            uint16_t hi = (uint16_t)(0xD800 | c >> 10), lo = (uint16_t)(0xDC00 | (c & 0x3FF));
            memcpy(p, &hi, 2);
            memcpy(p + 2, &lo, 2);
            p += 4;
        } else {
            uint16_t w = c < 0x110000 && (c < 0xD800 || c > 0xDFFF) ? (uint16_t)c : 0xFFFD;
            memcpy(p, &w, 2);
            p += 2;
        }
    }
    memset(p, 0, 2);
    return p + 2;
}

void at_symrun_clr_module(uint64_t module_id, const char *path)
{
    uint8_t *p = put_u64(C.payload, module_id);
    p = put_u64(p, module_id); /* AssemblyID: one assembly per module */
    p = put_u32(p, 0);         /* ModuleFlags */
    p = put_u32(p, 0);         /* Reserved1 */
    p = put_utf16(p, path, strlen(path), 8);
    p = put_utf16(p, "", 0, 4); /* ModuleNativePath: empty, or TraceLog takes the IL path for an NGEN image */
    memset(p, 0, 2);            /* ClrInstanceID */
    p += 2;
    at_ntw_flusher_event(C.t_module, C.payload, (uint32_t)(p - C.payload));
}

void at_symrun_clr_method(uint64_t method_id, uint64_t module_id, uint64_t start, uint64_t size,
                          const char *name, size_t nlen)
{
    if (size == 0 || size > 0x7FFFFFFF) /* TraceLog's MethodSize is an int */
        return;
    uint8_t *p = put_u64(C.payload, method_id);
    p = put_u64(p, module_id);
    p = put_u64(p, start);
    p = put_u32(p, (uint32_t)size);
    p = put_u32(p, 0); /* MethodToken */
    p = put_u32(p, NT_CLR_METHOD_FLAG_JITTED);
    /* TraceLog shows Namespace + "." + Name: the function as Name, in no namespace */
    p = put_utf16(p, "", 0, 16);
    p = put_utf16(p, name, nlen, 8);
    p = put_utf16(p, "", 0, 4); /* MethodSignature: no "(...)" to append */
    memset(p, 0, 2);            /* ClrInstanceID */
    p += 2;
    at_ntw_flusher_event(C.t_method, C.payload, (uint32_t)(p - C.payload));
}
