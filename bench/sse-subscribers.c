/* Event-stream subscribers for the fan-out benchmark (bench/servers.py `fanout`): COUNT
 * connections to 127.0.0.1:PORT, each sending REQUEST, all read by one epoll loop. Each
 * read is stamped with the time it returned, and every event's stamp (the send time in
 * ns, in its label: "label":"t=<ns>") gives one latency. A client in C reads a socket in
 * a few microseconds, so what it measures is the server's delivery: the Python client it
 * replaces spent about as long per read as a server spends per write, more on a server's
 * larger frames, and so measured itself too.
 *
 *   sse-subscribers PORT COUNT REQUEST
 *
 * Prints `connected N SECONDS` once every subscriber has had an answer (or after 30 s a
 * batch of 500), N those answered 200, then reads until its standard input closes, and
 * prints one line of JSON: subscribers answered 200 by then, events delivered, latency p50 / p90 / p99, and the medians over the stamps
 * of the earliest and the latest arrival (all in ms).
 *
 * Tens of thousands of subscribers: one source address has only the ephemeral ports of
 * `net.ipv4.ip_local_port_range` (about 28,000) toward one server port, so subscriber i
 * connects from 127.0.0.(1 + i / 25000) (loopback answers on all of 127.0.0.0/8; the port
 * is chosen at connect, IP_BIND_ADDRESS_NO_PORT, so each address has its full range); and
 * one process holds at most its open-file limit, so past it the subscribers are split
 * among worker processes (forked, each with its own file table), whose stamps and
 * latencies the first process merges before it prints. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char stampPrefix[] = "\"label\":\"t=";
enum { carryCapacity = 8192, readCapacity = 65536 };
/* Subscribers connecting from one source address (fewer, to check the others, with -D). */
#ifndef SUBSCRIBERS_PER_SOURCE_ADDRESS
#define SUBSCRIBERS_PER_SOURCE_ADDRESS 25000
#endif
enum { subscribersPerSourceAddress = SUBSCRIBERS_PER_SOURCE_ADDRESS };

/* One subscriber: its socket and the bytes after its last whole frame. */
struct subscriber {
    int fd;
    int open;      /* its response was 200 */
    int answered;  /* bytes or a close came back */
    size_t carried;
    char *carry;
};

/* One stamp's earliest and latest arrival. */
struct spread {
    int64_t stamp, first, last;
};

static struct spread *spreads;
static size_t spreadCount, spreadCapacity;
static int64_t *latencies;
static size_t latencyCount, latencyCapacity;

static struct subscriber *subscribers;
static int loop;
static char chunk[readCapacity];
static struct epoll_event events[1024];

static int64_t nowNanoseconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

static void *grow(void *array, size_t *capacity, size_t element) {
    *capacity = *capacity ? *capacity * 2 : 4096;
    void *grown = realloc(array, *capacity * element);
    if (!grown) { perror("realloc"); exit(1); }
    return grown;
}

/* Records one event sent at `stamp` that arrived at `arrival`. Stamps come in rising
 * order, so the one to update is near the end. */
static void record(int64_t stamp, int64_t arrival) {
    if (latencyCount == latencyCapacity) latencies = grow(latencies, &latencyCapacity, sizeof *latencies);
    latencies[latencyCount++] = arrival - stamp;
    for (size_t i = spreadCount; i-- > 0;) {
        if (spreads[i].stamp != stamp) continue;
        if (arrival < spreads[i].first) spreads[i].first = arrival;
        if (arrival > spreads[i].last) spreads[i].last = arrival;
        return;
    }
    if (spreadCount == spreadCapacity) spreads = grow(spreads, &spreadCapacity, sizeof *spreads);
    spreads[spreadCount++] = (struct spread){stamp, arrival, arrival};
}

/* Finds the stamps in `bytes` (whole frames) and records them. */
static void recordStamps(const char *bytes, size_t length, int64_t arrival) {
    const char *end = bytes + length;
    const char *at = bytes;
    while ((at = memmem(at, (size_t)(end - at), stampPrefix, sizeof stampPrefix - 1))) {
        at += sizeof stampPrefix - 1;
        int64_t stamp = 0;
        const char *digit = at;
        while (digit < end && *digit >= '0' && *digit <= '9') stamp = stamp * 10 + (*digit++ - '0');
        if (digit > at && digit < end && *digit == '"') record(stamp, arrival);
    }
}

