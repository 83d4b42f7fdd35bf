import Lifecycle
import CMicroHTTPD
import Foundation

/// Counts the open connections of each client address, from their acceptance until they
/// close (in the sorter or in a daemon), and refuses a connection past the limit.
///
/// A connection is known by its socket: `release(fd)` is idempotent, so the daemon's close
/// notice and a refused hand-over may both release it. A socket is released before it is
/// closed, so its number cannot be accepted again in between.
final class ConnectionsPerAddress: Sendable {
    /// A client address: IPv4 addresses as IPv4-mapped IPv6 ones.
    struct Address: Hashable, Sendable {
        var high: UInt64
        var low: UInt64

        init?(_ address: UnsafePointer<sockaddr>) {
            switch Int32(address.pointee.sa_family) {
            case AF_INET:
                let v4 = UnsafeRawPointer(address).load(as: sockaddr_in.self)
                high = 0
                low = 0xffff_0000_0000 | UInt64(UInt32(bigEndian: v4.sin_addr.s_addr))
            case AF_INET6:
                let bytes = UnsafeRawPointer(address).load(as: sockaddr_in6.self).sin6_addr
                let words = withUnsafeBytes(of: bytes) { raw in
                    (UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
                     UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
                }
                (high, low) = words
            default:
                return nil
            }
        }
    }

    private struct State {
        var perAddress: [Address: Int] = [:]
        var addressOfSocket: [Int32: Address] = [:]
    }

    /// Open connections allowed from one address.
    let limit: Int
    /// Shared by the accept loop (admits) and the daemons' threads (release a connection as it closes).
    private let state = Locked(State())

    init(limit: Int) {
        self.limit = limit
    }

    /// Counts `fd` as a connection from `address`; false (and not counted) when that address
    /// already has `limit` open.
    func admit(_ fd: Int32, from address: UnsafePointer<sockaddr>) -> Bool {
        guard let key = Address(address) else { return true }
        return state.withLock { state in
            // A number still counted belongs to a closed socket whose notice has not come yet.
            Self.forget(fd, &state)
            guard state.perAddress[key, default: 0] < limit else { return false }
            state.perAddress[key, default: 0] += 1
            state.addressOfSocket[fd] = key
            return true
        }
    }

    /// `fd` is closing (or was never handed over): its address may open another.
    func release(_ fd: Int32) {
        state.withLock { Self.forget(fd, &$0) }
    }

    private static func forget(_ fd: Int32, _ state: inout State) {
        guard let key = state.addressOfSocket.removeValue(forKey: fd) else { return }
        let remaining = state.perAddress[key, default: 1] - 1
        state.perAddress[key] = remaining > 0 ? remaining : nil
    }

    /// Open connections counted, all addresses.
    var openCount: Int { state.withLock { $0.addressOfSocket.count } }
}
