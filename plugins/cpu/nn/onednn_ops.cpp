// matmul, linear and conv2d on oneDNN 2.6 (v2 API: op descriptor, then primitive_desc(desc, attr,
// engine)). f32 and bf16 run natively; f16 runs through f32 (run_via_f32); f64 runs naive loops
// in double.
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "nn_common.h"
#include "nn_ops.h"
#include "onednn.h"

namespace tessera::cpu::nn {

using dnnl::memory;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

bool onednn_has_bf16() {
  static const bool has = [] {
    try {
      const memory::desc a({2, 2}, memory::data_type::bf16, memory::format_tag::ab);
      (void)dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, a, a), cpu_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

namespace {

// Note [Primitive cache]
// Creating a oneDNN primitive (descriptor, implementation search, JIT) costs from tens of
// microseconds to milliseconds; executing one on a small problem costs a few. Primitives are kept
// in a map keyed by the bytes of everything that defines them (kind, dims, strides, dtypes,
// attributes). Look-up holds a mutex for the find only; creation runs outside it, and when two
// threads create the same primitive the first insert wins. Primitives use a user scratchpad, so
// one primitive may run on several threads at once, each with its own thread-local scratchpad.
// The cache is cleared when it exceeds kMaxPrimitives (a workload of ever-changing shapes).
struct CachedPrimitive {
  dnnl::primitive prim;
  memory::desc scratch;
  memory::desc weights;  // the layout the primitive takes its weights in (prepacked primitives)
  memory::desc src, dst;  // its activation layouts, where it chose them (conv2d)
};

class PrimitiveCache {
 public:
  static constexpr size_t kMaxPrimitives = 1024;
  template <typename Make>
  std::shared_ptr<const CachedPrimitive> get(const std::string& key, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) return it->second;
    }
    auto created = std::make_shared<const CachedPrimitive>(make());
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.size() >= kMaxPrimitives) map_.clear();
    return map_.emplace(key, std::move(created)).first->second;
  }
  int64_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return int64_t(map_.size());
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const CachedPrimitive>> map_;
};

PrimitiveCache& cache() {
  static PrimitiveCache c;
  return c;
}

// Note [Weight cache]
// A weight that stays the same between calls (a linear layer's, a conv's filters) is worth
// reordering once into the blocked layout oneDNN's primitive asks for (format_tag::any): bf16
// matmul on AMX or AVX-512 runs two to three times faster from it than from a row-major weight, and
// conv2d skips a per-call reorder. Packed copies are keyed by the weight's address, geometry and
// consumer, and tagged with its storage version (Note [Storage version] in tessera/tensor.h): a
// write to the weight (an in-place op, data_ptr) moves the version, so the next call repacks. A
// weight is packed on the second call that sees the same version, so a one-off product pays no
// reorder. The cache holds at most TESSERA_CPU_WEIGHT_CACHE_MB MiB (default 1024; 0 turns it off),
// least recently used out first; its bytes count in memory_stats(cpu).reserved_bytes and
// empty_cache(cpu) drops them.
struct PackedWeight {
  memory::desc md;
  Buffer<char> data;
  size_t bytes = 0;
};

class WeightCache {
 public:
  // The packed copy of the weight under `key` at `version` in layout `want`, made by `pack` when
  // this is the second call that sees that version; nullptr means "use the weight as it is".
  template <typename Pack>
  std::shared_ptr<const PackedWeight> get(const std::string& key, uint64_t version, const memory::desc& want,
                                          Pack&& pack) {
    if (version == 0 || limit_bytes() == 0) return nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it == map_.end()) {
        if (map_.size() >= kMaxEntries) drop_unpacked();
        map_.emplace(key, Entry{version, nullptr, ++tick_});
        return nullptr;
      }
      Entry& e = it->second;
      e.last_use = ++tick_;
      if (e.version != version) {  // the weight was written: start over
        release(e);
        e.version = version;
        return nullptr;
      }
      if (e.packed && e.packed->md == want) {
        ++hits_;
        return e.packed;
      }
    }
    std::shared_ptr<PackedWeight> packed = std::make_shared<PackedWeight>();
    packed->md = want;
    packed->bytes = want.get_size();
    packed->data.reset(int64_t(packed->bytes));
    pack(*packed);
    std::lock_guard<std::mutex> lock(mu_);
    ++packs_;
    auto it = map_.find(key);
    if (it == map_.end() || it->second.version != version || packed->bytes > limit_bytes()) return packed;
    release(it->second);
    it->second.packed = packed;
    bytes_ += packed->bytes;
    while (bytes_ > limit_bytes()) evict_oldest(it->first);
    return packed;
  }

  WeightCacheStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    WeightCacheStats s;
    s.bytes = bytes_;
    for (auto& [k, e] : map_) s.entries += e.packed != nullptr;
    s.packs = packs_;
    s.hits = hits_;
    return s;
  }

  uint64_t clear() {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t released = bytes_;
    map_.clear();
    bytes_ = 0;
    return released;
  }

 private:
  static constexpr size_t kMaxEntries = 4096;
  struct Entry {
    uint64_t version;
    std::shared_ptr<const PackedWeight> packed;
    uint64_t last_use;
  };
 public:
  static size_t limit_bytes() { return limit_.load(std::memory_order_relaxed); }
  static void set_limit_bytes(size_t bytes) { limit_.store(bytes, std::memory_order_relaxed); }

 private:
  static inline std::atomic<size_t> limit_{size_t(1024) << 20};
  void release(Entry& e) {
    if (e.packed) bytes_ -= e.packed->bytes;
    e.packed.reset();
  }
  void evict_oldest(const std::string& keep) {
    auto oldest = map_.end();
    for (auto it = map_.begin(); it != map_.end(); ++it)
      if (it->second.packed && it->first != keep && (oldest == map_.end() || it->second.last_use < oldest->second.last_use))
        oldest = it;
    if (oldest == map_.end()) return;
    release(oldest->second);
    map_.erase(oldest);
  }
  void drop_unpacked() {
    for (auto it = map_.begin(); it != map_.end();) it = it->second.packed ? std::next(it) : map_.erase(it);
  }
  std::mutex mu_;
  std::unordered_map<std::string, Entry> map_;
  size_t bytes_ = 0;
  uint64_t tick_ = 0, packs_ = 0, hits_ = 0;
};

WeightCache& weight_cache() {
  static WeightCache c;  // freed when the plugin unloads, like the primitive cache
  return c;
}

}  // namespace

WeightCacheStats weight_cache_stats() { return weight_cache().stats(); }
uint64_t weight_cache_clear() { return weight_cache().clear(); }
void set_weight_cache_limit_mb(int64_t mb) { WeightCache::set_limit_bytes(mb <= 0 ? 0 : size_t(mb) << 20); }

namespace {
std::atomic<ConvAlgo> g_conv_algo{ConvAlgo::Auto};
}
void set_conv_algo(ConvAlgo algo) { g_conv_algo.store(algo, std::memory_order_relaxed); }
ConvAlgo conv_algo() { return g_conv_algo.load(std::memory_order_relaxed); }
uint64_t tensor_version(const tessera_tensor_t* t) {
  return TESSERA_ABI_HAS_FIELD(t, tessera_tensor_t, version) ? t->version : 0;
}

