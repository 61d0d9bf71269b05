// The current device of each device type, per thread: PyTorch's torch.cuda.current_device(),
// set_device() and the `with torch.cuda.device(i):` guard, for every device type.
//
// Note [Current device]
// A device named without an index ("npu", Device(DeviceType::PrivateUse1)) means the current device
// of its type on the calling thread: memory is allocated there (the plugin allocator asks the
// plugin's device_get_current) and current_device() reports it. The plugin keeps the state
// (device_get_current / device_set_current of its device interface, per thread in every in-tree
// plugin, as CUDA's cudaSetDevice is); the host only range-checks and forwards. A plugin without
// device_set_current has device 0 current for ever: set_device to any other index is refused, naming
// the plugin and the fix (name the index in the device, "npu:1"). The CPU has one device, cpu:0.
#pragma once
#include "tessera/device.h"
#include "tessera/export.h"

namespace tessera {

// The current device of `type` on this thread, with its index (loads the type's plugin).
TESSERA_API Device current_device(DeviceType type);
// Makes `device` (which must name an index in range) the current device of its type on this thread.
TESSERA_API void set_device(Device device);

// Makes a device current for a scope and restores the previous current device of its type at the
// end (also when an exception leaves the scope).
class TESSERA_API DeviceGuard {
 public:
  explicit DeviceGuard(Device device) : previous_(current_device(device.type())) { set_device(device); }
  ~DeviceGuard() {
    try {
      set_device(previous_);
    } catch (...) {  // the plugin went away meanwhile: nothing to restore
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  Device previous() const { return previous_; }

 private:
  Device previous_;
};

}  // namespace tessera
