/* symrun.c: the symbol rundown (nettrace-v5.md §9). When the flusher interns a new stack it hands the
 * addresses here; every address not yet covered in the current file gets its module described
 * (ProcessMappingMetadata with the ELF build-id, then ProcessMapping) and its function named
 * (ProcessSymbol, absolute addresses), once per file, so every file and every rotated or
 * circular segment names its own frames, also when the process is killed later.
 *
 * Runs on the flusher only (or in the emergency flush): memory is mmap'ed once, modules come from
 * /proc/self/maps read with read(2), symbols from the module's ELF file (or its debug file found by
 * build-id) mapped read-only. No malloc, no stdio, no locks: async-signal-safe like the rest of the
 * serialiser.
 *
 * A symbol's name is written as readers should show it (TraceEvent shows names as given): without a
 * "@VERSION" suffix, and a C++ name demangled (demangle.c); one the demangler cannot take (too long,
 * not valid) stays mangled. A flag after the name tells our tools that it is final. */
#include <elf.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "demangle.h"
#include "symrun.h"
#include "symrun_clr.h"

#define MOD_MAX 512u
#define PATH_MAX_SR 512u
#define SET_SLOTS (1u << 16) /* per-file sets of covered addresses and written symbols */
#define SET_PROBES 16u

/* A function symbol of a table, for binary search by address. */
typedef struct sr_ix {
    uint64_t start, end; /* ELF virtual addresses, end exclusive */
    uint32_t sym;
    uint32_t local;      /* 1 for STB_LOCAL: an exported alias of the same address sorts first */
} sr_ix;

typedef struct sr_elf {
    const uint8_t *img;
    size_t len;
    const Elf64_Sym *syms;
    uint32_t nsyms;
    const char *str;
    size_t strsz;
    sr_ix *ix;           /* function symbols sorted by address (built on first use) */
    uint32_t nix;
    size_t ix_bytes;
    bool ix_tried;
} sr_elf;

typedef struct sr_mod {
    uint64_t start, end, offset;
    char path[PATH_MAX_SR];
    uint32_t id;
    uint32_t file_gen;     /* file its mapping event went to */
    bool loaded;           /* ELF looked at (successfully or not) */
    bool seen;             /* still in /proc/self/maps at the last read */
    sr_elf file, debug;
    sr_elf *symtab;        /* the best table: .symtab of the file, of the debug file, else .dynsym */
    bool dynsym_only;
    uint64_t bias;         /* address = ELF virtual address + bias */
    uint64_t p_vaddr, p_offset;
    uint8_t build_id[64];
    uint32_t build_id_len;
} sr_mod;

typedef struct sr_set_slot {
    uint64_t key;
    uint32_t gen;
    uint32_t pad;
} sr_set_slot;

static struct {
    bool init;
    sr_mod *mods;          /* MOD_MAX, mmap'ed */
    uint32_t nmods;
    uint32_t next_id;
    uint64_t next_sym_id;
    sr_set_slot *addrs, *syms;
    char mapsbuf[16384];
    uint8_t payload[4096];
    char name[4000];       /* a demangled name: fits the payload whole (put_str cuts nothing) */
    uint64_t stat_symbols, stat_mappings;
} S;

bool at_symrun_on AT_START_DATA;
/* the rundown's event types, registered at every session start: not in S, whose pages a process
 * that records nothing never touches */
static at_event_type *t_map AT_START_DATA, *t_sym AT_START_DATA, *t_meta AT_START_DATA;

static const at_event_desc desc_map = {
    .provider = NT_UNIVERSAL_SYSTEM, .event_id = NT_US_PROCESS_MAPPING, .name = "ProcessMapping"};
static const at_event_desc desc_sym = {
    .provider = NT_UNIVERSAL_SYSTEM, .event_id = NT_US_PROCESS_SYMBOL, .name = "ProcessSymbol"};
static const at_event_desc desc_meta = {.provider = NT_UNIVERSAL_SYSTEM,
                                        .event_id = NT_US_PROCESS_MAPPING_METADATA,
                                        .name = "ProcessMappingMetadata"};

