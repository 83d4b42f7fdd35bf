import Access
import EventStream
import HeadwayCore
import HeadwayStore
import HTTPServer
import Telemetry

/// `/v1/tokens` (scope `admin`): make a token (its secret is shown in that reply only),
/// list them without secrets (revoked and expired ones left out), revoke one at once. Each
/// change goes through the writer and, once committed, its one row is applied to the
/// registry, so the change holds for the very next request whatever the number of tokens;
/// a revocation also closes the token's event streams. At most `maximumTokens` are usable
/// at once (422 `too_many_tokens`), counted in the insert's transaction. Every change is
/// logged with the acting token's id and name.
///
/// A token with a task prefix manages only the tokens inside it (`Grant.manages`): it
/// makes only tokens whose prefix starts with its own (none without a prefix: 403
/// `prefix_not_allowed`), lists only those, and any other token is 404 to it. No token
/// makes one that outlives it: a token that expires makes only tokens expiring no later.
package struct TokensAPI: Sendable {
    let writer: GroupCommitWriter
    let registry: TokenRegistry
    let broker: EventBroker
    let clock: any WallClock
    let logger: Logger
    let errors: ErrorReplies
    /// Tokens neither revoked nor expired there may be at once (`--max-tokens`).
    let maximumTokens: Int

    package func register(in routes: inout ServiceRoutes) {
        routes.add("POST", "/v1/tokens", .scope(.admin)) { request, grant, responder in create(request, grant, responder) }
        routes.add("GET", "/v1/tokens", .scope(.admin)) { _, grant, responder in list(grant, responder) }
        routes.add("DELETE", "/v1/tokens/{id}", .scope(.admin)) { request, grant, responder in revoke(request, grant, responder) }
    }

    private func create(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        let made: (token: TokenRecord, secret: String)
        do {
            guard !request.body.isEmpty else { throw TaskError.malformedJSON("This request needs a JSON object as its body.") }
            let mediaType = TaskAPI.mediaType(request.header("content-type") ?? "")
            guard mediaType == "application/json" || (mediaType.hasPrefix("application/") && mediaType.hasSuffix("+json")) else {
                throw Problem.unsupportedMediaType(mediaType)
            }
            let body: JSONValue
            switch JSONParser.parse(request.body) {
            case .success(let value): body = value
            case .failure(let failure): throw TaskError.malformedJSON("The request body is not valid JSON: \(failure).")
            }
            let now = clock.now()
            let asked = try TokenRequest.parse(body, now: now)
            switch grant.refusal(toMake: asked) {
            case .prefix(let refusal)?: throw refusal
            case .expiry(let fieldError)?: throw TaskError.invalidRequest([fieldError])
            case nil: break
            }
            made = try TokenCrypto.newToken(asked, now: now)
        } catch {
            return responder.respond(errors.response(for: error, request))
        }
        let now = made.token.createdAt
        writer.submit({ [maximumTokens] database in
            guard let generation = try TokenRepository.insert(made.token, limit: maximumTokens, now: now, in: database) else {
                throw Problem.tooManyTokens(limit: maximumTokens)
            }
            return generation
        }) { [registry, logger, errors] result in
            switch result {
            case .success(let generation):
                registry.apply(own: made.token, generation: generation, now: now)
                logger.log(.info, "audit.token_create", [
                    "request_id": request.requestID, "token_id": grant.tokenID ?? "none", "token_name": grant.tokenName ?? "none",
                    "created_id": made.token.id, "created_name": made.token.name,
                    "scopes": made.token.scopeList.joined(separator: ","), "task_prefix": made.token.taskPrefix ?? "",
                ])
                responder.respond(.json(201, Self.json(made.token, secret: made.secret),
                                        headers: [HTTPField("Location", "/v1/tokens/\(made.token.id)"),
                                                  HTTPField("Cache-Control", "no-store")]))
            case .failure(let error):
                responder.respond(errors.response(for: error, request))
            }
        }
    }

    private func list(_ grant: Grant, _ responder: any Responder) {
        var body = JSONText()
        body.appendRaw(#"{"tokens":["#)
        for (index, token) in registry.listed(now: clock.now()).filter({ grant.manages(tokenPrefix: $0.taskPrefix) }).enumerated() {
            if index > 0 { body.appendRaw(",") }
            body.appendRaw(Self.json(token, secret: nil))
        }
        body.appendRaw("]}")
        responder.respond(.json(200, body.text))
    }

    private func revoke(_ request: HTTPRequest, _ grant: Grant, _ responder: any Responder) {
        let id = request.pathParameters["id"] ?? ""
        let now = clock.now()
        writer.submit({ database -> (TokenRecord, Int64)? in
            guard let revoked = try TokenRepository.revoke(id, at: now, in: database, allowed: {
                grant.manages(tokenPrefix: $0.taskPrefix)
            }) else { return nil }
            return (revoked, try TokenRepository.generation(in: database))
        }) { [registry, broker, logger, errors] result in
            switch result {
            case .success(let revocation):
                guard case let (revoked, generation)? = revocation else {
                    return responder.respond(Problem.tokenNotFound(id).response)
                }
                registry.apply(own: revoked, generation: generation, now: now)
                broker.closeStreams(ofTokens: [revoked.id])
                logger.log(.info, "audit.token_revoke", [
                    "request_id": request.requestID, "token_id": grant.tokenID ?? "none", "token_name": grant.tokenName ?? "none",
                    "revoked_id": revoked.id, "revoked_name": revoked.name,
                ])
                responder.respond(HTTPResponse(status: 204))
            case .failure(let error):
                responder.respond(errors.response(for: error, request))
            }
        }
    }

    /// A token as the API shows it; `secret` only in the reply that made it.
    static func json(_ token: TokenRecord, secret: String?) -> String {
        var object = JSONObjectWriter()
        object.string("id", token.id)
        object.string("name", token.name)
        var scopes = JSONText()
        scopes.appendRaw("[")
        for (index, scope) in token.scopeList.enumerated() {
            if index > 0 { scopes.appendRaw(",") }
            scopes.appendString(scope)
        }
        scopes.appendRaw("]")
        object.raw("scopes", scopes.text)
        object.string("task_prefix", token.taskPrefix)
        object.string("expires_at", token.expiresAt.map(Timestamp.rfc3339))
        object.string("created_at", Timestamp.rfc3339(token.createdAt))
        object.string("last_used_at", token.lastUsedAt.map(Timestamp.rfc3339))
        if let secret { object.string("secret", secret) }
        return object.finish()
    }

    package init(writer: GroupCommitWriter, registry: TokenRegistry, broker: EventBroker, clock: any WallClock,
                 logger: Logger, errors: ErrorReplies, maximumTokens: Int) {
        self.writer = writer
        self.registry = registry
        self.broker = broker
        self.clock = clock
        self.logger = logger
        self.errors = errors
        self.maximumTokens = maximumTokens
    }
}

extension Problem {
    /// `--max-tokens` tokens are usable already.
    static func tooManyTokens(limit: Int) -> Problem {
        Problem(status: 422, code: "too_many_tokens", title: "Too many tokens",
                detail: "At most \(limit) tokens may be usable at once (--max-tokens), and that many are neither revoked "
                    + "nor expired: revoke tokens no longer needed (DELETE /v1/tokens/{id}) before making more. "
                    + "Nothing was made.")
    }

    /// No token that is not revoked has this id.
    static func tokenNotFound(_ id: String) -> Problem {
        Problem(status: 404, code: "token_not_found", title: "Token not found",
                detail: "No token that is not revoked has the id '\(id)'.")
    }
}
