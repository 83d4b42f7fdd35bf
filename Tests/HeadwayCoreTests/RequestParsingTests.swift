import Testing
@testable import HeadwayCore

private func body(_ text: String) -> JSONValue { JSONValue.parse(Array(text.utf8))! }

private func fieldErrors(_ parse: () throws -> Void) -> [String: String] {
    do {
        try parse()
        return [:]
    } catch let error as TaskError {
        guard case .invalidRequest(let errors) = error else {
            Issue.record("expected invalid_request, got \(error)")
            return [:]
        }
        return Dictionary(errors.map { ($0.field, $0.message) }, uniquingKeysWith: { first, _ in first })
    } catch {
        Issue.record("unexpected error \(error)")
        return [:]
    }
}

@Suite struct RegistrationParsingTests {
    @Test func readsEveryField() throws {
        let registration = try Registration.parse(body("""
            {"id":"db-3","name":"Backup","label":"Starting","parent_id":"nightly","weight":2.5,"state":"pending",
             "completed":3,"total":10,"unit":"files","stall_timeout_seconds":5,"progress_timeout_seconds":60,
             "metadata":{"host":"db-3","n":1}}
            """))
        #expect(registration == Registration(
            id: "db-3", name: "Backup", label: "Starting", parentID: "nightly", weight: 2.5, state: .pending,
            completed: 3, total: 10, unit: "files", stallTimeoutSeconds: 5, progressTimeoutSeconds: 60,
            metadata: #"{"host":"db-3","n":1}"#))
    }

