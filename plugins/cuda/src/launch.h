// The boundary between the plugin's host code (C++20, g++) and its kernels (.cu, nvcc): plain
// structs of sizes, strides and device pointers, and one launcher per kernel family. Launchers
// enqueue on `stream` and return the launch status; they never synchronise.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

constexpr int kMaxDims = 8;

// Values equal tessera_dtype_t.
enum DTypeId : int32_t {
  kDtBool = 0, kDtU8 = 1, kDtI8 = 2, kDtI16 = 3, kDtI32 = 4, kDtI64 = 5,
  kDtF16 = 6, kDtBF16 = 7, kDtF32 = 8, kDtF64 = 9,
};

// An iteration space shared by the operands of an elementwise kernel (after broadcasting and
// collapsing of dimensions, see tensor_iter.h). Element `i` (row-major over `sizes`) of operand k
// is at data_k + sum_d coord_d * strides_k[d] (in elements of the operand's dtype).
struct IterShape {
  int32_t ndim = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
};
struct Operand {
  void* data = nullptr;  // element (0,...,0)
  int32_t dtype = kDtF32;
  int64_t strides[kMaxDims] = {};
};

// Remainder .. Prelu: floating operands only; BitAnd .. RightShift: integers only (docs/pointwise-ops.md).
enum class BinaryOp : int32_t {
  Add, Sub, Mul, Div, Maximum, Minimum, Pow,
  Remainder, Fmod, FloorDivide, Atan2, Prelu, BitAnd, BitOr, BitXor, LeftShift, RightShift,
  Eq, Ne, Lt, Le, Gt, Ge
};
enum class UnaryOp : int32_t {
  Neg, Abs, Exp, Log, Sqrt, Rsqrt, Sin, Cos, Tanh, Sigmoid, Relu, Gelu, GeluTanh, Silu, Erf,
  // docs/pointwise-ops.md (PyTorch's formulas): floating only, except Floor .. Sign (integers too:
  // unchanged, or their sign) and BitwiseNot (integers only)
  Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Log1p, Expm1, Reciprocal, Softsign, Mish, Hardsigmoid,
  Hardswish, LeakyRelu, Elu, Softplus, Floor, Ceil, Trunc, Round, Sign, BitwiseNot
};
// The parameters of the unary activations: LeakyRelu (a = negative_slope), Elu (a = alpha * scale,
// b = scale, c = input_scale; selu and celu are elus), Softplus (a = beta, b = threshold).
struct UnaryArgs {
  double a = 0, b = 0, c = 0;
};
constexpr bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

// A number in a kernel's compute type (opmath: float for float16/bfloat16/float32 kernels, double
// for float64, the integer type itself for integer kernels), made on the host by
// to_compute_scalar (scalar_convert.h): `f` holds a floating compute value (already rounded to
// float where the compute type is float), `i` an integral one (already wrapped to the type's
// width; 0 or 1 for bool).
struct ComputeScalar {
  int32_t dtype = kDtF32;
  double f = 0.0;
  int64_t i = 0;
};

// `contiguous`: every operand read from memory is dense over the iteration space (ndim == 1, unit
// strides), which enables the vectorised path (128-bit loads) when the pointers are 16-byte aligned.
// a and b have the storage dtype `dtype`; out has it too, or bool for comparisons. `scalar_operand`
// 1 or 2 replaces a or b by the number `scalar` (Note [Wrapped numbers on the GPU], ops.cpp): that
// operand's data is not read. alpha scales b (add/sub). Both numbers are in `dtype`'s compute type.
cudaError_t launch_binary(BinaryOp op, int32_t dtype, const IterShape& shape, const Operand& out, const Operand& a,
                          const Operand& b, int scalar_operand, const ComputeScalar& scalar,
                          const ComputeScalar& alpha, bool contiguous, cudaStream_t stream);
cudaError_t launch_unary(UnaryOp op, int32_t dtype, const IterShape& shape, const Operand& out, const Operand& in,
                         bool contiguous, cudaStream_t stream, const UnaryArgs& args = UnaryArgs{});
