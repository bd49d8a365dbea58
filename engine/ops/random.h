/* The global random generator's stream, for ops that draw random numbers inside their own
   kernels (dropout, attention's dropout): reserve the Philox blocks a kernel will read. */
#ifndef TLUA_OPS_RANDOM_H
#define TLUA_OPS_RANDOM_H

#include <stdint.h>

/* Reserves `blocks` Philox blocks (4 words each) of the global stream: the kernel reads blocks
   counter .. counter + blocks - 1 under key seed. A float32 element e uses block counter + e / 4,
   word e % 4 (kernels/philox.h: tl_philox_uniform_f32), as `rand` does, so reserving
   ceil(n / 4) blocks after tl.manual_seed(s) gives the uniforms tl.rand(n) would give. */
void tl_random_reserve(uint64_t blocks, uint64_t *seed, uint64_t *counter);

#endif
