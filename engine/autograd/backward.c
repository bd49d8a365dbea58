/* The backward engine: orders the graph, runs each node once, accumulates gradients. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/graph.h"

/* One node of a backward pass and the gradients pending for its outputs: in the entry for a
   node of up to TL_NODE_MAX_OUTPUTS outputs, else num_outputs of them on the heap, allocated
   when the first arrives (entries move while the pass is collected and sorted: take the
   pointer from entry_grads, never keep it). */
typedef struct pass_entry {
    tl_node *node;
    tl_tensor *few[TL_NODE_MAX_OUTPUTS];
    tl_tensor **many;
} pass_entry;

/* A leaf this pass follows (a grad-ready hook, gradient hooks or a gradient to capture) and how
   many edges of this pass still bring it a gradient; sum gathers them when the leaf's whole
   gradient is wanted at once (gradient hooks, a capture). */
typedef struct hooked_leaf {
    tl_tensor *leaf;
    int pending;
    bool gathers;
    tl_tensor *sum;
} hooked_leaf;

/* An input of tl_autograd_grad and the gradient gathered for it (NULL while none came). */
typedef struct capture {
    tl_tensor *input;
    tl_tensor *grad;
} capture;

/* The state of one backward pass, owned by that pass alone: a backward started
   while another runs (from a custom function's backward) has its own, so the
   two never see each other's bookkeeping. index maps a node to its entry
   (open addressing on the node's address; slots hold entry + 1, 0 is empty). */
typedef struct pass {
    pass_entry *entries;
    int count, capacity;
    int *index;
    size_t index_size;    /* a power of two, > 2 * capacity */
    tl_tensor **grads_in; /* room for the widest node's input gradients */
    int grads_in_capacity;
    hooked_leaf *hooked; /* leaves followed, and their edges still to run */
    int hooked_count, hooked_capacity;
    capture *captures; /* tl_autograd_grad's inputs (NULL for tl_backward) */
    int capture_count;
    bool create_graph; /* the gradients are recorded: differentiable formulas, recording sums */
} pass;

static size_t slot_of(const pass *p, const tl_node *node) {
    uintptr_t h = (uintptr_t)node;
    h ^= h >> 17;
    h *= (uintptr_t)0x9E3779B97F4A7C15u;
    return (size_t)(h ^ (h >> 29)) & (p->index_size - 1);
}

/* The entry of node in this pass, or -1. */
static int entry_of(const pass *p, const tl_node *node) {
    if (!p->index_size) return -1;
    for (size_t s = slot_of(p, node);; s = (s + 1) & (p->index_size - 1)) {
        int e = p->index[s];
        if (e == 0) return -1;
        if (p->entries[e - 1].node == node) return e - 1;
    }
}

static void index_insert(pass *p, int entry) {
    size_t s = slot_of(p, p->entries[entry].node);
    while (p->index[s]) s = (s + 1) & (p->index_size - 1);
    p->index[s] = entry + 1;
}

static void rebuild_index(pass *p) {
    memset(p->index, 0, sizeof *p->index * p->index_size);
    for (int e = 0; e < p->count; e++) index_insert(p, e);
}

static tl_status pass_add(pass *p, tl_node *node) {
    if (p->count == p->capacity) {
        int capacity = p->capacity ? p->capacity * 2 : 64;
        size_t index_size = (size_t)capacity * 4;
        pass_entry *grown = realloc(p->entries, sizeof *grown * (size_t)capacity);
        if (!grown) return tl_error(TL_ERR_MEMORY, "backward: out of memory");
        p->entries = grown;
        int *index = malloc(sizeof *index * index_size);
        if (!index) return tl_error(TL_ERR_MEMORY, "backward: out of memory");
        free(p->index);
        p->index = index;
        p->index_size = index_size;
        p->capacity = capacity;
        rebuild_index(p);
    }
    p->entries[p->count] = (pass_entry){.node = node};
    index_insert(p, p->count++);
    return TL_OK;
}

