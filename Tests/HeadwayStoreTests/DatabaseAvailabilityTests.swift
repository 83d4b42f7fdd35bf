import Foundation
import Lifecycle
import Testing
@testable import HeadwayStore

/// What the writer tells of the database's reach (`DatabaseAvailability`), on an injected
/// clock: one report per change, and the time unavailable summed over the outages.
@Suite struct DatabaseAvailabilityTests {
    @Test func eachOutageIsReportedOnceAndItsTimeAddsUp() {
        let clock = Locked<UInt64>(1_000)
        let reports = Locked<[DatabaseAvailability.Change]>([])
        let availability = DatabaseAvailability(now: { clock.withLock { $0 } },
                                                report: { change in reports.withLock { $0.append(change) } })
        let gone = DatabaseError.unavailable("cannot connect")
        #expect(availability.isAvailable && availability.unavailableSeconds == 0)
        availability.reached()
        #expect(reports.withLock { $0 } == [], "reaching it while available is no change")

        availability.unreachable(gone)
        clock.withLock { $0 += 1_500_000_000 }
        availability.unreachable(gone)
        #expect(!availability.isAvailable)
        #expect(availability.unavailableSeconds == 1.5, "the outage under way counts")
        availability.reached()
        clock.withLock { $0 += 10_000_000_000 }
        #expect(availability.isAvailable && availability.unavailableSeconds == 1.5)

        availability.unreachable(gone)
        clock.withLock { $0 += 250_000_000 }
        availability.reached()
        #expect(availability.unavailableSeconds == 1.75)
        #expect(reports.withLock { $0 } == [
            .unavailable(error: "\(gone)"), .available(afterSeconds: 1.5),
            .unavailable(error: "\(gone)"), .available(afterSeconds: 0.25),
        ])
    }
}
