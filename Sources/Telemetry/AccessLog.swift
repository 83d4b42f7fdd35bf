import HTTPServer

/// Logs one `http.request` line per exchange when it is over (an event stream: when it
/// ends), with its id, method, path (as sent, escaped: `ExchangeRecord.path`; the query is
/// left out, as it may carry the event stream's `access_token`), the route pattern matched,
/// the status sent and the time taken; and counts it in the metrics (by method, route pattern and status, and its
/// duration by route pattern: the pattern, never the raw path, so the series stay few).
/// The HTTP layer calls `record` for every exchange (`HTTPPipeline.observeExchange`).
package struct AccessLog: Sendable {
    let logger: Logger
    var metrics: ServiceMetrics?

    package func record(_ exchange: ExchangeRecord) {
        let matched = RouteLabel(route: exchange.route)
        if let metrics {
            metrics.httpRequests.add(HTTPExchangeLabels(method: MethodLabel(exchange.method), route: matched,
                                                        status: exchange.status ?? 0))
            metrics.httpDuration.observe(Double(exchange.durationMicroseconds) / 1e6, matched)
        }
        if logger.minimumLevel <= .info {
            logger.log(.info, "http.request", [
                "request_id": exchange.requestID, "method": exchange.method, "path": exchange.path,
                "route": matched.route?.text ?? "-", "status": String(exchange.status ?? 0),
                "duration_us": String(exchange.durationMicroseconds),
            ])
        }
    }

    package init(logger: Logger, metrics: ServiceMetrics?) {
        self.logger = logger
        self.metrics = metrics
    }
}
