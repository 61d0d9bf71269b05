// tessera._C: the module, dtype and device objects, argument helpers and the error translation.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <string>

#include "bindings.h"

namespace tessera::python {

namespace {

// The dtype object: one Python object per DType, kept by the module (dtype_object returns them, so
// `t.dtype is tessera.float32`).
struct PyDType {
  DType value;
};
PyObject* g_dtype_objects[kNumDTypes] = {};

// Note [Errors in Python]
// tessera::Error codes map to Python's built-in exception types, with the C++ message unchanged:
// InvalidArgument -> ValueError, OutOfMemory -> MemoryError, Unimplemented -> NotImplementedError
// (a RuntimeError), Unavailable / Internal / AbiMismatch -> RuntimeError. Arguments of a wrong
// Python type raise TypeError and out-of-range indices IndexError, from the binding itself.
void translate_error(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    PyObject* type = PyExc_RuntimeError;
    switch (e.code()) {
      case ErrorCode::InvalidArgument: type = PyExc_ValueError; break;
      case ErrorCode::OutOfMemory: type = PyExc_MemoryError; break;
      case ErrorCode::Unimplemented: type = PyExc_NotImplementedError; break;
      default: break;
    }
    PyErr_SetString(type, e.what());
  }
}

}  // namespace

DType dtype_arg(nb::handle h) {
  if (nb::isinstance<PyDType>(h)) return nb::cast<PyDType&>(h).value;
  if (PyUnicode_Check(h.ptr())) return dtype_from_name(nb::cast<std::string>(h));
  if (!h.is_none() && nb::hasattr(h, "itemsize") && nb::hasattr(h, "kind")) {  // a NumPy dtype
    return dtype_from_name(nb::cast<std::string>(nb::str(h)));
  }
  if (PyType_Check(h.ptr()) && nb::hasattr(h, "__name__")) {  // numpy.float32, bool, float, int
    std::string name = nb::cast<std::string>(h.attr("__name__"));
    if (name == "float") return default_dtype();
    if (name == "int") return kInt64;
    if (name == "bool_") return kBool;
    return dtype_from_name(name);
  }
  throw nb::type_error(("expected a tessera.dtype (tessera.float32, ...) or a dtype name, not " +
                        nb::cast<std::string>(nb::str(h.type().attr("__name__"))))
                           .c_str());
}

nb::object dtype_object(DType t) { return nb::borrow(g_dtype_objects[int(t)]); }

Device device_arg(nb::handle h) {
  if (nb::isinstance<Device>(h)) return nb::cast<Device>(h);
  if (PyUnicode_Check(h.ptr())) return Device(nb::cast<std::string>(h));
  throw nb::type_error(("expected a tessera.device or a device name such as \"cpu\" or \"npu:1\", not " +
                        nb::cast<std::string>(nb::str(h.type().attr("__name__"))))
                           .c_str());
}

bool scalar_arg(nb::handle h, Scalar& out) {
  PyObject* o = h.ptr();
  if (PyBool_Check(o)) {
    out = Scalar(o == Py_True);
    return true;
  }
  if (PyLong_Check(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) throw nb::value_error("the Python int does not fit in int64");
    out = Scalar(int64_t(v));
    return true;
  }
  if (PyFloat_Check(o)) {
    out = Scalar(PyFloat_AS_DOUBLE(o));
    return true;
  }
  // NumPy scalars (numpy.float32(1.5), numpy.int64(3), numpy.bool_(True)): numbers, though not
  // Python ones. Arrays are not numbers (not even 0-dim ones), nor are tensors.
  nb::handle type = h.type();
  if (nb::hasattr(type, "__module__") && nb::hasattr(h, "item")) {
    nb::object mod = type.attr("__module__");
    if (PyUnicode_Check(mod.ptr()) && nb::cast<std::string>(mod) == "numpy" &&
        nb::cast<std::string>(type.attr("__name__")) != "ndarray") {
      nb::object item = h.attr("item")();
      if (PyBool_Check(item.ptr()) || PyLong_Check(item.ptr()) || PyFloat_Check(item.ptr()))
        return scalar_arg(item, out);
    }
  }
  return false;
}

Tensor wrapped_number(const Scalar& s) {
  // The value is copied into memory, never written by an op (scalar_tensor's fill_): while a graph is
  // captured every dispatched op is traced (Note [Capture] in compiler/include/tessera/compiler/export.h),
  // and a wrapped number must hold its value to become a constant of the graph.
  const int64_t i = s.to_int();
  const double d = s.to_double();
  const uint8_t b = s.to_bool() ? 1 : 0;
  const void* value = s.is_bool() ? static_cast<const void*>(&b)
                      : s.is_integral() ? static_cast<const void*>(&i) : static_cast<const void*>(&d);
  Tensor t = tensor_from_buffer(value, s.dtype(), 1, {}, {}).view({});
  t.impl()->set_wrapped_number(true);
  return t;
}

std::vector<int64_t> int_list_arg(nb::handle h, const char* what) {
  std::vector<int64_t> out;
  if (PyLong_Check(h.ptr()) && !PyBool_Check(h.ptr())) {
    out.push_back(nb::cast<int64_t>(h));
    return out;
  }
  if (PySequence_Check(h.ptr()) && !PyUnicode_Check(h.ptr())) {
    for (nb::handle item : nb::iter(h)) {
      if (!PyIndex_Check(item.ptr()) || PyBool_Check(item.ptr()))
        throw nb::type_error((std::string(what) + ": expected a sequence of ints, got an element of type " +
                              nb::cast<std::string>(nb::str(item.type().attr("__name__"))))
                                 .c_str());
      out.push_back(nb::cast<int64_t>(nb::int_(item)));
    }
    return out;
  }
  throw nb::type_error((std::string(what) + ": expected an int or a sequence of ints, not " +
                        nb::cast<std::string>(nb::str(h.type().attr("__name__"))))
                           .c_str());
}

