/* hookconf.h: the config file (ACTTRACE_CONFIG) as a plain struct: trace settings and the list of
 * entries (activities, events, flow rules) on named functions. The format is in docs/config.md.
 * Parsing has no side effects; every error names FILE:LINE:COLUMN and what was expected. */
#ifndef AT_HOOKCONF_H
#define AT_HOOKCONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "signature.h"

#define AT_HC_MAX_CAPTURE 8
#define AT_HC_NAME_MAX 64
#define AT_HC_SYM_MAX 512
#define AT_HC_RETURN (-1)    /* "return" where an argument index is expected */
#define AT_HC_NONE (-2)

typedef enum at_hc_kind {
    AT_HC_ACTIVITY = 1,  /* [activity NAME] */
    AT_HC_EVENT,         /* [event NAME] */
    AT_HC_FLOW_CALLBACK, /* [flow NAME] type = callback */
    AT_HC_FLOW_KEYED,    /* [flow NAME] type = keyed */
} at_hc_kind;

typedef enum at_hc_op { AT_HC_EQ = 1, AT_HC_NE, AT_HC_LT, AT_HC_LE, AT_HC_GT, AT_HC_GE } at_hc_op;

typedef struct at_hc_pos {
    int line, col; /* 1-based; col of the value (or of the key when the key is at fault) */
} at_hc_pos;

/* One hooked function and what happens there. */
typedef struct at_hc_probe {
    char symbol[AT_HC_SYM_MAX]; /* sym | lib!sym | sym@VERSION | module+0xOFFSET; "" = unused */
    at_hc_pos symbol_pos;
    bool has_sig;
    at_sig sig;
    int ncapture;                       /* arguments (index) and AT_HC_RETURN, in payload order */
    int capture[AT_HC_MAX_CAPTURE];
    int key;                            /* argument index, AT_HC_RETURN, or AT_HC_NONE */
    bool has_when;                      /* condition: <arg|return> <op> <integer> */
    int when_what;
    at_hc_op when_op;
    int64_t when_value;
    unsigned max_string;                /* bound of captured strings (UTF-16 code units) */
} at_hc_probe;

#define AT_HC_TIER_AUTO 0  /* GOT for a library's exported function some module imports, else entry */
#define AT_HC_TIER_GOT 1
#define AT_HC_TIER_ENTRY 2 /* every call, the library's own internal ones too */

#define AT_HC_STACK_START 0x1u
#define AT_HC_STACK_STOP 0x2u

typedef struct at_hc_entry {
    at_hc_kind kind;
    char name[AT_HC_NAME_MAX];
    at_hc_pos pos; /* the section header */
    /* activity with 'function': probe[0] only, Start on entry and Stop on return.
     * activity with 'start'/'stop': probe[0] = start (Start when it returns, key from it),
     * probe[1] = stop (Stop of the activity with the same key, on entry).
     * event: probe[0] (written on entry, or on return when 'return' is captured or tested).
     * flow callback: probe[0] = the submitting function; callback/callback_arg name its arguments.
     * flow keyed: probe[0] = enqueue (key = the item), probe[1] = dequeue (key = the item). */
    bool paired;
    at_hc_probe probe[2];
    bool recursive; /* default yes for activities ('recursive = no': EventSource's rule) */
    unsigned stacks; /* AT_HC_STACK_* */
    bool stacks_set; /* 'stacks' given (else ACTTRACE_STACKS decides) */
    uint8_t level;   /* 0 = info */
    uint64_t keywords;
    int tier;           /* AT_HC_TIER_*: how its functions are hooked */
    bool fd_key;        /* a pair's key is a file descriptor: the fd hand-off carries the activity */
    char build_id[128]; /* hex; module+0xOFFSET names are hooked only in a module with this id */
    at_hc_pos build_id_pos;
    int callback;     /* flow callback: index of the function-pointer argument */
    int callback_arg; /* flow callback: index of the argument the callback receives (or AT_HC_NONE) */
} at_hc_entry;

typedef struct at_hookconf {
    char path[4096];
    /* [trace]; 0 / "" = not set (the environment or the defaults decide) */
    char provider[AT_HC_NAME_MAX];
    char output[4096];
    int mode;            /* AT_OUTPUT_* + 1; 0 = not set */
    uint64_t mode_size;
    uint64_t buffer_bytes;
    unsigned flush_ms;
    int clock;           /* enum at_clock_kind + 1; 0 = not set */
    unsigned file_mode;  /* trace files' permissions; 0 = not set */
    int symbols;         /* 1 off, 2 on (Universal.System), 3 methods; 0 = not set */
    int sample_hz;       /* CPU samples per second of thread CPU time (0 off); -1 = not set */
    int waits;           /* blocked time recorded (1) or not (0); -1 = not set */
    int tasks;           /* hand-offs as TPL tasks: 0 off, 1 on, 2 auto; -1 = not set */
    int traceparent;     /* HTTP requests read for traceparent (1) or not (0); -1 = not set */
    int traceparent_inject; /* traceparent added to HTTP requests sent (1) or not (0); -1 = not set */
    int exchanges;       /* connected sockets' exchanges counted (1) or not (0); -1 = not set */
    long wait_min_us;    /* the shortest wait recorded; -1 = not set */
    int level;           /* -1 = not set */
    uint64_t keywords;
    bool has_keywords;
    int nentries;
    at_hc_entry *entries; /* malloc'd */
} at_hookconf;

/* Parse text (the contents of the file called path, for messages). Returns 0, or -1 with one
 * message "PATH:LINE:COL: ..." in err (c is then freed and empty). */
int at_hookconf_parse(const char *path, const char *text, at_hookconf *c, char *err, size_t errlen);
/* Read and parse the file path. */
int at_hookconf_load(const char *path, at_hookconf *c, char *err, size_t errlen);
void at_hookconf_free(at_hookconf *c);

const char *at_hc_kind_name(at_hc_kind k);

#endif
