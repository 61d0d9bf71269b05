// fill_, copy_, clone, uniform_, normal_, arange.
#include "kernels.h"
#include "tessera/random.h"

namespace tessera::cpu {
namespace {

tessera_status_t fill_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    const tessera_tensor_t* self =
        c.num_outputs() > 0 ? c.raw()->outputs[0] : c.raw()->inputs[op::fill_::tensor::self];
    OwnedTensor v = c.num_inputs() > 1 && c.raw()->inputs[1]
                        ? OwnedTensor(nullptr, 0, self->dtype)
                        : scalar_tensor(c, op::fill_::attr::value, self->dtype);
    // A 0-dim value tensor (PyTorch's fill_.Tensor): not in the contract's fill_ schema, so inputs[1]
    // has no op_names.h constant; kept for a caller that defines such an op.
    if (c.num_inputs() > 1 && c.raw()->inputs[1]) {
      copy_tensor(v.raw(), c.raw()->inputs[1]);
    }
    copy_tensor(self, v.raw());
  });
}

tessera_status_t copy_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    using T = op::copy_::tensor;
    const tessera_tensor_t* dst = c.num_outputs() > 0 ? c.raw()->outputs[0] : c.raw()->inputs[T::self];
    const tessera_tensor_t* src = c.raw()->inputs[c.num_inputs() > T::src ? T::src : T::self];
    copy_tensor(dst, src);
  });
}

// clone / contiguous / _to_copy: the output is a fresh tensor; the input is self.
static_assert(op::contiguous::tensor::self == int(op::clone::tensor::self) &&
              op::_to_copy::tensor::self == int(op::clone::tensor::self));
tessera_status_t clone_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    copy_tensor(c.raw()->outputs[0], c.raw()->inputs[op::clone::tensor::self]);
  });
}

enum class RandomKind { Uniform, Normal };

// Attributes: (a, b, seed, offset) with (a, b) = (from, to) for uniform_, (mean, std) for normal_:
// one layout, read through normal_'s indices (tessera/op_names.h).
using RandomAttr = op::normal_::attr;
static_assert(op::uniform_::attr::from == int(RandomAttr::mean) &&
              op::uniform_::attr::to == int(RandomAttr::std) &&
              op::uniform_::attr::seed == int(RandomAttr::seed) &&
              op::uniform_::attr::offset == int(RandomAttr::offset));

tessera_status_t random_kernel(void* user_data, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    const RandomKind kind = RandomKind(reinterpret_cast<intptr_t>(user_data));
    static_assert(op::uniform_::tensor::self == int(op::normal_::tensor::self));
    const tessera_tensor_t* self =
        c.num_outputs() > 0 ? c.raw()->outputs[0] : c.raw()->inputs[op::normal_::tensor::self];
    TESSERA_SDK_CHECK(dtype_is_floating(self->dtype), std::string(kind == RandomKind::Uniform ? "uniform_" : "normal_") +
                                                          ": tensor has dtype " + dtype_name(self->dtype) +
                                                          "; expected a floating dtype");
    using A = RandomAttr;
    const int na = c.num_attrs();
    TESSERA_SDK_CHECK(na > A::offset, std::string(c.op_name()) + " needs its " +
                                          std::to_string(A::offset + 1) + " attributes (" +
                                          (kind == RandomKind::Uniform ? "from, to" : "mean, std") +
                                          ", seed, offset), got " + std::to_string(na));
    const double a = c.attr_double(A::mean);
    const double b = c.attr_double(A::std);
    const uint64_t seed = uint64_t(c.attr_int(A::seed));
    const uint64_t offset = uint64_t(c.attr_int(A::offset));
    TempList temps;
    const bool contig = TensorView(self).is_contiguous();
    const tessera_tensor_t* target = self;
    if (!contig) {
      temps.emplace_back(self->sizes, self->ndim, self->dtype);
      target = temps.back().raw();
    }
    char* base = static_cast<char*>(target->data) + target->byte_offset;
    visit(self->dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (is_float_v<T>) {
        T* p = reinterpret_cast<T*>(base);
        parallel_for(0, target->numel, 16384, [&](int64_t s, int64_t e) {
          for (int64_t i = s; i < e; ++i) {
            const double u = kind == RandomKind::Uniform ? double(philox::uniform(seed, offset + uint64_t(i)))
                                                         : double(philox::normal(seed, offset + uint64_t(i)));
            const double v = kind == RandomKind::Uniform ? a + (b - a) * u : a + b * u;
            Elem<T>::store(p + i, acc_t<T>(v));
          }
        });
      }
    });
    if (!contig) copy_tensor(self, target);
  });
}

tessera_status_t arange_kernel(void*, const tessera_kernel_call_t* call) {
  return guarded(call, [&](const KernelCall& c) {
    const tessera_tensor_t* out = c.raw()->outputs[0];
    // arange(start, end, step, dtype): the shape rule has sized the output from them; end is not read.
    using A = op::arange::attr;
    TESSERA_SDK_CHECK(c.num_attrs() > A::step, std::string(c.op_name()) +
                                                   " needs start, end and step attributes, got " +
                                                   std::to_string(c.num_attrs()));
    const double start = c.attr_double(A::start), step = c.attr_double(A::step);
    const int64_t istart = c.attr_int(A::start), istep = c.attr_int(A::step);
    char* base = static_cast<char*>(out->data) + out->byte_offset;
    const int64_t st = out->ndim == 1 ? out->strides[0] : 1;
    visit(out->dtype, [&](auto tag) {
      using T = decltype(tag);
      T* p = reinterpret_cast<T*>(base);
      parallel_for(0, out->numel, 65536, [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) {
          if constexpr (is_float_v<T>) Elem<T>::store(p + i * st, acc_t<T>(start + double(i) * step));
          else Elem<T>::store(p + i * st, acc_t<T>(istart + i * istep));
        }
      });
    });
  });
}

void* tag(int v) { return reinterpret_cast<void*>(intptr_t(v)); }

}  // namespace

void register_creation_kernels(Registrar& r) {
  r.add(op::fill_::name, kMaskAll, &fill_kernel);
  r.add(op::copy_::name, kMaskAll, &copy_kernel);
  r.add(op::clone::name, kMaskAll, &clone_kernel);
  r.add(op::contiguous::name, kMaskAll, &clone_kernel);
  r.add(op::_to_copy::name, kMaskAll, &clone_kernel);
  r.add(op::uniform_::name, kMaskFloat, &random_kernel, tag(int(RandomKind::Uniform)));
  r.add(op::normal_::name, kMaskFloat, &random_kernel, tag(int(RandomKind::Normal)));
  r.add(op::arange::name, kMaskAll, &arange_kernel);
}

}  // namespace tessera::cpu
