// Our declarations of cuSPARSELt's interface (plugins/sparse/cuda/cusparselt_api.h) against the
// library's own header, at compile time: built only where pip's cusparseLt.h is found, and the
// build fails on any difference in an enum value, a function's type or an opaque block too small.
#include <cusparseLt.h>

#include <type_traits>

#include "cusparselt_api.h"

namespace lt = tessera::sparse_cuda::lt;

static_assert(int(lt::kSparsity50Percent) == int(CUSPARSELT_SPARSITY_50_PERCENT));
static_assert(int(lt::kCompute32I) == int(CUSPARSE_COMPUTE_32I));
static_assert(int(lt::kCompute16F) == int(CUSPARSE_COMPUTE_16F));
static_assert(int(lt::kCompute32F) == int(CUSPARSE_COMPUTE_32F));
static_assert(int(lt::kMatmulBiasPointer) == int(CUSPARSELT_MATMUL_BIAS_POINTER));
static_assert(int(lt::kMatmulAlgDefault) == int(CUSPARSELT_MATMUL_ALG_DEFAULT));
static_assert(sizeof(lt::Sparsity) == sizeof(cusparseLtSparsity_t));
static_assert(sizeof(lt::ComputeType) == sizeof(cusparseComputeType));
static_assert(sizeof(lt::MatmulDescAttribute) == sizeof(cusparseLtMatmulDescAttribute_t));
static_assert(sizeof(lt::MatmulAlg) == sizeof(cusparseLtMatmulAlg_t));

static_assert(sizeof(lt::Handle) >= sizeof(cusparseLtHandle_t));
static_assert(sizeof(lt::MatDescriptor) >= sizeof(cusparseLtMatDescriptor_t));
static_assert(sizeof(lt::MatmulDescriptor) >= sizeof(cusparseLtMatmulDescriptor_t));
static_assert(sizeof(lt::MatmulAlgSelection) >= sizeof(cusparseLtMatmulAlgSelection_t));
static_assert(sizeof(lt::MatmulPlan) >= sizeof(cusparseLtMatmulPlan_t));
static_assert(alignof(lt::Handle) >= alignof(cusparseLtHandle_t));
static_assert(alignof(lt::MatmulPlan) >= alignof(cusparseLtMatmulPlan_t));

// Each pointer type has the library function's shape, with our opaque types in place of its own:
// the parameter and return types match once every cusparseLt* struct is read as ours.
template <typename T>
struct Ours {
  using type = T;
};
template <>
struct Ours<cusparseLtHandle_t> {
  using type = lt::Handle;
};
template <>
struct Ours<cusparseLtMatDescriptor_t> {
  using type = lt::MatDescriptor;
};
template <>
struct Ours<cusparseLtMatmulDescriptor_t> {
  using type = lt::MatmulDescriptor;
};
template <>
struct Ours<cusparseLtMatmulAlgSelection_t> {
  using type = lt::MatmulAlgSelection;
};
template <>
struct Ours<cusparseLtMatmulPlan_t> {
  using type = lt::MatmulPlan;
};
template <>
struct Ours<cusparseLtSparsity_t> {
  using type = lt::Sparsity;
};
template <>
struct Ours<cusparseComputeType> {
  using type = lt::ComputeType;
};
template <>
struct Ours<cusparseLtMatmulDescAttribute_t> {
  using type = lt::MatmulDescAttribute;
};
template <>
struct Ours<cusparseLtMatmulAlg_t> {
  using type = lt::MatmulAlg;
};
template <typename T>
struct Ours<T*> {
  using type = typename Ours<T>::type*;
};
template <typename T>
struct Ours<const T> {
  using type = const typename Ours<T>::type;
};
template <typename R, typename... A>
struct Ours<R (*)(A...)> {
  using type = typename Ours<R>::type (*)(typename Ours<A>::type...);
};

#define TESSERA_SAME_SHAPE(fn, ours) static_assert(std::is_same_v<Ours<decltype(&fn)>::type, lt::ours>, #fn)
TESSERA_SAME_SHAPE(cusparseLtInit, InitFn);
TESSERA_SAME_SHAPE(cusparseLtDestroy, DestroyFn);
TESSERA_SAME_SHAPE(cusparseLtGetProperty, GetPropertyFn);
TESSERA_SAME_SHAPE(cusparseLtGetErrorString, GetErrorStringFn);
TESSERA_SAME_SHAPE(cusparseLtDenseDescriptorInit, DenseDescriptorInitFn);
TESSERA_SAME_SHAPE(cusparseLtStructuredDescriptorInit, StructuredDescriptorInitFn);
TESSERA_SAME_SHAPE(cusparseLtMatDescriptorDestroy, MatDescriptorDestroyFn);
TESSERA_SAME_SHAPE(cusparseLtMatmulDescriptorInit, MatmulDescriptorInitFn);
TESSERA_SAME_SHAPE(cusparseLtMatmulDescSetAttribute, MatmulDescSetAttributeFn);
TESSERA_SAME_SHAPE(cusparseLtMatmulAlgSelectionInit, MatmulAlgSelectionInitFn);
TESSERA_SAME_SHAPE(cusparseLtMatmulAlgSelectionDestroy, MatmulAlgSelectionDestroyFn);
TESSERA_SAME_SHAPE(cusparseLtMatmulPlanInit, MatmulPlanInitFn);
TESSERA_SAME_SHAPE(cusparseLtMatmulPlanDestroy, MatmulPlanDestroyFn);
TESSERA_SAME_SHAPE(cusparseLtMatmulGetWorkspace, MatmulGetWorkspaceFn);
TESSERA_SAME_SHAPE(cusparseLtMatmul, MatmulFn);
TESSERA_SAME_SHAPE(cusparseLtSpMMACompressedSize2, CompressedSize2Fn);
TESSERA_SAME_SHAPE(cusparseLtSpMMACompress2, Compress2Fn);

int main() { return 0; }
