#ifndef HEADWAY_CMICROHTTPD_SHIM_H
#define HEADWAY_CMICROHTTPD_SHIM_H

#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/epoll.h>   // the connection sorter's own loop
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <microhttpd.h>

/// Starts a daemon without a listening socket (connections arrive by
/// `MHD_add_connection`): one epoll thread for all its connections, with suspend/resume.
/// `MHD_start_daemon` is variadic and not imported into Swift: this wrapper passes the
/// options Headway uses and ends the list with `MHD_OPTION_END`.
static inline struct MHD_Daemon *headway_mhd_start(
    MHD_AccessHandlerCallback handler, void *handler_context,
    MHD_RequestCompletedCallback completed, void *completed_context,
    unsigned int connection_limit,
    unsigned int connection_timeout_seconds,
    size_t connection_memory_limit)
{
    unsigned int flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG
        | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, handler_context,
        MHD_OPTION_NOTIFY_COMPLETED, completed, completed_context,
        MHD_OPTION_CONNECTION_LIMIT, connection_limit,
        MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_seconds,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, connection_memory_limit,
        MHD_OPTION_END);
}

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

/// The socket of a connection (`MHD_get_connection_info` is variadic), or -1.
static inline int headway_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : info->connect_fd;
}

/// Names the calling thread (at most 15 bytes show).
static inline void headway_name_thread(const char *name) {
    prctl(PR_SET_NAME, name, 0, 0, 0);
}

#endif
