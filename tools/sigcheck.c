/* sigcheck.c: acttrace check's comparison of a declared signature with the DWARF prototype of the
 * function the shim resolved (libdwfl finds the debug info: the module's own, or the separate file its
 * build-id or .gnu_debuglink names). Types are compared by what decides how a value is passed and
 * captured: integer (size, signedness), floating point (size), pointer (and whether it points to
 * char, which a string capture reads), void; typedefs, const and volatile are looked through. */
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sigcheck.h"

enum { K_VOID, K_INT, K_FLOAT, K_PTR, K_AGG, K_OTHER };

typedef struct dtype {
    int kind;
    int size;          /* bytes, for K_INT and K_FLOAT */
    bool is_signed;
    bool is_enum_or_bool; /* signedness of these is the compiler's choice: not reported */
    int pointee;       /* K_PTR: 0 other, 1 char, 2 signed/unsigned char or void */
    char text[160];    /* as C spells it, with the resolved type after a typedef */
} dtype;

static Dwarf_Die *type_of(Dwarf_Die *d, Dwarf_Die *mem)
{
    Dwarf_Attribute a;
    if (!dwarf_attr_integrate(d, DW_AT_type, &a))
        return NULL;
    return dwarf_formref_die(&a, mem);
}

static int byte_size(Dwarf_Die *d)
{
    Dwarf_Attribute a;
    Dwarf_Word w;
    if (dwarf_attr_integrate(d, DW_AT_byte_size, &a) && dwarf_formudata(&a, &w) == 0)
        return (int)w;
    return 0;
}

/* C spelling of the type t (NULL = void), into out. */
static void spell(Dwarf_Die *t, char *out, size_t n, int depth)
{
    if (!t) {
        snprintf(out, n, "void");
        return;
    }
    if (depth > 16) {
        snprintf(out, n, "...");
        return;
    }
    Dwarf_Die mem, *in = type_of(t, &mem);
    const char *name = dwarf_diename(t);
    char inner[160];
    switch (dwarf_tag(t)) {
    case DW_TAG_base_type:
    case DW_TAG_typedef:
        snprintf(out, n, "%s", name ? name : "?");
        return;
    case DW_TAG_const_type:
    case DW_TAG_volatile_type: {
        const char *q = dwarf_tag(t) == DW_TAG_const_type ? "const" : "volatile";
        spell(in, inner, sizeof inner, depth + 1);
        if (in && dwarf_tag(in) == DW_TAG_pointer_type) /* char *const */
            snprintf(out, n, "%.120s%s", inner, q);
        else
            snprintf(out, n, "%s %.120s", q, inner);
        return;
    }
    case DW_TAG_restrict_type:
    case DW_TAG_atomic_type:
        spell(in, out, n, depth + 1);
        return;
    case DW_TAG_pointer_type:
    case DW_TAG_reference_type:
        if (in && dwarf_tag(in) == DW_TAG_subroutine_type) {
            snprintf(out, n, "a function pointer");
            return;
        }
        spell(in, inner, sizeof inner, depth + 1);
        snprintf(out, n, "%.120s%s*", inner, inner[0] && inner[strlen(inner) - 1] == '*' ? "" : " ");
        return;
    case DW_TAG_structure_type: snprintf(out, n, "struct %s", name ? name : "(anonymous)"); return;
    case DW_TAG_union_type: snprintf(out, n, "union %s", name ? name : "(anonymous)"); return;
    case DW_TAG_class_type: snprintf(out, n, "class %s", name ? name : "(anonymous)"); return;
    case DW_TAG_enumeration_type: snprintf(out, n, "enum %s", name ? name : "(anonymous)"); return;
    case DW_TAG_array_type:
        spell(in, inner, sizeof inner, depth + 1);
        snprintf(out, n, "%.120s[]", inner);
        return;
    default:
        snprintf(out, n, "%s", name ? name : "?");
    }
}

/* t with typedefs and qualifiers looked through. */
static Dwarf_Die *strip(Dwarf_Die *t, Dwarf_Die *mem)
{
    for (int i = 0; t && i < 32; i++) {
        int tag = dwarf_tag(t);
        if (tag != DW_TAG_typedef && tag != DW_TAG_const_type && tag != DW_TAG_volatile_type &&
            tag != DW_TAG_restrict_type && tag != DW_TAG_atomic_type)
            return t;
        Dwarf_Die next;
        Dwarf_Die *u = type_of(t, &next);
        if (!u)
            return NULL; /* const void */
        *mem = next;
        t = mem;
    }
    return t;
}

