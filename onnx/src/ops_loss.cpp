// Loss ops (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss), decomposed at import onto gather,
// embedding, where and sums.
#include "convert.h"

namespace tessera::onnx::detail {

namespace {

// The loss of log-probabilities `x` [N, C, d1..dk] at class indices `target` [N, d1..dk], with the
// optional class weights [C], ignore_index and reduction of both ops. An ignored element counts
// neither in the loss nor in the mean's divisor; with weights the mean divides by the sum of the
// weights of the elements not ignored (the operator's definition).
Tensor nll_loss(NodeCtx& c, const Tensor& x, const Tensor& target, const std::optional<Tensor>& weight) {
  const std::string reduction = c.attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    c.fail("reduction '" + reduction + "' is not one of none, sum, mean");
  std::optional<int64_t> ignore;
  if (c.has_attr("ignore_index")) ignore = c.attr_int("ignore_index", 0);
  if (x.dim() < 2) c.fail("the input must be at least 2-D [N, C, ...], got " + std::to_string(x.dim()) + "-D");
  if (target.dim() != x.dim() - 1)
    c.fail("the target must have one dim fewer than the input, got " + std::to_string(target.dim()) + "-D for a " +
           std::to_string(x.dim()) + "-D input");
  if (!is_integral(target.dtype(), false)) c.fail("the target must be an integer tensor");
  if (weight && weight->dim() != 1) c.fail("the weight must be 1-D [C]");
  const Sizes ts = c.sizes(target);
  // Ignored elements gather class 0 (any valid index) and are masked out after.
  Tensor t = target;
  std::optional<Tensor> keep;
  if (ignore) {
    keep = tessera::ne(target, host_scalar(double(*ignore), target.dtype()));
    t = tessera::where(*keep, target, host_scalar(0, target.dtype()));
  }
  Sizes at = ts;  // [N, 1, d1..dk]
  at.insert(at.begin() + 1, SymSize(int64_t(1)));
  Tensor loss = tessera::neg(reshape_to(c, tessera::gather(x, 1, reshape_to(c, t, at)), ts));
  std::optional<Tensor> w;  // the weight of each element, 0 where ignored
  if (weight) {
    // A [C, 1] table looked up at every target (an N-D index: dynamic dims stay whole).
    Sizes table = c.sizes(*weight);
    table.push_back(SymSize(int64_t(1)));
    w = reshape_to(c, tessera::embedding(reshape_to(c, *weight, table), t), ts);
    if (keep) w = tessera::where(*keep, *w, host_scalar(0, w->dtype()));
  } else if (keep) {
    w = tessera::where(*keep, host_scalar(1, x.dtype()), host_scalar(0, x.dtype()));
  }
  if (w) loss = tessera::mul(loss, *w);
  if (reduction == "none") return loss;
  std::vector<int64_t> all;
  for (int64_t d = 0; d < loss.dim(); ++d) all.push_back(d);
  if (reduction == "sum") return tessera::sum(loss, all, false);
  if (!w) return tessera::mean(loss, all, false);
  return tessera::div(tessera::sum(loss, all, false), tessera::sum(*w, all, false));
}

void NegativeLogLikelihoodLoss(NodeCtx& c) { c.out(0, nll_loss(c, c.in(0), c.in(1), c.opt(2))); }

void SoftmaxCrossEntropyLoss(NodeCtx& c) {
  Tensor x = c.in(0);
  if (x.dim() < 2) c.fail("the scores must be at least 2-D [N, C, ...], got " + std::to_string(x.dim()) + "-D");
  Tensor log_prob = tessera::log_softmax(x, 1);
  c.out(0, nll_loss(c, log_prob, c.in(1), c.opt(2)));
  c.out(1, log_prob);
}

}  // namespace

void add_loss_converters(ConverterTable& t) {
  t["NegativeLogLikelihoodLoss"] = NegativeLogLikelihoodLoss;
  t["SoftmaxCrossEntropyLoss"] = SoftmaxCrossEntropyLoss;
}

}  // namespace tessera::onnx::detail
