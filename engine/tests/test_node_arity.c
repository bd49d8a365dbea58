/* C unit test of graph nodes of any arity: 128 inputs, 64 outputs and 128 saved tensors on one
   node, outputs past a node's room refused, unsaved slots reported, gradients exact. */
#include <stdio.h>
#include <string.h>

#include "autograd/graph.h"
#include "tlua/tlua.h"

#include "check.h"

enum { PAIRS = 64, INPUTS = 2 * PAIRS };

static double value_of(const tl_tensor *t) {
    tl_scalar v = tl_scalar_float(-1.0);
    if (!t || tl_item(t, &v) != TL_OK) return -12345.0;
    return tl_scalar_to_double(v);
}

static tl_tensor *scalar_leaf(double v) {
    int64_t shape[1] = {1};
    tl_tensor *t = NULL;
    OK(tl_full(shape, 1, tl_scalar_float(v), TL_F64, TL_CPU, &t));
    OK(tl_set_requires_grad(t, true));
    return t;
}

/* out[o] = x[o] * x[o + m]: each gradient reads the other factor from its saved slot */
static tl_status pairs_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    int m = node->num_outputs;
    for (int o = 0; o < m; o++) {
        tl_tensor *a, *b;
        TL_TRY(tl_node_saved(node, o, &a));
        TL_TRY(tl_node_saved(node, o + m, &b));
        TL_TRY(tl_mul(g[o], b, &gi[o]));
        TL_TRY(tl_mul(g[o], a, &gi[o + m]));
    }
    return TL_OK;
}

static tl_status unused_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    (void)node, (void)g, (void)gi;
    return TL_OK;
}

static void test_wide_node(void) {
    tl_tensor *x[INPUTS], *out[PAIRS];
    for (int i = 0; i < INPUTS; i++) x[i] = scalar_leaf(i + 1);
    for (int o = 0; o < PAIRS; o++) OK(tl_mul(x[o], x[o + PAIRS], &out[o]));
    tl_node *node = NULL;
    OK(tl_node_new_multi("pairs", pairs_backward, INPUTS, x, PAIRS, &node));
    if (!node) return;
    CHECK(node->num_inputs == INPUTS && node->output_capacity == PAIRS, "counts %d %d",
          node->num_inputs, node->output_capacity);
    for (int i = 0; i < INPUTS; i++) {
        CHECK(node->needs_input_grad[i] && node->input_ndim[i] == 1 &&
                  node->input_shape[i][0] == 1 && node->input_dtype[i] == TL_F64,
              "input %d recorded", i);
        OK(tl_node_save(node, i, "factor", x[i]));
    }
    for (int o = 0; o < PAIRS; o++) OK(tl_node_set_output(node, o, out[o]));
    CHECK(node->num_outputs == PAIRS, "num_outputs %d", node->num_outputs);

    /* past the room for outputs: an error, and the tensor is left as it was */
    tl_tensor *extra = NULL;
    OK(tl_mul(x[0], x[1], &extra));
    CHECK(tl_node_set_output(node, PAIRS, extra) == TL_ERR_ARGUMENT &&
              strstr(tl_last_error(), "room for 64 outputs"),
          "output past the room: %s", tl_last_error());
    CHECK(!tl_requires_grad(extra) && node->num_outputs == PAIRS, "extra untouched");
    /* a slot never saved reads as empty, with the clear error */
    tl_tensor *none = NULL;
    CHECK(tl_node_saved(node, 500, &none) == TL_ERR_AUTOGRAD &&
              strstr(tl_last_error(), "saved tensor 501, which was not saved"),
          "unsaved slot: %s", tl_last_error());
    tl_node_release(node); /* the outputs hold it */

    /* only out[0] used: the other 63 outputs get zero gradients */
    int64_t one[1] = {1};
    tl_tensor *seed = NULL;
    OK(tl_ones(one, 1, TL_F64, TL_CPU, &seed));
    OK(tl_backward(out[0], seed, true));
    CHECK(value_of(tl_grad(x[0])) == PAIRS + 1 && value_of(tl_grad(x[PAIRS])) == 1,
          "out[0] gradients %g %g", value_of(tl_grad(x[0])), value_of(tl_grad(x[PAIRS])));
    CHECK(value_of(tl_grad(x[1])) == 0 && value_of(tl_grad(x[PAIRS + 1])) == 0,
          "unused outputs give zeros");
    for (int i = 0; i < INPUTS; i++) OK(tl_set_grad(x[i], NULL));

    /* loss = sum of every output: d/dx[o] = x[o + m], d/dx[o + m] = x[o] */
    tl_tensor *loss = tl_retain(out[0]);
    for (int o = 1; o < PAIRS; o++) {
        tl_tensor *sum = NULL;
        OK(tl_ag_add(loss, out[o], &sum));
        tl_release(loss);
        loss = sum;
    }
    OK(tl_backward(loss, NULL, false));
    int wrong = 0;
    for (int o = 0; o < PAIRS; o++) {
        if (value_of(tl_grad(x[o])) != o + PAIRS + 1) wrong++;
        if (value_of(tl_grad(x[o + PAIRS])) != o + 1) wrong++;
    }
    CHECK(wrong == 0, "%d of %d gradients wrong", wrong, INPUTS);
    /* without retain_graph the saved tensors are gone: a second pass says so */
    CHECK(tl_backward(out[3], seed, false) == TL_ERR_AUTOGRAD &&
              strstr(tl_last_error(), "second time"),
          "second pass: %s", tl_last_error());

    tl_release(loss), tl_release(seed), tl_release(extra);
    for (int o = 0; o < PAIRS; o++) tl_release(out[o]);
    for (int i = 0; i < INPUTS; i++) tl_release(x[i]);
}

