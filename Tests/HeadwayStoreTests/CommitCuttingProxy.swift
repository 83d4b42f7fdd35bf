import Foundation
import HeadwayTestSupport
import Lifecycle

/// A proxy in front of a test PostgreSQL server's Unix socket that can lose a connection at
/// the moments around a `COMMIT` that no other test reaches (`Cut`). Connect through `uri`
/// (the server's, on a socket of the proxy's own); `cut(_:)` arms one cut, made on the next
/// connection to carry that moment: the connection is closed on both sides at once, and
/// what followed the cut is dropped. Both directions are read by their frames (a type byte,
/// then a length that counts itself; the client's first message has no type byte); over a
/// Unix socket libpq asks for neither TLS nor GSS encryption, so every byte is in a frame.
final class CommitCuttingProxy: @unchecked Sendable {
    /// Where a connection is cut.
    enum Cut {
        /// Right after the server's answer to `COMMIT` (its `CommandComplete`, tag `COMMIT`),
        /// before the `ReadyForQuery` behind it: the transaction committed, and the client
        /// read that it did.
        case afterCommitAnswer
        /// Right before that answer: the transaction committed, and the client never learns it.
        case beforeCommitAnswer
        /// Every byte of the server's reply that holds that answer, with the answers before
        /// it in the same reply, not yet forwarded: what a network cut loses. The server
        /// sends a pipeline's answers together, when it reaches the pipeline's sync.
        case theReplyWithTheCommitAnswer
        /// Right before the client's `COMMIT` (a simple query, or the `Parse` of one in a
        /// pipeline): the server never gets it, and the transaction is rolled back.
        case beforeCommitRequest
    }

    /// The server's URI, through the proxy.
    let uri: String
    private let directory = TemporaryDirectory()
    private let listener: Int32
    private let serverSocketPath: String
    private let armed = Locked<Cut?>(nil)
    private let cutsMade = Locked(0)
    /// Every socket open, to close at `close()`.
    private let open = Locked(Set<Int32>())

    /// A proxy for the server `server` names (its URI's `host` and `port`).
    init(for server: TestPostgresDatabase) throws {
        let parameters = URLComponents(string: server.uri)?.queryItems ?? []
        guard let host = parameters.first(where: { $0.name == "host" })?.value,
              let port = parameters.first(where: { $0.name == "port" })?.value else {
            throw TestHTTPError("no host and port in \(server.uri)")
        }
        serverSocketPath = "\(host)/.s.PGSQL.\(port)"
        listener = try Self.unixSocket(bindingTo: directory.file(".s.PGSQL.\(port)"))
        uri = server.uri.replacingOccurrences(of: "host=\(host)", with: "host=\(directory.path)")
        guard uri != server.uri else { throw TestHTTPError("host not replaced in \(server.uri)") }
        Thread.detachNewThread { [self] in accept() }
    }

    /// Loses the connection that next reaches the moment `cut` names.
    func cut(_ cut: Cut) { armed.withLock { $0 = cut } }

    /// How many connections were cut so far.
    var cuts: Int { cutsMade.withLock { $0 } }

    /// Stops accepting and closes every connection (call it once).
    func close() {
        shutdown(listener, Int32(SHUT_RDWR))
        for socket in open.withLock({ $0 }) { shutdown(socket, Int32(SHUT_RDWR)) }
        directory.remove()
    }

