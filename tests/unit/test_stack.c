/* test_stack.c: stacks end to end. Call chains with known names are captured (each walker), written
 * through the runtime, read back from the file with the project's reader and named by the symbolizer
 * (tools/ntsym.h) from the file's own Universal.System events: the names must be exactly the chain's,
 * in order, also through a dlopen'ed library, C++ frames (demangled) and a signal handler; a stripped
 * module gives module+offset; every address any written stack references is covered by the rundown of
 * the same file (rotated segments too, and the file of a killed process). The libraries are built
 * from tests/unit/stackfix/ when the test runs. */
#include <check.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ntreader.h"
#include "ntsym.h"
#include "stack.h"
#include "trace.h"

/* from the harness (at_testlib.h, which cannot be included with trace.h: both name at_field) */
const char *at_build_dir(void);
char *at_tmpdir(const char *tag);
char **at_trace_files(const char *dir);
void at_strv_free(char **v);
size_t at_strv_len(char *const *v);
void at_rmtree(const char *dir);

#define NOINL __attribute__((noinline))
#define KEEP_FRAME() __asm__ volatile("" ::: "memory") /* after a call: no tail call */
#define MAXF 64

static char *g_dir, g_path[4096];
static at_event_type *g_type;
static enum at_stack_mode g_mode;