/* Takes the bytes `chunk` read from `s`: the whole frames in them (up to the last blank
 * line) are searched, the rest is carried to the next read. */
static void received(struct subscriber *s, const char *chunk, size_t length, int64_t arrival) {
    static const char accepted[] = "HTTP/1.1 200";
    s->answered = 1;
    /* A refusal (503 past a server's subscriber limit) is not a subscriber. */
    if (!s->open && !s->carried && (length < sizeof accepted - 1 || memcmp(chunk, accepted, sizeof accepted - 1))) return;
    s->open = 1;
    const char *data = chunk;
    size_t size = length;
    static char joined[carryCapacity + readCapacity];
    if (s->carried) {
        memcpy(joined, s->carry, s->carried);
        memcpy(joined + s->carried, chunk, length);
        data = joined;
        size = s->carried + length;
    }
    size_t whole = 0;
    for (size_t i = size; i >= 2; i--) {
        if (data[i - 1] == '\n' && data[i - 2] == '\n') { whole = i; break; }
    }
    if (whole) recordStamps(data, whole, arrival);
    size_t rest = size - whole;
    if (rest > carryCapacity) {  /* no frame is this long: keep its end, where a stamp may begin */
        data += size - carryCapacity;
        rest = carryCapacity;
    } else {
        data += whole;
    }
    if (rest && !s->carry && !(s->carry = malloc(carryCapacity))) { perror("malloc"); exit(1); }
    if (rest) memmove(s->carry, data, rest);
    s->carried = rest;
}

