#include "kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "backend.h"
#include "kernel_sources.h"
#include "tessera/op_names.h"

namespace tessera::opencl {

namespace {

// Host mirrors of the OpenCL C geometry structs (Note [Geometry arguments]).
struct ClGeo {
  int64_t n, ndim, size[kMaxDims], st[4][kMaxDims], off[4];
};
struct ClRGeo {
  int64_t n_out, n_in, ndo, ndi, osize[kMaxDims], ost_a[kMaxDims], ost_o[kMaxDims], isize[kMaxDims],
      ist_a[kMaxDims], ist_o[kMaxDims], ist_w[kMaxDims], ist_b[kMaxDims], off_a, off_o, off_w, off_b;
};
struct ClMGeo {
  int64_t M, N, K, nb, nbd, bsize[kMaxDims], bst_a[kMaxDims], bst_b[kMaxDims], bst_o[kMaxDims], sam, sak, sbk,
      sbn, som, son, off_a, off_b, off_o;
};
static_assert(sizeof(ClGeo) == 8 * (6 + 5 * kMaxDims), "ClGeo must match Geo in kernel_sources.cpp");

constexpr size_t kElementwiseGroup = 256;

[[noreturn]] void unimplemented(const std::string& message) {
  throw sdk::Error(TESSERA_STATUS_UNIMPLEMENTED, "opencl: " + message);
}

int32_t compute_dtype(int32_t d) {
  if (d == TESSERA_DTYPE_FLOAT64) return TESSERA_DTYPE_FLOAT64;
  if (dtype_is_floating(d)) return TESSERA_DTYPE_FLOAT32;
  if (d == TESSERA_DTYPE_INT64) return TESSERA_DTYPE_INT64;
  return TESSERA_DTYPE_INT32;
}

// A scalar kernel argument of a compute type.
struct ScalarArg {
  union {
    int32_t i32;
    int64_t i64;
    float f32;
    double f64;
  } v{};
  size_t size = 0;
};
// Note [Floating to integral conversion] (kernel_sources.cpp), on the host.
int64_t double_to_int64(double v) {
  constexpr double kTwo63 = 9223372036854775808.0;
  return v >= -kTwo63 && v < kTwo63 ? int64_t(v) : INT64_MIN;
}
int32_t double_to_int32(double v) { return v > -2147483649.0 && v < 2147483648.0 ? int32_t(v) : INT32_MIN; }

// A value converted straight into the compute type `ct` (never through a narrower storage type).
ScalarArg scalar_arg(int32_t ct, double d, int64_t i, bool is_floating) {
  ScalarArg s;
  switch (ct) {
    case TESSERA_DTYPE_FLOAT64: s.v.f64 = is_floating ? d : double(i); s.size = 8; break;
    case TESSERA_DTYPE_FLOAT32: s.v.f32 = float(is_floating ? d : double(i)); s.size = 4; break;
    case TESSERA_DTYPE_INT64: s.v.i64 = is_floating ? double_to_int64(d) : i; s.size = 8; break;
    default: s.v.i32 = is_floating ? double_to_int32(d) : int32_t(uint32_t(i)); s.size = 4; break;
  }
  return s;
}

// The one element of a 0-dim CPU tensor as a value of the compute type `ct`, or nothing for a dtype
// that is staged as it is (float16, bfloat16).
std::optional<ScalarArg> host_scalar(const sdk::TensorView& t, int32_t ct) {
  const auto* p = t.host_ptr<const unsigned char>();
  auto read = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (t.dtype()) {
    case TESSERA_DTYPE_BOOL: return scalar_arg(ct, 0, read(uint8_t()) != 0, false);
    case TESSERA_DTYPE_UINT8: return scalar_arg(ct, 0, read(uint8_t()), false);
    case TESSERA_DTYPE_INT8: return scalar_arg(ct, 0, read(int8_t()), false);
    case TESSERA_DTYPE_INT16: return scalar_arg(ct, 0, read(int16_t()), false);
    case TESSERA_DTYPE_INT32: return scalar_arg(ct, 0, read(int32_t()), false);
    case TESSERA_DTYPE_INT64: return scalar_arg(ct, 0, read(int64_t()), false);
    case TESSERA_DTYPE_FLOAT32: return scalar_arg(ct, read(float()), 0, true);
    case TESSERA_DTYPE_FLOAT64: return scalar_arg(ct, read(double()), 0, true);
    default: return std::nullopt;
  }
}

// Whether `t` is a 0-dim CPU operand (a wrapped number, say) joining device tensors.
bool is_host_scalar(const sdk::TensorView& t) {
  return t.defined() && t.device_type() == TESSERA_DEVICE_CPU && t.ndim() == 0;
}

// A tensor as a kernel argument: buffer, element offset, geometry.
struct Operand {
  cl_mem mem = nullptr;
  int64_t offset = 0;
  std::vector<int64_t> sizes, strides;
  int32_t dtype = 0;
  int64_t numel = 0;
  int64_t ndim() const { return int64_t(sizes.size()); }
};

struct Arg {
  size_t size;
  const void* value;
};

// Per call: the target device, its queue, and temporaries released at the end of the call.
class CallContext {
 public:
  explicit CallContext(const sdk::KernelCall& call) : call_(call) {
    // The device of the first OpenCL output, else of the first OpenCL input, else the call's.
    int32_t index = -1;
    for (int i = 0; i < call.num_outputs() && index < 0; ++i)
      if (call.output(i).defined() && call.output(i).device_type() == TESSERA_DEVICE_OPENCL)
        index = call.output(i).device_index();
    for (int i = 0; i < call.num_inputs() && index < 0; ++i)
      if (call.input(i).defined() && call.input(i).device_type() == TESSERA_DEVICE_OPENCL)
        index = call.input(i).device_index();
    if (index < 0) index = call.device_index() >= 0 ? call.device_index() : 0;
    dev = &Backend::instance().device(index);
    queue = dev->queue(call.stream());
  }
  ~CallContext() {
    for (cl_mem m : temps_) dev->allocator.free(m);
  }
  CallContext(const CallContext&) = delete;
  CallContext& operator=(const CallContext&) = delete;

  void require_dtype(int32_t dtype) const {
    if (dtype == TESSERA_DTYPE_FLOAT64 && !dev->fp64)
      unimplemented(std::string(call_.op_name()) + ": float64 needs cl_khr_fp64, which " + dev->name + " lacks");
  }