std::vector<int64_t> shape_args(const nb::args& args, const char* what) {
  if (args.size() == 1 && !PyLong_Check(args[0].ptr())) return int_list_arg(args[0], what);
  return int_list_arg(args, what);
}

void bind_types(nb::module_& m) {
  nb::register_exception_translator(translate_error);

  nb::class_<PyDType>(m, "dtype", "An element type: tessera.float32, tessera.int64, ...")
      .def_prop_ro("itemsize", [](const PyDType& d) { return itemsize(d.value); })
      .def_prop_ro("is_floating_point", [](const PyDType& d) { return is_floating(d.value); })
      .def_prop_ro("is_quantized", [](const PyDType& d) { return is_quantized(d.value); })
      .def_prop_ro("name", [](const PyDType& d) { return std::string(dtype_name(d.value)); })
      .def("__repr__", [](const PyDType& d) { return "tessera." + std::string(dtype_name(d.value)); })
      .def("__str__", [](const PyDType& d) { return std::string(dtype_name(d.value)); })
      .def("__eq__", [](const PyDType& a, nb::handle b) {
        return nb::isinstance<PyDType>(b) && nb::cast<PyDType&>(b).value == a.value;
      })
      .def("__hash__", [](const PyDType& d) { return int(d.value) + 1000; })
      .def("__reduce__", [](const PyDType& d) {  // pickles as the module attribute
        return nb::make_tuple(nb::module_::import_("tessera").attr("_dtype_from_name"),
                              nb::make_tuple(std::string(dtype_name(d.value))));
      });
  for (int i = 0; i < kNumDTypes; ++i) {
    DType t = DType(i);
    nb::object obj = nb::cast(PyDType{t});
    m.attr(std::string(dtype_name(t)).c_str()) = obj;
    g_dtype_objects[i] = obj.ptr();  // the module attribute keeps it alive
  }
  // PyTorch's aliases.
  for (auto [alias, t] : {std::pair{"float", kFloat32}, {"double", kFloat64}, {"half", kFloat16},
                          {"long", kInt64}, {"int", kInt32}, {"short", kInt16}}) {
    m.attr(alias) = dtype_object(t);
  }
  m.def("_dtype_from_name", [](const std::string& name) { return dtype_object(dtype_from_name(name)); });
  m.def("promote_types", [](nb::handle a, nb::handle b) { return dtype_object(promote_types(dtype_arg(a), dtype_arg(b))); },
        "The smallest dtype both convert to without loss of category (PyTorch's promote_types).");
  m.def("get_default_dtype", [] { return dtype_object(default_dtype()); });
  m.def("set_default_dtype", [](nb::handle t) { set_default_dtype(dtype_arg(t)); });

  nb::class_<Device>(m, "device", "A device: tessera.device(\"cpu\"), tessera.device(\"npu:1\"), tessera.device(\"npu\", 1).")
      .def("__init__", [](Device* self, nb::handle spec) {
        new (self) Device(device_arg(spec));
      }, nb::arg("type"))
      .def("__init__", [](Device* self, const std::string& type, int index) {
        TESSERA_CHECK(index >= 0, "tessera.device: the index must be >= 0, got ", index);
        new (self) Device(device_type_from_name(type), index);
      }, nb::arg("type"), nb::arg("index"))
      .def_prop_ro("type", [](const Device& d) { return device_type_name(d.type()); })
      .def_prop_ro("index", [](const Device& d) -> nb::object {
        return d.has_index() ? nb::cast(d.index()) : nb::none();
      })
      .def("__str__", &Device::str)
      .def("__repr__", [](const Device& d) {
        std::string r = "device(type='" + device_type_name(d.type()) + "'";
        if (d.has_index()) r += ", index=" + std::to_string(d.index());
        return r + ")";
      })
      .def("__eq__", [](const Device& a, nb::handle b) {
        if (nb::isinstance<Device>(b)) return a == nb::cast<Device>(b);
        if (PyUnicode_Check(b.ptr())) return a == Device(nb::cast<std::string>(b));
        return false;
      })
      .def("__hash__", [](const Device& d) { return std::hash<Device>()(d); });
  nb::implicitly_convertible<std::string, Device>();
}

}  // namespace tessera::python

NB_MODULE(_C, m) {
  namespace tp = tessera::python;
  m.doc() = "Tessera's C++ runtime for Python (see docs/python.md); use the tessera package.";
  // A compiled function holds its Python function (Note [Python functions as ExportFn]), whose
  // globals often hold the compiled function again: a cycle through C++ that Python's collector
  // cannot see, left to the end of the process. nanobind's exit-time leak report would list it.
  nanobind::set_leak_warnings(false);
  tp::bind_types(m);
  tp::bind_tensor(m);
  tp::bind_op_call(m);
  tp::bind_typed_ops(m);
  tp::bind_interop(m);
  tp::bind_devices(m);
  tp::bind_compiler(m);
  tp::bind_extras(m);
  tp::bind_onnx(m);
  tp::bind_autograd(m);
}
