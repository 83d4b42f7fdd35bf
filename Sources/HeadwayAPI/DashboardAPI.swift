import Access
import Foundation
import HeadwayCore
import HTTPServer

/// One file of the dashboard as compiled into the daemon (`DashboardAssets`, generated
/// from `dashboard/` by `scripts/embed-dashboard.py`).
package struct DashboardAsset: Sendable {
    /// The file's name in `dashboard/` (served at `/assets/<name>`).
    var name: String
    /// `Content-Type`, with its charset.
    var contentType: String
    /// A strong ETag: the first 16 hex digits of the file's SHA-256, quoted.
    var etag: String
    /// The file's bytes, base64.
    var base64: String

    /// The file's bytes.
    var bytes: [UInt8] { Data(base64Encoded: base64).map { Array($0) } ?? [] }
}

/// The dashboard (`GET /`, `GET /assets/{name}`, both public: the page asks for a token
/// itself) and `GET /v1/token`, which tells the page what its token allows.
///
/// Each file is answered with its ETag (`If-None-Match` → 304), `Cache-Control: no-cache`
/// (the browser asks again each time, and gets a 304 while the daemon's copy is the
/// same), and a strict `Content-Security-Policy`: only the daemon's own scripts, styles
/// and connections, no frames, no forms, no base URL.
package struct DashboardAPI: Sendable {
    /// The policy of every dashboard reply.
    static let contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        + "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    /// The files by name, their bytes decoded once.
    let files: [String: (asset: DashboardAsset, bytes: [UInt8])]
    let registry: TokenRegistry

    package init(registry: TokenRegistry, assets: [DashboardAsset] = DashboardAssets.all) {
        self.registry = registry
        var files: [String: (asset: DashboardAsset, bytes: [UInt8])] = [:]
        for asset in assets { files[asset.name] = (asset, asset.bytes) }
        self.files = files
    }

    package func register(in routes: inout ServiceRoutes) {
        routes.add("GET", "/", .public) { request, _, responder in responder.respond(serve("index.html", request)) }
        routes.add("GET", "/assets/{name}", .public) { request, _, responder in
            responder.respond(serve(request.pathParameters["name"] ?? "", request))
        }
        routes.add("GET", "/v1/token", .anyToken) { _, grant, responder in responder.respond(token(grant)) }
    }

    /// The reply for the file `name`: 200, 304 when `If-None-Match` names its ETag, or 404.
    func serve(_ name: String, _ request: HTTPRequest) -> HTTPResponse {
        guard let file = files[name] else {
            return Problem(status: 404, code: "asset_not_found", title: "No such file",
                           detail: "The dashboard has no file named '\(name)'.").response
        }
        let headers = [
            HTTPField("ETag", file.asset.etag),
            HTTPField("Cache-Control", "no-cache"),
            HTTPField("Content-Security-Policy", Self.contentSecurityPolicy),
            HTTPField("X-Content-Type-Options", "nosniff"),
            HTTPField("Referrer-Policy", "no-referrer"),
        ]
        if let wanted = request.header("if-none-match"), Self.matches(wanted, file.asset.etag) {
            return HTTPResponse(status: 304, headers: headers)
        }
        return HTTPResponse(status: 200, headers: [HTTPField("Content-Type", file.asset.contentType)] + headers,
                            body: file.bytes)
    }

    /// Whether an `If-None-Match` value names `etag` (a list, `*`, weak forms compared weakly).
    static func matches(_ header: String, _ etag: String) -> Bool {
        header.split(separator: ",").contains { candidate in
            let tag = candidate.trimmingCharacters(in: .whitespaces)
            return tag == "*" || tag == etag || tag == "W/" + etag
        }
    }

    /// What the request's token allows: its scopes (every scope while no token exists),
    /// its task prefix, and whether tokens are required.
    func token(_ grant: Grant) -> HTTPResponse {
        var body = JSONObjectWriter()
        let scopes = grant.holds(.admin) ? Scope.allCases : Scope.allCases.filter { grant.scopes.contains($0) }
        body.raw("scopes", "[" + scopes.map { "\"\($0.rawValue)\"" }.joined(separator: ",") + "]")
        body.string("task_prefix", grant.taskPrefix)
        body.bool("tokens_required", registry.authenticationRequired)
        return .json(200, body.finish(), headers: [HTTPField("Cache-Control", "no-store")])
    }
}
