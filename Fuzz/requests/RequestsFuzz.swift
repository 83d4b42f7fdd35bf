import HeadwayCore

/// The request bodies of the task routes, read from any bytes that parse as JSON. Each
/// reader either gives a request whose every field is within its documented limits, or
/// refuses with `TaskError.invalidRequest` naming each bad field once. An accepted
/// request written back as JSON reads back as the same request. A batch of progress
/// reports reads each item as the item alone reads.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRequests(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    guard let body = JSONValue.parse(fuzzInput(start, count)) else { return 0 }
    check(body, required: ["name"], Registration.parse, checkRegistration)
    check(body, required: [], ProgressUpdate.parse, checkProgressUpdate)
    check(body, required: [], Heartbeat.parse, checkHeartbeat)
    check(body, required: ["outcome"], Finish.parse, checkFinish)
    check(body, required: ["task_id", "(item)"], ProgressItem.parse, checkProgressItem)
    checkBatch(body)
    return 0
}

/// Reads `body` with `parse`; checks an accepted request with `accepted`, and that a
/// refusal names only fields of the body, the `required` ones or the body itself, each once.
private func check<Request>(_ body: JSONValue, required: Set<String>,
                            _ parse: (JSONValue) throws(TaskError) -> Request,
                            _ accepted: (Request) -> Void) {
    do throws(TaskError) {
        accepted(try parse(body))
    } catch {
        guard case .invalidRequest(let errors) = error else {
            return require(false, "refused as \(error.code), not invalid_request")
        }
        require(error.code == "invalid_request", "code \(error.code)")
        require(!errors.isEmpty, "a refusal without a message")
        let fields = errors.map(\.field)
        require(Set(fields).count == fields.count, "a field named twice: \(fields)")
        let sent: Set<String> = if case .object(let members) = body { Set(members.keys) } else { ["(body)"] }
        for field in fields {
            require(sent.contains(field) || required.contains(field), "a message about \(field), which was not sent")
        }
    }
}

private func checkRegistration(_ registration: Registration) {
    if let id = registration.id { require(TaskID.isValid(id), "id \(id)") }
    if let parent = registration.parentID { require(TaskID.isValid(parent), "parent_id \(parent)") }
    checkText(registration.name, maxLength: Limits.nameLength)
    checkText(registration.label, maxLength: Limits.labelLength)
    checkText(registration.unit, maxLength: Limits.unitLength)
    require(Limits.weight.contains(registration.weight), "weight \(registration.weight)")
    require([.pending, .running].contains(registration.state), "state \(registration.state)")
    checkCount(registration.completed)
    checkCount(registration.total)
    for timeout in [registration.stallTimeoutSeconds, registration.progressTimeoutSeconds].compactMap(\.self) {
        require(Limits.timeoutSeconds.contains(timeout), "timeout \(timeout)")
    }
    if let metadata = registration.metadata {
        require(metadata.utf8.count <= Limits.metadataBytes, "metadata of \(metadata.utf8.count) bytes")
        let parsed = JSONValue.parse(Array(metadata.utf8))
        require(parsed?.canonicalText == metadata, "metadata is not canonical JSON: \(metadata)")
        guard case .object = parsed else { return require(false, "metadata is not an object: \(metadata)") }
    }
    // The definition, with the id, is a body that registers the same task.
    guard case .object(var members)? = JSONValue.parse(Array(registration.definition.utf8)) else {
        return require(false, "the definition is not a JSON object: \(registration.definition)")
    }
    if let id = registration.id { members["id"] = .string(id) }
    let again = try? Registration.parse(.object(members))
    require(again == registration, "the definition reads back differently: \(registration.definition)")
}

