/* shim.h: state shared by the files of the preload library: on/off, the settings read once in the
 * constructor, the shim's own event types, and the per-thread id cache. Internal (hidden). */
#ifndef AT_SHIM_H
#define AT_SHIM_H

#include <dlfcn.h>
#include <stdio.h>
#include <sys/types.h>

#include "activity.h"
#include "real.h"
#include "config.h"
#include "trace.h"

/* The real definitions of functions off the hot page (real.h) whose library may be absent, or
 * loaded only in a plugin's local scope (lazy.c). AT_LAZY_REAL(name, ret, args) defines name##_fn
 * and, for use in name's wrapper or a helper always inlined into it (the return address is then
 * the wrapper's caller's):
 *   real_##name()             the definition the calling module binds to; never NULL (when none
 *                             exists it is a stub that fails the way the dynamic linker does);
 *   real_##name##_opt()       the same, but NULL when nothing defines name (the shim's own
 *                             queries of a function a library version may lack);
 *   real_##name##_from(ret)   real_##name() for a caller's return address handed down.
 * When the global scope has the library, each is one load and a predicted branch. */
#define AT_LAZY_LOCAL 16
typedef struct at_lazy_local {
    const void *ret;    /* the call site (a wrapper's return address) */
    const void *caller; /* its module's link_map, and that module's base address */
    uintptr_t caller_base;
    void *fn;           /* its definition (NULL: none, for an optional look-up) */
    const void *def;    /* the module fn lies in, and its base: the entry is stale when that changed */
    uintptr_t def_base;
    unsigned long gen;  /* atomic: at_lazy_unloads when fn was last seen loaded */
    int ready;          /* atomic: the entry is filled in */
} at_lazy_local;
/* The hot part, two words in .bss: no pointer in its initial value, so the loader relocates
 * nothing there (a page of relocated .data is a copy-on-write fault at every start). The name and
 * the per-caller table (1 KiB, touched only for local-scope callers) come with each slow call. */
typedef struct at_lazy {
    void *global;          /* atomic: the global scope's definition (every caller binds to it) */
    unsigned claimed;      /* atomic: entries of the table taken */
} at_lazy;
void *at_lazy_slow(at_lazy *l, const char *sym, at_lazy_local *tab, const void *ret, bool need);

static inline __attribute__((always_inline)) void *at_lazy_get(at_lazy *l, const char *sym,
                                                               at_lazy_local *tab, const void *ret,
                                                               bool need)
{
    void *f = __atomic_load_n(&l->global, __ATOMIC_ACQUIRE);
    return AT_LIKELY(f != NULL) ? f : at_lazy_slow(l, sym, tab, ret, need);
}

/* The return address is taken on the slow side only: the global case reads nothing more. */
#define AT_LAZY_HERE(l, sym, tab, need)                                                            \
    __extension__({                                                                                \
        void *f_ = __atomic_load_n(&(l)->global, __ATOMIC_ACQUIRE);                                \
        AT_LIKELY(f_ != NULL) ? f_                                                                 \
                              : at_lazy_slow((l), (sym), (tab), __builtin_return_address(0), (need)); \
    })

