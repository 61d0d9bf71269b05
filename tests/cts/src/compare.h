// Comparison of a device's result with the reference, shared by the op suite (cts.cpp) and the
// graph suites (graphs.cpp). Internal to tests/cts.
#pragma once
#include <string>

#include <tessera/tessera.h>

namespace tessera::cts {

struct Tolerance {
  double rtol, atol;
};
// The default of the op suite: exact for integers and bool; f64 1e-9, f32 1e-4, f16 2e-3, bf16 1.6e-2
// relative, times `scale` (accumulating ops widen it).
Tolerance default_tolerance(DType t, double scale);

struct Comparison {
  bool ok = true;
  double max_abs = 0, max_rel = 0;  // max_rel: |got - want| / (atol + rtol |want|), <= 1 passes
  std::string message;               // "max error E at element I (got G, <reference> W; rtol R, atol A)"
};
// `got` (any device) against `want` (CPU): dtype, shape, then each element within `tol`.
Comparison compare(const Tensor& got, const Tensor& want, const Tolerance& tol, const char* reference = "cpu");

// An error that means "not supported here" (UNIMPLEMENTED, no kernel) rather than a wrong answer.
bool is_unsupported_error(const Error& e);

}  // namespace tessera::cts
