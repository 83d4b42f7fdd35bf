import Foundation
@testable import HeadwayCLI
import HeadwayTestSupport
import Testing

/// `headway run --pty` with real pseudo-terminals, real child processes, a live headwayd,
/// tmux as the user's terminal and a real curl.
@Suite(.serialized) struct RunPtyTests {
    /// Runs `headway --server URL run OPTIONS -- /bin/sh -c SCRIPT` to its end (stdin
    /// /dev/null, stdout and stderr pipes: no terminal anywhere).
    func run(_ daemon: LiveDaemon, _ options: [String], _ script: String) throws -> RawResult {
        collect(try startHeadway(["--server", daemon.url, "run"] + options + ["--", "/bin/sh", "-c", script]))
    }

    func task(_ daemon: LiveDaemon, _ id: String) throws -> [String: Any] {
        try TestHTTPClient(port: daemon.port).request("GET", "/v1/tasks/\(id)").json
    }

    /// A command that draws its progress only on a terminal (as pip and docker do) is
    /// reported with --pty, and shows nothing without; its stdout and stderr are each a
    /// terminal, its stdin stays `run`'s own (here /dev/null).
    @Test func progressDrawnOnlyOnATerminalIsReportedWithPty() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let script = #"""
            if [ -t 1 ]; then printf 'copying 1/4\r'; printf 'copying 3/4\r'; fi
            [ -t 2 ] && echo 'stderr is a terminal' >&2
            [ -t 0 ] || echo 'stdin is not'
            exit 3
            """#
        let withPty = try run(daemon, ["--pty", "--id", "pty"], script)
        #expect(withPty.status == 3, "\(withPty.errorText)")
        #expect(withPty.output == Array("copying 1/4\rcopying 3/4\rstdin is not\n".utf8))
        #expect(withPty.errorText == "stderr is a terminal\n")
        let reported = try task(daemon, "pty")
        #expect(reported["mode"] as? String == "quantified")
        #expect(reported["completed"] as? Int == 3)
        #expect(reported["total"] as? Int == 4)
        #expect(reported["state"] as? String == "failed")

        let without = try run(daemon, ["--id", "pipe"], script)
        #expect(without.status == 3)
        #expect(without.output == Array("stdin is not\n".utf8))
        #expect(without.errors == [])
        #expect(try task(daemon, "pipe")["mode"] as? String == "indeterminate")
    }

    /// Through the pseudo-terminals every byte passes as written, on its own stream: no
    /// `\n` made `\r\n`, no byte dropped at the end, and a large output whole.
    @Test func outputPassesThroughByteIdentical() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let everyByte = (0...255).map { String(format: "\\%03o", $0) }.joined()
        let script = "printf '\(everyByte)'; printf 'e\\r\\n\\000\\377' >&2; seq 1 100000; printf 'last'"
        let result = try run(daemon, ["--pty"], script)
        #expect(result.status == 0, "\(result.errorText)")
        let numbers = (1...100_000).map { "\($0)\n" }.joined()
        #expect(result.output == Array(0...255) + Array(numbers.utf8) + Array("last".utf8))
        #expect(result.errors == [0x65, 0x0D, 0x0A, 0x00, 0xFF])
    }

    /// Exit statuses, deaths by signal and signals sent to `run` are as without --pty.
    @Test func exitStatusesAndSignalsPassThrough() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let failed = try run(daemon, ["--pty", "--id", "e42"], "echo working; exit 42")
        #expect(failed.status == 42)
        #expect(try task(daemon, "e42")["message"] as? String == "the command exited with status 42")
        let killed = try run(daemon, ["--pty", "--id", "k9"], "kill -9 $$")
        #expect(killed.status == 128 + 9)
        #expect(try task(daemon, "k9")["message"] as? String == "the command was killed by signal 9 (SIGKILL)")

        let started = try startHeadway(["--server", daemon.url, "run", "--pty", "--id", "term", "--",
                                        "/bin/sh", "-c", "echo started; while :; do sleep 0.1; done"])
        #expect(waitUntil(10) { (try? TestHTTPClient(port: daemon.port).request("GET", "/v1/tasks/term").status) == 200 })
        kill(started.process.processIdentifier, SIGTERM)
        let terminated = collect(started)
        #expect(terminated.status == 128 + SIGTERM)
        #expect(terminated.output == Array("started\n".utf8))
        #expect(try task(daemon, "term")["message"] as? String == "the command was killed by signal 15 (SIGTERM)")
    }

    /// A cancel through the API ends a command that never exits, as without --pty.
    @Test func aCancelEndsACommandThatNeverExits() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let started = try startHeadway(["--server", daemon.url, "run", "--pty", "--id", "c", "--",
                                        "/bin/sh", "-c", "echo started; while :; do sleep 0.1; done"])
        #expect(waitUntil(10) {
            (try? TestHTTPClient(port: daemon.port).request("POST", "/v1/tasks/c/cancel", json: "{}").status) == 202
        })
        let result = collect(started)
        #expect(result.status == 128 + SIGTERM)
        #expect(result.output == Array("started\n".utf8))
        #expect(try task(daemon, "c")["state"] as? String == "canceled")
    }

    /// When the reader of `run`'s stdout goes away, a command that never stops writing
    /// still ends: its pseudo-terminal is closed, and its next write fails (EIO: `yes`
    /// exits 1, where through a pipe SIGPIPE would kill it).
    @Test func aReaderGoneStopsAWriterThatNeverEnds() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: builtExecutable("headway"))
        process.arguments = ["--server", "http://127.0.0.1:\(unusedPort())", "run", "--pty", "--", "yes"]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        DispatchQueue.global().asyncAfter(deadline: .now() + 20) { [process] in
            if process.isRunning { process.terminate() }
        }
        let first = out.fileHandleForReading.readData(ofLength: 2)
        try out.fileHandleForReading.close()
        process.waitUntilExit()
        #expect(first == Data("y\n".utf8))
        #expect(process.terminationStatus == 1)
    }

    /// Without a terminal of its own, `run` gives the command 80×24.
    @Test func withoutATerminalTheSizeIs80By24() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let result = try run(daemon, ["--pty"], "stty size <&1")
        #expect(String(decoding: result.output, as: UTF8.self) == "24 80\n", "\(result.errorText)")
    }

    /// In a real terminal (tmux): the command's pseudo-terminal has the terminal's size
    /// and follows it when it changes (the command gets SIGWINCH, and then reads the new
    /// size); Ctrl-C ends a command that never exits, as without --pty (130).
    @Test func inATerminalTheSizeFollowsAndCtrlCEndsTheCommand() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        // `stty size` reads stdin, tmux's terminal; `stty size <&3` the command's stdout.
        let child = #"""
            exec 3>&1
            trap 'echo "resized $(stty size) to $(stty size <&3)"' WINCH
            echo "sizes $(stty size) to $(stty size <&3)"
            while :; do sleep 0.05; done
            """#
        let script = "trap : INT; \(builtExecutable("headway")) --server \(daemon.url) run --pty --id w -- /bin/sh -c "
            + shellQuoted(child) + "; echo \"exit=$?\"; sleep 60"
        let terminal = try TmuxPane(columns: 100, rows: 30, command: "/bin/sh -c " + shellQuoted(script))
        defer { terminal.close() }
        #expect(waitUntil(10) { terminal.screen().contains("sizes ") }, "\(terminal.screen())")
        let first = Self.sizes(after: "sizes", in: terminal.screen())
        #expect(first != nil && first?.outer == first?.inner, "\(terminal.screen())")

        terminal.resize(columns: 120, rows: 40)
        // The command may hear of the change from tmux before `run` has resized its
        // pseudo-terminal; `run` then tells it again.
        #expect(waitUntil(10) {
            guard let resized = Self.sizes(after: "resized", in: terminal.screen()) else { return false }
            return resized.outer == resized.inner && resized.outer != first?.outer
        }, "\(terminal.screen())")

        terminal.sendKeys("C-c")
        #expect(waitUntil(10) { terminal.screen().contains("exit=") }, "\(terminal.screen())")
        #expect(terminal.screen().contains("exit=130"), "\(terminal.screen())")
        #expect(try task(daemon, "w")["message"] as? String == "the command was killed by signal 2 (SIGINT)")
    }

    /// The last line `WORD ROWS COLS to ROWS COLS` on `screen`: the terminal's size and
    /// the command's.
    static func sizes(after word: String, in screen: String) -> (outer: String, inner: String)? {
        guard let line = screen.split(separator: "\n").last(where: { $0.hasPrefix(word + " ") }) else { return nil }
        let halves = line.dropFirst(word.count + 1).components(separatedBy: " to ")
        guard halves.count == 2 else { return nil }
        return (halves[0].trimmingCharacters(in: .whitespaces), halves[1].trimmingCharacters(in: .whitespaces))
    }

    /// A real curl downloading 3 MB from a loopback server draws its meter through the
    /// pseudo-terminal, and `--progress-pattern` reads its first column (the percent
    /// received): the task reaches 100 of 100 %, and the file arrives whole.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/curl")))
    func curlsProgressMeterIsReported() throws {
        let daemon = try LiveDaemon()
        defer { daemon.stop() }
        let blob = try PacedBlobServer(bytes: 3 << 20, chunk: 64 << 10, pauseMicroseconds: 30_000)
        defer { blob.close() }
        let target = daemon.directory.file("blob")
        // The script fails after curl, so the task keeps what was reported (a success
        // would be complete whatever it had).
        let result = try run(daemon, ["--pty", "--id", "curl", "--progress-pattern", #"^\s*(?<completed>\d{1,3})\s+\d"#],
                             "/usr/bin/curl -o '\(target)' \(blob.url)/blob && exit 5")
        #expect(result.status == 5, "\(result.errorText)")
        #expect(String(decoding: result.errors, as: UTF8.self).contains("% Total"), "curl drew no meter")
        let size = (try? FileManager.default.attributesOfItem(atPath: target)[.size] as? Int) ?? nil
        #expect(size == 3 << 20)
        let reported = try task(daemon, "curl")
        #expect(reported["completed"] as? Int == 100, "\(reported)")
        #expect(reported["total"] as? Int == 100)
        #expect(reported["unit"] as? String == "%")
    }
}

/// A loopback HTTP server that answers each request with `bytes` bytes, `chunk` at a
/// time with a pause between them, so that a download lasts long enough for curl to
/// redraw its meter.
final class PacedBlobServer: @unchecked Sendable {
    private let listener: Int32
    private let done = DispatchSemaphore(value: 0)
    let url: String

    init(bytes: Int, chunk: Int, pauseMicroseconds: UInt32) throws {
        (listener, url) = try listenOnLoopback()
        Thread { [self] in
            defer { done.signal() }
            var wait = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&wait, 1, 20_000) == 1 else { return }
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return }
            defer { Glibc.close(connection) }
            var head: [UInt8] = [], buffer = [UInt8](repeating: 0, count: 4096)
            while !head.ends(with: Array("\r\n\r\n".utf8)) {
                let count = read(connection, &buffer, buffer.count)
                guard count > 0, head.count < 65_536 else { return }
                head += buffer[0..<count]
            }
            let reply = Array("HTTP/1.1 200 OK\r\nContent-Length: \(bytes)\r\nConnection: close\r\n\r\n".utf8)
            guard write(connection, reply, reply.count) == reply.count else { return }
            let piece = [UInt8](repeating: 0x68, count: chunk)
            var sent = 0
            while sent < bytes {
                let count = min(chunk, bytes - sent)
                var offset = 0
                while offset < count {
                    let written = piece.withUnsafeBytes { write(connection, $0.baseAddress! + offset, count - offset) }
                    guard written > 0 else { return }
                    offset += written
                }
                sent += count
                usleep(pauseMicroseconds)
            }
        }.start()
    }

    /// Waits for the serving thread to end, then closes the socket.
    func close() {
        done.wait()
        Glibc.close(listener)
    }
}
