// tessera_sparse_cuda: a plugin of kind "kernels" for the device type cuda. It turns a
// semi-structured weight into the bytes its kernels read on the GPU
// (TESSERA_EXT_SEMI_STRUCTURED_DEVICE_LAYOUT, Note [Semi-structured tensors on a device]) and registers
// linear(x, w_sparse, bias) and matmul(w_sparse, x) under the Sparse key for cuda: float16 / bfloat16 on the
// tensor cores (mma.sp, Note [CUDA mma.sp layout]), float32 on the CUDA cores over the canonical values and
// indices. It launches on the stream the runtime passes with the call (the CUDA plugin's current
// stream). Which of the runtime's dense path, cuSPARSELt and these kernels a call takes is the rule
// of Note [2:4 on cuSPARSELt] (cusparselt_plan.h). Where the CUDA runtime finds no device it
// registers nothing and says why under TESSERA_LOG=sparse: the plugin still loads, and
// semi-structured tensors behave as without it.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include <tessera/semi_structured.h>
#include <tessera/sdk.hpp>

#include "cusparselt_loader.h"
#include "cusparselt_plan.h"
#include "dense_batch_env.h"
#include "device_context.h"
#include "mma_layout.h"
#include "sparse_cuda_ext.h"
#include "sparse_cusparselt.h"
#include "sparse_linear.cuh"

