/* lazy.c: the real definitions of the interposed functions of libraries that may be absent or
 * loaded only in a plugin's local scope (AT_LAZY_REAL in shim.h: GLib, GIO, libuv, libevent,
 * libgomp, and the libc functions the shim wraps off the hot page).
 *
 * The shim sits in the global scope, ahead of every library but the program itself, so every
 * module that calls, say, g_idle_add binds to our wrapper, including a plugin dlopen()ed with
 * RTLD_LOCAL whose GLib is only in its own scope. dlsym(RTLD_NEXT) searches the global scope
 * only: it answers for every caller when the library is there (then a caller with its own copy
 * binds to the global one as well, the global scope being searched first), and that answer is
 * cached for everyone. When it finds nothing, the definition is the one the calling module would
 * have bound to: looked up in the caller's own scope (the module and its dependencies), found from
 * the wrapper's return address, and cached per calling module, so plugins that bring different
 * copies of a library each reach their own. The cache is lock-free (a call may come from a signal
 * handler, or from a fork child whose other threads are gone), keyed by call site so that a hit
 * looks nothing up; after the program unloads anything (dlclose) an entry is checked again before
 * use, since its library may have gone and another come in its place. */
#include "shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct at_obj {
    const void *map;  /* its link_map (NULL: no object holds the address) */
    uintptr_t base;   /* its lowest mapped address: a link_map reused by a later load differs */
} at_obj;

static at_obj obj_of(const void *addr)
{
    struct dl_find_object o;
    if (addr && _dl_find_object((void *)addr, &o) == 0)
        return (at_obj){o.dlfo_link_map, (uintptr_t)o.dlfo_map_start};
    return (at_obj){NULL, 0};
}

static bool obj_eq(at_obj a, at_obj b)
{
    return a.map == b.map && a.base == b.base;
}

static const void *self_map(void)
{
    static const void *self;
    const void *m = __atomic_load_n(&self, __ATOMIC_RELAXED);
    if (!m) {
        m = obj_of((const void *)self_map).map;
        __atomic_store_n(&self, m, __ATOMIC_RELAXED);
    }
    return m;
}

/* name's definition as seen from the object called path: the first in its scope (itself, then its
 * dependencies). own: only a definition of that object itself. Never one of ours. */
static void *lookup_in(const char *path, const char *name, bool own)
{
    void *h = dlopen(path, RTLD_NOLOAD | RTLD_LAZY);
    if (!h)
        return NULL;
    void *f = dlsym(h, name);
    struct link_map *lm = NULL;
    if (f && own && (dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0 || obj_of(f).map != lm))
        f = NULL;
    dlclose(h); /* drops the reference NOLOAD took: the object stays as it was */
    if (f && obj_of(f).map == self_map())
        f = NULL;
    return f;
}

typedef struct names {
    char **v;
    size_t n, cap;
} names;

static int collect(struct dl_phdr_info *info, size_t size, void *p)
{
    (void)size;
    names *ns = p;
    if (!info->dlpi_name || !info->dlpi_name[0])
        return 0; /* the program (its scope is the global one) or the vDSO */
    if (ns->n == ns->cap) {
        size_t cap = ns->cap ? ns->cap * 2 : 64;
        char **v = realloc(ns->v, cap * sizeof *v);
        if (!v)
            return 1;
        ns->v = v;
        ns->cap = cap;
    }
    char *s = strdup(info->dlpi_name);
    if (s)
        ns->v[ns->n++] = s;
    return 0;
}

/* The last resort, for a call whose return address names no module that reaches the library (a
 * tail call from another module, a call through the shim's own wrappers, JIT code): the first
 * object, in load order, that defines name itself. The names are copied first: dl_iterate_phdr
 * holds a lock dlopen needs. */
static void *lookup_any(const char *name)
{
    names ns = {0};
    dl_iterate_phdr(collect, &ns);
    void *f = NULL;
    for (size_t i = 0; i < ns.n; i++) {
        if (!f)
            f = lookup_in(ns.v[i], name, true);
        free(ns.v[i]);
    }
    free(ns.v);
    return f;
}

/* What the dynamic linker does when a lazily bound call finds no definition: one line and exit
 * 127. The stub is called in the real function's place, with its arguments, and never returns;
 * the name comes from the thread's last failed resolution, made just before. */
static AT_TLS const char *missing_name;
static AT_TLS const void *missing_caller;

static void say(const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t w = syscall(SYS_write, 2, s, n);
        if (w <= 0)
            break;
        s += w;
        n -= (size_t)w;
    }
}

__attribute__((noreturn)) static void missing(void)
{
    Dl_info di;
    const char *who = missing_caller && dladdr(missing_caller, &di) && di.dli_fname && *di.dli_fname
                          ? di.dli_fname
                          : "the program";
    say("acttrace: symbol lookup error: ");
    say(who);
    say(": undefined symbol: ");
    say(missing_name ? missing_name : "?");
    say(" (no loaded library defines it)\n");
    syscall(SYS_exit_group, 127);
    __builtin_unreachable();
}