// Writes the element bit pattern `bits` (itemsize of out.dtype) to every element.
cudaError_t launch_fill(const IterShape& shape, const Operand& out, uint64_t bits, cudaStream_t stream);
// out = condition ? a : b, all of out's dtype but the bool condition, with broadcasting through
// the planned strides (plan_elementwise over condition, a, b). The selection copies element bits,
// so every dtype (float64, bool, NaN payloads) is exact. Bit 1 of `value_mask` replaces a by the
// element bit pattern `a_bits`, bit 2 b by `b_bits` (a number next to the tensors, Note [Wrapped
// numbers on the GPU]): that operand's data is not read.
cudaError_t launch_where(const IterShape& shape, const Operand& out, const Operand& condition, const Operand& a,
                         const Operand& b, uint32_t value_mask, uint64_t a_bits, uint64_t b_bits, cudaStream_t stream);
// out[i * stride] = start + i * step for i < n: floating dtypes compute start + double(i) * step in
// double and round it into the dtype's compute type, then into storage (as the CPU kernel);
// integral ones compute istart + i * istep in int64 and wrap to the dtype.
cudaError_t launch_arange(void* out, int32_t dtype, int64_t n, int64_t stride, double start, double step,
                          int64_t istart, int64_t istep, cudaStream_t stream);
// uniform_ / normal_ into n contiguous elements of a floating dtype: element i from the Philox
// stream at (seed, offset + i), as the CPU kernel (tessera/random.h); (a, b) = (from, to) or
// (mean, std).
cudaError_t launch_random(void* out, int32_t dtype, int64_t n, bool normal, double a, double b, uint64_t seed,
                          uint64_t offset, cudaStream_t stream);
