/* The global random generator: a seed and a Philox block counter that random ops reserve from,
   so one seed gives one sequence and consecutive draws differ (tlua/runtime.h's state calls). */
#include <pthread.h>

#include "core/generator.h"
#include "tlua/runtime.h"
#ifdef TLUA_HAVE_CUDA
#include "core/cuda/cuda_runtime.h"
#endif

#define DEFAULT_SEED 67280421310721ull

static pthread_mutex_t generator_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t generator_seed = DEFAULT_SEED;
static uint64_t generator_counter; /* the next unused Philox block */

void tl_manual_seed(uint64_t seed) {
    pthread_mutex_lock(&generator_lock);
    generator_seed = seed;
    generator_counter = 0;
    pthread_mutex_unlock(&generator_lock);
}

void tl_get_rng_state(tl_rng_state *out) {
    pthread_mutex_lock(&generator_lock);
    *out = (tl_rng_state){.seed = generator_seed, .counter = generator_counter};
    pthread_mutex_unlock(&generator_lock);
}

void tl_set_rng_state(tl_rng_state state) {
    pthread_mutex_lock(&generator_lock);
    generator_seed = state.seed;
    generator_counter = state.counter;
    pthread_mutex_unlock(&generator_lock);
}

uint64_t tl_generator_seed(void) {
    pthread_mutex_lock(&generator_lock);
    uint64_t seed = generator_seed;
    pthread_mutex_unlock(&generator_lock);
    return seed;
}

void tl_generator_take(uint64_t blocks, uint64_t *seed, uint64_t *counter) {
    pthread_mutex_lock(&generator_lock);
    *seed = generator_seed;
    *counter = generator_counter;
    generator_counter += blocks;
    pthread_mutex_unlock(&generator_lock);
}

void tl_random_reserve(tl_device device, uint64_t blocks, uint64_t *seed, uint64_t *counter) {
#ifdef TLUA_HAVE_CUDA
    if (device.type == TL_DEVICE_CUDA && tl_cuda_capture_draw(device.index, blocks, counter)) {
        *seed = tl_generator_seed();
        return;
    }
#else
    (void)device;
#endif
    tl_generator_take(blocks, seed, counter);
}
