// Kernels of the emulated accelerator. Each kernel validates its call on the host, captures what it
// needs by value and enqueues the computation on the call's stream (Note [Emulated streams]).
#pragma once
#include <cstdint>
#include <functional>

#include <tessera/plugin_abi.h>

#include "emulator.h"

namespace mhd {

struct KernelSpec {
  const char* op;       // operator name as the runtime knows it ("add.Tensor")
  uint64_t dtype_mask;  // dtypes the kernel implements; others go to the fallback
  tessera_kernel_fn_t fn;
};

// The kernel table, in counter order (op id = index). `count` receives its length.
const KernelSpec* kernel_specs(int* count);
// Backward kernels, registered under the Autograd functionality; their counters follow the
// forward kernels' (op id = kernel_specs' count + index).
const KernelSpec* backward_kernel_specs(int* count);
// The ABI value of the Autograd functionality (the runtime's Functionality::Autograd).
constexpr int32_t kFunctionalityAutograd = 3;

// Note [Plugin spans] in tessera/plugin_abi.h: while the runtime profiles, `task` is wrapped so that
// its run on `queue` is recorded as a span (`name`, `category`, and {"bytes": bytes} when bytes >= 0)
// carrying the correlation id of the host op issuing it now; otherwise `task` comes back as it is.
std::function<void()> traced(std::function<void()> task, const char* name, const char* category, int device,
                             const Queue& queue, int64_t bytes = -1);

// The emulator the kernels run on (set at plugin init, cleared at shutdown).
Emulator*& emulator();
// The calling thread's current device (device_set_current).
int& current_device();

}  // namespace mhd
