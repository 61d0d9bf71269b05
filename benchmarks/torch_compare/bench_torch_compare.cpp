// Every row of the CPU performance table (docs/performance.md) timed through Tessera's public API
// and through libtorch's ATen in the same process: same inputs, same thread count, the two sides
// interleaved round by round, medians reported. ratio = PyTorch time / Tessera time (> 1: Tessera
// is faster; the goal is 1.2). Built without libtorch (TESSERA_BENCH_WITH_TORCH=OFF) each row says
// "not compared" and only Tessera's time is reported.
//
// Extra references in the same run: oneDNN's matmul with the weights reordered once into its
// preferred layout (the best a reused weight can do), for matmul and linear.
//
// --contention runs every row again next to two busy-loop processes and reports each side's
// slowdown against the quiet run.
//
// usage: bench_torch_compare [--json FILE] [--threads N] [--rounds N] [--filter SUBSTRING] [--contention]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <dnnl.hpp>
#include <omp.h>

#include "../cpu/bench_timing.h"
#include "tessera/tessera.h"

#ifdef TESSERA_HAVE_TORCH
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#endif

namespace {

using tessera::bench::median;

using Clock = std::chrono::steady_clock;
using Fn = std::function<void()>;

struct Options {
  std::string json = "bench_torch_compare.json";
  int threads = 2;
  int rounds = 9;
  double trial_s = 0.04;
  std::string filter;
  bool contention = false;
};

// Seconds per call over one trial of at least `seconds` (at least one call). The clock is read
// after batches of calls that double in length, not after every call: one read of the clock costs
// about 200 ns on this virtual machine, as much as the tiny ops of the latency row.
double trial(const Fn& fn, double seconds) {
  int64_t reps = 0, batch = 1;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    for (int64_t i = 0; i < batch; ++i) fn();
    reps += batch;
    if (batch < (int64_t(1) << 20)) batch *= 2;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  return elapsed / double(reps);
}

// Medians of per-call seconds of each function, the functions run in turn each round (a function
// may be empty: not measured, reported as 0).
std::vector<double> time_interleaved(const std::vector<Fn>& fns, const Options& o) {
  std::vector<std::vector<double>> samples(fns.size());
  for (const Fn& f : fns)
    if (f) f(), f();  // warm-up: plugin load, primitive creation, caches
  for (int r = 0; r < o.rounds; ++r)
    for (size_t i = 0; i < fns.size(); ++i)
      if (fns[i]) samples[i].push_back(trial(fns[i], o.trial_s));
  std::vector<double> out;
  for (auto& s : samples) out.push_back(median(s));
  return out;
}

struct Row {
  Row(std::string n, std::string g, Fn t, Fn p, Fn r = Fn(), std::string rn = "")
      : name(std::move(n)), group(std::move(g)), tessera(std::move(t)), torch(std::move(p)), reference(std::move(r)),
        reference_name(std::move(rn)) {}
  std::string name, group;
  Fn tessera, torch, reference;  // reference (optional): oneDNN with prepacked weights
  std::string reference_name;
};

struct Result {
  std::string name, group, reference_name;
  double tessera_s = 0, torch_s = 0, reference_s = 0;
  double tessera_loaded_s = 0, torch_loaded_s = 0;
};

// `t` converted to `dt` through a casting copy.
tessera::Tensor cast(const tessera::Tensor& t, tessera::DType dt) {
  if (t.dtype() == dt) return t;
  tessera::Tensor out = tessera::empty(t.sizes(), dt);
  out.copy_(t);
  return out;
}

tessera::Tensor rand_t(std::vector<int64_t> sizes, tessera::DType dt, double scale = 1.0) {
  tessera::Tensor t = tessera::randn(sizes);
  if (scale != 1.0) t = t * scale;
  return cast(t, dt);
}

#ifdef TESSERA_HAVE_TORCH
// The same values as a libtorch tensor (bf16 shares the bit layout).
at::Tensor to_torch(const tessera::Tensor& t) {
  const tessera::Tensor c = t.contiguous();
  const auto st = c.dtype() == tessera::kBFloat16 ? at::kBFloat16 : at::kFloat;
  std::vector<int64_t> sizes(c.sizes().begin(), c.sizes().end());
  at::Tensor out = at::empty(sizes, at::TensorOptions().dtype(st));
  std::memcpy(out.data_ptr(), c.raw_data_ptr(), c.nbytes());
  return out;
}
#define TORCH_FN(...) Fn([=]() mutable { __VA_ARGS__; })
#else
#define TORCH_FN(...) Fn()
#endif

// oneDNN matmul [m, k] x [k, n] with the weights reordered once into the layout the primitive
// prefers (format_tag::any), one primitive built once: the reference for reused weights.
struct PrepackedMatmul {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul prim;
  dnnl::memory src, wei, dst, bias;
  PrepackedMatmul(int64_t m, int64_t k, int64_t n, dnnl::memory::data_type dt, void* a, void* b_kn_or_nk,
                  bool weight_is_nk, void* bias_ptr) {
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc src_md({m, k}, dt, tag::ab), dst_md({m, n}, dt, tag::ab);
    const dnnl::memory::desc wei_any({k, n}, dt, tag::any), bias_md({1, n}, dt, tag::ab);
    const dnnl::memory::desc wei_user({k, n}, dt, weight_is_nk ? tag::ba : tag::ab);
    const auto desc = bias_ptr ? dnnl::matmul::desc(src_md, wei_any, bias_md, dst_md)
                               : dnnl::matmul::desc(src_md, wei_any, dst_md);
    dnnl::matmul::primitive_desc pd(desc, eng);
    prim = dnnl::matmul(pd);
    src = dnnl::memory(src_md, eng, a);
    dst = dnnl::memory(dst_md, eng);
    wei = dnnl::memory(pd.weights_desc(), eng);
    dnnl::memory user(wei_user, eng, b_kn_or_nk);
    dnnl::reorder(user, wei).execute(strm, user, wei);
    if (bias_ptr) bias = dnnl::memory(bias_md, eng, bias_ptr);
    strm.wait();
  }
  void run() {
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
    if (bias) args.emplace(DNNL_ARG_BIAS, bias);
    prim.execute(strm, args);
    strm.wait();
  }
};

constexpr int64_t kBig = int64_t(1) << 24;  // 16M elements

void add_elementwise_rows(std::vector<Row>& rows) {
  using namespace tessera;
  const Tensor a = rand_t({kBig}, kFloat32), b = rand_t({kBig}, kFloat32);
#ifdef TESSERA_HAVE_TORCH
  const at::Tensor ta = to_torch(a), tb = to_torch(b);
  at::Tensor tout = at::empty_like(ta);
#endif
  rows.push_back({"add 16M f32 (fresh)", "elementwise", [=] { (void)(a + b); }, TORCH_FN((void)(ta + tb))});
  rows.push_back({"mul 16M f32 (fresh)", "elementwise", [=] { (void)(a * b); }, TORCH_FN((void)(ta * tb))});
  rows.push_back({"sigmoid 16M f32 (fresh)", "elementwise", [=] { (void)sigmoid(a); }, TORCH_FN((void)at::sigmoid(ta))});
  rows.push_back({"exp 16M f32 (fresh)", "elementwise", [=] { (void)tessera::exp(a); }, TORCH_FN((void)at::exp(ta))});
  rows.push_back({"add 16M f32 (torch out=)", "elementwise_out", [=] { (void)(a + b); },
                  TORCH_FN(at::add_out(tout, ta, tb))});
  rows.push_back({"mul 16M f32 (torch out=)", "elementwise_out", [=] { (void)(a * b); },
                  TORCH_FN(at::mul_out(tout, ta, tb))});
  rows.push_back({"sigmoid 16M f32 (torch out=)", "elementwise_out", [=] { (void)sigmoid(a); },
                  TORCH_FN(at::sigmoid_out(tout, ta))});
  rows.push_back({"exp 16M f32 (torch out=)", "elementwise_out", [=] { (void)tessera::exp(a); },
                  TORCH_FN(at::exp_out(tout, ta))});
  rows.push_back({"gelu erf 16M f32 (torch out=)", "elementwise_out", [=] { (void)gelu(a); },
                  TORCH_FN(at::gelu_out(tout, ta, "none"))});
  rows.push_back({"gelu tanh 16M f32 (torch out=)", "elementwise_out", [=] { (void)gelu(a, "tanh"); },
                  TORCH_FN(at::gelu_out(tout, ta, "tanh"))});
  // In place: both sides add a small value so that the data stays finite over many calls.
  Tensor acc = rand_t({kBig}, kFloat32), small = rand_t({kBig}, kFloat32, 1e-6);
#ifdef TESSERA_HAVE_TORCH
  at::Tensor tacc = to_torch(acc), tsmall = to_torch(small);
#endif
  rows.push_back({"add_ 16M f32 (in place)", "inplace", [=]() mutable { acc.add_(small); },
                  TORCH_FN(tacc.add_(tsmall))});
  Tensor prod = rand_t({kBig}, kFloat32), ones = full({kBig}, 1.0);
#ifdef TESSERA_HAVE_TORCH
  at::Tensor tprod = to_torch(prod), tones = to_torch(ones);
#endif
  rows.push_back({"mul_ 16M f32 (in place)", "inplace", [=]() mutable { prod.mul_(ones); },
                  TORCH_FN(tprod.mul_(tones))});
}

void add_norm_rows(std::vector<Row>& rows) {
  using namespace tessera;
  const Tensor x = rand_t({4096, 4096}, kFloat32), w = rand_t({4096}, kFloat32), b = rand_t({4096}, kFloat32);
#ifdef TESSERA_HAVE_TORCH
  const at::Tensor tx = to_torch(x), tw = to_torch(w), tb = to_torch(b);
#endif
  rows.push_back({"softmax 4096x4096 f32", "norm", [=] { (void)softmax(x, -1); }, TORCH_FN((void)at::softmax(tx, -1))});
  rows.push_back({"layer_norm 4096x4096 f32", "norm", [=] { (void)layer_norm(x, {4096}, w, b); },
                  TORCH_FN((void)at::layer_norm(tx, {4096}, tw, tb))});
}

void add_matmul_rows(std::vector<Row>& rows) {
  using namespace tessera;
  struct Case { DType dt; int64_t n; };
  for (Case c : {Case{kFloat32, 256}, Case{kFloat32, 512}, Case{kFloat32, 1024}, Case{kFloat32, 2048},
                 Case{kBFloat16, 256}, Case{kBFloat16, 1024}, Case{kBFloat16, 2048}}) {
    const Tensor a = rand_t({c.n, c.n}, c.dt), b = rand_t({c.n, c.n}, c.dt);
    const char* dn = c.dt == kFloat32 ? "f32" : "bf16";
#ifdef TESSERA_HAVE_TORCH
    const at::Tensor ta = to_torch(a), tb = to_torch(b);
#endif
    auto ref = std::make_shared<PrepackedMatmul>(
        c.n, c.n, c.n, c.dt == kFloat32 ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16,
        a.raw_data_ptr(), b.raw_data_ptr(), false, nullptr);
    rows.push_back({"matmul " + std::string(dn) + " " + std::to_string(c.n), "matmul", [=] { (void)matmul(a, b); },
                    TORCH_FN((void)at::matmul(ta, tb)), [ref] { ref->run(); }, "onednn_prepacked"});
  }
  for (DType dt : {kFloat32, kBFloat16}) {
    const Tensor x = rand_t({32, 4096}, dt), w = rand_t({4096, 4096}, dt, 1.0 / 64), bias = rand_t({4096}, dt);
    const char* dn = dt == kFloat32 ? "f32" : "bf16";
#ifdef TESSERA_HAVE_TORCH
    const at::Tensor tx = to_torch(x), tw = to_torch(w), tbias = to_torch(bias);
#endif
    auto ref = std::make_shared<PrepackedMatmul>(
        32, 4096, 4096, dt == kFloat32 ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16,
        x.raw_data_ptr(), w.raw_data_ptr(), true, bias.raw_data_ptr());
    rows.push_back({"linear " + std::string(dn) + " 32x4096x4096", "linear", [=] { (void)linear(x, w, bias); },
                    TORCH_FN((void)at::linear(tx, tw, tbias)), [ref] { ref->run(); }, "onednn_prepacked"});
  }
}

void add_sdpa_rows(std::vector<Row>& rows) {
  using namespace tessera;
  for (DType dt : {kFloat32, kBFloat16})
    for (int64_t l : {512, 2048})
      for (bool causal : {false, true}) {
        const Tensor q = rand_t({1, 8, l, 64}, dt), k = rand_t({1, 8, l, 64}, dt), v = rand_t({1, 8, l, 64}, dt);
#ifdef TESSERA_HAVE_TORCH
        const at::Tensor tq = to_torch(q), tk = to_torch(k), tv = to_torch(v);
#endif
        rows.push_back({std::string("sdpa ") + (dt == kFloat32 ? "f32" : "bf16") + " L=" + std::to_string(l) +
                            (causal ? " causal" : ""),
                        "sdpa", [=] { (void)scaled_dot_product_attention(q, k, v, std::nullopt, causal); },
                        TORCH_FN((void)at::scaled_dot_product_attention(tq, tk, tv, {}, 0.0, causal))});
      }
}

// One pre-norm transformer block (seq 512, d_model 512, 8 heads, MLP 2048, causal), as in
// benchmarks/cpu/bench_block.cpp.
constexpr int64_t kSeq = 512, kModel = 512, kHeads = 8, kMlp = 2048;

void add_block_rows(std::vector<Row>& rows) {
  using namespace tessera;
  for (DType dt : {kFloat32, kBFloat16}) {
    auto wt = [&](int64_t o, int64_t i) { return rand_t({o, i}, dt, 1.0 / std::sqrt(double(i))); };
    auto vec = [&](int64_t n) { return rand_t({n}, dt, 0.1); };
    // ln1_w ln1_b wq bq wk bk wv bv wo bo ln2_w ln2_b w1 b1 w2 b2
    std::vector<Tensor> W = {cast(ones({kModel}) + randn({kModel}) * 0.1, dt), vec(kModel),
                             wt(kModel, kModel), vec(kModel), wt(kModel, kModel), vec(kModel),
                             wt(kModel, kModel), vec(kModel), wt(kModel, kModel), vec(kModel),
                             cast(ones({kModel}) + randn({kModel}) * 0.1, dt), vec(kModel),
                             wt(kMlp, kModel), vec(kMlp), wt(kModel, kMlp), vec(kModel)};
    const Tensor x = rand_t({1, kSeq, kModel}, dt);
    auto block = [W, x] {
      const int64_t dh = kModel / kHeads;
      Tensor h = layer_norm(x, {kModel}, W[0], W[1]);
      Tensor q = linear(h, W[2], W[3]).view({1, kSeq, kHeads, dh}).transpose(1, 2);
      Tensor k = linear(h, W[4], W[5]).view({1, kSeq, kHeads, dh}).transpose(1, 2);
      Tensor v = linear(h, W[6], W[7]).view({1, kSeq, kHeads, dh}).transpose(1, 2);
      Tensor a = scaled_dot_product_attention(q, k, v, std::nullopt, true).transpose(1, 2).reshape({1, kSeq, kModel});
      Tensor x1 = x + linear(a, W[8], W[9]);
      Tensor h2 = layer_norm(x1, {kModel}, W[10], W[11]);
      (void)(x1 + linear(gelu(linear(h2, W[12], W[13])), W[14], W[15]));
    };
#ifdef TESSERA_HAVE_TORCH
    std::vector<at::Tensor> T;
    for (const Tensor& t : W) T.push_back(to_torch(t));
    const at::Tensor tx = to_torch(x);
    auto tblock = [T, tx] {
      const int64_t dh = kModel / kHeads;
      at::Tensor h = at::layer_norm(tx, {kModel}, T[0], T[1]);
      at::Tensor q = at::linear(h, T[2], T[3]).view({1, kSeq, kHeads, dh}).transpose(1, 2);
      at::Tensor k = at::linear(h, T[4], T[5]).view({1, kSeq, kHeads, dh}).transpose(1, 2);
      at::Tensor v = at::linear(h, T[6], T[7]).view({1, kSeq, kHeads, dh}).transpose(1, 2);
      at::Tensor a = at::scaled_dot_product_attention(q, k, v, {}, 0.0, true).transpose(1, 2).reshape({1, kSeq, kModel});
      at::Tensor x1 = tx + at::linear(a, T[8], T[9]);
      at::Tensor h2 = at::layer_norm(x1, {kModel}, T[10], T[11]);
      (void)(x1 + at::linear(at::gelu(at::linear(h2, T[12], T[13])), T[14], T[15]));
    };
#endif
    rows.push_back({std::string("transformer block ") + (dt == kFloat32 ? "f32" : "bf16"), "block", block,
                    TORCH_FN(tblock())});
  }
}

void add_conv_rows(std::vector<Row>& rows) {
  using namespace tessera;
  const Tensor x = rand_t({8, 64, 56, 56}, kFloat32), w = rand_t({64, 64, 3, 3}, kFloat32, 1.0 / 24),
               b = rand_t({64}, kFloat32);
#ifdef TESSERA_HAVE_TORCH
  const at::Tensor tx = to_torch(x), tw = to_torch(w), tb = to_torch(b);
#endif
  rows.push_back({"conv2d 8x64x56x56 3x3 f32", "conv", [=] { (void)conv2d(x, w, b, {1, 1}, {1, 1}); },
                  TORCH_FN((void)at::conv2d(tx, tw, tb, {1, 1}, {1, 1}))});
  // The same layer and a ResNet bottleneck's three convs (1x1 256->64, 3x3 64->64, 1x1 64->256)
  // with channels-last activations on both sides (torch.channels_last): consecutive convs keep the
  // layout, so no activation is reordered between them (Note [Channels-last convolution]).
  const Tensor xc = contiguous(x, MemoryFormat::ChannelsLast);
  const Tensor bx = contiguous(rand_t({2, 256, 56, 56}, kFloat32), MemoryFormat::ChannelsLast);
  const Tensor w1 = rand_t({64, 256, 1, 1}, kFloat32, 1.0 / 16), w2 = rand_t({64, 64, 3, 3}, kFloat32, 1.0 / 24),
               w3 = rand_t({256, 64, 1, 1}, kFloat32, 1.0 / 8);
#ifdef TESSERA_HAVE_TORCH
  const at::Tensor txc = tx.contiguous(at::MemoryFormat::ChannelsLast), tbx = to_torch(bx).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor tw1 = to_torch(w1), tw2 = to_torch(w2), tw3 = to_torch(w3);
#endif
  rows.push_back({"conv2d 8x64x56x56 3x3 f32 channels-last", "conv", [=] { (void)conv2d(xc, w, b, {1, 1}, {1, 1}); },
                  TORCH_FN((void)at::conv2d(txc, tw, tb, {1, 1}, {1, 1}))});
  const Tensor bxr = bx.contiguous();
#ifdef TESSERA_HAVE_TORCH
  const at::Tensor tbxr = tbx.contiguous();
#endif
  rows.push_back({"bottleneck convs 2x256x56x56 f32", "conv",
                  [=] {
                    (void)conv2d(conv2d(conv2d(bxr, w1), w2, std::nullopt, {1, 1}, {1, 1}), w3);
                  },
                  TORCH_FN((void)at::conv2d(at::conv2d(at::conv2d(tbxr, tw1), tw2, {}, {1, 1}, {1, 1}), tw3))});
  rows.push_back({"bottleneck convs 2x256x56x56 f32 channels-last", "conv",
                  [=] {
                    (void)conv2d(conv2d(conv2d(bx, w1), w2, std::nullopt, {1, 1}, {1, 1}), w3);
                  },
                  TORCH_FN((void)at::conv2d(at::conv2d(at::conv2d(tbx, tw1), tw2, {}, {1, 1}, {1, 1}), tw3))});
}

void add_latency_rows(std::vector<Row>& rows) {
  using namespace tessera;
  const Tensor a = rand_t({1}, kFloat32), b = rand_t({1}, kFloat32);
#ifdef TESSERA_HAVE_TORCH
  const at::Tensor ta = to_torch(a), tb = to_torch(b);
#endif
  rows.push_back({"add 1-element f32 (per-op latency)", "latency", [=] { (void)(a + b); }, TORCH_FN((void)(ta + tb))});
}

// Two processes spinning on a core each until stop() (the contention run).
struct BusyLoops {
  std::vector<pid_t> pids;
  void start(int n) {
    for (int i = 0; i < n; ++i) {
      const pid_t p = fork();
      if (p == 0) {
        volatile uint64_t x = 0;
        for (;;) x = x + 1;
      }
      if (p > 0) pids.push_back(p);
    }
  }
  void stop() {
    for (pid_t p : pids) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
    pids.clear();
  }
  ~BusyLoops() { stop(); }
};

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_torch_compare: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--json") o.json = next();
    else if (a == "--threads") o.threads = std::atoi(next().c_str());
    else if (a == "--rounds") o.rounds = std::max(1, std::atoi(next().c_str()));
    else if (a == "--trial-seconds") o.trial_s = std::atof(next().c_str());
    else if (a == "--filter") o.filter = next();
    else if (a == "--contention") o.contention = true;
    else {
      std::fprintf(stderr,
                   "usage: bench_torch_compare [--json FILE] [--threads N] [--rounds N] [--trial-seconds S] "
                   "[--filter SUBSTRING] [--contention]\n");
      return 2;
    }
  }
  omp_set_num_threads(o.threads);
