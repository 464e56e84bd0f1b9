/* fuzz_hookconf.c: libFuzzer target for the config file parser (config/hookconf.h): any text ends in
 * a config whose every entry is consistent (names terminated, captures and keys naming a parameter of
 * the signature or the return value), or in one "PATH:LINE:COL: ..." message whose line is inside the
 * text; a short message buffer is never overrun; the parse leaks nothing. Built by `make fuzz`. */
#include "hookconf.h"

#include <stdlib.h>
#include <string.h>

static void check_index(const at_hc_probe *pr, int ix, bool none_ok)
{
    if (ix == AT_HC_NONE && none_ok) return;
    if (ix == AT_HC_RETURN) return;
    if (ix < 0 || ix >= AT_SIG_MAX_PARAMS) abort();
    if (pr->has_sig && ix >= pr->sig.nparams) abort();
}

static void check_probe(const at_hc_probe *pr)
{
    if (!memchr(pr->symbol, 0, sizeof pr->symbol)) abort();
    if (pr->ncapture < 0 || pr->ncapture > AT_HC_MAX_CAPTURE) abort();
    if (pr->has_sig && (pr->sig.nparams < 0 || pr->sig.nparams > AT_SIG_MAX_PARAMS)) abort();
    for (int i = 0; i < pr->ncapture; i++) check_index(pr, pr->capture[i], false);
    check_index(pr, pr->key, true);
    if (pr->has_when) {
        check_index(pr, pr->when_what, false);
        if (pr->when_op < AT_HC_EQ || pr->when_op > AT_HC_GE) abort();
    }
}

static void check_config(const at_hookconf *c)
{
    if (c->nentries < 0 || (c->nentries && !c->entries)) abort();
    if (!memchr(c->provider, 0, sizeof c->provider) || !memchr(c->output, 0, sizeof c->output)) abort();
    for (int i = 0; i < c->nentries; i++) {
        const at_hc_entry *e = &c->entries[i];
        if (e->kind < AT_HC_ACTIVITY || e->kind > AT_HC_FLOW_KEYED) abort();
        if (!memchr(e->name, 0, sizeof e->name) || !memchr(e->build_id, 0, sizeof e->build_id)) abort();
        if (e->tier < AT_HC_TIER_AUTO || e->tier > AT_HC_TIER_ENTRY) abort();
        if (!e->probe[0].symbol[0]) abort();
        check_probe(&e->probe[0]);
        if (e->paired) {
            if (!e->probe[1].symbol[0]) abort();
            check_probe(&e->probe[1]);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    size_t len = strlen(text);
    long lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';

    at_hookconf c;
    char err[512];
    if (at_hookconf_parse("f.conf", text, &c, err, sizeof err) == 0) {
        check_config(&c);
        at_hookconf_free(&c);
    } else {
        if (strncmp(err, "f.conf:", 7) != 0) abort();
        char *end;
        long line = strtol(err + 7, &end, 10);
        if (end != err + 7 && *end == ':' && (line < 1 || line > lines)) abort();
        if (c.nentries != 0 || c.entries) abort();
    }
    char small[12];
    memset(small, 'x', sizeof small);
    if (at_hookconf_parse("f.conf", text, &c, small, sizeof small) == 0) at_hookconf_free(&c);
    else if (!memchr(small, 0, sizeof small)) abort();
    free(text);
    return 0;
}