/* The pending gradients of entry e (all NULL at first). */
static tl_status entry_grads(pass_entry *e, tl_tensor ***out) {
    int n = e->node->num_outputs;
    if (n <= TL_NODE_MAX_OUTPUTS) {
        *out = e->few;
        return TL_OK;
    }
    if (!e->many && !(e->many = calloc((size_t)n, sizeof *e->many)))
        return tl_error(TL_ERR_MEMORY, "backward: out of memory");
    *out = e->many;
    return TL_OK;
}

/* Releases the pending gradients of entry e. */
static void entry_clear(pass_entry *e) {
    int n = e->node->num_outputs;
    tl_tensor **grads = n <= TL_NODE_MAX_OUTPUTS ? e->few : e->many;
    if (!grads) return;
    for (int o = 0; o < n; o++) {
        tl_release(grads[o]);
        grads[o] = NULL;
    }
    if (grads == e->many) {
        free(e->many);
        e->many = NULL;
    }
}

/* Room for n input gradients, all NULL. */
static tl_status pass_grads_in(pass *p, int n, tl_tensor ***out) {
    if (n > p->grads_in_capacity) {
        tl_tensor **grown = realloc(p->grads_in, sizeof *grown * (size_t)n);
        if (!grown) return tl_error(TL_ERR_MEMORY, "backward: out of memory");
        p->grads_in = grown;
        p->grads_in_capacity = n;
    }
    if (n) memset(p->grads_in, 0, sizeof *p->grads_in * (size_t)n);
    *out = p->grads_in;
    return TL_OK;
}

static bool has_ready_hook(const tl_tensor *leaf) {
    return leaf && leaf->autograd && leaf->autograd->ready_fn;
}

static bool has_grad_hooks(const tl_tensor *leaf) {
    return leaf && leaf->autograd && leaf->autograd->hooks.count > 0;
}

/* The capture of t in this pass, or -1. */
static int capture_of(const pass *p, const tl_tensor *t) {
    for (int i = 0; i < p->capture_count; i++)
        if (p->captures[i].input == t) return i;
    return -1;
}

/* Whether this pass follows leaf's edges, and whether it gathers its gradient first. */
static bool follows(const pass *p, const tl_tensor *leaf, bool *gathers) {
    *gathers = has_grad_hooks(leaf) || (p->captures && capture_of(p, leaf) >= 0);
    return *gathers || (!p->captures && has_ready_hook(leaf));
}

/* The entry of a followed leaf, or -1. Few leaves are followed (a model's parameters under
   data-parallel training), and each is looked up once per edge: a scan is enough. */
static int hooked_of(const pass *p, const tl_tensor *leaf) {
    for (int i = 0; i < p->hooked_count; i++)
        if (p->hooked[i].leaf == leaf) return i;
    return -1;
}

/* Counts one more edge of this pass into leaf (which the pass follows). */
static tl_status count_hooked_edge(pass *p, tl_tensor *leaf, bool gathers) {
    int i = hooked_of(p, leaf);
    if (i >= 0) {
        p->hooked[i].pending++;
        return TL_OK;
    }
    if (p->hooked_count == p->hooked_capacity) {
        int capacity = p->hooked_capacity ? p->hooked_capacity * 2 : 32;
        hooked_leaf *grown = realloc(p->hooked, sizeof *grown * (size_t)capacity);
        if (!grown) return tl_error(TL_ERR_MEMORY, "backward: out of memory");
        p->hooked = grown;
        p->hooked_capacity = capacity;
    }
    p->hooked[p->hooked_count++] = (hooked_leaf){.leaf = leaf, .pending = 1, .gathers = gathers};
    return TL_OK;
}

