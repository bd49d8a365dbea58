/* The store server's request parser: header checks, authentication first, parts of a request. */
#include "store_parse.h"

#include <string.h>

void store_parser_init(store_parser *p, const unsigned char *secret, size_t secret_len) {
    memset(p, 0, sizeof *p);
    p->secret = secret;
    p->secret_len = secret_len;
    p->phase = STORE_PHASE_HEADER;
}

bool store_secret_matches(const unsigned char *secret, size_t secret_len,
                          const unsigned char *proof, size_t proof_len) {
    /* every byte of the secret is looked at whatever proof holds: no early exit */
    volatile unsigned char diff = (unsigned char)(proof_len != secret_len);
    for (size_t i = 0; i < secret_len; i++) {
        unsigned char theirs = i < proof_len ? proof[i] : (unsigned char)~secret[i];
        diff |= (unsigned char)(secret[i] ^ theirs);
    }
    return diff == 0;
}

/* Checks and decodes the header in p->head; false when it is malformed or not allowed now. */
static bool accept_header(store_parser *p) {
    const unsigned char *h = p->head;
    if (memcmp(h, STORE_MAGIC, 4) != 0 || h[5] != 0) return false;
    p->op = h[4];
    p->key_len = (size_t)h[6] << 8 | h[7];
    p->value_len = store_get_u64(h + 8);
    if (p->key_len > TL_STORE_MAX_KEY) return false;
    if (!p->authenticated) /* the first request proves the secret, and nothing else may come */
        return p->op == STORE_AUTH && p->key_len == 0 && p->value_len >= 1 &&
               p->value_len <= TL_STORE_MAX_SECRET;
    switch (p->op) {
    case STORE_SET:
        return p->value_len <= STORE_MAX_VALUE;
    case STORE_ADD:
        return p->value_len == 8;
    case STORE_GET:
    case STORE_CHECK:
    case STORE_DELETE:
        return p->value_len == 0;
    default: /* a second AUTH included */
        return false;
    }
}

static size_t part_size(const store_parser *p) {
    switch (p->phase) {
    case STORE_PHASE_HEADER:
        return STORE_HEADER_SIZE;
    case STORE_PHASE_KEY:
        return p->key_len;
    default:
        return (size_t)p->value_len;
    }
}

unsigned char *store_parser_target(store_parser *p, size_t *due) {
    *due = part_size(p) - p->got;
    switch (p->phase) {
    case STORE_PHASE_HEADER:
        return p->head + p->got;
    case STORE_PHASE_KEY:
        return (unsigned char *)p->key + p->got;
    default:
        return p->op == STORE_AUTH ? p->proof + p->got : NULL;
    }
}

static store_step fail(store_parser *p, store_step step) {
    p->broken = true;
    return step;
}

store_step store_parser_advance(store_parser *p, size_t n) {
    if (p->broken || n > part_size(p) - p->got) return fail(p, STORE_STEP_MALFORMED);
    p->got += n;
    while (p->got == part_size(p)) {
        p->got = 0;
        switch (p->phase) {
        case STORE_PHASE_HEADER:
            if (!accept_header(p)) return fail(p, STORE_STEP_MALFORMED);
            p->phase = STORE_PHASE_KEY;
            break;
        case STORE_PHASE_KEY:
            p->phase = STORE_PHASE_VALUE;
            if (p->op == STORE_SET || p->op == STORE_ADD) return STORE_STEP_VALUE;
            if (p->op != STORE_AUTH) { /* GET, CHECK, DELETE: no value */
                p->phase = STORE_PHASE_HEADER;
                return STORE_STEP_COMMAND;
            }
            break;
        default:
            p->phase = STORE_PHASE_HEADER;
            if (p->op != STORE_AUTH) return STORE_STEP_COMMAND;
            p->authenticated =
                store_secret_matches(p->secret, p->secret_len, p->proof, (size_t)p->value_len);
            memset(p->proof, 0, sizeof p->proof);
            return p->authenticated ? STORE_STEP_AUTHENTICATED : fail(p, STORE_STEP_REFUSED);
        }
    }
    return STORE_STEP_MORE;
}