#define AT_LAZY_REAL(name, ret, args)                                                              \
    typedef ret(*name##_fn) args;                                                                  \
    static at_lazy_local at_lazy_tab_##name[AT_LAZY_LOCAL];                                        \
    static at_lazy at_lazy_##name;                                                                 \
    static inline __attribute__((always_inline, unused)) name##_fn real_##name##_from(             \
        const void *ret_)                                                                          \
    {                                                                                              \
        return (name##_fn)at_lazy_get(&at_lazy_##name, #name, at_lazy_tab_##name, ret_, true);     \
    }                                                                                              \
    /* always inlined: the return address is the wrapper's own caller's */                        \
    static inline __attribute__((always_inline, unused)) name##_fn real_##name(void)               \
    {                                                                                              \
        return (name##_fn)AT_LAZY_HERE(&at_lazy_##name, #name, at_lazy_tab_##name, true);          \
    }                                                                                              \
    static inline __attribute__((always_inline, unused)) name##_fn real_##name##_opt(void)         \
    {                                                                                              \
        return (name##_fn)AT_LAZY_HERE(&at_lazy_##name, #name, at_lazy_tab_##name, false);         \
    }

/* clonevm.c: is the caller a clone(CLONE_VM) child running on its parent's thread-local storage? */
bool at_clonevm_caller_is_child(void);

/* 0 until the constructor succeeded (and forever in secure-execution mode or after a failure):
 * every interposed function then only calls the real one. 2 while a child lives that clone() made
 * with CLONE_VM and no TLS of its own: such a child is off (clonevm.c). On the hot page (real.h). */
static inline bool at_on(void)
{
    int v = __atomic_load_n(&at_hot.shim_on, __ATOMIC_RELAXED);
    return AT_LIKELY(v == 1) || (v == 2 && !at_clonevm_caller_is_child());
}

extern at_config at_cfg;
void at_process_fork_init(void);
extern pid_t at_pid;      /* this process (updated in a fork child; a vfork child differs from it) */

#define AT_SHIM_PROVIDER "acttrace-shim"
#define AT_KEYWORD_THREAD 0x1ull
#define AT_KEYWORD_PROCESS 0x2ull
#define AT_KEYWORD_FD 0x4ull
#define AT_KEYWORD_WAIT 0x8ull

typedef struct at_shim_events {
    at_event_type *thread_begin;  /* ThreadBegin: ParentThread, StartRoutine (in the inherited activity) */
    at_event_type *thread_end;    /* ThreadEnd: ExitKind (0 return, 1 pthread_exit/thrd_exit, 2 cancelled) */
    at_event_type *fork_parent;   /* ProcessFork: ChildPid (parent side) */
    at_event_type *fork_child;    /* ProcessForked: ParentPid (first event of the child's file) */
    at_event_type *exec;          /* ProcessExec: Path (just before exec) */
    at_event_type *spawn;         /* ProcessSpawn: ChildPid, Path (posix_spawn, parent side) */
    at_event_type *fatal;         /* FatalSignal: Signal, Code, Address */
    at_event_type *exit;          /* ProcessExit: Status (_exit/_Exit) */
    at_event_type *fd_tag;        /* FdTagged: Fd, Source (in the activity the fd is tagged with) */
    at_event_type *fd_ambiguous;  /* FdAmbiguous: Fd, TaggedActivity, CurrentActivity (warning) */
    at_event_type *sock_endpoints; /* SocketEndpoints: Fd, Role, Local, Peer (in the fd's tag) */
    at_event_type *trace_context;  /* TraceContext: Fd, TraceId, ParentId, Flags (a traceparent read) */
    at_event_type *sock_exchange;  /* SocketExchange: Fd, Index (a request on a kept-alive socket) */
    at_activity_kind *connection; /* Connection activity (ACTTRACE_ACCEPT_ACTIVITY=1): ConnectionId, Fd */
    at_event_type *wait_suspend;  /* WaitSuspend (opcode Suspend): Reason, Call, Object, with the
                                   * call's stack, at the start of a wait (waits.c) */
    at_event_type *wait_resume;   /* WaitResume (opcode Resume): Reason, Call, Object, BlockedNs */
} at_shim_events;
extern at_shim_events at_ev;

/* Stacks (stacks.c): set up the walker in the constructor; then take the calling thread's stack for
 * an event of kind which (AT_CFG_STACKS_START or _STOP) when the settings ask for one. skip: frames of
 * the shim above the caller's own to drop. Returns the number of frames (0: no stack). */
void at_shim_stacks_init(bool now);
void at_shim_stacks_setup(void); /* the walker ready now, whatever the settings (samples) */
uint32_t at_shim_stack(int which, uintptr_t *ips, uint32_t max, uint32_t skip);
/* The calling thread's stack with every run of the shim's frames dropped (wherever hooks nest), at
 * most depth of the program's frames, into ips (room for AT_STACK_MAX_DEPTH - 1 entries, the
 * machinery's included), as call sites (return address - 1, stacks.c says why); skip: leading
 * frames to drop first. at_shim_stack_trim does the
 * dropping on a stack already taken. */
uint32_t at_shim_capture(uintptr_t *ips, uint32_t depth, uint32_t skip);
uint32_t at_shim_capture_call(uintptr_t *ips, uint32_t depth, uint64_t ip, uint64_t sp, uint64_t bp,
                              uintptr_t leaf);
uint32_t at_shim_stack_trim(uintptr_t *ips, uint32_t n, uint32_t depth);
void at_shim_stack_own_init(void);

/* Registers the shim's event types; 0 or -1 with a message. */
int at_shim_events_register(char *err, size_t n);

/* Set (incremented) by the callback layer around a pool API call that may create the pool's worker
 * threads lazily (g_thread_pool_push): threads created meanwhile belong to the pool, not to the
 * submitter, so they begin in no activity and each work item brings its own. */
#define at_thread_noflow (AT_PTLS.thread_noflow) /* at_common.h */

/* thread.c: the file name (no directory) of the loaded object that holds addr, or NULL;
 * _dl_find_object takes no lock. at_glib_own: addr is a function of GLib's own libraries (libglib,
 * libgio, libgobject): a GThread running one is a service thread of GLib's, not the program's. */
const char *at_object_name(const void *addr);
bool at_glib_own(const void *addr);
/* The calling thread is the process's first (constructor; a fork child's forking thread): when it
 * leaves through pthread_exit, thrd_exit or cancellation, the process ends with its last thread. */
void at_thread_watch_leader(void);
void at_thread_watch_leader_start(void); /* the same, from the constructor */

/* process.c */
void at_signals_install(void);
/* altstack.c: an alternate signal stack of the shim's on the first thread (init) and on every thread
 * the shim starts, so the fatal-signal handler runs after a stack overflow; given back at the end. */
void at_altstack_init(void);
void at_altstack_thread_start(void);
void at_altstack_thread_end(void);
/* sampler.c: CPU samples of each thread (ACTTRACE_SAMPLE_HZ): set up after the writer and the stack
 * walker (0, or -1 with why it is off); a timer per thread; the program's sigaction of the signal
 * and its masks. */
extern int at_sample_sig;
int at_sampler_init(unsigned hz, char *why, size_t n);
bool at_sampler_on(void);
void at_sampler_thread_start(bool vblock);
void at_sampler_thread_end(void);
bool at_sampler_vblocked(void);
void at_sampler_exec_before(void);
void at_sampler_exec_failed(void);
void at_sampler_fork_child(void);
void at_sampler_untrace(void);  /* a fork child left untraced: the signal is the program's again */
void at_altstack_untrace(void); /* the same for the thread's alternate stack */
extern const char *at_manifest_path; /* ACTTRACE_MANIFEST, taken out of environ (process.c) */
int at_sampler_sigaction(int sig, const struct sigaction *act, struct sigaction *old);
void at_sampler_stop(void); /* no more samples in the process (its end) */
/* Tell the safe reader which memory stays mapped (saferanges.c); before the hooks go in. */
void at_saferanges_init(void);
void at_exec_env_init(void); /* consumes ACTTRACE_PARENT_ACTIVITY from environ */
/* A relative output pattern made absolute against the folder ACTTRACE_START_DIR named (the folder
 * the first traced process started in), in place; left as it is without one. */
void at_exec_output_base(char *pattern, size_t size);
/* A relative config path made absolute, in place: against ACTTRACE_START_DIR's folder, else this
 * process's working folder, which its images and children are then given as ACTTRACE_START_DIR. */
void at_exec_config_base(char *path, size_t size);
const char *at_env(const char *name); /* getenv without libc's code (preload.c) */
/* fdguard.c: the shim's own descriptors (the trace file's, at_trace_fd in the writer, and
 * libunwind's pipe) are hidden from the program's closes; a dup2/dup3 onto the trace's number moves
 * the trace first. */
extern int at_unw_fds[2];
static inline bool at_fd_is_ours(int fd)
{
    return AT_UNLIKELY(fd >= 0 && (fd == at_trace_fd || fd == at_unw_fds[0] || fd == at_unw_fds[1]));
}
void at_fdguard_before_dup(int to);
/* fdflow.c */
void at_fdflow_untag_range(unsigned first, unsigned last);
/* The shim's interposer of name that may run a config's rule on it (real.h: AT_DIRECT_LIST): its
 * index, its address and the real function's; -1 when the shim does not interpose name. */
int at_fdflow_direct_index(const char *name, void **self, void **real);
int at_fdflow_init(char *err, size_t n);
void at_fdflow_thread_exit(void); /* drop an adoption the exiting thread still holds */
bool at_fdflow_hold(int fd, at_activity *a, at_activity *prev, at_activity *base);
void at_fdflow_hold_prepare(const at_activity_kind *kind); /* before an fd-keyed pair of kind starts */
/* hook/dynlib.c: load libffi, libelf, Zydis and libgcc_s (the hooks' libraries, not linked) and
 * point the shim's calls of theirs at them; 0, or -1 with a message. Before any hook is made. */
int at_dynlib_load(char *err, size_t n);
void *at_dynlib_ffi_call(void); /* libffi's ffi_call, NULL before at_dynlib_load */
/* hooks.c: the config file's hooks (issue 5) */
struct at_hookconf;
int at_hooks_install(const struct at_hookconf *hc, char *err, size_t n);
void at_hooks_thread_exit(void); /* abandon the thread's unreturned hooked calls, leave adoptions */
/* acttrace check: report how each entry would be hooked; 0 when all can be */
int at_hooks_check(const struct at_hookconf *hc, FILE *out);
bool at_hooks_any(void);

/* slots.c: 64-byte contexts for items handed between threads; NULL when none can be had. Any thread
 * may free a slot another allocated. at_is_slot tells a slot from any other pointer. */
#define AT_SLOT_SIZE 64u
extern uintptr_t at_slot_lo;
extern size_t at_slot_used;
void *at_slot_alloc(void);
void at_slot_free(void *slot);
void at_slots_thread_exit(void); /* the ending thread's cached free slots go back */
static inline bool at_is_slot(const void *p)
{
    return (uintptr_t)p - __atomic_load_n(&at_slot_lo, __ATOMIC_RELAXED) <
           __atomic_load_n(&at_slot_used, __ATOMIC_RELAXED);
}

/* Write one of the shim's events in the current activity (errno preserved). */
void at_shim_event(const at_event_type *t, const void *payload, uint32_t len);

#endif
