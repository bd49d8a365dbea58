/* Recording scaled_dot_product_attention: one node; backward runs the backward kernel once for
   the gradients needed, redrawing the forward's dropout mask from its saved stream. */
#include "autograd/autocast.h"
#include "autograd/formula.h"
#include "ops/nn/nn_common.h"

/* Inputs: q, k, v. Saved (when any gradient is needed, as each reads them all): slots 0 .. 4 q,
   k, v, the output and lse. scalar[0]: scale as given (0: 1 / sqrt(D)), scalar[1]: dropout;
   ints[0]: causal, ints[1], ints[2]: the dropout stream's seed and counter. */
enum { ATT_Q, ATT_K, ATT_V };
enum { SAVED_Q, SAVED_K, SAVED_V, SAVED_OUT, SAVED_LSE, SAVED_COUNT };

static const char *const saved_names[SAVED_COUNT] = {"q", "k", "v", "result", "lse"};

static tl_status attention_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const bool *need = node->needs_input_grad;
    if (!need[ATT_Q] && !need[ATT_K] && !need[ATT_V]) return TL_OK;
    tl_tensor *saved[SAVED_COUNT];
    for (int i = 0; i < SAVED_COUNT; i++) TL_TRY(tl_node_saved(node, i, &saved[i]));
    tl_tensor *grad;
    TL_TRY(tl_cast(g[0], node->output_dtype[0], &grad));
    const tl_attention_options opts = {
        .scale = node->scalar[0], .causal = node->ints[0] != 0, .dropout = node->scalar[1]};
    tl_status status = tl_scaled_dot_product_attention_backward(
        grad, saved[SAVED_Q], saved[SAVED_K], saved[SAVED_V], saved[SAVED_OUT], saved[SAVED_LSE],
        &opts, (uint64_t)node->ints[1], (uint64_t)node->ints[2], need[ATT_Q] ? &gi[ATT_Q] : NULL,
        need[ATT_K] ? &gi[ATT_K] : NULL, need[ATT_V] ? &gi[ATT_V] : NULL);
    tl_release(grad);
    return status;
}

static tl_status record_attention(tl_tensor *q, tl_tensor *k, tl_tensor *v,
                                  const tl_attention_options *opts, tl_tensor **out) {
    tl_tensor *lse = NULL;
    uint64_t seed = 0, counter = 0;
    TL_TRY(tl_scaled_dot_product_attention_lse(q, k, v, opts, out, &lse, &seed, &counter));
    tl_node *node;
    tl_tensor *inputs[3] = {q, k, v};
    tl_status status =
        tl_record("scaled_dot_product_attention", attention_backward, 3, inputs, out, &node);
    if (status == TL_OK && node) {
        node->scalar[0] = opts ? opts->scale : 0;
        node->scalar[1] = opts ? opts->dropout : 0;
        node->ints[0] = opts && opts->causal;
        node->ints[1] = (int64_t)seed;
        node->ints[2] = (int64_t)counter;
        tl_tensor *const to_save[SAVED_COUNT] = {q, k, v, *out, lse};
        for (int i = 0; i < SAVED_COUNT && status == TL_OK; i++)
            status = tl_record_save(node, i, saved_names[i], to_save[i], out);
    }
    tl_release(lse);
    return status;
}

tl_status tl_ag_scaled_dot_product_attention(tl_tensor *q, tl_tensor *k, tl_tensor *v,
                                             const tl_attention_options *opts, tl_tensor **out) {
    tl_tensor *operands[3] = {q, k, v};
    bool casted[3];
    TL_TRY(tl_autocast_operands(TL_OP_scaled_dot_product_attention, operands, 3, casted));
    return tl_autocast_release(operands, 3, casted,
                               record_attention(operands[0], operands[1], operands[2], opts, out));
}
