/// A command that ends with an exit status of its own (`headway watch --until-done`:
/// 4 a task failed, 5 one was canceled; `headway run`: its child's status, 128+n for
/// signal n); `main` exits with `status`, printing nothing.
public struct CommandExit: Error, Equatable {
    public let status: Int32

    public init(status: Int32) { self.status = status }
}
