#include "cl_api.h"

#include <dlfcn.h>

namespace tessera::opencl {

ClApi& cl() {
  static ClApi api;
  return api;
}

bool ClApi::load() {
  if (handle_) return true;
  const char* const candidates[] = {"libOpenCL.so.1", "libOpenCL.so"};
  std::string dl_error;
  for (const char* candidate : candidates) {
    handle_ = dlopen(candidate, RTLD_NOW | RTLD_LOCAL);
    if (handle_) break;
    const char* e = dlerror();
    if (dl_error.empty() && e) dl_error = e;
  }
  if (!handle_) {
    error_ = "cannot load the OpenCL ICD loader libOpenCL.so.1 (" + dl_error +
             "); install an ICD loader such as ocl-icd-libopencl1 and an ICD such as pocl-opencl-icd";
    return false;
  }
  std::string missing;
#define TESSERA_CL_RESOLVE(name)                                        \
  name = reinterpret_cast<decltype(name)>(dlsym(handle_, #name));       \
  if (!name) missing += (missing.empty() ? "" : ", ") + std::string(#name);
  TESSERA_CL_FUNCTIONS(TESSERA_CL_RESOLVE)
#undef TESSERA_CL_RESOLVE
  if (!missing.empty()) {
    error_ = "the OpenCL ICD loader lacks " + missing +
             " (OpenCL 1.2 is required); install a newer loader such as ocl-icd-libopencl1";
    dlclose(handle_);
    handle_ = nullptr;
    return false;
  }
  return true;
}

void ClApi::unload() {
  if (!handle_) return;
  dlclose(handle_);
  handle_ = nullptr;
#define TESSERA_CL_RESET(name) name = nullptr;
  TESSERA_CL_FUNCTIONS(TESSERA_CL_RESET)
#undef TESSERA_CL_RESET
}

std::string cl_error_name(cl_int code) {
  const char* name = nullptr;
  switch (code) {
    case CL_SUCCESS: name = "CL_SUCCESS"; break;
    case CL_DEVICE_NOT_FOUND: name = "CL_DEVICE_NOT_FOUND"; break;
    case CL_DEVICE_NOT_AVAILABLE: name = "CL_DEVICE_NOT_AVAILABLE"; break;
    case CL_COMPILER_NOT_AVAILABLE: name = "CL_COMPILER_NOT_AVAILABLE"; break;
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: name = "CL_MEM_OBJECT_ALLOCATION_FAILURE"; break;
    case CL_OUT_OF_RESOURCES: name = "CL_OUT_OF_RESOURCES"; break;
    case CL_OUT_OF_HOST_MEMORY: name = "CL_OUT_OF_HOST_MEMORY"; break;
    case CL_BUILD_PROGRAM_FAILURE: name = "CL_BUILD_PROGRAM_FAILURE"; break;
    case CL_INVALID_VALUE: name = "CL_INVALID_VALUE"; break;
    case CL_INVALID_DEVICE: name = "CL_INVALID_DEVICE"; break;
    case CL_INVALID_BINARY: name = "CL_INVALID_BINARY"; break;
    case CL_INVALID_BUFFER_SIZE: name = "CL_INVALID_BUFFER_SIZE"; break;
    case CL_INVALID_MEM_OBJECT: name = "CL_INVALID_MEM_OBJECT"; break;
    case CL_INVALID_PROGRAM: name = "CL_INVALID_PROGRAM"; break;
    case CL_INVALID_PROGRAM_EXECUTABLE: name = "CL_INVALID_PROGRAM_EXECUTABLE"; break;
    case CL_INVALID_KERNEL_NAME: name = "CL_INVALID_KERNEL_NAME"; break;
    case CL_INVALID_KERNEL_ARGS: name = "CL_INVALID_KERNEL_ARGS"; break;
    case CL_INVALID_ARG_SIZE: name = "CL_INVALID_ARG_SIZE"; break;
    case CL_INVALID_ARG_VALUE: name = "CL_INVALID_ARG_VALUE"; break;
    case CL_INVALID_WORK_GROUP_SIZE: name = "CL_INVALID_WORK_GROUP_SIZE"; break;
    case CL_INVALID_WORK_ITEM_SIZE: name = "CL_INVALID_WORK_ITEM_SIZE"; break;
    case CL_INVALID_GLOBAL_WORK_SIZE: name = "CL_INVALID_GLOBAL_WORK_SIZE"; break;
    case CL_INVALID_EVENT: name = "CL_INVALID_EVENT"; break;
    case CL_INVALID_CONTEXT: name = "CL_INVALID_CONTEXT"; break;
    case CL_INVALID_COMMAND_QUEUE: name = "CL_INVALID_COMMAND_QUEUE"; break;
    case -1001: name = "CL_PLATFORM_NOT_FOUND_KHR"; break;
    default: break;
  }
  return std::string(name ? name : "CL error") + " (" + std::to_string(code) + ")";
}

}  // namespace tessera::opencl