static void start_with(enum at_stack_mode mode, const at_trace_options *base)
{
    char err[256];
    g_dir = at_tmpdir("stack");
    ck_assert_ptr_nonnull(g_dir);
    snprintf(g_path, sizeof g_path, "%s/t.nettrace", g_dir);
    at_trace_options o = base ? *base : (at_trace_options){0};
    o.path = g_path;
    ck_assert_msg(at_trace_start(&o, err, sizeof err) == 0, "%s", err);
    at_event_desc d = {.provider = "StackTest", .name = "Here"};
    g_type = at_event_type_register(&d);
    ck_assert_ptr_nonnull(g_type);
    g_mode = mode;
    ck_assert_msg(at_stack_init(mode, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(at_stack_mode_in_use(), mode);
}
static void start(enum at_stack_mode mode) { start_with(mode, NULL); }

/* Capture here (the function this expands in is frame 0) and write one event. */
#define CAPTURE_AND_WRITE(skip)                                                                    \
    do {                                                                                           \
        uintptr_t ips_[MAXF];                                                                      \
        uint32_t n_ = at_stack_capture_with(g_mode, ips_, MAXF, (skip));                           \
        at_event_write(g_type, NULL, NULL, NULL, 0, ips_, n_);                                     \
    } while (0)

/* ---- reading back: frames of the k-th StackTest event, symbolized ---- */
typedef struct frames {
    uint32_t n;
    uint64_t ip[MAXF];
    char text[MAXF][512]; /* module!function+0xoff, module+0xoff or 0x... */
    char func[MAXF][512]; /* the function part ("" if none) */
    char mod[MAXF][256];
} frames;

static void split(frames *f, uint32_t i)
{
    const char *t = f->text[i], *bang = strchr(t, '!');
    f->func[i][0] = 0;
    const char *end = bang ? strrchr(bang, '+') : strrchr(t, '+');
    size_t ml = bang ? (size_t)(bang - t) : end ? (size_t)(end - t) : 0;
    if (ml >= sizeof f->mod[i])
        ml = sizeof f->mod[i] - 1;
    memcpy(f->mod[i], t, ml);
    f->mod[i][ml] = 0;
    if (bang && end) {
        /* the '+' of "+0x": the last one (C++ names may hold '+': operator+) */
        size_t fl = (size_t)(end - bang - 1);
        memcpy(f->func[i], bang + 1, fl);
        f->func[i][fl] = 0;
    }
}

static int read_frames(const char *path, int k, frames *f)
{
    char err[512];
    nt_reader *r = nt_open(path, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_sym_options so = {.lines = false, .demangle = true};
    nt_symbolizer *s = nt_sym_new(&so);
    nt_event ev;
    int rc, seen = 0, found = 0;
    memset(f, 0, sizeof *f);
    while ((rc = nt_next(r, &ev)) == 1) {
        nt_sym_observe(s, &ev);
        if (strcmp(ev.meta->provider, "StackTest") != 0 || seen++ != k)
            continue;
        f->n = ev.nframes < MAXF ? ev.nframes : MAXF;
        for (uint32_t i = 0; i < f->n; i++)
            f->ip[i] = ev.frames[i];
        found = 1;
    }
    ck_assert_msg(rc == 0, "%s", nt_error(r));
    /* named after the whole file is read, as PerfView applies symbols */
    for (uint32_t i = 0; i < f->n; i++) {
        nt_sym_format(s, f->ip[i], f->text[i], sizeof f->text[i]);
        split(f, i);
    }
    nt_sym_free(s);
    nt_close(r);
    return found;
}

/* events of provider (and name, NULL = any); *last = index of the last one in the file */
static size_t count_events(const char *path, const char *provider, const char *name, long *last)
{
    char err[512];
    nt_reader *r = nt_open(path, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_event ev;
    size_t n = 0;
    long i = 0;
    while (nt_next(r, &ev) == 1) {
        if (strcmp(ev.meta->provider, provider) == 0 && (!name || strcmp(ev.meta->name, name) == 0)) {
            n++;
            if (last)
                *last = i;
        }
        i++;
    }
    nt_close(r);
    return n;
}

static long first_index(const char *path, const char *provider)
{
    char err[512];
    nt_reader *r = nt_open(path, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_event ev;
    long i = 0, found = -1;
    while (found < 0 && nt_next(r, &ev) == 1) {
        if (strcmp(ev.meta->provider, provider) == 0)
            found = i;
        i++;
    }
    nt_close(r);
    return found;
}

static void show(const frames *f, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (uint32_t i = 0; i < f->n && k + 2 < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "\n  %u %s", i, f->text[i]);
}

/* frames start with exactly these function names */
static void expect_names(const frames *f, const char *const *names, size_t nn)
{
    char buf[8192];
    show(f, buf, sizeof buf);
    ck_assert_msg(f->n >= nn, "%u frames, want at least %zu:%s", f->n, nn, buf);
    for (size_t i = 0; i < nn; i++)
        ck_assert_msg(strcmp(f->func[i], names[i]) == 0, "frame %zu is '%s', want '%s':%s", i, f->func[i],
                      names[i], buf);
}

static void finish(void)
{
    at_trace_stop();
}

/* After each test (in its own process): its folder goes; a failing test's stays for a look. */
static void rm_dir(void)
{
    at_rmtree(g_dir);
    free(g_dir);
    g_dir = NULL;
}

/* ---- a plain chain in this binary ---- */
NOINL static void leaf(uint32_t skip)
{
    CAPTURE_AND_WRITE(skip);
    KEEP_FRAME();
}
static int g_mid_line;
NOINL static void mid(uint32_t skip)
{
    g_mid_line = __LINE__ + 1;
    leaf(skip);
    KEEP_FRAME();
}
NOINL static void top(uint32_t skip)
{
    mid(skip);
    KEEP_FRAME();
}
NOINL static void run_chain(uint32_t skip)
{
    top(skip);
    KEEP_FRAME();
}

static void chain_in_mode(enum at_stack_mode m)
{
    start(m);
    run_chain(0);
    run_chain(0); /* the second walk takes the learned rules */
    run_chain(1);
    finish();
    static const char *const want[] = {"leaf", "mid", "top", "run_chain"};
    frames f;
    for (int k = 0; k < 2; k++) {
        ck_assert(read_frames(g_path, k, &f));
        expect_names(&f, want, 4);
        ck_assert_str_eq(f.mod[0], "test_stack");
    }
    ck_assert(read_frames(g_path, 2, &f));
    expect_names(&f, want + 1, 3); /* skip 1: the leaf is trimmed */
}

START_TEST(chain_shared) { chain_in_mode(AT_STACK_SHARED); }
END_TEST

/* file:line from this binary's DWARF (libdw) */
START_TEST(source_lines)
{
    start(AT_STACK_SHARED);
    run_chain(0);
    finish();
    char err[512];
    nt_reader *r = nt_open(g_path, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_sym_options so = {.lines = true, .demangle = true};
    nt_symbolizer *s = nt_sym_new(&so);
    nt_event ev;
    char text[1024] = "";
    while (nt_next(r, &ev) == 1) {
        nt_sym_observe(s, &ev);
        if (strcmp(ev.meta->provider, "StackTest") == 0 && ev.nframes > 1)
            nt_sym_format(s, ev.frames[1], text, sizeof text); /* mid, at its call of leaf */
    }
    char want[64];
    snprintf(want, sizeof want, "tests/unit/test_stack.c:%d)", g_mid_line);
    ck_assert_msg(strncmp(text, "test_stack!mid+0x", 17) == 0 && strstr(text, want), "%s, want %s", text, want);
    nt_sym_free(s);
    nt_close(r);
}
END_TEST
START_TEST(chain_libunwind) { chain_in_mode(AT_STACK_LIBUNWIND); }
END_TEST

/* Frame pointers: only functions built with them form the chain. */
#define FP __attribute__((noinline, optimize("no-omit-frame-pointer")))
FP static void fp_leaf(void)
{
    CAPTURE_AND_WRITE(0);
    KEEP_FRAME();
}
FP static void fp_mid(void)
{
    fp_leaf();
    KEEP_FRAME();
}
FP static void fp_top(void)
{
    fp_mid();
    KEEP_FRAME();
}

START_TEST(chain_frame_pointers)
{
    start(AT_STACK_FP);
    fp_top();
    finish();
    frames f;
    ck_assert(read_frames(g_path, 0, &f));
    static const char *const want[] = {"fp_leaf", "fp_mid", "fp_top"};
    expect_names(&f, want, 3);
}
END_TEST

/* ---- libraries built from tests/unit/stackfix ---- */
static char *build_lib(const char *src, const char *out, const char *extra, bool cxx, bool strip)
{
    char dir[2048], path[2300], tmp[2400], cmd[16384];
    snprintf(dir, sizeof dir, "%s/tests/stackfix", at_build_dir());
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/%s", dir, out);
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    /* built to a temporary name and renamed: a concurrent run never loads half a file */
    snprintf(cmd, sizeof cmd, "%s -shared -fPIC -O1 -g %s -o '%s' '%s/tests/unit/stackfix/%s'%s%s%s && mv '%s' '%s'",
             cxx ? "c++" : "cc", extra, tmp, AT_SOURCE_DIR, src, strip ? " && strip --strip-all '" : "",
             strip ? tmp : "", strip ? "'" : "", tmp, path);
    int rc = system(cmd);
    ck_assert_msg(rc == 0, "building %s failed: %s", out, cmd);
    return strdup(path);
}

typedef void (*stk_cb)(void);
typedef void (*stk_entry)(stk_cb);

NOINL static void lib_cb(void)
{
    CAPTURE_AND_WRITE(0);
    KEEP_FRAME();
}
NOINL static void run_entry(stk_entry e)
{
    e(lib_cb);
    KEEP_FRAME();
}

static void *open_lib(const char *path, const char *sym, stk_entry *e)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(h != NULL, "%s", dlerror());
    *(void **)e = dlsym(h, sym);
    ck_assert_ptr_nonnull(*(void **)e);
    return h;
}

static void dlopen_in_mode(enum at_stack_mode m)
{
    char *lib = build_lib("chain.c", "libstk_chain.so", "", false, false);
    start(m);
    stk_entry e;
    open_lib(lib, "stk_lib_entry", &e);
    run_entry(e);
    finish();
    frames f;
    ck_assert(read_frames(g_path, 0, &f));
    static const char *const want[] = {"lib_cb", "stk_lib_inner", "stk_lib_outer", "stk_lib_entry", "run_entry"};
    expect_names(&f, want, 5);
    ck_assert_str_eq(f.mod[1], "libstk_chain.so");
    ck_assert_str_eq(f.mod[3], "libstk_chain.so");
    ck_assert_str_eq(f.mod[4], "test_stack");
    free(lib);
}

START_TEST(through_dlopen_shared) { dlopen_in_mode(AT_STACK_SHARED); }
END_TEST
START_TEST(through_dlopen_libunwind) { dlopen_in_mode(AT_STACK_LIBUNWIND); }
END_TEST

START_TEST(through_cxx_frames)
{
    char *lib = build_lib("chain.cc", "libstk_cxx.so", "", true, false);
    start(AT_STACK_SHARED);
    stk_entry e;
    open_lib(lib, "stk_cxx_entry", &e);
    run_entry(e);
    finish();
    frames f;
    ck_assert(read_frames(g_path, 0, &f));
    static const char *const want[] = {"lib_cb", "void acttrace_test::relay<int>(int, void (*)())",
                                       "acttrace_test::Walker::deep(int, void (*)())", "stk_cxx_entry",
                                       "run_entry"};
    expect_names(&f, want, 5);
    ck_assert_str_eq(f.mod[2], "libstk_cxx.so");
    free(lib);
}
END_TEST

/* libunwind is loaded RTLD_LOCAL: the process's _Unwind_* stay libgcc's (or ASan's interceptor) and
 * C++ exceptions work */
START_TEST(exceptions_unaffected)
{
    char *lib = build_lib("chain.cc", "libstk_cxx.so", "", true, false);
    start(AT_STACK_SHARED);
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(h != NULL, "%s", dlerror());
    int (*tc)(int);
    *(void **)&tc = dlsym(h, "stk_cxx_throw_catch");
    ck_assert_ptr_nonnull(tc);
    ck_assert_int_eq(tc(41), 0);
    /* what the library's references bind to (global scope, then its own dependencies) */
    Dl_info di;
    void *raise_fn = dlsym(RTLD_DEFAULT, "_Unwind_RaiseException");
    if (raise_fn) {
        ck_assert(dladdr(raise_fn, &di) != 0);
        ck_assert_msg(strstr(di.dli_fname, "libunwind") == NULL, "_Unwind_RaiseException from %s", di.dli_fname);
    }
    raise_fn = dlsym(h, "_Unwind_RaiseException");
    ck_assert_ptr_nonnull(raise_fn);
    ck_assert(dladdr(raise_fn, &di) != 0);
    ck_assert_msg(strstr(di.dli_fname, "libunwind") == NULL, "_Unwind_RaiseException from %s", di.dli_fname);
    ck_assert_ptr_null(dlsym(RTLD_DEFAULT, "unw_backtrace"));
    ck_assert_ptr_null(dlsym(RTLD_DEFAULT, "_ULx86_64_step"));
    finish();
    free(lib);
}
END_TEST

START_TEST(stripped_module_gives_offsets)
{
    char *lib = build_lib("chain.c", "libstk_strip.so", "-DSTK_STRIPPED", false, true);
    start(AT_STACK_SHARED);
    stk_entry e;
    open_lib(lib, "stk_lib_entry", &e);
    run_entry(e);
    finish();
    frames f;
    ck_assert(read_frames(g_path, 0, &f));
    char buf[8192];
    show(&f, buf, sizeof buf);
    ck_assert_msg(f.n >= 5, "%s", buf);
    ck_assert_str_eq(f.func[0], "lib_cb");
    Dl_info di;
    ck_assert(dladdr((void *)(uintptr_t)f.ip[1], &di) != 0);
    for (int i = 1; i <= 2; i++) { /* the static functions: no symbol anywhere */
        char want[512];
        snprintf(want, sizeof want, "libstk_strip.so+0x%llx",
                 (unsigned long long)(f.ip[i] - (uintptr_t)di.dli_fbase));
        ck_assert_msg(strcmp(f.text[i], want) == 0, "frame %d is '%s', want '%s':%s", i, f.text[i], want, buf);
    }
    /* the exported entry is still named, from .dynsym */
    ck_assert_msg(strcmp(f.func[3], "stk_lib_entry") == 0, "%s", buf);
    ck_assert_str_eq(f.func[4], "run_entry");
    free(lib);
}
END_TEST

/* ---- signal handler ---- */
static volatile sig_atomic_t handled;
NOINL static void sig_handler(int sig)
{
    (void)sig;
    CAPTURE_AND_WRITE(0);
    handled++;
    KEEP_FRAME();
}
NOINL static void sig_mid(int sig)
{
    raise(sig);
    KEEP_FRAME();
}
NOINL static void sig_top_with(int sig)
{
    sig_mid(sig);
    KEEP_FRAME();
}
NOINL static void sig_top(void)
{
    sig_top_with(SIGUSR1);
    KEEP_FRAME();
}

static void signal_in_mode(enum at_stack_mode m)
{
    start(m);
    struct sigaction sa = {0}, old;
    sa.sa_handler = sig_handler;
    sigaction(SIGUSR1, &sa, &old);
    sig_top();
    sig_top();
    sigaction(SIGUSR1, &old, NULL);
    ck_assert_int_eq(handled, 2);
    finish();
    for (int k = 0; k < 2; k++) {
        frames f;
        ck_assert(read_frames(g_path, k, &f));
        char buf[8192];
        show(&f, buf, sizeof buf);
        ck_assert_msg(f.n > 3 && strcmp(f.func[0], "sig_handler") == 0, "%s", buf);
        /* then the kernel's signal frame and libc's raise, then the interrupted chain */
        uint32_t i = 1;
        while (i < f.n && strcmp(f.func[i], "sig_mid") != 0)
            i++;
        ck_assert_msg(i + 2 < f.n && i <= 6, "sig_mid not found after the handler:%s", buf);
        ck_assert_msg(strcmp(f.func[i + 1], "sig_top_with") == 0 && strcmp(f.func[i + 2], "sig_top") == 0,
                      "%s", buf);
        for (uint32_t j = 1; j < i; j++)
            ck_assert_msg(strcmp(f.mod[j], "libc.so.6") == 0, "frame %u between handler and sig_mid:%s", j, buf);
    }
}

START_TEST(from_signal_handler_shared) { signal_in_mode(AT_STACK_SHARED); }
END_TEST
START_TEST(from_signal_handler_libunwind) { signal_in_mode(AT_STACK_LIBUNWIND); }
END_TEST

/* ---- the shared walker agrees with libunwind, also on a new thread ---- */
NOINL static uint32_t both(uintptr_t *a, uint32_t *na, uintptr_t *b)
{
    *na = at_stack_capture_with(AT_STACK_SHARED, a, MAXF, 0);
    uint32_t nb = at_stack_capture_with(AT_STACK_LIBUNWIND, b, MAXF, 0);
    KEEP_FRAME();
    return nb;
}
NOINL static void *compare_walkers(void *arg)
{
    uintptr_t a[MAXF], b[MAXF];
    uint32_t na, nb = both(a, &na, b);
    ck_assert_int_eq(na, nb);
    for (uint32_t i = 1; i < na; i++) /* frame 0: two call sites in `both` */
        ck_assert_int_eq(a[i], b[i]);
    KEEP_FRAME();
    return arg;
}

START_TEST(shared_equals_libunwind)
{
    char err[256];
    ck_assert_int_eq(at_stack_init(AT_STACK_SHARED, err, sizeof err), 0);
    compare_walkers(NULL);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, compare_walkers, NULL), 0);
    pthread_join(t, NULL);
    /* the rules are the process's: further new threads walk without libunwind's slow path */
    uint32_t slow = at_stack_slow_walks();
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(pthread_create(&t, NULL, compare_walkers, NULL), 0);
        pthread_join(t, NULL);
    }
    ck_assert_int_eq(at_stack_slow_walks(), slow);
    ck_assert_int_gt(at_stack_rules_learned(), 0);
}
END_TEST

/* A walk kept for its start serves the next walk from that start only when every word it read is
 * unchanged: via_a and via_b call mid from the same place in frames of the same size, so the walk
 * from leaf starts at the same (ip, sp, bp) under both; only the return address into them differs. */
static uintptr_t kept_a[MAXF], kept_b[MAXF];
static uint32_t kept_na, kept_nb;
#define NOIPA __attribute__((noipa)) /* via_a and via_b are not folded into one */
NOIPA static void kept_leaf(void) { kept_nb = both(kept_a, &kept_na, kept_b); KEEP_FRAME(); }
NOIPA static void kept_mid(void) { kept_leaf(); KEEP_FRAME(); }
NOIPA static void via_a(void) { kept_mid(); KEEP_FRAME(); }
NOIPA static void via_b(void) { kept_mid(); KEEP_FRAME(); }
NOINL static void kept_walk(void (*via)(void), uintptr_t *out, uint32_t *nout)
{
    via();
    ck_assert_int_eq(kept_na, kept_nb);
    for (uint32_t i = 1; i < kept_na; i++) /* frame 0: two call sites in `both` */
        ck_assert_int_eq(kept_a[i], kept_b[i]);
    memcpy(out, kept_a, sizeof kept_a);
    *nout = kept_na;
    KEEP_FRAME();
}

/* On a thread of its own (its stack holds no frame the fast walker sends to libunwind; Check's
 * runner has some), every walk from one call site here: a (rules learned), a (a fast walk, kept),
 * a (served), b (its new return address learned), b (kept in a's place), b (served), a (walked
 * again: the kept walk is b's). */
NOINL static void *kept_walks(void *arg)
{
    enum { N = 7 };
    void (*const via[N])(void) = {via_a, via_a, via_a, via_b, via_b, via_b, via_a};
    static uintptr_t out[N][MAXF];
    uint32_t n[N], slow[N + 1], kept[N + 1];
    slow[0] = at_stack_slow_walks();
    kept[0] = at_stack_walks_kept();
    for (volatile int i = 0; i < N; i++) { /* volatile: one call site, no copy of the loop */
        kept_walk(via[i], out[i], &n[i]);
        slow[i + 1] = at_stack_slow_walks();
        kept[i + 1] = at_stack_walks_kept();
    }
    static const int slow_walk[N] = {1, 0, 0, 1, 0, 0, 0}, kept_walk_[N] = {0, 1, 0, 0, 1, 0, 1};
    for (int i = 0; i < N; i++) {
        ck_assert_msg((slow[i + 1] > slow[i]) == slow_walk[i], "walk %d: slow %u -> %u", i, slow[i], slow[i + 1]);
        ck_assert_msg(kept[i + 1] - kept[i] == (uint32_t)kept_walk_[i], "walk %d: kept %u -> %u", i, kept[i], kept[i + 1]);
        ck_assert_uint_eq(n[i], n[0]);
    }
    for (int i = 1; i < N; i++) {
        int same = via[i] == via_a ? 0 : 3;
        ck_assert_msg(!memcmp(out[same], out[i], n[0] * sizeof out[0][0]), "walk %d", i);
    }
    uint32_t differ = 0;
    for (uint32_t i = 0; i < n[0]; i++)
        differ += out[0][i] != out[3][i];
    ck_assert_uint_eq(differ, 1); /* the return address into via_a or via_b */
    KEEP_FRAME();
    return arg;
}

/* A frame whose CFA comes from rbp (alloca makes it keep a frame pointer) above frames that keep
 * other values in rbp: walks kept and served through it still agree with libunwind (kept_walk
 * compares every one), and a walk is served again after the first kept one. */
static uintptr_t fp_out[MAXF];
static uint32_t fp_n;
NOIPA static void kept_fp(int size)
{
    volatile char *p = __builtin_alloca((size_t)size);
    p[0] = 1;
    kept_walk(via_a, fp_out, &fp_n);
    KEEP_FRAME();
}
NOINL static void *kept_fp_walks(void *arg)
{
    uint32_t kept[5];
    kept[0] = at_stack_walks_kept();
    for (volatile int i = 0; i < 4; i++) {
        kept_fp(96);
        kept[i + 1] = at_stack_walks_kept();
    }
    ck_assert_uint_eq(kept[4], kept[3]); /* the fourth served by the kept walk */
    ck_assert_uint_eq(kept[3], kept[2]);
    KEEP_FRAME();
    return arg;
}

START_TEST(kept_walks_checked)
{
    char err[256];
    ck_assert_int_eq(at_stack_init(AT_STACK_SHARED, err, sizeof err), 0);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, kept_walks, NULL), 0);
    pthread_join(t, NULL);
    ck_assert_int_eq(pthread_create(&t, NULL, kept_fp_walks, NULL), 0);
    pthread_join(t, NULL);
}
END_TEST

