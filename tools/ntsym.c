/* ntsym.c: the symbolizer of ntsym.h. It keeps the Universal.System events of a trace (mappings with
 * their build-id metadata, symbols with absolute address ranges) and names an address from them alone,
 * so a trace read on another machine still names its frames. Only file:line needs the module on this
 * machine: libdw (dlopen'ed, so the tools run without it) reads its DWARF, or its debug file found by
 * build-id. A name the writer marked final (NT_US_SYMBOL_NAME_FINAL) is shown as given, as TraceEvent
 * shows it; an older file's C++ names are demangled here, by the writer's demangler (demangle.c). */
#include "ntsym.h"
#include "demangle.h"
#include "ntsym_clr.h"

#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sym_map {
    uint64_t id, start, end, offset, meta_id; /* end exclusive */
    char *file;
    bool have_meta;
    uint64_t p_vaddr, p_offset;
    char build_id[129];
    bool dw_tried;
    Dwfl *dw;
    Dwfl_Module *dwmod;
} sym_map;

typedef struct sym_ent {
    uint64_t start, end; /* end inclusive */
    uint64_t map_id;
    char *name;
    char *pretty;        /* demangled (lazily); NULL = not yet */
    bool final;          /* the writer gave the name as readers show it */
} sym_ent;

typedef struct sym_meta {
    uint64_t id;
    char *json;
} sym_meta;

struct nt_symbolizer {
    nt_sym_options o;
    sym_map *maps;
    size_t nmaps, capmaps;
    sym_ent *syms;
    size_t nsyms, capsyms;
    size_t nsorted;      /* syms[0..nsorted) sorted by start; the rest arrived since (a short tail) */
    sym_meta *metas;
    size_t nmetas, capmetas;
};

/* ---- optional libraries ---- */
static struct {
    bool tried_dw, tried_dm;
    Dwfl *(*begin)(const Dwfl_Callbacks *);
    Dwfl_Module *(*report_elf)(Dwfl *, const char *, const char *, int, GElf_Addr, bool);
    int (*report_end)(Dwfl *, int (*)(Dwfl_Module *, void *, const char *, Dwarf_Addr, void *), void *);
    Dwfl_Line *(*getsrc)(Dwfl_Module *, Dwarf_Addr);
    const char *(*lineinfo)(Dwfl_Line *, Dwarf_Addr *, int *, int *, Dwarf_Word *, Dwarf_Word *);
    void (*end)(Dwfl *);
    Dwfl_Callbacks cb;
} L;

static bool dw_load(void)
{
    if (L.tried_dw)
        return L.begin != NULL;
    L.tried_dw = true;
    void *h = dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return false;
    *(void **)&L.begin = dlsym(h, "dwfl_begin");
    *(void **)&L.report_elf = dlsym(h, "dwfl_report_elf");
    *(void **)&L.report_end = dlsym(h, "dwfl_report_end");
    *(void **)&L.getsrc = dlsym(h, "dwfl_module_getsrc");
    *(void **)&L.lineinfo = dlsym(h, "dwfl_lineinfo");
    *(void **)&L.end = dlsym(h, "dwfl_end");
    *(void **)&L.cb.find_elf = dlsym(h, "dwfl_build_id_find_elf");
    *(void **)&L.cb.find_debuginfo = dlsym(h, "dwfl_standard_find_debuginfo");
    *(void **)&L.cb.section_address = dlsym(h, "dwfl_offline_section_address");
    if (!L.begin || !L.report_elf || !L.report_end || !L.getsrc || !L.lineinfo || !L.end
        || !L.cb.find_elf || !L.cb.find_debuginfo || !L.cb.section_address) {
        L.begin = NULL;
        return false;
    }
    return true;
}

static const char *demangle(sym_ent *e)
{
    if (e->final)
        return e->name;
    if (e->pretty)
        return e->pretty;
    if (!L.tried_dm) {
        L.tried_dm = true;
        (void)at_demangle_init();
    }
    /* an older file: "name@@VERSION" (a versioned symbol in .symtab) is the name alone, and a C++
     * name is demangled as the writer now does it */
    size_t n = strlen(e->name);
    const char *at = strchr(e->name, '@');
    if (at && at != e->name)
        n = (size_t)(at - e->name);
    char buf[4000];
    size_t d = at_demangle(e->name, n, buf, sizeof buf);
    e->pretty = d ? strdup(buf) : strndup(e->name, n);
    return e->pretty ? e->pretty : e->name;
}

nt_symbolizer *nt_sym_new(const nt_sym_options *o)
{
    nt_symbolizer *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    if (o)
        s->o = *o;
    else
        s->o.demangle = true;
    return s;
}

