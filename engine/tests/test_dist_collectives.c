/* C unit test of the process group's reduce_scatter and all_gather (and their _start forms): a
   world of one (copies, in place, empty tensors, every argument error with its message) and
   worlds of 2 and 3 ranks, threads meeting in a store on 127.0.0.1, against plain loops. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlua/distributed.h"
#include "tlua/ops.h"

#include "check.h"

static const char SECRET[] = "test-dist-collectives-secret-0123";

/* the ranks' threads share the counters of check.h: CHECK under a lock (never a collective
   inside it, or a rank would hold the lock while it waits for another) */
static pthread_mutex_t check_lock = PTHREAD_MUTEX_INITIALIZER;
#define RCHECK(...)                                                                                \
    do {                                                                                           \
        pthread_mutex_lock(&check_lock);                                                           \
        CHECK(__VA_ARGS__);                                                                        \
        pthread_mutex_unlock(&check_lock);                                                         \
    } while (0)
#define ROK(expr)                                                                                  \
    do {                                                                                           \
        tl_status status_ = (expr);                                                                \
        RCHECK(status_ == TL_OK, "%s: %s", #expr, tl_last_error());                                \
    } while (0)

/* The call failed with status want and a message holding needle. */
#define EXPECT_ERROR(call, want, needle)                                                           \
    do {                                                                                           \
        tl_status got_ = (call);                                                                   \
        RCHECK(got_ == (want) && strstr(tl_last_error(), needle) != NULL,                          \
               "%s: status %d (want %d), message '%s' lacks '%s'", #call, got_, want,              \
               tl_last_error(), needle);                                                           \
    } while (0)

enum { N = 5 }; /* a rank's chunk: not a multiple of anything special */

/* Rank r's input element i: small multiples of 1/4 (integers for int64), so that sums and
   products of three are exact in float32 too. */
static double value_of(tl_dtype dtype, int rank, int64_t i) {
    double v = (double)((i * 7 + rank * 5) % 11) - 5;
    return dtype == TL_I64 ? v : v + 0.25 * rank;
}

/* A CPU tensor of shape and dtype whose element i is value_of(dtype, rank, i + first). */
static tl_tensor *make(tl_dtype dtype, const int64_t *shape, int ndim, int rank, int64_t first) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    void *data = malloc((size_t)(n > 0 ? n : 1) * tl_dtype_size(dtype));
    for (int64_t i = 0; i < n; i++) {
        double v = value_of(dtype, rank, i + first);
        if (dtype == TL_F64)
            ((double *)data)[i] = v;
        else if (dtype == TL_F32)
            ((float *)data)[i] = (float)v;
        else
            ((int64_t *)data)[i] = (int64_t)v;
    }
    tl_tensor *t = NULL;
    ROK(tl_from_host(data, shape, ndim, dtype, TL_CPU, &t));
    free(data);
    return t;
}

/* t's elements as doubles (n of them). */
static void read_values(const tl_tensor *t, double *out, int64_t n) {
    void *data = malloc((size_t)(n > 0 ? n : 1) * tl_dtype_size(t->dtype));
    ROK(tl_to_host(t, data));
    for (int64_t i = 0; i < n; i++)
        out[i] = t->dtype == TL_F64   ? ((double *)data)[i]
                 : t->dtype == TL_F32 ? ((float *)data)[i]
                                      : (double)((int64_t *)data)[i];
    free(data);
}

/* The reduction over world ranks, in rank order, of their element i. */
static double reduced(tl_dtype dtype, tl_reduce_op op, int world, int64_t i) {
    double acc = value_of(dtype, 0, i);
    for (int r = 1; r < world; r++) {
        double v = value_of(dtype, r, i);
        switch (op) {
        case TL_REDUCE_SUM:
        case TL_REDUCE_AVG:
            acc += v;
            break;
        case TL_REDUCE_PRODUCT:
            acc *= v;
            break;
        case TL_REDUCE_MIN:
            acc = v < acc ? v : acc;
            break;
        case TL_REDUCE_MAX:
            acc = v > acc ? v : acc;
            break;
        }
    }
    return op == TL_REDUCE_AVG ? acc / world : acc;
}

static bool close_to(tl_dtype dtype, double got, double want) {
    return dtype == TL_F32 ? fabs(got - want) <= 1e-6 * fmax(1, fabs(want)) : got == want;
}

