// tessera._C: the nanobind extension, thin over the C++ API (docs/python.md). One file per part:
// module.cpp (dtype and device objects, errors), tensor.cpp (Tensor, operators, indexing),
// op_call.cpp (boxed calls of contract ops, factories), typed_ops.cpp (their typed fast path), interop.cpp (NumPy and DLPack),
// devices.cpp (privateuse names, plugins, streams and events), compiler.cpp (export, compile, .tsr), extras.cpp (quantization, 2:4
// sparsity, the profiler).
//
// Note [GIL and ops]
// Every call that can run a kernel, copy between devices or wait on a device releases the GIL
// (nb::gil_scoped_release) after its Python arguments are converted, so that other Python threads
// run meanwhile; nothing inside a released region touches a Python object. Storage that wraps Python
// memory (from_numpy, from_dlpack) takes the GIL again in its deleter.
#pragma once
#include <nanobind/nanobind.h>

#include <string_view>

#include "tessera/tessera.h"

namespace tessera::python {
namespace nb = nanobind;

// Parts of the module, each defined in its own file.
void bind_types(nb::module_& m);
void bind_tensor(nb::module_& m);
void bind_op_call(nb::module_& m);
void bind_interop(nb::module_& m);
void bind_devices(nb::module_& m);
void bind_compiler(nb::module_& m);
void bind_extras(nb::module_& m);
void bind_onnx(nb::module_& m);  // tessera._C._onnx (python/src/onnx.cpp)
void bind_autograd(nb::module_& m);  // tessera._C._autograd (python/src/autograd.cpp)
void bind_typed_ops(nb::module_& m);  // after bind_tensor and bind_op_call

// A dtype given as a tessera.dtype, a name ("float32") or anything whose str() is a name (a NumPy
// dtype). Throws nb::type_error otherwise.
DType dtype_arg(nb::handle h);
// The tessera.dtype object of `t` (one object per dtype, so `is` works).
nb::object dtype_object(DType t);
// A device given as a tessera.device, a name ("npu:1") or an int (a CUDA-style index is refused:
// names only). Throws nb::type_error for other types; an unknown name throws tessera::Error.
Device device_arg(nb::handle h);

// A Python number (bool, int, float, or a NumPy scalar of those kinds) as a Scalar. Returns false,
// leaving `out` alone, when `h` is not a number (a Tensor is not one).
bool scalar_arg(nb::handle h, Scalar& out);
// A 0-dim CPU tensor of a number's own kind (bool, int64, float64) marked as a wrapped number, so that
// type promotion treats it as a Python scalar (docs/semantics.md), as the C++ operators do.
Tensor wrapped_number(const Scalar& s);
// A list of ints from a sequence or a single int. Throws nb::type_error naming `what`.
std::vector<int64_t> int_list_arg(nb::handle h, const char* what);
// A CPU tensor sharing the memory of an array-like (NumPy array, DLPack producer); nested sequences
// of numbers go through numpy.asarray first. Throws nb::type_error when `h` is none of those.
Tensor array_like_arg(nb::handle h);
// The typed call of a contract op by its full name ("add.Tensor"), or nullptr (Note [Typed fast
// path] in typed_ops.cpp): true with the result in `out`, or false, leaving `out` alone and having
// run nothing, when an argument is not of its plain type (the caller then makes the boxed call).
using TypedFastPath = bool (*)(const nb::args& args, nb::object& out);
TypedFastPath typed_fast_path(std::string_view full_name);
// Shape arguments given either as f(2, 3) or f((2, 3)).
std::vector<int64_t> shape_args(const nb::args& args, const char* what);

}  // namespace tessera::python
