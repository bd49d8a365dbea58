/* Devices ("cpu", "cuda", "cuda:N"), their names and the runtime queries. */
#ifndef TLUA_DEVICE_H
#define TLUA_DEVICE_H

#include <stdbool.h>

#include "tlua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tl_device_type { TL_DEVICE_CPU, TL_DEVICE_CUDA, TL_DEVICE_TYPE_COUNT } tl_device_type;

typedef struct tl_device {
    tl_device_type type;
    int index; /* 0 for the CPU */
} tl_device;

#define TL_CPU ((tl_device){.type = TL_DEVICE_CPU, .index = 0})

/* Parses "cpu", "cuda", "cuda:N" ("cuda" is the default CUDA device). Does not check that the
   device exists. */
tl_status tl_device_parse(const char *name, tl_device *out);
/* The device "cuda" names, process-wide: cuda:0 unless set (a rank of a data-parallel job sets
   its local rank's GPU). Not checked against the devices present. */
tl_status tl_set_default_cuda_device(int index);
int tl_default_cuda_device(void);
/* Writes "cpu" or "cuda:N" into buf (at least 16 bytes) and returns buf. */
const char *tl_device_name(tl_device device, char *buf);
bool tl_device_equal(tl_device a, tl_device b);
/* TL_OK if the device can be used now (a CUDA device needs a GPU and the build). */
tl_status tl_device_check(tl_device device);
/* Number of CUDA devices present (0 without CUDA support or without a GPU). */
int tl_cuda_device_count(void);

/* Index checks on a GPU (tl_check_index_range) are asynchronous by default: a failure is raised
   by the next synchronization. true makes each wait and raise at once (for debugging: the error
   then names the op that was given the index; every check costs a host wait). */
void tl_set_sync_checks(bool on);
bool tl_sync_checks(void);

#ifdef __cplusplus
}
#endif

#endif
