/* The settings a configuration can change that live in the thread or the process (grad mode,
   autocast, threads, the random stream, sync checks, matmul precision): each state keeps its own,
   swapped with the host's around every call, however the call ends. */
#include <string.h>

#include "embed_internal.h"
#include "tlua/device.h"

void tle_settings_read(tle_settings *s) {
    s->grad_enabled = tl_is_grad_enabled();
    s->autocast = tl_autocast_get();
    s->num_threads = tl_get_num_threads();
    tl_get_rng_state(&s->rng);
    s->sync_checks = tl_sync_checks();
    const char *precision = tl_get_matmul_precision();
    strncpy(s->matmul_precision, precision ? precision : "highest", sizeof s->matmul_precision - 1);
    s->matmul_precision[sizeof s->matmul_precision - 1] = '\0';
}

void tle_settings_write(const tle_settings *s) {
    tl_set_grad_enabled(s->grad_enabled);
    tl_autocast_set(s->autocast, NULL);
    if (s->num_threads != tl_get_num_threads()) tl_set_num_threads(s->num_threads);
    tl_set_rng_state(s->rng);
    tl_set_sync_checks(s->sync_checks);
    tl_set_matmul_precision(s->matmul_precision);
}

void tle_settings_enter(tl_lua *T) {
    tle_settings_read(&T->host);
    tle_settings own = T->own;
    /* scoped modes do not outlive a call: each starts with grad on and autocast off */
    own.grad_enabled = true;
    own.autocast = (tl_autocast_state){.enabled = false, .dtype = TL_F32};
    tle_settings_write(&own);
}

void tle_settings_leave(tl_lua *T) {
    tle_settings_read(&T->own);
    tle_settings_write(&T->host);
}
