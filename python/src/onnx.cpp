// ONNX models in and out from Python (tessera.onnx, docs/python.md "ONNX"): thin over
// tessera/onnx/onnx.h. Built when the tree builds libtessera_onnx (protobuf found); otherwise
// tessera.onnx says why it is missing.
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#if TESSERA_PY_ONNX
#include "tessera/onnx/onnx.h"
#endif

namespace tessera::python {

void bind_onnx(nb::module_& m) {
#if TESSERA_PY_ONNX
  using Gil = nb::gil_scoped_release;
  nb::module_ o = m.def_submodule("_onnx", "libtessera_onnx (tessera/onnx/onnx.h).");
  o.attr("available") = true;
  o.attr("min_opset") = onnx::kMinOpset;
  o.attr("max_opset") = onnx::kMaxOpset;
  o.attr("export_opset") = onnx::kExportOpset;
  auto options = [](const std::map<std::string, std::pair<int64_t, int64_t>>& ranges,
                    const std::map<std::string, int64_t>& fixed_dims,
                    const std::map<std::string, Tensor>& constant_inputs, nb::handle device, bool fold_constants,
                    const std::string& external_data_dir, std::pair<int64_t, int64_t> default_range) {
    onnx::ImportOptions opts;
    for (const auto& [name, r] : ranges) opts.ranges[name] = compiler::SymbolRange{r.first, r.second};
    opts.default_range = compiler::SymbolRange{default_range.first, default_range.second};
    opts.fixed_dims = fixed_dims;
    opts.constant_inputs = constant_inputs;
    if (!device.is_none()) opts.device = device_arg(device);
    opts.fold_constants = fold_constants;
    opts.external_data_dir = external_data_dir;
    return opts;
  };
  o.def("import_model", [options](const std::string& path, const std::map<std::string, std::pair<int64_t, int64_t>>& ranges,
                                  const std::map<std::string, int64_t>& fixed_dims,
                                  const std::map<std::string, Tensor>& constant_inputs, nb::handle device,
                                  bool fold_constants, std::pair<int64_t, int64_t> default_range) {
    onnx::ImportOptions opts = options(ranges, fixed_dims, constant_inputs, device, fold_constants, "", default_range);
    Gil gil;
    return onnx::import_model(path, opts);
  }, nb::arg("path"), nb::arg("ranges"), nb::arg("fixed_dims"), nb::arg("constant_inputs"), nb::arg("device").none(),
     nb::arg("fold_constants"), nb::arg("default_range"));
  o.def("import_model_bytes", [options](nb::bytes data, const std::map<std::string, std::pair<int64_t, int64_t>>& ranges,
                                        const std::map<std::string, int64_t>& fixed_dims,
                                        const std::map<std::string, Tensor>& constant_inputs, nb::handle device,
                                        bool fold_constants, const std::string& external_data_dir,
                                        std::pair<int64_t, int64_t> default_range) {
    onnx::ImportOptions opts =
        options(ranges, fixed_dims, constant_inputs, device, fold_constants, external_data_dir, default_range);
    std::string bytes(data.c_str(), data.size());
    Gil gil;
    return onnx::import_model_bytes(bytes, opts);
  }, nb::arg("data"), nb::arg("ranges"), nb::arg("fixed_dims"), nb::arg("constant_inputs"), nb::arg("device").none(),
     nb::arg("fold_constants"), nb::arg("external_data_dir"), nb::arg("default_range"));
  o.def("export_model", [](const compiler::ExportedProgram& ep, const std::string& path) {
    Gil gil;
    onnx::export_model(ep, path);
  }, nb::arg("program"), nb::arg("path"));
  o.def("export_model_bytes", [](const compiler::ExportedProgram& ep) {
    std::string bytes;
    {
      Gil gil;
      bytes = onnx::export_model_bytes(ep);
    }
    return nb::bytes(bytes.data(), bytes.size());
  }, nb::arg("program"));
  o.def("supported_op_types", &onnx::supported_op_types);
#else
  nb::module_ o = m.def_submodule("_onnx", "libtessera_onnx was not built (protobuf missing at configure time).");
  o.attr("available") = false;
#endif
}

}  // namespace tessera::python
