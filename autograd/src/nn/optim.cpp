// Optimizers (nn.h): PyTorch's update rules, a loop over the parameter list under NoGradGuard.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "tessera/dispatch_key.h"
#include "tessera/nn.h"

namespace tessera::nn::optim {

namespace {
Tensor number(double v) { return scalar_tensor(v, kFloat64); }

// Under a capture (tessera::compile, export_program) the Export key is included on the thread.
bool capturing() { return tls_local_dispatch_key_set().included.has(Functionality::Export); }

void check_capturable(bool capturable, const char* name) {
  TESSERA_CHECK(capturable || !capturing(), name,
                ".step() inside a compiled function: its step count, lr and first-step state are host numbers the "
                "capture would freeze; construct it with capturable = true (Note [Capturable optimizers])");
}

// Adam's two moments, made at a parameter's first step (zeros of its shape, dtype and device).
void ensure_moments(const Tensor& p, Tensor& m, Tensor& v) {
  if (m.defined()) return;
  m = zeros_like(p);
  v = zeros_like(p);
}

// Adam's weight decay and moment updates for one parameter, shared by its plain and capturable
// steps; false when the parameter has no gradient. `decay` is AdamW's factor 1 - lr * weight_decay
// (a number, or the lr tensor's expression), undefined for Adam.
bool adam_moments(Tensor& p, Tensor& m, Tensor& v, const AdamOptions& o, const Tensor& decay) {
  Tensor g = autograd::grad(p);
  if (!g.defined()) return false;
  if (o.weight_decay != 0) {
    if (o.decoupled_weight_decay) p.mul_(decay);
    else g = g + p * o.weight_decay;
  }
  ensure_moments(p, m, v);
  m.mul_(number(o.beta1));
  m.add_(g, 1 - o.beta1);
  v.mul_(number(o.beta2));
  v.add_(g * g, 1 - o.beta2);
  return true;
}

// Note [Fused optimizer step]: the parameters whose gradient has their dtype and shape are updated
// by one _multi_tensor_* call per (device, dtype, ...) group; the others (no gradient: nothing to
// do; another dtype or shape: the unfused step promotes) are left to the op-by-op step.
// A non-contiguous parameter or gradient gets a group of its own, so that a kernel that takes
// contiguous tensors only (the CPU's) refuses that group alone, which then runs per parameter.
struct FusedGroup {
  Device device;
  DType dtype;
  bool first = false;  // SGD: the momentum buffers start from this step's gradient
  bool contiguous = true;
  std::vector<std::vector<Tensor>> blocks;  // params, then each state, then grads
};

FusedGroup& group_of(std::vector<FusedGroup>& groups, const Tensor& p, const Tensor& grad, bool first,
                     size_t num_blocks, size_t expected) {
  const bool contiguous = p.is_contiguous() && grad.is_contiguous();
  for (FusedGroup& g : groups)
    if (g.device == p.device() && g.dtype == p.dtype() && g.first == first && g.contiguous == contiguous) return g;
  groups.push_back(FusedGroup{p.device(), p.dtype(), first, contiguous, std::vector<std::vector<Tensor>>(num_blocks)});
  for (std::vector<Tensor>& block : groups.back().blocks) block.reserve(expected);
  return groups.back();
}

bool fusable(const Tensor& p, const Tensor& g) {
  return g.defined() && g.dtype() == p.dtype() && g.sizes() == p.sizes();
}

void set_lr_tensor(Tensor& lr_t, double lr, const char* name) {
  if (!lr_t.defined()) return;
  TESSERA_CHECK(!capturing(), name, ".set_lr inside a compiled function would be frozen at its first value; step "
                                    "the schedule outside the compiled step");
  autograd::NoGradGuard no_grad;
  lr_t.fill_(lr);
}
}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params) : params_(std::move(params)) {
  std::unordered_map<const TensorImpl*, size_t> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    TESSERA_CHECK(params_[i].defined(), "optimizer: parameter ", i, " is undefined");
    auto [it, fresh] = seen.emplace(params_[i].impl(), i);
    TESSERA_CHECK(fresh, "optimizer: parameters ", it->second, " and ", i,
                  " are the same tensor, which each step would update twice; pass each parameter once");
  }
}

