import Foundation
import HeadwayCore
import HeadwayTestSupport
import Testing
@testable import Daemon

/// `Setting.all` is the one source of the daemon's settings: each entry, and nothing else,
/// makes a setting appear in `--help`, be taken from a flag, its variable and a
/// configuration-file line, land in one place of the configuration, and be compared by the
/// reload diff as it says. Every check iterates the table.
@Suite struct SettingsTableTests {
    private let directory = TemporaryDirectory()

    private func parse(_ arguments: [String], _ environment: [String: String] = [:]) throws -> Configuration {
        guard case .run(let configuration) = try Configuration.parse(arguments: arguments, environment: environment) else {
            throw UsageError("expected a run command")
        }
        return configuration
    }

    /// The settings given together with `setting`: the TLS files come in pairs.
    private func givenWith(_ setting: Setting) -> [Setting] {
        let pair = [Setting.tlsCertificateName, Setting.tlsKeyName]
        guard pair.contains(setting.name) else { return [setting] }
        return pair.compactMap(Setting.named)
    }

    /// The example value of `setting`; the configuration file's own setting gets a file.
    private func example(_ setting: Setting) throws -> String {
        guard !setting.readFromFile else { return setting.example }
        let path = directory.file("empty.conf")
        try "".write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Names and variables are unique, and each is a row of `--help` with its variable.
    @Test func everySettingIsARowOfTheHelp() {
        #expect(Set(Setting.all.map(\.name)).count == Setting.all.count)
        #expect(Set(Setting.all.map(\.environmentVariable)).count == Setting.all.count)
        let rows = Configuration.usage.split(separator: "\n").filter { $0.hasPrefix("  --") }
            .map { String($0.dropFirst(4).prefix { $0 != " " }) }
        #expect(rows == Setting.all.map(\.name) + ["version"])
        for setting in Setting.all {
            #expect(setting.helpRows.hasPrefix("  --\(setting.name)"))
            #expect(Configuration.usage.contains(setting.helpRows + "\n"), "\(setting.name)")
            #expect(setting.helpRows.contains(setting.environmentVariable), "\(setting.name)")
            if let shown = setting.shownValue(Configuration()) {
                let words = setting.helpRows.split(whereSeparator: \.isWhitespace).joined(separator: " ")
                #expect(words.contains("default \(shown)"), "\(setting.name)")
            }
        }
    }

    /// Each setting's example, given by a flag, by its variable, or by a file line, changes
    /// that setting and no other; the reload diff names it unless the table says it is not
    /// compared.
    @Test func everySourceGivesEverySettingAndTheDiffFollowsTheTable() throws {
        defer { directory.remove() }
        let defaults = Configuration()
        for setting in Setting.all {
            let given = givenWith(setting)
            var flags: [String] = []
            var environment: [String: String] = [:]
            var lines: [String] = []
            for each in given {
                let value = try example(each)
                flags += each.shape == .switchFlag ? ["--\(each.name)"] : ["--\(each.name)", value]
                environment[each.environmentVariable] = value
                lines.append("\(each.name) = \(value)")
            }
            var sources = [("flags", try parse(flags)), ("environment", try parse([], environment))]
            if setting.readFromFile {
                let path = directory.file("\(setting.name).conf")
                try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
                var fromFile = try parse(["--config", path])
                fromFile.configurationFilePath = nil
                sources.append(("file", fromFile))
            } else {
                let path = directory.file("refused.conf")
                try "\(setting.name) = \(try example(setting))\n".write(toFile: path, atomically: true, encoding: .utf8)
                #expect(throws: UsageError.self) { try parse(["--config", path]) }
            }
            let givenNames = given.map(\.name)
            for (source, configuration) in sources {
                let changed = Setting.all.filter { $0.differs(configuration, defaults) }.map(\.name)
                #expect(changed == givenNames, "\(setting.name) from \(source)")
                let compared = given.filter { $0.reload != .notCompared }.map(\.name)
                #expect(configuration.settingsChanged(from: defaults) == compared, "\(setting.name) from \(source)")
            }
        }
    }

    /// The only setting a reload applies at once is the log level, the one `Reload` applies.
    @Test func theReloadAppliesWhatTheTableSays() {
        #expect(Setting.all.filter { $0.reload == .appliedAtOnce }.map(\.name) == ["log-level"])
    }
}
