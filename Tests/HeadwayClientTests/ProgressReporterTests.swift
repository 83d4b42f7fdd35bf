import Foundation
import HeadwayClient
import HeadwayTestSupport
import Testing

/// `ProgressReporter` against a live headwayd: a `Progress` tree as a task tree, coalescing
/// on an injected clock, cancel from the API, and a server that goes away mid-run.
@Suite(.serialized) struct ProgressReporterTests {
    /// A parent of two children: the stored tasks hold exactly Foundation's counts, the
    /// children weighted by their pending units, and all finish succeeded.
    @Test func aProgressTreeIsReportedAsATaskTree() async throws {
        let daemon = try RestartableDaemon()
        defer { daemon.remove() }
        let client = daemon.client
        let root = LabeledProgress(totalUnitCount: 3, label: "Importing")
        let reporter = ProgressReporter(progress: root, taskID: "import", name: "Import", client: client, clock: ManualClock())
        let download = LabeledProgress(totalUnitCount: 10, label: "Downloading")
        reporter.addChild(download, withPendingUnitCount: 1, name: "Download")
        let unpack = Progress(totalUnitCount: 4)
        reporter.addChild(unpack, withPendingUnitCount: 2, name: "Unpack", taskID: "import-unpack")

        download.completedUnitCount = 5
        #expect(await reporter.flush())
        var parent = try await client.task("import")
        var child = try await client.task("import.1")
        #expect(parent.completed == 0 && parent.total == 3 && parent.label == "Importing")
        #expect(child.parentID == "import" && child.completed == 5 && child.total == 10 && child.weight == 1
                && child.label == "Downloading")
        #expect(abs((parent.fraction ?? 0) - root.fractionCompleted) < 1e-9, "\(String(describing: parent.fraction)) \(root.fractionCompleted)")

        download.completedUnitCount = 10
        unpack.completedUnitCount = 1
        #expect(await reporter.flush())
        child = try await client.task("import.1")
        parent = try await client.task("import")
        #expect(child.state == .succeeded && child.completed == 10)
        #expect(parent.completed == 1 && root.completedUnitCount == 1, "a finished child's units, counted once")
        #expect(abs((parent.fraction ?? 0) - root.fractionCompleted) < 1e-9, "\(String(describing: parent.fraction)) \(root.fractionCompleted)")

