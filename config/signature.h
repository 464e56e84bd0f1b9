/* signature.h: a C-like function signature ("int handle(int fd, const char *url)") parsed into the
 * types the hook wrappers need: a libffi type per argument and the nettrace type its payload field
 * gets. Pure parsing; no side effects. */
#ifndef AT_SIGNATURE_H
#define AT_SIGNATURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AT_SIG_MAX_PARAMS 16
#define AT_SIG_NAME_MAX 64
#define AT_SIG_TEXT_MAX 64

typedef enum at_ctype {
    AT_CT_VOID = 0,
    AT_CT_I8, AT_CT_U8, AT_CT_I16, AT_CT_U16, AT_CT_I32, AT_CT_U32, AT_CT_I64, AT_CT_U64,
    AT_CT_F32, AT_CT_F64,
    AT_CT_PTR, /* any pointer but a string; captured as its address (UInt64) */
    AT_CT_STR, /* char * / const char *: captured as a bounded UTF-16 string */
} at_ctype;

typedef struct at_sig_param {
    char name[AT_SIG_NAME_MAX]; /* "" when the signature does not name it (then arg<N> works) */
    at_ctype type;
    char text[AT_SIG_TEXT_MAX]; /* the type as written, normalised ("const char *"): for messages */
} at_sig_param;

typedef struct at_sig {
    char fname[256];  /* the function's name as written in the signature */
    at_ctype ret;
    char ret_text[AT_SIG_TEXT_MAX];
    int nparams;
    at_sig_param p[AT_SIG_MAX_PARAMS];
} at_sig;

/* Parse s. Returns 0, or -1 with a message in err and *errcol set to the 0-based column in s of the
 * token the message is about. Variadic functions, by-value structs and unknown non-pointer types
 * are refused (with the reason). */
int at_sig_parse(const char *s, at_sig *out, int *errcol, char *err, size_t errlen);

/* Index of the parameter called name, "argN" (0-based N), or -1. "return" is not a parameter. */
int at_sig_param_index(const at_sig *s, const char *name);

/* The nettrace payload type (NT_TYPE_*) of a value of type t. */
uint32_t at_ctype_nt(at_ctype t);
/* libffi's type for t (a const ffi_type *; void * to keep ffi.h out of this header). */
void *at_ctype_ffi(at_ctype t);
const char *at_ctype_name(at_ctype t);

#endif