// out = src with the position along `dim` taken from an index tensor read at index_strides (in
// elements, per output dim): index_select (the index's stride on `dim`, 0 elsewhere), embedding
// (src the weight, dim 0, the indices flattened) and gather (the index tensor's own strides, its
// shape the output's). The out and src tensors have the same dtype (itemsize bytes; the element
// bits are copied) and up to kMaxDims dims; sizes are the output's. src's stride on `dim` steps
// by the index; its other strides follow the output's coordinates. An index outside
// [-src_dim_size, src_dim_size) writes zero bits,
// sets error[0] to 1 and error[1] to that index (one of them, when several are), for the host to
// report once the stream has run (index_math.h has the offsets, shared with the host tests).
struct IndexSelectParams {
  int32_t ndim = 0, dim = 0, itemsize = 4, index_dtype = kDtI64;
  int64_t numel = 0, src_dim_size = 0;
  int64_t sizes[kMaxDims] = {}, out_strides[kMaxDims] = {}, src_strides[kMaxDims] = {}, index_strides[kMaxDims] = {};
  void* out = nullptr;
  const void* src = nullptr;
  const void* index = nullptr;
  int64_t* error = nullptr;  // two int64 on the device, zeroed by the launcher
};
cudaError_t launch_index_select(const IndexSelectParams& p, cudaStream_t stream);
// scatter(self, dim, index, src): out (already a copy of self) at each position c of the index
// (geometry.sizes = the index's sizes) receives the bits of values[c] (geometry.out_strides = the
// values' strides) at c with c[dim] = index[c] (geometry.src_strides = out's strides,
// geometry.src_dim_size = out's size on dim); geometry.out / src are unused. The offsets are
// indexed_element's (index_math.h) with the roles of the read and the written tensor exchanged. A
// bad index writes nothing and is reported through geometry.error like index_select's. With
// repeated indices one of the values lands, which one is unspecified (PyTorch's CUDA rule).
enum class ScatterReduce : int32_t { None, Sum, Prod, Mean, Max, Min };
struct ScatterParams {
  IndexSelectParams geometry;
  void* out = nullptr;
  const void* values = nullptr;
  // scatter_reduce (Note [scatter_reduce on the GPU], index.cu): out contiguous, `dtype` its dtype
  // (a numeric one), `counts` one int32 per out element for mean (else null).
  ScatterReduce reduce = ScatterReduce::None;
  bool include_self = true;
  int32_t dtype = kDtF32;
  int32_t* counts = nullptr;
  int64_t out_numel = 0;
};
cudaError_t launch_scatter(const ScatterParams& p, cudaStream_t stream);
// tril / triu: out = x where the element (..., i, j) keeps j <= i + diagonal (tril) or j >= i +
// diagonal (triu), zero bits elsewhere; out and x of one dtype (itemsize bytes) and shape (ndim >= 2),
// any strides.
struct TriangleParams {
  int32_t ndim = 2, itemsize = 4;
  bool upper = false;
  int64_t diagonal = 0, numel = 0;
  int64_t sizes[kMaxDims] = {}, out_strides[kMaxDims] = {}, in_strides[kMaxDims] = {};
  void* out = nullptr;
  const void* in = nullptr;
};
cudaError_t launch_triangle(const TriangleParams& p, cudaStream_t stream);
// A strided copy/conversion planned by plan_copy (tensor_iter.h): dims coalesced and ordered by
// the destination's strides, innermost last; strides in elements (0 where the source broadcasts).
struct CopyPlan {
  int32_t ndim = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t dst_strides[kMaxDims] = {}, src_strides[kMaxDims] = {};
  bool contiguous = false;  // one dim, unit strides: the vectorised path
  bool index32 = false;     // numel and every element offset fit in int32: 32-bit index math
};
// Note [Tiled transposed copies]: a same-dtype copy, or a conversion between floating dtypes,
// whose destination is contiguous along one dim
// (B, the plan's innermost) and whose source is contiguous along another (A) is a transpose of
// each [A, B] plane: a block stages a 32 x 32 tile in shared memory, reading it along A and writing
// it along B, so both sides are coalesced (the strided kernel reads one element per 32-byte sector
// there). Element (a, b) of batch item z: src at batch_src(z) + a + b * src_stride_b, dst at
// batch_dst(z) + a * dst_stride_a + b; the other dims of the plan are the batch, row-major.
struct TransposePlan {
  int64_t size_a = 0, size_b = 0, src_stride_b = 0, dst_stride_a = 0;
  int32_t batch_ndim = 0;
  int64_t batch_count = 1;
  int64_t batch_sizes[kMaxDims] = {}, batch_src_strides[kMaxDims] = {}, batch_dst_strides[kMaxDims] = {};
};
// dst = convert(src) for any dtype pair (Note [CUDA copy conversions], copy.cu); a transpose that
// plan_transpose (tensor_iter.h) recognises takes the tiled kernel (same dtype or floating pairs).
cudaError_t launch_copy(const CopyPlan& plan, void* dst, int32_t dst_dtype, const void* src, int32_t src_dtype,
                        cudaStream_t stream);

