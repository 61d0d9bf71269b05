// Mixed precision on any device: autocast (libtessera_autograd) and the gradient scaler
// (libtessera_nn, tessera/nn.h: amp::GradScaler). docs/training.md, "Mixed precision".
//
// Note [Autocast policy]
// Inside an AutocastGuard for a device type, every op called on that device type's tensors is cast
// by its policy before it runs (Note [Autocast dispatch]), as torch.autocast does:
//   LowerPrecision  the floating inputs (float32; float64 is left alone, as in PyTorch) are cast
//                   to the guard's dtype (bfloat16 or float16): matmul, linear, conv2d, SDPA, ...
//   Float32         bfloat16/float16 inputs are cast to float32: the ops whose accuracy or range
//                   needs it (softmax, log_softmax, the norms, exp, log, pow, sum, cumsum, ...);
//   Promote         the floating inputs are cast to the widest floating dtype among them (cat,
//                   stack, where, atan2, ...), so mixing cast and uncast tensors works;
//   None            the op runs on its inputs as they are (most pointwise ops: they follow their
//                   inputs' dtype).
// The default tables follow PyTorch's CUDA lists, restricted to the ops of the contract, for every
// device type. A backend plugin adjusts its device type's table as data, in its manifest (Note
// [Autocast policies from the manifest] in dispatcher/src/manifest.cpp, applied the first time that
// type's policies are used), or in code, through the TESSERA_EXT_AUTOCAST_POLICY extension (Note
// [Autocast policies in code] in plugin_abi.h, applied once the plugin has loaded, over the
// manifest's); an application changes one op for one device type with set_autocast_policy, which
// neither overrides. Within the outermost enabled guard of a
// thread, the lower-precision cast of a float32 leaf that requires grad (a weight) is made once and
// reused (Note [Autocast cast cache] in autograd/src/autocast.cpp), as PyTorch's cached_cast.
// The state is per thread and per device type; guards nest and restore what they found.
#pragma once
#include <string>
#include <vector>

#include "tessera/autograd.h"

namespace tessera::amp {

enum class CastPolicy : uint8_t { None, LowerPrecision, Float32, Promote };
TESSERA_AUTOGRAD_API const char* cast_policy_name(CastPolicy p);

// Turns autocast on (or off, enabled = false) for `device_type` on this thread for the guard's
// lifetime. `dtype` is the lower precision: kBFloat16 (the default) or kFloat16.
class TESSERA_AUTOGRAD_API AutocastGuard {
 public:
  explicit AutocastGuard(DeviceType device_type, DType dtype = kBFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType type_;
  bool was_enabled_;
  DType was_dtype_;
  bool counted_ = false;
};

// The casts in this thread's autocast cache (for tests; emptied when the outermost guard ends).
TESSERA_AUTOGRAD_API size_t autocast_cached_casts();

TESSERA_AUTOGRAD_API bool is_autocast_enabled(DeviceType device_type);
// The lower-precision dtype of `device_type`'s autocast on this thread (kBFloat16 when never set).
TESSERA_AUTOGRAD_API DType autocast_dtype(DeviceType device_type);

// The policy of `op` ("matmul", or an overload "add.Tensor"; an overload without its own entry
// takes its base name's) on `device_type`. Throws naming the op when the contract has no such op.
TESSERA_AUTOGRAD_API CastPolicy autocast_policy(DeviceType device_type, const std::string& op);
TESSERA_AUTOGRAD_API void set_autocast_policy(DeviceType device_type, const std::string& op, CastPolicy policy);
// The ops of `device_type` with `policy` (its table; None: every op without an entry is None).
TESSERA_AUTOGRAD_API std::vector<std::string> autocast_ops(DeviceType device_type, CastPolicy policy);

}  // namespace tessera::amp
