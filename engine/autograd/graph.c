/* Graph bookkeeping: per-tensor autograd data, nodes, edges, saved tensors, grad mode. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/graph.h"
#include "core/storage.h"

static _Thread_local bool grad_disabled;
static uint64_t next_sequence;

bool tl_is_grad_enabled(void) {
    return !grad_disabled;
}

bool tl_set_grad_enabled(bool enabled) {
    bool previous = !grad_disabled;
    grad_disabled = !enabled;
    return previous;
}

/* ---- per-tensor data ----------------------------------------------------- */
static void meta_destroy(struct tl_autograd_meta *meta) {
    if (meta->ready_release) meta->ready_release(meta->ready_user);
    tl_grad_hooks_free(&meta->hooks);
    tl_release(meta->grad);
    tl_node_release(meta->grad_fn);
    free(meta);
}

struct tl_autograd_meta *tl_meta(tl_tensor *t) {
    if (!t->autograd) {
        t->autograd = calloc(1, sizeof *t->autograd);
        if (!t->autograd) return NULL;
        t->autograd_destroy = meta_destroy;
    }
    return t->autograd;
}

bool tl_requires_grad(const tl_tensor *t) {
    return t->autograd && t->autograd->requires_grad;
}

bool tl_is_leaf(const tl_tensor *t) {
    return !t->autograd || !t->autograd->grad_fn;
}

tl_tensor *tl_grad(const tl_tensor *t) {
    return t->autograd ? t->autograd->grad : NULL;
}

const char *tl_grad_fn_name(const tl_tensor *t) {
    return t->autograd && t->autograd->grad_fn ? t->autograd->grad_fn->name : NULL;
}

tl_status tl_set_requires_grad(tl_tensor *t, bool requires_grad) {
    if (!tl_is_leaf(t))
        return tl_error(TL_ERR_AUTOGRAD,
                        "requires_grad: can only be changed on a leaf tensor (this one was "
                        "computed by '%s'; use detach() to get a leaf)",
                        tl_grad_fn_name(t));
    if (requires_grad && !tl_dtype_is_floating(t->dtype))
        return tl_error(TL_ERR_DTYPE,
                        "requires_grad: only floating point tensors can require grad, got %s",
                        tl_dtype_name(t->dtype));
    if (!requires_grad && !t->autograd) return TL_OK;
    struct tl_autograd_meta *meta = tl_meta(t);
    if (!meta) return tl_error(TL_ERR_MEMORY, "requires_grad: out of memory");
    meta->requires_grad = requires_grad;
    meta->no_grad_reason = TL_NO_GRAD_INPUTS;
    meta->no_grad_op = NULL;
    return TL_OK;
}

tl_status tl_set_grad(tl_tensor *t, tl_tensor *grad) {
    if (grad) {
        char a[16], b[16], sa[256], sb[256];
        if (!tl_device_equal(tl_tensor_device(grad), tl_tensor_device(t)))
            return tl_error(TL_ERR_DEVICE, "grad: expected a gradient on %s, got one on %s",
                            tl_device_name(tl_tensor_device(t), a),
                            tl_device_name(tl_tensor_device(grad), b));
        if (grad->ndim != t->ndim ||
            memcmp(grad->shape, t->shape, (size_t)t->ndim * sizeof t->shape[0]) != 0)
            return tl_error(TL_ERR_SHAPE, "grad: expected a gradient of shape %s, got %s",
                            tl_shape_str(t, sa, sizeof sa), tl_shape_str(grad, sb, sizeof sb));
        if (grad->dtype != t->dtype)
            return tl_error(TL_ERR_DTYPE, "grad: expected a gradient of dtype %s, got %s",
                            tl_dtype_name(t->dtype), tl_dtype_name(grad->dtype));
    }
    if (!grad && !t->autograd) return TL_OK;
    struct tl_autograd_meta *meta = tl_meta(t);
    if (!meta) return tl_error(TL_ERR_MEMORY, "grad: out of memory");
    /* A gradient is data: keep an alias outside the graph, so that a gradient
       computed from t itself (t.grad = t * 2) cannot hold t through its node. */
    tl_tensor *kept = NULL;
    if (grad && grad->autograd)
        TL_TRY(tl_make_view(grad, grad->shape, grad->strides, grad->ndim, grad->offset, &kept));
    else
        kept = tl_retain(grad);
    tl_tensor *old = meta->grad;
    meta->grad = kept;
    tl_release(old);
    return TL_OK;
}