  // The operand of `t`; a CPU tensor (a wrapped scalar, say) is copied to a temporary device buffer.
  Operand operand(const sdk::TensorView& t) {
    Operand op;
    op.dtype = t.dtype();
    require_dtype(op.dtype);
    op.sizes.assign(t.sizes(), t.sizes() + t.ndim());
    op.strides.assign(t.strides(), t.strides() + t.ndim());
    op.numel = t.numel();
    const int64_t item = int64_t(t.itemsize());
    if (t.device_type() == TESSERA_DEVICE_OPENCL) {
      if (t.device_index() != dev->index)
        throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT,
                         std::string(call_.op_name()) + ": a tensor on opencl:" + std::to_string(t.device_index()) +
                             " in a call on opencl:" + std::to_string(dev->index) +
                             "; move it with .to(\"opencl:" + std::to_string(dev->index) + "\") first");
      if (t.byte_offset() % item != 0)
        unimplemented(std::string(call_.op_name()) + ": byte offset " + std::to_string(t.byte_offset()) +
                      " is not a multiple of the element size " + std::to_string(item));
      op.mem = static_cast<cl_mem>(t.handle());
      op.offset = t.byte_offset() / item;
      return op;
    }
    if (t.device_type() != TESSERA_DEVICE_CPU)
      unimplemented(std::string(call_.op_name()) + ": input on device type " + std::to_string(t.device_type()));
    // Gather the CPU tensor into contiguous bytes, then one blocking write.
    std::vector<unsigned char> packed(size_t(std::max<int64_t>(op.numel, 1)) * size_t(item));
    const auto* base = t.host_ptr<const unsigned char>();
    std::vector<int64_t> idx(size_t(t.ndim()), 0);
    for (int64_t i = 0; i < op.numel; ++i) {
      int64_t off = 0;
      for (int d = 0; d < t.ndim(); ++d) off += idx[size_t(d)] * t.stride(d);
      std::memcpy(packed.data() + i * item, base + off * item, size_t(item));
      for (int d = t.ndim() - 1; d >= 0; --d) {
        if (++idx[size_t(d)] < t.size(d)) break;
        idx[size_t(d)] = 0;
      }
    }
    cl_mem temp = temp_buffer(packed.size());
    check_cl(cl().clEnqueueWriteBuffer(queue, temp, CL_TRUE, 0, packed.size(), packed.data(), 0, nullptr, nullptr),
             std::string(call_.op_name()) + ": staging a CPU input");
    op.mem = temp;
    op.offset = 0;
    int64_t expected = 1;
    for (int d = t.ndim() - 1; d >= 0; --d) {
      op.strides[size_t(d)] = expected;
      expected *= op.sizes[size_t(d)];
    }
    return op;
  }

  // Note [Wrapped numbers on the device]: a 0-dim CPU operand (how a C++ number such as the -3 of
  // `x / -3` arrives: int64, float64 or bool) is converted on the host straight into the kernel's
  // compute type `ct` and staged as one element of that type, so its value never passes through the
  // output's storage dtype (uint8 would turn -3 into 253, float16 1e5 into inf) and a float64 number
  // needs no fp64 support. Other operands are staged as they are.
  Operand operand(const sdk::TensorView& t, int32_t ct) {
    if (!is_host_scalar(t)) return operand(t);
    const std::optional<ScalarArg> v = host_scalar(t, ct);
    if (!v) return operand(t);
    Operand op;
    op.dtype = ct;
    op.numel = 1;
    op.mem = temp_buffer(v->size);
    check_cl(cl().clEnqueueWriteBuffer(queue, op.mem, CL_TRUE, 0, v->size, &v->v, 0, nullptr, nullptr),
             std::string(call_.op_name()) + ": staging a CPU scalar");
    return op;
  }

  cl_mem temp_buffer(uint64_t nbytes) {
    cl_mem m = dev->allocator.allocate(nbytes);
    temps_.push_back(m);
    return m;
  }

  cl_kernel kernel(const std::string& program_key, const char* name, const SourceFn& source) {
    return Backend::instance().kernel(*dev, program_key, name, source);
  }

  void launch(cl_kernel k, std::initializer_list<Arg> args, cl_uint dims, const size_t* global, const size_t* local) {
    std::lock_guard<std::mutex> lock(dev->launch_mutex);
    // Note [Fixed local size]: 1-D kernels without a required work-group size run with a fixed local
    // size and a rounded-up global size (they check their bound). Leaving it to the driver makes
    // PoCL pick a different local size per global size and compile the kernel again for each.
    size_t rounded_global = 0, fixed_local = 0;
    if (dims == 1 && local == nullptr) {
      fixed_local = std::min<size_t>(kElementwiseGroup, dev->max_work_group_size);
      rounded_global = (global[0] + fixed_local - 1) / fixed_local * fixed_local;
      global = &rounded_global;
      local = &fixed_local;
    }
    cl_uint i = 0;
    for (const Arg& a : args) {
      check_cl(cl().clSetKernelArg(k, i, a.size, a.value),
               std::string(call_.op_name()) + ": clSetKernelArg " + std::to_string(i));
      ++i;
    }
    check_cl(cl().clEnqueueNDRangeKernel(queue, k, dims, nullptr, global, local, 0, nullptr, nullptr),
             std::string(call_.op_name()) + ": clEnqueueNDRangeKernel");
  }

  const sdk::KernelCall& call() const { return call_; }
  DeviceState* dev = nullptr;
  cl_command_queue queue = nullptr;

 private:
  const sdk::KernelCall& call_;
  std::vector<cl_mem> temps_;
};

// Strides of `op` broadcast to `sizes` (aligned at the right; broadcast dims get stride 0).
std::vector<int64_t> broadcast_strides(const Operand& op, const std::vector<int64_t>& sizes, const char* what) {
  const size_t n = sizes.size(), k = op.sizes.size();
  if (k > n)
    throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT,
                     std::string(what) + ": an input of rank " + std::to_string(k) + " does not broadcast to rank " +
                         std::to_string(n));
  std::vector<int64_t> st(n, 0);
  for (size_t d = 0; d < k; ++d) {
    const size_t od = n - k + d;
    if (op.sizes[d] == sizes[od]) {
      st[od] = sizes[od] == 1 ? 0 : op.strides[d];
    } else if (op.sizes[d] != 1) {
      throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT,
                       std::string(what) + ": input size " + std::to_string(op.sizes[d]) + " at dim " +
                           std::to_string(d) + " does not broadcast to output size " + std::to_string(sizes[od]));
    }
  }
  return st;
}

