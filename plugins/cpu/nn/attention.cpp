// scaled_dot_product_attention: a flash-attention kernel and the unfused math path.
//
// Note [Flash attention on the CPU]
// The flash kernel never materialises the [L, S] score matrix. Work items are (batch*head, block
// of kBlockQ queries). A thread packs the keys of the head it works on as f32 K^T column panels and
// the values as f32 V column panels (Note [Flash panels]; f32 values in dense rows are used in
// place), once per head it touches: items are handed out in order. It loads its query block in
// f32 pre-multiplied by the scale, and walks the keys in blocks of kBlockK: S = Q K^T for the
// block (an f32 register-tiled GEMM from nn_isa.h), masks, then the online softmax update
// (nn_isa.h flash_softmax_rows)
//   m' = max(m, rowmax(S)); P = exp(S - m'); l = l * exp(m - m') + rowsum(P); O = O * exp(m - m') + P V
// and finally O / l (Note [Fully masked attention rows]). Extra memory per thread: the packed
// head, O(S * (E + Ev)) floats, linear in the sequence length, plus O(kBlockQ * (E + Ev + kBlockK))
// for the block buffers; never the [L, S] matrix. Causal attention (top-left aligned: query i
// sees keys j <= i, PyTorch's is_causal) stops each query block at its diagonal. Every dtype
// computes in f32 with f32 accumulation; f64 takes the double-precision reference loops.
//
// The math path (_sdpa_math, kept as the reference and for benchmarks) runs Q K^T as one batched
// oneDNN matmul with the scale fused as an output scale into an f32 [B, L, S] buffer, masks and
// softmaxes it in place, and multiplies by V with a second oneDNN matmul (P converted to bf16 first
// for bf16 inputs, as PyTorch's math path does).
//
// Note [Fully masked attention rows]
// PyTorch's scaled_dot_product_attention softmaxes the masked scores "safely": a query row whose
// masked scores are all -inf (every key masked out, or S == 0) gets probabilities 0 instead of the
// NaN of softmax over -inf, and its output row is then 0 @ V: 0, or NaN in a column where a value
// is NaN or infinite (0 * NaN, 0 * inf). Every other row is the plain softmax, so a NaN score
// (NaN in the inputs, +inf - inf) still makes its row NaN. A bool mask is applied as PyTorch
// applies it, by adding -inf (a NaN or +inf score under a false entry still gives NaN); causal
// attention sets the scores past the diagonal to -inf and the flash kernel never reads those keys,
// as PyTorch's CPU flash kernel (no causal row is ever fully masked: query i always sees key 0).
// Plain softmax keeps NaN for an all -inf row. Every path here (flash, math, f64) follows this;
// docs/semantics.md lists the cases checked against PyTorch.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "nn_common.h"
#include "nn_ops.h"
#include "onednn.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tessera::cpu::nn {
namespace {

constexpr int64_t kBlockQ = 64;
constexpr int64_t kBlockK = 256;
constexpr int kMaxBatchDims = 8;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct SdpaProblem {
  int r = 0;  // batch rank
  int64_t batch[kMaxBatchDims] = {};
  int64_t total = 1;  // product of batch
  int64_t l = 0, s = 0, e = 0, ev = 0;
  // Element strides: batch strides (0 where broadcast) then the two inner dims.
  int64_t qb[kMaxBatchDims] = {}, kb[kMaxBatchDims] = {}, vb[kMaxBatchDims] = {}, mb[kMaxBatchDims] = {},
          ob[kMaxBatchDims] = {};
  int64_t q_sl = 0, q_se = 0, k_ss = 0, k_se = 0, v_ss = 0, v_se = 0, o_sl = 0, o_se = 0, m_sl = 0, m_ss = 0;
  const char* q = nullptr;
  const char* k = nullptr;
  const char* v = nullptr;
  const char* mask = nullptr;
  char* o = nullptr;
  int32_t dt = 0, o_dt = 0, mask_dt = -1;
  bool causal = false;
  float scale = 1.f;
  double scale_d = 1.0;

  void offsets(int64_t bi, int64_t* oq, int64_t* ok, int64_t* ov, int64_t* om, int64_t* oo) const {
    *oq = *ok = *ov = *om = *oo = 0;
    for (int d = r - 1; d >= 0; --d) {
      const int64_t idx = bi % batch[d];
      bi /= batch[d];
      *oq += idx * qb[d];
      *ok += idx * kb[d];
      *ov += idx * vb[d];
      *om += idx * mb[d];
      *oo += idx * ob[d];
    }
  }
};

const char* base_of(const tessera_tensor_t* t) { return static_cast<const char*>(t->data) + t->byte_offset; }

// Batch strides of `t` (rank >= 2) right-aligned against the output batch dims; 0 where broadcast.
void batch_strides(const char* what, const tessera_tensor_t* t, int r, const int64_t* batch, int64_t* out,
                   const tessera_tensor_t* q) {
  const int tb = t->ndim - 2;
  if (tb > r)
    fail(std::string("scaled_dot_product_attention: ") + what + " " + shape_str(t) + " has more batch dims than the query " +
         shape_str(q));
  for (int d = 0; d < r; ++d) {
    const int td = d - (r - tb);
    if (td < 0) {
      out[d] = 0;
      continue;
    }
    const int64_t sz = t->sizes[td];
    if (sz != batch[d] && sz != 1)
      fail(std::string("scaled_dot_product_attention: ") + what + " " + shape_str(t) +
           " does not broadcast against the query " + shape_str(q) + " at batch dim " + std::to_string(d));
    out[d] = sz == 1 ? 0 : t->strides[td];
  }
}

// scaled_dot_product_attention and _sdpa_math (register.cpp) share one schema layout: arguments are
// read through the contract's indices (tessera/op_names.h).
SdpaProblem make_problem(const KernelCall& call) {
  using T = op::scaled_dot_product_attention::tensor;
  using A = op::scaled_dot_product_attention::attr;
  const tessera_tensor_t* q = call.input(T::query).raw();
  const tessera_tensor_t* k = call.input(T::key).raw();
  const tessera_tensor_t* v = call.input(T::value).raw();
  const tessera_tensor_t* mask = call.num_inputs() > T::attn_mask ? call.input(T::attn_mask).raw() : nullptr;
  const tessera_tensor_t* o = call.output(0).raw();
  const std::string op = "scaled_dot_product_attention";
  for (const tessera_tensor_t* t : {q, k, v}) {
    if (t->ndim < 2) fail(op + ": query, key and value need at least 2 dims [..., seq, features]; got " + shape_str(t));
    if (!dtype_is_floating(t->dtype))
      fail(op + ": got dtype " + std::string(dtype_name(t->dtype)) + "; expected a floating dtype (f16, bf16, f32, f64)");
    if (t->dtype != q->dtype)
      fail(op + ": query has dtype " + std::string(dtype_name(q->dtype)) + " but key/value has " + dtype_name(t->dtype) +
           "; expected one dtype");
  }
  SdpaProblem p;
  p.r = o->ndim - 2;
  if (p.r < 0 || p.r > kMaxBatchDims) fail(op + ": output has shape " + shape_str(o) + "; expected 2 to 10 dims");
  for (int d = 0; d < p.r; ++d) {
    p.batch[d] = o->sizes[d];
    p.total *= p.batch[d];
  }
  p.l = q->sizes[q->ndim - 2];
  p.e = q->sizes[q->ndim - 1];
  p.s = k->sizes[k->ndim - 2];
  p.ev = v->sizes[v->ndim - 1];
  if (k->sizes[k->ndim - 1] != p.e)
    fail(op + ": key " + shape_str(k) + " has " + std::to_string(k->sizes[k->ndim - 1]) + " features but the query " +
         shape_str(q) + " has " + std::to_string(p.e) + "; expected equal embedding dims");
  if (v->sizes[v->ndim - 2] != p.s)
    fail(op + ": value " + shape_str(v) + " has sequence length " + std::to_string(v->sizes[v->ndim - 2]) +
         " but the key " + shape_str(k) + " has " + std::to_string(p.s) + "; expected equal");
  if (o->sizes[p.r] != p.l || o->sizes[p.r + 1] != p.ev)
    fail(op + ": output " + shape_str(o) + " does not match [..., " + std::to_string(p.l) + ", " + std::to_string(p.ev) + "]");
  batch_strides("query", q, p.r, p.batch, p.qb, q);
  batch_strides("key", k, p.r, p.batch, p.kb, q);
  batch_strides("value", v, p.r, p.batch, p.vb, q);
  for (int d = 0; d < p.r; ++d) p.ob[d] = o->strides[d];
  p.q_sl = q->strides[q->ndim - 2], p.q_se = q->strides[q->ndim - 1];
  p.k_ss = k->strides[k->ndim - 2], p.k_se = k->strides[k->ndim - 1];
  p.v_ss = v->strides[v->ndim - 2], p.v_se = v->strides[v->ndim - 1];
  p.o_sl = o->strides[p.r], p.o_se = o->strides[p.r + 1];
  p.q = base_of(q), p.k = base_of(k), p.v = base_of(v);
  p.o = static_cast<char*>(o->data) + o->byte_offset;
  p.dt = q->dtype;
  p.o_dt = o->dtype;
  p.causal = call.num_attrs() > A::is_causal && call.attr_bool(A::is_causal);
  p.scale_d = call.num_attrs() > A::scale && !call.attr_is_none(A::scale) ? call.attr_double(A::scale)
                                                                          : 1.0 / std::sqrt(double(p.e));
  p.scale = float(p.scale_d);
  if (mask) {
    if (p.causal)
      fail(op + ": both attn_mask and is_causal=True were given; expected one of them (fold the causal mask into attn_mask)");
    if (mask->dtype != TESSERA_DTYPE_BOOL && !dtype_is_floating(mask->dtype))
      fail(op + ": attn_mask has dtype " + std::string(dtype_name(mask->dtype)) + "; expected bool (true = attend) or floating (added)");
    int64_t full[kMaxBatchDims + 2];
    for (int d = 0; d < p.r; ++d) full[d] = p.batch[d];
    full[p.r] = p.l;
    full[p.r + 1] = p.s;
    for (int d = 0; d < mask->ndim; ++d) {
      const int od = p.r + 2 - mask->ndim + d;
      if (od < 0 || (mask->sizes[d] != 1 && mask->sizes[d] != full[od]))
        fail(op + ": attn_mask " + shape_str(mask) + " does not broadcast to [..., L=" + std::to_string(p.l) +
             ", S=" + std::to_string(p.s) + "] of the attention weights");
    }
    int64_t st[kMaxBatchDims + 2];
    broadcast_strides(mask, p.r + 2, full, st);
    for (int d = 0; d < p.r; ++d) p.mb[d] = st[d];
    p.m_sl = st[p.r], p.m_ss = st[p.r + 1];
    p.mask = base_of(mask);
    p.mask_dt = mask->dtype;
  }
  return p;
}

// Applies the causal / explicit mask to one row of scores (f32) for query i over keys [j0, j0+n).
void mask_row(const SdpaProblem& p, int64_t om, int64_t i, int64_t j0, int64_t n, float* row) {
  if (p.causal) {
    for (int64_t jj = std::max<int64_t>(0, i + 1 - j0); jj < n; ++jj) row[jj] = kNegInf;
    return;
  }
  if (!p.mask) return;
  const int64_t base = om + i * p.m_sl + j0 * p.m_ss;
  switch (p.mask_dt) {
    case TESSERA_DTYPE_BOOL: {
      const uint8_t* m = reinterpret_cast<const uint8_t*>(p.mask) + base;
      for (int64_t jj = 0; jj < n; ++jj)
        if (!m[jj * p.m_ss]) row[jj] += kNegInf;
      return;
    }
    case TESSERA_DTYPE_FLOAT32: {
      const float* m = reinterpret_cast<const float*>(p.mask) + base;
      for (int64_t jj = 0; jj < n; ++jj) row[jj] += m[jj * p.m_ss];
      return;
    }
    default: {
      float tmp[kBlockK];
      for (int64_t j = 0; j < n; j += kBlockK) {
        const int64_t c = std::min(kBlockK, n - j);
        load_f32(p.mask + (base + j * p.m_ss) * int64_t(sdk::dtype_size(p.mask_dt)), p.mask_dt, c, p.m_ss, tmp);
        for (int64_t jj = 0; jj < c; ++jj) row[j + jj] += tmp[jj];
      }
    }
  }
}

// ---- flash
// Per-thread state: the packed keys and values (f32) of the batch*head it last worked on, and the
// per-block buffers. Tasks are handed out in (batch*head, query block) order, so a thread packs
// each head it touches about once (Note [Flash attention on the CPU]).
//
// Note [Flash panels]
// Both GEMMs of a block read their right-hand operand as column panels of kPanel (32) floats,
// each panel contiguous: K^T as [ceil(S/32)][E][32] (panel p holds keys 32p..32p+31) and V as
// [ceil(Ev/32)][S][32]. The register tile (nn_isa.h gemm_f32, 32 columns wide) then streams one
// contiguous 128-byte line pair per step. Packing K^T as one [E][S] matrix instead put the E rows a
// tile reads at a stride of S floats (2 / 8 KiB at S = 512 / 2048): the rows of a panel fell into
// the same few L1 sets and the panel did not stay in L1 across the row tiles (one core, a 64 x 256
// x 64 block: 103 GFLOP/s strided against 166 GFLOP/s from panels, the core's FMA peak).
constexpr int64_t kPanel = 32;

struct FlashThread {
  float* kp = nullptr;    // K^T panels [ceil(S/32)][E][32]
  float* vp = nullptr;    // V panels [ceil(Ev/32)][S][32]
  float* qbuf = nullptr;  // [kBlockQ][E]
  float* sbuf = nullptr;  // [kBlockQ][kBlockK]
  float* obuf = nullptr;  // [kBlockQ][Ev]
  float* mrow = nullptr;
  float* lrow = nullptr;
  float* alpha = nullptr;  // per-row rescale factor of the last softmax step
  int64_t packed = -1;  // batch*head index held in kp / vp
};

// a * b + c, failing with a message instead of wrapping (the sizes come from the caller's tensors).
int64_t checked_mul_add(int64_t a, int64_t b, int64_t c) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r))
    fail("scaled_dot_product_attention: the flash workspace size overflows int64 (" + std::to_string(a) + " x " +
         std::to_string(b) + "); use smaller sequence or head dims");
  return r;
}