/* *slot += grad (takes grad's reference); recorded in a pass that creates a graph. */
static tl_status accumulate(const pass *p, tl_tensor **slot, tl_tensor *grad) {
    if (!*slot) {
        *slot = grad;
        return TL_OK;
    }
    tl_tensor *sum;
    tl_status status = p->create_graph ? tl_ag_add(*slot, grad, &sum) : tl_add(*slot, grad, &sum);
    tl_release(grad);
    if (status != TL_OK) return status;
    tl_release(*slot);
    *slot = sum;
    return TL_OK;
}

static tl_status accumulate_leaf(tl_tensor *leaf, tl_tensor *grad);

/* A gathered leaf's whole gradient for the pass (sum, taken; may be NULL): its gradient hooks
   run on it, then it goes to the leaf's capture (tl_autograd_grad) or into its grad. */
static tl_status leaf_gathered(pass *p, tl_tensor *leaf, tl_tensor *sum) {
    tl_status status = TL_OK;
    if (sum && has_grad_hooks(leaf)) status = tl_grad_hooks_run(&leaf->autograd->hooks, -1, &sum);
    if (status != TL_OK || !sum) return status;
    if (p->captures) {
        int c = capture_of(p, leaf);
        if (c >= 0) return accumulate(p, &p->captures[c].grad, sum);
        tl_release(sum);
        return TL_OK;
    }
    return accumulate_leaf(leaf, sum);
}

/* One edge into a followed leaf has run (its gradient g, taken, may be NULL): a gathering leaf
   adds it to its sum; the last edge hands the sum on and calls the leaf's grad-ready hook. */
static tl_status edge_done(pass *p, tl_tensor *leaf, tl_tensor *g) {
    int i = hooked_of(p, leaf);
    if (i < 0) {
        tl_release(g);
        return TL_OK;
    }
    hooked_leaf *h = &p->hooked[i];
    tl_status status = TL_OK;
    if (g && h->gathers)
        status = accumulate(p, &h->sum, g);
    else if (g)
        status = accumulate_leaf(leaf, g);
    if (status != TL_OK || --h->pending > 0) return status;
    if (h->gathers) {
        tl_tensor *sum = h->sum;
        h->sum = NULL;
        status = leaf_gathered(p, leaf, sum);
    }
    struct tl_autograd_meta *meta = leaf->autograd;
    if (status == TL_OK && !p->captures && has_ready_hook(leaf))
        status = meta->ready_fn(meta->ready_user, leaf);
    return status;
}

/* Collects every node reachable from the roots (each once), and counts the edges into the
   leaves the pass follows. */
static tl_status collect(pass *p, int count, tl_node *const *roots) {
    for (int r = 0; r < count; r++)
        if (roots[r] && entry_of(p, roots[r]) < 0) TL_TRY(pass_add(p, roots[r]));
    /* entries double as the work list: scan them as they are appended */
    for (int next = 0; next < p->count; next++) {
        tl_node *node = p->entries[next].node;
        for (int i = 0; i < node->num_inputs; i++) {
            tl_node *input = node->inputs[i].node;
            if (input && entry_of(p, input) < 0) TL_TRY(pass_add(p, input));
            tl_tensor *leaf = node->inputs[i].leaf;
            bool gathers;
            if (!input && node->needs_input_grad[i] && follows(p, leaf, &gathers))
                TL_TRY(count_hooked_edge(p, leaf, gathers));
        }
    }
    return TL_OK;
}

/* Later-created nodes first: a node is always created after the nodes of its
   inputs, so this is a valid order for backward. */
static int by_sequence_descending(const void *a, const void *b) {
    uint64_t sa = ((const pass_entry *)a)->node->sequence;
    uint64_t sb = ((const pass_entry *)b)->node->sequence;
    return sa < sb ? 1 : sa > sb ? -1 : 0;
}

/* A gradient reaching output `output_nr` of node in that output's dtype: a node's inputs may
   have another dtype than its outputs (a bfloat16 product added to a float32 bias gives the
   product a float32 gradient), and each backward formula expects its outputs' dtype. Casts *g in
   place of the reference it holds; on failure *g is released and NULL. */
