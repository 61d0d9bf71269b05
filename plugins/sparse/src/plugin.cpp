// tessera_sparse: a plugin of kind "kernels" (no device of its own) that registers 2:4
// semi-structured kernels for the CPU under the Sparse dispatch key: linear(x, w_sparse, bias) and
// matmul(w_sparse, x), f32, bf16 and int8 (docs/sparsity.md). It reads the canonical form the runtime
// wrote (Note [2:4 canonical form]), builds its own layout once per tensor (Note [CPU 2:4 layout])
// and publishes it in the tensor's header, where the runtime frees it with the storage.
// Where dense wins (batch >= the measured threshold) or the call is outside what the kernels take,
// a kernel answers UNIMPLEMENTED and the runtime runs the op on the densified weight
// (Note [Sparse densify fallback]).
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <tessera/sdk.hpp>
#include <tessera/semi_structured.h>

#include "cpu_layout.h"
#include "dense_batch_env.h"

namespace {

namespace sc = tessera::sparse_cpu;
using tessera::sdk::Error;
using tessera::sdk::KernelCall;
using tessera::sdk::TensorView;

const tessera_host_api_t* g_host = nullptr;

[[noreturn]] void unimplemented(const std::string& why) { throw Error(TESSERA_STATUS_UNIMPLEMENTED, why); }

// Note [Sparse dense threshold]
// From batch (rows of x; columns of x for matmul) dense_batch(dtype) on, the dense oneDNN linear
// is as fast or faster than these kernels: they multiply the zeros the expand puts back, so once
// the weight traffic stops bounding the call they do the dense FLOPs plus the expands. Measured
// with bench_sparse_linear (4096 x 4096; the figures in docs/performance.md, "2:4 sparse linear"):
// - float32 wins through batch 16 (two threads: medians 1.45x / 1.31x / 1.91x / 1.41x at 1 / 4 / 8
//   / 16, load 1.6-3.5) and about breaks even at 32 (1.10x; 0.96-0.97x before the register expand),
//   so it takes the dense path from 32.
// - bfloat16 loses from batch 4 with two threads: 0.77x at load 2 where oneDNN's dense bf16 runs
//   on AMX, and 0.80x / 0.75x at batch 4 / 8 (load 1.6-3.5) on a CPU without AMX, although one
//   thread alone wins there (1.45x / 1.31x): oneDNN's bf16 scales over the two threads better than
//   these kernels. So it takes the dense path from 4.
// - int8 (not re-measured) keeps 16.
// TESSERA_SPARSE_DENSE_BATCH=N overrides all three.
constexpr int64_t kDenseBatchF32 = 32, kDenseBatchBf16 = 4, kDenseBatchI8 = 16;

int64_t dense_batch(int32_t dtype) {
  static const int64_t forced = [] {
    const char* v = g_host && g_host->getenv ? g_host->getenv("TESSERA_SPARSE_DENSE_BATCH") : nullptr;
    std::string warning;
    const int64_t batch = tessera::sparse_env::parse_dense_batch(v, &warning);
    if (!warning.empty()) tessera::sdk::log(TESSERA_LOG_WARNING, "sparse", warning);
    return batch;
  }();
  if (forced > 0) return forced;
  return dtype == TESSERA_DTYPE_BFLOAT16 ? kDenseBatchBf16 : dtype == TESSERA_DTYPE_INT8 ? kDenseBatchI8 : kDenseBatchF32;
}

// The header of a semi-structured CPU tensor, or null for anything else.
tessera_semi_structured_header_t* header_of(const TensorView& t) {
  if (!t.defined() || t.device_type() != TESSERA_DEVICE_CPU || t.ndim() != 2 || t.stride(0) != 0 ||
      t.stride(1) != 0 || t.byte_offset() != 0 || !t.handle())
    return nullptr;
  auto* h = static_cast<tessera_semi_structured_header_t*>(t.handle());
  if (h->magic != TESSERA_SEMI_STRUCTURED_MAGIC || h->version != TESSERA_SEMI_STRUCTURED_VERSION ||
      h->rows != t.size(0) || h->cols != t.size(1) || h->dtype != t.dtype())
    return nullptr;
  return h;
}

// The CPU layout cached in the header, built on first use (two threads may both build it; one wins).
const sc::CpuLayout& layout_of(tessera_semi_structured_header_t* h) {
  void** slot = &h->layouts[TESSERA_DEVICE_CPU];
  if (void* cached = __atomic_load_n(slot, __ATOMIC_ACQUIRE)) return *static_cast<const sc::CpuLayout*>(cached);
  const sc::ElementType type = h->dtype == TESSERA_DTYPE_BFLOAT16 ? sc::ElementType::BF16
                               : h->dtype == TESSERA_DTYPE_INT8   ? sc::ElementType::I8
                                                                  : sc::ElementType::F32;
  const size_t es = sc::element_size(type);
  const auto* base = reinterpret_cast<const uint8_t*>(h);
  const uint8_t* values = base + h->values_offset;
  const uint8_t* indices = base + h->indices_offset;
  const int64_t index_row = (h->groups + 1) / 2;
  std::string error;
  sc::CpuLayout* built = sc::build_layout(
      [&](int64_t r, void* row) {
        std::memset(row, 0, size_t(h->cols) * es);
        for (int64_t g = 0; g < h->groups; ++g) {
          const unsigned nibble = (indices[r * index_row + g / 2] >> (4 * (g % 2))) & 0xfu;
          for (int j = 0; j < 2; ++j) {
            const int64_t col = 4 * g + ((nibble >> (2 * j)) & 3u);
            if (col < h->cols)
              std::memcpy(static_cast<uint8_t*>(row) + size_t(col) * es,
                          values + size_t(r * 2 * h->groups + 2 * g + j) * es, es);
          }
        }
      },
      type, h->rows, h->cols, &error);
  if (!built) throw Error(TESSERA_STATUS_INVALID_ARGUMENT, "sparse: " + error);
  void* expected = nullptr;
  if (!__atomic_compare_exchange_n(slot, &expected, static_cast<void*>(built), false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE)) {
    std::free(built);
    return *static_cast<const sc::CpuLayout*>(expected);
  }
  return *built;
}

void run_linear(int32_t dtype, const void* x, int64_t batch, const sc::CpuLayout& w, const void* bias, void* y) {
  if (dtype == TESSERA_DTYPE_INT8)
    sc::linear_i8(static_cast<const int8_t*>(x), batch, w, static_cast<const int8_t*>(bias), static_cast<int8_t*>(y),
                  sc::detected_isa());
  else if (dtype == TESSERA_DTYPE_BFLOAT16)
    sc::linear_bf16(static_cast<const uint16_t*>(x), batch, w, static_cast<const uint16_t*>(bias),
                    static_cast<uint16_t*>(y), sc::detected_isa());
  else
    sc::linear_f32(static_cast<const float*>(x), batch, w, static_cast<const float*>(bias), static_cast<float*>(y),
                   sc::detected_isa());
}

// linear(Tensor input, Tensor weight, Tensor? bias): input [..., k] dense, weight semi-structured.
void linear_kernel(const KernelCall& call) {
  const TensorView x = call.input(0), out = call.output(0);
  const TensorView bias = call.num_inputs() > 2 ? call.input(2) : TensorView();
  tessera_semi_structured_header_t* h = header_of(call.input(1));
  if (!h || header_of(x)) unimplemented("sparse: linear takes a dense input and a semi-structured weight");
  if (!x.is_contiguous() || (bias.defined() && (!bias.is_contiguous() || header_of(bias))) || !out.is_contiguous() ||
      x.dtype() != h->dtype || (bias.defined() && bias.dtype() != h->dtype))
    unimplemented("sparse: linear takes contiguous inputs of the weight's dtype");
  const int64_t batch = h->rows ? out.numel() / h->rows : 0;
  if (batch >= dense_batch(h->dtype))
    unimplemented("batch " + std::to_string(batch) + " >= " + std::to_string(dense_batch(h->dtype)) +
                  ", where the dense kernel is faster");
  if (out.numel() == 0) return;
  run_linear(h->dtype, x.host_ptr(), batch, layout_of(h), bias.defined() ? bias.host_ptr() : nullptr,
             out.host_ptr());
}

// matmul(Tensor self, Tensor other): self semi-structured [n, k], other dense [k, p]; computed as
// (other^T self^T)^T through the linear kernel.
void matmul_kernel(const KernelCall& call) {
  tessera_semi_structured_header_t* h = header_of(call.input(0));
  const TensorView x = call.input(1), out = call.output(0);
  if (!h || header_of(x) || x.ndim() != 2 || !x.is_contiguous() || !out.is_contiguous() || x.dtype() != h->dtype)
    unimplemented("sparse: matmul takes a semi-structured [n, k] self and a contiguous 2-D other of its dtype");
  const int64_t n = h->rows, k = h->cols, p = x.size(1);
  if (p >= dense_batch(h->dtype))
    unimplemented("p " + std::to_string(p) + " >= " + std::to_string(dense_batch(h->dtype)) +
                  ", where the dense kernel is faster");
  if (out.numel() == 0) return;
  const size_t es = x.itemsize();
  std::vector<uint8_t> xt(size_t(p * k) * es), yt(size_t(p * n) * es);
  const auto* xs = x.host_ptr<const uint8_t>();
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < p; ++j) std::memcpy(&xt[size_t(j * k + i) * es], xs + size_t(i * p + j) * es, es);
  run_linear(h->dtype, xt.data(), p, layout_of(h), nullptr, yt.data());
  auto* ys = out.host_ptr<uint8_t>();
  for (int64_t j = 0; j < p; ++j)
    for (int64_t i = 0; i < n; ++i) std::memcpy(ys + size_t(i * p + j) * es, &yt[size_t(j * n + i) * es], es);
}

tessera_plugin_t plugin_header = {
    .struct_size = sizeof(tessera_plugin_t),
    .abi_major = TESSERA_ABI_MAJOR,
    .abi_minor = TESSERA_ABI_MINOR,
    .reserved_ = 0,
    .name = "sparse",
    .version = "0.1.0",
    .features = 0,
    .self = nullptr,
    .device = nullptr,  // a kernels plugin has no device of its own
    .shutdown = nullptr,
    .get_proc_address = nullptr,
};

}  // namespace

TESSERA_PLUGIN_ENTRY(&plugin_header) {
  g_host = host.api();
  const uint64_t dtypes = TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT32) | TESSERA_DTYPE_BIT(TESSERA_DTYPE_BFLOAT16) |
                          TESSERA_DTYPE_BIT(TESSERA_DTYPE_INT8);
  host.register_kernel_under(TESSERA_FUNCTIONALITY_SPARSE, "linear", dtypes, TESSERA_SDK_KERNEL(linear_kernel));
  host.register_kernel_under(TESSERA_FUNCTIONALITY_SPARSE, "matmul", dtypes, TESSERA_SDK_KERNEL(matmul_kernel));
}
