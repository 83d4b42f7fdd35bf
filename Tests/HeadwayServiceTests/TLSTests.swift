import Foundation
import HeadwayTestSupport
import Testing
@testable import Daemon
@testable import HTTPServer
import HeadwayCore

/// A self-signed certificate for 127.0.0.1 and localhost, made with the `openssl` command.
struct TestCertificate {
    let certificatePath: String
    let keyPath: String
    /// SHA-256 of the certificate, lower-case hex pairs joined by colons.
    let fingerprint: String

    /// An ECDSA (P-256) certificate, or an RSA (2048 bits) one.
    init(in directory: TemporaryDirectory, name: String, rsa: Bool = false) throws {
        certificatePath = directory.file("\(name).crt")
        keyPath = directory.file("\(name).key")
        let key = rsa ? ["-newkey", "rsa:2048"] : ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
        let (status, output) = try Tool.run(["openssl", "req", "-x509"] + key + [
            "-nodes", "-keyout", keyPath, "-out", certificatePath, "-days", "2", "-subj", "/CN=headway-test-\(name)",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ])
        guard status == 0 else { throw TestHTTPError("openssl req failed: \(output)") }
        fingerprint = try Self.fingerprint(ofFile: certificatePath)
    }

    /// A self-signed certificate valid only between `start` and `end` (`YYYYMMDDHHMMSSZ`),
    /// signed with `openssl ca`, which takes such dates.
    init(in directory: TemporaryDirectory, name: String, validFrom start: String, until end: String) throws {
        certificatePath = directory.file("\(name).crt")
        keyPath = directory.file("\(name).key")
        let ca = directory.file("\(name)-ca")
        try FileManager.default.createDirectory(atPath: ca, withIntermediateDirectories: true)
        try Data(("[ca]\ndefault_ca=d\n[d]\ndatabase=\(ca)/index.txt\nserial=\(ca)/serial\nnew_certs_dir=\(ca)\n"
            + "default_md=sha256\npolicy=p\nunique_subject=no\n[p]\ncommonName=supplied\n").utf8)
            .write(to: URL(fileURLWithPath: "\(ca)/ca.cnf"))
        try Data().write(to: URL(fileURLWithPath: "\(ca)/index.txt"))
        try Data("01\n".utf8).write(to: URL(fileURLWithPath: "\(ca)/serial"))
        let (requestStatus, requestOutput) = try Tool.run([
            "openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", keyPath, "-out", "\(ca)/request.csr", "-subj", "/CN=headway-test-\(name)",
        ])
        guard requestStatus == 0 else { throw TestHTTPError("openssl req failed: \(requestOutput)") }
        let (status, output) = try Tool.run([
            "openssl", "ca", "-batch", "-notext", "-config", "\(ca)/ca.cnf", "-selfsign", "-keyfile", keyPath,
            "-in", "\(ca)/request.csr", "-out", certificatePath, "-startdate", start, "-enddate", end,
        ])
        guard status == 0 else { throw TestHTTPError("openssl ca failed: \(output)") }
        fingerprint = try Self.fingerprint(ofFile: certificatePath)
    }

    static func fingerprint(ofFile path: String) throws -> String {
        let (status, output) = try Tool.run(["openssl", "x509", "-in", path, "-noout", "-fingerprint", "-sha256"])
        guard status == 0, let value = output.split(separator: "=").last else {
            throw TestHTTPError("openssl x509 failed: \(output)")
        }
        return value.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
    }

    /// The fingerprint of the certificate a new connection to 127.0.0.1:`port` is shown.
    static func fingerprint(servedOn port: Int) throws -> String {
        let (status, output) = try Tool.run([
            "bash", "-c", "openssl s_client -connect 127.0.0.1:\(port) -servername localhost </dev/null 2>/dev/null"
                + " | openssl x509 -noout -fingerprint -sha256",
        ])
        guard status == 0, let value = output.split(separator: "=").last else {
            throw TestHTTPError("no certificate on port \(port): \(output)")
        }
        return value.trimmingCharacters(in: .whitespacesAndNewlines).lowercased()
    }
}

