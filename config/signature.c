/* signature.c: the C-like signature parser (signature.h). A declaration is split into its return
 * part, the function's name (the identifier before the first '(') and a parameter list split at
 * top-level commas; each part is a list of tokens whose basic-type words, typedef names and stars
 * decide the type. Function-pointer parameters ("void (*fn)(void *)") are pointers. */
#include "signature.h"

#include <ctype.h>
#include <ffi.h>
#include <stdio.h>
#include <string.h>

#include "nt_format.h"

typedef struct tok {
    int kind; /* 'i' identifier, '*', '(', ')', ',', '[', ']', '.' (ellipsis), 0 end */
    int col;
    int len;
    const char *s;
} tok;

#define MAX_TOKS 256

static int tokenize(const char *s, tok *t, int max, int *errcol, char *err, size_t errlen)
{
    int n = 0;
    for (int i = 0; s[i];) {
        unsigned char c = (unsigned char)s[i];
        if (isspace(c)) {
            i++;
            continue;
        }
        if (n >= max - 1) {
            *errcol = i;
            snprintf(err, errlen, "signature too long");
            return -1;
        }
        tok *k = &t[n++];
        k->col = i;
        k->s = s + i;
        if (isalpha(c) || c == '_') {
            int j = i;
            while (isalnum((unsigned char)s[j]) || s[j] == '_')
                j++;
            k->kind = 'i';
            k->len = j - i;
            i = j;
        } else if (isdigit(c)) { /* array sizes: char buf[16] */
            int j = i;
            while (isalnum((unsigned char)s[j]))
                j++;
            k->kind = '0';
            k->len = j - i;
            i = j;
        } else if (!strncmp(s + i, "...", 3)) {
            k->kind = '.';
            k->len = 3;
            i += 3;
        } else if (strchr("*(),[]", c)) {
            k->kind = c;
            k->len = 1;
            i++;
        } else {
            *errcol = i;
            snprintf(err, errlen, "unexpected '%c' in the signature; expected a C declaration", c);
            return -1;
        }
    }
    t[n].kind = 0;
    t[n].col = (int)strlen(s);
    t[n].len = 0;
    t[n].s = s + strlen(s);
    return n;
}

static bool tok_is(const tok *t, const char *w)
{
    return t->kind == 'i' && (int)strlen(w) == t->len && !strncmp(t->s, w, (size_t)t->len);
}

static const struct {
    const char *name;
    at_ctype t;
} typedefs[] = {
    {"size_t", AT_CT_U64},    {"ssize_t", AT_CT_I64},   {"off_t", AT_CT_I64},
    {"off64_t", AT_CT_I64},   {"socklen_t", AT_CT_U32}, {"pid_t", AT_CT_I32},
    {"uid_t", AT_CT_U32},     {"gid_t", AT_CT_U32},     {"mode_t", AT_CT_U32},
    {"time_t", AT_CT_I64},    {"intptr_t", AT_CT_I64},  {"uintptr_t", AT_CT_U64},
    {"ptrdiff_t", AT_CT_I64}, {"int8_t", AT_CT_I8},     {"uint8_t", AT_CT_U8},
    {"int16_t", AT_CT_I16},   {"uint16_t", AT_CT_U16},  {"int32_t", AT_CT_I32},
    {"uint32_t", AT_CT_U32},  {"int64_t", AT_CT_I64},   {"uint64_t", AT_CT_U64},
    {"bool", AT_CT_U8},       {"_Bool", AT_CT_U8},      {"wchar_t", AT_CT_I32},
    {"nfds_t", AT_CT_U64},    {"in_port_t", AT_CT_U16}, {"in_addr_t", AT_CT_U32},
};

static bool is_qualifier(const tok *t)
{
    return tok_is(t, "const") || tok_is(t, "volatile") || tok_is(t, "restrict") ||
           tok_is(t, "__restrict") || tok_is(t, "register");
}

static bool is_type_word(const tok *t)
{
    static const char *const w[] = {"void", "char", "short", "int", "long", "signed", "unsigned",
                                    "float", "double", "struct", "union", "enum"};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if (tok_is(t, w[i]))
            return true;
    for (size_t i = 0; i < sizeof typedefs / sizeof typedefs[0]; i++)
        if (tok_is(t, typedefs[i].name))
            return true;
    return false;
}

