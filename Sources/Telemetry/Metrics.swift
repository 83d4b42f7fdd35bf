import Foundation
import Lifecycle
import Synchronization

// The primitives behind `GET /metrics`: counters and histograms cheap enough for the hot
// path (an atomic add, or one uncontended pthread-mutex lock), and the text exposition
// format 0.0.4 that Prometheus reads.

/// A number that only goes up (a Prometheus counter), bumped with one relaxed atomic add.
package final class MetricCounter: Sendable {
    private let count = Atomic<UInt64>(0)

    /// Adds `amount`.
    package func add(_ amount: UInt64 = 1) { count.add(amount, ordering: .relaxed) }

    /// The count now.
    var value: UInt64 { count.load(ordering: .relaxed) }

    package init() {}
}

/// The label values that tell apart the series of one family. A key is hashed on every
/// observation, so the hot ones are small structs of integers and references made once
/// (a route, a method, a status); their strings are spelled out only at the scrape.
/// Values come from small closed sets (route patterns, statuses, problem codes), never
/// from anything a client may choose freely.
package protocol MetricLabels: Hashable, Sendable {
    /// The values, in the order of the family's label names.
    var labelValues: [String] { get }
}

/// Label values spelled out already: for series bumped off the hot path.
extension Array: MetricLabels where Element == String {
    package var labelValues: [String] { self }
}

/// No labels: a family of one series.
struct NoLabels: MetricLabels {
    var labelValues: [String] { [] }
}

/// Counters told apart by their label values.
///
/// The series bumped last is kept apart, with what was added to it since: a run of adds to
/// one series (a load on one route) compares labels instead of hashing them.
package final class LabeledCounters<Labels: MetricLabels>: Sendable {
    private struct State {
        var counts: [Labels: UInt64] = [:]
        /// The series bumped last and what was added to it since, not in `counts` yet.
        var recent: (labels: Labels, amount: UInt64)?
    }

    private let state = Locked(State())

    /// Adds `amount` to the counter of `labels`.
    package func add(_ labels: Labels, _ amount: UInt64 = 1) {
        state.withLock { state in
            if let recent = state.recent {
                if recent.labels == labels { return state.recent!.amount += amount }
                state.counts[recent.labels, default: 0] += recent.amount
            }
            state.recent = (labels, amount)
        }
    }

    /// Every counter, by its label values.
    var values: [Labels: UInt64] {
        state.withLock { state in
            var counts = state.counts
            if let recent = state.recent { counts[recent.labels, default: 0] += recent.amount }
            return counts
        }
    }
}

/// Observations counted in buckets (a Prometheus histogram): cumulative when shown.
struct HistogramValues: Sendable, Equatable {
    /// The upper bounds of the buckets, ascending (`+Inf` is implied).
    let bounds: [Double]
    /// Observations per bucket (not cumulative), the last one past every bound.
    var counts: [UInt64]
    var sum = 0.0
    var count: UInt64 = 0

    init(bounds: [Double]) {
        self.bounds = bounds
        counts = Array(repeating: 0, count: bounds.count + 1)
    }

    mutating func observe(_ value: Double) {
        var index = 0
        while index < bounds.count && value > bounds[index] { index += 1 }
        counts[index] += 1
        sum += value
        count += 1
    }

    /// Adds the observations of `other`, a histogram with the same bounds.
    mutating func add(_ other: HistogramValues) {
        for index in counts.indices { counts[index] += other.counts[index] }
        sum += other.sum
        count += other.count
    }

    /// Forgets every observation (the buckets keep their room).
    mutating func reset() {
        for index in counts.indices { counts[index] = 0 }
        sum = 0
        count = 0
    }
}

/// A histogram, or one per label values, under one lock.
///
/// As with `LabeledCounters`, the series observed last is kept apart with what it was
/// given since (`recent`), merged into the dictionary when another series is observed: a
/// run of observations of one series hashes nothing, and a switch hashes once, as an
/// observation did before.
final class Histograms<Labels: MetricLabels>: Sendable {
    let bounds: [Double]

    private struct State {
        var histograms: [Labels: HistogramValues] = [:]
        /// The series observed last, if any.
        var recentLabels: Labels?
        /// What that series was given since it became the last, not in `histograms` yet.
        var recent: HistogramValues
    }

    private let state: Locked<State>

    init(bounds: [Double]) {
        self.bounds = bounds
        state = Locked(State(recent: HistogramValues(bounds: bounds)))
    }