typedef enum { OUT_OF_PLACE, IN_PLACE, STARTED } mode;
static const char *const mode_names[] = {"out of place", "in place", "started"};
static const tl_dtype dtypes[] = {TL_F64, TL_F32, TL_I64};
static const tl_reduce_op ops[] = {TL_REDUCE_SUM, TL_REDUCE_AVG, TL_REDUCE_MAX, TL_REDUCE_MIN,
                                   TL_REDUCE_PRODUCT};

/* in [world, N] holds this rank's values; out (new, or in's chunk of this rank) gets chunk rank
   reduced over the ranks; in's other chunks stay as they were. */
static void check_reduce_scatter(tl_process_group *group, tl_dtype dtype, tl_reduce_op op, mode m) {
    int rank = tl_process_group_rank(group), world = tl_process_group_world_size(group);
    int64_t whole[2] = {world, N}, flat_shape[1] = {(int64_t)world * N}, chunk_shape[1] = {N};
    tl_tensor *in = make(dtype, whole, 2, rank, 0), *flat = NULL, *out = NULL;
    ROK(tl_view(in, flat_shape, 1, &flat));
    if (m == IN_PLACE)
        ROK(tl_narrow(flat, 0, (int64_t)rank * N, N, &out));
    else
        ROK(tl_zeros(chunk_shape, 1, dtype, TL_CPU, &out));
    uint64_t version = out->storage->version;
    if (m == STARTED) {
        tl_work *work = NULL;
        ROK(tl_reduce_scatter_start(group, in, out, op, &work));
        ROK(tl_work_wait(work));
        double queued = -1, comm = -1;
        ROK(tl_work_timing(work, &queued, &comm));
        RCHECK(queued == 0 && comm == 0, "a CPU work's timings are 0: %g %g", queued, comm);
        tl_work_free(work);
    } else {
        ROK(tl_reduce_scatter(group, in, out, op));
    }
    RCHECK(out->storage->version > version, "reduce_scatter bumps out's version");
    double got[N], all[3 * N];
    read_values(out, got, N);
    for (int64_t j = 0; j < N; j++) {
        double want = reduced(dtype, op, world, (int64_t)rank * N + j);
        RCHECK(close_to(dtype, got[j], want),
               "reduce_scatter %s %s %s, world %d, rank %d: element %lld is %.17g, expected %.17g",
               tl_dtype_name(dtype), tl_reduce_op_name(op), mode_names[m], world, rank,
               (long long)j, got[j], want);
    }
    read_values(flat, all, (int64_t)world * N);
    for (int64_t i = 0; i < (int64_t)world * N; i++) {
        if (m == IN_PLACE && i / N == rank) continue;
        RCHECK(all[i] == value_of(dtype, rank, i), "reduce_scatter %s: in's element %lld changed",
               mode_names[m], (long long)i);
    }
    tl_release(out);
    tl_release(flat);
    tl_release(in);
}

/* out [world * N] gets every rank's in [N] (this rank's: value_of(rank, j)); in place, in is
   out's chunk of this rank. */
static void check_all_gather(tl_process_group *group, tl_dtype dtype, mode m) {
    int rank = tl_process_group_rank(group), world = tl_process_group_world_size(group);
    int64_t whole[1] = {(int64_t)world * N}, chunk_shape[1] = {N};
    tl_tensor *mine = make(dtype, chunk_shape, 1, rank, 0), *out = NULL, *in = NULL;
    ROK(tl_zeros(whole, 1, dtype, TL_CPU, &out));
    if (m == IN_PLACE) {
        ROK(tl_narrow(out, 0, (int64_t)rank * N, N, &in));
        ROK(tl_copy_(in, mine));
    } else {
        in = tl_retain(mine);
    }
    uint64_t version = out->storage->version;
    if (m == STARTED) {
        tl_work *work = NULL;
        ROK(tl_all_gather_start(group, in, out, &work));
        ROK(tl_work_wait(work));
        tl_work_free(work);
    } else {
        ROK(tl_all_gather(group, in, out));
    }
    RCHECK(out->storage->version > version, "all_gather bumps out's version");
    double got[3 * N];
    read_values(out, got, (int64_t)world * N);
    for (int64_t i = 0; i < (int64_t)world * N; i++) {
        double want = value_of(dtype, (int)(i / N), i % N);
        RCHECK(close_to(dtype, got[i], want),
               "all_gather %s %s, world %d, rank %d: element %lld is %.17g, expected %.17g",
               tl_dtype_name(dtype), mode_names[m], world, rank, (long long)i, got[i], want);
    }
    tl_release(in);
    tl_release(out);
    tl_release(mine);
}

