/* actfold.c: see actfold.h. A chained hash table of strdup'ed keys. */
#include "actfold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fold_ent {
    struct fold_ent *next;
    uint64_t n;
    char key[];
} fold_ent;

struct am_fold {
    fold_ent **b;
    size_t nb, n;
};

static size_t str_hash(const char *s)
{
    size_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

am_fold *am_fold_new(void)
{
    am_fold *f = calloc(1, sizeof *f);
    if (f && !(f->b = calloc(f->nb = 1024, sizeof *f->b))) {
        free(f);
        return NULL;
    }
    return f;
}

static void fold_grow(am_fold *f)
{
    size_t nb = f->nb * 2;
    fold_ent **b = calloc(nb, sizeof *b);
    if (!b) return;
    for (size_t i = 0; i < f->nb; i++)
        for (fold_ent *e = f->b[i], *nx; e; e = nx) {
            nx = e->next;
            size_t k = str_hash(e->key) & (nb - 1);
            e->next = b[k];
            b[k] = e;
        }
    free(f->b);
    f->b = b;
    f->nb = nb;
}

void am_fold_add(am_fold *f, const char *key, uint64_t n)
{
    size_t k = str_hash(key) & (f->nb - 1);
    for (fold_ent *e = f->b[k]; e; e = e->next)
        if (!strcmp(e->key, key)) {
            e->n += n;
            return;
        }
    size_t l = strlen(key);
    fold_ent *e = malloc(sizeof *e + l + 1);
    if (!e) return;
    memcpy(e->key, key, l + 1);
    e->n = n;
    e->next = f->b[k];
    f->b[k] = e;
    if (++f->n > f->nb) fold_grow(f);
}

size_t am_fold_count(const am_fold *f)
{
    return f->n;
}

static int by_key(const void *x, const void *y)
{
    return strcmp((*(fold_ent *const *)x)->key, (*(fold_ent *const *)y)->key);
}

void am_fold_each(am_fold *f, void (*fn)(void *, const char *, uint64_t), void *ctx)
{
    fold_ent **v = malloc((f->n + 1) * sizeof *v);
    if (!v) return;
    size_t k = 0;
    for (size_t i = 0; i < f->nb; i++)
        for (fold_ent *e = f->b[i]; e; e = e->next) v[k++] = e;
    qsort(v, k, sizeof *v, by_key);
    for (size_t i = 0; i < k; i++) fn(ctx, v[i]->key, v[i]->n);
    free(v);
}

void am_fold_free(am_fold *f)
{
    if (!f) return;
    for (size_t i = 0; i < f->nb; i++)
        for (fold_ent *e = f->b[i], *nx; e; e = nx) {
            nx = e->next;
            free(e);
        }
    free(f->b);
    free(f);
}

/* Appends s to buf at *len; ';' and newlines in names would break the folded format: '_'. */
static bool put(char *buf, size_t n, size_t *len, const char *s)
{
    for (; *s; s++) {
        if (*len + 2 >= n) return false;
        buf[(*len)++] = (*s == ';' || *s == '\n') ? '_' : *s;
    }
    buf[*len] = 0;
    return true;
}

static bool sep(char *buf, size_t n, size_t *len)
{
    if (*len + 2 >= n) return false;
    buf[(*len)++] = ';';
    buf[*len] = 0;
    return true;
}

bool am_fold_key(char *buf, size_t n, const am_activity *a, const char *from_name, bool by_activity,
                 const nt_event *ev, nt_symbolizer *sym)
{
    const am_activity *chain[128];
    int nc = 0;
    for (const am_activity *p = a; p && nc < 128; p = p->parent) chain[nc++] = p;
    int top = nc - 1;
    if (from_name) {
        while (top >= 0 && strcmp(chain[top]->name, from_name) != 0) top--;
        if (top < 0) return false;
    }
    size_t len = 0;
    buf[0] = 0;
    if (!a && !put(buf, n, &len, "(no activity)")) return false;
    for (int i = top; i >= 0; i--) {
        if (i != top && !sep(buf, n, &len)) return false;
        if (!put(buf, n, &len, chain[i]->name)) return false;
        char path[AM_PATH_MAX];
        if (by_activity) am_act_path(chain[i], path, sizeof path);
        if (by_activity && (!put(buf, n, &len, " ") || !put(buf, n, &len, path))) return false;
    }
    char sb[512];
    bool sample = nt_event_cpu_sample(ev, NULL); /* a sample's leaf is the instruction itself */
    for (uint32_t i = ev->nframes; i-- > 0;) {
        if (i == 0 && sample)
            nt_sym_format_exact(sym, ev->frames[i], sb, sizeof sb);
        else
            nt_sym_format(sym, ev->frames[i], sb, sizeof sb);
        if (!sep(buf, n, &len) || !put(buf, n, &len, sb)) return false;
    }
    return true;
}
