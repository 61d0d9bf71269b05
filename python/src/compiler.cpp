// Export, compile and the program file from Python (libtessera_compiler).
//
// Note [Python functions as ExportFn]
// export_program and compile take a std::function over std::vector<Tensor>. The Python callable is
// held through a shared_ptr whose deleter takes the GIL, so the std::function can be copied and
// destroyed anywhere (inside compile's state, on any thread) without touching a Python refcount;
// calling it takes the GIL (the caller may have released it) and converts the result: a Tensor, or a
// tuple or list of Tensors.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>

#include "bindings.h"
#include "tessera/compiler/compile.h"
#include "tessera/compiler/export.h"
#include "tessera/compiler/program_file.h"

namespace tessera::python {

namespace {

using compiler::ExportedProgram;
using Gil = nb::gil_scoped_release;

ExportFn export_fn(nb::handle fn) {
  if (!PyCallable_Check(fn.ptr())) throw nb::type_error("expected a callable over tessera tensors");
  std::shared_ptr<nb::object> held(new nb::object(nb::borrow(fn)), [](nb::object* p) {
    if (!Py_IsInitialized()) return;
    nb::gil_scoped_acquire gil;
    delete p;
  });
  return [held](const std::vector<Tensor>& inputs) {
    nb::gil_scoped_acquire gil;
    nb::list args;
    for (const Tensor& t : inputs) args.append(nb::cast(t));
    nb::object out = (*held)(*nb::tuple(args));
    std::vector<Tensor> r;
    if (nb::isinstance<Tensor>(out)) {
      r.push_back(nb::cast<Tensor>(out));
    } else if (PyTuple_Check(out.ptr()) || PyList_Check(out.ptr())) {
      for (nb::handle h : nb::iter(out)) {
        if (!nb::isinstance<Tensor>(h)) throw nb::type_error("the function must return a Tensor or a tuple/list of Tensors");
        r.push_back(nb::cast<Tensor>(h));
      }
    } else {
      throw nb::type_error("the function must return a Tensor or a tuple/list of Tensors");
    }
    return r;
  };
}

std::vector<Tensor> tensor_list(nb::handle seq, const char* what) {
  std::vector<Tensor> r;
  for (nb::handle h : nb::iter(seq)) {
    if (!nb::isinstance<Tensor>(h)) throw nb::type_error((std::string(what) + ": expected tessera tensors").c_str());
    r.push_back(nb::cast<Tensor>(h));
  }
  return r;
}

nb::object outputs(std::vector<Tensor> out) {
  if (out.size() == 1) return nb::cast(std::move(out[0]));
  nb::list l;
  for (Tensor& t : out) l.append(nb::cast(std::move(t)));
  return nb::tuple(l);
}

// dynamic_shapes: per input, None or {dim: (name, min, max) | name}.
std::vector<std::map<int64_t, Dim>> dims_arg(nb::handle spec, size_t n_inputs) {
  std::vector<std::map<int64_t, Dim>> r;
  if (spec.is_none()) return r;
  for (nb::handle per_input : nb::iter(spec)) {
    std::map<int64_t, Dim> m;
    if (!per_input.is_none()) {
      for (auto [k, v] : nb::cast<nb::dict>(per_input)) {
        Dim d;
        if (PyUnicode_Check(v.ptr())) {
          d.name = nb::cast<std::string>(v);
        } else {
          nb::tuple t = nb::cast<nb::tuple>(v);
          if (t.size() < 1 || t.size() > 3)
            throw nb::value_error("dynamic_shapes: a dim is a name or a tuple (name, min, max)");
          d.name = nb::cast<std::string>(t[0]);
          if (t.size() > 1) d.min = nb::cast<int64_t>(t[1]);
          if (t.size() > 2) d.max = nb::cast<int64_t>(t[2]);
        }
        m[nb::cast<int64_t>(k)] = d;
      }
    }
    r.push_back(std::move(m));
  }
  if (r.size() != n_inputs)
    throw nb::value_error(("dynamic_shapes: got " + std::to_string(r.size()) + " entries for " + std::to_string(n_inputs) +
                           " inputs (one per input, None for an input with every dim static)")
                              .c_str());
  return r;
}

}  // namespace

void bind_compiler(nb::module_& m) {
  nb::class_<ExportedProgram>(m, "ExportedProgram", "A captured program: a graph over the op contract, its signature and weights.")
      .def("__call__", [](const ExportedProgram& ep, nb::args args) {
        std::vector<Tensor> in = tensor_list(args, "ExportedProgram");
        std::vector<Tensor> out;
        {
          Gil gil;
          out = ep.run(in);
        }
        return outputs(std::move(out));
      })
      .def("graph_string", &ExportedProgram::graph_string)
      .def("__str__", &ExportedProgram::graph_string)
      .def_prop_ro("weights", [](const ExportedProgram& ep) { return ep.weights; })
      .def("save", [](const ExportedProgram& ep, const std::string& path) {
        Gil gil;
        compiler::save(ep, path);
      }, nb::arg("path"));
  m.def("load", [](const std::string& path) {
    Gil gil;
    return compiler::load_program(path);
  }, nb::arg("path"), "Reads a .tsr program file (docs/export.md).");
  m.def("save", [](const ExportedProgram& ep, const std::string& path) {
    Gil gil;
    compiler::save(ep, path);
  }, nb::arg("program"), nb::arg("path"));
  m.def("export", [](nb::handle fn, nb::handle args, nb::handle dynamic_shapes, std::map<std::string, Tensor> parameters,
                     std::vector<std::string> input_names) {
    ExportFn f = export_fn(fn);
    std::vector<Tensor> in = tensor_list(args, "export: args");
    ExportOptions o;
    o.dynamic_shapes = dims_arg(dynamic_shapes, in.size());
    o.parameters = std::move(parameters);
    o.input_names = std::move(input_names);
    Gil gil;
    return export_program(f, in, o);
  }, nb::arg("fn"), nb::arg("args"), nb::kw_only(), nb::arg("dynamic_shapes") = nb::none(),
     nb::arg("parameters") = std::map<std::string, Tensor>{}, nb::arg("input_names") = std::vector<std::string>{},
     "Captures fn(*args) as a graph (tessera::export_program).");

  nb::class_<CompiledFunction>(m, "CompiledFunction")
      .def("__call__", [](const CompiledFunction& f, nb::args args) {
        std::vector<Tensor> in = tensor_list(args, "compiled function");
        std::vector<Tensor> out;
        {
          Gil gil;
          out = f(in);
        }
        return outputs(std::move(out));
      })
      .def("stats", [](const CompiledFunction& f) {
        CompileStats s = f.stats();
        nb::dict d;
        d["calls"] = s.calls;
        d["compiles"] = s.compiles;
        d["recompile_reasons"] = s.recompile_reasons;
        d["cache_hits"] = s.cache_hits;
        d["interpreted"] = s.interpreted;
        d["eager_calls"] = s.eager_calls;
        d["graphs"] = s.graphs;
        d["graph_replays"] = s.graph_replays;
        d["compile_seconds"] = s.compile_seconds;
        return d;
      })
      .def("artifacts", [](const CompiledFunction& f) {
        nb::list l;
        for (const ArtifactInfo& a : f.artifacts()) {
          nb::dict d;
          d["backend"] = a.backend;
          d["inputs"] = a.inputs;
          d["graph"] = a.graph;
          l.append(d);
        }
        return l;
      });
  m.def(
      "_compile",
      [](nb::handle fn, std::optional<bool> dynamic, const std::string& backend, const std::string& name,
         int recompile_limit, const std::string& mode) {
        CompileOptions o;
        o.dynamic = dynamic;
        o.backend = backend;
        o.name = name;
        o.recompile_limit = recompile_limit;
        o.mode = mode;
        ExportFn f = export_fn(fn);
        return compile(std::move(f), std::move(o));
      },
      nb::arg("fn"), nb::arg("dynamic").none(), nb::arg("backend"), nb::arg("name"),
      nb::arg("recompile_limit"), nb::arg("mode") = "default");
}

}  // namespace tessera::python
