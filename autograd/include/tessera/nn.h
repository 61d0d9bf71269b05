// Modules, a state dict in safetensors, optimizers and gradient clipping (libtessera_nn), small and
// device-neutral: parameters are leaf tensors that require grad; modules call contract ops only, so
// they train on every device (docs/training.md).
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/autograd.h"

#if defined(TESSERA_BUILDING_NN)
#define TESSERA_NN_API __attribute__((visibility("default")))
#else
#define TESSERA_NN_API
#endif

namespace tessera::nn {

// A leaf tensor that requires grad (PyTorch's Parameter).
TESSERA_NN_API Tensor parameter(const Tensor& data);

// A module holds named parameters and sub-modules. Not copyable (it keeps pointers to its own
// tensor members). Thread-safety: none; train from one thread or guard it.
class TESSERA_NN_API Module {
 public:
  Module() = default;
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // "weight", "layers.0.bias", ... in registration order (sub-modules after the module's own).
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  // Buffers: state that is not trained (BatchNorm2d's running statistics), in the state dict but
  // not among the parameters, moved by to() with them.
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  // Training mode (the default) or evaluation mode, for this module and every sub-module; only
  // modules that behave differently read it (BatchNorm2d: batch or running statistics).
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves every parameter to `device` (new leaves that require grad; gradients are dropped) and
  // every buffer.
  void to(Device device);
  void zero_grad();
  // The parameters and buffers by name; load_state_dict copies values in (names and sizes must match).
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);
  // A safetensors file of the state dict (CPU copies) and back.
  void save(const std::string& path) const;
  void load(const std::string& path);

 protected:
  Tensor& register_parameter(std::string name, Tensor& slot, const Tensor& value);
  Tensor& register_buffer(std::string name, Tensor& slot, const Tensor& value);
  template <typename M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> m) {
    modules_.emplace_back(std::move(name), m);
    return m;
  }

 private:
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out, bool buffers) const;
  std::vector<std::pair<std::string, Tensor*>> params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules_;
  bool training_ = true;
};

struct Options {
  Device device{DeviceType::CPU};
  DType dtype = kFloat32;
};

// y = x W^T + b; W and b drawn from U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's default), from the global
// counter-based generator, so the same seed gives the same values on every device.
class TESSERA_NN_API Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Options options = {});
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;
};

// 2-D convolution, PyTorch's uniform init (bound 1/sqrt(in_channels * kernel area)).
class TESSERA_NN_API Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1, int64_t padding = 0,
         bool bias = true, Options options = {});
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;
  int64_t stride, padding;
};

class TESSERA_NN_API LayerNorm : public Module {
 public:
  explicit LayerNorm(std::vector<int64_t> normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     Options options = {});
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;
  std::vector<int64_t> normalized_shape;
  double eps;
};

// torch.nn.BatchNorm2d over NCHW input. In training mode (is_training()) it normalises with the
// batch's statistics over N, H and W, written with contract ops (mean, var), so autograd, every
// device and a compiled step need nothing of their own, and it updates the running statistics in
// place under NoGradGuard (running = (1 - momentum) running + momentum batch, the variance's the
// unbiased one, as PyTorch's) and counts num_batches_tracked; in evaluation mode it is the
// batch_norm op with the running statistics. The three are buffers (state dict, to()). weight 1 and
// bias 0 when affine. A training batch with one value per channel is an error, as in PyTorch.
class TESSERA_NN_API BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       Options options = {});
  Tensor forward(const Tensor& x);  // not const: training updates the running statistics
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  int64_t num_features;
  double eps, momentum;
};

// Rows of N(0, 1) values looked up by index.
class TESSERA_NN_API Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Options options = {});
  Tensor forward(const Tensor& indices) const;
  Tensor weight;
};

// A synthetic classification task: `n` points of `features` N(0, 1) values (float32) and their
// class (int64) in [0, classes), the argmax of a fixed random linear map, all from std::mt19937
// seeded with `seed` (the same data on every machine and device). For tests, samples, benchmarks.
struct Dataset {
  Tensor x, y;
};
TESSERA_NN_API Dataset make_classification(int64_t n, int64_t features, int64_t classes, uint32_t seed = 42);

// Mean cross entropy of `logits` [N, C] against integer `targets` [N] (log_softmax + a one-hot
// select written with contract ops).
TESSERA_NN_API Tensor cross_entropy(const Tensor& logits, const Tensor& targets);
TESSERA_NN_API Tensor mse_loss(const Tensor& input, const Tensor& target);

// Scales every gradient so that their joint 2-norm is at most `max_norm`; returns the norm before
// (NaN inside a compiled function, where the clipping is part of the program and the norm is not
// read on the host).
TESSERA_NN_API double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm);

