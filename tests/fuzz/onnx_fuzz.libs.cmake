# The ONNX importer lives in libtessera_onnx, built when protobuf is found.
if(TARGET tessera_onnx)
  set(_extra_libs Tessera::onnx)
endif()
