import Foundation
import HeadwayTestSupport
import Testing

/// `GET /v1/tasks`: filters, newest first, opaque page tokens, total size.
@Suite(.serialized) struct ListingTests {
    private func ids(_ response: TestResponse) -> [String] {
        (response.json["tasks"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
    }

    @Test(arguments: Transport.allCases) func pagesThroughEveryTaskNewestFirst(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        for index in 0..<23 { try daemon.register(#"{"id":"t\#(index)","name":"Task \#(index)"}"#) }
        var seen: [String] = []
        var token: String?
        var pages = 0
        repeat {
            let query = "/v1/tasks?page_size=10" + (token.map { "&page_token=\($0)" } ?? "")
            let page = try daemon.request("GET", query)
            #expect(page.status == 200)
            #expect(page.json["total_size"] as? Int == 23)
            seen += ids(page)
            token = page.json["next_page_token"] as? String
            pages += 1
        } while token != nil && pages < 10
        #expect(pages == 3)
        #expect(seen == (0..<23).reversed().map { "t\($0)" })
        #expect(ids(try daemon.request("GET", "/v1/tasks")).count == 23, "default page size is 50")
    }

    /// A page ends early once its tasks take 1 MiB of JSON (here 130 tasks at the size
    /// limits, about 9 KB each): the reply stays bounded, and the next pages hold the rest,
    /// each task once, newest first.
    @Test func aPageOfLargeTasksEndsEarlyAtOneMebibyte() throws {
        let daemon = try LiveDaemon()
        let control = "\\u0001"  // one character, six bytes in the JSON of a reply
        let name = String(repeating: control, count: 200), label = String(repeating: control, count: 500)
        let metadata = String(repeating: control, count: 680)
        for index in 0..<130 {
            try daemon.register(#"{"id":"big\#(index)","name":"\#(name)","label":"\#(label)","metadata":{"k":"\#(metadata)"}}"#)
        }
        var seen: [String] = []
        var token: String?
        var sizes: [(tasks: Int, bytes: Int)] = []
        repeat {
            let page = try daemon.request("GET", "/v1/tasks?page_size=500" + (token.map { "&page_token=\($0)" } ?? ""))
            #expect(page.status == 200)
            #expect(page.json["total_size"] as? Int == 130)
            seen += ids(page)
            sizes.append((ids(page).count, page.body.count))
            token = page.json["next_page_token"] as? String
        } while token != nil && sizes.count < 10
        #expect(sizes.count == 2, "\(sizes)")
        #expect(sizes.allSatisfy { $0.bytes <= (1 << 20) + 200 }, "\(sizes)")
        #expect(sizes.first.map { $0.bytes > (1 << 20) - 10_000 } == true, "the first page is filled: \(sizes)")
        #expect(seen == (0..<130).reversed().map { "big\($0)" })
    }

    @Test(arguments: Transport.allCases) func filtersByStateStalledParentAndRoot(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        try daemon.register(#"{"id":"root","name":"Root"}"#)
        try daemon.register(#"{"id":"a","name":"A","parent_id":"root"}"#)
        try daemon.register(#"{"id":"b","name":"B","parent_id":"root","state":"pending"}"#)
        try daemon.register(#"{"id":"done","name":"Done"}"#)
        try daemon.request("POST", "/v1/tasks/done/finish", json: #"{"outcome":"failed"}"#)
        #expect(ids(try daemon.request("GET", "/v1/tasks?state=pending")) == ["b"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?state=pending&state=failed")) == ["done", "b"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?state=running,failed")) == ["done", "a", "root"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?parent_id=root")) == ["b", "a"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?root=true")) == ["done", "root"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?stalled=true")) == [])
        let notStalled = try daemon.request("GET", "/v1/tasks?stalled=false&page_size=2")
        #expect(notStalled.json["total_size"] as? Int == 4)
        #expect(ids(notStalled).count == 2)
    }

    @Test(arguments: Transport.allCases) func refusesBadQueries(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        for query in ["page_size=0", "page_size=501", "page_size=ten", "state=done", "stalled=yes", "root=1",
                      "parent_id=a%20b", "sort=name", "page_size=5&page_size=6"] {
            let response = try daemon.request("GET", "/v1/tasks?\(query)")
            #expect(response.status == 400, "\(query)")
            #expect(response.problemCode == "invalid_request", "\(query)")
        }
    }

    /// `id_prefix` searches by id: every page, the total, inside a token's prefix.
    @Test func searchesByIdPrefix() throws {
        let daemon = try LiveDaemon()
        for id in ["build-1", "build-2", "build-10", "deploy-1", "buil"] { try daemon.register(#"{"id":"\#(id)","name":"N"}"#) }
        let builds = try daemon.request("GET", "/v1/tasks?id_prefix=build-")
        #expect(ids(builds) == ["build-10", "build-2", "build-1"])
        #expect(builds.json["total_size"] as? Int == 3)
        let first = try daemon.request("GET", "/v1/tasks?id_prefix=build-&page_size=2")
        let token = try #require(first.json["next_page_token"] as? String)
        #expect(ids(try daemon.request("GET", "/v1/tasks?id_prefix=build-&page_size=2&page_token=\(token)")) == ["build-1"])
        #expect(try daemon.request("GET", "/v1/tasks?page_size=2&page_token=\(token)").problemCode == "invalid_page_token",
                "a page token belongs to its search")
        #expect(try daemon.request("GET", "/v1/tasks?id_prefix=a%20b").problemCode == "invalid_request")

        let teamToken = try daemon.makeToken([.read], prefix: "build-1")
        let auth = [("Authorization", "Bearer \(teamToken)")]
        #expect(ids(try daemon.request("GET", "/v1/tasks", headers: auth)) == ["build-10", "build-1"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?id_prefix=build-10", headers: auth)) == ["build-10"])
        #expect(ids(try daemon.request("GET", "/v1/tasks?id_prefix=b", headers: auth)) == ["build-10", "build-1"],
                "a wider search stays inside the token's prefix")
        let outside = try daemon.request("GET", "/v1/tasks?id_prefix=deploy", headers: auth)
        #expect(ids(outside) == [] && outside.json["total_size"] as? Int == 0)
    }

    /// `.` and `..` are refused as new ids: a URL path cannot name them.
    @Test func dotIdsAreRefused() throws {
        let daemon = try LiveDaemon()
        for id in [".", ".."] {
            let refused = try daemon.request("POST", "/v1/tasks", json: #"{"id":"\#(id)","name":"Dots"}"#)
            #expect(refused.status == 400 && refused.problemCode == "invalid_request", "\(id): \(refused.status)")
            #expect(String(decoding: refused.body, as: UTF8.self).contains("must not be '.' or '..'"))
        }
        try daemon.register(#"{"id":"...","name":"Three dots are a name"}"#)
    }

    @Test(arguments: Transport.allCases) func pageTokensAreTiedToTheirListing(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        for index in 0..<3 { try daemon.register(#"{"id":"t\#(index)","name":"T","state":"pending"}"#) }
        let first = try daemon.request("GET", "/v1/tasks?state=pending&page_size=1")
        let token = try #require(first.json["next_page_token"] as? String)
        #expect(try daemon.request("GET", "/v1/tasks?state=pending&page_size=1&page_token=\(token)").status == 200)
        for query in ["page_token=\(token)", "state=running&page_token=\(token)", "page_token=garbage", "page_token="] {
            let response = try daemon.request("GET", "/v1/tasks?\(query)")
            #expect(response.status == 400, "\(query)")
            #expect(response.problemCode == "invalid_page_token", "\(query)")
        }
    }
}