namespace {

void key_append(std::string& key, const void* p, size_t n) { key.append(static_cast<const char*>(p), n); }
void key_append(std::string& key, const MatOperand& op) {
  key_append(key, &op.nd, sizeof(op.nd));
  key_append(key, op.dims, size_t(op.nd) * 8);
  key_append(key, op.strides, size_t(op.nd) * 8);
  const int dt = int(op.dt);
  key_append(key, &dt, sizeof(dt));
}

// The OpenMP thread count the primitive is created for (Note [Grain size]): oneDNN plans its blocking
// and its team at creation, so a primitive made for one thread is a different primitive.
void key_append_threads(std::string& key) {
  const int threads = max_threads();
  key_append(key, &threads, sizeof(threads));
}

memory::desc md_of(const MatOperand& op) {
  return memory::desc(memory::dims(op.dims, op.dims + op.nd), op.dt, memory::dims(op.strides, op.strides + op.nd));
}

// Note [Linear epilogues]
// The code generator rewrites linear (or matmul) -> bias add -> relu / gelu -> add(residual)
// chains, and conv2d -> relu / gelu, into one call of the private op _linear_epilogue or
// _conv2d_epilogue (defined by this plugin in register.cpp; the rewrite is
// compiler/src/passes/fuse_linear_epilogues.cpp). Each runs as one oneDNN primitive whose post-ops apply the
// activation and add the residual while the output tile is still in registers: no extra pass over
// the output, and bf16 is rounded once (eager mode rounds after each op; the difference is within
// bf16's tolerance).
void key_append(std::string& key, const MatEpilogue* e) {
  const int act = e ? int(e->activation) : 0;
  key_append(key, &act, sizeof(act));
  if (e && e->residual) key_append(key, *e->residual);
}

void set_epilogue(dnnl::primitive_attr& attr, const MatEpilogue* e) {
  if (!e) return;
  dnnl::post_ops po;
  switch (e->activation) {
    case MatEpilogue::Activation::None: break;
    case MatEpilogue::Activation::Relu: po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f); break;
    case MatEpilogue::Activation::GeluErf: po.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f); break;
    case MatEpilogue::Activation::GeluTanh: po.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_tanh, 0.f, 0.f); break;
  }
  if (e->residual) po.append_binary(dnnl::algorithm::binary_add, md_of(*e->residual));
  attr.set_post_ops(po);
}

void add_epilogue_args(std::unordered_map<int, memory>& args, const MatEpilogue* e) {
  if (!e || !e->residual) return;
  const int index = e->activation == MatEpilogue::Activation::None ? 0 : 1;
  args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1,
               memory(md_of(*e->residual), cpu_engine(), e->residual->ptr));
}

// Thread-local scratchpad, grown on demand and kept (no page faults on the hot path).
// A thread-local buffer grown on demand and kept (no page faults on the hot path); `slot` picks one
// of a few independent buffers (0: the primitive's scratchpad, 1 and 2: activations in a blocked layout).
void* thread_buffer(int slot, size_t bytes) {
  thread_local Buffer<char> buf[3];
  thread_local size_t capacity[3] = {0, 0, 0};
  if (bytes > capacity[slot]) {
    buf[slot].reset(int64_t(bytes));
    capacity[slot] = bytes;
  }
  return buf[slot].get();
}
void* scratchpad(size_t bytes) { return thread_buffer(0, bytes); }

dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(cpu_engine());
  return s;
}

void execute(const CachedPrimitive& p, std::unordered_map<int, memory>& args) {
  const size_t sbytes = p.scratch.get_size();
  if (sbytes) args.emplace(DNNL_ARG_SCRATCHPAD, memory(p.scratch, cpu_engine(), scratchpad(sbytes)));
  dnnl::stream& s = thread_stream();
  p.prim.execute(s, args);
  s.wait();
}

memory::data_type dnnl_dtype(int32_t dt) {
  switch (dt) {
    case TESSERA_DTYPE_FLOAT32: return memory::data_type::f32;
    case TESSERA_DTYPE_BFLOAT16: return memory::data_type::bf16;
    case TESSERA_DTYPE_FLOAT16: return memory::data_type::f16;
    default: fail(std::string("cpu nn: no oneDNN type for dtype ") + dtype_name(dt));
  }
}

// Strides of size-1 dims do not matter to the math but do to oneDNN's layout recognition: give
// each the stride it would have if it were the outermost dim.
void normalize_unit_strides(MatOperand& op) {
  int64_t outer = 1;
  for (int i = 0; i < op.nd; ++i)
    if (op.dims[i] != 1) outer = std::max(outer, op.dims[i] * op.strides[i]);
  for (int i = 0; i < op.nd; ++i)
    if (op.dims[i] == 1) op.strides[i] = outer;
}

void* data_of(const tessera_tensor_t* t) { return static_cast<char*>(t->data) + t->byte_offset; }

void fill_zero(const tessera_tensor_t* t) {
  if (t->numel == 0) return;
  if (TensorView(t).is_contiguous()) {
    std::memset(data_of(t), 0, size_t(t->numel) * sdk::dtype_size(t->dtype));
    return;
  }
  OwnedTensor z(t->sizes, t->ndim, t->dtype);
  std::memset(const_cast<void*>(static_cast<const void*>(z.storage.data())), 0, z.storage.size());
  copy_tensor(t, z.raw());
}

// Note [Integer nn ops]
// PyTorch's CPU matmul / linear / conv2d take every integer dtype (not bool) and compute exactly,
// wrapping around in the integer type; so do these kernels: products and sums in uint64 (modular,
// no signed overflow), converted to the integer type at the store (modular since C++20).
void check_operands(const KernelCall& call, int n) {
  const int32_t dt = call.input(0).dtype();
  for (int i = 0; i < n; ++i) {
    const TensorView t = call.input(i);
    if (!t.defined()) continue;
    if (!dtype_is_floating(t.dtype()) && !dtype_is_integral(t.dtype()))
      fail(std::string(call.op_name()) + ": not implemented for dtype " + dtype_name(t.dtype()) +
           " (argument " + std::to_string(i) +
           "); supported dtypes: uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64");
    if (t.dtype() != dt)
      fail(std::string(call.op_name()) + ": argument " + std::to_string(i) + " has dtype " + dtype_name(t.dtype()) +
           " but argument 0 has " + dtype_name(dt) + "; expected the same dtype (cast one with .to())");
  }
}

// ---- matmul problem: PyTorch semantics reduced to batch x [M,K] @ [K,N]
struct MatmulProblem {
  int r = 0;  // batch rank
  int64_t batch[10] = {};
  int64_t m = 1, k = 1, n = 1;
  MatOperand a, b, c;
};

// Fills the inner two dims and the (padded, broadcast) batch dims of one operand.
void set_operand(MatOperand& op, const tessera_tensor_t* t, int r, const int64_t* batch, int64_t rows,
                 int64_t cols, int64_t srow, int64_t scol, int tbatch) {
  op.nd = r + 2;
  for (int d = 0; d < r; ++d) {
    const int td = d - (r - tbatch);
    if (td < 0) {
      op.dims[d] = 1;
      op.strides[d] = 0;
    } else {
      op.dims[d] = t->sizes[td];
      op.strides[d] = t->strides[td];
      if (op.dims[d] != 1 && op.strides[d] == 0) op.dims[d] = 1;  // expanded dim: let oneDNN broadcast
    }
  }
  (void)batch;
  op.dims[r] = rows;
  op.dims[r + 1] = cols;
  op.strides[r] = srow;
  op.strides[r + 1] = scol;
  op.ptr = data_of(t);
  normalize_unit_strides(op);
}

