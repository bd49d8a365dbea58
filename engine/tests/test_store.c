/* C unit test of the rendezvous store: set/get/add/check/delete from many clients (threads), a get
   parked until its key comes, large values, timeouts, a server stopped under a waiting client,
   connect retries and refusals, malformed input from raw sockets, commands before AUTH and wrong
   secrets refused, the listening address honoured, and argument errors. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "dist/store_wire.h"
#include "tlua/distributed.h"

#include "check.h"

enum { CLIENTS = 8, ADDS_PER_CLIENT = 200 };

static const char SECRET[] = "test-store-secret-0123456789";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static tl_store *connect_or_null(int port) {
    tl_store *store = NULL;
    OK(tl_store_connect("127.0.0.1", port, SECRET, 10, &store));
    if (store) OK(tl_store_set_timeout(store, 20)); /* a bug fails, never hangs */
    return store;
}

/* The call failed with status and a message holding every needle (NULL-terminated list). */
static void expect_error(int line, tl_status got, tl_status want, const char *const *needles) {
    checks++;
    bool ok = got == want;
    for (const char *const *n = needles; ok && *n; n++) ok = strstr(tl_last_error(), *n) != NULL;
    if (!ok) {
        failures++;
        printf("FAIL line %d: status %d (want %d), message '%s' lacks '%s'%s\n", line, got, want,
               tl_last_error(), needles[0], needles[1] ? " (or a later needle)" : "");
    }
}
#define EXPECT_ERROR(call, status, ...)                                                            \
    expect_error(__LINE__, (call), (status), (const char *const[]){__VA_ARGS__, NULL})

/* get key and compare it with the string want */
static void expect_value(int line, tl_store *store, const char *key, const char *want) {
    void *value = NULL;
    size_t size = 0;
    tl_status st = tl_store_get(store, key, &value, &size);
    checks++;
    if (st != TL_OK || size != strlen(want) || memcmp(value, want, size) != 0) {
        failures++;
        printf("FAIL line %d: get '%s' gave '%.*s' (status %d: %s), expected '%s'\n", line, key,
               st == TL_OK ? (int)size : 0, st == TL_OK ? (const char *)value : "", st,
               tl_last_error(), want);
    }
    free(value);
}
#define EXPECT_VALUE(store, key, want) expect_value(__LINE__, store, key, want)

/* ---- a client per thread ------------------------------------------------------------------- */
typedef struct worker {
    pthread_t thread;
    int port, index;
    const char *key;
    double timeout_s;
    tl_status status;
    char error[1024];
    void *value;
    size_t size;
    double seconds;
} worker;

static void keep_error(worker *w, tl_status status) {
    w->status = status;
    snprintf(w->error, sizeof w->error, "%s", tl_last_error());
}

/* adds 1 to "counter" ADDS_PER_CLIENT times, sets "rank/i", reads "rank/(i+1)" */
static void *add_and_exchange(void *arg) {
    worker *w = arg;
    tl_store *store = NULL;
    tl_status st = tl_store_connect("localhost", w->port, SECRET, 10, &store);
    if (st == TL_OK) st = tl_store_set_timeout(store, 20); /* a bug fails, never hangs */
    for (int k = 0; st == TL_OK && k < ADDS_PER_CLIENT; k++)
        st = tl_store_add(store, "counter", 1, NULL);
    char key[32], value[32];
    snprintf(key, sizeof key, "rank/%d", w->index);
    snprintf(value, sizeof value, "hello from %d", w->index);
    if (st == TL_OK) st = tl_store_set(store, key, value, strlen(value));
    snprintf(key, sizeof key, "rank/%d", (w->index + 1) % CLIENTS);
    if (st == TL_OK) st = tl_store_get(store, key, &w->value, &w->size);
    keep_error(w, st);
    tl_store_close(store);
    return NULL;
}

/* gets w->key with timeout w->timeout_s; keeps the value, the status and how long it took */
static void *get_one(void *arg) {
    worker *w = arg;
    tl_store *store = NULL;
    double start = now_s();
    tl_status st = tl_store_connect("127.0.0.1", w->port, SECRET, 10, &store);
    if (st == TL_OK) st = tl_store_set_timeout(store, w->timeout_s);
    if (st == TL_OK) st = tl_store_get(store, w->key, &w->value, &w->size);
    w->seconds = now_s() - start;
    keep_error(w, st);
    if (store && st != TL_OK) { /* a second call after a closed connection fails at once */
        bool exists;
        tl_status again = tl_store_check(store, "x", &exists);
        if (again == TL_OK || !strstr(tl_last_error(), "closed")) w->status = TL_ERR_INDEX;
    }
    tl_store_close(store);
    return NULL;
}

