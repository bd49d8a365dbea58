/* The store's server: a key -> bytes map served over TCP by one thread polling every client. */
#define _GNU_SOURCE /* accept4 and pipe2 with O_CLOEXEC: no descriptor leaks into a forked rank */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tlua/distributed.h"
#include "tlua/error.h"

#include "store_map.h"
#include "store_wire.h"

enum {
    READ_BUDGET = 8 << 20, /* bytes read from one client before the others get their turn */
    SCRATCH_SIZE = 64 << 10,
    INLINE_PAYLOAD = 8,    /* replies of ADD and CHECK travel inside their chunk */
    ACCEPT_PAUSE_MS = 100, /* out of descriptors: wait this long before accepting again */
    MAX_INT64_DIGITS = 20, /* "-9223372036854775808" */
};

/* One reply waiting to be sent: its header (and a small payload) inline, a large one shared. */
typedef struct out_chunk {
    struct out_chunk *next;
    unsigned char inline_bytes[STORE_HEADER_SIZE + INLINE_PAYLOAD];
    size_t inline_len;
    store_blob *body; /* NULL when the payload is inline or empty */
    size_t sent;      /* bytes sent so far, inline bytes first */
} out_chunk;

typedef enum read_phase { READ_HEADER, READ_KEY, READ_VALUE } read_phase;

/* A client connection and the request it is sending. */
typedef struct conn {
    int fd;
    bool dead;   /* closed at the end of this round */
    bool parked; /* its GET waits for key */
    read_phase phase;
    size_t got; /* bytes of the current part received */
    unsigned char head[STORE_HEADER_SIZE];
    int op;
    size_t key_len;
    uint64_t value_len;
    char key[TL_STORE_MAX_KEY];
    store_blob *value; /* the value being received (SET, ADD); NULL when it is discarded */
    out_chunk *out_first, *out_last;
} conn;

struct tl_store_server {
    pthread_t thread;
    int listen_fd, wake_read, wake_write;
    conn **conns;
    size_t conn_count, conn_capacity;
    struct pollfd *fds;
    size_t fds_capacity;
    int accept_pause_ms;
    store_map map;
    unsigned char scratch[SCRATCH_SIZE]; /* where a discarded value's bytes go */
};

/* ---- replies --------------------------------------------------------------------------------- */
static void free_chunks(conn *c) {
    while (c->out_first) {
        out_chunk *o = c->out_first;
        c->out_first = o->next;
        store_blob_release(o->body);
        free(o);
    }
    c->out_last = NULL;
}

/* Queues a reply with an inline payload (len <= INLINE_PAYLOAD) and/or a shared body (whose
   reference it takes). False when out of memory (the body is released). */
static bool queue_reply(conn *c, int status, const void *payload, size_t len, store_blob *body) {
    out_chunk *o = malloc(sizeof *o);
    if (!o) {
        store_blob_release(body);
        return false;
    }
    uint64_t payload_len = len + (body ? body->size : 0);
    store_encode_reply(o->inline_bytes, status, payload_len);
    if (len) memcpy(o->inline_bytes + STORE_HEADER_SIZE, payload, len);
    o->inline_len = STORE_HEADER_SIZE + len;
    o->body = body;
    o->sent = 0;
    o->next = NULL;
    if (c->out_last)
        c->out_last->next = o;
    else
        c->out_first = o;
    c->out_last = o;
    return true;
}

static bool reply_ok(conn *c, const void *payload, size_t len) {
    return queue_reply(c, STORE_REPLY_OK, payload, len, NULL);
}

/* An error reply: "store: <op> '<key>': <what>". */
static bool reply_error(conn *c, const char *what) {
    char text[TL_STORE_MAX_KEY + 256];
    int n = snprintf(text, sizeof text, "store: %s '%.*s': %s", store_op_name(c->op),
                     (int)c->key_len, c->key, what);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof text ? (size_t)n : sizeof text - 1;
    store_blob *blob = store_blob_new(len);
    if (!blob) return false;
    memcpy(blob->bytes, text, len);
    return queue_reply(c, STORE_REPLY_ERROR, NULL, 0, blob);
}