void flash_attention(const SdpaProblem& p) {
  const NnIsaTable& isa = nn_isa();
  const int64_t nqb = (p.l + kBlockQ - 1) / kBlockQ;
  const int64_t tasks = p.total * nqb;
  const int64_t isz = int64_t(sdk::dtype_size(p.dt)), osz = int64_t(sdk::dtype_size(p.o_dt));
  const int64_t e = p.e, ev = p.ev, s = p.s;
  const int64_t s_pad = (s + kPanel - 1) / kPanel * kPanel, ev_pad = (ev + kPanel - 1) / kPanel * kPanel;
  // f32 keys with contiguous rows are read in place while packing; f32 values stored as dense
  // [S, Ev] rows are the PV GEMM's operand as they are (panels 32 floats apart, rows ev apart).
  const bool k_direct = p.dt == TESSERA_DTYPE_FLOAT32 && p.k_se == 1;
  const bool v_direct = p.dt == TESSERA_DTYPE_FLOAT32 && p.v_se == 1 && p.v_ss == ev;
  const int64_t kp_size = checked_mul_add(e, s_pad, 0), vp_size = v_direct ? 0 : checked_mul_add(ev_pad, s, 0);
  const int64_t blocks_size = checked_mul_add(kBlockQ, e + kBlockK + ev + 3, 64);
  const int64_t per_thread = checked_mul_add(1, checked_mul_add(1, kp_size, vp_size), blocks_size);
  const int64_t work = work_product({2, p.total, p.l, p.s, e + ev});  // Note [Grain size]
  const int threads =
      in_parallel_region() ? 1 : int(std::clamp<int64_t>(tasks, 1, threads_for(OpKind::Sdpa, work)));
  Buffer<float> workspace(checked_mul_add(per_thread, threads, 0));
  auto thread_state = [&](int t) {
    FlashThread st;
    float* w = workspace.get() + int64_t(t) * per_thread;
    st.kp = w;
    st.vp = st.kp + kp_size;
    st.qbuf = st.vp + vp_size;
    st.sbuf = st.qbuf + kBlockQ * e;
    st.obuf = st.sbuf + kBlockQ * kBlockK;
    st.mrow = st.obuf + kBlockQ * ev;
    st.lrow = st.mrow + kBlockQ;
    st.alpha = st.lrow + kBlockQ;
    return st;
  };
  auto pack = [&](FlashThread& st, int64_t ok, int64_t ov) {
    constexpr int64_t kRow = 256;  // features converted per load_f32 call
    float row[kRow];
    if (k_direct)
      for (int64_t j0 = 0; j0 < s; j0 += kPanel)
        isa.pack_panel_f32(reinterpret_cast<const float*>(p.k) + ok + j0 * p.k_ss, p.k_ss, std::min(kPanel, s - j0), e,
                           st.kp + (j0 / kPanel) * e * kPanel);
    for (int64_t j = 0; j < s; ++j) {
      float* kcol = st.kp + (j / kPanel) * e * kPanel + j % kPanel;
      const char* kr = p.k + (ok + j * p.k_ss) * isz;
      if (!k_direct) {
        for (int64_t c = 0; c < e; c += kRow) {
          const int64_t w = std::min(kRow, e - c);
          load_f32(kr + c * p.k_se * isz, p.dt, w, p.k_se, row);
          for (int64_t x = 0; x < w; ++x) kcol[(c + x) * kPanel] = row[x];
        }
      }
      if (v_direct) continue;
      const char* vr = p.v + (ov + j * p.v_ss) * isz;
      for (int64_t c = 0; c < ev; c += kRow) {
        const int64_t w = std::min(kRow, ev - c);
        load_f32(vr + c * p.v_se * isz, p.dt, w, p.v_se, row);
        for (int64_t x = 0; x < w; x += kPanel)
          std::memcpy(st.vp + ((c + x) / kPanel) * s * kPanel + j * kPanel, row + x,
                      size_t(std::min(kPanel, w - x)) * sizeof(float));
      }
    }
    // Zero the padding keys of the last K panel (the GEMM masks them out; no stale NaN is read).
    for (int64_t j = s; j < s_pad; ++j)
      for (int64_t c = 0; c < e; ++c) st.kp[(j / kPanel) * e * kPanel + c * kPanel + j % kPanel] = 0.f;
  };
  // C[m, n] (+)= A[m, k] * B where B is given as column panels of kPanel columns, panel_stride
  // floats apart, rows ldb apart (Note [Flash panels]).
  auto gemm_panels = [&](int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                         int64_t panel_stride, int64_t ldb, float* c, int64_t ldc, int accumulate) {
    for (int64_t j = 0; j < n; j += kPanel)
      isa.gemm_f32(m, std::min(kPanel, n - j), k, a, lda, b + (j / kPanel) * panel_stride, ldb, c + j, ldc, accumulate);
  };
  auto run_task = [&](int64_t task, FlashThread& st) {
    const int64_t bi = task / nqb, i0 = (task % nqb) * kBlockQ;
    const int64_t mq = std::min(kBlockQ, p.l - i0);
    int64_t oq, ok, ov, om, oo;
    p.offsets(bi, &oq, &ok, &ov, &om, &oo);
    if (st.packed != bi) {
      // Causal work items need keys up to their diagonal only; pack the whole head anyway, later
      // query blocks of the same head reuse it.
      pack(st, ok, ov);
      st.packed = bi;
    }
    for (int64_t ii = 0; ii < mq; ++ii) {
      load_f32(p.q + (oq + (i0 + ii) * p.q_sl) * isz, p.dt, e, p.q_se, st.qbuf + ii * e);
      isa.scale_row(st.qbuf + ii * e, e, p.scale);
      st.mrow[ii] = kNegInf;
      st.lrow[ii] = 0.f;
    }
    std::memset(st.obuf, 0, size_t(mq * ev) * sizeof(float));
    const int64_t kend = p.causal ? std::min(s, i0 + mq) : s;
    for (int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
      const int64_t nk = std::min(kBlockK, kend - j0);
      gemm_panels(mq, nk, e, st.qbuf, e, st.kp + (j0 / kPanel) * e * kPanel, e * kPanel, kPanel, st.sbuf, kBlockK, 0);
      if (p.causal || p.mask)
        for (int64_t ii = 0; ii < mq; ++ii) mask_row(p, om, i0 + ii, j0, nk, st.sbuf + ii * kBlockK);
      isa.flash_softmax_rows(st.sbuf, kBlockK, mq, nk, st.mrow, st.lrow, st.alpha);
      for (int64_t ii = 0; ii < mq; ++ii)
        if (st.alpha[ii] != 1.f) isa.scale_row(st.obuf + ii * ev, ev, st.alpha[ii]);
      if (v_direct)
        // In halves of the key block: a 32-column slice of 128 value rows (16 KiB, rows ev apart)
        // and the P rows of a register tile stay in L1 together (5-7% faster than 256 rows).
        for (int64_t kk = 0; kk < nk; kk += kBlockK / 2)
          gemm_panels(mq, ev, std::min(kBlockK / 2, nk - kk), st.sbuf + kk, kBlockK,
                      reinterpret_cast<const float*>(p.v) + ov + (j0 + kk) * ev, kPanel, ev, st.obuf, ev, 1);
      else
        gemm_panels(mq, ev, nk, st.sbuf, kBlockK, st.vp + j0 * kPanel, s * kPanel, kPanel, st.obuf, ev, 1);
    }
    for (int64_t ii = 0; ii < mq; ++ii) {
      // m == -inf: every key masked, O holds 0 * V (Note [Fully masked attention rows]). m == +inf
      // (an infinite score) leaves l == 0: NaN, as softmax gives.
      const float inv = st.mrow[ii] == kNegInf ? 0.f
                        : st.lrow[ii] > 0.f    ? 1.f / st.lrow[ii]
                                               : std::numeric_limits<float>::quiet_NaN();
      isa.scale_row(st.obuf + ii * ev, ev, inv);
      store_f32(st.obuf + ii * ev, p.o + (oo + (i0 + ii) * p.o_sl) * osz, p.o_dt, ev, p.o_se);
    }
  };
  if (threads <= 1) {
    FlashThread st = thread_state(0);
    for (int64_t t = 0; t < tasks; ++t) run_task(t, st);
    return;
  }
#ifdef _OPENMP
  // Contiguous chunks of query blocks per thread keep the packed head hot; small chunks of the
  // dynamic schedule balance causal work (late query blocks cost more than early ones).
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(nqb, tasks / (int64_t(threads) * 4)));
#pragma omp parallel num_threads(threads)
  {
    FlashThread st = thread_state(omp_get_thread_num());
#pragma omp for schedule(dynamic, chunk)
    for (int64_t t = 0; t < tasks; ++t) run_task(t, st);
  }
