// The two GEMMs of the bf16 flash-attention kernel on AVX-512 BF16 dot products (vdpbf16ps: bf16
// pairs multiplied and summed into f32). Note [bf16 flash attention] in attention.cpp.
#pragma once
#include <cstdint>

namespace tessera::cpu::nn {

struct FlashBf16Kernels {
  // s[i][j] = sum_p dot(q[i][p], k[p][j]) for i < mq, j < nk (f32, overwritten). q: rows of e2
  // bf16 pairs (ldq pairs apart); k: e2 rows of key pairs, key j at k[p * ldk + j]. nk % 16 == 0.
  void (*qk)(int64_t mq, int64_t nk, int64_t e2, const uint32_t* q, int64_t ldq, const uint32_t* k, int64_t ldk,
             float* s, int64_t lds);
  // o[i][c] += sum_p dot(pr[i][p], v[p][c]) for i < mq, c < ev. pr: rows of nk2 bf16 pairs (ldp
  // pairs apart); v: nk2 rows of value pairs, column c at v[p * ldv + c]. ev % 16 == 0.
  void (*pv)(int64_t mq, int64_t ev, int64_t nk2, const uint32_t* pr, int64_t ldp, const uint32_t* v, int64_t ldv,
             float* o, int64_t ldo);
};

// The AVX-512 BF16 build; use only where the CPU has avx512_bf16 and the plugin runs at AVX-512
// (attention.cpp checks both).
const FlashBf16Kernels& flash_bf16_avx512();

}  // namespace tessera::cpu::nn
