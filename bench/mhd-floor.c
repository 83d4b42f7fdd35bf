/*
 * What libmicrohttpd itself costs per request on this machine: a server that does no work
 * but answer, in the ways a request that must wait for a commit can be answered. Every
 * request is read whole (its body dropped) and answered 200 with a fixed 700-byte JSON
 * body, so the figures are the library's and the kernel's, not Headway's.
 *
 *   direct     the answer is queued in the final call of the access handler (the floor
 *              of an answer that needs nothing; headwayd's GET /healthz is this plus its
 *              middleware);
 *   suspend    the final call suspends the connection and hands it to a second thread,
 *              which queues the answer and resumes it (how headwayd's writer answers
 *              every update now);
 *   loop       no library thread: one thread runs MHD_run in a loop of its own; the final
 *              call returns without an answer, the loop "commits" between runs, and the
 *              next run calls the handler again, which answers (no suspend, no hand-off);
 *   loop-writer  as loop, but the commit is a second thread's: the loop hands it the
 *              waiting requests once per batch and sleeps in epoll until it is told the
 *              batch is done (no suspend; one hand-off per batch).
 *
 * With SYNC=1 the commit (suspend, loop, loop-writer) writes 4 KiB and fdatasyncs a file,
 * as --durability full does once per batch.
 *
 * Facts this shows about libmicrohttpd 0.9.75 (Debian 12):
 *   - in external-loop mode a request left without an answer is handed to the access
 *     handler again at every MHD_run, so it can be answered without being suspended;
 *   - MHD_get_timeout says 0 while such a request waits, so a loop that trusted it would
 *     spin: loop-writer sleeps whatever it says while requests wait for their commit.
 *
 *   cc -O2 -o mhd-floor bench/mhd-floor.c -lmicrohttpd -lpthread
 *   ./mhd-floor MODE PORT [SYNC_FILE]        (bench/mhd-floor.sh runs them all)
 */
#include <microhttpd.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

enum mode { DIRECT, SUSPEND, LOOP, LOOP_WRITER };
static enum mode mode;
static char body[700];
static int sync_fd = -1;
static volatile sig_atomic_t stopping;

/* A request's state. `committed` is set by whoever commits, read by the loop. */
struct request {
    struct MHD_Connection *connection;
    int applied;
    atomic_int committed;
};

/* Requests handed to the committer, and (suspend) the connections it answers. */
#define QUEUE 8192
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;
static struct request *queue[QUEUE];
static int queued;
static int wake_fd = -1;          /* loop-writer: the committer tells the loop a batch is done */
static long waiting;              /* loop modes: requests applied and not answered */
static struct request *uncommitted[QUEUE];
static int uncommitted_count;     /* loop: requests applied since the last commit */

static void commit(void) {
    if (sync_fd < 0) return;
    static char page[4096];
    if (pwrite(sync_fd, page, sizeof page, 0) != (ssize_t) sizeof page || fdatasync(sync_fd) != 0) perror("commit");
}

