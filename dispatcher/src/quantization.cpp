// tessera/quantization.h: quantized linear layers over the ops _quantized_linear_prepack and
// _quantized_linear of the op contract.
#include "tessera/quantization.h"

#include "op_registry.h"
#include "tessera/dispatcher.h"
#include "tessera/ops.h"

namespace tessera::quantization {
namespace {

OperatorEntry& op_named(const char* name) { return Dispatcher::instance().op(name); }

Tensor call1(OperatorEntry& op, std::initializer_list<const TensorImpl*> ts, std::initializer_list<tessera_value_t> as) {
  CallFrame f{ts.begin(), int(ts.size()), as.begin(), int(as.size()), nullptr};
  return call_unboxed_one(op, f);
}

}  // namespace

PackedLinearWeight::PackedLinearWeight(const Tensor& weight, const Tensor& scales) {
  static OperatorEntry& op = op_named("_quantized_linear_prepack");
  TESSERA_CHECK(weight.defined() && scales.defined(), "PackedLinearWeight: weight and scales must be defined tensors");
  packed_ = call1(op, {weight.impl(), scales.impl()}, {});
  scales_ = scales.contiguous();
  out_features_ = weight.size(0);
  in_features_ = weight.size(1);
}

Tensor linear_int8(const Tensor& input, double input_scale, int64_t input_zero_point, const PackedLinearWeight& weight,
                   const std::optional<Tensor>& bias, double output_scale, int64_t output_zero_point, bool relu,
                   DType out_dtype) {
  static OperatorEntry& op = op_named("_quantized_linear");
  TESSERA_CHECK(input.defined(), "linear_int8: input is an undefined tensor");
  TESSERA_CHECK(weight.defined(), "linear_int8: the packed weight is empty; construct it from int8 weights and scales");
  const TensorImpl* b = bias && bias->defined() ? bias->impl() : nullptr;
  return call1(op, {input.impl(), weight.packed().impl(), b},
               {value_double(input_scale), value_int(input_zero_point), value_double(output_scale),
                value_int(output_zero_point), value_bool(relu), value_dtype(out_dtype)});
}

}  // namespace tessera::quantization
