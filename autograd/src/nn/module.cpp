// Modules, their state dict in safetensors, losses and gradient clipping (nn.h).
#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <unordered_set>

#include "tessera/compiler/safetensors.h"
#include "tessera/dispatch_key.h"
#include "tessera/nn.h"

namespace tessera::nn {

Tensor parameter(const Tensor& data) {
  TESSERA_CHECK(data.defined(), "parameter(): the tensor is undefined");
  Tensor p = autograd::detach(data);
  if (!p.is_contiguous() || p.storage_offset() != 0 || p.is(std::string_view("meta"))) p = p.clone();
  autograd::set_requires_grad(p);
  return p;
}

Module::~Module() = default;

Tensor& Module::register_parameter(std::string name, Tensor& slot, const Tensor& value) {
  slot = value.defined() ? parameter(value) : Tensor();
  params_.emplace_back(std::move(name), &slot);
  return slot;
}

Tensor& Module::register_buffer(std::string name, Tensor& slot, const Tensor& value) {
  slot = value;
  buffers_.emplace_back(std::move(name), &slot);
  return slot;
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out,
                     bool buffers) const {
  for (const auto& [name, slot] : buffers ? buffers_ : params_)
    if (slot->defined()) out.emplace_back(prefix + name, slot);
  for (const auto& [name, m] : modules_) m->collect(prefix + name + ".", out, buffers);
}

// A parameter shared by two modules (tied weights) is listed once, under its first name, as
// PyTorch's named_parameters (remove_duplicate); state_dict keeps every name.
std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect("", slots, false);
  std::vector<std::pair<std::string, Tensor>> r;
  std::unordered_set<const TensorImpl*> seen;
  for (auto& [n, s] : slots)
    if (seen.insert(s->impl()).second) r.emplace_back(n, *s);
  return r;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect("", slots, true);
  std::vector<std::pair<std::string, Tensor>> r;
  for (auto& [n, s] : slots) r.emplace_back(n, *s);
  return r;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, m] : modules_) m->train(on);
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> r;
  for (auto& [n, t] : named_parameters()) r.push_back(t);
  return r;
}

void Module::to(Device device) {
  std::vector<std::pair<std::string, Tensor*>> slots, buffers;
  collect("", slots, false);
  collect("", buffers, true);
  autograd::NoGradGuard no_grad;
  for (auto& [n, s] : slots) *s = parameter(s->to(device));
  for (auto& [n, s] : buffers) *s = s->to(device);
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) autograd::set_grad(p, Tensor());
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> r;
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect("", slots, false);
  for (auto& [n, s] : slots) r[n] = autograd::detach(*s);
  for (auto& [n, t] : named_buffers()) r[n] = t;
  return r;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state) {
  std::vector<std::pair<std::string, Tensor*>> slots;
  collect("", slots, false);
  const size_t params = slots.size();
  collect("", slots, true);
  TESSERA_CHECK(state.size() == slots.size(), "load_state_dict(): the state has ", state.size(),
                " tensors, the module ", params, " parameters and ", slots.size() - params, " buffers");
  autograd::NoGradGuard no_grad;
  for (auto& [n, s] : slots) {
    auto it = state.find(n);
    TESSERA_CHECK(it != state.end(), "load_state_dict(): missing parameter or buffer '", n, "'");
    TESSERA_CHECK(it->second.sizes() == s->sizes(), "load_state_dict(): '", n, "' has sizes ", it->second.sizes(),
                  " in the state and ", s->sizes(), " in the module");
    s->copy_(it->second.to(s->device(), s->dtype()));
  }
}

void Module::save(const std::string& path) const {
  std::map<std::string, Tensor> cpu;
  for (auto& [n, t] : state_dict()) cpu[n] = t.cpu().contiguous();
  const std::vector<uint8_t> bytes = compiler::safetensors_serialize(cpu, {{"format", "tessera.nn"}});
  std::ofstream f(path, std::ios::binary);
  TESSERA_CHECK(f.good(), "Module::save(): cannot open '", path, "' for writing");
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  TESSERA_CHECK(f.good(), "Module::save(): writing '", path, "' failed");
}

void Module::load(const std::string& path) {
  std::shared_ptr<const compiler::Bytes> bytes = compiler::Bytes::map_file(path);
  compiler::SafetensorsFile file =
      compiler::safetensors_parse(std::span<const uint8_t>(bytes->data(), bytes->size()), bytes, path);
  load_state_dict(file.tensors);
}

