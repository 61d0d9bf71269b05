// State shared by the dispatcher's parts (registry.cpp, call_path.cpp, boxed_call.cpp,
// device_registry.cpp). Internal: not installed.
#pragma once
#include <array>
#include <atomic>
#include <string>

#include "op_registry.h"
#include "tessera/device.h"

namespace tessera {

inline std::string device_label(Device d) { return d.is_cpu() ? std::string("cpu") : d.str(); }

// Backend fallbacks, one per dispatch slot (written under the registry's mutex, read lock-free).
extern std::array<std::atomic<const KernelEntry*>, kNumDispatchSlots> g_fallbacks;

}  // namespace tessera
