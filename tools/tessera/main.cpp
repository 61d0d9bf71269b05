// `tessera`: inspect devices and plugins, diagnose plugins, run the conformance kit, print and run
// saved programs.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.h"
#include "tessera/plugin_abi.h"
#include "tessera/version.h"

namespace {

const char* kUsage =
    "usage: tessera <command> [options]\n"
    "\n"
    "commands:\n"
    "  devices [--json] [--verbose]\n"
    "                            every available device of every backend plugin (--verbose: with\n"
    "                            memory statistics)\n"
    "  plugins [--json] [--load] every plugin manifest found, with its status and reason\n"
    "  doctor                    load each plugin in a child process and report a verdict\n"
    "  ops [--json] [NAME...]    the op contract: schemas, tags, and which devices implement each op\n"
    "  check --device NAME ...   run the conformance kit against a device (--compiler NAME,\n"
    "                            --quantizer NAME: against a compiler or quantizer plugin;\n"
    "                            --config FILE, --junit FILE for CI)\n"
    "  graph FILE.tsr|FILE.onnx  print a saved program's (or an ONNX model's) graph\n"
    "  run FILE.tsr|FILE.onnx --device NAME --input [NAME=]X.npy ... --output OUT.npz [--repeat N --json] [--compile]\n"
    "                            run a saved program or ONNX model on a device, NumPy files in and out\n"
    "\n"
    "options:\n"
    "  --version                 print the version and the plugin ABI version\n"
    "  --help                    this text; `tessera <command> --help` for a command\n"
    "\n"
    "environment: TESSERA_PLUGIN_PATH, TESSERA_PLUGINS_SELECT, TESSERA_PLUGINS_DISABLE, TESSERA_LOG,\n"
    "TESSERA_PROFILE (a trace file and/or `summary` of every op run)\n"
    "(see docs/plugins.md)\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return kCliUsage;
  }
  std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(kUsage, stdout);
    return kCliOk;
  }
  if (command == "--version") {
    std::printf("tessera %s (plugin ABI %d.%d)\n", TESSERA_VERSION_STRING, TESSERA_ABI_MAJOR, TESSERA_ABI_MINOR);
    return kCliOk;
  }
  try {
    if (command == "devices") return tessera_cli_devices(argc - 1, argv + 1);
    if (command == "plugins") return tessera_cli_plugins(argc - 1, argv + 1);
    if (command == "doctor") return tessera_cli_doctor(argc - 1, argv + 1);
    if (command == "ops") return tessera_cli_ops(argc - 1, argv + 1);
    if (command == "graph" || command == "run") {
#ifdef TESSERA_CLI_HAS_PROGRAMS
      return command == "graph" ? tessera_cli_graph(argc - 1, argv + 1) : tessera_cli_run(argc - 1, argv + 1);
#else
      std::fprintf(stderr, "tessera %s: this build has no compiler library\n", command.c_str());
      return kCliFailure;
#endif
    }
    if (command == "check") {
#ifdef TESSERA_CLI_HAS_CHECK
      return tessera_cli_check(argc - 1, argv + 1);
#else
      std::fputs("tessera check: this build has no conformance kit\n", stderr);
      return kCliFailure;
#endif
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera %s: %s\n", command.c_str(), e.what());
    return kCliFailure;
  }
  std::fprintf(stderr, "tessera: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return kCliUsage;
}