/* The name of the typedef t is (qualifiers looked through), or NULL. */
static const char *typedef_name(Dwarf_Die *t)
{
    Dwarf_Die mem;
    for (int i = 0; t && i < 8; i++) {
        int tag = dwarf_tag(t);
        if (tag == DW_TAG_typedef)
            return dwarf_diename(t);
        if (tag != DW_TAG_const_type && tag != DW_TAG_volatile_type && tag != DW_TAG_restrict_type)
            return NULL;
        t = type_of(t, &mem);
    }
    return NULL;
}

/* A union of pointers only, one register wide: glibc's __SOCKADDR_ARG and its kin (transparent
 * unions, so that callers pass any sockaddr pointer), which the ABI passes as the pointer it holds.
 * glibc's own debug info lists no members for them: then the typedef's name says it. */
static bool pointer_union(Dwarf_Die *u, const char *tname)
{
    if (dwarf_tag(u) != DW_TAG_union_type || byte_size(u) != 8)
        return false;
    Dwarf_Die c;
    if (dwarf_child(u, &c) != 0)
        return tname && (!strcmp(tname, "__SOCKADDR_ARG") || !strcmp(tname, "__CONST_SOCKADDR_ARG"));
    int n = 0;
    do {
        if (dwarf_tag(&c) != DW_TAG_member)
            continue;
        Dwarf_Die m1, m2, *t = type_of(&c, &m1), *st = t ? strip(t, &m2) : NULL;
        if (!st || dwarf_tag(st) != DW_TAG_pointer_type)
            return false;
        n++;
    } while (dwarf_siblingof(&c, &c) == 0);
    return n > 0;
}

static void classify(Dwarf_Die *t, dtype *d)
{
    memset(d, 0, sizeof *d);
    spell(t, d->text, sizeof d->text, 0);
    Dwarf_Die mem, *s = strip(t, &mem);
    if (s && s != t) { /* a typedef: say what it is */
        char base[128];
        spell(s, base, sizeof base, 0);
        if (strcmp(base, d->text)) {
            size_t k = strlen(d->text);
            snprintf(d->text + k, sizeof d->text - k, " (%s)", base);
        }
    }
    if (!s) {
        d->kind = K_VOID;
        return;
    }
    Dwarf_Attribute a;
    Dwarf_Word enc = 0;
    switch (dwarf_tag(s)) {
    case DW_TAG_base_type:
        if (dwarf_attr_integrate(s, DW_AT_encoding, &a))
            dwarf_formudata(&a, &enc);
        d->size = byte_size(s);
        if (enc == DW_ATE_float) {
            d->kind = K_FLOAT;
        } else if (enc == DW_ATE_signed || enc == DW_ATE_signed_char || enc == DW_ATE_unsigned ||
                   enc == DW_ATE_unsigned_char || enc == DW_ATE_boolean || enc == DW_ATE_UTF) {
            d->kind = K_INT;
            d->is_signed = enc == DW_ATE_signed || enc == DW_ATE_signed_char;
            d->is_enum_or_bool = enc == DW_ATE_boolean;
        } else
            d->kind = K_OTHER;
        return;
    case DW_TAG_enumeration_type:
        d->kind = K_INT;
        d->size = byte_size(s);
        d->is_signed = true;
        d->is_enum_or_bool = true;
        return;
    case DW_TAG_pointer_type:
    case DW_TAG_reference_type:
    case DW_TAG_rvalue_reference_type:
    case DW_TAG_array_type: {
        d->kind = K_PTR;
        Dwarf_Die m2, *in = type_of(s, &m2);
        Dwarf_Die m3, *p = in ? strip(in, &m3) : NULL;
        if (!p) {
            d->pointee = 2; /* void */
        } else if (dwarf_tag(p) == DW_TAG_base_type && byte_size(p) == 1) {
            Dwarf_Word e = 0;
            if (dwarf_attr_integrate(p, DW_AT_encoding, &a))
                dwarf_formudata(&a, &e);
            const char *nm = dwarf_diename(p);
            /* plain char (signed on x86-64, but spelled "char") is what a string capture expects */
            d->pointee = nm && !strcmp(nm, "char") ? 1 : 2;
            (void)e;
        }
        return;
    }
    case DW_TAG_union_type:
        if (pointer_union(s, typedef_name(t))) {
            d->kind = K_PTR;
            return;
        }
        d->kind = K_AGG;
        return;
    case DW_TAG_structure_type:
    case DW_TAG_class_type:
        d->kind = K_AGG;
        return;
    default:
        d->kind = K_OTHER;
    }
}

