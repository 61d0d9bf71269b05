// Observers: the parameters of a quantization class from the values it saw (PyTorch's MinMaxObserver,
// MovingAverageMinMaxObserver, PerChannelMinMaxObserver and HistogramObserver).
#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/compiler/quantize.h"
#include "tessera/error.h"
#include "tessera/quantization.h"
#include "tessera/quant_params.h"
#include "quant/lowering.h"

namespace tessera::quantization {

namespace {

constexpr int kHistogramBins = 2048;
constexpr double kAveragingConstant = 0.01;

bool symmetric(Scheme s) { return s == Scheme::PerTensorSymmetric || s == Scheme::PerChannelSymmetric; }

QParams qparams(double lo, double hi, const QuantizationSpec& spec) {
  if (!symmetric(spec.scheme)) return choose_qparams(lo, hi, spec.dtype);
  // PyTorch's symmetric choice: the larger magnitude over half the integer range, zero point in the
  // middle of an unsigned range.
  const double qmin = double(quant_min(spec.dtype)), qmax = double(quant_max(spec.dtype));
  const float amax = std::max(-float(std::min(lo, 0.0)), float(std::max(hi, 0.0)));
  const float scale = std::max(amax / float((qmax - qmin) / 2), std::numeric_limits<float>::epsilon());
  return {double(scale), spec.dtype == kQUInt8 ? int64_t(128) : int64_t(0)};
}

// HistogramObserver's error of quantising bins [start, end] of `hist` (bins of `bin_width`) to 256
// levels: the squared distance of each source bin's values to the centre of the level it falls in,
// values spread evenly within a bin.
double quantization_error(const std::vector<double>& hist, double bin_width, int start, int end) {
  const double dst_bins = 256;
  const double dst_width = bin_width * double(end - start + 1) / dst_bins;
  if (dst_width == 0) return 0;
  auto norm = [](double begin, double finish, double density) {
    return density * (finish * finish * finish - begin * begin * begin) / 3;
  };
  double total = 0;
  for (int b = 0; b < int(hist.size()); ++b) {
    if (hist[size_t(b)] == 0) continue;
    const double density = hist[size_t(b)] / bin_width;
    const double src_begin = double(b - start) * bin_width, src_end = src_begin + bin_width;
    const double dst_of_begin = std::clamp(std::floor(src_begin / dst_width), 0.0, dst_bins - 1);
    const double dst_of_end = std::clamp(std::floor(src_end / dst_width), 0.0, dst_bins - 1);
    const double begin_center = (dst_of_begin + 0.5) * dst_width;
    double e = norm(src_begin - begin_center, dst_width / 2, density);
    e += (dst_of_end - dst_of_begin - 1) * norm(-dst_width / 2, dst_width / 2, density);
    const double end_center = dst_of_end * dst_width + dst_width / 2;
    e += norm(-dst_width / 2, src_end - end_center, density);
    total += e;
  }
  return total;
}

// HistogramObserver's search: drop the sparser tail bin by bin while the quantisation error falls.
std::pair<double, double> histogram_range(const std::vector<double>& hist, double lo, double hi) {
  const int bins = int(hist.size());
  const double bin_width = (hi - lo) / bins;
  std::vector<double> csum(hist.size());
  double total = 0;
  for (size_t i = 0; i < hist.size(); ++i) csum[i] = total += hist[i];
  const double step = 1e-5;
  double alpha = 0, beta = 1, best = std::numeric_limits<double>::infinity();
  int start = 0, end = bins - 1;
  while (alpha < beta) {
    const double next_alpha = alpha + step, next_beta = beta - step;
    int l = start, r = end;
    while (l < end && csum[size_t(l)] < next_alpha * total) ++l;
    while (r > start && csum[size_t(r)] > next_beta * total) --r;
    int next_start = start, next_end = end;
    if (l - start > end - r) {
      next_start = l;
      alpha = next_alpha;
    } else {
      next_end = r;
      beta = next_beta;
    }
    if (next_start == start && next_end == end) continue;
    const double e = quantization_error(hist, bin_width, next_start, next_end);
    if (e > best) break;
    best = e;
    start = next_start;
    end = next_end;
  }
  return {lo + bin_width * start, lo + bin_width * (end + 1)};
}

}  // namespace

const char* scheme_name(Scheme s) {
  switch (s) {
    case Scheme::PerTensorAffine: return "per_tensor_affine";
    case Scheme::PerTensorSymmetric: return "per_tensor_symmetric";
    case Scheme::PerChannelAffine: return "per_channel_affine";
    case Scheme::PerChannelSymmetric: return "per_channel_symmetric";
  }
  return "?";
}

const char* observer_name(ObserverKind k) {
  switch (k) {
    case ObserverKind::MinMax: return "min_max";
    case ObserverKind::MovingAverageMinMax: return "moving_average_min_max";
    case ObserverKind::PerChannelMinMax: return "per_channel_min_max";
    case ObserverKind::Histogram: return "histogram";
  }
  return "?";
}

std::string QuantizationSpec::str() const {
  std::string s = std::string(compiler::dtype_short_name(dtype)) + " " + scheme_name(scheme) + " " + observer_name(observer);
  if (is_per_channel(scheme)) s += " axis " + std::to_string(ch_axis);
  return s;
}

Observer::Observer(QuantizationSpec spec) : spec_(spec) {
  TESSERA_CHECK(spec.dtype == kQInt8 || spec.dtype == kQUInt8, "quantization spec ", spec.str(),
                ": the dtype must be qint8 or quint8");
  TESSERA_CHECK(is_per_channel(spec.scheme) == (spec.observer == ObserverKind::PerChannelMinMax), "quantization spec ",
                spec.str(), ": per-channel schemes take the per_channel_min_max observer, per-tensor schemes the others");
}

void Observer::observe(const Tensor& x) {
  TESSERA_CHECK(x.defined() && is_floating(x.dtype()), "observer (", spec_.str(), "): expected a floating tensor, got ",
                x.defined() ? std::string(dtype_name(x.dtype())) : std::string("an undefined tensor"));
  if (x.numel() == 0) return;
  Tensor h = x.cpu().to(kFloat32).contiguous();
  const float* p = h.const_data_ptr<float>();
  const int64_t n = h.numel();
  if (spec_.observer == ObserverKind::PerChannelMinMax) {
    TESSERA_CHECK(spec_.ch_axis >= 0 && spec_.ch_axis < h.dim(), "observer (", spec_.str(), "): axis ", spec_.ch_axis,
                  " is outside the dims of a tensor of sizes ", h.sizes());
    const int64_t channels = h.size(spec_.ch_axis);
    int64_t inner = 1;
    for (int64_t d = spec_.ch_axis + 1; d < h.dim(); ++d) inner *= h.size(d);
    if (!observed_) {
      min_.assign(size_t(channels), std::numeric_limits<double>::infinity());
      max_.assign(size_t(channels), -std::numeric_limits<double>::infinity());
    }
    TESSERA_CHECK(int64_t(min_.size()) == channels, "observer (", spec_.str(), "): saw ", min_.size(),
                  " channels before, now ", channels);
    for (int64_t i = 0; i < n; ++i) {
      const double v = p[i];
      TESSERA_CHECK(std::isfinite(v), "observer (", spec_.str(), "): the values hold ", v, "; quantisation needs finite values");
      const size_t c = size_t((i / inner) % channels);
      min_[c] = std::min(min_[c], v);
      max_[c] = std::max(max_[c], v);
    }
    observed_ = true;
    return;
  }
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, double(p[i]));
    hi = std::max(hi, double(p[i]));
  }
  TESSERA_CHECK(std::isfinite(lo) && std::isfinite(hi), "observer (", spec_.str(), "): the values span [", lo, ", ", hi,
                "]; quantisation needs finite values");
  if (!observed_) {
    min_ = {lo};
    max_ = {hi};
  } else if (spec_.observer == ObserverKind::MovingAverageMinMax) {
    min_[0] += kAveragingConstant * (lo - min_[0]);
    max_[0] += kAveragingConstant * (hi - max_[0]);
  } else if (spec_.observer == ObserverKind::Histogram && (lo < min_[0] || hi > max_[0])) {
    // Spread the old counts over the wider range (each old bin into the new bin of its centre).
    const double new_lo = std::min(lo, min_[0]), new_hi = std::max(hi, max_[0]);
    std::vector<double> wider(kHistogramBins, 0.0);
    const double old_width = (max_[0] - min_[0]) / kHistogramBins, new_width = (new_hi - new_lo) / kHistogramBins;
    for (int b = 0; b < kHistogramBins; ++b) {
      const double center = min_[0] + (b + 0.5) * old_width;
      wider[size_t(std::clamp(int((center - new_lo) / new_width), 0, kHistogramBins - 1))] += histogram_[size_t(b)];
    }
    histogram_ = std::move(wider);
    min_[0] = new_lo;
    max_[0] = new_hi;
  } else {
    min_[0] = std::min(min_[0], lo);
    max_[0] = std::max(max_[0], hi);
  }
  if (spec_.observer == ObserverKind::Histogram) {
    if (histogram_.empty()) histogram_.assign(kHistogramBins, 0.0);
    const double width = (max_[0] - min_[0]) / kHistogramBins;
    for (int64_t i = 0; i < n; ++i) {
      const int b = width > 0 ? int((double(p[i]) - min_[0]) / width) : 0;
      histogram_[size_t(std::clamp(b, 0, kHistogramBins - 1))] += 1;
    }
  }
  observed_ = true;
}

std::vector<std::pair<double, double>> Observer::ranges() const {
  TESSERA_CHECK(observed_, "observer (", spec_.str(), ") has seen no values; run calibrate() on sample inputs first");
  std::vector<std::pair<double, double>> r;
  if (spec_.observer == ObserverKind::Histogram && max_[0] > min_[0]) {
    r.push_back(histogram_range(histogram_, min_[0], max_[0]));
    return r;
  }
  for (size_t c = 0; c < min_.size(); ++c) r.emplace_back(min_[c], max_[c]);
  return r;
}

std::vector<double> Observer::scales() const {
  std::vector<double> s;
  for (auto [lo, hi] : ranges()) s.push_back(qparams(lo, hi, spec_).scale);
  return s;
}

std::vector<int64_t> Observer::zero_points() const {
  std::vector<int64_t> z;
  for (auto [lo, hi] : ranges()) z.push_back(qparams(lo, hi, spec_).zero_point);
  return z;
}

}  // namespace tessera::quantization