// An elementwise geometry over up to 3 tensors (the output first), with dims of size 1 dropped, the
// rest ordered by the output's strides (largest outermost, stable), and mergeable dims merged: a
// dense output in any dim order (channels-last included) is written in memory order, and with
// operands of its layout becomes one contiguous run (the _c kernels). No kernel planned here
// depends on the order the elements are visited in.
struct Elementwise {
  ClGeo geo{};
  bool contiguous = false;
};
Elementwise elementwise(const std::vector<int64_t>& sizes, const std::vector<std::vector<int64_t>>& strides,
                        const std::vector<int64_t>& offsets, const char* what) {
  const size_t nt = strides.size();
  std::vector<int64_t> cs;
  std::vector<std::vector<int64_t>> cst(nt);
  std::vector<size_t> order;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != 1) order.push_back(d);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides[0][a] > strides[0][b]; });
  for (size_t d : order) {
    bool merge = !cs.empty();
    for (size_t t = 0; merge && t < nt; ++t)
      if (cst[t].back() != strides[t][d] * sizes[d]) merge = false;
    if (merge) {
      cs.back() *= sizes[d];
      for (size_t t = 0; t < nt; ++t) cst[t].back() = strides[t][d];
    } else {
      cs.push_back(sizes[d]);
      for (size_t t = 0; t < nt; ++t) cst[t].push_back(strides[t][d]);
    }
  }
  if (cs.size() > size_t(kMaxDims))
    unimplemented(std::string(what) + ": " + std::to_string(cs.size()) + " dimensions after merging (at most " +
                  std::to_string(kMaxDims) + ")");
  Elementwise e;
  e.geo.n = 1;
  for (int64_t s : sizes) e.geo.n *= s;
  e.geo.ndim = int64_t(cs.size());
  for (size_t d = 0; d < cs.size(); ++d) {
    e.geo.size[d] = cs[d];
    for (size_t t = 0; t < nt; ++t) e.geo.st[t][d] = cst[t][d];
  }
  for (size_t t = 0; t < nt; ++t) e.geo.off[t] = offsets[t];
  e.contiguous = cs.empty() || (cs.size() == 1 && std::all_of(cst.begin(), cst.end(), [](const auto& s) {
                                  return s[0] == 1;
                                }));
  return e;
}

// Note [Kernel traits]: what a kernel does beyond its OpenCL name is bound when it is registered
// (register_kernels), so no kernel compares an op name at run time; `name` only picks the OpenCL
// kernel (kernel_sources.cpp) and keys the program cache.
enum Trait : unsigned {
  kPlain = 0,
  kAlpha = 1u << 0,         // add/sub: self + alpha * other, alpha the op's attr::alpha
  kCompare = 1u << 1,       // eq ... ge, logical_and/or: computed in the promoted input type, bool out
  kTrueDivide = 1u << 2,    // div: refused for integral outputs
  kFloatingOnly = 1u << 3,  // refused for non-floating outputs
  kApproximate = 1u << 4,   // gelu: attr::approximate picks the tanh form
  kNoIdentity = 1u << 5,    // amax/amin: an empty reduction is an error
};
struct KernelDef {
  const char* name;
  unsigned traits;
  bool has(Trait t) const { return (traits & t) != 0; }
};

// Argument positions, read through the contract (tessera/op_names.h). A kernel serving several ops
// reads through one op's indices; the asserts say the others have the same layout.
constexpr bool same_layout(std::initializer_list<int> positions) {
  for (int p : positions)
    if (p != *positions.begin()) return false;
  return true;
}
using Binary = op::add_Tensor;
static_assert(same_layout({Binary::attr::alpha, op::sub_Tensor::attr::alpha, op::add__Tensor::attr::alpha}));
static_assert(same_layout({Binary::tensor::other, op::mul_Tensor::tensor::other, op::eq_Tensor::tensor::other,
                           op::logical_and::tensor::other, op::add__Tensor::tensor::other}));
using Reduce = op::sum;
static_assert(same_layout({Reduce::attr::dim, op::mean::attr::dim, op::amax::attr::dim,
                           op::amin::attr::dim}));
static_assert(same_layout({Reduce::tensor::self, op::mean::tensor::self, op::amax::tensor::self}));
using Softmax = op::softmax;
static_assert(same_layout({Softmax::attr::dim, op::log_softmax::attr::dim}));
using Unary = op::neg;
static_assert(same_layout({Unary::tensor::self, op::gelu::tensor::self, op::exp::tensor::self}));

using OpFn = void (*)(const sdk::KernelCall&, const KernelDef&);

template <OpFn Fn>
tessera_status_t adapt(void* user_data, const tessera_kernel_call_t* raw) noexcept {
  try {
    Fn(sdk::KernelCall(raw), *static_cast<const KernelDef*>(user_data));
    return nullptr;
  } catch (const sdk::Error& e) {
    return sdk::make_status(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return sdk::make_status(TESSERA_STATUS_OUT_OF_MEMORY, std::string(raw->op_name) + ": out of host memory");
  } catch (const std::exception& e) {
    return sdk::make_status(TESSERA_STATUS_INTERNAL, std::string(raw->op_name) + ": " + e.what());
  }
}

// ---------------------------------------------------------------- elementwise

// The compute type of a comparison of a device tensor of dtype `d` with a 0-dim CPU operand of dtype
// `s`: that of the promoted type, where the 0-dim operand only raises the category (a floating
// number with an integral tensor gives float32, PyTorch's default dtype).
int32_t compare_scalar_compute_dtype(int32_t d, int32_t s) {
  auto category = [](int32_t t) { return dtype_is_floating(t) ? 2 : (t == TESSERA_DTYPE_BOOL ? 0 : 1); };
  if (category(s) <= category(d)) return compute_dtype(d);
  return dtype_is_floating(s) ? TESSERA_DTYPE_FLOAT32 : TESSERA_DTYPE_INT64;
}

void run_binary(const sdk::KernelCall& call, const KernelDef& def) {
  const char* op = def.name;
  CallContext cc(call);
  const sdk::TensorView out = call.output(0), av = call.input(Binary::tensor::self),
                        bv = call.input(Binary::tensor::other);
  Operand o = cc.operand(out);
  const bool compare = def.has(kCompare);
  constexpr int kAlphaAt = Binary::attr::alpha;
  const bool has_alpha = def.has(kAlpha) && call.num_attrs() > kAlphaAt && !call.attr_is_none(kAlphaAt);
  if (has_alpha && call.attr_is_floating(kAlphaAt) && !dtype_is_floating(o.dtype))
    throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT,
                     std::string(call.op_name()) +
                         ": for integral input tensors, argument alpha must not be a "
                         "floating point number (got " +
                         std::to_string(call.attr_double(kAlphaAt)) +
                         "); pass an integral alpha or use floating tensors");
  // Note [Wrapped numbers on the device]
  int32_t a_ct = compute_dtype(o.dtype), b_ct = a_ct;
  if (compare) {
    a_ct = compare_scalar_compute_dtype(bv.dtype(), av.dtype());
    b_ct = compare_scalar_compute_dtype(av.dtype(), bv.dtype());
  }
  Operand a = cc.operand(av, a_ct), b = cc.operand(bv, b_ct);
  if (o.numel == 0) return;
  if (def.has(kTrueDivide) && !dtype_is_floating(o.dtype))
    unimplemented(std::string(call.op_name()) + ": integer division (output " + dtype_tag(o.dtype) + ")");
  const Elementwise e = elementwise(
      o.sizes, {o.strides, broadcast_strides(a, o.sizes, call.op_name()), broadcast_strides(b, o.sizes, call.op_name())},
      {o.offset, a.offset, b.offset}, call.op_name());
  const std::string kname = std::string(op) + (e.contiguous ? "_c" : "_s");
  const size_t global = size_t(e.geo.n);
  if (compare) {
    const std::string key =
        std::string(op) + "_" + dtype_tag(a.dtype) + "_" + dtype_tag(b.dtype) + "_" + dtype_tag(o.dtype);
    cl_kernel k = cc.kernel(key, kname.c_str(), [&] { return compare_source(a.dtype, b.dtype, o.dtype, op); });
    cc.launch(k, {{sizeof e.geo, &e.geo}, {sizeof(cl_mem), &o.mem}, {sizeof(cl_mem), &a.mem}, {sizeof(cl_mem), &b.mem}},
              1, &global, nullptr);
    return;
  }
  ScalarArg alpha = scalar_arg(compute_dtype(o.dtype), 1.0, 1, false);
  if (has_alpha) {
    // A bool result takes alpha as a bool (nonzero is true) before it is narrowed to the compute
    // type: 2**40 must not truncate to 0.
    const bool to_bool = o.dtype == TESSERA_DTYPE_BOOL && !call.attr_is_floating(kAlphaAt);
    const int64_t ialpha = call.attr_int(kAlphaAt);
    alpha = scalar_arg(compute_dtype(o.dtype), call.attr_double(kAlphaAt),
                       to_bool ? int64_t(ialpha != 0) : ialpha, call.attr_is_floating(kAlphaAt));
  }
  const std::string key =
      std::string(op) + "_" + dtype_tag(a.dtype) + "_" + dtype_tag(b.dtype) + "_" + dtype_tag(o.dtype);
  cl_kernel k = cc.kernel(key, kname.c_str(), [&] { return binary_source(a.dtype, b.dtype, o.dtype, op); });
  cc.launch(k,
            {{sizeof e.geo, &e.geo}, {sizeof(cl_mem), &o.mem}, {sizeof(cl_mem), &a.mem}, {sizeof(cl_mem), &b.mem},
             {alpha.size, &alpha.v}},
            1, &global, nullptr);
}

