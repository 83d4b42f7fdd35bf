extension ParsedValues {
    /// Every value given for `option`, in command-line order (`--state running --state
    /// pending`); empty when it was not given. For options declared as repeatable.
    public func all<Value>(_ option: Option<Value>) -> [Value] {
        (repeatedOptions[option.name] ?? []).compactMap(Value.init(argument:))
    }
}
