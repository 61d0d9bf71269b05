// Quantization of exported programs, 2:4 sparsity and the profiler, from Python.
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>

#include "bindings.h"
#include "tessera/compiler/quantize.h"
#include "tessera/sparse.h"

namespace tessera::python {

namespace {

namespace q = tessera::quantization;
using Gil = nb::gil_scoped_release;

q::ObserverKind observer_kind(const std::string& name) {
  for (q::ObserverKind k : {q::ObserverKind::MinMax, q::ObserverKind::MovingAverageMinMax,
                            q::ObserverKind::PerChannelMinMax, q::ObserverKind::Histogram}) {
    if (name == q::observer_name(k)) return k;
  }
  throw nb::value_error(("activation_observer: unknown observer '" + name +
                         "' (known: min_max, moving_average_min_max, per_channel_min_max, histogram)")
                            .c_str());
}

// "x86", "xnnpack_like", or the name of a quantizer plugin.
std::unique_ptr<q::Quantizer> quantizer(const std::string& name, const std::string& observer) {
  q::QuantizerOptions o;
  o.activation_observer = observer_kind(observer);
  if (name == "x86") return q::x86_quantizer(o);
  if (name == "xnnpack_like") return q::xnnpack_like_quantizer(o);
  return q::plugin_quantizer(name);
}

}  // namespace

void bind_extras(nb::module_& m) {
  nb::class_<q::PreparedProgram>(m, "PreparedProgram", "A program with observers placed (quantization.prepare).")
      .def_prop_ro("program", [](const q::PreparedProgram& p) { return p.program; })
      .def_prop_ro("num_observers", [](const q::PreparedProgram& p) { return p.observers.size(); });
  m.def("_quant_prepare", [](const compiler::ExportedProgram& ep, const std::vector<std::string>& names,
                             const std::string& observer) {
    std::vector<std::unique_ptr<q::Quantizer>> owned;
    std::vector<const q::Quantizer*> qs;
    for (const std::string& n : names) {
      owned.push_back(quantizer(n, observer));
      qs.push_back(owned.back().get());
    }
    Gil gil;
    return q::prepare(ep, qs);
  }, nb::arg("program"), nb::arg("quantizers"), nb::arg("activation_observer"));
  m.def("_quant_calibrate", [](q::PreparedProgram& p, const std::vector<Tensor>& inputs) {
    Gil gil;
    q::calibrate(p, inputs);
  }, nb::arg("prepared"), nb::arg("inputs"));
  m.def("_quant_convert", [](const q::PreparedProgram& p) {
    Gil gil;
    return q::convert(p);
  }, nb::arg("prepared"));
  nb::class_<q::QatProgram>(m, "QatProgram",
                            "A program being trained with fake quantization (quantization.prepare_qat).")
      .def("__call__", [](q::QatProgram& p, const std::vector<Tensor>& inputs) {
        Gil gil;
        return p.forward(inputs);
      }, nb::arg("inputs"))
      .def("parameters", &q::QatProgram::parameters)
      .def("named_parameters", [](const q::QatProgram& p) { return p.named_parameters(); })
      .def("freeze_observers", &q::QatProgram::freeze_observers, nb::arg("frozen") = true)
      .def_prop_ro("observers_frozen", &q::QatProgram::observers_frozen)
      .def_prop_ro("training_program", [](const q::QatProgram& p) { return p.training_program(); });
  m.def("_quant_prepare_qat", [](const compiler::ExportedProgram& ep, const std::vector<std::string>& names) {
    std::vector<std::unique_ptr<q::Quantizer>> owned;
    std::vector<const q::Quantizer*> qs;
    for (const std::string& n : names) {
      owned.push_back(quantizer(n, "histogram"));
      qs.push_back(owned.back().get());
    }
    Gil gil;
    return q::prepare_qat(ep, qs);
  }, nb::arg("program"), nb::arg("quantizers"));
  m.def("_quant_convert_qat", [](const q::QatProgram& p) {
    Gil gil;
    return q::convert(p);
  }, nb::arg("qat"));
  m.def("_quant_dynamic", [](const compiler::ExportedProgram& ep, bool reduce_range) {
    q::DynamicOptions o;
    o.reduce_range = reduce_range;
    Gil gil;
    return q::quantize_dynamic(ep, o);
  }, nb::arg("program"), nb::arg("reduce_range"));
  m.def("_quant_lower_to_int8", [](compiler::ExportedProgram& ep) {
    Gil gil;
    return q::lower_to_int8(ep);
  }, nb::arg("program"));

  m.def("_sparse_prune_2_4", [](const Tensor& w) { Gil gil; return sparse::prune_2_4(w); });
  m.def("_sparse_to_semi_structured", [](const Tensor& w) { Gil gil; return sparse::to_sparse_semi_structured(w); });
  m.def("_sparse_is_sparse", &sparse::is_sparse);
  m.def("_sparse_to_dense", [](const Tensor& t) { Gil gil; return sparse::to_dense(t); });
  m.def("_sparse_describe", &sparse::describe);

  m.def("_profiler_enable", &profiler_enable, nb::arg("spec"));
  m.def("_profiler_enabled", &profiler_enabled);
  m.def("_profiler_flush", [] { Gil gil; profiler_flush(); });
  m.def("_profiler_summary", &profiler_summary);
  m.def("_profiler_clear", &profiler_clear);
}

}  // namespace tessera::python