tl_status tl_set_grad_ready_hook(tl_tensor *t, tl_grad_ready_fn fn, void *user,
                                 tl_grad_ready_release release) {
    if (!t) {
        if (release) release(user);
        return tl_error(TL_ERR_ARGUMENT, "grad_ready_hook: expected a tensor, got NULL");
    }
    if (fn && !tl_is_leaf(t)) {
        if (release) release(user);
        return tl_error(TL_ERR_AUTOGRAD,
                        "grad_ready_hook: the tensor is not a leaf (it was computed by '%s'); "
                        "hooks go on leaves, whose grad backward accumulates",
                        tl_grad_fn_name(t));
    }
    if (!fn && !t->autograd) { /* no hook to remove; the user given is released all the same */
        if (release) release(user);
        return TL_OK;
    }
    struct tl_autograd_meta *meta = tl_meta(t);
    if (!meta) {
        if (release) release(user);
        return tl_error(TL_ERR_MEMORY, "grad_ready_hook: out of memory");
    }
    if (meta->ready_release) meta->ready_release(meta->ready_user);
    meta->ready_fn = fn;
    meta->ready_user = fn ? user : NULL;
    meta->ready_release = fn ? release : NULL;
    if (!fn && release) release(user);
    return TL_OK;
}

tl_status tl_detach(tl_tensor *t, tl_tensor **out) {
    tl_tensor *alias;
    TL_TRY(tl_make_view(t, t->shape, t->strides, t->ndim, t->offset, &alias));
    if (tl_requires_grad(t)) {
        struct tl_autograd_meta *meta = tl_meta(alias);
        if (!meta) {
            tl_release(alias);
            return tl_error(TL_ERR_MEMORY, "detach: out of memory");
        }
        meta->no_grad_reason = TL_NO_GRAD_DETACHED;
    }
    *out = alias;
    return TL_OK;
}

/* ---- nodes ----------------------------------------------------------------- */
bool tl_should_record(int count, tl_tensor *const *inputs) {
    if (grad_disabled) return false;
    for (int i = 0; i < count; i++)
        if (inputs[i] && tl_requires_grad(inputs[i])) return true;
    return false;
}

/* Why out, computed from inputs without recording, has no gradient: grad mode was off (an
   input required grad), or a reason an input carries (detached, no_grad, or the custom op none
   of whose inputs required grad), or, for the output of the op named op, that op. */
static void mark_no_grad(const char *op, int count, tl_tensor *const *inputs, tl_tensor *out) {
    for (int i = 0; i < count; i++) {
        if (inputs[i] && tl_requires_grad(inputs[i])) {
            struct tl_autograd_meta *meta = tl_meta(out); /* grad mode is off */
            if (meta) meta->no_grad_reason = TL_NO_GRAD_DISABLED, meta->no_grad_op = NULL;
            return;
        }
    }
    /* carry a "detached" or "no_grad" reason through ops on such tensors; then the name of
       a custom op whose inputs did not require grad (an op of its own names itself) */
    const struct tl_autograd_meta *from = NULL;
    for (int i = 0; i < count && !from; i++)
        if (inputs[i] && inputs[i]->autograd &&
            inputs[i]->autograd->no_grad_reason != TL_NO_GRAD_INPUTS)
            from = inputs[i]->autograd;
    for (int i = 0; i < count && !from && !op; i++)
        if (inputs[i] && inputs[i]->autograd && inputs[i]->autograd->no_grad_op)
            from = inputs[i]->autograd;
    if (!from && !op) return;
    struct tl_autograd_meta *meta = tl_meta(out);
    if (!meta) return;
    if (from) {
        meta->no_grad_reason = from->no_grad_reason;
        meta->no_grad_op = from->no_grad_op;
        meta->no_grad_from = true;
    } else {
        meta->no_grad_reason = TL_NO_GRAD_INPUTS;
        meta->no_grad_op = op;
        meta->no_grad_from = false;
    }
}

void tl_mark_no_grad(int count, tl_tensor *const *inputs, tl_tensor *out) {
    mark_no_grad(NULL, count, inputs, out);
}