MatmulProblem matmul_problem(const KernelCall& call, const tessera_tensor_t* a, const tessera_tensor_t* b,
                             const tessera_tensor_t* c) {
  MatmulProblem p;
  const int na = a->ndim, nb = b->ndim;
  if (na == 0 || nb == 0)
    fail("matmul: both arguments need at least 1 dim, got shapes " + shape_str(a) + " and " + shape_str(b));
  const int64_t ka = na == 1 ? a->sizes[0] : a->sizes[na - 1];
  const int64_t kb = nb == 1 ? b->sizes[0] : b->sizes[nb - 2];
  if (ka != kb)
    fail("matmul: shapes " + shape_str(a) + " and " + shape_str(b) + " cannot be multiplied (" + std::to_string(ka) +
         " != " + std::to_string(kb) + "); expected the last dim of the first to equal the " +
         (nb == 1 ? "only" : "second to last") + " dim of the second");
  p.k = ka;
  p.m = na == 1 ? 1 : a->sizes[na - 2];
  p.n = nb == 1 ? 1 : b->sizes[nb - 1];
  const int ba = std::max(0, na - 2), bb = std::max(0, nb - 2);
  p.r = std::max(ba, bb);
  if (p.r > 10) fail("matmul: more than 10 batch dims (shapes " + shape_str(a) + ", " + shape_str(b) + ")");
  for (int d = 0; d < p.r; ++d) {
    const int da = d - (p.r - ba), db = d - (p.r - bb);
    const int64_t sa = da >= 0 ? a->sizes[da] : 1, sb = db >= 0 ? b->sizes[db] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      fail("matmul: batch dims of " + shape_str(a) + " and " + shape_str(b) + " do not broadcast (" + std::to_string(sa) +
           " vs " + std::to_string(sb) + " at batch dim " + std::to_string(d) + ")");
    p.batch[d] = std::max(sa, sb);
  }
  const int nc = p.r + (na > 1) + (nb > 1);
  bool ok = c->ndim == nc;
  for (int d = 0; ok && d < p.r; ++d) ok = c->sizes[d] == p.batch[d];
  if (ok && na > 1) ok = c->sizes[p.r] == p.m;
  if (ok && nb > 1) ok = c->sizes[nc - 1] == p.n;
  if (!ok) fail("matmul: output has shape " + shape_str(c) + ", which does not match " + shape_str(a) + " @ " + shape_str(b));
  // A: [M, K] strides; a 1-D A is one row.
  set_operand(p.a, a, p.r, p.batch, p.m, p.k, na == 1 ? 0 : a->strides[na - 2], a->strides[na - 1], ba);
  set_operand(p.b, b, p.r, p.batch, p.k, p.n, nb == 1 ? b->strides[0] : b->strides[nb - 2],
              nb == 1 ? 0 : b->strides[nb - 1], bb);
  // C: the output's batch strides, then its row / column strides (absent dims are size 1).
  p.c.nd = p.r + 2;
  for (int d = 0; d < p.r; ++d) {
    p.c.dims[d] = p.batch[d];
    p.c.strides[d] = c->strides[d];
  }
  p.c.dims[p.r] = p.m;
  p.c.dims[p.r + 1] = p.n;
  p.c.strides[p.r] = na > 1 ? c->strides[p.r] : 0;
  p.c.strides[p.r + 1] = nb > 1 ? c->strides[nc - 1] : 0;
  p.c.ptr = data_of(c);
  normalize_unit_strides(p.c);
  (void)call;
  return p;
}

// oneDNN's fast paths need one unit stride in the two inner dims of every operand.
bool inner_dense(const MatOperand& op) {
  const int64_t sr = op.strides[op.nd - 2], sc = op.strides[op.nd - 1];
  return sc == 1 || sr == 1 || op.dims[op.nd - 1] == 1 || op.dims[op.nd - 2] == 1;
}

// Row x of the flattened batch x M rows: its row index i and the element offsets of its batch in
// a, b and c (broadcast batch dims of size 1 stay at offset 0).
void batch_row_offsets(const MatmulProblem& p, int64_t x, int64_t* i, int64_t* oa, int64_t* ob, int64_t* oc) {
  int64_t bi = x / p.m;
  *i = x % p.m;
  *oa = *ob = *oc = 0;
  for (int d = p.r - 1; d >= 0; --d) {
    const int64_t idx = bi % p.batch[d];
    bi /= p.batch[d];
    *oa += (p.a.dims[d] == 1 ? 0 : idx) * p.a.strides[d];
    *ob += (p.b.dims[d] == 1 ? 0 : idx) * p.b.strides[d];
    *oc += idx * p.c.strides[d];
  }
}

template <typename T>
void naive_batched(const MatmulProblem& p) {
  int64_t total = 1;
  for (int d = 0; d < p.r; ++d) total *= p.batch[d];
  const int r = p.r;
  parallel_for(0, total * p.m, 16, [&](int64_t beg, int64_t end) {
    for (int64_t x = beg; x < end; ++x) {
      int64_t i, oa, ob, oc;
      batch_row_offsets(p, x, &i, &oa, &ob, &oc);
      const T* ap = static_cast<const T*>(p.a.ptr) + oa + i * p.a.strides[r];
      const T* bp = static_cast<const T*>(p.b.ptr) + ob;
      T* cp = static_cast<T*>(p.c.ptr) + oc + i * p.c.strides[r];
      for (int64_t j = 0; j < p.n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < p.k; ++q) s += double(ap[q * p.a.strides[r + 1]]) * double(bp[q * p.b.strides[r] + j * p.b.strides[r + 1]]);
        cp[j * p.c.strides[r + 1]] = T(s);
      }
    }
  });
}

// One output row of an integer product: c[j] = sum_q a[q] * b[q, j] (+ bias[j]), exact modulo
// 2^64 and wrapped into T at the store (Note [Integer nn ops]). The q-j loop order keeps the inner
// loop contiguous in b and c when they are row-major.
template <typename T>
void int_row(int64_t n, int64_t k, const T* a, int64_t sak, const T* b, int64_t sbk, int64_t sbn, T* c, int64_t scn,
             const T* bias, int64_t sbias, uint64_t* acc) {
  for (int64_t j = 0; j < n; ++j) acc[j] = bias ? uint64_t(int64_t(bias[j * sbias])) : 0;
  for (int64_t q = 0; q < k; ++q) {
    const uint64_t av = uint64_t(int64_t(a[q * sak]));
    const T* bq = b + q * sbk;
    if (sbn == 1) {
      for (int64_t j = 0; j < n; ++j) acc[j] += av * uint64_t(int64_t(bq[j]));
    } else {
      for (int64_t j = 0; j < n; ++j) acc[j] += av * uint64_t(int64_t(bq[j * sbn]));
    }
  }
  for (int64_t j = 0; j < n; ++j) c[j * scn] = T(int64_t(acc[j]));
}

template <typename T>
void int_batched(const MatmulProblem& p) {
  int64_t total = 1;
  for (int d = 0; d < p.r; ++d) total *= p.batch[d];
  const int r = p.r;
  parallel_for(0, total * p.m, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p.n * p.k)), [&](int64_t beg, int64_t end) {
    Buffer<uint64_t> acc(p.n);
    for (int64_t x = beg; x < end; ++x) {
      int64_t i, oa, ob, oc;
      batch_row_offsets(p, x, &i, &oa, &ob, &oc);
      int_row<T>(p.n, p.k, static_cast<const T*>(p.a.ptr) + oa + i * p.a.strides[r], p.a.strides[r + 1],
                 static_cast<const T*>(p.b.ptr) + ob, p.b.strides[r], p.b.strides[r + 1],
                 static_cast<T*>(p.c.ptr) + oc + i * p.c.strides[r], p.c.strides[r + 1], nullptr, 0, acc.get());
    }
  });
}

// Calls f(T{}) with the integer element type of `dt` (Note [Integer nn ops]).
template <typename F>
void visit_integral(int32_t dt, F&& f) {
  visit(dt, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) f(tag);
    else fail(std::string("cpu nn: dtype ") + dtype_name(dt) + " is not an integer dtype");
  });
}

}  // namespace