/* Type of the tokens [a, b) (a declaration without its name). name_out gets the declared name when
 * there is one. Returns 0 or -1 with err/errcol. */
static int decl_type(const tok *t, int a, int b, at_ctype *out, char *name_out, int *errcol,
                     char *err, size_t errlen)
{
    name_out[0] = 0;
    if (a >= b) {
        *errcol = t[a].col;
        snprintf(err, errlen, "expected a type");
        return -1;
    }
    /* function pointer: TYPE ( * name ) ( ... ) */
    for (int i = a; i < b; i++) {
        if (t[i].kind == '(') {
            int j = i + 1;
            while (j < b && t[j].kind == '*')
                j++;
            if (j == i + 1) {
                *errcol = t[i].col;
                snprintf(err, errlen, "unexpected '('; expected a parameter declaration");
                return -1;
            }
            if (j < b && t[j].kind == 'i')
                snprintf(name_out, AT_SIG_NAME_MAX, "%.*s", t[j].len, t[j].s);
            *out = AT_CT_PTR;
            return 0;
        }
    }
    int stars = 0, longs = 0, end = b;
    bool is_unsigned = false, is_signed = false, saw_char = false, saw_short = false,
         saw_int = false, saw_void = false, saw_float = false, saw_double = false, saw_agg = false,
         saw_enum = false, array = false;
    const tok *typedef_tok = NULL, *unknown = NULL;
    at_ctype typedef_t = AT_CT_VOID;
    /* trailing [ ... ] makes an array parameter: a pointer */
    for (int i = a; i < b; i++)
        if (t[i].kind == '[') {
            array = true;
            end = i;
            break;
        }
    /* the declared name: a last identifier that is not a type word, after at least one type token */
    if (end - 1 > a && t[end - 1].kind == 'i' && !is_type_word(&t[end - 1]) &&
        !is_qualifier(&t[end - 1]) &&
        !(end - 2 >= a && (tok_is(&t[end - 2], "struct") || tok_is(&t[end - 2], "union") ||
                           tok_is(&t[end - 2], "enum")))) {
        snprintf(name_out, AT_SIG_NAME_MAX, "%.*s", t[end - 1].len, t[end - 1].s);
        end--;
    }
    for (int i = a; i < end; i++) {
        const tok *k = &t[i];
        if (k->kind == '*') {
            stars++;
            continue;
        }
        if (k->kind != 'i') {
            *errcol = k->col;
            snprintf(err, errlen, "unexpected '%.*s'; expected a type", k->len, k->s);
            return -1;
        }
        if (is_qualifier(k))
            continue;
        if (tok_is(k, "struct") || tok_is(k, "union") || tok_is(k, "enum")) {
            if (tok_is(k, "enum"))
                saw_enum = true;
            else
                saw_agg = true;
            if (i + 1 < end && t[i + 1].kind == 'i')
                i++; /* the tag */
            continue;
        }
        if (tok_is(k, "unsigned"))
            is_unsigned = true;
        else if (tok_is(k, "signed"))
            is_signed = true;
        else if (tok_is(k, "char"))
            saw_char = true;
        else if (tok_is(k, "short"))
            saw_short = true;
        else if (tok_is(k, "int"))
            saw_int = true;
        else if (tok_is(k, "long"))
            longs++;
        else if (tok_is(k, "void"))
            saw_void = true;
        else if (tok_is(k, "float"))
            saw_float = true;
        else if (tok_is(k, "double"))
            saw_double = true;
        else {
            bool found = false;
            for (size_t j = 0; j < sizeof typedefs / sizeof typedefs[0]; j++)
                if (tok_is(k, typedefs[j].name)) {
                    typedef_tok = k;
                    typedef_t = typedefs[j].t;
                    found = true;
                }
            if (!found && !unknown)
                unknown = k;
        }
    }
    if (array)
        stars++;
    if (stars > 0) {
        /* char * is a string; unsigned char * and char ** are plain pointers */
        *out = (stars == 1 && saw_char && !is_unsigned && !is_signed) ? AT_CT_STR : AT_CT_PTR;
        return 0;
    }
    if (unknown) {
        *errcol = unknown->col;
        snprintf(err, errlen,
                 "unknown type '%.*s'; expected a C basic type (int, long, double, size_t, ...) or "
                 "a pointer",
                 unknown->len, unknown->s);
        return -1;
    }
    if (saw_agg) {
        *errcol = t[a].col;
        snprintf(err, errlen, "a struct or union passed by value cannot be captured; use a pointer");
        return -1;
    }
    if (saw_enum) {
        *out = AT_CT_I32;
        return 0;
    }
    if (typedef_tok) {
        *out = typedef_t;
        return 0;
    }
    if (saw_void) {
        *out = AT_CT_VOID;
        return 0;
    }
    if (saw_float) {
        *out = AT_CT_F32;
        return 0;
    }
    if (saw_double) {
        if (longs) {
            *errcol = t[a].col;
            snprintf(err, errlen, "long double cannot be captured");
            return -1;
        }
        *out = AT_CT_F64;
        return 0;
    }
    if (saw_char)
        *out = is_unsigned ? AT_CT_U8 : AT_CT_I8;
    else if (saw_short)
        *out = is_unsigned ? AT_CT_U16 : AT_CT_I16;
    else if (longs)
        *out = is_unsigned ? AT_CT_U64 : AT_CT_I64;
    else if (saw_int || is_unsigned || is_signed)
        *out = is_unsigned ? AT_CT_U32 : AT_CT_I32;
    else {
        *errcol = t[a].col;
        snprintf(err, errlen, "expected a type");
        return -1;
    }
    return 0;
}

