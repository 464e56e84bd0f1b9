/* smalloc.c: the shim's small objects that are made on the program's threads (activities, hook
 * contexts), kept out of the program's malloc. glibc gives a thread that calls malloc for the first
 * time an arena of its own, 64 MiB of address space (up to 8 per core): the shim's first activity
 * on a thread that never allocates would add that to the program's VmSize, and under RLIMIT_AS take
 * the room of the program's own thread stacks and mappings. Here objects come from slabs mapped
 * through asroom.c (under a limit, out of the room reserved at the shim's start), in a few size
 * classes, each with a free list under a lock (activity.c keeps a per-thread cache in front).
 * Never given back to the system. */
#include <pthread.h>
#include <stdint.h>

#include "trace_int.h"
#include "smalloc.h"

#define SM_HDR 16u                /* before each object: its class (keeps 16-byte alignment) */
#define SM_MIN_SHIFT 6            /* classes of 64, 128, ... bytes with the header */
#define SM_CLASSES 5              /* ... up to 1024 */
#define SM_SLAB (256u << 10)

typedef struct sm_free {
    struct sm_free *next;
} sm_free;

static pthread_mutex_t sm_lock AT_FORK_DATA = PTHREAD_MUTEX_INITIALIZER;
static sm_free *sm_list[SM_CLASSES]; /* under sm_lock */
static at_as_carver sm_slab;         /* under sm_lock: the slab being carved */
static pthread_once_t sm_once = PTHREAD_ONCE_INIT;

/* A fork child is one thread: another thread of the parent may have held the lock. */
AT_FORK_TEXT static void sm_atfork_child(void)
{
    at_mutex_fork_reset(&sm_lock);
}

static void sm_init(void)
{
    pthread_atfork(NULL, NULL, sm_atfork_child);
}

void *at_sm_alloc(size_t n)
{
    unsigned c = 0;
    while (c < SM_CLASSES && (size_t)1 << (SM_MIN_SHIFT + c) < n + SM_HDR)
        c++;
    if (c == SM_CLASSES)
        return NULL;
    pthread_once(&sm_once, sm_init);
    size_t sz = (size_t)1 << (SM_MIN_SHIFT + c);
    pthread_mutex_lock(&sm_lock);
    uint8_t *p = (uint8_t *)sm_list[c];
    if (p) {
        sm_list[c] = sm_list[c]->next;
    } else {
        p = at_as_carve(&sm_slab, sz, SM_SLAB, "small objects");
        if (!p) {
            pthread_mutex_unlock(&sm_lock);
            return NULL;
        }
    }
    pthread_mutex_unlock(&sm_lock);
    *(uint64_t *)p = c;
    return p + SM_HDR;
}

void at_sm_free(void *q)
{
    if (!q)
        return;
    uint8_t *p = (uint8_t *)q - SM_HDR;
    unsigned c = (unsigned)*(uint64_t *)p;
    pthread_mutex_lock(&sm_lock);
    ((sm_free *)p)->next = sm_list[c];
    sm_list[c] = (sm_free *)p;
    pthread_mutex_unlock(&sm_lock);
}
