// Autocast (Note [Autocast policy] in tessera/amp.h, Note [Autocast dispatch] in
// tessera/autocast_dispatch.h).
#include <array>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <vector>

#include "tessera/amp.h"
#include "tessera/autocast_dispatch.h"
#include "tessera/dispatcher.h"
#include "tessera/plugin_loader.h"

namespace tessera::amp {
namespace {

constexpr DispatchKeySet kAutocastKey = DispatchKeySet::functionality(Functionality::Autocast);

// Note [Autocast cast cache]
// As PyTorch's cached_cast: within the outermost enabled AutocastGuard of a thread, the
// lower-precision cast of a float32 leaf that requires grad (a weight) is made once and reused by
// every op that casts it; the cache is emptied when that guard ends. An entry remembers the
// weight's storage version and is made again when the weight was written since (PyTorch keeps the
// stale cast). The cast is recorded for autograd once, so the uses' gradients meet at one cast node.
struct CachedCast {
  Tensor source;  // keeps the key's address from being reused while the entry lives
  Tensor cast;
  uint64_t version = 0;
};
struct ThreadState {
  std::array<bool, kNumBackendSlots> enabled{};
  std::array<DType, kNumBackendSlots> dtype;
  int enabled_guards = 0;  // enabled AutocastGuards alive on this thread
  std::map<std::pair<const TensorImpl*, DType>, CachedCast> cache;
  ThreadState() { dtype.fill(kBFloat16); }
};
thread_local ThreadState t_state;

Tensor cached_to(const Tensor& t, DType to) {
  // Not under a capture: its casts are tracing tensors, which must not outlive it in the cache.
  const bool capturing = tls_local_dispatch_key_set().included.has(Functionality::Export);
  const bool cacheable = t_state.enabled_guards > 0 && !capturing && t.dtype() == kFloat32 &&
                         (to == kBFloat16 || to == kFloat16) && autograd::requires_grad(t) && autograd::is_leaf(t) &&
                         t.storage();
  if (!cacheable) return t.to(to);
  const uint64_t version = t.storage()->version();
  CachedCast& c = t_state.cache[{t.impl(), to}];
  if (!c.cast.defined() || c.version != version || !c.source.is_same(t)) c = {t, t.to(to), version};
  return c.cast;
}

// PyTorch's CUDA autocast lists (torch/csrc/autograd/autocast_mode.cpp's op sets), restricted to
// the ops of the contract; names without an overload cover every overload of the op.
constexpr const char* kLowerPrecisionOps[] = {"matmul", "linear", "conv2d", "conv_transpose2d", "prelu",
                                           "scaled_dot_product_attention"};
constexpr const char* kFloat32Ops[] = {
    "acos",   "asin",     "cosh",          "exp",        "expm1",      "log",          "log1p",
    "pow",    "reciprocal", "rsqrt",       "sinh",       "tan",        "softplus",     "layer_norm",
    "group_norm", "rms_norm", "batch_norm", "sum",       "prod",       "cumsum",       "softmax",
    "log_softmax", "logsumexp", "linalg_vector_norm", "var", "mean"};
constexpr const char* kPromoteOps[] = {"cat", "stack", "where", "atan2", "index_select", "scatter", "scatter_reduce"};

// Whether the op contract has `op` ("add.Tensor"), or an op or overload of its base name ("add").
bool contract_has(std::string_view op) {
  Dispatcher& d = Dispatcher::instance();
  if (d.find_op(op)) return true;
  const std::string prefix = std::string(op.substr(0, op.find('.'))) + ".";
  for (const std::string& n : d.op_names())
    if (n.compare(0, prefix.size(), prefix) == 0) return true;
  return false;
}

struct Policies {
  std::shared_mutex mutex;
  std::array<std::map<std::string, CastPolicy, std::less<>>, kNumBackendSlots> by_type;
  // Whether the device type's manifest entries were applied (Note [Autocast policies from the
  // manifest] in dispatcher/src/manifest.cpp): read without the lock on the call path.
  std::array<std::atomic<bool>, kNumBackendSlots> manifest_applied{};
  // Whether the loaded plugin's code entries were applied (Note [Autocast policies in code] in
  // plugin_abi.h), and the ops the application set, which those entries leave alone.
  std::array<std::atomic<bool>, kNumBackendSlots> code_applied{};
  std::array<std::set<std::string, std::less<>>, kNumBackendSlots> set_by_application;
  Policies() {
    std::map<std::string, CastPolicy, std::less<>> defaults;  // the same for every device type
    for (const char* op : kLowerPrecisionOps)
      if (contract_has(op)) defaults[op] = CastPolicy::LowerPrecision;
    for (const char* op : kFloat32Ops)
      if (contract_has(op)) defaults[op] = CastPolicy::Float32;
    for (const char* op : kPromoteOps)
      if (contract_has(op)) defaults[op] = CastPolicy::Promote;
    by_type.fill(defaults);
  }
};
Policies& policies() {
  static Policies p;
  return p;
}

CastPolicy policy_from_word(const std::string& w) {
  if (w == "lower_precision") return CastPolicy::LowerPrecision;
  if (w == "float32") return CastPolicy::Float32;
  if (w == "promote") return CastPolicy::Promote;
  return CastPolicy::None;  // the manifest parser admits only these four words
}

// Applies, once per device type, the "autocast" entries of the manifest of the backend plugin that
// provides it (the one of highest priority that is loaded or can be), over the default table.
void ensure_manifest_policies(Policies& ps, size_t slot) {
  if (ps.manifest_applied[slot].load(std::memory_order_acquire)) return;
  std::vector<std::pair<std::string, std::string>> entries;
  int best = 0;
  bool found = false;
  for (const PluginInfo& p : plugins()) {
    if (p.kind != PluginKind::Backend || !p.has_device || size_t(int(p.device_type)) != slot) continue;
    if (p.status != PluginStatus::Available && p.status != PluginStatus::Loaded) continue;
    if (found && p.priority <= best) continue;
    found = true;
    best = p.priority;
    entries = p.autocast;
  }
  std::unique_lock lock(ps.mutex);
  if (ps.manifest_applied[slot].load(std::memory_order_relaxed)) return;
  for (const auto& [op, word] : entries) ps.by_type[slot][op] = policy_from_word(word);
  ps.manifest_applied[slot].store(true, std::memory_order_release);
}

static_assert(int(CastPolicy::None) == TESSERA_AUTOCAST_NONE && int(CastPolicy::LowerPrecision) ==
                  TESSERA_AUTOCAST_LOWER_PRECISION && int(CastPolicy::Float32) == TESSERA_AUTOCAST_FLOAT32 &&
                  int(CastPolicy::Promote) == TESSERA_AUTOCAST_PROMOTE,
              "CastPolicy carries the plugin ABI's tessera_autocast_policy_t values");

// The entries the device type's loaded backend plugin gives through TESSERA_EXT_AUTOCAST_POLICY
// (Note [Autocast policies in code] in plugin_abi.h), checked: an op the contract lacks or a value
// out of range is logged naming the plugin and skipped.
std::vector<std::pair<std::string, CastPolicy>> code_entries(const BackendDevice& b) {
  auto fn = plugin_extension<tessera_ext_autocast_policy_fn_t>(b.plugin, TESSERA_EXT_AUTOCAST_POLICY);
  if (!fn) return {};
  constexpr int32_t kMaxEntries = 4096;
  const int32_t n = fn(b.self, nullptr, 0);
  // A plugin's mistake is printed whatever TESSERA_LOG says (as a malformed variable is): the
  // policy it meant is not applied, and its author needs to see why.
  auto refuse = [&](const std::string& why) {
    const std::string line = "[tessera:autocast] error: plugin '" + b.plugin + "': " + why + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
  };
  if (n < 0 || n > kMaxEntries) {
    refuse("its autocast policy extension reports " + std::to_string(n) + " entries; expected 0.." +
           std::to_string(kMaxEntries) + " (none applied)");
    return {};
  }
  std::vector<tessera_autocast_entry_t> raw(size_t(n), tessera_autocast_entry_t{nullptr, 0});
  const int32_t got = n ? fn(b.self, raw.data(), n) : 0;
  std::vector<std::pair<std::string, CastPolicy>> out;
  for (int32_t i = 0; i < std::min(got, n); ++i) {
    const tessera_autocast_entry_t& e = raw[size_t(i)];
    const std::string op = e.op ? e.op : "";
    if (op.empty() || !contract_has(op)) {
      refuse("autocast policy entry " + std::to_string(i) + " names no op of the contract ('" + op +
             "'); skipped (see `tessera ops`)");
    } else if (e.policy < TESSERA_AUTOCAST_NONE || e.policy > TESSERA_AUTOCAST_PROMOTE) {
      refuse("autocast policy entry " + std::to_string(i) + " ('" + op + "') has policy " + std::to_string(e.policy) +
             ", not a tessera_autocast_policy_t (0..3); skipped");
    } else {
      out.emplace_back(op, CastPolicy(e.policy));
    }
  }
  return out;
}

// Applies, once per device type and after its backend plugin loaded, the plugin's code entries
// over the manifest's, except for ops the application set.
void ensure_code_policies(Policies& ps, size_t slot) {
  if (ps.code_applied[slot].load(std::memory_order_acquire)) return;
  const BackendDevice* b = backend_device_if_loaded(DeviceType(slot));
  if (!b) return;  // asked again once the plugin has loaded
  const auto entries = code_entries(*b);
  std::unique_lock lock(ps.mutex);
  if (ps.code_applied[slot].load(std::memory_order_relaxed)) return;
  for (const auto& [op, policy] : entries)
    if (!ps.set_by_application[slot].count(op)) ps.by_type[slot][op] = policy;
  ps.code_applied[slot].store(true, std::memory_order_release);
}

// The device type's table, with the manifest's and the plugin's code entries applied.
void ensure_policies(Policies& ps, size_t slot) {
  ensure_manifest_policies(ps, slot);
  ensure_code_policies(ps, slot);
}

CastPolicy lookup(const std::map<std::string, CastPolicy, std::less<>>& table, std::string_view op) {
  if (auto it = table.find(op); it != table.end()) return it->second;
  const size_t dot = op.find('.');
  if (dot != std::string_view::npos)
    if (auto it = table.find(op.substr(0, dot)); it != table.end()) return it->second;
  return CastPolicy::None;
}

bool eligible(const Tensor& t) {  // floating, not float64 (PyTorch's is_eligible)
  return t.defined() && is_floating(t.dtype()) && t.dtype() != kFloat64;
}

void cast_all(Stack& args, const FunctionSchema& schema, DType to, bool (*which)(const Tensor&, DType)) {
  for (size_t a = 0; a < args.size(); ++a) {
    if (a < schema.arguments.size() && schema.arguments[a].is_write) continue;  // never cast what the op writes
    Value& v = args[a];
    if (auto* t = std::get_if<Tensor>(&v)) {
      if (which(*t, to)) *t = cached_to(*t, to);
    } else if (auto* ot = std::get_if<std::optional<Tensor>>(&v)) {
      if (*ot && which(**ot, to)) *ot = cached_to(**ot, to);
    } else if (auto* l = std::get_if<std::vector<Tensor>>(&v)) {
      for (Tensor& t : *l)
        if (which(t, to)) t = cached_to(t, to);
    }
  }
}

DType widest_floating(const Stack& args) {
  std::optional<DType> w;
  auto see = [&](const Tensor& t) {
    if (t.defined() && is_floating(t.dtype()) && t.dim() > 0) w = w ? promote_types(*w, t.dtype()) : t.dtype();
  };
  for (const Value& v : args) {
    if (auto* t = std::get_if<Tensor>(&v)) see(*t);
    else if (auto* ot = std::get_if<std::optional<Tensor>>(&v); ot && *ot) see(**ot);
    else if (auto* l = std::get_if<std::vector<Tensor>>(&v))
      for (const Tensor& t : *l) see(t);
  }
  return w.value_or(kFloat32);
}

std::vector<Tensor> on_autocast_call(AutogradCall& call) {
  ExcludeDispatchKeyGuard below(kAutocastKey);
  const int slot = int(call.device.type());
  if (slot >= 0 && slot < kNumBackendSlots && t_state.enabled[size_t(slot)]) {
    CastPolicy p;
    {
      Policies& ps = policies();
      ensure_policies(ps, size_t(slot));
      std::shared_lock lock(ps.mutex);
      p = lookup(ps.by_type[size_t(slot)], *call.name);
    }
    if (p != CastPolicy::None) {
      const FunctionSchema& schema = Dispatcher::instance().schema(*call.op);
      switch (p) {
        case CastPolicy::LowerPrecision:
          cast_all(call.args, schema, t_state.dtype[size_t(slot)],
                   [](const Tensor& t, DType to) { return eligible(t) && t.dtype() != to; });
          break;
        case CastPolicy::Float32:
          cast_all(call.args, schema, kFloat32, [](const Tensor& t, DType) {
            return t.defined() && (t.dtype() == kBFloat16 || t.dtype() == kFloat16);
          });
          break;
        case CastPolicy::Promote:
          cast_all(call.args, schema, widest_floating(call.args), [](const Tensor& t, DType to) {
            return t.defined() && is_floating(t.dtype()) && t.dtype() != to;
          });
          break;
        case CastPolicy::None:
          break;
      }
    }
  }
  Stack r = Dispatcher::instance().call_boxed(*call.op, call.args);
  std::vector<Tensor> outs;
  for (Value& v : r) outs.push_back(std::get<Tensor>(std::move(v)));
  return outs;
}

void update_key() {
  bool any = false;
  for (bool e : t_state.enabled) any = any || e;
  LocalDispatchKeySet& tls = tls_local_dispatch_key_set();
  tls.included = any ? tls.included | kAutocastKey : tls.included - kAutocastKey;
}

int slot_of(DeviceType type, const char* what) {
  const int slot = int(type);
  TESSERA_CHECK(type != DeviceType::Meta && slot >= 0 && slot < kNumBackendSlots, what,
                ": autocast is for the devices that run kernels, not '", device_type_name(type), "'");
  return slot;
}

struct Installer {
  Installer() { set_autocast_hook(&on_autocast_call); }
} g_installer;

}  // namespace

const char* cast_policy_name(CastPolicy p) {
  switch (p) {
    case CastPolicy::None: return "none";
    case CastPolicy::LowerPrecision: return "lower_precision";
    case CastPolicy::Float32: return "float32";
    case CastPolicy::Promote: return "promote";
  }
  return "?";
}

AutocastGuard::AutocastGuard(DeviceType device_type, DType dtype, bool enabled) : type_(device_type) {
  const size_t slot = size_t(slot_of(device_type, "AutocastGuard"));
  TESSERA_CHECK(!enabled || dtype == kBFloat16 || dtype == kFloat16, "AutocastGuard: the lower precision must be ",
                "bfloat16 or float16, got ", dtype_name(dtype));
  was_enabled_ = t_state.enabled[slot];
  was_dtype_ = t_state.dtype[slot];
  t_state.enabled[slot] = enabled;
  if (enabled) t_state.dtype[slot] = dtype;
  counted_ = enabled;
  if (counted_) ++t_state.enabled_guards;
  update_key();
}

AutocastGuard::~AutocastGuard() {
  const size_t slot = size_t(int(type_));
  t_state.enabled[slot] = was_enabled_;
  t_state.dtype[slot] = was_dtype_;
  if (counted_ && --t_state.enabled_guards == 0) t_state.cache.clear();  // Note [Autocast cast cache]
  update_key();
}

size_t autocast_cached_casts() { return t_state.cache.size(); }

bool is_autocast_enabled(DeviceType device_type) {
  return t_state.enabled[size_t(slot_of(device_type, "is_autocast_enabled"))];
}

DType autocast_dtype(DeviceType device_type) { return t_state.dtype[size_t(slot_of(device_type, "autocast_dtype"))]; }

CastPolicy autocast_policy(DeviceType device_type, const std::string& op) {
  const size_t slot = size_t(slot_of(device_type, "autocast_policy"));
  TESSERA_CHECK(contract_has(op), "autocast_policy: the op contract has no op '", op, "' (see `tessera ops`)");
  Policies& ps = policies();
  ensure_policies(ps, slot);
  std::shared_lock lock(ps.mutex);
  return lookup(ps.by_type[slot], op);
}

void set_autocast_policy(DeviceType device_type, const std::string& op, CastPolicy policy) {
  (void)autocast_policy(device_type, op);  // checks the device type and the op
  Policies& ps = policies();
  std::unique_lock lock(ps.mutex);
  ps.by_type[size_t(int(device_type))][op] = policy;
  ps.set_by_application[size_t(int(device_type))].insert(op);
}

std::vector<std::string> autocast_ops(DeviceType device_type, CastPolicy policy) {
  const size_t slot = size_t(slot_of(device_type, "autocast_ops"));
  Policies& ps = policies();
  ensure_policies(ps, slot);
  std::shared_lock lock(ps.mutex);
  std::vector<std::string> out;
  for (const auto& [op, p] : ps.by_type[slot])
    if (p == policy) out.push_back(op);
  return out;
}

}  // namespace tessera::amp
