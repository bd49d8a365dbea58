/* Recording grouped matrix products: one node over every group, whose backward runs only the
   grouped gradient ops needed (one grouped launch per direction); only what they read is saved. */
#include <stdlib.h>

#include "autograd/autocast.h"
#include "autograd/graph.h"

/* ---- grouped_matmul: inputs a[0..count) then b[0..count), outputs out[0..count) ------------
   Saved: slots 0..count-1 the a's (if some b needs its gradient), slots count..2count-1 the
   b's (if some a needs its gradient). */
static bool any_needed(const tl_node *node, int from, int count) {
    for (int i = from; i < from + count; i++)
        if (node->needs_input_grad[i]) return true;
    return false;
}

/* Loads count saved tensors from slot first on. */
static tl_status saved_list(tl_node *node, int first, int count, tl_tensor **out) {
    for (int i = 0; i < count; i++) TL_TRY(tl_node_saved(node, first + i, &out[i]));
    return TL_OK;
}

/* Keeps the needed gradients of one direction (grads[i] for input first + i), drops the rest. */
static void keep_needed(const tl_node *node, int first, int count, tl_tensor **grads,
                        tl_tensor **gi) {
    for (int i = 0; i < count; i++) {
        if (node->needs_input_grad[first + i])
            gi[first + i] = grads[i];
        else
            tl_release(grads[i]);
    }
}

static tl_status grouped_matmul_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    int count = node->num_outputs;
    tl_tensor **saved = calloc((size_t)count, sizeof *saved);
    tl_tensor **grads = calloc((size_t)count, sizeof *grads);
    tl_status status = saved && grads ? TL_OK : tl_error(TL_ERR_MEMORY, "backward: out of memory");
    if (status == TL_OK && any_needed(node, 0, count)) {
        status = saved_list(node, count, count, saved);
        if (status == TL_OK) status = tl_grouped_matmul_backward_input(count, g, saved, grads);
        if (status == TL_OK) keep_needed(node, 0, count, grads, gi);
    }
    if (status == TL_OK && any_needed(node, count, count)) {
        status = saved_list(node, 0, count, saved);
        if (status == TL_OK) status = tl_grouped_matmul_backward_other(count, g, saved, grads);
        if (status == TL_OK) keep_needed(node, count, count, grads, gi);
    }
    free(saved);
    free(grads);
    return status;
}

static tl_status record_grouped_matmul(int count, tl_tensor *const *a, tl_tensor *const *b,
                                       tl_tensor **out) {
    TL_TRY(tl_grouped_matmul(count, a, b, out));
    if (count == 0) return TL_OK;
    tl_tensor **inputs = malloc(sizeof *inputs * 2 * (size_t)count);
    tl_status status = inputs ? TL_OK : tl_error(TL_ERR_MEMORY, "grouped_matmul: out of memory");
    for (int i = 0; status == TL_OK && i < count; i++) inputs[i] = a[i], inputs[count + i] = b[i];
    bool floating = tl_dtype_is_floating(a[0]->dtype);
    if (status == TL_OK && (!floating || !tl_should_record(2 * count, inputs))) {
        for (int i = 0; i < count; i++) tl_mark_no_grad(2 * count, inputs, out[i]);
        free(inputs);
        return TL_OK;
    }
    tl_node *node = NULL;
    if (status == TL_OK)
        status = tl_node_new_multi("grouped_matmul", grouped_matmul_backward, 2 * count, inputs,
                                   count, &node);
    for (int i = 0; status == TL_OK && i < count; i++) status = tl_node_set_output(node, i, out[i]);
    bool save_a = status == TL_OK && any_needed(node, count, count);
    bool save_b = status == TL_OK && any_needed(node, 0, count);
    for (int i = 0; save_a && status == TL_OK && i < count; i++)
        status = tl_node_save(node, i, "As", a[i]);
    for (int i = 0; save_b && status == TL_OK && i < count; i++)
        status = tl_node_save(node, count + i, "Bs", b[i]);
    tl_node_release(node); /* the outputs hold it */
    free(inputs);
    if (status != TL_OK)
        for (int i = 0; i < count; i++) {
            tl_release(out[i]);
            out[i] = NULL;
        }
    return status;
}

