import Foundation
import HeadwayTestSupport
import Synchronization
import Testing
@testable import HTTPServer

/// The queue of unsent bytes: chunk framing, sends that take part of it, and shared bytes
/// referenced rather than copied.
@Suite struct UnsentBytesTests {
    /// Takes up to `limit` bytes from the front, as a socket would, and returns them.
    private func take(_ unsent: inout UnsentBytes, upTo limit: Int) -> [UInt8] {
        var taken: [UInt8] = []
        unsent.withIOVectors { vectors in
            for vector in vectors where taken.count < limit {
                let raw = UnsafeRawBufferPointer(start: vector.iov_base, count: vector.iov_len)
                taken += raw.prefix(limit - taken.count)
            }
        }
        unsent.removeFirst(taken.count)
        return taken
    }

    @Test func aChunkIsItsSizeInHexadecimalThePiecesAndCRLF() {
        var unsent = UnsentBytes()
        unsent.appendChunk([Array("abc".utf8), Array("d".utf8)])
        unsent.appendChunk([[], []])
        unsent.appendChunk([Array(repeating: UInt8(ascii: "z"), count: 0x1a2b)])
        let sent = take(&unsent, upTo: .max)
        let expected = "4\r\nabcd\r\n" + "1a2b\r\n" + String(repeating: "z", count: 0x1a2b) + "\r\n"
        #expect(String(decoding: sent, as: UTF8.self) == expected)
        #expect(unsent.isEmpty && unsent.count == 0)
        #expect(UnsentBytes.chunkSizeLine(1) == Array("1\r\n".utf8))
        #expect(UnsentBytes.chunkSizeLine(0x10000) == Array("10000\r\n".utf8))
    }

    /// Sends of random sizes, cutting segments anywhere: every byte goes out once, in
    /// order, and the owned and shared counts follow what is left.
    @Test func partialSendsGoOnFromTheirOffset() {
        var generator = SeededGenerator(seed: 10)
        var unsent = UnsentBytes()
        var expected: [UInt8] = []
        var sharedFlags: [Bool] = []
        for index in 0..<300 {
            let piece = (0..<Int.random(in: 1...700, using: &generator)).map { UInt8(truncatingIfNeeded: $0 &+ index) }
            let shared = index % 3 == 0
            unsent.append(piece, shared: shared)
            expected += piece
            sharedFlags += Array(repeating: shared, count: piece.count)
        }
        var sent: [UInt8] = []
        while !unsent.isEmpty {
            sent += take(&unsent, upTo: Int.random(in: 1...5000, using: &generator))
            let left = sharedFlags[sent.count...]
            #expect(unsent.count == left.count)
            #expect(unsent.sharedCount == left.filter { $0 }.count)
            #expect(unsent.ownedCount == left.filter { !$0 }.count)
        }
        #expect(sent == expected)
    }

    @Test func oneSendTakesAtMostSixtyFourSegments() {
        var unsent = UnsentBytes()
        for _ in 0..<100 { unsent.append([1, 2]) }
        #expect(unsent.withIOVectors { $0.count } == UnsentBytes.maximumVectors)
        unsent.removeFirst(2 * 80 + 1)
        #expect(unsent.withIOVectors { vectors in vectors.count } == 20)
        #expect(unsent.withIOVectors { vectors in vectors[0].iov_len } == 1, "the first from its offset")
    }

    @Test func copyingOutCrossesSegments() {
        var unsent = UnsentBytes()
        unsent.append(Array("hello ".utf8))
        unsent.append(Array("world".utf8), shared: true)
        var buffer = [UInt8](repeating: 0, count: 8)
        let first = buffer.withUnsafeMutableBytes { unsent.copy(into: $0.baseAddress!, capacity: 8) }
        #expect(first == 8 && String(decoding: buffer, as: UTF8.self) == "hello wo")
        #expect(unsent.count == 3 && unsent.sharedCount == 3)
        let second = buffer.withUnsafeMutableBytes { unsent.copy(into: $0.baseAddress!, capacity: 8) }
        #expect(second == 3 && String(decoding: buffer.prefix(3), as: UTF8.self) == "rld")
        #expect(unsent.isEmpty)
    }

    /// A catch-up handed to many streams is one array: each queue points at its storage.
    @Test func sharedBytesAreReferencedNotCopied() {
        let catchUp = [UInt8](repeating: 7, count: 1 << 20)
        let storage = catchUp.withUnsafeBytes { $0.baseAddress }
        let queues = (0..<20).map { _ in
            var unsent = UnsentBytes()
            unsent.appendChunk([catchUp], shared: true)
            return unsent
        }
        for unsent in queues {
            #expect(unsent.sharedCount == 1 << 20 && unsent.ownedCount == "100000\r\n\r\n".utf8.count)
            #expect(unsent.withIOVectors { UnsafeRawPointer($0[1].iov_base) } == storage)
        }
    }
}