/* The declared type, as the same classes. */
static void declared(at_ctype c, dtype *d)
{
    memset(d, 0, sizeof *d);
    switch (c) {
    case AT_CT_VOID: d->kind = K_VOID; break;
    case AT_CT_I8: case AT_CT_I16: case AT_CT_I32: case AT_CT_I64:
        d->kind = K_INT, d->is_signed = true;
        d->size = c == AT_CT_I8 ? 1 : c == AT_CT_I16 ? 2 : c == AT_CT_I32 ? 4 : 8;
        break;
    case AT_CT_U8: case AT_CT_U16: case AT_CT_U32: case AT_CT_U64:
        d->kind = K_INT;
        d->size = c == AT_CT_U8 ? 1 : c == AT_CT_U16 ? 2 : c == AT_CT_U32 ? 4 : 8;
        break;
    case AT_CT_F32: d->kind = K_FLOAT, d->size = 4; break;
    case AT_CT_F64: d->kind = K_FLOAT, d->size = 8; break;
    case AT_CT_PTR: d->kind = K_PTR; break;
    case AT_CT_STR: d->kind = K_PTR, d->pointee = 1; break;
    }
}

static const char *kind_word(int k)
{
    static const char *const w[] = {"void", "an integer", "a floating-point value", "a pointer",
                                    "a struct passed by value", "a type acttrace cannot pass"};
    return w[k];
}

/* 2 error, 1 warning, 0 the same; why gets the reason (after "but ...") */
static int compare(const dtype *decl, const dtype *dw, char *why, size_t n)
{
    why[0] = 0;
    if (decl->kind != dw->kind) {
        snprintf(why, n, " (%s where the function has %s)", kind_word(decl->kind), kind_word(dw->kind));
        return 2;
    }
    switch (decl->kind) {
    case K_INT:
        if (decl->size != dw->size) {
            snprintf(why, n, " (%d bytes where the function has %d)", decl->size, dw->size);
            return 2;
        }
        if (decl->is_signed != dw->is_signed && !dw->is_enum_or_bool) {
            snprintf(why, n, " (%s where the function's is %s)",
                     decl->is_signed ? "signed" : "unsigned", dw->is_signed ? "signed" : "unsigned");
            return 1;
        }
        return 0;
    case K_FLOAT:
        if (decl->size != dw->size) {
            snprintf(why, n, " (%s where the function has %s)", decl->size == 4 ? "float" : "double",
                     dw->size == 4 ? "float" : dw->size == 8 ? "double" : "long double");
            return 2;
        }
        return 0;
    case K_PTR:
        if (decl->pointee == 1 && dw->pointee == 0) {
            snprintf(why, n, " (captured as a string, but it points to no characters)");
            return 2;
        }
        if (decl->pointee == 1 && dw->pointee == 2) {
            snprintf(why, n, " (its bytes are captured as a string)");
            return 1;
        }
        return 0;
    }
    return 0;
}

static int param_children(Dwarf_Die *fn, Dwarf_Die *params, int max, bool *variadic)
{
    Dwarf_Die c;
    int n = 0;
    *variadic = false;
    if (dwarf_child(fn, &c) != 0)
        return 0;
    do {
        int tag = dwarf_tag(&c);
        if (tag == DW_TAG_formal_parameter && n < max)
            params[n++] = c;
        else if (tag == DW_TAG_unspecified_parameters)
            *variadic = true;
    } while (dwarf_siblingof(&c, &c) == 0);
    return n;
}

/* The subprogram whose code starts at or holds addr. */
static bool find_function(Dwfl_Module *m, Dwarf_Addr addr, Dwarf_Die *fn)
{
    Dwarf_Addr bias = 0;
    Dwarf_Die *cu = dwfl_module_addrdie(m, addr, &bias);
    if (!cu)
        return false;
    Dwarf_Die *scopes = NULL;
    int n = dwarf_getscopes(cu, addr - bias, &scopes);
    bool found = false;
    for (int i = n - 1; i >= 0; i--) /* outermost first: the function, not what was inlined into it */
        if (dwarf_tag(&scopes[i]) == DW_TAG_subprogram) {
            *fn = scopes[i];
            found = true;
            break;
        }
    free(scopes);
    return found;
}