#endif
}

// ---- f64 reference (also the f64 path of both ops): plain loops in double, one row at a time.
void attention_f64(const SdpaProblem& p) {
  parallel_for(0, p.total * p.l, 4, [&](int64_t b, int64_t e) {
    std::vector<double> sc(size_t(p.s)), acc(size_t(p.ev));
    for (int64_t x = b; x < e; ++x) {
      const int64_t bi = x / p.l, i = x % p.l;
      int64_t oq, ok, ov, om, oo;
      p.offsets(bi, &oq, &ok, &ov, &om, &oo);
      const double* q = reinterpret_cast<const double*>(p.q) + oq + i * p.q_sl;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < p.s; ++j) {
        const double* k = reinterpret_cast<const double*>(p.k) + ok + j * p.k_ss;
        double d = 0;
        for (int64_t c = 0; c < p.e; ++c) d += q[c * p.q_se] * k[c * p.k_se];
        d *= p.scale_d;
        if (p.causal && j > i) d = -std::numeric_limits<double>::infinity();
        if (p.mask) {
          const int64_t mo = om + i * p.m_sl + j * p.m_ss;
          if (p.mask_dt == TESSERA_DTYPE_BOOL) {
            if (!reinterpret_cast<const uint8_t*>(p.mask)[mo]) d += -std::numeric_limits<double>::infinity();
          } else if (p.mask_dt == TESSERA_DTYPE_FLOAT64) {
            d += reinterpret_cast<const double*>(p.mask)[mo];
          } else {
            float f;
            load_f32(p.mask + mo * int64_t(sdk::dtype_size(p.mask_dt)), p.mask_dt, 1, 1, &f);
            d += f;
          }
        }
        sc[size_t(j)] = d;
        if (d > mx || d != d) mx = d;
      }
      double sum = 0;
      if (mx == -std::numeric_limits<double>::infinity()) {  // Note [Fully masked attention rows]
        std::fill(sc.begin(), sc.end(), 0.0);
        sum = 1;
      } else {
        for (int64_t j = 0; j < p.s; ++j) sum += (sc[size_t(j)] = std::exp(sc[size_t(j)] - mx));
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < p.s; ++j) {
        const double* v = reinterpret_cast<const double*>(p.v) + ov + j * p.v_ss;
        for (int64_t c = 0; c < p.ev; ++c) acc[size_t(c)] += sc[size_t(j)] * v[c * p.v_se];
      }
      double* o = reinterpret_cast<double*>(p.o) + oo + i * p.o_sl;
      for (int64_t c = 0; c < p.ev; ++c) o[c * p.o_se] = acc[size_t(c)] / sum;
    }
  });
}

