// The application API: factories and the core op set as free functions (libtorch's C++ frontend).
// The functions of the plain ops are generated from the contract (tessera/ops_generated.h).
// Every function dispatches through the operator catalogue (dispatcher.h) to the kernel of the
// inputs' device. Errors throw tessera::Error with a message that says what to fix.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tessera/generator.h"
#include "tessera/options.h"
#include "tessera/tensor.h"

namespace tessera {

// ---- factories (floating factories default to default_dtype(), float32)
TESSERA_API Tensor empty(IntArrayRef sizes, TensorOptions options = {});
TESSERA_API Tensor empty_strided(IntArrayRef sizes, IntArrayRef strides, TensorOptions options = {});
TESSERA_API Tensor zeros(IntArrayRef sizes, TensorOptions options = {});
TESSERA_API Tensor ones(IntArrayRef sizes, TensorOptions options = {});
TESSERA_API Tensor full(IntArrayRef sizes, const Scalar& value, TensorOptions options = {});
TESSERA_API Tensor zeros_like(const Tensor& t);
TESSERA_API Tensor ones_like(const Tensor& t);
TESSERA_API Tensor empty_like(const Tensor& t);
// int64 unless `options` or a floating argument says otherwise.
TESSERA_API Tensor arange(const Scalar& end, TensorOptions options = {});
TESSERA_API Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1, TensorOptions options = {});
// Random factories and fills draw from the default generator of the output's device, or from
// `generator` (Note [Generators] in tessera/generator.h): the same seed gives the same values on
// every device.
TESSERA_API Tensor rand(IntArrayRef sizes, TensorOptions options = {});   // U[0, 1)
TESSERA_API Tensor randn(IntArrayRef sizes, TensorOptions options = {});  // N(0, 1)
TESSERA_API Tensor rand(IntArrayRef sizes, const Generator& generator, TensorOptions options = {});
TESSERA_API Tensor randn(IntArrayRef sizes, const Generator& generator, TensorOptions options = {});
// Fills `self` (a floating tensor on any device) with U[from, to) / N(mean, std^2).
TESSERA_API Tensor& uniform_(Tensor& self, double from = 0.0, double to = 1.0,
                             const std::optional<Generator>& generator = std::nullopt);
TESSERA_API Tensor& normal_(Tensor& self, double mean = 0.0, double std = 1.0,
                            const std::optional<Generator>& generator = std::nullopt);
// Reseeds every device's default generator (offset 0), also those made later.
TESSERA_API void manual_seed(uint64_t seed);
// A CPU tensor holding `values` with shape `sizes` (default: 1-D), then moved/cast per `options`.
template <typename T>
Tensor tensor(const std::vector<T>& values, IntArrayRef sizes = {}, TensorOptions options = {});
TESSERA_API Tensor scalar_tensor(const Scalar& value, TensorOptions options = {});

// ---- devices
struct DeviceInfo {
  Device device;
  std::string name;        // "cpu:0"
  std::string plugin;      // providing plugin
  std::string properties;  // JSON object
};
// Every available device of every backend plugin found (loads backend plugins).
TESSERA_API std::vector<DeviceInfo> devices();
// Memory statistics of one device, from its plugin's memory_stats (ABI 1.1). `reported` is false
// when the plugin does not report them (a 1.0 plugin, no slot, or UNIMPLEMENTED): the host default.
struct MemoryStats {
  bool reported = false;
  uint64_t allocated_bytes = 0;       // in live allocations
  uint64_t reserved_bytes = 0;        // held from the device: live allocations plus caches
  uint64_t peak_allocated_bytes = 0;  // highest allocated_bytes so far
  uint64_t num_allocations = 0;       // live allocations
};
// Throws naming the device when no plugin provides its type or its index is out of range.
TESSERA_API MemoryStats memory_stats(Device device);
// Free and total bytes of one device's memory, for sizing caches (cudaMemGetInfo), from its
// plugin's memory_info slot (ABI 1.3); for the CPU, the host's available and total RAM. Throws
// naming the device when its plugin does not report memory info (DeviceCapabilities::memory_info
// says so beforehand), when no plugin provides the device, or when the index is out of range.
struct MemoryInfo {
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
};
TESSERA_API MemoryInfo memory_info(Device device);
// Returns the cached, unused memory of `device` (every device of its type when the index is
// negative) to the device, through the TESSERA_EXT_EMPTY_CACHE extension; returns the bytes
// released (0 when the plugin keeps no cache or does not offer the extension).
TESSERA_API uint64_t empty_cache(Device device);
TESSERA_API int64_t device_count(DeviceType type);
TESSERA_API int64_t device_count(std::string_view type_name);
TESSERA_API void synchronize(Device device);

