import Foundation
import Lifecycle

/// Reports a Foundation `Progress` tree to headwayd as a task tree, from a task of its own.
///
/// Give it the root `Progress` and the task id to report it as; add the children you want
/// as child tasks with `addChild(_:withPendingUnitCount:name:taskID:to:)` (Foundation does
/// not list a `Progress`'s children, so the reporter is told of them). A few times a second
/// (`interval`) it reads each `Progress` — `completedUnitCount` and `totalUnitCount`
/// (nothing while `isIndeterminate`), `localizedDescription` and
/// `localizedAdditionalDescription` as the label — and sends what changed, of every task
/// at once, in one `POST /v1/progress`, each item numbered (`seq`) so that a report sent
/// again after a lost reply is not applied twice. A child is registered with its pending
/// unit count as its `weight`, so the server's fraction of the parent is Foundation's
/// `fractionCompleted`; a child finishes `succeeded` once its `Progress` is finished.
///
/// The code being measured never waits for the network: it only sets its `Progress`. When
/// the server is down or slow the reporter warns once, keeps the latest state, and sends
/// it when the server is back (waiting longer between attempts, up to `maximumBackoff`).
/// When a reply says someone asked to cancel a task, the reporter calls `cancel()` on its
/// `Progress` (which cancels the `Progress`'s own children too): check `isCancelled`, or
/// set a `cancellationHandler`, and finish with `.canceled`.
///
/// ```swift
/// let progress = Progress(totalUnitCount: 2)
/// let reporter = ProgressReporter(progress: progress, taskID: "import-42", name: "Import", client: client)
/// let download = Progress(totalUnitCount: 100)
/// reporter.addChild(download, withPendingUnitCount: 1, name: "Download")
/// for chunk in 1...100 { download.completedUnitCount = Int64(chunk) }
/// …
/// await reporter.finish(outcome: .succeeded)
/// ```
///
/// In swift-corelibs-foundation (Linux) `localizedDescription` is read-only and empty: a
/// subclass of `Progress` that overrides it gives the label there.
public final class ProgressReporter: Sendable {
    private let engine: ReportingEngine

    /// Starts reporting `progress` as task `taskID` (registered with `name`, under
    /// `parentID` if given) through `client`. With `finishWhenCompleted`, the task finishes
    /// `succeeded` by itself once `progress` is finished. Changes are sent at most once per
    /// `interval` of `clock`; a task that has not changed is still signaled every
    /// `heartbeatInterval`, so that the server does not flag it stalled and its cancel
    /// requests reach the job. `warn` is given each warning once (by default, it is written
    /// to standard error).
    public init<C: Clock>(progress: Progress, taskID: String, name: String, parentID: String? = nil,
                          client: HeadwayClient, finishWhenCompleted: Bool = false,
                          interval: Duration = .milliseconds(250), heartbeatInterval: Duration = .seconds(10),
                          maximumBackoff: Duration = .seconds(5), clock: C = ContinuousClock(),
                          warn: @escaping @Sendable (String) -> Void = ProgressReporter.writeToStandardError)
    where C.Duration == Duration {
        let timing = ReportingEngine.Timing(interval: interval, heartbeatInterval: heartbeatInterval, maximumBackoff: maximumBackoff)
        engine = ReportingEngine(client: client, root: ReportingEngine.Member(progress: progress, taskID: taskID, name: name,
                                                                              parentTaskID: parentID, parent: nil, weight: nil),
                                 finishWhenCompleted: finishWhenCompleted, timing: timing, warn: warn)
        engine.start(clock: clock)
    }

    /// Adds `child` to `parent` (the reporter's `Progress` when nil, or a `Progress`
    /// added before) as `Progress.addChild(_:withPendingUnitCount:)` does, and reports it
    /// as a child task named `name`, with the id `taskID` (by default the parent's id, a
    /// dot, and the child's number: `import-42.1`). Its `weight` is `pendingUnitCount`.
    public func addChild(_ child: Progress, withPendingUnitCount pendingUnitCount: Int64, name: String,
                         taskID: String? = nil, to parent: Progress? = nil) {
        (parent ?? engine.rootProgress).addChild(child, withPendingUnitCount: pendingUnitCount)
        reportChild(child, pendingUnitCount: pendingUnitCount, name: name, taskID: taskID, of: parent)
    }