private func checkProgressUpdate(_ update: ProgressUpdate) {
    for count in [update.completed, update.increment, update.total, update.runnerSeq] { checkCount(count) }
    checkText(update.unit, maxLength: Limits.unitLength)
    checkText(update.label, maxLength: Limits.labelLength)
    let body = object([
        "completed": update.completed.map(JSONValue.integer), "increment": update.increment.map(JSONValue.integer),
        "total": update.total.map(JSONValue.integer), "unit": update.unit.map(JSONValue.string),
        "label": update.label.map(JSONValue.string), "seq": update.runnerSeq.map(JSONValue.integer),
    ])
    require((try? ProgressUpdate.parse(body)) == update, "the update reads back differently: \(body.canonicalText)")
}

private func checkProgressItem(_ item: ProgressItem) {
    require(TaskID.isValid(item.id), "task_id \(item.id)")
    checkProgressUpdate(item.update)
}

/// A batch is refused whole (`invalid_request`, or `too_many_items` past its bound), or
/// gives one result per item sent, each what the item alone reads as.
private func checkBatch(_ body: JSONValue) {
    let maximum = 4
    do throws(TaskError) {
        let batch = try ProgressBatch.parse(body, maximumItems: maximum)
        guard case .object(let members) = body, case .array(let updates)? = members["updates"] else {
            return require(false, "a batch read from a body without an updates array")
        }
        require(batch.items.count == updates.count && updates.count <= maximum, "\(batch.items.count) items read")
        for (item, sent) in zip(batch.items, updates) {
            let alone = Result { () throws(TaskError) -> ProgressItem in try ProgressItem.parse(sent) }
            switch (item.parsed, alone) {
            case (.success(let read), .success(let expected)): require(read == expected, "an item read otherwise")
            case (.failure(let read), .failure(let expected)): require(read == expected, "an item refused otherwise")
            default: require(false, "an item read in a batch and refused alone, or the reverse")
            }
            if case .object(let fields) = sent, case .string(let id)? = fields["task_id"] {
                require(item.taskID == id, "task_id \(String(describing: item.taskID)) for \(id)")
            } else {
                require(item.taskID == nil, "a task_id for an item that names none")
            }
        }
    } catch {
        switch error {
        case .invalidRequest(let errors): require(!errors.isEmpty, "a refusal without a message")
        case .tooManyItems(let count, let limit): require(count > limit && limit == maximum, "too many: \(count) of \(limit)")
        default: require(false, "a batch refused as \(error.code)")
        }
    }
}

private func checkHeartbeat(_ heartbeat: Heartbeat) {
    checkText(heartbeat.label, maxLength: Limits.labelLength)
    checkCount(heartbeat.runnerSeq)
    let body = object(["label": heartbeat.label.map(JSONValue.string), "seq": heartbeat.runnerSeq.map(JSONValue.integer)])
    require((try? Heartbeat.parse(body)) == heartbeat, "the heartbeat reads back differently: \(body.canonicalText)")
}

private func checkFinish(_ finish: Finish) {
    require(finish.outcome.isFinished, "outcome \(finish.outcome)")
    checkText(finish.message, maxLength: Limits.messageLength)
    let body = object(["outcome": .string(finish.outcome.rawValue), "message": finish.message.map(JSONValue.string)])
    require((try? Finish.parse(body)) == finish, "the finish reads back differently: \(body.canonicalText)")
}

/// A JSON object of the members that are present.
private func object(_ members: [String: JSONValue?]) -> JSONValue {
    .object(JSONObject(members.compactMapValues(\.self)))
}

/// A text field: at most `maxLength` Unicode scalars, not blank, no NUL.
private func checkText(_ text: String?, maxLength: Int) {
    guard let text else { return }
    require(text.unicodeScalars.count <= maxLength, "\(text.unicodeScalars.count) characters, limit \(maxLength)")
    require(!text.allSatisfy(\.isWhitespace), "a blank text \(text.debugDescription)")
    require(!text.unicodeScalars.contains("\0"), "a NUL in \(text.debugDescription)")
}

/// A count or sequence number: 0…2^53−1.
private func checkCount(_ count: Int64?) {
    guard let count else { return }
    require((0...Limits.maxCount).contains(count), "count \(count)")
}
