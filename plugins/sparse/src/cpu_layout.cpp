#include "cpu_layout.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "cpu_kernels_isa.h"
#include "tessera/cpu_features.h"

namespace tessera::sparse_cpu {

size_t element_size(ElementType t) {
  switch (t) {
    case ElementType::F32: return 4;
    case ElementType::BF16: return 2;
    case ElementType::I8: return 1;
  }
  return 0;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "default";
    case Isa::AVX2: return "avx2";
    case Isa::AVX512: return "avx512";
  }
  return "?";
}

size_t CpuLayout::bytes() const {
  return size_t(np) * size_t(kp / 2) * element_size(type) + size_t(np) * size_t(kp / 8);
}

namespace {

// The SDK's probe (Note [CPU feature probe] in tessera/cpu_features.h), as the loader and the CPU
// plugin read it.
Isa max_isa() {
  static const tessera::sdk::CpuFeatures f = tessera::sdk::CpuFeatures::detect();
  if (f.has("avx512f") && f.has("avx512bw") && f.has("avx512vl") && f.has("avx512bf16") && f.has("avx512vbmi2") &&
      f.has("avx512vnni") && f.has("fma"))
    return Isa::AVX512;
  if (f.has("avx2") && f.has("fma")) return Isa::AVX2;
  return Isa::Scalar;
}

bool is_zero(const void* dense, ElementType type, size_t i) {
  switch (type) {
    case ElementType::F32: {
      float v;
      std::memcpy(&v, static_cast<const char*>(dense) + 4 * i, 4);
      return v == 0.f;
    }
    case ElementType::BF16: {
      uint16_t v;
      std::memcpy(&v, static_cast<const char*>(dense) + 2 * i, 2);
      return (v & 0x7fffu) == 0;
    }
    case ElementType::I8: return static_cast<const int8_t*>(dense)[i] == 0;
  }
  return false;
}

}  // namespace

bool select_isa(const std::string& requested, Isa* out, std::string* error) {
  const Isa best = max_isa();
  if (requested.empty()) {
    *out = best;
    return true;
  }
  tessera::sdk::CpuCapability level{};  // the SDK's one parser of the variable (cpu_features.h)
  if (!tessera::sdk::parse_cpu_capability(requested, &level, error)) return false;
  const Isa want = level == tessera::sdk::CpuCapability::AVX512 ? Isa::AVX512
                   : level == tessera::sdk::CpuCapability::AVX2 ? Isa::AVX2
                                                                : Isa::Scalar;
  if (int(want) > int(best)) {
    *error = std::string("TESSERA_CPU_CAPABILITY=") + requested + " asks for more than this CPU has (best: " +
             isa_name(best) + ", which for the sparse kernels needs AVX-512 F/BW/VL/BF16/VBMI2/VNNI)";
    return false;
  }
  *out = want;
  return true;
}

Isa detected_isa() {
  static const Isa isa = [] {
    const char* env = secure_getenv("TESSERA_CPU_CAPABILITY");
    Isa chosen;
    std::string error;
    // An impossible request is reported by the CPU plugin; the kernels then run at the best level.
    if (!select_isa(env ? env : "", &chosen, &error)) chosen = max_isa();
    return chosen;
  }();
  return isa;
}

