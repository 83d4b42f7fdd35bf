#ifndef HEADWAY_CMICROHTTPD_SHIM_H
#define HEADWAY_CMICROHTTPD_SHIM_H

#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

/// Flags for many long-lived connections on one epoll thread, with suspend/resume.
static inline unsigned int headway_mhd_flags(int ipv6) {
    unsigned int flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ipv6) flags |= MHD_USE_IPv6;
    return flags;
}

/// `MHD_start_daemon` is variadic and not imported into Swift: this wrapper passes the
/// options Headway uses and ends the list with `MHD_OPTION_END`.
static inline struct MHD_Daemon *headway_mhd_start(
    unsigned int flags,
    const struct sockaddr *address,
    MHD_AccessHandlerCallback handler, void *handler_context,
    MHD_RequestCompletedCallback completed, void *completed_context,
    unsigned int connection_limit,
    unsigned int connection_timeout_seconds,
    size_t connection_memory_limit)
{
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, handler_context,
        MHD_OPTION_SOCK_ADDR, address,
        MHD_OPTION_NOTIFY_COMPLETED, completed, completed_context,
        MHD_OPTION_CONNECTION_LIMIT, connection_limit,
        MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_seconds,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, connection_memory_limit,
        MHD_OPTION_END);
}

/// The listening socket of a running daemon, or -1.
static inline int headway_mhd_listen_fd(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_LISTEN_FD);
    return info == NULL ? -1 : info->listen_fd;
}

#endif
