/// A type an option or argument value converts to from its command-line text.
public protocol ArgumentValue: Sendable {
    /// The value that `text` names, or nil when it is not one (the parser reports it).
    init?(argument text: String)
    /// How the help text and errors name this kind of value ("an integer").
    static var kindDescription: String { get }
}

extension String: ArgumentValue {
    public init?(argument text: String) { self = text }
    public static var kindDescription: String { "text" }
}

extension Int64: ArgumentValue {
    public init?(argument text: String) { self.init(text) }
    public static var kindDescription: String { "an integer" }
}

extension Double: ArgumentValue {
    /// A decimal number (`2.5`, `1e3`); not hexadecimal, infinite or NaN.
    public init?(argument text: String) {
        guard text.utf8.allSatisfy({ (0x30...0x39).contains($0) || "+-.eE".utf8.contains($0) }),
              let value = Double(text), value.isFinite else { return nil }
        self = value
    }
    public static var kindDescription: String { "a number" }
}

/// An option that takes a value: `--total 1200` or `--total=1200`.
public struct Option<Value: ArgumentValue>: Sendable {
    /// The long name without dashes.
    public let name: String
    /// The placeholder shown in help (`<n>`).
    public let valueName: String
    /// One line of help.
    public let help: String
    /// Whether the command cannot run without it.
    public let isRequired: Bool

    public init(_ name: String, valueName: String, help: String, required: Bool = false) {
        self.name = name
        self.valueName = valueName
        self.help = help
        self.isRequired = required
    }

    /// The definition the parser and the help generator use.
    public var definition: ArgumentDefinition {
        .typed(Value.self, kind: .option(valueName: valueName), name: name, help: help, isRequired: isRequired)
    }
}

/// An option without a value: `--yes`.
public struct Flag: Sendable {
    public let name: String
    public let help: String

    public init(_ name: String, help: String) {
        self.name = name
        self.help = help
    }

    public var definition: ArgumentDefinition {
        ArgumentDefinition(kind: .flag, name: name, help: help, isRequired: false,
                           accepts: { _ in true }, kindDescription: "")
    }
}

/// A positional argument: `headway progress ID`. Every positional argument is required.
public struct Argument<Value: ArgumentValue>: Sendable {
    public let name: String
    public let help: String

    public init(_ name: String, help: String) {
        self.name = name
        self.help = help
    }

    public var definition: ArgumentDefinition {
        .typed(Value.self, kind: .positional, name: name, help: help, isRequired: true)
    }
}

/// One option, flag or argument as the parser and the help generator see it, whatever
/// the type of its value.
public struct ArgumentDefinition: Sendable {
    public enum Kind: Sendable, Equatable {
        case option(valueName: String)
        case flag
        case positional
    }

    public let kind: Kind
    public let name: String
    public let help: String
    public let isRequired: Bool
    /// Whether the text converts to the value's type.
    let accepts: @Sendable (String) -> Bool
    let kindDescription: String

    /// How usage lines and errors name it: `--total <n>`, `--yes`, `<id>`.
    var synopsis: String {
        switch kind {
        case .option(let valueName): "--\(name) <\(valueName)>"
        case .flag: "--\(name)"
        case .positional: "<\(name)>"
        }
    }

    /// How an error names it: `--total`, `<id>`.
    var displayName: String { kind == .positional ? "<\(name)>" : "--\(name)" }

    /// The definition of an option or argument whose text converts to `Value`.
    static func typed<Value: ArgumentValue>(_: Value.Type, kind: Kind, name: String, help: String,
                                            isRequired: Bool) -> ArgumentDefinition {
        ArgumentDefinition(kind: kind, name: name, help: help, isRequired: isRequired,
                           accepts: { Value(argument: $0) != nil }, kindDescription: Value.kindDescription)
    }
}

/// The values found on the command line, read back through the typed definitions.
public struct ParsedValues: Sendable {
    var options: [String: String] = [:]
    /// Every value of each option, in command-line order (for options that repeat).
    var repeatedOptions: [String: [String]] = [:]
    var flags: Set<String> = []
    var positionals: [String: String] = [:]
    /// The positional texts after the declared arguments, for a command that takes them.
    public internal(set) var trailing: [String] = []
    /// The texts taken by a last positional that is not required (`watch [ID…]`).
    var variadics: [String: [String]] = [:]

    public init() {}

    /// The value of `option`, nil when it was not given.
    public subscript<Value>(_ option: Option<Value>) -> Value? {
        options[option.name].flatMap(Value.init(argument:))
    }

    /// Whether `flag` was given.
    public subscript(_ flag: Flag) -> Bool { flags.contains(flag.name) }

    /// The value of a positional argument (the parser has checked that it is there).
    public subscript<Value>(_ argument: Argument<Value>) -> Value {
        positionals[argument.name].flatMap(Value.init(argument:))!
    }
}

/// Any number of positional arguments, none needed: `headway watch [<id> ...]`. Only the
/// last positional argument of a command may be one.
public struct VariadicArgument<Value: ArgumentValue>: Sendable {
    public let name: String
    public let help: String

    public init(_ name: String, help: String) {
        self.name = name
        self.help = help
    }

    public var definition: ArgumentDefinition {
        .typed(Value.self, kind: .positional, name: name, help: help, isRequired: false)
    }
}

extension ParsedValues {
    /// The values of a variadic argument, in command-line order (empty when none).
    public subscript<Value>(_ argument: VariadicArgument<Value>) -> [Value] {
        (variadics[argument.name] ?? []).compactMap(Value.init(argument:))
    }
}
