# Benchmarks of the CPU plugin's nn kernels (bench_cpu_matmul, bench_cpu_nn, bench_cpu_sdpa,
# bench_cpu_block), included by benchmarks/cpu/CMakeLists.txt. Each reports a ratio against a
# reference measured in the same run (oneDNN called directly, memcpy bandwidth, the math path of
# attention, PyTorch when importable).
find_package(benchmark REQUIRED)
if(NOT TARGET DNNL::dnnl)
  find_package(dnnl CONFIG REQUIRED)
endif()
foreach(_b matmul nn sdpa block)
  add_executable(bench_cpu_${_b} ${CMAKE_CURRENT_LIST_DIR}/bench_${_b}.cpp)
  target_link_libraries(bench_cpu_${_b} PRIVATE tessera benchmark::benchmark)
  target_compile_options(bench_cpu_${_b} PRIVATE ${TESSERA_WARNINGS})
  if(TARGET tessera_cpu)
    add_dependencies(bench_cpu_${_b} tessera_cpu)
  endif()
endforeach()
target_link_libraries(bench_cpu_matmul PRIVATE DNNL::dnnl)
# Note [Heap accounting] in bench_sdpa.cpp: the executable's malloc must be the one every library
# resolves to.
set_target_properties(bench_cpu_sdpa PROPERTIES ENABLE_EXPORTS ON)
