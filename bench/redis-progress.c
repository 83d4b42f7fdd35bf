/*
 * redis-progress: BullMQ's progress call against Redis, as fast as one core sends it.
 *
 * Opens CONNECTIONS connections to Redis on 127.0.0.1:PORT; connection i reports the
 * progress of job JOB_PREFIX<i> of queue QUEUE, one request in flight per connection,
 * for SECONDS, on one epoll loop. Each request is the call BullMQ's Job.updateProgress
 * makes: EVALSHA of its updateProgress script (SHA, loaded beforehand with SCRIPT LOAD)
 * with the keys bull:QUEUE:<job>, bull:QUEUE:events, bull:QUEUE:meta and the arguments
 * <job> and the progress as JSON, about 100 bytes:
 *
 *   {"completed":N,"label":"Copying photos to archive volume 3 (batch 00000N)","unit":"files"}
 *
 * where N counts this connection's calls, so after a run each job's `progress` field
 * holds its connection's number of acknowledged calls. Every reply other than `:0`
 * (the script's OK; -1 means the job is missing, `-` an error) is counted as an error.
 * Prints one line in the format of bench/progress.lua:
 *
 *   RESULT requests=… duration_s=… rps=… p50_ms=… p99_ms=… errors=…
 *
 *   redis-progress PORT SHA QUEUE JOB_PREFIX CONNECTIONS SECONDS
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/// Latency histogram: 10 µs buckets up to 2 s; slower replies land in the last bucket.
#define BUCKET_NS 10000LL
#define BUCKETS 200000

/// One connection: its socket, its job, its count, and the reply being read.
struct connection {
    int socket;
    char job[64];
    long long calls;        // requests sent so far (the progress value of the next is calls + 1)
    long long acknowledged; // replies `:0` received
    long long sent_at_ns;   // when the request in flight was sent; 0 when none is
    char reply[512];
    size_t reply_length;
};

static long long now_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec * 1000000000LL + now.tv_nsec;
}

static void fail(const char *what) {
    perror(what);
    exit(1);
}

/// Appends one RESP bulk string to `buffer` at `*length`.
static void append_bulk(char *buffer, size_t *length, const char *text) {
    *length += (size_t)sprintf(buffer + *length, "$%zu\r\n%s\r\n", strlen(text), text);
}

/// Sends connection `c`'s next EVALSHA (the whole command in one write: it is small, and
/// the socket's buffer is empty with one request in flight).
static void send_update(struct connection *c, const char *sha, const char *queue) {
    char key[160], events[160], meta[160], progress[160], command[1024];
    size_t length = 0;
    c->calls += 1;
    snprintf(key, sizeof key, "bull:%s:%s", queue, c->job);
    snprintf(events, sizeof events, "bull:%s:events", queue);
    snprintf(meta, sizeof meta, "bull:%s:meta", queue);
    snprintf(progress, sizeof progress,
             "{\"completed\":%lld,\"label\":\"Copying photos to archive volume 3 (batch %06lld)\",\"unit\":\"files\"}",
             c->calls, c->calls % 1000000);
    length += (size_t)sprintf(command, "*8\r\n");
    append_bulk(command, &length, "EVALSHA");
    append_bulk(command, &length, sha);
    append_bulk(command, &length, "3");
    append_bulk(command, &length, key);
    append_bulk(command, &length, events);
    append_bulk(command, &length, meta);
    append_bulk(command, &length, c->job);
    append_bulk(command, &length, progress);
    c->sent_at_ns = now_ns();
    size_t written = 0;
    while (written < length) {
        ssize_t n = write(c->socket, command + written, length - written);
        if (n < 0 && errno != EINTR && errno != EAGAIN) fail("write");
        if (n > 0) written += (size_t)n;
    }
}

static int open_connection(int port) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (s < 0) fail("socket");
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&address, sizeof address) < 0 && errno != EINPROGRESS) fail("connect");
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* Wait for the connection to complete before the first write. */
    fd_set writable;
    FD_ZERO(&writable);
    FD_SET(s, &writable);
    struct timeval limit = {.tv_sec = 5};
    if (select(s + 1, NULL, &writable, NULL, &limit) != 1) fail("connect (timed out)");
    int error = 0;
    socklen_t size = sizeof error;
    getsockopt(s, SOL_SOCKET, SO_ERROR, &error, &size);
    if (error != 0) {
        errno = error;
        fail("connect");
    }
    return s;
}

