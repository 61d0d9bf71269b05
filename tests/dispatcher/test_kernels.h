// Naive in-process kernels and a host-memory fake device for the dispatcher tests. The kernels work
// on any host-addressable memory, so the same functions serve the CPU and the fake device.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/dispatcher.h"
#include "tessera/plugin_abi.h"

namespace tessera::testing {

// Element access (bool, integers, float32, float64).
double load(const tessera_tensor_t* t, int64_t offset_elems);
void store(const tessera_tensor_t* t, int64_t offset_elems, double v);
// Offset (in elements) of element `linear` of the row-major shape `sizes` in `t`, broadcasting t.
int64_t bcast_offset(const tessera_tensor_t* t, const int64_t* sizes, int ndim, int64_t linear);

// Kernels.
tessera_status_t k_fill(void*, const tessera_kernel_call_t* c);
tessera_status_t k_copy(void*, const tessera_kernel_call_t* c);
tessera_status_t k_add(void*, const tessera_kernel_call_t* c);  // also sub when user_data != null
tessera_status_t k_mul(void*, const tessera_kernel_call_t* c);
tessera_status_t k_div(void*, const tessera_kernel_call_t* c);
tessera_status_t k_eq(void*, const tessera_kernel_call_t* c);
tessera_status_t k_neg(void*, const tessera_kernel_call_t* c);
tessera_status_t k_relu(void*, const tessera_kernel_call_t* c);
tessera_status_t k_exp(void*, const tessera_kernel_call_t* c);
tessera_status_t k_sum(void*, const tessera_kernel_call_t* c);
tessera_status_t k_matmul(void*, const tessera_kernel_call_t* c);  // 2-D only
tessera_status_t k_uniform(void*, const tessera_kernel_call_t* c);
tessera_status_t k_arange(void*, const tessera_kernel_call_t* c);
tessera_status_t k_noop(void*, const tessera_kernel_call_t* c);
tessera_status_t k_unimplemented(void*, const tessera_kernel_call_t* c);

// What the last k_noop call saw.
struct SeenCall {
  std::string op;
  std::vector<int32_t> input_dtypes;   // -1 for an absent input
  std::vector<int32_t> input_devices;  // device types
  std::vector<int32_t> attr_kinds;
  int num_outputs = 0;
};
SeenCall& last_seen();

// Registers a kernel for the duration of the object.
class ScopedKernel {
 public:
  ScopedKernel(const char* op, DeviceType backend, tessera_kernel_fn_t fn, void* user_data = nullptr,
               uint64_t dtype_mask = TESSERA_DTYPE_MASK_ALL, uint32_t flags = 0,
               Functionality f = Functionality::Dense);
  ~ScopedKernel();
  ScopedKernel(const ScopedKernel&) = delete;
  ScopedKernel& operator=(const ScopedKernel&) = delete;

 private:
  RegistrationHandle handle_;
};

// The fake device (PrivateUse1, named "fake_device"): host memory behind the device interface.
constexpr const char* kFakeDeviceName = "fake_device";
struct FakeDeviceStats {
  std::atomic<int> from_host{0}, to_host{0}, device_to_device{0};
  std::atomic<int> fail_next_from_host{0};  // > 0: the next copies from the host fail half-way
};
FakeDeviceStats& fake_stats();

// Sets everything up once: CPU kernels, the fake device and its kernels (fill_, copy_, add, mul,
// neg). Idempotent.
void setup_test_backends();

}  // namespace tessera::testing