        unpack.completedUnitCount = 4
        #expect(await reporter.finish(outcome: .succeeded, message: "imported"))
        #expect(reporter.isDone)
        parent = try await client.task("import")
        let unpacked = try await client.task("import-unpack")
        #expect(parent.state == .succeeded && parent.completed == 3 && parent.total == 3 && parent.fraction == 1
                && parent.message == "imported")
        #expect(parent.children?.total == 2 && parent.children?.succeeded == 2)
        #expect(unpacked.state == .succeeded && unpacked.completed == 4 && unpacked.total == 4 && unpacked.weight == 2
                && unpacked.parentID == "import")
        let tree = try await client.tasks(TaskFilter(parentID: "import"))
        #expect(Set(tree.tasks.map(\.id)) == ["import.1", "import-unpack"])
    }

    /// A thousand changes between two ticks of the clock are one report: the server
    /// applied one item (`seq` 1) holding the last count; nothing is sent without a tick.
    @Test func changesBetweenTicksAreCoalesced() async throws {
        let daemon = try RestartableDaemon()
        defer { daemon.remove() }
        let client = daemon.client
        let clock = ManualClock()
        let progress = Progress(totalUnitCount: 1000)
        let reporter = ProgressReporter(progress: progress, taskID: "loop", name: "Loop", client: client,
                                        interval: .milliseconds(250), clock: clock)
        for step in 1...1000 { progress.completedUnitCount = Int64(step) }
        await #expect(throws: HeadwayError.self, "nothing is sent before the clock ticks") { try await client.task("loop") }
        #expect(await eventually {
            clock.advance(by: .milliseconds(250))
            return (try? await client.task("loop").completed) == 1000
        })
        let task = try await client.task("loop")
        #expect(task.seq == 1 && task.completed == 1000 && task.total == 1000, "one report: seq \(String(describing: task.seq))")
        for _ in 0..<3 { clock.advance(by: .milliseconds(250)) }
        #expect(await reporter.finish(outcome: .succeeded))
        #expect(try await client.task("loop").seq == 1, "nothing changed, nothing sent")
    }

    /// A cancel asked through the API reaches the job: the next reply says so, and the
    /// reporter cancels the `Progress` (Foundation cancels its children with it).
    @Test func aCancelFromTheAPICancelsTheProgress() async throws {
        let daemon = try RestartableDaemon()
        defer { daemon.remove() }
        let client = daemon.client
        let root = Progress(totalUnitCount: 10)
        let reporter = ProgressReporter(progress: root, taskID: "job", name: "Job", client: client, clock: ManualClock())
        let part = Progress(totalUnitCount: 5)
        reporter.addChild(part, withPendingUnitCount: 5, name: "Part")
        #expect(await reporter.flush())
        #expect(!root.isCancelled)
        _ = try await client.cancel("job")
        root.completedUnitCount = 1
        #expect(await reporter.flush())
        #expect(root.isCancelled && part.isCancelled)
        #expect(await reporter.finish(outcome: .canceled, message: "stopped on request"))
        let task = try await client.task("job")
        #expect(task.state == .canceled && task.message == "stopped on request")
        #expect(try await client.task("job.1").state == .canceled)
    }

    /// The server goes away mid-run: the job goes on, one warning is given, and once the
    /// server is back the final state arrives by itself.
    @Test func theFinalStateArrivesAfterTheServerComesBack() async throws {
        let daemon = try RestartableDaemon()
        defer { daemon.remove() }
        let client = daemon.client
        let warnings = Warnings()
        let clock = ManualClock()
        let progress = Progress(totalUnitCount: 100)
        let reporter = ProgressReporter(progress: progress, taskID: "sync", name: "Sync", client: client,
                                        maximumBackoff: .seconds(1), clock: clock, warn: { warnings.record($0) })
        progress.completedUnitCount = 30
        #expect(await reporter.flush())
        daemon.stop()
        for step in 31...100 { progress.completedUnitCount = Int64(step) }
        #expect(await reporter.finish(outcome: .succeeded) == false, "the server is away")
        #expect(!reporter.isDone)
        try daemon.restart()
        #expect(await eventually {
            clock.advance(by: .milliseconds(250))
            return reporter.isDone
        })
        let task = try await client.task("sync")
        #expect(task.state == .succeeded && task.completed == 100 && task.total == 100)
        #expect(warnings.all.count == 1 && warnings.all[0].hasPrefix("cannot reach http://127.0.0.1:"), "\(warnings.all)")
    }

    /// A task that does not change is signaled every `heartbeatInterval`: the server
    /// does not flag it stalled, and a cancel reaches the job without a change to report.
    @Test func anIdleTaskIsSignaledAndLearnsOfItsCancel() async throws {
        let daemon = try RestartableDaemon()
        defer { daemon.remove() }
        let client = daemon.client
        let clock = ManualClock()
        let warnings = Warnings()
        let progress = Progress(totalUnitCount: 10)
        let reporter = ProgressReporter(progress: progress, taskID: "idle", name: "Idle", client: client,
                                        heartbeatInterval: .seconds(1), clock: clock, warn: { warnings.record($0) })
        #expect(await reporter.flush())
        let registered = try await client.task("idle")
        _ = try await client.cancel("idle")
        #expect(await eventually {
            clock.advance(by: .milliseconds(250))
            return progress.isCancelled
        })
        let task = try await client.task("idle")
        #expect((task.seq ?? 0) >= 1 && task.lastSignalAt! > registered.lastSignalAt!, "a heartbeat item was applied")
        #expect(task.completed == 0 && warnings.all.isEmpty, "\(warnings.all)")
        #expect(await reporter.finish(outcome: .canceled))
    }

    /// Asked to, the reporter finishes the task `succeeded` by itself once its `Progress`
    /// is finished; until then it leaves it running.
    @Test func aCompletedProgressFinishesItsTaskWhenAsked() async throws {
        let daemon = try RestartableDaemon()
        defer { daemon.remove() }
        let progress = Progress(totalUnitCount: 3)
        let reporter = ProgressReporter(progress: progress, taskID: "auto", name: "Auto", client: daemon.client,
                                        finishWhenCompleted: true, clock: ManualClock())
        progress.completedUnitCount = 2
        #expect(await reporter.flush())
        #expect(try await daemon.client.task("auto").state == .running && !reporter.isDone)
        progress.completedUnitCount = 3
        #expect(await reporter.flush())
        let task = try await daemon.client.task("auto")
        #expect(task.state == .succeeded && task.completed == 3 && reporter.isDone)
    }

    /// A task the server refuses (an id it cannot take) is given up with one warning;
    /// the job goes on, and nothing more is sent.
    @Test func aRefusedTaskIsGivenUpWithOneWarning() async throws {
        let daemon = try RestartableDaemon()
        defer { daemon.remove() }
        let warnings = Warnings()
        let progress = Progress(totalUnitCount: 10)
        let reporter = ProgressReporter(progress: progress, taskID: "no spaces", name: "Job", client: daemon.client,
                                        clock: ManualClock(), warn: { warnings.record($0) })
        #expect(await reporter.flush())
        #expect(reporter.isDone)
        progress.completedUnitCount = 5
        #expect(await reporter.finish(outcome: .succeeded))
        #expect(warnings.all.count == 1 && warnings.all[0].contains("(invalid_request)"), "\(warnings.all)")
        #expect(try await daemon.client.tasks().tasks.isEmpty)
    }

    /// The README's Swift example (its Swift block with a `ProgressReporter`), as it is
    /// written there, reports a loop.
    @Test func theReadmeExampleRuns() async throws {
        let readme = try String(contentsOf: packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let blocks = readme.components(separatedBy: "```swift\n").dropFirst().compactMap { $0.components(separatedBy: "\n```").first }
        let block = try #require(blocks.first { $0.contains("ProgressReporter(") })
        let source = try String(contentsOfFile: #filePath, encoding: .utf8)
        let body = try #require(source.components(separatedBy: "// The README's example:\n").dropFirst().first?
            .components(separatedBy: "\n    }\n").first)
        let dedented = body.split(separator: "\n", omittingEmptySubsequences: false).map { $0.dropFirst(8) }.joined(separator: "\n")
        #expect(dedented == block.replacingOccurrences(of: #"URL(string: "http://127.0.0.1:8080")!"#, with: "url"))

        let daemon = try RestartableDaemon()
        defer { daemon.remove() }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("readme-\(UUID().uuidString)")
        let backup = folder.appendingPathComponent("backup")
        defer { try? FileManager.default.removeItem(at: folder) }
        try FileManager.default.createDirectory(at: backup, withIntermediateDirectories: true)
        let photos = try (1...120).map { number in
            let photo = folder.appendingPathComponent("photo-\(number).jpg")
            try Data("photo \(number)".utf8).write(to: photo)
            return photo
        }
        try await Self.readmeExample(url: daemon.url, photos: photos, backup: backup)
        let task = try await daemon.client.task("copy-photos")
        #expect(task.state == .succeeded && task.completed == 120 && task.total == 120 && task.name == "Copy 120 photos")
        #expect(try FileManager.default.contentsOfDirectory(atPath: backup.path).count == 120)
    }

    static func readmeExample(url: URL, photos: [URL], backup: URL) async throws {
        // The README's example:
        // Swift: import HeadwayClient (a library product of this package); photos: [URL], backup: URL
        let client = HeadwayClient(url: url)
        let progress = Progress(totalUnitCount: Int64(photos.count))
        let reporter = ProgressReporter(progress: progress, taskID: "copy-photos", name: "Copy 120 photos",
                                        client: client)
        for photo in photos where !progress.isCancelled {
            try FileManager.default.copyItem(at: photo, to: backup.appendingPathComponent(photo.lastPathComponent))
            progress.completedUnitCount += 1
        }
        await reporter.finish(outcome: progress.isCancelled ? .canceled : .succeeded)
    }
}