/* The tokens [a, b) as one normalised type text ("const char *", "char **"), without the name. */
static void type_text(const tok *t, int a, int b, const char *name, char *out)
{
    if (b > a && name[0] && t[b - 1].kind == 'i' && (int)strlen(name) == t[b - 1].len &&
        !strncmp(t[b - 1].s, name, (size_t)t[b - 1].len))
        b--;
    size_t k = 0;
    out[0] = 0;
    for (int i = a; i < b; i++) {
        char sep[2] = {0, 0};
        if (k && t[i].kind == '*' && t[i - 1].kind != '*')
            sep[0] = ' ';
        else if (k && t[i].kind != '*' && t[i - 1].kind != '*' && t[i - 1].kind != '(' &&
                 t[i].kind != ')' && t[i].kind != '(' && t[i].kind != '[' && t[i].kind != ']')
            sep[0] = ' ';
        int w = snprintf(out + k, AT_SIG_TEXT_MAX - k, "%s%.*s", sep, t[i].len, t[i].s);
        if (w < 0 || (size_t)w >= AT_SIG_TEXT_MAX - k) {
            out[k] = 0;
            return;
        }
        k += (size_t)w;
    }
}

int at_sig_parse(const char *s, at_sig *out, int *errcol, char *err, size_t errlen)
{
    tok t[MAX_TOKS];
    memset(out, 0, sizeof *out);
    *errcol = 0;
    int n = tokenize(s, t, MAX_TOKS, errcol, err, errlen);
    if (n < 0)
        return -1;
    int lp = -1;
    for (int i = 0; i < n; i++)
        if (t[i].kind == '(') {
            lp = i;
            break;
        }
    if (lp < 1 || t[lp - 1].kind != 'i' || is_type_word(&t[lp - 1])) {
        *errcol = lp >= 0 ? t[lp].col : t[n].col;
        snprintf(err, errlen, "expected 'TYPE NAME(PARAMETERS)'");
        return -1;
    }
    snprintf(out->fname, sizeof out->fname, "%.*s", t[lp - 1].len, t[lp - 1].s);
    char dummy[AT_SIG_NAME_MAX];
    if (lp - 1 == 0) {
        *errcol = t[0].col;
        snprintf(err, errlen, "expected the return type before '%s'", out->fname);
        return -1;
    }
    dummy[0] = 0;
    if (decl_type(t, 0, lp - 1, &out->ret, dummy, errcol, err, errlen) < 0)
        return -1;
    type_text(t, 0, lp - 1, "", out->ret_text);
    /* the matching ')' must end the signature */
    int depth = 0, rp = -1;
    for (int i = lp; i < n; i++) {
        if (t[i].kind == '(')
            depth++;
        else if (t[i].kind == ')' && --depth == 0) {
            rp = i;
            break;
        }
    }
    if (rp < 0) {
        *errcol = t[n].col;
        snprintf(err, errlen, "expected ')' at the end of the parameter list");
        return -1;
    }
    if (rp != n - 1) {
        *errcol = t[rp + 1].col;
        snprintf(err, errlen, "unexpected '%.*s' after the parameter list", t[rp + 1].len,
                 t[rp + 1].s);
        return -1;
    }
    /* (void) and () are no parameters */
    if (rp == lp + 1 || (rp == lp + 2 && tok_is(&t[lp + 1], "void")))
        return 0;
    int start = lp + 1;
    depth = 0;
    for (int i = lp + 1; i <= rp; i++) {
        if (t[i].kind == '(' || t[i].kind == '[')
            depth++;
        else if ((t[i].kind == ')' || t[i].kind == ']') && depth > 0)
            depth--;
        else if ((t[i].kind == ',' && depth == 0) || i == rp) {
            if (start == i) {
                *errcol = t[i].col;
                snprintf(err, errlen, "expected a parameter before '%.*s'", t[i].len, t[i].s);
                return -1;
            }
            if (t[start].kind == '.') {
                *errcol = t[start].col;
                snprintf(err, errlen,
                         "a variadic function cannot take a signature; leave 'signature' out "
                         "(the generic stub hooks it without payload)");
                return -1;
            }
            if (out->nparams >= AT_SIG_MAX_PARAMS) {
                *errcol = t[start].col;
                snprintf(err, errlen, "more than %d parameters", AT_SIG_MAX_PARAMS);
                return -1;
            }
            at_sig_param *p = &out->p[out->nparams];
            if (decl_type(t, start, i, &p->type, p->name, errcol, err, errlen) < 0)
                return -1;
            type_text(t, start, i, p->name, p->text);
            if (p->type == AT_CT_VOID) {
                *errcol = t[start].col;
                snprintf(err, errlen, "a parameter cannot be void");
                return -1;
            }
            for (int j = 0; p->name[0] && j < out->nparams; j++)
                if (!strcmp(out->p[j].name, p->name)) {
                    *errcol = t[start].col;
                    snprintf(err, errlen, "parameter '%s' named twice", p->name);
                    return -1;
                }
            out->nparams++;
            start = i + 1;
        }
    }
    return 0;
}

