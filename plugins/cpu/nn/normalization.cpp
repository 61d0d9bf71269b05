// softmax, log_softmax, layer_norm and rms_norm. Every floating dtype but f64 computes in f32
// through the ISA row kernels (nn_isa.h); f64 computes in double with plain loops.
#include <cmath>
#include <limits>

#include "nn_common.h"
#include "nn_ops.h"

namespace tessera::cpu::nn {
namespace {

// ---- f64 rows
// Note [NaN in row maxima] (nn_isa_kernels.inc): a NaN anywhere makes the whole row NaN.
void softmax_row_f64(const double* x, double* y, int64_t n, bool log) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n && m == m; ++i) m = (x[i] > m || x[i] != x[i]) ? x[i] : m;
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
  if (log) {
    const double ls = std::log(s);
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - ls;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i] - m) / s;
  }
}
void layer_norm_row_f64(const double* x, double* y, int64_t n, const double* w, const double* b, double eps) {
  double s = 0, q = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  const double mean = s / double(n);
  for (int64_t i = 0; i < n; ++i) q += (x[i] - mean) * (x[i] - mean);
  const double rstd = 1.0 / std::sqrt(q / double(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * (w ? w[i] : 1.0) + (b ? b[i] : 0.0);
}
void rms_norm_row_f64(const double* x, double* y, int64_t n, const double* w, double eps) {
  double q = 0;
  for (int64_t i = 0; i < n; ++i) q += x[i] * x[i];
  const double r = 1.0 / std::sqrt(q / double(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * r * (w ? w[i] : 1.0);
}

// Note [Row kernels]: x and y contiguous with `rows` rows of `n` elements (or, with inner > 1,
// rows are the columns of [outer, n, inner] slabs, gathered with stride `inner`). f32 rows run in
// place on the tensors; other dtypes go through a per-thread f32 row buffer.
template <typename F32Fn, typename F64Fn>
void for_rows(OpKind kind, const tessera_tensor_t* x, const tessera_tensor_t* y, int64_t outer, int64_t n,
              int64_t inner, F32Fn f32fn, F64Fn f64fn) {
  const int64_t rows = outer * inner;
  if (rows == 0 || n == 0) return;
  const size_t xs = sdk::dtype_size(x->dtype), ys = sdk::dtype_size(y->dtype);
  const char* xb = static_cast<const char*>(x->data) + x->byte_offset;
  char* yb = static_cast<char*>(y->data) + y->byte_offset;
  const int64_t grain = grain_items(kind, n, rows);
  const bool f64 = x->dtype == TESSERA_DTYPE_FLOAT64 && y->dtype == TESSERA_DTYPE_FLOAT64;
  const bool f32 = x->dtype == TESSERA_DTYPE_FLOAT32 && y->dtype == TESSERA_DTYPE_FLOAT32 && inner == 1;
  parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
    Buffer<float> buf(f32 || f64 ? 0 : n);
    Buffer<double> dbuf(f64 && inner > 1 ? n : 0);
    for (int64_t r = b; r < e; ++r) {
      const int64_t o = r / inner, j = r % inner;
      const int64_t off = o * n * inner + j;  // element offset of the row's first element
      if (f32) {
        f32fn(reinterpret_cast<const float*>(xb) + off, reinterpret_cast<float*>(yb) + off);
      } else if (f64) {
        const double* xr = reinterpret_cast<const double*>(xb) + off;
        double* yr = reinterpret_cast<double*>(yb) + off;
        if (inner == 1) {
          f64fn(xr, yr);
        } else {
          for (int64_t i = 0; i < n; ++i) dbuf[i] = xr[i * inner];
          f64fn(dbuf.get(), dbuf.get());
          for (int64_t i = 0; i < n; ++i) yr[i * inner] = dbuf[i];
        }
      } else {
        load_f32(xb + off * int64_t(xs), x->dtype, n, inner, buf.get());
        f32fn(buf.get(), buf.get());
        store_f32(buf.get(), yb + off * int64_t(ys), y->dtype, n, inner);
      }
    }
  });
}

// Output handling shared by the kernels: compute into y when contiguous, else into a contiguous
// temporary copied into y afterwards.
struct OutputSlot {
  TempList holder;
  const tessera_tensor_t* target;
  const tessera_tensor_t* user;
  explicit OutputSlot(const tessera_tensor_t* y) : target(y), user(y) {
    if (!TensorView(y).is_contiguous()) {
      holder.emplace_back(y->sizes, y->ndim, y->dtype);
      target = holder.back().raw();
    }
  }
  void finish() {
    if (target != user) copy_tensor(user, target);
  }
};

void check_floating(const KernelCall& call, const TensorView& t, const char* what) {
  if (!dtype_is_floating(t.dtype()))
    fail(std::string(call.op_name()) + ": " + what + " has dtype " + dtype_name(t.dtype()) +
         "; expected a floating dtype (f16, bf16, f32, f64); cast it with .to(kFloat32)");
}

void softmax_common(const KernelCall& call, bool log) {
  const TensorView x0 = call.input(0);
  check_floating(call, x0, "input");
  TempList holder;
  const tessera_tensor_t* x = contiguous(x0.raw(), holder);
  OutputSlot out(call.output(0).raw());
  const int ndim = x->ndim;
  int64_t dim = call.attr_int(op::softmax::attr::dim);  // log_softmax's too
  if (ndim == 0) {
    if (dim != 0 && dim != -1)
      fail(std::string(call.op_name()) + ": dim " + std::to_string(dim) + " is out of range for a 0-d tensor; expected 0 or -1");
  } else if (dim < -ndim || dim >= ndim) {
    fail(std::string(call.op_name()) + ": dim " + std::to_string(dim) + " is out of range for a tensor of shape " +
         shape_str(x) + "; expected a value in [" + std::to_string(-ndim) + ", " + std::to_string(ndim - 1) + "]");
  }
  if (dim < 0) dim += ndim;
  int64_t outer = 1, n = ndim == 0 ? 1 : x->sizes[dim], inner = 1;
  for (int d = 0; d < dim; ++d) outer *= x->sizes[d];
  for (int d = int(dim) + 1; d < ndim; ++d) inner *= x->sizes[d];
  const NnIsaTable& isa = nn_isa();
  if (log) {
    for_rows(
        OpKind::Softmax, x, out.target, outer, n, inner,
        [&](const float* a, float* b) { isa.log_softmax_row(a, b, n); },
        [&](const double* a, double* b) { softmax_row_f64(a, b, n, true); });
  } else {
    for_rows(
        OpKind::Softmax, x, out.target, outer, n, inner,
        [&](const float* a, float* b) { isa.softmax_row(a, b, n); },
        [&](const double* a, double* b) { softmax_row_f64(a, b, n, false); });
  }
  out.finish();
}

// Trailing-dims check of layer_norm / rms_norm; returns the row length.
int64_t normalized_size(const KernelCall& call, const tessera_tensor_t* x, int attr_index) {
  int count = 0;
  const int64_t* shape = call.attr_ints(attr_index, &count);
  if (count > x->ndim)
    fail(std::string(call.op_name()) + ": normalized_shape has " + std::to_string(count) +
         " dims but the input " + shape_str(x) + " has only " + std::to_string(x->ndim));
  int64_t n = 1;
  for (int i = 0; i < count; ++i) {
    if (x->sizes[x->ndim - count + i] != shape[i]) {
      std::string ns = "[";
      for (int k = 0; k < count; ++k) ns += (k ? ", " : "") + std::to_string(shape[k]);
      fail(std::string(call.op_name()) + ": normalized_shape " + ns + "] does not match the trailing dims of the input " +
           shape_str(x) + "; expected the last " + std::to_string(count) + " sizes of the input");
    }
    n *= shape[i];
  }
  return n;
}

// weight / bias as contiguous f32 (or f64) arrays of n elements; null when absent.
template <typename T>
const T* param(const KernelCall& call, int input, int64_t n, const char* what, Buffer<T>& storage) {
  if (input >= call.num_inputs()) return nullptr;
  const TensorView p = call.input(input);
  if (!p.defined()) return nullptr;
  check_floating(call, p, what);
  if (p.numel() != n)
    fail(std::string(call.op_name()) + ": " + what + " has shape " + shape_str(p) + " (" + std::to_string(p.numel()) +
         " elements); expected normalized_shape (" + std::to_string(n) + " elements)");
  TempList holder;
  const tessera_tensor_t* c = contiguous(p.raw(), holder);
  storage.reset(n);
  if constexpr (std::is_same_v<T, float>) {
    load_f32(static_cast<const char*>(c->data) + c->byte_offset, c->dtype, n, 1, storage.get());
  } else {
    tessera_tensor_t dst = *c;
    int64_t sz = n, st = 1;
    dst.dtype = TESSERA_DTYPE_FLOAT64;
    dst.ndim = 1;
    dst.sizes = &sz;
    dst.strides = &st;
    dst.data = storage.get();
    dst.byte_offset = 0;
    tessera_tensor_t src = *c;
    src.ndim = 1;
    src.sizes = &sz;
    src.strides = &st;
    copy_tensor(&dst, &src);
  }
  return storage.get();
}

void layer_norm_kernel(const KernelCall& call) {
  const TensorView x0 = call.input(0);
  check_floating(call, x0, "input");
  TempList holder;
  const tessera_tensor_t* x = contiguous(x0.raw(), holder);
  OutputSlot out(call.output(0).raw());
  const int64_t n = normalized_size(call, x, 0);
  const double eps = call.attr_is_none(op::layer_norm::attr::eps) ? 1e-5 : call.attr_double(op::layer_norm::attr::eps);
  const int64_t rows = n == 0 ? 0 : x->numel / n;
  if (x->dtype == TESSERA_DTYPE_FLOAT64 && out.target->dtype == TESSERA_DTYPE_FLOAT64) {
    Buffer<double> wb, bb;
    const double* w = param<double>(call, 1, n, "weight", wb);
    const double* b = param<double>(call, 2, n, "bias", bb);
    for_rows(
        OpKind::Normalization, x, out.target, rows, n, 1, [](const float*, float*) {},
        [&](const double* a, double* y) { layer_norm_row_f64(a, y, n, w, b, eps); });
  } else {
    Buffer<float> wb, bb;
    const float* w = param<float>(call, 1, n, "weight", wb);
    const float* b = param<float>(call, 2, n, "bias", bb);
    const NnIsaTable& isa = nn_isa();
    for_rows(
        OpKind::Normalization, x, out.target, rows, n, 1,
        [&](const float* a, float* y) { isa.layer_norm_row(a, y, n, w, b, float(eps)); },
        [](const double*, double*) {});
  }
  out.finish();
}

// eps=None (a call that did not come through tessera::rms_norm, which resolves it): the epsilon of the
// compute type, as PyTorch (float32's for f16/bf16/f32).
double finfo_eps(int32_t dtype) {
  return dtype == TESSERA_DTYPE_FLOAT64 ? std::numeric_limits<double>::epsilon()
                                        : double(std::numeric_limits<float>::epsilon());
}

void rms_norm_kernel(const KernelCall& call) {
  const TensorView x0 = call.input(0);
  check_floating(call, x0, "input");
  TempList holder;
  const tessera_tensor_t* x = contiguous(x0.raw(), holder);
  OutputSlot out(call.output(0).raw());
  const int64_t n = normalized_size(call, x, 0);
  using A = op::rms_norm::attr;
  const double eps = call.num_attrs() <= A::eps || call.attr_is_none(A::eps) ? finfo_eps(x->dtype) : call.attr_double(A::eps);
  const int64_t rows = n == 0 ? 0 : x->numel / n;
  if (x->dtype == TESSERA_DTYPE_FLOAT64 && out.target->dtype == TESSERA_DTYPE_FLOAT64) {
    Buffer<double> wb;
    const double* w = param<double>(call, 1, n, "weight", wb);
    for_rows(
        OpKind::Normalization, x, out.target, rows, n, 1, [](const float*, float*) {},
        [&](const double* a, double* y) { rms_norm_row_f64(a, y, n, w, eps); });
  } else {
    Buffer<float> wb;
    const float* w = param<float>(call, 1, n, "weight", wb);
    const NnIsaTable& isa = nn_isa();
    for_rows(
        OpKind::Normalization, x, out.target, rows, n, 1,
        [&](const float* a, float* y) { isa.rms_norm_row(a, y, n, w, float(eps)); },
        [](const double*, double*) {});
  }
  out.finish();
}

}  // namespace

void softmax_kernel(const KernelCall& call) { softmax_common(call, false); }
void log_softmax_kernel(const KernelCall& call) { softmax_common(call, true); }
void layer_norm_op(const KernelCall& call) { layer_norm_kernel(call); }
void rms_norm_op(const KernelCall& call) { rms_norm_kernel(call); }

}  // namespace tessera::cpu::nn
