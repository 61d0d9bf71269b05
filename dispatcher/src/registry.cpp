// The dispatcher's operator table and registrations: defining ops, registering and deregistering
// kernels, fallbacks and composites, and how a call would resolve. The call itself is in
// call_path.cpp, boxed calls in boxed_call.cpp, backend devices in device_registry.cpp.
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

#include "dispatcher_state.h"
#include "host_api.h"
#include "op_registry.h"
#include "profiler.h"
#include "sparse_internal.h"
#include "stream_state.h"
#include "tessera/env.h"
#include "tessera/log.h"
#include "tessera/op_info.h"
#include "tessera/op_names.h"
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

}  // namespace

std::array<std::atomic<const KernelEntry*>, kNumDispatchSlots> g_fallbacks{};

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
        e.writes_list = a.is_write;
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

// The operators of the contract (Note [OpInfo]): an op a plugin provides ("provider" in ops.json)
// is defined here too, so that graphs and registrations are checked against it before that plugin
// loads; the plugin's own define_op of the same schema is then a no-op.
Dispatcher::Dispatcher() : impl_(std::make_unique<Impl>()) {
  for (int i = 0; i < op::kNumOpInfos; ++i) {
    const op::OpInfo& info = op::kOpInfos[i];
    OperatorEntry& e = impl_->define_locked(parse_schema(info.schema), core_meta(i), info.provider);
    for (int t = 0; t < op::kNumTags; ++t)
      if (info.tags >> t & 1) e.tags.emplace_back(op::kTagNames[t]);
    e.keeps_layout = info.has(op::kTagPointwise) || e.name == op::clone::name || e.name == op::_to_copy::name;
    e.doc = info.doc;
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

const char* resolution_name(Resolution r) {
  switch (r) {
    case Resolution::Kernel: return "kernel";
    case Resolution::Composite: return "composite";
    case Resolution::Fallback: return "fallback";
    case Resolution::None: return "none";
  }
  return "none";
}
std::ostream& operator<<(std::ostream& os, Resolution r) { return os << resolution_name(r); }

Resolution Dispatcher::resolution(const OperatorEntry& op, DeviceType backend, DType dtype) const {
  int slot = int(Functionality::Dense) * kNumBackendSlots + int(backend);
  const KernelEntry* k = op.slots[size_t(slot)].load(std::memory_order_acquire);
  if (k && (k->dtype_mask & dtype_bit(dtype))) return Resolution::Kernel;
  if (op.composite.load(std::memory_order_acquire)) return Resolution::Composite;
  if (g_fallbacks[size_t(slot)].load(std::memory_order_acquire)) return Resolution::Fallback;
  bool forbidden = (op.forbid_fallback_mask.load(std::memory_order_acquire) >> int(backend) & 1) ||
                   (k && (k->flags & TESSERA_KERNEL_FLAG_NO_FALLBACK));
  if (backend != DeviceType::CPU && !forbidden && cpu_fallback_enabled()) {
    const size_t cpu_slot = size_t(int(Functionality::Dense) * kNumBackendSlots);
    const KernelEntry* cpu = op.slots[cpu_slot].load(std::memory_order_acquire);
    if (!cpu && ensure_backend_loaded(DeviceType::CPU))  // the CPU backend loads lazily
      cpu = op.slots[cpu_slot].load(std::memory_order_acquire);
    if (cpu || op.composite.load(std::memory_order_acquire)) return Resolution::Fallback;
  }
  return Resolution::None;
}

}  // namespace tessera
