import Testing
@testable import HeadwayCLI