// Reductions. The input is split into kept dims (one output element per position) and reduced
// dims; each list is row-major (in the input's logical order, so the index of a reduced element is
// its position in the reduced dims, flattened: what argmax / argmin return). Output element o is at
// out + sum kept_coord * out_strides.
enum class ReduceOp : int32_t { Sum, Mean, Max, Min, Prod, Var, ArgMax, ArgMin, LogSumExp };
struct ReducePlan {
  int32_t kept_ndim = 0, reduced_ndim = 0;
  int64_t kept_sizes[kMaxDims] = {}, kept_in_strides[kMaxDims] = {}, kept_out_strides[kMaxDims] = {};
  int64_t reduced_sizes[kMaxDims] = {}, reduced_in_strides[kMaxDims] = {};
  int64_t num_outputs = 1, reduce_size = 1;
};
// How a reduction is spread over the GPU (plan_reduce_launch in tensor_iter.h). Each output's
// reduced range is cut into `splits` chunks of `chunk` elements; with splits > 1 the first pass
// writes one partial state per (output, split) to a workspace of num_outputs * splits *
// kReduceStateBytes (reduce_state.h) and a second pass merges them, so that a full sum uses every
// SM and a thread never adds a million elements in series.
struct ReduceLaunch {
  bool block_per_output = true;  // a block per (output, split); else a thread per (output, split)
  int32_t threads = 256;
  int64_t splits = 1;
  int64_t chunk = 0;
};
// in: any dtype but Mean, Var and LogSumExp take floating ones only; out: the op's output dtype (int64 for
// argmax / argmin). Accumulates as Note [CUDA reduction states] says. `correction` is var's.
// `workspace` is required when how.splits > 1.
cudaError_t launch_reduce(ReduceOp op, const ReducePlan& plan, const ReduceLaunch& how, const void* in,
                          int32_t in_dtype, void* out, int32_t out_dtype, double correction, void* workspace,
                          cudaStream_t stream);

// cumsum over the middle dim of a contiguous [outer, n, inner] tensor into a contiguous output of
// the same dtype: a thread per (outer, inner) line, accumulating in fp32 (double for float64,
// int64 wrapping for integers) and storing each running sum, as the CPU kernel.
cudaError_t launch_cumsum(const void* in, void* out, int32_t dtype, int64_t outer, int64_t n, int64_t inner,
                          cudaStream_t stream);
// Softmax over the middle dim of a contiguous [outer, dim, inner] tensor (same dtype in and out).
cudaError_t launch_softmax(bool log, const void* in, void* out, int32_t dtype, int64_t outer, int64_t dim,
                           int64_t inner, cudaStream_t stream);
// Layer norm over the last `n` elements of each of `rows` contiguous rows; weight/bias (optional,
// nullptr) are contiguous [n] of the same dtype. rms: rms_norm instead (no mean subtracted, no bias).
cudaError_t launch_layer_norm(const void* in, const void* weight, const void* bias, void* out, int32_t dtype,
                              int64_t rows, int64_t n, double eps, bool rms, cudaStream_t stream);

// max_pool2d / avg_pool2d (floor mode; avg counts the zero padding, PyTorch's count_include_pad=True)
// over [N, C, H, W] with any strides (a 3-D input is N = 1), one thread per output element, the
// channels innermost when `channels_inner` (a channels-last output). Max: every numeric dtype, NaN
// wins; avg: floating dtypes (summed in fp32, double for float64, times 1 / (kh * kw)) and int64
// (wrapping sum, truncating division), as the CPU kernels.
struct PoolParams {
  const void* in = nullptr;
  void* out = nullptr;
  int32_t dtype = kDtF32;
  bool is_max = true, channels_inner = false;
  int64_t n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t in_strides[4] = {}, out_strides[4] = {};
};
cudaError_t launch_pool2d(const PoolParams& p, cudaStream_t stream);