void tl_mark_no_grad_by(const char *op, int count, tl_tensor *const *inputs, tl_tensor *out) {
    mark_no_grad(op, count, inputs, out);
}

/* One block holds the node and its per-input and per-output arrays; each array starts at an
   offset aligned for any type. */
static size_t block_align(size_t n) {
    size_t a = _Alignof(max_align_t);
    return (n + a - 1) / a * a;
}

/* The offset of an array of `bytes` in a block laid out up to *end, which moves past it. */
static size_t place(size_t *end, size_t bytes) {
    const size_t offset = *end;
    *end = block_align(offset + bytes);
    return offset;
}

static tl_node *node_alloc(int num_inputs, int num_outputs) {
    const size_t ni = (size_t)num_inputs, no = (size_t)num_outputs;
    size_t at = block_align(sizeof(tl_node));
    const size_t o_inputs = place(&at, ni * sizeof(tl_edge));
    const size_t o_needs = place(&at, ni * sizeof(bool));
    const size_t o_indim = place(&at, ni * sizeof(int));
    const size_t o_inshape = place(&at, ni * sizeof(int64_t[TL_MAX_DIMS]));
    const size_t o_indtype = place(&at, ni * sizeof(tl_dtype));
    const size_t o_indevice = place(&at, ni * sizeof(tl_device));
    const size_t o_outdim = place(&at, no * sizeof(int));
    const size_t o_outshape = place(&at, no * sizeof(int64_t[TL_MAX_DIMS]));
    const size_t o_outdtype = place(&at, no * sizeof(tl_dtype));
    char *block = calloc(1, at);
    if (!block) return NULL;
    tl_node *node = (tl_node *)block;
    node->inputs = (tl_edge *)(block + o_inputs);
    node->needs_input_grad = (bool *)(block + o_needs);
    node->input_ndim = (int *)(block + o_indim);
    node->input_shape = (int64_t(*)[TL_MAX_DIMS])(block + o_inshape);
    node->input_dtype = (tl_dtype *)(block + o_indtype);
    node->input_device = (tl_device *)(block + o_indevice);
    node->output_ndim = (int *)(block + o_outdim);
    node->output_shape = (int64_t(*)[TL_MAX_DIMS])(block + o_outshape);
    node->output_dtype = (tl_dtype *)(block + o_outdtype);
    node->output_capacity = num_outputs;
    node->saved = node->saved_inline;
    node->num_saved = TL_NODE_INLINE_SAVED;
    return node;
}

tl_status tl_node_new(const char *name, tl_backward_fn backward, int num_inputs,
                      tl_tensor *const *inputs, tl_node **out) {
    return tl_node_new_multi(name, backward, num_inputs, inputs, TL_NODE_MAX_OUTPUTS, out);
}

tl_status tl_node_new_multi(const char *name, tl_backward_fn backward, int num_inputs,
                            tl_tensor *const *inputs, int num_outputs, tl_node **out) {
    if (num_inputs < 0 || num_inputs > TL_NODE_MAX_ARITY || num_outputs < 0 ||
        num_outputs > TL_NODE_MAX_ARITY)
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: a graph node takes 0 to %d inputs and outputs, got %d inputs and %d "
                        "outputs",
                        name, TL_NODE_MAX_ARITY, num_inputs, num_outputs);
    tl_node *node = node_alloc(num_inputs, num_outputs);
    if (!node) return tl_error(TL_ERR_MEMORY, "%s: out of memory recording the graph", name);
    node->refcount = 1;
    node->name = name;
    node->backward = backward;
    node->sequence = ++next_sequence;
    node->num_inputs = num_inputs;
    for (int i = 0; i < num_inputs; i++) {
        tl_tensor *t = inputs[i];
        if (!t) continue;
        node->input_ndim[i] = t->ndim;
        memcpy(node->input_shape[i], t->shape, sizeof node->input_shape[i]);
        node->input_dtype[i] = t->dtype;
        node->input_device[i] = tl_tensor_device(t);
        if (!tl_requires_grad(t)) continue;
        tl_node *producer = t->autograd->grad_fn;
        if (producer && producer->is_view && producer->view_version != t->storage->version &&
            producer->inputs[0].node) {
            tl_node_release(node);
            return tl_error(TL_ERR_AUTOGRAD,
                            "%s: input %d is a view (made by '%s') of a tensor that was changed in "
                            "place after the view was taken, so its gradient would go to the old "
                            "values; take the view again after the in-place op",
                            name, i + 1, producer->name);
        }
        node->needs_input_grad[i] = true;
        if (producer) {
            producer->refcount++;
            node->inputs[i].node = producer;
            node->inputs[i].output_nr = t->autograd->output_nr;
        } else {
            node->inputs[i].leaf = tl_retain(t);
        }
    }
    *out = node;
    return TL_OK;
}