namespace optim {

// Optimizers update parameters in place under NoGradGuard: by default with one fused op for the
// whole list (Note [Fused optimizer step]), else one tensor at a time. Gradients that are undefined
// are skipped. A parameter given twice is refused (it would be stepped twice). Not thread-safe.
//
// Note [Capturable optimizers]
// A step inside tessera::compile (a compiled training step, docs/training.md) is captured once and
// replayed: a number the step computes on the host (the step count of Adam's bias corrections, the
// lr a schedule changes, "is this the first step" of SGD's momentum) would be frozen at its value of
// the capture. With `capturable = true` (PyTorch's name) these live in 0-dim float64 tensors the
// program reads and updates (the bias corrections as running products beta^t), the state tensors
// are made when the optimizer is (not at its first step, which the capture would make a constant),
// and set_lr writes the lr tensor. The updates are PyTorch's; they differ from the plain step by the
// rounding of lr / (1 - beta1^t) only. Stepping a plain optimizer under a capture is an error that
// says to set capturable, as is set_lr during one (step the schedule outside the compiled step).
class TESSERA_NN_API Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer();
  virtual void step() = 0;
  void zero_grad();
  // The learning rate the next step uses (schedules set it).
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;
  const std::vector<Tensor>& params() const { return params_; }
  // Note [Capturable optimizers]: whether the step keeps its host state in tensors, and those
  // tensors with the optimizer's per-parameter state (what a step writes besides the parameters).
  virtual bool capturable() const { return false; }
  virtual std::vector<Tensor> state_tensors() const { return {}; }

 protected:
  std::vector<Tensor> params_;
};

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool capturable = false;  // Note [Capturable optimizers]
  bool fused = true;        // Note [Fused optimizer step] (with momentum)
};
class TESSERA_NN_API SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  void step() override;
  double lr() const override { return o_.lr; }
  void set_lr(double lr) override;
  bool capturable() const override { return o_.capturable; }
  std::vector<Tensor> state_tensors() const override;

 private:
  SGDOptions o_;
  std::vector<Tensor> momentum_;
  Tensor lr_t_, started_;  // capturable: the lr, and 1 after the first step (0 before)
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled_weight_decay = false;  // AdamW
  bool capturable = false;              // Note [Capturable optimizers]
  bool fused = true;                    // Note [Fused optimizer step]
};
// Note [Fused optimizer step]
// A plain (not capturable) Adam or AdamW step updates its parameters with one call of the contract
// op _multi_tensor_adam_ per (device, dtype) group, and SGD with momentum with one call of
// _multi_tensor_sgd_ (tessera/ops.h): the whole parameter list in one call, as PyTorch's
// fused=True / foreach steps. On a device whose plugin registers a kernel for it (the CPU's runs one
// parallel loop over all the parameters' elements laid end to end, reading each parameter, its
// gradient and its state once and writing the parameter and the state once) that kernel runs; on
// any other device the op's composite calls the per-parameter op _fused_adam_ / _fused_sgd_, whose
// own kernel runs where the device has one, and whose composite runs the same update in contract
// ops where it does not. So no device needs optimizer code, and a vendor overrides the update by
// registering one kernel: the list op (one launch per step) or the per-parameter op (one per
// parameter). fused = false runs the update op by op in the optimizer (the reference the fused
// kernels are tested against). Results agree to rounding: the kernels keep the composite's order of
// operations but not its intermediate roundings. A parameter whose gradient has another dtype or
// shape takes the op-by-op step. SGD without momentum is one add_ per parameter and is not fused. A
// capturable step is never fused, and a capture refuses the list ops (they write a Tensor[] in
// place and have no outputs to trace): under tessera::compile the code generator fuses the update's
// loops itself.
class TESSERA_NN_API Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options);
  void step() override;
  double lr() const override { return o_.lr; }
  void set_lr(double lr) override;
  bool capturable() const override { return o_.capturable; }
  std::vector<Tensor> state_tensors() const override;

 private:
  void capturable_step();
  AdamOptions o_;
  int64_t t_ = 0;
  std::vector<Tensor> m_, v_;
  Tensor lr_t_, beta1_pow_, beta2_pow_;  // capturable: the lr, beta1^t and beta2^t
};
// Adam with decoupled weight decay (default 1e-2, as PyTorch's AdamW).
class TESSERA_NN_API AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamOptions options);
};

// Learning-rate schedules (PyTorch's, stepped once per epoch or step by the caller): each sets the
// optimizer's lr from the lr it had when the schedule was made.
class TESSERA_NN_API LRScheduler {
 public:
  explicit LRScheduler(Optimizer& opt) : opt_(opt), base_lr_(opt.lr()) {}
  virtual ~LRScheduler();
  void step() { opt_.set_lr(lr_at(++epoch_)); }
  int64_t epoch() const { return epoch_; }

 protected:
  virtual double lr_at(int64_t epoch) const = 0;
  Optimizer& opt_;
  double base_lr_;
  int64_t epoch_ = 0;
};
// lr = base * gamma^(epoch / step_size)
class TESSERA_NN_API StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);

 protected:
  double lr_at(int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};
