import HeadwayCore

/// The query readers on any query string (`name=value&…`, split as sent, not decoded),
/// read the way the routes read them: `GET /v1/tasks` (state, stalled, root, parent_id,
/// page_size), `GET /v1/events` (task, parent_id, min_duration) and a task's history
/// (max_points). Every value read is valid and in its range, every well-formed value is
/// read, and every message is about a parameter that was sent.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzQuery(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let parameters = queryParameters(String(decoding: fuzzInput(start, count), as: UTF8.self))
    let allowed: Set<String> = [
        "state", "stalled", "root", "parent_id", "page_size", "page_token", "task", "min_duration", "last_event_id",
        "max_points",
    ]
    var query = QueryReader(parameters, allowed: allowed)
    let given = { (name: String) in parameters.filter { $0.name == name }.map(\.value) }

    let states = query.choices("state", of: TaskState.allCases)
    require(Set(states).count == states.count, "a state chosen twice: \(states)")
    let stateWords = given("state").flatMap { $0.split(separator: ",") }
    require(states.allSatisfy { state in stateWords.contains(Substring(state.rawValue)) }, "a state not asked for")

    for name in ["stalled", "root"] {
        let flag = query.boolean(name)
        if let only = single(given(name)) {
            let expected: Bool? = only == "true" ? true : only == "false" ? false : nil
            require(flag == expected, "\(name)=\(only) read as \(String(describing: flag))")
        }
    }

    let parent = query.id("parent_id")
    if let parent { require(TaskID.isValid(parent), "parent_id \(parent)") }
    if let only = single(given("parent_id")), TaskID.isValid(only) { require(parent == only, "parent_id \(only) not read") }

    let tasks = query.ids("task")
    require(tasks == given("task").filter(TaskID.isValid), "task ids \(tasks)")

    for (name, range) in [("page_size", 1...500), ("max_points", 2...1000)] {
        let number = query.integer(name, in: range)
        if let number { require(range.contains(number), "\(name) \(number) outside \(range)") }
        if let only = single(given(name)), let expected = Int(only), range.contains(expected),
           only.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) {
            require(number == expected, "\(name)=\(only) read as \(String(describing: number))")
        }
    }

    _ = query.single("page_token")
    if let lastID = query.values("last_event_id").last.flatMap(LastEventID.parse) {
        require(lastID >= 0, "last_event_id \(lastID)")
    }

    let seconds = query.number("min_duration", in: 0...86_400, unit: "seconds")
    if let seconds { require(seconds.isFinite && (0...86_400).contains(seconds), "min_duration \(seconds)") }

    // Messages: one per unknown name, one per repeated single-valued name, and none about
    // a parameter that was not sent.
    let sent = Set(parameters.map(\.name))
    for error in query.errors { require(sent.contains(error.field), "a message about \(error.field), which was not sent") }
    for name in sent.subtracting(allowed) {
        let refused = query.errors.contains { $0.field == name && $0.message == "is not a known query parameter" }
        require(refused, "unknown \(name) accepted")
    }
    for name in sent.intersection(allowed).subtracting(["state", "task", "last_event_id"]) where given(name).count > 1 {
        let refused = query.errors.contains { $0.field == name && $0.message == "may be given only once" }
        require(refused, "\(name) repeated and accepted")
    }
    if query.errors.isEmpty {
        for invalid in given("task") where !TaskID.isValid(invalid) { require(false, "an invalid task id \(invalid) accepted") }
    }
    return 0
}

/// `name=value` pairs split on `&` and the first `=`, in the order sent.
private func queryParameters(_ text: String) -> [(name: String, value: String)] {
    text.split(separator: "&", omittingEmptySubsequences: true).map { pair in
        let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        return (String(parts[0]), parts.count > 1 ? String(parts[1]) : "")
    }
}

/// The value of a parameter given exactly once.
private func single(_ values: [String]) -> String? { values.count == 1 ? values[0] : nil }