static void start_worker(worker *w, void *(*fn)(void *)) {
    CHECK(pthread_create(&w->thread, NULL, fn, w) == 0, "pthread_create");
}

/* ---- raw sockets: what a broken or hostile client sends ------------------------------------ */
/* A TCP connection to addr:port that has proven nothing, or -1 (errno set) when refused. */
static int raw_connect_to(const char *addr, int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, addr, &sa.sin_addr);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

/* Whether the server closed fd (recv sees the end) within 5 s. */
static bool closed_by_server(int fd) {
    char buf[64];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
    }
    return n == 0 || errno == ECONNRESET;
}

/* The bytes the server sent before closing fd (within 5 s); -1 when it did not close it. */
static long bytes_before_close(int fd) {
    char buf[256];
    long total = 0;
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0) total += n;
    return n == 0 || errno == ECONNRESET ? total : -1;
}

static void send_raw(int fd, const void *data, size_t size) {
    CHECK(send(fd, data, size, MSG_NOSIGNAL) == (ssize_t)size, "raw send");
}

/* Sends a request's header and key (and no value) in one piece. */
static void raw_request(int fd, store_op op, const char *key, uint64_t value_len) {
    unsigned char bytes[STORE_HEADER_SIZE + TL_STORE_MAX_KEY];
    store_encode_request(bytes, op, strlen(key), value_len);
    memcpy(bytes + STORE_HEADER_SIZE, key, strlen(key));
    send_raw(fd, bytes, STORE_HEADER_SIZE + strlen(key));
}

/* Sends AUTH with secret as its value. */
static void raw_auth(int fd, const char *secret) {
    raw_request(fd, STORE_AUTH, "", strlen(secret));
    send_raw(fd, secret, strlen(secret));
}

/* Reads one whole reply: its status (payload into text, NUL-terminated), or -1 when the
   connection closed or 5 s passed first. */
static int raw_reply(int fd, char *text, size_t size) {
    unsigned char head[STORE_HEADER_SIZE];
    if (recv(fd, head, sizeof head, MSG_WAITALL) != (ssize_t)sizeof head) return -1;
    uint64_t len = store_get_u64(head + 8);
    if (len >= size) return -1;
    if (len && recv(fd, text, (size_t)len, MSG_WAITALL) != (ssize_t)len) return -1;
    text[len] = '\0';
    return head[0];
}

/* A raw connection that has proven the secret. */
static int raw_connect(int port) {
    int fd = raw_connect_to("127.0.0.1", port);
    if (fd < 0) return -1;
    raw_auth(fd, SECRET);
    char text[256];
    int status = raw_reply(fd, text, sizeof text);
    CHECK(status == STORE_REPLY_OK, "the right secret is taken: status %d '%s'", status, text);
    return fd;
}

static void test_malformed_input(int port, tl_store *good) {
    int fd = raw_connect(port);
    send_raw(fd, "GARBAGE GARBAGE GARBAGE", 23);
    CHECK(closed_by_server(fd), "garbage: the server closes the connection");
    close(fd);

    fd = raw_connect(port); /* a key longer than TL_STORE_MAX_KEY */
    unsigned char head[STORE_HEADER_SIZE];
    store_encode_request(head, STORE_GET, TL_STORE_MAX_KEY + 1, 0);
    send_raw(fd, head, sizeof head);
    CHECK(closed_by_server(fd), "long key: the server closes the connection");
    close(fd);

    fd = raw_connect(port); /* an unknown op */
    store_encode_request(head, (store_op)77, 1, 0);
    send_raw(fd, head, sizeof head);
    CHECK(closed_by_server(fd), "unknown op: the server closes the connection");
    close(fd);

    fd = raw_connect(port); /* a GET with a value */
    raw_request(fd, STORE_GET, "k", 5);
    CHECK(closed_by_server(fd), "get with a value: the server closes the connection");
    close(fd);

    fd = raw_connect(port); /* gone in the middle of a set's value */
    raw_request(fd, STORE_SET, "half", 1 << 20);
    send_raw(fd, "only a little", 13);
    close(fd);

    fd = raw_connect(port); /* sends while its get waits */
    raw_request(fd, STORE_GET, "pipelined", 0);
    raw_request(fd, STORE_CHECK, "pipelined", 0);
    CHECK(closed_by_server(fd), "a request while a get waits: the server closes the connection");
    close(fd);

    fd = raw_connect(port); /* gone while its get waits: the set must not write to it */
    raw_request(fd, STORE_GET, "ghost", 0);
    sleep_ms(50);
    close(fd);
    sleep_ms(50);
    OK(tl_store_set(good, "ghost", "boo", 3));
    EXPECT_VALUE(good, "ghost", "boo");
    bool exists = true;
    OK(tl_store_check(good, "half", &exists));
    CHECK(!exists, "a set cut short stores nothing");
    OK(tl_store_set(good, "after garbage", "fine", 4));
    EXPECT_VALUE(good, "after garbage", "fine");
}