void run_unary(const sdk::KernelCall& call, const KernelDef& def) {
  CallContext cc(call);
  Operand o = cc.operand(call.output(0)), a = cc.operand(call.input(Unary::tensor::self));
  if (o.numel == 0) return;
  std::string name = def.name;
  if (def.has(kFloatingOnly) && !dtype_is_floating(o.dtype))
    unimplemented(std::string(call.op_name()) + ": output dtype " + dtype_tag(o.dtype) + " (floating only)");
  constexpr int kApproximateAt = op::gelu::attr::approximate;
  if (def.has(kApproximate) && call.num_attrs() > kApproximateAt &&
      call.attr_string(kApproximateAt) == "tanh")
    name += "_tanh";
  const Elementwise e = elementwise(o.sizes, {o.strides, broadcast_strides(a, o.sizes, call.op_name())},
                                    {o.offset, a.offset}, call.op_name());
  const std::string kname = name + (e.contiguous ? "_c" : "_s");
  const std::string key = name + "_" + dtype_tag(a.dtype) + "_" + dtype_tag(o.dtype);
  cl_kernel k = cc.kernel(key, kname.c_str(), [&] { return unary_source(a.dtype, o.dtype, name); });
  const size_t global = size_t(e.geo.n);
  cc.launch(k, {{sizeof e.geo, &e.geo}, {sizeof(cl_mem), &o.mem}, {sizeof(cl_mem), &a.mem}}, 1, &global, nullptr);
}

// where.self(Tensor condition, Tensor self, Tensor other)
void run_where(const sdk::KernelCall& call, const KernelDef&) {
  using T = op::where_self::tensor;
  CallContext cc(call);
  Operand o = cc.operand(call.output(0)), c = cc.operand(call.input(T::condition));
  // Note [Wrapped numbers on the device]
  Operand a = cc.operand(call.input(T::self), compute_dtype(o.dtype)),
          b = cc.operand(call.input(T::other), compute_dtype(o.dtype));
  if (o.numel == 0) return;
  const Elementwise e = elementwise(o.sizes,
                                    {o.strides, broadcast_strides(c, o.sizes, call.op_name()),
                                     broadcast_strides(a, o.sizes, call.op_name()),
                                     broadcast_strides(b, o.sizes, call.op_name())},
                                    {o.offset, c.offset, a.offset, b.offset}, call.op_name());
  const std::string key = "where_" + dtype_tag(c.dtype) + "_" + dtype_tag(a.dtype) + "_" + dtype_tag(b.dtype) + "_" +
                          dtype_tag(o.dtype);
  cl_kernel k = cc.kernel(key, "where_s", [&] { return where_source(c.dtype, a.dtype, b.dtype, o.dtype); });
  const size_t global = size_t(e.geo.n);
  cc.launch(k,
            {{sizeof e.geo, &e.geo}, {sizeof(cl_mem), &o.mem}, {sizeof(cl_mem), &c.mem}, {sizeof(cl_mem), &a.mem},
             {sizeof(cl_mem), &b.mem}},
            1, &global, nullptr);
}

// copy_(Tensor(a!) self, Tensor src, ...): inputs[0] is self (also outputs[0]), inputs[1] the source.
void copy_to_cpu(CallContext& cc, const sdk::TensorView& dst, const sdk::TensorView& src_view);

void run_copy(const sdk::KernelCall& call, const KernelDef&) {
  using T = op::copy_::tensor;
  const sdk::TensorView dst_view = call.num_outputs() > 0 ? call.output(0) : call.input(T::self);
  if (dst_view.device_type() == TESSERA_DEVICE_CPU) {
    // cpu_tensor.copy_(opencl_tensor): convert on the device into a packed temporary, then scatter.
    CallContext cc(call);
    copy_to_cpu(cc, dst_view, call.input(T::src));
    return;
  }
  CallContext cc(call);
  Operand o = cc.operand(dst_view), s = cc.operand(call.input(T::src));
  if (o.numel == 0) return;
  const Elementwise e = elementwise(o.sizes, {o.strides, broadcast_strides(s, o.sizes, call.op_name())},
                                    {o.offset, s.offset}, call.op_name());
  if (e.contiguous && s.dtype == o.dtype) {
    const size_t item = sdk::dtype_size(o.dtype);
    check_cl(cl().clEnqueueCopyBuffer(cc.queue, s.mem, o.mem, size_t(s.offset) * item, size_t(o.offset) * item,
                                      size_t(e.geo.n) * item, 0, nullptr, nullptr),
             "copy_: clEnqueueCopyBuffer");
    return;
  }
  const std::string key = "copy_" + dtype_tag(s.dtype) + "_" + dtype_tag(o.dtype);
  cl_kernel k = cc.kernel(key, e.contiguous ? "copy_c" : "copy_s", [&] { return copy_source(s.dtype, o.dtype); });
  const size_t global = size_t(e.geo.n);
  cc.launch(k, {{sizeof e.geo, &e.geo}, {sizeof(cl_mem), &o.mem}, {sizeof(cl_mem), &s.mem}}, 1, &global, nullptr);
}