namespace {

namespace scu = tessera::sparse_cuda;
using tessera::sdk::Error;
using tessera::sdk::KernelCall;
using tessera::sdk::TensorView;

std::atomic<uint64_t> g_kernel_launches{0}, g_dense_choices{0};

[[noreturn]] void unimplemented(const std::string& why) { throw Error(TESSERA_STATUS_UNIMPLEMENTED, why); }

// The float32 device block: the canonical values (rows, 2 * groups), then at indices_offset the
// canonical indices (rows, ceil(groups / 2) bytes).
struct F32Block {
  uint64_t indices_offset = 0, total_bytes = 0;
};

bool f32_block(int64_t rows, int64_t cols, F32Block* out) {
  if (rows < 0 || cols < 0) return false;
  const uint64_t groups = uint64_t(cols) / 4 + (cols % 4 != 0), index_row = (groups + 1) / 2;
  uint64_t values = 0, indices = 0, start = 0;
  if (__builtin_mul_overflow(uint64_t(rows), groups, &values) ||
      __builtin_mul_overflow(values, uint64_t(8), &values) ||
      __builtin_add_overflow(values, uint64_t(255), &start) ||
      __builtin_mul_overflow(uint64_t(rows), index_row, &indices) ||
      __builtin_add_overflow(start / 256 * 256, indices, &out->total_bytes))
    return false;
  out->indices_offset = start / 256 * 256;
  return true;
}

tessera_status_t device_layout(void*, const tessera_semi_structured_header_t* h, void** out_block,
                               uint64_t* out_bytes) {
  if (!h || !out_block || !out_bytes || h->magic != TESSERA_SEMI_STRUCTURED_MAGIC)
    return tessera::sdk::make_status(TESSERA_STATUS_INVALID_ARGUMENT,
                                     "sparse_cuda: device_layout takes a canonical semi-structured block");
  const auto* base = reinterpret_cast<const uint8_t*>(h);
  if (h->dtype == TESSERA_DTYPE_FLOAT16 || h->dtype == TESSERA_DTYPE_BFLOAT16) {
    std::string error;
    scu::MmaLayout* l =
        scu::build_mma_layout(base + h->values_offset, base + h->indices_offset, h->rows, h->cols, &error);
    if (!l) return tessera::sdk::make_status(TESSERA_STATUS_INVALID_ARGUMENT, "sparse_cuda: " + error);
    *out_block = l;
    *out_bytes = l->total_bytes;
    return nullptr;
  }
  if (h->dtype != TESSERA_DTYPE_FLOAT32)
    return tessera::sdk::make_status(
        TESSERA_STATUS_UNIMPLEMENTED,
        "sparse_cuda: a semi-structured weight of dtype " + std::to_string(h->dtype) +
            " (tessera_dtype_t) has no CUDA kernel; float32, float16 and bfloat16 do");
  F32Block plan;
  if (!f32_block(h->rows, h->cols, &plan))
    return tessera::sdk::make_status(TESSERA_STATUS_INVALID_ARGUMENT,
                                     "sparse_cuda: the weight's size overflows");
  auto* block = static_cast<uint8_t*>(std::calloc(1, plan.total_bytes ? plan.total_bytes : 1));
  if (!block)
    return tessera::sdk::make_status(TESSERA_STATUS_OUT_OF_MEMORY, "sparse_cuda: out of host memory");
  const uint64_t index_row = (uint64_t(h->groups) + 1) / 2;
  std::memcpy(block, base + h->values_offset, uint64_t(h->rows) * uint64_t(h->groups) * 8);
  std::memcpy(block + plan.indices_offset, base + h->indices_offset, uint64_t(h->rows) * index_row);
  *out_block = block;
  *out_bytes = plan.total_bytes;
  return nullptr;
}

uint64_t kernel_launches(void*) { return g_kernel_launches.load(std::memory_order_relaxed); }

void stats(void*, tessera_sparse_cuda_stats_t* out) {
  if (!out) return;
  const scu::LtStats lt = scu::cusparselt_stats();
  out->kernel_launches = g_kernel_launches.load(std::memory_order_relaxed);
  out->cusparselt_matmuls = lt.matmuls;
  out->cusparselt_compressions = lt.compressions;
  out->cusparselt_cached_weights = lt.cached_weights;
  out->dense_choices = g_dense_choices.load(std::memory_order_relaxed);
}

const char* cusparselt_status(void*) {
  static const std::string text = scu::cusparselt_api().describe();
  return text.c_str();
}

// A semi-structured weight on cuda (sizes (rows, cols), strides (0, 0)): true, else false.
bool is_semi_structured(const TensorView& t) {
  return t.defined() && t.device_type() == TESSERA_DEVICE_CUDA && t.ndim() == 2 && t.stride(0) == 0 &&
         t.stride(1) == 0 && t.handle();
}

const void* device_ptr(const TensorView& t) {
  return t.defined() ? static_cast<const char*>(t.handle()) + t.byte_offset() : nullptr;
}

scu::DType cuda_dtype(int32_t dtype) {
  switch (dtype) {
    case TESSERA_DTYPE_FLOAT16:
      return scu::DType::F16;
    case TESSERA_DTYPE_BFLOAT16:
      return scu::DType::BF16;
    case TESSERA_DTYPE_FLOAT32:
      return scu::DType::F32;
    default:
      unimplemented("sparse_cuda: no kernel for dtype " + std::to_string(dtype) + " (tessera_dtype_t)");
  }
}

// The call's device current for the scope (tessera::cuda::ScopedDevice, device_context.h).
struct DeviceGuard : tessera::cuda::ScopedDevice<Error (*)(const std::string&)> {
  explicit DeviceGuard(int device)
      : ScopedDevice(device, [](const std::string& why) {
          return Error(TESSERA_STATUS_INTERNAL, "sparse_cuda: " + why);
        }) {}
};

// Runs y = x W^T (+ bias) with the plugin's kernels on the call's device and stream, x and y laid
// out per `strides`.
void run_kernel(const KernelCall& call, const TensorView& w, const void* x, int64_t batch, const void* bias,
                void* y, const scu::Strides& strides) {
  const int64_t rows = w.size(0), cols = w.size(1);
  DeviceGuard guard(call.device_index());
  const auto stream = static_cast<cudaStream_t>(call.stream());
  const scu::DType dt = cuda_dtype(w.dtype());
  cudaError_t err;
  if (dt == scu::DType::F32) {
    F32Block plan;
    if (!f32_block(rows, cols, &plan)) unimplemented("sparse_cuda: the weight's size overflows");
    const auto* base = static_cast<const uint8_t*>(device_ptr(w));
    err = scu::linear(dt, base, base + plan.indices_offset, rows, cols, x, batch, bias, y, stream, &strides);
  } else {
    scu::MmaLayout plan;
    std::string error;
    if (!scu::mma_layout_plan(rows, cols, &plan, &error)) unimplemented("sparse_cuda: " + error);
    err = scu::linear_mma(dt, device_ptr(w), plan, x, batch, bias, y, stream, &strides);
  }
  if (err != cudaSuccess)
    throw Error(TESSERA_STATUS_INTERNAL,
                std::string("sparse_cuda: kernel launch failed: ") + cudaGetErrorString(err));
  g_kernel_launches.fetch_add(1, std::memory_order_relaxed);
}

// Logs `message` under TESSERA_LOG=sparse the first time `flag` is seen set.
void log_once(std::atomic<bool>& flag, tessera_log_level_t level, const std::string& message) {
  if (!flag.exchange(true)) tessera::sdk::log(level, "sparse", message);
}

// The path of this call by Note [2:4 on cuSPARSELt]. The environment is read at every call (tuning
// knobs for the GPU runs, and for the tests that set them); cuSPARSELt is opened only when the rule
// would pick it.
scu::PathChoice choose_path(const TensorView& w, int64_t batch, std::initializer_list<const void*> pointers) {
  const tessera::sdk::Host host(tessera::sdk::host_api());
  scu::PathQuery q;
  q.dtype = w.dtype();
  q.rows = w.size(0);
  q.cols = w.size(1);
  q.batch = batch;
  for (const void* p : pointers) q.aligned &= reinterpret_cast<uintptr_t>(p) % 16 == 0;
  std::string warning;
  q.dense_batch = tessera::sparse_env::parse_dense_batch(host.getenv("TESSERA_SPARSE_DENSE_BATCH"), &warning);
  static std::atomic<bool> dense_batch_warned{false}, path_warned{false}, missing_logged{false};
  if (!warning.empty()) log_once(dense_batch_warned, TESSERA_LOG_WARNING, warning);
  warning.clear();
  q.request = scu::parse_path_request(host.getenv("TESSERA_SPARSE_CUDA_PATH"), &warning);
  if (!warning.empty()) log_once(path_warned, TESSERA_LOG_WARNING, warning);
  q.cusparselt_loaded = true;
  scu::PathChoice choice = scu::choose_sparse_path(q);
  if (choice.path == scu::SparsePath::CusparseLt && !scu::cusparselt_api().loaded) {
    log_once(missing_logged, TESSERA_LOG_INFO, "sparse_cuda: " + scu::cusparselt_api().error);
    q.cusparselt_loaded = false;
    choice = scu::choose_sparse_path(q);
  }
  return choice;
}

[[noreturn]] void take_dense_path(const scu::PathChoice& choice) {
  g_dense_choices.fetch_add(1, std::memory_order_relaxed);
  unimplemented("sparse_cuda: the dense path (" + choice.why + ")");
}

uint64_t version_of(const TensorView& t) {
  const tessera_tensor_t* raw = t.raw();
  return TESSERA_ABI_HAS_FIELD(raw, tessera_tensor_t, version) ? raw->version : 0;
}

// One semi-structured product on the path the rule picks: linear (x (batch, cols) -> y (batch,
// rows)) or matmul (x (cols, batch) -> y (rows, batch), `matmul_layout`).
void run(const KernelCall& call, const TensorView& w, const void* x, int64_t batch, const void* bias, void* y,
         bool matmul_layout) {
  const int64_t rows = w.size(0), cols = w.size(1);
  const scu::Strides strides =
      matmul_layout ? scu::Strides{1, batch, 1, batch} : scu::Strides{cols, 1, rows, 1};
  scu::PathChoice choice = choose_path(w, batch, {x, bias, y, device_ptr(w)});
  if (choice.path == scu::SparsePath::Dense) take_dense_path(choice);
  if (choice.path == scu::SparsePath::CusparseLt) {
    DeviceGuard guard(call.device_index());
    scu::LtCall lt;
    lt.device = call.device_index();
    lt.stream = static_cast<cudaStream_t>(call.stream());
    lt.dtype = w.dtype();
    lt.layout = device_ptr(w);
    lt.version = version_of(w);
    lt.rows = rows;
    lt.cols = cols;
    lt.batch = batch;
    lt.x = x;
    lt.bias = bias;
    lt.y = y;
    lt.matmul_layout = matmul_layout;
    const std::string error = scu::cusparselt_run(lt);
    if (error.empty()) return;
    static std::atomic<bool> refused_logged{false};
    log_once(refused_logged, TESSERA_LOG_WARNING,
             "sparse_cuda: cuSPARSELt could not run a (" + std::to_string(rows) + ", " +
                 std::to_string(cols) + ") weight at batch " + std::to_string(batch) + ": " + error +
                 " (logged once)");
    const bool forced = choice.why.rfind("TESSERA_SPARSE_CUDA_PATH", 0) == 0;
    if (!forced) take_dense_path({scu::SparsePath::Dense, "cuSPARSELt failed: " + error});
  }
  run_kernel(call, w, x, batch, bias, y, strides);
}

bool on_call_device(const KernelCall& call, const TensorView& t) {
  return !t.defined() || (t.device_type() == TESSERA_DEVICE_CUDA && t.device_index() == call.device_index());
}

// linear(Tensor input, Tensor weight, Tensor? bias): input [..., k] dense on cuda, weight semi-structured.
void linear_kernel(const KernelCall& call) {
  const TensorView x = call.input(0), w = call.input(1), out = call.output(0);
  const TensorView bias = call.num_inputs() > 2 ? call.input(2) : TensorView();
  if (!is_semi_structured(w) || is_semi_structured(x) || (bias.defined() && is_semi_structured(bias)))
    unimplemented("sparse_cuda: linear takes a dense input and a semi-structured weight");
  if (!on_call_device(call, x) || !on_call_device(call, w) || !on_call_device(call, bias) ||
      !on_call_device(call, out))
    unimplemented("sparse_cuda: linear takes tensors on one cuda device");
  if (!x.is_contiguous() || !out.is_contiguous() || x.dtype() != w.dtype() ||
      (bias.defined() && (!bias.is_contiguous() || bias.dtype() != w.dtype())))
    unimplemented("sparse_cuda: linear takes contiguous inputs of the weight's dtype");
  const int64_t rows = w.size(0);
  const int64_t batch = rows ? out.numel() / rows : 0;
  if (out.numel() == 0) return;
  run(call, w, device_ptr(x), batch, device_ptr(bias), const_cast<void*>(device_ptr(out)), false);
}

// matmul(Tensor self, Tensor other): self semi-structured [n, k], other dense [k, p] on cuda;
// y (n, p) = W x, read as y^T = x^T W^T with x and y strided (no transposed copies).
void matmul_kernel(const KernelCall& call) {
  const TensorView w = call.input(0), x = call.input(1), out = call.output(0);
  if (!is_semi_structured(w) || is_semi_structured(x) || x.ndim() != 2 || !x.is_contiguous() ||
      !out.is_contiguous() || x.dtype() != w.dtype())
    unimplemented(
        "sparse_cuda: matmul takes a semi-structured [n, k] self and a contiguous 2-D other of its dtype");
  if (!on_call_device(call, x) || !on_call_device(call, w) || !on_call_device(call, out))
    unimplemented("sparse_cuda: matmul takes tensors on one cuda device");
  if (out.numel() == 0) return;
  run(call, w, device_ptr(x), x.size(1), nullptr, const_cast<void*>(device_ptr(out)), true);
}

tessera_proc_t get_proc_address(void*, const char* name) {
  return tessera::sdk::find_extension(
      name,
      {tessera::sdk::extension(TESSERA_EXT_SEMI_STRUCTURED_DEVICE_LAYOUT,
                               static_cast<tessera_ext_semi_structured_device_layout_fn_t>(&device_layout)),
       tessera::sdk::extension(TESSERA_EXT_SPARSE_CUDA_KERNEL_LAUNCHES,
                               static_cast<tessera_ext_sparse_cuda_kernel_launches_fn_t>(&kernel_launches)),
       tessera::sdk::extension(TESSERA_EXT_SPARSE_CUDA_STATS,
                               static_cast<tessera_ext_sparse_cuda_stats_fn_t>(&stats)),
       tessera::sdk::extension(TESSERA_EXT_SPARSE_CUDA_CUSPARSELT,
                               static_cast<tessera_ext_sparse_cuda_cusparselt_fn_t>(&cusparselt_status))});
}

tessera_plugin_t plugin_header = {
    .struct_size = sizeof(tessera_plugin_t),
    .abi_major = TESSERA_ABI_MAJOR,
    .abi_minor = TESSERA_ABI_MINOR,
    .reserved_ = 0,
    .name = "sparse_cuda",
    .version = "0.1.0",
    .features = 0,
    .self = nullptr,
    .device = nullptr,  // a kernels plugin has no device of its own
    .shutdown = nullptr,
    .get_proc_address = &get_proc_address,
};

}  // namespace

TESSERA_PLUGIN_ENTRY(&plugin_header) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();
    tessera::sdk::log(TESSERA_LOG_INFO, "sparse",
                      std::string("sparse_cuda: no CUDA device (") +
                          (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") +
                          "); no kernels registered, semi-structured tensors stay on the CPU");
    return;
  }
  const uint64_t dtypes = TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32) |
                          TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT16) |
                          TESSERA_DTYPE_BIT(TESSERA_DTYPE_BFLOAT16);
  host.register_kernel_under(TESSERA_FUNCTIONALITY_SPARSE, "linear", dtypes, TESSERA_SDK_KERNEL(linear_kernel));
  host.register_kernel_under(TESSERA_FUNCTIONALITY_SPARSE, "matmul", dtypes, TESSERA_SDK_KERNEL(matmul_kernel));
}
