/* The store server's request parser: a pure state machine over a connection's bytes (private). */
#ifndef TLUA_DIST_STORE_PARSE_H
#define TLUA_DIST_STORE_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tlua/distributed.h"

#include "store_wire.h"

/* What a connection sends is a stream of requests (store_wire.h); the parser says where its next
   bytes go, and what they made once they are in. It neither reads sockets nor allocates: the
   server feeds it what recv gave, the fuzz harness (fuzz/native/fuzz_store.c) any bytes.
   A connection must prove the store's secret first: its first request is AUTH (key_len 0, the
   secret as value). Any other request before it is malformed (refused at its header, before a
   byte of its key or value is read), as is a second AUTH. */
typedef enum store_phase { STORE_PHASE_HEADER, STORE_PHASE_KEY, STORE_PHASE_VALUE } store_phase;

typedef enum store_step {
    STORE_STEP_MORE,          /* the current part is not whole yet: read more */
    STORE_STEP_VALUE,         /* a command's header and key are in: its value (value_len bytes,
                                 maybe 0) comes next, into a place the caller gives it */
    STORE_STEP_COMMAND,       /* a whole command (op, key, value) of an authenticated client */
    STORE_STEP_AUTHENTICATED, /* the secret was proven: answer ok */
    STORE_STEP_REFUSED,       /* a wrong secret: answer an error, then close */
    STORE_STEP_MALFORMED,     /* anything else that breaks the protocol: close at once */
} store_step;

typedef struct store_parser {
    const unsigned char *secret; /* borrowed: the store's */
    size_t secret_len;
    bool authenticated;
    bool broken; /* after REFUSED or MALFORMED: every later step is MALFORMED */
    store_phase phase;
    size_t got; /* bytes of the current part received */
    unsigned char head[STORE_HEADER_SIZE];
    int op;
    size_t key_len;
    uint64_t value_len;
    char key[TL_STORE_MAX_KEY];
    unsigned char proof[TL_STORE_MAX_SECRET]; /* an AUTH's value */
} store_parser;

/* A parser for a new connection to a store whose secret is secret (secret_len bytes, 1 to
   TL_STORE_MAX_SECRET; kept by reference). */
void store_parser_init(store_parser *p, const unsigned char *secret, size_t secret_len);
/* Where the next bytes go, *due of them (the rest of the current part; 0 only for an empty
   value). NULL for a command's value: the caller keeps it (p->got bytes of p->value_len in). */
unsigned char *store_parser_target(store_parser *p, size_t *due);
/* Notes that n more bytes (at most *due) were put at the target, and moves past every part that
   is whole, up to the first step that is not MORE. Call it with n = 0 when *due is 0. */
store_step store_parser_advance(store_parser *p, size_t n);
/* Whether proof (proof_len bytes) is the secret (secret_len bytes, at least 1), in a time that
   depends on secret_len only. */
bool store_secret_matches(const unsigned char *secret, size_t secret_len,
                          const unsigned char *proof, size_t proof_len);

/* A secret a caller gives (to start a server, or to connect): TL_OK when it has
   TL_STORE_MIN_SECRET to TL_STORE_MAX_SECRET bytes, else an error naming where ("server start",
   "connect"). In store_secret.c. */
tl_status store_check_secret(const char *where, const char *secret);

#endif