static void test_default_room(void) {
    tl_tensor *x = scalar_leaf(2.0), *y[5];
    for (int o = 0; o < 5; o++) OK(tl_mul(x, x, &y[o]));
    tl_node *node = NULL, *empty = NULL;
    OK(tl_node_new("four", unused_backward, 1, &x, &node));
    for (int o = 0; o < TL_NODE_MAX_OUTPUTS; o++) OK(tl_node_set_output(node, o, y[o]));
    CHECK(tl_node_set_output(node, TL_NODE_MAX_OUTPUTS, y[4]) == TL_ERR_ARGUMENT,
          "tl_node_new has room for %d outputs", TL_NODE_MAX_OUTPUTS);
    CHECK(tl_node_set_output(node, -1, y[4]) == TL_ERR_ARGUMENT, "a negative index");
    /* saved slots far apart: the array grows, every slot in between reads as empty */
    OK(tl_node_save(node, 0, "self", x));
    OK(tl_node_save(node, 40, "self", x));
    tl_tensor *s = NULL;
    OK(tl_node_saved(node, 40, &s));
    CHECK(s && value_of(s) == 2.0, "slot 40 keeps x");
    CHECK(tl_node_saved(node, 39, &s) == TL_ERR_AUTOGRAD, "slot 39 is empty");
    CHECK(tl_node_saved(node, -1, &s) == TL_ERR_AUTOGRAD, "slot -1 is empty");
    CHECK(tl_node_save(node, -1, "self", x) == TL_ERR_ARGUMENT, "slot -1 refused");
    tl_node_release(node);
    OK(tl_node_new("none", unused_backward, 0, NULL, &empty));
    CHECK(empty && empty->num_inputs == 0, "a node without inputs");
    tl_node_release(empty);
    for (int o = 0; o < 5; o++) tl_release(y[o]);
    tl_release(x);
}

int main(void) {
    test_wide_node();
    test_default_room();
    if (failures)
        printf("%d failure(s)\n", failures);
    else
        printf("test_node_arity: all passed (%d checks)\n", checks);
    return failures != 0;
}
