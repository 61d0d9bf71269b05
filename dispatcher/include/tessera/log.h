// TESSERA_LOG: a comma-separated list of components whose decisions are printed to stderr
// (plugins, dispatch, fallback, cpu, opencl, cuda, ... or "all"). Read once, on first use.
#pragma once
#include <string>
#include <string_view>

#include "tessera/export.h"

namespace tessera {

enum class LogLevel { Debug = 0, Info = 1, Warning = 2, Error = 3 };

// True when `component` is enabled by TESSERA_LOG. Cheap after the first call.
TESSERA_API bool log_enabled(std::string_view component);
// Prints "[tessera:<component>] <level>: <message>" to stderr when the component is enabled.
// Warnings and errors from the "fallback" component are printed only when enabled as well.
TESSERA_API void log_message(LogLevel level, std::string_view component, std::string_view message);
// Tests: read TESSERA_LOG again.
TESSERA_API void reload_log_settings();
// Environment lookup that returns nullptr in setuid/setgid processes (secure_getenv).
TESSERA_API const char* secure_env(const char* name);

}  // namespace tessera
