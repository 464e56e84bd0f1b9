/* cliopt.c: the command-line conventions the acttrace commands share (see cliopt.h). getopt_long
 * runs with its own messages off: a usage error is said once, in the command's words. */
#include "cliopt.h"

#include "nt_format.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void at_cli_init(at_cli *c, const char *cmd, void (*usage)(FILE *f), const char *shortopts,
                 const struct option *longopts, int argc, char **argv)
{
    memset(c, 0, sizeof *c);
    c->cmd = cmd;
    c->usage = usage;
    c->argc = argc;
    c->argv = argv;
    c->first = 1;
    /* ':' first (after a '+'): a missing value comes back as ':', told apart from an unknown option */
    const char *s = shortopts ? shortopts : "";
    bool plus = s[0] == '+';
    snprintf(c->shortopts, sizeof c->shortopts, "%s:%sh", plus ? "+" : "", s + plus);
    int n = 0;
    for (; longopts && longopts[n].name && n < AT_CLI_MAX_OPTS; n++) c->opts[n] = longopts[n];
    c->opts[n++] = (struct option){"help", no_argument, NULL, 'h'};
    c->opts[n] = (struct option){0};
}

int at_cli_usage_error(const at_cli *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "acttrace%s%s: ", c->cmd[0] ? " " : "", c->cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    c->usage(stderr);
    return AT_EXIT_USAGE;
}

/* The long option whose val is v and that takes a value (has_arg: -1 any); NULL if none. */
static const struct option *long_by_val(const at_cli *c, int v, int has_arg)
{
    for (const struct option *o = c->opts; o->name; o++)
        if (o->val == v && (has_arg < 0 || o->has_arg == has_arg)) return o;
    return NULL;
}

/* getopt_long refused argv element w (optopt: the option's val or short letter, 0 for an unknown
 * or ambiguous long option): say which of the ways it went wrong. */
static void refused(at_cli *c, const char *w)
{
    if (w[0] == '-' && w[1] == '-') {
        const char *name = w + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct option *exact = NULL, *prefix = NULL;
        int nprefix = 0;
        for (const struct option *o = c->opts; o->name; o++) {
            if (strncmp(o->name, name, len) != 0) continue;
            if (o->name[len] == 0) exact = o;
            prefix = o;
            nprefix++;
        }
        const struct option *hit = exact ? exact : nprefix == 1 ? prefix : NULL;
        if (hit && eq && hit->has_arg == no_argument && (optopt == 0 || optopt == hit->val)) {
            at_cli_usage_error(c, "option '--%s' takes no value", hit->name);
            return;
        }
        if (optopt == 0 && nprefix > 1) {
            char list[256] = "";
            size_t k = 0;
            for (const struct option *o = c->opts; o->name && k < sizeof list - 40; o++)
                if (!strncmp(o->name, name, len))
                    k += (size_t)snprintf(list + k, sizeof list - k, "%s--%s", k ? ", " : "", o->name);
            at_cli_usage_error(c, "option '%.*s' is ambiguous (%s)", (int)len + 2, w, list);
            return;
        }
        if (optopt == 0) {
            at_cli_usage_error(c, "unknown option '%.*s'", (int)len + 2, w);
            return;
        }
    }
    at_cli_usage_error(c, "unknown option '-%c'", optopt);
}

int at_cli_next(at_cli *c)
{
    if (c->failed) {
        c->status = AT_EXIT_USAGE;
        return AT_CLI_EXIT;
    }
    if (c->first) {
        optind = 0; /* glibc: a fresh scan (another command's may have run in this process) */
        c->first = 0;
    }
    opterr = 0;
    int li = -1;
    int o = getopt_long(c->argc, c->argv, c->shortopts, c->opts, &li);
    if (o == -1) return AT_CLI_END;
    const char *w = optind > 0 && optind <= c->argc ? c->argv[optind - 1] : "";
    if (o == ':') {
        const struct option *lo = w[0] == '-' && w[1] == '-' ? long_by_val(c, optopt, -1) : NULL;
        if (lo) at_cli_usage_error(c, "option '--%s' needs a value", lo->name);
        else at_cli_usage_error(c, "option '-%c' needs a value", optopt);
        c->status = AT_EXIT_USAGE;
        return AT_CLI_EXIT;
    }
    if (o == '?') {
        refused(c, w);
        c->status = AT_EXIT_USAGE;
        return AT_CLI_EXIT;
    }
    if (o == 'h') {
        c->usage(stdout);
        c->status = AT_EXIT_OK;
        return AT_CLI_EXIT;
    }
    c->arg = optarg;
    if (li >= 0) snprintf(c->opt, sizeof c->opt, "--%s", c->opts[li].name);
    else snprintf(c->opt, sizeof c->opt, "-%c", o);
    if (optarg && !*optarg) { /* --name= or -o '': a value that says nothing */
        at_cli_usage_error(c, "option '%s' needs a value (it is empty)", c->opt);
        c->status = AT_EXIT_USAGE;
        return AT_CLI_EXIT;
    }
    return o;
}