void tl_node_free_saved(tl_node *node) {
    tl_saved *saved = node->saved;
    int count = node->num_saved;
    node->saved = node->saved_inline;
    node->num_saved = TL_NODE_INLINE_SAVED;
    for (int i = 0; i < count; i++) tl_release(saved[i].tensor);
    if (saved != node->saved_inline) free(saved);
    memset(node->saved_inline, 0, sizeof node->saved_inline);
    /* a custom node's callback state is its saved state */
    tl_custom_release release = node->custom_release;
    node->custom_release = NULL;
    if (release) release(node->custom_user);
    node->custom_user = NULL;
}

void tl_node_release(tl_node *node) {
    /* iterative over chains of last references, so deep graphs do not
       overflow the C stack */
    while (node && --node->refcount == 0) {
        tl_node_free_saved(node);
        tl_grad_hooks_free(&node->hooks);
        tl_node *next = NULL;
        for (int i = 0; i < node->num_inputs; i++) {
            tl_release(node->inputs[i].leaf);
            tl_node *input = node->inputs[i].node;
            if (!input) continue;
            if (!next)
                next = input;
            else
                tl_node_release(input);
        }
        free(node);
        node = next;
    }
}

/* Where t, saved by node, comes from (tl_saved's origin): one of the node's outputs, or one of
   its inputs that requires grad (the leaf itself, or a tensor of the same producer and output). */
static int origin_of(const tl_node *node, const tl_tensor *t) {
    const struct tl_autograd_meta *meta = t->autograd;
    if (meta && meta->grad_fn == node) return -(meta->output_nr + 1);
    for (int i = 0; i < node->num_inputs; i++) {
        const tl_edge *edge = &node->inputs[i];
        if (!node->needs_input_grad[i]) continue;
        if (edge->leaf == t) return i + 1;
        if (edge->node && meta && meta->grad_fn == edge->node && meta->output_nr == edge->output_nr)
            return i + 1;
    }
    return 0;
}

tl_status tl_node_save(tl_node *node, int slot, const char *what, tl_tensor *t) {
    if (slot < 0 || slot >= TL_NODE_MAX_ARITY * 4)
        return tl_error(TL_ERR_ARGUMENT, "%s: saved slot %d out of range (0 to %d)", node->name,
                        slot, TL_NODE_MAX_ARITY * 4 - 1);
    if (slot >= node->num_saved) {
        int capacity = node->num_saved * 2;
        while (capacity <= slot) capacity *= 2;
        bool on_heap = node->saved != node->saved_inline;
        tl_saved *grown = on_heap ? realloc(node->saved, sizeof *grown * (size_t)capacity)
                                  : malloc(sizeof *grown * (size_t)capacity);
        if (!grown) return tl_error(TL_ERR_MEMORY, "%s: out of memory saving a tensor", node->name);
        if (!on_heap) memcpy(grown, node->saved_inline, sizeof node->saved_inline);
        memset(grown + node->num_saved, 0, sizeof *grown * (size_t)(capacity - node->num_saved));
        node->saved = grown;
        node->num_saved = capacity;
    }
    tl_tensor *alias;
    TL_TRY(tl_make_view(t, t->shape, t->strides, t->ndim, t->offset, &alias));
    tl_release(node->saved[slot].tensor);
    node->saved[slot] = (tl_saved){.tensor = alias,
                                   .version = t->storage->version,
                                   .what = what,
                                   .origin = origin_of(node, t)};
    return TL_OK;
}

