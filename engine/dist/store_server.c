/* The store's server: a key -> bytes map served over TCP by one thread polling every client. */
#define _GNU_SOURCE /* accept4 and pipe2 with O_CLOEXEC: no descriptor leaks into a forked rank */
#include <errno.h>
#include <fcntl.h>
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
#include <unistd.h>

#include "tlua/distributed.h"
#include "tlua/error.h"

#include "store_conn.h"

enum { ACCEPT_PAUSE_MS = 100 }; /* out of descriptors: wait this long before accepting again */

struct tl_store_server {
    pthread_t thread;
    int listen_fd, wake_read, wake_write;
    struct pollfd *fds;
    size_t fds_capacity;
    int accept_pause_ms;
    store_state state;
};

/* ---- connections ----------------------------------------------------------------------------- */
static void add_conn(store_state *state, int fd) {
    if (state->conn_count == state->conn_capacity) {
        size_t capacity = state->conn_capacity ? state->conn_capacity * 2 : 16;
        store_conn **conns = realloc(state->conns, capacity * sizeof *conns);
        if (!conns) {
            close(fd);
            return;
        }
        state->conns = conns;
        state->conn_capacity = capacity;
    }
    store_conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return;
    }
    c->fd = fd;
    store_parser_init(&c->parser, state->secret, state->secret_len);
    state->conns[state->conn_count++] = c;
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
        add_conn(&s->state, fd);
    }
}

static void remove_dead_conns(store_state *state) {
    size_t kept = 0;
    for (size_t i = 0; i < state->conn_count; i++) {
        if (state->conns[i]->dead)
            store_conn_free(state->conns[i]);
        else
            state->conns[kept++] = state->conns[i];
    }
    state->conn_count = kept;
}

/* Fills s->fds: the wake pipe, the listener, then every connection. False when out of memory. */
static bool build_pollfds(tl_store_server *s) {
    const store_state *state = &s->state;
    size_t needed = state->conn_count + 2;
    if (needed > s->fds_capacity) {
        size_t capacity = needed * 2;
        struct pollfd *fds = realloc(s->fds, capacity * sizeof *fds);
        if (!fds) return false;
        s->fds = fds;
        s->fds_capacity = capacity;
    }
    s->fds[0] = (struct pollfd){.fd = s->wake_read, .events = POLLIN};
    s->fds[1] = (struct pollfd){.fd = s->accept_pause_ms ? -1 : s->listen_fd, .events = POLLIN};
    for (size_t i = 0; i < state->conn_count; i++) {
        const store_conn *c = state->conns[i];
        /* a refused client is not read from again: it waits for its answer to go */
        s->fds[i + 2] = (struct pollfd){.fd = c->fd, .events = c->closing ? 0 : POLLIN};
        if (c->out_first) s->fds[i + 2].events |= POLLOUT;
    }
    return true;
}

static void serve_conn(store_state *state, store_conn *c, short revents) {
    if (revents & POLLOUT && !store_conn_flush(c)) c->dead = true;
    if (!c->dead && revents & (POLLIN | POLLHUP | POLLERR) && !store_conn_read(state, c))
        c->dead = true;
    if (!c->dead && c->out_first && !store_conn_flush(c)) c->dead = true;
    if (c->closing && !c->out_first) c->dead = true;
}

static void *serve(void *arg) {
    tl_store_server *s = arg;
    store_state *state = &s->state;
    for (;;) {
        if (!build_pollfds(s)) {
            poll(NULL, 0, ACCEPT_PAUSE_MS); /* out of memory: wait, then try again */
            continue;
        }
        size_t count = state->conn_count;
        int timeout = s->accept_pause_ms ? s->accept_pause_ms : -1;
        s->accept_pause_ms = 0;
        int ready = poll(s->fds, count + 2, timeout);
        if (ready < 0) continue; /* EINTR (or ENOMEM): poll again */
        if (s->fds[0].revents) break;
        if (s->fds[1].revents & POLLIN) accept_clients(s);
        for (size_t i = 0; i < count; i++)
            if (s->fds[i + 2].revents && !state->conns[i]->dead)
                serve_conn(state, state->conns[i], s->fds[i + 2].revents);
        remove_dead_conns(state);
    }
    for (size_t i = 0; i < state->conn_count; i++) store_conn_free(state->conns[i]);
    state->conn_count = 0;
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

tl_status tl_store_server_start(const char *host, int port, const char *secret,
                                tl_store_server **out, int *port_out) {
    if (!out) return tl_error(TL_ERR_ARGUMENT, "store: server start: out is NULL");
    if (!host || !*host)
        return tl_error(TL_ERR_ARGUMENT,
                        "store: server start: host is %s (expected an address "
                        "such as \"127.0.0.1\" or \"10.0.0.5\")",
                        host ? "empty" : "NULL");
    TL_TRY(store_check_secret("server start", secret));
    if (port < 0 || port > 65535)
        return tl_error(TL_ERR_ARGUMENT,
                        "store: server start: port %d is out of range (expected "
                        "0 to 65535, 0 for a free port)",
                        port);
    tl_store_server *s = calloc(1, sizeof *s);
    if (!s) return tl_error(TL_ERR_MEMORY, "store: server start: out of memory");
    s->listen_fd = s->wake_read = s->wake_write = -1;
    s->state.secret_len = strlen(secret);
    memcpy(s->state.secret, secret, s->state.secret_len);
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
    store_map_clear(&server->state.map);
    free(server->state.conns);
    free(server->fds);
    explicit_bzero(server->state.secret, sizeof server->state.secret);
    free(server);
}