    /// Counts `value` in the histogram of `labels`.
    func observe(_ value: Double, _ labels: Labels) {
        state.withLock { [bounds] state in
            if state.recentLabels != labels {
                if let previous = state.recentLabels {
                    state.histograms[previous, default: HistogramValues(bounds: bounds)].add(state.recent)
                    state.recent.reset()
                }
                state.recentLabels = labels
            }
            state.recent.observe(value)
        }
    }

    /// Every histogram, by its label values.
    var snapshot: [Labels: HistogramValues] {
        state.withLock { [bounds] state in
            var histograms = state.histograms
            if let labels = state.recentLabels { histograms[labels, default: HistogramValues(bounds: bounds)].add(state.recent) }
            return histograms
        }
    }
}

extension Histograms where Labels == NoLabels {
    /// Counts `value` in the one histogram of an unlabeled family.
    func observe(_ value: Double) { observe(value, NoLabels()) }

    /// The one histogram, at zero before its first observation: a family observed rarely
    /// (the writer's checkpoints) is then in every scrape, as counters are from the start.
    var snapshotFromZero: [NoLabels: HistogramValues] {
        let histograms = snapshot
        return histograms.isEmpty ? [NoLabels(): HistogramValues(bounds: bounds)] : histograms
    }
}

/// Bounds for durations in seconds, from 100 µs to 10 s.
let secondsBuckets: [Double] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                0.25, 0.5, 1, 2.5, 5, 10]

/// Writes the Prometheus text exposition format, version 0.0.4: each family's `# HELP`
/// and `# TYPE` lines, then its samples; label values escaped (`\\`, `\"`, `\n`).
package struct PrometheusText {
    /// The `Content-Type` of the format.
    package static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    private(set) var text = ""

    enum Kind: String {
        case counter, gauge, histogram
    }

    /// Starts a family.
    mutating func family(_ name: String, _ kind: Kind, _ help: String) {
        text += "# HELP \(name) \(Self.escapeHelp(help))\n# TYPE \(name) \(kind.rawValue)\n"
    }

    /// One sample.
    mutating func sample(_ name: String, _ labels: KeyValuePairs<String, String> = [:], _ value: Double) {
        sample(name, labels.map { ($0.key, $0.value) }, value)
    }

    mutating func sample(_ name: String, _ labels: [(String, String)], _ value: Double) {
        text += name
        if !labels.isEmpty {
            text += "{" + labels.map { "\($0.0)=\"\(Self.escapeLabel($0.1))\"" }.joined(separator: ",") + "}"
        }
        text += " " + Self.format(value) + "\n"
    }

    /// A whole family of counters from their label values.
    mutating func counters<Labels: MetricLabels>(_ name: String, _ help: String, labels names: [String],
                                                 _ values: [Labels: UInt64]) {
        family(name, .counter, help)
        for (labels, value) in Self.sorted(values) {
            sample(name, Array(zip(names, labels)), Double(value))
        }
    }

    /// A whole family of histograms: cumulative `_bucket`s ending with `le="+Inf"`, then
    /// `_sum` and `_count`.
    mutating func histograms<Labels: MetricLabels>(_ name: String, _ help: String, labels names: [String],
                                                   _ values: [Labels: HistogramValues]) {
        family(name, .histogram, help)
        for (labels, histogram) in Self.sorted(values) {
            let base = Array(zip(names, labels))
            var cumulative: UInt64 = 0
            for (index, bound) in histogram.bounds.enumerated() {
                cumulative += histogram.counts[index]
                sample(name + "_bucket", base + [("le", Self.format(bound))], Double(cumulative))
            }
            sample(name + "_bucket", base + [("le", "+Inf")], Double(histogram.count))
            sample(name + "_sum", base, histogram.sum)
            sample(name + "_count", base, Double(histogram.count))
        }
    }

    /// The series of a family with their label values spelled out, in the order of those
    /// values (a scrape reads the same order every time).
    private static func sorted<Labels: MetricLabels, Value>(_ values: [Labels: Value]) -> [([String], Value)] {
        values.map { ($0.key.labelValues, $0.value) }.sorted { $0.0.lexicographicallyPrecedes($1.0) }
    }

    /// A value as Prometheus writes it: integers without a fraction, `+Inf`, `-Inf`, `NaN`.
    static func format(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded() && abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }

    static func escapeLabel(_ value: String) -> String {
        var escaped = ""
        for character in value.unicodeScalars {
            switch character {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            case "\n": escaped += "\\n"
            default: escaped.unicodeScalars.append(character)
            }
        }
        return escaped
    }

    static func escapeHelp(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n")
    }
}
