// The Allocator over a backend plugin's device interface (private to the loader).
#pragma once
#include <array>
#include <atomic>
#include <string>

#include "host_api.h"
#include "tessera/allocator.h"
#include "tessera/plugin_abi.h"

namespace tessera::loader {

// Note [Plugin allocators outlive their plugin]
// A DataPtr's deleter context points into its allocator, so an allocator object is never deleted;
// after its plugin shuts down it is retired and frees nothing (the plugin freed its memory in its
// shutdown). Each load makes a new allocator, whose `alive_` flag is the DataPtrs' liveness flag
// (Note [Plugin generations] in allocator.h): a tensor that outlives its plugin is unusable, with
// a clear error, instead of reaching memory that a reloaded plugin handed to another tensor.
class PluginAllocator final : public Allocator {
 public:
  static constexpr int kMaxDevices = 64;

  PluginAllocator(DeviceType type, const tessera_device_interface_t* iface, void* self, std::string plugin)
      : type_(type), iface_(iface), self_(self), plugin_(std::move(plugin)) {
    for (int i = 0; i < kMaxDevices; ++i) slots_[i] = Slot{this, i};
  }

  DataPtr allocate(size_t nbytes, int device_index) override;
  // Host memory from the plugin's pinned_allocate (ABI 1.3), as a CPU DataPtr whose deleter calls
  // pinned_free. Only when has_pinned(). Throws naming the plugin when pinned_allocate fails.
  DataPtr allocate_pinned(size_t nbytes);
  bool has_pinned() const {
    return TESSERA_ABI_HAS_FIELD(iface_, tessera_device_interface_t, pinned_free) &&
           iface_->pinned_allocate && iface_->pinned_free;
  }
  DeviceType device_type() const { return type_; }

  void retire() { alive_.store(false, std::memory_order_release); }

 private:
  struct Slot {
    PluginAllocator* owner;
    int32_t index;
  };
  static void free_handle(void* ctx, void* handle) {
    auto* slot = static_cast<Slot*>(ctx);
    PluginAllocator* a = slot->owner;
    // During a shutdown the plugin releases all its memory itself: this handle is left to it.
    PluginCallGuard in_flight(std::nothrow);
    if (in_flight.entered() && a->alive_.load(std::memory_order_acquire) && a->iface_->memory_free) a->iface_->memory_free(a->self_, slot->index, handle);
  }

  static void free_pinned(void* ctx, void* host_ptr);

  DeviceType type_;
  const tessera_device_interface_t* iface_;
  void* self_;
  std::string plugin_;
  std::atomic<bool> alive_{true};
  std::array<Slot, kMaxDevices> slots_{};
};

}  // namespace tessera::loader
