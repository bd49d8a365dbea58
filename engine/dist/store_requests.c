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

/* An error reply whose payload is text (len bytes). */
static bool reply_error_text(store_conn *c, const char *text, size_t len) {
    store_blob *blob = store_blob_new(len);
    if (!blob) return false;
    memcpy(blob->bytes, text, len);
    return queue_reply(c, STORE_REPLY_ERROR, NULL, 0, blob);
}

/* An error reply: "store: <op> '<key>': <what>". */
static bool reply_error(store_conn *c, const char *what) {
    const store_parser *p = &c->parser;
    char text[TL_STORE_MAX_KEY + 256];
    int n = snprintf(text, sizeof text, "store: %s '%.*s': %s", store_op_name(p->op),
                     (int)p->key_len, p->key, what);
    size_t len = n < 0 ? 0 : (size_t)n;
    return reply_error_text(c, text, len < sizeof text ? len : sizeof text - 1);
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
        if (w->dead || !w->parked || w->parser.key_len != c->parser.key_len ||
            memcmp(w->parser.key, c->parser.key, c->parser.key_len) != 0)
            continue;
        w->parked = false;
        if (!queue_reply(w, STORE_REPLY_OK, NULL, 0, store_blob_retain(value))) w->dead = true;
    }
}

/* Puts value (the caller's reference) under c's key and answers the GETs waiting for it. */
static bool put_value(store_state *s, store_conn *c, store_blob *value) {
    if (!store_map_put(&s->map, c->parser.key, c->parser.key_len, value)) {
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
    store_blob *current = store_map_find(&s->map, c->parser.key, c->parser.key_len);
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
    const store_parser *p = &c->parser;
    store_blob *value = c->value;
    c->value = NULL;
    if ((p->op == STORE_SET || p->op == STORE_ADD) && !value) {
        char what[96];
        snprintf(what, sizeof what, "the server cannot allocate %" PRIu64 " bytes", p->value_len);
        return reply_error(c, what);
    }
    switch (p->op) {
    case STORE_SET:
        if (!put_value(s, c, value)) return reply_error(c, "the server is out of memory");
        return reply_ok(c, NULL, 0);
    case STORE_ADD: {
        bool ok = execute_add(s, c, value);
        store_blob_release(value);
        return ok;
    }
    case STORE_GET: {
        store_blob *found = store_map_find(&s->map, c->parser.key, c->parser.key_len);
        if (!found) {
            c->parked = true;
            return true;
        }
        return queue_reply(c, STORE_REPLY_OK, NULL, 0, store_blob_retain(found));
    }
    case STORE_CHECK: {
        unsigned char exists = store_map_find(&s->map, c->parser.key, c->parser.key_len) != NULL;
        return reply_ok(c, &exists, 1);
    }
    default:
        store_map_remove(&s->map, c->parser.key, c->parser.key_len);
        return reply_ok(c, NULL, 0);
    }
}

/* Answers a client that proved a wrong secret, then closes it once the answer is sent. */
static bool refuse(store_conn *c) {
    static const char text[] = "store: the secret was refused (the store's clients must prove "
                               "the job's secret, TLUA_STORE_SECRET)";
    c->closing = true;
    return reply_error_text(c, text, sizeof text - 1);
}

/* Acts on what the parser made of the bytes so far; false when the connection must close. */
static bool take_step(store_state *s, store_conn *c, store_step step) {
    switch (step) {
    case STORE_STEP_MORE:
        return true;
    case STORE_STEP_VALUE: /* NULL when out of memory: the bytes are discarded, then refused */
        c->value = store_blob_new((size_t)c->parser.value_len);
        return true;
    case STORE_STEP_COMMAND:
        return execute(s, c);
    case STORE_STEP_AUTHENTICATED:
        return reply_ok(c, NULL, 0);
    case STORE_STEP_REFUSED:
        return refuse(c);
    default:
        return false;
    }
}

/* Where the next bytes of the request go, and how many are due there. */
static unsigned char *read_target(store_state *s, store_conn *c, size_t *due) {
    unsigned char *target = store_parser_target(&c->parser, due);
    if (target) return target;
    if (c->value) return c->value->bytes + c->parser.got;
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
    for (;;) {
        if (c->closing) return true;
        if (c->parked) return parked_client_is_quiet(c);
        size_t due;
        unsigned char *target = read_target(s, c, &due);
        ssize_t n = 0;
        if (due > 0) { /* 0: an empty value, complete without a byte */
            if (budget == 0) return true;
            n = recv(c->fd, target, due < budget ? due : budget, MSG_DONTWAIT);
            if (n == 0) return false;
            if (n < 0) {
                if (errno == EINTR) continue;
                return errno == EAGAIN || errno == EWOULDBLOCK;
            }
            budget -= (size_t)n;
        }
        if (!take_step(s, c, store_parser_advance(&c->parser, (size_t)n))) return false;
    }
}

void store_conn_free(store_conn *c) {
    close(c->fd);
    free_chunks(c);
    store_blob_release(c->value);
    free(c);
}
