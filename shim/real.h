/* real.h: the real (next) definitions of every function the shim interposes, resolved with
 * dlsym(RTLD_NEXT). All are resolved in the constructor; a call that arrives earlier (another
 * library's constructor, a preloaded malloc) resolves its own pointer on first use. AT_REAL(fn) is
 * then one load and a predicted branch. */
#ifndef AT_SHIM_REAL_H
#define AT_SHIM_REAL_H

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <threads.h>
#include <unistd.h>
#include <fcntl.h>
#include <linux/close_range.h>

#include "at_common.h"

/* _FORTIFY_SOURCE variants that programs built with it (Debian's python3, for one) call instead of
 * read/recv/poll. Declared here because glibc only declares them under fortification. */
ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen);
ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t off, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                       struct sockaddr *addr, socklen_t *alen);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *m,
                size_t fdslen);
int epoll_pwait2(int epfd, struct epoll_event *ev, int maxev, const struct timespec *t,
                 const sigset_t *m);

/* X(name): every interposed function. In at_hot (below) one after the other: the calls a server
 * makes per request first, so that a request's interposed I/O reads one or two lines of them (the
 * first five share the line of shim_on, the fd table and the direct hooks' bits). */
#define AT_REAL_LIST(X)                                                                            \
    X(read) X(write) X(recv) X(send) X(writev) X(readv)                                            \
    X(recvfrom) X(sendto) X(recvmsg) X(sendmsg) X(close) X(pread64) X(pwrite64) X(sendfile64)      \
    X(epoll_wait) X(epoll_pwait) X(poll) X(accept4) X(accept) X(pread) X(pwrite) X(sendfile)       \
    X(preadv) X(pwritev) X(preadv2) X(pwritev2) X(recvmmsg) X(sendmmsg) X(splice)                  \
    X(__read_chk) X(__pread_chk) X(__pread64_chk) X(__recv_chk) X(__recvfrom_chk)                 \
    X(connect) X(dup2) X(dup3) X(close_range) X(closefrom) X(pipe) X(pipe2)                        \
    X(epoll_pwait2) X(ppoll) X(__poll_chk) X(__ppoll_chk) X(select) X(pselect)                     \
    X(pthread_create) X(pthread_exit) X(thrd_create) X(thrd_exit)                                  \
    X(fork) X(execve) X(execv) X(execvp) X(execvpe) X(execveat) X(fexecve)                          \
    X(posix_spawn) X(posix_spawnp) X(_exit) X(_Exit) X(sigaction) X(signal)

typedef struct at_real_fns {
#define AT_REAL_MEMBER(fn) __typeof__(fn) *fn;
    AT_REAL_LIST(AT_REAL_MEMBER)
#undef AT_REAL_MEMBER
} at_real_fns;

/* An fd's tag (fdflow.c), one cache line each: the accepting thread writes a slot and the worker
 * that takes the connection writes it again at close; four to a line, neighbouring connections (fds
 * are reused lowest first) bounced each other's slots between the cores as well. */
typedef struct at_fd_slot {
    struct at_activity *act; /* the tag: a reference (at_flow_capture), or NULL */
    uint32_t readers;        /* threads between loading act and holding their own reference */
    uint8_t reported;        /* an ambiguity of this tag was reported already */
    uint8_t owns;            /* the tag is a Connection activity the shim started: stop it at close */
    uint8_t http;            /* atomic; fdflow.c: an accepted socket's requests read for traceparent:
                              * 0 no, 1 its first bytes not seen yet, 2 HTTP/1.x, 3 not HTTP */
    uint8_t xturn;           /* atomic; fdflow.c: a connected socket whose ends were recorded, and
                              * which way its bytes went last (AT_XT_*), for its exchanges */
    uint8_t tp;              /* atomic; fdflow.c: a connecting socket's requests get a traceparent
                              * (ACTTRACE_TRACEPARENT_INJECT): 1, 2 with header bytes still owed */
    uint32_t last_tid;       /* atomic: the thread that tagged or last received the tag: its next
                              * adoptions write no Receive (no hop, or one recorded already) */
    uint64_t send_id;        /* atomic: the TransferId of the tag's Send (0: none written) */
    uint32_t xindex;         /* fdflow.c: the exchanges the socket began (its requests: 0 the first) */
    uint64_t xsent;          /* fdflow.c: an accepted socket's last send (at_ticks; 0: none yet) */
} __attribute__((aligned(64))) at_fd_slot;
/* at_fd_slot.xturn: none (not recorded), or the socket's role and the way its bytes went last */
enum {
    AT_XT_NONE,
    AT_XT_ACCEPT,      /* accepted, nothing sent or received yet */
    AT_XT_ACCEPT_SENT, /* accepted, sent last: its next receive begins an exchange */
    AT_XT_ACCEPT_RECV,
    AT_XT_CONNECT,     /* connected, nothing sent or received yet */
    AT_XT_CONNECT_SENT,
    AT_XT_CONNECT_RECV /* connected, received last: its next send begins an exchange */
};