// ---- math path
MatOperand operand(const SdpaProblem& p, const int64_t* bstrides, int64_t rows, int64_t cols, int64_t srow,
                   int64_t scol, const void* ptr, int32_t dt) {
  MatOperand m;
  m.nd = p.r + 2;
  int64_t outer = 1;
  for (int d = 0; d < p.r; ++d) {
    m.dims[d] = bstrides[d] == 0 ? 1 : p.batch[d];
    m.strides[d] = bstrides[d];
  }
  m.dims[p.r] = rows, m.dims[p.r + 1] = cols;
  m.strides[p.r] = srow, m.strides[p.r + 1] = scol;
  for (int i = 0; i < m.nd; ++i)
    if (m.dims[i] != 1) outer = std::max(outer, m.dims[i] * m.strides[i]);
  for (int i = 0; i < m.nd; ++i)
    if (m.dims[i] == 1) m.strides[i] = outer;
  m.ptr = const_cast<void*>(ptr);
  m.dt = dt == TESSERA_DTYPE_BFLOAT16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
  return m;
}

void math_attention(const SdpaProblem& p) {
  const NnIsaTable& isa = nn_isa();
  const int64_t rows = p.total * p.l;
  Buffer<float> scores(rows * p.s);
  // Scores [batch..., L, S] contiguous f32 = scale * Q @ K^T.
  int64_t sstr[kMaxBatchDims];
  {
    int64_t st = p.l * p.s;
    for (int d = p.r - 1; d >= 0; --d) {
      sstr[d] = p.batch[d] == 1 ? 0 : st;
      st *= p.batch[d];
    }
  }
  MatOperand a = operand(p, p.qb, p.l, p.e, p.q_sl, p.q_se, p.q, p.dt);
  MatOperand b = operand(p, p.kb, p.e, p.s, p.k_se, p.k_ss, p.k, p.dt);
  MatOperand c = operand(p, sstr, p.l, p.s, p.s, 1, scores.get(), TESSERA_DTYPE_FLOAT32);
  for (int d = 0; d < p.r; ++d) c.dims[d] = p.batch[d];
  onednn_matmul(a, b, c, nullptr, p.scale);
  parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, p.s)), [&](int64_t beg, int64_t end) {
    for (int64_t x = beg; x < end; ++x) {
      const int64_t bi = x / p.l, i = x % p.l;
      int64_t oq, ok, ov, om, oo;
      p.offsets(bi, &oq, &ok, &ov, &om, &oo);
      float* row = scores.get() + x * p.s;
      mask_row(p, om, i, 0, p.s, row);
      // Note [Fully masked attention rows]
      if (std::all_of(row, row + p.s, [](float f) { return f == kNegInf; }))
        std::memset(row, 0, size_t(p.s) * sizeof(float));
      else
        isa.softmax_row(row, row, p.s);
    }
  });
  MatOperand pm = operand(p, sstr, p.l, p.s, p.s, 1, scores.get(), TESSERA_DTYPE_FLOAT32);
  for (int d = 0; d < p.r; ++d) pm.dims[d] = p.batch[d];
  Buffer<uint16_t> p16;
  if (p.dt == TESSERA_DTYPE_BFLOAT16) {
    p16.reset(rows * p.s);
    parallel_for(0, rows, 16, [&](int64_t beg, int64_t end) {
      isa.f32_to_bf16(scores.get() + beg * p.s, p16.get() + beg * p.s, (end - beg) * p.s);
    });
    pm.ptr = p16.get();
    pm.dt = dnnl::memory::data_type::bf16;
  }
  MatOperand vm = operand(p, p.vb, p.s, p.ev, p.v_ss, p.v_se, p.v, p.dt);
  MatOperand om = operand(p, p.ob, p.l, p.ev, p.o_sl, p.o_se, p.o, p.o_dt);
  for (int d = 0; d < p.r; ++d) om.dims[d] = p.batch[d];
  onednn_matmul(pm, vm, om, nullptr);
}