static int compare(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The median of `values` (sorted here), in ms: the mean of the middle two when even. */
static double medianMilliseconds(int64_t *values, size_t count) {
    if (!count) return -1;
    qsort(values, count, sizeof *values, compare);
    double middle = count % 2 ? (double)values[count / 2] : (values[count / 2 - 1] + values[count / 2]) / 2.0;
    return middle / 1e6;
}

/* Reads what is ready, waiting at most `timeout` ms; returns 0 once stdin is closed. */
static int readReady(int timeout) {
    int ready = epoll_wait(loop, events, 1024, timeout);
    for (int i = 0; i < ready; i++) {
        if (events[i].data.u64 == UINT64_MAX) {
            char byte;
            if (read(0, &byte, 1) <= 0) return 0;
            continue;
        }
        struct subscriber *s = &subscribers[events[i].data.u64];
        for (;;) {
            ssize_t got = recv(s->fd, chunk, sizeof chunk, MSG_DONTWAIT);
            int64_t arrival = nowNanoseconds();
            if (got > 0) { received(s, chunk, (size_t)got, arrival); continue; }
            if (got < 0 && (errno == EAGAIN || errno == EINTR)) break;
            epoll_ctl(loop, EPOLL_CTL_DEL, s->fd, NULL);  /* closed by the server */
            s->answered = 1;
            break;
        }
    }
    return 1;
}

/* Writes `length` bytes to `fd` whole. */
static void writeAll(int fd, const void *bytes, size_t length) {
    const char *at = bytes;
    while (length) {
        ssize_t written = write(fd, at, length);
        if (written < 0 && errno == EINTR) continue;
        if (written <= 0) { perror("write"); exit(1); }
        at += written;
        length -= (size_t)written;
    }
}

/* Reads `length` bytes from `fd` whole; returns 0 at an early end. */
static int readAll(int fd, void *bytes, size_t length) {
    char *at = bytes;
    while (length) {
        ssize_t got = read(fd, at, length);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return 0;
        at += got;
        length -= (size_t)got;
    }
    return 1;
}

/* Opens subscribers `first` to `first + count - 1` (numbered over all workers, which sets
 * their source address) and reads until `input` closes. Returns the subscribers answered
 * 200; `latencies` and `spreads` hold what they received. `connected` is told the
 * count once all have had an answer (or their deadlines passed). */
static int subscribe(int port, int first, int count, const char *request, int input, void (*connected)(int)) {
    size_t requestLength = strlen(request);
    subscribers = calloc((size_t)count, sizeof *subscribers);
    loop = epoll_create1(0);
    if (!subscribers || loop < 0) { perror("setup"); exit(1); }
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    for (int batch = 0; batch < count; batch += 500) {
        int last = batch + 500 < count ? batch + 500 : count;
        for (int i = batch; i < last; i++) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            int source = (first + i) / subscribersPerSourceAddress;
            if (fd >= 0 && source > 0) {
                int one = 1;
                struct sockaddr_in from = {.sin_family = AF_INET};
                from.sin_addr.s_addr = htonl(INADDR_LOOPBACK + (uint32_t)source);
                setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
                if (bind(fd, (struct sockaddr *)&from, sizeof from) < 0) { perror("bind"); exit(1); }
            }
            if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof address) < 0 ||
                send(fd, request, requestLength, 0) != (ssize_t)requestLength) {
                perror("subscriber");
                exit(1);
            }
            subscribers[i].fd = fd;
            struct epoll_event interest = {.events = EPOLLIN, .data.u64 = (uint64_t)i};
            epoll_ctl(loop, EPOLL_CTL_ADD, fd, &interest);
        }
        int64_t deadline = nowNanoseconds() + 30000000000LL;
        for (;;) {
            int answered = 0;
            for (int i = 0; i < last; i++) answered += subscribers[i].answered;
            if (answered == last || nowNanoseconds() > deadline) break;
            readReady(50);
        }
    }
    int open = 0;
    for (int i = 0; i < count; i++) open += subscribers[i].open;
    connected(open);
    /* Catch-ups and heads are not events: only what comes from now on is counted. */
    latencyCount = spreadCount = 0;

    struct epoll_event interest = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
    epoll_ctl(loop, EPOLL_CTL_ADD, input, &interest);
    if (input != 0) dup2(input, 0);  /* readReady reads its end from standard input */
    while (readReady(1000)) {}

    /* A subscriber whose first bytes came after its batch's deadline counts too. */
    open = 0;
    for (int i = 0; i < count; i++) open += subscribers[i].open;
    return open;
}

/* A worker's pipe to the first process, where it says `connected` and then sends its results. */
static int toParent = -1;

static void tellParent(int connected) { writeAll(toParent, &connected, sizeof connected); }

static int64_t startedAt;

static void printConnected(int connected) {
    printf("connected %d %.3f\n", connected, (nowNanoseconds() - startedAt) / 1e9);
    fflush(stdout);
}

/* One worker process, forked: subscribers `first`… of its own, its standard input the
 * pipe `input`; it sends its subscribers answered 200, its latencies and its
 * spreads through `output`. */
static void work(int port, int first, int count, const char *request, int input, int output) {
    toParent = output;
    int open = subscribe(port, first, count, request, input, tellParent);
    writeAll(output, &open, sizeof open);
    writeAll(output, &latencyCount, sizeof latencyCount);
    writeAll(output, latencies, latencyCount * sizeof *latencies);
    writeAll(output, &spreadCount, sizeof spreadCount);
    writeAll(output, spreads, spreadCount * sizeof *spreads);
    _exit(0);
}

/* Merges one spread of a worker into the first process's. */
static void mergeSpread(struct spread spread) {
    for (size_t i = spreadCount; i-- > 0;) {
        if (spreads[i].stamp != spread.stamp) continue;
        if (spread.first < spreads[i].first) spreads[i].first = spread.first;
        if (spread.last > spreads[i].last) spreads[i].last = spread.last;
        return;
    }
    if (spreadCount == spreadCapacity) spreads = grow(spreads, &spreadCapacity, sizeof *spreads);
    spreads[spreadCount++] = spread;
}

/* COUNT subscribers in `workers` forked processes; the first process only merges. Returns
 * the subscribers answered 200, with every worker's latencies and spreads here. */