/* Sends what the socket takes now; false when the connection broke. */
static bool flush_replies(conn *c) {
    while (c->out_first) {
        out_chunk *o = c->out_first;
        size_t body_size = o->body ? o->body->size : 0, total = o->inline_len + body_size;
        struct iovec iov[2];
        int count = 0;
        if (o->sent < o->inline_len)
            iov[count++] = (struct iovec){o->inline_bytes + o->sent, o->inline_len - o->sent};
        size_t body_sent = o->sent > o->inline_len ? o->sent - o->inline_len : 0;
        if (body_sent < body_size)
            iov[count++] = (struct iovec){o->body->bytes + body_sent, body_size - body_sent};
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)count};
        ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno == EAGAIN || errno == EWOULDBLOCK;
        }
        o->sent += (size_t)n;
        if (o->sent < total) continue;
        c->out_first = o->next;
        if (!c->out_first) c->out_last = NULL;
        store_blob_release(o->body);
        free(o);
    }
    return true;
}

/* ---- requests -------------------------------------------------------------------------------- */
/* Answers every GET parked on c's key with value. */
static void wake_waiters(tl_store_server *s, const conn *c, store_blob *value) {
    for (size_t i = 0; i < s->conn_count; i++) {
        conn *w = s->conns[i];
        if (w->dead || !w->parked || w->key_len != c->key_len ||
            memcmp(w->key, c->key, c->key_len) != 0)
            continue;
        w->parked = false;
        if (!queue_reply(w, STORE_REPLY_OK, NULL, 0, store_blob_retain(value))) w->dead = true;
    }
}

/* Puts value (the caller's reference) under c's key and answers the GETs waiting for it. */
static bool put_value(tl_store_server *s, conn *c, store_blob *value) {
    if (!store_map_put(&s->map, c->key, c->key_len, value)) {
        store_blob_release(value);
        return false;
    }
    wake_waiters(s, c, value);
    return true;
}

/* The integer whose two's complement bits are u. */
static int64_t wire_to_int64(uint64_t u) {
    return u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

/* Reads an added key's decimal text; false when it is not one. */
static bool parse_int64(const store_blob *blob, int64_t *out) {
    size_t n = blob->size, i = 0;
    if (n == 0 || n > MAX_INT64_DIGITS) return false;
    bool negative = blob->bytes[0] == '-';
    if (negative && ++i == n) return false;
    uint64_t magnitude = 0, limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        unsigned digit = (unsigned)blob->bytes[i] - '0';
        if (digit > 9 || magnitude > (limit - digit) / 10) return false;
        magnitude = magnitude * 10 + digit;
    }
    *out = wire_to_int64(negative ? 0 - magnitude : magnitude);
    return true;
}

static bool execute_add(tl_store_server *s, conn *c, const store_blob *delta_bytes) {
    int64_t delta = wire_to_int64(store_get_u64(delta_bytes->bytes)), old = 0;
    char what[128];
    store_blob *current = store_map_find(&s->map, c->key, c->key_len);
    if (current && !parse_int64(current, &old)) {
        snprintf(what, sizeof what,
                 "the value under the key is not a decimal integer (%zu bytes); add needs one",
                 current->size);
        return reply_error(c, what);
    }
    if ((delta > 0 && old > INT64_MAX - delta) || (delta < 0 && old < INT64_MIN - delta)) {
        snprintf(what, sizeof what, "%" PRId64 " + %" PRId64 " overflows a 64-bit integer", old,
                 delta);
        return reply_error(c, what);
    }
    int64_t sum = old + delta;
    char text[MAX_INT64_DIGITS + 2];
    int len = snprintf(text, sizeof text, "%" PRId64, sum);
    store_blob *value = store_blob_new((size_t)len);
    if (!value) return reply_error(c, "the server is out of memory");
    memcpy(value->bytes, text, (size_t)len);
    if (!put_value(s, c, value)) return reply_error(c, "the server is out of memory");
    unsigned char wire[8];
    store_put_u64(wire, (uint64_t)sum);
    return reply_ok(c, wire, sizeof wire);
}