/// Command-line tools the TLS tests drive (`openssl`, `curl`, Python).
enum Tool {
    /// Runs `arguments` (found on the path) to its end, killed after `timeout` seconds;
    /// returns its status and its output (stdout, then stderr).
    static func run(_ arguments: [String], timeout: Double = 30) throws -> (Int32, String) {
        let result = try runToEnd("/usr/bin/env", arguments, environment: nil, timeout: timeout)
        return (result.status, result.output + result.errors)
    }

    /// `curl` trusting `certificate` only; returns its status and output.
    static func curl(_ certificate: String, _ arguments: [String]) throws -> (Int32, String) {
        try run(["curl", "-sS", "--cacert", certificate, "--max-time", "10"] + arguments)
    }
}

/// `curl -N` reading an event stream in the background into a file.
final class BackgroundStream {
    let process = Process()
    let outputPath: String

    init(certificate: String, url: String, outputPath: String) throws {
        self.outputPath = outputPath
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["curl", "-sS", "-N", "--cacert", certificate, "--max-time", "60", url]
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        process.standardError = FileHandle.nullDevice
        try process.run()
    }

    var received: String { (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }

    /// Waits (up to `seconds`) until the stream has received `text`.
    func waitFor(_ text: String, seconds: Double = 10) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if received.contains(text) { return true }
            usleep(20_000)
        }
        return received.contains(text)
    }

    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}

/// HTTPS through libmicrohttpd's GnuTLS: requests and event streams with `curl` and with
/// Python's ssl module, plain HTTP refused on the TLS port, certificates refused at start,
/// and SIGHUP reloading the certificate while streams go on.
@Suite(.serialized) struct TLSTests {
    let directory = TemporaryDirectory()

    private func daemon(_ certificate: TestCertificate) throws -> LiveDaemon {
        try LiveDaemon(arguments: ["--tls-cert", certificate.certificatePath, "--tls-key", certificate.keyPath])
    }

    @Test func requestsAndAnEventStreamOverHTTPSWithCurl() throws {
        let certificate = try TestCertificate(in: directory, name: "server")
        let live = try daemon(certificate)
        let base = "https://127.0.0.1:\(live.application.port)"
        let (healthStatus, health) = try Tool.curl(certificate.certificatePath, ["\(base)/healthz"])
        #expect(healthStatus == 0 && health.contains("\"ok\""), "\(health)")
        let (registerStatus, registered) = try Tool.curl(certificate.certificatePath, [
            "-X", "POST", "-H", "Content-Type: application/json", "-d", #"{"id":"tls-1","name":"Over TLS"}"#,
            "https://localhost:\(live.application.port)/v1/tasks",
        ])
        #expect(registerStatus == 0 && registered.contains("\"id\":\"tls-1\""), "\(registered)")
        let stream = try BackgroundStream(certificate: certificate.certificatePath, url: "\(base)/v1/events?task=tls-1",
                                          outputPath: directory.file("curl-stream.txt"))
        defer { stream.stop() }
        #expect(stream.waitFor("event: snapshot"), "\(stream.received)")
        let (progressStatus, progress) = try Tool.curl(certificate.certificatePath, [
            "-X", "POST", "-H", "Content-Type: application/json", "-d", #"{"increment":3}"#,
            "\(base)/v1/tasks/tls-1/progress",
        ])
        #expect(progressStatus == 0 && progress.contains("\"completed\":3"), "\(progress)")
        #expect(stream.waitFor("\"completed\":3"), "\(stream.received)")
        #expect(stream.received.contains("event: task.updated"))
        // A client that does not trust the certificate refuses the server.
        let (untrustedStatus, _) = try Tool.run(["curl", "-sS", "--max-time", "10", "\(base)/healthz"])
        #expect(untrustedStatus != 0)
    }