namespace {
// A dense copy of `op` with the batch dims of `full` (dims where `op` has 1 are repeated).
MatOperand materialize_batch(const MatOperand& op, const MatOperand& full, Buffer<char>& storage) {
  MatOperand out = op;
  const int nd = op.nd;
  const int64_t es = op.dt == memory::data_type::f32 ? 4 : 2;
  int64_t n = 1;
  for (int d = nd - 1; d >= 0; --d) {
    out.dims[d] = d < nd - 2 ? full.dims[d] : op.dims[d];
    out.strides[d] = n;
    n *= out.dims[d];
  }
  storage.reset(n * es);
  out.ptr = storage.get();
  const char* src = static_cast<const char*>(op.ptr);
  char* dst = storage.get();
  parallel_for(0, n, 1 << 14, [&](int64_t beg, int64_t end) {
    for (int64_t i = beg; i < end; ++i) {
      int64_t rem = i, off = 0;
      for (int d = nd - 1; d >= 0; --d) {
        const int64_t idx = rem % out.dims[d];
        rem /= out.dims[d];
        off += (op.dims[d] == 1 ? 0 : idx) * op.strides[d];
      }
      std::memcpy(dst + i * es, src + off * es, size_t(es));
    }
  });
  return out;
}
}  // namespace

namespace {
// Note [Weight cache]: runs the product with `b` in the layout the primitive prefers, packed once per
// storage version; false when the primitive takes `b` as it is or the weight is not packed (yet).
bool run_prepacked(const MatOperand& a, const MatOperand& b, const MatOperand& c, const MatOperand* bias, float scale,
                   const MatEpilogue* epilogue) {
  std::string key = "matmul_packed";
  key_append(key, a);
  key_append(key, &b.nd, sizeof(b.nd));
  key_append(key, b.dims, size_t(b.nd) * 8);
  const int bdt = int(b.dt);
  key_append(key, &bdt, sizeof(bdt));
  key_append(key, c);
  if (bias) key_append(key, *bias);
  key_append(key, &scale, sizeof(scale));
  key_append(key, epilogue);
  key_append_threads(key);
  auto prim = cache().get(key, [&] {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (scale != 1.f) attr.set_output_scales(0, {scale});
    set_epilogue(attr, epilogue);
    const memory::desc wany(memory::dims(b.dims, b.dims + b.nd), b.dt, memory::format_tag::any);
    const auto d = bias ? dnnl::matmul::desc(md_of(a), wany, md_of(*bias), md_of(c))
                        : dnnl::matmul::desc(md_of(a), wany, md_of(c));
    dnnl::matmul::primitive_desc pd(d, attr, cpu_engine());
    return CachedPrimitive{dnnl::matmul(pd), pd.scratchpad_desc(), pd.weights_desc(), memory::desc(), memory::desc()};
  });
  const memory::desc plain = md_of(b);
  if (prim->weights == plain) return false;
  std::string wkey = "matmul";
  key_append(wkey, &b.ptr, sizeof(b.ptr));
  key_append(wkey, b);
  auto packed = weight_cache().get(wkey, b.version, prim->weights, [&](PackedWeight& w) {
    memory user(plain, cpu_engine(), b.ptr), dst(w.md, cpu_engine(), w.data.get());
    dnnl::stream& s = thread_stream();
    dnnl::reorder(user, dst).execute(s, user, dst);
    s.wait();
  });
  if (!packed) return false;
  std::unordered_map<int, memory> args;
  args.emplace(DNNL_ARG_SRC, memory(md_of(a), cpu_engine(), a.ptr));
  args.emplace(DNNL_ARG_WEIGHTS, memory(packed->md, cpu_engine(), packed->data.get()));
  args.emplace(DNNL_ARG_DST, memory(md_of(c), cpu_engine(), c.ptr));
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(md_of(*bias), cpu_engine(), bias->ptr));
  add_epilogue_args(args, epilogue);
  execute(*prim, args);
  return true;
}
}  // namespace

void onednn_matmul(const MatOperand& a, const MatOperand& b, const MatOperand& c, const MatOperand* bias, float scale,
                   const MatEpilogue* epilogue) {
  // oneDNN broadcasts a batch dim of size 1 in one operand, not in both at once.
  for (int d = 0; d < c.nd - 2; ++d) {
    if (a.dims[d] == 1 && b.dims[d] == 1 && c.dims[d] > 1) {
      Buffer<char> storage;
      const MatOperand full = materialize_batch(a, c, storage);
      return onednn_matmul(full, b, c, bias, scale, epilogue);
    }
  }
  int64_t flops = work_product({2, a.dims[a.nd - 1]});
  for (int d = 0; d < c.nd; ++d) flops = work_product({flops, c.dims[d]});
  const OmpThreadScope threads(threads_for(OpKind::Matmul, flops));
  if (b.version != 0 && c.nd == 2 && WeightCache::limit_bytes() > 0 && run_prepacked(a, b, c, bias, scale, epilogue))
    return;
  std::string key = "matmul";
  key_append(key, a);
  key_append(key, b);
  key_append(key, c);
  if (bias) key_append(key, *bias);
  key_append(key, &scale, sizeof(scale));
  key_append(key, epilogue);
  key_append_threads(key);
  auto prim = cache().get(key, [&] {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (scale != 1.f) attr.set_output_scales(0, {scale});
    set_epilogue(attr, epilogue);
    const auto d = bias ? dnnl::matmul::desc(md_of(a), md_of(b), md_of(*bias), md_of(c))
                        : dnnl::matmul::desc(md_of(a), md_of(b), md_of(c));
    dnnl::matmul::primitive_desc pd(d, attr, cpu_engine());
    return CachedPrimitive{dnnl::matmul(pd), pd.scratchpad_desc(), memory::desc(), memory::desc(), memory::desc()};
  });
  std::unordered_map<int, memory> args;
  args.emplace(DNNL_ARG_SRC, memory(md_of(a), cpu_engine(), a.ptr));
  args.emplace(DNNL_ARG_WEIGHTS, memory(md_of(b), cpu_engine(), b.ptr));
  args.emplace(DNNL_ARG_DST, memory(md_of(c), cpu_engine(), c.ptr));
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(md_of(*bias), cpu_engine(), bias->ptr));
  add_epilogue_args(args, epilogue);
  execute(*prim, args);
}

int64_t onednn_cache_size() { return cache().size(); }

void matmul_kernel(const KernelCall& call) {
  const int32_t dt = call.input(0).dtype();
  TempList holder;
  const tessera_tensor_t* a = call.input(0).raw();
  const tessera_tensor_t* b = call.input(1).raw();
  const tessera_tensor_t* c = call.output(0).raw();
  MatmulProblem p = matmul_problem(call, a, b, c);
  // PyTorch answers an empty product (or K == 0: zeros) before its dtype check, bool included.
  const bool nothing_to_multiply = c->numel == 0 || p.k == 0;
  if (!(nothing_to_multiply && dt == TESSERA_DTYPE_BOOL && call.input(1).dtype() == dt)) check_operands(call, 2);
  if ((dt == TESSERA_DTYPE_FLOAT16 || bf16_via_f32(dt)) && !nothing_to_multiply) return run_via_f32(call, &matmul_kernel);
  if (c->numel == 0) return;
  if (p.k == 0) return fill_zero(c);
  if (dt == TESSERA_DTYPE_FLOAT64) return naive_batched<double>(p);
  if (dtype_is_integral(dt)) return visit_integral(dt, [&](auto tag) { int_batched<decltype(tag)>(p); });
  bool redo = false;
  if (!inner_dense(p.a)) a = contiguous(a, holder), redo = true;
  if (!inner_dense(p.b)) b = contiguous(b, holder), redo = true;
  const tessera_tensor_t* c_user = c;
  if (!inner_dense(p.c)) {
    holder.emplace_back(c->sizes, c->ndim, c->dtype);
    c = holder.back().raw();
    redo = true;
  }
  if (redo) p = matmul_problem(call, a, b, c);
  p.a.dt = p.b.dt = p.c.dt = dnnl_dtype(dt);
  if (b == call.input(1).raw()) p.b.version = tensor_version(b);
  onednn_matmul(p.a, p.b, p.c, nullptr);
  if (c != c_user) copy_tensor(c_user, c);
}

