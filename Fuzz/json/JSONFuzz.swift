import HeadwayCore

/// The JSON parser on any bytes. When it accepts, the value is within the depth limit and
/// its canonical text parses back to an equal value whose canonical text is the same (a
/// fixed point); when it refuses, the failure points inside the input.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJSON(_ start: UnsafePointer<UInt8>?, _ count: Int) -> CInt {
    let input = fuzzInput(start, count)
    switch JSONParser.parse(input) {
    case .failure(let failure):
        require((0...input.count).contains(failure.offset), "failure offset \(failure.offset) outside \(input.count) bytes")
        require(!failure.reason.isEmpty, "a failure without a reason")
        require(JSONValue.parse(input) == nil, "JSONValue.parse accepts what JSONParser refuses")
    case .success(let value):
        require(depth(of: value) <= JSONParser.maximumDepth, "accepted nesting \(depth(of: value))")
        require(isFinite(value), "accepted a number that is not finite")
        let text = value.canonicalText
        guard case .success(let again) = JSONParser.parse(Array(text.utf8)) else {
            require(false, "canonical text does not parse: \(text)")
            return 0
        }
        require(again == value, "canonical text parses to another value: \(text)")
        require(again.canonicalText == text, "canonical text is not a fixed point: \(text)")
    }
    return 0
}

/// Levels of arrays and objects around the deepest value (a scalar is 0).
private func depth(of value: JSONValue) -> Int {
    switch value {
    case .array(let items): 1 + (items.map(depth(of:)).max() ?? 0)
    case .object(let members): 1 + (members.values.map(depth(of:)).max() ?? 0)
    default: 0
    }
}

/// Whether every number in `value` is finite (JSON has no NaN or infinity).
private func isFinite(_ value: JSONValue) -> Bool {
    switch value {
    case .number(let number): number.isFinite
    case .array(let items): items.allSatisfy(isFinite)
    case .object(let members): members.values.allSatisfy(isFinite)
    default: true
    }
}