tl_status tl_ag_grouped_matmul(int count, tl_tensor *const *a, tl_tensor *const *b,
                               tl_tensor **out) {
    if (count <= 0 || !tl_autocast_get().enabled || !a || !b)
        return record_grouped_matmul(count, a, b, out);
    tl_tensor **operands = malloc(sizeof *operands * 2 * (size_t)count);
    bool *casted = malloc(sizeof *casted * 2 * (size_t)count);
    tl_status status =
        operands && casted ? TL_OK : tl_error(TL_ERR_MEMORY, "grouped_matmul: out of memory");
    for (int i = 0; status == TL_OK && i < count; i++)
        operands[i] = a[i], operands[count + i] = b[i];
    if (status == TL_OK)
        status = tl_autocast_operands(TL_OP_grouped_matmul, operands, 2 * count, casted);
    if (status == TL_OK)
        status = tl_autocast_release(operands, 2 * count, casted,
                                     record_grouped_matmul(count, operands, operands + count, out));
    free(operands);
    free(casted);
    return status;
}

/* ---- grouped_mm: inputs a [T, K], b [G, K, N]; offsets are not differentiable ----------------
   Saved: slot 0 a (if b needs its gradient), slot 1 b (if a needs its gradient), slot 2 a copy
   of the offsets: on a's GPU where they are there, else int64 on the host (read once, in
   forward). */
enum { MM_A, MM_B };

static tl_status grouped_mm_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *offsets, *other;
    TL_TRY(tl_node_saved(node, 2, &offsets));
    if (node->needs_input_grad[MM_A]) {
        TL_TRY(tl_node_saved(node, 1, &other));
        TL_TRY(tl_grouped_mm_backward_input(g[0], other, offsets, &gi[MM_A]));
    }
    if (node->needs_input_grad[MM_B]) {
        TL_TRY(tl_node_saved(node, 0, &other));
        TL_TRY(tl_grouped_mm_backward_weight(g[0], other, offsets, &gi[MM_B]));
    }
    return TL_OK;
}

static tl_status record_grouped_mm(tl_tensor *a, tl_tensor *b, tl_tensor *offsets,
                                   tl_tensor **out) {
    tl_tensor *inputs[2] = {a, b};
    bool record = a && b && tl_dtype_is_floating(a->dtype) && tl_should_record(2, inputs);
    if (!record) {
        TL_TRY(tl_grouped_mm(a, b, offsets, out));
        tl_mark_no_grad(2, inputs, *out);
        return TL_OK;
    }
    /* backward reads the offsets twice: offsets on a's GPU are copied there (no wait: the GPU
       reads them), others read to the host once, here */
    tl_tensor *host = NULL;
    const bool integer = offsets && (offsets->dtype == TL_I32 || offsets->dtype == TL_I64);
    if (integer && tl_tensor_device(a).type == TL_DEVICE_CUDA &&
        tl_device_equal(tl_tensor_device(offsets), tl_tensor_device(a)))
        TL_TRY(tl_clone(offsets, &host));
    else if (integer)
        TL_TRY(tl_to(offsets, TL_I64, TL_CPU, &host));
    else
        host = tl_retain(offsets);
    tl_status status = tl_grouped_mm(a, b, host, out);
    tl_node *node = NULL;
    if (status == TL_OK) {
        status = tl_record("grouped_mm", grouped_mm_backward, 2, inputs, out, &node);
        if (status == TL_OK && node && node->needs_input_grad[MM_B])
            status = tl_record_save(node, 0, "A", a, out);
        if (status == TL_OK && node && node->needs_input_grad[MM_A])
            status = tl_record_save(node, 1, "B", b, out);
        if (status == TL_OK && node) status = tl_record_save(node, 2, "offsets", host, out);
    }
    tl_release(host);
    return status;
}

tl_status tl_ag_grouped_mm(tl_tensor *a, tl_tensor *b, tl_tensor *offsets, tl_tensor **out) {
    tl_tensor *operands[2] = {a, b};
    bool casted[2];
    TL_TRY(tl_autocast_operands(TL_OP_grouped_mm, operands, 2, casted));
    return tl_autocast_release(operands, 2, casted,
                               record_grouped_mm(operands[0], operands[1], offsets, out));
}