namespace {
// linear(x [..., K], weight [N, K], bias [N]?) = x @ weight^T + bias; the weight is read transposed
// through its strides (no copy) and the bias is fused into the oneDNN matmul, and so are the
// activation and the residual of _linear_epilogue (f32 / bf16 only, K > 0: checked by its kernel).
void linear_impl(const KernelCall& call, MatEpilogue::Activation activation, const tessera_tensor_t* residual) {
  const int32_t dt = call.input(0).dtype();
  const tessera_tensor_t* x0 = call.input(0).raw();
  // As matmul: an empty product (or K == 0: zeros, plus the bias) is answered before the dtype check.
  const bool nothing_to_multiply = call.output(0).raw()->numel == 0 || (x0->ndim >= 1 && x0->sizes[x0->ndim - 1] == 0);
  bool all_bool = dt == TESSERA_DTYPE_BOOL;
  for (int i = 1; i < call.num_inputs(); ++i) all_bool = all_bool && (!call.input(i).defined() || call.input(i).dtype() == dt);
  if (!(nothing_to_multiply && all_bool)) check_operands(call, call.num_inputs());
  if (dt == TESSERA_DTYPE_FLOAT16 && !nothing_to_multiply) return run_via_f32(call, &linear_kernel);
  TempList holder;
  const tessera_tensor_t* x = call.input(0).raw();
  const tessera_tensor_t* w = call.input(1).raw();
  const tessera_tensor_t* bias = call.num_inputs() > 2 && call.input(2).defined() ? call.input(2).raw() : nullptr;
  const tessera_tensor_t* y = call.output(0).raw();
  if (w->ndim != 2)
    fail("linear: weight has shape " + shape_str(w) + "; expected 2-D [out_features, in_features]");
  if (x->ndim < 1) fail("linear: input is 0-d; expected at least 1 dim [..., in_features]");
  const int64_t k = x->sizes[x->ndim - 1], n = w->sizes[0];
  if (w->sizes[1] != k)
    fail("linear: input " + shape_str(x) + " has " + std::to_string(k) + " features but weight " + shape_str(w) +
         " expects " + std::to_string(w->sizes[1]) + "; expected input [..., " + std::to_string(w->sizes[1]) + "]");
  if (bias && (bias->ndim != 1 || bias->sizes[0] != n))
    fail("linear: bias has shape " + shape_str(bias) + "; expected [" + std::to_string(n) + "]");
  if (y->numel == 0) return;
  // Rows of x (and y) must be addressable with one stride: collapse leading dims or copy.
  auto rows_stride = [](const tessera_tensor_t* t, int64_t* out) {
    if (t->ndim == 1) {
      *out = t->sizes[0];
      return true;
    }
    int64_t s = -1, expected = -1;
    for (int d = t->ndim - 2; d >= 0; --d) {
      if (t->sizes[d] == 1) continue;
      if (s < 0) {
        s = t->strides[d];
        expected = s * t->sizes[d];
      } else {
        if (t->strides[d] != expected) return false;
        expected *= t->sizes[d];
      }
    }
    *out = s < 0 ? t->sizes[t->ndim - 1] : s;
    return true;
  };
  const int64_t m = x->numel / std::max<int64_t>(k, 1);
  if (k == 0) {
    if (!bias) return fill_zero(y);
    OwnedTensor bcast(y->sizes, y->ndim, y->dtype);
    copy_tensor(bcast.raw(), bias);
    return copy_tensor(y, bcast.raw());
  }
  int64_t sxm = 0, sym = 0;
  if (!rows_stride(x, &sxm) || (x->strides[x->ndim - 1] != 1 && sxm != 1)) {
    x = contiguous(x, holder);
    rows_stride(x, &sxm);
  }
  const tessera_tensor_t* y_user = y;
  if (!rows_stride(y, &sym) || y->strides[y->ndim - 1] != 1) {
    holder.emplace_back(y->sizes, y->ndim, y->dtype);
    y = holder.back().raw();
    rows_stride(y, &sym);
  }
  if (w->strides[0] != 1 && w->strides[1] != 1) w = contiguous(w, holder);
  if (dtype_is_integral(dt)) {
    visit_integral(dt, [&](auto tag) {
      using T = decltype(tag);
      const T* xp = static_cast<const T*>(data_of(x));
      const T* wp = static_cast<const T*>(data_of(w));
      const T* bp = bias ? static_cast<const T*>(data_of(bias)) : nullptr;
      T* yp = static_cast<T*>(data_of(y));
      const int64_t sxk = x->strides[x->ndim - 1];
      parallel_for(0, m, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n * k)), [&](int64_t b, int64_t e) {
        Buffer<uint64_t> acc(n);
        for (int64_t i = b; i < e; ++i)
          int_row<T>(n, k, xp + i * sxm, sxk, wp, w->strides[1], w->strides[0], yp + i * sym, 1, bp,
                     bias ? bias->strides[0] : 0, acc.get());
      });
    });
  } else if (dt == TESSERA_DTYPE_FLOAT64) {
    const double* xp = static_cast<const double*>(data_of(x));
    const double* wp = static_cast<const double*>(data_of(w));
    double* yp = static_cast<double*>(data_of(y));
    const int64_t sxk = x->strides[x->ndim - 1];
    const double* bp = bias ? static_cast<const double*>(data_of(bias)) : nullptr;
    parallel_for(0, m, 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = bp ? bp[j * bias->strides[0]] : 0.0;
          for (int64_t q = 0; q < k; ++q) s += xp[i * sxm + q * sxk] * wp[j * w->strides[0] + q * w->strides[1]];
          yp[i * sym + j] = s;
        }
    });
  } else {
    MatOperand a, b, c, bo;
    a.nd = b.nd = c.nd = 2;
    a.dims[0] = m, a.dims[1] = k, a.strides[0] = sxm, a.strides[1] = x->strides[x->ndim - 1];
    b.dims[0] = k, b.dims[1] = n, b.strides[0] = w->strides[1], b.strides[1] = w->strides[0];
    c.dims[0] = m, c.dims[1] = n, c.strides[0] = sym, c.strides[1] = 1;
    a.ptr = data_of(x), b.ptr = data_of(w), c.ptr = data_of(y);
    a.dt = b.dt = c.dt = dnnl_dtype(dt);
    if (w == call.input(1).raw()) b.version = tensor_version(w);
    normalize_unit_strides(a);
    normalize_unit_strides(b);
    normalize_unit_strides(c);
    if (bias) {
      if (bias->strides[0] != 1 && n > 1) bias = contiguous(bias, holder);
      bo.nd = 2;
      bo.dims[0] = 1, bo.dims[1] = n, bo.strides[0] = n, bo.strides[1] = 1;
      bo.ptr = data_of(bias);
      bo.dt = dnnl_dtype(dt);
    }
    MatEpilogue epilogue;
    epilogue.activation = activation;
    MatOperand ro;
    if (residual) {
      int64_t srm = 0;
      if (!rows_stride(residual, &srm) || residual->strides[residual->ndim - 1] != 1) {
        residual = contiguous(residual, holder);
        rows_stride(residual, &srm);
      }
      ro.nd = 2;
      ro.dims[0] = m, ro.dims[1] = n, ro.strides[0] = srm, ro.strides[1] = 1;
      ro.ptr = data_of(residual);
      ro.dt = dnnl_dtype(dt);
      normalize_unit_strides(ro);
      epilogue.residual = &ro;
    }
    const bool fused = residual || activation != MatEpilogue::Activation::None;
    onednn_matmul(a, b, c, bias ? &bo : nullptr, 1.f, fused ? &epilogue : nullptr);
  }
  if (y != y_user) copy_tensor(y_user, y);
}
}  // namespace

