// Custom autograd functions (function.h): the context and the node that calls Derived::backward.
#include "tessera/autograd/function.h"

#include <algorithm>
#include <cxxabi.h>

#include "autograd_internal.h"

namespace tessera::autograd {

void AutogradContext::save_for_backward(std::vector<Tensor> tensors) {
  saved_.clear();
  for (const Tensor& t : tensors) saved_.emplace_back(t, false);
}

std::vector<Tensor> AutogradContext::get_saved_variables() const {
  std::vector<Tensor> r;
  for (const SavedTensor& s : saved_) r.push_back(s.unpack(name_));
  return r;
}

void AutogradContext::mark_non_differentiable(const std::vector<Tensor>& outputs) {
  for (const Tensor& t : outputs)
    if (t.defined()) non_differentiable_.push_back(t.impl());
}

void AutogradContext::mark_dirty(const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs)
    if (t.defined()) dirty_.push_back(t.impl());
}

bool AutogradContext::needs_input_grad(size_t i) const { return i < needs_input_grad_.size() && needs_input_grad_[i]; }

namespace {

std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string r = status == 0 && d ? d : name;
  std::free(d);
  const size_t colon = r.rfind("::");
  return colon == std::string::npos ? r : r.substr(colon + 2);
}

struct OutputMeta {
  std::vector<int64_t> sizes;
  DType dtype;
  Device device;
};

class FunctionNode final : public Node {
 public:
  FunctionNode(std::vector<Edge> edges, std::shared_ptr<AutogradContext> ctx, detail::BackwardFn fn,
               std::vector<OutputMeta> outs, std::vector<std::vector<int64_t>> input_sizes, std::vector<DType> input_dtypes)
      : Node(uint32_t(outs.size()), std::move(edges)), ctx_(std::move(ctx)), fn_(fn), outs_(std::move(outs)),
        input_sizes_(std::move(input_sizes)), input_dtypes_(std::move(input_dtypes)) {}
  std::string name() const override { return ctx_->name_; }
  void release_saved() override {
    for (auto& s : ctx_->saved_) s.reset();
  }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    for (size_t i = 0; i < grads.size(); ++i)
      if (!grads[i].defined()) grads[i] = zeros(outs_[i].sizes, TensorOptions(outs_[i].device).dtype(outs_[i].dtype));
    std::vector<Tensor> r = fn_(ctx_.get(), std::move(grads));
    TESSERA_CHECK(r.size() == next_edges_.size(), "function ", name(),
                  " returned an incorrect number of gradients (expected ", next_edges_.size(), ", got ", r.size(),
                  "): backward returns one per forward argument, an undefined Tensor for non-tensors");
    for (size_t i = 0; i < r.size(); ++i) {
      if (!next_edges_[i].valid() || !r[i].defined()) {
        r[i] = Tensor();
        continue;
      }
      if (r[i].sizes() != IntArrayRef(input_sizes_[i])) {
        TESSERA_CHECK(r[i].dim() >= int64_t(input_sizes_[i].size()), "function ", name(),
                      " returned a gradient of sizes ", r[i].sizes(), " for input ", i, " of sizes ",
                      IntArrayRef(input_sizes_[i]));
        r[i] = sum_to(r[i], input_sizes_[i]);
      }
      if (r[i].dtype() != input_dtypes_[i]) r[i] = r[i].to(input_dtypes_[i]);
    }
    return r;
  }

 private:
  std::shared_ptr<AutogradContext> ctx_;
  detail::BackwardFn fn_;
  std::vector<OutputMeta> outs_;
  std::vector<std::vector<int64_t>> input_sizes_;
  std::vector<DType> input_dtypes_;
};

}  // namespace

