/* The store's client: one TCP connection to the server (one thread at a time), waits bounded. */
#define _GNU_SOURCE /* explicit_bzero */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tlua/distributed.h"
#include "tlua/error.h"

#include "store_parse.h"
#include "store_wire.h"

#define DEFAULT_TIMEOUT_S   300.0
#define MAX_TIMEOUT_S       1e9
#define FIRST_RETRY_DELAY_S 0.05
#define MAX_RETRY_DELAY_S   1.0

enum { MAX_HOST = 255, SMALL_VALUE = 4096 };

/* A client is used by one thread at a time; a program that waits in two threads opens two. */
struct tl_store {
    int fd;      /* -1 after a timeout (the next call reconnects) or once closed */
    bool closed; /* the server closed the connection: every later call fails at once */
    double timeout_s;
    int port;
    char host[MAX_HOST + 1];
    char secret[TL_STORE_MAX_SECRET + 1]; /* proven again by every reconnection */
};

/* The call in progress, for its messages. */
typedef struct store_call {
    tl_store *store;
    int op;
    const char *key;
    bool replying;     /* a byte of the reply has arrived (a GET no longer waits for its key) */
    bool server_error; /* the server answered with an error */
} store_call;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double seconds) {
    if (seconds <= 0) return;
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Milliseconds for poll from seconds left (rounded up: never a busy zero wait). */
static int poll_ms(double seconds) {
    if (seconds <= 0) return 0;
    double ms = seconds * 1000.0 + 1.0;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Waits until fd is ready for events or the deadline passes; false on timeout. */
static bool wait_fd(int fd, short events, double deadline) {
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int rc = poll(&p, 1, poll_ms(deadline - now_s()));
        if (rc > 0) return true;
        if (rc < 0 && errno != EINTR) return true; /* the next send or recv reports it */
        if (now_s() >= deadline) return false;
    }
}

/* ---- connecting ------------------------------------------------------------------------------ */
static int set_socket_flags(int fd) {
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return -1;
    return fcntl(fd, F_SETFD, FD_CLOEXEC);
}

/* One attempt at one address; the connected socket, or -1 with errno set. */
static int connect_address(const struct addrinfo *ai, double deadline) {
    int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) return -1;
    int err = 0;
    if (set_socket_flags(fd) != 0)
        err = errno;
    else if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        err = errno;
        if (err == EINPROGRESS || err == EINTR) {
            socklen_t len = sizeof err;
            if (!wait_fd(fd, POLLOUT, deadline))
                err = ETIMEDOUT;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
                err = errno;
        }
    }
    if (err) {
        close(fd);
        errno = err;
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* One attempt at every address of host:port; the socket, or -1 with why in reason. */
static int connect_once(const char *host, int port, double deadline, char *reason, size_t size) {
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *list = NULL;
    int rc = getaddrinfo(host, service, &hints, &list);
    if (rc != 0) {
        snprintf(reason, size, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    for (const struct addrinfo *ai = list; ai && fd < 0; ai = ai->ai_next) {
        fd = connect_address(ai, deadline);
        if (fd < 0) snprintf(reason, size, "%s", strerror(errno));
    }
    freeaddrinfo(list);
    return fd;
}

/* Connects, retrying (the server may not listen yet) until timeout_s has passed. */
static tl_status connect_until(const char *host, int port, double timeout_s, int *fd_out) {
    double start = now_s(), deadline = start + timeout_s, delay = FIRST_RETRY_DELAY_S;
    char reason[256] = "no address";
    for (;;) {
        int fd = connect_once(host, port, deadline, reason, sizeof reason);
        if (fd >= 0) {
            *fd_out = fd;
            return TL_OK;
        }
        double left = deadline - now_s();
        if (left <= 0) break;
        sleep_s(delay < left ? delay : left);
        delay = delay * 2 < MAX_RETRY_DELAY_S ? delay * 2 : MAX_RETRY_DELAY_S;
    }
    return tl_error(TL_ERR_RUNTIME, "store: connect to %s:%d failed after %g s: %s", host, port,
                    timeout_s, reason);
}

static tl_status check_timeout(const char *op, double timeout_s) {
    if (timeout_s > 0 && timeout_s <= MAX_TIMEOUT_S) return TL_OK;
    return tl_error(TL_ERR_ARGUMENT,
                    "store: %s: timeout %g s is out of range (expected more than 0 and at most "
                    "%g s)",
                    op, timeout_s, MAX_TIMEOUT_S);
}

static tl_status authenticate(tl_store *s);

tl_status tl_store_connect(const char *host, int port, const char *secret, double timeout_s,
                           tl_store **out) {
    if (!out) return tl_error(TL_ERR_ARGUMENT, "store: connect: out is NULL");
    if (!host || !*host)
        return tl_error(TL_ERR_ARGUMENT,
                        "store: connect: host is %s (expected a host name or IP "
                        "address)",
                        host ? "empty" : "NULL");
    if (strlen(host) > MAX_HOST)
        return tl_error(TL_ERR_ARGUMENT, "store: connect: host has %zu bytes, at most %d allowed",
                        strlen(host), MAX_HOST);
    if (port < 1 || port > 65535)
        return tl_error(TL_ERR_ARGUMENT,
                        "store: connect: port %d is out of range (expected 1 to 65535)", port);
    TL_TRY(store_check_secret("connect", secret));
    TL_TRY(check_timeout("connect", timeout_s));
    tl_store *s = calloc(1, sizeof *s);
    if (!s) return tl_error(TL_ERR_MEMORY, "store: connect: out of memory");
    snprintf(s->host, sizeof s->host, "%s", host);
    snprintf(s->secret, sizeof s->secret, "%s", secret);
    s->port = port;
    s->timeout_s = timeout_s; /* the answer to the secret is waited for as long as the connect */
    tl_status status = connect_until(host, port, timeout_s, &s->fd);
    if (status == TL_OK) status = authenticate(s);
    s->timeout_s = DEFAULT_TIMEOUT_S;
    if (status != TL_OK) {
        tl_store_close(s);
        return status;
    }
    *out = s;
    return TL_OK;
}

void tl_store_close(tl_store *store) {
    if (!store) return;
    if (store->fd >= 0) close(store->fd);
    explicit_bzero(store->secret, sizeof store->secret);
    free(store);
}

tl_status tl_store_set_timeout(tl_store *store, double timeout_s) {
    if (!store) return tl_error(TL_ERR_ARGUMENT, "store: set_timeout: the store is NULL");
    TL_TRY(check_timeout("set_timeout", timeout_s));
    store->timeout_s = timeout_s;
    return TL_OK;
}

/* ---- one request, one reply ------------------------------------------------------------------ */
/* Drops the connection after a failure mid-call: the reply stream is out of step. */
static void drop_connection(tl_store *s, bool closed_by_server) {
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
    if (closed_by_server) s->closed = true;
}

static tl_status closed_error(const store_call *c) {
    const tl_store *s = c->store;
    return tl_error(TL_ERR_RUNTIME,
                    "store: the connection to %s:%d closed during %s '%s' (the launcher or rank "
                    "0 has stopped)",
                    s->host, s->port, store_op_name(c->op), c->key);
}

static tl_status timeout_error(const store_call *c) {
    tl_store *s = c->store;
    drop_connection(s, false);
    if (c->op == STORE_GET && !c->replying)
        return tl_error(TL_ERR_RUNTIME,
                        "store: get '%s' timed out after %g s (is every rank "
                        "running?)",
                        c->key, s->timeout_s);
    return tl_error(TL_ERR_RUNTIME, "store: %s '%s' timed out after %g s talking to %s:%d",
                    store_op_name(c->op), c->key, s->timeout_s, s->host, s->port);
}

/* A failed send or recv: a closed connection, or another socket error. */
static tl_status io_error(const store_call *c, int err) {
    tl_store *s = c->store;
    bool closed = err == 0 || err == EPIPE || err == ECONNRESET;
    drop_connection(s, closed);
    if (closed) return closed_error(c);
    return tl_error(TL_ERR_RUNTIME, "store: %s '%s': talking to %s:%d failed: %s",
                    store_op_name(c->op), c->key, s->host, s->port, strerror(err));
}

static tl_status send_all(const store_call *c, const void *data, size_t size) {
    const unsigned char *p = data;
    tl_store *s = c->store;
    while (size > 0) {
        ssize_t n = send(s->fd, p, size, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!wait_fd(s->fd, POLLOUT, now_s() + s->timeout_s)) return timeout_error(c);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return io_error(c, errno);
        p += n;
        size -= (size_t)n;
    }
    return TL_OK;
}

static tl_status recv_all(store_call *c, void *data, size_t size) {
    unsigned char *p = data;
    tl_store *s = c->store;
    while (size > 0) {
        ssize_t n = recv(s->fd, p, size, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!wait_fd(s->fd, POLLIN, now_s() + s->timeout_s)) return timeout_error(c);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return io_error(c, n == 0 ? 0 : errno);
        c->replying = true;
        p += n;
        size -= (size_t)n;
    }
    return TL_OK;
}

static tl_status send_request(const store_call *c, const void *value, size_t value_size) {
    unsigned char buffer[STORE_HEADER_SIZE + TL_STORE_MAX_KEY + SMALL_VALUE];
    size_t key_len = strlen(c->key), used = STORE_HEADER_SIZE + key_len;
    store_encode_request(buffer, c->op, key_len, value_size);
    memcpy(buffer + STORE_HEADER_SIZE, c->key, key_len);
    if (value_size <= SMALL_VALUE) { /* one segment for the small requests */
        if (value_size) memcpy(buffer + used, value, value_size);
        return send_all(c, buffer, used + value_size);
    }
    TL_TRY(send_all(c, buffer, used));
    return send_all(c, value, value_size);
}

/* Reads the reply: *payload gets a malloc'ed copy (never NULL) of *size bytes. */
static tl_status receive_reply(store_call *c, unsigned char **payload, size_t *size) {
    unsigned char head[STORE_HEADER_SIZE];
    TL_TRY(recv_all(c, head, sizeof head));
    uint64_t len = store_get_u64(head + 8);
    int status = head[0];
    if ((status != STORE_REPLY_OK && status != STORE_REPLY_ERROR) || len > STORE_MAX_VALUE) {
        drop_connection(c->store, false);
        return tl_error(TL_ERR_RUNTIME,
                        "store: %s '%s': malformed reply from %s:%d (is it a tlua "
                        "store?)",
                        store_op_name(c->op), c->key, c->store->host, c->store->port);
    }
    unsigned char *bytes = malloc(len ? (size_t)len : 1);
    if (!bytes) {
        drop_connection(c->store, false);
        return tl_error(TL_ERR_MEMORY, "store: %s '%s': cannot allocate %llu bytes for the reply",
                        store_op_name(c->op), c->key, (unsigned long long)len);
    }
    tl_status st = recv_all(c, bytes, (size_t)len);
    c->server_error = st == TL_OK && status == STORE_REPLY_ERROR;
    if (c->server_error) st = tl_error(TL_ERR_RUNTIME, "%.*s", (int)len, (const char *)bytes);
    if (st != TL_OK) {
        free(bytes);
        return st;
    }
    *payload = bytes;
    *size = (size_t)len;
    return TL_OK;
}

/* A reply of an unexpected size: the server speaks another protocol. */
static tl_status bad_reply_size(tl_store *s, int op, const char *key, size_t got, size_t want) {
    drop_connection(s, false);
    return tl_error(TL_ERR_RUNTIME, "store: %s '%s': reply of %zu bytes from %s:%d, expected %zu",
                    store_op_name(op), key, got, s->host, s->port, want);
}

/* Proves the secret on the new connection s->fd (the first request of every connection). A
   refused secret closes the client for good: no later call can succeed. */
static tl_status authenticate(tl_store *s) {
    store_call c = {.store = s, .op = STORE_AUTH, .key = ""};
    unsigned char *payload = NULL;
    size_t size = 0;
    tl_status st = send_request(&c, s->secret, strlen(s->secret));
    if (st == TL_OK) st = receive_reply(&c, &payload, &size);
    free(payload);
    if (st == TL_OK && size == 0) return TL_OK;
    if (st == TL_OK) return bad_reply_size(s, STORE_AUTH, "", size, 0);
    if (c.server_error) {
        drop_connection(s, true);
        return tl_error(TL_ERR_RUNTIME,
                        "store: connect to %s:%d: the server refused the secret (every process "
                        "of a job needs its TLUA_STORE_SECRET: the launcher's, or the one given "
                        "to every node)",
                        s->host, s->port);
    }
    char why[512];
    snprintf(why, sizeof why, "%s", tl_last_error());
    return tl_error(st, "store: connect to %s:%d: proving the secret failed: %s", s->host, s->port,
                    why);
}

static tl_status check_call(const tl_store *store, const char *op, const char *key) {
    if (!store) return tl_error(TL_ERR_ARGUMENT, "store: %s: the store is NULL", op);
    if (!key) return tl_error(TL_ERR_ARGUMENT, "store: %s: key is NULL", op);
    size_t len = strlen(key);
    if (len > TL_STORE_MAX_KEY)
        return tl_error(TL_ERR_ARGUMENT,
                        "store: %s: key '%.40s...' has %zu bytes, at most %d (TL_STORE_MAX_KEY)",
                        op, key, len, TL_STORE_MAX_KEY);
    return TL_OK;
}

/* Sends one request and returns its reply's payload (malloc'ed, never NULL). */
static tl_status call(tl_store *s, int op, const char *key, const void *value, size_t value_size,
                      unsigned char **payload, size_t *size) {
    store_call c = {.store = s, .op = op, .key = key};
    if (s->closed)
        return tl_error(TL_ERR_RUNTIME,
                        "store: the connection to %s:%d closed earlier (the launcher or rank 0 "
                        "has stopped); %s '%s' cannot run",
                        s->host, s->port, store_op_name(op), key);
    if (s->fd < 0) {
        TL_TRY(connect_until(s->host, s->port, s->timeout_s, &s->fd));
        TL_TRY(authenticate(s));
    }
    TL_TRY(send_request(&c, value, value_size));
    return receive_reply(&c, payload, size);
}

/* ---- the operations -------------------------------------------------------------------------- */
tl_status tl_store_set(tl_store *store, const char *key, const void *value, size_t size) {
    TL_TRY(check_call(store, "set", key));
    if (!value && size > 0)
        return tl_error(TL_ERR_ARGUMENT, "store: set '%s': value is NULL but size is %zu", key,
                        size);
    if ((uint64_t)size > STORE_MAX_VALUE)
        return tl_error(TL_ERR_ARGUMENT, "store: set '%s': value of %zu bytes, at most %llu", key,
                        size, (unsigned long long)STORE_MAX_VALUE);
    unsigned char *payload = NULL;
    size_t got = 0;
    TL_TRY(call(store, STORE_SET, key, value, size, &payload, &got));
    free(payload);
    return got == 0 ? TL_OK : bad_reply_size(store, STORE_SET, key, got, 0);
}

tl_status tl_store_get(tl_store *store, const char *key, void **value, size_t *size) {
    TL_TRY(check_call(store, "get", key));
    if (!value || !size)
        return tl_error(TL_ERR_ARGUMENT, "store: get '%s': %s is NULL", key,
                        value ? "size" : "value");
    unsigned char *payload = NULL;
    size_t got = 0;
    TL_TRY(call(store, STORE_GET, key, NULL, 0, &payload, &got));
    *value = payload;
    *size = got;
    return TL_OK;
}

tl_status tl_store_add(tl_store *store, const char *key, int64_t delta, int64_t *out) {
    TL_TRY(check_call(store, "add", key));
    unsigned char wire[8], *payload = NULL;
    size_t got = 0;
    store_put_u64(wire, (uint64_t)delta);
    TL_TRY(call(store, STORE_ADD, key, wire, sizeof wire, &payload, &got));
    if (got != 8) {
        free(payload);
        return bad_reply_size(store, STORE_ADD, key, got, 8);
    }
    uint64_t u = store_get_u64(payload);
    free(payload);
    if (out) *out = u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
    return TL_OK;
}

tl_status tl_store_check(tl_store *store, const char *key, bool *exists) {
    TL_TRY(check_call(store, "check", key));
    if (!exists) return tl_error(TL_ERR_ARGUMENT, "store: check '%s': exists is NULL", key);
    unsigned char *payload = NULL;
    size_t got = 0;
    TL_TRY(call(store, STORE_CHECK, key, NULL, 0, &payload, &got));
    unsigned char answer = got == 1 ? payload[0] : 0;
    free(payload);
    if (got != 1) return bad_reply_size(store, STORE_CHECK, key, got, 1);
    *exists = answer != 0;
    return TL_OK;
}

tl_status tl_store_delete(tl_store *store, const char *key) {
    TL_TRY(check_call(store, "delete", key));
    unsigned char *payload = NULL;
    size_t got = 0;
    TL_TRY(call(store, STORE_DELETE, key, NULL, 0, &payload, &got));
    free(payload);
    return got == 0 ? TL_OK : bad_reply_size(store, STORE_DELETE, key, got, 0);
}