void linear_kernel(const KernelCall& call) {
  if (bf16_via_f32(call.input(0).dtype())) return run_via_f32(call, &linear_kernel);
  linear_impl(call, MatEpilogue::Activation::None, nullptr);
}

namespace {
// The activation attribute (at `index`) of an epilogue op, for f32 / bf16 inputs only.
MatEpilogue::Activation epilogue_activation(const KernelCall& call, int index, const char* plain_op) {
  const std::string name = call.num_attrs() > index ? call.attr_string(index) : std::string("none");
  const std::string op = call.op_name();
  MatEpilogue::Activation activation = MatEpilogue::Activation::None;
  if (name == "relu") activation = MatEpilogue::Activation::Relu;
  else if (name == "gelu") activation = MatEpilogue::Activation::GeluErf;
  else if (name == "gelu_tanh") activation = MatEpilogue::Activation::GeluTanh;
  else if (name != "none" && !name.empty())
    fail(op + ": activation='" + name + "' is not supported; expected 'none', 'relu', 'gelu' or 'gelu_tanh'");
  const int32_t dt = call.input(0).dtype();
  if (dt != TESSERA_DTYPE_FLOAT32 && dt != TESSERA_DTYPE_BFLOAT16)
    fail(op + ": dtype " + dtype_name(dt) + " is not supported; expected float32 or bfloat16 (use " + plain_op + ")");
  return activation;
}
}  // namespace

// _linear_epilogue(input, weight, bias?, residual?, activation) = residual + activation(linear(input,
// weight, bias)) as one oneDNN primitive (Note [Linear epilogues]).
void linear_epilogue_kernel(const KernelCall& call) {
  if (bf16_via_f32(call.input(0).dtype())) return run_via_f32(call, &linear_epilogue_kernel);
  const MatEpilogue::Activation activation = epilogue_activation(call, 0, "linear");
  const tessera_tensor_t* x = call.input(0).raw();
  const tessera_tensor_t* y = call.output(0).raw();
  if (x->ndim < 1 || x->sizes[x->ndim - 1] == 0)
    fail("_linear_epilogue: input " + shape_str(x) + " has no features; expected input [..., in_features > 0] (use linear)");
  const tessera_tensor_t* residual = call.num_inputs() > 3 && call.input(3).defined() ? call.input(3).raw() : nullptr;
  if (residual) {
    bool same = residual->ndim == y->ndim;
    for (int d = 0; same && d < y->ndim; ++d) same = residual->sizes[d] == y->sizes[d];
    if (!same)
      fail("_linear_epilogue: residual has shape " + shape_str(residual) + " but the output is " + shape_str(y) +
           "; expected a residual of the output's shape");
  }
  linear_impl(call, activation, residual);
}

namespace {
// Direct convolution loops: in double for f64, exact modulo 2^64 for integers (Note [Integer nn ops]).
template <typename T>
void conv2d_direct(const T* x, const T* w, const T* bias, T* y, int64_t nb, int64_t c, int64_t h,
                   int64_t wd, int64_t oc, int64_t kh, int64_t kw, int64_t oh, int64_t ow, const int64_t* s,
                   const int64_t* p, const int64_t* d, int64_t g) {
  using Acc = std::conditional_t<std::is_integral_v<T>, uint64_t, double>;
  auto wide = [](T v) { if constexpr (std::is_integral_v<T>) return Acc(int64_t(v)); else return Acc(v); };
  const int64_t cg = c / g, ocg = oc / g;
  parallel_for(0, nb * oc, 1, [&](int64_t b, int64_t e) {
    for (int64_t no = b; no < e; ++no) {
      const int64_t ni = no / oc, o = no % oc, gi = o / ocg;
      for (int64_t y0 = 0; y0 < oh; ++y0)
        for (int64_t x0 = 0; x0 < ow; ++x0) {
          Acc acc = bias ? wide(bias[o]) : Acc(0);
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < kh; ++i) {
              const int64_t ih = y0 * s[0] - p[0] + i * d[0];
              if (ih < 0 || ih >= h) continue;
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t iw = x0 * s[1] - p[1] + j * d[1];
                if (iw < 0 || iw >= wd) continue;
                acc += wide(x[((ni * c + gi * cg + ci) * h + ih) * wd + iw]) * wide(w[((o * cg + ci) * kh + i) * kw + j]);
              }
            }
          if constexpr (std::is_integral_v<T>) y[((ni * oc + o) * oh + y0) * ow + x0] = T(int64_t(acc));
          else y[((ni * oc + o) * oh + y0) * ow + x0] = T(acc);
        }
    }
  });
}
}  // namespace