tl_status tl_node_saved_attached(tl_node *node, int slot, tl_tensor **out) {
    tl_tensor *saved;
    TL_TRY(tl_node_saved(node, slot, &saved));
    int origin = node->saved[slot].origin;
    tl_node *producer = NULL;
    int output_nr = 0;
    if (origin > 0) {
        const tl_edge *edge = &node->inputs[origin - 1];
        if (edge->leaf) { /* the leaf itself: its storage still holds the saved version */
            *out = tl_retain(edge->leaf);
            return TL_OK;
        }
        producer = edge->node, output_nr = edge->output_nr;
    } else if (origin < 0) {
        producer = node, output_nr = -origin - 1;
    }
    tl_tensor *alias;
    TL_TRY(tl_make_view(saved, saved->shape, saved->strides, saved->ndim, saved->offset, &alias));
    if (producer) {
        struct tl_autograd_meta *meta = tl_meta(alias);
        if (!meta) {
            tl_release(alias);
            return tl_error(TL_ERR_MEMORY, "%s: out of memory recording the graph", node->name);
        }
        producer->refcount++;
        meta->grad_fn = producer;
        meta->output_nr = output_nr;
        meta->requires_grad = true;
    }
    *out = alias;
    return TL_OK;
}

tl_status tl_node_saved(tl_node *node, int slot, tl_tensor **out) {
    tl_saved *s = slot >= 0 && slot < node->num_saved ? &node->saved[slot] : NULL;
    if (node->released)
        return tl_error(TL_ERR_AUTOGRAD,
                        "backward: trying to go through the graph of '%s' a second time (its "
                        "saved tensors were freed); pass retain_graph = true to the first backward",
                        node->name);
    if (!s || !s->tensor)
        return tl_error(
            TL_ERR_AUTOGRAD,
            "backward: '%s' needs its saved tensor %d, which was not saved (an internal "
            "error: the gradient it is asked for was not needed when recorded)",
            node->name, slot + 1);
    if (s->tensor->storage->version != s->version)
        return tl_error(TL_ERR_AUTOGRAD,
                        "backward: a tensor saved by '%s' (%s) was modified in place after it was "
                        "saved (version %llu, now %llu); clone it before changing it",
                        node->name, s->what, (unsigned long long)s->version,
                        (unsigned long long)s->tensor->storage->version);
    *out = s->tensor;
    return TL_OK;
}

tl_status tl_node_set_output(tl_node *node, int index, tl_tensor *t) {
    if (index < 0 || index >= node->output_capacity)
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: output %d is past the node's room for %d outputs (an internal "
                        "error: make the node with tl_node_new_multi)",
                        node->name, index + 1, node->output_capacity);
    struct tl_autograd_meta *meta = tl_meta(t);
    if (!meta) return tl_error(TL_ERR_MEMORY, "%s: out of memory recording the graph", node->name);
    node->refcount++;
    tl_node_release(meta->grad_fn);
    meta->grad_fn = node;
    meta->output_nr = index;
    meta->requires_grad = true;
    node->output_ndim[index] = t->ndim;
    memcpy(node->output_shape[index], t->shape, sizeof node->output_shape[index]);
    node->output_dtype[index] = t->dtype;
    if (index >= node->num_outputs) node->num_outputs = index + 1;
    return TL_OK;
}

tl_status tl_record(const char *name, tl_backward_fn backward, int num_inputs,
                    tl_tensor *const *inputs, tl_tensor **out_ref, tl_node **node) {
    *node = NULL;
    tl_tensor *out = *out_ref;
    /* only floating results carry gradients (a cast to int64 ends the graph) */
    if (!tl_dtype_is_floating(out->dtype) || !tl_should_record(num_inputs, inputs)) {
        tl_mark_no_grad(num_inputs, inputs, out);
        return TL_OK;
    }
    tl_node *n;
    tl_status status = tl_node_new(name, backward, num_inputs, inputs, &n);
    if (status == TL_OK) {
        status = tl_node_set_output(n, 0, out);
        tl_node_release(n); /* out holds it now (or it is freed on failure) */
    }
    if (status != TL_OK) {
        tl_release(out);
        *out_ref = NULL;
        return status;
    }
    *node = n;
    return TL_OK;
}

tl_status tl_record_save(tl_node *node, int slot, const char *what, tl_tensor *t, tl_tensor **out) {
    tl_status status = tl_node_save(node, slot, what, t);
    if (status != TL_OK) {
        tl_release(*out);
        *out = NULL;
    }
    return status;
}
