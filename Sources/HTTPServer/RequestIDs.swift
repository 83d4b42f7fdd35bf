import Synchronization

/// The ids requests are known by, in logs and in their replies' `X-Request-Id`: the
/// client's own when it sent a plain one (1–64 printable ASCII characters, no quote), else
/// one made up (a random prefix per server, a counter). Given to every exchange as it
/// begins, when the pipeline has them (`HTTPPipeline.requestIDs`).
public final class RequestIDs: Sendable {
    private let prefix: String
    /// The ids made up so far.
    private let counter = Atomic<UInt64>(0)

    /// Ids made up as `prefix-number`; the prefix is random unless given.
    public init(prefix: String = String(UInt32.random(in: 0...UInt32.max), radix: 36)) {
        precondition(prefix.utf8.count <= 32 && Self.acceptable(prefix + "-") != nil,
                     "a request id prefix is at most 32 printable ASCII characters without a quote")
        self.prefix = prefix
    }

    /// The id of `request`: its own `X-Request-Id` if acceptable, else the next one made up.
    func id(for request: HTTPRequest) -> String {
        request.header("x-request-id").flatMap(Self.acceptable)
            ?? Self.requestID(prefix: prefix, number: counter.add(1, ordering: .relaxed).newValue)
    }

    /// `prefix-number`, the number in base 36 (lower case): written into one buffer, where
    /// interpolation builds the number's text and then appends twice, and up to 15 bytes
    /// in all (the usual case) stay a small string, without an allocation.
    static func requestID(prefix: String, number: UInt64) -> String {
        var digitCount = 1
        var scale = number
        while scale >= 36 {
            scale /= 36
            digitCount += 1
        }
        let prefixLength = prefix.utf8.count
        return String(unsafeUninitializedCapacity: prefixLength + 1 + digitCount) { buffer in
            _ = buffer.initialize(fromContentsOf: prefix.utf8)
            buffer[prefixLength] = UInt8(ascii: "-")
            var rest = number
            for index in stride(from: prefixLength + digitCount, to: prefixLength, by: -1) {  // the last digit first
                let digit = UInt8(rest % 36)
                buffer[index] = digit < 10 ? UInt8(ascii: "0") + digit : UInt8(ascii: "a") + digit - 10
                rest /= 36
            }
            return prefixLength + 1 + digitCount
        }
    }

    /// A client's id, if it is plain enough to log and send back as it is.
    static func acceptable(_ id: String) -> String? {
        id.utf8.count <= 64 && !id.isEmpty && id.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f && $0 != UInt8(ascii: "\"") }) ? id : nil
    }
}