static tl_status in_output_dtype(const pass *p, const tl_node *node, int output_nr, tl_tensor **g) {
    tl_dtype want = node->output_dtype[output_nr];
    if ((*g)->dtype == want) return TL_OK;
    tl_tensor *cast = NULL;
    tl_status status = p->create_graph ? tl_ag_cast(*g, want, &cast) : tl_cast(*g, want, &cast);
    tl_release(*g);
    *g = cast;
    return status;
}

/* Adds grad into leaf.grad, in the leaf's dtype: in place into a contiguous grad (a view of a
   larger buffer stays one), else as a tensor of its own. */
static tl_status accumulate_leaf(tl_tensor *leaf, tl_tensor *grad) {
    tl_tensor *g = grad;
    tl_status status = TL_OK;
    if (g->dtype != leaf->dtype) {
        status = tl_cast(grad, leaf->dtype, &g);
        tl_release(grad);
        if (status != TL_OK) return status;
    }
    struct tl_autograd_meta *meta = tl_meta(leaf);
    if (!meta) {
        tl_release(g);
        return tl_error(TL_ERR_MEMORY, "backward: out of memory");
    }
    if (meta->grad && tl_is_contiguous(meta->grad)) {
        status = tl_add_(meta->grad, g);
        tl_release(g);
        return status;
    }
    if (meta->grad) {
        tl_tensor *sum;
        status = tl_add(meta->grad, g, &sum);
        tl_release(g);
        if (status != TL_OK) return status;
        tl_release(meta->grad);
        meta->grad = sum;
        return TL_OK;
    }
    /* keep a private, dense copy unless g is already one nobody else holds */
    if (g->refcount > 1 || !tl_is_contiguous(g) || g->storage->refcount > 1 ||
        tl_numel(g) != (int64_t)(g->storage->nbytes / tl_dtype_size(g->dtype))) {
        tl_tensor *copy;
        status = tl_clone(g, &copy);
        tl_release(g);
        if (status != TL_OK) return status;
        g = copy;
    }
    meta->grad = g;
    return TL_OK;
}

static tl_status no_grad_error(const tl_tensor *t) {
    const struct tl_autograd_meta *meta = t->autograd;
    tl_no_grad_reason reason = meta ? meta->no_grad_reason : TL_NO_GRAD_INPUTS;
    const char *why;
    switch (reason) {
    case TL_NO_GRAD_DISABLED:
        why = "it was computed while gradients were disabled (inside no_grad)";
        break;
    case TL_NO_GRAD_DETACHED:
        why = "it was detached from the graph (detach())";
        break;
    default:
        if (meta && meta->no_grad_op)
            return tl_error(TL_ERR_AUTOGRAD,
                            "backward: the tensor does not require grad: it was computed %s'%s', "
                            "none of whose inputs required grad (set requires_grad = true on the "
                            "leaves to differentiate)",
                            meta->no_grad_from ? "from a result of " : "by ", meta->no_grad_op);
        why = "neither it nor any input it was computed from requires grad (set "
              "requires_grad = true on the leaves to differentiate)";
    }
    return tl_error(TL_ERR_AUTOGRAD, "backward: the tensor does not require grad: %s", why);
}

/* The gradient backward starts root from: grad cast to root's dtype (root's shape and device),
   or ones for a one-element root when grad is NULL. who names the caller in errors. */
