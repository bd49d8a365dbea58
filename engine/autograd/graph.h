/* Internal: graph nodes, edges, saved tensors and per-tensor autograd data. */
#ifndef TLUA_GRAPH_H
#define TLUA_GRAPH_H

#include "tlua/autograd.h"

#define TL_NODE_MAX_INPUTS  4
#define TL_NODE_MAX_OUTPUTS 4
#define TL_NODE_MAX_SAVED   5

typedef struct tl_node tl_node;

/* Computes grads_in[i] for each needed input from grads_out (one per output,
   never NULL). Each grads_in[i] it sets is a new reference, "=" semantics:
   the engine accumulates. */
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
} tl_saved;

/* Why a tensor does not require grad, for backward's error message. */
typedef enum tl_no_grad_reason {
    TL_NO_GRAD_INPUTS,   /* no input required grad (or a leaf never marked) */
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
    int num_inputs, num_outputs;
    tl_edge inputs[TL_NODE_MAX_INPUTS];
    bool needs_input_grad[TL_NODE_MAX_INPUTS];
    /* what backward needs besides saved tensors */
    int input_ndim[TL_NODE_MAX_INPUTS];
    int64_t input_shape[TL_NODE_MAX_INPUTS][TL_MAX_DIMS];
    tl_dtype input_dtype[TL_NODE_MAX_INPUTS];
    tl_device input_device[TL_NODE_MAX_INPUTS];
    int output_ndim[TL_NODE_MAX_OUTPUTS];
    int64_t output_shape[TL_NODE_MAX_OUTPUTS][TL_MAX_DIMS];
    tl_dtype output_dtype[TL_NODE_MAX_OUTPUTS];
    tl_saved saved[TL_NODE_MAX_SAVED];
    int dim;
    bool keepdim;
    double scalar[2];
    bool has_scalar[2];
    int64_t ints[TL_MAX_DIMS]; /* dims of permute, start of narrow, ... */
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
};

/* The tensor's autograd data, created on first use (NULL on allocation failure). */
struct tl_autograd_meta *tl_meta(tl_tensor *t);

/* True when an op on these inputs must be recorded (grad mode on and some
   input requires grad). */
bool tl_should_record(int count, tl_tensor *const *inputs);

/* A node named name with backward fn, edges to inputs (NULL entries allowed,
   e.g. an absent bias) and their shapes. needs_input_grad[i] is whether input i
   requires grad. */
tl_status tl_node_new(const char *name, tl_backward_fn backward, int num_inputs,
                      tl_tensor *const *inputs, tl_node **out);
void tl_node_release(tl_node *node);
/* Frees what node keeps for backward: its saved tensors and a custom node's
   callback state (a backward without retain_graph calls it once done). */
void tl_node_free_saved(tl_node *node);
/* Saves t (an alias, with its storage version) in slot i. */
tl_status tl_node_save(tl_node *node, int slot, const char *what, tl_tensor *t);
/* The saved tensor in slot, checked: raises a clear error if the slot is
   empty, freed by an earlier backward, or t was modified in place. */
tl_status tl_node_saved(tl_node *node, int slot, tl_tensor **out);
/* Makes output i of node produce t (t becomes a non-leaf requiring grad). */
tl_status tl_node_set_output(tl_node *node, int index, tl_tensor *t);
/* Marks outputs made while grad mode was off, or from inputs that did not
   require grad, so backward can say why they have no gradient. */
void tl_mark_no_grad(int count, tl_tensor *const *inputs, tl_tensor *out);

/* After a forward op computed out from inputs: when recording, makes a node
   named name and makes it out's producer; *node is then borrowed from out
   (save tensors into it); otherwise *node is NULL. On failure out is
   released. */
tl_status tl_record(const char *name, tl_backward_fn backward, int num_inputs,
                    tl_tensor *const *inputs, tl_tensor *out, tl_node **node);
/* Saves t into node's slot; on failure releases out (and with it the node). */
tl_status tl_record_save(tl_node *node, int slot, const char *what, tl_tensor *t, tl_tensor *out);

#endif
