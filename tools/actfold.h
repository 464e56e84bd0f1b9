/* actfold.h: folded stacks (the flamegraph.pl / inferno input: "a;b;c 12") of the events inside
 * activities: the chain of activity names from the root (or from the outermost activity of a given
 * name) down to the event's activity, then the event's frames, root first, symbolised through
 * ntsym.h. A table of distinct stacks and their counts; memory grows with distinct stacks only. */
#ifndef AM_ACTFOLD_H
#define AM_ACTFOLD_H

#include "actmodel.h"
#include "ntsym.h"

typedef struct am_fold am_fold;

am_fold *am_fold_new(void);
void am_fold_add(am_fold *f, const char *key, uint64_t n);
size_t am_fold_count(const am_fold *f);
/* Calls fn for every stack, sorted by key. */
void am_fold_each(am_fold *f, void (*fn)(void *ctx, const char *key, uint64_t n), void *ctx);
void am_fold_free(am_fold *f);

/* The folded key of event ev (which has frames) inside activity a (may be NULL: "(no activity)").
 * from_name: start the chain at the outermost activity of that name (false if a is not inside one).
 * by_activity: chain elements are "Name //1/5" instead of "Name". Returns false when the key does
 * not apply (from_name not on the chain) or does not fit. */
bool am_fold_key(char *buf, size_t n, const am_activity *a, const char *from_name, bool by_activity,
                 const nt_event *ev, nt_symbolizer *sym);

#endif
