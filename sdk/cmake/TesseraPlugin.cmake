# tessera_add_plugin(<name> SOURCES <src>... MANIFEST <file.json> [LIBRARIES <lib>...]
#                    [XFAIL <device>.xfail.txt] [OUTPUT_DIRECTORY <dir>] [NO_INSTALL])
# Builds a plugin module lib<name>.so against Tessera::sdk, places it with its manifest in the plugin
# folder of the build tree (TESSERA_PLUGIN_OUTPUT_DIR) and installs both to TESSERA_PLUGIN_INSTALL_DIR.
# The manifest's "library" must be "lib<name>.so". XFAIL is the conformance kit's expected-failure
# list: `tessera check --device <device>` reads "<device>.xfail.txt" next to the manifest, so the
# file must be named after the device (the manifest's device name) and is copied and installed
# with the manifest. OUTPUT_DIRECTORY places the plugin elsewhere in the build tree (a test plugin
# found through TESSERA_PLUGIN_PATH); NO_INSTALL leaves it out of the install.
# Works in the main tree and from the installed package (find_package(Tessera)).
function(tessera_add_plugin name)
  cmake_parse_arguments(ARG "NO_INSTALL" "MANIFEST;OUTPUT_DIRECTORY;XFAIL" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT ARG_SOURCES OR NOT ARG_MANIFEST)
    message(FATAL_ERROR "tessera_add_plugin(${name}): SOURCES and MANIFEST are required")
  endif()
  if(NOT DEFINED TESSERA_PLUGIN_OUTPUT_DIR)
    set(TESSERA_PLUGIN_OUTPUT_DIR ${CMAKE_BINARY_DIR}/lib/tessera/plugins)
  endif()
  if(NOT DEFINED TESSERA_PLUGIN_INSTALL_DIR)
    set(TESSERA_PLUGIN_INSTALL_DIR lib/tessera/plugins)
  endif()
  if(ARG_OUTPUT_DIRECTORY)
    set(TESSERA_PLUGIN_OUTPUT_DIR ${ARG_OUTPUT_DIRECTORY})
  endif()
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE Tessera::sdk ${ARG_LIBRARIES})
  set_target_properties(${name} PROPERTIES
    PREFIX "lib" CXX_VISIBILITY_PRESET hidden C_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY ${TESSERA_PLUGIN_OUTPUT_DIR})
  get_filename_component(_manifest ${ARG_MANIFEST} ABSOLUTE)
  get_filename_component(_manifest_name ${ARG_MANIFEST} NAME)
  configure_file(${_manifest} ${TESSERA_PLUGIN_OUTPUT_DIR}/${_manifest_name} COPYONLY)
  set(_xfail)
  if(ARG_XFAIL)
    get_filename_component(_xfail ${ARG_XFAIL} ABSOLUTE)
    get_filename_component(_xfail_name ${ARG_XFAIL} NAME)
    if(NOT _xfail_name MATCHES "^[a-z_][a-z0-9_]*\\.xfail\\.txt$")
      message(FATAL_ERROR "tessera_add_plugin(${name}): XFAIL '${_xfail_name}' must be named <device>.xfail.txt "
                          "after the manifest's device name (tessera check --device <device> looks for it)")
    endif()
    configure_file(${_xfail} ${TESSERA_PLUGIN_OUTPUT_DIR}/${_xfail_name} COPYONLY)
  endif()
  if(NOT ARG_NO_INSTALL)
    install(TARGETS ${name} LIBRARY DESTINATION ${TESSERA_PLUGIN_INSTALL_DIR})
    install(FILES ${_manifest} ${_xfail} DESTINATION ${TESSERA_PLUGIN_INSTALL_DIR})
  endif()
endfunction()
