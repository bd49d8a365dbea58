/* Internal: small tensor arithmetic shared by backward formulas, and recording one-input ops. */
#ifndef TLUA_FORMULA_H
#define TLUA_FORMULA_H

#include "autograd/graph.h"

/* t * v, t + v for a number v (result in t's dtype). */
tl_status tl_mul_number(const tl_tensor *t, double v, tl_tensor **out);
tl_status tl_add_number(const tl_tensor *t, double v, tl_tensor **out);
/* mask ? t : 0 */
tl_status tl_mask_or_zero(const tl_tensor *mask, const tl_tensor *t, tl_tensor **out);
/* a * b * c */
tl_status tl_mul3(const tl_tensor *a, const tl_tensor *b, const tl_tensor *c, tl_tensor **out);

/* gi[i], computed at the output's shape with status, summed back to input i's shape. */
tl_status tl_reduce_to_input(tl_node *node, int i, tl_status status, tl_tensor **gi);

/* Records a one-input op after its forward (forward_status, *out): save_input / save_result
   pick what backward reads (slot 0); *node_out (may be NULL) gets the node, NULL when nothing
   was recorded. */
tl_status tl_record_unary(const char *name, tl_backward_fn backward, tl_status forward_status,
                          tl_tensor *a, tl_tensor **out, bool save_input, bool save_result,
                          tl_node **node_out);

#endif
