/* Device names, the question "can this device be used here?" and the sync-checks switch. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlua/device.h"

static atomic_int default_cuda_device;

tl_status tl_set_default_cuda_device(int index) {
    if (index < 0)
        return tl_error(TL_ERR_DEVICE, "set_device: expected a CUDA device index >= 0, got %d",
                        index);
    atomic_store(&default_cuda_device, index);
    return TL_OK;
}

int tl_default_cuda_device(void) {
    return atomic_load(&default_cuda_device);
}

tl_status tl_device_parse(const char *name, tl_device *out) {
    if (strcmp(name, "cpu") == 0) {
        *out = TL_CPU;
        return TL_OK;
    }
    if (strncmp(name, "cuda", 4) == 0) {
        if (name[4] == '\0') {
            *out = (tl_device){.type = TL_DEVICE_CUDA, .index = tl_default_cuda_device()};
            return TL_OK;
        }
        if (name[4] == ':' && name[5] >= '0' && name[5] <= '9') {
            char *end;
            long index = strtol(name + 5, &end, 10);
            if (*end == '\0' && index < 1024) {
                *out = (tl_device){.type = TL_DEVICE_CUDA, .index = (int)index};
                return TL_OK;
            }
        }
    }
    return tl_error(TL_ERR_DEVICE, "device: unknown device '%s' (expected cpu, cuda or cuda:N)",
                    name);
}

const char *tl_device_name(tl_device device, char *buf) {
    if (device.type == TL_DEVICE_CPU)
        snprintf(buf, 16, "cpu");
    else
        snprintf(buf, 16, "cuda:%d", device.index);
    return buf;
}

bool tl_device_equal(tl_device a, tl_device b) {
    return a.type == b.type && (a.type == TL_DEVICE_CPU || a.index == b.index);
}

/* tl_cuda_device_count: cuda/runtime.c, or cuda_api.c (0) in a build without CUDA */

tl_status tl_device_check(tl_device device) {
    if (device.type == TL_DEVICE_CPU) return TL_OK;
    int count = tl_cuda_device_count();
    if (count == 0)
        return tl_error(TL_ERR_DEVICE,
                        "device: cuda:%d is not available (this build has no CUDA support or "
                        "no GPU is present)",
                        device.index);
    if (device.index >= count)
        return tl_error(TL_ERR_DEVICE, "device: cuda:%d does not exist (%d CUDA device%s)",
                        device.index, count, count == 1 ? "" : "s");
    return TL_OK;
}

static atomic_bool sync_checks;

void tl_set_sync_checks(bool on) {
    atomic_store(&sync_checks, on);
}

bool tl_sync_checks(void) {
    return atomic_load(&sync_checks);
}
