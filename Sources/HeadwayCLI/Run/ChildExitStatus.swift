/// `headway run` ends with its child's exit status (not one of `CLIError`'s): `main`
/// exits with `status` and prints nothing.
public struct ChildExitStatus: Error, Equatable {
    public let status: Int32
}
