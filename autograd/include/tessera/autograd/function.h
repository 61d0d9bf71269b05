// Custom autograd functions: libtorch's torch::autograd::Function<Derived>, eagerly.
//
//   struct MulConst : autograd::Function<MulConst> {
//     static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x, double c) {
//       ctx->saved_data["c"] = c;
//       return x * c;
//     }
//     static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads) {
//       return {grads[0] * std::any_cast<double>(ctx->saved_data["c"]), Tensor()};  // one per forward argument
//     }
//   };
//   Tensor y = MulConst::apply(x, 2.0);
//
// forward runs with grad mode off and returns a Tensor or a std::vector<Tensor>. When grad mode is
// on and a tensor argument requires grad, the outputs get a node whose backward calls
// Derived::backward with one gradient per output (zeros for outputs that got none) and takes one
// gradient per forward argument (undefined for non-tensors and for inputs that need none; a
// gradient of a broadcast shape is summed to the input's). Under tessera::compile and
// export_program the forward and backward are traced (docs/training.md). A forward that writes an
// input in place marks it with ctx->mark_dirty({x}) and returns it (Note [Dirty inputs] in
// function.cpp).
#pragma once
#include <any>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/autograd.h"

namespace tessera::autograd {

class TESSERA_AUTOGRAD_API AutogradContext {
 public:
  // Tensors backward needs; checked for in-place modification when unpacked (Note [Saved tensors]).
  void save_for_backward(std::vector<Tensor> tensors);
  std::vector<Tensor> get_saved_variables() const;
  // Outputs that get no gradient (indices, masks): they do not require grad.
  void mark_non_differentiable(const std::vector<Tensor>& outputs);
  // Inputs forward modified in place (PyTorch's mark_dirty); each must be returned as an output,
  // which then carries this function's history (Note [Dirty inputs] in function.cpp).
  void mark_dirty(const std::vector<Tensor>& inputs);
  // Whether forward argument `i` needs a gradient (false for non-tensor arguments).
  bool needs_input_grad(size_t i) const;
  // Anything else backward needs.
  std::map<std::string, std::any> saved_data;

  // Internal (function.cpp).
  std::vector<SavedTensor> saved_;
  std::vector<const TensorImpl*> non_differentiable_;
  std::vector<const TensorImpl*> dirty_;
  std::vector<bool> needs_input_grad_;
  std::string name_;
  bool released_ = false;
};

namespace detail {
// Type-erased parts of Function<Derived>::apply (function.cpp).
using BackwardFn = std::vector<Tensor> (*)(AutogradContext* ctx, std::vector<Tensor> grads);
struct FunctionCall {
  std::vector<Tensor> tensor_args;  // per forward argument; undefined for non-tensors
  std::vector<bool> is_tensor;
};
TESSERA_AUTOGRAD_API std::shared_ptr<AutogradContext> function_prepare(const FunctionCall& call, const char* name);
TESSERA_AUTOGRAD_API std::vector<Tensor> function_finish(const FunctionCall& call, std::shared_ptr<AutogradContext> ctx,
                                                         std::vector<Tensor> outputs, BackwardFn backward);
template <typename T>
void collect(FunctionCall& c, const T& arg) {
  if constexpr (std::is_same_v<std::decay_t<T>, Tensor>) {
    c.tensor_args.push_back(arg);
    c.is_tensor.push_back(true);
  } else {
    c.tensor_args.emplace_back();
    c.is_tensor.push_back(false);
  }
}
}  // namespace detail

template <class Derived>
struct Function {
  template <typename... Args>
  static auto apply(Args&&... args) {
    detail::FunctionCall call;
    (detail::collect(call, args), ...);
    std::shared_ptr<AutogradContext> ctx = detail::function_prepare(call, typeid(Derived).name());
    using Out = decltype(Derived::forward(ctx.get(), std::forward<Args>(args)...));
    std::vector<Tensor> outputs;
    {
      NoGradGuard no_grad;
      if constexpr (std::is_same_v<Out, Tensor>) outputs.push_back(Derived::forward(ctx.get(), std::forward<Args>(args)...));
      else outputs = Derived::forward(ctx.get(), std::forward<Args>(args)...);
    }
    outputs = detail::function_finish(call, std::move(ctx), std::move(outputs), &Derived::backward);
    if constexpr (std::is_same_v<Out, Tensor>) return outputs[0];
    else return outputs;
  }
};

}  // namespace tessera::autograd
