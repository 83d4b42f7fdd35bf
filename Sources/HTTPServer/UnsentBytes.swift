import Foundation

/// The bytes a stream has not sent yet: a queue of segments that reference the writers'
/// arrays (copy-on-write `[UInt8]`, never copied here), with an offset into the first.
///
/// Each segment is *owned* or *shared*. Shared segments are immutable bytes other streams
/// may reference too (a catch-up read once for several subscribers): a stream only holds
/// a reference to them, so they are counted apart (`sharedCount`) and a stream's bound
/// applies to the rest (`ownedCount`). Every byte is still sent in order.
struct UnsentBytes {
    private struct Segment {
        var bytes: [UInt8]
        var isShared: Bool
    }

    /// At most this many segments go to one `sendmsg` (well below `IOV_MAX`).
    static let maximumVectors = 64
    private static let lineEnd: [UInt8] = [13, 10]
    private static let hexDigits = Array("0123456789abcdef".utf8)

    private var segments: [Segment] = []
    /// The first segment not wholly sent.
    private var head = 0
    /// Bytes of `segments[head]` already sent.
    private var offsetInHead = 0

    /// Bytes not yet sent.
    private(set) var count = 0
    /// Bytes not yet sent that belong to shared segments.
    private(set) var sharedCount = 0

    /// Bytes not yet sent that this stream owns (all but shared segments).
    var ownedCount: Int { count - sharedCount }

    var isEmpty: Bool { count == 0 }

    /// Appends `bytes` as they are (a reference to the array, not a copy).
    mutating func append(_ bytes: [UInt8], shared: Bool = false) {
        guard !bytes.isEmpty else { return }
        segments.append(Segment(bytes: bytes, isShared: shared))
        count += bytes.count
        if shared { sharedCount += bytes.count }
    }

    /// Appends `pieces` as one HTTP/1.1 chunk: its size in hexadecimal and CRLF, the pieces
    /// (referenced), CRLF. Nothing for empty pieces (an empty chunk would end the body).
    mutating func appendChunk(_ pieces: [[UInt8]], shared: Bool = false) {
        let size = pieces.reduce(0) { $0 + $1.count }
        guard size > 0 else { return }
        append(Self.chunkSizeLine(size))
        for piece in pieces { append(piece, shared: shared) }
        append(Self.lineEnd)
    }

    /// `size` in lower-case hexadecimal, then CRLF.
    static func chunkSizeLine(_ size: Int) -> [UInt8] {
        var line = [UInt8](repeating: 0, count: maximumChunkSizeLine)
        let length = line.withUnsafeMutableBytes { writeChunkSizeLine(size, into: $0) }
        return Array(line.prefix(length))
    }

    /// The longest chunk-size line: 16 hexadecimal digits and CRLF.
    static let maximumChunkSizeLine = 18

    /// Writes `size` in lower-case hexadecimal, then CRLF, at the start of `buffer` (at
    /// least `maximumChunkSizeLine` bytes); returns how many bytes it wrote.
    static func writeChunkSizeLine(_ size: Int, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        var length = 0
        var shift = (Int.bitWidth - size.leadingZeroBitCount + 3) / 4 * 4
        repeat {
            shift -= 4
            buffer[length] = hexDigits[(size >> shift) & 0xF]
            length += 1
        } while shift > 0
        buffer[length] = 13
        buffer[length + 1] = 10
        return length + 2
    }

    /// Calls `body` with the unsent bytes of the first segments (at most
    /// `maximumVectors`), in order, as vectors for `sendmsg`; valid only during the call.
    func withIOVectors<Result>(_ body: (UnsafeMutableBufferPointer<iovec>) -> Result) -> Result {
        let count = min(Self.maximumVectors, segments.count - head)
        return withUnsafeTemporaryAllocation(of: iovec.self, capacity: max(count, 1)) { vectors in
            // Each segment's storage stays pinned while the calls nest.
            func gather(_ filled: Int) -> Result {
                guard filled < count else { return body(UnsafeMutableBufferPointer(rebasing: vectors[..<count])) }
                return segments[head + filled].bytes.withUnsafeBytes { raw in
                    let skip = filled == 0 ? offsetInHead : 0
                    vectors[filled] = iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress! + skip),
                                            iov_len: raw.count - skip)
                    return gather(filled + 1)
                }
            }
            return gather(0)
        }
    }

    /// Calls `body` with `pieces` framed as one HTTP/1.1 chunk (its size line, the pieces,
    /// CRLF) as vectors for `sendmsg`, straight from the pieces' arrays and with nothing
    /// allocated; valid only during the call. `pieces` holds at most `maximumVectors - 2`
    /// pieces and `size` bytes in all, more than zero.
    static func withChunkVectors<Result>(_ pieces: [[UInt8]], size: Int,
                                         _ body: (UnsafeMutableBufferPointer<iovec>) -> Result) -> Result {
        precondition(size > 0 && pieces.count <= maximumVectors - 2, "not a chunk to send in one call")
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: maximumChunkSizeLine) { line in
            let lineLength = writeChunkSizeLine(size, into: UnsafeMutableRawBufferPointer(line))
            return withUnsafeTemporaryAllocation(of: iovec.self, capacity: pieces.count + 2) { vectors in
                vectors[0] = iovec(iov_base: UnsafeMutableRawPointer(line.baseAddress!), iov_len: lineLength)
                return lineEnd.withUnsafeBytes { end in
                    vectors[pieces.count + 1] = iovec(iov_base: UnsafeMutableRawPointer(mutating: end.baseAddress!),
                                                      iov_len: end.count)
                    // Each piece's storage stays pinned while the calls nest.
                    func gather(_ index: Int) -> Result {
                        guard index < pieces.count else { return body(vectors) }
                        return pieces[index].withUnsafeBytes { raw in
                            vectors[index + 1] = iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress),
                                                       iov_len: raw.count)
                            return gather(index + 1)
                        }
                    }
                    return gather(0)
                }
            }
        }
    }

    /// Copies up to `capacity` unsent bytes to `buffer` and counts them as sent; returns
    /// how many.
    mutating func copy(into buffer: UnsafeMutableRawPointer, capacity: Int) -> Int {
        let copied = withIOVectors { vectors in
            var copied = 0
            for vector in vectors where copied < capacity {
                let count = min(capacity - copied, vector.iov_len)
                (buffer + copied).copyMemory(from: vector.iov_base!, byteCount: count)
                copied += count
            }
            return copied
        }
        removeFirst(copied)
        return copied
    }

    /// Counts the first `sent` unsent bytes as sent, letting go of segments wholly sent.
    mutating func removeFirst(_ sent: Int) {
        precondition(sent >= 0 && sent <= count, "more bytes sent than were waiting")
        var remaining = sent
        while remaining > 0 {
            let segment = segments[head]
            let taken = min(remaining, segment.bytes.count - offsetInHead)
            remaining -= taken
            count -= taken
            if segment.isShared { sharedCount -= taken }
            offsetInHead += taken
            if offsetInHead == segment.bytes.count {
                segments[head].bytes = []
                head += 1
                offsetInHead = 0
            }
        }
        if head == segments.count || head > 64 {
            segments.removeFirst(head)
            head = 0
        }
    }

    /// Forgets everything unsent.
    mutating func removeAll() { self = UnsentBytes() }
}
