# The nn kernels of the CPU plugin, included by plugins/cpu/CMakeLists.txt: appends the sources to
# TESSERA_CPU_NN_SOURCES and oneDNN to TESSERA_CPU_NN_LIBS. oneDNN (Debian libdnnl-dev 2.6) ships a
# CMake config; a plain library search is the fallback.
set(_tessera_nn_dir ${CMAKE_CURRENT_LIST_DIR})
list(APPEND TESSERA_CPU_NN_SOURCES
  ${_tessera_nn_dir}/register.cpp
  ${_tessera_nn_dir}/nn_common.cpp
  ${_tessera_nn_dir}/nn_isa_default.cpp
  ${_tessera_nn_dir}/nn_isa_avx2.cpp
  ${_tessera_nn_dir}/nn_isa_avx512.cpp
  ${_tessera_nn_dir}/normalization.cpp
  ${_tessera_nn_dir}/pooling.cpp
  ${_tessera_nn_dir}/onednn_ops.cpp
  ${_tessera_nn_dir}/attention.cpp)
if(NOT TARGET DNNL::dnnl)
  find_package(dnnl CONFIG QUIET)
endif()
if(TARGET DNNL::dnnl)
  list(APPEND TESSERA_CPU_NN_LIBS DNNL::dnnl)
else()
  find_library(TESSERA_DNNL_LIBRARY NAMES dnnl REQUIRED)
  find_path(TESSERA_DNNL_INCLUDE_DIR NAMES dnnl.hpp REQUIRED)
  add_library(tessera_dnnl INTERFACE IMPORTED)
  set_target_properties(tessera_dnnl PROPERTIES INTERFACE_LINK_LIBRARIES ${TESSERA_DNNL_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${TESSERA_DNNL_INCLUDE_DIR})
  list(APPEND TESSERA_CPU_NN_LIBS tessera_dnnl)
endif()
