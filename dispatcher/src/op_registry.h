// Private to the dispatcher: the operator entry, the shape-rule (meta) interface and the unboxed
// call used by ops.cpp. See Note [Dispatch hot path] in dispatcher.h.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "small_vector.h"
#include "tessera/memory_format.h"
#include "tessera/dispatcher.h"
#include "tessera/plugin_abi.h"
#include "tessera/plugin_loader.h"

namespace tessera {

constexpr int kMaxOutputs = 4;

// Note [Kernel rank limit]
// Kernels keep per-dim arrays on the stack (the CPU plugin's StridedLoop and copy_tensor hold 16
// entries), so the dispatcher refuses any tensor argument or output of higher rank before a kernel
// or a cross-device copy sees the call. Views in core have no such limit.
constexpr int64_t kMaxKernelDims = 16;

// What a shape rule sees and fills. Tensors are the Tensor/Tensor?/Tensor[] arguments in schema
// order (a Tensor[] contributes all its elements; nullptr for an absent Tensor?), attrs the other
// arguments in schema order with defaults filled (see tessera_kernel_call_t).
class OperatorEntry;
struct MetaCall {
  const OperatorEntry* op = nullptr;
  const char* op_name = "";
  const TensorImpl* const* tensors = nullptr;
  int num_tensors = 0;
  const tessera_value_t* attrs = nullptr;
  int num_attrs = 0;
  int list_begin = -1, list_size = 0;  // position of the Tensor[] elements in `tensors`, if any

  struct Output {
    detail::SmallVector<int64_t, 8> sizes;
    std::optional<detail::SmallVector<int64_t, 8>> strides;  // default: contiguous
    DType dtype = kFloat32;
    int alias_input = -1;  // >= 0: the output is that input (in-place op), no allocation
    // Channels-last strides for this 4-D output (Note [Channels-last activations] in docs/semantics.md).
    void make_channels_last() {
      strides = detail::SmallVector<int64_t, 8>(IntArrayRef(channels_last_strides(IntArrayRef(sizes.data(), sizes.size()))));
    }
  };
  int num_outputs = 0;
  // The first num_outputs slots hold an Output and the rest are raw storage, so that a call
  // constructs and destroys only the outputs it has (most have one), not kMaxOutputs.
  class OutputSlots {
   public:
    Output& operator[](int i) { return *std::launder(reinterpret_cast<Output*>(raw_[i])); }
    const Output& operator[](int i) const { return *std::launder(reinterpret_cast<const Output*>(raw_[i])); }
    void* raw(int i) { return raw_[i]; }

   private:
    alignas(Output) unsigned char raw_[kMaxOutputs][sizeof(Output)];
  } outputs;

  MetaCall() = default;
  MetaCall(const MetaCall&) = delete;
  MetaCall& operator=(const MetaCall&) = delete;
  ~MetaCall() {
    for (int o = 0; o < num_outputs; ++o) outputs[o].~Output();
  }

  // Note [Compute dtype]: tensor inputs whose bit is set in `cast_mask` are converted to
  // `compute_dtype` by the dispatcher before the kernel runs, so a kernel sees uniform input
  // dtypes (e.g. int32 + float32 arrives as float32 + float32). The dtype a kernel's dtype_mask is
  // checked against is compute_dtype when set, else the first tensor input's, else the first output's.
  //
  // Note [Wrapped numbers reach kernels as they are]
  // A C++ number next to a tensor (`t / -3`, `t * 1e5`) is a 0-dim CPU tensor of its own kind's
  // dtype (int64, float64 or bool), marked as a wrapped number (wrapped_scalar in ops.cpp). Its
  // dtype takes part in promotion (only raising the category), but the dispatcher neither casts
  // nor moves it: the kernel converts the value straight into its compute type (float32 for
  // f16/bf16/f32 outputs, float64 for f64, the integer type for integer outputs), so no value is
  // rounded or wrapped through the output's storage dtype first (1e5 * float16 stays finite,
  // uint8 / -3 divides by -3). See docs/semantics.md.
  std::optional<DType> compute_dtype;
  uint64_t cast_mask = 0;
  bool cast_all = false;  // every tensor input (Tensor[] ops such as cat)
  bool casts(int i) const { return cast_all || (i < 64 && (cast_mask >> i & 1)); }

  Output& add_output(ArrayRef<int64_t> sizes, DType dtype) {
    Output& o = new_output();
    for (int64_t v : sizes) o.sizes.push_back(v);  // in place: a temporary would be copied again
    o.dtype = dtype;
    return o;
  }
  void alias_output(int input) { new_output().alias_input = input; }
  const TensorImpl& t(int i) const { return *tensors[i]; }
  bool has(int i) const { return i < num_tensors && tensors[i] != nullptr; }

