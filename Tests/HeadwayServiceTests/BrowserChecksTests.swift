import Foundation
import HeadwayCore
import HeadwayStore
import HeadwayTestSupport
import Lifecycle
import Testing
@testable import Daemon
@testable import HeadwayAPI
@testable import Telemetry

/// What web pages may do to a daemon on this machine: a foreign `Host` (DNS rebinding) is
/// 400, a foreign `Origin` may change nothing (403), a POST must declare JSON even with no
/// body (415), in that order, and `--cors-origin` pages get CORS replies and preflights.
/// Every refusal leaves the task as it was.
@Suite(.serialized) struct BrowserChecksTests {
    /// A daemon with a running task `t`.
    private func daemonWithTask(_ arguments: [String] = []) throws -> LiveDaemon {
        let daemon = try LiveDaemon(arguments: arguments)
        try daemon.register(#"{"id":"t","name":"Copy photos","total":100}"#)
        return daemon
    }

    /// Sends one request with exactly these header lines: the `Host` given (none when
    /// nil), no `Content-Type` unless `headers` has one.
    private func send(_ daemon: LiveDaemon, _ method: String, _ path: String, host: String?,
                      _ headers: [(String, String)] = [], body: String? = nil) throws -> TestResponse {
        var head = "\(method) \(path) HTTP/1.1\r\n"
        if let host { head += "Host: \(host)\r\n" }
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if let body { head += "Content-Length: \(body.utf8.count)\r\n" }
        let client = try daemon.connect()
        try client.send(head + "\r\n" + (body ?? ""))
        return try client.readResponse()
    }

    /// The daemon's own `Host`.
    private func own(_ daemon: LiveDaemon) -> String { "127.0.0.1:\(daemon.application.port)" }

    private let json = ("Content-Type", "application/json")

    /// Whether the task is untouched: running, no cancel requested, as `before`.
    private func expectUnchanged(_ daemon: LiveDaemon, _ before: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let task = try daemon.request("GET", "/v1/tasks/t")
        #expect(task.status == 200, "the task is gone", sourceLocation: sourceLocation)
        #expect(task.json["state"] as? String == "running", sourceLocation: sourceLocation)
        #expect(task.json["cancel_requested"] as? Bool == false, sourceLocation: sourceLocation)
        #expect(task.text == before, "a refused request changed the task", sourceLocation: sourceLocation)
    }

    // MARK: - Content-Type

    @Test func anEmptyPostWithoutContentTypeIsRefusedAndCancelsNothing() throws {
        let daemon = try daemonWithTask()
        let before = try daemon.snapshot("t")
        let refused = try send(daemon, "POST", "/v1/tasks/t/cancel", host: own(daemon))
        #expect(refused.status == 415)
        #expect(refused.problemCode == "unsupported_media_type")
        #expect(refused.headers["content-type"] == "application/problem+json")
        #expect((refused.json["detail"] as? String)?.contains("even with an empty body") == true, "\(refused.text)")
        let announcedEmpty = try send(daemon, "POST", "/v1/tasks/t/cancel", host: own(daemon), body: "")
        #expect(announcedEmpty.status == 415)
        // In process too: the same pipeline.
        let inProcess = try InProcessClient(pipeline: daemon.application.pipeline)
            .request("POST", "/v1/tasks/t/cancel", json: nil, headers: [])
        #expect(inProcess.status == 415)
        try expectUnchanged(daemon, before)
        // Declared, the same empty body cancels.
        let canceled = try send(daemon, "POST", "/v1/tasks/t/cancel", host: own(daemon), [json])
        #expect(canceled.status == 202)
        #expect(canceled.json["cancel_requested"] as? Bool == true)
    }

    @Test func formsAndPlainTextPostsAreRefused() throws {
        let daemon = try daemonWithTask()
        let before = try daemon.snapshot("t")
        let posts: [(String, String)] = [
            ("application/x-www-form-urlencoded", "completed=50"),
            ("multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"completed\"\r\n\r\n50\r\n--b--\r\n"),
            ("text/plain", #"{"completed":50}"#),
            ("text/plain;charset=UTF-8", ""),
            ("application/x-www-form-urlencoded", ""),
        ]
        for (contentType, body) in posts {
            for path in ["/v1/tasks/t/progress", "/v1/tasks/t/cancel"] {
                let refused = try send(daemon, "POST", path, host: own(daemon), [("Content-Type", contentType)], body: body)
                #expect(refused.status == 415, "\(contentType) to \(path): \(refused.text)")
                #expect(refused.problemCode == "unsupported_media_type")
            }
        }
        try expectUnchanged(daemon, before)
        // Another JSON media type is JSON.
        let vendorJSON = try send(daemon, "POST", "/v1/tasks/t/progress", host: own(daemon),
                                  [("Content-Type", "application/vnd.headway+json")], body: #"{"completed":5}"#)
        #expect(vendorJSON.status == 200, "\(vendorJSON.text)")
    }

    @Test func aPostNoRouteTakesIsAnsweredByRoutingNotByItsContentType() throws {
        let daemon = try daemonWithTask()
        // A path whose routes take other methods: 405 with Allow, with or without a JSON body.
        for headers in [[], [json]] {
            let getOnly = try send(daemon, "POST", "/healthz", host: own(daemon), headers)
            #expect(getOnly.status == 405, "\(getOnly.text)")
            #expect(getOnly.headers["allow"] == "GET, HEAD")
            let task = try send(daemon, "POST", "/v1/tasks/t", host: own(daemon), headers)
            #expect(task.status == 405, "\(task.text)")
        }
        // No route at all: 404.
        #expect(try send(daemon, "POST", "/v1/nothing", host: own(daemon)).status == 404)
        // A route that takes the POST still wants JSON declared.
        #expect(try send(daemon, "POST", "/v1/tasks/t/cancel", host: own(daemon)).status == 415)
    }

    /// What the HTTP layer refuses before any route is answered as such, not as a missing
    /// JSON media type: ambiguous framing is 400 `bad_framing` (and the connection closed),
    /// a body announced over the limit 413 `body_too_large`, with or without a Content-Type.
    @Test func theHTTPLayersRefusalsAreNotMaskedByTheMediaType() throws {
        let daemon = try daemonWithTask()
        let before = try daemon.snapshot("t")
        for contentType in [[], [("Content-Type", "text/plain")], [json]] {
            let twoLengths = try send(daemon, "POST", "/v1/tasks/t/cancel", host: own(daemon),
                                      contentType + [("Content-Length", "2"), ("Content-Length", "2")], body: nil)
            #expect(twoLengths.status == 400 && twoLengths.problemCode == "bad_framing", "\(contentType): \(twoLengths.text)")
            #expect(twoLengths.headers["connection"]?.lowercased() == "close")
            let tooLarge = try send(daemon, "POST", "/v1/tasks/t/cancel", host: own(daemon),
                                    contentType + [("Content-Length", "99999999")], body: nil)
            #expect(tooLarge.status == 413 && tooLarge.problemCode == "body_too_large", "\(contentType): \(tooLarge.text)")
        }
        try expectUnchanged(daemon, before)
    }

    // MARK: - Host

    @Test func aHostNotServedIsRefusedAndChangesNothing() throws {
        let daemon = try daemonWithTask()
        let port = daemon.application.port
        let before = try daemon.snapshot("t")
        let otherPort = port == 65535 ? 1 : port + 1
        let hosts = ["evil.example:\(port)", "evil.example", "127.0.0.1.nip.io:\(port)", "localhost.evil.example:\(port)",
                     "127.0.0.1:\(otherPort)", "localhost:\(otherPort)", "[::1]:\(otherPort)", "192.168.1.20:\(port)",
                     "localhost:", "localhost:0", "localhost:99999", "[::1", "::1"]
        for host in hosts {
            for (method, path) in [("POST", "/v1/tasks/t/cancel"), ("DELETE", "/v1/tasks/t"), ("GET", "/v1/tasks/t"),
                                   ("GET", "/healthz")] {
                let refused = try send(daemon, method, path, host: host, method == "POST" ? [json] : [])
                #expect(refused.status == 400, "\(method) \(path) with Host \(host): \(refused.status)")
                #expect(refused.problemCode == "host_not_allowed", "Host \(host): \(refused.text)")
            }
        }
        let rebound = try send(daemon, "POST", "/v1/tasks/t/cancel", host: "evil.example:\(port)", [json])
        let detail = rebound.json["detail"] as? String ?? ""
        #expect(detail.contains("'evil.example:\(port)'") && detail.contains("--public-url https://evil.example:\(port)"),
                "\(detail)")
        // An event stream is refused the same way (before it starts).
        let stream = try send(daemon, "GET", "/v1/events", host: "evil.example:\(port)", [("Accept", "text/event-stream")])
        #expect(stream.status == 400 && stream.problemCode == "host_not_allowed")
        try expectUnchanged(daemon, before)
    }

    @Test func loopbackNamesWithThePortServedAreAccepted() throws {
        let daemon = try daemonWithTask()
        let port = daemon.application.port
        // Spaces and tabs around a value are not part of it (RFC 9110 §5.5).
        for host in ["localhost:\(port)", "127.0.0.1:\(port)", "[::1]:\(port)", "LocalHost:\(port)", "127.0.0.1", "localhost",
                     "127.0.0.1:\(port) \t "] {
            #expect(try send(daemon, "GET", "/v1/tasks/t", host: host).status == 200, "Host \(host)")
            let heartbeat = try send(daemon, "POST", "/v1/tasks/t/heartbeat", host: host, [json])
            #expect(heartbeat.status == 200, "Host \(host): \(heartbeat.text)")
        }
    }

    @Test func thePublicURLsHostsAreServedWithTheirPorts() throws {
        let daemon = try daemonWithTask(["--public-url", "https://Headway.Example.com",
                                         "--public-url=http://status.example.org:8081/headway/"])
        for host in ["headway.example.com", "headway.example.com:443", "HEADWAY.example.com",
                     "status.example.org:8081", "status.example.org"] {
            #expect(try send(daemon, "GET", "/v1/tasks/t", host: host).status == 200, "Host \(host)")
        }
        for host in ["headway.example.com:8443", "status.example.org:80", "example.com", "evil.example"] {
            #expect(try send(daemon, "GET", "/v1/tasks/t", host: host).problemCode == "host_not_allowed", "Host \(host)")
        }
        // Its pages are the daemon's own: they may change tasks, and need no CORS.
        let fromPublic = try send(daemon, "POST", "/v1/tasks/t/heartbeat", host: "headway.example.com",
                                  [json, ("Origin", "https://headway.example.com")])
        #expect(fromPublic.status == 200)
        #expect(fromPublic.headers["access-control-allow-origin"] == nil)
        #expect(try send(daemon, "POST", "/v1/tasks/t/heartbeat", host: "status.example.org:8081",
                         [json, ("Origin", "http://status.example.org:8081")]).status == 200)
        // Not another scheme or port of the same name.
        for origin in ["http://headway.example.com", "https://headway.example.com:8443"] {
            let refused = try send(daemon, "POST", "/v1/tasks/t/heartbeat", host: "headway.example.com", [json, ("Origin", origin)])
            #expect(refused.problemCode == "origin_not_allowed", "Origin \(origin)")
        }
    }

