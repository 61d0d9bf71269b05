// The OpenCL entry points the plugin uses, resolved at run time from libOpenCL.so.1.
//
// Note [No link-time OpenCL]
// The plugin is compiled against the Khronos headers only and never links libOpenCL: it dlopen()s
// the ICD loader at init. On a machine without a loader (or without any ICD) the plugin still loads
// and reports zero devices with a hint, instead of failing to load with a dynamic-linker error.
#pragma once
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include <string>

namespace tessera::opencl {

#define TESSERA_CL_FUNCTIONS(X)                                                                     \
  X(clGetPlatformIDs) X(clGetPlatformInfo) X(clGetDeviceIDs) X(clGetDeviceInfo) X(clCreateContext) \
  X(clReleaseContext) X(clCreateCommandQueue) X(clReleaseCommandQueue) X(clCreateBuffer)            \
  X(clReleaseMemObject) X(clEnqueueReadBuffer) X(clEnqueueWriteBuffer) X(clEnqueueCopyBuffer)       \
  X(clCreateProgramWithSource) X(clCreateProgramWithBinary) X(clBuildProgram)                       \
  X(clGetProgramBuildInfo) X(clGetProgramInfo) X(clReleaseProgram) X(clCreateKernel)                \
  X(clReleaseKernel) X(clSetKernelArg) X(clEnqueueNDRangeKernel) X(clFinish) X(clFlush)             \
  X(clEnqueueMarkerWithWaitList) X(clEnqueueBarrierWithWaitList) X(clWaitForEvents)                \
  X(clReleaseEvent) X(clGetKernelWorkGroupInfo) X(clGetEventInfo)

// Function pointers into the ICD loader. `loaded()` is false when the library or a symbol is missing;
// `error()` then says which and how to fix it.
class ClApi {
 public:
#define TESSERA_CL_DECLARE(name) decltype(&::name) name = nullptr;
  TESSERA_CL_FUNCTIONS(TESSERA_CL_DECLARE)
#undef TESSERA_CL_DECLARE

  // Loads libOpenCL.so.1 (then libOpenCL.so) once. Never throws.
  bool load();
  bool loaded() const { return handle_ != nullptr; }
  const std::string& error() const { return error_; }
  // Closes the library (plugin shutdown).
  void unload();

 private:
  void* handle_ = nullptr;
  std::string error_;
};

// The process-wide table (the plugin is loaded once per process).
ClApi& cl();

// "CL_OUT_OF_RESOURCES (-5)".
std::string cl_error_name(cl_int code);

}  // namespace tessera::opencl