char **at_cli_operands(const at_cli *c, int *n)
{
    int first = optind < c->argc ? optind : c->argc;
    *n = c->argc - first;
    return c->argv + first;
}

static bool bad_value(at_cli *c, const char *what)
{
    at_cli_usage_error(c, "%s wants %s, not '%s'", c->opt, what, c->arg ? c->arg : "");
    c->failed = true;
    return false;
}

bool at_cli_u64(at_cli *c, const char *what, uint64_t *out)
{
    const char *s = c->arg ? c->arg : "";
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || *end || errno) return bad_value(c, what);
    *out = v;
    return true;
}

bool at_cli_ms(at_cli *c, bool negative_ok, int64_t *ns)
{
    const char *s = c->arg ? c->arg : "";
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    /* a decimal number of ms that fits in ns: not "inf", "nan" or a hex float */
    bool ok = end != s && !*end && !errno && isfinite(v) && fabs(v) < 9e12 && !strpbrk(s, "xXpP");
    if (!ok || (!negative_ok && v < 0))
        return bad_value(c, negative_ok ? "a time in ms (a number such as 12.5)"
                                        : "a time in ms (a number such as 12.5, not negative)");
    *ns = (int64_t)(v * 1e6);
    return true;
}

static bool path_syntax(const char *p)
{
    if (strlen(p) == 36) {
        bool guid = true;
        for (int i = 0; i < 36; i++)
            guid &= (i == 8 || i == 13 || i == 18 || i == 23) ? p[i] == '-' : isxdigit((unsigned char)p[i]) != 0;
        if (guid) return true;
    }
    if (strncmp(p, "//", 2) != 0) return false;
    p += 2;
    if (!*p) return true; /* "//": every activity */
    for (;;) {
        if (!isdigit((unsigned char)*p)) return false;
        while (isdigit((unsigned char)*p)) p++;
        if (!*p || (p[0] == '/' && !p[1])) return true;
        if (*p != '/' && *p != '$') return false;
        p++;
    }
}

bool at_cli_activity_path(at_cli *c)
{
    if (path_syntax(c->arg)) return true;
    at_cli_usage_error(c, "%s wants an activity path such as //1/5 (or a GUID), not '%s'", c->opt, c->arg);
    c->failed = true;
    return false;
}

int at_cli_check_output(const at_cli *c, const char *path, char *const *files, int n)
{
    struct stat out, in;
    if (!path || !strcmp(path, "-") || stat(path, &out) != 0)
        return AT_EXIT_OK; /* a new file cannot be an input */
    for (int i = 0; i < n; i++)
        if (strcmp(files[i], "-") && stat(files[i], &in) == 0 && in.st_dev == out.st_dev &&
            in.st_ino == out.st_ino)
            return at_cli_usage_error(c, "-o %s is the input trace %s: writing it would destroy "
                                         "what is being read; choose another name",
                                      path, files[i]);
    /* a trace that is not an input: an export written over it would destroy it as well */
    static const char head[] = NT_FILE_HEAD;
    char b[sizeof head - 1];
    int fd = S_ISREG(out.st_mode) ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    bool trace = fd >= 0 && read(fd, b, sizeof b) == (ssize_t)sizeof b && !memcmp(b, head, sizeof b);
    if (fd >= 0) close(fd);
    if (trace)
        return at_cli_usage_error(c, "-o %s is a trace: writing it would destroy it; choose another name", path);
    return AT_EXIT_OK;
}

static bool stdout_reported; /* its failure has had its line */

int at_cli_close_output(const char *cmd, FILE *f, const char *path)
{
    if (!path && stdout_reported)
        return AT_EXIT_ERROR;
    bool failed = ferror(f) != 0;
    int e = 0;
    if (path) {
        if (fclose(f) != 0 && !failed) {
            failed = true;
            e = errno;
        }
    } else if (fflush(f) != 0 && !failed) {
        failed = true;
        e = errno;
    }
    if (!failed)
        return AT_EXIT_OK;
    if (!path)
        stdout_reported = true;
    const char *sp = *cmd ? " " : ""; /* "acttrace: " before a command is named */
    if (e)
        fprintf(stderr, "acttrace%s%s: %s: write failed: %s\n", sp, cmd, path ? path : "standard output",
                strerror(e));
    else
        fprintf(stderr, "acttrace%s%s: %s: write failed\n", sp, cmd, path ? path : "standard output");
    struct stat st;
    if (path && lstat(path, &st) == 0 && S_ISREG(st.st_mode))
        remove(path); /* incomplete (a device or a pipe stays) */
    return AT_EXIT_ERROR;
}

