/*
 * floor.c - the "floor" server for pika's benchmark harness.
 *
 * It is the least a pre-forking HTTP server can do, so it marks the ceiling
 * of what any prefork design can reach on this machine: one listening socket,
 * N worker processes forked up front, each blocked in accept(); per
 * connection a keep-alive loop of one read() into a buffer and one write() of
 * a fixed, in-memory 1400-byte "HTTP/1.1 200" response with Content-Length.
 *
 * Deliberately NOT done: request parsing (any path gets the same 1400 bytes),
 * pipelining, partial-read handling, logging, files, sendfile, MIME types.
 *
 * The only "parsing" is a substring scan so that clients are not left
 * hanging:
 *   - "Connection: close" in the request  -> respond, then close (siege, wrk -H)
 *   - an HTTP/1.0 request without "keep-alive" -> respond, then close
 *     (ab without -k speaks HTTP/1.0 and waits for the close)
 * plus a 5 s receive timeout (SO_RCVTIMEO, Apache's default KeepAliveTimeout)
 * so an idle client cannot pin a worker forever.
 *
 * Usage: floor PORT [WORKERS]     (binds 127.0.0.1 only)
 *   WORKERS: default 2 x nproc, at most MAX_WORKERS (1024). A worker serves
 *   one connection at a time, so it holds a keep-alive client until that
 *   client closes: bench/harness.py starts it with 2 x nproc workers for the
 *   one-request-per-connection cells and one worker per connection
 *   (max(2 x nproc, c)) for the wrk keep-alive cells, so that no client
 *   waits unanswered in the accept queue.
 * Build: gcc -O2 -o floor floor.c  (bench/run does this at bench time)
 * Stop:  SIGTERM to the parent; it forwards SIGTERM to its workers.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define BODY_LEN 1400
#define MAX_WORKERS 1024

static char resp_ka[2048], resp_close[2048];
static size_t resp_ka_len, resp_close_len;
static pid_t workers[MAX_WORKERS];
static int nworkers;
static volatile sig_atomic_t stop;

static void on_term(int sig) { (void)sig; stop = 1; }

static size_t build(char *out, size_t cap, const char *conn) {
    int n = snprintf(out, cap,
                     "HTTP/1.1 200 OK\r\n"
                     "Server: floor\r\n"
                     "Content-Type: text/html\r\n"
                     "Content-Length: %d\r\n"
                     "Connection: %s\r\n"
                     "\r\n",
                     BODY_LEN, conn);
    /* Deterministic body: 1400 bytes of printable filler. */
    for (int i = 0; i < BODY_LEN; i++)
        out[n + i] = (i % 64 == 63) ? '\n' : (char)('a' + i % 26);
    return (size_t)n + BODY_LEN;
}

static int write_all(int fd, const char *p, size_t len) {
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static void serve(int lfd) {
    char buf[8192];
    struct timeval tv = {5, 0};
    while (!stop) {
        int c = accept(lfd, NULL, NULL);
        if (c < 0) continue; /* EINTR on shutdown, or a client gone early */
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        for (;;) {
            ssize_t n = read(c, buf, sizeof buf - 1);
            if (n <= 0) break; /* EOF, error or idle timeout */
            buf[n] = '\0';
            int close_after = strcasestr(buf, "connection: close") != NULL ||
                              (strstr(buf, "HTTP/1.0") != NULL &&
                               strcasestr(buf, "keep-alive") == NULL);
            if (close_after) {
                write_all(c, resp_close, resp_close_len);
                break;
            }
            if (write_all(c, resp_ka, resp_ka_len) < 0) break;
        }
        close(c);
    }
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [WORKERS]\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]);
    nworkers = argc > 2 ? atoi(argv[2]) : 2 * (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nworkers < 1) nworkers = 1;
    if (nworkers > MAX_WORKERS) nworkers = MAX_WORKERS;

    resp_ka_len = build(resp_ka, sizeof resp_ka, "keep-alive");
    resp_close_len = build(resp_close, sizeof resp_close, "close");

    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 511) < 0) {
        perror("floor: bind/listen");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);

    struct sigaction act = {0};
    act.sa_handler = on_term; /* no SA_RESTART: accept() returns EINTR */
    sigaction(SIGTERM, &act, NULL);
    sigaction(SIGINT, &act, NULL);

    for (int i = 0; i < nworkers; i++) {
        pid_t p = fork();
        if (p == 0) serve(lfd);
        if (p < 0) { perror("floor: fork"); stop = 1; break; }
        workers[i] = p;
    }
    while (!stop) pause();
    for (int i = 0; i < nworkers; i++)
        if (workers[i] > 0) kill(workers[i], SIGTERM);
    while (wait(NULL) > 0) {}
    return 0;
}
