// The call path: key set and device, the shape rule, the kernel call with its C views, and the
// resolution when the fast path misses (Note [Dispatch hot path] in dispatcher.h; resolve()).
#include "tessera/dispatcher.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>

#include "c_tensor.h"
#include "cpu_fallback.h"
#include "dispatcher_state.h"
#include "host_api.h"
#include "memory_format_internal.h"
#include "op_registry.h"
#include "profiler.h"
#include "sparse_internal.h"
#include "stream_state.h"
#include "tessera/autocast_dispatch.h"
#include "tessera/autograd_dispatch.h"
#include "tessera/env.h"
#include "tessera/log.h"
#include "tessera/plugin_loader.h"


namespace tessera {

// ------------------------------------------------------------------------------------------------
// The call path

namespace {

const KernelEntry* fallback_for(int slot);

struct Prepared {
  detail::SmallVector<Tensor, 4> keep;  // converted inputs
  detail::SmallVector<const TensorImpl*, 8> tensors;
};

[[noreturn]] void rank_error(const OperatorEntry& op, const char* what, int index, int64_t ndim) {
  detail::throw_error(ErrorCode::InvalidArgument,
                      op.name + ": " + what + " " + std::to_string(index) + " has " + std::to_string(ndim) +
                          " dimensions; kernels take at most " + std::to_string(kMaxKernelDims) +
                          " (Note [Kernel rank limit]); reshape or flatten it first");
}

// Note [Memory overlap] (tensor.h): PyTorch's assert_no_internal_overlap on every tensor an op
// writes in place, and assert_no_partial_overlap between it and every input.
void check_inplace_overlap(const OperatorEntry& op, const MetaCall& m, const CallFrame& f) {
  for (int o = 0; o < m.num_outputs; ++o) {
    const int alias = m.outputs[o].alias_input;
    if (alias < 0 || !f.tensors[alias]) continue;
    const TensorImpl& out = *f.tensors[alias];
    // fill_ writes one value everywhere, so elements that share memory agree (PyTorch allows it).
    const bool writes_one_value = op.schema.name == "fill_";
    TESSERA_CHECK(writes_one_value || has_internal_overlap(out) != MemOverlap::Yes, op.name,
                  ": unsupported operation: more than one element of the written-to tensor (sizes ", out.sizes(),
                  ", strides ", out.strides(),
                  ") refers to a single memory location. Please clone() the tensor before performing the operation.");
    for (int i = 0; i < f.num_tensors; ++i) {
      if (i == alias || !f.tensors[i]) continue;
      TESSERA_CHECK(get_overlap_status(out, *f.tensors[i]) != MemOverlapStatus::Partial, op.name,
                    ": unsupported operation: some elements of the input tensor ", i,
                    " and the written-to tensor refer to a single memory location. Please clone() the tensor "
                    "before performing the operation.");
    }
  }
}

// Note [Storage version] (tensor.h): a tensor an op writes in place gets new contents.
void bump_written_versions(const MetaCall& m, const CallFrame& f) {
  for (int o = 0; o < m.num_outputs; ++o) {
    const int alias = m.outputs[o].alias_input;
    if (alias >= 0 && f.tensors[alias] && f.tensors[alias]->storage()) f.tensors[alias]->storage()->bump_version();
  }
}

// A written Tensor[] (`Tensor(a!)[]`): no element may write one memory location twice, and each
// gets new contents. Its shape rule checks what the elements may share with each other.
void write_list(const OperatorEntry& op, const MetaCall& m, const CallFrame& f) {
  for (int i = m.list_begin; i < m.list_begin + m.list_size; ++i) {
    const TensorImpl* t = f.tensors[i];
    if (!t) continue;
    TESSERA_CHECK(has_internal_overlap(*t) != MemOverlap::Yes, op.name, ": unsupported operation: element ",
                  i - m.list_begin, " of the written Tensor[] (sizes ", t->sizes(), ", strides ", t->strides(),
                  ") has elements that refer to a single memory location. Please clone() the tensor first.");
  }
  for (int i = m.list_begin; i < m.list_begin + m.list_size; ++i)
    if (f.tensors[i] && f.tensors[i]->storage()) f.tensors[i]->storage()->bump_version();
}

[[noreturn]] void unusable_error(const OperatorEntry& op, int index, const StorageImpl& s) {
  detail::throw_error(ErrorCode::InvalidArgument, op.name + ": tensor argument " + std::to_string(index) +
                                                      " has unusable storage because " + s.unusable_reason());
}

// Note [Channels-last activations] (docs/semantics.md): a fresh 4-D output of a pointwise op,
// clone or _to_copy takes channels-last strides when the first input of the output's shape is
// channels-last (PyTorch's TensorIterator gives its operands' order priority in the same way).
// Broadcast operands and wrapped numbers have another shape and do not decide.
void keep_channels_last(MetaCall& m, const CallFrame& f) {
  for (int o = 0; o < m.num_outputs; ++o) {
    MetaCall::Output& out = m.outputs[o];
    if (out.alias_input >= 0 || out.strides || out.sizes.size() != 4) continue;
    const IntArrayRef sizes(out.sizes.data(), out.sizes.size());
    for (int i = 0; i < f.num_tensors; ++i) {
      const TensorImpl* t = f.tensors[i];
      if (!t || t->sizes() != sizes) continue;
      if (detail::suggests_channels_last(*t)) out.make_channels_last();
      break;
    }
  }
}

// Allocates the outputs of the shape rule on `dev` (in-place outputs are their input).
void allocate_outputs(const MetaCall& m, const CallFrame& f, Device dev, Tensor* outs) {
  for (int o = 0; o < m.num_outputs; ++o) {
    const MetaCall::Output& spec = m.outputs[o];
    if (spec.alias_input >= 0) {
      outs[o] = Tensor(IntrusivePtr<TensorImpl>(const_cast<TensorImpl*>(f.tensors[spec.alias_input])));
    } else if (spec.strides) {
      outs[o] = make_tensor_strided(spec.sizes, *spec.strides, spec.dtype, dev);
    } else {
      // Contiguous strides on the stack (make_tensor builds them in a std::vector above kInlineDims).
      // dispatch_call rank-checked every new output against kMaxKernelDims before any kernel.
      const size_t n = spec.sizes.size();
      TESSERA_INTERNAL_ASSERT(n <= size_t(kMaxKernelDims), m.op_name, ": output ", o, " has ", n,
                              " dimensions past the rank check");
      int64_t strides[kMaxKernelDims];
      int64_t stride = 1;
      for (size_t d = n; d-- > 0;) {
        strides[d] = stride;
        if (__builtin_mul_overflow(stride, spec.sizes[d] > 1 ? spec.sizes[d] : 1, &stride))
          stride = INT64_MAX;
      }
      outs[o] = make_tensor_strided(spec.sizes, IntArrayRef(strides, n), spec.dtype, dev);
    }
  }
}

// Runs kernel `k` for the call. Returns false when the kernel answered UNIMPLEMENTED.
bool run_kernel(const KernelEntry* k, OperatorEntry& op, const MetaCall& m, const CallFrame& f, Device dev,
                Tensor* outs, std::string* unimplemented_why) {
  // Note [Compute dtype]: convert inputs to the compute dtype and the target device.
  const TensorImpl* const* tensors = f.tensors;
  Prepared prep;
  bool converted = false;
  for (int i = 0; i < f.num_tensors; ++i) {
    const TensorImpl* t = f.tensors[i];
    if (!t) continue;
    if (t->is_wrapped_number()) continue;  // Note [Wrapped numbers reach kernels as they are]
    bool cast = m.compute_dtype && m.casts(i) && t->dtype() != *m.compute_dtype;
    if (cast || !same_device(t->device(), dev)) {
      converted = true;
      break;
    }
  }
  if (converted) {
    for (int i = 0; i < f.num_tensors; ++i) {
      const TensorImpl* t = f.tensors[i];
      if (!t) {
        prep.tensors.push_back(nullptr);
        continue;
      }
      bool cast = !t->is_wrapped_number() && m.compute_dtype && m.casts(i) && t->dtype() != *m.compute_dtype;
      if (cast || (!t->is_wrapped_number() && !same_device(t->device(), dev))) {
        Tensor src(IntrusivePtr<TensorImpl>(const_cast<TensorImpl*>(t)));
        Tensor c = src.to(dev, cast ? *m.compute_dtype : t->dtype());
        prep.tensors.push_back(c.impl());
        prep.keep.push_back(std::move(c));
      } else {
        prep.tensors.push_back(t);
      }
    }
    tensors = prep.tensors.data();
  }

  allocate_outputs(m, f, dev, outs);

  // The C views: on the stack, left uninitialised until filled (fill_c_tensor sets every field),
  // for calls of up to kInlineViews tensors; on the heap beyond.
  constexpr int kInlineViews = 8;
  const int num_views = f.num_tensors + m.num_outputs;
  tessera_tensor_t views_inline[kInlineViews];
  const tessera_tensor_t* ptrs_inline[kInlineViews];
  std::unique_ptr<tessera_tensor_t[]> views_heap;
  std::unique_ptr<const tessera_tensor_t*[]> ptrs_heap;
  tessera_tensor_t* c_tensors = views_inline;
  const tessera_tensor_t** c_ptrs = ptrs_inline;
  if (__builtin_expect(num_views > kInlineViews, 0)) {
    views_heap.reset(new tessera_tensor_t[size_t(num_views)]);
    ptrs_heap.reset(new const tessera_tensor_t*[size_t(num_views)]);
    c_tensors = views_heap.get();
    c_ptrs = ptrs_heap.get();
  }
  for (int i = 0; i < f.num_tensors; ++i) {
    if (tensors[i]) {
      detail::fill_c_tensor(c_tensors[i], tensors[i]);
      c_ptrs[i] = &c_tensors[i];
    } else {
      c_ptrs[i] = nullptr;
    }
  }
  for (int o = 0; o < m.num_outputs; ++o) {
    tessera_tensor_t& c = c_tensors[f.num_tensors + o];
    detail::fill_c_tensor(c, outs[o].impl());
    c_ptrs[f.num_tensors + o] = &c;
  }
  tessera_kernel_call_t call;
  call.struct_size = sizeof(tessera_kernel_call_t);
  call.num_inputs = f.num_tensors;
  call.num_outputs = m.num_outputs;
  call.num_attrs = f.num_attrs;
  call.inputs = c_ptrs;
  call.outputs = c_ptrs + f.num_tensors;
  call.attrs = f.attrs;
  call.op_name = op.name.c_str();
  call.device_index = dev.index() < 0 ? 0 : dev.index();
  call.stream = current_stream_handle(dev.type(), call.device_index);  // Note [Current stream lookup]
  call.reserved_ = 0;
  tessera_status_t status = k->fn(k->user_data, &call);
  if (__builtin_expect(status != nullptr, 0)) {
    bool unimplemented = false;
    std::string message = status->code == TESSERA_STATUS_UNIMPLEMENTED ? status->message : std::string();
    throw_status(status, op.name + " on " + device_label(dev) + " (" + k->provider + ")", &unimplemented);
    if (unimplemented) {
      if (unimplemented_why)
        *unimplemented_why = "the " + device_label(dev) + " kernel from " + k->provider +
                             " answered UNIMPLEMENTED: " + message;
      if (log_enabled("dispatch"))
        log_message(LogLevel::Info, "dispatch",
                    "kernel of '" + op.name + "' from " + k->provider +
                        " answered UNIMPLEMENTED; trying the next option");
      return false;
    }
  }
  return true;
}

// Boxes an unboxed call for a composite kernel.
Stack box_frame(const OperatorEntry& op, const CallFrame& f) {
  Stack s;
  int ti = 0, ai = 0;
  auto tensor_of = [](const TensorImpl* p) {
    return Tensor(IntrusivePtr<TensorImpl>(const_cast<TensorImpl*>(p)));
  };
  for (size_t i = 0; i < op.args.size(); ++i) {
    const ArgInfo& a = op.args[i];
    if (a.type == ArgType::TensorList) {
      std::vector<Tensor> list;
      int n = f.num_tensors - op.num_tensor_args;
      for (int j = 0; j < n; ++j) list.push_back(tensor_of(f.tensors[ti++]));
      s.emplace_back(std::move(list));
    } else if (a.type == ArgType::Tensor) {
      s.emplace_back(tensor_of(f.tensors[ti++]));
    } else if (a.type == ArgType::OptionalTensor) {
      const TensorImpl* p = f.tensors[ti++];
      s.emplace_back(p ? std::optional<Tensor>(tensor_of(p)) : std::optional<Tensor>());
    } else {
      const tessera_value_t& v = f.attrs[ai++];
      switch (v.kind) {
        case TESSERA_VALUE_NONE:
          s.emplace_back(std::monostate{});
          break;
        case TESSERA_VALUE_INT:
          s.emplace_back(int64_t(v.u.i));
          break;
        case TESSERA_VALUE_DOUBLE:
          s.emplace_back(v.u.d);
          break;
        case TESSERA_VALUE_BOOL:
          s.emplace_back(v.u.b != 0);
          break;
        case TESSERA_VALUE_INT_LIST:
          s.emplace_back(std::vector<int64_t>(v.u.ints, v.u.ints + v.count));
          break;
        case TESSERA_VALUE_STRING:
          s.emplace_back(std::string(v.u.s ? v.u.s : ""));
          break;
        case TESSERA_VALUE_DTYPE:
          s.emplace_back(DType(v.u.i));
          break;
        default:
          s.emplace_back(std::monostate{});
      }
    }
  }
  return s;
}

// "cpu, cuda", where a device whose kernel does not take `dtype` lists the dtypes it does take:
// "cpu (dtypes float32, float64; not int32)".
std::string implemented_on(const OperatorEntry& op, DType dtype) {
  std::string s;
  for (DeviceType t : Dispatcher::instance().backends_with_kernel(op)) {
    s += (s.empty() ? "" : ", ") + device_type_name(t);
    const KernelEntry* k =
        op.slots[size_t(int(Functionality::Dense) * kNumBackendSlots + int(t))].load(std::memory_order_acquire);
    if (!k || (k->dtype_mask & dtype_bit(dtype))) continue;
    std::string dtypes;
    for (int d = 0; d < kNumDTypes; ++d)
      if (k->dtype_mask & dtype_bit(DType(d))) dtypes += (dtypes.empty() ? "" : ", ") + std::string(dtype_name(DType(d)));
    s += " (dtypes " + (dtypes.empty() ? std::string("none") : dtypes) + "; not " + std::string(dtype_name(dtype)) + ")";
  }
  return s.empty() ? std::string("no device") : s;
}

}  // namespace

// Slow path: the slot for the call's key set is empty, the dtype is not in the kernel's mask, or the
// kernel answered UNIMPLEMENTED.
static int resolve(OperatorEntry& op, const CallFrame& f, MetaCall& m, DispatchKeySet ks, Device dev,
                   DType kdtype, Tensor* outs, bool loaded_once, std::string why_unimpl,
                   const KernelEntry* tried = nullptr) {
  DispatchKeySet cur = ks;
  const KernelEntry* dense_kernel = nullptr;
  bool slot_empty = false;
  while (true) {
    int slot = cur.slot();
    if (slot < 0) break;
    const KernelEntry* k = op.slots[size_t(slot)].load(std::memory_order_acquire);
    int func = cur.highest_functionality();
    if (func == int(Functionality::Dense)) {
      dense_kernel = k;
      slot_empty = k == nullptr;
    }
    if (k && k != tried && (k->dtype_mask & dtype_bit(kdtype))) {  // `tried` answered UNIMPLEMENTED already
      if (run_kernel(k, op, m, f, dev, outs, &why_unimpl)) return m.num_outputs;
    } else if (k && k != tried && log_enabled("dispatch")) {
      log_message(LogLevel::Info, "dispatch",
                  "kernel of '" + op.name + "' from " + k->provider + " does not take dtype " +
                      std::string(dtype_name(kdtype)) + "; skipped");
    }
    if (func == int(Functionality::Dense)) break;
    if (const KernelEntry* fb = fallback_for(slot)) {
      if (run_kernel(fb, op, m, f, dev, outs, &why_unimpl)) return m.num_outputs;
    }
    if (func == int(Functionality::Sparse)) {  // Note [Sparse densify fallback]
      profile_resolution("sparse densify");
      Stack results = detail::sparse_densify_and_call(op, op.name, box_frame(op, f), why_unimpl);
      int n = 0;
      for (Value& v : results) {
        TESSERA_INTERNAL_ASSERT(n < kMaxOutputs && std::holds_alternative<Tensor>(v), "densified call of ", op.name,
                                " returned a non-tensor");
        outs[n++] = std::get<Tensor>(std::move(v));
      }
      return n;
    }
    cur = cur - DispatchKeySet::functionality(Functionality(func));
    if (cur.highest_functionality() < 0) cur = cur | DispatchKeySet::functionality(Functionality::Dense);
  }
  DeviceType backend = dev.type();
  // Meta tensors carry no data: the shape rule is the whole computation.
  if (backend == DeviceType::Meta && slot_empty) {
    profile_resolution("shape only");
    allocate_outputs(m, f, dev, outs);
    return m.num_outputs;
  }
  // Lazy plugin loading: the first call on a device type loads the plugin that provides it.
  if (slot_empty && !loaded_once) {
    std::string why;
    if (ensure_backend_loaded(backend, &why)) {
      const KernelEntry* k =
          op.slots[size_t(int(Functionality::Dense) * kNumBackendSlots + int(backend))].load(
              std::memory_order_acquire);
      if (k) return resolve(op, f, m, ks, dev, kdtype, outs, true, std::move(why_unimpl), tried);
    } else if (log_enabled("dispatch")) {
      log_message(LogLevel::Info, "dispatch",
                  "no plugin loaded for " + device_type_name(backend) + ": " + why);
    }
  }
  if (const CompositeFn* comp = op.composite.load(std::memory_order_acquire)) {
    if (log_enabled("dispatch"))
      log_message(LogLevel::Debug, "dispatch", "'" + op.name + "' on " + device_label(dev) + ": composite");
    profile_resolution("composite");
    Stack results = (*comp)(box_frame(op, f));
    int n = 0;
    for (Value& v : results) {
      TESSERA_INTERNAL_ASSERT(n < kMaxOutputs && std::holds_alternative<Tensor>(v), "composite of ", op.name,
                              " returned a non-tensor");
      outs[n++] = std::get<Tensor>(std::move(v));
    }
    return n;
  }
  int dense_slot = int(Functionality::Dense) * kNumBackendSlots + int(backend);
  if (const KernelEntry* fb = fallback_for(dense_slot)) {
    if (log_enabled("dispatch"))
      log_message(LogLevel::Debug, "dispatch",
                  "'" + op.name + "' on " + device_label(dev) + ": backend fallback of " + fb->provider);
    profile_resolution("fallback");
    if (run_kernel(fb, op, m, f, dev, outs, &why_unimpl)) return m.num_outputs;
  }
  bool forbidden = (op.forbid_fallback_mask.load(std::memory_order_acquire) >> int(backend) & 1) ||
                   (dense_kernel && (dense_kernel->flags & TESSERA_KERNEL_FLAG_NO_FALLBACK));
  bool enabled = cpu_fallback_enabled();
  bool cpu_runs_it = false;
  if (backend != DeviceType::CPU && backend != DeviceType::Meta && enabled && !forbidden) {
    const auto cpu_slot = size_t(int(Functionality::Dense) * kNumBackendSlots + int(DeviceType::CPU));
    if (!op.slots[cpu_slot].load(std::memory_order_acquire)) ensure_backend_loaded(DeviceType::CPU);
    cpu_runs_it = op.slots[cpu_slot].load(std::memory_order_acquire) != nullptr ||
                  fallback_for(int(cpu_slot)) != nullptr;
    if (cpu_runs_it) {
      profile_resolution("fallback");
      return detail::cpu_fallback(op, f, dev, kdtype, outs, !why_unimpl.empty());
    }
  }
  // Note [Quantized reference kernels] (quantization.cpp): ops without a Quantized kernel refuse.
  if (is_quantized(kdtype) || ks.has(Functionality::Quantized))
    detail::throw_error(ErrorCode::Unimplemented,
                        "'" + op.name + "' does not take quantized tensors (dtype " + std::string(dtype_name(kdtype)) +
                            "); call dequantize() first, and quantize_per_tensor() on the result if needed");
  std::string clause;
  if (dense_kernel && !(dense_kernel->dtype_mask & dtype_bit(kdtype)))
    clause = "convert the inputs with .to(...) to a dtype the " + device_type_name(backend) + " kernel takes";
  else if (backend == DeviceType::CPU)
    clause = "the CPU has no fallback; check that the cpu plugin loaded (TESSERA_LOG=plugins)";
  else if (enabled && !forbidden)
    clause =
        "the CPU fallback cannot run it either (no CPU kernel); check that the cpu plugin loaded "
        "(TESSERA_LOG=plugins)";
  else if (forbidden)
    clause = "the CPU fallback is forbidden for '" + op.name + "' on '" + device_type_name(backend) +
             "' by its plugin; move the inputs to a device that implements it";
  else
    clause = std::string("the CPU fallback is off for this run (") +
             (secure_env("TESSERA_FALLBACK") ? "TESSERA_FALLBACK=error" : "TESSERA_CPU_FALLBACK=0") +
             "); register a kernel for it, or allow the fallback (TESSERA_FALLBACK=allow) to run it on the CPU";
  detail::throw_error(ErrorCode::Unimplemented,
                      "no kernel for '" + op.name + "' on device '" + device_type_name(backend) +
                          "' (dtype " + std::string(dtype_name(kdtype)) +
                          "); implemented on: " + implemented_on(op, kdtype) + "; " + clause +
                          (why_unimpl.empty() ? std::string() : " (" + why_unimpl + ")"));
}

namespace {
const KernelEntry* fallback_for(int slot) {
  return g_fallbacks[size_t(slot)].load(std::memory_order_acquire);
}
}  // namespace

static int dispatch_call(OperatorEntry& op, const CallFrame& f, Tensor* outs);

namespace {
std::atomic<ExportHook> g_export_hook{nullptr};

// Note [Export hook] (dispatcher.h).
[[gnu::noinline]] int export_call(ExportHook hook, OperatorEntry& op, const CallFrame& f, const MetaCall& m, Device dev,
                                  Tensor* outs) {
  // A traced op's effect is its outputs; one that writes a Tensor[] in place has none to trace.
  TESSERA_CHECK(!op.writes_list, op.name,
                ": writes its Tensor[] argument in place, which a capture cannot record; inside a compiled function "
                "call the per-tensor op instead (an optimizer constructed with capturable = true does)");
  profile_resolution("capture");  // traced, not run: the summary must not count it as a kernel run
  ExportCall call;
  call.op = &op;
  call.name = &op.name;
  call.args = box_frame(op, f);
  call.device = dev;
  for (int o = 0; o < m.num_outputs; ++o)
    call.outputs.push_back({std::vector<int64_t>(m.outputs[o].sizes.begin(), m.outputs[o].sizes.end()),
                            m.outputs[o].dtype, m.outputs[o].alias_input});
  std::vector<Tensor> results = hook(call);
  TESSERA_INTERNAL_ASSERT(int(results.size()) == m.num_outputs, "export hook returned ", results.size(),
                          " outputs for ", op.name, ", expected ", m.num_outputs);
  for (int o = 0; o < m.num_outputs; ++o) outs[o] = std::move(results[size_t(o)]);
  return m.num_outputs;
}
}  // namespace

ExportHook set_export_hook(ExportHook hook) { return g_export_hook.exchange(hook, std::memory_order_acq_rel); }

namespace {
std::atomic<AutogradHook> g_autograd_hook{nullptr};

// Note [Autograd dispatch] (autograd_dispatch.h).
[[gnu::noinline]] int autograd_call(AutogradHook hook, OperatorEntry& op, const CallFrame& f, Device dev, Tensor* outs) {
  AutogradCall call;
  call.op = &op;
  call.name = &op.name;
  call.args = box_frame(op, f);
  call.device = dev;
  std::vector<Tensor> results = hook(call);
  TESSERA_INTERNAL_ASSERT(results.size() <= size_t(kMaxOutputs), "autograd hook returned ", results.size(),
                          " outputs for ", op.name);
  for (size_t o = 0; o < results.size(); ++o) outs[o] = std::move(results[o]);
  return int(results.size());
}
}  // namespace

AutogradHook set_autograd_hook(AutogradHook hook) { return g_autograd_hook.exchange(hook, std::memory_order_acq_rel); }

// Note [Autocast dispatch] in tessera/autocast_dispatch.h.
namespace {
std::atomic<AutocastHook> g_autocast_hook{nullptr};
}  // namespace
AutocastHook set_autocast_hook(AutocastHook hook) { return g_autocast_hook.exchange(hook, std::memory_order_acq_rel); }

int call_unboxed(OperatorEntry& op, const CallFrame& f, Tensor* outs) {
  if (__builtin_expect(profiler_on(), 0)) return profile_call(op, f, outs, dispatch_call);  // Note [Profiler]
  return dispatch_call(op, f, outs);
}

static int dispatch_call(OperatorEntry& op, const CallFrame& f, Tensor* outs) {
  PluginCallGuard in_flight;  // Note [In-flight plugin calls]
  // Key set and device: Note [Dispatch hot path].
  DispatchKeySet ks;
  const TensorImpl* lead = nullptr;  // first tensor that fixes the device
  const TensorImpl* any = nullptr;   // first tensor at all
  DispatchKeySet scalar_keys;        // of the scalar-like tensors (their Autograd key counts)
  for (int i = 0; i < f.num_tensors; ++i) {
    const TensorImpl* t = f.tensors[i];
    if (!t) continue;
    const Storage& s = t->storage();
    if (__builtin_expect(s && !s->usable(), 0)) unusable_error(op, i, *s);
    if (__builtin_expect(t->dim() > kMaxKernelDims, 0)) rank_error(op, "tensor argument", i, t->dim());
    if (!any) any = t;
    // A 0-dim CPU tensor or a wrapped number may join tensors of any device (PyTorch's rule).
    bool scalar_like = t->dim() == 0 && (t->is_wrapped_number() || t->device().is_cpu());
    if (scalar_like) {
      scalar_keys = scalar_keys | t->key_set();
      continue;
    }
    if (!lead) {
      lead = t;
      ks = t->key_set();
    } else {
      if (__builtin_expect(!same_device(t->device(), lead->device()), 0))
        detail::throw_error(ErrorCode::InvalidArgument,
                            op.name + ": expected all tensors on the same device, got " +
                                device_label(lead->device()) + " and " + device_label(t->device()) +
                                " (tensor argument " + std::to_string(i) +
                                "); move them to one device with .to(...)");
      ks = ks | t->key_set();
    }
  }
  Device dev(DeviceType::CPU);
  if (lead) {
    dev = lead->device();
  } else if (any) {
    // Only scalars: a non-CPU one decides; else the explicit device; else the CPU.
    dev = any->device();
    for (int i = 0; i < f.num_tensors; ++i)
      if (f.tensors[i] && !f.tensors[i]->device().is_cpu()) dev = f.tensors[i]->device();
    if (dev.is_cpu() && f.device) dev = *f.device;
    ks = DispatchKeySet::dense(dev.type());
    for (int i = 0; i < f.num_tensors; ++i)
      if (f.tensors[i] && same_device(f.tensors[i]->device(), dev)) ks = ks | f.tensors[i]->key_set();
  } else {
    if (f.device) dev = *f.device;
    ks = DispatchKeySet::dense(dev.type());
  }
  // A 0-dim CPU tensor that requires grad follows the device of the others but keeps its Autograd
  // key (Note [Autograd dispatch]).
  ks = ks | (scalar_keys & DispatchKeySet::functionality(Functionality::Autograd));
  const LocalDispatchKeySet& tls = tls_local_dispatch_key_set();
  ks = (ks | tls.included) - tls.excluded;
  constexpr DispatchKeySet kAboveBackends =
      DispatchKeySet::functionality(Functionality::Autocast) | DispatchKeySet::functionality(Functionality::Autograd);
  if (__builtin_expect(!(ks & kAboveBackends).empty(), 0)) {
    // A call without tensor arguments (a factory) has nothing to cast, and its explicit device is
    // not part of the boxed arguments a hook redispatches.
    if (ks.has(Functionality::Autocast) && any)
      if (AutocastHook hook = g_autocast_hook.load(std::memory_order_acquire)) return autograd_call(hook, op, f, dev, outs);
    if (ks.has(Functionality::Autograd))
      if (AutogradHook hook = g_autograd_hook.load(std::memory_order_acquire)) return autograd_call(hook, op, f, dev, outs);
  }

  // Shape rule.
  MetaCall m;
  m.op = &op;
  m.op_name = op.name.c_str();
  m.tensors = f.tensors;
  m.num_tensors = f.num_tensors;
  m.attrs = f.attrs;
  m.num_attrs = f.num_attrs;
  if (op.tensor_list_arg >= 0) {
    int before = 0;
    for (int i = 0; i < op.tensor_list_arg; ++i)
      if (op.args[size_t(i)].is_tensor) ++before;
    m.list_begin = before;
    m.list_size = f.num_tensors - op.num_tensor_args;
  }
  op.meta(m);
  if (op.keeps_layout) keep_channels_last(m, f);
  bool writes_an_input = false;
  for (int o = 0; o < m.num_outputs; ++o) {
    if (m.outputs[o].alias_input >= 0) {
      writes_an_input = true;  // its input's rank was checked above
    } else if (__builtin_expect(int64_t(m.outputs[o].sizes.size()) > kMaxKernelDims, 0)) {
      rank_error(op, "output", o, int64_t(m.outputs[o].sizes.size()));
    }
  }
  if (writes_an_input) {
    check_inplace_overlap(op, m, f);
    bump_written_versions(m, f);
  }
  if (__builtin_expect(ks.has(Functionality::Export), 0))
    if (ExportHook hook = g_export_hook.load(std::memory_order_acquire)) return export_call(hook, op, f, m, dev, outs);
  if (__builtin_expect(op.writes_list, 0)) write_list(op, m, f);
  DType kdtype = m.compute_dtype ? *m.compute_dtype
                                 : (any ? f.tensors[0] ? f.tensors[0]->dtype() : any->dtype()
                                        : (m.num_outputs ? m.outputs[0].dtype : kFloat32));

  // Fast path: the slot of the key set holds a kernel that takes the dtype.
  int slot = ks.slot();
  if (__builtin_expect(slot >= 0, 1)) {
    const KernelEntry* k = op.slots[size_t(slot)].load(std::memory_order_acquire);
    if (__builtin_expect(k != nullptr && (k->dtype_mask & dtype_bit(kdtype)) != 0, 1)) {
      // TESSERA_LOG=dispatch is read once for the hot path (reload_log_settings does not change it).
      static const bool log_dispatch = log_enabled("dispatch");
      if (__builtin_expect(log_dispatch, 0))
        log_message(LogLevel::Debug, "dispatch",
                    "'" + op.name + "' on " + device_label(dev) + " (" + std::string(dtype_name(kdtype)) +
                        ", keys " + ks.str() + "): kernel from " + k->provider);
      std::string why_unimpl;
      if (run_kernel(k, op, m, f, dev, outs, &why_unimpl)) return m.num_outputs;
      return resolve(op, f, m, ks, dev, kdtype, outs, false, std::move(why_unimpl), k);
    }
  }
  return resolve(op, f, m, ks, dev, kdtype, outs, false, std::string());
}

Tensor call_unboxed_one(OperatorEntry& op, const CallFrame& frame) {
  Tensor outs[kMaxOutputs];
  int n = call_unboxed(op, frame, outs);
  TESSERA_INTERNAL_ASSERT(n >= 1, op.name, " returned no output");
  return std::move(outs[0]);
}


}  // namespace tessera
