/*
 * echo_client.c: the closed-loop echo load generator of tideloop's bench suite.
 *
 * Compiled at run time by bench/clients/build.py (gcc -O2), so that the load
 * generator costs far less CPU per message than any Python server it drives.
 *
 * Usage:
 *   echo_client tcp HOST PORT CONNS SIZE WARMUP_S DURATION_S
 *   echo_client unix PATH     CONNS SIZE WARMUP_S DURATION_S
 *   echo_client_tls tls HOST PORT CONNS SIZE WARMUP_S DURATION_S
 *
 * Each of CONNS connections sends one SIZE-byte message, waits until all SIZE
 * bytes have come back, records the round-trip time, and sends the next (one
 * message in flight per connection). One thread, level-triggered epoll, one
 * recv() per readiness event, so the client does about one send(), one recv()
 * and a share of one epoll_wait() per message: less than the server, which
 * does the same syscalls and runs Python on top.
 *
 * TLS mode: the same file compiled with -DECHO_TLS and linked with -lssl
 * -lcrypto (bench/clients/build.py: echo_client_tls), family "tls" (TCP).
 * Each connection completes its handshake (blocking, before the load
 * starts; the certificate is not verified), then each message is one
 * SSL_write() (one TLS record up to 16 KiB) and the answer is read with
 * SSL_read() over a 64 KiB read-ahead buffer until the message is complete
 * or OpenSSL wants more bytes: again about one send() and one recv() per
 * message, plus the same encryption and decryption the server does, and no
 * Python. The plain build (no -DECHO_TLS) contains none of this.
 *
 * Output on stdout, one line each, flushed at once:
 *   START             when warm-up ends and measurement begins
 *   END               when measurement ends (before any teardown)
 *   {json}            messages, seconds, latency percentiles (microseconds),
 *                     and the client's own CPU time during measurement
 * Errors go to stderr, with exit status 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#ifdef ECHO_TLS
#include <openssl/err.h>
#include <openssl/ssl.h>
#endif

/* Latency histogram: 1 us buckets up to 1 s, plus one overflow bucket. */
#define HIST_US 1000000u

struct conn {
    int fd;
    int want_out;   /* EPOLLOUT currently registered */
    size_t sent;
    size_t rcvd;
    uint64_t t0_ns;
#ifdef ECHO_TLS
    SSL *ssl;       /* NULL for a plain connection */
#endif
};

static size_t msg_size;
static char *msg;
static uint32_t *hist;
static uint64_t hist_over, max_ns, messages, bytes_total;
static int measuring;

#ifdef ECHO_TLS
static SSL_CTX *tls_ctx;

static void die_tls(const char *what) {
    unsigned long code = ERR_get_error();
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    fprintf(stderr, "echo_client: %s: %s\n", what, code ? buf : strerror(errno));
    exit(1);
}
#endif

static void die(const char *what) {
    fprintf(stderr, "echo_client: %s: %s\n", what, strerror(errno));
    exit(1);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double cpu_s(const struct timeval *tv) {
    return (double)tv->tv_sec + (double)tv->tv_usec / 1e6;
}

/* send() or, in TLS mode, SSL_write(): bytes taken, or -1 with errno (EAGAIN: try later). */
static ssize_t conn_send(struct conn *c, const char *buf, size_t len) {
#ifdef ECHO_TLS
    if (c->ssl) {
        int n = SSL_write(c->ssl, buf, (int)len);
        if (n > 0) return n;
        int err = SSL_get_error(c->ssl, n);
        if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) { errno = EAGAIN; return -1; }
        die_tls("SSL_write");
    }
#endif
    return send(c->fd, buf, len, MSG_NOSIGNAL);
}

/* recv() or, in TLS mode, SSL_read(): bytes read, 0 at EOF, or -1 with errno. */
static ssize_t conn_recv(struct conn *c, char *buf, size_t len) {
#ifdef ECHO_TLS
    if (c->ssl) {
        int n = SSL_read(c->ssl, buf, (int)len);
        if (n > 0) return n;
        int err = SSL_get_error(c->ssl, n);
        if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) { errno = EAGAIN; return -1; }
        if (err == SSL_ERROR_ZERO_RETURN) return 0;
        die_tls("SSL_read");
    }
#endif
    return recv(c->fd, buf, len, 0);
}

/* More of the message may already be in OpenSSL's buffers (no epoll event for it). */
static int conn_has_more(struct conn *c) {
#ifdef ECHO_TLS
    if (c->ssl) return c->rcvd < msg_size || SSL_has_pending(c->ssl);
#endif
    (void)c;
    return 0;
}