void copy_to_cpu(CallContext& cc, const sdk::TensorView& dst, const sdk::TensorView& src_view) {
  Operand s = cc.operand(src_view);
  const int64_t n = dst.numel();
  if (n == 0) return;
  const size_t item = dst.itemsize();
  Operand packed;
  packed.dtype = dst.dtype();
  packed.sizes.assign(dst.sizes(), dst.sizes() + dst.ndim());
  packed.strides.resize(packed.sizes.size());
  int64_t expected = 1;
  for (int d = dst.ndim() - 1; d >= 0; --d) {
    packed.strides[size_t(d)] = expected;
    expected *= packed.sizes[size_t(d)];
  }
  packed.mem = cc.temp_buffer(uint64_t(n) * item);
  const Elementwise e = elementwise(packed.sizes, {packed.strides, broadcast_strides(s, packed.sizes, "copy_")},
                                    {0, s.offset}, "copy_");
  const std::string key = "copy_" + dtype_tag(s.dtype) + "_" + dtype_tag(packed.dtype);
  cl_kernel k = cc.kernel(key, e.contiguous ? "copy_c" : "copy_s", [&] { return copy_source(s.dtype, packed.dtype); });
  const size_t global = size_t(e.geo.n);
  cc.launch(k, {{sizeof e.geo, &e.geo}, {sizeof(cl_mem), &packed.mem}, {sizeof(cl_mem), &s.mem}}, 1, &global, nullptr);
  std::vector<unsigned char> host(size_t(n) * item);
  check_cl(cl().clEnqueueReadBuffer(cc.queue, packed.mem, CL_TRUE, 0, host.size(), host.data(), 0, nullptr, nullptr),
           "copy_: reading the result to the CPU");
  auto* base = dst.host_ptr<unsigned char>();
  std::vector<int64_t> idx(size_t(dst.ndim()), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int d = 0; d < dst.ndim(); ++d) off += idx[size_t(d)] * dst.stride(d);
    std::memcpy(base + off * int64_t(item), host.data() + size_t(i) * item, item);
    for (int d = dst.ndim() - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < dst.size(d)) break;
      idx[size_t(d)] = 0;
    }
  }
}

void run_fill(const sdk::KernelCall& call, const KernelDef&) {
  CallContext cc(call);
  const sdk::TensorView dst_view =
      call.num_outputs() > 0 ? call.output(0) : call.input(op::fill_::tensor::self);
  Operand o = cc.operand(dst_view);
  if (o.numel == 0) return;
  ScalarArg value;
  constexpr int kValueAt = op::fill_::attr::value;
  if (call.num_attrs() > kValueAt) {
    if (o.dtype == TESSERA_DTYPE_BOOL)  // fill_(0.5) on bool is true: test against zero before any cast
      value = scalar_arg(TESSERA_DTYPE_INT32, 0, call.attr_double(kValueAt) != 0 ? 1 : 0, false);
    else
      value = scalar_arg(compute_dtype(o.dtype), call.attr_double(kValueAt), call.attr_int(kValueAt),
                         call.attr_is_floating(kValueAt));
  } else if (call.num_inputs() > 1 && call.input(1).defined()) {  // a tensor value: not in fill_'s schema
    unimplemented("fill_ with a tensor value");
  } else {
    throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, "fill_: no value attribute");
  }
  const Elementwise e = elementwise(o.sizes, {o.strides}, {o.offset}, call.op_name());
  const std::string key = "fill_" + dtype_tag(o.dtype);
  cl_kernel k = cc.kernel(key, e.contiguous ? "fill_c" : "fill_s", [&] { return fill_source(o.dtype); });
  const size_t global = size_t(e.geo.n);
  cc.launch(k, {{sizeof e.geo, &e.geo}, {sizeof(cl_mem), &o.mem}, {value.size, &value.v}}, 1, &global, nullptr);
}

// uniform_(self, from, to, seed, offset) / normal_(self, mean, std, seed, offset): one layout,
// read through normal_'s indices; the numbers depend only on (seed, offset + i) (Note [Generators]).
void run_random(const sdk::KernelCall& call, const KernelDef& def) {
  using A = op::normal_::attr;
  static_assert(op::uniform_::attr::from == int(A::mean) && op::uniform_::attr::to == int(A::std) &&
                op::uniform_::attr::seed == int(A::seed) && op::uniform_::attr::offset == int(A::offset));
  CallContext cc(call);
  const sdk::TensorView dst_view =
      call.num_outputs() > 0 ? call.output(0) : call.input(op::normal_::tensor::self);
  Operand o = cc.operand(dst_view);
  if (o.numel == 0) return;
  if (call.num_attrs() <= int(A::offset))
    throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT,
                     std::string(call.op_name()) + ": expected 4 attributes");
  const int32_t ct = compute_dtype(o.dtype);
  const ScalarArg a = scalar_arg(ct, call.attr_double(A::mean), 0, true);
  const ScalarArg b = scalar_arg(ct, call.attr_double(A::std), 0, true);
  const cl_ulong seed = cl_ulong(call.attr_int(A::seed)), offset = cl_ulong(call.attr_int(A::offset));
  const cl_int normal = std::strcmp(def.name, "normal") == 0 ? 1 : 0;
  // The second geometry is the row-major index of each element: the number it draws, whatever order
  // elementwise() walks the strided destination in.
  std::vector<int64_t> row_major(o.sizes.size());
  for (int64_t d = int64_t(o.sizes.size()) - 1, z = 1; d >= 0; --d) {
    row_major[size_t(d)] = z;
    z *= o.sizes[size_t(d)];
  }
  const Elementwise e = elementwise(o.sizes, {o.strides, row_major}, {o.offset, 0}, call.op_name());
  cl_kernel k = cc.kernel("random_" + dtype_tag(o.dtype), e.contiguous ? "random_c" : "random_s",
                          [&] { return random_source(o.dtype); });
  const size_t global = size_t(e.geo.n);
  cc.launch(k,
            {{sizeof e.geo, &e.geo},
             {sizeof(cl_mem), &o.mem},
             {sizeof seed, &seed},
             {sizeof offset, &offset},
             {a.size, &a.v},
             {b.size, &b.v},
             {sizeof normal, &normal}},
            1, &global, nullptr);
}

// ---------------------------------------------------------------- rows: reductions, softmax, layer_norm

// Splits the dims of `a` into kept (outer) and reduced (inner) ones. `out` has the kept dims, either
// in place (keepdim: same rank as `a`, size 1 at reduced dims) or squeezed out.
ClRGeo row_geometry(const Operand& a, const Operand& o, const std::vector<bool>& reduced, const char* what) {
  ClRGeo g{};
  const bool keepdim = o.ndim() == a.ndim();
  int64_t oi = 0;
  g.n_out = 1;
  g.n_in = 1;
  for (int64_t d = 0; d < a.ndim(); ++d) {
    if (reduced[size_t(d)]) {
      if (g.ndi >= kMaxDims) unimplemented(std::string(what) + ": too many reduced dims");
      g.isize[g.ndi] = a.sizes[size_t(d)];
      g.ist_a[g.ndi] = a.strides[size_t(d)];
      g.ist_o[g.ndi] = keepdim ? o.strides[size_t(d)] : 0;
      ++g.ndi;
      g.n_in *= a.sizes[size_t(d)];
      if (keepdim) ++oi;
    } else {
      if (g.ndo >= kMaxDims) unimplemented(std::string(what) + ": too many kept dims");
      if (oi >= o.ndim() || o.sizes[size_t(oi)] != a.sizes[size_t(d)])
        throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT,
                         std::string(what) + ": output shape does not match the kept dims of the input");
      g.osize[g.ndo] = a.sizes[size_t(d)];
      g.ost_a[g.ndo] = a.strides[size_t(d)];
      g.ost_o[g.ndo] = o.strides[size_t(oi)];
      ++g.ndo;
      g.n_out *= a.sizes[size_t(d)];
      ++oi;
    }
  }
  g.off_a = a.offset;
  g.off_o = o.offset;
  return g;
}

