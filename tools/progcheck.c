/* progcheck.c: see progcheck.h. */
#include "progcheck.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

int at_prog_find(const char *prog, char *out, size_t n)
{
    if (strchr(prog, '/')) {
        snprintf(out, n, "%s", prog);
        struct stat st;
        return stat(out, &st) == 0 ? 0 : errno;
    }
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/bin:/usr/bin";
    int found = ENOENT;
    for (const char *p = path;;) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        snprintf(out, n, "%.*s%s%s", (int)len, p, len ? "/" : "", prog);
        struct stat st;
        if (stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) {
            if (access(out, X_OK) == 0) return 0;
            found = EACCES; /* execvp goes on looking, then says EACCES */
        }
        if (!colon) break;
        p = colon + 1;
    }
    snprintf(out, n, "%s", prog);
    return found;
}

const char *at_prog_preload_blocked(const char *path, char *buf, size_t n)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL; /* execute-only or unreadable: the loader will tell */
    Elf64_Ehdr eh;
    struct stat st;
    bool elf = pread(fd, &eh, sizeof eh, 0) == (ssize_t)sizeof eh && !memcmp(eh.e_ident, ELFMAG, SELFMAG);
    if (!elf || fstat(fd, &st) != 0) {
        close(fd);
        return NULL;
    }
    const char *why = NULL;
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64) {
        snprintf(buf, n, "is not an x86-64 program (%s): the shim, built for x86-64, cannot be loaded into it",
                 eh.e_ident[EI_CLASS] == ELFCLASS32 ? "32-bit" : "another machine");
        why = buf;
    } else if (eh.e_phentsize == sizeof(Elf64_Phdr) && eh.e_phnum > 0 && eh.e_phnum < 4096) {
        bool interp = false;
        for (unsigned i = 0; i < eh.e_phnum && !interp; i++) {
            Elf64_Phdr ph;
            if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (uint64_t)i * sizeof ph)) != (ssize_t)sizeof ph)
                break;
            interp = ph.p_type == PT_INTERP;
        }
        if (!interp) {
            snprintf(buf, n, "is statically linked: no dynamic loader runs for it to read LD_PRELOAD, so the shim "
                             "cannot be loaded into it and nothing in it can be hooked");
            why = buf;
        }
    }
    close(fd);
    if (why)
        return why;
    /* secure execution: the loader ignores LD_PRELOAD paths with a slash (not on a nosuid mount,
     * where the kernel grants neither the bits nor the capabilities) */
    struct statvfs vfs;
    if (statvfs(path, &vfs) == 0 && (vfs.f_flag & ST_NOSUID))
        return NULL;
    if ((st.st_mode & S_ISUID) && st.st_uid != getuid())
        snprintf(buf, n, "is setuid (to uid %u): the loader runs it in secure-execution mode and ignores "
                         "LD_PRELOAD, so the shim cannot be loaded into it", (unsigned)st.st_uid);
    else if ((st.st_mode & S_ISGID) && st.st_gid != getgid())
        snprintf(buf, n, "is setgid (to gid %u): the loader runs it in secure-execution mode and ignores "
                         "LD_PRELOAD, so the shim cannot be loaded into it", (unsigned)st.st_gid);
    else if (getuid() != 0 && getxattr(path, "security.capability", NULL, 0) > 0)
        snprintf(buf, n, "has file capabilities: the loader runs it in secure-execution mode and ignores "
                         "LD_PRELOAD, so the shim cannot be loaded into it");
    else
        return NULL;
    return buf;
}
