// Quantization of exported programs (docs/quantization.md): quantizers annotate a program, prepare
// places observers, calibration runs the program on sample inputs, convert writes quantize /
// dequantize nodes with the observed parameters, and lower_to_int8 replaces the quantized linear
// patterns by oneDNN int8 kernels.
//
// Note [Quantization flow]
// 1. annotate: each Quantizer, in order, records for the Call nodes it takes a NodeAnnotation: a
//    QuantizationSpec (or a SharedSpec) per input edge and for the output. A later quantizer that
//    changes an earlier one's annotation is an error naming both.
// 2. prepare: validates the annotations, joins the quantization points (input edges and outputs)
//    that must share parameters into classes with a union-find (SharedSpec, and an input edge whose
//    spec equals its producer's output spec), then gives each class one observer. The observers are
//    a side table of the PreparedProgram, not IR nodes: the graph stays in the op contract, and
//    calibration runs a copy of the program that also returns every observed value.
// 3. calibrate: runs that copy on sample inputs and feeds the observers (weights are observed once,
//    at prepare).
// 4. convert: every quantized point becomes quantize -> dequantize with its class's parameters
//    (per-channel weights: quantize_per_channel with the scales and zero points as constant inputs);
//    the result is an ordinary ExportedProgram in float32 with the quantisation simulated, which
//    runs everywhere and saves to the program file.
// 5. lower_to_int8: dequantize -> linear (-> relu) -> quantize over quint8 activations and qint8
//    per-channel symmetric weights becomes one _quantized_linear on the uint8 representation, and
//    dequantize -> conv2d (-> add) (-> relu) -> quantize one _quantized_conv2d.
//
// Note [Dynamic quantization]
// The second mode, PyTorch's quantize_dynamic: quantize_dynamic(ep) needs no quantizer and no
// calibration. Each linear with constant float32 weights becomes _quantized_linear_dynamic, which
// quantizes its float32 input to quint8 with a scale and zero point chosen in every call from the
// input's min and max, and returns float32. The weights are quantized once (qint8, per output
// channel symmetric) and stored as int8 constants with their scales, packed by a
// _quantized_linear_prepack node: the program is portable and saves to the program file as it is.
// lower_to_int8 then folds the packing into constant packed weights of this machine's layout.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "tessera/compiler/export_macros.h"
#include "tessera/compiler/ir.h"

namespace tessera::quantization {

using compiler::ExportedProgram;
using compiler::ValueId;

enum class Scheme : uint8_t { PerTensorAffine, PerTensorSymmetric, PerChannelAffine, PerChannelSymmetric };
enum class ObserverKind : uint8_t { MinMax, MovingAverageMinMax, PerChannelMinMax, Histogram };
TESSERA_COMPILER_API const char* scheme_name(Scheme s);          // "per_tensor_affine", ...
TESSERA_COMPILER_API const char* observer_name(ObserverKind k);  // "min_max", "moving_average_min_max", ...

struct QuantizationSpec {
  DType dtype = kQUInt8;  // kQInt8 or kQUInt8
  Scheme scheme = Scheme::PerTensorAffine;
  ObserverKind observer = ObserverKind::MinMax;
  int64_t ch_axis = 0;  // per-channel schemes only
  bool operator==(const QuantizationSpec&) const = default;
  // "qu8 per_tensor_affine histogram"
  TESSERA_COMPILER_API std::string str() const;
};

// A quantization point: the use of `value` as an input of node `consumer` (an input edge), or the
// output `value` itself when consumer is -1. Node indices are those of the program given to prepare.
struct QuantPoint {
  ValueId value = -1;
  int32_t consumer = -1;
  static QuantPoint output(ValueId v) { return {v, -1}; }
  static QuantPoint input(ValueId v, int32_t node) { return {v, node}; }
  auto operator<=>(const QuantPoint&) const = default;
};

// Takes the parameters (the observer) of another point.
struct SharedSpec {
  QuantPoint with;
  bool operator==(const SharedSpec&) const = default;
};
using SpecOrShared = std::variant<QuantizationSpec, SharedSpec>;

// What a quantizer decides for one Call node. A node with an annotation and no specs stays float
// (and later quantizers leave it so).
struct NodeAnnotation {
  std::map<ValueId, SpecOrShared> inputs;  // by input value: the edge (value, this node)
  std::optional<SpecOrShared> output;      // of the node's single output
  bool operator==(const NodeAnnotation&) const = default;
};

// The annotations of one program, with the quantizer that made each.
class TESSERA_COMPILER_API Annotations {
 public:
  // Records `a` for node `node`. Throws naming both quantizers and the node when another quantizer
  // already annotated the node differently; the same annotation again is accepted.
  void set(const ExportedProgram& ep, int32_t node, NodeAnnotation a, const std::string& quantizer);
  const NodeAnnotation* find(int32_t node) const;
  bool annotated(int32_t node) const { return find(node) != nullptr; }
  const std::string& quantizer_of(int32_t node) const;
  const std::map<int32_t, std::pair<NodeAnnotation, std::string>>& all() const { return by_node_; }