/* Empty tensors: nothing to do (and no traffic: every rank returns at once). */
static void check_empty(tl_process_group *group) {
    int64_t zero[1] = {0};
    tl_tensor *a = NULL, *b = NULL;
    ROK(tl_zeros(zero, 1, TL_F32, TL_CPU, &a));
    ROK(tl_zeros(zero, 1, TL_F32, TL_CPU, &b));
    ROK(tl_reduce_scatter(group, a, b, TL_REDUCE_AVG));
    ROK(tl_all_gather(group, a, b));
    tl_work *work = NULL;
    ROK(tl_all_gather_start(group, a, b, &work));
    ROK(tl_work_wait(work));
    tl_work_free(work);
    tl_release(a);
    tl_release(b);
}

static void check_all(tl_process_group *group) {
    for (int d = 0; d < 3; d++)
        for (int m = OUT_OF_PLACE; m <= STARTED; m++) {
            for (int o = 0; o < 5; o++)
                if (!(ops[o] == TL_REDUCE_AVG && dtypes[d] == TL_I64))
                    check_reduce_scatter(group, dtypes[d], ops[o], (mode)m);
            check_all_gather(group, dtypes[d], (mode)m);
        }
    check_empty(group);
}

/* ---- a world of one ------------------------------------------------------------------------ */
static void test_world_of_one(void) {
    tl_process_group *group = NULL;
    OK(tl_process_group_new(NULL, 0, 1, 0, &group));
    check_all(group);
    /* in place with the whole tensor: a world of one's chunk 0 is all of it */
    int64_t shape[1] = {3};
    tl_tensor *t = make(TL_F64, shape, 1, 0, 0);
    OK(tl_reduce_scatter(group, t, t, TL_REDUCE_AVG));
    OK(tl_all_gather(group, t, t));
    double v[3];
    read_values(t, v, 3);
    CHECK(v[0] == value_of(TL_F64, 0, 0) && v[2] == value_of(TL_F64, 0, 2), "in place: unchanged");
    tl_release(t);
    tl_process_group_free(group);
}