    @Test func requestsAndAnEventStreamOverHTTPSWithPythonSSL() throws {
        let certificate = try TestCertificate(in: directory, name: "server")
        let live = try daemon(certificate)
        let script = #"""
            import http.client, socket, ssl, sys
            port, ca = int(sys.argv[1]), sys.argv[2]
            context = ssl.create_default_context(cafile=ca)
            api = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
            def call(method, path, body=None):
                api.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
                response = api.getresponse()
                return response.status, response.read()
            assert call("GET", "/healthz")[0] == 200
            assert call("POST", "/v1/tasks", '{"id":"py-1","name":"From Python"}')[0] == 201
            stream = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                         server_hostname="localhost")
            stream.sendall(b"GET /v1/events?task=py-1 HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n")
            received = b""
            def read_until(marker):
                global received
                while marker not in received:
                    chunk = stream.recv(65536)
                    assert chunk, "stream closed"
                    received += chunk
            read_until(b"event: snapshot")
            assert b"HTTP/1.1 200" in received and b"text/event-stream" in received
            for step in range(1, 4):
                status, _ = call("POST", "/v1/tasks/py-1/progress", '{"increment":1}')
                assert status == 200, status
                read_until(b'"completed":%d' % step)
            print("ok", stream.version())
            """#
        let (status, output) = try Tool.run(OpenAPITests.pythonCommand + ["-c", script, "\(live.application.port)",
                                                                          certificate.certificatePath])
        #expect(status == 0, "\(output)")
        #expect(output.contains("ok TLSv1.3"), "\(output)")
    }

    @Test func plainHTTPToTheTLSPortFailsCleanlyAndDisturbsNoOne() throws {
        let certificate = try TestCertificate(in: directory, name: "server")
        let live = try daemon(certificate)
        let base = "https://127.0.0.1:\(live.application.port)"
        _ = try Tool.curl(certificate.certificatePath, [
            "-X", "POST", "-H", "Content-Type: application/json", "-d", #"{"id":"calm","name":"Calm"}"#, "\(base)/v1/tasks",
        ])
        let stream = try BackgroundStream(certificate: certificate.certificatePath, url: "\(base)/v1/events?task=calm",
                                          outputPath: directory.file("calm-stream.txt"))
        defer { stream.stop() }
        #expect(stream.waitFor("event: snapshot"), "\(stream.received)")
        for _ in 0..<3 {
            let plain = try TestHTTPClient(port: live.application.port)
            switch try plain.exchange(Array("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8)) {
            case .response(let response):
                #expect(response.status == 400)
                #expect(response.text.contains("speaks HTTPS"))
            case .closed:
                Issue.record("closed without the 400 that says why")
            }
        }
        let (progressStatus, _) = try Tool.curl(certificate.certificatePath, [
            "-X", "POST", "-H", "Content-Type: application/json", "-d", #"{"increment":5}"#, "\(base)/v1/tasks/calm/progress",
        ])
        #expect(progressStatus == 0)
        #expect(stream.waitFor("\"completed\":5"), "\(stream.received)")
        let (healthStatus, health) = try Tool.curl(certificate.certificatePath, ["\(base)/healthz"])
        #expect(healthStatus == 0 && health.contains("\"ok\""))
    }

    @Test func certificatesThatCannotServeAreRefusedAtStart() throws {
        let first = try TestCertificate(in: directory, name: "first")
        let second = try TestCertificate(in: directory, name: "second")
        let database = directory.file("refused.db")
        let cases: [([String], String)] = [
            (["--tls-cert", first.certificatePath, "--tls-key", second.keyPath], "does not belong to the certificate"),
            (["--tls-cert", directory.file("missing.crt"), "--tls-key", first.keyPath], "cannot be read"),
            (["--tls-cert", first.keyPath, "--tls-key", first.keyPath], "is not a PEM certificate"),
            (["--tls-cert", first.certificatePath, "--tls-key", first.certificatePath], "is not an unencrypted PEM private key"),
        ]
        for (arguments, message) in cases {
            let (status, _, errors) = try DaemonProcess.run(["--listen", "127.0.0.1:0", "--db", database] + arguments)
            #expect(status == 1, "\(arguments)")
            #expect(errors.contains("cannot start") && errors.contains(message), "\(errors)")
            // Checked before the database is opened: a mistyped file leaves no database behind.
            #expect(!FileManager.default.fileExists(atPath: database), "\(arguments)")
        }
        let (status, _, errors) = try DaemonProcess.run(["--db", database, "--tls-cert", first.certificatePath])
        #expect(status == 64)
        #expect(errors.contains("--tls-cert needs --tls-key"), "\(errors)")
    }

    @Test func sighupReloadsTheCertificateWhileStreamsGoOn() throws {
        let first = try TestCertificate(in: directory, name: "first")
        let second = try TestCertificate(in: directory, name: "second")
        let servedCertificate = directory.file("served.crt"), servedKey = directory.file("served.key")
        func serve(_ certificate: TestCertificate) throws {
            for (from, to) in [(certificate.certificatePath, servedCertificate), (certificate.keyPath, servedKey)] {
                try? FileManager.default.removeItem(atPath: to)
                try FileManager.default.copyItem(atPath: from, toPath: to)
            }
        }
        try serve(first)
        let daemon = try DaemonProcess(["--listen", "127.0.0.1:0", "--db", directory.file("reload.db"),
                                        "--tls-cert", servedCertificate, "--tls-key", servedKey],
                                       logPath: directory.file("reload.log"))
        defer { if daemon.process.isRunning { _ = daemon.stop(SIGTERM) } }
        #expect(daemon.log.contains("tls=on certificate_sha256=\(first.fingerprint)"), "\(daemon.log)")
        #expect(try TestCertificate.fingerprint(servedOn: daemon.port) == first.fingerprint)
        let base = "https://127.0.0.1:\(daemon.port)"
        _ = try Tool.curl(first.certificatePath, [
            "-X", "POST", "-H", "Content-Type: application/json", "-d", #"{"id":"renewed","name":"Renewed"}"#,
            "\(base)/v1/tasks",
        ])
        // Opened under the first certificate, and trusting only it.
        let stream = try BackgroundStream(certificate: first.certificatePath, url: "\(base)/v1/events?task=renewed",
                                          outputPath: directory.file("reload-stream.txt"))
        defer { stream.stop() }
        #expect(stream.waitFor("event: snapshot"), "\(stream.received)")

        func hangUpAndWait(for event: String, count: Int) {
            kill(daemon.process.processIdentifier, SIGHUP)
            let deadline = Date().addingTimeInterval(10)
            while daemon.log.components(separatedBy: "event=\(event)").count - 1 < count && Date() < deadline {
                usleep(20_000)
            }
        }
        /// Sends a progress increment over HTTPS with curl, trusting the second certificate.
        func increment(_ amount: Int) throws -> Int32 {
            try Tool.curl(second.certificatePath, [
                "-X", "POST", "-H", "Content-Type: application/json", "-d", #"{"increment":\#(amount)}"#,
                "\(base)/v1/tasks/renewed/progress",
            ]).0
        }
        try serve(second)
        hangUpAndWait(for: "tls.reloaded", count: 1)
        #expect(daemon.log.contains("event=tls.reloaded"), "\(daemon.log)")
        #expect(try TestCertificate.fingerprint(servedOn: daemon.port) == second.fingerprint)
        #expect(try increment(7) == 0)
        #expect(stream.waitFor("\"completed\":7"), "\(stream.received)")

        // A broken certificate file: the reload fails and the second certificate stays.
        try Data("not a certificate\n".utf8).write(to: URL(fileURLWithPath: servedCertificate))
        hangUpAndWait(for: "tls.reload_failed", count: 1)
        #expect(daemon.log.contains("event=tls.reload_failed"), "\(daemon.log)")
        #expect(try TestCertificate.fingerprint(servedOn: daemon.port) == second.fingerprint)
        #expect(try increment(1) == 0)
        #expect(stream.waitFor("\"completed\":8"), "\(stream.received)")
        // A stop with an HTTPS stream open ends it cleanly.
        #expect(daemon.stop(SIGTERM) == 0)
        #expect(daemon.log.contains("event=server.stopped"))
    }

    @Test func tlsFilesComeTogetherFromFlagsOrEnvironment() throws {
        func parse(_ arguments: [String], _ environment: [String: String] = [:]) throws -> Configuration {
            guard case .run(let configuration) = try Configuration.parse(arguments: arguments, environment: environment)
            else { throw UsageError("expected a run command") }
            return configuration
        }
        let plain = try parse([])
        #expect(plain.tlsCertificatePath == nil && plain.tlsKeyPath == nil)
        let flags = try parse(["--tls-cert", "/etc/h/cert.pem", "--tls-key=/etc/h/key.pem"])
        #expect(flags.tlsCertificatePath == "/etc/h/cert.pem" && flags.tlsKeyPath == "/etc/h/key.pem")
        let environment = try parse([], ["HEADWAY_TLS_CERT": "/e/cert.pem", "HEADWAY_TLS_KEY": "/e/key.pem"])
        #expect(environment.tlsCertificatePath == "/e/cert.pem" && environment.tlsKeyPath == "/e/key.pem")
        let mixed = try parse(["--tls-cert", "/f/cert.pem"], ["HEADWAY_TLS_KEY": "/e/key.pem"])
        #expect(mixed.tlsCertificatePath == "/f/cert.pem" && mixed.tlsKeyPath == "/e/key.pem")
        #expect(throws: UsageError("--tls-cert needs --tls-key (the certificate's private key)")) {
            try parse(["--tls-cert", "/f/cert.pem"])
        }
        #expect(throws: UsageError("--tls-key needs --tls-cert (the certificate of the key)")) {
            try parse([], ["HEADWAY_TLS_KEY": "/e/key.pem"])
        }
        for text in ["--tls-cert FILE", "--tls-key FILE", "HEADWAY_TLS_CERT", "HEADWAY_TLS_KEY", "SIGHUP reloads the TLS"] {
            #expect(Configuration.usage.contains(text), "\(text)")
        }
    }

    @Test func aTLSConnectionLateForItsClientHelloOrItsFirstHeadIsClosed() throws {
        let certificate = try TestCertificate(in: directory, name: "server")
        let live = try LiveDaemon(arguments: ["--tls-cert", certificate.certificatePath, "--tls-key", certificate.keyPath,
                                              "--head-timeout", "0.5"])
        // Half a ClientHello record, then nothing: closed by the accept loop.
        let halfHello = try TestHTTPClient(port: live.application.port)
        try halfHello.send([22, 3, 1, 0, 200, 1, 0])
        let started = Date()
        guard case .closed = try halfHello.exchange([]) else {
            Issue.record("a half ClientHello got a reply")
            return
        }
        #expect(Date().timeIntervalSince(started) < 4)
        // A whole handshake, then no request: closed by the daemon's head deadline.
        let script = #"""
            import socket, ssl, sys, time
            context = ssl.create_default_context(cafile=sys.argv[2])
            stream = context.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10),
                                         server_hostname="localhost")
            started = time.monotonic()
            try:
                closed = stream.recv(1) == b""
            except (ssl.SSLError, ConnectionError):
                closed = True
            print("closed" if closed else "open", round(time.monotonic() - started, 1))
            """#
        let (status, output) = try Tool.run(OpenAPITests.pythonCommand + ["-c", script, "\(live.application.port)",
                                                                          certificate.certificatePath])
        #expect(status == 0 && output.hasPrefix("closed"), "\(output)")
        let (healthStatus, _) = try Tool.curl(certificate.certificatePath, ["https://127.0.0.1:\(live.application.port)/healthz"])
        #expect(healthStatus == 0)
    }

    @Test func sighupWithoutTLSSaysThereIsNothingToReload() throws {
        let daemon = try DaemonProcess(["--listen", "127.0.0.1:0", "--db", directory.file("plain.db")],
                                       logPath: directory.file("plain.log"))
        #expect(daemon.log.contains("tls=off"))
        kill(daemon.process.processIdentifier, SIGHUP)
        let deadline = Date().addingTimeInterval(10)
        while !daemon.log.contains("event=tls.reload_skipped") && Date() < deadline { usleep(20_000) }
        #expect(daemon.log.contains("event=tls.reload_skipped"), "\(daemon.log)")
        #expect(daemon.process.isRunning)
        #expect(daemon.stop(SIGTERM) == 0)
    }

    /// The CPU time (user + system, in clock ticks) of each of this process's threads whose
    /// name begins with `prefix`, by thread id.
    private static func threadTicks(named prefix: String) -> [String: Int] {
        var ticks: [String: Int] = [:]
        for thread in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? [] {
            guard let stat = try? String(contentsOfFile: "/proc/self/task/\(thread)/stat", encoding: .utf8),
                  let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")"),
                  stat[stat.index(after: open)..<close].hasPrefix(prefix)
            else { continue }
            let fields = stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
            guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { continue }
            ticks[thread] = user + system
        }
        return ticks
    }

    /// A handshake the client leaves waiting (its ClientHello sent, the server's answer
    /// never read nor answered) must not keep the daemon's thread busy: libmicrohttpd's epoll
    /// loop spun at a whole core for as long as it waited (up to the head timeout). The
    /// bound is generous: it tells a spin from a thread that sleeps, not speed.
    @Test func aStalledHandshakeDoesNotKeepTheDaemonThreadBusy() throws {
        let certificate = try TestCertificate(in: directory, name: "server")
        let before = Set(Self.threadTicks(named: "MHD").keys)
        let live = try daemon(certificate)
        // libmicrohttpd names its thread from the thread itself, soon after the start.
        var daemonThreads = Set<String>()
        for _ in 0..<200 where daemonThreads.isEmpty {
            daemonThreads = Set(Self.threadTicks(named: "MHD").keys).subtracting(before)
            if daemonThreads.isEmpty { usleep(10_000) }
        }
        #expect(!daemonThreads.isEmpty)
        let script = #"""
            import socket, ssl, sys, time
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            session = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
            try:
                session.do_handshake()
            except ssl.SSLWantReadError:
                pass
            stalled = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
            stalled.sendall(outgoing.read())
            time.sleep(0.3)
            answer = stalled.recv(65536)
            print("ready", len(answer), flush=True)
            time.sleep(float(sys.argv[2]))
            print("done", flush=True)
            """#
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        holder.arguments = OpenAPITests.pythonCommand + ["-c", script, "\(live.application.port)", "3"]
        let output = Pipe()
        holder.standardOutput = output
        holder.standardError = FileHandle.nullDevice
        try holder.run()
        defer { if holder.isRunning { holder.terminate() }; holder.waitUntilExit() }
        // Once the server's answer has come, the handshake waits for the client.
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line += chunk
        }
        let ready = String(decoding: line, as: UTF8.self)
        #expect(ready.hasPrefix("ready") && !ready.hasPrefix("ready 0"), "\(ready)")
        func daemonTicks() -> Int { Self.threadTicks(named: "MHD").filter { daemonThreads.contains($0.key) }.values.reduce(0, +) }
        let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
        let started = Date(), startTicks = daemonTicks()
        usleep(1_500_000)
        let busy = Double(daemonTicks() - startTicks) / ticksPerSecond
        let wall = Date().timeIntervalSince(started)
        #expect(busy < 0.3 * wall, "the daemon's thread was busy \(busy) s of \(wall) s while a handshake waited")
        let (healthStatus, _) = try Tool.curl(certificate.certificatePath, ["https://127.0.0.1:\(live.application.port)/healthz"])
        #expect(healthStatus == 0)
    }

    /// TLS 1.2 and 1.3 only, with forward-secret AEAD ciphers, for ECDSA and RSA certificates.
    @Test func onlyTLS12And13WithForwardSecretAEADCiphersAreAccepted() throws {
        for rsa in [false, true] {
            let certificate = try TestCertificate(in: directory, name: rsa ? "rsa" : "ecdsa", rsa: rsa)
            let live = try daemon(certificate)
            func handshake(_ options: [String]) throws -> (accepted: Bool, output: String) {
                let (_, output) = try Tool.run([
                    "bash", "-c", "openssl s_client -connect 127.0.0.1:\(live.application.port) -servername localhost "
                        + options.joined(separator: " ") + " </dev/null 2>&1",
                ])
                // A handshake that completes names its cipher; a refused one says "(NONE)" or fails.
                let accepted = output.contains("Cipher is ") && !output.contains("Cipher is (NONE)")
                return (accepted, output)
            }
            let kind = rsa ? "RSA" : "ECDSA"
            // Old versions and ciphers, offered with OpenSSL's own restrictions lifted.
            for refused in [["-tls1", "-cipher", "'DEFAULT:@SECLEVEL=0'"], ["-tls1_1", "-cipher", "'DEFAULT:@SECLEVEL=0'"],
                            ["-tls1_2", "-cipher", "AES128-SHA"], ["-tls1_2", "-cipher", "AES128-GCM-SHA256"],
                            ["-tls1_2", "-cipher", "'ECDHE-\(kind)-AES128-SHA256:ECDHE-\(kind)-AES128-SHA'"],
                            ["-tls1_2", "-cipher", "DHE-RSA-AES128-GCM-SHA256"]] {
                let (accepted, output) = try handshake(refused)
                #expect(!accepted, "\(kind) \(refused): \(output)")
            }
            for allowed in [["-tls1_2", "-cipher", "ECDHE-\(kind)-AES128-GCM-SHA256"],
                            ["-tls1_2", "-cipher", "ECDHE-\(kind)-CHACHA20-POLY1305"], ["-tls1_3"]] {
                let (accepted, output) = try handshake(allowed)
                #expect(accepted, "\(kind) \(allowed): \(output)")
            }
            let (curlStatus, health) = try Tool.curl(certificate.certificatePath, ["https://127.0.0.1:\(live.application.port)/healthz"])
            #expect(curlStatus == 0 && health.contains("\"ok\""), "\(kind): \(health)")
        }
    }

    /// A certificate outside its dates is served, with a warning at start and at each
    /// reload that loads one.
    @Test func aCertificateOutsideItsDatesIsServedWithAWarning() throws {
        let expired = try TestCertificate(in: directory, name: "expired", validFrom: "20200101000000Z", until: "20200201000000Z")
        let future = try TestCertificate(in: directory, name: "future", validFrom: "20700101000000Z", until: "20710101000000Z")
        let current = try TestCertificate(in: directory, name: "current")
        let servedCertificate = directory.file("dated.crt"), servedKey = directory.file("dated.key")
        func serve(_ certificate: TestCertificate) throws {
            for (from, to) in [(certificate.certificatePath, servedCertificate), (certificate.keyPath, servedKey)] {
                try? FileManager.default.removeItem(atPath: to)
                try FileManager.default.copyItem(atPath: from, toPath: to)
            }
        }
        try serve(expired)
        let daemon = try DaemonProcess(["--listen", "127.0.0.1:0", "--db", directory.file("dated.db"),
                                        "--tls-cert", servedCertificate, "--tls-key", servedKey],
                                       logPath: directory.file("dated.log"))
        defer { if daemon.process.isRunning { _ = daemon.stop(SIGTERM) } }
        #expect(daemon.log.contains("event=tls.certificate_expired"), "\(daemon.log)")
        #expect(daemon.log.contains("not_after=2020-02-01T00:00:00Z"), "\(daemon.log)")
        #expect(try TestCertificate.fingerprint(servedOn: daemon.port) == expired.fingerprint)
        func hangUpAndWait(reloads: Int) {
            kill(daemon.process.processIdentifier, SIGHUP)
            let deadline = Date().addingTimeInterval(10)
            while daemon.log.components(separatedBy: "event=tls.reloaded").count - 1 < reloads && Date() < deadline {
                usleep(20_000)
            }
            usleep(100_000)
        }
        try serve(future)
        hangUpAndWait(reloads: 1)
        #expect(daemon.log.contains("event=tls.certificate_not_yet_valid"), "\(daemon.log)")
        #expect(daemon.log.contains("not_before=2070-01-01T00:00:00Z"), "\(daemon.log)")
        try serve(current)
        hangUpAndWait(reloads: 2)
        #expect(daemon.log.components(separatedBy: "event=tls.certificate_").count - 1 == 2, "\(daemon.log)")
        #expect(daemon.stop(SIGTERM) == 0)
    }

    /// Replaced credentials are freed once no handshake can use them: those replaced more
    /// than the retention ago, at the next reload; all of them at the stop.
    @Test func replacedCredentialsAreFreedAfterTheirRetention() throws {
        let certificate = try TestCertificate(in: directory, name: "server")
        let clock = ManualNanoseconds()
        let certificates = try TLSCertificates(
            files: TLSCertificateFiles(certificatePath: certificate.certificatePath, keyPath: certificate.keyPath),
            retentionNanoseconds: 60_000_000_000, now: { clock.value })
        for _ in 0..<3 { _ = try certificates.reload() }
        #expect(certificates.supersededCount == 3)
        clock.value += 30_000_000_000
        _ = try certificates.reload()
        #expect(certificates.supersededCount == 4)  // none is 60 s old yet
        clock.value += 40_000_000_000
        _ = try certificates.reload()
        #expect(certificates.supersededCount == 2)  // the three of 70 s ago are freed
        clock.value += 61_000_000_000
        _ = try certificates.reload()
        #expect(certificates.supersededCount == 1)  // only the one just replaced
        certificates.releaseSuperseded()
        #expect(certificates.supersededCount == 0)
        #expect(certificates.fingerprint == certificate.fingerprint)

        // A daemon started and stopped keeps none.
        var configuration = MicroHTTPServer.Configuration()
        configuration.port = 0
        configuration.tls = TLSCertificateFiles(certificatePath: certificate.certificatePath, keyPath: certificate.keyPath)
        let server = try MicroHTTPServer(configuration: configuration, pipeline: HTTPPipeline { _, responder in responder.respond(HTTPResponse(status: 404)) })
        try server.prepare()
        for _ in 0..<5 { _ = try server.reloadCertificate() }
        #expect(server.certificates?.supersededCount == 5)
        let runner = Thread { server.run() }
        runner.start()
        server.requestStop()
        let deadline = Date().addingTimeInterval(10)
        while server.certificates?.supersededCount != 0 && Date() < deadline { usleep(10_000) }
        #expect(server.certificates?.supersededCount == 0)
    }

    @Test func certificateValidityNamesItsProblem() {
        let validity = TLSCertificateValidity(notBefore: Date(timeIntervalSince1970: 1_000),
                                              notAfter: Date(timeIntervalSince1970: 2_000))
        #expect(validity.problem(at: Date(timeIntervalSince1970: 999)) == .notYetValid)
        #expect(validity.problem(at: Date(timeIntervalSince1970: 1_500)) == nil)
        #expect(validity.problem(at: Date(timeIntervalSince1970: 2_001)) == .expired)
    }
}

/// A monotonic clock in nanoseconds that tests move by hand.
final class ManualNanoseconds: @unchecked Sendable {  // moved by one test thread only
    var value: UInt64 = 1_000_000_000
}
