/* The store server's requests: a connection's parser, its queued replies, and the operations. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "store_conn.h"

enum {
    READ_BUDGET = 8 << 20, /* bytes read from one client before the others get their turn */
    INLINE_PAYLOAD = 8,    /* replies of ADD and CHECK travel inside their chunk */
    MAX_INT64_DIGITS = 20, /* "-9223372036854775808" */
};

/* One reply waiting to be sent: its header (and a small payload) inline, a large one shared. */
struct store_out_chunk {
    store_out_chunk *next;
    unsigned char inline_bytes[STORE_HEADER_SIZE + INLINE_PAYLOAD];
    size_t inline_len;
    store_blob *body; /* NULL when the payload is inline or empty */
    size_t sent;      /* bytes sent so far, inline bytes first */
};

/* ---- replies --------------------------------------------------------------------------------- */
static void free_chunks(store_conn *c) {
    while (c->out_first) {
        store_out_chunk *o = c->out_first;
        c->out_first = o->next;
        store_blob_release(o->body);
        free(o);
    }
    c->out_last = NULL;
}

/* Queues a reply with an inline payload (len <= INLINE_PAYLOAD) and/or a shared body (whose
   reference it takes). False when out of memory (the body is released). */
static bool queue_reply(store_conn *c, int status, const void *payload, size_t len,
                        store_blob *body) {
    store_out_chunk *o = malloc(sizeof *o);
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

static bool reply_ok(store_conn *c, const void *payload, size_t len) {
    return queue_reply(c, STORE_REPLY_OK, payload, len, NULL);
}

/* An error reply: "store: <op> '<key>': <what>". */
static bool reply_error(store_conn *c, const char *what) {
    char text[TL_STORE_MAX_KEY + 256];
    int n = snprintf(text, sizeof text, "store: %s '%.*s': %s", store_op_name(c->op),
                     (int)c->key_len, c->key, what);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof text ? (size_t)n : sizeof text - 1;
    store_blob *blob = store_blob_new(len);
    if (!blob) return false;
    memcpy(blob->bytes, text, len);
    return queue_reply(c, STORE_REPLY_ERROR, NULL, 0, blob);
}

bool store_conn_flush(store_conn *c) {
    while (c->out_first) {
        store_out_chunk *o = c->out_first;
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
static void wake_waiters(store_state *s, const store_conn *c, store_blob *value) {
    for (size_t i = 0; i < s->conn_count; i++) {
        store_conn *w = s->conns[i];
        if (w->dead || !w->parked || w->key_len != c->key_len ||
            memcmp(w->key, c->key, c->key_len) != 0)
            continue;
        w->parked = false;
        if (!queue_reply(w, STORE_REPLY_OK, NULL, 0, store_blob_retain(value))) w->dead = true;
    }
}

/* Puts value (the caller's reference) under c's key and answers the GETs waiting for it. */
static bool put_value(store_state *s, store_conn *c, store_blob *value) {
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

static bool execute_add(store_state *s, store_conn *c, const store_blob *delta_bytes) {
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
static bool execute(store_state *s, store_conn *c) {
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
static bool accept_header(store_conn *c) {
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

static size_t part_size(const store_conn *c) {
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
static bool finish_parts(store_state *s, store_conn *c) {
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
static unsigned char *read_target(store_state *s, store_conn *c, size_t *due) {
    *due = part_size(c) - c->got;
    if (c->phase == READ_HEADER) return c->head + c->got;
    if (c->phase == READ_KEY) return (unsigned char *)c->key + c->got;
    if (c->value) return c->value->bytes + c->got;
    if (*due > STORE_SCRATCH_SIZE) *due = STORE_SCRATCH_SIZE;
    return s->scratch;
}

/* A parked client may only close: anything it sends before its reply breaks the protocol. */
static bool parked_client_is_quiet(store_conn *c) {
    unsigned char byte;
    ssize_t n = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

bool store_conn_read(store_state *s, store_conn *c) {
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

void store_conn_free(store_conn *c) {
    close(c->fd);
    free_chunks(c);
    store_blob_release(c->value);
    free(c);
}
