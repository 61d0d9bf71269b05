// What the dispatcher knows of autograd: the Autograd key's hook and the per-device backward slot.
// Note [Autograd dispatch]
// The Autograd functionality sits above the backends (dispatch_key.h). A call whose key set holds it
// (an input requires grad or was produced by a recorded op, and grad mode is on, i.e. the key is not
// excluded on the thread) goes, before its shape rule, to the autograd hook that libtessera_autograd
// sets when it loads; the hook redispatches below the Autograd key and records the backward. A call
// without the key pays one bit test, the same as the Export key's (Note [Export hook]). The Autograd
// key of a 0-dim CPU tensor (which otherwise follows the other tensors' device and keys) joins the
// call's key set, so a scalar parameter is recorded too. Without a hook the key falls through as
// before (its slots, then the backends).
// The kernel slots {Autograd, backend} of an op hold a plugin's *backward* kernel for that op on its
// device (PyTorch's AutogradPrivateUse1 slot): the engine runs it instead of the op's generic
// formula from dispatcher/ops/derivatives.json. Its calling convention, in the C ABI:
//   inputs:  the gradient of output 0, then the forward call's tensor inputs in schema order
//            (an absent Tensor? is NULL);
//   attrs:   the forward call's attributes, defaults filled;
//   outputs: one per forward tensor input, allocated contiguous with that input's sizes and dtype
//            on the device; the kernel writes the gradient of each.
// It may answer UNIMPLEMENTED (the engine then uses the generic formula). docs/training.md.
#pragma once
#include <vector>

#include "tessera/dispatcher.h"

namespace tessera {

// A call that reached the Autograd key, boxed (arguments in schema order, defaults filled).
struct AutogradCall {
  OperatorEntry* op = nullptr;
  const std::string* name = nullptr;  // "add.Tensor"
  Stack args;
  Device device{DeviceType::CPU};
};
// Runs the call (below the Autograd key) and returns its outputs.
using AutogradHook = std::vector<Tensor> (*)(AutogradCall& call);
// Replaces the hook (nullptr: none) and returns the previous one.
TESSERA_API AutogradHook set_autograd_hook(AutogradHook hook);

// Cross-device Tensor::to(device) is not an op (the bytes move through the device interfaces), so
// it has a hook of its own: called instead of the copy when the source has the Autograd key; it
// returns the moved tensor (recorded when grad mode is on). nullptr: none.
using AutogradToDeviceHook = Tensor (*)(const Tensor& self, Device device);
TESSERA_API AutogradToDeviceHook set_autograd_to_device_hook(AutogradToDeviceHook hook);
namespace detail {
TESSERA_API AutogradToDeviceHook autograd_to_device_hook();
}  // namespace detail

// The backward kernel registered for `op` under {Autograd, backend}, or nullptr.
TESSERA_API const KernelEntry* device_backward_kernel(const OperatorEntry& op, DeviceType backend);
// Runs backward kernel `k` as Note [Autograd dispatch] describes. `grad` and the tensors of
// `forward_args` must be on `device`; returns false when the kernel answered UNIMPLEMENTED or does
// not take the dtype, and then `grads` is left empty. Throws on any other failure.
TESSERA_API bool run_device_backward(const KernelEntry& k, OperatorEntry& op, const Tensor& grad,
                                     const Stack& forward_args, Device device, std::vector<Tensor>& grads);

}  // namespace tessera
