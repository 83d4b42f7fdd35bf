import ArgumentParsing
import Foundation
import HeadwayCore

/// One setting's text and where it comes from: nil for a flag or an environment variable,
/// `FILE:LINE` for a line of the configuration file (errors about the value name it).
struct SettingText: Equatable {
    var text: String
    var origin: String?

    init(_ text: String, origin: String? = nil) {
        self.text = text
        self.origin = origin
    }
}

/// The settings one source gives (the configuration file, the environment, the flags), by
/// flag name: single values, and the lists of repeatable settings.
struct SettingLayer {
    var values: [String: SettingText] = [:]
    var lists: [String: [SettingText]] = [:]

    /// Puts `upper`'s settings over these: a single value replaces the one below it, a list
    /// replaces the whole list below it.
    mutating func overlay(_ upper: SettingLayer) {
        values.merge(upper.values) { _, upper in upper }
        lists.merge(upper.lists) { _, upper in upper }
    }
}

/// The configuration file (`--config FILE`): one `name = value` per line, with the long
/// option names (`log-level = debug`); blank lines and lines starting with `#` are skipped;
/// the value is the rest of the line, spaces around it trimmed. A repeatable setting
/// (`public-url`, `cors-origin`) may appear on several lines, each adding a value; any other
/// appears once. Values are checked as the flags are, after the layers are merged.
enum ConfigurationFile {
    /// The longest line taken (a URL, a path, a number).
    static let maximumLineBytes = 4096

    /// The settings of the file at `path`; a file that cannot be read, or a line that is not
    /// a known setting, is refused with the file, the line and the reason.
    static func read(path: String) throws(UsageError) -> SettingLayer {
        let contents: String
        do {
            contents = try readText(path: path)
        } catch {
            throw UsageError("cannot read the configuration file \(path): \(error.description)")
        }
        var layer = SettingLayer()
        var firstLines: [String: Int] = [:]
        // "\r\n" is one Character: a file with CRLF line ends reads as well.
        let lines = contents.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" })
        for (offset, rawLine) in lines.enumerated() {
            let number = offset + 1
            let origin = "\(path):\(number)"
            let line = rawLine.trimmingCharacters(in: .whitespacesAndNewlines)
            if line.isEmpty || line.hasPrefix("#") { continue }
            // No setting needs more; a longer line would be echoed whole in the error.
            guard line.utf8.count <= maximumLineBytes else {
                throw UsageError("a line longer than \(maximumLineBytes) bytes", at: origin)
            }
            guard let equals = line.firstIndex(of: "=") else {
                throw UsageError("expected 'name = value', not '\(line)'", at: origin)
            }
            let name = line[..<equals].trimmingCharacters(in: .whitespaces)
            let value = SettingText(line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces), origin: origin)
            guard let setting = Setting.named(name), setting.readFromFile else {
                let suggestion = Suggestion.didYouMean(name, among: Setting.all.filter(\.readFromFile).map(\.name))
                throw UsageError("unknown setting '\(name)'"
                                 + (suggestion.isEmpty ? " (settings are the long option names, e.g. log-level)" : suggestion),
                                 at: origin)
            }
            if setting.shape == .list {
                layer.lists[name, default: []].append(value)
                continue
            }
            if let first = firstLines[name] {
                throw UsageError("'\(name)' is set again (first at line \(first))", at: origin)
            }
            firstLines[name] = number
            layer.values[name] = value
        }
        return layer
    }

    /// The UTF-8 text of the file at `path` (a leading byte-order mark dropped), or the
    /// reason it cannot be read. Only a regular file is read: it is opened without
    /// blocking and checked first, so a FIFO or a device at the path can never hold up the
    /// thread that also handles the signals.
    private static func readText(path: String) throws(UsageError) -> String {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else { throw UsageError(String(cString: strerror(errno))) }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw UsageError(String(cString: strerror(errno))) }
        guard status.st_mode & S_IFMT == S_IFREG else { throw UsageError("not a regular file") }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw UsageError(String(cString: strerror(errno)))
            }
            if count == 0 { break }
            bytes += chunk[..<count]
            guard bytes.count <= 1024 * 1024 else { throw UsageError("larger than 1 MiB") }
        }
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw UsageError("not UTF-8 text") }
        return text
    }
}
