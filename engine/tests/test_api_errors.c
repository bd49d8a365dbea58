/* C unit test of the API's error paths: hook setters releasing their user, nested and failing
   traces, NULL and 0-dim arguments, and recording ops that fail leaving no result behind. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlua/tlua.h"

#include "check.h"

/* ---- allocation failures on demand (glibc, no sanitizer) ---------------------------------------
   malloc, calloc and realloc of the process (libtlua's included) are this file's: with
   fail_after >= 0 the allocation after that many more fails (then fail_after is -1 again); with
   fail_reallocs every realloc fails. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_UNDER_ASAN 1
#endif
#endif
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(TEST_UNDER_ASAN)
#define TEST_FAULTS 1
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);

static long fail_after = -1;
static bool fail_reallocs;

static bool fails_now(void) {
    long left = __atomic_load_n(&fail_after, __ATOMIC_RELAXED);
    if (left < 0) return false;
    if (left > 0) {
        __atomic_fetch_sub(&fail_after, 1, __ATOMIC_RELAXED);
        return false;
    }
    __atomic_store_n(&fail_after, -1, __ATOMIC_RELAXED);
    return true;
}

void *malloc(size_t size) {
    return fails_now() ? NULL : __libc_malloc(size);
}

void *calloc(size_t count, size_t size) {
    return fails_now() ? NULL : __libc_calloc(count, size);
}

void *realloc(void *ptr, size_t size) {
    if (__atomic_load_n(&fail_reallocs, __ATOMIC_RELAXED) || fails_now()) return NULL;
    return __libc_realloc(ptr, size);
}
#endif

static tl_tensor *vector(double a, double b, bool requires_grad) {
    tl_tensor *t = NULL;
    double values[2] = {a, b};
    OK(tl_from_host(values, (int64_t[]){2}, 1, TL_F64, TL_CPU, &t));
    if (t && requires_grad) OK(tl_set_requires_grad(t, true));
    return t;
}

static bool mentions(const char *part) {
    return strstr(tl_last_error(), part) != NULL;
}

/* ---- hook setters release their user on every path ---------------------------------------------
 */
static int releases;
static void count_release(void *user) {
    (void)user;
    releases++;
}
static tl_status ready_fn(void *user, tl_tensor *t) {
    (void)user, (void)t;
    return TL_OK;
}
static tl_status grad_fn(void *user, tl_tensor *grad, tl_tensor **replacement) {
    (void)user, (void)grad, (void)replacement;
    return TL_OK;
}

static void test_hooks(void) {
    int user = 0;
    tl_tensor *plain = vector(1, 2, false), *leaf = vector(1, 2, true), *made = NULL;
    /* removing from a tensor without autograd data: the user given is released all the same */
    releases = 0;
    OK(tl_set_grad_ready_hook(plain, NULL, &user, count_release));
    CHECK(releases == 1, "grad_ready_hook(NULL fn) on a plain tensor released %d times", releases);
    /* with autograd data: the old hook's user and the one given */
    releases = 0;
    OK(tl_set_grad_ready_hook(leaf, ready_fn, &user, count_release));
    CHECK(releases == 0, "setting a hook released %d users", releases);
    OK(tl_set_grad_ready_hook(leaf, NULL, &user, count_release));
    CHECK(releases == 2, "removing a hook released %d users, expected 2", releases);
    /* errors release too */
    releases = 0;
    CHECK(tl_set_grad_ready_hook(NULL, ready_fn, &user, count_release) == TL_ERR_ARGUMENT,
          "grad_ready_hook on NULL");
    OK(tl_ag_mul(leaf, leaf, &made));
    CHECK(tl_set_grad_ready_hook(made, ready_fn, &user, count_release) == TL_ERR_AUTOGRAD,
          "grad_ready_hook on a non-leaf");
    CHECK(releases == 2, "failed grad_ready_hook calls released %d users, expected 2", releases);
    /* tensor hooks: NULL tensor, NULL fn, a tensor that does not require grad */
    releases = 0;
    int64_t id = -1;
    CHECK(tl_add_grad_hook(NULL, grad_fn, &user, count_release, &id) == TL_ERR_ARGUMENT &&
              mentions("register_hook: expected a tensor, got NULL"),
          "add_grad_hook on NULL: %s", tl_last_error());
    CHECK(tl_add_grad_hook(leaf, NULL, &user, count_release, &id) == TL_ERR_ARGUMENT,
          "add_grad_hook without fn");
    CHECK(tl_add_grad_hook(plain, grad_fn, &user, count_release, &id) == TL_ERR_AUTOGRAD,
          "add_grad_hook on a tensor that does not require grad");
    CHECK(releases == 3, "failed add_grad_hook calls released %d users, expected 3", releases);
    CHECK(id == -1, "a failed add_grad_hook wrote an id");
    releases = 0;
    OK(tl_add_grad_hook(made, grad_fn, &user, count_release, &id));
    CHECK(tl_remove_grad_hook(made, id) && releases == 1, "remove_grad_hook released %d", releases);
    CHECK(!tl_remove_grad_hook(made, id), "a hook removed twice");
    CHECK(!tl_remove_grad_hook(NULL, id), "remove_grad_hook on NULL");
    tl_release(made), tl_release(leaf), tl_release(plain);
}