namespace detail {

std::shared_ptr<AutogradContext> function_prepare(const FunctionCall& call, const char* name) {
  auto ctx = std::make_shared<AutogradContext>();
  ctx->name_ = demangle(name) + "Backward";
  const bool enabled = is_grad_enabled();
  for (const Tensor& t : call.tensor_args) ctx->needs_input_grad_.push_back(enabled && t.defined() && requires_grad(t));
  return ctx;
}

// Note [Dirty inputs]
// A custom forward that writes an input in place (x.mul_(2)) says so with ctx->mark_dirty({x}) and
// returns x. As PyTorch does: x must be one of the inputs and one of the outputs; a leaf that
// requires grad cannot be written (its .grad would describe a value it no longer has), nor can a
// view of a tensor in a graph (PyTorch's CopySlices: not done). The output is x itself, not an
// alias: x's history is rebased onto this function's node, whose edge for x points to x's history
// before the call, so gradients flow through the in-place write, and the write's version bump makes
// every earlier node that saved x refuse to backward. An input returned unmarked becomes an alias
// instead, and keeps its own history.
void check_dirty(const FunctionCall& call, const AutogradContext& ctx, const std::vector<Tensor>& outputs) {
  for (const TensorImpl* d : ctx.dirty_) {
    const auto same = [d](const Tensor& t) { return t.defined() && t.impl() == d; };
    TESSERA_CHECK(std::any_of(call.tensor_args.begin(), call.tensor_args.end(), same), "function ", ctx.name_,
                  ": mark_dirty was given a tensor that is not an input of forward; mark the inputs forward writes "
                  "in place");
    TESSERA_CHECK(std::any_of(outputs.begin(), outputs.end(), same), "function ", ctx.name_,
                  ": some elements marked as dirty during the forward method were not returned as output; return "
                  "every input forward modified in place");
    if (!is_grad_enabled()) continue;
    const Tensor& x = *std::find_if(call.tensor_args.begin(), call.tensor_args.end(), same);
    TESSERA_CHECK(!(requires_grad(x) && is_leaf(x)), "function ", ctx.name_,
                  ": a leaf Variable that requires grad is being used in an in-place operation (mark_dirty); clone() "
                  "it first, or run the function under NoGradGuard");
    TESSERA_CHECK(!is_recorded_view(x), "function ", ctx.name_,
                  ": writing a view of a tensor that requires grad in place (mark_dirty) is not supported; clone() "
                  "the view first, or return a new tensor");
  }
}

bool is_dirty(const AutogradContext& ctx, const Tensor& t) {
  return std::find(ctx.dirty_.begin(), ctx.dirty_.end(), t.impl()) != ctx.dirty_.end();
}

std::vector<Tensor> function_finish(const FunctionCall& call, std::shared_ptr<AutogradContext> ctx,
                                    std::vector<Tensor> outputs, BackwardFn backward) {
  check_dirty(call, *ctx, outputs);
  const bool any = std::any_of(ctx->needs_input_grad_.begin(), ctx->needs_input_grad_.end(), [](bool b) { return b; });
  if (!any) return outputs;
  std::vector<Edge> edges;
  std::vector<std::vector<int64_t>> sizes;
  std::vector<DType> dtypes;
  for (size_t i = 0; i < call.tensor_args.size(); ++i) {
    const Tensor& t = call.tensor_args[i];
    edges.push_back(ctx->needs_input_grad_[i] ? gradient_edge(t) : Edge());
    sizes.push_back(t.defined() ? std::vector<int64_t>(t.sizes().begin(), t.sizes().end()) : std::vector<int64_t>());
    dtypes.push_back(t.defined() ? t.dtype() : kFloat32);
  }
  std::vector<OutputMeta> metas;
  for (Tensor& o : outputs) {
    TESSERA_CHECK(o.defined(), "function ", ctx->name_, ": forward returned an undefined tensor");
    // An output that is an input as is becomes an alias, so that the input keeps its own history,
    // unless forward wrote it in place (Note [Dirty inputs]).
    for (const Tensor& t : call.tensor_args)
      if (t.defined() && t.is_same(o) && !is_dirty(*ctx, o)) o = autograd::detach(o);
    metas.push_back({std::vector<int64_t>(o.sizes().begin(), o.sizes().end()), o.dtype(), o.device()});
  }
  auto node = std::make_shared<FunctionNode>(std::move(edges), ctx, backward, std::move(metas), std::move(sizes),
                                             std::move(dtypes));
  for (size_t o = 0; o < outputs.size(); ++o) {
    const bool nondiff = std::find(ctx->non_differentiable_.begin(), ctx->non_differentiable_.end(),
                                   outputs[o].impl()) != ctx->non_differentiable_.end();
    if (!nondiff && is_floating(outputs[o].dtype())) set_history(outputs[o], node, uint32_t(o));
  }
  return outputs;
}

}  // namespace detail
}  // namespace tessera::autograd