void run_reduce(const sdk::KernelCall& call, const KernelDef& def) {
  const char* op = def.name;
  CallContext cc(call);
  Operand o = cc.operand(call.output(0)), a = cc.operand(call.input(Reduce::tensor::self));
  if (def.has(kFloatingOnly) && !dtype_is_floating(o.dtype))
    unimplemented(std::string(call.op_name()) + ": " + op + " of " + dtype_tag(o.dtype));
  std::vector<bool> reduced(size_t(a.ndim()), true);
  constexpr int kDimAt = Reduce::attr::dim;
  if (call.num_attrs() > kDimAt && call.raw()->attrs[kDimAt].kind == TESSERA_VALUE_INT_LIST &&
      call.raw()->attrs[kDimAt].count > 0) {
    int count = 0;
    const int64_t* dims = call.attr_ints(kDimAt, &count);
    std::fill(reduced.begin(), reduced.end(), false);
    for (int i = 0; i < count; ++i) {
      int64_t d = dims[i] < 0 ? dims[i] + std::max<int64_t>(a.ndim(), 1) : dims[i];
      if (a.ndim() == 0 && d == 0) continue;
      if (d < 0 || d >= a.ndim())
        throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, std::string(call.op_name()) + ": dim " +
                                                              std::to_string(dims[i]) + " out of range for rank " +
                                                              std::to_string(a.ndim()));
      reduced[size_t(d)] = true;
    }
  }
  ClRGeo g = row_geometry(a, o, reduced, call.op_name());
  if (g.n_out == 0) return;
  if (g.n_in == 0 && def.has(kNoIdentity))
    throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, std::string(call.op_name()) +
                                                          ": cannot reduce over a zero-size dimension; "
                                                          "the operation has no identity");
  const bool grouped = g.n_in >= 2048 || (g.n_out < 256 && g.n_in >= 64);
  const std::string kname = std::string(op) + (grouped ? "_g" : "_s");
  const std::string key = std::string(op) + "_" + dtype_tag(a.dtype) + "_" + dtype_tag(o.dtype);
  cl_kernel k = cc.kernel(key, kname.c_str(), [&] { return reduce_source(a.dtype, o.dtype, op); });
  if (grouped) {
    const size_t global = size_t(g.n_out) * kReduceGroup, local = kReduceGroup;
    cc.launch(k, {{sizeof g, &g}, {sizeof(cl_mem), &o.mem}, {sizeof(cl_mem), &a.mem}}, 1, &global, &local);
  } else {
    const size_t global = size_t(g.n_out);
    cc.launch(k, {{sizeof g, &g}, {sizeof(cl_mem), &o.mem}, {sizeof(cl_mem), &a.mem}}, 1, &global, nullptr);
  }
}

void run_softmax(const sdk::KernelCall& call, const KernelDef& def) {
  const char* op = def.name;
  CallContext cc(call);
  Operand o = cc.operand(call.output(0)), a = cc.operand(call.input(Softmax::tensor::self));
  if (!dtype_is_floating(o.dtype) || !dtype_is_floating(a.dtype))
    unimplemented(std::string(call.op_name()) + ": " + dtype_tag(a.dtype) + " -> " + dtype_tag(o.dtype));
  if (o.numel == 0) return;
  if (a.ndim() == 0) {  // one row of one element
    a.sizes = o.sizes = {1};
    a.strides = o.strides = {1};
  }
  constexpr int kDimAt = Softmax::attr::dim;
  const int64_t given = call.num_attrs() > kDimAt ? call.attr_int(kDimAt) : -1;
  int64_t dim = given < 0 ? given + a.ndim() : given;
  if (dim < 0 || dim >= a.ndim())
    throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT,
                     std::string(call.op_name()) + ": dim " + std::to_string(given) + " out of range");
  std::vector<bool> reduced(size_t(a.ndim()), false);
  reduced[size_t(dim)] = true;
  // Same shape in and out: keepdim geometry.
  ClRGeo g = row_geometry(a, o, reduced, call.op_name());
  cl_kernel k = cc.kernel(std::string(op) + "_" + dtype_tag(a.dtype) + "_" + dtype_tag(o.dtype), op,
                          [&] { return softmax_source(a.dtype, o.dtype, op); });
  const size_t global = size_t(g.n_out) * kReduceGroup, local = kReduceGroup;
  cc.launch(k, {{sizeof g, &g}, {sizeof(cl_mem), &o.mem}, {sizeof(cl_mem), &a.mem}}, 1, &global, &local);
}

// layer_norm(Tensor input, int[] normalized_shape, Tensor? weight, Tensor? bias, float eps, ...)
void run_layer_norm(const sdk::KernelCall& call, const KernelDef&) {
  using T = op::layer_norm::tensor;
  using A = op::layer_norm::attr;
  if (call.num_outputs() != 1) unimplemented(std::string(call.op_name()) + ": more than one output");
  CallContext cc(call);
  Operand o = cc.operand(call.output(0)), a = cc.operand(call.input(T::input));
  if (!dtype_is_floating(a.dtype)) unimplemented(std::string(call.op_name()) + ": dtype " + dtype_tag(a.dtype));
  int count = 0;
  const int64_t* shape = call.attr_ints(A::normalized_shape, &count);
  const double eps =
      call.num_attrs() > A::eps && !call.attr_is_none(A::eps) ? call.attr_double(A::eps) : 1e-5;
  TESSERA_SDK_CHECK(count <= a.ndim(), std::string(call.op_name()) + ": normalized_shape has more dims than the input");
  for (int i = 0; i < count; ++i)
    TESSERA_SDK_CHECK(shape[i] == a.sizes[size_t(a.ndim() - count + i)],
                      std::string(call.op_name()) + ": normalized_shape does not match the input's last dims");
  if (o.numel == 0) return;
  std::vector<bool> reduced(size_t(a.ndim()), false);
  for (int i = 0; i < count; ++i) reduced[size_t(a.ndim() - count + i)] = true;
  ClRGeo g = row_geometry(a, o, reduced, call.op_name());
  Operand w, b;
  const bool has_w = call.num_inputs() > T::weight && call.input(T::weight).defined();
  const bool has_b = call.num_inputs() > T::bias && call.input(T::bias).defined();
  w.mem = b.mem = a.mem;
  w.dtype = b.dtype = a.dtype;
  auto inner = [&](const Operand& p, int64_t* st, int64_t* off) {
    TESSERA_SDK_CHECK(p.ndim() == count, std::string(call.op_name()) + ": weight/bias must have normalized_shape");
    for (int i = 0; i < count; ++i) st[i] = p.sizes[size_t(i)] == 1 ? 0 : p.strides[size_t(i)];
    *off = p.offset;
  };
  if (has_w) {
    w = cc.operand(call.input(T::weight));
    inner(w, g.ist_w, &g.off_w);
  }
  if (has_b) {
    b = cc.operand(call.input(T::bias));
    inner(b, g.ist_b, &g.off_b);
  }
  const int32_t ct = a.dtype == TESSERA_DTYPE_FLOAT64 ? TESSERA_DTYPE_FLOAT64 : TESSERA_DTYPE_FLOAT32;
  const ScalarArg eps_arg = scalar_arg(ct, eps, 0, true);
  const cl_int hw = has_w, hb = has_b;
  const std::string key = "layer_norm_" + dtype_tag(a.dtype) + "_" + dtype_tag(w.dtype) + "_" + dtype_tag(b.dtype) +
                          "_" + dtype_tag(o.dtype);
  cl_kernel k = cc.kernel(key, "layer_norm", [&] { return layer_norm_source(a.dtype, w.dtype, b.dtype, o.dtype); });
  const size_t global = size_t(g.n_out) * kReduceGroup, local = kReduceGroup;
  cc.launch(k,
            {{sizeof g, &g}, {sizeof(cl_mem), &o.mem}, {sizeof(cl_mem), &a.mem}, {sizeof(cl_mem), &w.mem},
             {sizeof(cl_mem), &b.mem}, {eps_arg.size, &eps_arg.v}, {sizeof hw, &hw}, {sizeof hb, &hb}},
            1, &global, &local);
}