/* ---- authentication ------------------------------------------------------------------------ */
/* A connection that has not proven the secret sends op on key (with value); the server must close
   it without a byte of answer. */
static void expect_unanswered(int line, int port, store_op op, const char *key, const void *value,
                              size_t size) {
    int fd = raw_connect_to("127.0.0.1", port);
    raw_request(fd, op, key, size);
    if (size) send(fd, value, size, MSG_NOSIGNAL); /* the server may have closed already */
    long answered = bytes_before_close(fd);
    close(fd);
    checks++;
    if (answered != 0) {
        failures++;
        printf("FAIL line %d: %s '%s' before AUTH: %ld bytes came back (want 0, then closed)\n",
               line, store_op_name(op), key, answered);
    }
}
#define EXPECT_UNANSWERED(port, op, key, value, size)                                              \
    expect_unanswered(__LINE__, port, op, key, value, size)

/* AUTH with secret on a new connection: the status of the answer (-1: closed unanswered), and
   whether the server closed the connection after it. */
static int try_secret(int port, const char *secret, bool *closed, char *text, size_t size) {
    int fd = raw_connect_to("127.0.0.1", port);
    raw_auth(fd, secret);
    int status = raw_reply(fd, text, size);
    *closed = closed_by_server(fd);
    close(fd);
    return status;
}

static void test_unauthenticated_commands(int port, tl_store *good) {
    int64_t n = 0;
    OK(tl_store_set(good, "auth/value", "kept", 4));
    OK(tl_store_add(good, "auth/count", 5, &n));
    unsigned char delta[8];
    store_put_u64(delta, 399);
    EXPECT_UNANSWERED(port, STORE_SET, "auth/value", "stolen", 6);
    EXPECT_UNANSWERED(port, STORE_SET, "auth/new", "x", 1);
    EXPECT_UNANSWERED(port, STORE_ADD, "auth/count", delta, 8);
    EXPECT_UNANSWERED(port, STORE_GET, "auth/value", NULL, 0);
    EXPECT_UNANSWERED(port, STORE_CHECK, "auth/value", NULL, 0);
    EXPECT_UNANSWERED(port, STORE_DELETE, "auth/value", NULL, 0);
    EXPECT_UNANSWERED(port, STORE_SET, "tlua/launch/failed", "evil", 4);
    EXPECT_VALUE(good, "auth/value", "kept"); /* neither changed nor deleted */
    EXPECT_VALUE(good, "auth/count", "5");
    bool exists = true;
    OK(tl_store_check(good, "auth/new", &exists));
    CHECK(!exists, "a set before AUTH stores nothing");
    OK(tl_store_check(good, "tlua/launch/failed", &exists));
    CHECK(!exists, "a set of tlua/launch/failed before AUTH stores nothing");
}

