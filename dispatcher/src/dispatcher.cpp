// The dispatcher: operator table, registration and the call path. Note [Dispatch hot path] in
// dispatcher.h describes the fast path; resolution when a slot is empty is in resolve().
#include "tessera/dispatcher.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "host_api.h"
#include "op_registry.h"
#include "profiler.h"
#include "sparse_internal.h"
#include "stream_state.h"
#include "tessera/env.h"
#include "tessera/log.h"
#include "tessera/plugin_loader.h"

namespace tessera {

// ------------------------------------------------------------------------------------------------
// Status conversion

void throw_status(tessera_status_t status, const std::string& context, bool* unimplemented) {
  if (!status) return;
  tessera_status_code_t code = status->code;
  std::string message = status->message;
  status_free(status);
  if (code == TESSERA_STATUS_OK) return;
  if (code == TESSERA_STATUS_UNIMPLEMENTED && unimplemented) {
    *unimplemented = true;
    return;
  }
  detail::throw_error(error_code_of(code), context + ": " + message);
}

tessera_status_t kernel_status_make(tessera_status_code_t code, const char* message) {
  return status_make(code, message ? message : "");
}

// ------------------------------------------------------------------------------------------------
// The dispatcher's state

namespace {

std::string device_label(Device d) { return d.is_cpu() ? std::string("cpu") : d.str(); }

struct Registration {
  uint64_t id;
  enum class Kind { Kernel, Fallback, Composite } kind;
  OperatorEntry* op;  // null for fallbacks
  int slot;           // kernels and fallbacks; -1 for composites
  const void* entry;  // KernelEntry* or CompositeFn*
};

// What one published pointer stands for: a kernel slot of an op, a fallback slot, an op's composite.
struct PublishedSlot {
  Registration::Kind kind;
  const OperatorEntry* op;
  int slot;
  bool operator<(const PublishedSlot& o) const {
    if (kind != o.kind) return kind < o.kind;
    if (op != o.op) return std::less<const OperatorEntry*>()(op, o.op);
    return slot < o.slot;
  }
};

// Backend fallbacks, one per dispatch slot (written under Impl::mutex, read lock-free).
std::array<std::atomic<const KernelEntry*>, kNumDispatchSlots> g_fallbacks{};

}  // namespace

struct Dispatcher::Impl {
  mutable std::mutex mutex;
  std::deque<OperatorEntry> ops;  // stable addresses
  std::unordered_map<std::string, OperatorEntry*> by_name;
  std::deque<KernelEntry> kernel_store;  // never freed: a reader may still hold a pointer
  std::deque<CompositeFn> composite_store;
  // Note [Registration stacks]: the live registrations by id, and per published slot the live ones
  // in registration order (ids grow), so that undoing one finds it and the slot's new latest in
  // O(log n): a plugin with 100k kernels is deregistered at shutdown in linear-logarithmic time.
  std::map<uint64_t, Registration> registrations;
  std::map<PublishedSlot, std::map<uint64_t, const void*>> live_by_slot;
  uint64_t next_id = 1;

  // Records a registration; returns its id. Publishing it is the caller's job.
  uint64_t add_registration(Registration::Kind kind, OperatorEntry* op, int slot, const void* entry);