/// A direct stream over a socket pair, with the watcher's clock in the test's hands: what
/// goes out, and when a peer that reads nothing gets the stream closed.
@Suite struct ResponseStreamTests {
    /// A monotonic clock the test moves.
    final class ManualMonotonicClock: Sendable {
        private let nanoseconds = Atomic<UInt64>(1_000_000_000)
        var now: UInt64 { nanoseconds.load(ordering: .relaxed) }
        func advance(seconds: Double) { nanoseconds.add(UInt64(seconds * 1e9), ordering: .relaxed) }
    }

    /// Both ends of a connected socket pair, closed when released.
    final class SocketPair {
        let server: Int32
        let peer: Int32

        init(sendBuffer: Int32? = nil) throws {
            var fds: [Int32] = [0, 0]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else { throw POSIXError(.EIO) }
            (server, peer) = (fds[0], fds[1])
            if var size = sendBuffer {
                setsockopt(server, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            }
        }

        deinit {
            close(server)
            close(peer)
        }

        /// Reads what is waiting at the peer's end (without blocking), up to `limit` bytes.
        func peerReads(upTo limit: Int = 1 << 24) -> [UInt8] {
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while received.count < limit {
                let count = recv(peer, &buffer, min(buffer.count, limit - received.count), Int32(MSG_DONTWAIT))
                guard count > 0 else { break }
                received += buffer.prefix(count)
            }
            return received
        }
    }

    let clock = ManualMonotonicClock()

    /// A stream writing straight to `pair.server`, its watcher on the manual clock.
    private func directStream(_ pair: SocketPair, stallTimeout: Double = 30) throws -> (ResponseStream, WritableWatcher) {
        let clock = clock
        let watcher = try WritableWatcher(stallTimeoutNanoseconds: UInt64(stallTimeout * 1e9), now: { clock.now })
        let stream = ResponseStream()
        stream.attach(nil, directSocket: pair.server, watcher: watcher)
        var byte: UInt8 = 0
        #expect(stream.read(into: &byte, capacity: 1) == 0, "nothing queued: from now on, direct")
        return (stream, watcher)
    }

    @Test func aDirectStreamSendsEachWriteAsOneChunk() throws {
        let pair = try SocketPair()
        let (stream, _) = try directStream(pair)
        #expect(stream.write(contentsOf: [Array("id: 1\n".utf8), Array("data: x\n\n".utf8)]))
        #expect(stream.writeShared(contentsOf: [Array("abc".utf8)]))
        #expect(String(decoding: pair.peerReads(), as: UTF8.self) == "f\r\nid: 1\ndata: x\n\n\r\n3\r\nabc\r\n")
        #expect(stream.bufferedBytes == 0)
        stream.connectionClosed()
    }

    /// What the socket cannot take waits, shared bytes apart from owned ones, and goes
    /// out as the peer reads, byte for byte.
    @Test func whatTheSocketRefusesWaitsAndGoesOutWhenItTakesMore() throws {
        let pair = try SocketPair(sendBuffer: 4096)
        let (stream, _) = try directStream(pair)
        let catchUp = (0..<300_000).map { UInt8(truncatingIfNeeded: $0) }
        stream.writeShared(contentsOf: [catchUp])
        stream.write(contentsOf: [Array("live".utf8)])
        #expect(stream.bufferedBytes > 100_000, "most of it waits")
        #expect(stream.ownedBytes == "4\r\nlive\r\n".utf8.count + "\r\n".utf8.count, "the catch-up is not owned")
        let received = readAll(pair, stream)
        let expected = Array("493e0\r\n".utf8) + catchUp + Array("\r\n4\r\nlive\r\n".utf8)
        #expect(received == expected)
        stream.connectionClosed()
    }

    /// Reads at the peer's end, the stream sending more as the socket takes it, until the
    /// stream holds nothing (within a bounded number of turns); returns what was read.
    private func readAll(_ pair: SocketPair, _ stream: ResponseStream) -> [UInt8] {
        var received: [UInt8] = []
        var rounds = 0
        while stream.bufferedBytes > 0 && rounds < 100_000 {
            rounds += 1
            received += pair.peerReads()
            stream.sendWhenWritable()
        }
        return received + pair.peerReads()
    }

    /// Writes of several pieces (now and then more than one `sendmsg` takes, or shared),
    /// each sent straight from its arrays while the socket has room, and cut anywhere (the
    /// size line, a piece, the CRLF) when it has not: the peer still receives every chunk
    /// whole and in order.
    @Test func writesCutAnywhereBySendsArriveWholeAndInOrder() throws {
        let pair = try SocketPair(sendBuffer: 4096)
        let (stream, _) = try directStream(pair)
        var random = SystemRandomNumberGenerator()
        var expected: [UInt8] = []
        var received: [UInt8] = []
        for write in 0..<400 {
            let pieceCount = write % 50 == 0 ? UnsentBytes.maximumVectors + 6 : Int.random(in: 1...3, using: &random)
            let pieces = (0..<pieceCount).map { piece in
                [UInt8](repeating: UInt8(truncatingIfNeeded: write * 3 + piece), count: Int.random(in: 0...700, using: &random))
            }
            let size = pieces.reduce(0) { $0 + $1.count }
            if size > 0 { expected += UnsentBytes.chunkSizeLine(size) + pieces.joined() + Array("\r\n".utf8) }
            #expect(write % 9 == 0 ? stream.writeShared(contentsOf: pieces) : stream.write(contentsOf: pieces))
            if write % 7 == 0 {
                received += pair.peerReads(upTo: Int.random(in: 1...3000, using: &random))
                stream.sendWhenWritable()
            }
        }
        received += readAll(pair, stream)
        #expect(received.count == expected.count)
        #expect(received == expected)
        stream.connectionClosed()
    }