/* threads learning the same rules at once agree with libunwind at every depth */
static pthread_barrier_t g_bar;
static _Atomic int g_mismatch;
NOINL static void deep_compare(int d)
{
    if (d > 0) {
        deep_compare(d - 1);
    } else {
        uintptr_t a[MAXF], b[MAXF];
        uint32_t na, nb = both(a, &na, b);
        if (na != nb)
            g_mismatch++;
        for (uint32_t i = 1; i < na && i < nb; i++)
            if (a[i] != b[i])
                g_mismatch++;
    }
    KEEP_FRAME();
}
static void *race_thread(void *arg)
{
    pthread_barrier_wait(&g_bar);
    for (int round = 0; round < 20; round++)
        for (int d = 0; d < 50; d++)
            deep_compare(d);
    return arg;
}

START_TEST(concurrent_learning)
{
    char err[256];
    ck_assert_int_eq(at_stack_init(AT_STACK_SHARED, err, sizeof err), 0);
    enum { N = 4 };
    pthread_t t[N];
    pthread_barrier_init(&g_bar, NULL, N);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, race_thread, NULL), 0);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(g_mismatch, 0);
}
END_TEST

/* in a signal handler: the walk crosses the signal frame with a learned rule too */
static uintptr_t sig_a[MAXF], sig_b[MAXF];
static uint32_t sig_na, sig_nb;
NOINL static void compare_handler(int sig)
{
    (void)sig;
    sig_nb = both(sig_a, &sig_na, sig_b);
    KEEP_FRAME();
}