    /// A wildcard listen (`0.0.0.0`, `::`) answers to every address written out, never to a
    /// name `--public-url` does not give; a loopback listen only to loopback names.
    @Test func aWildcardListenServesAddressLiteralsButNoUnlistedName() throws {
        let publicOrigin = WebOrigin(scheme: "https", host: "headway.example.com", port: 443)
        let authority = { (text: String) in try #require(Authority(Substring(text))) }
        for wildcard in ["0.0.0.0", "::"] {
            let names = ServedNames(listenHost: wildcard, publicOrigins: [publicOrigin])
            for served in ["192.0.2.7:8080", "[2001:db8::1]:8080", "10.0.0.1", "localhost:8080", "127.0.0.1:8080",
                           "headway.example.com"] {
                #expect(names.serves(try authority(served), port: 8080), "\(wildcard): \(served)")
            }
            for refused in ["evil.example:8080", "192.0.2.7:9090", "headway.example.com:8080", "host-192.0.2.7:8080"] {
                #expect(!names.serves(try authority(refused), port: 8080), "\(wildcard): \(refused)")
            }
            // An address literal is served as Host, but a page on it is not the daemon's own
            // (any machine's page on that port would be): only loopback names and public URLs.
            #expect(!names.isOwn(WebOrigin(scheme: "http", host: "192.0.2.7", port: 8080), port: 8080))
            #expect(!names.isOwn(WebOrigin(scheme: "http", host: "203.0.113.9", port: 8080), port: 8080))
            #expect(!names.isOwn(WebOrigin(scheme: "http", host: "2001:db8::1", port: 8080), port: 8080))
            #expect(!names.isOwn(WebOrigin(scheme: "http", host: wildcard, port: 8080), port: 8080))
            for loopbackName in ["127.0.0.1", "localhost", "::1"] {
                #expect(names.isOwn(WebOrigin(scheme: "http", host: loopbackName, port: 8080), port: 8080))
                #expect(!names.isOwn(WebOrigin(scheme: "http", host: loopbackName, port: 3000), port: 8080))
            }
            #expect(!names.isOwn(WebOrigin(scheme: "http", host: "192.0.2.7", port: 3000), port: 8080))
            #expect(!names.isOwn(WebOrigin(scheme: "http", host: "evil.example", port: 8080), port: 8080))
            #expect(names.isOwn(publicOrigin, port: 8080))
        }
        let loopback = ServedNames(listenHost: "127.0.0.1", publicOrigins: [])
        #expect(!loopback.serves(try authority("192.0.2.7:8080"), port: 8080))
        #expect(loopback.serves(try authority("[::1]:8080"), port: 8080))
    }

    /// The `Host` text last served is remembered with its port: another text, or the same
    /// one on another port, is judged afresh.
    @Test func aRememberedHostIsServedOnlyAsItWasWrittenAndOnItsPort() {
        let names = ServedNames(listenHost: "127.0.0.1", publicOrigins: [])
        for _ in 0..<2 {
            #expect(names.serves(host: "127.0.0.1:8080", port: 8080))
            #expect(!names.serves(host: "127.0.0.1:8080", port: 9090))
            #expect(!names.serves(host: "127.0.0.1:9090", port: 8080))
            #expect(!names.serves(host: "evil.example:8080", port: 8080))
            #expect(!names.serves(host: "127.0.0.1:8080x", port: 8080))
            #expect(names.serves(host: "LOCALHOST:8080", port: 8080))
            #expect(!names.serves(host: "127.0.0.1:8080", port: 9090))
        }
    }

    // MARK: - Origin

    @Test func aForeignOriginMayChangeNothing() throws {
        let daemon = try daemonWithTask()
        let port = daemon.application.port
        let before = try daemon.snapshot("t")
        let otherPort = port == 65535 ? 1 : port + 1
        let origins = ["https://evil.example", "null", "http://127.0.0.1:\(otherPort)", "http://localhost:\(otherPort)",
                       "http://evil.example:\(port)", "http://127.0.0.1", "not an origin", "file://"]
        for origin in origins {
            for (method, path) in [("POST", "/v1/tasks/t/cancel"), ("DELETE", "/v1/tasks/t"),
                                   ("POST", "/v1/tasks/t/progress")] {
                let refused = try send(daemon, method, path, host: own(daemon), [json, ("Origin", origin)],
                                       body: path.hasSuffix("progress") ? #"{"completed":50}"# : nil)
                #expect(refused.status == 403, "\(method) \(path) from \(origin): \(refused.text)")
                #expect(refused.problemCode == "origin_not_allowed")
                #expect(refused.headers["access-control-allow-origin"] == nil)
            }
        }
        let foreign = try send(daemon, "POST", "/v1/tasks/t/cancel", host: own(daemon), [json, ("Origin", "https://evil.example")])
        #expect((foreign.json["detail"] as? String)?.contains("--cors-origin https://evil.example") == true, "\(foreign.text)")
        let opaque = try send(daemon, "POST", "/v1/tasks/t/cancel", host: own(daemon), [json, ("Origin", "null")])
        #expect((opaque.json["detail"] as? String)?.contains("never") == true, "\(opaque.text)")
        try expectUnchanged(daemon, before)
        // Reading is allowed (the page cannot see the reply without CORS headers).
        let read = try send(daemon, "GET", "/v1/tasks/t", host: own(daemon), [("Origin", "https://evil.example")])
        #expect(read.status == 200)
        #expect(read.headers.keys.filter { $0.hasPrefix("access-control-") }.isEmpty, "\(read.headers)")
    }

    @Test func theDaemonsOwnOriginMayChangeTasks() throws {
        let daemon = try daemonWithTask()
        let port = daemon.application.port
        for origin in ["http://127.0.0.1:\(port)", "http://localhost:\(port)", "http://[::1]:\(port)"] {
            let heartbeat = try send(daemon, "POST", "/v1/tasks/t/heartbeat", host: own(daemon), [json, ("Origin", origin)])
            #expect(heartbeat.status == 200, "\(origin): \(heartbeat.text)")
            #expect(heartbeat.headers["access-control-allow-origin"] == nil)
            #expect(heartbeat.headers["vary"] == nil)
        }
        #expect(try send(daemon, "DELETE", "/v1/tasks/t", host: "localhost:\(port)",
                         [("Origin", "http://localhost:\(port)")]).status == 204)
    }