/* Every mapping here goes through asroom.c: under a finite RLIMIT_AS it comes out of the room the
 * shim reserved, never beside the program's allocations (a module that does not fit is left
 * unsymbolised). */
static void *map_anon(const char *what, size_t n)
{
    return at_as_map(what, &n, 0, 0, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

int at_symrun_types(void)
{
    if (!t_map)
        t_map = at_event_type_register(&desc_map);
    if (!t_sym)
        t_sym = at_event_type_register(&desc_sym);
    if (!t_meta)
        t_meta = at_event_type_register(&desc_meta);
    if (at_symrun_clr && at_symrun_clr_types() < 0)
        return -1;
    return t_map && t_sym && t_meta ? 0 : -1;
}

int at_symrun_init(void)
{
    if (!S.init) {
        /* all three or none: what a tight RLIMIT_AS left room for goes back to it */
        S.mods = map_anon("symbol tables", MOD_MAX * sizeof(sr_mod));
        S.addrs = S.mods ? map_anon("symbol tables", SET_SLOTS * sizeof(sr_set_slot)) : NULL;
        S.syms = S.addrs ? map_anon("symbol tables", SET_SLOTS * sizeof(sr_set_slot)) : NULL;
        if (!S.syms) {
            if (S.addrs)
                at_as_unmap(S.addrs, SET_SLOTS * sizeof(sr_set_slot));
            if (S.mods)
                at_as_unmap(S.mods, MOD_MAX * sizeof(sr_mod));
            S.mods = NULL;
            S.addrs = NULL;
            return -1;
        }
        S.init = true;
        (void)at_demangle_init(); /* without its stack, C++ names stay mangled */
    }
    return at_symrun_types();
}

/* ---- per-file sets: a slot whose gen is not the current file's is empty ---- */
static bool set_add(sr_set_slot *set, uint64_t key, uint32_t gen)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    uint32_t i = (uint32_t)(h >> 40);
    for (uint32_t k = 0; k < SET_PROBES; k++) {
        sr_set_slot *s = &set[(i + k) & (SET_SLOTS - 1)];
        if (s->gen != gen) {
            s->gen = gen;
            s->key = key;
            return true;
        }
        if (s->key == key)
            return false;
    }
    return true; /* full around here: treat as new (the caller's work is idempotent per file) */
}

/* ---- /proc/self/maps ---- */
static uint64_t parse_hex(const char **p)
{
    uint64_t v = 0;
    for (;; (*p)++) {
        char c = **p;
        if (c >= '0' && c <= '9')
            v = v * 16 + (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v = v * 16 + (uint64_t)(c - 'a' + 10);
        else
            return v;
    }
}

static void unload(sr_mod *m)
{
    if (m->file.ix)
        at_as_unmap(m->file.ix, m->file.ix_bytes);
    if (m->debug.ix)
        at_as_unmap(m->debug.ix, m->debug.ix_bytes);
    if (m->file.img)
        at_as_unmap((void *)m->file.img, m->file.len);
    if (m->debug.img)
        at_as_unmap((void *)m->debug.img, m->debug.len);
    memset(&m->file, 0, sizeof m->file);
    memset(&m->debug, 0, sizeof m->debug);
    m->symtab = NULL;
    m->loaded = false;
}

/* One line "start-end perms offset dev inode path": executable mappings become modules; an entry
 * that did not change keeps its id and ELF. */
static void maps_line(const char *l)
{
    const char *p = l;
    uint64_t start = parse_hex(&p);
    if (*p++ != '-')
        return;
    uint64_t end = parse_hex(&p);
    if (*p++ != ' ' || strlen(p) < 5 || p[2] != 'x')
        return;
    p += 5;
    uint64_t off = parse_hex(&p);
    for (int f = 0; f < 2 && *p; f++) { /* dev, inode */
        while (*p == ' ')
            p++;
        while (*p && *p != ' ')
            p++;
    }
    while (*p == ' ')
        p++;
    const char *path = *p ? p : "[anon]";
    for (uint32_t i = 0; i < S.nmods; i++) {
        sr_mod *m = &S.mods[i];
        if (m->start == start && m->end == end && m->offset == off && strcmp(m->path, path) == 0) {
            m->seen = true;
            return;
        }
    }
    if (S.nmods == MOD_MAX)
        return;
    sr_mod *m = &S.mods[S.nmods++];
    memset(m, 0, sizeof *m);
    m->start = start;
    m->end = end;
    m->offset = off;
    size_t n = strlen(path);
    if (n >= PATH_MAX_SR)
        n = PATH_MAX_SR - 1;
    memcpy(m->path, path, n);
    m->id = ++S.next_id;
    m->seen = true;
}

static void maps_read(void)
{
    for (uint32_t i = 0; i < S.nmods; i++)
        S.mods[i].seen = false;
    /* this thread's view: once the first thread has left (main called pthread_exit),
     * /proc/self/maps, which is that thread's, reads empty */
    int fd = open("/proc/thread-self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    size_t have = 0;
    for (;;) {
        ssize_t r = read(fd, S.mapsbuf + have, sizeof S.mapsbuf - 1 - have);
        if (r <= 0)
            break;
        have += (size_t)r;
        S.mapsbuf[have] = 0;
        char *line = S.mapsbuf, *nl;
        while ((nl = strchr(line, '\n'))) {
            *nl = 0;
            maps_line(line);
            line = nl + 1;
        }
        have = (size_t)(S.mapsbuf + have - line);
        memmove(S.mapsbuf, line, have);
        if (have == sizeof S.mapsbuf - 1)
            have = 0; /* a line longer than the buffer: drop it */
    }
    close(fd);
    /* unmapped modules go (their addresses may be reused by others) */
    uint32_t k = 0;
    for (uint32_t i = 0; i < S.nmods; i++) {
        if (S.mods[i].seen) {
            if (k != i) {
                S.mods[k] = S.mods[i];
                if (S.mods[k].symtab == &S.mods[i].file)
                    S.mods[k].symtab = &S.mods[k].file;
                else if (S.mods[k].symtab == &S.mods[i].debug)
                    S.mods[k].symtab = &S.mods[k].debug;
            }
            k++;
        } else {
            unload(&S.mods[i]);
        }
    }
    S.nmods = k;
}

static sr_mod *mod_find(uint64_t ip)
{
    for (uint32_t i = 0; i < S.nmods; i++)
        if (ip >= S.mods[i].start && ip < S.mods[i].end)
            return &S.mods[i];
    return NULL;
}

/* ---- ELF ---- */
static bool in(const sr_elf *e, uint64_t off, uint64_t n) { return off <= e->len && n <= e->len - off; }

static bool elf_map(sr_elf *e, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat st;
    void *p = NULL;
    size_t len = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= (off_t)sizeof(Elf64_Ehdr)) {
        len = (size_t)st.st_size;
        p = at_as_map("symbol file", &len, 0, 0, PROT_READ, MAP_PRIVATE, fd, 0);
    }
    close(fd);
    if (!p)
        return false;
    e->img = p;
    e->len = (size_t)st.st_size;
    const Elf64_Ehdr *h = p;
    if (memcmp(h->e_ident, ELFMAG, SELFMAG) != 0 || h->e_ident[EI_CLASS] != ELFCLASS64) {
        at_as_unmap(p, e->len);
        memset(e, 0, sizeof *e);
        return false;
    }
    return true;
}

/* The section table of type t (SHT_SYMTAB / SHT_DYNSYM) with its string table, if any. */
static void elf_symtab(sr_elf *e, uint32_t t)
{
    const Elf64_Ehdr *h = (const Elf64_Ehdr *)e->img;
    if (h->e_shentsize != sizeof(Elf64_Shdr) || !in(e, h->e_shoff, (uint64_t)h->e_shnum * sizeof(Elf64_Shdr)))
        return;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(e->img + h->e_shoff);
    for (uint32_t i = 0; i < h->e_shnum; i++) {
        if (sh[i].sh_type != t || sh[i].sh_link >= h->e_shnum)
            continue;
        const Elf64_Shdr *ss = &sh[sh[i].sh_link];
        if (!in(e, sh[i].sh_offset, sh[i].sh_size) || !in(e, ss->sh_offset, ss->sh_size)
            || sh[i].sh_entsize != sizeof(Elf64_Sym) || ss->sh_type == SHT_NOBITS || sh[i].sh_size == 0)
            continue;
        e->syms = (const Elf64_Sym *)(e->img + sh[i].sh_offset);
        e->nsyms = (uint32_t)(sh[i].sh_size / sizeof(Elf64_Sym));
        e->str = (const char *)(e->img + ss->sh_offset);
        e->strsz = ss->sh_size;
        return;
    }
}

static void elf_phdrs(sr_mod *m)
{
    const sr_elf *e = &m->file;
    const Elf64_Ehdr *h = (const Elf64_Ehdr *)e->img;
    if (h->e_phentsize != sizeof(Elf64_Phdr) || !in(e, h->e_phoff, (uint64_t)h->e_phnum * sizeof(Elf64_Phdr)))
        return;
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(e->img + h->e_phoff);
    bool have_load = false;
    for (uint32_t i = 0; i < h->e_phnum; i++) {
        if (ph[i].p_type == PT_LOAD && !have_load && (ph[i].p_flags & PF_X)
            && m->offset >= (ph[i].p_offset & ~0xFFFull) && m->offset < ph[i].p_offset + ph[i].p_filesz) {
            m->p_vaddr = ph[i].p_vaddr;
            m->p_offset = ph[i].p_offset;
            m->bias = m->start - (ph[i].p_vaddr + m->offset - ph[i].p_offset);
            have_load = true;
        } else if (ph[i].p_type == PT_NOTE && in(e, ph[i].p_offset, ph[i].p_filesz) && !m->build_id_len) {
            const uint8_t *n = e->img + ph[i].p_offset, *end = n + ph[i].p_filesz;
            while (n + 12 <= end) {
                uint32_t nsz, dsz, type;
                memcpy(&nsz, n, 4);
                memcpy(&dsz, n + 4, 4);
                memcpy(&type, n + 8, 4);
                const uint8_t *name = n + 12, *desc = name + ((nsz + 3) & ~3u);
                if (desc > end || dsz > (size_t)(end - desc))
                    break;
                if (type == NT_GNU_BUILD_ID && nsz == 4 && memcmp(name, "GNU", 4) == 0 && dsz <= sizeof m->build_id) {
                    memcpy(m->build_id, desc, dsz);
                    m->build_id_len = dsz;
                    break;
                }
                n = desc + ((dsz + 3) & ~3u);
            }
        }
    }
}

static const char hexd[] = "0123456789abcdef";

/* The file name a .gnu_debuglink section names (the debug file objcopy --add-gnu-debuglink made). */
static bool elf_debuglink(const sr_elf *e, char *out, size_t n)
{
    const Elf64_Ehdr *h = (const Elf64_Ehdr *)e->img;
    if (h->e_shentsize != sizeof(Elf64_Shdr) || !in(e, h->e_shoff, (uint64_t)h->e_shnum * sizeof(Elf64_Shdr))
        || h->e_shstrndx >= h->e_shnum)
        return false;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(e->img + h->e_shoff);
    const Elf64_Shdr *ns = &sh[h->e_shstrndx];
    if (!in(e, ns->sh_offset, ns->sh_size))
        return false;
    const char *names = (const char *)(e->img + ns->sh_offset);
    for (uint32_t i = 0; i < h->e_shnum; i++) {
        if (sh[i].sh_name >= ns->sh_size || ns->sh_size - sh[i].sh_name < sizeof ".gnu_debuglink"
            || memcmp(names + sh[i].sh_name, ".gnu_debuglink", sizeof ".gnu_debuglink") != 0
            || !in(e, sh[i].sh_offset, sh[i].sh_size))
            continue;
        const char *d = (const char *)(e->img + sh[i].sh_offset);
        size_t l = strnlen(d, sh[i].sh_size);
        if (l == 0 || l == sh[i].sh_size || l >= n || memchr(d, '/', l))
            return false;
        memcpy(out, d, l + 1);
        return true;
    }
    return false;
}

/* Where gdb looks for a debuglink file: beside the module, in .debug/ beside it, and under
 * /usr/lib/debug with the module's folder. */
static bool debuglink_load(sr_mod *m)
{
    char name[256], p[PATH_MAX_SR + 300];
    if (!elf_debuglink(&m->file, name, sizeof name))
        return false;
    const char *slash = strrchr(m->path, '/');
    size_t dl = (size_t)(slash - m->path), nl = strlen(name);
    static const char *const pre[] = {"", "", "/usr/lib/debug"}, *const mid[] = {"/", "/.debug/", "/"};
    for (int k = 0; k < 3; k++) { /* pre + folder + mid + name, no stdio (async-signal-safe) */
        size_t a = strlen(pre[k]), b = strlen(mid[k]);
        if (a + dl + b + nl + 1 > sizeof p)
            continue;
        memcpy(p, pre[k], a);
        memcpy(p + a, m->path, dl);
        memcpy(p + a + dl, mid[k], b);
        memcpy(p + a + dl + b, name, nl + 1);
        if (!strcmp(p, m->path) || !elf_map(&m->debug, p))
            continue;
        elf_symtab(&m->debug, SHT_SYMTAB);
        if (m->debug.syms) {
            m->symtab = &m->debug;
            return true;
        }
        at_as_unmap((void *)m->debug.img, m->debug.len);
        memset(&m->debug, 0, sizeof m->debug);
    }
    return false;
}

static void mod_load(sr_mod *m)
{
    m->loaded = true;
    if (m->path[0] != '/' || !elf_map(&m->file, m->path))
        return;
    elf_phdrs(m);
    elf_symtab(&m->file, SHT_SYMTAB);
    if (m->file.syms) {
        m->symtab = &m->file;
        return;
    }
    if (m->build_id_len >= 2) { /* the distribution's debug file: /usr/lib/debug/.build-id/ab/cdef.debug */
        char p[128] = "/usr/lib/debug/.build-id/";
        size_t k = strlen(p);
        p[k++] = hexd[m->build_id[0] >> 4];
        p[k++] = hexd[m->build_id[0] & 15];
        p[k++] = '/';
        for (uint32_t i = 1; i < m->build_id_len; i++) {
            p[k++] = hexd[m->build_id[i] >> 4];
            p[k++] = hexd[m->build_id[i] & 15];
        }
        memcpy(p + k, ".debug", 7);
        if (elf_map(&m->debug, p)) {
            elf_symtab(&m->debug, SHT_SYMTAB);
            if (m->debug.syms) {
                m->symtab = &m->debug;
                return;
            }
            at_as_unmap((void *)m->debug.img, m->debug.len);
            memset(&m->debug, 0, sizeof m->debug);
        }
    }
    if (debuglink_load(m))
        return;
    elf_symtab(&m->file, SHT_DYNSYM);
    if (m->file.syms) {
        m->symtab = &m->file;
        m->dynsym_only = true;
    }
}

static bool sym_is_func(const sr_elf *e, const Elf64_Sym *s)
{
    unsigned t = ELF64_ST_TYPE(s->st_info);
    return (t == STT_FUNC || t == STT_GNU_IFUNC) && s->st_shndx != SHN_UNDEF && s->st_size != 0
           && s->st_name < e->strsz;
}

static bool ix_less(const sr_ix *a, const sr_ix *b)
{
    return a->start < b->start || (a->start == b->start && (a->local < b->local || (a->local == b->local && a->sym < b->sym)));
}

/* heapsort: no allocation, bounded time (a large C++ binary has 10^5..10^6 functions) */
static void ix_sift(sr_ix *a, size_t i, size_t n)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && ix_less(&a[c], &a[c + 1]))
            c++;
        if (!ix_less(&a[i], &a[c]))
            return;
        sr_ix t = a[i];
        a[i] = a[c];
        a[c] = t;
        i = c;
    }
}

