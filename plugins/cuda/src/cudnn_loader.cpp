// See Note [Loading cuDNN] in cudnn_loader.h.
#include "cudnn_loader.h"

#include <stdlib.h>

#include <vector>

#include "dl_open.h"

#ifndef TESSERA_CUDA_TOOLKIT_LIBDIR
#define TESSERA_CUDA_TOOLKIT_LIBDIR "/usr/local/cuda/lib64"
#endif

namespace tessera::cuda {

CudnnApi load_cudnn_from(const std::vector<std::string>& candidates) {
  CudnnApi api;
  std::string tried;
  void* lib = dlopen_first(candidates, &api.path, &tried);
  if (!lib) {
    api.error = "cuDNN not found (tried " + tried + "): install cuDNN 9 (the CUDA Toolkit's or pip's "
                "nvidia-cudnn-cu13) or set TESSERA_CUDA_CUDNN to libcudnn.so.9's path";
    return api;
  }
  std::string missing;
  bool ok = resolve_symbol(lib, "cudnnGetVersion", &api.get_version, &missing);
  ok &= resolve_symbol(lib, "cudnnGetErrorString", &api.get_error_string, &missing);
  ok &= resolve_symbol(lib, "cudnnCreate", &api.create, &missing);
  ok &= resolve_symbol(lib, "cudnnSetStream", &api.set_stream, &missing);
  ok &= resolve_symbol(lib, "cudnnCreateTensorDescriptor", &api.create_tensor, &missing);
  ok &= resolve_symbol(lib, "cudnnDestroyTensorDescriptor", &api.destroy_tensor, &missing);
  ok &= resolve_symbol(lib, "cudnnSetTensor4dDescriptorEx", &api.set_tensor_4d_ex, &missing);
  ok &= resolve_symbol(lib, "cudnnCreateFilterDescriptor", &api.create_filter, &missing);
  ok &= resolve_symbol(lib, "cudnnDestroyFilterDescriptor", &api.destroy_filter, &missing);
  ok &= resolve_symbol(lib, "cudnnSetFilter4dDescriptor", &api.set_filter_4d, &missing);
  ok &= resolve_symbol(lib, "cudnnCreateConvolutionDescriptor", &api.create_conv, &missing);
  ok &= resolve_symbol(lib, "cudnnDestroyConvolutionDescriptor", &api.destroy_conv, &missing);
  ok &= resolve_symbol(lib, "cudnnSetConvolution2dDescriptor", &api.set_conv_2d, &missing);
  ok &= resolve_symbol(lib, "cudnnSetConvolutionGroupCount", &api.set_group_count, &missing);
  ok &= resolve_symbol(lib, "cudnnSetConvolutionMathType", &api.set_math_type, &missing);
  ok &= resolve_symbol(lib, "cudnnGetConvolutionForwardAlgorithm_v7", &api.get_forward_algorithm, &missing);
  ok &= resolve_symbol(lib, "cudnnGetConvolutionForwardWorkspaceSize", &api.get_workspace_size, &missing);
  ok &= resolve_symbol(lib, "cudnnConvolutionForward", &api.convolution_forward, &missing);
  ok &= resolve_symbol(lib, "cudnnGetConvolutionBackwardDataAlgorithm_v7", &api.get_backward_data_algorithm,
                       &missing);
  ok &= resolve_symbol(lib, "cudnnConvolutionBackwardData", &api.convolution_backward_data, &missing);
  ok &= resolve_symbol(lib, "cudnnCreateActivationDescriptor", &api.create_activation, &missing);
  ok &= resolve_symbol(lib, "cudnnSetActivationDescriptor", &api.set_activation, &missing);
  ok &= resolve_symbol(lib, "cudnnDestroyActivationDescriptor", &api.destroy_activation, &missing);
  ok &= resolve_symbol(lib, "cudnnConvolutionBiasActivationForward", &api.convolution_bias_activation_forward,
                       &missing);
  ok &= resolve_symbol(lib, "cudnnCreatePoolingDescriptor", &api.create_pooling, &missing);
  ok &= resolve_symbol(lib, "cudnnSetPooling2dDescriptor", &api.set_pooling_2d, &missing);
  ok &= resolve_symbol(lib, "cudnnDestroyPoolingDescriptor", &api.destroy_pooling, &missing);
  ok &= resolve_symbol(lib, "cudnnPoolingForward", &api.pooling_forward, &missing);
  ok &= resolve_symbol(lib, "cudnnBatchNormalizationForwardInference", &api.batch_norm_forward_inference, &missing);
  if (!ok) {
    api.error = api.path + " is not a usable cuDNN: " + missing;
    dlclose(lib);
    return api;
  }
  api.version = api.get_version();
  if (api.version < 90000) {
    api.error = api.path + " is cuDNN " + std::to_string(api.version) + "; cuDNN 9 or newer is needed";
    dlclose(lib);
    return api;
  }
  api.handle = lib;
  api.loaded = true;
  return api;
}

const CudnnApi& cudnn_api() {
  static const CudnnApi api = [] {
    std::vector<std::string> candidates;
    if (const char* env = secure_getenv("TESSERA_CUDA_CUDNN"); env && *env) candidates.emplace_back(env);
    candidates.emplace_back("libcudnn.so.9");
    candidates.emplace_back("libcudnn.so");
    candidates.emplace_back(std::string(TESSERA_CUDA_TOOLKIT_LIBDIR) + "/libcudnn.so.9");
    candidates.emplace_back("/usr/local/cuda/lib64/libcudnn.so.9");
    return load_cudnn_from(candidates);
  }();
  return api;
}

}  // namespace tessera::cuda