/* Unloads by the program so far (our dlclose). The libraries whose functions the cache holds are
 * unloaded by no one else (libc's own dlclose serves NSS and iconv modules). */
static unsigned long at_lazy_unloads;

AT_LAZY_REAL(dlclose, int, (void *))
AT_EXPORT int dlclose(void *h)
{
    int r = real_dlclose()(h);
    __atomic_add_fetch(&at_lazy_unloads, 1, __ATOMIC_RELEASE);
    return r;
}

static void cache_put(at_lazy *l, at_lazy_local *tab, const void *ret, at_obj caller, void *fn)
{
    unsigned long gen = __atomic_load_n(&at_lazy_unloads, __ATOMIC_ACQUIRE);
    unsigned i = __atomic_fetch_add(&l->claimed, 1, __ATOMIC_RELAXED);
    if (i >= AT_LAZY_LOCAL)
        return; /* full: later calls from that site find their module's entry (slower, still right) */
    at_lazy_local *e = &tab[i];
    at_obj def = obj_of(fn);
    e->ret = ret;
    e->caller = caller.map;
    e->caller_base = caller.base;
    e->fn = fn;
    e->def = def.map;
    e->def_base = def.base;
    e->gen = gen;
    __atomic_store_n(&e->ready, 1, __ATOMIC_RELEASE);
}

/* e's definition is still loaded where it was found: nothing was unloaded since it was last
 * checked, or its module is still there (it may have been unloaded, and another loaded in its
 * place). */
static bool live(at_lazy_local *e)
{
    unsigned long gen = __atomic_load_n(&at_lazy_unloads, __ATOMIC_ACQUIRE);
    if (AT_LIKELY(__atomic_load_n(&e->gen, __ATOMIC_RELAXED) == gen))
        return true;
    if (e->fn && !obj_eq(obj_of(e->fn), (at_obj){e->def, e->def_base})) {
        __atomic_store_n(&e->ready, 0, __ATOMIC_RELAXED); /* for good: its slot is not reused */
        return false;
    }
    __atomic_store_n(&e->gen, gen, __ATOMIC_RELAXED); /* a racing older store only costs a check */
    return true;
}

static void *found(const char *sym, void *f, const void *ret, bool need)
{
    if (f || !need)
        return f;
    missing_name = sym;
    missing_caller = ret;
    return (void *)missing;
}

static __attribute__((noinline)) void *resolve(at_lazy *l, const char *sym, at_lazy_local *tab,
                                               const void *ret, bool need);

/* A call site seen before, with nothing unloaded since: a short scan and no call (the rest, with
 * its look-ups, is out of line). */
void *at_lazy_slow(at_lazy *l, const char *sym, at_lazy_local *tab, const void *ret, bool need)
{
    unsigned n = __atomic_load_n(&l->claimed, __ATOMIC_RELAXED);
    unsigned long gen = __atomic_load_n(&at_lazy_unloads, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n && i < AT_LAZY_LOCAL; i++) {
        at_lazy_local *e = &tab[i];
        if (__atomic_load_n(&e->ready, __ATOMIC_ACQUIRE) && e->ret == ret &&
            __atomic_load_n(&e->gen, __ATOMIC_RELAXED) == gen && (e->fn || !need))
            return e->fn;
    }
    return resolve(l, sym, tab, ret, need);
}

static void *resolve(at_lazy *l, const char *sym, at_lazy_local *tab, const void *ret, bool need)
{
    /* by call site first: one look-up of the definition's module, none of the caller's */
    unsigned n = __atomic_load_n(&l->claimed, __ATOMIC_RELAXED);
    if (n > AT_LAZY_LOCAL)
        n = AT_LAZY_LOCAL;
    for (unsigned i = 0; i < n; i++) {
        at_lazy_local *e = &tab[i];
        if (__atomic_load_n(&e->ready, __ATOMIC_ACQUIRE) && e->ret == ret && live(e))
            return found(sym, e->fn, ret, need);
    }
    /* then by the calling module: another call site of it */
    at_obj caller = obj_of(ret);
    for (unsigned i = 0; i < n; i++) {
        at_lazy_local *e = &tab[i];
        if (__atomic_load_n(&e->ready, __ATOMIC_ACQUIRE) && e->caller == caller.map &&
            e->caller_base == caller.base && live(e)) {
            cache_put(l, tab, ret, caller, e->fn);
            return found(sym, e->fn, ret, need);
        }
    }

    int err = errno;
    void *f = dlsym(RTLD_NEXT, sym);
    if (f) {
        __atomic_store_n(&l->global, f, __ATOMIC_RELEASE);
        errno = err;
        return f;
    }
    struct link_map *lm = (struct link_map *)caller.map;
    if (lm && lm != self_map() && lm->l_name && lm->l_name[0])
        f = lookup_in(lm->l_name, sym, false);
    if (!f)
        f = lookup_any(sym);
    errno = err;
    /* an absent optional symbol is remembered too; an absent required one is not: the call that
     * needs it ends the process */
    if (f || !need)
        cache_put(l, tab, ret, caller, f);
    return found(sym, f, ret, need);
}