Optimizer::~Optimizer() = default;

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) autograd::set_grad(p, Tensor());
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : Optimizer(std::move(params)), o_(options) {
  TESSERA_CHECK(o_.lr >= 0 && o_.momentum >= 0 && o_.weight_decay >= 0, "SGD: lr (", o_.lr, "), momentum (",
                o_.momentum, ") and weight_decay (", o_.weight_decay, ") must be non-negative");
  TESSERA_CHECK(!o_.nesterov || (o_.momentum > 0 && o_.dampening == 0),
                "SGD: Nesterov momentum requires a momentum and zero dampening");
  momentum_.resize(params_.size());
  if (o_.capturable) {
    ExcludeDispatchKeyGuard eager(DispatchKeySet::functionality(Functionality::Export));
    autograd::NoGradGuard no_grad;
    lr_t_ = number(o_.lr);
    started_ = number(0);
    if (o_.momentum != 0)
      for (size_t i = 0; i < params_.size(); ++i) momentum_[i] = zeros_like(params_[i]);
  }
}

std::vector<Tensor> SGD::state_tensors() const {
  std::vector<Tensor> out;
  for (const Tensor& b : momentum_)
    if (b.defined()) out.push_back(b);
  if (started_.defined()) out.push_back(started_);
  return out;
}

void SGD::set_lr(double lr) {
  set_lr_tensor(lr_t_, lr, "SGD");
  o_.lr = lr;
}

void SGD::step() {
  check_capturable(o_.capturable, "SGD");
  autograd::NoGradGuard no_grad;
  std::vector<FusedGroup> groups;  // Note [Fused optimizer step]
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    const Tensor g = autograd::grad(p);
    if (!g.defined()) continue;
    if (!o_.capturable && o_.momentum != 0 && o_.fused && fusable(p, g)) {
      Tensor& buf = momentum_[i];
      const bool first = !buf.defined();
      if (first) buf = empty_like(p);
      FusedGroup& group = group_of(groups, p, g, first, 3, params_.size());
      group.blocks[0].push_back(p);
      group.blocks[1].push_back(buf);
      group.blocks[2].push_back(g);
      continue;
    }
    Tensor d = o_.weight_decay != 0 ? g + p * o_.weight_decay : g;
    if (o_.capturable) {
      if (o_.momentum != 0) {
        // The first step's buffer is d (PyTorch's clone); later ones damp it: 1 - dampening * started.
        Tensor& buf = momentum_[i];
        buf.mul_(number(o_.momentum));
        buf.add_(o_.dampening == 0 ? d : d * (1 - started_ * o_.dampening));
        d = o_.nesterov ? d + buf * o_.momentum : buf;
      }
      p.add_(d * lr_t_, -1);
      continue;
    }
    if (o_.momentum != 0) {
      Tensor& buf = momentum_[i];
      if (!buf.defined()) {
        buf = d.clone();
      } else {
        buf.mul_(number(o_.momentum));
        buf.add_(d, 1 - o_.dampening);
      }
      d = o_.nesterov ? d + buf * o_.momentum : buf;
    }
    p.add_(d, -o_.lr);
  }
  for (const FusedGroup& g : groups)
    _multi_tensor_sgd_(g.blocks[0], g.blocks[1], g.blocks[2],
                       {o_.lr, o_.momentum, o_.dampening, o_.weight_decay, o_.nesterov, g.first});
  if (o_.capturable && o_.momentum != 0 && o_.dampening != 0) started_.fill_(1);
}

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Optimizer(std::move(params)), o_(options) {
  TESSERA_CHECK(o_.lr >= 0 && o_.eps >= 0 && o_.beta1 >= 0 && o_.beta1 < 1 && o_.beta2 >= 0 && o_.beta2 < 1,
                "Adam: need lr >= 0, eps >= 0 and betas in [0, 1), got lr ", o_.lr, ", eps ", o_.eps, ", betas (",
                o_.beta1, ", ", o_.beta2, ")");
  m_.resize(params_.size());
  v_.resize(params_.size());
  if (o_.capturable) {
    ExcludeDispatchKeyGuard eager(DispatchKeySet::functionality(Functionality::Export));
    autograd::NoGradGuard no_grad;
    lr_t_ = number(o_.lr);
    beta1_pow_ = number(1);
    beta2_pow_ = number(1);
    for (size_t i = 0; i < params_.size(); ++i) ensure_moments(params_[i], m_[i], v_[i]);
  }
}

std::vector<Tensor> Adam::state_tensors() const {
  std::vector<Tensor> out;
  for (const std::vector<Tensor>* moments : {&m_, &v_})
    for (const Tensor& m : *moments)
      if (m.defined()) out.push_back(m);
  for (const Tensor& t : {beta1_pow_, beta2_pow_})
    if (t.defined()) out.push_back(t);
  return out;
}

