/* dropout's autograd: the node keeps p and the mask's Philox stream, no tensor; backward runs the
   forward's kernel on the gradient with that stream, which draws the same mask again. */
#include "autograd/formula.h"
#include "tlua/nn.h"

/* Input: x. scalar[0]: p; ints[0], ints[1]: the stream's seed and counter (as stored bits). */
static tl_status dropout_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    if (!node->needs_input_grad[0]) return TL_OK;
    return tl_dropout_backward(g[0], node->scalar[0], (uint64_t)node->ints[0],
                               (uint64_t)node->ints[1], &gi[0]);
}

static void keep_stream(tl_node *node, double p, uint64_t seed, uint64_t counter) {
    node->scalar[0] = p;
    node->ints[0] = (int64_t)seed;
    node->ints[1] = (int64_t)counter;
}

tl_status tl_ag_dropout(tl_tensor *x, double p, tl_tensor **out) {
    uint64_t seed, counter;
    TL_TRY(tl_dropout(x, p, out, &seed, &counter));
    if (*out == x) return TL_OK; /* p = 0: x itself, as PyTorch returns it */
    tl_node *node;
    TL_TRY(tl_record("dropout", dropout_backward, 1, &x, out, &node));
    if (node) keep_stream(node, p, seed, counter);
    return TL_OK;
}

tl_status tl_ag_dropout_(tl_tensor *x, double p) {
    tl_node *node;
    TL_TRY(tl_inplace_begin("dropout_", dropout_backward, x, 0, NULL, &node));
    uint64_t seed = 0, counter = 0;
    tl_status status = tl_inplace_end(node, tl_dropout_(x, p, &seed, &counter), x);
    if (status == TL_OK && node) keep_stream(node, p, seed, counter);
    return status;
}
