// Dispatch keys. Note [DispatchKeySet layout]
// A 64-bit set. Bits 0..7 are backend components (one per DeviceType, bit = int(DeviceType)),
// bits 8..15 are functionality keys in priority order (Dense lowest, Export highest). The kernel a
// call reaches is found with two count-leading-zeros (highest functionality, highest backend) and
// one table index `functionality * kNumBackendSlots + backend`: no map look-up, no allocation.
#pragma once
#include <cstdint>
#include <string>

#include "tessera/device.h"
#include "tessera/export.h"

namespace tessera {

enum class Functionality : uint8_t {
  Dense = 0,      // plain kernels of a backend
  Quantized = 1,
  Sparse = 2,
  Autograd = 3,
  Autocast = 4,
  Export = 5,     // tracing / graph capture (highest)
};
constexpr int kNumFunctionalities = 6;
constexpr int kNumBackendSlots = 8;  // DeviceType values 0..6, one spare
constexpr int kNumDispatchSlots = kNumFunctionalities * kNumBackendSlots;
constexpr int kFunctionalityShift = 8;

TESSERA_API const char* functionality_name(Functionality f);

class DispatchKeySet {
 public:
  constexpr DispatchKeySet() = default;
  constexpr explicit DispatchKeySet(uint64_t raw) : bits_(raw) {}
  static constexpr DispatchKeySet backend(DeviceType t) { return DispatchKeySet(uint64_t(1) << int(t)); }
  static constexpr DispatchKeySet functionality(Functionality f) {
    return DispatchKeySet(uint64_t(1) << (kFunctionalityShift + int(f)));
  }
  // The usual key set of a plain tensor on device type `t`: {Dense, t}.
  static constexpr DispatchKeySet dense(DeviceType t) { return backend(t) | functionality(Functionality::Dense); }

  constexpr uint64_t raw() const { return bits_; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr bool has(Functionality f) const { return (bits_ & functionality(f).bits_) != 0; }
  constexpr bool has(DeviceType t) const { return (bits_ & backend(t).bits_) != 0; }
  constexpr DispatchKeySet operator|(DispatchKeySet o) const { return DispatchKeySet(bits_ | o.bits_); }
  constexpr DispatchKeySet operator&(DispatchKeySet o) const { return DispatchKeySet(bits_ & o.bits_); }
  constexpr DispatchKeySet operator-(DispatchKeySet o) const { return DispatchKeySet(bits_ & ~o.bits_); }
  constexpr bool operator==(DispatchKeySet o) const { return bits_ == o.bits_; }

  // Highest functionality / backend present; -1 if none.
  constexpr int highest_functionality() const {
    uint64_t f = (bits_ >> kFunctionalityShift) & 0xff;
    return f ? 63 - __builtin_clzll(f) : -1;
  }
  constexpr int highest_backend() const {
    uint64_t b = bits_ & 0xff;
    return b ? 63 - __builtin_clzll(b) : -1;
  }
  // Kernel-table index of the highest key, or -1 when the set names no functionality or backend.
  constexpr int slot() const {
    int f = highest_functionality(), b = highest_backend();
    return (f < 0 || b < 0) ? -1 : f * kNumBackendSlots + b;
  }
  TESSERA_API std::string str() const;

 private:
  uint64_t bits_ = 0;
};

// Thread-local include/exclude sets applied to every dispatch on this thread.
struct LocalDispatchKeySet {
  DispatchKeySet included;
  DispatchKeySet excluded;
};
TESSERA_API LocalDispatchKeySet& tls_local_dispatch_key_set();

// RAII: adds keys to the thread's included set for the guard's lifetime.
class IncludeDispatchKeyGuard {
 public:
  explicit IncludeDispatchKeyGuard(DispatchKeySet ks)
      : tls_(tls_local_dispatch_key_set()), saved_(tls_.included) { tls_.included = tls_.included | ks; }
  ~IncludeDispatchKeyGuard() { tls_.included = saved_; }
  IncludeDispatchKeyGuard(const IncludeDispatchKeyGuard&) = delete;
  IncludeDispatchKeyGuard& operator=(const IncludeDispatchKeyGuard&) = delete;

 private:
  LocalDispatchKeySet& tls_;
  DispatchKeySet saved_;
};

// RAII: removes keys from every dispatch on this thread for the guard's lifetime.
class ExcludeDispatchKeyGuard {
 public:
  explicit ExcludeDispatchKeyGuard(DispatchKeySet ks)
      : tls_(tls_local_dispatch_key_set()), saved_(tls_.excluded) { tls_.excluded = tls_.excluded | ks; }
  ~ExcludeDispatchKeyGuard() { tls_.excluded = saved_; }
  ExcludeDispatchKeyGuard(const ExcludeDispatchKeyGuard&) = delete;
  ExcludeDispatchKeyGuard& operator=(const ExcludeDispatchKeyGuard&) = delete;

 private:
  LocalDispatchKeySet& tls_;
  DispatchKeySet saved_;
};

}  // namespace tessera