    @Test func fillsDefaults() throws {
        let registration = try Registration.parse(body(#"{"name":"Backup"}"#))
        #expect(registration == Registration(name: "Backup"))
    }

    @Test func sameMeaningGivesSameDefinition() throws {
        let first = try Registration.parse(body(#"{"id":"a","name":"N","metadata":{"x":1,"y":2}}"#))
        let second = try Registration.parse(body(#"{"metadata":{"y":2,"x":1},"weight":1,"name":"N","id":"a","label":null}"#))
        let other = try Registration.parse(body(#"{"id":"a","name":"N","total":5}"#))
        #expect(first.definition == second.definition)
        #expect(first.definition != other.definition)
    }

    @Test func reportsEveryBadFieldAtOnce() {
        let errors = fieldErrors {
            _ = try Registration.parse(body("""
                {"id":"bad id","name":"","total":-1,"completed":1.5,"weight":0,"state":"succeeded",
                 "unit":7,"stall_timeout_seconds":0.5,"metadata":[1],"colour":"red"}
                """))
        }
        #expect(errors["id"] != nil)
        #expect(errors["name"] == "must not be empty or blank")
        #expect(errors["total"] == "must be between 0 and 9007199254740991")
        #expect(errors["completed"] == "must be a whole number")
        #expect(errors["weight"] != nil)
        #expect(errors["state"] == "must be one of: pending, running")
        #expect(errors["unit"] == "must be a string, not number")
        #expect(errors["stall_timeout_seconds"] != nil)
        #expect(errors["metadata"] == "must be an object, not array")
        #expect(errors["colour"] == "is not a known field")
    }

    @Test func requiresName() {
        #expect(fieldErrors { _ = try Registration.parse(body("{}")) }["name"] == "is required")
        #expect(fieldErrors { _ = try Registration.parse(body(#"{"name":null}"#)) }["name"] == "is required")
    }

    @Test func boundsLengthsAndNumbers() {
        let longName = String(repeating: "n", count: 201)
        #expect(fieldErrors { _ = try Registration.parse(body(#"{"name":"\#(longName)"}"#)) }["name"]
            == "must be at most 200 characters (got 201)")
        let longLabel = String(repeating: "l", count: 501)
        #expect(fieldErrors { _ = try Registration.parse(body(#"{"name":"x","label":"\#(longLabel)"}"#)) }["label"] != nil)
        #expect(fieldErrors { _ = try Registration.parse(body(#"{"name":"x","total":9007199254740992}"#)) }["total"] != nil)
        #expect(fieldErrors { _ = try Registration.parse(body(#"{"name":"x","total":1e300}"#)) }["total"] != nil)
        #expect(fieldErrors { _ = try Registration.parse(body(#"{"name":"x","total":"5"}"#)) }["total"]
            == "must be a number, not string")
        #expect(fieldErrors { _ = try Registration.parse(body(#"{"name":"x","total":true}"#)) }["total"]
            == "must be a number, not boolean")
        #expect(fieldErrors { _ = try Registration.parse(body(#"{"name":"x","total":9007199254740991}"#)) }.isEmpty)
    }

    @Test func boundsMetadataSize() {
        let big = String(repeating: "m", count: 4100)
        #expect(fieldErrors { _ = try Registration.parse(body(#"{"name":"x","metadata":{"k":"\#(big)"}}"#)) }["metadata"] != nil)
    }

    @Test func refusesNonObjects() {
        #expect(fieldErrors { _ = try Registration.parse(body("[1]")) }["(body)"] == "must be a JSON object, not array")
        #expect(fieldErrors { _ = try Registration.parse(body("\"x\"")) }["(body)"] != nil)
    }
}

@Suite struct UpdateParsingTests {
    @Test func readsProgress() throws {
        #expect(try ProgressUpdate.parse(body(#"{"increment":2,"label":"Copying","seq":7}"#))
            == ProgressUpdate(increment: 2, label: "Copying", runnerSeq: 7))
        #expect(fieldErrors { _ = try ProgressUpdate.parse(body(#"{"completed":-1}"#)) }["completed"] != nil)
        #expect(fieldErrors { _ = try ProgressUpdate.parse(body(#"{"seq":1.5}"#)) }["seq"] == "must be a whole number")
        #expect(fieldErrors { _ = try ProgressUpdate.parse(body(#"{"state":"done"}"#)) }["state"] == "is not a known field")
    }

    @Test func readsHeartbeatAndFinish() throws {
        #expect(try Heartbeat.parse(body("{}")) == Heartbeat())
        #expect(try Finish.parse(body(#"{"outcome":"failed","message":"disk full"}"#))
            == Finish(outcome: .failed, message: "disk full"))
        #expect(fieldErrors { _ = try Finish.parse(body("{}")) }["outcome"] == "is required")
        #expect(fieldErrors { _ = try Finish.parse(body(#"{"outcome":"running"}"#)) }["outcome"]
            == "must be one of: succeeded, failed, canceled")
    }
}

@Suite struct ProgressBatchParsingTests {
    @Test func readsEachItemAloneInOrder() throws {
        let batch = try ProgressBatch.parse(body("""
            {"updates":[{"task_id":"a","completed":3,"total":10,"unit":"files","label":"Copying","seq":7},
                        {"task_id":"b"},{"increment":1},5,{"task_id":"c","colour":"red","completed":-1},{"task_id":7}]}
            """))
        #expect(batch.items.map(\.taskID) == ["a", "b", nil, nil, "c", nil])
        #expect(try batch.items[0].parsed.get() == ProgressItem(id: "a", update: ProgressUpdate(
            completed: 3, total: 10, unit: "files", label: "Copying", runnerSeq: 7)))
        #expect(try batch.items[1].parsed.get() == ProgressItem(id: "b", update: ProgressUpdate()))
        #expect(fieldErrors { _ = try batch.items[2].parsed.get() } == ["task_id": "is required"])
        #expect(fieldErrors { _ = try batch.items[3].parsed.get() } == ["(item)": "must be a JSON object, not number"])
        #expect(fieldErrors { _ = try batch.items[4].parsed.get() }
            == ["colour": "is not a known field", "completed": "must be between 0 and 9007199254740991"])
        #expect(fieldErrors { _ = try batch.items[5].parsed.get() } == ["task_id": "must be a string, not number"])
    }

    @Test func refusesWhatIsNoBatch() {
        #expect(fieldErrors { _ = try ProgressBatch.parse(body("[]")) } == ["(body)": "must be a JSON object, not array"])
        #expect(fieldErrors { _ = try ProgressBatch.parse(body("{}")) } == ["updates": "is required"])
        #expect(fieldErrors { _ = try ProgressBatch.parse(body(#"{"updates":{}}"#)) } == ["updates": "must be an array, not object"])
        #expect(fieldErrors { _ = try ProgressBatch.parse(body(#"{"updates":[],"more":1}"#)) } == ["more": "is not a known field"])
        #expect(throws: TaskError.tooManyItems(count: 3, maximum: 2)) {
            _ = try ProgressBatch.parse(body(#"{"updates":[{},{},{}]}"#), maximumItems: 2)
        }
        #expect((try? ProgressBatch.parse(body(#"{"updates":[{},{}]}"#), maximumItems: 2))?.items.count == 2)
    }
}
