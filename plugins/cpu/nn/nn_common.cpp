#include "nn_common.h"

#include <cstring>

#include "../src/isa.h"

namespace tessera::cpu::nn {

const NnIsaTable& nn_isa() {
  switch (capability()) {
    case Capability::AVX512: return nn_isa_avx512();
    case Capability::AVX2: return nn_isa_avx2();
    default: return nn_isa_default();
  }
}

std::string shape_str(const tessera_tensor_t* t) {
  std::string s = "[";
  for (int i = 0; i < t->ndim; ++i) s += (i ? ", " : "") + std::to_string(t->sizes[i]);
  return s + "]";
}

void load_f32(const void* p, int32_t dtype, int64_t n, int64_t stride, float* dst) {
  const auto& isa = nn_isa();
  switch (dtype) {
    case TESSERA_DTYPE_FLOAT32: {
      const float* s = static_cast<const float*>(p);
      if (stride == 1) {
        std::memcpy(dst, s, size_t(n) * 4);
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      }
      return;
    }
    case TESSERA_DTYPE_BFLOAT16: {
      const uint16_t* s = static_cast<const uint16_t*>(p);
      if (stride == 1) {
        isa.bf16_to_f32(s, dst, n);
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i * stride]);
      }
      return;
    }
    case TESSERA_DTYPE_FLOAT16: {
      const uint16_t* s = static_cast<const uint16_t*>(p);
      if (stride == 1) {
        isa.f16_to_f32(s, dst, n);
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(s[i * stride]);
      }
      return;
    }
    case TESSERA_DTYPE_FLOAT64: {
      const double* s = static_cast<const double*>(p);
      for (int64_t i = 0; i < n; ++i) dst[i] = float(s[i * stride]);
      return;
    }
    default:
      fail(std::string("cpu nn: dtype ") + dtype_name(dtype) + " is not floating; expected f16, bf16, f32 or f64");
  }
}

void store_f32(const float* src, void* p, int32_t dtype, int64_t n, int64_t stride) {
  const auto& isa = nn_isa();
  switch (dtype) {
    case TESSERA_DTYPE_FLOAT32: {
      float* d = static_cast<float*>(p);
      if (stride == 1) {
        if (d != src) std::memcpy(d, src, size_t(n) * 4);
      } else {
        for (int64_t i = 0; i < n; ++i) d[i * stride] = src[i];
      }
      return;
    }
    case TESSERA_DTYPE_BFLOAT16: {
      uint16_t* d = static_cast<uint16_t*>(p);
      if (stride == 1) {
        isa.f32_to_bf16(src, d, n);
      } else {
        for (int64_t i = 0; i < n; ++i) d[i * stride] = float_to_bf16(src[i]);
      }
      return;
    }
    case TESSERA_DTYPE_FLOAT16: {
      uint16_t* d = static_cast<uint16_t*>(p);
      if (stride == 1) {
        isa.f32_to_f16(src, d, n);
      } else {
        for (int64_t i = 0; i < n; ++i) d[i * stride] = float_to_half(src[i]);
      }
      return;
    }
    case TESSERA_DTYPE_FLOAT64: {
      double* d = static_cast<double*>(p);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = src[i];
      return;
    }
    default:
      fail(std::string("cpu nn: dtype ") + dtype_name(dtype) + " is not floating; expected f16, bf16, f32 or f64");
  }
}

const tessera_tensor_t* contiguous(const tessera_tensor_t* t, TempList& holder) {
  if (!t || TensorView(t).is_contiguous()) return t;
  holder.emplace_back(t->sizes, t->ndim, t->dtype);
  copy_tensor(holder.back().raw(), t);
  return holder.back().raw();
}

bool channels_last_dense(const tessera_tensor_t* t) {
  if (t->ndim != 4) return false;
  int64_t expected = 1;
  for (int d : {1, 3, 2, 0}) {
    if (t->sizes[d] == 1) continue;
    if (t->strides[d] != expected) return false;
    expected *= t->sizes[d];
  }
  return true;
}

bool channels_last_only(const tessera_tensor_t* t) {
  return t->ndim == 4 && TensorView(t).numel() > 0 && !TensorView(t).is_contiguous() && channels_last_dense(t);
}

void run_via_f32(const KernelCall& call, void (*fn)(const KernelCall&)) {
  const tessera_kernel_call_t* raw = call.raw();
  TempList holder;
  std::vector<const tessera_tensor_t*> inputs(size_t(raw->num_inputs)), outputs(size_t(raw->num_outputs));
  for (int i = 0; i < raw->num_inputs; ++i) {
    const tessera_tensor_t* t = raw->inputs[i];
    inputs[size_t(i)] = t && dtype_is_floating(t->dtype) ? cast_if_needed(t, TESSERA_DTYPE_FLOAT32, holder) : t;
  }
  for (int i = 0; i < raw->num_outputs; ++i) {
    const tessera_tensor_t* t = raw->outputs[i];
    if (dtype_is_floating(t->dtype) && t->dtype != TESSERA_DTYPE_FLOAT32) {
      holder.emplace_back(t->sizes, t->ndim, TESSERA_DTYPE_FLOAT32);
      outputs[size_t(i)] = holder.back().raw();
    } else {
      outputs[size_t(i)] = t;
    }
  }
  tessera_kernel_call_t c = *raw;
  c.inputs = inputs.data();
  c.outputs = outputs.data();
  fn(KernelCall(&c));
  for (int i = 0; i < raw->num_outputs; ++i)
    if (outputs[size_t(i)] != raw->outputs[i]) copy_tensor(raw->outputs[i], outputs[size_t(i)]);
}

void attr_pair(const KernelCall& call, int index, const char* name, int64_t out[2], const int64_t* fallback) {
  int count = 0;
  const tessera_value_t& v = call.attr(index);
  if (v.kind == TESSERA_VALUE_INT) {
    out[0] = out[1] = v.u.i;
    return;
  }
  const int64_t* p = v.kind == TESSERA_VALUE_INT_LIST ? call.attr_ints(index, &count) : nullptr;
  if (count == 0 && fallback) {
    out[0] = fallback[0];
    out[1] = fallback[1];
    return;
  }
  if (count == 1) {
    out[0] = out[1] = p[0];
    return;
  }
  if (count != 2)
    fail(std::string(call.op_name()) + ": " + name + " has " + std::to_string(count) +
         " entries; expected 1 or 2 (one per spatial dim)");
  out[0] = p[0];
  out[1] = p[1];
}

namespace {
std::string& sdpa_path_storage() {
  static std::string s;
  return s;
}
}  // namespace
const std::string& sdpa_forced_path() { return sdpa_path_storage(); }
void set_sdpa_forced_path(const char* value) { sdpa_path_storage() = value ? value : ""; }

}  // namespace tessera::cpu::nn