 private:
  std::map<int32_t, std::pair<NodeAnnotation, std::string>> by_node_;
};

// A quantizer decides what to quantize; it never edits the program. annotate() skips nodes that an
// earlier quantizer annotated (Annotations::annotated) unless it means to change them, which is an
// error (composition: Note [Quantization flow]).
class TESSERA_COMPILER_API Quantizer {
 public:
  virtual ~Quantizer();
  virtual std::string name() const = 0;
  virtual void annotate(const ExportedProgram& ep, Annotations& annotations) const = 0;
};

// Options of the built-in quantizers. (optional) activation_observer defaults to Histogram, as
// PyTorch's X86InductorQuantizer; MinMax and MovingAverageMinMax are cheaper to calibrate.
struct QuantizerOptions {
  ObserverKind activation_observer = ObserverKind::Histogram;
};
// x86: activations quint8 per-tensor affine, weights qint8 per-channel symmetric; linear (+relu),
// conv2d (+add) (+relu); max_pool2d, view (flatten, reshape) and cat take their input's parameters.
TESSERA_COMPILER_API std::unique_ptr<Quantizer> x86_quantizer(QuantizerOptions options = {});
// xnnpack_like: activations qint8 per-tensor symmetric, weights qint8 per-channel symmetric; the
// same ops.
TESSERA_COMPILER_API std::unique_ptr<Quantizer> xnnpack_like_quantizer(QuantizerOptions options = {});

// The quantizer a plugin of kind "quantizer" offers through its TESSERA_EXT_QUANTIZER_ANNOTATE
// extension (plugin_abi.h; docs/quantization.md, "Writing a quantizer"), found by discovery under
// its manifest name and loaded on first use. Throws naming the plugin when no plugin has that name,
// it is not a quantizer, it fails to load or lacks the extension. annotate() throws naming the
// plugin when the plugin returns an error status.
TESSERA_COMPILER_API std::unique_ptr<Quantizer> plugin_quantizer(const std::string& plugin);

// Chooses parameters from observed values (PyTorch's observers). Not thread-safe.
class TESSERA_COMPILER_API Observer {
 public:
  explicit Observer(QuantizationSpec spec);
  // Accumulates the values of `x` (any device and floating dtype; copied to the host as float32).
  // Throws naming the observer for non-finite values, or a per-channel axis outside x's dims.
  void observe(const Tensor& x);
  bool observed() const { return observed_; }
  // Per-tensor: one scale and zero point; per-channel: one per channel. Throws when nothing was
  // observed.
  std::vector<double> scales() const;
  std::vector<int64_t> zero_points() const;
  const QuantizationSpec& spec() const { return spec_; }

