import CMicroHTTPD
import Foundation

/// A request's head and query read out of the library's connection.
extension MicroHTTPServer {
    /// The request's header lines as the library gave them, names in lower case. libmicrohttpd
    /// 0.9.75 parses a line in place (`name\0` then optional whitespace then the value), but
    /// appends a line folded onto it (obs-fold: a line that begins with a space or a tab)
    /// to its *name*, in a copy elsewhere in the connection's memory: a field whose value
    /// does not follow its name, its NUL and only spaces or tabs, was folded. A NUL in a
    /// value ends it for the library (its length too), but not the line: the bytes from a
    /// value's end to the next line's name (or, for the last, to the end of the head, from
    /// `method`, which begins it, `headway_connection_head_size` bytes on) are the NULs the
    /// library wrote over the line ends, and anything else came after a NUL of the value
    /// (one at the very end of a value cannot be told from a line end: it hides nothing).
    /// The lines are gathered into an array reserved at their count (the library counts
    /// them when given no callback): one allocation a request.
    static func headFields(_ connection: OpaquePointer, method: UnsafePointer<CChar>) -> [HeadCheck.Field] {
        struct Gathered {
            var fields: [HeadCheck.Field] = []
            /// Where the last field's value ends, if its line lies in place.
            var valueEnd: UnsafePointer<CChar>?

            /// Marks the last field if anything but NULs lies between its value's end and `next`.
            mutating func checkLineEnd(before next: UnsafePointer<CChar>) {
                guard let valueEnd, !fields.isEmpty else { return }
                let gap = valueEnd.distance(to: next)
                // Both lie in the connection's memory; a gap beyond it is no gap of one line end.
                if (1...16 * 1024).contains(gap) && !(0..<gap).allSatisfy({ valueEnd[$0] == 0 }) {
                    fields[fields.count - 1].controlInValue = true
                }
            }
        }
        var gathered = Gathered()
        gathered.fields.reserveCapacity(Int(MHD_get_connection_values(connection, .HEADER_KIND, nil, nil)))
        _ = withUnsafeMutablePointer(to: &gathered) { gathered in
            MHD_get_connection_values(connection, .HEADER_KIND, { cls, _, key, value in
                guard let cls, let key else { return MHD_Result.YES }
                let gathered = cls.assumingMemoryBound(to: Gathered.self)
                gathered.pointee.checkLineEnd(before: key)
                gathered.pointee.valueEnd = nil
                var field = HeadCheck.Field(name: String(lowercasingASCII: key), value: value.map { String(cString: $0) } ?? "")
                if let value {
                    let length = strlen(value)
                    field.controlInValue = HeadCheck.hasControlCharacter(UnsafeRawBufferPointer(start: value, count: length))
                    let afterName = key + strlen(key) + 1
                    let gap = afterName.distance(to: value)
                    // Both lie in the connection's memory; a gap beyond it is no gap of one line.
                    field.folded = !(0...16 * 1024).contains(gap)
                        || !(0..<gap).allSatisfy { afterName[$0] == 0x20 || afterName[$0] == 0x09 }
                    if !field.folded { gathered.pointee.valueEnd = value + length }
                }
                gathered.pointee.fields.append(field)
                return MHD_Result.YES
            }, gathered)
        }
        let headSize = headway_connection_head_size(connection)
        if headSize > 0 { gathered.checkLineEnd(before: method + headSize) }
        return gathered.fields
    }

    /// A header line as handlers see it: the name in lower case, the value without the
    /// spaces and tabs around it (RFC 9110 §5.5; the library drops those before it only).
    static func header(_ field: HeadCheck.Field) -> HTTPField {
        var value = field.value
        if let last = value.utf8.last, last == 0x20 || last == 0x09 {
            value = String(decoding: value.utf8.reversed().drop { $0 == 0x20 || $0 == 0x09 }.reversed(), as: UTF8.self)
        }
        return HTTPField(field.name, value)
    }

    /// The request's query arguments, names and values as the library decoded them (none
    /// allocates nothing; like `headFields`, one array reserved at their count).
    static func queryArguments(_ connection: OpaquePointer) -> [HTTPField] {
        let count = Int(MHD_get_connection_values(connection, .GET_ARGUMENT_KIND, nil, nil))
        guard count > 0 else { return [] }
        var fields: [HTTPField] = []
        fields.reserveCapacity(count)
        _ = withUnsafeMutablePointer(to: &fields) { fields in
            MHD_get_connection_values(connection, .GET_ARGUMENT_KIND, { cls, _, key, value in
                guard let cls, let key else { return MHD_Result.YES }
                cls.assumingMemoryBound(to: [HTTPField].self).pointee
                    .append(HTTPField(String(cString: key), value.map { String(cString: $0) } ?? ""))
                return MHD_Result.YES
            }, fields)
        }
        return fields
    }
}
