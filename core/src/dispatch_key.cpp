// Dispatch-key names and the thread-local include/exclude sets. See Note [DispatchKeySet layout].
#include "tessera/dispatch_key.h"

namespace tessera {

namespace {
constexpr const char* kFunctionalityNames[kNumFunctionalities] = {
    "Dense", "Quantized", "Sparse", "Autograd", "Autocast", "Export",
};
// Backend components by their fixed (slot) names, independent of PrivateUse renaming.
constexpr const char* kBackendNames[kNumBackendSlots] = {
    "CPU", "CUDA", "OpenCL", "Meta", "PrivateUse1", "PrivateUse2", "PrivateUse3", "Backend7",
};
}  // namespace

const char* functionality_name(Functionality f) {
  const int i = int(f);
  return (i >= 0 && i < kNumFunctionalities) ? kFunctionalityNames[i] : "UnknownFunctionality";
}

std::string DispatchKeySet::str() const {
  std::string out = "DispatchKeySet(";
  bool first = true;
  auto add = [&](const std::string& s) {
    out += first ? "" : ", ";
    out += s;
    first = false;
  };
  for (int f = 0; f < kNumFunctionalities; ++f)
    if (bits_ & (uint64_t(1) << (kFunctionalityShift + f))) add(kFunctionalityNames[f]);
  for (int b = 0; b < kNumBackendSlots; ++b)
    if (bits_ & (uint64_t(1) << b)) add(kBackendNames[b]);
  // Bits that name nothing (a corrupt or future set) are shown rather than hidden.
  for (int bit = kFunctionalityShift + kNumFunctionalities; bit < 64; ++bit)
    if (bits_ & (uint64_t(1) << bit)) add("bit" + std::to_string(bit));
  return out + ")";
}

LocalDispatchKeySet& tls_local_dispatch_key_set() {
  thread_local LocalDispatchKeySet local;
  return local;
}

}  // namespace tessera