  OperatorEntry& define_locked(const FunctionSchema& schema, MetaFn meta, std::string provider);
  OperatorEntry* find_op_locked(std::string_view name);
  // The checks of define_op that need the registry; returns the shape rule to use, and sets
  // `existing` when the same schema is already defined.
  MetaFn check_definition_locked(const FunctionSchema& schema, std::string_view meta_like, bool meta_like_pending,
                                 OperatorEntry** existing);
  static void fill_entry(OperatorEntry& e, const FunctionSchema& schema, MetaFn meta, std::string provider);
  // Publishes the latest live registration of (kind, op, slot), or null.
  void republish(Registration::Kind kind, OperatorEntry* op, int slot);
};

namespace {

bool is_tensor_type(ArgType t) {
  return t == ArgType::Tensor || t == ArgType::OptionalTensor || t == ArgType::TensorList;
}

// Parses an argument's default text into a kernel value (defaults come from parse_schema).
void parse_default(ArgInfo& info, const Argument& a) {
  if (!a.default_value) return;
  const std::string& d = *a.default_value;
  info.has_default = true;
  if (d == "None") {
    info.default_value = value_none();
  } else if (d == "True" || d == "False") {
    info.default_value = value_bool(d == "True");
  } else if (!d.empty() && d[0] == '"') {
    info.default_string = d.substr(1, d.size() - 2);
    info.default_value = value_string(nullptr);  // pointer set when used (the entry may move)
  } else if (!d.empty() && d[0] == '[') {
    std::string inner = d.substr(1, d.size() - 2);
    size_t pos = 0;
    while (pos < inner.size()) {
      size_t comma = inner.find(',', pos);
      if (comma == std::string::npos) comma = inner.size();
      std::string item = inner.substr(pos, comma - pos);
      if (item.find_first_not_of(' ') != std::string::npos) info.default_ints.push_back(std::stoll(item));
      pos = comma + 1;
    }
    info.default_value = value_ints(IntArrayRef());  // points at default_ints when used
  } else if (a.type == ArgType::DType || a.type == ArgType::OptionalDType) {
    info.default_value = value_dtype(dtype_from_name(d));
  } else if (d.find_first_of(".eE") != std::string::npos) {
    info.default_value = value_double(std::stod(d));
  } else if (a.type == ArgType::Float || a.type == ArgType::OptionalFloat) {
    info.default_value = value_double(double(std::stoll(d)));
  } else if (a.type == ArgType::IntList || a.type == ArgType::OptionalIntList) {
    // int[2] stride=1 means [1, 1]
    int64_t v = std::stoll(d);
    info.default_ints.assign(size_t(a.list_size.value_or(1)), v);
    info.default_value = value_ints(IntArrayRef());
  } else {
    info.default_value = value_int(std::stoll(d));
  }
}

// Shape rule of an op defined without `meta_like`: each return aliases the input of its alias set.
void meta_alias_outputs(MetaCall& m) {
  for (int idx : m.op->return_alias) {
    TESSERA_CHECK(idx >= 0 && m.has(idx), m.op_name, ": the output aliases argument ", idx,
                  " which is absent or not a tensor");
    m.alias_output(idx);
  }
}

}  // namespace

OperatorEntry& Dispatcher::Impl::define_locked(const FunctionSchema& schema, MetaFn meta,
                                               std::string provider) {
  OperatorEntry& e = ops.emplace_back();
  try {
    fill_entry(e, schema, meta, std::move(provider));
  } catch (...) {
    ops.pop_back();  // nobody has seen it: it is not in by_name yet
    throw;
  }
  by_name[e.name] = &e;
  return e;
}

void Dispatcher::Impl::fill_entry(OperatorEntry& e, const FunctionSchema& schema, MetaFn meta,
                                  std::string provider) {
  e.schema = schema;
  e.name = schema.full_name();
  e.provider = std::move(provider);
  e.meta = meta;
  int tensor_index = 0;
  std::unordered_map<std::string, int> alias_index;
  for (size_t i = 0; i < schema.arguments.size(); ++i) {
    const Argument& a = schema.arguments[i];
    ArgInfo info;
    info.type = a.type;
    info.is_tensor = is_tensor_type(a.type);
    try {
      parse_default(info, a);
    } catch (const Error&) {
      throw;
    } catch (const std::exception&) {  // std::stoll / std::stod out of range
      detail::throw_error(ErrorCode::InvalidArgument,
                          "define_op: default value " + a.default_value.value_or("") + " of argument '" +
                              a.name + "' of '" + schema.full_name() + "' is out of range");
    }
    if (info.is_tensor) {
      if (a.type == ArgType::TensorList) {
        TESSERA_CHECK(e.tensor_list_arg < 0, "define_op: '", e.name,
                      "' has two Tensor[] arguments; at most one is allowed");
        e.tensor_list_arg = int(i);
      } else {
        if (a.alias) alias_index[*a.alias] = e.tensor_list_arg >= 0 ? -1 : tensor_index;
        ++e.num_tensor_args;
        ++tensor_index;
      }
    } else {
      ++e.num_attr_args;
    }
    e.args.push_back(std::move(info));
  }
  for (const Argument& r : schema.returns) {
    auto it = r.alias ? alias_index.find(*r.alias) : alias_index.end();
    e.return_alias.push_back(it == alias_index.end() ? -1 : it->second);
    TESSERA_CHECK(meta != meta_alias_outputs || e.return_alias.back() >= 0, "define_op(\"", schema.str(),
                  "\"): return ", e.return_alias.size() - 1, " aliases no Tensor argument; give `meta_like`");
  }
}

uint64_t Dispatcher::Impl::add_registration(Registration::Kind kind, OperatorEntry* op, int slot,
                                           const void* entry) {
  const uint64_t id = next_id++;
  registrations.emplace(id, Registration{id, kind, op, slot, entry});
  live_by_slot[PublishedSlot{kind, op, slot}].emplace(id, entry);
  return id;
}

void Dispatcher::Impl::republish(Registration::Kind kind, OperatorEntry* op, int slot) {
  const void* latest = nullptr;
  auto stack = live_by_slot.find(PublishedSlot{kind, op, slot});
  if (stack != live_by_slot.end() && !stack->second.empty()) latest = stack->second.rbegin()->second;
  switch (kind) {
    case Registration::Kind::Kernel:
      op->slots[size_t(slot)].store(static_cast<const KernelEntry*>(latest), std::memory_order_release);
      break;
    case Registration::Kind::Fallback:
      g_fallbacks[size_t(slot)].store(static_cast<const KernelEntry*>(latest), std::memory_order_release);
      break;
    case Registration::Kind::Composite:
      op->composite.store(static_cast<const CompositeFn*>(latest), std::memory_order_release);
      break;
  }
}

Dispatcher::Dispatcher() : impl_(std::make_unique<Impl>()) {
  size_t count = 0;
  const CoreOpDef* defs = core_op_defs(&count);
  for (size_t i = 0; i < count; ++i) {
    OperatorEntry& e = impl_->define_locked(parse_schema(defs[i].schema), defs[i].meta, "builtin");
    for (std::string_view tags = defs[i].tags; !tags.empty();) {
      const size_t comma = std::min(tags.find(','), tags.size());
      e.tags.emplace_back(tags.substr(0, comma));
      tags.remove_prefix(std::min(comma + 1, tags.size()));
    }
    e.doc = defs[i].doc;
  }
}

Dispatcher& Dispatcher::instance() {
  static Dispatcher* d = [] {
    auto* p = new Dispatcher();  // never destroyed: plugins may dispatch during static destruction
    register_core_composites(*p);
    return p;
  }();
  return *d;
}

OperatorEntry* Dispatcher::find_op(std::string_view name) {
  std::lock_guard lock(impl_->mutex);
  return impl_->find_op_locked(name);
}

OperatorEntry* Dispatcher::Impl::find_op_locked(std::string_view name) {
  auto it = by_name.find(std::string(name));
  if (it != by_name.end()) return it->second;
  // "add" names the overload with an empty name; when there is none but exactly one overload, that one.
  if (name.find('.') == std::string_view::npos) {
    OperatorEntry* only = nullptr;
    for (OperatorEntry& e : ops) {
      if (e.schema.name == name) {
        if (only) return nullptr;
        only = &e;
      }
    }
    return only;
  }
  return nullptr;
}

OperatorEntry& Dispatcher::op(std::string_view name) {
  if (OperatorEntry* e = find_op(name)) return *e;
  std::lock_guard lock(impl_->mutex);
  std::string base(name.substr(0, name.find('.')));
  std::string near;
  for (const OperatorEntry& e : impl_->ops) {
    if (e.schema.name == base || e.schema.name.find(base) != std::string::npos ||
        (base.size() > 2 && base.find(e.schema.name) != std::string::npos)) {
      near += (near.empty() ? "" : ", ") + e.name;
    }
  }
  detail::throw_error(ErrorCode::InvalidArgument,
                      "unknown operator '" + std::string(name) + "'" +
                          (near.empty() ? std::string("; no operator has a similar name")
                                        : "; did you mean one of: " + near) +
                          " (Dispatcher::op_names() lists them all)");
}

const FunctionSchema& Dispatcher::schema(const OperatorEntry& op) const { return op.schema; }
const std::vector<std::string>& Dispatcher::tags(const OperatorEntry& op) const { return op.tags; }
const std::string& Dispatcher::doc(const OperatorEntry& op) const { return op.doc; }
const std::string& Dispatcher::provider(const OperatorEntry& op) const { return op.provider; }

std::vector<std::string> Dispatcher::op_names() const {
  std::lock_guard lock(impl_->mutex);
  std::vector<std::string> names;
  for (const OperatorEntry& e : impl_->ops) names.push_back(e.name);
  std::sort(names.begin(), names.end());
  return names;
}

OperatorEntry& Dispatcher::define_op(std::string_view schema_text, std::string_view meta_like,
                                     std::string provider) {
  return define_op(parse_schema(schema_text), meta_like, std::move(provider));
}

namespace {
// The shape rule of an op whose `meta_like` is defined later (check_define_op); never called.
void meta_of_pending_op(MetaCall&) {}
}  // namespace

MetaFn Dispatcher::Impl::check_definition_locked(const FunctionSchema& schema, std::string_view meta_like,
                                                 bool meta_like_pending, OperatorEntry** existing) {
  *existing = nullptr;
  auto it = by_name.find(schema.full_name());
  if (it != by_name.end()) {
    TESSERA_CHECK(it->second->schema.str() == schema.str(), "define_op: operator '", schema.full_name(),
                  "' is already defined as \"", it->second->schema.str(), "\" (by ", it->second->provider,
                  "), not \"", schema.str(), "\"; use another overload name");
    *existing = it->second;
    return it->second->meta;
  }
  MetaFn meta = meta_alias_outputs;
  if (meta_like_pending) {
    meta = meta_of_pending_op;
  } else if (!meta_like.empty()) {
    OperatorEntry* like = find_op_locked(meta_like);
    TESSERA_CHECK(like, "define_op(\"", schema.str(), "\"): meta_like names unknown operator '", meta_like,
                  "'; give an existing op whose shape rule fits (e.g. \"relu\") or empty for an in-place op");
    meta = like->meta;
  }
  if (meta_like.empty()) {
    for (const Argument& r : schema.returns)
      TESSERA_CHECK(
          r.alias && r.type == ArgType::Tensor, "define_op(\"", schema.str(),
          "\"): a return without an alias annotation needs `meta_like`, the name of an op whose shape "
          "rule computes it");
  }
  return meta;
}

OperatorEntry& Dispatcher::define_op(const FunctionSchema& schema, std::string_view meta_like, std::string provider) {
  std::lock_guard lock(impl_->mutex);
  OperatorEntry* existing = nullptr;
  MetaFn meta = impl_->check_definition_locked(schema, meta_like, false, &existing);
  if (existing) return *existing;
  return impl_->define_locked(schema, meta, std::move(provider));
}

void Dispatcher::check_define_op(const FunctionSchema& schema, std::string_view meta_like,
                                 bool meta_like_pending) const {
  std::lock_guard lock(impl_->mutex);
  OperatorEntry* existing = nullptr;
  MetaFn meta = impl_->check_definition_locked(schema, meta_like, meta_like_pending, &existing);
  if (existing) return;
  OperatorEntry scratch;  // the per-argument checks (defaults, Tensor[] count, return aliases)
  Impl::fill_entry(scratch, schema, meta, std::string());
}

RegistrationHandle Dispatcher::register_kernel(OperatorEntry& op, DeviceType backend, Functionality f,
                                               KernelEntry kernel) {
  TESSERA_CHECK(kernel.fn != nullptr, "register_kernel('", op.name, "'): the kernel function is null");
  int slot = int(f) * kNumBackendSlots + int(backend);
  std::lock_guard lock(impl_->mutex);
  const KernelEntry* entry = &impl_->kernel_store.emplace_back(std::move(kernel));
  uint64_t id = impl_->add_registration(Registration::Kind::Kernel, &op, slot, entry);
  op.slots[size_t(slot)].store(entry, std::memory_order_release);
  if (log_enabled("dispatch"))
    log_message(LogLevel::Debug, "dispatch",
                "registered kernel for '" + op.name + "' on " + device_type_name(backend) + "/" +
                    functionality_name(f) + " from " + entry->provider);
  return RegistrationHandle{id};
}

RegistrationHandle Dispatcher::register_fallback(DeviceType backend, Functionality f, KernelEntry kernel) {
  TESSERA_CHECK(kernel.fn != nullptr, "register_fallback: the kernel function is null");
  int slot = int(f) * kNumBackendSlots + int(backend);
  std::lock_guard lock(impl_->mutex);
  const KernelEntry* entry = &impl_->kernel_store.emplace_back(std::move(kernel));
  uint64_t id = impl_->add_registration(Registration::Kind::Fallback, nullptr, slot, entry);
  g_fallbacks[size_t(slot)].store(entry, std::memory_order_release);
  return RegistrationHandle{id};
}

RegistrationHandle Dispatcher::register_composite(OperatorEntry& op, CompositeFn fn) {
  TESSERA_CHECK(bool(fn), "register_composite('", op.name, "'): the function is empty");
  std::lock_guard lock(impl_->mutex);
  const CompositeFn* entry = &impl_->composite_store.emplace_back(std::move(fn));
  uint64_t id = impl_->add_registration(Registration::Kind::Composite, &op, -1, entry);
  op.composite.store(entry, std::memory_order_release);
  return RegistrationHandle{id};
}

const CompositeFn* Dispatcher::composite(const OperatorEntry& op) const {
  return op.composite.load(std::memory_order_acquire);
}

void Dispatcher::forbid_fallback(OperatorEntry& op, DeviceType backend) {
  op.forbid_fallback_mask.fetch_or(uint32_t(1) << int(backend), std::memory_order_acq_rel);
}

void Dispatcher::deregister(RegistrationHandle handle) {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->registrations.find(handle.id);
  TESSERA_CHECK(it != impl_->registrations.end(), "deregister: registration ", handle.id,
                " is unknown or already undone");
  const Registration r = it->second;
  impl_->registrations.erase(it);
  auto stack = impl_->live_by_slot.find(PublishedSlot{r.kind, r.op, r.slot});
  TESSERA_INTERNAL_ASSERT(stack != impl_->live_by_slot.end(), "deregister: registration ", r.id,
                          " has no published slot");
  stack->second.erase(r.id);
  if (stack->second.empty()) impl_->live_by_slot.erase(stack);
  impl_->republish(r.kind, r.op, r.slot);
}

std::vector<DeviceType> Dispatcher::backends_with_kernel(const OperatorEntry& op) const {
  std::vector<DeviceType> out;
  for (int b = 0; b < kNumDeviceTypes; ++b) {
    for (int f = 0; f < kNumFunctionalities; ++f) {
      if (op.slots[size_t(f * kNumBackendSlots + b)].load(std::memory_order_acquire)) {
        out.push_back(DeviceType(b));
        break;
      }
    }
  }
  return out;
}

std::string Dispatcher::resolution(const OperatorEntry& op, DeviceType backend, DType dtype) const {
  int slot = int(Functionality::Dense) * kNumBackendSlots + int(backend);
  const KernelEntry* k = op.slots[size_t(slot)].load(std::memory_order_acquire);
  if (k && (k->dtype_mask & dtype_bit(dtype))) return "kernel";
  if (op.composite.load(std::memory_order_acquire)) return "composite";
  if (g_fallbacks[size_t(slot)].load(std::memory_order_acquire)) return "fallback";
  bool forbidden = (op.forbid_fallback_mask.load(std::memory_order_acquire) >> int(backend) & 1) ||
                   (k && (k->flags & TESSERA_KERNEL_FLAG_NO_FALLBACK));
  if (backend != DeviceType::CPU && !forbidden && cpu_fallback_enabled()) {
    const size_t cpu_slot = size_t(int(Functionality::Dense) * kNumBackendSlots);
    const KernelEntry* cpu = op.slots[cpu_slot].load(std::memory_order_acquire);
    if (!cpu && ensure_backend_loaded(DeviceType::CPU))  // the CPU backend loads lazily
      cpu = op.slots[cpu_slot].load(std::memory_order_acquire);
    if (cpu || op.composite.load(std::memory_order_acquire)) return "fallback";
  }
  return "none";
}

// ------------------------------------------------------------------------------------------------
// The call path

namespace {

const KernelEntry* fallback_for(int slot);

struct Prepared {
  detail::SmallVector<Tensor, 4> keep;  // converted inputs
  detail::SmallVector<const TensorImpl*, 8> tensors;
};

inline void fill_c_tensor(tessera_tensor_t& c, const TensorImpl* t) {
  c.struct_size = sizeof(tessera_tensor_t);
  c.dtype = int32_t(t->dtype());
  c.device_type = int32_t(t->device().type());
  c.device_index = t->device().index() < 0 ? 0 : t->device().index();
  c.ndim = int32_t(t->dim());
  c.reserved_ = 0;
  c.sizes = t->sizes().data();
  c.strides = t->strides().data();
  c.numel = t->numel();
  const Storage& s = t->storage();
  c.data = s ? s->data() : nullptr;
  c.byte_offset = t->storage_offset() * int64_t(itemsize(t->dtype()));
  c.version = s ? s->version() : 0;
}

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

[[noreturn]] void unusable_error(const OperatorEntry& op, int index, const StorageImpl& s) {
  detail::throw_error(ErrorCode::InvalidArgument, op.name + ": tensor argument " + std::to_string(index) +
                                                      " has unusable storage because " + s.unusable_reason());
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
      // Contiguous strides on the stack (make_tensor would build them in a std::vector).
      detail::SmallVector<int64_t, 8> strides;
      strides.resize(spec.sizes.size());
      int64_t stride = 1;
      for (size_t d = spec.sizes.size(); d-- > 0;) {
        strides[d] = stride;
        if (__builtin_mul_overflow(stride, spec.sizes[d] > 1 ? spec.sizes[d] : 1, &stride))
          stride = INT64_MAX;
      }
      outs[o] = make_tensor_strided(spec.sizes, strides, spec.dtype, dev);
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

  detail::SmallVector<tessera_tensor_t, 6> c_tensors;
  c_tensors.resize(size_t(f.num_tensors + m.num_outputs));
  detail::SmallVector<const tessera_tensor_t*, 6> in_ptrs;
  detail::SmallVector<const tessera_tensor_t*, 2> out_ptrs;
  for (int i = 0; i < f.num_tensors; ++i) {
    if (tensors[i]) {
      fill_c_tensor(c_tensors[size_t(i)], tensors[i]);
      in_ptrs.push_back(&c_tensors[size_t(i)]);
    } else {
      in_ptrs.push_back(nullptr);
    }
  }
  for (int o = 0; o < m.num_outputs; ++o) {
    tessera_tensor_t& c = c_tensors[size_t(f.num_tensors + o)];
    fill_c_tensor(c, outs[o].impl());
    out_ptrs.push_back(&c);
  }
  tessera_kernel_call_t call;
  call.struct_size = sizeof(tessera_kernel_call_t);
  call.num_inputs = f.num_tensors;
  call.num_outputs = m.num_outputs;
  call.num_attrs = f.num_attrs;
  call.inputs = in_ptrs.data();
  call.outputs = out_ptrs.data();
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

thread_local uint64_t t_cpu_fallback_calls = 0;

void warn_fallback_once(const OperatorEntry& op, DeviceType type, bool answered_unimplemented) {
  static std::mutex mu;
  static std::set<std::pair<std::string, int>> warned;
  {
    std::lock_guard lock(mu);
    if (!warned.insert({op.name, int(type)}).second) return;
  }
  log_message(
      LogLevel::Warning, "fallback",
      "'" + op.name + (answered_unimplemented ? "' answered UNIMPLEMENTED on device '" : "' has no kernel on device '") +
          device_type_name(type) + "'; running it on the CPU (inputs copied to the CPU and outputs back). Register a kernel for "
          "speed, or set TESSERA_CPU_FALLBACK=0 to make this an error");
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

int cpu_fallback(OperatorEntry& op, const CallFrame& f, Device dev, Tensor* outs, bool answered_unimplemented) {
  ++t_cpu_fallback_calls;
  warn_fallback_once(op, dev.type(), answered_unimplemented);
  detail::SmallVector<Tensor, 6> cpu_inputs;
  detail::SmallVector<const TensorImpl*, 8> impls;
  for (int i = 0; i < f.num_tensors; ++i) {
    const TensorImpl* t = f.tensors[i];
    if (!t) {
      impls.push_back(nullptr);
      continue;
    }
    Tensor src(IntrusivePtr<TensorImpl>(const_cast<TensorImpl*>(t)));
    Tensor c = src.to(Device(DeviceType::CPU));
    impls.push_back(c.impl());
    cpu_inputs.push_back(std::move(c));
  }
  Device cpu(DeviceType::CPU);
  CallFrame cf{impls.data(), f.num_tensors, f.attrs, f.num_attrs, &cpu};
  Tensor cpu_outs[kMaxOutputs];
  int n = call_unboxed(op, cf, cpu_outs);
  for (int i = 0; i < n; ++i) {
    int alias = i < int(op.return_alias.size()) ? op.return_alias[size_t(i)] : -1;
    if (alias >= 0 && f.tensors[alias]) {
      Tensor orig(IntrusivePtr<TensorImpl>(const_cast<TensorImpl*>(f.tensors[alias])));
      orig.copy_(cpu_outs[i]);
      outs[i] = orig;
    } else {
      outs[i] = cpu_outs[i].to(dev);
    }
  }
  return n;
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
      return cpu_fallback(op, f, dev, outs, !why_unimpl.empty());
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
    clause = "set TESSERA_CPU_FALLBACK=1 to run it on the CPU";
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
  for (int i = 0; i < f.num_tensors; ++i) {
    const TensorImpl* t = f.tensors[i];
    if (!t) continue;
    const Storage& s = t->storage();
    if (__builtin_expect(s && !s->usable(), 0)) unusable_error(op, i, *s);
    if (__builtin_expect(t->dim() > kMaxKernelDims, 0)) rank_error(op, "tensor argument", i, t->dim());
    if (!any) any = t;
    // A 0-dim CPU tensor or a wrapped number may join tensors of any device (PyTorch's rule).
    bool scalar_like = t->dim() == 0 && (t->is_wrapped_number() || t->device().is_cpu());
    if (scalar_like) continue;
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
  const LocalDispatchKeySet& tls = tls_local_dispatch_key_set();
  ks = (ks | tls.included) - tls.excluded;

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
  for (int o = 0; o < m.num_outputs; ++o) {
    if (m.outputs[o].alias_input >= 0) {
      check_inplace_overlap(op, m, f);
      bump_written_versions(m, f);
      break;
    }
    if (__builtin_expect(int64_t(m.outputs[o].sizes.size()) > kMaxKernelDims, 0))
      rank_error(op, "output", o, int64_t(m.outputs[o].sizes.size()));
  }
  if (__builtin_expect(ks.has(Functionality::Export), 0))
    if (ExportHook hook = g_export_hook.load(std::memory_order_acquire)) return export_call(hook, op, f, m, dev, outs);
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

// ------------------------------------------------------------------------------------------------
// Boxed calls

Stack Dispatcher::call_boxed(OperatorEntry& op, Stack args) {
  const FunctionSchema& s = op.schema;
  TESSERA_CHECK(args.size() <= s.arguments.size(), "call_boxed('", op.name, "'): got ", args.size(),
                " arguments, the schema \"", s.str(), "\" takes at most ", s.arguments.size());
  detail::SmallVector<const TensorImpl*, 8> tensors;
  std::vector<tessera_value_t> attrs;
  std::deque<std::vector<int64_t>> lists;  // backing stores; deque keeps addresses
  auto bad = [&](size_t i, const char* expected) {
    detail::throw_error(ErrorCode::InvalidArgument,
                        "call_boxed('" + op.name + "'): argument " + std::to_string(i) + " ('" +
                            s.arguments[i].name + "') must be " + expected + " (schema \"" + s.str() + "\")");
  };
  for (size_t i = 0; i < s.arguments.size(); ++i) {
    const ArgInfo& a = op.args[i];
    const Argument& sa = s.arguments[i];
    // Absent (past the end, or None): the default, else None for an optional type, else an error.
    bool given = i < args.size() && !std::holds_alternative<std::monostate>(args[i]);
    bool optional = a.type == ArgType::OptionalTensor || a.type == ArgType::OptionalInt ||
                    a.type == ArgType::OptionalFloat || a.type == ArgType::OptionalString ||
                    a.type == ArgType::OptionalDType || a.type == ArgType::OptionalIntList;
    if (!given && !a.has_default && !optional)
      bad(i, (std::string("given (it has no default); a ") + arg_type_name(a.type)).c_str());
    if (a.is_tensor) {
      if (a.type == ArgType::TensorList) {
        if (i >= args.size() || !std::holds_alternative<std::vector<Tensor>>(args[i])) bad(i, "a Tensor[]");
        for (const Tensor& t : std::get<std::vector<Tensor>>(args[i])) {
          TESSERA_CHECK(t.defined(), "call_boxed('", op.name, "'): undefined tensor in list argument '",
                        sa.name, "'");
          tensors.push_back(t.impl());
        }
      } else if (i >= args.size() || std::holds_alternative<std::monostate>(args[i])) {
        if (a.type == ArgType::Tensor) bad(i, "a Tensor");
        tensors.push_back(nullptr);
      } else if (auto* t = std::get_if<Tensor>(&args[i])) {
        if (!t->defined() && a.type == ArgType::Tensor) bad(i, "a defined Tensor");
        tensors.push_back(t->defined() ? t->impl() : nullptr);
      } else if (auto* ot = std::get_if<std::optional<Tensor>>(&args[i])) {
        if (a.type == ArgType::Tensor && !(*ot && ot->value().defined())) bad(i, "a defined Tensor");
        tensors.push_back(*ot && ot->value().defined() ? ot->value().impl() : nullptr);
      } else {
        bad(i, "a Tensor");
      }
      continue;
    }
    tessera_value_t v{};
    if (!given) {
      v = a.has_default ? a.default_value : value_none();
      if (v.kind == TESSERA_VALUE_INT_LIST) v = value_ints(a.default_ints);
      if (v.kind == TESSERA_VALUE_STRING) v = value_string(a.default_string.c_str());
      attrs.push_back(v);
      continue;
    }
    const Value& val = args[i];
    switch (a.type) {
      case ArgType::Int:
      case ArgType::OptionalInt:
        if (auto* p = std::get_if<int64_t>(&val))
          v = value_int(*p);
        else if (std::holds_alternative<std::monostate>(val) && a.type == ArgType::OptionalInt)
          v = value_none();
        else
          bad(i, "an int");
        break;
      case ArgType::Float:
      case ArgType::OptionalFloat:
        if (auto* p = std::get_if<double>(&val))
          v = value_double(*p);
        else if (auto* q = std::get_if<int64_t>(&val))
          v = value_double(double(*q));
        else if (std::holds_alternative<std::monostate>(val) && a.type == ArgType::OptionalFloat)
          v = value_none();
        else
          bad(i, "a float");
        break;
      case ArgType::Bool:
        if (auto* p = std::get_if<bool>(&val))
          v = value_bool(*p);
        else
          bad(i, "a bool");
        break;
      case ArgType::Scalar:
        if (auto* p = std::get_if<int64_t>(&val))
          v = value_int(*p);
        else if (auto* q = std::get_if<double>(&val))
          v = value_double(*q);
        else if (auto* r = std::get_if<bool>(&val))
          v = value_bool(*r);
        else
          bad(i, "a Scalar (int64_t, double or bool)");
        break;
      case ArgType::IntList:
      case ArgType::OptionalIntList:
        if (auto* p = std::get_if<std::vector<int64_t>>(&val)) {
          std::vector<int64_t>& l = lists.emplace_back(*p);
          if (sa.list_size && l.size() == 1) l.assign(size_t(*sa.list_size), l[0]);
          v = value_ints(l);
        } else if (auto* q = std::get_if<int64_t>(&val)) {
          lists.emplace_back(size_t(sa.list_size.value_or(1)), *q);
          v = value_ints(lists.back());
        } else if (std::holds_alternative<std::monostate>(val) && a.type == ArgType::OptionalIntList) {
          v = value_none();
        } else {
          bad(i, "an int list (std::vector<int64_t>)");
        }
        break;
      case ArgType::String:
      case ArgType::OptionalString:
        if (auto* p = std::get_if<std::string>(&val))
          v = value_string(p->c_str());
        else if (std::holds_alternative<std::monostate>(val) && a.type == ArgType::OptionalString)
          v = value_none();
        else
          bad(i, "a string");
        break;
      case ArgType::DType:
      case ArgType::OptionalDType:
        if (auto* p = std::get_if<DType>(&val))
          v = value_dtype(*p);
        else if (std::holds_alternative<std::monostate>(val) && a.type == ArgType::OptionalDType)
          v = value_none();
        else
          bad(i, "a DType");
        break;
      default:
        bad(i, "a value of the schema's type");
    }
    attrs.push_back(v);
  }
  CallFrame f{tensors.data(), int(tensors.size()), attrs.data(), int(attrs.size()), nullptr};
  Tensor outs[kMaxOutputs];
  int n = call_unboxed(op, f, outs);
  Stack result;
  for (int i = 0; i < n; ++i) result.emplace_back(std::move(outs[i]));
  return result;
}

// ------------------------------------------------------------------------------------------------
// Backend device registry

namespace {

struct DeviceRegistry {
  std::mutex mutex;
  std::deque<BackendDevice> store;
  std::array<std::atomic<const BackendDevice*>, kNumDeviceTypes> devices{};
};
DeviceRegistry& device_registry() {
  static DeviceRegistry* r = new DeviceRegistry();
  return *r;
}

// The host's own device interface for the CPU when no plugin registers one: host memory,
// handle == pointer (Note [Device memory] in plugin_abi.h).
int32_t host_device_count(void*, char*, size_t) { return 1; }
tessera_status_t host_get_current(void*, int32_t* out) {
  *out = 0;
  return nullptr;
}
tessera_status_t host_set_current(void*, int32_t) { return nullptr; }
tessera_status_t host_copy_from_host(void*, int32_t, void* dst, uint64_t off, const void* src, uint64_t n,
                                     void*) {
  if (n) std::memcpy(static_cast<char*>(dst) + off, src, n);
  return nullptr;
}
tessera_status_t host_copy_to_host(void*, int32_t, void* dst, const void* src, uint64_t off, uint64_t n,
                                   void*) {
  if (n) std::memcpy(dst, static_cast<const char*>(src) + off, n);
  return nullptr;
}
tessera_status_t host_copy_device(void*, int32_t, void* dst, uint64_t doff, int32_t, const void* src,
                                  uint64_t soff, uint64_t n, void*) {
  if (n) std::memmove(static_cast<char*>(dst) + doff, static_cast<const char*>(src) + soff, n);
  return nullptr;
}
tessera_status_t host_sync(void*, int32_t) { return nullptr; }
size_t host_properties(void*, int32_t, char* buffer, size_t capacity) {
  const char* json = "{\"name\": \"host CPU\", \"provider\": \"builtin\"}";
  size_t n = std::strlen(json);
  if (buffer && capacity) {
    size_t c = std::min(n, capacity - 1);
    std::memcpy(buffer, json, c);
    buffer[c] = '\0';
  }
  return n;
}
const tessera_device_interface_t* host_interface() {
  static tessera_device_interface_t iface = [] {
    tessera_device_interface_t i{};
    i.struct_size = sizeof(i);
    i.device_count = host_device_count;
    i.device_get_current = host_get_current;
    i.device_set_current = host_set_current;
    i.memory_copy_from_host = host_copy_from_host;
    i.memory_copy_to_host = host_copy_to_host;
    i.memory_copy_device = host_copy_device;
    i.device_synchronize = host_sync;
    i.device_properties = host_properties;
    return i;
  }();
  return &iface;
}

}  // namespace

void register_backend_device(DeviceType type, const BackendDevice& backend) {
  DeviceRegistry& r = device_registry();
  std::lock_guard lock(r.mutex);
  const BackendDevice* p = &r.store.emplace_back(backend);
  r.devices[size_t(type)].store(p, std::memory_order_release);
}

void unregister_backend_device(DeviceType type) {
  DeviceRegistry& r = device_registry();
  std::lock_guard lock(r.mutex);
  r.devices[size_t(type)].store(nullptr, std::memory_order_release);
}

const BackendDevice* backend_device_if_loaded(DeviceType type) {
  return device_registry().devices[size_t(type)].load(std::memory_order_acquire);
}

const BackendDevice& backend_device(DeviceType type) {
  if (const BackendDevice* p = backend_device_if_loaded(type)) return *p;
  std::string why;
  ensure_backend_loaded(type, &why);
  if (const BackendDevice* p = backend_device_if_loaded(type)) return *p;
  if (type == DeviceType::CPU) {
    static const BackendDevice host{host_interface(), nullptr, "builtin"};
    return host;
  }
  detail::throw_error(ErrorCode::Unavailable,
                      "device type '" + device_type_name(type) + "' is not available: " +
                          (why.empty() ? std::string("no backend plugin provides it") : why) +
                          "; run `tessera plugins` or set TESSERA_LOG=plugins to see why");
}

bool cpu_fallback_enabled() {
  const char* v = secure_env("TESSERA_CPU_FALLBACK");
  return v ? parse_env_bool("TESSERA_CPU_FALLBACK", v) : true;  // Note [Environment variables]
}

uint64_t cpu_fallback_calls_on_this_thread() { return t_cpu_fallback_calls; }

}  // namespace tessera