static enum MHD_Result answer(struct MHD_Connection *connection) {
    struct MHD_Response *response = MHD_create_response_from_buffer(sizeof body - 1, body, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(response, "Content-Type", "application/json");
    enum MHD_Result result = MHD_queue_response(connection, 200, response);
    MHD_destroy_response(response);
    return result;
}

/* The second thread: commits what was handed to it, a batch at a time. */
static void *committer(void *unused) {
    (void) unused;
    static struct request *batch[QUEUE];
    for (;;) {
        pthread_mutex_lock(&lock);
        while (queued == 0) pthread_cond_wait(&work, &lock);
        int count = queued;
        memcpy(batch, queue, count * sizeof *batch);
        queued = 0;
        pthread_mutex_unlock(&lock);
        commit();
        for (int i = 0; i < count; i++) {
            if (mode == SUSPEND) {
                answer(batch[i]->connection);
                MHD_resume_connection(batch[i]->connection);
            } else {
                atomic_store(&batch[i]->committed, 1);
            }
        }
        if (mode == LOOP_WRITER) {
            uint64_t one = 1;
            if (write(wake_fd, &one, sizeof one) < 0) perror("wake");
        }
    }
    return NULL;
}

static void hand_over(struct request *request) {
    pthread_mutex_lock(&lock);
    if (queued < QUEUE) queue[queued++] = request;
    if (queued == 1) pthread_cond_signal(&work);
    pthread_mutex_unlock(&lock);
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *connection, const char *url,
                                      const char *method, const char *version, const char *upload,
                                      size_t *upload_size, void **context) {
    (void) cls; (void) url; (void) method; (void) version; (void) upload;
    if (*context == NULL) {
        struct request *request = calloc(1, sizeof *request);
        request->connection = connection;
        *context = request;
        return MHD_YES;
    }
    struct request *request = *context;
    if (*upload_size != 0) {
        *upload_size = 0;
        return MHD_YES;
    }
    switch (mode) {
    case DIRECT:
        return answer(connection);
    case SUSPEND:
        if (!request->applied) {
            request->applied = 1;
            MHD_suspend_connection(connection);
            hand_over(request);
        }
        return MHD_YES;
    case LOOP:
    case LOOP_WRITER:
        if (!request->applied) {
            request->applied = 1;
            waiting++;
            if (mode == LOOP_WRITER) hand_over(request);
            else if (uncommitted_count < QUEUE) uncommitted[uncommitted_count++] = request;
            return MHD_YES;
        }
        if (!atomic_load(&request->committed)) return MHD_YES;  /* called again: not yet */
        waiting--;
        return answer(connection);
    }
    return MHD_NO;
}

static void completed(void *cls, struct MHD_Connection *connection, void **context,
                      enum MHD_RequestTerminationCode code) {
    (void) cls; (void) connection; (void) code;
    free(*context);
    *context = NULL;
}

static void on_signal(int signal) { (void) signal; stopping = 1; }

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s direct|suspend|loop|loop-writer PORT [SYNC_FILE]\n", argv[0]);
        return 2;
    }
    mode = !strcmp(argv[1], "direct") ? DIRECT : !strcmp(argv[1], "suspend") ? SUSPEND
         : !strcmp(argv[1], "loop") ? LOOP : LOOP_WRITER;
    if (argc > 3 && (sync_fd = open(argv[3], O_CREAT | O_WRONLY, 0600)) < 0) { perror(argv[3]); return 1; }
    memset(body, 'x', sizeof body);
    body[0] = '{'; body[sizeof body - 2] = '}'; body[sizeof body - 1] = 0;
    wake_fd = eventfd(0, EFD_NONBLOCK);
    pthread_t thread;
    pthread_create(&thread, NULL, committer, NULL);
    unsigned int flags = MHD_USE_EPOLL | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME;
    if (mode == DIRECT || mode == SUSPEND) flags |= MHD_USE_INTERNAL_POLLING_THREAD;
    /* headwayd's request daemon: the same memory per connection (16 KiB + 100 × 64 bytes). */
    struct MHD_Daemon *daemon = MHD_start_daemon(
        flags, (uint16_t) atoi(argv[2]), NULL, NULL, access_handler, NULL,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) (16 * 1024 + 100 * 64),
        MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_CONNECTION_LIMIT, 1000u, MHD_OPTION_END);
    if (daemon == NULL) { fprintf(stderr, "cannot start libmicrohttpd\n"); return 1; }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    if (mode == DIRECT || mode == SUSPEND) {
        while (!stopping) pause();
    } else {
        int library = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_EPOLL_FD)->epoll_fd;
        int outer = epoll_create1(0);
        struct epoll_event event = { .events = EPOLLIN, .data.fd = library };
        epoll_ctl(outer, EPOLL_CTL_ADD, library, &event);
        event.data.fd = wake_fd;
        epoll_ctl(outer, EPOLL_CTL_ADD, wake_fd, &event);
        while (!stopping) {
            MHD_UNSIGNED_LONG_LONG library_timeout;
            int timeout = 1000;
            if (MHD_get_timeout(daemon, &library_timeout) == MHD_YES && library_timeout < 1000) timeout = (int) library_timeout;
            if (mode == LOOP && uncommitted_count > 0) timeout = 0;       /* a commit is due */
            if (mode == LOOP_WRITER && timeout == 0 && waiting > 0) timeout = 1000;  /* see above */
            struct epoll_event ready[2];
            int count = epoll_wait(outer, ready, 2, timeout);
            for (int i = 0; i < count; i++) {
                uint64_t value;
                if (ready[i].data.fd == wake_fd && read(wake_fd, &value, sizeof value) < 0) perror("wake");
            }
            MHD_run(daemon);
            if (mode == LOOP && uncommitted_count > 0) {
                commit();
                for (int i = 0; i < uncommitted_count; i++) atomic_store(&uncommitted[i]->committed, 1);
                uncommitted_count = 0;
                MHD_run(daemon);  /* answers them */
            }
        }
    }
    MHD_stop_daemon(daemon);
    return 0;
}
