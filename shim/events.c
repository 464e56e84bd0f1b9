/* events.c: the shim's own event types (threads, processes, fds, signals) under the provider
 * "acttrace-shim", one keyword per family so users can filter each. Names avoid the Start/Stop
 * suffixes on purpose: readers would take those for activity boundaries. */
#include <errno.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim.h"

at_shim_events at_ev AT_START_DATA;

static at_event_type *reg_op(const char *name, uint8_t level, uint8_t opcode, uint64_t kw,
                             uint32_t n, const at_field *f)
{
    at_event_desc d = {
        .provider = AT_SHIM_PROVIDER,
        .name = name,
        .level = level,
        .opcode = opcode,
        .keywords = kw,
        .nfields = n,
        .fields = f,
    };
    return at_event_type_register(&d);
}

static at_event_type *reg(const char *name, uint8_t level, uint64_t kw, uint32_t n, const at_field *f)
{
    return reg_op(name, level, NT_OPCODE_INFO, kw, n, f);
}

int at_shim_events_register(char *err, size_t n)
{
    static const at_field thread_begin[] = {{"ParentThread", NT_TYPE_UINT64},
                                            {"StartRoutine", NT_TYPE_UINT64}};
    static const at_field thread_end[] = {{"ExitKind", NT_TYPE_UINT32}};
    static const at_field fork_parent[] = {{"ChildPid", NT_TYPE_INT32}};
    static const at_field fork_child[] = {{"ParentPid", NT_TYPE_INT32}};
    static const at_field exec[] = {{"Path", NT_TYPE_STRING}};
    static const at_field spawn[] = {{"ChildPid", NT_TYPE_INT32}, {"Path", NT_TYPE_STRING}};
    static const at_field fatal[] = {{"Signal", NT_TYPE_INT32}, {"Code", NT_TYPE_INT32},
                                     {"Address", NT_TYPE_UINT64}};
    static const at_field exitf[] = {{"Status", NT_TYPE_INT32}};
    static const at_field fd_tag[] = {{"Fd", NT_TYPE_INT32}, {"Source", NT_TYPE_STRING}};
    static const at_field fd_amb[] = {{"Fd", NT_TYPE_INT32}, {"TaggedActivity", NT_TYPE_GUID},
                                      {"CurrentActivity", NT_TYPE_GUID}};
    static const at_field conn[] = {{"Fd", NT_TYPE_INT32}};
    /* Role: accept or connect; Local and Peer: "address:port" (IPv4 dotted, IPv6 in brackets with
     * its eight groups, an IPv4-mapped one as IPv4) */
    /* a W3C traceparent header an accepted socket's HTTP/1.x request carried: the ids as lowercase
     * hex (32 and 16 digits) and the trace flags */
    static const at_field tctx[] = {{"Fd", NT_TYPE_INT32}, {"TraceId", NT_TYPE_STRING},
                                    {"ParentId", NT_TYPE_STRING}, {"Flags", NT_TYPE_INT32}};
    /* Index: the exchange a connected socket began (1, 2, ...: its second, third request; the
     * first is the connection's own): a client's send after it received, a server's receive after
     * it sent, in the activity current then; -1: a server's socket with exchanges closed. IdleNs:
     * for a server, the time since its last send (the previous exchange's answer), else 0 */
    static const at_field exch[] = {{"Fd", NT_TYPE_INT32}, {"Index", NT_TYPE_INT32},
                                    {"IdleNs", NT_TYPE_UINT64}};
    static const at_field endpoints[] = {{"Fd", NT_TYPE_INT32}, {"Role", NT_TYPE_STRING},
                                         {"Local", NT_TYPE_STRING}, {"Peer", NT_TYPE_STRING}};
    /* Reason: what the thread waited for (read, write, accept, connect, poll, sleep, lock,
     * condition, semaphore, barrier, join, sync, child, file lock); Call: the function; Object: its
     * fd, the address of its lock, condition, semaphore or thread, or the child's pid (0: none) */
    static const at_field wsus[] = {{"Reason", NT_TYPE_STRING}, {"Call", NT_TYPE_STRING},
                                    {"Object", NT_TYPE_UINT64}};
    static const at_field wres[] = {{"Reason", NT_TYPE_STRING}, {"Call", NT_TYPE_STRING},
                                    {"Object", NT_TYPE_UINT64}, {"BlockedNs", NT_TYPE_UINT64}};

    at_ev.thread_begin = reg("ThreadBegin", NT_LEVEL_INFO, AT_KEYWORD_THREAD, 2, thread_begin);
    at_ev.thread_end = reg("ThreadEnd", NT_LEVEL_INFO, AT_KEYWORD_THREAD, 1, thread_end);
    at_ev.fork_parent = reg("ProcessFork", NT_LEVEL_INFO, AT_KEYWORD_PROCESS, 1, fork_parent);
    at_ev.fork_child = reg("ProcessForked", NT_LEVEL_INFO, AT_KEYWORD_PROCESS, 1, fork_child);
    at_ev.exec = reg("ProcessExec", NT_LEVEL_INFO, AT_KEYWORD_PROCESS, 1, exec);
    at_ev.spawn = reg("ProcessSpawn", NT_LEVEL_INFO, AT_KEYWORD_PROCESS, 2, spawn);
    at_ev.fatal = reg("FatalSignal", NT_LEVEL_CRITICAL, AT_KEYWORD_PROCESS, 3, fatal);
    at_ev.exit = reg("ProcessExit", NT_LEVEL_INFO, AT_KEYWORD_PROCESS, 1, exitf);
    at_ev.fd_tag = reg("FdTagged", NT_LEVEL_VERBOSE, AT_KEYWORD_FD, 2, fd_tag);
    at_ev.fd_ambiguous = reg("FdAmbiguous", NT_LEVEL_WARNING, AT_KEYWORD_FD, 3, fd_amb);
    at_ev.sock_endpoints = reg("SocketEndpoints", NT_LEVEL_INFO, AT_KEYWORD_FD, 4, endpoints);
    at_ev.trace_context = reg("TraceContext", NT_LEVEL_INFO, AT_KEYWORD_FD, 4, tctx);
    at_ev.sock_exchange = reg("SocketExchange", NT_LEVEL_INFO, AT_KEYWORD_FD, 3, exch);
    at_activity_kind_desc cd = {
        .provider = AT_SHIM_PROVIDER,
        .name = "Connection",
        .flags = AT_ACT_RECURSIVE, /* connections overlap; one must not auto-stop another */
        .keywords = AT_KEYWORD_FD,
        .nstart_fields = 1,
        .start_fields = conn,
    };
    at_ev.connection = at_activity_kind_register(&cd);
    at_ev.wait_suspend = reg_op("WaitSuspend", NT_LEVEL_INFO, NT_OPCODE_SUSPEND, AT_KEYWORD_WAIT, 3,
                                wsus);
    at_ev.wait_resume = reg_op("WaitResume", NT_LEVEL_INFO, NT_OPCODE_RESUME, AT_KEYWORD_WAIT, 4,
                               wres);
    if (!at_ev.thread_begin || !at_ev.thread_end || !at_ev.fork_parent || !at_ev.fork_child ||
        !at_ev.exec || !at_ev.spawn || !at_ev.fatal || !at_ev.exit || !at_ev.fd_tag ||
        !at_ev.fd_ambiguous || !at_ev.sock_endpoints || !at_ev.trace_context || !at_ev.sock_exchange || !at_ev.connection || !at_ev.wait_suspend || !at_ev.wait_resume) {
        snprintf(err, n, "cannot register the shim's event types");
        return -1;
    }
    return 0;
}

AT_HOT_FN void at_shim_event(const at_event_type *t, const void *payload, uint32_t len)
{
    if (!t || !at_event_enabled(t))
        return;
    int e = errno;
    at_activity_event(t, payload, len, NULL, 0);
    errno = e;
}
