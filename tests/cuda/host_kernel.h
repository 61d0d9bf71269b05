// Generated fused kernels built for the host (Note [Fused CUDA kernels]): the source over the host
// prelude, compiled by the system C++ compiler into a shared library and opened. Shared by
// test_cuda_fuser and test_cuda_compiler_plugin.
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "fused_program.h"

namespace tessera::cuda_fuser_test {

// tessera_fused of the compiled source, or null with the compiler's log in *error (the library
// stays open for the test's life). Needs TESSERA_SDK_INCLUDE_DIR (tessera/float16.h).
using FusedFn = void (*)(tessera::cuda_fuser::TsArgs);
inline FusedFn build_host(const std::string& source, std::string* error) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tessera_fuser_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  static int counter = 0;
  const std::string stem = (dir / ("fused" + std::to_string(counter++))).string();
  std::ofstream(stem + ".cpp") << source;
  const char* cxx = std::getenv("CXX");
  const std::string cmd = std::string(cxx && *cxx ? cxx : "c++") + " -std=c++17 -O1 -shared -fPIC -I" +
                          TESSERA_SDK_INCLUDE_DIR + " " + stem + ".cpp -o " + stem + ".so 2>" + stem + ".log";
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream log(stem + ".log");
    *error = cmd + "\n" + std::string(std::istreambuf_iterator<char>(log), {});
    return nullptr;
  }
  void* lib = dlopen((stem + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    *error = dlerror();
    return nullptr;
  }
  return reinterpret_cast<FusedFn>(dlsym(lib, "tessera_fused"));
}

}  // namespace tessera::cuda_fuser_test
