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

// Note [Hot thread-locals]: the few thread-locals every call reads use the initial-exec TLS model,
// one load relative to %fs instead of a __tls_get_addr call each (about 5% of a call on 1-element
// tensors). They are small and trivially constructed (under 256 bytes in all, which a dlopen of
// libtessera still finds in glibc's static TLS surplus); large or lazily built ones stay general.
LocalDispatchKeySet& tls_local_dispatch_key_set() {
  __attribute__((tls_model("initial-exec"))) static thread_local LocalDispatchKeySet local;
  return local;
}

}  // namespace tessera