static tl_status make_seed(const char *who, tl_tensor *root, tl_tensor *grad, tl_tensor **seed) {
    char sa[256], sb[256];
    if (grad) {
        if (grad->ndim != root->ndim ||
            memcmp(grad->shape, root->shape, sizeof root->shape[0] * (size_t)root->ndim) != 0)
            return tl_error(TL_ERR_SHAPE, "%s: grad has shape %s but the tensor has %s", who,
                            tl_shape_str(grad, sb, sizeof sb), tl_shape_str(root, sa, sizeof sa));
        if (!tl_device_equal(tl_tensor_device(grad), tl_tensor_device(root)))
            return tl_error(TL_ERR_DEVICE, "%s: grad is on another device than the tensor", who);
        return tl_cast(grad, root->dtype, seed);
    }
    if (tl_numel(root) != 1)
        return tl_error(TL_ERR_SHAPE,
                        "%s: grad can be omitted only for a one-element tensor, got shape %s "
                        "(pass the gradient of the loss with respect to it)",
                        who, tl_shape_str(root, sa, sizeof sa));
    return tl_ones(root->shape, root->ndim, root->dtype, tl_tensor_device(root), seed);
}

static bool node_captured(const pass *p, const tl_node *node) {
    for (int c = 0; c < p->capture_count; c++) {
        const tl_tensor *t = p->captures[c].input;
        if (t->autograd && t->autograd->grad_fn == node) return true;
    }
    return false;
}

/* Which entries (sorted, later nodes first) lead to a capture: a node whose gradients reach a
   captured leaf, the node of a captured non-leaf, or a node that leads to one. */
static tl_status mark_needed(const pass *p, bool **out) {
    bool *needed = calloc((size_t)(p->count ? p->count : 1), sizeof *needed);
    if (!needed) return tl_error(TL_ERR_MEMORY, "autograd.grad: out of memory");
    for (int n = p->count - 1; n >= 0; n--) { /* inputs' nodes come later in the order */
        const tl_node *node = p->entries[n].node;
        for (int i = 0; i < node->num_inputs && !needed[n]; i++) {
            const tl_edge *edge = &node->inputs[i];
            if (!node->needs_input_grad[i]) continue;
            if (edge->node)
                needed[n] = needed[entry_of(p, edge->node)] || node_captured(p, edge->node);
            else
                needed[n] = edge->leaf && capture_of(p, edge->leaf) >= 0;
        }
    }
    *out = needed;
    return TL_OK;
}

/* Hands a node's gradient g for input i on (takes g): to the pending gradients of the node
   that made it, to a followed leaf, or into a leaf's grad (dropped by tl_autograd_grad). */
static tl_status pass_on(pass *p, tl_node *node, int i, tl_tensor *g) {
    tl_edge *edge = &node->inputs[i];
    if (!node->needs_input_grad[i]) {
        tl_release(g);
        return TL_OK;
    }
    if (edge->node) {
        tl_tensor **pending = NULL;
        tl_status status = entry_grads(&p->entries[entry_of(p, edge->node)], &pending);
        if (status == TL_OK) status = in_output_dtype(p, edge->node, edge->output_nr, &g);
        if (status != TL_OK) {
            tl_release(g);
            return status;
        }
        return accumulate(p, &pending[edge->output_nr], g);
    }
    if (!edge->leaf) {
        tl_release(g);
        return TL_OK;
    }
    if (hooked_of(p, edge->leaf) >= 0) return edge_done(p, edge->leaf, g);
    if (p->captures) {
        tl_release(g);
        return TL_OK;
    }
    return accumulate_leaf(edge->leaf, g);
}

/* Runs one node of the pass: its tensor hooks, the captures it holds, then (when needed) its
   backward, handing each input's gradient on. */
