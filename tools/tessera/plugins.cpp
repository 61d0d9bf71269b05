// `tessera plugins [--json] [--load]`
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "tessera/plugin_loader.h"
#include "tessera/text_escape.h"

namespace {

const char* kPluginsUsage =
    "usage: tessera plugins [--json] [--load]\n"
    "Lists every plugin manifest found (TESSERA_PLUGIN_PATH first, then the plugin folder next to\n"
    "libtessera) with its status: loaded, available, failed, disabled or shadowed, and the reason.\n"
    "Listing reads manifests only; libraries are not loaded unless --load is given.\n"
    "  --json   a JSON array of objects (name, kind, version, status, reason, manifest, library, ...)\n"
    "  --load   load every available plugin first, so that load failures show\n";

}  // namespace

int tessera_cli_plugins(int argc, char** argv) {
  bool json_out = false, load = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") json_out = true;
    else if (a == "--load") load = true;
    else if (a == "--help" || a == "-h") {
      std::fputs(kPluginsUsage, stdout);
      return kCliOk;
    } else {
      std::fprintf(stderr, "tessera plugins: unknown option '%s'\n\n%s", a.c_str(), kPluginsUsage);
      return kCliUsage;
    }
  }
  if (load)
    for (const tessera::PluginKindTraits& t : tessera::plugin_kinds()) tessera::load_plugins_of_kind(t.kind);
  std::vector<tessera::PluginInfo> list = tessera::plugins();
  if (json_out) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& p : list) {
      nlohmann::json j = {{"name", p.name},
                          {"kind", tessera::plugin_kind_name(p.kind)},
                          {"version", p.version},
                          {"status", tessera::plugin_status_name(p.status)},
                          {"reason", p.reason},
                          {"manifest", p.manifest},
                          {"library", p.library},
                          {"priority", p.priority},
                          {"description", p.description}};
      j["device"] = p.has_device ? nlohmann::json(p.device_name) : nlohmann::json(nullptr);
      out.push_back(std::move(j));
    }
    // Manifest fields and file names are untrusted (Note [Untrusted text]): bytes that are not UTF-8
    // become U+FFFD instead of failing the whole listing.
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return kCliOk;
  }
  if (list.empty()) {
    std::printf("no plugin manifests found (set TESSERA_PLUGIN_PATH or install plugins)\n");
    return kCliOk;
  }
  std::printf("%-20s %-10s %-10s %-10s %s\n", "NAME", "KIND", "VERSION", "STATUS", "DEVICE / REASON");
  for (const auto& p : list) {
    // A backend is a device; any other kind with a device type provides kernels for that device.
    const std::string device = p.has_device ? (tessera::plugin_kind_traits(p.kind).provides_device ? "device " : "for device ") + p.device_name : "";
    std::string detail = p.reason.empty() ? device : p.reason;
    std::printf("%-20s %-10s %-10s %-10s %s\n", tessera::printable_text(p.name).c_str(),
                tessera::plugin_kind_name(p.kind), tessera::printable_text(p.version).c_str(),
                tessera::plugin_status_name(p.status), tessera::printable_text(detail).c_str());
    std::printf("%-20s manifest %s\n", "", tessera::printable_text(p.manifest).c_str());
  }
  return kCliOk;
}
