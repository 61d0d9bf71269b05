// Internal: which compiler plugin serves a device when CompileOptions::backend is "auto" (Note
// [Compiler plugin priority]).
#pragma once
#include <map>
#include <string>

#include "tessera/device.h"

namespace tessera::compiler {

struct CompilerChoice {
  std::string plugin;  // the chosen compiler plugin; empty: none serves the device
  // One line naming the device, the choice and every plugin passed over with its priority or its
  // failure: "auto for cpu:0: chain_high (priority 20) over chain_low (priority 10)".
  std::string report;
};

// The highest-priority compiler plugin whose manifest names `device`'s type and that loads; ties go
// to the smaller name. Never throws for a plugin that fails to load: it is passed over and named in
// the report. `failed` (plugin -> why) lists plugins whose compile failed earlier for the caller:
// they are passed over too, with that reason. Thread-safe.
CompilerChoice choose_compiler_plugin(const Device& device, const std::map<std::string, std::string>& failed = {});

}  // namespace tessera::compiler