    private func accept() {
        while true {
            let client = Glibc.accept(listener, nil, nil)
            guard client >= 0 else {
                Glibc.close(listener)
                return
            }
            guard let server = try? Self.unixSocket(connectingTo: serverSocketPath) else {
                Glibc.close(client)
                continue
            }
            open.withLock { $0.formUnion([client, server]) }
            Thread.detachNewThread { [self] in
                forwardFrames(from: client, to: server, untypedFirst: true) { type, body in
                    let commits = (type == UInt8(ascii: "Q") && body.elementsEqual("COMMIT\0".utf8))
                        || (type == UInt8(ascii: "P") && body.starts(with: "\0COMMIT\0".utf8))
                    return commits && take(.beforeCommitRequest) ? .before : nil
                }
                finish(client, server)
            }
            Thread.detachNewThread { [self] in
                forwardFrames(from: server, to: client, untypedFirst: false) { type, body in
                    guard type == UInt8(ascii: "C"), body.elementsEqual("COMMIT\0".utf8) else { return nil }
                    if take(.afterCommitAnswer) { return .after }
                    if take(.theReplyWithTheCommitAnswer) { return .wholeRead }
                    return take(.beforeCommitAnswer) ? .before : nil
                }
                finish(client, server)
            }
        }
    }

    /// Disarms and returns true if `cut` is the cut armed.
    private func take(_ cut: Cut) -> Bool {
        armed.withLock { armed in
            guard armed == cut else { return false }
            armed = nil
            cutsMade.withLock { $0 += 1 }
            return true
        }
    }

    /// Where `cutAt` says to end a connection: before or after the message it was shown, or
    /// before the whole read it came in (nothing of that read forwarded).
    private enum CutPoint { case before, after, wholeRead }

    /// Forwards whole messages from `source` to `destination` until either side ends, or
    /// `cutAt` (shown each message's type and body) says to cut.
    private func forwardFrames(from source: Int32, to destination: Int32, untypedFirst: Bool,
                               cutAt: (_ type: UInt8, _ body: ArraySlice<UInt8>) -> CutPoint?) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var pending: [UInt8] = []
        var untyped = untypedFirst
        while true {
            let count = read(source, &buffer, buffer.count)
            guard count > 0 else { return }
            pending += buffer[..<count]
            var start = 0
            while true {
                let header = untyped ? 4 : 5
                guard pending.count - start >= header else { break }
                let lengthAt = untyped ? start : start + 1
                let length = pending[lengthAt..<(lengthAt + 4)].reduce(0) { $0 << 8 | Int($1) }
                let end = lengthAt + length
                guard pending.count >= end else { break }
                if !untyped, let point = cutAt(pending[start], pending[(start + 5)..<end]) {
                    let kept = switch point {
                    case .before: start
                    case .after: end
                    case .wholeRead: 0
                    }
                    _ = writeAll(pending[..<kept], to: destination)
                    return
                }
                untyped = false
                start = end
            }
            guard writeAll(pending[..<start], to: destination) else { return }
            pending.removeFirst(start)
        }
    }

    private func writeAll(_ bytes: ArraySlice<UInt8>, to socket: Int32) -> Bool {
        var bytes = bytes
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard written > 0 else { return false }
            bytes = bytes.dropFirst(written)
        }
        return true
    }

    /// Ends a proxied connection on both sides (each side's thread calls it; the second call
    /// finds the sockets already shut).
    private func finish(_ client: Int32, _ server: Int32) {
        shutdown(client, Int32(SHUT_RDWR))
        shutdown(server, Int32(SHUT_RDWR))
        let firstToFinish = open.withLock { open in
            defer { open.subtract([client, server]) }
            return open.contains(client)
        }
        // Closed by the second thread to finish, so that neither reads a reused descriptor.
        if !firstToFinish {
            Glibc.close(client)
            Glibc.close(server)
        }
    }

    private static func address(_ path: String) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.prefix(raw.count - 1).enumerated() { raw[index] = byte }
        }
        return address
    }

    private static func unixSocket(bindingTo path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = address(path)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard fd >= 0, bound == 0, listen(fd, 64) == 0 else { throw TestHTTPError("cannot listen at \(path)") }
        return fd
    }

    private static func unixSocket(connectingTo path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = address(path)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard fd >= 0, connected == 0 else {
            if fd >= 0 { Glibc.close(fd) }
            throw TestHTTPError("cannot connect to \(path)")
        }
        return fd
    }
}
