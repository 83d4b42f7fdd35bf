import Foundation

/// Smoothed progress per second, computed from when progress arrived.
///
/// The estimator keeps two exponentially decayed sums — of the units done and of the
/// seconds they took — and the rate is their ratio: a time-weighted average in which a
/// sample from `timeConstantSeconds` ago counts 1/e as much as one from now. Samples are
/// taken at most once per `minimumSampleInterval`: reports arriving closer together are
/// folded into the next sample, so a burst of reports after a quiet spell counts as the
/// work of the whole spell instead of as a spike. With a time constant of 10 s:
/// - a steady rate is exact from the second sample on;
/// - bursts every few seconds at a steady average give the average (each sample spans
///   a whole period), so the ETA does not jump between bursts;
/// - after a change of speed, old samples weigh e^(−t/10 s): 5% after 30 s.
public struct RateEstimator: Equatable, Sendable {
    /// How fast old samples fade (seconds).
    public static let timeConstantSeconds = 10.0
    /// Reports closer together than this are folded into one sample (milliseconds).
    public static let minimumSampleInterval: Int64 = 1000

    /// Decayed sum of the units done, and of the seconds spent.
    public var weightedUnits = 0.0
    public var weightedSeconds = 0.0
    /// The time and progress of the last sample (the baseline of the next).
    public var sampleAt: EpochMilliseconds?
    public var sampleValue = 0.0

    public init(weightedUnits: Double = 0, weightedSeconds: Double = 0, sampleAt: EpochMilliseconds? = nil,
                sampleValue: Double = 0) {
        self.weightedUnits = weightedUnits
        self.weightedSeconds = weightedSeconds
        self.sampleAt = sampleAt
        self.sampleValue = sampleValue
    }

    /// Records that progress stood at `value` at `now`.
    public mutating func observe(_ value: Double, at now: EpochMilliseconds) {
        guard let last = sampleAt else {
            sampleAt = now
            sampleValue = value
            return
        }
        if value < sampleValue {
            // The measure itself moved back (a parent gained a child): start again from here.
            sampleAt = now
            sampleValue = value
            return
        }
        let elapsed = now - last
        guard elapsed >= Self.minimumSampleInterval else { return }
        let seconds = Double(elapsed) / 1000
        let decay = exp(-seconds / Self.timeConstantSeconds)
        weightedUnits = weightedUnits * decay + (value - sampleValue)
        weightedSeconds = weightedSeconds * decay + seconds
        sampleAt = now
        sampleValue = value
    }

    /// Units per second, or nil before two samples at least a second apart, or when
    /// nothing moved.
    public var rate: Double? {
        guard weightedSeconds > 0, weightedUnits > 0 else { return nil }
        return weightedUnits / weightedSeconds
    }
}

/// Keeping the shape of a progress curve with fewer points: Largest-Triangle-Three-
/// Buckets (Sveinn Steinarsson, 2013). The first and last points are always kept.
public enum Downsampling {
    /// The indices of at most `maximum` points (at least 2) of `points` (x, y), in order.
    public static func largestTriangleThreeBuckets(_ points: [(x: Double, y: Double)], maximum: Int) -> [Int] {
        let count = points.count
        guard maximum >= 2, count > maximum else { return Array(0..<count) }
        var kept = [0]
        let bucketSize = Double(count - 2) / Double(maximum - 2)
        var previous = 0
        for bucket in 0..<(maximum - 2) {
            let start = Int(Double(bucket) * bucketSize) + 1
            let end = min(Int(Double(bucket + 1) * bucketSize) + 1, count - 1)
            // The average of the next bucket (or the last point) is the third vertex.
            let nextStart = end
            let nextEnd = min(Int(Double(bucket + 2) * bucketSize) + 1, count)
            var averageX = 0.0, averageY = 0.0
            for index in nextStart..<max(nextEnd, nextStart + 1) {
                averageX += points[index].x
                averageY += points[index].y
            }
            let span = Double(max(nextEnd, nextStart + 1) - nextStart)
            averageX /= span
            averageY /= span
            var best = start, bestArea = -1.0
            for index in start..<max(end, start + 1) {
                let area = abs((points[previous].x - averageX) * (points[index].y - points[previous].y)
                    - (points[previous].x - points[index].x) * (averageY - points[previous].y))
                if area > bestArea {
                    bestArea = area
                    best = index
                }
            }
            kept.append(best)
            previous = best
        }
        kept.append(count - 1)
        return kept
    }
}