/* ---- payload decoding (varuint, uint16-length UTF-8) ---- */
typedef struct cur {
    const uint8_t *p, *end;
    bool bad;
} cur;

static uint64_t rd_var(cur *c)
{
    uint64_t v = 0;
    for (int sh = 0; sh < 64; sh += 7) {
        if (c->p >= c->end) {
            c->bad = true;
            return 0;
        }
        uint8_t b = *c->p++;
        v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80))
            return v;
    }
    c->bad = true;
    return v;
}

static char *rd_str(cur *c)
{
    if (c->end - c->p < 2) {
        c->bad = true;
        return NULL;
    }
    uint16_t n;
    memcpy(&n, c->p, 2);
    c->p += 2;
    if ((size_t)(c->end - c->p) < n) {
        c->bad = true;
        return NULL;
    }
    char *s = malloc((size_t)n + 1);
    if (s) {
        memcpy(s, c->p, n);
        s[n] = 0;
    }
    c->p += n;
    return s;
}

static bool grow(void **p, size_t *cap, size_t n, size_t sz)
{
    if (n < *cap)
        return true;
    size_t nc = *cap ? *cap * 2 : 64;
    void *q = realloc(*p, nc * sz);
    if (!q)
        return false;
    *p = q;
    *cap = nc;
    return true;
}

bool nt_sym_is_symbol_event(const nt_event *ev)
{
    const nt_metadata *m = ev->meta;
    return (m && strcmp(m->provider, NT_UNIVERSAL_SYSTEM) == 0
            && (m->event_id == NT_US_PROCESS_MAPPING || m->event_id == NT_US_PROCESS_SYMBOL
                || m->event_id == NT_US_PROCESS_MAPPING_METADATA))
           || nt_clr_is_symbol_event(ev);
}

/* The method-event encoding (ntsym_clr.h): a module is a mapping with no address range (it names
 * its methods only) and no DWARF look-up (nothing gives its load bias); a method is a symbol, kept
 * only when a ModuleLoad named its module before (a runtime's file names its modules with rundown
 * events this reader does not follow: its frames stay unnamed rather than "UNKNOWN!"). */
static void clr_observe(nt_symbolizer *s, const nt_event *ev)
{
    nt_clr_sym c;
    if (!nt_clr_decode(ev, &c))
        return;
    if (c.is_module) {
        for (size_t i = 0; i < s->nmaps; i++)
            if (s->maps[i].id == c.id && s->maps[i].start == 0 && s->maps[i].end == 0) {
                free(c.name); /* a rotated segment's copy */
                return;
            }
        if (!grow((void **)&s->maps, &s->capmaps, s->nmaps, sizeof *s->maps)) {
            free(c.name);
            return;
        }
        s->maps[s->nmaps++] = (sym_map){.id = c.id, .file = c.name, .dw_tried = true};
        return;
    }
    bool known = false;
    for (size_t i = 0; i < s->nmaps && !known; i++)
        known = s->maps[i].id == c.id && s->maps[i].start == 0 && s->maps[i].end == 0;
    if (!known || !grow((void **)&s->syms, &s->capsyms, s->nsyms, sizeof *s->syms)) {
        free(c.name);
        return;
    }
    s->syms[s->nsyms++] = (sym_ent){.start = c.start, .end = c.start + c.size - 1, .map_id = c.id, .name = c.name};
}

/* "key":"value" of a flat JSON object (the metadata the writers produce); copies at most n-1 bytes */
static bool json_str(const char *js, const char *key, char *out, size_t n)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(js, pat);
    if (!p)
        return false;
    p += strlen(pat);
    while (*p == ' ' || *p == ':')
        p++;
    if (*p != '"')
        return false;
    p++;
    size_t k = 0;
    while (*p && *p != '"' && k + 1 < n)
        out[k++] = *p++;
    out[k] = 0;
    return true;
}

static void apply_meta(nt_symbolizer *s, sym_map *m)
{
    for (size_t i = 0; i < s->nmetas; i++) {
        if (s->metas[i].id != m->meta_id || !s->metas[i].json)
            continue;
        char v[130];
        if (json_str(s->metas[i].json, "build_id", v, sizeof v))
            memcpy(m->build_id, v, sizeof m->build_id);
        if (json_str(s->metas[i].json, "p_vaddr", v, sizeof v))
            m->p_vaddr = strtoull(v, NULL, 0);
        if (json_str(s->metas[i].json, "p_offset", v, sizeof v))
            m->p_offset = strtoull(v, NULL, 0);
        m->have_meta = true;
    }
}