 private:
  Output& new_output() {
    TESSERA_INTERNAL_ASSERT(num_outputs < kMaxOutputs);
    Output* o = new (outputs.raw(num_outputs)) Output;  // not Output(): that would zero it first
    ++num_outputs;
    return *o;
  }
};
using MetaFn = void (*)(MetaCall& call);

// The shape rule of op i of the contract (tessera::op::kOpInfos[i], Note [OpInfo]); op_catalogue.cpp.
MetaFn core_meta(int index);
// Composite (decomposition) kernels of the built-in catalogue, registered after the schemas.
void register_core_composites(Dispatcher& d);
// The reference kernels of quantize_per_tensor, quantize_per_channel, dequantize and int_repr
// (quantization.cpp), called by register_core_composites.
void register_quantization_composites(Dispatcher& d);

struct ArgInfo {
  ArgType type;
  bool is_tensor;                   // Tensor, Tensor?, Tensor[]
  tessera_value_t default_value{};  // kind NONE and `has_default` false when none
  bool has_default = false;
  std::vector<int64_t> default_ints;  // backing store of an int[] default
  std::string default_string;         // backing store of a str default
};

class OperatorEntry {
 public:
  FunctionSchema schema;
  std::string name;  // full name, "add.Tensor"
  std::string provider;
  std::vector<std::string> tags;  // of ops.json; empty for ops defined by plugins
  // Pointwise ops, clone and _to_copy: a fresh 4-D output follows a channels-last input's layout
  // (Note [Channels-last activations] in docs/semantics.md).
  bool keeps_layout = false;
  std::string doc;
  MetaFn meta = nullptr;
  std::vector<ArgInfo> args;
  int num_tensor_args = 0;  // excluding Tensor[]
  int num_attr_args = 0;
  int tensor_list_arg = -1;  // index in schema arguments of the Tensor[] argument, if any
  // The Tensor[] argument is written in place (`Tensor(a!)[]`, the multi-tensor optimizer steps):
  // every element's version is bumped, and a capture refuses the op (it has no outputs to trace).
  bool writes_list = false;
  // return i aliases tensor input alias_of[i] (-1: fresh output)
  std::vector<int> return_alias;

  // Published kernels, one per dispatch slot. Written under the dispatcher's mutex, read lock-free.
  std::array<std::atomic<const KernelEntry*>, kNumDispatchSlots> slots{};
  std::atomic<const CompositeFn*> composite{nullptr};
  std::atomic<uint32_t> forbid_fallback_mask{0};  // bit per DeviceType
};

// The arguments of one call, unboxed: views into the caller's frame.
struct CallFrame {
  const TensorImpl* const* tensors = nullptr;  // flattened as in MetaCall
  int num_tensors = 0;
  const tessera_value_t* attrs = nullptr;
  int num_attrs = 0;
  const Device* device = nullptr;  // target device for ops without tensor inputs (factories)
};

// The unboxed call (ops.cpp, tensor_methods.cpp). Returns the number of outputs written to `outs`.
int call_unboxed(OperatorEntry& op, const CallFrame& frame, Tensor* outs);
// Single-output convenience.
Tensor call_unboxed_one(OperatorEntry& op, const CallFrame& frame);

// Same device: same type and index, where index -1 ("the current device") matches any index.
inline bool same_device(Device a, Device b) {
  return a.type() == b.type() && (a.index() == b.index() || a.index() < 0 || b.index() < 0);
}

// tessera_value_t helpers.
inline tessera_value_t value_none() {
  tessera_value_t v{};
  v.kind = TESSERA_VALUE_NONE;
  return v;
}
inline tessera_value_t value_int(int64_t i) {
  tessera_value_t v{};
  v.kind = TESSERA_VALUE_INT;
  v.u.i = i;
  return v;
}
inline tessera_value_t value_double(double d) {
  tessera_value_t v{};
  v.kind = TESSERA_VALUE_DOUBLE;
  v.u.d = d;
  return v;
}
inline tessera_value_t value_bool(bool b) {
  tessera_value_t v{};
  v.kind = TESSERA_VALUE_BOOL;
  v.u.b = b ? 1 : 0;
  return v;
}
inline tessera_value_t value_ints(IntArrayRef a) {
  tessera_value_t v{};
  v.kind = TESSERA_VALUE_INT_LIST;
  v.count = int32_t(a.size());
  v.u.ints = a.data();
  return v;
}
inline tessera_value_t value_string(const char* s) {
  tessera_value_t v{};
  v.kind = TESSERA_VALUE_STRING;
  v.u.s = s;
  return v;
}
inline tessera_value_t value_dtype(DType t) {
  tessera_value_t v{};
  v.kind = TESSERA_VALUE_DTYPE;
  v.u.i = int64_t(t);
  return v;
}
inline tessera_value_t value_scalar(const Scalar& s) {
  if (s.is_floating()) return value_double(s.to_double());
  if (s.is_bool()) return value_bool(s.to_bool());
  return value_int(s.to_int());
}
inline Scalar scalar_of(const tessera_value_t& v) {
  if (v.kind == TESSERA_VALUE_DOUBLE) return Scalar(v.u.d);
  if (v.kind == TESSERA_VALUE_BOOL) return Scalar(v.u.b != 0);
  return Scalar(v.u.i);
}

// throw_status, the one mapping of a plugin's status to tessera::Error: Note [Plugin status to
// error] in tessera/plugin_loader.h.

}  // namespace tessera
