/* resolve.c: a configured name -> the loaded module that defines it and the function's address.
 * Modules are those of dl_iterate_phdr (load order, the executable first); each module's file is
 * read with libelf: .dynsym (with .gnu.version for sym@VERSION), then .symtab, then the .symtab of
 * its separate debug file (/usr/lib/debug/.build-id/xx/yyyy.debug, or the .gnu_debuglink name).
 * module+0xOFFSET needs no symbol at all (stripped binaries). Runs before main and on dlopen; it
 * allocates and reads files, never on a hot path. */
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hook.h"

typedef struct module {
    char path[4096];
    uintptr_t base;
    bool is_exe;
} module;

typedef struct modlist {
    module *m;
    int n, cap;
} modlist;

static int collect(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    modlist *l = data;
    const char *name = info->dlpi_name;
    bool exe = l->n == 0;
    if (!exe && (!name || !*name))
        return 0; /* the vDSO */
    if (!exe && strstr(name, "linux-vdso"))
        return 0;
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 32;
        module *m = realloc(l->m, sizeof *m * (size_t)cap);
        if (!m)
            return 1;
        l->m = m;
        l->cap = cap;
    }
    module *m = &l->m[l->n++];
    m->base = info->dlpi_addr;
    m->is_exe = exe;
    if (exe) {
        ssize_t k = readlink("/proc/self/exe", m->path, sizeof m->path - 1);
        m->path[k > 0 ? k : 0] = 0;
    } else
        snprintf(m->path, sizeof m->path, "%s", name);
    return 0;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* "libc" or "libc.so.6" names /lib/x86_64-linux-gnu/libc.so.6; "server" names ./server. */
static bool module_matches(const module *m, const char *want)
{
    const char *b = base_name(m->path);
    size_t n = strlen(want);
    if (!strcmp(b, want) || !strcmp(m->path, want))
        return true;
    return !strncmp(b, want, n) && (b[n] == '.' || b[n] == '-');
}

static int self_anchor;

static bool is_self(const module *m)
{
    Dl_info di;
    return dladdr(&self_anchor, &di) && di.dli_fname && !strcmp(di.dli_fname, m->path);
}

bool at_module_loaded(const char *name)
{
    modlist l = {0};
    dl_iterate_phdr(collect, &l);
    bool found = false;
    for (int i = 0; i < l.n && !found; i++)
        found = module_matches(&l.m[i], name);
    free(l.m);
    return found;
}

/* ---- ELF files ---- */

typedef struct elf_file {
    int fd;
    Elf *e;
} elf_file;

static int elf_open(const char *path, elf_file *f)
{
    elf_version(EV_CURRENT);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0)
        return -1;
    f->e = elf_begin(f->fd, ELF_C_READ_MMAP, NULL);
    if (!f->e || elf_kind(f->e) != ELF_K_ELF) {
        if (f->e)
            elf_end(f->e);
        close(f->fd);
        return -1;
    }
    return 0;
}

static void elf_close(elf_file *f)
{
    elf_end(f->e);
    close(f->fd);
}

static void build_id_of(Elf *e, char *hex, size_t n)
{
    hex[0] = 0;
    Elf_Scn *s = NULL;
    while ((s = elf_nextscn(e, s))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(s, &sh) || sh.sh_type != SHT_NOTE)
            continue;
        Elf_Data *d = elf_getdata(s, NULL);
        size_t off = 0, no, doff;
        GElf_Nhdr nh;
        while (d && (off = gelf_getnote(d, off, &nh, &no, &doff)) > 0) {
            if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
                !memcmp((char *)d->d_buf + no, "GNU", 4)) {
                const uint8_t *b = (const uint8_t *)d->d_buf + doff;
                size_t k = 0;
                for (size_t i = 0; i < nh.n_descsz && k + 3 <= n; i++, k += 2)
                    snprintf(hex + k, 3, "%02x", b[i]);
                return;
            }
        }
    }
}

void at_module_build_id(const char *path, char *hex, size_t n)
{
    elf_file f;
    hex[0] = 0;
    if (elf_open(path, &f) < 0)
        return;
    build_id_of(f.e, hex, n);
    elf_close(&f);
}

