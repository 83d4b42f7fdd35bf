import Testing
@testable import HTTPServer

@Suite struct ServerSentEventTests {
    @Test func encodesEveryField() throws {
        let frame = try ServerSentEvent(id: "42", event: "task.updated", data: #"{"id":"a"}"#, retryMilliseconds: 3000)
        #expect(frame.encoded == "retry: 3000\nid: 42\nevent: task.updated\ndata: {\"id\":\"a\"}\n\n")
    }

    @Test func dataOnly() throws {
        #expect(try ServerSentEvent(data: "hello").encoded == "data: hello\n\n")
        #expect(try ServerSentEvent(data: "").encoded == "data: \n\n")
    }

    @Test func splitsMultiLineDataAtEveryKindOfLineBreak() throws {
        #expect(try ServerSentEvent(data: "one\ntwo\r\nthree\rfour").encoded
            == "data: one\ndata: two\ndata: three\ndata: four\n\n")
        #expect(try ServerSentEvent(data: "trailing\n").encoded == "data: trailing\ndata: \n\n")
        #expect(try ServerSentEvent(data: "\n\n").encoded == "data: \ndata: \ndata: \n\n")
    }

    @Test func keepsNonASCIIAndGivesTheSameBytes() throws {
        let frame = try ServerSentEvent(id: "7", data: "Größe\r\n🚀\rÜ")
        #expect(frame.encoded == "id: 7\ndata: Größe\ndata: 🚀\ndata: Ü\n\n")
        #expect(frame.bytes == Array(frame.encoded.utf8))
        #expect(ServerSentEvent.comment("a\nb") == ": a\n: b\n\n")
        #expect(ServerSentEvent.comment() == ":\n\n")
    }

    @Test(arguments: ["4\n2", "4\r2", "42\r\n", "4\u{0}2"])
    func refusesLineBreaksInID(_ id: String) {
        #expect(throws: ServerSentEvent.EncodingError.lineBreakInField("id")) { try ServerSentEvent(id: id, data: "x") }
    }

    @Test(arguments: ["task\n.updated", "task.updated\r", "a\r\nb"])
    func refusesLineBreaksInEventName(_ event: String) {
        #expect(throws: ServerSentEvent.EncodingError.lineBreakInField("event")) {
            try ServerSentEvent(event: event, data: "x")
        }
    }

    @Test func comments() {
        #expect(ServerSentEvent.comment() == ":\n\n")
        #expect(ServerSentEvent.comment("keep-alive") == ": keep-alive\n\n")
        #expect(ServerSentEvent.comment("a\nb") == ": a\n: b\n\n")
    }
}
