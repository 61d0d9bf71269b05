// See Note [SDPA on cuDNN] in cudnn_attention.h.
#include "cudnn_attention.h"

#include <atomic>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <utility>

#include "cudnn_loader.h"
#include "launch.h"

#ifdef TESSERA_CUDA_HAVE_CUDNN_FRONTEND
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <cudnn_frontend.h>
#pragma GCC diagnostic pop

namespace cudnn_frontend {
// The library handle the frontend's dynamic loading resolves cuDNN's symbols through: the one the
// plugin's loader opened (set before the first graph).
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend
#endif

namespace tessera::cuda {
namespace {

std::atomic<uint64_t> g_calls{0};

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

uint64_t cudnn_sdpa_calls() { return g_calls.load(std::memory_order_relaxed); }

std::string cudnn_sdpa_refusal(const SdpaProblem& p, const void* q, const void* k, const void* v,
                               const void* bias, const void* o) {
  if (p.dtype != kDtF16 && p.dtype != kDtBF16) return "cuDNN's fused attention takes float16 and bfloat16";
  if (p.head_dim > 256 || p.value_dim > 256 || p.head_dim % 8 != 0 || p.value_dim % 8 != 0 ||
      p.head_dim <= 0 || p.value_dim <= 0)
    return "head dims " + std::to_string(p.head_dim) + " and " + std::to_string(p.value_dim) +
           " (cuDNN takes multiples of 8 up to 256)";
  if (p.batch <= 0 || p.heads <= 0 || p.len_q <= 0 || p.len_k <= 0) return "an empty problem";
  const int64_t* strides[4] = {p.q_strides, p.k_strides, p.v_strides, p.o_strides};
  const int64_t lens[4] = {p.len_q, p.len_k, p.len_k, p.len_q};
  for (int t = 0; t < 4; ++t) {
    if (strides[t][3] != 1) return "an operand whose last dim is not contiguous";
    const int64_t sizes[3] = {p.batch, p.heads, lens[t]};
    for (int d = 0; d < 3; ++d) {
      if (sizes[d] > 1 && strides[t][d] == 0) return "an operand that broadcasts over batch or heads";
      if (sizes[d] > 1 && strides[t][d] % 8 != 0) return "strides that are not 16-byte aligned";
    }
  }
  for (const void* ptr : {q, k, v, o})
    if (ptr && !aligned16(ptr)) return "an operand that is not 16-byte aligned";
  if (p.has_bias) {
    if (p.bias_sizes[2] != p.len_q || p.bias_sizes[3] != p.len_k)
      return "a mask that broadcasts over the query or key positions";
    if (p.bias_strides[3] != 1) return "a mask whose last dim is not contiguous";
    for (int d = 0; d < 3; ++d)
      if (p.bias_sizes[d] > 1 && p.bias_strides[d] % 8 != 0)
        return "mask strides that are not 16-byte aligned";
    if ((p.bias_sizes[0] != 1 && p.bias_sizes[0] != p.batch) ||
        (p.bias_sizes[1] != 1 && p.bias_sizes[1] != p.heads))
      return "a mask that does not broadcast to [batch, heads]";
    if (bias && !aligned16(bias)) return "a mask that is not 16-byte aligned";
  }
  return {};
}

#ifdef TESSERA_CUDA_HAVE_CUDNN_FRONTEND

namespace {

namespace fe = cudnn_frontend;
enum : int64_t { kUidQ = 1, kUidK, kUidV, kUidO, kUidBias };

// Sizes of size-1 dims get the stride the dim after them implies (cuDNN checks strides as a layout).
std::vector<int64_t> layout_strides(const int64_t* sizes, const int64_t* strides) {
  std::vector<int64_t> s(strides, strides + 4);
  for (int d = 2; d >= 0; --d)
    if (sizes[d] == 1) s[size_t(d)] = s[size_t(d) + 1] * std::max<int64_t>(sizes[d + 1], 1);
  return s;
}

std::shared_ptr<fe::graph::Graph> describe(const SdpaProblem& p, std::string* error) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(p.dtype == kDtF16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, int64_t uid, std::vector<int64_t> sizes, const int64_t* strides) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(sizes).set_stride(
        layout_strides(sizes.data(), strides)));
  };
  auto q = tensor("Q", kUidQ, {p.batch, p.heads, p.len_q, p.head_dim}, p.q_strides);
  auto k = tensor("K", kUidK, {p.batch, p.heads, p.len_k, p.head_dim}, p.k_strides);
  auto v = tensor("V", kUidV, {p.batch, p.heads, p.len_k, p.value_dim}, p.v_strides);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("tessera_sdpa")
                     .set_generate_stats(false)
                     .set_causal_mask(p.causal)
                     .set_attn_scale(float(p.scale));
  if (p.has_bias)
    options.set_bias(tensor("Bias", kUidBias,
                            {p.bias_sizes[0], p.bias_sizes[1], p.bias_sizes[2], p.bias_sizes[3]},
                            p.bias_strides));
  auto outputs = g->sdpa(q, k, v, std::move(options));
  const int64_t o_sizes[4] = {p.batch, p.heads, p.len_q, p.value_dim};
  outputs[0]
      ->set_output(true)
      .set_uid(kUidO)
      .set_dim({o_sizes[0], o_sizes[1], o_sizes[2], o_sizes[3]})
      .set_stride(layout_strides(o_sizes, p.o_strides));
  if (fe::error_t e = g->validate(); e.is_bad()) {
    *error = "cudnn-frontend refused the graph: " + e.get_message();
    return nullptr;
  }
  return g;
}

// The problem as bytes: the key of its graph (with the device).
std::string key_of(int device, const SdpaProblem& p) {
  std::string key(reinterpret_cast<const char*>(&p), sizeof p);
  key.append(reinterpret_cast<const char*>(&device), sizeof device);
  return key;
}

struct Built {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
};

struct Cache {
  std::mutex mutex;
  std::list<std::pair<std::string, std::shared_ptr<Built>>> entries;  // most recent first
  std::map<std::string, std::string> refused;                         // problem -> why
};
Cache& cache() {
  static Cache* c = new Cache();
  return *c;
}
constexpr size_t kGraphs = 64;

}  // namespace

