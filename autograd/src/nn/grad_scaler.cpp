// The gradient scaler (Note [Gradient scaler] in tessera/nn.h).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

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
}

Tensor GradScaler::scale(const Tensor& loss) const {
  TESSERA_CHECK(loss.defined(), "GradScaler::scale: the loss is an undefined tensor");
  if (!o_.enabled) return loss;
  TESSERA_CHECK(is_floating(loss.dtype()), "GradScaler::scale: the loss must be floating, got ", dtype_name(loss.dtype()));
  return loss * scale_;
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!o_.enabled) return;
  TESSERA_CHECK(std::find(unscaled_.begin(), unscaled_.end(), &opt) == unscaled_.end(),
                "GradScaler::unscale_: already called for this optimizer since the last update()");
  unscaled_.push_back(&opt);
  autograd::NoGradGuard no_grad;
  const double inv = 1.0 / scale_;
  std::vector<std::pair<Device, Tensor>> non_finite;  // per device: the count of inf/NaN gradient values
  const Tensor inv_t = scalar_tensor(inv, kFloat64);
  for (const Tensor& p : opt.params()) {
    Tensor g = autograd::grad(p);
    if (!g.defined()) continue;
    g.mul_(inv_t);  // inf and NaN stay what they are
    Tensor bad = logical_or(isnan(g), isinf(g)).to(kInt64).sum();
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
  if (found_inf_) return false;
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!o_.enabled) return;
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