static void set_interest(int ep, struct conn *c, int want_out) {
    if (c->want_out == want_out) return;
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0) die("epoll_ctl");
    c->want_out = want_out;
}

static void try_send(int ep, struct conn *c) {
    while (c->sent < msg_size) {
        ssize_t n = conn_send(c, msg + c->sent, msg_size - c->sent);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            if (errno == EINTR) continue;
            die("send");
        }
        c->sent += (size_t)n;
    }
    set_interest(ep, c, c->sent < msg_size);
}

static void start_message(int ep, struct conn *c, uint64_t t) {
    c->sent = 0;
    c->rcvd = 0;
    c->t0_ns = t;
    try_send(ep, c);
}

static int connect_one(const char *family, const char *a1, const char *a2, struct conn *c) {
    int fd;
    if (strcmp(family, "unix") == 0) {
        struct sockaddr_un sun;
        memset(&sun, 0, sizeof sun);
        sun.sun_family = AF_UNIX;
        if (strlen(a1) >= sizeof sun.sun_path) { errno = ENAMETOOLONG; die("unix path"); }
        strcpy(sun.sun_path, a1);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0) die("socket");
        if (connect(fd, (struct sockaddr *)&sun, sizeof sun) < 0) die("connect");
    } else {
        struct addrinfo hints, *res;
        memset(&hints, 0, sizeof hints);
        hints.ai_socktype = SOCK_STREAM;
        int rc = getaddrinfo(a1, a2, &hints, &res);
        if (rc != 0) { fprintf(stderr, "echo_client: getaddrinfo: %s\n", gai_strerror(rc)); exit(1); }
        fd = socket(res->ai_family, SOCK_STREAM, 0);
        if (fd < 0) die("socket");
        if (connect(fd, res->ai_addr, res->ai_addrlen) < 0) die("connect");
        freeaddrinfo(res);
        int one = 1;
        if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) die("TCP_NODELAY");
    }
#ifdef ECHO_TLS
    if (strcmp(family, "tls") == 0) {
        c->ssl = SSL_new(tls_ctx);
        if (!c->ssl || !SSL_set_fd(c->ssl, fd)) die_tls("SSL_new");
        SSL_set_tlsext_host_name(c->ssl, a1);
        if (SSL_connect(c->ssl) != 1) die_tls("TLS handshake");  /* blocking, before the load */
    }
#else
    (void)c;
#endif
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) die("fcntl");
    return fd;
}

static double percentile_us(double p) {
    uint64_t total = messages, want, seen = 0;
    if (total == 0) return 0.0;
    want = (uint64_t)((double)total * p / 100.0);
    if (want >= total) want = total - 1;
    for (uint32_t i = 0; i < HIST_US; i++) {
        seen += hist[i];
        if (seen > want) return (double)i + 0.5;
    }
    return (double)max_ns / 1000.0;
}

int main(int argc, char **argv) {
    int base;
    if (argc == 8 && strcmp(argv[1], "tcp") == 0) base = 4;
    else if (argc == 7 && strcmp(argv[1], "unix") == 0) base = 3;
#ifdef ECHO_TLS
    else if (argc == 8 && strcmp(argv[1], "tls") == 0) base = 4;
#endif
    else {
        fprintf(stderr, "usage: echo_client tcp HOST PORT CONNS SIZE WARMUP_S DURATION_S\n"
                        "       echo_client unix PATH CONNS SIZE WARMUP_S DURATION_S\n"
#ifdef ECHO_TLS
                        "       echo_client_tls tls HOST PORT CONNS SIZE WARMUP_S DURATION_S\n"
#endif
                        );
        return 2;
    }
    int nconns = atoi(argv[base]);
    msg_size = (size_t)atol(argv[base + 1]);
    double warmup = atof(argv[base + 2]), duration = atof(argv[base + 3]);
    if (nconns <= 0 || msg_size == 0 || duration <= 0) { fprintf(stderr, "bad arguments\n"); return 2; }

    /* One fd per connection: raise the soft limit as far as needed (the scale
     * workloads run 10,000 connections; the default soft limit is often 1024). */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) < 0) die("getrlimit");
    rlim_t need = (rlim_t)nconns + 16;
    if (nofile.rlim_cur < need) {
        if (nofile.rlim_max != RLIM_INFINITY && nofile.rlim_max < need) {
            fprintf(stderr, "%d connections need %lu fds, the hard limit is %lu\n", nconns,
                    (unsigned long)need, (unsigned long)nofile.rlim_max);
            return 1;
        }
        nofile.rlim_cur = need;
        if (setrlimit(RLIMIT_NOFILE, &nofile) < 0) die("setrlimit");
    }

    msg = malloc(msg_size);
    hist = calloc(HIST_US, sizeof *hist);
    size_t rbuf_size = 256 * 1024;
    char *rbuf = malloc(rbuf_size);
    struct conn *conns = calloc((size_t)nconns, sizeof *conns);
    if (!msg || !hist || !rbuf || !conns) die("malloc");
    memset(msg, 'x', msg_size);