namespace {
Tensor uniform_init(std::vector<int64_t> sizes, double bound, const Options& o) {
  autograd::NoGradGuard no_grad;
  return rand(sizes, TensorOptions(o.device).dtype(o.dtype)) * (2 * bound) - bound;
}
}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Options options) {
  TESSERA_CHECK(in_features > 0 && out_features > 0, "Linear(): in_features (", in_features, ") and out_features (",
                out_features, ") must be positive");
  const double bound = 1.0 / std::sqrt(double(in_features));
  register_parameter("weight", weight, uniform_init({out_features, in_features}, bound, options));
  register_parameter("bias", bias, with_bias ? uniform_init({out_features}, bound, options) : Tensor());
}

Tensor Linear::forward(const Tensor& x) const {
  return linear(x, weight, bias.defined() ? std::optional<Tensor>(bias) : std::nullopt);
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride_, int64_t padding_,
               bool with_bias, Options options)
    : stride(stride_), padding(padding_) {
  TESSERA_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0 && stride_ > 0 && padding_ >= 0,
                "Conv2d(): in_channels (", in_channels, "), out_channels (", out_channels, "), kernel_size (",
                kernel_size, ") and stride (", stride_, ") must be positive and padding (", padding_,
                ") non-negative");
  const double bound = 1.0 / std::sqrt(double(in_channels * kernel_size * kernel_size));
  register_parameter("weight", weight, uniform_init({out_channels, in_channels, kernel_size, kernel_size}, bound, options));
  register_parameter("bias", bias, with_bias ? uniform_init({out_channels}, bound, options) : Tensor());
}

Tensor Conv2d::forward(const Tensor& x) const {
  return conv2d(x, weight, bias.defined() ? std::optional<Tensor>(bias) : std::nullopt, {stride, stride},
                {padding, padding});
}

LayerNorm::LayerNorm(std::vector<int64_t> shape, double eps_, bool elementwise_affine, Options options)
    : normalized_shape(std::move(shape)), eps(eps_) {
  if (elementwise_affine) {
    autograd::NoGradGuard no_grad;
    TensorOptions to = TensorOptions(options.device).dtype(options.dtype);
    register_parameter("weight", weight, ones(normalized_shape, to));
    register_parameter("bias", bias, zeros(normalized_shape, to));
  }
}

Tensor LayerNorm::forward(const Tensor& x) const {
  auto opt = [](const Tensor& t) { return t.defined() ? std::optional<Tensor>(t) : std::nullopt; };
  return layer_norm(x, normalized_shape, opt(weight), opt(bias), eps);
}

BatchNorm2d::BatchNorm2d(int64_t features, double eps_, double momentum_, bool affine, Options options)
    : num_features(features), eps(eps_), momentum(momentum_) {
  TESSERA_CHECK(features > 0, "BatchNorm2d: num_features must be positive, got ", features);
  TESSERA_CHECK(eps > 0 && momentum >= 0 && momentum <= 1, "BatchNorm2d: need eps > 0 and momentum in [0, 1], got eps ",
                eps, " and momentum ", momentum);
  autograd::NoGradGuard no_grad;
  const TensorOptions to = TensorOptions(options.device).dtype(options.dtype);
  if (affine) {
    register_parameter("weight", weight, ones({features}, to));
    register_parameter("bias", bias, zeros({features}, to));
  }
  register_buffer("running_mean", running_mean, zeros({features}, to));
  register_buffer("running_var", running_var, ones({features}, to));
  register_buffer("num_batches_tracked", num_batches_tracked, zeros({}, TensorOptions(options.device).dtype(kInt64)));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  TESSERA_CHECK(x.dim() == 4 && x.size(1) == num_features, "BatchNorm2d(", num_features,
                "): expected input [N, ", num_features, ", H, W], got ", x.sizes());
  auto opt = [](const Tensor& t) { return t.defined() ? std::optional<Tensor>(t) : std::nullopt; };
  if (!is_training())
    return batch_norm(x, opt(weight), opt(bias), running_mean, running_var, false, momentum, eps, false);
  TESSERA_CHECK(x.numel() / num_features > 1, "BatchNorm2d: expected more than 1 value per channel when training, got "
                "input ", x.sizes());
  const std::vector<int64_t> dims{0, 2, 3}, per_channel{1, num_features, 1, 1};
  const Tensor mu = mean(x, dims, true);
  const Tensor centred = x - mu;
  Tensor y = centred * rsqrt(mean(centred * centred, dims, true) + eps);
  if (weight.defined()) y = y * weight.reshape(per_channel) + bias.reshape(per_channel);
  autograd::NoGradGuard no_grad;
  // The unbiased variance through var(), whose count the op takes from x (also under a capture
  // with a dynamic batch).
  const Tensor unbiased = var(x, dims, 1, false);
  running_mean.mul_(scalar_tensor(1 - momentum, kFloat64));
  running_mean.add_(mu.reshape({num_features}).to(running_mean.dtype()), momentum);
  running_var.mul_(scalar_tensor(1 - momentum, kFloat64));
  running_var.add_(unbiased.to(running_var.dtype()), momentum);
  num_batches_tracked.add_(scalar_tensor(int64_t(1), kInt64));
  return y;
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Options options) {
  autograd::NoGradGuard no_grad;
  register_parameter("weight", weight,
                     randn({num_embeddings, embedding_dim}, TensorOptions(options.device).dtype(options.dtype)));
}