static void test_secrets(int port, tl_store *good) {
    char text[256], longer[sizeof SECRET + 1], shorter[sizeof SECRET];
    snprintf(longer, sizeof longer, "%sx", SECRET);
    snprintf(shorter, sizeof shorter, "%.*s", (int)strlen(SECRET) - 1, SECRET);
    const char *wrong[] = {"wrong-secret-but-long-enough", longer, shorter, "T"};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        bool closed = false;
        int status = try_secret(port, wrong[i], &closed, text, sizeof text);
        CHECK(status == STORE_REPLY_ERROR && strstr(text, "secret was refused") && closed,
              "secret '%s' is refused, then the connection closed: status %d '%s' closed %d",
              wrong[i], status, status >= 0 ? text : "", closed);
    }

    int fd = raw_connect_to("127.0.0.1", port); /* a set sent right behind a wrong secret */
    raw_auth(fd, "wrong-secret-but-long-enough");
    raw_request(fd, STORE_SET, "auth/value", 6);
    send(fd, "stolen", 6, MSG_NOSIGNAL);
    CHECK(raw_reply(fd, text, sizeof text) == STORE_REPLY_ERROR, "the wrong secret is refused");
    CHECK(closed_by_server(fd), "and the set behind it is not run");
    close(fd);
    EXPECT_VALUE(good, "auth/value", "kept");

    fd = raw_connect(port); /* the right secret, then commands */
    raw_request(fd, STORE_SET, "auth/raw", 3);
    send_raw(fd, "yes", 3);
    CHECK(raw_reply(fd, text, sizeof text) == STORE_REPLY_OK, "a set after AUTH is answered");
    raw_auth(fd, SECRET); /* AUTH twice breaks the protocol */
    CHECK(closed_by_server(fd), "a second AUTH: the server closes the connection");
    close(fd);
    EXPECT_VALUE(good, "auth/raw", "yes");

    unsigned char head[STORE_HEADER_SIZE];
    fd = raw_connect_to("127.0.0.1", port); /* AUTH with a key */
    raw_request(fd, STORE_AUTH, "key", strlen(SECRET));
    CHECK(bytes_before_close(fd) == 0, "AUTH with a key: closed unanswered");
    close(fd);
    fd = raw_connect_to("127.0.0.1", port); /* AUTH without a secret */
    store_encode_request(head, STORE_AUTH, 0, 0);
    send_raw(fd, head, sizeof head);
    CHECK(bytes_before_close(fd) == 0, "AUTH of 0 bytes: closed unanswered");
    close(fd);
    fd = raw_connect_to("127.0.0.1", port); /* AUTH with a huge secret */
    store_encode_request(head, STORE_AUTH, 0, TL_STORE_MAX_SECRET + 1);
    send_raw(fd, head, sizeof head);
    CHECK(bytes_before_close(fd) == 0, "AUTH of %d bytes: closed unanswered",
          TL_STORE_MAX_SECRET + 1);
    close(fd);
}

