import ArgumentParsing
import Testing

/// The word reader both executables share: what each kind of option takes, `--` where a
/// program ends options there, and the errors each program words its own way.
@Suite struct ArgumentScannerTests {
    /// Every word of `arguments`, with `--value` taking a value, `--flag` none, `--switch` one
    /// only after `=`.
    private func scan(_ arguments: [String], doubleDashEndsOptions: Bool = true) throws(ScanError) -> [ScannedArgument] {
        var scanner = ArgumentScanner(arguments, doubleDashEndsOptions: doubleDashEndsOptions)
        var words: [ScannedArgument] = []
        let takes: [String: OptionValue] = ["value": .required, "flag": .forbidden, "switch": .optional]
        while let word = try scanner.next({ takes[$0] }) { words.append(word) }
        return words
    }

    @Test func optionsFlagsSwitchesAndPositionals() throws {
        #expect(try scan(["--value", "-1", "--value=a=b", "--flag", "--switch", "--switch=no", "-h", "-", "word"]) == [
            .option(name: "value", value: "-1"), .option(name: "value", value: "a=b"), .option(name: "flag", value: nil),
            .option(name: "switch", value: nil), .option(name: "switch", value: "no"), .short("-h"), .positional("-"),
            .positional("word"),
        ])
    }

    @Test func aDoubleDashEndsOptionsOnlyWhereTheProgramSaysSo() throws {
        #expect(try scan(["--", "--flag", "-h"]) == [.positional("--flag"), .positional("-h")])
        #expect(throws: ScanError.unknownOption("")) { try scan(["--"], doubleDashEndsOptions: false) }
    }

    @Test func mistakes() {
        #expect(throws: ScanError.unknownOption("bogus")) { try scan(["--bogus=1"]) }
        #expect(throws: ScanError.needsValue("value")) { try scan(["--flag", "--value"]) }
        #expect(throws: ScanError.takesNoValue("flag")) { try scan(["--flag=yes"]) }
    }
}
