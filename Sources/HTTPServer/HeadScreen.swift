import Foundation

/// What the accept loop refuses itself in a connection's first request head, which it has
/// whole before libmicrohttpd reads a byte of it: every head the library would answer with
/// a page of its own (HTML, and for a malformed `Content-Length` a second status line
/// inside the first reply's body, which a proxy in front would take for the next reply),
/// or would not answer at all. Each is refused with the application's problem document
/// instead (`HTTPRefusal`), and the connection closed:
/// - a request line that is not `METHOD SP target SP HTTP/1.x` as the library reads it
///   (its version after the last space, nothing but the method before the first): 400
///   `malformedRequestLine`, or 505 `versionNotSupported` for `HTTP/0.9`, `HTTP/2.0`…;
/// - a header line without a colon or whose name is not a token (a NUL in a name, an
///   empty name, which would end the head there and make the rest a request of its own),
///   or whose value holds a control character other than a tab: `malformedHeader`;
/// - a `Content-Length` that is not digits alone (the library strips no space after
///   them): `badFraming`; one past 2^64 − 1: `bodyTooLarge`;
/// - a head larger than the connection's memory can hold (`headTooLarge`), or a request
///   line not ended within it (`targetTooLong`).
///
/// The library keeps a head in the connection's memory, with about 64 bytes more for each
/// header line and each query parameter (measured on 0.9.75: heads of one long line and
/// of hundreds of short ones are refused at the same weight); a head is weighed so
/// (`weight`), with 1 KiB to spare.
///
/// Later requests on a kept-alive connection, and every request under TLS, reach the
/// library without this screen (the accept loop sees only a connection's first bytes):
/// those heads are still answered by the library's own pages, and a malformed chunked
/// body always is (its framing comes after the head).
struct HeadScreen: Sendable {
    /// Memory of a connection of the request daemon (`MHD_OPTION_CONNECTION_MEMORY_LIMIT`).
    var memoryLimit: Int
    /// Targets longer than this are refused (414), here when their line does not end
    /// within the bytes looked at.
    var maximumTargetBytes: Int
    /// The largest body any path takes: the limit a `Content-Length` past 2^64 − 1 is told.
    var maximumBodyBytes: Int
    /// A target with more query parameters is refused by the target check, which keeps
    /// none of them: they weigh nothing then.
    var maximumQueryParameters: Int

    /// What the library's memory takes per header line and per query parameter, besides
    /// the head's bytes.
    static let bytesPerLine = 64
    /// What a head leaves of the connection's memory, at least.
    static let reserve = 1024

    /// The heaviest head served: `weight` at most this.
    var maximumWeight: Int { memoryLimit - Self.reserve }

    /// The weight of a head of `bytes` bytes with `lines` header lines and `parameters`
    /// query parameters in the library's memory.
    static func weight(bytes: Int, lines: Int, parameters: Int) -> Int {
        bytes + bytesPerLine * (lines + parameters)
    }

    /// The refusal `bytes` (a connection's first bytes, peeked) call for, if any; nil also
    /// while what has come is fine so far. `headTooLarge` or `targetTooLong` when the head
    /// does not end within `maximumHead` bytes.
    func refusal(for bytes: UnsafeBufferPointer<UInt8>, maximumHead: Int) -> HTTPRefusal? {
        let lineFeed = UInt8(ascii: "\n"), carriageReturn = UInt8(ascii: "\r")
        var start = 0
        // Empty lines may come before a request (RFC 9112 §2.2).
        while start < bytes.count {
            if bytes[start] == lineFeed {
                start += 1
            } else if bytes[start] == carriageReturn, start + 1 < bytes.count, bytes[start + 1] == lineFeed {
                start += 2
            } else {
                break
            }
        }
        guard let requestLineEnd = Self.index(of: lineFeed, in: bytes, from: start) else {
            return bytes.count > maximumHead ? .targetTooLong(limit: maximumTargetBytes) : nil
        }
        let requestLine = UnsafeBufferPointer(rebasing: bytes[start..<Self.trimmingCR(bytes, start, requestLineEnd)])
        if let refusal = Self.requestLineRefusal(requestLine) { return refusal }
        var lineStart = requestLineEnd + 1
        var lines = 0
        while true {
            guard let lineEnd = Self.index(of: lineFeed, in: bytes, from: lineStart) else {
                return bytes.count > maximumHead ? .headTooLarge(limit: maximumWeight) : nil
            }
            let end = Self.trimmingCR(bytes, lineStart, lineEnd)
            if end == lineStart { break }  // the empty line: the head is whole
            lines += 1
            if let refusal = fieldRefusal(UnsafeBufferPointer(rebasing: bytes[lineStart..<end])) { return refusal }
            lineStart = lineEnd + 1
        }
        var parameters = ConnectionRoute.queryParameterCount(requestLine)
        if parameters > maximumQueryParameters || requestLine.count > maximumTargetBytes { parameters = 0 }
        return Self.weight(bytes: lineStart - start, lines: lines, parameters: parameters) > maximumWeight
            ? .headTooLarge(limit: maximumWeight) : nil
    }