// lr = eta_min + (base - eta_min) * (1 + cos(pi * epoch / t_max)) / 2
class TESSERA_NN_API CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min = 0);

 protected:
  double lr_at(int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// lr = base * gamma^epoch
class TESSERA_NN_API ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& opt, double gamma);

 protected:
  double lr_at(int64_t epoch) const override;

 private:
  double gamma_;
};
// lr = base * gamma^(the number of milestones <= epoch); milestones strictly increasing
class TESSERA_NN_API MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma = 0.1);

 protected:
  double lr_at(int64_t epoch) const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};
// Linear warm-up (or decay): lr = base * (start + (end - start) * min(epoch, total_iters) /
// total_iters). As in PyTorch, the optimizer's lr is base * start_factor from construction on.
class TESSERA_NN_API LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& opt, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);

 protected:
  double lr_at(int64_t epoch) const override;

 private:
  double start_, end_;
  int64_t total_;
};

// PyTorch's one-cycle policy (cycle_momentum off): the lr rises from max_lr / div_factor to max_lr
// over the first pct_start of total_steps, then falls to max_lr / (div_factor * final_div_factor),
// each phase a cosine (anneal_cos, default) or a straight line. Stepped once per batch; the lr of
// step 0 is set at construction; more than total_steps steps is an error, as in PyTorch.
class TESSERA_NN_API OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start = 0.3, bool anneal_cos = true,
             double div_factor = 25.0, double final_div_factor = 1e4);

 protected:
  double lr_at(int64_t step) const override;

 private:
  double max_lr_, initial_lr_, min_lr_, warm_end_;
  int64_t total_;
  bool cos_;
};

// PyTorch's ReduceLROnPlateau: step(metric) once per epoch; when the metric has not improved (by
// threshold, relative or absolute; lower is better in mode "min", higher in "max") for more than
// `patience` epochs, the lr becomes max(lr * factor, min_lr) (unless that changes it by eps or
// less), then `cooldown` epochs pass before bad epochs count again.
struct ReduceLROnPlateauOptions {
  std::string mode = "min";  // or "max"
  double factor = 0.1;
  int64_t patience = 10;
  double threshold = 1e-4;
  std::string threshold_mode = "rel";  // or "abs"
  int64_t cooldown = 0;
  double min_lr = 0;
  double eps = 1e-8;
};
class TESSERA_NN_API ReduceLROnPlateau {
 public:
  explicit ReduceLROnPlateau(Optimizer& opt, ReduceLROnPlateauOptions options = {});
  void step(double metric);
  int64_t epoch() const { return epoch_; }
  int64_t num_bad_epochs() const { return bad_; }
  double best() const { return best_; }

 private:
  bool better(double a) const;
  Optimizer& opt_;
  ReduceLROnPlateauOptions o_;
  double best_;
  int64_t epoch_ = 0, bad_ = 0, cooldown_left_ = 0;
};

}  // namespace optim

// Note [Gradient scaler]
// torch.amp.GradScaler on any device: float16 gradients underflow, so the loss is multiplied by a
// scale before backward (scale), the gradients are divided by it before the optimizer reads them
// (unscale_, once per step), and a step whose gradients hold an inf or NaN is skipped (step); the
// scale shrinks by backoff_factor after such a step and grows by growth_factor after
// growth_interval steps without one (update). Nothing asks for a device name: the check is made
// of contract ops (isnan, isinf, sum) on the gradients' own devices, one read-back per device per
// step. Not thread-safe (one scaler per training loop).
// With `capturable = true` (for a compiled training step, Note [Capturable optimizers]) nothing is
// read back: the scale, the growth tracker and the count of non-finite gradient values are 0-dim
// float64 tensors the step reads and updates, step() needs a capturable optimizer and always runs
// it, then puts back the parameters and the optimizer's state tensors it had before wherever the
// count is not 0 (a where() per tensor, so a skipped step leaves them as they were, as PyTorch's
// skipped step does; the price is one copy of them per step), and update() computes the next scale
// with where() as well. get_scale(), found_inf() and growth_tracker() read the tensors back.
struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;  // false: scale() returns the loss, step() steps, update() does nothing
  bool capturable = false;
};
class TESSERA_NN_API GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  // loss * scale (the loss itself when disabled).
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of `opt`'s parameters by the scale in place and records whether any is
  // not finite. Once per optimizer per step: a second call before update() throws.
  void unscale_(optim::Optimizer& opt);
  // unscale_ (unless done), then opt.step() unless a gradient was not finite; returns whether it
  // stepped.
  bool step(optim::Optimizer& opt);
  // Adjusts the scale for the next step (Note [Gradient scaler]) and forgets this step's state.
  void update();
  double get_scale() const;
  bool found_inf() const;
  int64_t growth_tracker() const;
  bool is_enabled() const { return o_.enabled; }

 private:
  GradScalerOptions o_;
  double scale_;
  int64_t growth_tracker_ = 0;
  bool found_inf_ = false;
  Tensor scale_t_, tracker_t_, found_t_;  // capturable: the scale, growth tracker and non-finite count
  std::vector<const optim::Optimizer*> unscaled_;
};

}  // namespace tessera::nn
