/* fuzz_signature.c: libFuzzer target for the signature parser (config/signature.h): any text ends in
 * a parsed signature whose every field is in range and whose every named parameter is found again by
 * name and by argN, or in one message with an error column inside the text. Built by `make fuzz`. */
#include "signature.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_parsed(const at_sig *s)
{
    if (s->nparams < 0 || s->nparams > AT_SIG_MAX_PARAMS) abort();
    if (!memchr(s->fname, 0, sizeof s->fname) || !s->fname[0]) abort();
    if ((unsigned)s->ret > AT_CT_STR) abort();
    for (int i = 0; i < s->nparams; i++) {
        const at_sig_param *p = &s->p[i];
        if (!memchr(p->name, 0, sizeof p->name)) abort();
        if ((unsigned)p->type > AT_CT_STR || p->type == AT_CT_VOID) abort();
        if (!at_ctype_nt(p->type) || !at_ctype_ffi(p->type) || !strcmp(at_ctype_name(p->type), "?"))
            abort();
        if (p->name[0] && at_sig_param_index(s, p->name) != i) abort();
        char an[16];
        snprintf(an, sizeof an, "arg%d", i);
        int k = at_sig_param_index(s, an);
        if (k < 0 || k >= s->nparams) abort();
    }
    /* "return" is not a parameter unless one is literally named so */
    int k = at_sig_param_index(s, "return");
    if (k >= 0 && strcmp(s->p[k].name, "return")) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;
    size_t len = strlen(s);
    at_sig sig;
    int col = -1;
    char err[256];
    err[0] = 0;
    if (at_sig_parse(s, &sig, &col, err, sizeof err) == 0)
        check_parsed(&sig);
    else if (!err[0] || col < 0 || (size_t)col > len)
        abort();
    /* a short message buffer must still be terminated */
    char small[8];
    memset(small, 'x', sizeof small);
    if (at_sig_parse(s, &sig, &col, small, sizeof small) != 0 && !memchr(small, 0, sizeof small)) abort();
    free(s);
    return 0;
}