void Adam::set_lr(double lr) {
  set_lr_tensor(lr_t_, lr, o_.decoupled_weight_decay ? "AdamW" : "Adam");
  o_.lr = lr;
}

// Note [Capturable optimizers]: the bias corrections from the running products beta^t and the lr
// from lr_t_, all tensors the program reads and writes.
void Adam::capturable_step() {
  autograd::NoGradGuard no_grad;
  ++t_;
  beta1_pow_.mul_(number(o_.beta1));
  beta2_pow_.mul_(number(o_.beta2));
  const Tensor bc2 = 1 - beta2_pow_;
  const Tensor step_size = lr_t_ / (1 - beta1_pow_);
  const Tensor decay = o_.weight_decay != 0 && o_.decoupled_weight_decay ? 1 - lr_t_ * o_.weight_decay : Tensor();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!adam_moments(params_[i], m_[i], v_[i], o_, decay)) continue;
    Tensor denom = sqrt(v_[i] / bc2) + o_.eps;
    params_[i].add_(m_[i] / denom * step_size, -1);
  }
}

void Adam::step() {
  check_capturable(o_.capturable, o_.decoupled_weight_decay ? "AdamW" : "Adam");
  if (o_.capturable) return capturable_step();
  autograd::NoGradGuard no_grad;
  ++t_;
  const double bc1 = 1 - std::pow(o_.beta1, double(t_)), bc2 = 1 - std::pow(o_.beta2, double(t_));
  const Tensor decay =
      o_.weight_decay != 0 && o_.decoupled_weight_decay ? number(1 - o_.lr * o_.weight_decay) : Tensor();
  std::vector<FusedGroup> groups;  // Note [Fused optimizer step]
  for (size_t i = 0; i < params_.size(); ++i) {
    if (o_.fused) {
      const Tensor g = autograd::grad(params_[i]);
      if (fusable(params_[i], g)) {
        ensure_moments(params_[i], m_[i], v_[i]);
        FusedGroup& group = group_of(groups, params_[i], g, false, 4, params_.size());
        group.blocks[0].push_back(params_[i]);
        group.blocks[1].push_back(m_[i]);
        group.blocks[2].push_back(v_[i]);
        group.blocks[3].push_back(g);
        continue;
      }
    }
    if (!adam_moments(params_[i], m_[i], v_[i], o_, decay)) continue;
    Tensor denom = sqrt(v_[i] / bc2) + o_.eps;
    params_[i].add_(m_[i] / denom, -o_.lr / bc1);
  }
  const FusedAdamArgs fused{o_.lr, o_.beta1, o_.beta2, o_.weight_decay, o_.eps, bc1, bc2, o_.decoupled_weight_decay};
  for (const FusedGroup& g : groups) _multi_tensor_adam_(g.blocks[0], g.blocks[1], g.blocks[2], g.blocks[3], fused);
}

AdamW::AdamW(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::move(params), [&] {
        AdamOptions o = options;
        o.decoupled_weight_decay = true;
        return o;
      }()) {}

LRScheduler::~LRScheduler() = default;

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma) : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  TESSERA_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
}
double StepLR::lr_at(int64_t epoch) const { return base_lr_ * std::pow(gamma_, double(epoch / step_size_)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min)
    : LRScheduler(opt), t_max_(t_max), eta_min_(eta_min) {
  TESSERA_CHECK(t_max > 0, "CosineAnnealingLR: t_max must be positive, got ", t_max);
}
double CosineAnnealingLR::lr_at(int64_t epoch) const {
  return eta_min_ + (base_lr_ - eta_min_) * (1 + std::cos(M_PI * double(epoch) / double(t_max_))) / 2;
}

ExponentialLR::ExponentialLR(Optimizer& opt, double gamma) : LRScheduler(opt), gamma_(gamma) {
  TESSERA_CHECK(gamma > 0, "ExponentialLR: gamma must be positive, got ", gamma);
}
double ExponentialLR::lr_at(int64_t epoch) const { return base_lr_ * std::pow(gamma_, double(epoch)); }

MultiStepLR::MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(opt), milestones_(std::move(milestones)), gamma_(gamma) {
  for (size_t i = 1; i < milestones_.size(); ++i)
    TESSERA_CHECK(milestones_[i - 1] < milestones_[i], "MultiStepLR: milestones must be strictly increasing, got ",
                  milestones_[i - 1], " before ", milestones_[i]);
}
double MultiStepLR::lr_at(int64_t epoch) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  return base_lr_ * std::pow(gamma_, double(passed));
}

