import HeadwayCore

/// Where the events of committed changes go: the daemon's event broker, given once to the
/// writer (`GroupCommitWriter.init`). The writer calls it on its thread, after each job's
/// commit and before that job's completion, with the events the job's result carries
/// (`CarriesTaskEvents`); `SharedWriting` calls it with other daemons' committed changes
/// before the batch's own. So events arrive in the order of their change numbers, and
/// never before their change is committed.
public protocol TaskEventSink: Sendable {
    /// Takes the events of changes just committed, in order.
    func publish(_ events: [TaskEvent])
}

/// A change's result that holds the events it caused: the writer hands them to its
/// `TaskEventSink` once the change has committed, so no caller publishes them.
public protocol CarriesTaskEvents: BatchSized {
    var events: [TaskEvent] { get }
}