static void test_argument_errors(void) {
    tl_process_group *group = NULL;
    OK(tl_process_group_new(NULL, 0, 1, 0, &group));
    int64_t three[1] = {3}, four[1] = {4}, eight[1] = {8}, three_two[2] = {3, 2};
    tl_tensor *in = NULL, *out = NULL, *f32 = NULL, *longer = NULL, *ints = NULL, *int_out = NULL;
    tl_tensor *bools = NULL, *bool_out = NULL, *matrix = NULL, *transposed = NULL, *buffer = NULL;
    tl_tensor *low = NULL, *high = NULL;
    OK(tl_ones(three, 1, TL_F64, TL_CPU, &in));
    OK(tl_zeros(three, 1, TL_F64, TL_CPU, &out));
    OK(tl_zeros(three, 1, TL_F32, TL_CPU, &f32));
    OK(tl_zeros(four, 1, TL_F64, TL_CPU, &longer));
    OK(tl_zeros(three, 1, TL_I64, TL_CPU, &ints));
    OK(tl_zeros(three, 1, TL_I64, TL_CPU, &int_out));
    OK(tl_zeros(three, 1, TL_BOOL, TL_CPU, &bools));
    OK(tl_zeros(three, 1, TL_BOOL, TL_CPU, &bool_out));
    OK(tl_zeros(three_two, 2, TL_F64, TL_CPU, &matrix));
    OK(tl_transpose(matrix, 0, 1, &transposed));
    OK(tl_zeros(eight, 1, TL_F64, TL_CPU, &buffer));
    OK(tl_narrow(buffer, 0, 0, 3, &low));
    OK(tl_narrow(buffer, 0, 1, 3, &high));
    tl_work *work = NULL;

    EXPECT_ERROR(tl_reduce_scatter(NULL, in, out, TL_REDUCE_SUM), TL_ERR_ARGUMENT,
                 "reduce_scatter: the process group is NULL");
    EXPECT_ERROR(tl_all_gather(NULL, in, out), TL_ERR_ARGUMENT,
                 "all_gather: the process group is NULL");
    EXPECT_ERROR(tl_reduce_scatter(group, NULL, out, TL_REDUCE_SUM), TL_ERR_ARGUMENT,
                 "reduce_scatter: expected a tensor as in, got NULL");
    EXPECT_ERROR(tl_all_gather(group, in, NULL), TL_ERR_ARGUMENT,
                 "all_gather: expected a tensor as out, got NULL");
    EXPECT_ERROR(tl_reduce_scatter_start(group, in, out, TL_REDUCE_SUM, NULL), TL_ERR_ARGUMENT,
                 "reduce_scatter: out_work is NULL");
    EXPECT_ERROR(tl_all_gather_start(group, in, out, NULL), TL_ERR_ARGUMENT,
                 "all_gather: out_work is NULL");
    EXPECT_ERROR(tl_reduce_scatter(group, transposed, matrix, TL_REDUCE_SUM), TL_ERR_ARGUMENT,
                 "reduce_scatter: expected a contiguous in");
    EXPECT_ERROR(tl_all_gather(group, matrix, transposed), TL_ERR_ARGUMENT,
                 "all_gather: expected a contiguous out");
    EXPECT_ERROR(tl_reduce_scatter(group, in, f32, TL_REDUCE_SUM), TL_ERR_DTYPE,
                 "reduce_scatter: out has dtype float32, expected in's dtype float64");
    EXPECT_ERROR(tl_all_gather_start(group, f32, out, &work), TL_ERR_DTYPE,
                 "all_gather: out has dtype float64, expected in's dtype float32");
    EXPECT_ERROR(tl_reduce_scatter(group, longer, out, TL_REDUCE_SUM), TL_ERR_SHAPE,
                 "reduce_scatter: in has 4 elements, expected 3 (the world size 1 times out's 3)");
    EXPECT_ERROR(tl_all_gather(group, in, longer), TL_ERR_SHAPE,
                 "all_gather: out has 4 elements, expected 3 (the world size 1 times in's 3)");
    EXPECT_ERROR(tl_reduce_scatter(group, low, high, TL_REDUCE_SUM), TL_ERR_ARGUMENT,
                 "reduce_scatter: out overlaps in but is not in's chunk of this rank (rank 0: "
                 "its elements 0 to 2, counted from 0); in place, out must be exactly that chunk");
    EXPECT_ERROR(tl_all_gather(group, high, low), TL_ERR_ARGUMENT,
                 "all_gather: in overlaps out but is not out's chunk of this rank");
    EXPECT_ERROR(tl_reduce_scatter(group, ints, int_out, TL_REDUCE_AVG), TL_ERR_DTYPE,
                 "reduce_scatter: op \"avg\" needs a floating dtype, got int64 (use \"sum\")");
    EXPECT_ERROR(tl_reduce_scatter_start(group, bools, bool_out, TL_REDUCE_SUM, &work),
                 TL_ERR_DTYPE, "reduce_scatter: op \"sum\" does not take bool tensors");
    EXPECT_ERROR(tl_reduce_scatter(group, in, out, (tl_reduce_op)9), TL_ERR_ARGUMENT,
                 "reduce_scatter: unknown reduce op 9");
    CHECK(work == NULL, "a refused start leaves *out_work alone");
    double v[8];
    read_values(out, v, 3);
    CHECK(v[0] == 0 && v[1] == 0 && v[2] == 0, "a refused call leaves out as it was");
    read_values(buffer, v, 8);
    CHECK(v[1] == 0 && v[3] == 0, "a refused overlap leaves the buffer as it was");
    /* bool min and max are all and any */
    OK(tl_reduce_scatter(group, bools, bool_out, TL_REDUCE_MAX));
    OK(tl_all_gather(group, bools, bool_out));

    tl_tensor *list[] = {in,       out,    f32, longer, ints,   int_out,   bools,
                         bool_out, matrix, low, high,   buffer, transposed};
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) tl_release(list[i]);
    tl_process_group_free(group);
}

/* ---- several ranks: threads meeting in a store ---------------------------------------------- */
typedef struct rank_thread {
    pthread_t thread;
    int port, rank, world;
    bool mismatch; /* end with a chunk size that differs between ranks */
} rank_thread;

