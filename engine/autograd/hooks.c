/* Gradient hooks of tensors: kept on a leaf's autograd data or on the node (and output) that
   made a non-leaf; backward runs them on a gradient before it is used. */
#include <stdlib.h>
#include <string.h>

#include "autograd/graph.h"

static int64_t next_hook_id;

void tl_grad_hooks_free(tl_grad_hook_list *list) {
    for (int i = 0; i < list->count; i++)
        if (list->items[i].release) list->items[i].release(list->items[i].user);
    free(list->items);
    *list = (tl_grad_hook_list){0};
}

tl_status tl_grad_hooks_run(tl_grad_hook_list *list, int output_nr, tl_tensor **grad) {
    /* by index, each hook copied before its call: a hook may add or remove hooks */
    for (int i = 0; i < list->count; i++) {
        tl_grad_hook hook = list->items[i];
        if (output_nr >= 0 && hook.output_nr != output_nr) continue;
        tl_tensor *replacement = NULL;
        tl_status status = hook.fn(hook.user, *grad, &replacement);
        char sa[256], sb[256];
        if (status == TL_OK && replacement &&
            (replacement->ndim != (*grad)->ndim ||
             memcmp(replacement->shape, (*grad)->shape,
                    sizeof(*grad)->shape[0] * (size_t)(*grad)->ndim) != 0)) {
            status = tl_error(TL_ERR_SHAPE,
                              "backward: a gradient hook returned a gradient of shape %s for a "
                              "gradient of shape %s",
                              tl_shape_str(replacement, sa, sizeof sa),
                              tl_shape_str(*grad, sb, sizeof sb));
        }
        if (status != TL_OK) {
            tl_release(replacement);
            tl_release(*grad);
            *grad = NULL;
            return status;
        }
        if (replacement) {
            tl_release(*grad);
            *grad = replacement;
        }
    }
    return TL_OK;
}

tl_status tl_add_grad_hook(tl_tensor *t, tl_grad_hook_fn fn, void *user,
                           tl_grad_ready_release release, int64_t *id) {
    tl_status status = TL_OK;
    tl_grad_hook_list *list = NULL;
    int output_nr = 0;
    if (!t)
        status = tl_error(TL_ERR_ARGUMENT, "register_hook: expected a tensor, got NULL");
    else if (!fn)
        status = tl_error(TL_ERR_ARGUMENT, "register_hook: the hook must be a function");
    else if (!tl_requires_grad(t))
        status = tl_error(TL_ERR_AUTOGRAD,
                          "register_hook: the tensor does not require grad, so no gradient "
                          "reaches it (set requires_grad on a leaf first)");
    else if (t->autograd->grad_fn) {
        list = &t->autograd->grad_fn->hooks;
        output_nr = t->autograd->output_nr;
    } else {
        list = &t->autograd->hooks;
    }
    if (status == TL_OK && list->count == list->capacity) {
        int capacity = list->capacity ? list->capacity * 2 : 4;
        tl_grad_hook *grown = realloc(list->items, sizeof *grown * (size_t)capacity);
        if (!grown)
            status = tl_error(TL_ERR_MEMORY, "register_hook: out of memory");
        else
            list->items = grown, list->capacity = capacity;
    }
    if (status != TL_OK) {
        if (release) release(user);
        return status;
    }
    int64_t hook_id = __atomic_add_fetch(&next_hook_id, 1, __ATOMIC_RELAXED);
    list->items[list->count++] = (tl_grad_hook){
        .id = hook_id, .output_nr = output_nr, .fn = fn, .user = user, .release = release};
    if (id) *id = hook_id;
    return TL_OK;
}

/* Removes hook id from list; false when it is not there. */
static bool remove_from(tl_grad_hook_list *list, int64_t id) {
    for (int i = 0; i < list->count; i++) {
        if (list->items[i].id != id) continue;
        tl_grad_hook hook = list->items[i];
        for (int j = i + 1; j < list->count; j++) list->items[j - 1] = list->items[j];
        list->count--;
        if (hook.release) hook.release(hook.user);
        return true;
    }
    return false;
}

bool tl_remove_grad_hook(tl_tensor *t, int64_t id) {
    if (!t || !t->autograd) return false;
    if (remove_from(&t->autograd->hooks, id)) return true;
    return t->autograd->grad_fn && remove_from(&t->autograd->grad_fn->hooks, id);
}
