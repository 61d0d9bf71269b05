// The part of cuSPARSELt's C interface the sparse_cuda plugin calls, declared here because the library
// and its header come from pip (nvidia-cusparselt-cu13), not from the CUDA Toolkit the build uses:
// the plugin must build where cuSPARSELt is absent and open it at run time (Note [Loading cuSPARSELt]
// in cusparselt_loader.h). The cuSPARSE types it shares (cusparseStatus_t, cusparseOrder_t,
// cusparseOperation_t) and cudaDataType come from the toolkit's cusparse.h and library_types.h.
//
// Where these declarations come from: cuSPARSELt's documented interface (0.6 and later: the
// descriptor-based CompressedSize2 / Compress2). The enum values below are the library's; the test
// cusparselt_abi_check compiles them against cusparseLt.h wherever pip's header is found and fails
// on any difference. The opaque structs are 1,024 bytes: cuSPARSELt 0.8 declares 512, older
// releases more; a larger block than the library writes is harmless, a smaller one is not.
#pragma once

#include <cusparse.h>
#include <library_types.h>

#include <cstddef>
#include <cstdint>

namespace tessera::sparse_cuda::lt {

struct alignas(16) Handle {
  uint8_t data[1024];
};
struct alignas(16) MatDescriptor {
  uint8_t data[1024];
};
struct alignas(16) MatmulDescriptor {
  uint8_t data[1024];
};
struct alignas(16) MatmulAlgSelection {
  uint8_t data[1024];
};
struct alignas(16) MatmulPlan {
  uint8_t data[1024];
};

// cusparseLtSparsity_t
enum Sparsity : int { kSparsity50Percent = 0 };
// cusparseComputeType (cuSPARSELt's own enum)
enum ComputeType : int { kCompute32I = 0, kCompute16F = 1, kCompute32F = 2 };
// cusparseLtMatmulDescAttribute_t (the entries used)
enum MatmulDescAttribute : int { kMatmulBiasPointer = 8 };
// cusparseLtMatmulAlg_t
enum MatmulAlg : int { kMatmulAlgDefault = 0 };

using InitFn = cusparseStatus_t (*)(Handle*);
using DestroyFn = cusparseStatus_t (*)(const Handle*);
using GetPropertyFn = cusparseStatus_t (*)(libraryPropertyType, int*);
using GetErrorStringFn = const char* (*)(cusparseStatus_t);
using DenseDescriptorInitFn = cusparseStatus_t (*)(const Handle*, MatDescriptor*, int64_t rows, int64_t cols,
                                                   int64_t ld, uint32_t alignment, cudaDataType,
                                                   cusparseOrder_t);
using StructuredDescriptorInitFn = cusparseStatus_t (*)(const Handle*, MatDescriptor*, int64_t rows,
                                                        int64_t cols, int64_t ld, uint32_t alignment,
                                                        cudaDataType, cusparseOrder_t, Sparsity);
using MatDescriptorDestroyFn = cusparseStatus_t (*)(const MatDescriptor*);
using MatmulDescriptorInitFn = cusparseStatus_t (*)(const Handle*, MatmulDescriptor*, cusparseOperation_t opA,
                                                    cusparseOperation_t opB, const MatDescriptor* a,
                                                    const MatDescriptor* b, const MatDescriptor* c,
                                                    const MatDescriptor* d, ComputeType);
using MatmulDescSetAttributeFn = cusparseStatus_t (*)(const Handle*, MatmulDescriptor*, MatmulDescAttribute,
                                                      const void* data, size_t size);
using MatmulAlgSelectionInitFn = cusparseStatus_t (*)(const Handle*, MatmulAlgSelection*,
                                                      const MatmulDescriptor*, MatmulAlg);
using MatmulAlgSelectionDestroyFn = cusparseStatus_t (*)(const MatmulAlgSelection*);
using MatmulPlanInitFn = cusparseStatus_t (*)(const Handle*, MatmulPlan*, const MatmulDescriptor*,
                                              const MatmulAlgSelection*);
using MatmulPlanDestroyFn = cusparseStatus_t (*)(const MatmulPlan*);
using MatmulGetWorkspaceFn = cusparseStatus_t (*)(const Handle*, const MatmulPlan*, size_t*);
using MatmulFn = cusparseStatus_t (*)(const Handle*, const MatmulPlan*, const void* alpha, const void* a,
                                      const void* b, const void* beta, const void* c, void* d,
                                      void* workspace, cudaStream_t* streams, int32_t num_streams);
using CompressedSize2Fn = cusparseStatus_t (*)(const Handle*, const MatDescriptor*, size_t* compressed,
                                               size_t* compress_buffer);
using Compress2Fn = cusparseStatus_t (*)(const Handle*, const MatDescriptor*, int is_sparse_a,
                                         cusparseOperation_t, const void* dense, void* compressed,
                                         void* compress_buffer, cudaStream_t);

}  // namespace tessera::sparse_cuda::lt
