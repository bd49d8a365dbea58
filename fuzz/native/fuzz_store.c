/* libFuzzer harness: any bytes as what a client sends the store's server, fed to the server's own
   request parser (engine/dist/store_parse.c) in pieces whose sizes the first byte picks. Each step
   must agree with an independent reading of the bytes: a header is refused exactly when the
   protocol refuses it (a command before AUTH, a second AUTH, bad lengths or magic), a command is
   never accepted before the secret was proven, the secret is taken exactly when it is the
   store's, a parsed request's key and lengths lie within the bytes sent and the protocol's bounds,
   and a refused connection stays refused. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/store_parse.h"

#define SECRET "fuzz-store-secret-0123456789" /* the seed corpus (fuzz/corpus/store) proves it */

__attribute__((noreturn)) static void broken(const char *what) {
    fprintf(stderr, "fuzz_store: invariant broken: %s\n", what);
    abort();
}

static uint64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

/* The protocol's rule for a header (store_wire.h), written apart from the parser's. */
static bool header_allowed(const uint8_t *h, bool authenticated) {
    if (h[0] != 'T' || h[1] != 'L' || h[2] != 'S' || h[3] != '1' || h[5] != 0) return false;
    unsigned key_len = (unsigned)h[6] << 8 | h[7];
    uint64_t value_len = be64(h + 8);
    if (key_len > TL_STORE_MAX_KEY) return false;
    int op = h[4];
    if (!authenticated)
        return op == STORE_AUTH && key_len == 0 && value_len >= 1 &&
               value_len <= TL_STORE_MAX_SECRET;
    if (op == STORE_SET) return value_len <= ((uint64_t)1 << 40);
    if (op == STORE_ADD) return value_len == 8;
    return (op == STORE_GET || op == STORE_CHECK || op == STORE_DELETE) && value_len == 0;
}

/* The size of the next piece: the whole part (seed 0) or 1 to seed bytes, pseudo-random. */
static size_t piece(uint32_t *state, unsigned seed, size_t due) {
    if (seed == 0) return due;
    *state = *state * 1103515245u + 12345u;
    size_t n = 1 + (*state >> 16) % seed;
    return n < due ? n : due;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    unsigned seed = data[0];
    uint32_t state = seed;
    const uint8_t *bytes = data + 1;
    size_t n_bytes = size - 1, pos = 0, start = 0; /* start: where the current request began */
    store_parser p;
    store_parser_init(&p, (const unsigned char *)SECRET, strlen(SECRET));
    bool authenticated = false, header_checked = false;
    for (;;) {
        size_t due;
        unsigned char *target = store_parser_target(&p, &due);
        if (target && (target < (unsigned char *)&p || target + due > (unsigned char *)(&p + 1)))
            broken("the parser's target lies outside the parser");
        size_t n = due == 0 ? 0 : piece(&state, seed, due < n_bytes - pos ? due : n_bytes - pos);
        if (due > 0 && n == 0) break;               /* the input is used up: the connection waits */
        if (target) memcpy(target, bytes + pos, n); /* a command's value is the caller's */
        pos += n;
        store_step step = store_parser_advance(&p, n);
        size_t in_request = pos - start;
        if (step == STORE_STEP_MALFORMED) {
            if (in_request != STORE_HEADER_SIZE || header_checked)
                broken("a request was refused elsewhere than at its header");
            if (header_allowed(bytes + start, authenticated))
                broken("a header the protocol allows was refused");
            break;
        }
        if (in_request >= STORE_HEADER_SIZE && !header_checked) {
            if (!header_allowed(bytes + start, authenticated))
                broken("a header the protocol refuses was taken");
            header_checked = true;
        }
        if (step == STORE_STEP_MORE) continue;
        if (p.op == STORE_AUTH && authenticated) broken("a second AUTH went through");
        if (p.key_len > TL_STORE_MAX_KEY) broken("a key longer than TL_STORE_MAX_KEY");
        if (STORE_HEADER_SIZE + p.key_len > in_request)
            broken("the key reaches beyond the bytes sent");
        if (memcmp(p.key, bytes + start + STORE_HEADER_SIZE, p.key_len) != 0)
            broken("the key differs from the bytes sent");
        if (step == STORE_STEP_VALUE) {
            if (!authenticated || (p.op != STORE_SET && p.op != STORE_ADD))
                broken("a value was asked for outside an authenticated SET or ADD");
            continue;
        }
        if ((uint64_t)in_request != STORE_HEADER_SIZE + p.key_len + p.value_len)
            broken("a whole request's size differs from its header's lengths");
        if (step == STORE_STEP_COMMAND) {
            if (!authenticated || !p.authenticated) broken("a command before AUTH was accepted");
            if (p.op < STORE_SET || p.op > STORE_DELETE) broken("an unknown op was accepted");
        } else {
            if (authenticated || p.op != STORE_AUTH || p.key_len != 0)
                broken("an authentication step outside a first AUTH");
            const uint8_t *proof = bytes + start + STORE_HEADER_SIZE;
            bool same = p.value_len == strlen(SECRET) && memcmp(proof, SECRET, strlen(SECRET)) == 0;
            if ((step == STORE_STEP_AUTHENTICATED) != same)
                broken(same ? "the right secret was refused" : "a wrong secret was taken");
            if (step == STORE_STEP_REFUSED) break;
            authenticated = true;
        }
        start = pos;
        header_checked = false;
    }
    if (pos > n_bytes) broken("the parser consumed more bytes than were sent");
    /* a refused or malformed connection is never served again; one that is waiting still is */
    size_t due;
    store_parser_target(&p, &due);
    store_step after = store_parser_advance(&p, due + 1);
    if (after != STORE_STEP_MALFORMED) broken("more bytes than were due were taken");
    if (store_parser_advance(&p, 0) != STORE_STEP_MALFORMED)
        broken("a broken connection's parser went on");
    return 0;
}