    /// Reports `child`, already a child of `parent` (made with
    /// `Progress(totalUnitCount:parent:pendingUnitCount:)`, or implicitly while `parent`
    /// was current) with `pendingUnitCount` of its units, as a child task: as
    /// `addChild(_:withPendingUnitCount:name:taskID:to:)`, without adding it again.
    public func reportChild(_ child: Progress, pendingUnitCount: Int64, name: String, taskID: String? = nil,
                            of parent: Progress? = nil) {
        engine.add(child: child, pendingUnitCount: pendingUnitCount, name: name, taskID: taskID, parent: parent)
    }

    /// Sends what has changed now, without waiting for the next interval (or the end of a
    /// backoff); true when the server has everything reported so far.
    @discardableResult
    public func flush() async -> Bool {
        await engine.flush()
    }

    /// Finishes the task with `outcome` (and `message`, an error's text, say) once its last
    /// state is sent; children not finished yet finish with the same outcome. Returns
    /// whether the server has it now: when it is away, the reporter keeps trying in the
    /// background (`flush()` tries again at once). Later changes of the `Progress` are not reported.
    @discardableResult
    public func finish(outcome: TaskOutcome, message: String? = nil) async -> Bool {
        engine.requestFinish(outcome: outcome, message: message)
        return await engine.flush()
    }

    /// Whether the task's final state has reached the server (or the server refused to
    /// take more of it): nothing more is sent.
    public var isDone: Bool { engine.isDone }

    /// Writes `message` to standard error as `headway: message`.
    public static func writeToStandardError(_ message: String) {
        FileHandle.standardError.write(Data("headway: \(message)\n".utf8))
    }
}

/// What a `ProgressReporter` does, on a task of its own that is alone in sending (rounds
/// never overlap) and a ticker task that rings it every interval.
final class ReportingEngine: Sendable {
    /// A `Progress` reported as a task: the root, or a child added later.
    struct Member: Sendable {
        let progress: Progress
        let taskID: String
        let name: String
        /// The root's parent task, if any (children have `parent`).
        let parentTaskID: String?
        /// The index of the parent member.
        let parent: Int?
        /// The child's pending unit count of its parent.
        let weight: Double?
    }

    struct Timing: Sendable {
        let interval: Duration
        let heartbeatInterval: Duration
        let maximumBackoff: Duration

        /// How many intervals make `duration`, at least one.
        func ticks(_ duration: Duration) -> Int {
            max(1, Int((duration / interval).rounded(.up)))
        }
    }

    /// What the caller side and the sending side share.
    private struct Shared {
        var members: [Member]
        var childCounts: [Int: Int] = [:]
        var finishRequest: (outcome: TaskOutcome, message: String?)?
        var ring = false
        var forced = false
        var bell: CheckedContinuation<Void, Never>?
        var roundsStarted = 0
        var roundsCompleted = 0
        var waiters: [(round: Int, continuation: CheckedContinuation<Void, Never>)] = []
        var delivered = false
        var done = false
        var warned: Set<String> = []
        var ticker: Task<Void, Never>?
    }

    let client: HeadwayClient
    let finishWhenCompleted: Bool
    let timing: Timing
    let warnOnce: @Sendable (String) -> Void
    let rootProgress: Progress
    private let shared: Locked<Shared>

    init(client: HeadwayClient, root: Member, finishWhenCompleted: Bool, timing: Timing,
         warn: @escaping @Sendable (String) -> Void) {
        self.client = client
        self.finishWhenCompleted = finishWhenCompleted
        self.timing = timing
        warnOnce = warn
        rootProgress = root.progress
        shared = Locked(Shared(members: [root]))
    }

    var isDone: Bool { shared.withLock { $0.done } }

    func start<C: Clock>(clock: C) where C.Duration == Duration {
        let ticker = Task { [self, interval = timing.interval] in
            while !Task.isCancelled && !isDone {
                do { try await clock.sleep(for: interval) } catch { return }
                ring(forced: false)
            }
        }
        shared.withLock { $0.ticker = ticker }
        Task { [self] in await run() }
    }

    func add(child: Progress, pendingUnitCount: Int64, name: String, taskID: String?, parent: Progress?) {
        shared.withLock { shared in
            let parentIndex = parent.flatMap { parent in shared.members.firstIndex { $0.progress === parent } } ?? 0
            let number = shared.childCounts[parentIndex, default: 0] + 1
            shared.childCounts[parentIndex] = number
            shared.members.append(Member(progress: child, taskID: taskID ?? "\(shared.members[parentIndex].taskID).\(number)",
                                         name: name, parentTaskID: nil, parent: parentIndex,
                                         weight: Double(max(pendingUnitCount, 0))))
        }
    }

