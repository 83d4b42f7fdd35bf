#if canImport(Glibc)
import Glibc
#endif

/// Stops the run when a property does not hold: the message goes to standard error and the
/// process aborts, which libFuzzer reports as a crash and saves the input that caused it.
func require(_ condition: Bool, _ message: @autoclosure () -> String,
             file: StaticString = #fileID, line: UInt = #line) {
    guard !condition else { return }
    let text = "property failed (\(file):\(line)): \(message())\n"
    _ = text.utf8CString.withUnsafeBufferPointer { write(2, $0.baseAddress, $0.count - 1) }
    abort()
}

/// The bytes of one fuzzer input.
func fuzzInput(_ start: UnsafePointer<UInt8>?, _ count: Int) -> [UInt8] {
    guard let start, count > 0 else { return [] }
    return Array(UnsafeBufferPointer(start: start, count: count))
}
