// TESSERA_CUDA_HD: a function the kernels (nvcc) and their host tests (the C++ compiler) both call.
#pragma once

#if defined(__CUDACC__)
#define TESSERA_CUDA_HD __host__ __device__ __forceinline__
#else
#define TESSERA_CUDA_HD inline
#endif
