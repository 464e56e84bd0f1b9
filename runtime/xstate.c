/* xstate.c: saving and restoring the extended (x87/SSE/AVX/AVX-512) state around calls into code that
 * may use it (xstate.h). XSAVEC where the CPU has it (compacted: only the components in use are
 * written), XSAVE otherwise, FXSAVE on CPUs without XSAVE. */
#include <cpuid.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/platform/x86.h>

#include "at_common.h"
#include "asroom.h"
#include "smalloc.h"
#include "xstate.h"

enum { XS_UNKNOWN, XS_FX, XS_XSAVE, XS_XSAVEC };
static int xs_kind AT_START_DATA;        /* written last, with release: the mask is set when it is read */
static uint32_t xs_mask AT_START_DATA;

/* What the CPU has, from the CPUID leaves glibc's loader read once for every process
 * (sys/platform/x86.h), not from CPUID itself: under a hypervisor each CPUID instruction is a trap
 * to the host, 1 to 15 us apiece, and reading these leaves directly cost a traced start about twelve
 * of them. XGETBV is not trapped. */
static AT_NOINLINE int xs_init(void)
{
    int kind = XS_FX;
    uint32_t mask = 0;
    if (CPU_FEATURE_PRESENT(OSXSAVE)) {
        uint32_t lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        mask = lo & 0xe7; /* x87 SSE AVX opmask ZMM_Hi256 Hi16_ZMM (not MPX, PKRU, AMX) */
        if (CPU_FEATURE_PRESENT(XSAVEC)) {
            /* compacted: these components' sizes are fixed by the architecture (x87 and SSE in
             * the 512-byte legacy area, the 64-byte header, then 256 + 64 + 512 + 1024 bytes, each
             * at most 63 bytes of alignment apart), 2,621 bytes at most: they always fit */
            kind = XS_XSAVEC;
        } else {
            /* standard format: each component at the offset CPUID gives; only CPUs without
             * XSAVEC (before 2015) come here */
            unsigned a, b, c, d;
            for (int i = 7; i >= 2; i--)
                if ((mask >> i & 1) && (!__get_cpuid_count(0xd, (unsigned)i, &a, &b, &c, &d) ||
                                        (uint64_t)a + b > AT_XSTATE_SIZE))
                    mask &= ~(1u << i);
            kind = XS_XSAVE;
        }
    }
    xs_mask = mask;
    __atomic_store_n(&xs_kind, kind, __ATOMIC_RELEASE);
    return kind;
}

void at_xstate_save(at_xstate *x)
{
    int k = __atomic_load_n(&xs_kind, __ATOMIC_ACQUIRE);
    if (AT_UNLIKELY(k == XS_UNKNOWN))
        k = xs_init();
    if (k != XS_FX) /* XSAVE(C) writes only XSTATE_BV (and XCOMP_BV) of the header: XRSTOR faults
                     * unless the rest is zero */
        for (int i = 512; i < 576; i += 8)
            *(uint64_t *)(x->b + i) = 0;
    if (k == XS_XSAVEC)
        __asm__ volatile("xsavec64 %0" : "+m"(*x) : "a"(xs_mask), "d"(0) : "memory");
    else if (k == XS_XSAVE)
        __asm__ volatile("xsave64 %0" : "+m"(*x) : "a"(xs_mask), "d"(0) : "memory");
    else
        __asm__ volatile("fxsave64 %0" : "=m"(*x)::"memory");
}

void at_xstate_restore(const at_xstate *x)
{
    if (__atomic_load_n(&xs_kind, __ATOMIC_RELAXED) == XS_FX)
        __asm__ volatile("fxrstor64 %0" ::"m"(*x) : "memory");
    else
        __asm__ volatile("xrstor64 %0" ::"m"(*x), "a"(xs_mask), "d"(0) : "memory");
}

void *at_xs_malloc(size_t n)
{
    at_xstate x;
    at_xstate_save(&x);
    void *p = at_sm_alloc(n); /* not the program's malloc: smalloc.c */
    at_xstate_restore(&x);
    return p;
}

void *at_xs_as_map(const char *what, size_t *len)
{
    at_xstate x;
    at_xstate_save(&x);
    void *p = at_as_map(what, len, 0, 0, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    at_xstate_restore(&x);
    return p;
}

void at_xs_free(void *p)
{
    at_xstate x;
    at_xstate_save(&x);
    at_sm_free(p);
    at_xstate_restore(&x);
}

void at_xs_once(pthread_once_t *once, void (*fn)(void))
{
    at_xstate x;
    at_xstate_save(&x);
    pthread_once(once, fn);
    at_xstate_restore(&x);
}

int at_xs_setspecific(pthread_key_t key, const void *v)
{
    at_xstate x;
    at_xstate_save(&x);
    int r = pthread_setspecific(key, v);
    at_xstate_restore(&x);
    return r;
}

void at_xs_call(void (*fn)(void))
{
    at_xstate x;
    at_xstate_save(&x);
    fn();
    at_xstate_restore(&x);
}
