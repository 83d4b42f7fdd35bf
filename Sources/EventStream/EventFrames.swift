import HTTPServer
import HeadwayCore

/// The bytes of event-stream frames.
package enum EventFrames {
    /// A change: `id` (unless it is a held-back task shown late), event name, task JSON
    /// (its parent hidden when it lies outside `prefix`, the stream's task prefix).
    package static func event(_ event: TaskEvent, withID: Bool, hidingParentOutside prefix: String? = nil) -> [UInt8] {
        let data = TaskJSON.hidingParent(event.data, parentID: event.parentID, outside: prefix)
        // Ids are numbers and names are fixed constants: neither can hold a line break.
        let frame = try! ServerSentEvent(id: withID ? String(event.changeNumber) : nil, event: event.kind.rawValue, data: data)
        return frame.bytes
    }

    /// A comment line, which keeps proxies and dead-peer detection working.
    static let heartbeat: [UInt8] = Array(ServerSentEvent.comment().utf8)
}