Tensor Embedding::forward(const Tensor& indices) const { return embedding(weight, indices); }

Dataset make_classification(int64_t n, int64_t features, int64_t classes, uint32_t seed) {
  TESSERA_CHECK(n > 0 && features > 0 && classes > 1, "make_classification(): need n > 0, features > 0 and "
                "classes > 1, got ", n, ", ", features, ", ", classes);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, 1);
  const std::optional<int64_t> nx = checked_mul(n, features), nw = checked_mul(features, classes);
  TESSERA_CHECK(nx && nw, "make_classification(): ", n, " x ", features, " x ", classes, " overflows");
  std::vector<float> w(static_cast<size_t>(*nw)), x(static_cast<size_t>(*nx));
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (float& v : w) v = normal(rng);
  for (int64_t i = 0; i < n; ++i) {
    float best = -std::numeric_limits<float>::infinity();
    for (int64_t d = 0; d < features; ++d) x[size_t(i * features + d)] = normal(rng);
    for (int64_t c = 0; c < classes; ++c) {
      float s = 0;
      for (int64_t d = 0; d < features; ++d) s += x[size_t(i * features + d)] * w[size_t(d * classes + c)];
      if (s > best) best = s, y[size_t(i)] = c;
    }
  }
  return {tensor(x, {n, features}), tensor(y)};
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets) {
  TESSERA_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
                "cross_entropy(): expected logits [N, C] and targets [N], got ", logits.sizes(), " and ",
                targets.sizes());
  Tensor logp = log_softmax(logits, 1);
  Tensor classes = arange(logits.size(1), TensorOptions(logits.device()).dtype(targets.dtype()));
  Tensor one_hot = eq(targets.unsqueeze(1), classes.unsqueeze(0)).to(logits.dtype());
  return neg(mean(sum(logp * one_hot, {1})));
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  Tensor d = input - target;
  return mean(d * d);
}

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm) {
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> grads;
  bool one_device = true;
  for (const Tensor& p : parameters) {
    Tensor g = autograd::grad(p);
    if (!g.defined()) continue;
    one_device = one_device && (grads.empty() || g.device() == grads[0].device());
    grads.push_back(g);
  }
  if (grads.empty()) return 0;
  const bool capturing = tls_local_dispatch_key_set().included.has(Functionality::Export);
  if (!one_device) {
    TESSERA_CHECK(!capturing, "clip_grad_norm_: gradients on several devices cannot be clipped inside a compiled "
                              "function; clip outside it");
    double total = 0;
    for (const Tensor& g : grads) total += sum(g * g).to(kFloat64).cpu().item<double>();
    total = std::sqrt(total);
    const double scale = max_norm / (total + 1e-6);
    if (scale < 1)
      for (Tensor& g : grads) g.mul_(scalar_tensor(scale, kFloat64));
    return total;
  }
  // PyTorch's: the coefficient min(1, max_norm / (norm + 1e-6)) stays a tensor, so the clipping reads
  // nothing on the host and a compiled training step captures it; only the returned norm is read
  // (not under a capture, where it is not known yet: NaN).
  Tensor total = sum(grads[0] * grads[0]).to(kFloat64);
  for (size_t i = 1; i < grads.size(); ++i) total = total + sum(grads[i] * grads[i]).to(kFloat64);
  total = sqrt(total);
  const Tensor coef = clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  for (Tensor& g : grads) g.mul_(coef);
  return capturing ? std::nan("") : total.cpu().item<double>();
}

}  // namespace tessera::nn
