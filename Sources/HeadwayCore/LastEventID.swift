/// Reads the event id a reconnecting subscriber sends (`Last-Event-ID`, or the
/// `last_event_id` query parameter): the change number of the last event it received.
public enum LastEventID {
    /// The change number in `text`: decimal digits only, with optional spaces or tabs
    /// around them (HTTP's optional white space), and at most `Int64.max`. Anything else —
    /// a sign, a fraction, another character, an empty value — is nil, and such a client
    /// gets a fresh snapshot instead of a resume.
    public static func parse(_ text: String) -> Int64? {
        let isBlank: (UInt8) -> Bool = { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
        let bytes = text.utf8
        guard let first = bytes.firstIndex(where: { !isBlank($0) }),
              let last = bytes.lastIndex(where: { !isBlank($0) }) else { return nil }
        let digits = bytes[first...last]
        guard digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        return Int64(String(decoding: digits, as: UTF8.self))
    }

    /// Where a reconnecting subscriber resumes: the change number of the last event it
    /// received, and, when that event ended a `min_duration` release (its id `N-T`, see
    /// `release`), the time T (milliseconds) up to which the stream had released the tasks
    /// it held. Nil for anything else (such a client gets a fresh snapshot).
    public static func resumePoint(_ text: String) -> ResumePoint? {
        if let change = parse(text) { return ResumePoint(change: change, releasedAt: nil) }
        let parts = text.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let change = parse(String(parts[0])), let releasedAt = parse(String(parts[1])) else {
            return nil
        }
        return ResumePoint(change: change, releasedAt: releasedAt)
    }

    /// The id of the last frame of a `min_duration` release at `time`, on a stream that has
    /// been handed every change up to `change`: a resume from it does not send again the
    /// tasks released by then, which carry no change of their own.
    public static func release(change: Int64, at time: EpochMilliseconds) -> String { "\(change)-\(time)" }
}

/// A subscriber's resume point (`LastEventID.resumePoint`).
public struct ResumePoint: Equatable, Sendable {
    /// The change number of the last event received.
    public var change: Int64
    /// When the id ended a `min_duration` release: every held task of age by then was sent.
    public var releasedAt: EpochMilliseconds?

    public init(change: Int64, releasedAt: EpochMilliseconds?) {
        self.change = change
        self.releasedAt = releasedAt
    }
}