    /// Bytes that wait with the socket taking none for the stall timeout close the
    /// stream; any byte taken starts the count again.
    @Test func aStreamWhosePeerTakesNothingForTheStallTimeoutIsClosed() throws {
        let pair = try SocketPair(sendBuffer: 4096)
        let (stream, watcher) = try directStream(pair, stallTimeout: 30)
        #expect(watcher.closeStalledStreams(now: clock.now + 60_000_000_000) == 0, "nothing waits: never stalled")
        stream.write(contentsOf: [[UInt8](repeating: 1, count: 200_000)])
        #expect(stream.bufferedBytes > 0)

        clock.advance(seconds: 29.9)
        #expect(watcher.closeStalledStreams(now: clock.now) == 0)
        _ = pair.peerReads()
        stream.sendWhenWritable()
        #expect(stream.bufferedBytes > 0)
        clock.advance(seconds: 29.9)
        #expect(watcher.closeStalledStreams(now: clock.now) == 0, "the peer took bytes 29.9 s ago")
        #expect(stream.isOpen)

        clock.advance(seconds: 0.1)
        #expect(watcher.closeStalledStreams(now: clock.now) == 1)
        #expect(!stream.isOpen && stream.hasStalled)
        #expect(stream.bufferedBytes == 0, "what waited is let go")
        #expect(!stream.write(contentsOf: [[1]]))
        stream.connectionClosed()
    }

    /// How long a stream's peer has taken nothing is known while bytes wait, and starts
    /// again with any byte taken.
    @Test func aStreamTellsHowLongItsPeerHasTakenNothing() throws {
        let pair = try SocketPair(sendBuffer: 4096)
        let (stream, _) = try directStream(pair)
        let second: UInt64 = 1_000_000_000
        #expect(!stream.hasTakenNothing(forNanoseconds: 0), "nothing waits")
        stream.write(contentsOf: [[UInt8](repeating: 1, count: 200_000)])
        clock.advance(seconds: 4.9)
        #expect(stream.hasTakenNothing(forNanoseconds: 4 * second))
        #expect(!stream.hasTakenNothing(forNanoseconds: 5 * second))
        _ = pair.peerReads()
        stream.sendWhenWritable()
        clock.advance(seconds: 1)
        #expect(!stream.hasTakenNothing(forNanoseconds: 2 * second), "took bytes a second ago")
        stream.connectionClosed()
        #expect(!stream.hasTakenNothing(forNanoseconds: 0), "closed")
    }

    /// A direct stream whose peer hangs up is closed by the watcher at once, not at its
    /// next write — while nothing waits, and after bytes waited and went out (the watch
    /// for the socket's room, used up, gives way to the watch for the hang-up again).
    @Test func aDirectStreamWhosePeerHangsUpIsClosedAtOnce() throws {
        for waitsFirst in [false, true] {
            let pair = try SocketPair(sendBuffer: 4096)
            let (stream, watcher) = try directStream(pair)
            let ended = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                watcher.run()
                ended.signal()
            }
            if waitsFirst {
                let payload = [UInt8](repeating: 1, count: 200_000)
                stream.write(contentsOf: [payload])
                #expect(stream.bufferedBytes > 0)
                var received = 0
                for _ in 0..<20_000 where received < payload.count {
                    received += pair.peerReads().count
                    if received < payload.count { usleep(100) }
                }
                #expect(received > payload.count, "all of it, framed, sent by the watcher")
            }
            #expect(stream.isOpen)
            shutdown(pair.peer, Int32(SHUT_RDWR))
            var polls = 0
            while stream.isOpen && polls < 1000 {
                polls += 1
                usleep(2000)
            }
            #expect(!stream.isOpen, "closed \(waitsFirst ? "after a wait" : "while idle") within \(polls * 2) ms")
            #expect(!stream.hasStalled, "a hang-up, not a stall")
            stream.connectionClosed()
            watcher.requestStop()
            #expect(ended.wait(timeout: .now() + 5) == .success)
        }
    }

    @Test func heartbeatSizedWritesWithALimitOfZeroGoOnlyIntoAnEmptyStream() throws {
        let pair = try SocketPair(sendBuffer: 4096)
        let (stream, _) = try directStream(pair)
        #expect(stream.write(contentsOf: [Array(":\n\n".utf8)], unlessMoreThan: 0))
        _ = pair.peerReads()
        stream.writeShared(contentsOf: [[UInt8](repeating: 1, count: 200_000)])
        let waiting = stream.bufferedBytes
        #expect(!stream.write(contentsOf: [Array(":\n\n".utf8)], unlessMoreThan: 0))
        #expect(stream.bufferedBytes == waiting)
        stream.connectionClosed()
    }
}