/* ---- the trace: an end gets the runs since its begin; on error nothing is handed over ------- */
static void test_trace(void) {
    tl_tensor *a = vector(1, 2, false), *b = NULL, *c = NULL;
    tl_trace_event *outer = NULL, *inner = NULL;
    int outer_count = -1, inner_count = -1;
    tl_trace_begin();
    OK(tl_add(a, a, &b));
    tl_trace_begin();
    OK(tl_mul(a, a, &c));
    OK(tl_trace_end(&inner, &inner_count));
    CHECK(inner_count == 1 && inner && strcmp(inner[0].op, "mul") == 0,
          "the inner end got %d events (expected mul only)", inner_count);
    OK(tl_trace_end(&outer, &outer_count));
    CHECK(outer_count == 2 && outer && strcmp(outer[0].op, "add") == 0 &&
              strcmp(outer[1].op, "mul") == 0,
          "the outer end got %d events (expected add, mul)", outer_count);
    free(inner), free(outer);
    tl_release(b), tl_release(c);

    /* an end without a begin hands over nothing */
    tl_trace_event *events = (tl_trace_event *)&outer_count; /* not NULL: must be cleared */
    int count = -1;
    CHECK(tl_trace_end(&events, &count) == TL_ERR_ARGUMENT && events == NULL && count == 0,
          "end without a begin: events %p count %d", (void *)events, count);

    /* NULL pointers are an error that still ends the begin */
    tl_trace_begin();
    CHECK(tl_trace_end(NULL, &count) == TL_ERR_ARGUMENT && mentions("events NULL") && count == 0,
          "end with events NULL: %s", tl_last_error());
    CHECK(tl_trace_end(&events, &count) == TL_ERR_ARGUMENT && mentions("without a begin"),
          "the failed end ended its begin: %s", tl_last_error());

    /* nested 65 deep: the deepest end is an error, the others get their runs */
    for (int i = 0; i < 65; i++) tl_trace_begin();
    OK(tl_add(a, a, &b));
    tl_release(b);
    events = (tl_trace_event *)&outer_count;
    CHECK(tl_trace_end(&events, &count) == TL_ERR_ARGUMENT && mentions("more than 64 deep") &&
              events == NULL && count == 0,
          "the 65th nested end: %s", tl_last_error());
    for (int i = 0; i < 64; i++) {
        events = NULL;
        OK(tl_trace_end(&events, &count));
        CHECK(count == 1 && events, "nested end %d got %d events", i, count);
        free(events);
    }
    CHECK(tl_trace_end(&events, &count) == TL_ERR_ARGUMENT, "every begin ended");

#ifdef TEST_FAULTS
    /* a run that could not be recorded: the ends open then fail and hand over nothing */
    tl_trace_begin();
    fail_reallocs = true;
    OK(tl_add(a, a, &b));
    fail_reallocs = false;
    tl_release(b);
    tl_trace_begin(); /* opened after the loss: it gets its runs */
    OK(tl_mul(a, a, &c));
    tl_release(c);
    inner = NULL;
    OK(tl_trace_end(&inner, &inner_count));
    CHECK(inner_count == 1 && inner && strcmp(inner[0].op, "mul") == 0,
          "an end opened after the loss got %d events", inner_count);
    free(inner);
    events = (tl_trace_event *)&outer_count;
    CHECK(tl_trace_end(&events, &count) == TL_ERR_MEMORY && events == NULL && count == 0 &&
              mentions("out of memory recording events"),
          "end after a lost run: %s (events %p, count %d)", tl_last_error(), (void *)events, count);
    /* the trace starts afresh */
    tl_trace_begin();
    OK(tl_add(a, a, &b));
    tl_release(b);
    events = NULL;
    OK(tl_trace_end(&events, &count));
    CHECK(count == 1, "a trace after a failed one got %d events", count);
    free(events);
#else
    printf("test_api_errors: allocation failures not injected (sanitizer or not glibc)\n");
#endif
    tl_release(a);
}

