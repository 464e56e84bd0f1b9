/* fuzz_actmodel.c: libFuzzer target for the analysis commands' activity model (tools/actmodel.h):
 * any input, read as one file and as two files merged, in tree mode (with a small --hold so spilling
 * runs) and in streaming mode, ends in a clean run or one error naming an offset, and every activity
 * handed over is consistent (parents alive, visits and transfers in bounds); folded stack keys are
 * built for every event. Built by `make fuzz`. */
#include "actfold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static nt_symbolizer *sym;

static void check_activity(void *ctx, const am_activity *a)
{
    (void)ctx;
    if (a->x && a->x->visits && (a->x->nvisits > a->x->cvisits || a->x->nvisits < 2)) abort();
    if (a->x && a->x->nxfers > a->x->cxfers) abort();
    if (a->parent && a->depth != a->parent->depth + 1) abort();
    char path[AM_PATH_MAX], link[AM_LINK_MAX];
    am_act_path(a, path, sizeof path);
    am_act_link(a, link, sizeof link);
    volatile size_t sink = strlen(a->name) + strlen(path) + strlen(link);
    for (uint32_t i = 0; i < am_nvisits(a); i++) sink += (size_t)am_visit_at(a, i).last;
    for (uint32_t i = 0; i < am_nxfers(a); i++) sink += (size_t)am_xfer_at(a, i)->to_tid;
    (void)sink;
}

static void check_tree(void *ctx, const am_activity *root)
{
    for (const am_activity *c = root->first_child; c; c = c->next_sibling) {
        if (c->parent != root) abort();
        check_tree(ctx, c);
    }
}

static void on_event(void *ctx, const am_event *e)
{
    (void)ctx;
    static char key[4096];
    nt_sym_observe(sym, e->ev);
    if (e->ev->nframes) am_fold_key(key, sizeof key, e->act, NULL, true, e->ev, sym);
    if (e->stopped && e->stopped != e->act) abort();
}

static void run(char *const *paths, int n, bool tree, size_t size)
{
    am_options o = {.tree = tree, .need_events = !tree, .hold = 3};
    am_callbacks cb = {.activity = check_activity, .tree = check_tree, .spill = check_tree,
                       .event = tree ? NULL : on_event};
    char err[600];
    am_model *m = am_open(paths, n, &o, &cb, err, sizeof err);
    if (!m) {
        if (!strstr(err, "offset ")) abort();
        return;
    }
    if (am_run(m, err, sizeof err) < 0) {
        const char *p = strstr(err, "offset ");
        if (!p || strtoull(p + 7, NULL, 10) > size) abort();
    }
    am_close(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!sym) sym = nt_sym_new(NULL);
    int fd = memfd_create("fuzz", 0);
    if (fd < 0 || write(fd, data, size) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    char *paths[2] = {path, path};
    run(paths, 1, true, size);
    run(paths, 1, false, size);
    run(paths, 2, true, size);
    close(fd);
    return 0;
}
