// Pinned host memory (TensorOptions::pinned_memory, Tensor::pin_memory): the registry of the
// blocks the runtime holds from plugins' pinned allocators (docs/plugins.md, "Memory info and
// pinned host memory"). Private to the dispatcher.
#pragma once
#include <optional>

#include "tessera/tensor.h"

namespace tessera::detail {

// A contiguous CPU tensor in host memory pinned for `accelerator`'s device type; an ordinary CPU
// tensor when that type's plugin has no pinned allocator (the host default).
Tensor make_pinned_tensor(IntArrayRef sizes, DType dtype, Device accelerator);
// The device type `storage`'s memory is pinned for, or nullopt when it is not pinned memory.
std::optional<DeviceType> pinned_device_type(const StorageImpl& storage);
// Called by the pinned deleter and the allocator (plugin_allocator.cpp).
void pinned_register(const void* block, DeviceType type);
void pinned_unregister(const void* block);

}  // namespace tessera::detail
