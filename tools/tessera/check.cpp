// `tessera check --device NAME [--ops GLOB[,GLOB...]] [--dtypes LIST] [--seed N] [--xfail FILE]
//                [--no-strided] [--json]`
// Runs the conformance kit (tests/cts) against one device and prints an op x dtype table and a
// summary (or the JSON report). Exit status: 0 when no case failed unexpectedly, 1 otherwise or
// when the device is unusable, 2 on bad usage.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>

#include <tessera/cts.h>
#include <tessera/plugin_loader.h>
#include <tessera/tessera.h>

#include "commands.h"

namespace {

void print_usage(FILE* out) {
  std::fputs(
      "usage: tessera check --device NAME [options]\n"
      "Runs every op of the core op set on NAME for each dtype and compares it with the CPU backend.\n"
      "  --device NAME     device to check (cpu, my_hardware_device, npu:1, ...)\n"
      "  --ops GLOBS       only cases whose label or operator matches (comma-separated globs)\n"
      "  --dtypes LIST     only these dtypes (comma-separated: float32,int64,...)\n"
      "  --seed N          random seed (default: a fresh one, printed in the summary)\n"
      "  --xfail FILE      expected-failure list (default: <device>.xfail.txt next to the plugin's\n"
      "                    manifest, or TESSERA_CTS_XFAIL)\n"
      "  --no-strided      skip the runs with non-contiguous and channels-last inputs\n"
      "  --json            print the report as JSON\n"
      "Exit status: 0 = no unexpected failure, 1 = failures or unusable device, 2 = bad usage.\n",
      out);
}

}  // namespace

int tessera_cli_check(int argc, char** argv) {
  tessera::cts::Options options;
  options.device.clear();
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "tessera check: %s needs a value\n", flag);
        return nullptr;
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      print_usage(stdout);
      return kCliOk;
    } else if (a == "--device") {
      const char* v = value("--device");
      if (!v) return kCliUsage;
      options.device = v;
    } else if (a.rfind("--device=", 0) == 0) {
      options.device = a.substr(9);
    } else if (a == "--ops") {
      const char* v = value("--ops");
      if (!v) return kCliUsage;
      options.ops = v;
    } else if (a.rfind("--ops=", 0) == 0) {
      options.ops = a.substr(6);
    } else if (a == "--dtypes") {
      const char* v = value("--dtypes");
      if (!v) return kCliUsage;
      std::istringstream in(v);
      std::string name;
      try {
        while (std::getline(in, name, ','))
          if (!name.empty()) options.dtypes.push_back(tessera::dtype_from_name(name));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "tessera check: %s\n", e.what());
        return kCliUsage;
      }
    } else if (a == "--seed") {
      const char* v = value("--seed");
      if (!v) return kCliUsage;
      options.seed = std::strtoull(v, nullptr, 10);
    } else if (a == "--xfail") {
      const char* v = value("--xfail");
      if (!v) return kCliUsage;
      options.xfail_file = v;
    } else if (a == "--no-strided") {
      options.strided = false;
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "tessera check: unknown argument '%s'\n", a.c_str());
      print_usage(stderr);
      return kCliUsage;
    }
  }
  if (options.device.empty()) {
    std::fputs("tessera check: --device NAME is required (see `tessera devices` for the names)\n", stderr);
    print_usage(stderr);
    return kCliUsage;
  }
  try {
    const tessera::cts::Report report = tessera::cts::run(options);
    const std::string text = json ? tessera::cts::format_json(report) : tessera::cts::format_table(report);
    std::fputs(text.c_str(), stdout);
    if (report.cases.empty()) {
      std::fprintf(stderr, "tessera check: no case matches --ops '%s'\n", options.ops.c_str());
      return kCliFailure;
    }
    return report.unexpected_failures() == 0 ? kCliOk : kCliFailure;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera check: %s\n", e.what());
    return kCliFailure;
  }
}