LinearLR::LinearLR(Optimizer& opt, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(opt), start_(start_factor), end_(end_factor), total_(total_iters) {
  TESSERA_CHECK(start_factor > 0 && start_factor <= 1, "LinearLR: start_factor must be in (0, 1], got ", start_factor);
  TESSERA_CHECK(end_factor >= 0 && end_factor <= 1, "LinearLR: end_factor must be in [0, 1], got ", end_factor);
  TESSERA_CHECK(total_iters > 0, "LinearLR: total_iters must be positive, got ", total_iters);
  opt_.set_lr(lr_at(0));
}
double LinearLR::lr_at(int64_t epoch) const {
  return base_lr_ * (start_ + (end_ - start_) * double(std::min(epoch, total_)) / double(total_));
}

OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start, bool anneal_cos,
                       double div_factor, double final_div_factor)
    : LRScheduler(opt), max_lr_(max_lr), initial_lr_(max_lr / div_factor),
      min_lr_(max_lr / div_factor / final_div_factor), warm_end_(pct_start * double(total_steps) - 1),
      total_(total_steps), cos_(anneal_cos) {
  TESSERA_CHECK(max_lr > 0, "OneCycleLR: max_lr must be positive, got ", max_lr);
  TESSERA_CHECK(total_steps > 0, "OneCycleLR: total_steps must be positive, got ", total_steps);
  TESSERA_CHECK(pct_start >= 0 && pct_start <= 1, "OneCycleLR: pct_start must be in [0, 1], got ", pct_start);
  TESSERA_CHECK(div_factor > 0 && final_div_factor > 0, "OneCycleLR: div_factor (", div_factor,
                ") and final_div_factor (", final_div_factor, ") must be positive");
  opt_.set_lr(lr_at(0));
}

// lr_scheduler.py's OneCycleLR.get_lr: phase ends at pct_start * total - 1 and total - 1.
double OneCycleLR::lr_at(int64_t step) const {
  TESSERA_CHECK(step <= total_, "OneCycleLR: tried to step ", step, " times with total_steps ", total_,
                "; make total_steps the number of optimizer steps of the whole run");
  auto anneal = [&](double start, double end, double pct) {
    return cos_ ? end + (start - end) / 2 * (1 + std::cos(M_PI * pct)) : (end - start) * pct + start;
  };
  const double s = double(step), fall = double(total_ - 1) - warm_end_;
  if (s <= warm_end_) return anneal(initial_lr_, max_lr_, warm_end_ > 0 ? s / warm_end_ : 1.0);
  return anneal(max_lr_, min_lr_, fall > 0 ? (s - warm_end_) / fall : 1.0);
}

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, ReduceLROnPlateauOptions options)
    : opt_(opt), o_(std::move(options)) {
  TESSERA_CHECK(o_.mode == "min" || o_.mode == "max", "ReduceLROnPlateau: mode must be \"min\" or \"max\", got \"",
                o_.mode, "\"");
  TESSERA_CHECK(o_.threshold_mode == "rel" || o_.threshold_mode == "abs",
                "ReduceLROnPlateau: threshold_mode must be \"rel\" or \"abs\", got \"", o_.threshold_mode, "\"");
  TESSERA_CHECK(o_.factor < 1 && o_.factor >= 0, "ReduceLROnPlateau: factor must be in [0, 1), got ", o_.factor);
  TESSERA_CHECK(o_.patience >= 0 && o_.cooldown >= 0, "ReduceLROnPlateau: patience (", o_.patience,
                ") and cooldown (", o_.cooldown, ") must be non-negative");
  best_ = o_.mode == "min" ? INFINITY : -INFINITY;
}

bool ReduceLROnPlateau::better(double a) const {
  const bool rel = o_.threshold_mode == "rel";
  if (o_.mode == "min") return a < (rel ? best_ * (1 - o_.threshold) : best_ - o_.threshold);
  return a > (rel ? best_ * (1 + o_.threshold) : best_ + o_.threshold);
}

void ReduceLROnPlateau::step(double metric) {
  ++epoch_;
  if (better(metric)) {
    best_ = metric;
    bad_ = 0;
  } else {
    ++bad_;
  }
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    bad_ = 0;
  }
  if (bad_ > o_.patience) {
    const double old = opt_.lr(), lr = std::max(old * o_.factor, o_.min_lr);
    if (old - lr > o_.eps) opt_.set_lr(lr);
    cooldown_left_ = o_.cooldown;
    bad_ = 0;
  }
}

}  // namespace tessera::nn::optim