static void ix_build(sr_elf *e)
{
    e->ix_tried = true;
    uint32_t n = 0;
    for (uint32_t i = 1; i < e->nsyms; i++)
        n += sym_is_func(e, &e->syms[i]);
    if (n == 0)
        return;
    size_t bytes = (size_t)n * sizeof(sr_ix);
    sr_ix *a = map_anon("symbol index", bytes);
    if (!a)
        return;
    uint32_t k = 0;
    for (uint32_t i = 1; i < e->nsyms && k < n; i++) {
        const Elf64_Sym *s = &e->syms[i];
        if (sym_is_func(e, s))
            a[k++] = (sr_ix){s->st_value, s->st_value + s->st_size, i, ELF64_ST_BIND(s->st_info) == STB_LOCAL};
    }
    for (size_t i = n / 2; i-- > 0;)
        ix_sift(a, i, n);
    for (size_t end = n; end-- > 1;) {
        sr_ix t = a[0];
        a[0] = a[end];
        a[end] = t;
        ix_sift(a, 0, end);
    }
    e->ix = a;
    e->nix = n;
    e->ix_bytes = bytes;
}

/* The function symbol covering ELF virtual address va: index or -1. An exported name wins over a
 * local alias of the same address. */
static int64_t sym_find(sr_elf *e, uint64_t va)
{
    if (!e->ix_tried)
        ix_build(e);
    if (!e->ix)
        return -1;
    size_t lo = 0, hi = e->nix; /* the first entry starting after va */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (e->ix[mid].start <= va)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* look back a little: a symbol nested in a larger one (rare) starts later but ends sooner */
    for (size_t j = lo, k = 0; j > 0 && k < 16; j--, k++) {
        const sr_ix *x = &e->ix[j - 1];
        if (va < x->end) {
            size_t f = j - 1;
            while (f > 0 && e->ix[f - 1].start == x->start)
                f--;
            return e->ix[f].sym;
        }
    }
    return -1;
}