    // MARK: - CORS

    @Test func aCORSOriginMayCallTheAPIAndReadItsReplies() throws {
        let daemon = try daemonWithTask(["--cors-origin", "https://dash.example.com", "--cors-origin", "http://localhost:3000"])
        let before = try daemon.snapshot("t")
        let dash = ("Origin", "https://dash.example.com")
        // A refused change (no Content-Type) is readable by the page, and changes nothing.
        let undeclared = try send(daemon, "POST", "/v1/tasks/t/cancel", host: own(daemon), [dash])
        #expect(undeclared.status == 415)
        #expect(undeclared.headers["access-control-allow-origin"] == "https://dash.example.com")
        try expectUnchanged(daemon, before)
        // Another origin may still change nothing.
        let evil = try send(daemon, "POST", "/v1/tasks/t/cancel", host: own(daemon), [json, ("Origin", "https://evil.example")])
        #expect(evil.status == 403)
        #expect(evil.headers["access-control-allow-origin"] == nil)
        #expect(evil.headers["vary"] == "Origin")
        try expectUnchanged(daemon, before)
        // Reading from another origin works, without CORS headers.
        let read = try send(daemon, "GET", "/v1/tasks/t", host: own(daemon), [("Origin", "https://evil.example")])
        #expect(read.status == 200)
        #expect(read.headers["access-control-allow-origin"] == nil && read.headers["access-control-expose-headers"] == nil)
        #expect(read.headers["vary"] == "Origin")

        let registered = try send(daemon, "POST", "/v1/tasks", host: own(daemon), [json, ("Origin", "http://localhost:3000")],
                                  body: #"{"id":"u","name":"Upload"}"#)
        #expect(registered.status == 201)
        #expect(registered.headers["access-control-allow-origin"] == "http://localhost:3000")
        let canceled = try send(daemon, "POST", "/v1/tasks/t/cancel", host: own(daemon), [json, dash])
        #expect(canceled.status == 202)
        #expect(canceled.json["cancel_requested"] as? Bool == true)
        #expect(canceled.headers["access-control-allow-origin"] == "https://dash.example.com")
        #expect(canceled.headers["vary"] == "Origin")
        let exposed = canceled.headers["access-control-expose-headers"] ?? ""
        for header in ["Location", "X-Request-Id", "Headway-Unchanged", "Retry-After"] {
            #expect(exposed.contains(header), "\(exposed)")
        }
        #expect(canceled.headers["access-control-allow-credentials"] == nil)
        // An event stream too: EventSource on the dashboard reads it.
        let stream = try daemon.subscribe(headers: [dash])
        #expect(stream.status == 200)
        #expect(stream.headers["access-control-allow-origin"] == "https://dash.example.com")
        #expect(try stream.nextEvent()?.event == "snapshot")
        let foreignStream = try daemon.subscribe(headers: [("Origin", "https://evil.example")])
        #expect(foreignStream.status == 200)
        #expect(foreignStream.headers["access-control-allow-origin"] == nil)
        // The origin as the flag wrote it or with the default port written out is the same one.
        #expect(try send(daemon, "GET", "/v1/tasks/t", host: own(daemon),
                         [("Origin", "https://dash.example.com:443")]).headers["access-control-allow-origin"] != nil)
    }

    @Test func preflightsOfAllowedOriginsAreAnsweredAndOthersRefused() throws {
        let daemon = try daemonWithTask(["--cors-origin", "https://dash.example.com"])
        let before = try daemon.snapshot("t")
        let allowed = try send(daemon, "OPTIONS", "/v1/tasks/t/cancel", host: own(daemon), [
            ("Origin", "https://dash.example.com"), ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "authorization,content-type"),
        ])
        #expect(allowed.status == 204)
        #expect(allowed.body.isEmpty)
        #expect(allowed.headers["access-control-allow-origin"] == "https://dash.example.com")
        #expect(allowed.headers["access-control-allow-methods"] == "GET, HEAD, POST, DELETE")
        #expect(allowed.headers["access-control-allow-headers"] == "Authorization, Content-Type, Last-Event-ID, X-Request-Id")
        #expect(allowed.headers["access-control-max-age"] == "600")
        #expect(allowed.headers["vary"]?.hasPrefix("Origin") == true)
        #expect(allowed.headers["access-control-allow-credentials"] == nil)
        let stream = try send(daemon, "OPTIONS", "/v1/events", host: own(daemon), [
            ("Origin", "https://dash.example.com"), ("Access-Control-Request-Method", "GET"),
            ("Access-Control-Request-Headers", "last-event-id"),
        ])
        #expect(stream.status == 204)
        for origin in ["https://evil.example", "null", "https://dash.example.com.evil.example"] {
            let refused = try send(daemon, "OPTIONS", "/v1/tasks/t", host: own(daemon),
                                   [("Origin", origin), ("Access-Control-Request-Method", "DELETE")])
            #expect(refused.status == 403 && refused.problemCode == "origin_not_allowed", "\(origin): \(refused.text)")
            #expect(refused.headers["access-control-allow-origin"] == nil)
            #expect(refused.headers["access-control-allow-methods"] == nil)
        }
        let foreignHost = try send(daemon, "OPTIONS", "/v1/tasks/t", host: "evil.example",
                                   [("Origin", "https://dash.example.com"), ("Access-Control-Request-Method", "DELETE")])
        #expect(foreignHost.problemCode == "host_not_allowed")
        // OPTIONS that is no preflight is a method no route takes.
        #expect(try send(daemon, "OPTIONS", "/v1/tasks/t", host: own(daemon), [("Origin", "https://dash.example.com")]).status == 405)
        try expectUnchanged(daemon, before)
    }

    @Test func anyOriginIsNeverAllowedCredentials() throws {
        var secret = ""
        let daemon = try LiveDaemon(arguments: ["--cors-origin", "*"], prepare: { path in
            secret = try TokenCommand.create(TokenRequest(name: "admin", scopes: [.admin]), expiresInSeconds: nil,
                                             databasePath: path)
        })
        let auth = ("Authorization", "Bearer \(secret)")
        #expect(try daemon.request("POST", "/v1/tasks", json: #"{"id":"t","name":"T"}"#, headers: [auth]).status == 201)
        let anyone = ("Origin", "https://anyone.example")
        let preflight = try send(daemon, "OPTIONS", "/v1/tasks/t/cancel", host: own(daemon),
                                 [anyone, ("Access-Control-Request-Method", "POST")])
        #expect(preflight.status == 204)
        #expect(preflight.headers["access-control-allow-origin"] == "*")
        #expect(preflight.headers["access-control-allow-credentials"] == nil)
        let read = try send(daemon, "GET", "/v1/tasks/t", host: own(daemon), [anyone, auth])
        #expect(read.headers["access-control-allow-origin"] == "*")
        #expect(read.headers["access-control-allow-credentials"] == nil)
        // An opaque origin is refused even so.
        #expect(try send(daemon, "POST", "/v1/tasks/t/cancel", host: own(daemon), [json, auth, ("Origin", "null")]).status == 403)
        #expect(try send(daemon, "OPTIONS", "/v1/tasks/t/cancel", host: own(daemon),
                         [("Origin", "null"), ("Access-Control-Request-Method", "POST")]).status == 403)
        #expect(try daemon.request("GET", "/v1/tasks/t", headers: [auth]).json["cancel_requested"] as? Bool == false)
        let canceled = try send(daemon, "POST", "/v1/tasks/t/cancel", host: own(daemon), [json, auth, anyone])
        #expect(canceled.status == 202)
        #expect(canceled.headers["access-control-allow-origin"] == "*")
        #expect(canceled.headers["access-control-allow-credentials"] == nil)
    }

    /// `--cors-origin '*'` on a database without tokens would let any page make the first
    /// admin token: the start is refused, saying how to make one.
    @Test func anyOriginIsRefusedAtStartWithoutTokens() throws {
        #expect(throws: StartRefusal.self) { _ = try LiveDaemon(arguments: ["--cors-origin", "*"]) }
        let directory = TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.file("h.db")
        let (status, _, errors) = try DaemonProcess.run(["--cors-origin", "*", "--db", path])
        #expect(status == 1)
        #expect(errors.contains("--cors-origin '*'") && errors.contains("headwayd token create --scope admin --db \(path)"),
                "\(errors)")
        #expect(!FileManager.default.fileExists(atPath: path), "a refused start created the database")
        // An exact origin is the operator's explicit trust: allowed, with a warning.
        let lines = Locked<[String]>([])
        let command = try Configuration.parse(arguments: ["--listen", "127.0.0.1:0", "--db", path,
                                                          "--cors-origin", "https://dash.example.com"], environment: [:])
        guard case .run(let configuration) = command else { throw TestHTTPError("not a run configuration") }
        let application = try buildApplication(configuration, logger: Logger(minimumLevel: .info, sink: { line in
            lines.withLock { $0.append(line) }
        }))
        application.shutdown()
        #expect(lines.withLock { $0.contains { $0.contains("security.cors_without_tokens") } })
    }

    /// Should the tokens vanish behind the daemon's back (and the flag that they are
    /// required be cleared by hand), `*` is no longer honoured while the daemon is tokenless.
    @Test func anyOriginIsNotHonouredWhileTokenless() throws {
        let daemon = try LiveDaemon(arguments: ["--cors-origin", "*"], prepare: { path in
            _ = try TokenCommand.create(TokenRequest(name: "admin", scopes: [.admin]), expiresInSeconds: nil, databasePath: path)
        })
        let database = try Database(path: daemon.application.configuration.databasePath)
        try database.run("DELETE FROM tokens", [])
        try database.run("UPDATE token_state SET required = 0", [])
        database.close()
        daemon.application.refreshTokens()
        #expect(try daemon.request("GET", "/v1/tasks").status == 200, "the daemon is tokenless now")
        let anyone = ("Origin", "https://anyone.example")
        let preflight = try send(daemon, "OPTIONS", "/v1/tokens", host: own(daemon),
                                 [anyone, ("Access-Control-Request-Method", "POST")])
        #expect(preflight.status == 403 && preflight.headers["access-control-allow-origin"] == nil, "\(preflight.headers)")
        let made = try send(daemon, "POST", "/v1/tokens", host: own(daemon), [json, anyone],
                            body: #"{"name":"escape","scopes":["admin"]}"#)
        #expect(made.status == 403 && made.problemCode == "origin_not_allowed", "\(made.text)")
        let read = try send(daemon, "GET", "/v1/tasks", host: own(daemon), [anyone])
        #expect(read.headers["access-control-allow-origin"] == nil)
    }

    /// Under a wildcard listen, a page on an address literal with the port served is not
    /// the daemon's own: it may not preflight nor change anything.
    @Test func aWildcardListenDoesNotTrustPagesOnAddressLiterals() throws {
        let daemon = try LiveDaemon(adjust: { $0.host = "0.0.0.0" }, prepare: { path in
            _ = try TokenCommand.create(TokenRequest(name: "admin", scopes: [.admin]), expiresInSeconds: nil, databasePath: path)
        })
        let port = daemon.application.port
        let foreign = ("Origin", "http://203.0.113.9:\(port)")
        let preflight = try send(daemon, "OPTIONS", "/v1/tasks/t/cancel", host: "203.0.113.9:\(port)",
                                 [foreign, ("Access-Control-Request-Method", "POST")])
        #expect(preflight.status == 403, "\(preflight.text)")
        let post = try send(daemon, "POST", "/v1/tasks/t/cancel", host: "203.0.113.9:\(port)", [json, foreign])
        #expect(post.status == 403 && post.problemCode == "origin_not_allowed", "\(post.text)")
        let own = try send(daemon, "POST", "/v1/tasks/t/cancel", host: "127.0.0.1:\(port)",
                           [json, ("Origin", "http://127.0.0.1:\(port)")])
        #expect(own.status == 401, "the daemon's own origin passes the browser checks: \(own.text)")
    }

    /// Two `Host`, `Origin`, `Content-Type` or `Authorization` headers are refused before
    /// anything else (a proxy reading the last one would disagree with the daemon).
    @Test func aDuplicatedSecurityHeaderIsRefused() throws {
        let daemon = try daemonWithTask()
        let before = try daemon.snapshot("t")
        let port = daemon.application.port
        let cases: [(String, [(String, String)])] = [
            ("host", [("Host", "127.0.0.1:\(port)"), ("Host", "evil.example")]),
            ("origin", [("Origin", "http://127.0.0.1:\(port)"), ("Origin", "https://evil.example")]),
            ("content-type", [("Content-Type", "application/json"), ("Content-Type", "text/plain")]),
            ("authorization", [("Authorization", "Bearer a"), ("Authorization", "Bearer b")]),
        ]
        for (name, headers) in cases {
            let host: String? = name == "host" ? nil : own(daemon)
            let refused = try send(daemon, "POST", "/v1/tasks/t/cancel", host: host,
                                   name == "content-type" ? headers : [json] + headers)
            #expect(refused.status == 400, "\(name): \(refused.text)")
            #expect(refused.problemCode == "duplicate_header", "\(name)")
            #expect((refused.json["detail"] as? String)?.lowercased().contains(name) == true, "\(refused.text)")
        }
        try expectUnchanged(daemon, before)
    }

    // MARK: - Order

    @Test func hostThenOriginThenContentTypeThenTheRoute() throws {
        let daemon = try daemonWithTask()
        let before = try daemon.snapshot("t")
        let evilOrigin = ("Origin", "https://evil.example")
        let form = ("Content-Type", "application/x-www-form-urlencoded")
        #expect(try send(daemon, "POST", "/v1/tasks/t/cancel", host: "evil.example", [evilOrigin, form]).status == 400)
        #expect(try send(daemon, "POST", "/v1/tasks/t/cancel", host: own(daemon), [evilOrigin, form]).status == 403)
        #expect(try send(daemon, "POST", "/v1/tasks/t/cancel", host: own(daemon),
                         [("Origin", "http://\(own(daemon))"), form]).status == 415)
        #expect(try send(daemon, "POST", "/v1/tasks/ghost/cancel", host: own(daemon), [form]).status == 415)
        #expect(try send(daemon, "POST", "/v1/tasks/ghost/cancel", host: own(daemon), [json]).status == 404)
        try expectUnchanged(daemon, before)
    }
}

