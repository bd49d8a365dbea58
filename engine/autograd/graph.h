/* Internal: graph nodes, edges, saved tensors and per-tensor autograd data. */
#ifndef TLUA_GRAPH_H
#define TLUA_GRAPH_H

#include "tlua/autograd.h"

/* Room for outputs of a node made by tl_node_new (tl_node_new_multi takes any count). A node
   has any number of inputs and saved slots. */
#define TL_NODE_MAX_OUTPUTS 4
/* The most inputs or outputs of one node (a custom function's, a grouped op's). */
#define TL_NODE_MAX_ARITY 65536
/* Saved slots kept in the node itself (more go to the heap). */
#define TL_NODE_INLINE_SAVED 3

typedef struct tl_node tl_node;

/* A gradient hook (tl_add_grad_hook) and the hooks of one place: a leaf's meta, or the node that
   made a non-leaf (with the output it made). */
typedef struct tl_grad_hook {
    int64_t id;
    int output_nr; /* a node's hook: the output whose gradient it sees */
    tl_grad_hook_fn fn;
    void *user;
    tl_grad_ready_release release;
} tl_grad_hook;

typedef struct tl_grad_hook_list {
    tl_grad_hook *items;
    int count, capacity;
} tl_grad_hook_list;

/* Releases every hook's user and the list's memory. */
void tl_grad_hooks_free(tl_grad_hook_list *list);
/* Runs the hooks of list seeing output_nr (-1: every hook), in the order they were added, on
   *grad (a reference it holds): a hook's replacement takes *grad's place (the old reference is
   released). On failure *grad is released and NULL. */
tl_status tl_grad_hooks_run(tl_grad_hook_list *list, int output_nr, tl_tensor **grad);

/* Computes grads_in[i] for each needed input from grads_out (one per output,
   never NULL unless the node's absent_output_grads says so). Each grads_in[i] it
   sets is a new reference, "=" semantics: the engine accumulates. */
typedef tl_status (*tl_backward_fn)(tl_node *node, tl_tensor *const *grads_out,
                                    tl_tensor **grads_in);

/* Where one input's gradient goes: the node that produced it, or the leaf. */
typedef struct tl_edge {
    tl_node *node;   /* retained; NULL for a leaf or an input without grad */
    int output_nr;   /* which output of node */
    tl_tensor *leaf; /* retained; the leaf that accumulates the gradient */
} tl_edge;

/* A tensor kept for backward: an alias outside the graph and the version its
   storage had when saved. */
typedef struct tl_saved {
    tl_tensor *tensor; /* NULL when not saved */
    uint64_t version;
    const char *what; /* "self", "other", "result": for error messages */
    /* where the tensor came from, for a gradient that is itself differentiated
       (tl_node_saved_attached): 0 a constant, i + 1 the node's input i, -(k + 1) its output k */
    int origin;
} tl_saved;

/* Why a tensor does not require grad, for backward's error message. */
typedef enum tl_no_grad_reason {
    TL_NO_GRAD_INPUTS,   /* no input required grad (or a leaf never marked); no_grad_op may name
                            the op whose inputs did not */
    TL_NO_GRAD_DISABLED, /* computed under no_grad */
    TL_NO_GRAD_DETACHED, /* made by detach() */
} tl_no_grad_reason;

struct tl_node {
    int refcount;
    const char *name;
    tl_backward_fn backward;
    uint64_t sequence;     /* creation order: later nodes run first */
    bool released;         /* saved tensors freed by a backward without retain_graph */
    bool last_use;         /* set during a backward without retain_graph: saved tensors are freed
                              right after it, so it may write into one only it holds */
    bool is_view;          /* a view op: its output shares its input's storage */
    uint64_t view_version; /* that storage's version when the view was taken */
    /* backward takes NULL for an output nobody used (else that output's zeros) */
    bool absent_output_grads;
    int num_inputs;
    int num_outputs;     /* 1 + the highest output set */
    int output_capacity; /* room for outputs */
    int num_saved;       /* room in saved (grows on demand) */
    /* per-input arrays of num_inputs entries and per-output arrays of output_capacity entries,
       allocated with the node (one block) */
    tl_edge *inputs;
    bool *needs_input_grad;
    /* what backward needs besides saved tensors */
    int *input_ndim;
    int64_t (*input_shape)[TL_MAX_DIMS];
    tl_dtype *input_dtype;
    tl_device *input_device;
    int *output_ndim;
    int64_t (*output_shape)[TL_MAX_DIMS];
    tl_dtype *output_dtype;
    tl_saved *saved; /* num_saved slots: saved_inline, or the heap once more are needed */
    tl_saved saved_inline[TL_NODE_INLINE_SAVED];
    int dim;
    bool keepdim;
    double scalar[3]; /* an op's numbers (clamp's bounds, a pointwise op's, ...) */
    bool has_scalar[3];
    int64_t ints[TL_MAX_DIMS]; /* dims of permute, start of narrow, ... */
    tl_grad_hook_list hooks;   /* tensor hooks on this node's outputs (tl_add_grad_hook) */
    /* custom functions */
    tl_custom_backward custom_backward;
    tl_custom_release custom_release;
    void *custom_user;
};

