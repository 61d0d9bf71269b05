// Choosing a compiler plugin by priority (Note [Compiler plugin priority]).
#include "runtime/compiler_choice.h"

#include <algorithm>
#include <vector>

#include "backends/plugin/partition.h"
#include "tessera/error.h"
#include "tessera/plugin_loader.h"

namespace tessera::compiler {

// Note [Compiler plugin priority]
// A compiler plugin's manifest may name the device it serves ("device", as a kernels plugin does)
// and a "priority". With CompileOptions::backend = "auto", each artifact takes the compiler plugin
// that serves its inputs' device (the first input's) with the highest priority, as backends of one
// device type are ranked; equal priorities go to the plugin whose name sorts first, so the choice
// never depends on the order of discovery (TESSERA_PLUGIN_PATH, folder listing). A candidate that
// fails to load (or offers no compiler table) is passed over for the next one. When no plugin
// serves the device the artifact falls back to "cpp": generated code on the CPU, the interpreter
// elsewhere. A chosen plugin whose get_capability or compile fails is passed over the same way, with
// a warning, for the next candidate (or cpp); the compiled function remembers the failure, so later
// artifacts do not capture and fail on it again (compiled_function.cpp). The plugins passed over are named in ArtifactInfo::selection and under
// TESSERA_LOG=compile. A compiler plugin without "device" serves nothing automatically; it runs only
// when named. "auto" is not the default: "cpp" stays the default so that installing a compiler
// plugin never changes what existing code runs.
CompilerChoice choose_compiler_plugin(const Device& device, const std::map<std::string, std::string>& failed_before) {
  const std::string type = device_type_name(device.type());
  std::vector<PluginInfo> candidates;
  std::string failed;  // compiler plugins of this device the loader refused, with their reason
  for (PluginInfo& p : plugins()) {
    if (p.kind != PluginKind::Compiler || !p.has_device || p.device_name != type) continue;
    if (p.status == PluginStatus::Available || p.status == PluginStatus::Loaded)
      candidates.push_back(std::move(p));
    else if (p.status == PluginStatus::Failed)
      failed += ", " + p.name + " (priority " + std::to_string(p.priority) + ") failed: " + p.reason;
  }
  std::sort(candidates.begin(), candidates.end(), [](const PluginInfo& a, const PluginInfo& b) {
    return a.priority != b.priority ? a.priority > b.priority : a.name < b.name;
  });
  CompilerChoice choice;
  std::string passed_over;
  auto note = [&](const std::string& what) { passed_over += (passed_over.empty() ? "" : ", ") + what; };
  for (const PluginInfo& p : candidates) {
    const std::string ranked = p.name + " (priority " + std::to_string(p.priority) + ")";
    if (!choice.plugin.empty()) {
      note(ranked);
      continue;
    }
    if (auto f = failed_before.find(p.name); f != failed_before.end()) {
      note(ranked + " failed to compile earlier: " + f->second);
      continue;
    }
    try {
      compiler_plugin(p.name);
      choice.plugin = p.name;
      choice.report = "auto for " + device.str() + ": " + ranked;
    } catch (const Error& e) {
      note(ranked + " failed: " + e.what());
    }
  }
  if (choice.plugin.empty())
    choice.report = "auto for " + device.str() + ": cpp (no compiler plugin serves " + type + ")";
  if (!failed.empty()) passed_over += passed_over.empty() ? failed.substr(2) : failed;
  if (!passed_over.empty())
    choice.report += (choice.plugin.empty() ? "; passed over " : " over ") + passed_over;
  return choice;
}

}  // namespace tessera::compiler