#ifdef ECHO_TLS
    if (strcmp(argv[1], "tls") == 0) {
        tls_ctx = SSL_CTX_new(TLS_client_method());
        if (!tls_ctx) die_tls("SSL_CTX_new");
        SSL_CTX_set_verify(tls_ctx, SSL_VERIFY_NONE, NULL);
        SSL_CTX_set_mode(tls_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        SSL_CTX_set_read_ahead(tls_ctx, 1);
        SSL_CTX_set_default_read_buffer_len(tls_ctx, 64 * 1024);
    }
#endif
    int ep = epoll_create1(0);
    if (ep < 0) die("epoll_create1");
    for (int i = 0; i < nconns; i++) {
        struct conn *c = &conns[i];
        c->fd = connect_one(argv[1], argv[2], base == 4 ? argv[3] : NULL, c);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0) die("epoll_ctl");
    }

    uint64_t t = now_ns();
    uint64_t t_start = t + (uint64_t)(warmup * 1e9);
    uint64_t t_end = t_start + (uint64_t)(duration * 1e9);
    uint64_t m_start = 0, m_end = 0;
    struct rusage ru0, ru1;
    for (int i = 0; i < nconns; i++) start_message(ep, &conns[i], t);

    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, 5);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        t = now_ns();
        if (!measuring && t >= t_start) {
            measuring = 1;
            messages = bytes_total = hist_over = max_ns = 0;
            memset(hist, 0, HIST_US * sizeof *hist);
            getrusage(RUSAGE_SELF, &ru0);
            m_start = t;
            fputs("START\n", stdout);
            fflush(stdout);
        }
        if (measuring && t >= t_end) {
            m_end = t;
            getrusage(RUSAGE_SELF, &ru1);
            fputs("END\n", stdout);
            fflush(stdout);
            break;
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            uint32_t e = evs[i].events;
            if (e & (EPOLLERR | EPOLLHUP) && !(e & EPOLLIN)) { errno = ECONNRESET; die("connection"); }
            if (e & EPOLLOUT) try_send(ep, c);
            if (e & EPOLLIN) {
              do {
                ssize_t r = conn_recv(c, rbuf, rbuf_size);
                if (r < 0) {
                    if (errno == EAGAIN || errno == EINTR) break;
                    die("recv");
                }
                if (r == 0) { errno = ECONNRESET; die("server closed the connection"); }
                c->rcvd += (size_t)r;
                if (c->rcvd > msg_size) { errno = EPROTO; die("received more than was sent"); }
                if (c->rcvd == msg_size && c->sent == msg_size) {
                    if (measuring) {
                        uint64_t lat = t - c->t0_ns;
                        uint64_t us = lat / 1000u;
                        if (us < HIST_US) hist[us]++;
                        else hist_over++;
                        if (lat > max_ns) max_ns = lat;
                        messages++;
                        bytes_total += msg_size;
                    }
                    start_message(ep, c, t);
                    break;
                }
              } while (conn_has_more(c));
            }
        }
    }
    double secs = (double)(m_end - m_start) / 1e9;
    printf("{\"messages\": %llu, \"seconds\": %.6f, \"bytes\": %llu, "
           "\"p50_us\": %.1f, \"p90_us\": %.1f, \"p99_us\": %.1f, \"max_us\": %.1f, "
           "\"over_1s\": %llu, \"client_user_s\": %.6f, \"client_sys_s\": %.6f}\n",
           (unsigned long long)messages, secs, (unsigned long long)bytes_total,
           percentile_us(50), percentile_us(90), percentile_us(99), (double)max_ns / 1000.0,
           (unsigned long long)hist_over,
           cpu_s(&ru1.ru_utime) - cpu_s(&ru0.ru_utime), cpu_s(&ru1.ru_stime) - cpu_s(&ru0.ru_stime));
    fflush(stdout);
    for (int i = 0; i < nconns; i++) close(conns[i].fd);
    return 0;
}