 private:
  // The range to quantize: per tensor one (min, max), per channel one per channel.
  std::vector<std::pair<double, double>> ranges() const;
  QuantizationSpec spec_;
  bool observed_ = false;
  std::vector<double> min_, max_;
  std::vector<double> histogram_;  // Histogram: kHistogramBins counts over [min_[0], max_[0]]
};

// A program with annotations resolved into observer classes. Holds copies: the program given to
// prepare is not changed.
struct TESSERA_COMPILER_API PreparedProgram {
  ExportedProgram program;
  Annotations annotations;
  // Every quantized point and the class (an index into observers) it belongs to.
  std::map<QuantPoint, int> point_class;
  std::vector<Observer> observers;
  // observers[c] sees the values of calibration_program's outputs whose index maps to c.
  ExportedProgram calibration_program;
  std::vector<int> calibration_class;  // per extra output of calibration_program
  size_t num_program_outputs = 0;
};

// Annotates `ep` with each quantizer in order, validates (one-line errors naming the node and the
// quantizer), resolves shared specs and places observers. Weights are observed here.
TESSERA_COMPILER_API PreparedProgram prepare(const ExportedProgram& ep,
                                             const std::vector<const Quantizer*>& quantizers);
TESSERA_COMPILER_API PreparedProgram prepare(const ExportedProgram& ep, const Quantizer& quantizer);
// Runs the program on `inputs` (its user inputs) and feeds the observers.
TESSERA_COMPILER_API void calibrate(PreparedProgram& prepared, const std::vector<Tensor>& inputs);
// The program with quantize / dequantize nodes (Note [Quantization flow]). Throws naming a class
// whose observer saw no values.
TESSERA_COMPILER_API ExportedProgram convert(const PreparedProgram& prepared);

// Note [Quantization-aware training]
// PT2E's prepare_qat / convert. prepare_qat annotates and groups the quantization points as prepare
// does, then builds a training program in which every quantized point is fake-quantized
// (fake_quantize_per_tensor_affine / _per_channel_affine, Note [Fake quantize]: the values are
// rounded to the int8 grid in float32 and the gradient passes straight through where they are in
// range). The scale and zero point of each class are constant inputs of that program, set before
// every forward:
//  - weights (parameters and constants): from the current values (the spec's scheme, min / max;
//    per channel for per-channel specs), so the int8 grid follows the weights as they train;
//  - activations: a moving-average min / max observer per class (averaging constant 0.01, as
//    PyTorch's QAT observers), whatever observer the quantizer's spec names. The training program
//    also returns the value at each activation point; forward() feeds those to the observers after
//    the step, so step k fake-quantizes with the ranges seen up to step k - 1 (PyTorch observes
//    first, within the step; docs/quantization.md lists the difference). The first forward
//    initialises the observers with one float pass (no fake quantization, no gradient) on its inputs.
// The program's parameters (InputKind::Parameter) are copied at prepare_qat into leaves that
// require grad (parameters()): train them with any optimizer; the program given to prepare_qat is
// not changed. convert(qat) gives the quantize / dequantize program of Note [Quantization flow]
// with the trained weights, the weights' ranges taken once more from their final values and the
// activations' from the observers; lower_to_int8 applies to it as after post-training quantization.
class QatProgram;
// Annotates `ep` with each quantizer in order (the same validation and errors as prepare) and builds
// the training program. Throws naming the value when the program is invalid.
TESSERA_COMPILER_API QatProgram prepare_qat(const ExportedProgram& ep, const std::vector<const Quantizer*>& quantizers);
TESSERA_COMPILER_API QatProgram prepare_qat(const ExportedProgram& ep, const Quantizer& quantizer);
// The int8-simulating program of the trained QAT program. Throws naming a class whose observer saw
// no values (no forward ran).
TESSERA_COMPILER_API ExportedProgram convert(const QatProgram& qat);

class TESSERA_COMPILER_API QatProgram {
 public:
  // Runs the training program on `inputs` (its user inputs, on the program's device) with grad mode
  // as it is: a loss of the outputs back-propagates into parameters(). Updates the observers unless
  // frozen.
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs);
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) { return forward(inputs); }
  // The trainable float weights, leaves that require grad, by the program's weight names.
  const std::map<std::string, Tensor>& named_parameters() const { return params_; }
  std::vector<Tensor> parameters() const;
  // PyTorch's disable_observer: the activation ranges stop moving (fine-tuning at the end of QAT).
  void freeze_observers(bool frozen = true) { frozen_ = frozen; }
  bool observers_frozen() const { return frozen_; }
  // The training program (fake-quantize nodes; one extra output per observed activation class).
  const ExportedProgram& training_program() const { return train_; }

 private:
  friend QatProgram prepare_qat(const ExportedProgram&, const std::vector<const Quantizer*>&);
  friend ExportedProgram convert(const QatProgram&);
  void set_qparams();
  PreparedProgram prepared_;
  ExportedProgram train_;
  std::map<std::string, Tensor> params_;
  std::vector<Observer> act_observers_;         // by class; weight classes keep theirs unused
  std::vector<std::string> class_weight_;       // by class: the weight it quantizes, or empty
  std::vector<std::pair<std::string, std::string>> class_inputs_;  // by class: scale, zero point input
  std::vector<int> observed_class_;             // by extra output of train_
  size_t num_outputs_ = 0;
  bool frozen_ = false;
};