void nt_sym_observe(nt_symbolizer *s, const nt_event *ev)
{
    if (!s || !nt_sym_is_symbol_event(ev))
        return;
    if (nt_clr_is_symbol_event(ev)) {
        clr_observe(s, ev);
        return;
    }
    cur c = {ev->payload, ev->payload + ev->payload_len, false};
    switch (ev->meta->event_id) {
    case NT_US_PROCESS_MAPPING_METADATA: {
        uint64_t id = rd_var(&c);
        char *js = rd_str(&c);
        if (c.bad || !grow((void **)&s->metas, &s->capmetas, s->nmetas, sizeof *s->metas)) {
            free(js);
            return;
        }
        s->metas[s->nmetas++] = (sym_meta){id, js};
        return;
    }
    case NT_US_PROCESS_MAPPING: {
        sym_map m = {0};
        m.id = rd_var(&c);
        m.start = rd_var(&c);
        m.end = rd_var(&c);
        m.offset = rd_var(&c);
        m.file = rd_str(&c);
        m.meta_id = rd_var(&c);
        if (c.bad || !m.file || !grow((void **)&s->maps, &s->capmaps, s->nmaps, sizeof *s->maps)) {
            free(m.file);
            return;
        }
        /* the same id again (a rotated segment's copy): keep the first */
        for (size_t i = 0; i < s->nmaps; i++)
            if (s->maps[i].id == m.id && s->maps[i].start == m.start) {
                free(m.file);
                return;
            }
        /* mappings are whole pages: an end on a page's last byte is an older file's inclusive end */
        if ((m.end & 0xFFF) == 0xFFF)
            m.end++;
        if (m.meta_id)
            apply_meta(s, &m);
        s->maps[s->nmaps++] = m;
        return;
    }
    case NT_US_PROCESS_SYMBOL: {
        sym_ent e = {0};
        (void)rd_var(&c); /* symbol id */
        e.map_id = rd_var(&c);
        e.start = rd_var(&c);
        e.end = rd_var(&c);
        e.name = rd_str(&c);
        if (!c.bad && c.p < c.end) { /* the writer's flags (older files have none) */
            cur f = c;
            e.final = (rd_var(&f) & NT_US_SYMBOL_NAME_FINAL) && !f.bad;
        }
        if (c.bad || !e.name || e.end < e.start
            || !grow((void **)&s->syms, &s->capsyms, s->nsyms, sizeof *s->syms)) {
            free(e.name);
            return;
        }
        s->syms[s->nsyms++] = e;
        return;
    }
    }
}

static int sym_cmp(const void *a, const void *b)
{
    const sym_ent *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Symbols arrive interleaved with the events that use them. New ones collect in a tail that is
 * searched linearly; a long tail is sorted and merged into the sorted part (linear time), so naming
 * stays cheap for traces with many symbols. */
static void merge_tail(nt_symbolizer *s)
{
    size_t k = s->nsorted, n = s->nsyms;
    qsort(s->syms + k, n - k, sizeof *s->syms, sym_cmp);
    sym_ent *tmp = malloc(n * sizeof *tmp);
    if (!tmp) {
        qsort(s->syms, n, sizeof *s->syms, sym_cmp);
    } else {
        size_t i = 0, j = k, o = 0;
        while (i < k && j < n)
            tmp[o++] = s->syms[i].start <= s->syms[j].start ? s->syms[i++] : s->syms[j++];
        while (i < k)
            tmp[o++] = s->syms[i++];
        while (j < n)
            tmp[o++] = s->syms[j++];
        memcpy(s->syms, tmp, n * sizeof *tmp);
        free(tmp);
    }
    s->nsorted = n;
}

static sym_ent *sym_lookup(nt_symbolizer *s, uint64_t ip)
{
    if (s->nsyms - s->nsorted > 64)
        merge_tail(s);
    /* the covering symbol that starts last: a range written one past its function's end (symrun.c)
     * also covers the next function's first byte */
    sym_ent *best = NULL;
    for (size_t i = s->nsorted; i < s->nsyms; i++)
        if (ip >= s->syms[i].start && ip <= s->syms[i].end && (!best || s->syms[i].start > best->start))
            best = &s->syms[i];
    /* the last sorted symbol starting at or before ip; ranges rarely nest, so look back a little */
    size_t lo = 0, hi = s->nsorted;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->syms[mid].start <= ip)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo, k = 0; i > 0 && k < 8; i--, k++)
        if (ip >= s->syms[i - 1].start && ip <= s->syms[i - 1].end)
            return best && best->start > s->syms[i - 1].start ? best : &s->syms[i - 1];
    return best;
}

