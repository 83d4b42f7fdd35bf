import Foundation
import HeadwayCore
import HeadwayStore
import HeadwayTestSupport
import HTTPServer
import Lifecycle
import Testing
@testable import Daemon
@testable import Telemetry

/// The Prometheus exposition, the counters moving with requests, and the health routes.
@Suite struct MetricsTests {
    // MARK: - The exposition format

    @Test func familiesHaveHelpAndTypeAndEscapedLabels() {
        var text = PrometheusText()
        text.counters("x_total", "Help with a \\ and a\nnew line.", labels: ["code", "route"],
                      [["a\"b", "c\\d\ne"]: 3, ["plain", "/v1/{id}"]: 1])
        #expect(text.text == """
            # HELP x_total Help with a \\\\ and a\\nnew line.
            # TYPE x_total counter
            x_total{code="a\\"b",route="c\\\\d\\ne"} 3
            x_total{code="plain",route="/v1/{id}"} 1

            """)
    }

    @Test func histogramBucketsAreCumulativeAndEndWithInfinity() {
        let histograms = Histograms<[String]>(bounds: [0.1, 1, 10])
        for value in [0.05, 0.1, 0.5, 5, 50] { histograms.observe(value, ["r"]) }
        var text = PrometheusText()
        text.histograms("d_seconds", "Durations.", labels: ["route"], histograms.snapshot)
        #expect(text.text == """
            # HELP d_seconds Durations.
            # TYPE d_seconds histogram
            d_seconds_bucket{route="r",le="0.1"} 2
            d_seconds_bucket{route="r",le="1"} 3
            d_seconds_bucket{route="r",le="10"} 4
            d_seconds_bucket{route="r",le="+Inf"} 5
            d_seconds_sum{route="r"} 55.65
            d_seconds_count{route="r"} 5

            """)
    }

    /// Adds and observations that switch between series, read in between: every series
    /// holds all that was given to it, whether it was the one kept apart (the last one
    /// touched) or back in the dictionary, and reading changes nothing.
    @Test func seriesTouchedInTurnKeepEverythingGivenThem() {
        var random = SeededGenerator(seed: 37)
        let counters = LabeledCounters<[String]>()
        let histograms = Histograms<[String]>(bounds: [1, 10])
        var counted: [[String]: UInt64] = [:]
        var observed: [[String]: [Double]] = [:]
        for step in 0..<2_000 {
            // Runs of one series, then a switch, the way traffic on one route looks.
            let labels = [["a"], ["b"], ["c"]][(step / Int.random(in: 1...5, using: &random)) % 3]
            let amount = UInt64.random(in: 1...3, using: &random)
            counters.add(labels, amount)
            counted[labels, default: 0] += amount
            let value = Double.random(in: 0...20, using: &random).rounded()
            histograms.observe(value, labels)
            observed[labels, default: []].append(value)
            if step % 97 == 0 {
                #expect(counters.values == counted)
                #expect(histograms.snapshot.mapValues(\.count) == observed.mapValues { UInt64($0.count) })
            }
        }
        #expect(counters.values == counted)
        for (labels, values) in observed {
            let histogram = histograms.snapshot[labels]
            #expect(histogram?.sum == values.reduce(0, +))
            let low = values.filter { $0 <= 1 }.count, middle = values.filter { $0 > 1 && $0 <= 10 }.count
            let expected: [UInt64] = [UInt64(low), UInt64(middle), UInt64(values.count - low - middle)]
            #expect(histogram?.counts == expected)
        }
    }

    @Test func valuesAreWrittenAsPrometheusReadsThem() {
        #expect(PrometheusText.format(3) == "3")
        #expect(PrometheusText.format(0.25) == "0.25")
        #expect(PrometheusText.format(.infinity) == "+Inf")
        #expect(PrometheusText.format(-.infinity) == "-Inf")
        #expect(PrometheusText.format(.nan) == "NaN")
        #expect(MethodLabel("BREW").name == "other")
        #expect(MethodLabel("HEAD").name == "HEAD")
        let exchange = HTTPExchangeLabels(method: MethodLabel("POST"), route: RouteLabel(route: RoutePattern("/v1/x")),
                                          status: 201)
        #expect(exchange.labelValues == ["POST", "/v1/x", "201"])
        #expect(RouteLabel(route: nil).labelValues == ["unmatched"])
    }

    // MARK: - Through the daemon

    /// `headway_…` samples of a scrape: "name{labels}" → value.
    static func samples(_ text: String) -> [String: Double] {
        var samples: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " ") else { continue }
            samples[String(line[..<space])] = Double(line[line.index(after: space)...])
        }
        return samples
    }

    /// Scrapes until `condition` holds (an exchange is counted once it is over, just after
    /// its client has its reply), at most 5 s.
    private func scrape(_ daemon: LiveDaemon, until condition: ([String: Double]) -> Bool) throws -> (TestResponse, [String: Double]) {
        let deadline = Date().addingTimeInterval(5)
        while true {
            let reply = try daemon.request("GET", "/metrics")
            let samples = Self.samples(reply.text)
            if condition(samples) || Date() > deadline { return (reply, samples) }
            Thread.sleep(forTimeInterval: 0.02)
        }
    }

    @Test func scrapeShowsBuildTasksAndTheCountsOfUpdatesAndRequests() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"a","name":"A","total":10}"#)
        try daemon.register(#"{"id":"b","name":"B"}"#)
        #expect(try daemon.request("POST", "/v1/tasks/a/progress", json: #"{"completed":5}"#).status == 200)
        #expect(try daemon.request("POST", "/v1/tasks/a/progress", json: #"{"completed":2}"#).status == 422)
        #expect(try daemon.request("POST", "/v1/tasks/none/progress", json: #"{"completed":2}"#).status == 404)
        #expect(try daemon.request("POST", "/v1/tasks/b/heartbeat").status == 200)
        #expect(try daemon.request("POST", "/v1/tasks/b/finish", json: #"{"outcome":"failed"}"#).status == 200)
        #expect(try daemon.request("GET", "/no/such/path").status == 404)

        let progressOK = #"headway_http_requests_total{method="POST",route="/v1/tasks/{id}/progress",status="200"}"#
        let unmatched = #"headway_http_requests_total{method="GET",route="unmatched",status="404"}"#
        let (reply, samples) = try scrape(daemon) { $0[unmatched] == 1 }
        #expect(reply.status == 200)
        #expect(reply.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8")
        #expect(reply.text.contains("# TYPE headway_http_request_duration_seconds histogram\n"))
        #expect(samples[#"headway_build_info{version="\#(HeadwayVersion.current)"}"#] == 1)
        #expect(samples[#"headway_schema_version"#] == Double(Migrator(forLocation: daemon.application.configuration.databasePath).latestVersion))
        #expect(samples[#"headway_tasks{state="running",mode="quantified"}"#] == 1)
        #expect(samples[#"headway_tasks{state="running",mode="indeterminate"}"#] == 0)
        #expect(samples[#"headway_tasks{state="failed",mode="indeterminate"}"#] == 1)
        #expect(samples[#"headway_tasks{state="succeeded",mode="quantified"}"#] == 0)
        #expect(samples[#"headway_tasks_stalled{reason="silent"}"#] == 0)
        #expect(samples[#"headway_tasks_stalled{reason="no_progress"}"#] == 0)
        #expect(samples[#"headway_updates_accepted_total{kind="progress"}"#] == 1)
        #expect(samples[#"headway_updates_accepted_total{kind="heartbeat"}"#] == 1)
        #expect(samples[#"headway_updates_accepted_total{kind="finish"}"#] == 1)
        #expect(samples[#"headway_updates_refused_total{kind="progress",code="progress_regression"}"#] == 1)
        #expect(samples[#"headway_updates_refused_total{kind="progress",code="not_found"}"#] == 1)
        #expect(samples[progressOK] == 1)
        #expect(samples[#"headway_http_requests_total{method="POST",route="/v1/tasks/{id}/progress",status="422"}"#] == 1)
        #expect(samples[#"headway_http_requests_total{method="POST",route="/v1/tasks",status="201"}"#] == 2)
        #expect(samples[unmatched] == 1)
        #expect(samples[#"headway_http_request_duration_seconds_count{route="/v1/tasks/{id}/progress"}"#] == 3)
        #expect(samples[#"headway_http_request_duration_seconds_bucket{route="/v1/tasks/{id}/progress",le="+Inf"}"#] == 3)
        // Five writes committed, in batches of at least one job.
        let batches = samples["headway_writer_batch_size_count"] ?? 0
        #expect(batches >= 1)
        #expect(samples["headway_writer_batch_size_sum"] ?? 0 >= 5)
        #expect(samples["headway_writer_commit_duration_seconds_count"] == batches)
        // Five small writes leave the WAL far from the 1,000 pages of a checkpoint.
        #expect(samples["headway_writer_checkpoint_duration_seconds_count"] == 0)
        #expect(samples["headway_writer_queue_depth"] == 0)
        #expect(samples["headway_database_size_bytes"] ?? 0 > 0)
        // The database was reached throughout (on PostgreSQL a connection of another test
        // of this process may have been made again: the count is the process's).
        #expect(samples["headway_database_available"] == 1)
        #expect(samples["headway_database_unavailable_seconds_total"] == 0)
        #expect(samples["headway_database_reconnects_total"] != nil)
        // The lock that orders several daemons' batches is PostgreSQL's: held by each of
        // the batches that committed the writes above, for some time.
        if TestPostgresDatabase.isSelected {
            #expect(samples["headway_ordering_lock_seconds_total"] ?? 0 > 0)
            // One daemon: nothing else wrote, no batch ran again.
            #expect(samples["headway_ordering_reruns_total"] == 0)
        } else {
            #expect(samples["headway_ordering_lock_seconds_total"] == nil)
            #expect(samples["headway_ordering_reruns_total"] == nil)
        }
        #expect(samples["headway_event_subscribers"] == 0)
        #expect(samples["headway_retention_pruned_rows_total"] == 0)
    }

    @Test func eventCountersMoveWithSubscribers() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"a","name":"A","total":10}"#)
        let stream = try daemon.subscribe()
        _ = try stream.nextEvent()
        #expect(try daemon.request("POST", "/v1/tasks/a/progress", json: #"{"completed":5}"#).status == 200)
        let (_, samples) = try scrape(daemon) { $0["headway_events_sent_total"] ?? 0 >= 1 }
        #expect(samples["headway_event_subscribers"] == 1)
        #expect(samples["headway_events_sent_total"] ?? 0 >= 1)
        #expect(samples["headway_events_coalesced_total"] == 0)
        #expect(samples["headway_event_fanout_laps_total"] ?? 0 >= 1, "the lap that carried the update")
        #expect(samples["headway_event_fanout_lap_seconds_total"] ?? 0 > 0)
    }

    @Test func promtoolAcceptsTheScrape() throws {
        let daemon = try LiveDaemon()
        try daemon.register(#"{"id":"a","name":"A \"quoted\"","total":10}"#)
        #expect(try daemon.request("POST", "/v1/tasks/a/progress", json: #"{"completed":5}"#).status == 200)
        #expect(try daemon.request("GET", "/v1/tasks/a%22b%5C").status == 400)
        let (reply, _) = try scrape(daemon) { $0.keys.contains { $0.contains("route=\"/v1/tasks/{id}\"") } }
        let file = daemon.directory.file("metrics.txt")
        try reply.text.write(toFile: file, atomically: true, encoding: .utf8)
        let (status, output) = try Tool.run(["sh", "-c", "promtool check metrics < '\(file)'"])
        #expect(status == 0, "promtool (Debian package prometheus; scripts/install-deps.sh): \(output)")
        #expect(output.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty, "\(output)")
    }

    /// The alerts shipped in deploy/prometheus are valid rules, and their unit tests
    /// (each alert fires on the series that should fire it, and only then) pass.
    @Test func theShippedAlertsPassPromtool() throws {
        let folder = packageRoot.appendingPathComponent("deploy/prometheus").path
        let (checked, checkOutput) = try Tool.run(["promtool", "check", "rules", folder + "/headway-alerts.yml"])
        #expect(checked == 0, "\(checkOutput)")
        // Every alert of the file is read as a rule (none lost to a YAML slip).
        let alerts = try String(contentsOfFile: folder + "/headway-alerts.yml", encoding: .utf8)
            .split(separator: "\n").filter { $0.trimmingCharacters(in: .whitespaces).hasPrefix("- alert:") }.count
        #expect(alerts >= 10 && checkOutput.contains("SUCCESS: \(alerts) rules found"), "\(checkOutput)")
        let (tested, testOutput) = try Tool.run(["sh", "-c", "cd '\(folder)' && promtool test rules headway-alerts.test.yml"])
        #expect(tested == 0, "\(testOutput)")
    }

    // MARK: - Health

    @Test(arguments: Transport.allCases) func readyWhenMigratedAndWritable(_ transport: Transport) throws {
        let daemon = try LiveDaemon(transport: transport)
        let ready = try daemon.request("GET", "/readyz")
        #expect(ready.status == 200)
        #expect(ready.json["status"] as? String == "ready")
        #expect(ready.json["schema_version"] as? Int == Migrator(forLocation: daemon.application.configuration.databasePath).latestVersion)
        #expect(try daemon.request("GET", "/healthz").status == 200)
    }

    /// Runs `sql` as a writer job and waits for it.
    private func write(_ daemon: LiveDaemon, _ sql: String) -> Result<Void, any Error> {
        let done = DispatchSemaphore(value: 0)
        let outcome = Locked<Result<Void, any Error>?>(nil)
        daemon.application.writer.submit({ database in try database.execute(sql) }) { result in
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        return outcome.withLock { $0! }
    }

    /// `/readyz` until its status is `status` (the write probe's outcome is kept 1 s).
    private func readiness(_ daemon: LiveDaemon, becomes status: Int) throws -> TestResponse {
        let deadline = Date().addingTimeInterval(5)
        while true {
            let reply = try daemon.request("GET", "/readyz")
            if reply.status == status || Date() > deadline { return reply }
            Thread.sleep(forTimeInterval: 0.05)
        }
    }

    @Test(.enabled(if: TestPostgresDatabase.sqliteOnly, "opens the SQLite file itself"))
    func notReadyWhileTheDatabaseIsReadOnly() throws {
        let daemon = try LiveDaemon()
        #expect(try daemon.request("GET", "/readyz").status == 200)
        // The writer's connection refuses every write from now on, as a read-only file does.
        guard case .success = write(daemon, "PRAGMA query_only = ON") else { Issue.record("pragma refused"); return }
        let refused = try readiness(daemon, becomes: 503)
        #expect(refused.status == 503)
        #expect(refused.problemCode == "not_ready")
        #expect(refused.headers["content-type"] == "application/problem+json")
        #expect(refused.headers["retry-after"] == "1")
        #expect((refused.json["detail"] as? String ?? "").contains("takes no writes"), "\(refused.text)")
        #expect(try daemon.request("GET", "/healthz").status == 200, "alive all the same")
    }

    /// Another process holds the write lock (a `sqlite3` shell in `BEGIN IMMEDIATE`, here
    /// another SQLite connection to the file): a probe does not wait out the busy timeout
    /// with the writer (5 s, and 9 s were seen) but answers 503 `database_busy` while the
    /// lock is still held, within its client's 2 s; so does the next; once the lock is
    /// let go, ready again without a restart.
    @Test(.enabled(if: TestPostgresDatabase.sqliteOnly, "opens the SQLite file itself"))
    func busyAtOnceWhileAnotherWriterHoldsTheDatabaseThenReadyAgain() throws {
        let daemon = try LiveDaemon()
        let other = try Database(path: daemon.application.configuration.databasePath)
        defer { other.close() }
        try other.execute("BEGIN IMMEDIATE")
        for probe in ["the probe's own batch begins to wait", "the writer waits already"] {
            let client = try TestHTTPClient(port: daemon.application.port, timeoutSeconds: 2)
            let refused = try client.request("GET", "/readyz")
            #expect(refused.status == 503 && refused.problemCode == "database_busy", "\(probe): \(refused.text)")
            #expect(refused.headers["retry-after"] == "1" && refused.headers["cache-control"] == "no-store", "\(probe)")
            #expect(other.isInsideTransaction, "\(probe): answered while the lock is held")
        }
        #expect(try daemon.request("GET", "/healthz").status == 200, "alive all the same")
        try other.execute("ROLLBACK")
        // Writable again: ready again, without a restart.
        #expect(try readiness(daemon, becomes: 200).status == 200)
    }

    @Test func aLostBatchIsCounted() throws {
        let daemon = try LiveDaemon()
        // A job that ends the batch's transaction itself: the batch is lost, as SQLite does
        // after a full disk.
        guard case .failure = write(daemon, "ROLLBACK") else { Issue.record("the batch committed"); return }
        let (_, samples) = try scrape(daemon) { _ in true }
        #expect(samples["headway_writer_batches_failed_total"] == 1)
    }

    @Test func notReadyWhenTheSchemaIsNotThisBuilds() throws {
        let daemon = try LiveDaemon()
        let newer = Migrator(forLocation: daemon.application.configuration.databasePath).latestVersion + 1
        guard case .success = write(daemon, "INSERT INTO schema_migrations (version, name) VALUES (\(newer), 'future')") else {
            Issue.record("could not record a newer version"); return
        }
        let refused = try daemon.request("GET", "/readyz")
        #expect(refused.status == 503)
        #expect(refused.problemCode == "not_ready")
        #expect((refused.json["detail"] as? String ?? "").contains("schema version is \(newer)"))
    }

    @Test func healthzDoesNotTouchTheDatabase() throws {
        let daemon = try LiveDaemon()
        // Every reader busy: a read would wait; the liveness probe does not.
        daemon.application.readers.forEach { $0.close() }
        #expect(try daemon.request("GET", "/healthz").status == 200)
        #expect(try daemon.request("GET", "/readyz").status == 503)
    }
}
