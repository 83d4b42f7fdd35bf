#if canImport(Glibc)
import Glibc
#endif

/// systemd's socket activation (`sd_listen_fds(3)`): the service manager holds the
/// listening socket and hands it to each start of the daemon as file descriptor 3, with
/// `LISTEN_PID` (this process) and `LISTEN_FDS` (how many) in the environment. Connections
/// that arrive while the daemon restarts wait in the socket's backlog: none is refused.
public enum SocketActivation {
    /// The first descriptor passed (`SD_LISTEN_FDS_START`).
    public static let firstDescriptor: Int32 = 3

    /// The listening socket passed to this process and the address it is bound to, or nil
    /// when none was passed (no `LISTEN_FDS`, or one meant for another process). Throws
    /// when the environment passes more than one socket, or one that is not a listening
    /// TCP socket.
    public static func inheritedListener(environment: [String: String],
                                         processID: pid_t = getpid()) throws -> (fd: Int32, host: String, port: Int)? {
        guard let count = environment["LISTEN_FDS"], let owner = environment["LISTEN_PID"],
              Int32(owner) == processID else { return nil }
        guard count == "1" else {
            throw HTTPServerError(description: "LISTEN_FDS=\(count): headwayd serves one socket (ListenStream= once in its .socket unit)")
        }
        let fd = try SocketAddress.adopt(firstDescriptor)
        guard let (host, port) = SocketAddress.boundAddress(fd: fd) else {
            throw HTTPServerError(description: "the inherited socket is not bound to an IPv4 or IPv6 address")
        }
        return (fd, host, port)
    }
}