// Flash attention. q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, D], out [B, H, Lq, D]; strides in
// elements for dims 0..2 (dim 3 is contiguous). mask (optional) is bool (true = attend) or additive
// of mask_dtype, with broadcast strides (0) over [B, H, Lq, Lk].
struct AttentionParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  const void* mask = nullptr;
  int32_t dtype = kDtF16, mask_dtype = kDtBool;
  int64_t batch = 1, heads = 1, len_q = 0, len_k = 0, head_dim = 0;
  // Query blocks per (batch, head): block i of the 1-D grid takes (batch * heads) index
  // i / q_blocks and query block i % q_blocks (plan_attention_grid in tensor_iter.h).
  int64_t q_blocks = 0;
  int64_t q_strides[3] = {}, k_strides[3] = {}, v_strides[3] = {}, out_strides[3] = {}, mask_strides[4] = {};
  float scale = 1.0f;
  double scale_exact = 1.0;  // the same scale in double (the row kernel's float64 path)
  int64_t value_dim = 0;     // V's head dim (the flash kernels need it equal to head_dim)
  bool causal = false;
  // Tensor-core (WMMA) kernel; false selects the CUDA-core kernel (TESSERA_CUDA_FLASH_SIMT=1).
  bool tensor_cores = true;
};
// False (and nothing launched) for a head_dim or dtype this kernel does not handle.
bool attention_supported(int32_t dtype, int64_t head_dim);
// Query rows per block of the kernel launch_attention picks.
int attention_rows_per_block(bool tensor_cores);
// Launch preconditions (checked on the host before anything is queued): attention_supported,
// q_blocks set by plan_attention_grid, len_k > 0. A launcher error is then a real CUDA error.
cudaError_t launch_attention(const AttentionParams& p, cudaStream_t stream);
// Note [CUDA attention, a warp per query row] (attention.cu): every floating dtype, head dims and
// value dims up to 256, q_blocks unused. len_k > 0 (checked on the host).
bool attention_rows_supported(int32_t dtype, int64_t head_dim, int64_t value_dim);
cudaError_t launch_attention_rows(const AttentionParams& p, cudaStream_t stream);

// topk (Note [topk on the GPU], topk_plan.h): rows of `n` elements along the middle dim of a
// contiguous [outer, n, inner] input of any numeric dtype. `keys` / `idx` are a workspace of
// outer * inner * padded entries each (padded = topk_padded(n)): one row per (outer, inner), filled with
// the order keys, sorted by the bitonic network, then the first k of each row gathered into the
// contiguous [outer, k, inner] `values` (the input's dtype) and `indices` (int64).
struct TopkParams {
  const void* in = nullptr;
  int32_t dtype = kDtF32;
  int64_t outer = 1, n = 1, inner = 1, k = 0, padded = 1;
  bool largest = true;
  uint64_t* keys = nullptr;
  int64_t* idx = nullptr;
  void* values = nullptr;
  int64_t* indices = nullptr;
};
cudaError_t launch_topk(const TopkParams& p, cudaStream_t stream);

// One resized dim of _resize (tessera/resize_taps.h): out[o, j, i] = sum_t weight[j * taps + t] *
// in[o, index[j * taps + t], i] over contiguous [outer, n_in, inner] -> [outer, n_out, inner], both
// float32 or both float64 (the weights are doubles, used in the data's type).
struct ResizeTapsParams {
  const void* in = nullptr;
  void* out = nullptr;
  int32_t dtype = kDtF32;
  int64_t outer = 1, n_in = 1, n_out = 1, inner = 1;
  int32_t taps = 2;
  const int64_t* index = nullptr;
  const double* weight = nullptr;
};
cudaError_t launch_resize_taps(const ResizeTapsParams& p, cudaStream_t stream);

// fake_quantize_per_tensor_affine / _per_channel_affine (tessera/fake_quantize.h) over a contiguous
// float32 input into a contiguous float32 output; channel of element e: (e / inner) % channels
// (channels = 1: per tensor). scale / inv_scale / zero_point: `channels` values on the device.
struct FakeQuantizeParams {
  const float* in = nullptr;
  float* out = nullptr;
  int64_t numel = 0, inner = 1, channels = 1, quant_min = 0, quant_max = 255;
  const float* scale = nullptr;
  const float* inv_scale = nullptr;
  const int64_t* zero_point = nullptr;
};
cudaError_t launch_fake_quantize(const FakeQuantizeParams& p, cudaStream_t stream);

// Integer matmul (int_matmul.cu): out[b] = a[b] @ b[b] over contiguous [batch, m, k] and [batch, k, n]
// of one integer dtype into a contiguous [batch, m, n], products and sums in uint64 (wrapping, as the
// CPU). batch and ceil(m / 16) at most 65535.
cudaError_t launch_integer_matmul(const void* a, const void* b, void* out, int32_t dtype, int64_t batch,
                                  int64_t m, int64_t k, int64_t n, cudaStream_t stream);

}  // namespace tessera::cuda
