/* Internal: kernel launches through the driver's cuLaunchKernel, found once through the runtime
   (no link to libcuda): a shorter host path than <<<>>> for the many small kernels. A kernel's
   driver handle belongs to one device's context, so the runtime keeps it per device
   (tl_cuda_kernel_function of core/cuda/cuda_runtime.h). */
#ifndef TLUA_CUDA_FAST_LAUNCH_CUH
#define TLUA_CUDA_FAST_LAUNCH_CUH

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_runtime.h"

/* The driver's cuLaunchKernel, or NULL where the runtime cannot hand it out. */
static inline PFN_cuLaunchKernel_v4000 tl_cu_launch_kernel(void) {
    static const PFN_cuLaunchKernel_v4000 fn = [] {
        void *p = nullptr;
        cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuLaunchKernel", &p, 4000, cudaEnableDefault,
                                             &found) != cudaSuccess ||
            found != cudaDriverEntryPointSuccess) {
            (void)cudaGetLastError();
            p = nullptr;
        }
        return (PFN_cuLaunchKernel_v4000)p;
    }();
    return fn;
}

template <typename K> struct tl_launch_signature;
template <typename... P> struct tl_launch_signature<void (*)(P...)> {
    /* the arguments converted to the kernel's parameter types, as <<<>>> would */
    static cudaError_t launch(void (*kernel)(P...), CUfunction fn, unsigned grid, unsigned block,
                              cudaStream_t stream, P... args) {
        PFN_cuLaunchKernel_v4000 launch = tl_cu_launch_kernel();
        if (fn && launch) {
            void *argv[] = {(void *)&args...};
            CUresult r = launch(fn, grid, 1, 1, block, 1, 1, 0, (CUstream)stream, argv, nullptr);
            if (r == CUDA_SUCCESS) return cudaSuccess;
            /* a thread whose context the runtime has not bound yet: the runtime's launch
               binds it; other errors keep their number (the driver's and the runtime's
               codes agree) */
            if (r != CUDA_ERROR_INVALID_CONTEXT) return (cudaError_t)r;
        }
        kernel<<<grid, block, 0, stream>>>(args...);
        return cudaPeekAtLastError();
    }
};

/* Launches Kernel (a __global__ function) on grid x block threads on stream, a stream of device
   (the calling thread's current device); the error of the launch, cudaSuccess when it was
   queued. */
template <auto Kernel, typename... A>
static inline cudaError_t tl_cuda_launch_kernel(int device, unsigned grid, unsigned block,
                                                cudaStream_t stream, A... args) {
    static const int slot = tl_cuda_kernel_slot(); /* the kernel's number, on every device */
    const CUfunction fn = (CUfunction)tl_cuda_kernel_function(device, slot, (const void *)Kernel);
    return tl_launch_signature<decltype(Kernel)>::launch(Kernel, fn, grid, block, stream, args...);
}

#endif