/* The version name of dynsym index i (from .gnu.version / .gnu.version_d), or NULL. */
static const char *version_of(Elf *e, size_t i)
{
    Elf_Scn *s = NULL, *vs = NULL, *vd = NULL;
    GElf_Shdr vdsh = {0};
    while ((s = elf_nextscn(e, s))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(s, &sh))
            continue;
        if (sh.sh_type == SHT_GNU_versym)
            vs = s;
        else if (sh.sh_type == SHT_GNU_verdef) {
            vd = s;
            vdsh = sh;
        }
    }
    if (!vs || !vd)
        return NULL;
    Elf_Data *d = elf_getdata(vs, NULL);
    GElf_Versym v;
    if (!d || !gelf_getversym(d, (int)i, &v))
        return NULL;
    unsigned idx = v & 0x7fff;
    Elf_Data *dd = elf_getdata(vd, NULL);
    size_t off = 0;
    for (unsigned k = 0; dd && k < vdsh.sh_info; k++) {
        GElf_Verdef def;
        if (!gelf_getverdef(dd, (int)off, &def))
            break;
        if (def.vd_ndx == idx) {
            GElf_Verdaux aux;
            if (!gelf_getverdaux(dd, (int)(off + def.vd_aux), &aux))
                return NULL;
            return elf_strptr(e, vdsh.sh_link, aux.vda_name);
        }
        if (!def.vd_next)
            break;
        off += def.vd_next;
    }
    return NULL;
}

/* Is dynsym index i a non-default version (sym@VER, not sym@@VER)? A plain name means the default
 * version, as the dynamic linker binds it. */
static bool version_hidden(Elf *e, size_t i)
{
    Elf_Scn *s = NULL;
    while ((s = elf_nextscn(e, s))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(s, &sh) || sh.sh_type != SHT_GNU_versym)
            continue;
        Elf_Data *d = elf_getdata(s, NULL);
        GElf_Versym v;
        return d && gelf_getversym(d, (int)i, &v) && (v & 0x8000);
    }
    return false;
}

/* Look sym up in the tables of type want (SHT_DYNSYM or SHT_SYMTAB) of e. */
static bool lookup(Elf *e, int want, const char *sym, const char *ver, GElf_Sym *out,
                   bool *exported, char *defver)
{
    Elf_Scn *s = NULL;
    while ((s = elf_nextscn(e, s))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(s, &sh) || (int)sh.sh_type != want || !sh.sh_entsize)
            continue;
        Elf_Data *d = elf_getdata(s, NULL);
        size_t n = sh.sh_size / sh.sh_entsize;
        for (size_t i = 1; d && i < n; i++) {
            GElf_Sym st;
            if (!gelf_getsym(d, (int)i, &st) || st.st_shndx == SHN_UNDEF)
                continue;
            int type = GELF_ST_TYPE(st.st_info);
            if (type != STT_FUNC && type != STT_GNU_IFUNC)
                continue;
            const char *name = elf_strptr(e, sh.sh_link, st.st_name);
            if (!name || strcmp(name, sym))
                continue;
            if (ver && *ver) {
                const char *v = want == SHT_DYNSYM ? version_of(e, i) : NULL;
                if (!v || strcmp(v, ver))
                    continue;
            } else if (want == SHT_DYNSYM && version_hidden(e, i))
                continue;
            *out = st;
            *exported = want == SHT_DYNSYM && GELF_ST_VISIBILITY(st.st_other) == STV_DEFAULT &&
                        GELF_ST_BIND(st.st_info) != STB_LOCAL;
            if (defver) {
                const char *v = want == SHT_DYNSYM ? version_of(e, i) : NULL;
                snprintf(defver, 64, "%s", v ? v : "");
            }
            return true;
        }
    }
    return false;
}