/* ---- NULL and 0-dim arguments are errors naming the function -------------------------------- */
static void expect(tl_status got, tl_status want, const char *part, const char *what) {
    CHECK(got == want && mentions(part), "%s: status %d (expected %d), message: %s", what, got,
          want, tl_last_error());
}

static tl_status relu_backward_null_grad(const tl_tensor *saved, tl_tensor **out) {
    return tl_relu_backward(NULL, saved, out);
}

static void test_null_arguments(void) {
    tl_tensor *x = vector(1, 2, false), *out = NULL, *index = NULL;
    OK(tl_from_host((int64_t[]){0}, (int64_t[]){1}, 1, TL_I64, TL_CPU, &index));
    expect(tl_index_fill(NULL, 0, index, tl_scalar_float(1), &out), TL_ERR_ARGUMENT,
           "index_fill: argument 'x' is NULL", "index_fill(NULL)");
    expect(tl_index_fill_(NULL, 0, index, tl_scalar_float(1)), TL_ERR_ARGUMENT,
           "index_fill_: argument 'x' is NULL", "index_fill_(NULL)");
    expect(tl_scatter_reduce_count(NULL, 0, index, x, true, &out), TL_ERR_ARGUMENT,
           "scatter_reduce_count: argument 'x' is NULL", "scatter_reduce_count(NULL x)");
    expect(tl_scatter_reduce_count(x, 0, NULL, x, true, &out), TL_ERR_ARGUMENT,
           "scatter_reduce_count: argument 'index' is NULL", "scatter_reduce_count(NULL index)");
    expect(tl_scatter_reduce_count(x, 0, index, NULL, true, &out), TL_ERR_ARGUMENT,
           "scatter_reduce_count: argument 'src' is NULL", "scatter_reduce_count(NULL src)");
    expect(tl_index_add_scaled("index_add", NULL, x, 2, &out), TL_ERR_ARGUMENT,
           "index_add: argument 'x' is NULL", "index_add_scaled(NULL x)");
    expect(tl_index_add_scaled("index_add", x, NULL, 2, &out), TL_ERR_ARGUMENT,
           "index_add: argument 'src' is NULL", "index_add_scaled(NULL src)");
    CHECK(out == NULL, "a failed call wrote a result");
    /* every pointwise backward kernel, NULL grad and NULL saved */
#define POINTWISE_BACKWARD_OP(name, differentiable, backward)                                      \
    expect(tl_##name(NULL, x, &out), TL_ERR_ARGUMENT, #name ": argument 'grad' is NULL",           \
           #name "(NULL grad)");                                                                   \
    expect(tl_##name(x, NULL, &out), TL_ERR_ARGUMENT, #name ": argument 'saved' is NULL",          \
           #name "(NULL saved)");                                                                  \
    expect(tl_##name##_with(NULL, x, NULL, &out), TL_ERR_ARGUMENT, "argument 'grad' is NULL",      \
           #name "_with(NULL grad)");
#include "tlua/ops.def"
    expect(relu_backward_null_grad(x, &out), TL_ERR_ARGUMENT, "relu_backward", "relu_backward");
    CHECK(out == NULL, "a failed backward kernel wrote a result");
    tl_release(index);

    /* linear's split gradients: a 0-dim grad or pre, named by the function called */
    tl_tensor *scalar = NULL, *input = NULL, *weight = NULL, *grad = NULL;
    OK(tl_ones(NULL, 0, TL_F32, TL_CPU, &scalar));
    OK(tl_ones((int64_t[]){4, 3}, 2, TL_F32, TL_CPU, &input));
    OK(tl_ones((int64_t[]){2, 3}, 2, TL_F32, TL_CPU, &weight));
    OK(tl_ones((int64_t[]){4, 2}, 2, TL_F32, TL_CPU, &grad));
    tl_tensor *gw = x, *gb = x; /* not NULL: a failure must clear them */
    expect(tl_linear_backward_weight(scalar, input, &gw), TL_ERR_SHAPE,
           "linear_backward_weight: grad must have at least 1 dim", "0-dim grad");
    CHECK(gw == NULL, "linear_backward_weight left *grad_weight set");
    expect(tl_linear_backward_weight_as(scalar, input, TL_F32, &gw), TL_ERR_SHAPE,
           "linear_backward_weight_as: grad must have at least 1 dim", "0-dim grad (_as)");
    expect(tl_linear_backward_weight(grad, scalar, &gw), TL_ERR_SHAPE,
           "linear_backward_weight: input must have at least 1 dim", "0-dim input");
    gw = gb = x;
    expect(tl_linear_backward_weight_bias_as(scalar, input, TL_F32, TL_F32, &gw, &gb), TL_ERR_SHAPE,
           "linear_backward_weight_bias_as: grad must have at least 1 dim",
           "0-dim grad (_weight_bias_as)");
    CHECK(gw == NULL && gb == NULL, "linear_backward_weight_bias_as left its results set");
    tl_tensor *rows = NULL;
    OK(tl_ones((int64_t[]){5, 2}, 2, TL_F32, TL_CPU, &rows));
    expect(tl_linear_backward_weight_bias_as(rows, input, TL_F32, TL_F32, &gw, &gb), TL_ERR_SHAPE,
           "linear_backward_weight_bias_as: grad [5, 2] and input [4, 3] must have the same rows",
           "rows differ (_weight_bias_as)");
    expect(tl_linear_backward_weight(NULL, input, &gw), TL_ERR_ARGUMENT,
           "linear_backward_weight: grad is missing", "NULL grad");
    gb = x;
    expect(tl_linear_backward_bias_as(scalar, TL_F32, &gb), TL_ERR_SHAPE,
           "linear_backward_bias_as: grad must have at least 1 dim", "0-dim grad (bias_as)");
    CHECK(gb == NULL, "linear_backward_bias_as left *grad_bias set");
    expect(tl_linear_backward_bias(NULL, &gb), TL_ERR_ARGUMENT,
           "linear_backward_bias: grad is missing", "NULL grad (bias)");
    tl_tensor *gi = NULL;
    for (int tanh_form = 0; tanh_form < 2; tanh_form++)
        expect(tl_linear_backward_input_gelu(grad, weight, scalar, tanh_form, &gi), TL_ERR_SHAPE,
               "linear_backward_input_gelu: pre must have at least 1 dim", "0-dim pre");
    CHECK(gi == NULL, "linear_backward_input_gelu wrote a result");
    /* and the good calls still work */
    OK(tl_linear_backward_weight_bias_as(grad, input, TL_F32, TL_F64, &gw, &gb));
    CHECK(gw && gb && gw->dtype == TL_F32 && gb->dtype == TL_F64, "weight_bias_as results");
    tl_release(gw), tl_release(gb);
    OK(tl_linear_backward_bias_as(grad, TL_F64, &gb));
    tl_release(gb);
    tl_release(rows), tl_release(scalar), tl_release(input), tl_release(weight), tl_release(grad);
    tl_release(x);
}

/* ---- a recording op that fails after its forward leaves *out NULL, and nothing alive -------- */
#ifdef TEST_FAULTS
typedef tl_status (*recording_op)(tl_tensor *a, tl_tensor *b, tl_tensor **out);

static tl_status ag_exp(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    (void)b;
    return tl_ag_exp(a, out);
}
static tl_status ag_sum(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    (void)b;
    return tl_ag_sum_all(a, out);
}
static tl_status ag_reshape(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    (void)b;
    return tl_ag_reshape(a, (int64_t[]){1, 2}, 2, out);
}
static tl_status ag_max_dim(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    (void)b;
    tl_tensor *indices = NULL;
    tl_status status = tl_ag_max_dim(a, 0, false, out, &indices);
    CHECK(status == TL_OK || indices == NULL, "max_dim left its indices set after failing");
    tl_release(indices);
    return status;
}
static tl_status ag_lerp(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    return tl_ag_lerp_with(a, b, a, NULL, out);
}

static tl_status ag_softmax(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    (void)b;
    return tl_ag_softmax(a, 0, out);
}
static tl_status ag_cumsum(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    (void)b;
    return tl_ag_cumsum(a, 0, out);
}
static tl_status ag_cat(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    return tl_ag_cat((tl_tensor *[]){a, b}, 2, 0, out);
}
static tl_status ag_sort(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    (void)b;
    tl_tensor *indices = NULL;
    tl_status status = tl_ag_sort(a, 0, true, out, &indices);
    CHECK(status == TL_OK || indices == NULL, "sort left its indices set after failing");
    tl_release(indices);
    return status;
}
static tl_status ag_linear(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    tl_tensor *weight = NULL;
    tl_status status = tl_ag_reshape(b, (int64_t[]){1, 2}, 2, &weight);
    if (status == TL_OK) status = tl_ag_linear(a, weight, NULL, out);
    tl_release(weight);
    return status;
}
static tl_status ag_flip(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    (void)b;
    return tl_ag_flip(a, (int[]){0}, 1, out);
}

static void fails_cleanly(const char *name, recording_op op) {
    tl_tensor *a = vector(1, 2, true), *b = vector(3, 4, true);
    tl_cpu_memory_stats before, after;
    int failed = 0;
    for (long k = 0; k < 400; k++) {
        tl_tensor *out = NULL;
        tl_cpu_get_memory_stats(&before);
        fail_after = k;
        tl_status status = op(a, b, &out);
        bool injected = fail_after < 0;
        fail_after = -1;
        if (status == TL_OK) {
            tl_release(out);
            if (!injected) break; /* past the op's last allocation */
            continue;
        }
        failed++;
        CHECK(out == NULL, "%s: failing at allocation %ld left *out set (%s)", name, k,
              tl_last_error());
        tl_cpu_get_memory_stats(&after);
        CHECK(after.active_blocks == before.active_blocks,
              "%s: failing at allocation %ld kept %lld storages alive", name, k,
              (long long)(after.active_blocks - before.active_blocks));
    }
    CHECK(failed > 0, "%s: no allocation failure was injected", name);
    tl_release(a), tl_release(b);
}

static void test_recording_failures(void) {
    fails_cleanly("mul", tl_ag_mul);
    fails_cleanly("add", tl_ag_add);
    fails_cleanly("pow", tl_ag_pow);
    fails_cleanly("atan2", tl_ag_atan2);
    fails_cleanly("outer", tl_ag_outer);
    fails_cleanly("lerp", ag_lerp);
    fails_cleanly("exp", ag_exp);
    fails_cleanly("sum", ag_sum);
    fails_cleanly("reshape", ag_reshape);
    fails_cleanly("max_dim", ag_max_dim);
    fails_cleanly("softmax", ag_softmax);
    fails_cleanly("cumsum", ag_cumsum);
    fails_cleanly("cat", ag_cat);
    fails_cleanly("sort", ag_sort);
    fails_cleanly("linear", ag_linear);
    fails_cleanly("flip", ag_flip);
}
#endif

/* status failed, and the message (set by the call just made) starts with "name:" */
static void expect_named(const char *name, tl_status status) {
    CHECK(status != TL_OK, "%s: succeeded", name);
    CHECK(strncmp(tl_last_error(), name, strlen(name)) == 0 && tl_last_error()[strlen(name)] == ':',
          "%s: the message names another op: %s", name, tl_last_error());
}

/* Constructors made of others report under their own names, not the inner op's ("empty",
   "zeros"): sizes past the one-tensor limit, a negative size */
static void test_constructor_names(void) {
    tl_tensor *t = NULL;
    expect_named("eye", tl_eye((int64_t)1 << 20, (int64_t)1 << 30, TL_F32, TL_CPU, &t));
    expect_named("arange", tl_arange(0, 1, 1e-12, TL_F32, TL_CPU, &t));
    expect_named("arange", tl_arange_int(0, (int64_t)1 << 41, 1, TL_I64, TL_CPU, &t));
    expect_named("linspace", tl_linspace(0, 1, (int64_t)1 << 45, TL_F32, TL_CPU, &t));
    expect_named("zeros", tl_zeros((const int64_t[]){-1}, 1, TL_F32, TL_CPU, &t));
    expect_named("ones", tl_ones((const int64_t[]){-1}, 1, TL_F32, TL_CPU, &t));
}

int main(void) {
    tl_set_num_threads(1);
    test_constructor_names();
    test_hooks();
    test_trace();
    test_null_arguments();
#ifdef TEST_FAULTS
    test_recording_failures();
#endif
    if (failures)
        printf("%d of %d check(s) failed\n", failures, checks);
    else
        printf("test_api_errors: all %d checks passed\n", checks);
    return failures ? 1 : 0;
}