// conv2d(input [N, C, H, W] or [C, H, W], weight [OC, C/groups, KH, KW], bias [OC]?, stride,
// padding, dilation, groups). oneDNN convolution on NCHW / (G)OIHW memory, or channels-last.
namespace {
// Note [Channels-last convolution]
// oneDNN's direct convolutions on AVX-512 (brgconv) and AVX2 prefer NHWC activations: handed
// row-major NCHW, each call reorders its input in and its output back, about a fifth of a 64x56x56
// 3x3 layer's time. A channels-last input, weight or output (memory_format.h; conv2d's shape rule
// makes the output channels-last when the input or weight is) is described to oneDNN as NHWC /
// OHWI as it lies, with no copy, and the primitive (format_tag::any) decides whether it wants
// another layout; when it asks for what the tensor already is, no reorder runs, so a chain of
// channels-last convs keeps its activations in place. Winograd layers still reorder into their
// blocked layout: the transform saves more than the reorder costs (docs/performance.md, "conv2d").
// Only dense channels-last tensors (not also row-major contiguous: channels_last_only) are taken as
// they are; any other strides are copied row-major first, as before.

// Note [Winograd convolution]
// A 3x3, stride-1, undilated, ungrouped f32 convolution can be computed with Winograd's minimal
// filtering F(4x4, 3x3): each 6x6 input tile and each filter are transformed, multiplied
// element-wise (36 GEMMs over the channels), and transformed back into a 4x4 output tile: 36
// multiplies per 16 outputs per channel pair instead of 144. oneDNN's jit_wino_4x3 kernel runs
// ResNet-sized layers (32 to 512 channels) 1.2 to 2.7 times faster than its direct kernel, both
// reorders included (docs/performance.md, "conv2d"). The price is rounding: the transforms mix
// a whole 6x6 input tile, so errors are bounded normwise (by the tile's magnitudes) rather than
// per output. Measured against double on random layers, the error stays within the direct
// summation's worst-case bound gamma_K sum |x w| plus 13 u max sum |x w| (one input channel,
// the worst case; tests/cpu/test_nn.cpp allows 64 u); on ResNet layers it is below 1e-6 of the
// output's magnitude and as small as the direct kernel's. PyTorch's CPU conv is direct; cuDNN
// makes the same trade by default.
// ConvAlgo::Auto takes Winograd where it pays: f32 (f16 runs through f32), at least
// kWinogradMinChannels input and output channels (with 24 or fewer the transforms cost more than
// the GEMMs save: 0.77x at 24, 0.34x at 3 input channels), and tiles x C x OC of at least
// kWinogradMinWork (4x4 output tiles over the batch; smaller layers lose: 0.6x at 64 channels and
// 9 tiles). TESSERA_CPU_CONV_ALGO=direct keeps PyTorch's algorithm everywhere; =winograd takes it
// on every layer oneDNN's kernels accept (F(2x2, 3x3) for some small ones), for tests. A layer
// oneDNN refuses (a post-op its kernel lacks, a CPU without AVX-512) runs direct.
constexpr int64_t kWinogradMinChannels = 32;
constexpr int64_t kWinogradMinWork = int64_t(1) << 16;

bool winograd_applies(int32_t dt, int64_t g, int64_t kh, int64_t kw, const int64_t s[2], const int64_t d[2],
                      int64_t c, int64_t oc, int64_t nb, int64_t oh, int64_t ow) {
  const ConvAlgo algo = conv_algo();
  if (algo == ConvAlgo::Direct || dt != TESSERA_DTYPE_FLOAT32) return false;
  if (g != 1 || kh != 3 || kw != 3 || s[0] != 1 || s[1] != 1 || d[0] != 1 || d[1] != 1) return false;
  if (algo == ConvAlgo::Winograd) return true;
  if (c < kWinogradMinChannels || oc < kWinogradMinChannels) return false;
  // In double: the product of five sizes can exceed int64.
  const double tiles = double(nb) * double((oh + 3) / 4) * double((ow + 3) / 4);
  return tiles * double(c) * double(oc) >= double(kWinogradMinWork);
}

// conv2d, and _conv2d_epilogue's activation as a oneDNN post-op (f32 / bf16 only: checked by its
// kernel).
void conv2d_impl(const KernelCall& call, MatEpilogue::Activation activation) {
  check_operands(call, call.num_inputs() > 2 ? 3 : 2);
  const int32_t dt = call.input(0).dtype();
  if (dt == TESSERA_DTYPE_FLOAT16) return run_via_f32(call, &conv2d_kernel);
  TempList holder;
  // oneDNN reads and writes channels-last activations and weights as they are (Note
  // [Channels-last convolution]); the direct loops of float64 and the integers take row-major.
  const bool onednn = dt != TESSERA_DTYPE_FLOAT64 && !dtype_is_integral(dt);
  auto as_is = [&](const tessera_tensor_t* t) { return onednn && channels_last_only(t); };
  const bool x_cl = as_is(call.input(0).raw()), w_cl = as_is(call.input(1).raw()), y_cl = as_is(call.output(0).raw());
  const tessera_tensor_t* x = x_cl ? call.input(0).raw() : contiguous(call.input(0).raw(), holder);
  const tessera_tensor_t* w = w_cl ? call.input(1).raw() : contiguous(call.input(1).raw(), holder);
  const tessera_tensor_t* bias = call.num_inputs() > 2 ? contiguous(call.input(2).raw(), holder) : nullptr;
  const tessera_tensor_t* y_user = call.output(0).raw();
  const tessera_tensor_t* y = y_cl ? y_user : contiguous(y_user, holder);  // a contiguous temporary when strided
  const bool y_temp = y != y_user;
  if (x->ndim != 3 && x->ndim != 4)
    fail("conv2d: input has shape " + shape_str(x) + "; expected 3-D (C, H, W) or 4-D (N, C, H, W)");
  if (w->ndim != 4) fail("conv2d: weight has shape " + shape_str(w) + "; expected 4-D [out_channels, in_channels/groups, kH, kW]");
  int64_t s[2], p[2], d[2];
  const int64_t one[2] = {1, 1}, zero[2] = {0, 0};
  using A = op::conv2d::attr;  // _conv2d_epilogue's too
  attr_pair(call, A::stride, "stride", s, one);
  if (call.attr(A::padding).kind == TESSERA_VALUE_STRING)
    fail_unimplemented("conv2d: string padding ('" + call.attr_string(A::padding) +
                       "') is not implemented by the CPU plugin; pass integers");
  attr_pair(call, A::padding, "padding", p, zero);
  attr_pair(call, A::dilation, "dilation", d, one);
  const int64_t g = call.attr_int(A::groups);
  const int off = x->ndim == 4 ? 1 : 0;
  const int64_t nb = off ? x->sizes[0] : 1, c = x->sizes[off], h = x->sizes[off + 1], wd = x->sizes[off + 2];
  const int64_t oc = w->sizes[0], kh = w->sizes[2], kw = w->sizes[3];
  if (g <= 0 || c % g != 0 || oc % g != 0)
    fail("conv2d: groups=" + std::to_string(g) + " must be positive and divide in_channels (" + std::to_string(c) +
         ") and out_channels (" + std::to_string(oc) + ")");
  if (w->sizes[1] != c / g)
    fail("conv2d: weight " + shape_str(w) + " expects " + std::to_string(w->sizes[1] * g) + " input channels but the input " +
         shape_str(x) + " has " + std::to_string(c) + " (groups=" + std::to_string(g) + ")");
  if (bias && (bias->ndim != 1 || bias->sizes[0] != oc))
    fail("conv2d: bias has shape " + shape_str(bias) + "; expected [" + std::to_string(oc) + "]");
  for (int i = 0; i < 2; ++i)
    if (s[i] <= 0 || d[i] <= 0 || p[i] < 0)
      fail("conv2d: stride and dilation must be positive and padding non-negative (got stride " + std::to_string(s[i]) +
           ", padding " + std::to_string(p[i]) + ", dilation " + std::to_string(d[i]) + ")");
  const int64_t oh = (h + 2 * p[0] - d[0] * (kh - 1) - 1) / s[0] + 1;
  const int64_t ow = (wd + 2 * p[1] - d[1] * (kw - 1) - 1) / s[1] + 1;
  if (oh <= 0 || ow <= 0)
    fail("conv2d: the kernel " + shape_str(w) + " (dilated) is larger than the padded input " + shape_str(x));
  if (y->ndim != x->ndim || y->sizes[off] != oc || y->sizes[off + 1] != oh || y->sizes[off + 2] != ow)
    fail("conv2d: output has shape " + shape_str(y) + "; expected [" + (off ? std::to_string(nb) + ", " : "") +
         std::to_string(oc) + ", " + std::to_string(oh) + ", " + std::to_string(ow) + "]");
  if (y->numel == 0) return;
  if (dt == TESSERA_DTYPE_FLOAT64 || dtype_is_integral(dt)) {
    visit(dt, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, double> || (std::is_integral_v<T> && !std::is_same_v<T, bool>)) {
        conv2d_direct<T>(static_cast<const T*>(data_of(x)), static_cast<const T*>(data_of(w)),
                         bias ? static_cast<const T*>(data_of(bias)) : nullptr, static_cast<T*>(data_of(y)), nb, c, h,
                         wd, oc, kh, kw, oh, ow, s, p, d, g);
      }
    });
  } else {
    const memory::data_type mdt = dnnl_dtype(dt);
    using tag = memory::format_tag;
    const memory::desc src_md({nb, c, h, wd}, mdt, x_cl ? tag::nhwc : tag::nchw);
    const memory::desc dst_md({nb, oc, oh, ow}, mdt, y_cl ? tag::nhwc : tag::nchw);
    const memory::desc wei_md = g == 1 ? memory::desc({oc, c, kh, kw}, mdt, w_cl ? tag::ohwi : tag::oihw)
                                       : memory::desc({g, oc / g, c / g, kh, kw}, mdt, w_cl ? tag::gohwi : tag::goihw);
    const memory::desc bias_md = bias ? memory::desc({oc}, mdt, memory::format_tag::x) : memory::desc();
    // The primitive picks its own layouts (format_tag::any); activations are reordered in and out
    // through thread-local buffers and the weight is packed once per version (Note [Weight cache]).
    const bool winograd = winograd_applies(dt, g, kh, kw, s, d, c, oc, nb, oh, ow);
    // Note [Row-major 1x1 convolution]: with row-major activations, an unpadded 1x1 conv is a GEMM
    // over them as they lie (weight [OC, C] times each image's [C, H*W]); oneDNN's gemm kernel runs it
    // on NCHW directly, as fast as its NHWC kernel on NHWC data (1.07 / 1.12 ms against 1.08 / 1.15
    // ms for 256->64 / 64->256 channels at 2x56x56, f32, 2 threads), while format_tag::any picks the
    // NHWC kernel and both reorders (1.8-2.7 ms). Asked for NCHW explicitly here.
    const bool plain_1x1 = !x_cl && !y_cl && kh == 1 && kw == 1 && p[0] == 0 && p[1] == 0 && d[0] == 1 &&
                           d[1] == 1 && g == 1;
    std::string key = winograd ? "conv2d_wino" : plain_1x1 ? "conv2d_nchw" : "conv2d_any";
    const int64_t geo[] = {nb, c, h, wd, oc, kh, kw, s[0], s[1], p[0], p[1], d[0], d[1], g, bias != nullptr, int64_t(mdt), w_cl};
    key_append(key, geo, sizeof(geo));
    MatEpilogue epilogue;
    epilogue.activation = activation;
    const MatEpilogue* fused = activation != MatEpilogue::Activation::None ? &epilogue : nullptr;
    key_append(key, fused);
    const OmpThreadScope threads(threads_for(OpKind::Conv, work_product({2, nb, oc, oh, ow, c / g, kh, kw})));
    key_append_threads(key);
    auto prim = cache().get(key, [&] {
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      set_epilogue(attr, fused);
      const memory::dims strides = {s[0], s[1]}, dil = {d[0] - 1, d[1] - 1}, pad = {p[0], p[1]};
      const memory::desc wei_any = g == 1 ? memory::desc({oc, c, kh, kw}, mdt, memory::format_tag::any)
                                          : memory::desc({g, oc / g, c / g, kh, kw}, mdt, memory::format_tag::any);
      auto make_pd = [&](dnnl::algorithm alg, bool plain = false) {
        const memory::desc src_any({nb, c, h, wd}, mdt, plain ? tag::nchw : tag::any);
        const memory::desc dst_any({nb, oc, oh, ow}, mdt, plain ? tag::nchw : tag::any);
        const auto desc = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, alg, src_any,
                                                                 wei_any, bias_md, dst_any, strides, dil, pad, pad)
                               : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, alg, src_any,
                                                                 wei_any, dst_any, strides, dil, pad, pad);
        return dnnl::convolution_forward::primitive_desc(desc, attr, cpu_engine());
      };
      dnnl::convolution_forward::primitive_desc pd;
      if (winograd) {
        // oneDNN has no Winograd kernel for this layer (post-op, ISA): direct (Note [Winograd convolution]).
        try {
          pd = make_pd(dnnl::algorithm::convolution_winograd);
        } catch (const dnnl::error&) {
        }
      }
      if (plain_1x1) {
        try {  // a post-op the gemm kernel lacks: the layout oneDNN picks, reorders included
          pd = make_pd(dnnl::algorithm::convolution_direct, /*plain=*/true);
        } catch (const dnnl::error&) {
        }
      }
      if (!pd) pd = make_pd(dnnl::algorithm::convolution_direct);
      return CachedPrimitive{dnnl::convolution_forward(pd), pd.scratchpad_desc(), pd.weights_desc(), pd.src_desc(),
                             pd.dst_desc()};
    });
    const memory::desc& src_want = prim->src;
    const memory::desc& dst_want = prim->dst;
    dnnl::stream& strm = thread_stream();
    memory src_user(src_md, cpu_engine(), data_of(x)), dst_user(dst_md, cpu_engine(), data_of(y));
    memory src = src_user, dst = dst_user;
    if (src_want != src_md) {
      src = memory(src_want, cpu_engine(), thread_buffer(1, src_want.get_size()));
      dnnl::reorder(src_user, src).execute(strm, src_user, src);
    }
    if (dst_want != dst_md) dst = memory(dst_want, cpu_engine(), thread_buffer(2, dst_want.get_size()));
    memory wei(wei_md, cpu_engine(), data_of(w));
    std::shared_ptr<const PackedWeight> packed;
    Buffer<char> wei_once;
    if (prim->weights != wei_md) {
      const uint64_t version = w == call.input(1).raw() ? tensor_version(w) : 0;
      std::string wkey = winograd ? "conv2d_wino" : "conv2d";
      const void* wp = data_of(w);
      key_append(wkey, &wp, sizeof(wp));
      key_append(wkey, geo, sizeof(geo));
      auto pack_into = [&](void* out) {
        memory packed_mem(prim->weights, cpu_engine(), out);
        if (w_cl && winograd) {
          // oneDNN reorders into the Winograd weight format from (G)OIHW only: go through it.
          const memory::desc plain_md = g == 1 ? memory::desc({oc, c, kh, kw}, mdt, tag::oihw)
                                               : memory::desc({g, oc / g, c / g, kh, kw}, mdt, tag::goihw);
          Buffer<char> plain_buf(int64_t(plain_md.get_size()));
          memory plain(plain_md, cpu_engine(), plain_buf.get());
          dnnl::reorder(wei, plain).execute(strm, wei, plain);
          dnnl::reorder(plain, packed_mem).execute(strm, plain, packed_mem);
        } else {
          dnnl::reorder(wei, packed_mem).execute(strm, wei, packed_mem);
        }
        strm.wait();
      };
      packed = weight_cache().get(wkey, version, prim->weights, [&](PackedWeight& pw) { pack_into(pw.data.get()); });
      if (packed) {
        wei = memory(packed->md, cpu_engine(), packed->data.get());
      } else {
        wei_once.reset(int64_t(prim->weights.get_size()));
        pack_into(wei_once.get());
        wei = memory(prim->weights, cpu_engine(), wei_once.get());
      }
    }
    strm.wait();
    std::unordered_map<int, memory> args;
    args.emplace(DNNL_ARG_SRC, src);
    args.emplace(DNNL_ARG_WEIGHTS, wei);
    args.emplace(DNNL_ARG_DST, dst);
    if (bias) args.emplace(DNNL_ARG_BIAS, memory(bias_md, cpu_engine(), data_of(bias)));
    execute(*prim, args);
    if (dst_want != dst_md) {
      dnnl::reorder(dst, dst_user).execute(strm, dst, dst_user);
      strm.wait();
    }
  }
  if (y_temp) copy_tensor(y_user, y);
}
}  // namespace

void conv2d_kernel(const KernelCall& call) {
  if (bf16_via_f32(call.input(0).dtype())) return run_via_f32(call, &conv2d_kernel);
  conv2d_impl(call, MatEpilogue::Activation::None);
}

// _conv2d_epilogue(input, weight, bias?, stride, padding, dilation, groups, activation) =
// activation(conv2d(...)) as one oneDNN primitive (Note [Linear epilogues]).
void conv2d_epilogue_kernel(const KernelCall& call) {
  if (bf16_via_f32(call.input(0).dtype())) return run_via_f32(call, &conv2d_epilogue_kernel);
  conv2d_impl(call, epilogue_activation(call, 4, "conv2d"));
}

}  // namespace tessera::cpu::nn
