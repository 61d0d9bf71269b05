// `tessera devices [--json] [--verbose]`
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "tessera/dispatcher.h"
#include "tessera/ops.h"
#include "tessera/plugin_loader.h"
#include "tessera/text_escape.h"

namespace {

const char* kDevicesUsage =
    "usage: tessera devices [--json] [--verbose]\n"
    "Loads every backend plugin and lists its devices: name (\"cpu:0\"), type, index, plugin and\n"
    "properties. Backends that report no device, and backend plugins that failed, are listed with\n"
    "the reason.\n"
    "  --json      one JSON object: {\"devices\": [...], \"backends_without_devices\": [...],\n"
    "              \"failed_backends\": [...]}\n"
    "  --verbose   also each device's memory statistics (allocated, reserved, peak, allocations),\n"
    "              from its plugin's memory_stats (\"memory_stats\" in the JSON)\n";

// tessera::memory_stats as JSON: {"reported": false} when the plugin does not report them,
// {"error": ...} when it failed.
nlohmann::json memory_json(tessera::Device device) {
  try {
    const tessera::MemoryStats s = tessera::memory_stats(device);
    if (!s.reported) return {{"reported", false}};
    return {{"reported", true},
            {"allocated_bytes", s.allocated_bytes},
            {"reserved_bytes", s.reserved_bytes},
            {"peak_allocated_bytes", s.peak_allocated_bytes},
            {"num_allocations", s.num_allocations}};
  } catch (const std::exception& e) {
    return {{"reported", false}, {"error", e.what()}};
  }
}

std::string bytes_text(uint64_t n) {
  char buf[64];
  if (n < 1024)
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(n));
  else if (n < (uint64_t(1) << 20))
    std::snprintf(buf, sizeof(buf), "%.1f KiB", double(n) / 1024.0);
  else if (n < (uint64_t(1) << 30))
    std::snprintf(buf, sizeof(buf), "%.1f MiB", double(n) / double(1 << 20));
  else
    std::snprintf(buf, sizeof(buf), "%.2f GiB", double(n) / double(1 << 30));
  return buf;
}

std::string memory_text(const nlohmann::json& m) {
  if (m.contains("error")) return "memory: error: " + m["error"].get<std::string>();
  if (!m["reported"].get<bool>()) return "memory: not reported by the plugin";
  return "memory: allocated " + bytes_text(m["allocated_bytes"]) + ", reserved " + bytes_text(m["reserved_bytes"]) +
         ", peak " + bytes_text(m["peak_allocated_bytes"]) + ", " +
         std::to_string(m["num_allocations"].get<uint64_t>()) + " allocations";
}

}  // namespace

int tessera_cli_devices(int argc, char** argv) {
  bool json_out = false, verbose = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") json_out = true;
    else if (a == "--verbose" || a == "-v") verbose = true;
    else if (a == "--help" || a == "-h") {
      std::fputs(kDevicesUsage, stdout);
      return kCliOk;
    } else {
      std::fprintf(stderr, "tessera devices: unknown option '%s'\n\n%s", a.c_str(), kDevicesUsage);
      return kCliUsage;
    }
  }
  std::vector<tessera::DeviceInfo> devices = tessera::devices();

  // Backends that loaded but have no usable device, with their reason.
  nlohmann::json empty = nlohmann::json::array();
  for (const auto& p : tessera::plugins()) {
    if (p.status != tessera::PluginStatus::Loaded || !p.has_device) continue;
    const tessera::BackendDevice* b = tessera::backend_device_if_loaded(p.device_type);
    if (!b || !b->iface || !b->iface->device_count) continue;
    char reason[512] = {0};
    if (b->iface->device_count(b->self, reason, sizeof(reason)) > 0) continue;
    empty.push_back({{"type", tessera::device_type_name(p.device_type)}, {"plugin", p.name}, {"reason", reason}});
  }

  // Backend plugins that failed: without this a failed cpu plugin would pass silently for the
  // kernel-less built-in CPU device.
  nlohmann::json failed = nlohmann::json::array();
  for (const auto& p : tessera::plugins()) {
    if (p.status != tessera::PluginStatus::Failed || p.kind != tessera::PluginKind::Backend) continue;
    failed.push_back({{"type", p.has_device ? p.device_name : std::string()},
                      {"plugin", p.name},
                      {"manifest", p.manifest},
                      {"reason", p.reason}});
  }

  if (json_out) {
    nlohmann::json out = {
        {"devices", nlohmann::json::array()}, {"backends_without_devices", empty}, {"failed_backends", failed}};
    for (const auto& d : devices) {
      nlohmann::json props = nlohmann::json::object();
      if (!d.properties.empty()) {
        props = nlohmann::json::parse(d.properties, nullptr, /*allow_exceptions=*/false);
        if (props.is_discarded()) props = {{"raw", d.properties}};
      }
      out["devices"].push_back({{"name", d.name},
                                {"type", tessera::device_type_name(d.device.type())},
                                {"index", d.device.index()},
                                {"plugin", d.plugin},
                                {"properties", props}});
      if (verbose) out["devices"].back()["memory_stats"] = memory_json(d.device);
    }
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return kCliOk;
  }
  if (devices.empty()) std::printf("no devices\n");
  for (const auto& d : devices) {
    std::string summary;
    nlohmann::json props = nlohmann::json::parse(d.properties, nullptr, false);
    if (props.is_object() && props.contains("name") && props["name"].is_string())
      summary = props["name"].get<std::string>();
    std::printf("%-24s %-28s %s\n", tessera::printable_text(d.name).c_str(),
                tessera::printable_text("plugin " + d.plugin).c_str(), tessera::printable_text(summary).c_str());
    if (verbose) std::printf("  %s\n", tessera::printable_text(memory_text(memory_json(d.device))).c_str());
  }
  for (const auto& e : empty)
    std::printf("%-24s %-28s no devices: %s\n", tessera::printable_text(e["type"].get<std::string>()).c_str(),
                tessera::printable_text("plugin " + e["plugin"].get<std::string>()).c_str(),
                tessera::printable_text(e["reason"].get<std::string>()).c_str());
  for (const auto& f : failed)
    std::printf("%-24s %-28s failed: %s\n", tessera::printable_text(f["type"].get<std::string>()).c_str(),
                tessera::printable_text("plugin " + f["plugin"].get<std::string>()).c_str(),
                tessera::printable_text(f["reason"].get<std::string>()).c_str());
  return kCliOk;
}
