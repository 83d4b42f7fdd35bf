/// The version of this build, as `headwayd --version`, the `server.listening` log line and
/// `info.version` of openapi.yaml state it (a test keeps the two in step).
public enum HeadwayVersion {
    public static let current = "0.1.0"
}
