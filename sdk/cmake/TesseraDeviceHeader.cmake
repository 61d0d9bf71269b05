# tessera_generate_device_header(<name> OUTPUT <file> [SLOT 1|2|3])
# Writes a header with convenience functions for the device named <name> (the C++ form of
# PyTorch's generate_methods_for_privateuse1_backend):
#   tessera::<name>::to_<name>(t [, index])   t.to("<name>[:index]")
#   tessera::<name>::is_<name>(t)             t.is("<name>")
#   tessera::<name>::device([index])          tessera::Device("<name>[:index]")
#   tessera::<name>::device_count()           tessera::device_count("<name>")
#   tessera::<name>::is_available()           device_count() > 0
#   tessera::<name>::synchronize([index])
# With SLOT, also tessera::<name>::rename_backend(), which gives privateuse<SLOT> the name (the
# manifest usually does this itself). Works in the main tree and from the installed package.
set_property(GLOBAL PROPERTY TESSERA_DEVICE_HEADER_TEMPLATE "${CMAKE_CURRENT_LIST_DIR}/tessera_device_header.h.in")

function(tessera_generate_device_header name)
  cmake_parse_arguments(ARG "" "OUTPUT;SLOT" "" ${ARGN})
  if(NOT ARG_OUTPUT)
    message(FATAL_ERROR "tessera_generate_device_header(${name}): OUTPUT <file> is required")
  endif()
  if(NOT name MATCHES "^[a-z_][a-z0-9_]*$")
    message(FATAL_ERROR "tessera_generate_device_header: device name '${name}' is not a lower-case identifier "
                        "([a-z_][a-z0-9_]*); use the name the manifest gives the device")
  endif()
  if(name MATCHES "^(cpu|cuda|opencl|meta|privateuse[123])$")
    message(FATAL_ERROR "tessera_generate_device_header: '${name}' is a built-in device name; "
                        "generate headers for third-party device names only")
  endif()
  if(DEFINED ARG_SLOT AND NOT ARG_SLOT MATCHES "^[123]$")
    message(FATAL_ERROR "tessera_generate_device_header(${name}): SLOT must be 1, 2 or 3, got '${ARG_SLOT}'")
  endif()
  get_property(_template GLOBAL PROPERTY TESSERA_DEVICE_HEADER_TEMPLATE)
  set(TESSERA_DEVICE_NAME "${name}")
  string(TOUPPER "${name}" TESSERA_DEVICE_NAME_UPPER)
  if(DEFINED ARG_SLOT)
    set(TESSERA_DEVICE_SLOT "${ARG_SLOT}")
    set(TESSERA_DEVICE_HAS_SLOT 1)
  else()
    set(TESSERA_DEVICE_SLOT 0)
    set(TESSERA_DEVICE_HAS_SLOT 0)
  endif()
  get_filename_component(_out "${ARG_OUTPUT}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  configure_file("${_template}" "${_out}" @ONLY)
endfunction()