/// The latency at `fraction` (0.5, 0.99) of `total` replies, in ms.
static double percentile_ms(const long long *histogram, long long total, double fraction) {
    long long wanted = (long long)(fraction * (double)total + 0.5), seen = 0;
    if (wanted < 1) wanted = 1;
    for (int bucket = 0; bucket < BUCKETS; bucket++) {
        seen += histogram[bucket];
        if (seen >= wanted) return (double)(bucket + 1) * BUCKET_NS / 1e6;
    }
    return (double)BUCKETS * BUCKET_NS / 1e6;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s PORT SHA QUEUE JOB_PREFIX CONNECTIONS SECONDS\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]), count = atoi(argv[5]);
    const char *sha = argv[2], *queue = argv[3], *prefix = argv[4];
    double seconds = atof(argv[6]);
    if (port <= 0 || count <= 0 || seconds <= 0 || strlen(sha) != 40) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    struct connection *connections = calloc((size_t)count, sizeof *connections);
    long long *histogram = calloc(BUCKETS, sizeof *histogram);
    int loop = epoll_create1(0);
    if (!connections || !histogram || loop < 0) fail("setup");
    for (int i = 0; i < count; i++) {
        connections[i].socket = open_connection(port);
        snprintf(connections[i].job, sizeof connections[i].job, "%s%d", prefix, i);
        struct epoll_event interest = {.events = EPOLLIN, .data.ptr = &connections[i]};
        if (epoll_ctl(loop, EPOLL_CTL_ADD, connections[i].socket, &interest) < 0) fail("epoll_ctl");
    }

    long long started = now_ns(), deadline = started + (long long)(seconds * 1e9), finished = started;
    long long replies = 0, errors = 0;
    int in_flight = 0;
    for (int i = 0; i < count; i++, in_flight++) send_update(&connections[i], sha, queue);
    struct epoll_event ready[256];
    /* After the deadline no request is sent; the loop ends when the last reply is in. */
    while (in_flight > 0) {
        int n = epoll_wait(loop, ready, 256, 1000);
        if (n < 0 && errno != EINTR) fail("epoll_wait");
        for (int e = 0; e < n; e++) {
            struct connection *c = ready[e].data.ptr;
            ssize_t got = read(c->socket, c->reply + c->reply_length, sizeof c->reply - 1 - c->reply_length);
            if (got == 0) {
                fprintf(stderr, "redis closed a connection\n");
                return 1;
            }
            if (got < 0) {
                if (errno == EAGAIN || errno == EINTR) continue;
                fail("read");
            }
            c->reply_length += (size_t)got;
            c->reply[c->reply_length] = '\0';
            char *end = strstr(c->reply, "\r\n");
            if (end == NULL) {
                if (c->reply_length >= sizeof c->reply - 1) {
                    fprintf(stderr, "reply too long: %.80s\n", c->reply);
                    return 1;
                }
                continue;
            }
            /* One request in flight: a whole line is its whole reply (an integer or an error). */
            long long now = now_ns(), bucket = (now - c->sent_at_ns) / BUCKET_NS;
            histogram[bucket < BUCKETS ? bucket : BUCKETS - 1] += 1;
            replies += 1;
            if (strcmp(c->reply, ":0\r\n") == 0) {
                c->acknowledged += 1;
            } else {
                errors += 1;
                if (errors <= 3) fprintf(stderr, "%s: %.*s\n", c->job, (int)(end - c->reply), c->reply);
            }
            c->reply_length = 0;
            finished = now;
            if (now < deadline) {
                send_update(c, sha, queue);
            } else {
                in_flight -= 1;
            }
        }
    }
    double duration = (double)(finished - started) / 1e9;
    printf("RESULT requests=%lld duration_s=%.2f rps=%.0f p50_ms=%.2f p99_ms=%.2f errors=%lld\n", replies, duration,
           (double)replies / duration, percentile_ms(histogram, replies, 0.50), percentile_ms(histogram, replies, 0.99),
           errors);
    /* Each job's acknowledged calls, for the check of what Redis stored. */
    for (int i = 0; i < count; i++) printf("JOB %s %lld\n", connections[i].job, connections[i].acknowledged);
    return 0;
}
