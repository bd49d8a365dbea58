/* Internal: the global random generator (a seed and the next unused Philox block), which every
   op that draws random numbers reserves its blocks from, on either device. */
#ifndef TLUA_CORE_GENERATOR_H
#define TLUA_CORE_GENERATOR_H

#include <stdint.h>

#include "tlua/device.h"

/* Reserves `blocks` Philox blocks (4 words each) for a kernel on device: it reads blocks
   counter .. counter + blocks - 1 under key seed. A float32 element e uses block counter + e / 4,
   word e % 4 (kernels/philox.h: tl_philox_uniform_f32), as `rand` does, so reserving
   ceil(n / 4) blocks after tl.manual_seed(s) gives the uniforms tl.rand(n) would give. On a CUDA
   device being captured into a graph the counter is the draw's place in the capture and the
   generator does not move: each replay takes fresh blocks (tl_cuda_rng_cell). */
void tl_random_reserve(tl_device device, uint64_t blocks, uint64_t *seed, uint64_t *counter);
/* The generator's seed now. */
uint64_t tl_generator_seed(void);
/* Takes `blocks` blocks of the generator for a replay: its seed and the first block. */
void tl_generator_take(uint64_t blocks, uint64_t *seed, uint64_t *counter);

#endif
