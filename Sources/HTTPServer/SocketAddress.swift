import Foundation
import Synchronization

/// The port a server has bound (0 until it has).
public final class BoundPort: Sendable {
    private let port = Atomic<Int>(0)

    public var value: Int {
        get { port.load(ordering: .acquiring) }
        set { port.store(newValue, ordering: .releasing) }
    }
}

/// Turning `host:port` into a socket address.
enum SocketAddress {
    static func resolve(host: String, port: Int) throws -> (sockaddr_storage, ipv6: Bool) {
        var storage = sockaddr_storage()
        let name = host == "localhost" ? "127.0.0.1" : host
        guard (0...65535).contains(port) else { throw HTTPServerError(description: "port \(port) is out of range") }
        var v4 = sockaddr_in()
        if inet_pton(AF_INET, name, &v4.sin_addr) == 1 {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = in_port_t(UInt16(port).bigEndian)
            withUnsafeMutableBytes(of: &storage) { target in withUnsafeBytes(of: v4) { target.copyMemory(from: $0) } }
            return (storage, false)
        }
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET6, name, &v6.sin6_addr) == 1 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = in_port_t(UInt16(port).bigEndian)
            withUnsafeMutableBytes(of: &storage) { target in withUnsafeBytes(of: v6) { target.copyMemory(from: $0) } }
            return (storage, true)
        }
        throw HTTPServerError(description: "'\(host)' is not an IPv4 or IPv6 address")
    }

    /// Connections the kernel may hold for the accept loop. It caps the number at
    /// `net.core.somaxconn` (4,096 by default): asking for more lets an operator who raises
    /// that sysctl absorb a larger reconnection storm (every dashboard of a restarted daemon
    /// at once) without changing the daemon.
    static let listenBacklog: Int32 = 65_535

    /// A non-blocking socket bound to `host:port` and listening.
    static func listen(host: String, port: Int) throws -> Int32 {
        let (storage, ipv6) = try resolve(host: host, port: port)
        let fd = socket(ipv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HTTPServerError(description: "cannot create a socket: errno \(errno)") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if ipv6 { setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size)) }
        let length = socklen_t(ipv6 ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeBytes(of: storage) { raw in
            bind(fd, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), length) == 0
        }
        guard bound, Glibc.listen(fd, listenBacklog) == 0 else {
            close(fd)
            throw HTTPServerError(description: "cannot listen on \(host):\(port) (address in use, or not permitted)")
        }
        return fd
    }

    /// `fd`, a socket handed over already listening, made ready to serve: checked to be
    /// a listening TCP socket, made non-blocking and closed on exec.
    static func adopt(_ fd: Int32) throws -> Int32 {
        var listening: Int32 = 0, type: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) == 0, listening == 1,
              getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &size) == 0, type == Int32(SOCK_STREAM.rawValue) else {
            throw HTTPServerError(description: "the inherited file descriptor \(fd) is not a listening TCP socket")
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        return fd
    }

    /// The address a socket is bound to: host (IPv4 or IPv6 literal) and port.
    static func boundAddress(fd: Int32) -> (host: String, port: Int)? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard result == 0 else { return nil }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        return withUnsafeBytes(of: storage) { raw -> (String, Int)? in
            if Int32(storage.ss_family) == AF_INET6 {
                var address = raw.load(as: sockaddr_in6.self)
                guard inet_ntop(AF_INET6, &address.sin6_addr, &text, socklen_t(text.count)) != nil else { return nil }
                return (Self.text(text), Int(UInt16(bigEndian: address.sin6_port)))
            }
            guard Int32(storage.ss_family) == AF_INET else { return nil }
            var address = raw.load(as: sockaddr_in.self)
            guard inet_ntop(AF_INET, &address.sin_addr, &text, socklen_t(text.count)) != nil else { return nil }
            return (Self.text(text), Int(UInt16(bigEndian: address.sin_port)))
        }
    }

    /// The characters of a NUL-terminated C buffer.
    private static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func boundPort(fd: Int32) -> Int? {
        guard fd >= 0 else { return nil }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard result == 0 else { return nil }
        return withUnsafeBytes(of: storage) { raw -> Int in
            if Int32(storage.ss_family) == AF_INET6 {
                return Int(UInt16(bigEndian: raw.load(as: sockaddr_in6.self).sin6_port))
            }
            return Int(UInt16(bigEndian: raw.load(as: sockaddr_in.self).sin_port))
        }
    }
}