// MARK: - Flags

@Suite struct BrowserFlagsTests {
    private func parse(_ arguments: [String], _ environment: [String: String] = [:]) throws -> Configuration {
        guard case .run(let configuration) = try Configuration.parse(arguments: arguments, environment: environment) else {
            throw UsageError("expected a run command")
        }
        return configuration
    }

    @Test func corsOriginsAndPublicURLsRepeat() throws {
        let dash = WebOrigin(scheme: "https", host: "dash.example.com", port: 443)
        let local = WebOrigin(scheme: "http", host: "localhost", port: 3000)
        let configuration = try parse(["--cors-origin", "https://dash.example.com", "--db", "a.db",
                                       "--cors-origin=HTTP://LocalHost:3000", "--cors-origin", "*",
                                       "--public-url", "https://headway.example.com/", "--db", "b.db",
                                       "--public-url", "http://[::1]:8080/headway"])
        #expect(configuration.corsOrigins == [.exact(dash), .exact(local), .any])
        #expect(configuration.publicOrigins == [WebOrigin(scheme: "https", host: "headway.example.com", port: 443),
                                                WebOrigin(scheme: "http", host: "::1", port: 8080)])
        #expect(configuration.databasePath == "b.db", "a flag that does not repeat keeps its last value")
        let defaults = try parse([])
        #expect(defaults.corsOrigins.isEmpty && defaults.publicOrigins.isEmpty)
    }

    @Test func theEnvironmentHoldsAListThatFlagsReplace() throws {
        let environment = ["HEADWAY_CORS_ORIGIN": "https://dash.example.com, http://localhost:3000",
                           "HEADWAY_PUBLIC_URL": "https://headway.example.com"]
        let fromEnvironment = try parse([], environment)
        #expect(fromEnvironment.corsOrigins.count == 2)
        #expect(fromEnvironment.publicOrigins.map(\.description) == ["https://headway.example.com"])
        let fromFlags = try parse(["--cors-origin", "https://other.example"], environment)
        #expect(fromFlags.corsOrigins == [.exact(WebOrigin(scheme: "https", host: "other.example", port: 443))])
        #expect(fromFlags.publicOrigins.count == 1)
    }

    @Test(arguments: [
        (["--cors-origin", "https://dash.example.com/"],
         "--cors-origin takes an origin without a path (scheme://host[:port], e.g. https://dash.example.com), not 'https://dash.example.com/'"),
        (["--cors-origin", "dash.example.com"], "--cors-origin must be '*' or an origin such as https://dash.example.com, not 'dash.example.com'"),
        (["--cors-origin", "null"], "--cors-origin must be '*' or an origin such as https://dash.example.com, not 'null'"),
        (["--cors-origin", ""], "--cors-origin must be '*' or an origin such as https://dash.example.com, not ''"),
        (["--cors-origin", "ftp://files.example"], "--cors-origin must be '*' or an origin such as https://dash.example.com, not 'ftp://files.example'"),
        (["--cors-origin", "https://user@dash.example"], "--cors-origin must be '*' or an origin such as https://dash.example.com, not 'https://user@dash.example'"),
        (["--cors-origin", "https://dash.example:0"], "--cors-origin must be '*' or an origin such as https://dash.example.com, not 'https://dash.example:0'"),
        (["--cors-origin", "https://dash.example:99999"], "--cors-origin must be '*' or an origin such as https://dash.example.com, not 'https://dash.example:99999'"),
        (["--cors-origin"], "option '--cors-origin' needs a value"),
        (["--public-url", "headway.example.com"], "--public-url must be an http or https URL such as https://headway.example.com, not 'headway.example.com'"),
        (["--public-url", "https://"], "--public-url must be an http or https URL such as https://headway.example.com, not 'https://'"),
        (["--public-url", "https://bad host"], "--public-url must be an http or https URL such as https://headway.example.com, not 'https://bad host'"),
        (["--public-url", "https://h.example/?a=1"], "--public-url must be an http or https URL such as https://headway.example.com, not 'https://h.example/?a=1'"),
        (["--public-url", "ws://h.example"], "--public-url must be an http or https URL such as https://headway.example.com, not 'ws://h.example'"),
    ])
    func badValuesAreUsageErrors(_ arguments: [String], _ message: String) {
        #expect(throws: UsageError(message)) { _ = try Configuration.parse(arguments: arguments, environment: [:]) }
    }

    @Test func usageNamesTheFlags() {
        for text in ["--public-url URL", "HEADWAY_PUBLIC_URL", "--cors-origin ORIGIN", "HEADWAY_CORS_ORIGIN"] {
            #expect(Configuration.usage.contains(text))
        }
    }

    @Test func theDaemonExits64OnABadOrigin() throws {
        let (status, _, errors) = try DaemonProcess.run(["--cors-origin", "null"])
        #expect(status == 64)
        #expect(errors.contains("--cors-origin must be '*' or an origin"))
    }
}