void at_sigcheck(const char *module, uint64_t offset, const at_sig *sig, const char *prefix,
                 FILE *out, at_sigcheck_result *res)
{
    memset(res, 0, sizeof *res);
    static const Dwfl_Callbacks cb = {
        .find_elf = dwfl_build_id_find_elf,
        .find_debuginfo = dwfl_standard_find_debuginfo,
        .section_address = dwfl_offline_section_address,
    };
    Dwfl *dwfl = dwfl_begin(&cb);
    Dwfl_Module *m = dwfl ? dwfl_report_offline(dwfl, "", module, -1) : NULL;
    if (dwfl)
        dwfl_report_end(dwfl, NULL, NULL);
    Dwarf_Die fn;
    Dwarf_Addr bias = 0, lo = 0;
    /* an offline module lies where its ELF file says (no load bias), plus wherever libdwfl put it */
    if (m)
        dwfl_module_info(m, NULL, &lo, NULL, NULL, NULL, NULL, NULL);
    GElf_Addr elf_bias = 0;
    if (m)
        dwfl_module_getelf(m, &elf_bias);
    if (!m || !dwfl_module_getdwarf(m, &bias) || !find_function(m, offset + elf_bias, &fn)) {
        fprintf(out, "%sno debug info for %s in %s: signature not checked\n", prefix, sig->fname,
                module);
        if (dwfl)
            dwfl_end(dwfl);
        return;
    }
    (void)lo;
    /* Code written in assembly (glibc's system call stubs: getpeername, socket, bind ...) has
     * debug info that names the function but gives it no parameters and an unspecified type: no
     * prototype to compare with */
    Dwarf_Die *cu = dwfl_module_addrdie(m, offset + elf_bias, &bias);
    Dwarf_Word lang = 0;
    Dwarf_Attribute la;
    if (cu && dwarf_attr(cu, DW_AT_language, &la))
        dwarf_formudata(&la, &lang);
    if (lang == DW_LANG_Mips_Assembler) {
        fprintf(out, "%s%s in %s is written in assembly (its debug info has no prototype): "
                     "signature not checked\n", prefix, sig->fname, module);
        dwfl_end(dwfl);
        return;
    }
    res->checked = true;
    Dwarf_Die params[AT_SIG_MAX_PARAMS + 8];
    bool variadic;
    int np = param_children(&fn, params, (int)(sizeof params / sizeof *params), &variadic);
    Dwarf_Attribute a;
    Dwarf_Die origin;
    if (np == 0 && !variadic &&
        (dwarf_attr(&fn, DW_AT_abstract_origin, &a) || dwarf_attr(&fn, DW_AT_specification, &a)) &&
        dwarf_formref_die(&a, &origin))
        np = param_children(&origin, params, (int)(sizeof params / sizeof *params), &variadic);
    const char *dwname = dwarf_diename(&fn);
    char why[160];
    /* the return type */
    dtype dd, dw;
    declared(sig->ret, &dd);
    Dwarf_Die tm, *rt = type_of(&fn, &tm);
    classify(rt, &dw);
    int sev = compare(&dd, &dw, why, sizeof why);
    if (sev) {
        fprintf(out, "%s%s: %s: the return type is declared %s but the function's DWARF prototype has %s%s\n",
                prefix, sig->fname, sev == 2 ? "error" : "warning", sig->ret_text, dw.text, why);
        sev == 2 ? res->errors++ : res->warnings++;
    }
    if (variadic) {
        fprintf(out, "%s%s: error: the function's DWARF prototype is variadic (%s); a signature cannot "
                     "describe it\n", prefix, sig->fname, dwname ? dwname : sig->fname);
        res->errors++;
    }
    if (np != sig->nparams) {
        fprintf(out, "%s%s: error: %d parameter%s declared but the function's DWARF prototype has %d\n",
                prefix, sig->fname, sig->nparams, sig->nparams == 1 ? " is" : "s are", np);
        res->errors++;
    }
    for (int i = 0; i < sig->nparams && i < np; i++) {
        Dwarf_Die pm, *pt = type_of(&params[i], &pm);
        classify(pt, &dw);
        declared(sig->p[i].type, &dd);
        sev = compare(&dd, &dw, why, sizeof why);
        if (!sev)
            continue;
        const char *pname = sig->p[i].name[0] ? sig->p[i].name : dwarf_diename(&params[i]);
        fprintf(out, "%s%s: %s: parameter %d '%s' is declared %s but the function's DWARF prototype "
                     "has %s%s\n",
                prefix, sig->fname, sev == 2 ? "error" : "warning", i + 1, pname ? pname : "?",
                sig->p[i].text, dw.text, why);
        sev == 2 ? res->errors++ : res->warnings++;
    }
    if (!res->errors && !res->warnings)
        fprintf(out, "%s%s: the signature matches the function's DWARF prototype\n", prefix,
                sig->fname);
    dwfl_end(dwfl);
}
