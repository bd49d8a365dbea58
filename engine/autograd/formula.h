/* Internal: small tensor arithmetic shared by backward formulas, and recording one-input ops and
   two-operand products. */
#ifndef TLUA_FORMULA_H
#define TLUA_FORMULA_H

#include "autograd/graph.h"
#include "kernels/op.h"

/* t * v, t + v for a number v (result in t's dtype). */
tl_status tl_mul_number(const tl_tensor *t, double v, tl_tensor **out);
tl_status tl_add_number(const tl_tensor *t, double v, tl_tensor **out);
/* mask ? t : 0 */
tl_status tl_mask_or_zero(const tl_tensor *mask, const tl_tensor *t, tl_tensor **out);
/* a * b * c */
tl_status tl_mul3(const tl_tensor *a, const tl_tensor *b, const tl_tensor *c, tl_tensor **out);

/* gi[i], computed at the output's shape with status, summed back to input i's shape. */
tl_status tl_reduce_to_input(tl_node *node, int i, tl_status status, tl_tensor **gi);

/* Which inputs a node keeps: sets save[i] for input i from need (its needs_input_grad). */
typedef void (*tl_saves_fn)(const bool *need, bool *save);

/* After a forward made *out from count inputs: records it as name (tl_record) and saves inputs[i]
   into the node's slot i, named what[i], for each i that saves picks (saves NULL: none; else at
   most 4 inputs); *node_out (may be NULL) gets the node, NULL when nothing was recorded. On
   failure *out is released and set to NULL. */
tl_status tl_record_inputs(const char *name, tl_backward_fn backward, int count,
                           tl_tensor *const *inputs, const char *const *what, tl_saves_fn saves,
                           tl_tensor **out, tl_node **node_out);

/* Records a one-input op after its forward (forward_status, *out): save_input / save_result
   pick what backward reads (slot 0); *node_out (may be NULL) gets the node, NULL when nothing
   was recorded. On a failure after the forward *out is released and set to NULL. */
tl_status tl_record_unary(const char *name, tl_backward_fn backward, tl_status forward_status,
                          tl_tensor *a, tl_tensor **out, bool save_input, bool save_result,
                          tl_node **node_out);

/* out = product(a, b) recorded as name (matmul, outer), after autocast's casts of a and b by op's
   rule: backward reads a ("self", slot 0) for b's gradient and b ("other", slot 1) for a's, each
   saved only when that gradient is needed. On a failure after the product *out is released
   and set to NULL. */
typedef tl_status (*tl_product_fn)(const tl_tensor *a, const tl_tensor *b, tl_tensor **out);
tl_status tl_ag_product(tl_op op, const char *name, tl_backward_fn backward, tl_product_fn product,
                        tl_tensor *a, tl_tensor *b, tl_tensor **out);

/* Recording an in-place op on x whose other inputs are operands (NULL entries allowed):
   tl_inplace_begin checks the rules that keep gradients right (tlua/autograd.h: not a leaf that
   requires grad, not a view of one that does, not a tensor sharing its storage that would start
   a history) and, when the op must be recorded, makes *node (else NULL) with edges to x's
   history and to the operands, before the op runs. tl_inplace_end(node, status, x) then makes x
   the node's output after the op ran, or drops the node when status failed; it returns status.
   Save tensors into the node (tl_node_save) after tl_inplace_end, when it returned TL_OK. */
tl_status tl_inplace_begin(const char *name, tl_backward_fn backward, tl_tensor *x, int count,
                           tl_tensor *const *operands, tl_node **node);
tl_status tl_inplace_end(tl_node *node, tl_status status, tl_tensor *x);
/* The same for a one-input op whose backward reads slot 0: begin also keeps a copy of x's old
   values in *old when save_input (else NULL); end saves old ("self") or, when save_result, x
   itself ("result": the version after the op), and releases old. */
tl_status tl_unary_inplace_begin(const char *name, tl_backward_fn backward, tl_tensor *x,
                                 bool save_input, tl_node **node, tl_tensor **old);
tl_status tl_unary_inplace_end(tl_node *node, tl_status status, tl_tensor *x, tl_tensor *old,
                               bool save_result);
/* A two-input op x <- op(x, other) whose backward reads slot 0 (x's old values, "self") and
   slot 1 (other) as saves(needs_input_grad, save) says: records it when needed, keeping a copy
   of x's old values, and of other when x's change would change it. */
tl_status tl_binary_inplace(const char *name, tl_backward_fn backward, tl_saves_fn saves,
                            tl_status (*op)(tl_tensor *x, const tl_tensor *other), tl_tensor *x,
                            tl_tensor *other);
/* Whether backward may write into g (a gradient handed to a backward function): nobody else
   holds it or its storage, it has no history, and its elements are dense. */
bool tl_grad_is_disposable(const tl_tensor *g);
/* The same for a tensor saved in node's slot during its last use (a backward without
   retain_graph), where only the node holds it: backward may write a gradient into it. */
bool tl_saved_is_disposable(const tl_node *node, int slot);

#endif
