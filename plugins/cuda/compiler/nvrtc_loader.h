// NVRTC, loaded with dlopen at first use. Note [Loading NVRTC]
// The CUDA compiler plugin does not link NVRTC: the library is opened the first time a partition is
// compiled, so the plugin loads where it is absent (every partition then runs through the
// dispatcher, with the reason logged once under TESSERA_LOG=compile). Search order:
// $TESSERA_CUDA_NVRTC (a full path), the soname libnvrtc.so.<CUDA major> and libnvrtc.so through the
// normal loader path, then the toolkit's library folder known at build time and
// /usr/local/cuda/lib64. NVRTC needs no GPU: the tests compile the generated kernels here.
#pragma once

#include <nvrtc.h>

#include <string>
#include <vector>

namespace tessera::cuda_fuser {

struct NvrtcApi {
  bool loaded = false;
  std::string path;   // the file that was opened
  std::string error;  // why loading failed (every place tried)
  int major = 0, minor = 0;

  decltype(&nvrtcVersion) version = nullptr;
  decltype(&nvrtcGetErrorString) get_error_string = nullptr;
  decltype(&nvrtcCreateProgram) create_program = nullptr;
  decltype(&nvrtcDestroyProgram) destroy_program = nullptr;
  decltype(&nvrtcCompileProgram) compile_program = nullptr;
  decltype(&nvrtcGetProgramLogSize) get_log_size = nullptr;
  decltype(&nvrtcGetProgramLog) get_log = nullptr;
  decltype(&nvrtcGetCUBINSize) get_cubin_size = nullptr;
  decltype(&nvrtcGetCUBIN) get_cubin = nullptr;
};

// Opens the first of `candidates` dlopen accepts and resolves the entry points; `loaded` false with
// `error` otherwise. Each call opens afresh (for tests); the plugin uses nvrtc_api().
NvrtcApi load_nvrtc_from(const std::vector<std::string>& candidates);

// Loads once (thread-safe) from the search order of Note [Loading NVRTC].
const NvrtcApi& nvrtc_api();

struct Cubin {
  std::string image;  // the machine code (empty on failure)
  std::string error;  // NVRTC's status and log on failure
};

// Compiles `source` for sm_<arch> (80, 90, ...) to a cubin.
Cubin compile_cubin(const NvrtcApi& api, const std::string& source, int arch);

}  // namespace tessera::cuda_fuser
