import HTTPServer
import HeadwayCore

/// The bytes of event-stream frames.
enum EventFrames {
    /// A change: `id` (unless it is a held-back task shown late), event name, task JSON.
    static func event(_ event: TaskEvent, withID: Bool) -> [UInt8] {
        // Ids are numbers and names are fixed constants: neither can hold a line break.
        let frame = try! ServerSentEvent(id: withID ? String(event.changeNumber) : nil, event: event.kind.rawValue, data: event.data)
        return frame.bytes
    }

    /// The first event of a fresh subscription.
    static func snapshot(_ tasks: [TaskRecord], changeNumber: Int64) -> [UInt8] {
        var data = "{\"tasks\":["
        for (index, task) in tasks.enumerated() {
            if index > 0 { data += "," }
            data += task.json
        }
        data += "]}"
        let frame = try! ServerSentEvent(id: String(changeNumber), event: "snapshot", data: data)
        return frame.bytes
    }

    /// A comment line, which keeps proxies and dead-peer detection working.
    static let heartbeat: [UInt8] = Array(ServerSentEvent.comment().utf8)
}
