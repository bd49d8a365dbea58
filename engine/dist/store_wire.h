/* The store's wire protocol (private to engine/dist): request and reply headers, big-endian. */
#ifndef TLUA_DIST_STORE_WIRE_H
#define TLUA_DIST_STORE_WIRE_H

#include <stdint.h>
#include <string.h>

/* A request is a 16-byte header, then key_len bytes of key, then value_len bytes of value:
     bytes 0-3   magic "TLS1"
     byte  4     op (store_op)
     byte  5     0
     bytes 6-7   key_len (at most TL_STORE_MAX_KEY)
     bytes 8-15  value_len (SET: the value's size; ADD: 8, the delta; AUTH: the secret's size, 1
                 to TL_STORE_MAX_SECRET; other ops: 0)
   A reply is a 16-byte header, then payload_len bytes of payload:
     byte  0     status (0: ok, 1: error, the payload is the message)
     bytes 1-7   0
     bytes 8-15  payload_len
   A connection's first request is AUTH, with the store's secret as value (no key): the server
   answers ok, or an error and closes when the secret is wrong. The server closes, unanswered, a
   connection whose first request is anything else, or that sends AUTH twice (store_parse.h).
   This authenticates; nothing is encrypted (anyone who sees the traffic sees the secret).
   Payloads: AUTH, SET and DELETE none; GET the value (sent once the key exists); ADD the new
   value as 8 bytes; CHECK one byte, 1 when the key exists. ADD stores its result as decimal text
   (a GET of an added key reads e.g. "42") and reads an existing value the same way. A client
   sends its next request only after the whole reply to the previous one: a connection that sends
   while its GET waits, or sends anything malformed, is closed. */
#define STORE_MAGIC       "TLS1"
#define STORE_HEADER_SIZE 16
#define STORE_MAX_VALUE   ((uint64_t)1 << 40) /* 1 TiB: larger lengths are malformed */

typedef enum store_op {
    STORE_SET = 1,
    STORE_GET = 2,
    STORE_ADD = 3,
    STORE_CHECK = 4,
    STORE_DELETE = 5,
    STORE_AUTH = 6,
} store_op;

enum { STORE_REPLY_OK = 0, STORE_REPLY_ERROR = 1 };

static inline void store_put_u64(unsigned char *p, uint64_t v) {
    for (int i = 7; i >= 0; i--, v >>= 8) p[i] = (unsigned char)(v & 0xff);
}

static inline uint64_t store_get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

static inline void store_encode_request(unsigned char *h, store_op op, size_t key_len,
                                        uint64_t value_len) {
    memcpy(h, STORE_MAGIC, 4);
    h[4] = (unsigned char)op;
    h[5] = 0;
    h[6] = (unsigned char)(key_len >> 8);
    h[7] = (unsigned char)(key_len & 0xff);
    store_put_u64(h + 8, value_len);
}

static inline void store_encode_reply(unsigned char *h, int status, uint64_t payload_len) {
    memset(h, 0, 8);
    h[0] = (unsigned char)status;
    store_put_u64(h + 8, payload_len);
}

static inline const char *store_op_name(int op) {
    switch (op) {
    case STORE_SET:
        return "set";
    case STORE_GET:
        return "get";
    case STORE_ADD:
        return "add";
    case STORE_CHECK:
        return "check";
    case STORE_DELETE:
        return "delete";
    case STORE_AUTH:
        return "auth";
    default:
        return "unknown op";
    }
}

#endif