static void test_client_secrets(int port) {
    tl_store *store = NULL;
    double start = now_s();
    char where[64];
    snprintf(where, sizeof where, "connect to 127.0.0.1:%d", port);
    EXPECT_ERROR(tl_store_connect("127.0.0.1", port, "wrong-secret-but-long-enough", 10, &store),
                 TL_ERR_RUNTIME, where, "refused the secret", "TLUA_STORE_SECRET");
    CHECK(now_s() - start < 3, "a refused secret fails at once, not after retries (%.3f s)",
          now_s() - start);
    CHECK(store == NULL, "a refused connect leaves *out alone");
    EXPECT_ERROR(tl_store_connect("127.0.0.1", port, NULL, 1, &store), TL_ERR_ARGUMENT,
                 "store: connect", "secret is NULL");
    EXPECT_ERROR(tl_store_connect("127.0.0.1", port, "abc", 1, &store), TL_ERR_ARGUMENT,
                 "the secret has 3 bytes, expected 16 to 256");
    tl_store_server *server = NULL;
    EXPECT_ERROR(tl_store_server_start("127.0.0.1", 0, NULL, &server, NULL), TL_ERR_ARGUMENT,
                 "server start", "secret is NULL");
    char huge[TL_STORE_MAX_SECRET + 2];
    memset(huge, 's', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    EXPECT_ERROR(tl_store_server_start("127.0.0.1", 0, huge, &server, NULL), TL_ERR_ARGUMENT,
                 "the secret has 257 bytes");
    CHECK(server == NULL, "a refused start leaves *out alone");

    char a[TL_STORE_SECRET_SIZE], b[TL_STORE_SECRET_SIZE];
    OK(tl_store_make_secret(a));
    OK(tl_store_make_secret(b));
    size_t hex = strspn(a, "0123456789abcdef");
    CHECK(strlen(a) == 64 && hex == 64, "a made secret is 64 hex digits: '%s'", a);
    CHECK(strcmp(a, b) != 0, "two made secrets differ");
    EXPECT_ERROR(tl_store_make_secret(NULL), TL_ERR_ARGUMENT, "make_secret", "NULL");
}

/* ---- the listening address ------------------------------------------------------------------ */
/* Whether a TCP connect to addr:port succeeds. */
static bool reachable(const char *addr, int port) {
    int fd = raw_connect_to(addr, port);
    if (fd >= 0) close(fd);
    return fd >= 0;
}

static void test_bind_address(void) {
    /* 127.0.0.2 is another address of this host (all of 127/8 is loopback on Linux) */
    tl_store_server *any = NULL, *one = NULL, *two = NULL;
    int any_port = 0, one_port = 0, two_port = 0;
    OK(tl_store_server_start("0.0.0.0", 0, SECRET, &any, &any_port));
    bool second_address = any && reachable("127.0.0.2", any_port);
    tl_store_server_stop(any);
    if (!second_address) {
        printf("note: 127.0.0.2 is not reachable here; bind address test skipped\n");
        return;
    }
    OK(tl_store_server_start("127.0.0.1", 0, SECRET, &one, &one_port));
    CHECK(reachable("127.0.0.1", one_port), "a server on 127.0.0.1 is reached there");
    CHECK(!reachable("127.0.0.2", one_port), "a server on 127.0.0.1 is not reached on 127.0.0.2");
    OK(tl_store_server_start("127.0.0.2", 0, SECRET, &two, &two_port));
    CHECK(!reachable("127.0.0.1", two_port), "a server on 127.0.0.2 is not reached on 127.0.0.1");
    tl_store *store = NULL;
    OK(tl_store_connect("127.0.0.2", two_port, SECRET, 5, &store));
    if (store) OK(tl_store_set(store, "here", "yes", 3));
    tl_store_close(store);
    tl_store_server_stop(one);
    tl_store_server_stop(two);
}

/* ---- the tests ------------------------------------------------------------------------------ */
static void test_argument_errors(int port, tl_store *store) {
    void *value;
    size_t size;
    bool exists;
    char long_key[TL_STORE_MAX_KEY + 2];
    memset(long_key, 'k', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    EXPECT_ERROR(tl_store_set(NULL, "k", "v", 1), TL_ERR_ARGUMENT, "store: set", "NULL");
    EXPECT_ERROR(tl_store_get(store, NULL, &value, &size), TL_ERR_ARGUMENT, "get", "key is NULL");
    EXPECT_ERROR(tl_store_get(store, "k", NULL, &size), TL_ERR_ARGUMENT, "value is NULL");
    EXPECT_ERROR(tl_store_add(store, long_key, 1, NULL), TL_ERR_ARGUMENT, "513 bytes",
                 "at most 512");
    EXPECT_ERROR(tl_store_check(store, "k", NULL), TL_ERR_ARGUMENT, "exists is NULL");
    EXPECT_ERROR(tl_store_delete(NULL, "k"), TL_ERR_ARGUMENT, "store: delete", "NULL");
    EXPECT_ERROR(tl_store_set(store, "k", NULL, 4), TL_ERR_ARGUMENT, "value is NULL but size is 4");
    EXPECT_ERROR(tl_store_set_timeout(store, 0), TL_ERR_ARGUMENT, "timeout 0 s is out of range");
    EXPECT_ERROR(tl_store_set_timeout(NULL, 1), TL_ERR_ARGUMENT, "NULL");
    tl_store *other = NULL;
    EXPECT_ERROR(tl_store_connect(NULL, port, SECRET, 1, &other), TL_ERR_ARGUMENT, "host is NULL");
    EXPECT_ERROR(tl_store_connect("127.0.0.1", 0, SECRET, 1, &other), TL_ERR_ARGUMENT, "port 0");
    EXPECT_ERROR(tl_store_connect("127.0.0.1", port, SECRET, -1, &other), TL_ERR_ARGUMENT,
                 "timeout -1");
    CHECK(other == NULL, "a refused connect leaves *out alone");
    tl_store_server *server = NULL;
    EXPECT_ERROR(tl_store_server_start("127.0.0.1", 70000, SECRET, &server, NULL), TL_ERR_ARGUMENT,
                 "port 70000 is out of range");
    EXPECT_ERROR(tl_store_server_start("127.0.0.1", port, SECRET, &server, NULL), TL_ERR_RUNTIME,
                 "listen on 127.0.0.1", "in use");
    CHECK(server == NULL, "a failed start leaves *out alone");
    OK(tl_store_check(store, "k", &exists)); /* the client still works */
    tl_store_close(NULL);
    tl_store_server_stop(NULL);
}

static void test_basic_operations(tl_store *store) {
    bool exists = true;
    OK(tl_store_check(store, "a", &exists));
    CHECK(!exists, "check of an absent key");
    OK(tl_store_set(store, "a", "first", 5));
    OK(tl_store_set(store, "a", "second", 6));
    EXPECT_VALUE(store, "a", "second");
    OK(tl_store_check(store, "a", &exists));
    CHECK(exists, "check of a set key");
    OK(tl_store_delete(store, "a"));
    OK(tl_store_delete(store, "a")); /* absent: no error */
    OK(tl_store_check(store, "a", &exists));
    CHECK(!exists, "check of a deleted key");
    OK(tl_store_set(store, "empty", NULL, 0));
    EXPECT_VALUE(store, "empty", "");
    OK(tl_store_set(store, "", "empty key", 9));
    EXPECT_VALUE(store, "", "empty key");

    int64_t n = 0;
    OK(tl_store_add(store, "n", 5, &n));
    CHECK(n == 5, "add to an absent key starts from 0: %lld", (long long)n);
    OK(tl_store_add(store, "n", -12, &n));
    CHECK(n == -7, "add -12: %lld", (long long)n);
    EXPECT_VALUE(store, "n", "-7"); /* added keys hold decimal text */
    OK(tl_store_set(store, "n", "40", 2));
    OK(tl_store_add(store, "n", 2, &n));
    CHECK(n == 42, "add to a set decimal: %lld", (long long)n);
    OK(tl_store_set(store, "text", "abc", 3));
    EXPECT_ERROR(tl_store_add(store, "text", 1, &n), TL_ERR_RUNTIME, "store: add 'text'",
                 "not a decimal integer");
    OK(tl_store_add(store, "big", INT64_MAX, &n));
    EXPECT_ERROR(tl_store_add(store, "big", 1, &n), TL_ERR_RUNTIME, "overflows");
    OK(tl_store_add(store, "small", INT64_MIN, &n));
    CHECK(n == INT64_MIN, "add INT64_MIN: %lld", (long long)n);
    EXPECT_VALUE(store, "small", "-9223372036854775808");
    EXPECT_VALUE(store, "text", "abc"); /* a refused add changes nothing */
}

static void test_parked_get(int port, tl_store *store) {
    worker w = {.port = port, .key = "late", .timeout_s = 20};
    start_worker(&w, get_one);
    sleep_ms(200);
    OK(tl_store_set(store, "late", "at last", 7));
    pthread_join(w.thread, NULL);
    CHECK(w.status == TL_OK && w.size == 7 && !memcmp(w.value, "at last", 7),
          "a parked get gets the value set later: %s", w.error);
    CHECK(w.seconds > 0.15, "the get waited for the set (%.3f s)", w.seconds);
    free(w.value);
}

static void test_many_clients(int port, tl_store *store) {
    worker w[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        w[i] = (worker){.port = port, .index = i};
        start_worker(&w[i], add_and_exchange);
    }
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(w[i].thread, NULL);
        char want[32];
        snprintf(want, sizeof want, "hello from %d", (i + 1) % CLIENTS);
        CHECK(w[i].status == TL_OK && w[i].size == strlen(want) &&
                  !memcmp(w[i].value, want, w[i].size),
              "client %d got its neighbour's value: %s", i, w[i].error);
        free(w[i].value);
    }
    int64_t total = 0;
    OK(tl_store_add(store, "counter", 0, &total));
    CHECK(total == CLIENTS * ADDS_PER_CLIENT, "concurrent adds: %lld, expected %d",
          (long long)total, CLIENTS * ADDS_PER_CLIENT);
}

static void test_large_value(int port, tl_store *store) {
    size_t size = (size_t)64 << 20;
    unsigned char *big = malloc(size);
    uint32_t x = 12345;
    for (size_t i = 0; i < size; i++) {
        x = x * 1664525u + 1013904223u;
        big[i] = (unsigned char)(x >> 24);
    }
    OK(tl_store_set(store, "big", big, size));
    tl_store *reader = connect_or_null(port);
    void *got = NULL;
    size_t got_size = 0;
    OK(tl_store_get(reader, "big", &got, &got_size));
    CHECK(got_size == size && got && memcmp(got, big, size) == 0,
          "a 64 MiB value comes back byte for byte (%zu bytes)", got_size);
    free(got);
    OK(tl_store_delete(reader, "big"));
    tl_store_close(reader);
    free(big);
}

static void test_timeout(tl_store *store) {
    OK(tl_store_set_timeout(store, 0.3));
    void *value = NULL;
    size_t size = 0;
    double start = now_s();
    EXPECT_ERROR(tl_store_get(store, "never", &value, &size), TL_ERR_RUNTIME,
                 "store: get 'never' timed out after 0.3 s", "is every rank running?");
    double seconds = now_s() - start;
    CHECK(seconds >= 0.25 && seconds < 3, "the get timed out after %.3f s", seconds);
    CHECK(value == NULL, "a failed get leaves *value alone");
    OK(tl_store_set_timeout(store, 20));
    OK(tl_store_set(store, "after timeout", "ok", 2)); /* reconnects */
    EXPECT_VALUE(store, "after timeout", "ok");
}

static void test_server_stopped_under_a_wait(void) {
    tl_store_server *server = NULL;
    int port = 0;
    OK(tl_store_server_start("127.0.0.1", 0, SECRET, &server, &port));
    worker w = {.port = port, .key = "forever", .timeout_s = 60};
    start_worker(&w, get_one);
    sleep_ms(200);
    double start = now_s();
    tl_store_server_stop(server);
    pthread_join(w.thread, NULL);
    CHECK(w.status == TL_ERR_RUNTIME && strstr(w.error, "the connection to 127.0.0.1:") &&
              strstr(w.error, "closed during get 'forever'"),
          "a waiting get fails when the server stops: %d %s", w.status, w.error);
    CHECK(now_s() - start < 5, "and at once (%.3f s)", now_s() - start);
}

static void test_connect_errors_and_retries(void) {
    tl_store_server *server = NULL;
    int port = 0;
    OK(tl_store_server_start("127.0.0.1", 0, SECRET, &server, &port));
    tl_store_server_stop(server);
    tl_store *store = NULL;
    double start = now_s();
    char where[64];
    snprintf(where, sizeof where, "connect to 127.0.0.1:%d failed after 0.5 s", port);
    EXPECT_ERROR(tl_store_connect("127.0.0.1", port, SECRET, 0.5, &store), TL_ERR_RUNTIME, where,
                 "refused");
    CHECK(now_s() - start < 3, "the refused connect took %.3f s", now_s() - start);
    EXPECT_ERROR(tl_store_connect("no-such-host.invalid", port, SECRET, 0.2, &store),
                 TL_ERR_RUNTIME, "cannot resolve 'no-such-host.invalid'");

    /* a client started before its server waits for it */
    worker w = {.port = port, .key = "soon", .timeout_s = 20};
    start_worker(&w, get_one);
    sleep_ms(300);
    tl_status st = tl_store_server_start("0.0.0.0", port, SECRET, &server, NULL);
    if (st != TL_OK) { /* someone took the port meanwhile: nothing to wait for */
        printf("note: port %d was taken (%s); retry test skipped\n", port, tl_last_error());
        pthread_join(w.thread, NULL);
        return;
    }
    store = connect_or_null(port);
    OK(tl_store_set(store, "soon", "up", 2));
    pthread_join(w.thread, NULL);
    CHECK(w.status == TL_OK && w.size == 2 && !memcmp(w.value, "up", 2),
          "a client connecting before the server listens: %s", w.error);
    free(w.value);
    tl_store_close(store);
    tl_store_server_stop(server);
}

int main(void) {
    tl_store_server *server = NULL;
    int port = -1;
    OK(tl_store_server_start("127.0.0.1", 0, SECRET, &server, &port));
    CHECK(port > 0 && port < 65536, "port_out: %d", port);
    tl_store *store = connect_or_null(port);
    if (!store) return 1;
    test_argument_errors(port, store);
    test_basic_operations(store);
    test_parked_get(port, store);
    test_many_clients(port, store);
    test_large_value(port, store);
    test_timeout(store);
    test_malformed_input(port, store);
    test_unauthenticated_commands(port, store);
    test_secrets(port, store);
    test_client_secrets(port);
    tl_store_close(store);
    tl_store_server_stop(server);
    test_server_stopped_under_a_wait();
    test_connect_errors_and_retries();
    test_bind_address();
    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}