/* Runs c's complete request; false when the connection must close. */
static bool execute(tl_store_server *s, conn *c) {
    store_blob *value = c->value;
    c->value = NULL;
    if ((c->op == STORE_SET || c->op == STORE_ADD) && !value) {
        char what[96];
        snprintf(what, sizeof what, "the server cannot allocate %" PRIu64 " bytes", c->value_len);
        return reply_error(c, what);
    }
    switch (c->op) {
    case STORE_SET:
        if (!put_value(s, c, value)) return reply_error(c, "the server is out of memory");
        return reply_ok(c, NULL, 0);
    case STORE_ADD: {
        bool ok = execute_add(s, c, value);
        store_blob_release(value);
        return ok;
    }
    case STORE_GET: {
        store_blob *found = store_map_find(&s->map, c->key, c->key_len);
        if (!found) {
            c->parked = true;
            return true;
        }
        return queue_reply(c, STORE_REPLY_OK, NULL, 0, store_blob_retain(found));
    }
    case STORE_CHECK: {
        unsigned char exists = store_map_find(&s->map, c->key, c->key_len) != NULL;
        return reply_ok(c, &exists, 1);
    }
    default:
        store_map_remove(&s->map, c->key, c->key_len);
        return reply_ok(c, NULL, 0);
    }
}

/* Checks and decodes a request header; false when it is malformed. */
static bool accept_header(conn *c) {
    const unsigned char *h = c->head;
    if (memcmp(h, STORE_MAGIC, 4) != 0 || h[5] != 0) return false;
    c->op = h[4];
    c->key_len = (size_t)h[6] << 8 | h[7];
    c->value_len = store_get_u64(h + 8);
    if (c->key_len > TL_STORE_MAX_KEY) return false;
    switch (c->op) {
    case STORE_SET:
        return c->value_len <= STORE_MAX_VALUE;
    case STORE_ADD:
        return c->value_len == 8;
    case STORE_GET:
    case STORE_CHECK:
    case STORE_DELETE:
        return c->value_len == 0;
    default:
        return false;
    }
}

static size_t part_size(const conn *c) {
    switch (c->phase) {
    case READ_HEADER:
        return STORE_HEADER_SIZE;
    case READ_KEY:
        return c->key_len;
    default:
        return (size_t)c->value_len;
    }
}

/* Moves past every complete part of the request (running it when whole); false when the
   connection must close. */
static bool finish_parts(tl_store_server *s, conn *c) {
    while (c->got == part_size(c)) {
        c->got = 0;
        if (c->phase == READ_HEADER) {
            if (!accept_header(c)) return false;
            c->phase = READ_KEY;
        } else if (c->phase == READ_KEY) {
            c->phase = READ_VALUE;
            if (c->op == STORE_SET || c->op == STORE_ADD)
                c->value = store_blob_new((size_t)c->value_len); /* NULL: discard, then refuse */
        } else {
            c->phase = READ_HEADER;
            return execute(s, c);
        }
    }
    return true;
}

/* Where the next bytes of the request go, and how many are due there. */
static unsigned char *read_target(tl_store_server *s, conn *c, size_t *due) {
    *due = part_size(c) - c->got;
    if (c->phase == READ_HEADER) return c->head + c->got;
    if (c->phase == READ_KEY) return (unsigned char *)c->key + c->got;
    if (c->value) return c->value->bytes + c->got;
    if (*due > SCRATCH_SIZE) *due = SCRATCH_SIZE;
    return s->scratch;
}