static tl_status run_node(pass *p, int n, const bool *needed, tl_device device, bool retain_graph) {
    pass_entry *e = &p->entries[n];
    tl_node *node = e->node;
    tl_tensor **grads_out = NULL, **grads_in = NULL;
    tl_status status = entry_grads(e, &grads_out);
    for (int o = 0; o < node->num_outputs && status == TL_OK && node->hooks.count; o++)
        if (grads_out[o]) status = tl_grad_hooks_run(&node->hooks, o, &grads_out[o]);
    for (int c = 0; c < p->capture_count && status == TL_OK; c++) {
        const tl_tensor *t = p->captures[c].input;
        if (t->autograd->grad_fn != node || !grads_out[t->autograd->output_nr]) continue;
        status = accumulate(p, &p->captures[c].grad, tl_retain(grads_out[t->autograd->output_nr]));
    }
    if (status != TL_OK || (needed && !needed[n])) {
        entry_clear(e);
        return status;
    }
    for (int o = 0; o < node->num_outputs && status == TL_OK; o++) {
        /* an output nobody used: its gradient is zero (or NULL where the node takes that) */
        if (grads_out[o] || node->absent_output_grads) continue;
        status = tl_zeros(node->output_shape[o], node->output_ndim[o], node->output_dtype[o],
                          device, &grads_out[o]);
    }
    if (status == TL_OK) status = pass_grads_in(p, node->num_inputs, &grads_in);
    tl_backward_fn backward = node->backward;
    if (p->create_graph && !(backward = tl_graph_formula(node)))
        status = tl_error(TL_ERR_AUTOGRAD,
                          "autograd.grad: create_graph = true: the gradient of '%s' is not "
                          "differentiable yet (ops with differentiable gradients: %s)",
                          node->name, tl_graph_formula_names());
    node->last_use = !retain_graph;
    if (status == TL_OK) status = backward(node, grads_out, grads_in);
    node->last_use = false;
    entry_clear(e);
    for (int i = 0; grads_in && i < node->num_inputs; i++) {
        tl_tensor *g = grads_in[i];
        grads_in[i] = NULL;
        if (status != TL_OK) {
            tl_release(g);
        } else if (g) {
            status = pass_on(p, node, i, g);
        } else if (!node->inputs[i].node && node->needs_input_grad[i] &&
                   hooked_of(p, node->inputs[i].leaf) >= 0) {
            status = edge_done(p, node->inputs[i].leaf, NULL);
        }
    }
    if (!retain_graph) {
        node->released = true;
        tl_node_free_saved(node);
    }
    return status;
}

/* A backward pass from the roots, each with its seed (taken): leaf roots first, then every node
   later-created first. */
static tl_status run_pass(pass *p, int count, tl_tensor *const *roots, tl_tensor **seeds,
                          bool retain_graph) {
    tl_node **root_nodes = malloc(sizeof *root_nodes * (size_t)count);
    tl_status status = root_nodes ? TL_OK : tl_error(TL_ERR_MEMORY, "backward: out of memory");
    for (int r = 0; status == TL_OK && r < count; r++) root_nodes[r] = roots[r]->autograd->grad_fn;
    if (status == TL_OK) status = collect(p, count, root_nodes);
    if (status == TL_OK && p->count > 0) { /* none when every root is a leaf */
        qsort(p->entries, (size_t)p->count, sizeof *p->entries, by_sequence_descending);
        rebuild_index(p);
    }
    for (int r = 0; r < count; r++) {
        tl_tensor *seed = seeds[r];
        seeds[r] = NULL;
        if (status != TL_OK) {
            tl_release(seed);
        } else if (!root_nodes[r]) { /* a leaf: its whole gradient is the seed */
            status = leaf_gathered(p, roots[r], seed);
            struct tl_autograd_meta *meta = roots[r]->autograd;
            if (status == TL_OK && !p->captures && has_ready_hook(roots[r]))
                status = meta->ready_fn(meta->ready_user, roots[r]);
        } else {
            tl_tensor **pending = NULL;
            status = entry_grads(&p->entries[entry_of(p, root_nodes[r])], &pending);
            if (status == TL_OK)
                status = accumulate(p, &pending[roots[r]->autograd->output_nr], seed);
            else
                tl_release(seed);
        }
    }
    bool *needed = NULL;
    if (status == TL_OK && p->captures) status = mark_needed(p, &needed);
    for (int n = 0; status == TL_OK && n < p->count; n++)
        status = run_node(p, n, needed, tl_tensor_device(roots[0]), retain_graph);
    free(needed);
    free(root_nodes);
    return status;
}

