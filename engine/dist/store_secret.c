/* The store's secret: a new one from getrandom(2), and the checks of one a caller gives. */
#define _GNU_SOURCE /* explicit_bzero */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>

#include "tlua/distributed.h"
#include "tlua/error.h"

#include "store_parse.h"

enum { RANDOM_BYTES = (TL_STORE_SECRET_SIZE - 1) / 2 };

tl_status tl_store_make_secret(char out[TL_STORE_SECRET_SIZE]) {
    if (!out) return tl_error(TL_ERR_ARGUMENT, "store: make_secret: out is NULL");
    unsigned char bytes[RANDOM_BYTES];
    size_t got = 0;
    while (got < sizeof bytes) {
        ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0)
            return tl_error(TL_ERR_RUNTIME, "store: make_secret: getrandom failed: %s",
                            strerror(errno));
        got += (size_t)n;
    }
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof bytes; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * sizeof bytes] = '\0';
    explicit_bzero(bytes, sizeof bytes);
    return TL_OK;
}

tl_status store_check_secret(const char *where, const char *secret) {
    if (!secret)
        return tl_error(TL_ERR_ARGUMENT,
                        "store: %s: secret is NULL (expected the job's secret, %d to %d bytes: "
                        "the launcher's TLUA_STORE_SECRET)",
                        where, TL_STORE_MIN_SECRET, TL_STORE_MAX_SECRET);
    size_t len = strlen(secret);
    if (len < TL_STORE_MIN_SECRET || len > TL_STORE_MAX_SECRET)
        return tl_error(TL_ERR_ARGUMENT,
                        "store: %s: the secret has %zu bytes, expected %d to %d (a secret "
                        "shorter than %d bytes is too easy to guess)",
                        where, len, TL_STORE_MIN_SECRET, TL_STORE_MAX_SECRET, TL_STORE_MIN_SECRET);
    return TL_OK;
}