/* Errors every rank meets before any traffic: the overlap rule names this rank's chunk. */
static void check_rank_errors(tl_process_group *group) {
    int rank = tl_process_group_rank(group), world = tl_process_group_world_size(group);
    int64_t whole[1] = {(int64_t)world * N};
    tl_tensor *buffer = NULL, *other = NULL;
    ROK(tl_zeros(whole, 1, TL_F64, TL_CPU, &buffer));
    ROK(tl_narrow(buffer, 0, (int64_t)((rank + 1) % world) * N, N, &other));
    char needle[160];
    snprintf(needle, sizeof needle,
             "out overlaps in but is not in's chunk of this rank (rank %d: its elements %d to %d",
             rank, rank * N, rank * N + N - 1);
    EXPECT_ERROR(tl_reduce_scatter(group, buffer, other, TL_REDUCE_SUM), TL_ERR_ARGUMENT, needle);
    EXPECT_ERROR(tl_all_gather(group, other, other), TL_ERR_SHAPE,
                 world == 2 ? "all_gather: out has 5 elements, expected 10 (the world size 2"
                            : "all_gather: out has 5 elements, expected 15 (the world size 3");
    tl_release(other);
    tl_release(buffer);
}

/* Rank r's chunks have N + r elements: each rank reads another's bytes and says whose. */
static void check_mismatch(tl_process_group *group) {
    int rank = tl_process_group_rank(group), world = tl_process_group_world_size(group);
    int64_t chunk[1] = {N + rank}, whole[1] = {(int64_t)world * (N + rank)};
    tl_tensor *small = NULL, *big = NULL;
    ROK(tl_zeros(chunk, 1, TL_F32, TL_CPU, &small));
    ROK(tl_zeros(whole, 1, TL_F32, TL_CPU, &big));
    EXPECT_ERROR(tl_reduce_scatter(group, big, small, TL_REDUCE_SUM), TL_ERR_SHAPE,
                 "every rank must pass the same shape and dtype");
    EXPECT_ERROR(tl_all_gather(group, small, big), TL_ERR_SHAPE,
                 rank == 0 ? "all_gather: rank 1 sent 24 bytes but this rank's in holds 20"
                           : "all_gather: rank 0 sent 20 bytes");
    tl_release(small);
    tl_release(big);
}

static void *run_rank(void *arg) {
    rank_thread *t = arg;
    tl_store *store = NULL;
    tl_process_group *group = NULL;
    tl_status status = tl_store_connect("127.0.0.1", t->port, SECRET, 10, &store);
    if (status == TL_OK) status = tl_store_set_timeout(store, 20); /* a bug fails, never hangs */
    if (status == TL_OK) status = tl_process_group_new(store, t->rank, t->world, 0, &group);
    RCHECK(status == TL_OK, "rank %d of %d: joining: %s", t->rank, t->world, tl_last_error());
    if (status == TL_OK) {
        check_rank_errors(group);
        check_all(group);
        if (t->mismatch) check_mismatch(group);
        ROK(tl_barrier(group));
    }
    tl_process_group_free(group);
    tl_store_close(store);
    return NULL;
}

static void test_ranks(int world, bool mismatch) {
    tl_store_server *server = NULL;
    int port = 0;
    OK(tl_store_server_start("127.0.0.1", 0, SECRET, &server, &port));
    rank_thread threads[3];
    for (int r = 0; r < world; r++) {
        threads[r] = (rank_thread){.port = port, .rank = r, .world = world, .mismatch = mismatch};
        CHECK(pthread_create(&threads[r].thread, NULL, run_rank, &threads[r]) == 0,
              "pthread_create");
    }
    for (int r = 0; r < world; r++) pthread_join(threads[r].thread, NULL);
    if (!mismatch) {
        /* the last reader removed every key of the collectives */
        tl_store *store = NULL;
        OK(tl_store_connect("127.0.0.1", port, SECRET, 10, &store));
        int left = 0;
        for (int seq = 1; seq <= 200; seq++)
            for (int r = -1; r < world; r++)
                for (int d = -1; d < world; d++) {
                    char key[64];
                    if (r < 0)
                        snprintf(key, sizeof key, "pg/cpu/%d/read", seq);
                    else if (d < 0)
                        snprintf(key, sizeof key, "pg/cpu/%d/%d", seq, r);
                    else
                        snprintf(key, sizeof key, "pg/cpu/%d/%d/%d", seq, r, d);
                    bool exists = false;
                    OK(tl_store_check(store, key, &exists));
                    left += exists;
                }
        CHECK(left == 0, "world %d: %d keys of the collectives were left in the store", world,
              left);
        tl_store_close(store);
    }
    tl_store_server_stop(server);
}

int main(void) {
    test_world_of_one();
    test_argument_errors();
    test_ranks(2, true);
    test_ranks(3, false);
    printf("%d checks, %d failures\n", checks, failures);
    return failures != 0;
}