/* ---- payloads ---- */
static uint8_t *put_var(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* uint16 byte length + UTF-8; cut to what fits in the payload buffer */
static uint8_t *put_str(uint8_t *p, const char *s, size_t n)
{
    size_t room = (size_t)(S.payload + sizeof S.payload - p);
    if (n > room - 16)
        n = room - 16;
    uint16_t len = (uint16_t)n;
    memcpy(p, &len, 2);
    memcpy(p + 2, s, n);
    return p + 2 + n;
}

static char *hex_u64(char *o, uint64_t v)
{
    *o++ = '0';
    *o++ = 'x';
    int sh = 60;
    while (sh > 0 && ((v >> sh) & 15) == 0)
        sh -= 4;
    for (; sh >= 0; sh -= 4)
        *o++ = hexd[(v >> sh) & 15];
    return o;
}

static void emit_module(sr_mod *m)
{
    if (at_symrun_clr) {
        at_symrun_clr_module(m->id, m->path);
        S.stat_mappings++;
        return;
    }
    uint64_t meta_id = 0;
    if (m->build_id_len) {
        char js[256], *o = js;
        const char *a = "{\"type\":\"ELF\",\"build_id\":\"";
        memcpy(o, a, strlen(a));
        o += strlen(a);
        for (uint32_t i = 0; i < m->build_id_len; i++) {
            *o++ = hexd[m->build_id[i] >> 4];
            *o++ = hexd[m->build_id[i] & 15];
        }
        memcpy(o, "\",\"p_vaddr\":\"", 13);
        o = hex_u64(o + 13, m->p_vaddr);
        memcpy(o, "\",\"p_offset\":\"", 14);
        o = hex_u64(o + 14, m->p_offset);
        memcpy(o, "\"}", 2);
        o += 2;
        uint8_t *p = put_var(S.payload, m->id);
        p = put_str(p, js, (size_t)(o - js));
        p = put_str(p, "{}", 2);
        at_ntw_flusher_event(t_meta, S.payload, (uint32_t)(p - S.payload));
        meta_id = m->id;
    }
    uint8_t *p = put_var(S.payload, m->id);
    p = put_var(p, m->start);
    p = put_var(p, m->end); /* exclusive: TraceLog takes End - Start as the module's size */
    p = put_var(p, m->offset);
    p = put_str(p, m->path, strlen(m->path));
    p = put_var(p, meta_id);
    at_ntw_flusher_event(t_map, S.payload, (uint32_t)(p - S.payload));
    S.stat_mappings++;
}

static void symbol(sr_mod *m, int64_t si, uint32_t gen);

static void cover(uint64_t ip, uint32_t gen, bool *maps_fresh)
{
    if (!set_add(S.addrs, ip, gen))
        return;
    sr_mod *m = mod_find(ip);
    if (!m && !*maps_fresh) {
        maps_read();
        *maps_fresh = true;
        m = mod_find(ip);
    }
    if (!m)
        return; /* nothing maps it (a wild frame): readers show the bare address */
    if (!m->loaded)
        mod_load(m);
    if (m->file_gen != gen) {
        emit_module(m);
        m->file_gen = gen;
    }
    if (!m->symtab)
        return;
    /* The function TraceEvent finds, at the address as it is (the shim stores call sites), and
     * the one at the byte before, which our tools look up first: the caller for a stack of raw
     * return addresses (a runtime user's), the same function for the shim's. */
    int64_t at = sym_find(m->symtab, ip - m->bias);
    int64_t before = ip > m->start ? sym_find(m->symtab, ip - 1 - m->bias) : -1;
    symbol(m, at, gen);
    if (before != at)
        symbol(m, before, gen);
}

/* ProcessSymbol for symbol si of m, once per file */
static void symbol(sr_mod *m, int64_t si, uint32_t gen)
{
    if (si < 0)
        return;
    uint64_t key = (uint64_t)m->id << 32 | (uint64_t)si; /* ids are stable; slots move */
    if (!set_add(S.syms, key, gen))
        return;
    const Elf64_Sym *s = &m->symtab->syms[si];
    const char *name = m->symtab->str + s->st_name;
    size_t nlen = strnlen(name, m->symtab->strsz - s->st_name);
    /* "name@@VERSION" (a versioned definition in .symtab): the name alone, as .dynsym gives it */
    const char *at = memchr(name, '@', nlen);
    if (at && at != name)
        nlen = (size_t)(at - name);
    size_t dl = at_demangle(name, nlen, S.name, sizeof S.name);
    if (dl) {
        name = S.name;
        nlen = dl;
    }
    uint64_t start = s->st_value + m->bias;
    if (at_symrun_clr) {
        at_symrun_clr_method(++S.next_sym_id, m->id, start, s->st_size, name, nlen);
        S.stat_symbols++;
        return;
    }
    uint8_t *p = put_var(S.payload, ++S.next_sym_id);
    p = put_var(p, m->id);
    p = put_var(p, start);
    /* End is inclusive (TraceEvent >= 3.2.5 adds one), but older readers take End - Start as the
     * size and would miss the last byte, where a call site of a noreturn call is: one past it is
     * right for both. The byte it adds is the next function's first, which no stored address is
     * (call sites and a hooked function's own frame lie inside their function). */
    p = put_var(p, start + s->st_size);
    p = put_str(p, name, nlen);
    p = put_var(p, NT_US_SYMBOL_NAME_FINAL); /* after the fields TraceEvent reads: it ignores it */
    at_ntw_flusher_event(t_sym, S.payload, (uint32_t)(p - S.payload));
    S.stat_symbols++;
}

void at_symrun_cover(const uintptr_t *ips, uint32_t n, uint32_t file_gen)
{
    if (!S.init || !t_map)
        return;
    bool maps_fresh = false;
    for (uint32_t i = 0; i < n; i++)
        cover(ips[i], file_gen, &maps_fresh);
}

void at_symrun_stats(uint64_t *mappings, uint64_t *symbols)
{
    *mappings = S.stat_mappings;
    *symbols = S.stat_symbols;
}
