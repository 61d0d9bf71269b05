// cuDNN, loaded with dlopen at first use, like cuBLASLt (Note [Loading cuBLASLt]). Note [Loading cuDNN]
// The plugin does not link cuDNN: the library is opened the first time a convolution needs it, so
// the plugin loads on machines without cuDNN and only conv2d / conv_transpose2d then go to the CPU fallback,
// with the reason logged once and shown in the device properties ("cudnn"). Search order: $TESSERA_CUDA_CUDNN
// (a full path), libcudnn.so.9 and libcudnn.so through the normal loader path, then the toolkit's
// library folder known at build time and /usr/local/cuda/lib64. The GPU checks point
// TESSERA_CUDA_CUDNN at PyTorch's copy (nvidia-cudnn) when the machine's toolkit has none. Only the
// convolution, pooling and batch-norm entry points of cuDNN 9's legacy API are used (cudnn_cnn.h, cudnn_ops.h); a
// library older than 9 is refused. Without cuDNN, pooling runs on the plugin's own kernel.
#pragma once
#include <cudnn.h>

#include <string>
#include <vector>

namespace tessera::cuda {

struct CudnnApi {
  bool loaded = false;
  std::string path;   // the file that was opened
  std::string error;  // why loading failed (every place tried)
  size_t version = 0;
  void* handle = nullptr;  // the dlopen handle (cudnn-frontend's dynamic loading resolves through it)

  decltype(&cudnnGetVersion) get_version = nullptr;
  decltype(&cudnnGetErrorString) get_error_string = nullptr;
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnSetStream) set_stream = nullptr;
  decltype(&cudnnCreateTensorDescriptor) create_tensor = nullptr;
  decltype(&cudnnDestroyTensorDescriptor) destroy_tensor = nullptr;
  decltype(&cudnnSetTensor4dDescriptorEx) set_tensor_4d_ex = nullptr;
  decltype(&cudnnCreateFilterDescriptor) create_filter = nullptr;
  decltype(&cudnnDestroyFilterDescriptor) destroy_filter = nullptr;
  decltype(&cudnnSetFilter4dDescriptor) set_filter_4d = nullptr;
  decltype(&cudnnCreateConvolutionDescriptor) create_conv = nullptr;
  decltype(&cudnnDestroyConvolutionDescriptor) destroy_conv = nullptr;
  decltype(&cudnnSetConvolution2dDescriptor) set_conv_2d = nullptr;
  decltype(&cudnnSetConvolutionGroupCount) set_group_count = nullptr;
  decltype(&cudnnSetConvolutionMathType) set_math_type = nullptr;
  decltype(&cudnnGetConvolutionForwardAlgorithm_v7) get_forward_algorithm = nullptr;
  decltype(&cudnnGetConvolutionForwardWorkspaceSize) get_workspace_size = nullptr;
  decltype(&cudnnConvolutionForward) convolution_forward = nullptr;
  // conv_transpose2d is the backward-data pass of the convolution it transposes.
  decltype(&cudnnGetConvolutionBackwardDataAlgorithm_v7) get_backward_data_algorithm = nullptr;
  decltype(&cudnnConvolutionBackwardData) convolution_backward_data = nullptr;
  // _conv2d_epilogue: y = relu(conv(x) + bias) in one call (Note [Conv epilogues on cuDNN]).
  decltype(&cudnnCreateActivationDescriptor) create_activation = nullptr;
  decltype(&cudnnSetActivationDescriptor) set_activation = nullptr;
  decltype(&cudnnDestroyActivationDescriptor) destroy_activation = nullptr;
  decltype(&cudnnConvolutionBiasActivationForward) convolution_bias_activation_forward = nullptr;
  // max_pool2d / avg_pool2d (Note [Pooling on cuDNN]).
  decltype(&cudnnCreatePoolingDescriptor) create_pooling = nullptr;
  decltype(&cudnnSetPooling2dDescriptor) set_pooling_2d = nullptr;
  decltype(&cudnnDestroyPoolingDescriptor) destroy_pooling = nullptr;
  decltype(&cudnnPoolingForward) pooling_forward = nullptr;
  // batch_norm in inference mode (Note [batch_norm on cuDNN]).
  decltype(&cudnnBatchNormalizationForwardInference) batch_norm_forward_inference = nullptr;
};

// Loads once (thread-safe) and returns the table; `loaded` says whether it can be used.
const CudnnApi& cudnn_api();
// The loader itself, for tests: tries `candidates` in order (no caching).
CudnnApi load_cudnn_from(const std::vector<std::string>& candidates);

}  // namespace tessera::cuda