/* What every interposed call reads before it calls the real function, on one page (real.c): the
 * shim's on flag, the fd table's bounds, the real functions' addresses, and the tags of the lowest
 * fds (a program's untagged fds, such as files, pipes or the eventfd a server wakes its workers
 * with, then cost no page of the table). On a kernel that isolates page tables without PCID each
 * system call empties the TLB, and each page touched before the next costs a page walk: the
 * untagged read() path touched four (its code, two pages of variables and the fd table), ~15 ns
 * each on this VM. */
#define AT_FD_LOW 47 /* a line of the page left for at_act_epoch (shim/start.ld) */

/* X(name): the interposed calls that run a config's rule themselves when the rule hooks the very
 * function they interpose (hooks.c decides, once per hook): the hooked call is then this C function
 * around the real one, with no stub, no register save and no return trampoline (hook/stub.c,
 * at_direct_enter). The calls a server makes per request first. */
#define AT_DIRECT_LIST(X)                                                                          \
    X(read) X(write) X(recv) X(send) X(writev) X(readv) X(recvfrom) X(sendto) X(recvmsg)           \
    X(sendmsg) X(close) X(pread64) X(pwrite64) X(sendfile64) X(accept4) X(accept) X(pread)         \
    X(pwrite) X(sendfile) X(preadv) X(pwritev) X(preadv2) X(pwritev2) X(recvmmsg) X(sendmmsg)      \
    X(splice) X(__read_chk) X(__pread_chk) X(__pread64_chk) X(__recv_chk) X(__recvfrom_chk)       \
    X(connect)
enum at_direct_index {
#define AT_DIRECT_ENUM(fn) AT_DIRECT_##fn,
    AT_DIRECT_LIST(AT_DIRECT_ENUM)
#undef AT_DIRECT_ENUM
    AT_DIRECT_N
};
/* at_hot.direct: bit i, a rule hooks function i; bit 32 + i, its work is at the call's entry (else
 * at its return) */
#define AT_DIRECT_BIT(fn) (1ull << AT_DIRECT_##fn)
#define AT_DIRECT_ENTRY_BIT(fn) (1ull << (32 + AT_DIRECT_##fn))

typedef struct at_hot_page {
    int shim_on;                /* 0 until the constructor succeeded (shim.h: at_on) */
    int fd_max;                 /* fds below it have a slot (0: no table yet) */
    at_fd_slot *fd_tab;         /* slots of fds from AT_FD_LOW up (index: the fd; the entries
                                 * below AT_FD_LOW are never touched) */
    uint64_t direct;            /* AT_DIRECT_BIT(fn): a rule hooks fn, run by its interposer;
                                 * AT_DIRECT_ENTRY_BIT(fn): at the call's entry */
    at_real_fns real;
    at_fd_slot fd_low[AT_FD_LOW];
} at_hot_page;
extern at_hot_page at_hot;
#define at_real (at_hot.real)

_Static_assert(AT_DIRECT_N <= 32, "at_hot.direct has two bits for each");

/* Resolve every pointer (constructor). */
void at_real_init(void);
/* Resolve one pointer on first use; never returns NULL for a function libc has (falls back to a raw
 * system call for the few fd functions a recursive resolution could need). */
void *at_real_resolve(const char *name, void **slot);

#define AT_REAL(fn)                                                                                \
    (AT_LIKELY(at_real.fn != NULL) ? at_real.fn                                                    \
                                   : (__typeof__(fn) *)at_real_resolve(#fn, (void **)&at_real.fn))

#endif