int at_sig_param_index(const at_sig *s, const char *name)
{
    for (int i = 0; i < s->nparams; i++)
        if (s->p[i].name[0] && !strcmp(s->p[i].name, name))
            return i;
    int k;
    char end;
    if (sscanf(name, "arg%d%c", &k, &end) == 1 && k >= 0 && k < s->nparams)
        return k;
    return -1;
}

uint32_t at_ctype_nt(at_ctype t)
{
    switch (t) {
    case AT_CT_I8: case AT_CT_I16: case AT_CT_I32: return NT_TYPE_INT32;
    case AT_CT_U8: case AT_CT_U16: case AT_CT_U32: return NT_TYPE_UINT32;
    case AT_CT_I64: return NT_TYPE_INT64;
    case AT_CT_U64: case AT_CT_PTR: return NT_TYPE_UINT64;
    case AT_CT_F32: case AT_CT_F64: return NT_TYPE_DOUBLE;
    case AT_CT_STR: return NT_TYPE_STRING;
    case AT_CT_VOID: break;
    }
    return 0;
}

void *at_ctype_ffi(at_ctype t)
{
    switch (t) {
    case AT_CT_VOID: return &ffi_type_void;
    case AT_CT_I8: return &ffi_type_sint8;
    case AT_CT_U8: return &ffi_type_uint8;
    case AT_CT_I16: return &ffi_type_sint16;
    case AT_CT_U16: return &ffi_type_uint16;
    case AT_CT_I32: return &ffi_type_sint32;
    case AT_CT_U32: return &ffi_type_uint32;
    case AT_CT_I64: return &ffi_type_sint64;
    case AT_CT_U64: return &ffi_type_uint64;
    case AT_CT_F32: return &ffi_type_float;
    case AT_CT_F64: return &ffi_type_double;
    case AT_CT_PTR: case AT_CT_STR: return &ffi_type_pointer;
    }
    return &ffi_type_void;
}

const char *at_ctype_name(at_ctype t)
{
    static const char *const n[] = {"void", "int8", "uint8", "int16", "uint16", "int32", "uint32",
                                    "int64", "uint64", "float", "double", "pointer", "string"};
    return (unsigned)t < sizeof n / sizeof n[0] ? n[t] : "?";
}
