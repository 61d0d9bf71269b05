// The gradient scaler (Note [Gradient scaler] in tessera/nn.h).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "tessera/dispatch_key.h"
#include "tessera/nn.h"

namespace tessera::nn {

GradScaler::GradScaler(GradScalerOptions options) : o_(options), scale_(options.init_scale) {
  TESSERA_CHECK(std::isfinite(o_.init_scale) && o_.init_scale > 0, "GradScaler: init_scale must be positive and ",
                "finite, got ", o_.init_scale);
  TESSERA_CHECK(o_.growth_factor > 1 && std::isfinite(o_.growth_factor), "GradScaler: growth_factor must be > 1, got ",
                o_.growth_factor);
  TESSERA_CHECK(o_.backoff_factor > 0 && o_.backoff_factor < 1, "GradScaler: backoff_factor must be in (0, 1), got ",
                o_.backoff_factor);
  TESSERA_CHECK(o_.growth_interval > 0, "GradScaler: growth_interval must be positive, got ", o_.growth_interval);
  if (o_.capturable) {  // made now, not at the first step a capture would record as constants
    ExcludeDispatchKeyGuard eager(DispatchKeySet::functionality(Functionality::Export));
    autograd::NoGradGuard no_grad;
    scale_t_ = scalar_tensor(o_.init_scale, kFloat64);
    tracker_t_ = scalar_tensor(0.0, kFloat64);
    found_t_ = scalar_tensor(0.0, kFloat64);
  }
}

double GradScaler::get_scale() const { return o_.capturable ? scale_t_.item<double>() : scale_; }
bool GradScaler::found_inf() const { return o_.capturable ? found_t_.item<double>() > 0 : found_inf_; }
int64_t GradScaler::growth_tracker() const {
  return o_.capturable ? int64_t(tracker_t_.item<double>()) : growth_tracker_;
}

Tensor GradScaler::scale(const Tensor& loss) const {
  TESSERA_CHECK(loss.defined(), "GradScaler::scale: the loss is an undefined tensor");
  if (!o_.enabled) return loss;
  TESSERA_CHECK(is_floating(loss.dtype()), "GradScaler::scale: the loss must be floating, got ", dtype_name(loss.dtype()));
  return o_.capturable ? loss * scale_t_ : loss * scale_;
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!o_.enabled) return;
  TESSERA_CHECK(std::find(unscaled_.begin(), unscaled_.end(), &opt) == unscaled_.end(),
                "GradScaler::unscale_: already called for this optimizer since the last update()");
  unscaled_.push_back(&opt);
  autograd::NoGradGuard no_grad;
  std::vector<std::pair<Device, Tensor>> non_finite;  // per device: the count of inf/NaN gradient values
  const Tensor inv_t = o_.capturable ? scalar_tensor(1.0, kFloat64) / scale_t_ : scalar_tensor(1.0 / scale_, kFloat64);
  for (const Tensor& p : opt.params()) {
    Tensor g = autograd::grad(p);
    if (!g.defined()) continue;
    g.mul_(inv_t);  // inf and NaN stay what they are
    Tensor bad = logical_or(isnan(g), isinf(g)).to(kInt64).sum();
    if (o_.capturable) {
      found_t_.add_(bad.to(found_t_.device()).to(kFloat64));
      continue;
    }
    auto it = std::find_if(non_finite.begin(), non_finite.end(), [&](const auto& e) { return e.first == g.device(); });
    if (it == non_finite.end())
      non_finite.emplace_back(g.device(), bad);
    else
      it->second = it->second + bad;
  }
  for (const auto& [device, count] : non_finite)
    if (count.item<int64_t>() > 0) found_inf_ = true;
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!o_.enabled) {
    opt.step();
    return true;
  }
  if (std::find(unscaled_.begin(), unscaled_.end(), &opt) == unscaled_.end()) unscale_(opt);
  if (o_.capturable) {
    TESSERA_CHECK(opt.capturable(), "GradScaler::step: a capturable scaler steps a capturable optimizer (it always "
                                    "runs the step, then puts back what a skipped step wrote); construct the optimizer "
                                    "with capturable = true");
    // Note [Gradient scaler]: step, then keep the old values wherever a gradient was not finite.
    std::vector<Tensor> written = opt.params();
    for (const Tensor& t : opt.state_tensors()) written.push_back(t);
    std::vector<Tensor> before;
    {
      autograd::NoGradGuard no_grad;
      for (const Tensor& t : written) before.push_back(t.clone());
    }
    opt.step();
    autograd::NoGradGuard no_grad;
    const Tensor skip = gt(found_t_, scalar_tensor(0.0, kFloat64));
    for (size_t i = 0; i < written.size(); ++i)
      written[i].copy_(where(skip.to(written[i].device()), before[i], written[i]));
    return true;
  }
  if (found_inf_) return false;
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!o_.enabled) return;
  if (o_.capturable) {
    autograd::NoGradGuard no_grad;
    const Tensor zero = scalar_tensor(0.0, kFloat64);
    const Tensor found = gt(found_t_, zero);
    const Tensor tracker = tracker_t_ + 1.0;
    const Tensor grown = scale_t_ * o_.growth_factor;
    const Tensor grow = ge(tracker, scalar_tensor(double(o_.growth_interval), kFloat64));
    // PyTorch keeps the scale finite: a growth that overflows leaves it.
    const Tensor next = where(found, scale_t_ * o_.backoff_factor,
                              where(logical_and(grow, logical_not(isinf(grown))), grown, scale_t_));
    scale_t_.copy_(next);
    tracker_t_.copy_(where(logical_or(found, grow), zero, tracker));
    found_t_.fill_(0.0);
    unscaled_.clear();
    return;
  }
  if (found_inf_) {
    scale_ *= o_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == o_.growth_interval) {
    const double grown = scale_ * o_.growth_factor;
    if (std::isfinite(grown)) scale_ = grown;  // PyTorch keeps the scale finite too
    growth_tracker_ = 0;
  }
  found_inf_ = false;
  unscaled_.clear();
}

}  // namespace tessera::nn