    func requestFinish(outcome: TaskOutcome, message: String?) {
        shared.withLock { shared in
            if shared.finishRequest == nil { shared.finishRequest = (outcome, message) }
        }
    }

    /// Asks for a round; `forced` ones ignore a backoff.
    func ring(forced: Bool) {
        let bell = shared.withLock { shared in
            shared.ring = true
            shared.forced = shared.forced || forced
            defer { shared.bell = nil }
            return shared.bell
        }
        bell?.resume()
    }

    /// Runs a round that starts after this call, and returns whether everything was delivered.
    func flush() async -> Bool {
        let target = shared.withLock { $0.roundsStarted + 1 }
        ring(forced: true)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = shared.withLock { shared in
                if shared.done || shared.roundsCompleted >= target { return true }
                shared.waiters.append((target, continuation))
                return false
            }
            if now { continuation.resume() }
        }
        return shared.withLock { $0.delivered || $0.done }
    }

    /// Waits for the bell; true when a forced round was asked for.
    private func waitForBell() async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let rung = shared.withLock { shared in
                if shared.ring { return true }
                shared.bell = continuation
                return false
            }
            if rung { continuation.resume() }
        }
        return shared.withLock { shared in
            defer { shared.ring = false; shared.forced = false }
            return shared.forced
        }
    }

    func warn(_ key: String, _ message: String) {
        guard shared.withLock({ $0.warned.insert(key).inserted }) else { return }
        warnOnce(message)
    }

    // MARK: The sending side

    /// The sending side's own record of each member, in the order of `Shared.members`.
    struct Record {
        var registered = false
        /// Finished on the server, or given up: nothing more is sent.
        var done = false
        var seq: Int64 = 0
        /// What the server holds.
        var acknowledged = Sample()
        /// The last item sent whose reply did not come: sent again with its `seq` while
        /// the state it carries is still the latest.
        var inflight: (seq: Int64, sample: Sample)?
        var cancelSeen = false
        var ticksSinceSignal = 0
    }

    /// One reading of a `Progress`, as sent.
    struct Sample: Equatable {
        var completed: Int64?
        var total: Int64?
        var label: String?
    }

    /// One reading of a member's `Progress`.
    struct Reading {
        var sample: Sample
        var finished: Bool
    }

    private struct Away: Error {}

    private func run() async {
        var records: [Record] = []
        var backoff: Duration = .zero
        var ticksToWait = 0
        while true {
            let forced = await waitForBell()
            if !forced && ticksToWait > 0 {
                ticksToWait -= 1
                continue
            }
            shared.withLock { $0.roundsStarted += 1 }
            do {
                try await round(&records)
                backoff = .zero
                ticksToWait = 0
            } catch {
                shared.withLock { $0.delivered = false }
                backoff = backoff == .zero ? min(.milliseconds(250), timing.maximumBackoff) : min(backoff * 2, timing.maximumBackoff)
                ticksToWait = timing.ticks(backoff)
            }
            let (waiters, done) = shared.withLock { shared in
                shared.roundsCompleted += 1
                shared.done = records.first?.done ?? false
                let ready = shared.waiters.filter { shared.done || $0.round <= shared.roundsCompleted }
                shared.waiters.removeAll { shared.done || $0.round <= shared.roundsCompleted }
                if shared.done { shared.ticker?.cancel() }
                return (ready, shared.done)
            }
            for waiter in waiters { waiter.continuation.resume() }
            if done { return }
        }
    }

    /// One round: registers new members, sends what changed in batches, finishes what is
    /// finished. Throws `Away` when the server cannot be reached (or cannot serve now).
    private func round(_ records: inout [Record]) async throws(Away) {
        let (members, finishRequest) = shared.withLock { ($0.members, $0.finishRequest) }
        while records.count < members.count { records.append(Record()) }
        for index in records.indices { records[index].ticksSinceSignal += 1 }
        // Parents are read before their children: a child found finished may be counted
        // in its parent's reading or not, never counted in the parent while seen unfinished.
        let readings = members.map(Self.read)
        try await register(members, &records)
        var finishedOne = true
        while finishedOne {
            try await sendChanges(members, readings, &records)
            finishedOne = try await finishMembers(members, readings, finishRequest, &records)
        }
        let delivered = records.indices.allSatisfy { index in
            records[index].done || (records[index].registered && records[index].inflight == nil
                                    && sampleToSend(index, members, readings, records) == records[index].acknowledged)
        }
        shared.withLock { $0.delivered = delivered && (finishRequest == nil || records[0].done) }
    }

    private static func read(_ member: Member) -> Reading {
        let progress = member.progress
        var sample = Sample()
        if !progress.isIndeterminate {
            let completed = progress.completedUnitCount
            // More done than announced: the total was an underestimate, and the server
            // never holds completed above total.
            sample.completed = completed
            sample.total = max(progress.totalUnitCount, completed)
        }
        let parts = [progress.localizedDescription ?? "", progress.localizedAdditionalDescription ?? ""]
            .map { $0.replacingOccurrences(of: "\u{0}", with: "").trimmingCharacters(in: .whitespacesAndNewlines) }
            .filter { !$0.isEmpty }
        if !parts.isEmpty { sample.label = String(parts.joined(separator: " · ").prefix(500)) }
        return Reading(sample: sample, finished: progress.isFinished)
    }

    /// What to send of member `index`: its reading, its label kept when it has none, and
    /// a parent's count without the units of children finished here but not yet on the
    /// server (Foundation adds a finished child's units to its parent; the server counts
    /// a child's share while it runs, and would count it twice until its finish arrives).
    private func sampleToSend(_ index: Int, _ members: [Member], _ readings: [Reading], _ records: [Record]) -> Sample {
        var sample = readings[index].sample
        if sample.label == nil { sample.label = records[index].acknowledged.label }
        guard let completed = sample.completed else {
            sample.completed = records[index].acknowledged.completed
            sample.total = records[index].acknowledged.total
            return sample
        }
        let pending = members.indices.reduce(0.0) { sum, child in
            members[child].parent == index && readings[child].finished && !records[child].done
                ? sum + (members[child].weight ?? 0) : sum
        }
        sample.completed = max(records[index].acknowledged.completed ?? 0, completed - Int64(pending))
        return sample
    }

    private func register(_ members: [Member], _ records: inout [Record]) async throws(Away) {
        for index in members.indices where !records[index].registered && !records[index].done {
            let member = members[index]
            if let parent = member.parent {
                if records[parent].done {
                    records[index].done = true
                    continue
                }
                guard records[parent].registered else { continue }
            }
            let registration = TaskRegistration(id: member.taskID, name: member.name,
                                                parentID: member.parent.map { members[$0].taskID } ?? member.parentTaskID,
                                                weight: member.weight.map { max($0, 0.000001) })
            do {
                let task: HeadwayTask
                do {
                    task = try await client.register(registration)
                } catch where error.code == .taskConflict {
                    // Registered before with other fields (an earlier run): carried on as it is.
                    task = try await client.task(member.taskID)
                }
                records[index].registered = true
                records[index].seq = max(records[index].seq, task.seq ?? 0)
                records[index].acknowledged = Sample(completed: task.completed, total: task.total, label: task.label)
                records[index].ticksSinceSignal = 0
                adopt(task, index, members, &records)
            } catch {
                try handle(error, giving: index, "register", members, &records)
            }
        }
    }

    private func sendChanges(_ members: [Member], _ readings: [Reading], _ records: inout [Record]) async throws(Away) {
        var items: [(index: Int, seq: Int64, sample: Sample, update: TaskUpdate)] = []
        let heartbeatTicks = timing.ticks(timing.heartbeatInterval)
        for index in members.indices where records[index].registered && !records[index].done {
            let sample = sampleToSend(index, members, readings, records)
            let acknowledged = records[index].acknowledged
            let heartbeatDue = records[index].ticksSinceSignal >= heartbeatTicks
            guard sample != acknowledged || heartbeatDue else {
                // Back to what the server holds: an item lost on the way carries nothing to send.
                records[index].inflight = nil
                continue
            }
            let seq: Int64
            if let inflight = records[index].inflight, inflight.sample == sample {
                seq = inflight.seq
            } else {
                records[index].seq += 1
                seq = records[index].seq
            }
            records[index].inflight = (seq, sample)
            let update = TaskUpdate(completed: sample.completed != acknowledged.completed ? sample.completed : nil,
                                    total: sample.total != acknowledged.total ? sample.total : nil,
                                    label: sample.label != acknowledged.label ? sample.label : nil, seq: seq)
            items.append((index, seq, sample, update))
        }
        for start in stride(from: 0, to: items.count, by: Self.batchItems) {
            let batch = items[start..<min(start + Self.batchItems, items.count)]
            let results: [TaskUpdateResult]
            do {
                results = try await client.progress(batch.map { (members[$0.index].taskID, $0.update) })
            } catch {
                // The whole request refused (a token that may not report, say): the same
                // items would be refused again.
                for item in batch { try handle(error, giving: item.index, "report all of", members, &records) }
                continue
            }
            for (item, result) in zip(batch, results) {
                let index = item.index
                if let task = result.task {
                    records[index].inflight = nil
                    records[index].acknowledged = item.sample
                    records[index].ticksSinceSignal = 0
                    adopt(task, index, members, &records)
                } else if let problem = result.problem {
                    try handle(.problem(problem), giving: index, "report", members, &records)
                }
            }
        }
    }

    /// Finishes members whose end has come, children before their parents; true when one
    /// finished (its parent's count then goes again).
    private func finishMembers(_ members: [Member], _ readings: [Reading], _ request: (outcome: TaskOutcome, message: String?)?,
                               _ records: inout [Record]) async throws(Away) -> Bool {
        var finishedOne = false
        for index in members.indices.reversed() where records[index].registered && !records[index].done {
            let isRoot = members[index].parent == nil
            var outcome: TaskOutcome?
            var message: String?
            if readings[index].finished && (!isRoot || finishWhenCompleted) { outcome = .succeeded }
            if let request, outcome == nil || isRoot {
                outcome = request.outcome
                message = isRoot ? request.message : nil
            }
            guard let outcome, records[index].inflight == nil,
                  sampleToSend(index, members, readings, records) == records[index].acknowledged,
                  !members.indices.contains(where: { members[$0].parent == index && !records[$0].done }) else { continue }
            do {
                _ = try await client.finish(members[index].taskID, outcome: outcome, message: message)
            } catch {
                try handle(error, giving: index, "finish", members, &records)
            }
            records[index].done = true
            finishedOne = true
        }
        return finishedOne
    }

    /// Takes what a reply says of member `index`: a cancel request cancels its `Progress`;
    /// a task finished on the server is not reported any more.
    private func adopt(_ task: HeadwayTask, _ index: Int, _ members: [Member], _ records: inout [Record]) {
        if task.cancelRequested && !records[index].cancelSeen {
            records[index].cancelSeen = true
            members[index].progress.cancel()
        }
        if task.state.isFinished && !records[index].done {
            records[index].done = true
            warn("finished:\(task.id)", "task \(task.id) is finished on the server (\(task.state.rawValue)); it is not reported any more")
        }
    }

    /// What an error of a call about member `index` means: the server away (throws
    /// `Away`, the state kept for the next round); the task gone (registered again) or
    /// finished (done); a refused report taken as sent, with a warning, so that it is not
    /// sent for ever (the next change goes as usual); any other refusal gives the task up.
    private func handle(_ error: HeadwayError, giving index: Int, _ action: String, _ members: [Member],
                        _ records: inout [Record]) throws(Away) {
        if error.isTransient || error == .canceled {
            warn("away", "cannot reach \(client.displayURL) (\(error)); the job goes on, and its latest progress is sent when the server is back")
            throw Away()
        }
        let refused = records[index].inflight?.sample
        records[index].inflight = nil
        switch (action, error.code) {
        case ("report", .notFound?):
            records[index].registered = false
            records[index].acknowledged = Sample()
        case (_, .taskFinished?), (_, .outcomeConflict?), ("finish", .notFound?):
            records[index].done = true
        case ("report", _):
            warn("report:\(error.code?.rawValue ?? "")", "the server refused a report of \(members[index].taskID): \(error)")
            if let refused { records[index].acknowledged = refused }
        default:
            warn("\(action):\(error.code?.rawValue ?? "")",
                 "the server refused to \(action) \(members[index].taskID): \(error); it is not reported any more")
            records[index].done = true
        }
    }

    /// Items per batch request (the server takes up to 1,000 by default).
    static let batchItems = 500
}
