// Devices and their names. Note [Device names]: every name is parsed and printed through one
// table: built-in names (cpu, cuda, opencl, meta) plus the names given to the three privateuse
// slots. A slot without a name is spelled privateuse1..3.
#pragma once
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/export.h"

namespace tessera {

// Values equal tessera_device_type_t of the plugin ABI.
enum class DeviceType : int8_t {
  CPU = 0, CUDA = 1, OpenCL = 2, Meta = 3, PrivateUse1 = 4, PrivateUse2 = 5, PrivateUse3 = 6,
};
constexpr int kNumDeviceTypes = 7;
constexpr DeviceType kCPU = DeviceType::CPU, kCUDA = DeviceType::CUDA, kOpenCL = DeviceType::OpenCL,
                     kMeta = DeviceType::Meta, kPrivateUse1 = DeviceType::PrivateUse1;

// The current name of a device type ("cpu", "npu", or "privateuse2" for an unnamed slot).
TESSERA_API std::string device_type_name(DeviceType t);
// Parses a type name (no index). Throws, listing the known names, when unknown.
TESSERA_API DeviceType device_type_from_name(std::string_view name);
// Every name currently known, in DeviceType order.
TESSERA_API std::vector<std::string> known_device_names();

class TESSERA_API Device {
 public:
  // index -1 means "the current device of that type".
  constexpr Device(DeviceType type, int index = -1) : type_(type), index_(int16_t(index)) {}  // NOLINT
  // "cpu", "cuda:1", "npu:0" (after renaming). Throws on unknown names or bad indices.
  Device(std::string_view name);   // NOLINT(google-explicit-constructor)
  Device(const std::string& name) : Device(std::string_view(name)) {}  // NOLINT
  Device(const char* name) : Device(std::string_view(name)) {}          // NOLINT

  constexpr DeviceType type() const { return type_; }
  constexpr int index() const { return index_; }
  constexpr bool has_index() const { return index_ >= 0; }
  constexpr bool is_cpu() const { return type_ == DeviceType::CPU; }
  std::string str() const;

  constexpr bool operator==(const Device& o) const { return type_ == o.type_ && index_ == o.index_; }
  constexpr bool operator!=(const Device& o) const { return !(*this == o); }

 private:
  DeviceType type_;
  int16_t index_;
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

// Note [PrivateUse renaming]
// A name is a lower-case identifier ([a-z_][a-z0-9_]*), not a built-in name (cpu, cuda, opencl,
// meta, privateuse1..3); `cuda2` or `cpux` are fine. Renaming a slot to its current name is a no-op;
// to another name is an error naming the current one; a name held by another slot is an error.
// Thread-safe; names never change once set (until reset_privateuse_names_for_testing).
// A plugin manifest's name is a claim, not a rename (claim_privateuse_backend): it makes
// Device("npu") parse before the plugin loads, and an explicit rename by the application replaces
// it (the same slot to another name, or another slot to the claimed name) until the loader settles
// the claim by renaming the slot itself when the plugin loads. The loader then lists the plugin
// whose claim was replaced as failed, naming both names.
TESSERA_API void rename_privateuse1_backend(std::string_view name);
TESSERA_API void rename_privateuse_backend(int slot, std::string_view name);  // slot 1..3
// Names an unnamed slot provisionally (see above). Claiming the current name again is a no-op;
// throws, as rename does, when the slot holds another name or the name is held by another slot.
TESSERA_API void claim_privateuse_backend(int slot, std::string_view name);
TESSERA_API std::string privateuse1_backend_name();
TESSERA_API std::string privateuse_backend_name(int slot);
// Called once when a device name is not known, before the parse fails: the plugin loader installs
// it to read manifests (which may claim privateuse slots), so `Device("npu")` works before any
// plugin library is loaded.
using UnknownDeviceNameHook = void (*)();
TESSERA_API void set_unknown_device_name_hook(UnknownDeviceNameHook hook);
// Called when a parse fails for good: returns why `name` is not a device (for instance the plugin
// that would have provided it failed, and why), or "" when it knows nothing. The text is appended
// to the parse error. Must not throw.
using DeviceNameReasonHook = std::string (*)(std::string_view name);
TESSERA_API void set_device_name_reason_hook(DeviceNameReasonHook hook);
// Tests only: forget all names.
TESSERA_API void reset_privateuse_names_for_testing();

}  // namespace tessera

template <>
struct std::hash<tessera::Device> {
  size_t operator()(const tessera::Device& d) const noexcept {
    return (size_t(uint8_t(d.type())) << 16) ^ size_t(uint16_t(d.index()));
  }
};
