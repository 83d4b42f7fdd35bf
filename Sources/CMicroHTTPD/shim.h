#ifndef HEADWAY_CMICROHTTPD_SHIM_H
#define HEADWAY_CMICROHTTPD_SHIM_H

#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/epoll.h>   // the connection sorter's own loop
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <microhttpd.h>

/// Where libmicrohttpd's error messages go: `sink(context, message)`, one formatted line.
typedef void (*headway_log_sink)(void *context, const char *message);
struct headway_log_target {
    headway_log_sink sink;
    void *context;
};

static inline void headway_mhd_log(void *cls, const char *format, va_list arguments) {
    const struct headway_log_target *target = (const struct headway_log_target *)cls;
    char message[512];
    vsnprintf(message, sizeof message, format, arguments);
    size_t length = strlen(message);
    while (length > 0 && (message[length - 1] == '\n' || message[length - 1] == '\r')) message[--length] = 0;
    target->sink(target->context, message);
}

/// Starts a daemon without a listening socket (connections arrive by
/// `MHD_add_connection`): one epoll thread for all its connections, with suspend/resume;
/// its error messages go to `sink`; `target_check` sees each request's raw target before
/// the library parses it (`MHD_OPTION_URI_LOG_CALLBACK`; what it returns becomes the
/// request's first context); `closed` is told each connection's close
/// (`MHD_OPTION_NOTIFY_CONNECTION`). `MHD_start_daemon` is variadic and not imported into
/// Swift: this wrapper passes the options Headway uses and ends the list with
/// `MHD_OPTION_END`. `*log_target` receives what `headway_mhd_free_log_target` frees once
/// the daemon has stopped. With a `tls_certificate_callback` (a GnuTLS
/// `gnutls_certificate_retrieve_function2`, passed untyped so that this header needs no
/// GnuTLS types) the daemon speaks HTTPS (`MHD_USE_TLS`) and asks the callback for its
/// certificate at each handshake (`MHD_OPTION_HTTPS_CERT_CALLBACK`), with the GnuTLS
/// priority string `tls_priorities` (`MHD_OPTION_HTTPS_PRIORITIES`), and its thread
/// waits in poll(2) instead of epoll: libmicrohttpd 0.9.75's epoll loop keeps a connection
/// whose handshake waits for the client in its list of ready connections (GnuTLS reads the
/// socket itself during a handshake, so the library never sees the EAGAIN that would clear
/// its read-ready flag), and so spins, `epoll_wait(…, 0)` after `epoll_wait(…, 0)`, until
/// the handshake ends. Its poll loop asks the kernel about every connection not suspended,
/// each pass, so a handshake waiting for the client costs nothing. Without TLS and with
/// `external_loop` the daemon has no thread of its own: its caller runs `MHD_run`
/// (`RequestDaemonLoop`); otherwise it waits in epoll on a thread of its own.
static inline struct MHD_Daemon *headway_mhd_start(
    MHD_AccessHandlerCallback handler, void *handler_context,
    MHD_RequestCompletedCallback completed, void *completed_context,
    headway_log_sink sink, void *sink_context, void **log_target,
    void *(*target_check)(void *context, const char *target, struct MHD_Connection *connection), void *check_context,
    MHD_NotifyConnectionCallback closed, void *closed_context,
    int external_loop,
    unsigned int connection_limit,
    unsigned int connection_timeout_seconds,
    size_t connection_memory_limit,
    void *tls_certificate_callback,
    const char *tls_priorities)
{
    struct headway_log_target *target = (struct headway_log_target *)malloc(sizeof *target);
    if (target == NULL) return NULL;
    target->sink = sink;
    target->context = sink_context;
    *log_target = target;
    unsigned int flags = MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    flags |= tls_certificate_callback != NULL ? MHD_USE_TLS | MHD_USE_POLL_INTERNAL_THREAD
        : external_loop ? MHD_USE_EPOLL : MHD_USE_EPOLL_INTERNAL_THREAD;
    struct MHD_Daemon *daemon = MHD_start_daemon(flags, 0, NULL, NULL, handler, handler_context,
        MHD_OPTION_EXTERNAL_LOGGER, headway_mhd_log, (void *)target,
        MHD_OPTION_NOTIFY_COMPLETED, completed, completed_context,
        MHD_OPTION_URI_LOG_CALLBACK, target_check, check_context,
        MHD_OPTION_NOTIFY_CONNECTION, closed, closed_context,
        MHD_OPTION_CONNECTION_LIMIT, connection_limit,
        MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_seconds,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, connection_memory_limit,
        /* Without TLS the list ends here. */
        tls_certificate_callback != NULL ? MHD_OPTION_HTTPS_CERT_CALLBACK : MHD_OPTION_END, tls_certificate_callback,
        MHD_OPTION_HTTPS_PRIORITIES, tls_priorities,
        MHD_OPTION_END);
    if (daemon == NULL) {
        free(target);
        *log_target = NULL;
    }
    return daemon;
}