static sym_map *map_lookup(nt_symbolizer *s, uint64_t ip)
{
    for (size_t i = s->nmaps; i > 0; i--) /* the latest mapping wins */
        if (ip >= s->maps[i - 1].start && ip < s->maps[i - 1].end)
            return &s->maps[i - 1];
    return NULL;
}

static const char *base_name(const char *p)
{
    const char *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

/* ELF virtual address of ip in m (file offset when the metadata is missing) */
static uint64_t map_va(const sym_map *m, uint64_t ip)
{
    uint64_t off = ip - m->start + m->offset;
    return m->have_meta ? off - m->p_offset + m->p_vaddr : off;
}

static const char *src_line(nt_symbolizer *s, sym_map *m, uint64_t ip, int *line)
{
    (void)s;
    if (!m || !dw_load())
        return NULL;
    if (!m->dw_tried) {
        m->dw_tried = true;
        if (m->file[0] == '/') {
            m->dw = L.begin(&L.cb);
            if (m->dw) {
                uint64_t bias = ip - map_va(m, ip);
                m->dwmod = L.report_elf(m->dw, base_name(m->file), m->file, -1, bias, false);
                L.report_end(m->dw, NULL, NULL);
            }
        }
    }
    if (!m->dwmod)
        return NULL;
    Dwfl_Line *l = L.getsrc(m->dwmod, ip);
    if (!l)
        return NULL;
    Dwarf_Addr a;
    int col;
    const char *f = L.lineinfo(l, &a, line, &col, NULL, NULL);
    return f && *line > 0 ? f : NULL;
}

static const char *format_at(nt_symbolizer *s, uint64_t ip, bool exact, char *buf, size_t n);

const char *nt_sym_format(nt_symbolizer *s, uint64_t ip, char *buf, size_t n)
{
    return format_at(s, ip, false, buf, n);
}

const char *nt_sym_format_exact(nt_symbolizer *s, uint64_t ip, char *buf, size_t n)
{
    return format_at(s, ip, true, buf, n);
}

static const char *format_at(nt_symbolizer *s, uint64_t ip, bool exact, char *buf, size_t n)
{
    if (!s || n == 0) {
        if (n)
            snprintf(buf, n, "0x%" PRIx64, ip);
        return buf;
    }
    /* Older files hold return addresses: the call is the byte before (it may end its function).
     * The shim now stores call sites (the call's last byte) and a hooked function's entry + 1, for
     * which the byte before lies in the same function: one look-up serves both. */
    uint64_t q = ip && !exact ? ip - 1 : ip;
    sym_ent *e = sym_lookup(s, q);
    if (!e)
        e = sym_lookup(s, ip);
    /* the module is the one holding the address as stored, as TraceEvent finds it: a mapping's
     * first byte is its own, the byte after its end is not (no call site of the shim's lies there) */
    sym_map *m = map_lookup(s, ip);
    if (e) {
        sym_map *em = NULL;
        for (size_t i = s->nmaps; i > 0 && !em; i--)
            if (s->maps[i - 1].id == e->map_id)
                em = &s->maps[i - 1];
        if (em)
            m = em;
        const char *name = s->o.demangle ? demangle(e) : e->name;
        if (s->o.no_offset)
            snprintf(buf, n, "%s!%s", m ? base_name(m->file) : "UNKNOWN", name);
        else
            snprintf(buf, n, "%s!%s+0x%" PRIx64, m ? base_name(m->file) : "UNKNOWN", name, ip - e->start);
    } else if (m) {
        snprintf(buf, n, "%s+0x%" PRIx64, base_name(m->file), map_va(m, ip));
    } else {
        snprintf(buf, n, "0x%" PRIx64, ip);
        return buf;
    }
    int line = 0;
    const char *f = s->o.lines ? src_line(s, m, q, &line) : NULL;
    if (f) {
        size_t k = strlen(buf);
        if (k < n)
            snprintf(buf + k, n - k, " (%s:%d)", f, line);
    }
    return buf;
}

void nt_sym_free(nt_symbolizer *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nmaps; i++) {
        free(s->maps[i].file);
        if (s->maps[i].dw)
            L.end(s->maps[i].dw);
    }
    for (size_t i = 0; i < s->nsyms; i++) {
        free(s->syms[i].name);
        free(s->syms[i].pretty);
    }
    for (size_t i = 0; i < s->nmetas; i++)
        free(s->metas[i].json);
    free(s->maps);
    free(s->syms);
    free(s->metas);
    free(s);
}
