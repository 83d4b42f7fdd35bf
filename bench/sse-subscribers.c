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
 * Prints `connected N SECONDS` once every subscriber has had bytes back (or after 30 s),
 * then reads until its standard input closes, and prints one line of JSON: subscribers
 * that had bytes back by then, events delivered, latency p50 / p90 / p99, and the medians over the stamps
 * of the earliest and the latest arrival (all in ms). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char stampPrefix[] = "\"label\":\"t=";
enum { carryCapacity = 8192, readCapacity = 65536 };

/* One subscriber: its socket and the bytes after its last whole frame. */
struct subscriber {
    int fd;
    int open;
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
            break;
        }
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s PORT COUNT REQUEST\n", argv[0]);
        return 64;
    }
    int port = atoi(argv[1]), count = atoi(argv[2]);
    const char *request = argv[3];
    size_t requestLength = strlen(request);
    subscribers = calloc((size_t)count, sizeof *subscribers);
    loop = epoll_create1(0);
    if (!subscribers || loop < 0) { perror("setup"); return 1; }
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    int64_t started = nowNanoseconds();
    for (int first = 0; first < count; first += 500) {
        int last = first + 500 < count ? first + 500 : count;
        for (int i = first; i < last; i++) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof address) < 0 ||
                send(fd, request, requestLength, 0) != (ssize_t)requestLength) {
                perror("subscriber");
                return 1;
            }
            subscribers[i].fd = fd;
            struct epoll_event interest = {.events = EPOLLIN, .data.u64 = (uint64_t)i};
            epoll_ctl(loop, EPOLL_CTL_ADD, fd, &interest);
        }
        int64_t deadline = nowNanoseconds() + 30000000000LL;
        for (;;) {
            int open = 0;
            for (int i = 0; i < last; i++) open += subscribers[i].open;
            if (open == last || nowNanoseconds() > deadline) break;
            readReady(50);
        }
    }
    int connected = 0;
    for (int i = 0; i < count; i++) connected += subscribers[i].open;
    printf("connected %d %.3f\n", connected, (nowNanoseconds() - started) / 1e9);
    fflush(stdout);
    /* Catch-ups and heads are not events: only what comes from now on is counted. */
    latencyCount = spreadCount = 0;

    struct epoll_event input = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
    epoll_ctl(loop, EPOLL_CTL_ADD, 0, &input);
    while (readReady(1000)) {}

    /* A subscriber whose first bytes came after its batch's deadline counts too. */
    connected = 0;
    for (int i = 0; i < count; i++) connected += subscribers[i].open;
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
