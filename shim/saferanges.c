/* saferanges.c: tells the safe reader (runtime/saferead.c) which memory stays readable for the life of
 * the process, so that captured strings there are copied without a system call: the readable
 * segments of the program, the shim and every library they need (DT_NEEDED, transitively: a library
 * something still needs is never unloaded), which hold the string literals most captures point to;
 * and the main thread's stack. Objects a dlopen brought (even one made by another library's
 * constructor before this one) can be closed again and are left to the kernel copy. */
#include <link.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/resource.h>

#include "saferead.h"
#include "shim.h"

#define MAX_OBJS 512
/* most processes load fewer objects than this: their table lives on the constructor's stack, in
 * pages the loader has already touched; a larger set takes the static table (a page of its own) */
#define FEW_OBJS 48

typedef struct obj {
    const char *name;
    ElfW(Addr) addr;
    const ElfW(Phdr) *ph;
    int phnum;
    bool keep, done;
} obj;

typedef struct objs {
    int n, cap, seen;
    obj *o;
} objs;

static int collect(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    objs *s = data;
    s->seen++;
    if (s->n < s->cap)
        s->o[s->n++] = (obj){info->dlpi_name ? info->dlpi_name : "", info->dlpi_addr,
                             info->dlpi_phdr, info->dlpi_phnum, false, false};
    return 0;
}

static const ElfW(Dyn) *dynamic(const obj *o)
{
    for (int i = 0; i < o->phnum; i++)
        if (o->ph[i].p_type == PT_DYNAMIC)
            return (const ElfW(Dyn) *)(o->addr + o->ph[i].p_vaddr);
    return NULL;
}

/* ld.so rewrites the address entries of a writable dynamic section to run-time addresses; a
 * read-only one keeps link-time values */
static const char *strtab(const obj *o, const ElfW(Dyn) *d)
{
    for (; d && d->d_tag != DT_NULL; d++)
        if (d->d_tag == DT_STRTAB)
            return (const char *)(d->d_un.d_ptr < o->addr ? o->addr + d->d_un.d_ptr : d->d_un.d_ptr);
    return NULL;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* The loaded object a DT_NEEDED name stands for: by file name, else by DT_SONAME. */
static obj *needed(objs *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (s->o[i].name[0] && !strcmp(base_name(s->o[i].name), name))
            return &s->o[i];
    for (int i = 0; i < s->n; i++) {
        const ElfW(Dyn) *d = dynamic(&s->o[i]);
        const char *st = strtab(&s->o[i], d);
        for (; st && d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_SONAME && !strcmp(st + d->d_un.d_val, name))
                return &s->o[i];
    }
    return NULL;
}

static void add_segments(const obj *o)
{
    for (int i = 0; i < o->phnum; i++) {
        const ElfW(Phdr) *ph = &o->ph[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_R) || !ph->p_memsz)
            continue;
        uintptr_t lo = o->addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        /* the kernel maps whole pages: the segment's first and last page are readable throughout */
        at_saferead_add_range(lo & ~(uintptr_t)4095, (hi + 4095) & ~(uintptr_t)4095);
    }
}

static void objects(void)
{
    obj few[FEW_OBJS];
    objs s = {.cap = FEW_OBJS, .o = few};
    dl_iterate_phdr(collect, &s);
    if (s.seen > s.cap) {
        static obj many[MAX_OBJS]; /* 16 KiB: not on the constructor's stack */
        s = (objs){.cap = MAX_OBJS, .o = many};
        dl_iterate_phdr(collect, &s);
    }
    if (!s.n)
        return;
    s.o[0].keep = true; /* the program */
    uintptr_t self = (uintptr_t)&objects;
    for (int i = 0; i < s.n; i++)
        for (int k = 0; k < s.o[i].phnum; k++) {
            const ElfW(Phdr) *ph = &s.o[i].ph[k];
            if (ph->p_type == PT_LOAD && self >= s.o[i].addr + ph->p_vaddr &&
                self < s.o[i].addr + ph->p_vaddr + ph->p_memsz)
                s.o[i].keep = true; /* the shim (linked -z nodelete) */
        }
    for (bool more = true; more;) {
        more = false;
        for (int i = 0; i < s.n; i++) {
            obj *o = &s.o[i];
            if (!o->keep || o->done)
                continue;
            o->done = true;
            const ElfW(Dyn) *d = dynamic(o);
            const char *st = strtab(o, d);
            for (; st && d->d_tag != DT_NULL; d++) {
                obj *n = d->d_tag == DT_NEEDED ? needed(&s, st + d->d_un.d_val) : NULL;
                if (n && !n->keep) {
                    n->keep = true;
                    more = true;
                }
            }
        }
    }
    for (int i = 0; i < s.n; i++)
        if (s.o[i].keep)
            add_segments(&s.o[i]);
}

/* The main thread's stack: its top holds the strings the kernel put there at exec, the program's
 * path (AT_EXECFN) highest. Below, the kernel keeps at least the stack's soft limit (and never less
 * than 128 MiB) free of other mappings; with no limit it lays mappings out from the bottom of the
 * address space, and 8 MiB is the zone taken. */
static void main_stack(void)
{
    const char *fn = (const char *)getauxval(AT_EXECFN);
    if (!fn)
        return;
    uintptr_t hi = (uintptr_t)fn + strlen(fn) + 1;
    struct rlimit rl;
    uintptr_t zone = (uintptr_t)8 << 20;
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        zone = rl.rlim_cur < ((rlim_t)128 << 20) ? (uintptr_t)rl.rlim_cur : (uintptr_t)128 << 20;
    if (zone < hi)
        at_saferead_main_stack(hi - zone, hi);
}

void at_saferanges_init(void)
{
    objects();
    main_stack();
}