CpuLayout* build_layout(const RowSource& rows, ElementType type, int64_t n, int64_t k, std::string* error) {
  if (n < 0 || k < 0 || n > (int64_t(1) << 40) || k > (int64_t(1) << 40)) {
    *error = "a 2:4 weight needs sizes in [0, 2^40], got (" + std::to_string(n) + ", " + std::to_string(k) + ")";
    return nullptr;
  }
  const int64_t kp = (k + 63) / 64 * 64, np = (n + 3) / 4 * 4;
  const size_t es = element_size(type);
  size_t value_bytes = 0, mask_bytes = 0, row_bytes = 0, total = 0;
  if (__builtin_mul_overflow(size_t(np), size_t(kp / 2) * es, &value_bytes) ||
      __builtin_mul_overflow(size_t(np), size_t(kp / 8), &mask_bytes) ||
      __builtin_mul_overflow(size_t(k), es, &row_bytes) ||
      __builtin_add_overflow(size_t(128) + (value_bytes + 63) / 64 * 64, mask_bytes, &total)) {
    *error = "a 2:4 weight of (" + std::to_string(n) + ", " + std::to_string(k) + ") overflows the address space";
    return nullptr;
  }
  uint8_t* block = static_cast<uint8_t*>(std::aligned_alloc(64, (total + 63) / 64 * 64));
  if (!block) {
    *error = "out of memory for a 2:4 weight of " + std::to_string(total) + " bytes";
    return nullptr;
  }
  static_assert(sizeof(CpuLayout) <= 128);
  auto* l = new (block) CpuLayout;
  l->type = type;
  l->n = n;
  l->k = k;
  l->kp = kp;
  l->np = np;
  l->values = block + 128;
  l->mask = reinterpret_cast<uint64_t*>(block + 128 + (value_bytes + 63) / 64 * 64);
  std::memset(l->values, 0, value_bytes);
  std::memset(l->mask, 0, mask_bytes);
  std::vector<uint8_t> row(row_bytes + 1);
  for (int64_t r = 0; r < np; ++r) {
    if (r < n) rows(r, row.data());
    uint64_t* mask = l->mask + (r / 4) * 4 * (kp / 64) + r % 4;
    for (int64_t g = 0; g < kp / 4; ++g) {
      int kept[2] = {-1, -1};
      int count = 0;
      for (int i = 0; i < 4 && r < n; ++i) {
        const int64_t pos = 4 * g + i;
        if (pos >= k || is_zero(row.data(), type, size_t(pos))) continue;
        if (count == 2) {
          *error = "weight is not 2:4 sparse: row " + std::to_string(r) + ", group " + std::to_string(g) +
                   " (columns " + std::to_string(4 * g) + ".." + std::to_string(std::min(4 * g + 3, k - 1)) +
                   ") has more than two non-zeros; prune it first (tessera::sparse::prune_2_4)";
          std::free(block);
          return nullptr;
        }
        kept[count++] = i;
      }
      for (int i = 0; i < 4 && count < 2; ++i)
        if (kept[0] != i && kept[1] != i) kept[count++] = i;
      if (kept[0] > kept[1]) std::swap(kept[0], kept[1]);
      for (int j = 0; j < 2; ++j) {
        const int64_t pos = 4 * g + kept[j];
        mask[(pos / 64) * 4] |= uint64_t(1) << (pos % 64);
        if (r < n && pos < k)
          std::memcpy(const_cast<uint8_t*>(l->value_at(r, 2 * g + j)), row.data() + size_t(pos) * es, es);
      }
    }
  }
  return l;
}

CpuLayout* build_layout(const void* dense, ElementType type, int64_t n, int64_t k, std::string* error) {
  const size_t es = element_size(type);
  return build_layout(
      [&](int64_t r, void* row) {
        std::memcpy(row, static_cast<const char*>(dense) + size_t(r) * size_t(k) * es, size_t(k) * es);
      },
      type, n, k, error);
}

void linear_f32(const float* x, int64_t batch, const CpuLayout& w, const float* bias, float* y, Isa isa) {
  switch (isa) {
    case Isa::AVX512: return isa_avx512::linear_f32(x, batch, w, bias, y);
    case Isa::AVX2: return isa_avx2::linear_f32(x, batch, w, bias, y);
    case Isa::Scalar: return isa_scalar::linear_f32(x, batch, w, bias, y);
  }
}

void linear_bf16(const uint16_t* x, int64_t batch, const CpuLayout& w, const uint16_t* bias, uint16_t* y, Isa isa) {
  switch (isa) {
    case Isa::AVX512: return isa_avx512::linear_bf16(x, batch, w, bias, y);
    case Isa::AVX2: return isa_avx2::linear_bf16(x, batch, w, bias, y);
    case Isa::Scalar: return isa_scalar::linear_bf16(x, batch, w, bias, y);
  }
}

void linear_i8(const int8_t* x, int64_t batch, const CpuLayout& w, const int8_t* bias, int8_t* y, Isa isa) {
  switch (isa) {
    case Isa::AVX512: return isa_avx512::linear_i8(x, batch, w, bias, y);
    case Isa::AVX2: return isa_avx2::linear_i8(x, batch, w, bias, y);
    case Isa::Scalar: return isa_scalar::linear_i8(x, batch, w, bias, y);
  }
}

}  // namespace tessera::sparse_cpu