bool cudnn_attention_built() { return true; }

std::string validate_cudnn_sdpa(const SdpaProblem& p) {
  const CudnnApi& api = cudnn_api();
  if (!api.loaded) return api.error;
  if (!fe::cudnn_dlhandle) fe::cudnn_dlhandle = api.handle;
  std::string error;
  try {
    describe(p, &error);
  } catch (const std::exception& e) {
    error = std::string("cudnn-frontend: ") + e.what();
  }
  return error;
}

std::string run_cudnn_sdpa(void* handle, int device, cudaStream_t stream, const SdpaProblem& p, const void* q,
                           const void* k, const void* v, const void* bias, void* o) {
  const CudnnApi& api = cudnn_api();
  if (!api.loaded) return api.error;
  if (!fe::cudnn_dlhandle) fe::cudnn_dlhandle = api.handle;
  const std::string key = key_of(device, p);
  Cache& c = cache();
  std::shared_ptr<Built> built;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (auto r = c.refused.find(key); r != c.refused.end()) return r->second;
    for (auto it = c.entries.begin(); it != c.entries.end(); ++it)
      if (it->first == key) {
        c.entries.splice(c.entries.begin(), c.entries, it);
        built = it->second;
        break;
      }
  }
  auto h = static_cast<cudnnHandle_t>(handle);
  if (!built) {
    std::string error;
    try {
      auto b = std::make_shared<Built>();
      b->graph = describe(p, &error);
      if (b->graph) {
        fe::error_t e = b->graph->build_operation_graph(h);
        if (e.is_good()) e = b->graph->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
        if (e.is_good()) e = b->graph->check_support();
        if (e.is_good()) e = b->graph->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE);
        if (e.is_good()) e = b->graph->get_workspace_size(b->workspace);
        if (e.is_bad()) error = "cuDNN cannot run this attention: " + e.get_message();
      }
      if (error.empty()) built = b;
    } catch (const std::exception& e) {
      error = std::string("cudnn-frontend: ") + e.what();
    }
    std::lock_guard<std::mutex> lock(c.mutex);
    if (!built) {
      c.refused.emplace(key, error);
      return error;
    }
    c.entries.emplace_front(key, built);
    if (c.entries.size() > kGraphs) c.entries.pop_back();
  }
  void* workspace = nullptr;
  if (built->workspace > 0) {
    if (cudaMallocAsync(&workspace, size_t(built->workspace), stream) != cudaSuccess) {
      cudaGetLastError();
      return "no device memory for cuDNN's attention workspace (" + std::to_string(built->workspace) +
             " bytes)";
    }
  }
  std::unordered_map<int64_t, void*> pointers = {{kUidQ, const_cast<void*>(q)},
                                                 {kUidK, const_cast<void*>(k)},
                                                 {kUidV, const_cast<void*>(v)},
                                                 {kUidO, o}};
  if (p.has_bias) pointers[kUidBias] = const_cast<void*>(bias);
  std::string error;
  try {
    if (fe::error_t e = built->graph->execute(h, pointers, workspace); e.is_bad())
      error = "cuDNN's attention failed: " + e.get_message();
  } catch (const std::exception& e) {
    error = std::string("cudnn-frontend: ") + e.what();
  }
  if (workspace) cudaFreeAsync(workspace, stream);
  if (error.empty()) g_calls.fetch_add(1, std::memory_order_relaxed);
  return error;
}

#else  // built without cudnn-frontend

bool cudnn_attention_built() { return false; }

std::string validate_cudnn_sdpa(const SdpaProblem&) {
  return "the CUDA plugin was built without cudnn-frontend (pip's nvidia-cudnn-frontend)";
}

std::string run_cudnn_sdpa(void*, int, cudaStream_t, const SdpaProblem&, const void*, const void*,
                           const void*, const void*, void*) {
  return validate_cudnn_sdpa(SdpaProblem{});
}

#endif

}  // namespace tessera::cuda