/* The separate debug file of e (build-id first, then .gnu_debuglink), opened, or -1. */
static int debug_open(Elf *e, const char *path, elf_file *f)
{
    char hex[128], p[4096];
    build_id_of(e, hex, sizeof hex);
    if (strlen(hex) > 2) {
        snprintf(p, sizeof p, "/usr/lib/debug/.build-id/%.2s/%s.debug", hex, hex + 2);
        if (elf_open(p, f) == 0)
            return 0;
    }
    size_t shstr;
    if (elf_getshdrstrndx(e, &shstr) != 0)
        return -1;
    Elf_Scn *s = NULL;
    while ((s = elf_nextscn(e, s))) {
        GElf_Shdr sh;
        const char *n;
        if (!gelf_getshdr(s, &sh) || !(n = elf_strptr(e, shstr, sh.sh_name)) ||
            strcmp(n, ".gnu_debuglink"))
            continue;
        Elf_Data *d = elf_getdata(s, NULL);
        if (!d || !d->d_size)
            return -1;
        const char *link = d->d_buf;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(dir, sizeof dir, ".");
        const char *fmts[] = {"%s/%s", "%s/.debug/%s", "/usr/lib/debug%s/%s"};
        for (int i = 0; i < 3; i++) {
            snprintf(p, sizeof p, fmts[i], dir, link);
            if (strcmp(p, path) && elf_open(p, f) == 0)
                return 0;
        }
        return -1;
    }
    return -1;
}

static bool find_in_module(const module *m, const char *sym, const char *ver, at_resolved *r)
{
    elf_file f;
    if (elf_open(m->path, &f) < 0)
        return false;
    GElf_Sym st;
    bool exported = false, found = false;
    if (lookup(f.e, SHT_DYNSYM, sym, ver, &st, &exported, r->defver))
        r->table = AT_SYM_DYNSYM, found = true;
    else if (!(ver && *ver) && lookup(f.e, SHT_SYMTAB, sym, NULL, &st, &exported, NULL))
        r->table = AT_SYM_SYMTAB, found = true, exported = false;
    else if (!(ver && *ver)) {
        elf_file d;
        if (debug_open(f.e, m->path, &d) == 0) {
            if (lookup(d.e, SHT_SYMTAB, sym, NULL, &st, &exported, NULL))
                r->table = AT_SYM_DEBUG, found = true, exported = false;
            elf_close(&d);
        }
    }
    elf_close(&f);
    if (!found)
        return false;
    snprintf(r->module, sizeof r->module, "%s", m->path);
    r->base = m->base;
    r->addr = m->base + st.st_value;
    r->size = st.st_size;
    r->is_exe = m->is_exe;
    r->exported = exported;
    if (GELF_ST_TYPE(st.st_info) == STT_GNU_IFUNC) {
        /* st_value is the resolver: ask the dynamic linker for what it chose */
        void *p = ver && *ver ? dlvsym(RTLD_DEFAULT, sym, ver) : dlsym(RTLD_DEFAULT, sym);
        if (!p)
            return false;
        r->addr = (uintptr_t)p;
        r->size = 0;
    }
    return true;
}

