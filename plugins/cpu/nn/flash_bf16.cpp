// AVX-512 BF16 build of the bf16 flash-attention GEMMs (flash_bf16.h). Like nn_isa_avx512.cpp this
// file includes no STL header (Note [nn ISA kernels]); callers reach it only through
// flash_bf16_kernels() in attention.cpp, which checks the CPU first.
#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")
#include <immintrin.h>

#include "flash_bf16.h"

namespace tessera::cpu::nn {
namespace {

inline __m512bh pairs(const uint32_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
inline __m512bh bcast(uint32_t v) { return (__m512bh)_mm512_set1_epi32(int(v)); }

// R query rows x 4 vectors of 16 keys per step: 4R accumulators.
template <int R>
void qk_tile(int64_t nk, int64_t e2, const uint32_t* q, int64_t ldq, const uint32_t* k, int64_t ldk, float* s,
             int64_t lds) {
  int64_t j = 0;
  for (; j + 64 <= nk; j += 64) {
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_ps();
    for (int64_t p = 0; p < e2; ++p) {
      const uint32_t* kp = k + p * ldk + j;
      const __m512bh k0 = pairs(kp), k1 = pairs(kp + 16), k2 = pairs(kp + 32), k3 = pairs(kp + 48);
      for (int r = 0; r < R; ++r) {
        const __m512bh qv = bcast(q[r * ldq + p]);
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], qv, k0);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], qv, k1);
        acc[r][2] = _mm512_dpbf16_ps(acc[r][2], qv, k2);
        acc[r][3] = _mm512_dpbf16_ps(acc[r][3], qv, k3);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) _mm512_storeu_ps(s + r * lds + j + 16 * c, acc[r][c]);
  }
  for (; j < nk; j += 16) {
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t p = 0; p < e2; ++p) {
      const __m512bh kv = pairs(k + p * ldk + j);
      for (int r = 0; r < R; ++r) acc[r] = _mm512_dpbf16_ps(acc[r], bcast(q[r * ldq + p]), kv);
    }
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(s + r * lds + j, acc[r]);
  }
}

void qk(int64_t mq, int64_t nk, int64_t e2, const uint32_t* q, int64_t ldq, const uint32_t* k, int64_t ldk, float* s,
        int64_t lds) {
  int64_t i = 0;
  for (; i + 4 <= mq; i += 4) qk_tile<4>(nk, e2, q + i * ldq, ldq, k, ldk, s + i * lds, lds);
  for (; i < mq; ++i) qk_tile<1>(nk, e2, q + i * ldq, ldq, k, ldk, s + i * lds, lds);
}

// R rows x 4 vectors of 16 output columns, accumulated over every pair of keys.
template <int R>
void pv_tile(int64_t ev, int64_t nk2, const uint32_t* pr, int64_t ldp, const uint32_t* v, int64_t ldv, float* o,
             int64_t ldo) {
  int64_t c = 0;
  for (; c + 64 <= ev; c += 64) {
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int x = 0; x < 4; ++x) acc[r][x] = _mm512_loadu_ps(o + r * ldo + c + 16 * x);
    for (int64_t p = 0; p < nk2; ++p) {
      const uint32_t* vp = v + p * ldv + c;
      const __m512bh v0 = pairs(vp), v1 = pairs(vp + 16), v2 = pairs(vp + 32), v3 = pairs(vp + 48);
      for (int r = 0; r < R; ++r) {
        const __m512bh pv = bcast(pr[r * ldp + p]);
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], pv, v0);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], pv, v1);
        acc[r][2] = _mm512_dpbf16_ps(acc[r][2], pv, v2);
        acc[r][3] = _mm512_dpbf16_ps(acc[r][3], pv, v3);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int x = 0; x < 4; ++x) _mm512_storeu_ps(o + r * ldo + c + 16 * x, acc[r][x]);
  }
  for (; c < ev; c += 16) {
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_loadu_ps(o + r * ldo + c);
    for (int64_t p = 0; p < nk2; ++p) {
      const __m512bh vv = pairs(v + p * ldv + c);
      for (int r = 0; r < R; ++r) acc[r] = _mm512_dpbf16_ps(acc[r], bcast(pr[r * ldp + p]), vv);
    }
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(o + r * ldo + c, acc[r]);
  }
}

void pv(int64_t mq, int64_t ev, int64_t nk2, const uint32_t* pr, int64_t ldp, const uint32_t* v, int64_t ldv, float* o,
        int64_t ldo) {
  int64_t i = 0;
  for (; i + 4 <= mq; i += 4) pv_tile<4>(ev, nk2, pr + i * ldp, ldp, v, ldv, o + i * ldo, ldo);
  for (; i < mq; ++i) pv_tile<1>(ev, nk2, pr + i * ldp, ldp, v, ldv, o + i * ldo, ldo);
}

const FlashBf16Kernels kKernels = {
    /* .qk = */ qk,
    /* .pv = */ pv,
};

}  // namespace

const FlashBf16Kernels& flash_bf16_avx512() { return kKernels; }

}  // namespace tessera::cpu::nn