bool all_empty(const SdpaProblem& p) { return p.total == 0 || p.l == 0 || p.ev == 0; }

// S == 0: every row is fully masked (Note [Fully masked attention rows]).
void fill_zero(const SdpaProblem& p) {
  std::vector<float> row(size_t(p.ev), 0.f);
  const int64_t osz = int64_t(sdk::dtype_size(p.o_dt));
  for (int64_t x = 0; x < p.total * p.l; ++x) {
    int64_t oq, ok, ov, om, oo;
    p.offsets(x / p.l, &oq, &ok, &ov, &om, &oo);
    store_f32(row.data(), p.o + (oo + (x % p.l) * p.o_sl) * osz, p.o_dt, p.ev, p.o_se);
  }
}

}  // namespace

void sdpa_flash_kernel(const KernelCall& call) {
  if (bf16_via_f32(call.input(op::scaled_dot_product_attention::tensor::query).dtype()))
    return run_via_f32(call, &sdpa_flash_kernel);
  const SdpaProblem p = make_problem(call);
  if (all_empty(p)) return;
  if (p.s == 0) return fill_zero(p);
  if (p.dt == TESSERA_DTYPE_FLOAT64 && p.o_dt == TESSERA_DTYPE_FLOAT64) return attention_f64(p);
  flash_attention(p);
}

void sdpa_math_kernel(const KernelCall& call) {
  const int32_t dt = call.input(op::scaled_dot_product_attention::tensor::query).dtype();
  if (dt == TESSERA_DTYPE_FLOAT16 || bf16_via_f32(dt)) return run_via_f32(call, &sdpa_math_kernel);
  const SdpaProblem p = make_problem(call);
  if (all_empty(p)) return;
  if (p.s == 0) return fill_zero(p);
  if (p.dt == TESSERA_DTYPE_FLOAT64 && p.o_dt == TESSERA_DTYPE_FLOAT64) return attention_f64(p);
  math_attention(p);
}

void sdpa_kernel(const KernelCall& call) {
  if (sdpa_forced_path() == "math") return sdpa_math_kernel(call);
  sdpa_flash_kernel(call);
}

}  // namespace tessera::cpu::nn