/// Whether `target`, as the URI callback gets it, was cut short by a NUL byte of its own:
/// libmicrohttpd ends the target by writing a NUL over the space before the HTTP version,
/// so the version follows the target's end unless a raw NUL ended it earlier.
static inline int headway_target_has_raw_nul(const char *target) {
    return strncmp(target + strlen(target) + 1, "HTTP/", 5) != 0;
}

/// Empties the query of `target` (the URI callback's, in the library's own buffer) so that
/// the library stores none of its parameters: a refused request's parameters cannot use up
/// the connection's memory, which would leave the library unable to answer at all.
static inline void headway_drop_query(const char *target) {
    char *query = strchr((char *)target, '?');
    if (query != NULL && query[1] != 0) query[1] = 0;
}

static inline void headway_mhd_free_log_target(void *log_target) { free(log_target); }

/// Accepts a connection on `fd` as a non-blocking, close-on-exec socket (`accept4` needs
/// `_GNU_SOURCE`, which a module header cannot count on).
static inline int headway_accept(int fd, struct sockaddr *address, socklen_t *length) {
    int client = accept(fd, address, length);
    if (client >= 0) {
        fcntl(client, F_SETFL, fcntl(client, F_GETFL, 0) | O_NONBLOCK);
        fcntl(client, F_SETFD, FD_CLOEXEC);
    }
    return client;
}

/// Sets a connection's idle timeout in seconds, 0 for none (`MHD_set_connection_option`
/// is variadic); on the daemon's thread, from the access handler.
static inline void headway_connection_set_timeout(struct MHD_Connection *connection, unsigned int seconds) {
    MHD_set_connection_option(connection, MHD_CONNECTION_OPTION_TIMEOUT, seconds);
}

/// How many connections a daemon has open (`MHD_get_daemon_info` is variadic).
static inline long headway_mhd_connection_count(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return info == NULL ? 0 : (long)info->num_connections;
}

/// The daemon serving a connection (`MHD_get_connection_info` is variadic), or NULL.
static inline struct MHD_Daemon *headway_connection_daemon(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_DAEMON);
    return info == NULL ? NULL : info->daemon;
}

/// The socket of a connection (`MHD_get_connection_info` is variadic), or -1.
static inline int headway_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : info->connect_fd;
}

/// The client's address of a connection (`MHD_get_connection_info` is variadic), or NULL.
static inline const struct sockaddr *headway_connection_client_address(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return info == NULL ? NULL : info->client_addr;
}

/// The bytes written to socket `fd` that its peer has not acknowledged yet (`SIOCOUTQ`,
/// the same request as `TIOCOUTQ`), or -1.
static inline int headway_unacknowledged_bytes(int fd) {
    int count = 0;
    return ioctl(fd, TIOCOUTQ, &count) == 0 ? count : -1;
}

/// The length of a request's head, from its method to the end of its empty line, once the
/// head is whole (`MHD_get_connection_info` is variadic), or 0.
static inline size_t headway_connection_head_size(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    return info == NULL ? 0 : info->header_size;
}

/// The bytes received on socket `fd` and not read yet (`FIONREAD`), or -1.
static inline int headway_unread_bytes(int fd) {
    int count = 0;
    return ioctl(fd, FIONREAD, &count) == 0 ? count : -1;
}

/// The epoll set of a daemon whose thread waits in epoll, or -1 (one that waits in
/// poll(2); `MHD_get_daemon_info` is variadic).
static inline int headway_mhd_epoll_fd(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_EPOLL_FD);
    return info == NULL ? -1 : info->epoll_fd;
}

/// The socket context of a connection (what its `MHD_NotifyConnectionCallback` stored),
/// or NULL (`MHD_get_connection_info` is variadic).
static inline void *headway_connection_socket_context(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info == NULL ? NULL : info->socket_context;
}

/// Puts the calling thread in the batch scheduling class, once per thread: woken, it
/// does not preempt the thread running (it runs when that one sleeps or its time slice
/// ends).
static inline void headway_schedule_as_batch_once(void) {
    static __thread int done = 0;
    if (done) return;
    done = 1;
    struct sched_param parameters = { 0 };
    sched_setscheduler(0, 3 /* SCHED_BATCH */, &parameters);
}

/// Names the calling thread (at most 15 bytes show).
static inline void headway_name_thread(const char *name) {
    prctl(PR_SET_NAME, name, 0, 0, 0);
}

#endif
