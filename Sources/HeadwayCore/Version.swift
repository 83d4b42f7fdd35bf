/// The version of this build, one for both executables: `headwayd --version`,
/// `headway --version`, the `server.listening` log line, `headway_build_info`, both
/// User-Agent headers and `info.version` of openapi.yaml state it (tests keep the spec in step).
public enum HeadwayVersion {
    public static let current = "0.1.0"
}
