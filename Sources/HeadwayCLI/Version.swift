/// The version `headway --version` prints; a test keeps it equal to `info.version` of
/// openapi.yaml, as `headwayd --version` is.
public enum HeadwayCLIVersion {
    public static let current = "0.1.0"
}