static void pass_free(pass *p) {
    for (int i = 0; i < p->count; i++) entry_clear(&p->entries[i]);
    for (int i = 0; i < p->hooked_count; i++) tl_release(p->hooked[i].sum);
    free(p->entries);
    free(p->index);
    free(p->grads_in);
    free(p->hooked);
}

/* Runs a pass with autocast off, and grad mode off (backward formulas are not recorded) unless
   the pass creates a graph. */
static tl_status run_quietly(pass *p, int count, tl_tensor *const *roots, tl_tensor **seeds,
                             bool retain_graph) {
    bool previous_mode = tl_set_grad_enabled(p->create_graph);
    tl_autocast_state previous_autocast;
    tl_autocast_set((tl_autocast_state){.enabled = false}, &previous_autocast);
    tl_status status = run_pass(p, count, roots, seeds, retain_graph);
    tl_set_grad_enabled(previous_mode);
    tl_autocast_set(previous_autocast, NULL);
    return status;
}

tl_status tl_backward(tl_tensor *root, tl_tensor *grad, bool retain_graph) {
    if (!tl_requires_grad(root)) return no_grad_error(root);
    tl_tensor *seed;
    TL_TRY(make_seed("backward", root, grad, &seed));
    pass p = {0};
    tl_status status = run_quietly(&p, 1, &root, &seed, retain_graph);
    pass_free(&p);
    return status;
}

tl_status tl_autograd_grad(int count, tl_tensor *const *roots, tl_tensor *const *grads,
                           int n_inputs, tl_tensor *const *inputs, bool retain_graph,
                           bool create_graph, tl_tensor **out) {
    if (count < 1 || n_inputs < 1)
        return tl_error(TL_ERR_ARGUMENT,
                        "autograd.grad: needs at least one output and one input, got %d and %d",
                        count, n_inputs);
    for (int r = 0; r < count; r++)
        if (!tl_requires_grad(roots[r]))
            return tl_error(TL_ERR_AUTOGRAD,
                            "autograd.grad: output %d does not require grad (no input it was "
                            "computed from requires grad)",
                            r + 1);
    for (int i = 0; i < n_inputs; i++)
        if (!tl_requires_grad(inputs[i]))
            return tl_error(TL_ERR_AUTOGRAD,
                            "autograd.grad: input %d does not require grad, so no gradient "
                            "reaches it",
                            i + 1);
    tl_tensor **seeds = calloc((size_t)count, sizeof *seeds);
    capture *captures = calloc((size_t)n_inputs, sizeof *captures);
    tl_status status =
        seeds && captures ? TL_OK : tl_error(TL_ERR_MEMORY, "autograd.grad: out of memory");
    for (int r = 0; status == TL_OK && r < count; r++)
        status = make_seed("autograd.grad", roots[r], grads ? grads[r] : NULL, &seeds[r]);
    for (int i = 0; captures && i < n_inputs; i++) captures[i].input = inputs[i];
    pass p = {.captures = captures, .capture_count = n_inputs, .create_graph = create_graph};
    if (status == TL_OK) status = run_quietly(&p, count, roots, seeds, retain_graph);
    pass_free(&p);
    for (int r = 0; seeds && r < count; r++) tl_release(seeds[r]);
    for (int i = 0; captures && i < n_inputs; i++) {
        if (status != TL_OK) {
            tl_release(captures[i].grad);
            continue;
        }
        /* a leaf named twice gathered into its first capture */
        int first = capture_of(&p, inputs[i]);
        out[i] =
            first < i && !captures[i].grad && out[first] ? tl_retain(out[first]) : captures[i].grad;
    }
    free(seeds);
    free(captures);
    return status;
}
