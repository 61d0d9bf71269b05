// `tessera check --device NAME [--ops GLOB[,GLOB...]] [--dtypes LIST] [--seed N] [--xfail FILE]
//                [--no-strided] [--config FILE] [--junit FILE] [--json]`
// `tessera check --compiler NAME [--device NAME] ...` / `tessera check --quantizer NAME ...`
// `tessera check --list`
// Runs the conformance kit (tests/cts) against one device, or its graph suite against a compiler
// or quantizer plugin (Note [Graph conformance] in cts_graphs.h), and prints a table and a summary
// (or the JSON report); --junit also writes JUnit XML. Exit status: 0 when no case failed
// unexpectedly, 1 otherwise or when the device or plugin is unusable, 2 on bad usage or a bad
// configuration file (Note [Conformance configuration] in cts_config.h).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <tessera/cts.h>
#include <tessera/cts_config.h>
#ifdef TESSERA_CTS_HAS_GRAPHS
#include <tessera/cts_graphs.h>
#endif
#include <tessera/plugin_loader.h>
#include <tessera/tessera.h>

#include "commands.h"

namespace {

void print_usage(FILE* out) {
  std::fputs(
      "usage: tessera check --device NAME [options]\n"
      "       tessera check --compiler NAME [--device NAME] [options]\n"
      "       tessera check --quantizer NAME [options]\n"
      "       tessera check --list\n"
      "Runs every op of the core op set on NAME for each dtype and compares it with the CPU backend;\n"
      "or runs the graph suite through a compiler plugin (compared with the interpreter) or a\n"
      "quantizer plugin (its lowered int8 program compared with its quantize/dequantize program).\n"
      "  --device NAME     device to check (cpu, my_hardware_device, npu:1, ...); with --compiler, the\n"
      "                    device to compile for (default: the plugin's manifest device, else cpu)\n"
      "  --compiler NAME   run the graph suite through the compiler plugin NAME\n"
      "  --quantizer NAME  run the quantization suite with the quantizer plugin NAME\n"
      "  --ops GLOBS       only cases (or programs) whose label or operator matches (comma-separated globs)\n"
      "  --dtypes LIST     only these dtypes (comma-separated: float32,int64,...)\n"
      "  --seed N          random seed (default: a fresh one, printed in the summary)\n"
      "  --xfail FILE      expected-failure list (default: <device>.xfail.txt next to the plugin's\n"
      "                    manifest, or TESSERA_CTS_XFAIL)\n"
      "  --config FILE     allowlist, skip list (with reasons), per-op tolerances, per-device rules\n"
      "                    (JSON; schema sdk/schema/cts_config.schema.json, docs/conformance.md)\n"
      "  --junit FILE      also write the report as JUnit XML (Jenkins, GitLab)\n"
      "  --no-strided      skip the runs with non-contiguous and channels-last inputs\n"
      "  --json            print the report as JSON\n"
      "  --list            print every case, operator and program name a configuration may use\n"
      "Exit status: 0 = no unexpected failure, 1 = failures or unusable device/plugin,\n"
      "2 = bad usage or a bad configuration file.\n",
      out);
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  return bool(f.flush());
}

}  // namespace

int tessera_cli_check(int argc, char** argv) {
  tessera::cts::Options options;
  options.device.clear();
  std::string compiler, quantizer, config_file, junit_file;
  bool json = false, list = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "tessera check: %s needs a value\n", flag);
        return nullptr;
      }
      return argv[++i];
    };
    // --flag VALUE or --flag=VALUE into `out`; false on a missing value.
    auto option = [&](const char* flag, std::string& out, bool* matched) {
      const std::string eq = std::string(flag) + "=";
      *matched = true;
      if (a == flag) {
        const char* v = value(flag);
        if (!v) return false;
        out = v;
      } else if (a.rfind(eq, 0) == 0) {
        out = a.substr(eq.size());
      } else {
        *matched = false;
      }
      return true;
    };
    bool matched = false;
    std::string text;
    if (a == "--help" || a == "-h") {
      print_usage(stdout);
      return kCliOk;
    }
    if (!option("--device", options.device, &matched)) return kCliUsage;
    if (matched) continue;
    if (!option("--ops", options.ops, &matched)) return kCliUsage;
    if (matched) continue;
    if (!option("--compiler", compiler, &matched)) return kCliUsage;
    if (matched) continue;
    if (!option("--quantizer", quantizer, &matched)) return kCliUsage;
    if (matched) continue;
    if (!option("--config", config_file, &matched)) return kCliUsage;
    if (matched) continue;
    if (!option("--junit", junit_file, &matched)) return kCliUsage;
    if (matched) continue;
    if (!option("--xfail", options.xfail_file, &matched)) return kCliUsage;
    if (matched) continue;
    if (!option("--dtypes", text, &matched)) return kCliUsage;
    if (matched) {
      std::istringstream in(text);
      std::string name;
      try {
        while (std::getline(in, name, ','))
          if (!name.empty()) options.dtypes.push_back(tessera::dtype_from_name(name));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "tessera check: %s\n", e.what());
        return kCliUsage;
      }
      continue;
    }
    if (!option("--seed", text, &matched)) return kCliUsage;
    if (matched) {
      char* end = nullptr;
      options.seed = std::strtoull(text.c_str(), &end, 10);
      if (text.empty() || *end) {
        std::fprintf(stderr, "tessera check: --seed takes a number, got '%s'\n", text.c_str());
        return kCliUsage;
      }
      continue;
    }
    if (a == "--no-strided") {
      options.strided = false;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--list") {
      list = true;
    } else {
      std::fprintf(stderr, "tessera check: unknown argument '%s'\n", a.c_str());
      print_usage(stderr);
      return kCliUsage;
    }
  }
  if (list) {
    for (const std::string& n : tessera::cts::config_names()) std::printf("%s\n", n.c_str());
    return kCliOk;
  }
