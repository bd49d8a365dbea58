/* The store server's connections: a client's request, its queued replies (private to dist). */
#ifndef TLUA_DIST_STORE_CONN_H
#define TLUA_DIST_STORE_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tlua/distributed.h"

#include "store_map.h"
#include "store_parse.h"
#include "store_wire.h"

enum { STORE_SCRATCH_SIZE = 64 << 10 };

typedef struct store_out_chunk store_out_chunk;

/* A client connection and the request it is sending. */
typedef struct store_conn {
    int fd;
    bool dead;           /* closed at the end of this round */
    bool parked;         /* its GET waits for key */
    bool closing;        /* refused: reads nothing more, closes once its replies are sent */
    store_parser parser; /* the request (parser.op, parser.key ...) and whether it authenticated */
    store_blob *value;   /* the value being received (SET, ADD); NULL when it is discarded */
    store_out_chunk *out_first, *out_last;
} store_conn;

/* What the connections share: the secret, the map, and each other (a SET answers the GETs
   parked on other connections). */
typedef struct store_state {
    unsigned char secret[TL_STORE_MAX_SECRET];
    size_t secret_len;
    store_map map;
    store_conn **conns;
    size_t conn_count, conn_capacity;
    unsigned char scratch[STORE_SCRATCH_SIZE]; /* where a discarded value's bytes go */
} store_state;

/* Reads what c's client sent (a bounded amount, so that every client gets its turn) and runs its
   complete requests, queueing their replies; false when the connection must close. */
bool store_conn_read(store_state *state, store_conn *c);
/* Sends what the socket takes now of c's replies; false when the connection broke. */
bool store_conn_flush(store_conn *c);
/* Closes c's socket and frees it with its queued replies. */
void store_conn_free(store_conn *c);

#endif
