// What a device can do, asked instead of guessed from its name (Note [Device capabilities]).
#pragma once
#include <string>
#include <vector>

#include "tessera/device.h"
#include "tessera/dtype.h"
#include "tessera/export.h"

namespace tessera {

// Note [Device capabilities]
// One typed answer per device type, read from what its backend plugin offers: the device
// interface's optional slots (plugin_abi.h) and the plugin header's feature bits. Generic code
// (a training loop that overlaps copies, a cache sized from memory statistics, a profiler that
// times kernels with events) branches on these, never on the device's name. Capabilities the plugin
// ABI has no slot for yet are reported false with the reason in `absent`. `dtypes` lists the dtypes
// some dense kernel the device registered takes (its own kernels, not the CPU fallback's; quantized
// kernels sit under their own functionality), sorted by dtype id. Loads the device's plugin when it is not loaded yet; throws naming the device when no
// plugin provides it.
struct DeviceCapabilities {
  std::string device;  // the device type's name: "cpu", "my_hardware_device"
  std::string plugin;  // the plugin that provides it
  int device_count = 0;
  bool streams = false;                // stream_create / stream_synchronize
  bool events = false;                 // event_create / record / wait / synchronize
  bool event_timing = false;           // event_elapsed_time
  bool async_execution = false;        // kernels may return before they finish (TESSERA_PLUGIN_FEATURE_ASYNC)
  bool memory_stats = false;           // memory_stats (tessera::memory_stats reports it)
  bool device_to_device_copy = false;  // memory_copy_device (else copies go through the host)
  bool record_stream = false;          // memory_record_stream
  bool empty_cache = false;            // the TESSERA_EXT_EMPTY_CACHE extension
  bool graph_capture = false;          // no ABI slot yet
  bool pinned_host_memory = false;     // pinned_allocate / pinned_free (TensorOptions::pinned_memory)
  bool async_pinned_copy = false;      // memory_copy_from_pinned (Tensor::to(device, non_blocking))
  bool peer_access = false;            // no ABI slot yet
  bool memory_info = false;            // memory_info: free / total bytes (tessera::memory_info)
  std::vector<DType> dtypes;
  std::string absent;  // what the ABI cannot express yet, one line

  // "my_hardware_device (plugin my_hardware_device, 1 device): streams, events, ..."
  TESSERA_API std::string str() const;
};

TESSERA_API DeviceCapabilities device_capabilities(const Device& device);

}  // namespace tessera