/* Whether two files of size n hold the same bytes: their first and last 64 KiB (a trace's header
 * names its process and start to the nanosecond, its end its last events: two traces that differ
 * differ there). */
static bool same_bytes(const char *a, const char *b, off_t n)
{
    enum { PART = 65536 };
    int fa = open(a, O_RDONLY | O_CLOEXEC), fb = open(b, O_RDONLY | O_CLOEXEC);
    bool same = fa >= 0 && fb >= 0;
    static char ba[PART], bb[PART];
    off_t at[2] = {0, n > PART ? n - PART : 0};
    for (int k = 0; k < 2 && same; k++) {
        size_t len = (size_t)(n - at[k] < PART ? n - at[k] : PART);
        same = pread(fa, ba, len, at[k]) == (ssize_t)len && pread(fb, bb, len, at[k]) == (ssize_t)len &&
               !memcmp(ba, bb, len);
    }
    if (fa >= 0) close(fa);
    if (fb >= 0) close(fb);
    return same;
}

int at_cli_check_inputs(const char *cmd, char *const *files, int n)
{
    for (int i = 0; i < n; i++) {
        const char *f = files[i];
        if (!strcmp(f, "-")) {
            for (int j = 0; j < i; j++)
                if (!strcmp(files[j], "-")) {
                    fprintf(stderr, "acttrace %s: - (standard input) is given twice: it can be read once\n", cmd);
                    return AT_EXIT_ERROR;
                }
            continue;
        }
        struct stat st;
        if (stat(f, &st) != 0) {
            fprintf(stderr, "acttrace %s: %s: %s\n", cmd, f, strerror(errno));
            return AT_EXIT_ERROR;
        }
        if (S_ISDIR(st.st_mode)) {
            fprintf(stderr, "acttrace %s: %s is a directory\n", cmd, f);
            return AT_EXIT_ERROR;
        }
        if (!S_ISREG(st.st_mode)) continue; /* a pipe or a device: read as it comes */
        for (int j = 0; j < i; j++) { /* one file read twice would count each event twice */
            struct stat sj;
            if (strcmp(files[j], "-") && stat(files[j], &sj) == 0 && sj.st_dev == st.st_dev &&
                sj.st_ino == st.st_ino) {
                if (strcmp(files[j], f))
                    fprintf(stderr, "acttrace %s: %s and %s are the same file: give it once\n", cmd, files[j], f);
                else
                    fprintf(stderr, "acttrace %s: %s is given twice: give it once\n", cmd, f);
                return AT_EXIT_ERROR;
            }
            if (strcmp(files[j], "-") && stat(files[j], &sj) == 0 && S_ISREG(sj.st_mode) &&
                sj.st_size == st.st_size && same_bytes(files[j], f, st.st_size)) {
                /* a copy: its events are the same events, which would count twice */
                fprintf(stderr, "acttrace %s: %s and %s hold the same trace (a copy?): give it once\n", cmd,
                        files[j], f);
                return AT_EXIT_ERROR;
            }
        }
        if (st.st_size == 0) {
            fprintf(stderr, "acttrace %s: %s is empty\n", cmd, f);
            return AT_EXIT_ERROR;
        }
        int fd = open(f, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            fprintf(stderr, "acttrace %s: %s: %s\n", cmd, f, strerror(errno));
            return AT_EXIT_ERROR;
        }
        char head[24];
        ssize_t k = read(fd, head, sizeof head);
        close(fd);
        if (k <= 0) continue; /* the reader says what is wrong */
        /* a prefix of the magic is a trace cut short (damage, the reader's to say); the V3 netperf
         * format has its own message in the reader */
        size_t cmp = (size_t)k < 8 ? (size_t)k : 8;
        bool netperf = k >= 24 && !memcmp(head, "\x14\0\0\0" NT_SERIALIZER_SIG, 24);
        if (memcmp(head, NT_MAGIC, cmp) != 0 && !netperf) {
            fprintf(stderr, "acttrace %s: %s is not a .nettrace file (it does not start with the Nettrace magic)\n",
                    cmd, f);
            return AT_EXIT_ERROR;
        }
    }
    return AT_EXIT_OK;
}

const char *at_cli_files_desc(char *const *files, int n, char *out, size_t len)
{
    if (n == 1) snprintf(out, len, "%s", files[0]);
    else if (n == 2) snprintf(out, len, "%s and %s", files[0], files[1]);
    else snprintf(out, len, "the %d files", n);
    return out;
}

void at_cli_exit_codes(FILE *f)
{
    fprintf(f, "Exit status: 0 ok; 1 error (bad input, a check failed, a filter matched nothing);\n"
               "  2 usage error; 3 an input file is damaged (the results cover what was read before the\n"
               "  damage, and one line on stderr says where it starts).\n");
}
