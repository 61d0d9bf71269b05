// Registration of the CPU plugin's kernels, one function per kernel family.
#pragma once

#include <string>
#include <vector>

#include "common.h"
#include "tessera/op_names.h"

namespace tessera::cpu {

// Registers kernels, tolerating ops the runtime's catalogue does not define (each such op is
// logged under TESSERA_LOG=cpu and listed in skipped()).
// Registers the plugin's kernels; names come from tessera/op_names.h (Note [Op contract]), so a
// misspelt op does not compile. A refused registration throws and fails the plugin's init.
class Registrar {
 public:
  explicit Registrar(const sdk::Host& host) : host_(host) {}
  void add(const char* op, uint64_t dtype_mask, tessera_kernel_fn_t fn, void* user_data = nullptr);
  int count() const { return count_; }

 private:
  const sdk::Host& host_;
  int count_ = 0;
};

void register_elementwise_kernels(Registrar& r);
void register_onnx_elementwise_kernels(Registrar& r);
void register_reduction_kernels(Registrar& r);
void register_index_kernels(Registrar& r);
void register_creation_kernels(Registrar& r);
void register_shape_kernels(Registrar& r);      // shape_ops.cpp
void register_onnx_nn_kernels(Registrar& r);    // onnx_nn_ops.cpp
void register_fake_quantize_kernels(Registrar& r);  // fake_quantize.cpp
void register_optimizer_kernels(Registrar& r);      // optim.cpp

// Runs `body`, turning exceptions into a status (the C ABI boundary of every kernel).
template <typename F>
tessera_status_t guarded(const tessera_kernel_call_t* call, F&& body) noexcept {
  try {
    body(KernelCall(call));
    return nullptr;
  } catch (const sdk::Error& e) {
    return sdk::make_status(e.code(), std::string(call->op_name ? call->op_name : "?") + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return sdk::make_status(TESSERA_STATUS_OUT_OF_MEMORY,
                            std::string(call->op_name ? call->op_name : "?") + ": out of host memory");
  } catch (const std::exception& e) {
    return sdk::make_status(TESSERA_STATUS_INTERNAL, std::string(call->op_name ? call->op_name : "?") + ": " + e.what());
  }
}

// A kernel written as `void fn(const KernelCall&)`, behind guarded().
template <void (*Fn)(const KernelCall&)>
tessera_status_t guarded_kernel(void*, const tessera_kernel_call_t* call) noexcept {
  return guarded(call, [](const KernelCall& c) { Fn(c); });
}

// Scalar attribute i as a 0-dim tensor of `dtype` (for the .Scalar overloads).
OwnedTensor scalar_tensor(const KernelCall& c, int attr, int32_t dtype);

constexpr uint64_t kMaskAll = TESSERA_DTYPE_MASK_ALL;
constexpr uint64_t kMaskFloat = TESSERA_DTYPE_MASK_FLOATING;
constexpr uint64_t kMaskNumeric = TESSERA_DTYPE_MASK_FLOATING | TESSERA_DTYPE_MASK_INTEGRAL;

}  // namespace tessera::cpu
