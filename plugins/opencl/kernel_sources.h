// OpenCL C sources of the backend's kernels, generated per dtype combination.
//
// Note [Dtypes in OpenCL C]
// Each tensor argument has a role (A, B, O, ...) with a storage type `<R>_t`, `LOAD_<R>(p, i)` and
// `STORE_<R>(p, i, v)`. Arithmetic happens in a compute type CT: int for bool/u8/i8/i16/i32, long for
// i64, float for f16/bf16/f32, double for f64. f16 is read and written with vload_half /
// vstore_half_rte (core OpenCL, no cl_khr_fp16 needed); bf16 is stored as ushort and converted with
// round-to-nearest-even. f64 needs cl_khr_fp64: a program using it enables the extension, and the
// kernels refuse f64 (TESSERA_STATUS_UNIMPLEMENTED, so the runtime falls back) on a device without it.
//
// Note [Geometry arguments]
// Shapes and strides travel as one struct passed by value (`Geo`, `RGeo`, ... below, mirrored by
// the Cl* structs in kernels.cpp): only int64 fields, so host and device layouts agree. At most
// kMaxDims dimensions after coalescing; more makes the kernel return UNIMPLEMENTED.
#pragma once
#include <cstdint>
#include <string>

namespace tessera::opencl {

constexpr int kMaxDims = 8;
constexpr int kReduceGroup = 128;   // work-group size of the per-row kernels (RWG)
constexpr int kMatmulTile = 32;     // TS: output tile edge
constexpr int kMatmulThreads = 8;   // RTS: work-items per tile edge (each computes TS/RTS squared outputs)

std::string dtype_tag(int32_t dtype);  // "f32", "bf16", "b8", ...
bool dtype_is_floating(int32_t dtype);
// Compute type of one dtype ("float", "long", ...).
const char* compute_type(int32_t dtype);

// Note [One op per program]: a program holds the kernels of one op (its contiguous `_c` and strided
// `_s` variants) for one dtype combination, so a cold start compiles only what is used (PoCL takes
// about as long per kernel in a program as for a program of its own).
std::string binary_source(int32_t a, int32_t b, int32_t o, const std::string& op);   // add, sub, mul, div, maximum, minimum
std::string compare_source(int32_t a, int32_t b, int32_t o, const std::string& op);  // eq ... ge, logical_and/or
std::string unary_source(int32_t a, int32_t o, const std::string& op);               // neg, abs, relu, exp, ... erf
std::string where_source(int32_t cond, int32_t a, int32_t b, int32_t o);  // where (one strided kernel)
std::string copy_source(int32_t src, int32_t dst);
std::string fill_source(int32_t dst);
std::string random_source(int32_t dst);  // uniform_, normal_ (Philox, tessera/random.h)
std::string reduce_source(int32_t a, int32_t o, const std::string& op);              // sum, mean, amax, amin
std::string softmax_source(int32_t a, int32_t o, const std::string& op);             // softmax, log_softmax
std::string layer_norm_source(int32_t a, int32_t w, int32_t b, int32_t o);
std::string matmul_source(int32_t a, int32_t b, int32_t o);

// The compute type of an elementwise comparison of a and b (promotion of the two).
int32_t compare_compute_dtype(int32_t a, int32_t b);
// The compute type of a copy from src to dst.
int32_t copy_compute_dtype(int32_t src, int32_t dst);

}  // namespace tessera::opencl
