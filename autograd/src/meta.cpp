// Per-tensor autograd state: the meta table, requires_grad / grad / grad_fn / hooks, grad mode.
// Note [Autograd meta outside TensorImpl] (core/include/tessera/autograd_hooks.h) says why the
// meta lives here, keyed by the impl, and not in TensorImpl itself.
#include <array>
#include <shared_mutex>
#include <unordered_map>

#include "autograd_internal.h"

namespace tessera::autograd {
namespace detail {
namespace {

// Sharded so that threads recording different graphs rarely meet on one lock.
constexpr size_t kShards = 16;
struct Shard {
  std::shared_mutex mu;
  std::unordered_map<const TensorImpl*, std::shared_ptr<AutogradMeta>> metas;
};
std::array<Shard, kShards>& shards() {
  static auto* s = new std::array<Shard, kShards>();  // never destroyed: impls may die during exit
  return *s;
}
Shard& shard_of(const TensorImpl* p) { return shards()[(reinterpret_cast<uintptr_t>(p) >> 6) % kShards]; }

std::atomic<int64_t> g_hook_handle{1};
std::atomic<uint64_t> g_sequence_nr{1};

}  // namespace

std::shared_ptr<AutogradMeta> find_meta(const TensorImpl* impl) {
  if (!impl || !impl->key_set().has(Functionality::Autograd)) return nullptr;
  Shard& s = shard_of(impl);
  std::shared_lock lock(s.mu);
  auto it = s.metas.find(impl);
  return it == s.metas.end() ? nullptr : it->second;
}

std::shared_ptr<AutogradMeta> get_or_create_meta(const Tensor& t) {
  TensorImpl* impl = t.impl();
  Shard& s = shard_of(impl);
  std::unique_lock lock(s.mu);
  auto& slot = s.metas[impl];
  if (!slot) slot = std::make_shared<AutogradMeta>();
  impl->set_key_set(impl->key_set() | kAutogradKey);
  return slot;
}

void erase_meta(const TensorImpl* impl) {
  std::shared_ptr<AutogradMeta> dying;  // destroyed after the lock: it may release more impls
  Shard& s = shard_of(impl);
  {
    std::unique_lock lock(s.mu);
    auto it = s.metas.find(impl);
    if (it == s.metas.end()) return;
    dying = std::move(it->second);
    s.metas.erase(it);
  }
}

bool tracked(const AutogradMeta* m) { return m && (m->requires_grad || m->grad_fn); }

int64_t next_hook_handle() { return g_hook_handle.fetch_add(1, std::memory_order_relaxed); }
uint64_t next_sequence_nr() { return g_sequence_nr.fetch_add(1, std::memory_order_relaxed); }

namespace {
thread_local bool t_inference_mode = false;
}  // namespace

}  // namespace detail

using detail::find_meta;

namespace {
void check_defined(const Tensor& t, const char* what) {
  TESSERA_CHECK(t.defined(), what, "(): the tensor is undefined (default-constructed)");
}
}  // namespace

const Tensor& set_requires_grad(const Tensor& t, bool requires_grad) {
  check_defined(t, "set_requires_grad");
  auto m = find_meta(t.impl());
  if (m && m->grad_fn)
    TESSERA_CHECK(false, "set_requires_grad(): you can only change requires_grad flags of leaf variables; this tensor "
                         "was produced by ", m->grad_fn->name(), ". Use detach() to get a leaf");
  if (requires_grad) {
    TESSERA_CHECK(is_floating(t.dtype()), "set_requires_grad(): only tensors of floating point dtype can require "
                                          "gradients, got ", dtype_name(t.dtype()), "; convert it with .to(kFloat32)");
    m = detail::get_or_create_meta(t);
    std::lock_guard lock(m->mu);
    m->requires_grad = true;
  } else if (m) {
    std::lock_guard lock(m->mu);
    m->requires_grad = false;
  }
  return t;
}

bool requires_grad(const Tensor& t) {
  auto m = t.defined() ? find_meta(t.impl()) : nullptr;
  return detail::tracked(m.get());
}

bool is_leaf(const Tensor& t) {
  auto m = t.defined() ? find_meta(t.impl()) : nullptr;
  return !m || !m->grad_fn;
}

Tensor grad(const Tensor& t) {
  auto m = t.defined() ? find_meta(t.impl()) : nullptr;
  if (!m) return Tensor();
  std::lock_guard lock(m->mu);
  return m->grad;
}

void set_grad(const Tensor& t, const Tensor& g) {
  check_defined(t, "set_grad");
  if (g.defined())
    TESSERA_CHECK(g.sizes() == t.sizes() && g.dtype() == t.dtype(), "set_grad(): the gradient has sizes ", g.sizes(),
                  " and dtype ", dtype_name(g.dtype()), ", the tensor sizes ", t.sizes(), " and dtype ",
                  dtype_name(t.dtype()), "; they must match");
  auto m = g.defined() ? detail::get_or_create_meta(t) : find_meta(t.impl());
  if (!m) return;
  std::lock_guard lock(m->mu);
  m->grad = g;
}

std::shared_ptr<Node> grad_fn(const Tensor& t) {
  auto m = t.defined() ? find_meta(t.impl()) : nullptr;
  if (m && m->view_root.defined()) return detail::view_edge(t, *m).fn;
  return m ? m->grad_fn : nullptr;
}

uint64_t version(const Tensor& t) {
  check_defined(t, "version");
  return t.storage() ? t.storage()->version() : 0;
}

Tensor detach(const Tensor& t) {
  check_defined(t, "detach");
  auto impl = make_intrusive<TensorImpl>(t.storage(), t.dtype(), t.device(), t.sizes(), t.strides(), t.storage_offset());
  impl->set_key_set(t.key_set() - detail::kAutogradKey);
  if (t.impl()->qparams()) impl->set_qparams(t.impl()->qparams_ptr());
  impl->set_wrapped_number(t.impl()->is_wrapped_number());
  return Tensor(std::move(impl));
}

void retain_grad(const Tensor& t) {
  check_defined(t, "retain_grad");
  auto m = find_meta(t.impl());
  TESSERA_CHECK(detail::tracked(m.get()), "retain_grad(): can't retain_grad on a tensor that has requires_grad=False");
  if (!m->grad_fn) return;
  {
    std::lock_guard lock(m->mu);
    if (m->retains_grad) return;
    m->retains_grad = true;
  }
  std::weak_ptr<detail::AutogradMeta> weak = m;
  m->grad_fn->output_hooks(m->output_nr).emplace_back(detail::next_hook_handle(), [weak](const Tensor& g) {
    if (auto mm = weak.lock()) {
      std::lock_guard lock(mm->mu);
      mm->grad = mm->grad.defined() ? tessera::add(mm->grad, g) : g.clone();
    }
    return Tensor();
  });
}

int64_t register_hook(const Tensor& t, TensorHook hook) {
  check_defined(t, "register_hook");
  auto m = find_meta(t.impl());
  TESSERA_CHECK(detail::tracked(m.get()),
                "register_hook(): cannot register a hook on a tensor that doesn't require gradient");
  const int64_t h = detail::next_hook_handle();
  if (m->grad_fn) {
    m->grad_fn->output_hooks(m->output_nr).emplace_back(h, std::move(hook));
  } else {
    std::lock_guard lock(m->mu);
    m->hooks.emplace_back(h, std::move(hook));
  }
  return h;
}

void remove_hook(const Tensor& t, int64_t handle) {
  auto m = t.defined() ? find_meta(t.impl()) : nullptr;
  if (!m) return;
  auto drop = [handle](std::vector<std::pair<int64_t, TensorHook>>& v) {
    std::erase_if(v, [handle](const auto& p) { return p.first == handle; });
  };
  if (m->grad_fn) {
    drop(m->grad_fn->output_hooks(m->output_nr));
  } else {
    std::lock_guard lock(m->mu);
    drop(m->hooks);
  }
}

// ---- grad mode: the Autograd key excluded on the thread (Note [Autograd dispatch]).
bool is_grad_enabled() { return !tls_local_dispatch_key_set().excluded.has(Functionality::Autograd); }

NoGradGuard::NoGradGuard() : was_excluded_(!is_grad_enabled()) {
  tls_local_dispatch_key_set().excluded = tls_local_dispatch_key_set().excluded | detail::kAutogradKey;
}
NoGradGuard::~NoGradGuard() {
  if (!was_excluded_) tls_local_dispatch_key_set().excluded = tls_local_dispatch_key_set().excluded - detail::kAutogradKey;
}
EnableGradGuard::EnableGradGuard() : was_excluded_(!is_grad_enabled()) {
  tls_local_dispatch_key_set().excluded = tls_local_dispatch_key_set().excluded - detail::kAutogradKey;
}
EnableGradGuard::~EnableGradGuard() {
  if (was_excluded_) tls_local_dispatch_key_set().excluded = tls_local_dispatch_key_set().excluded | detail::kAutogradKey;
}
InferenceMode::InferenceMode(bool enabled)
    : was_excluded_(!is_grad_enabled()), was_inference_(detail::t_inference_mode) {
  auto& tls = tls_local_dispatch_key_set();
  tls.excluded = enabled ? tls.excluded | detail::kAutogradKey : tls.excluded - detail::kAutogradKey;
  detail::t_inference_mode = enabled;
}
InferenceMode::~InferenceMode() {
  auto& tls = tls_local_dispatch_key_set();
  tls.excluded = was_excluded_ ? tls.excluded | detail::kAutogradKey : tls.excluded - detail::kAutogradKey;
  detail::t_inference_mode = was_inference_;
}
bool is_inference_mode_enabled() { return detail::t_inference_mode; }

namespace {
// Installs the core's and the dispatcher's hooks when the library loads.
struct Installer {
  Installer() {
    detail::install_hooks();
  }
} g_installer;
}  // namespace

}  // namespace tessera::autograd