/* A parked client may only close: anything it sends before its reply breaks the protocol. */
static bool parked_client_is_quiet(conn *c) {
    unsigned char byte;
    ssize_t n = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

/* Reads what the client sent (up to READ_BUDGET bytes); false when the connection must close. */
static bool read_requests(tl_store_server *s, conn *c) {
    size_t budget = READ_BUDGET;
    while (budget > 0) {
        if (c->parked) return parked_client_is_quiet(c);
        size_t due;
        unsigned char *target = read_target(s, c, &due);
        if (due > budget) due = budget;
        ssize_t n = recv(c->fd, target, due, MSG_DONTWAIT);
        if (n == 0) return false;
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno == EAGAIN || errno == EWOULDBLOCK;
        }
        c->got += (size_t)n;
        budget -= (size_t)n;
        if (!finish_parts(s, c)) return false;
    }
    return true;
}

/* ---- connections ----------------------------------------------------------------------------- */
static void free_conn(conn *c) {
    close(c->fd);
    free_chunks(c);
    store_blob_release(c->value);
    free(c);
}

static void add_conn(tl_store_server *s, int fd) {
    if (s->conn_count == s->conn_capacity) {
        size_t capacity = s->conn_capacity ? s->conn_capacity * 2 : 16;
        conn **conns = realloc(s->conns, capacity * sizeof *conns);
        if (!conns) {
            close(fd);
            return;
        }
        s->conns = conns;
        s->conn_capacity = capacity;
    }
    conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return;
    }
    c->fd = fd;
    s->conns[s->conn_count++] = c;
}

static void accept_clients(tl_store_server *s) {
    for (;;) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                s->accept_pause_ms = ACCEPT_PAUSE_MS;
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        add_conn(s, fd);
    }
}

static void remove_dead_conns(tl_store_server *s) {
    size_t kept = 0;
    for (size_t i = 0; i < s->conn_count; i++) {
        if (s->conns[i]->dead)
            free_conn(s->conns[i]);
        else
            s->conns[kept++] = s->conns[i];
    }
    s->conn_count = kept;
}

/* Fills s->fds: the wake pipe, the listener, then every connection. False when out of memory. */
static bool build_pollfds(tl_store_server *s) {
    size_t needed = s->conn_count + 2;
    if (needed > s->fds_capacity) {
        size_t capacity = needed * 2;
        struct pollfd *fds = realloc(s->fds, capacity * sizeof *fds);
        if (!fds) return false;
        s->fds = fds;
        s->fds_capacity = capacity;
    }
    s->fds[0] = (struct pollfd){.fd = s->wake_read, .events = POLLIN};
    s->fds[1] = (struct pollfd){.fd = s->accept_pause_ms ? -1 : s->listen_fd, .events = POLLIN};
    for (size_t i = 0; i < s->conn_count; i++) {
        conn *c = s->conns[i];
        s->fds[i + 2] = (struct pollfd){.fd = c->fd, .events = POLLIN};
        if (c->out_first) s->fds[i + 2].events |= POLLOUT;
    }
    return true;
}

static void serve_conn(tl_store_server *s, conn *c, short revents) {
    if (revents & POLLOUT && !flush_replies(c)) c->dead = true;
    if (!c->dead && revents & (POLLIN | POLLHUP | POLLERR) && !read_requests(s, c)) c->dead = true;
    if (!c->dead && c->out_first && !flush_replies(c)) c->dead = true;
}

static void *serve(void *arg) {
    tl_store_server *s = arg;
    for (;;) {
        if (!build_pollfds(s)) {
            poll(NULL, 0, ACCEPT_PAUSE_MS); /* out of memory: wait, then try again */
            continue;
        }
        size_t count = s->conn_count;
        int timeout = s->accept_pause_ms ? s->accept_pause_ms : -1;
        s->accept_pause_ms = 0;
        int ready = poll(s->fds, count + 2, timeout);
        if (ready < 0) continue; /* EINTR (or ENOMEM): poll again */
        if (s->fds[0].revents) break;
        if (s->fds[1].revents & POLLIN) accept_clients(s);
        for (size_t i = 0; i < count; i++)
            if (s->fds[i + 2].revents && !s->conns[i]->dead)
                serve_conn(s, s->conns[i], s->fds[i + 2].revents);
        remove_dead_conns(s);
    }
    for (size_t i = 0; i < s->conn_count; i++) free_conn(s->conns[i]);
    s->conn_count = 0;
    return NULL;
}

