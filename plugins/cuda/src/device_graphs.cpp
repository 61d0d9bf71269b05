// TESSERA_EXT_DEVICE_GRAPHS on CUDA Graphs (Note [Device graphs] in plugin_abi.h): stream capture in
// thread-local mode, the caching allocator holding what the capturing thread frees (Note [Graph
// capture pools] in caching_allocator.h) until the graph is destroyed.
#include "device_graphs.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "cuda_backend.h"
#include "tessera/sdk.hpp"

namespace tessera::cuda {
namespace {

struct CapturedGraph {
  cudaGraphExec_t exec = nullptr;
  int device = 0;
  void* stream = nullptr;  // the capture's: replays go here, and destroy waits for it
  std::vector<void*> held;
};

// Throws `code` with the CUDA error's text appended (the error cleared).
[[noreturn]] void fail(tessera_status_code_t code, const std::string& what, cudaError_t e) {
  cudaGetLastError();
  throw sdk::Error(code, what + ": " + cudaGetErrorString(e));
}

tessera_status_t begin_capture(int32_t device, void* stream) {
  return guarded([&] {
    if (!stream)
      throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT,
                       "cuda: the default stream cannot be captured into a graph; capture on a stream made "
                       "with tessera::Stream::create");
    Backend& b = Backend::instance();
    b.check_device(device);
    DeviceGuard guard(device);
    b.allocator().begin_capture(device);
    const cudaError_t e =
        cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
      b.allocator().release_held(device, b.allocator().end_capture(device));
      fail(TESSERA_STATUS_UNIMPLEMENTED, "cuda: cudaStreamBeginCapture failed", e);
    }
  });
}

tessera_status_t end_capture(int32_t device, void* stream, void** graph) {
  *graph = nullptr;
  return guarded([&] {
    Backend& b = Backend::instance();
    DeviceGuard guard(device);
    cudaGraph_t g = nullptr;
    cudaError_t e = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &g);
    // Nothing recorded ran, so a failed capture's held blocks were never written: back to the pool.
    std::vector<void*> held = b.allocator().end_capture(device);
    if (e != cudaSuccess || !g) {
      if (g) cudaGraphDestroy(g);
      b.allocator().release_held(device, held);
      fail(TESSERA_STATUS_UNIMPLEMENTED,
           "cuda: the capture was invalidated (an op synchronised or copied to the host while recording)", e);
    }
    cudaGraphExec_t exec = nullptr;
    e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
      b.allocator().release_held(device, held);
      fail(TESSERA_STATUS_INTERNAL, "cuda: cudaGraphInstantiate failed", e);
    }
    *graph = new CapturedGraph{exec, device, stream, std::move(held)};
  });
}

tessera_status_t replay(void* graph, void* stream) {
  return guarded([&] {
    auto* g = static_cast<CapturedGraph*>(graph);
    if (!g) throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT, "cuda: replay of a NULL graph");
    if (stream != g->stream)
      throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT,
                       "cuda: a graph replays on the stream it was captured on (its memory is reused in "
                       "that stream's order)");
    DeviceGuard guard(g->device);
    if (const cudaError_t e = cudaGraphLaunch(g->exec, static_cast<cudaStream_t>(stream)); e != cudaSuccess)
      fail(TESSERA_STATUS_INTERNAL, "cuda: cudaGraphLaunch failed", e);
  });
}

// Nothing may escape this C entry point: at process exit the driver may already be gone, and then
// the graph's memory is simply left to the process's end.
void destroy(void* graph) noexcept {
  auto* g = static_cast<CapturedGraph*>(graph);
  if (!g) return;
  try {
    DeviceGuard guard(g->device);
    // The held blocks go back to their pools (tagged with the default stream, Note [Graph capture
    // pools]) only once the queued replays have completed: a rare synchronisation, when the
    // compiled function goes.
    if (cudaStreamSynchronize(static_cast<cudaStream_t>(g->stream)) == cudaSuccess) {
      cudaGraphExecDestroy(g->exec);
      Backend::instance().allocator().release_held(g->device, g->held);
    }
    cudaGetLastError();
  } catch (const std::exception& e) {
    sdk::log(TESSERA_LOG_WARNING, "cuda", std::string("destroying a CUDA graph: ") + e.what());
  }
  delete g;
}

const tessera_device_graphs_t kDeviceGraphs = {.struct_size = sizeof(tessera_device_graphs_t),
                                               .begin_capture = &begin_capture,
                                               .end_capture = &end_capture,
                                               .replay = &replay,
                                               .destroy = &destroy};

}  // namespace

const tessera_device_graphs_t* device_graphs() { return &kDeviceGraphs; }

}  // namespace tessera::cuda
