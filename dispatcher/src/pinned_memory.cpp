// Pinned host memory: the registry of pinned blocks, pinned factories and Tensor::is_pinned /
// pin_memory (docs/plugins.md, "Memory info and pinned host memory").
#include "pinned_memory.h"

#include <map>
#include <mutex>

#include "plugin_allocator.h"
#include "tessera/error.h"

namespace tessera {
namespace detail {
namespace {

// Block start -> the device type it is pinned for. A storage's data pointer is its block's start,
// so a look-up is exact.
struct PinnedBlocks {
  std::mutex mutex;
  std::map<const void*, DeviceType> blocks;
};
PinnedBlocks& pinned_blocks() {
  static auto* p = new PinnedBlocks;  // outlives static destruction: tensors may die after it
  return *p;
}

}  // namespace

void pinned_register(const void* block, DeviceType type) {
  PinnedBlocks& p = pinned_blocks();
  std::lock_guard lock(p.mutex);
  p.blocks[block] = type;
}

void pinned_unregister(const void* block) {
  PinnedBlocks& p = pinned_blocks();
  std::lock_guard lock(p.mutex);
  p.blocks.erase(block);
}

std::optional<DeviceType> pinned_device_type(const StorageImpl& storage) {
  if (!storage.device().is_cpu() || !storage.data()) return std::nullopt;
  PinnedBlocks& p = pinned_blocks();
  std::lock_guard lock(p.mutex);
  auto it = p.blocks.find(storage.data());
  if (it == p.blocks.end()) return std::nullopt;
  return it->second;
}

Tensor make_pinned_tensor(IntArrayRef sizes, DType dtype, Device accelerator) {
  const Device cpu(DeviceType::CPU);
  auto* allocator =
      dynamic_cast<loader::PluginAllocator*>(get_allocator(accelerator.type()));      // loads the plugin
  if (!allocator || !allocator->has_pinned()) return make_tensor(sizes, dtype, cpu);  // host default
  const int64_t numel = compute_numel(sizes);                                         // checks the sizes
  const std::optional<uint64_t> nbytes = checked_nbytes(numel, itemsize(dtype));
  TESSERA_CHECK(nbytes.has_value() && *nbytes <= uint64_t(INT64_MAX), "pinned_memory: shape ", sizes,
                " of dtype ", dtype, " needs more bytes than fit in 63 bits");
  Storage storage = make_intrusive<StorageImpl>(allocator->allocate_pinned(size_t(*nbytes)), size_t(*nbytes));
  const std::vector<int64_t> strides = contiguous_strides(sizes);
  return Tensor(make_intrusive<TensorImpl>(std::move(storage), dtype, cpu, sizes, IntArrayRef(strides), 0));
}

}  // namespace detail

bool Tensor::is_pinned() const {
  return defined() && storage() && detail::pinned_device_type(*storage()).has_value();
}

Tensor Tensor::pin_memory(Device accelerator) const {
  TESSERA_CHECK(defined(), "pin_memory: the tensor is undefined (default-constructed)");
  TESSERA_CHECK(device().is_cpu(), "pin_memory: only CPU tensors can be pinned, this one is on ",
                device().str(), "; move it with .cpu() first");
  if (storage() && detail::pinned_device_type(*storage()) == accelerator.type()) return *this;
  Tensor out = detail::make_pinned_tensor(sizes(), dtype(), accelerator);
  out.copy_(*this);
  return out;
}

}  // namespace tessera