struct tl_autograd_meta {
    bool requires_grad;
    tl_tensor *grad;
    tl_node *grad_fn; /* retained; NULL for leaves */
    int output_nr;
    tl_no_grad_reason no_grad_reason;
    /* with TL_NO_GRAD_INPUTS: the op (a custom function) none of whose inputs required grad,
       which made this tensor (no_grad_from false) or a tensor it was computed from (true);
       NULL when unknown. Lives as long as the op's name (a node's name does). */
    const char *no_grad_op;
    bool no_grad_from;
    /* tl_set_grad_ready_hook's callback (NULL: none) */
    tl_grad_ready_fn ready_fn;
    void *ready_user;
    tl_grad_ready_release ready_release;
    tl_grad_hook_list hooks; /* a leaf's gradient hooks (a non-leaf's live on its grad_fn) */
};

/* The tensor's autograd data, created on first use (NULL on allocation failure). */
struct tl_autograd_meta *tl_meta(tl_tensor *t);

/* True when an op on these inputs must be recorded (grad mode on and some
   input requires grad). */
bool tl_should_record(int count, tl_tensor *const *inputs);

/* A node named name with backward fn, edges to inputs (any count >= 0, NULL entries allowed,
   e.g. an absent bias) and their shapes, and room for TL_NODE_MAX_OUTPUTS outputs.
   needs_input_grad[i] is whether input i requires grad. */
tl_status tl_node_new(const char *name, tl_backward_fn backward, int num_inputs,
                      tl_tensor *const *inputs, tl_node **out);
/* The same with room for num_outputs outputs (tl_node_set_output's index < num_outputs). */
tl_status tl_node_new_multi(const char *name, tl_backward_fn backward, int num_inputs,
                            tl_tensor *const *inputs, int num_outputs, tl_node **out);
void tl_node_release(tl_node *node);
/* Frees what node keeps for backward: its saved tensors and a custom node's
   callback state (a backward without retain_graph calls it once done). */
void tl_node_free_saved(tl_node *node);
/* Saves t (an alias, with its storage version) in slot i (any slot >= 0: the saved array grows;
   a slot saved twice keeps the later tensor). */
tl_status tl_node_save(tl_node *node, int slot, const char *what, tl_tensor *t);
/* The saved tensor in slot, checked: raises a clear error if the slot is
   empty, freed by an earlier backward, or t was modified in place. */
tl_status tl_node_saved(tl_node *node, int slot, tl_tensor **out);
/* The same as a new reference joined to the graph (a backward that records its own graph,
   create_graph): the node's input it was saved from with that input's history, or its output
   (whose producer is this node); a constant stays a constant. */
tl_status tl_node_saved_attached(tl_node *node, int slot, tl_tensor **out);
/* The differentiable gradient of node's op (create_graph: made of recording ops, so the
   gradient has a graph of its own), or NULL when that op has none yet. */
tl_backward_fn tl_graph_formula(const tl_node *node);
/* One row of a table of differentiable gradients: the op's node name, the node's input count
   when the name alone is ambiguous (pow: pow(a, b) and pow(a, number) record nodes of the same
   name), else 0, and the formula. tl_graph_formula looks through double_backward.c's table (the
   tensor ops) and tl_nn_graph_formulas (double_backward_nn.c: the nn ops). */
typedef struct tl_graph_formula_row {
    const char *name;
    int inputs;
    tl_backward_fn fn;
} tl_graph_formula_row;
extern const tl_graph_formula_row tl_nn_graph_formulas[];
extern const int tl_nn_graph_formula_count;
/* Helpers of the formulas, recorded: a 0-dim tensor of v in t's dtype and device (no gradient);
   a * b * c. */
tl_status tl_graph_number_like(const tl_tensor *t, double v, tl_tensor **out);
tl_status tl_graph_product3(tl_tensor *a, tl_tensor *b, tl_tensor *c, tl_tensor **out);
/* The names of the ops tl_graph_formula knows, ", "-separated, for error messages. */
const char *tl_graph_formula_names(void);
/* Makes output i of node produce t (t becomes a non-leaf requiring grad); an index past the
   node's room for outputs is an error (nothing changes). */
tl_status tl_node_set_output(tl_node *node, int index, tl_tensor *t);
/* Marks outputs made while grad mode was off, or from inputs that did not
   require grad, so backward can say why they have no gradient. */
void tl_mark_no_grad(int count, tl_tensor *const *inputs, tl_tensor *out);
/* The same for an output of the op named op (a custom function): when no input required grad
   and none carries a reason of its own, out's reason names op. */
void tl_mark_no_grad_by(const char *op, int count, tl_tensor *const *inputs, tl_tensor *out);

/* After a forward op computed *out from inputs: when recording, makes a node
   named name and makes it *out's producer; *node is then borrowed from *out
   (save tensors into it); otherwise *node is NULL. On failure *out is
   released and set to NULL, so no caller is left holding it. */
tl_status tl_record(const char *name, tl_backward_fn backward, int num_inputs,
                    tl_tensor *const *inputs, tl_tensor **out, tl_node **node);
/* Saves t into node's slot; on failure releases *out (and with it the node) and sets it to
   NULL. */
tl_status tl_record_save(tl_node *node, int slot, const char *what, tl_tensor *t, tl_tensor **out);

#endif
