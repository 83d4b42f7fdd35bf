/// A mistake on the command line; the daemon prints it with the usage hint and exits 64.
public struct UsageError: Error, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }

    /// `description` after `origin` (`FILE:LINE: …`), when the value comes from a file.
    package init(_ description: String, at origin: String?) {
        self.description = origin.map { "\($0): \(description)" } ?? description
    }
}