START_TEST(signal_shared_equals_libunwind)
{
    char err[256];
    ck_assert_int_eq(at_stack_init(AT_STACK_SHARED, err, sizeof err), 0);
    struct sigaction sa = {0};
    sa.sa_handler = compare_handler;
    sigaction(SIGUSR2, &sa, NULL);
    uint32_t slow = 0;
    for (int k = 0; k < 2; k++) {
        if (k == 1)
            slow = at_stack_slow_walks();
        sig_top_with(SIGUSR2);
        ck_assert_int_gt(sig_na, 5);
        ck_assert_int_eq(sig_na, sig_nb);
        for (uint32_t i = 1; i < sig_na; i++)
            ck_assert_int_eq(sig_a[i], sig_b[i]);
    }
    ck_assert_int_eq(at_stack_slow_walks(), slow); /* the second time: rules only */
}
END_TEST

/* ---- rundown coverage: every address of every stack in every file ---- */
NOINL static void recurse(int depth, int salt)
{
    if (depth == 0) {
        if (salt & 1)
            CAPTURE_AND_WRITE(0);
        else
            lib_cb();
    } else {
        recurse(depth - 1, salt);
    }
    KEEP_FRAME();
}

/* every frame of every stack of one file is covered by that file's rundown */
static void check_file_covered(const char *path, uint64_t *stacks_seen)
{
    char err[512];
    nt_options strict = {.strict = true}; /* every rule acttrace verify checks */
    nt_reader *r = nt_open_ex(path, &strict, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    nt_symbolizer *s = nt_sym_new(NULL);
    nt_event ev;
    int rc;
    uint64_t *ips = NULL;
    size_t n = 0, cap = 0;
    while ((rc = nt_next(r, &ev)) == 1) {
        nt_sym_observe(s, &ev);
        for (uint32_t i = 0; i < ev.nframes; i++) {
            if (n == cap) {
                cap = cap ? cap * 2 : 4096;
                ips = realloc(ips, cap * sizeof *ips);
                ck_assert_ptr_nonnull(ips);
            }
            ips[n++] = ev.frames[i];
        }
        if (ev.nframes)
            (*stacks_seen)++;
    }
    ck_assert_msg(rc == 0, "%s: %s", path, nt_error(r));
    ck_assert_int_eq(nt_problem_count(r), 0);
    char text[1024];
    for (size_t i = 0; i < n; i++) {
        nt_sym_format(s, ips[i], text, sizeof text);
        ck_assert_msg(strncmp(text, "0x", 2) != 0, "%s: address 0x%llx has no mapping in the file", path,
                      (unsigned long long)ips[i]);
        Dl_info di;
        if (dladdr((void *)(uintptr_t)ips[i], &di) && di.dli_fname && strstr(di.dli_fname, "test_stack"))
            ck_assert_msg(strchr(text, '!') != NULL, "%s: 0x%llx in test_stack not named: %s", path,
                          (unsigned long long)ips[i], text);
    }
    free(ips);
    nt_sym_free(s);
    nt_close(r);
}

static void rundown_in_mode(enum at_output_mode mode, uint64_t size)
{
    at_trace_options o = {.mode = mode, .mode_size = size};
    start_with(AT_STACK_SHARED, &o);
    for (int round = 0; round < 40; round++) {
        for (int d = 0; d < 60; d++)
            recurse(d, d + round);
        at_trace_flush();
    }
    finish();
    char **files = at_trace_files(g_dir);
    ck_assert_ptr_nonnull(files);
    ck_assert_msg(at_strv_len(files) >= 3, "%zu files: rotation did not happen", at_strv_len(files));
    uint64_t stacks = 0;
    for (char **p = files; *p; p++)
        check_file_covered(*p, &stacks);
    if (mode == AT_OUTPUT_ROTATE)
        ck_assert_int_ge(stacks, 2400);
    at_strv_free(files);
}

START_TEST(rundown_covers_every_segment) { rundown_in_mode(AT_OUTPUT_ROTATE, 16 << 10); }
END_TEST
/* circular: the oldest segments are gone; each one left still names its own frames */
START_TEST(rundown_covers_circular_segments) { rundown_in_mode(AT_OUTPUT_CIRCULAR, 64 << 10); }
END_TEST

START_TEST(killed_process_file_names_frames)
{
    g_dir = at_tmpdir("stack");
    snprintf(g_path, sizeof g_path, "%s/t.nettrace", g_dir);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char err[256];
        at_trace_options o = {.path = g_path};
        if (at_trace_start(&o, err, sizeof err) < 0)
            _exit(1);
        at_event_desc d = {.provider = "StackTest", .name = "Here"};
        g_type = at_event_type_register(&d);
        at_stack_init(AT_STACK_SHARED, err, sizeof err);
        g_mode = AT_STACK_SHARED;
        run_chain(0);
        at_trace_flush();
        raise(SIGKILL);
        _exit(2);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    frames f;
    ck_assert(read_frames(g_path, 0, &f));
    static const char *const want[] = {"leaf", "mid", "top", "run_chain"};
    expect_names(&f, want, 4);
}
END_TEST

START_TEST(no_symbols_option)
{
    at_trace_options o = {.no_symbols = true};
    start_with(AT_STACK_SHARED, &o);
    run_chain(0);
    finish();
    ck_assert_int_eq(count_events(g_path, NT_UNIVERSAL_SYSTEM, NULL, NULL), 0);
    ck_assert_int_eq(count_events(g_path, "StackTest", "Here", NULL), 1);
    frames f;
    ck_assert(read_frames(g_path, 0, &f));
    ck_assert(f.n >= 4);
    ck_assert(strncmp(f.text[0], "0x", 2) == 0);
}
END_TEST

START_TEST(symbol_events_in_file)
{
    start(AT_STACK_SHARED);
    run_chain(0);
    run_chain(0);
    finish();
    long last_sym = -1;
    size_t maps = count_events(g_path, NT_UNIVERSAL_SYSTEM, "ProcessMapping", NULL);
    size_t syms = count_events(g_path, NT_UNIVERSAL_SYSTEM, "ProcessSymbol", &last_sym);
    size_t meta = count_events(g_path, NT_UNIVERSAL_SYSTEM, "ProcessMappingMetadata", NULL);
    long last_here = -1;
    ck_assert_int_eq(count_events(g_path, "StackTest", "Here", &last_here), 2);
    ck_assert_int_ge(maps, 2);            /* test_stack and libc at least */
    ck_assert_int_ge(syms, 4);            /* leaf, mid, top, run_chain, ... */
    ck_assert_int_ge(meta, 1);            /* build-ids (Debian builds carry them) */
    ck_assert_int_le(meta, maps);
    /* the same stack twice: described once, before the first event that uses it */
    ck_assert_int_lt(last_sym, first_index(g_path, "StackTest"));
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("stack");
    TCase *c = tcase_create("stack");
    tcase_set_timeout(c, 0);
    tcase_add_checked_fixture(c, NULL, rm_dir);
    tcase_add_test(c, chain_shared);
    tcase_add_test(c, kept_walks_checked);
    tcase_add_test(c, chain_libunwind);
    tcase_add_test(c, source_lines);
    tcase_add_test(c, chain_frame_pointers);
    tcase_add_test(c, through_dlopen_shared);
    tcase_add_test(c, through_dlopen_libunwind);
    tcase_add_test(c, through_cxx_frames);
    tcase_add_test(c, exceptions_unaffected);
    tcase_add_test(c, stripped_module_gives_offsets);
    tcase_add_test(c, from_signal_handler_shared);
    tcase_add_test(c, from_signal_handler_libunwind);
    tcase_add_test(c, shared_equals_libunwind);
    tcase_add_test(c, signal_shared_equals_libunwind);
    tcase_add_test(c, concurrent_learning);
    tcase_add_test(c, rundown_covers_every_segment);
    tcase_add_test(c, rundown_covers_circular_segments);
    tcase_add_test(c, killed_process_file_names_frames);
    tcase_add_test(c, no_symbols_option);
    tcase_add_test(c, symbol_events_in_file);
    suite_add_tcase(s, c);
    return s;
}

int main(void)
{
    SRunner *r = srunner_create(suite());
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
