import Foundation
import Testing
import HeadwayCore
import HeadwayTestSupport
@testable import Access
@testable import HeadwayAPI

/// The dashboard's files as served (compiled in, ETag and 304, the security headers, 404)
/// and `GET /v1/token`.
@Suite(.serialized) struct DashboardTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("dashboard")

    /// The compiled copy is the files of `dashboard/`, byte for byte, with their ETags.
    @Test func compiledCopyMatchesTheFolder() throws {
        let names = try FileManager.default.contentsOfDirectory(atPath: Self.folder.path)
            .filter { !$0.hasPrefix(".") }.sorted()
        #expect(DashboardAssets.all.map(\.name) == names, "run `make dashboard` after changing dashboard/")
        for asset in DashboardAssets.all where names.contains(asset.name) {
            let bytes = Array(try Data(contentsOf: Self.folder.appendingPathComponent(asset.name)))
            #expect(asset.bytes == bytes, "\(asset.name) differs from its compiled copy: run `make dashboard`")
            let hex = TokenCrypto.sha256(bytes: bytes).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
            #expect(asset.etag == "\"\(hex.prefix(16))\"", "\(asset.name)'s ETag is stale: run `make dashboard`")
        }
        #expect(names.contains("index.html") && names.contains("app.js") && names.contains("style.css"))
    }

    @Test func pageAndAssetsAreServedWithTheirHeaders() throws {
        let daemon = try LiveDaemon()
        let page = try daemon.request("GET", "/")
        #expect(page.status == 200)
        #expect(page.headers["content-type"] == "text/html; charset=utf-8")
        #expect(page.text.contains("<script type=\"module\" src=\"/assets/app.js\">"))
        #expect(page.headers["cache-control"] == "no-cache")
        #expect(page.headers["content-security-policy"] == "default-src 'none'; script-src 'self'; style-src 'self'; "
                + "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
        #expect(page.headers["x-content-type-options"] == "nosniff")
        #expect(page.headers["referrer-policy"] == "no-referrer")
        let etag = try #require(page.headers["etag"])
        #expect(etag.hasPrefix("\"") && etag.hasSuffix("\"") && etag.count == 18)

        let types = ["app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8",
                     "icon.svg": "image/svg+xml; charset=utf-8", "index.html": "text/html; charset=utf-8"]
        for (name, type) in types {
            let asset = try daemon.request("GET", "/assets/\(name)")
            #expect(asset.status == 200, "\(name)")
            #expect(asset.headers["content-type"] == type, "\(name)")
            #expect(asset.body == DashboardAssets.all.first { $0.name == name }?.bytes, "\(name)")
            #expect(asset.headers["content-security-policy"] != nil && asset.headers["x-content-type-options"] == "nosniff")
        }
    }

    @Test func ifNoneMatchGets304() throws {
        let daemon = try LiveDaemon()
        let first = try daemon.request("GET", "/assets/app.js")
        let etag = try #require(first.headers["etag"])
        for header in [etag, "\"other\", \(etag)", "W/\(etag)", "*"] {
            let again = try daemon.request("GET", "/assets/app.js", headers: [("If-None-Match", header)])
            #expect(again.status == 304, "\(header)")
            #expect(again.body.isEmpty && again.headers["etag"] == etag && again.headers["cache-control"] == "no-cache")
        }
        let other = try daemon.request("GET", "/assets/app.js", headers: [("If-None-Match", "\"0000000000000000\"")])
        #expect(other.status == 200 && other.body == first.body)
        // Another file's tag is not this one's.
        let style = try daemon.request("GET", "/assets/style.css", headers: [("If-None-Match", etag)])
        #expect(style.status == 200)
    }

    @Test func unknownAssetsAre404Problems() throws {
        let daemon = try LiveDaemon()
        for path in ["/assets/nope.js", "/assets/..%2e", "/assets/APP.JS", "/assets/"] {
            let reply = try daemon.request("GET", path)
            #expect(reply.status == 404 || reply.status == 400, "\(path): \(reply.status)")
            #expect(reply.headers["content-type"] == "application/problem+json", "\(path)")
        }
        let missing = try daemon.request("GET", "/assets/nope.js")
        #expect(missing.problemCode == "asset_not_found")
        #expect(missing.text.contains("nope.js"))
        #expect(try daemon.request("GET", "/assets/app.js/x").problemCode == "route_not_found")
        #expect(try daemon.request("POST", "/").status == 405)
    }

    /// The page needs no token, even once tokens exist.
    @Test func pageIsPublicOnceTokensExist() throws {
        let daemon = try LiveDaemon()
        _ = try daemon.makeToken([.read])
        #expect(try daemon.request("GET", "/").status == 200)
        #expect(try daemon.request("GET", "/assets/app.js").status == 200)
        #expect(try daemon.request("GET", "/v1/tasks").status == 401)
    }

    @Test func tokenRouteSaysWhatTheTokenAllows() throws {
        let daemon = try LiveDaemon()
        let open = try daemon.request("GET", "/v1/token")
        #expect(open.status == 200)
        #expect(open.json["scopes"] as? [String] == ["report", "read", "control", "admin"])
        #expect(open.json["tokens_required"] as? Bool == false)
        #expect(open.json["task_prefix"] is NSNull)

        let read = try daemon.makeToken([.read], name: "wall", prefix: "team-a.")
        let control = try daemon.makeToken([.read, .control])
        let admin = try daemon.makeToken([.admin])
        let asRead = try daemon.request("GET", "/v1/token", headers: [("Authorization", "Bearer \(read)")])
        #expect(asRead.status == 200)
        #expect(asRead.json["scopes"] as? [String] == ["read"])
        #expect(asRead.json["task_prefix"] as? String == "team-a.")
        #expect(asRead.json["tokens_required"] as? Bool == true)
        #expect(asRead.headers["cache-control"] == "no-store")
        let asControl = try daemon.request("GET", "/v1/token", headers: [("Authorization", "Bearer \(control)")])
        #expect(asControl.json["scopes"] as? [String] == ["read", "control"])
        let asAdmin = try daemon.request("GET", "/v1/token", headers: [("Authorization", "Bearer \(admin)")])
        #expect(asAdmin.json["scopes"] as? [String] == ["report", "read", "control", "admin"])

        // Without a token: anonymous, no scope — the page learns it needs one, no 401.
        let none = try daemon.request("GET", "/v1/token")
        #expect(none.status == 200)
        #expect(none.json["scopes"] as? [String] == [])
        #expect(none.json["tokens_required"] as? Bool == true)
        let bad = try daemon.request("GET", "/v1/token", headers: [("Authorization", "Bearer hw_nope")])
        #expect(bad.status == 401 && bad.problemCode == "token_invalid")
        // EventSource's query token is for the event stream only.
        let query = try daemon.request("GET", "/v1/token?access_token=\(read)")
        #expect(query.status == 400 && query.problemCode == "access_token_not_allowed")
    }
}