// Options of quantize_dynamic. (optional) reduce_range defaults to true: activations use 0..127, as
// PyTorch's quantize_dynamic on x86 (its linear_dynamic with reduce_range), which also keeps the
// u8 x s8 pair sums of a CPU without VNNI clear of saturation; false uses 0..255.
struct DynamicOptions {
  bool reduce_range = true;
};
// Note [Dynamic quantization]: a copy of `ep` where each linear whose weight is a 2-D float32
// weight or constant (bias absent or a 1-D float32 one) and whose input is float32 becomes
// _quantized_linear_dynamic, with a relu that only reads it fused; the float weights it replaced
// leave the program. Other ops stay as they are. Numerics: PyTorch's dynamic quantized linear with
// per_channel_dynamic_qconfig: input scale and zero point by choose_qparams over the call's min and
// max (range 0..qmax), quantize_val, weights max|w_c| / 127.5, int32 accumulation, output
// s_x * s_w[j] * acc + bias[j]. Throws tessera::Error naming the value when the program is invalid.
TESSERA_COMPILER_API ExportedProgram quantize_dynamic(const ExportedProgram& ep, DynamicOptions options = {});

// Replaces each dequantize -> conv2d (-> add) (-> relu) -> quantize of a converted program (quint8
// activations and addend, qint8 per-channel symmetric constant weights, float or no bias, integer
// stride / padding / dilation) by _quantized_conv2d (Note [Int8 conv2d lowering] in
// lower_conv.cpp), and each dequantize -> linear (-> relu) -> quantize (quint8 activations,
// qint8 per-channel symmetric constant weights, float or no bias) by _quantized_linear on the uint8
// representation, with the weights packed once into constant inputs; chains of them pass the uint8
// representation along (Note [Lowered int8 boundaries] in lower.cpp: the first reads the float32
// input and quantizes it inside; one whose result only dequantize reads writes the float32 values).
// A dequantize of a lowered result that something else reads too becomes
// (float(repr) - zero_point) * scale. Unmatched regions stay as they are. Returns the number of
// convolutions and linears lowered. The packed weights are the backend's layout: save the
// converted program, and lower after loading it. In a program from quantize_dynamic it folds the
// packing of the int8 weights into constant packed weights (Note [Dynamic quantization]); those
// count as lowered too.
TESSERA_COMPILER_API int lower_to_int8(ExportedProgram& ep);

}  // namespace tessera::quantization
