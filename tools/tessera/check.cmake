# `tessera check` links the conformance kit (tests/cts/lib), added here when tests/ has not added it.
if(NOT TARGET tessera_cts)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/cts/lib ${PROJECT_BINARY_DIR}/tests/cts_lib)
endif()
target_link_libraries(tessera_cli PRIVATE tessera_cts)