static int subscribeInWorkers(int port, int count, const char *request, int workers) {
    int *results = calloc((size_t)workers, sizeof *results), *inputs = calloc((size_t)workers, sizeof *inputs);
    for (int w = 0; w < workers; w++) {
        int first = (int)((int64_t)count * w / workers), last = (int)((int64_t)count * (w + 1) / workers);
        int input[2], output[2];
        if (pipe(input) < 0 || pipe(output) < 0) { perror("pipe"); exit(1); }
        pid_t child = fork();
        if (child < 0) { perror("fork"); exit(1); }
        if (child == 0) {
            close(input[1]);
            close(output[0]);
            for (int earlier = 0; earlier < w; earlier++) { close(results[earlier]); close(inputs[earlier]); }
            work(port, first, last - first, request, input[0], output[1]);
        }
        close(input[0]);
        close(output[1]);
        inputs[w] = input[1];
        results[w] = output[0];
    }
    int connected = 0;
    for (int w = 0; w < workers; w++) {
        int open = 0;
        if (!readAll(results[w], &open, sizeof open)) { fprintf(stderr, "a worker ended early\n"); exit(1); }
        connected += open;
    }
    printConnected(connected);
    char byte;
    while (read(0, &byte, 1) > 0) {}
    for (int w = 0; w < workers; w++) close(inputs[w]);
    connected = 0;
    for (int w = 0; w < workers; w++) {
        int open = 0;
        size_t count = 0;
        if (!readAll(results[w], &open, sizeof open) || !readAll(results[w], &count, sizeof count)) exit(1);
        connected += open;
        while (latencyCapacity < latencyCount + count) latencies = grow(latencies, &latencyCapacity, sizeof *latencies);
        if (!readAll(results[w], latencies + latencyCount, count * sizeof *latencies)) exit(1);
        latencyCount += count;
        if (!readAll(results[w], &count, sizeof count)) exit(1);
        for (size_t i = 0; i < count; i++) {
            struct spread spread;
            if (!readAll(results[w], &spread, sizeof spread)) exit(1);
            mergeSpread(spread);
        }
        close(results[w]);
    }
    while (wait(NULL) > 0) {}
    return connected;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s PORT COUNT REQUEST\n", argv[0]);
        return 64;
    }
    int port = atoi(argv[1]), count = atoi(argv[2]);
    const char *request = argv[3];
    /* As many files as allowed; a worker keeps some for its loop, pipes and standard streams. */
    struct rlimit files;
    getrlimit(RLIMIT_NOFILE, &files);
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
    int perProcess = (int)(files.rlim_cur > 1000000 ? 1000000 : files.rlim_cur) - 64;
    int workers = (count + perProcess - 1) / perProcess;

    startedAt = nowNanoseconds();
    int connected = workers > 1 ? subscribeInWorkers(port, count, request, workers)
                                : subscribe(port, 0, count, request, 0, printConnected);
    size_t delivered = latencyCount;
    double p90 = -1, p99 = -1, p50 = medianMilliseconds(latencies, latencyCount);
    if (latencyCount) {
        size_t at90 = (size_t)(latencyCount * 0.90), at99 = (size_t)(latencyCount * 0.99);
        p90 = latencies[at90 ? at90 - 1 : 0] / 1e6;
        p99 = latencies[at99 ? at99 - 1 : 0] / 1e6;
    }
    int64_t *firsts = malloc((spreadCount + 1) * sizeof *firsts), *lasts = malloc((spreadCount + 1) * sizeof *lasts);
    for (size_t i = 0; i < spreadCount; i++) {
        firsts[i] = spreads[i].first - spreads[i].stamp;
        lasts[i] = spreads[i].last - spreads[i].stamp;
    }
    printf("{\"connected\": %d, \"delivered\": %zu, \"p50_ms\": %.3f, \"p90_ms\": %.3f, \"p99_ms\": %.3f, "
           "\"first_arrival_ms\": %.3f, \"last_arrival_ms\": %.3f}\n",
           connected, delivered, p50, p90, p99, medianMilliseconds(firsts, spreadCount),
           medianMilliseconds(lasts, spreadCount));
    return 0;
}