// ---- the plain ops of the contract, generated from dispatcher/ops/ops.json (one function per op
// marked "api": "generated" or eligible by default: docs/adding-an-op.md). Elementwise binary ops
// broadcast and promote types; reductions over empty dims reduce all dims.
}  // namespace tessera
#include "tessera/ops_generated.h"
namespace tessera {

// ---- ops written by hand (they do more than box their arguments: "api": "manual" in ops.json)
TESSERA_API Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
// The k largest (largest=false: smallest) values along dim and their int64 indices (ops.json: topk).
TESSERA_API std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                                             bool sorted = true);
// One Adam step of one parameter in a single pass over it, its two moments and its gradient
// (ops.json: _fused_adam_; Note [Fused optimizer step] in tessera/nn.h, which is what calls it).
// Writes param, exp_avg and exp_avg_sq; bias_correction1 and 2 are 1 - beta1^t and 1 - beta2^t.
struct FusedAdamArgs {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, weight_decay = 0, eps = 1e-8;
  double bias_correction1 = 1, bias_correction2 = 1;
  bool decoupled_weight_decay = false;  // AdamW
};
TESSERA_API void _fused_adam_(const Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& grad,
                              const FusedAdamArgs& args);
// One SGD step with momentum of one parameter in a single pass (ops.json: _fused_sgd_; Note
// [Fused optimizer step]). Writes param and momentum_buffer; first_step: the buffer becomes the
// (weight-decayed) gradient, as PyTorch's first step clones it.
struct FusedSgdArgs {
  double lr = 0.01, momentum = 0.9, dampening = 0, weight_decay = 0;
  bool nesterov = false, first_step = false;
};
TESSERA_API void _fused_sgd_(const Tensor& param, const Tensor& momentum_buffer, const Tensor& grad,
                             const FusedSgdArgs& args);
// The same steps over a list of parameters in one call (ops.json: _multi_tensor_adam_,
// _multi_tensor_sgd_): element i of each vector belongs to params[i]; one floating dtype on one
// device per call. A device's kernel may update them all in one launch; without one the runtime
// runs _fused_adam_ / _fused_sgd_ per parameter.
TESSERA_API void _multi_tensor_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& exp_avgs,
                                     const std::vector<Tensor>& exp_avg_sqs, const std::vector<Tensor>& grads,
                                     const FusedAdamArgs& args);
TESSERA_API void _multi_tensor_sgd_(const std::vector<Tensor>& params, const std::vector<Tensor>& momentum_buffers,
                                    const std::vector<Tensor>& grads, const FusedSgdArgs& args);
TESSERA_API Tensor linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt);
TESSERA_API Tensor softmax(const Tensor& x, int64_t dim);
TESSERA_API Tensor log_softmax(const Tensor& x, int64_t dim);
TESSERA_API Tensor rms_norm(const Tensor& x, IntArrayRef normalized_shape,
                            const std::optional<Tensor>& weight = std::nullopt,
                            std::optional<double> eps = std::nullopt);
TESSERA_API Tensor conv2d(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt,
                          IntArrayRef stride = {1, 1}, IntArrayRef padding = {0, 0},
                          IntArrayRef dilation = {1, 1}, int64_t groups = 1);
TESSERA_API Tensor max_pool2d(const Tensor& x, IntArrayRef kernel_size, IntArrayRef stride = {},
                              IntArrayRef padding = {0, 0}, IntArrayRef dilation = {1, 1});
TESSERA_API Tensor avg_pool2d(const Tensor& x, IntArrayRef kernel_size, IntArrayRef stride = {},
                              IntArrayRef padding = {0, 0});
TESSERA_API Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
TESSERA_API Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

// ---- comparison helpers (computed on the CPU)
TESSERA_API bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
TESSERA_API bool equal(const Tensor& a, const Tensor& b);

// ---- template definitions
TESSERA_API Tensor tensor_from_buffer(const void* data, DType dtype, size_t count, IntArrayRef sizes,
                                      TensorOptions options);
template <typename T>
Tensor tensor(const std::vector<T>& values, IntArrayRef sizes, TensorOptions options) {
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(values.begin(), values.end());
    return tensor_from_buffer(bytes.data(), kBool, bytes.size(), sizes, options);
  } else {
    return tensor_from_buffer(values.data(), dtype_of_v<T>, values.size(), sizes, options);
  }
}

}  // namespace tessera
