# The manifest parser is private to libtessera (hidden symbols): compile it into the target.
find_package(nlohmann_json 3 REQUIRED)
set(_extra_sources ${PROJECT_SOURCE_DIR}/dispatcher/src/manifest.cpp)
set(_extra_includes ${PROJECT_SOURCE_DIR}/dispatcher/src)
set(_extra_libs nlohmann_json::nlohmann_json)
