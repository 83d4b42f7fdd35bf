import HeadwayCore
import Lifecycle

/// Where a terminate of a subtree stands between its steps (`TaskStore.terminate`, then
/// `TaskStore.continueTermination`): it walks the subtree depth-first and ends each
/// unfinished task after every task below it (post-order), so each parent takes its
/// children's ends before its own and the subtree's own task ends last, in the last step.
/// Between steps it holds only the path from the subtree's task down to the task whose
/// children are being read, each with the key of the last child read: as deep as the tree
/// (`TreeLimits`), however wide.
///
/// A child registered under a task of the path while the walk runs is read with its
/// siblings (keys grow), so it is ended too; no child can be registered under a task
/// already ended (a finished parent takes no new children). A walk within a task prefix
/// (a terminate by a token that has one) passes over a task of another prefix with
/// everything below it, as a cancel's walk does (`SubtreeWalk`).
public struct TerminationWalk: Sendable, Equatable {
    /// A task of the path whose children are being read, and the key of the last one read.
    struct Frame: Sendable, Equatable {
        var id: String
        var afterKey: Int64 = 0
    }

    /// The subtree's own task: ended last, its outcome the reply's.
    public let rootID: String
    /// When set, only tasks whose id starts with it are reached (and walked below).
    public let taskPrefix: String?
    /// When the terminate was requested: the time of every change it makes.
    public let now: EpochMilliseconds
    /// From the subtree's task down; empty once the subtree's task has been ended.
    var path: [Frame]

    /// A walk of the subtree of `rootID` (within `taskPrefix`, when given).
    init(below rootID: String, now: EpochMilliseconds, taskPrefix: String?) {
        self.rootID = rootID
        self.now = now
        self.taskPrefix = taskPrefix
        path = [Frame(id: rootID)]
    }

    /// Whether the subtree's own task has been reached (it is the last).
    public var isFinished: Bool { path.isEmpty }

    /// Whether the walk reaches `id` (within its task prefix, if it has one).
    func reaches(_ id: String) -> Bool { taskPrefix.map { id.utf8.starts(with: $0.utf8) } ?? true }
}

/// One step of a terminate: what it ended (with the events to publish once it has
/// committed), and where the walk stands.
public struct TerminationStep: Sendable, Equatable, BatchSized {
    /// The outcome for the subtree's own task: set by the step that reached it (the last).
    public var outcome: TaskRules.Outcome?
    /// How many tasks this step ended.
    public var count = 0
    /// How many rows of tasks this step read.
    public var rowsRead = 0
    public var events: [TaskEvent] = []
    /// The rest of the walk, nil when this was its last step.
    public var remaining: TerminationWalk?

    public var estimatedBytes: Int { events.estimatedBytes }
}

extension TaskStore {
    /// Runs a terminate of the subtree of `id` on `writer` in steps (`terminate`, then
    /// `continueTermination` until the walk is finished), each a job of its own, so that
    /// other writes commit between them (the writer publishes each step's events once it
    /// commits; `afterEachCommit`, if given, gets each step then too); `completion` gets the last step, which holds the outcome
    /// for the task itself, or the error that ended a step (the steps committed before it
    /// stay: the tasks they ended stay ended).
    public func terminateInSteps(_ id: String, taskPrefix: String? = nil, on writer: GroupCommitWriter,
                                 now: @escaping @Sendable () -> EpochMilliseconds,
                                 afterEachCommit: (@Sendable (TerminationStep) -> Void)? = nil,
                                 completion: @escaping @Sendable (Result<TerminationStep, any Error>) -> Void) {
        let last = Locked<TerminationStep?>(nil)
        writer.submitSteps({ [self] database in try terminate(id, taskPrefix: taskPrefix, now: now(), in: database) },
                           nextStep: { [self] step -> (@Sendable (Database) throws -> TerminationStep)? in
                               guard let walk = step.remaining else { return nil }
                               return { database in try continueTermination(walk, in: database) }
                           },
                           afterEachCommit: { step in
                               last.withLock { $0 = step }
                               afterEachCommit?(step)
                           },
                           completion: { result in completion(result.map { first in last.withLock { $0 } ?? first }) })
    }
}

extension TerminationStep: CarriesTaskEvents {}