    /// The refusal a request line (without its line end) calls for, read as libmicrohttpd
    /// 0.9.75 reads it: the method up to the first space; after the spaces that follow, the
    /// target; the version after the last space, which must be `HTTP/1.` and one digit
    /// (`HTTP/` digit `.` digit of another major version: 505).
    static func requestLineRefusal(_ line: UnsafeBufferPointer<UInt8>) -> HTTPRefusal? {
        let space = UInt8(ascii: " ")
        guard let firstSpace = line.firstIndex(of: space), firstSpace > 0 else { return .malformedRequestLine }
        var targetStart = firstSpace + 1
        while targetStart < line.count && line[targetStart] == space { targetStart += 1 }
        guard let lastSpace = line.lastIndex(of: space), lastSpace >= targetStart else { return .malformedRequestLine }
        let version = line[(lastSpace + 1)...]
        let prefix = Array("HTTP/".utf8)
        guard version.count == 8, version.starts(with: prefix) else { return .malformedRequestLine }
        let major = version[lastSpace + 6], dot = version[lastSpace + 7], minor = version[lastSpace + 8]
        let isDigit = { (byte: UInt8) in (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }
        guard isDigit(major), dot == UInt8(ascii: "."), isDigit(minor) else { return .malformedRequestLine }
        return major == UInt8(ascii: "1") ? nil : .versionNotSupported
    }

    /// The refusal a header line (without its line end) calls for.
    func fieldRefusal(_ line: UnsafeBufferPointer<UInt8>) -> HTTPRefusal? {
        if line[0] == 0x20 || line[0] == 0x09 { return .malformedHeader(HeadCheck.foldedReason) }
        guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else {
            return .malformedHeader("a header line without a colon")
        }
        let name = line[..<colon]
        if name.isEmpty || !name.allSatisfy(HeadCheck.isTokenByte) { return .malformedHeader(HeadCheck.nameReason) }
        let value = UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: line[(colon + 1)...]))
        if HeadCheck.hasControlCharacter(value) { return .malformedHeader(HeadCheck.controlReason) }
        guard name.count == 14, name.elementsEqual("content-length".utf8, by: { $0 | 0x20 == $1 }) else { return nil }
        let digits = value.drop { $0 == 0x20 || $0 == 0x09 }
        guard !digits.isEmpty, digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else {
            return .badFraming("a Content-Length that is not a number (digits alone, no space after them)")
        }
        var length: UInt64 = 0
        for digit in digits {
            let (times10, overflow) = length.multipliedReportingOverflow(by: 10)
            let (sum, carry) = times10.addingReportingOverflow(UInt64(digit - UInt8(ascii: "0")))
            if overflow || carry { return .bodyTooLarge(limit: maximumBodyBytes) }
            length = sum
        }
        return nil
    }

    /// The end of a line that ends at `lineFeed`, without the CR before it (not before `start`).
    private static func trimmingCR(_ bytes: UnsafeBufferPointer<UInt8>, _ start: Int, _ lineFeed: Int) -> Int {
        lineFeed > start && bytes[lineFeed - 1] == UInt8(ascii: "\r") ? lineFeed - 1 : lineFeed
    }

    /// The index of the first `byte` in `bytes` at `start` or after (`memchr`).
    private static func index(of byte: UInt8, in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        guard let base = bytes.baseAddress, start < bytes.count,
              let found = memchr(base + start, Int32(byte), bytes.count - start)
        else { return nil }
        return UnsafeRawPointer(base).distance(to: UnsafeRawPointer(found))
    }
}