#ifdef TESSERA_HAVE_TORCH
  at::set_num_threads(o.threads);
  c10::InferenceMode inference;  // as torch.inference_mode(): no autograd bookkeeping
  const bool compared = true;
  const std::string torch_version = TESSERA_TORCH_VERSION;
#else
  const bool compared = false;
  const std::string torch_version;
#endif
  const std::string load_before = loadavg();
  tessera::manual_seed(7);
  std::vector<Row> all, rows;
  add_elementwise_rows(all);
  add_norm_rows(all);
  add_matmul_rows(all);
  add_sdpa_rows(all);
  add_block_rows(all);
  add_conv_rows(all);
  add_latency_rows(all);
  for (Row& r : all)
    if (o.filter.empty() || r.name.find(o.filter) != std::string::npos) rows.push_back(std::move(r));
  all.clear();

  std::vector<Result> results;
  std::printf("%-36s %12s %12s %8s %14s\n", "row", "tessera_us", "torch_us", "ratio", "reference");
  for (const Row& r : rows) {
    const auto t = time_interleaved({r.tessera, r.torch, r.reference}, o);
    Result res{r.name, r.group, r.reference_name, t[0], t[1], t[2]};
    results.push_back(res);
    char ratio[32] = "not compared", ref[64] = "";
    if (compared) std::snprintf(ratio, sizeof(ratio), "%.2f", res.torch_s / res.tessera_s);
    if (res.reference_s > 0) std::snprintf(ref, sizeof(ref), "%.2fx of %s", res.reference_s / res.tessera_s, r.reference_name.c_str());
    std::printf("%-36s %12.1f %12.1f %8s %14s\n", r.name.c_str(), res.tessera_s * 1e6, res.torch_s * 1e6, ratio, ref);
    std::fflush(stdout);
  }
  if (o.contention) {
    std::printf("\n-- contention: the same rows next to two busy-loop processes --\n");
    BusyLoops busy;
    busy.start(2);
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto t = time_interleaved({rows[i].tessera, rows[i].torch}, o);
      results[i].tessera_loaded_s = t[0];
      results[i].torch_loaded_s = t[1];
      std::printf("%-36s tessera %10.1f us (x%.1f)   torch %10.1f us (x%.1f)\n", rows[i].name.c_str(), t[0] * 1e6,
                  t[0] / results[i].tessera_s, t[1] * 1e6, compared ? t[1] / results[i].torch_s : 0.0);
      std::fflush(stdout);
    }
    busy.stop();
  }

  std::ostringstream js;
  js << "{\n  \"threads\": " << o.threads << ",\n  \"rounds\": " << o.rounds << ",\n  \"cpu\": \""
     << json_escape(cpu_model()) << "\",\n  \"loadavg_before\": \"" << load_before << "\",\n  \"loadavg_after\": \""
     << loadavg() << "\",\n  \"torch\": " << (compared ? "\"" + torch_version + "\"" : std::string("null"))
     << ",\n  \"goal\": 1.2,\n  \"rows\": [\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    js << "    {\"name\": \"" << json_escape(r.name) << "\", \"group\": \"" << r.group << "\", \"tessera_us\": "
       << r.tessera_s * 1e6;
    if (compared) js << ", \"torch_us\": " << r.torch_s * 1e6 << ", \"ratio\": " << r.torch_s / r.tessera_s;
    else js << ", \"ratio\": null, \"note\": \"not compared\"";
    if (r.reference_s > 0)
      js << ", \"reference\": \"" << r.reference_name << "\", \"reference_us\": " << r.reference_s * 1e6
         << ", \"ratio_vs_reference\": " << r.reference_s / r.tessera_s;
    if (o.contention) {
      js << ", \"tessera_loaded_us\": " << r.tessera_loaded_s * 1e6
         << ", \"tessera_slowdown\": " << r.tessera_loaded_s / r.tessera_s;
      if (compared)
        js << ", \"torch_loaded_us\": " << r.torch_loaded_s * 1e6 << ", \"torch_slowdown\": " << r.torch_loaded_s / r.torch_s;
    }
    js << "}" << (i + 1 < results.size() ? "," : "") << "\n";
  }
  js << "  ]\n}\n";
  std::ofstream(o.json) << js.str();
  std::printf("\nwrote %s (load average before: %s)\n", o.json.c_str(), load_before.c_str());
  if (!compared) std::printf("pytorch: not compared (configure with -DTESSERA_BENCH_WITH_TORCH=ON and pip install torch)\n");
  return 0;
}