int at_resolve(const char *spec, at_resolved *r, char *why, size_t whylen)
{
    memset(r, 0, sizeof *r);
    char buf[512], lib[256] = "";
    snprintf(buf, sizeof buf, "%s", spec);
    char *name = buf;
    char *bang = strchr(buf, '!');
    if (bang) {
        *bang = 0;
        snprintf(lib, sizeof lib, "%.255s", buf);
        name = bang + 1;
    }
    modlist l = {0};
    dl_iterate_phdr(collect, &l);
    int rc = -1;
    char *plus = strrchr(name, '+');
    if (plus && !bang) {
        /* module+0xOFFSET: the offset is a virtual address of the module's file (as nm shows) */
        *plus = 0;
        unsigned long long off = strtoull(plus + 1, NULL, 16);
        for (int i = 0; i < l.n; i++)
            if (module_matches(&l.m[i], name) && !is_self(&l.m[i])) {
                snprintf(r->module, sizeof r->module, "%s", l.m[i].path);
                r->base = l.m[i].base;
                r->addr = l.m[i].base + off;
                r->is_exe = l.m[i].is_exe;
                r->table = AT_SYM_OFFSET;
                rc = 0;
                break;
            }
        if (rc < 0)
            snprintf(why, whylen, "no loaded module is called '%s'", name);
        free(l.m);
        return rc;
    }
    char *at = strchr(name, '@');
    if (at)
        *at++ = 0;
    snprintf(r->sym, sizeof r->sym, "%.255s", name);
    snprintf(r->version, sizeof r->version, "%s", at ? at : "");
    bool lib_seen = false;
    for (int i = 0; i < l.n && rc < 0; i++) {
        if (is_self(&l.m[i]))
            continue;
        if (*lib) {
            if (!module_matches(&l.m[i], lib))
                continue;
            lib_seen = true;
        }
        if (find_in_module(&l.m[i], name, at, r))
            rc = 0;
    }
    if (rc < 0) {
        if (*lib && !lib_seen)
            snprintf(why, whylen, "no loaded module is called '%s'", lib);
        else if (at)
            snprintf(why, whylen, "no function '%s' with version %s in %s", name, at,
                     *lib ? lib : "any loaded module");
        else
            snprintf(why, whylen, "no function '%s' in %s (.dynsym, .symtab, debug files)", name,
                     *lib ? lib : "any loaded module");
    }
    free(l.m);
    return rc;
}

/* ---- aliases ---- */

static bool name_listed(char (*names)[64], int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], s))
            return true;
    return false;
}

int at_resolve_aliases(const at_resolved *r, char (*names)[64], int max)
{
    if (r->table != AT_SYM_DYNSYM || !r->sym[0] || r->version[0] || r->is_exe)
        return 0;
    elf_file f;
    if (elf_open(r->module, &f) < 0)
        return 0;
    GElf_Sym base;
    bool exported;
    int n = 0;
    if (!lookup(f.e, SHT_DYNSYM, r->sym, NULL, &base, &exported, NULL))
        goto out;
    /* the same function under other exported names: one st_value (open64, __open for open) */
    Elf_Scn *s = NULL;
    while ((s = elf_nextscn(f.e, s))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(s, &sh) || sh.sh_type != SHT_DYNSYM || !sh.sh_entsize)
            continue;
        Elf_Data *d = elf_getdata(s, NULL);
        size_t cnt = sh.sh_size / sh.sh_entsize;
        for (size_t i = 1; d && i < cnt && n < max; i++) {
            GElf_Sym st;
            if (!gelf_getsym(d, (int)i, &st) || st.st_shndx == SHN_UNDEF ||
                st.st_value != base.st_value || GELF_ST_BIND(st.st_info) == STB_LOCAL ||
                GELF_ST_VISIBILITY(st.st_other) != STV_DEFAULT)
                continue;
            int type = GELF_ST_TYPE(st.st_info);
            if (type != STT_FUNC && type != STT_GNU_IFUNC)
                continue;
            const char *name = elf_strptr(f.e, sh.sh_link, st.st_name);
            const char *ver = version_of(f.e, i);
            if (!name || !strcmp(name, r->sym) || strlen(name) >= 64 || version_hidden(f.e, i) ||
                (ver && strstr(ver, "PRIVATE")) || name_listed(names, n, name))
                continue;
            snprintf(names[n++], 64, "%s", name);
        }
        break;
    }
    /* the fortified variants of each of those names (__read_chk, __open_2, __open64_2) */
    int same = n;
    for (int k = -1; k < same && n < max; k++) {
        const char *b = k < 0 ? r->sym : names[k];
        static const char *const forms[] = {"__%s_chk", "__%s_2"};
        for (int j = 0; j < 2 && n < max; j++) {
            char cand[96];
            snprintf(cand, sizeof cand, forms[j], b);
            GElf_Sym st;
            if (strlen(cand) < 64 && !name_listed(names, n, cand) &&
                lookup(f.e, SHT_DYNSYM, cand, NULL, &st, &exported, NULL) && exported)
                snprintf(names[n++], 64, "%s", cand);
        }
    }
out:
    elf_close(&f);
    return n;
}