/* ---- start and stop -------------------------------------------------------------------------- */
static int listen_on(const struct addrinfo *ai) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) return -1;
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
        bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0)
        return fd;
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
}

static tl_status open_listener(const char *host, int port, int *fd_out) {
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *list = NULL;
    int rc = getaddrinfo(host, service, &hints, &list);
    if (rc != 0)
        return tl_error(TL_ERR_RUNTIME, "store: listen on %s:%d failed: cannot resolve '%s': %s",
                        host, port, host, gai_strerror(rc));
    int fd = -1, err = 0;
    for (const struct addrinfo *ai = list; ai && fd < 0; ai = ai->ai_next) {
        fd = listen_on(ai);
        if (fd < 0) err = errno;
    }
    freeaddrinfo(list);
    if (fd < 0)
        return tl_error(TL_ERR_RUNTIME, "store: listen on %s:%d failed: %s", host, port,
                        strerror(err));
    *fd_out = fd;
    return TL_OK;
}

static int bound_port(int fd) {
    struct sockaddr_storage addr;
    socklen_t len = sizeof addr;
    if (getsockname(fd, (struct sockaddr *)&addr, &len) != 0) return -1;
    if (addr.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&addr)->sin_port);
    if (addr.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&addr)->sin6_port);
    return -1;
}

/* Starts the serving thread with every signal blocked (signals belong to the host's threads). */
static int start_thread(tl_store_server *s) {
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    int rc = pthread_create(&s->thread, NULL, serve, s);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    return rc;
}

static void close_server_fds(tl_store_server *s) {
    if (s->listen_fd >= 0) close(s->listen_fd);
    if (s->wake_read >= 0) close(s->wake_read);
    if (s->wake_write >= 0) close(s->wake_write);
}

tl_status tl_store_server_start(const char *host, int port, tl_store_server **out, int *port_out) {
    if (!out) return tl_error(TL_ERR_ARGUMENT, "store: server start: out is NULL");
    if (!host || !*host)
        return tl_error(TL_ERR_ARGUMENT,
                        "store: server start: host is %s (expected an address "
                        "such as \"0.0.0.0\" or \"127.0.0.1\")",
                        host ? "empty" : "NULL");
    if (port < 0 || port > 65535)
        return tl_error(TL_ERR_ARGUMENT,
                        "store: server start: port %d is out of range (expected "
                        "0 to 65535, 0 for a free port)",
                        port);
    tl_store_server *s = calloc(1, sizeof *s);
    if (!s) return tl_error(TL_ERR_MEMORY, "store: server start: out of memory");
    s->listen_fd = s->wake_read = s->wake_write = -1;
    tl_status status = open_listener(host, port, &s->listen_fd);
    int wake[2];
    if (status == TL_OK && pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0)
        status = tl_error(TL_ERR_RUNTIME, "store: server start: pipe failed: %s", strerror(errno));
    else if (status == TL_OK)
        s->wake_read = wake[0], s->wake_write = wake[1];
    int rc = status == TL_OK ? start_thread(s) : 0;
    if (rc != 0)
        status = tl_error(TL_ERR_RUNTIME, "store: server start: cannot start its thread: %s",
                          strerror(rc));
    if (status != TL_OK) {
        close_server_fds(s);
        free(s);
        return status;
    }
    if (port_out) *port_out = bound_port(s->listen_fd);
    *out = s;
    return TL_OK;
}

void tl_store_server_stop(tl_store_server *server) {
    if (!server) return;
    while (write(server->wake_write, "x", 1) < 0 && errno == EINTR) {
    }
    pthread_join(server->thread, NULL);
    close_server_fds(server);
    store_map_clear(&server->map);
    free(server->conns);
    free(server->fds);
    free(server);
}