#ifndef TESSERA_CTS_HAS_GRAPHS
  if (!compiler.empty() || !quantizer.empty()) {
    std::fputs("tessera check: this build has no compiler library: --compiler and --quantizer are not available\n", stderr);
    return kCliUsage;
  }
#endif
  if (!compiler.empty() && !quantizer.empty()) {
    std::fputs("tessera check: --compiler and --quantizer are two runs; give one of them\n", stderr);
    return kCliUsage;
  }
  if ((!compiler.empty() || !quantizer.empty()) && (!options.dtypes.empty() || !options.strided || !options.xfail_file.empty())) {
    std::fputs("tessera check: --dtypes, --no-strided and --xfail apply to the op suite (--device) only; the graph suites "
               "run float32 programs (select them with --ops, skip them with --config)\n",
               stderr);
    return kCliUsage;
  }
  if (!quantizer.empty() && !options.device.empty()) {
    std::fputs("tessera check: --quantizer runs on the CPU (int8 kernels); drop --device\n", stderr);
    return kCliUsage;
  }
  if (options.device.empty() && compiler.empty() && quantizer.empty()) {
    std::fputs("tessera check: --device NAME (or --compiler NAME, --quantizer NAME) is required (see `tessera devices` "
               "and `tessera plugins` for the names)\n",
               stderr);
    print_usage(stderr);
    return kCliUsage;
  }
  if (!config_file.empty()) {
    try {
      options.config = std::make_shared<tessera::cts::Config>(tessera::cts::Config::load(config_file));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera check: %s\n", e.what());
      return kCliUsage;
    }
  }
  // The JUnit file is created before anything runs, so a path that cannot be written fails fast.
  if (!junit_file.empty() && !write_file(junit_file, "")) {
    std::fprintf(stderr, "tessera check: cannot write the JUnit report to '%s'; pass a writable path to --junit\n",
                 junit_file.c_str());
    return kCliUsage;
  }
  tessera::cts::Report report;
  try {
#ifdef TESSERA_CTS_HAS_GRAPHS
    if (!compiler.empty() || !quantizer.empty()) {
      tessera::cts::GraphOptions graph;
      graph.plugin = compiler.empty() ? quantizer : compiler;
      graph.device = options.device;
      graph.programs = options.ops;
      graph.seed = options.seed;
      graph.config = options.config;
      report = compiler.empty() ? tessera::cts::run_quantizer_suite(graph) : tessera::cts::run_compiler_suite(graph);
    } else
#endif
    {
      report = tessera::cts::run(options);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera check: %s\n", e.what());
    if (!junit_file.empty()) {
      // CI still gets a report: one failed case that says why nothing ran.
      tessera::cts::Report failed;
      failed.suite = compiler.empty() && quantizer.empty() ? "ops" : !compiler.empty() ? "compiler" : "quantizer";
      failed.plugin = compiler.empty() ? quantizer : compiler;
      failed.device = options.device.empty() ? "cpu" : options.device;
      failed.config_file = config_file;
      tessera::cts::CaseResult setup;
      setup.op = "setup";
      setup.outcome = tessera::cts::Outcome::Fail;
      setup.message = e.what();
      failed.cases.push_back(setup);
      write_file(junit_file, tessera::cts::format_junit(failed));
    }
    return kCliFailure;
  }
  const std::string text = json ? tessera::cts::format_json(report) : tessera::cts::format_table(report);
  std::fputs(text.c_str(), stdout);
  if (!junit_file.empty() && !write_file(junit_file, tessera::cts::format_junit(report))) {
    std::fprintf(stderr, "tessera check: writing the JUnit report to '%s' failed\n", junit_file.c_str());
    return kCliFailure;
  }
  if (report.cases.empty()) {
    std::fprintf(stderr, "tessera check: no case matches --ops '%s'%s\n", options.ops.c_str(),
                 config_file.empty() ? "" : " and the configuration's allowlist");
    return kCliFailure;
  }
  return report.unexpected_failures() == 0 ? kCliOk : kCliFailure;
}