// ---------------------------------------------------------------- matmul

// matmul / mm / bmm with NumPy semantics: 1-D operands, broadcast batch dims, any strides.
void run_matmul(const sdk::KernelCall& call, const KernelDef&) {
  using T = op::matmul::tensor;
  CallContext cc(call);
  Operand o = cc.operand(call.output(0)), a = cc.operand(call.input(T::self)),
          b = cc.operand(call.input(T::other));
  if (!dtype_is_floating(o.dtype) || a.dtype != o.dtype || b.dtype != o.dtype)
    unimplemented(std::string(call.op_name()) + ": dtypes " + dtype_tag(a.dtype) + " x " + dtype_tag(b.dtype) +
                  " -> " + dtype_tag(o.dtype) + " (floating, all equal)");
  TESSERA_SDK_CHECK(a.ndim() >= 1 && b.ndim() >= 1, std::string(call.op_name()) + ": both operands need >= 1 dim");
  const bool a1 = a.ndim() == 1, b1 = b.ndim() == 1;
  ClMGeo g{};
  g.M = a1 ? 1 : a.sizes[size_t(a.ndim() - 2)];
  g.K = a.sizes[size_t(a.ndim() - 1)];
  g.sam = a1 ? 0 : a.strides[size_t(a.ndim() - 2)];
  g.sak = a.strides[size_t(a.ndim() - 1)];
  const int64_t kb = b1 ? b.sizes[0] : b.sizes[size_t(b.ndim() - 2)];
  TESSERA_SDK_CHECK(kb == g.K, std::string(call.op_name()) + ": inner sizes differ (" + std::to_string(g.K) + " vs " +
                                   std::to_string(kb) + ")");
  g.N = b1 ? 1 : b.sizes[size_t(b.ndim() - 1)];
  g.sbk = b1 ? b.strides[0] : b.strides[size_t(b.ndim() - 2)];
  g.sbn = b1 ? 0 : b.strides[size_t(b.ndim() - 1)];
  const int64_t nbd = o.ndim() - (a1 ? 0 : 1) - (b1 ? 0 : 1);
  TESSERA_SDK_CHECK(nbd >= 0, std::string(call.op_name()) + ": output rank does not fit the operands");
  if (nbd > kMaxDims) unimplemented(std::string(call.op_name()) + ": too many batch dims");
  g.som = a1 ? 0 : o.strides[size_t(o.ndim() - (b1 ? 1 : 2))];
  g.son = b1 ? 0 : o.strides[size_t(o.ndim() - 1)];
  g.nbd = nbd;
  g.nb = 1;
  std::vector<int64_t> bsizes(o.sizes.begin(), o.sizes.begin() + nbd);
  auto batch_strides = [&](const Operand& p, bool one_d, int64_t* st) {
    if (one_d) return;  // a 1-D operand has no batch dims: stride 0
    const int64_t pb = p.ndim() - 2;
    for (int64_t d = 0; d < pb; ++d) {
      const int64_t od = nbd - pb + d;
      TESSERA_SDK_CHECK(od >= 0 && (p.sizes[size_t(d)] == bsizes[size_t(od)] || p.sizes[size_t(d)] == 1),
                        std::string(call.op_name()) + ": batch dims do not broadcast");
      st[od] = p.sizes[size_t(d)] == 1 ? 0 : p.strides[size_t(d)];
    }
  };
  batch_strides(a, a1, g.bst_a);
  batch_strides(b, b1, g.bst_b);
  for (int64_t d = 0; d < nbd; ++d) {
    g.bsize[d] = bsizes[size_t(d)];
    g.bst_o[d] = o.strides[size_t(d)];
    g.nb *= bsizes[size_t(d)];
  }
  g.off_a = a.offset;
  g.off_b = b.offset;
  g.off_o = o.offset;
  if (o.numel == 0) return;
  if (g.K == 0) {  // empty sum: zeros
    ScalarArg zero = scalar_arg(compute_dtype(o.dtype), 0.0, 0, true);
    const Elementwise e = elementwise(o.sizes, {o.strides}, {o.offset}, call.op_name());
    cl_kernel k = cc.kernel("fill_" + dtype_tag(o.dtype), e.contiguous ? "fill_c" : "fill_s",
                            [&] { return fill_source(o.dtype); });
    const size_t global = size_t(e.geo.n);
    cc.launch(k, {{sizeof e.geo, &e.geo}, {sizeof(cl_mem), &o.mem}, {zero.size, &zero.v}}, 1, &global, nullptr);
    return;
  }
  const std::string key = "matmul_" + dtype_tag(a.dtype) + "_" + dtype_tag(b.dtype) + "_" + dtype_tag(o.dtype);
  cl_kernel k = cc.kernel(key, "matmul", [&] { return matmul_source(a.dtype, b.dtype, o.dtype); });
  const size_t global[3] = {size_t((g.N + kMatmulTile - 1) / kMatmulTile) * kMatmulThreads,
                            size_t((g.M + kMatmulTile - 1) / kMatmulTile) * kMatmulThreads, size_t(g.nb)};
  const size_t local[3] = {kMatmulThreads, kMatmulThreads, 1};
  cc.launch(k, {{sizeof g, &g}, {sizeof(cl_mem), &o.mem}, {sizeof(cl_mem), &a.mem}, {sizeof(cl_mem), &b.mem}}, 3,
            global, local);
}

}  // namespace

void register_kernels(const sdk::Host& host) {
  const uint64_t f64 = TESSERA_DTYPE_BIT(TESSERA_DTYPE_FLOAT64);
  const uint64_t no_f64 = Backend::instance().all_devices_have_fp64() ? ~uint64_t(0) : ~f64;
  const uint64_t all = TESSERA_DTYPE_MASK_ALL & no_f64;
  const uint64_t numeric = (TESSERA_DTYPE_MASK_FLOATING | TESSERA_DTYPE_MASK_INTEGRAL) & no_f64;
  const uint64_t floating = TESSERA_DTYPE_MASK_FLOATING & no_f64;

  // A refused registration (an op the contract does not define) fails plugin init: it is not caught.
  // Names come from the contract (tessera/op_names.h); each kernel's KernelDef has static storage
  // (it is the kernel's user data) and says what the kernel does beyond its OpenCL name.
  struct Entry {
    const char* op;
    KernelDef def;
  };
  int registered = 0;
  auto reg = [&](uint64_t mask, tessera_kernel_fn_t fn, const auto& entries) {
    for (const Entry& e : entries) {
      host.register_kernel(e.op, mask, fn, const_cast<KernelDef*>(&e.def));
      ++registered;
    }
  };
  // The lists are static: the host keeps the KernelDef pointers for the plugin's lifetime.
  static const Entry fill[] = {{op::fill_::name, {"fill", kPlain}}};
  static const Entry copy[] = {{op::copy_::name, {"copy", kPlain}}};
  static const Entry binary_ops[] = {{op::add_Tensor::name, {"add", kAlpha}},
                                     {op::sub_Tensor::name, {"sub", kAlpha}},
                                     {op::mul_Tensor::name, {"mul", kPlain}},
                                     {op::div_Tensor::name, {"div", kTrueDivide}},
                                     {op::maximum::name, {"maximum", kPlain}},
                                     {op::minimum::name, {"minimum", kPlain}},
                                     {op::add__Tensor::name, {"add", kAlpha}},
                                     {op::mul__Tensor::name, {"mul", kPlain}},
                                     {op::eq_Tensor::name, {"eq", kCompare}},
                                     {op::ne_Tensor::name, {"ne", kCompare}},
                                     {op::lt_Tensor::name, {"lt", kCompare}},
                                     {op::le_Tensor::name, {"le", kCompare}},
                                     {op::gt_Tensor::name, {"gt", kCompare}},
                                     {op::ge_Tensor::name, {"ge", kCompare}},
                                     {op::logical_and::name, {"logical_and", kCompare}},
                                     {op::logical_or::name, {"logical_or", kCompare}}};
  static const Entry where[] = {{op::where_self::name, {"where", kPlain}}};
  static const Entry unary_any[] = {
      {op::neg::name, {"neg", kPlain}}, {op::abs::name, {"abs", kPlain}}, {op::relu::name, {"relu", kPlain}}};
  static const Entry unary_floating[] = {{op::exp::name, {"exp", kFloatingOnly}},
                                         {op::log::name, {"log", kFloatingOnly}},
                                         {op::sqrt::name, {"sqrt", kFloatingOnly}},
                                         {op::rsqrt::name, {"rsqrt", kFloatingOnly}},
                                         {op::sin::name, {"sin", kFloatingOnly}},
                                         {op::cos::name, {"cos", kFloatingOnly}},
                                         {op::tanh::name, {"tanh", kFloatingOnly}},
                                         {op::sigmoid::name, {"sigmoid", kFloatingOnly}},
                                         {op::gelu::name, {"gelu", kFloatingOnly | kApproximate}},
                                         {op::silu::name, {"silu", kFloatingOnly}},
                                         {op::erf::name, {"erf", kFloatingOnly}},
                                         {op::tan::name, {"tan", kFloatingOnly}},
                                         {op::asin::name, {"asin", kFloatingOnly}},
                                         {op::acos::name, {"acos", kFloatingOnly}},
                                         {op::atan::name, {"atan", kFloatingOnly}},
                                         {op::sinh::name, {"sinh", kFloatingOnly}},
                                         {op::cosh::name, {"cosh", kFloatingOnly}},
                                         {op::asinh::name, {"asinh", kFloatingOnly}},
                                         {op::acosh::name, {"acosh", kFloatingOnly}},
                                         {op::atanh::name, {"atanh", kFloatingOnly}},
                                         {op::log1p::name, {"log1p", kFloatingOnly}},
                                         {op::expm1::name, {"expm1", kFloatingOnly}},
                                         {op::reciprocal::name, {"reciprocal", kFloatingOnly}},
                                         {op::floor::name, {"floor", kFloatingOnly}},
                                         {op::ceil::name, {"ceil", kFloatingOnly}},
                                         {op::trunc::name, {"trunc", kFloatingOnly}},
                                         {op::round::name, {"round", kFloatingOnly}},
                                         {op::sign::name, {"sign", kFloatingOnly}},
                                         {op::softsign::name, {"softsign", kFloatingOnly}},
                                         {op::hardsigmoid::name, {"hardsigmoid", kFloatingOnly}},
                                         {op::hardswish::name, {"hardswish", kFloatingOnly}},
                                         {op::mish::name, {"mish", kFloatingOnly}}};
  static const Entry reduce_numeric[] = {{op::sum::name, {"sum", kPlain}},
                                         {op::amax::name, {"amax", kNoIdentity}},
                                         {op::amin::name, {"amin", kNoIdentity}}};
  static const Entry reduce_floating[] = {{op::mean::name, {"mean", kFloatingOnly}}};
  static const Entry softmax_ops[] = {{op::softmax::name, {"softmax", kPlain}},
                                      {op::log_softmax::name, {"log_softmax", kPlain}}};
  static const Entry layer_norm[] = {{op::layer_norm::name, {"layer_norm", kPlain}}};
  static const Entry matmul[] = {{op::matmul::name, {"matmul", kPlain}}};
  static const Entry random[] = {{op::uniform_::name, {"uniform", kFloatingOnly}},
                                 {op::normal_::name, {"normal", kFloatingOnly}}};
  reg(all, &adapt<run_fill>, fill);
  reg(all, &adapt<run_copy>, copy);
  reg(all, &adapt<run_binary>, binary_ops);
  reg(all, &adapt<run_where>, where);
  reg(numeric, &adapt<run_unary>, unary_any);
  reg(floating, &adapt<run_unary>, unary_floating);
  reg(numeric, &adapt<run_reduce>, reduce_numeric);
  reg(floating, &adapt<run_reduce>, reduce_floating);
  reg(floating, &adapt<run_softmax>, softmax_ops);
  reg(floating, &adapt<run_layer_norm>, layer_norm);
  reg(floating, &adapt<run_matmul>, matmul);
  reg(floating, &adapt<run_random>, random);

  log_info("registered " + std::to_string(registered) + " kernels");
}

}  // namespace tessera::opencl
