// The conformance kit: the op suite written once, run against any device by name and compared with
// the CPU backend on fresh random inputs with dtype-aware tolerances. Used by the gtest suite
// (tests/cts/test_cts.cpp) and by `tessera check --device NAME`.
//
// Note [Conformance outcomes]
// Each case (op x dtype) is classified:
//   pass        ran on the device's own kernel (or a composite of its kernels) and matched the CPU
//   fallback    matched the CPU, but ran through the CPU fallback: the device has no kernel, or its
//               kernel answered UNIMPLEMENTED (seen at run time, cpu_fallback_calls_on_this_thread)
//   unsupported the device neither implements the op for the dtype nor may fall back; or the CPU
//               reference itself does not support the dtype (nothing to compare with)
//   fail        threw an unexpected error, or differed from the CPU beyond tolerance (max error kept)
//   xfail       a failure listed in the device's expected-failure list
//   xpass       listed as an expected failure but passed (reported so the list can be trimmed)
//   skip        not run: a skip entry of the configuration file (Note [Conformance configuration]
//               in cts_config.h) names it; the entry's reason is the message. Never counted as a pass.
// Only `fail` is an unexpected failure. The graph suites (cts_graphs.h) classify each program the
// same way (pass, unsupported, fail, skip).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <tessera/dtype.h>

namespace tessera::cts {

enum class Outcome { Pass, Fallback, Unsupported, Fail, XFail, XPass, Skip };
const char* outcome_name(Outcome o);

struct CaseResult {
  std::string op;          // case label, e.g. "add", "softmax"
  std::string op_name;     // operator name in the catalogue ("add.Tensor"); empty if not found
  DType dtype = DType::Float32;
  Outcome outcome = Outcome::Pass;
  std::string resolution;  // kernel, composite, fallback (also when a kernel fell back at run time), none
  double max_abs_error = 0;   // largest |device - cpu|
  double max_rel_error = 0;   // largest |device - cpu| / (atol + rtol |cpu|): <= 1 passes
  std::string message;     // why it failed / is unsupported / was skipped (the configuration's reason)
  double seconds = 0;      // wall time of the case, every layout included (JUnit's `time`)
  std::string details;     // what else is worth knowing (graph suites: partitions taken; JUnit system-out)
};

class Config;

struct Options {
  std::string device = "cpu";  // device name, "my_hardware_device" or "my_hardware_device:1"
  std::string ops = "*";       // glob(s) on case labels or operator names, comma-separated
  std::vector<DType> dtypes;   // empty = every dtype each case supports
  uint64_t seed = 0;           // 0 = a fresh seed (reported in Report::seed)
  // Expected-failure list. Empty: TESSERA_CTS_XFAIL (a file) if set, else "<device>.xfail.txt"
  // next to the plugin's manifest, else tests/cts/xfail/<device>.txt of the source tree.
  std::string xfail_file;
  bool strided = true;         // also run each case with non-contiguous (and 4-D ones channels-last) device inputs
  // Allowlist, skip list and tolerance overrides (cts_config.h). (optional) defaults to none.
  std::shared_ptr<const Config> config;
};

struct Report {
  std::string suite = "ops";  // "ops", "compiler" or "quantizer" (cts_graphs.h)
  std::string plugin;         // the compiler or quantizer plugin of a graph suite
  std::string config_file;    // the configuration file used ("" when none)
  std::string device;
  uint64_t seed = 0;
  std::string xfail_file;  // the list used ("" when none)
  std::vector<CaseResult> cases;
  int count(Outcome o) const;
  int unexpected_failures() const { return count(Outcome::Fail); }
};

// Runs the suite. Throws tessera::Error only when the device itself is unusable (unknown name,
// no plugin provides it, zero devices); per-case problems are results.
Report run(const Options& options);

// Labels of every case, in suite order.
std::vector<std::string> case_labels();
// The op (base name, "add") each case runs, in suite order.
std::vector<std::string> case_ops();

// An op x dtype table plus a summary line, for terminals.
std::string format_table(const Report& report);
// The report as a JSON object: {"device", "seed", "xfail_file", "suite", "plugin", "config_file",
// "summary": {...}, "cases": [...]}, in this order.
std::string format_json(const Report& report);
// The report as JUnit XML (one <testsuites> holding one <testsuite>; a <testcase> per case or
// program, with <failure> for fail and <skipped> for skip, unsupported and xfail), as Jenkins and
// GitLab read it. Messages are XML-escaped; bytes that are not UTF-8 and control characters are
// written as \xNN.
std::string format_junit(const Report& report);

// Expected-failure list: one entry a line, "<op glob> <dtype glob>  # reason"; '#' starts a comment.
struct XFailEntry {
  std::string op_glob;
  std::string dtype_glob;
};
std::vector<XFailEntry> parse_xfail(const std::string& text);
bool glob_match(const std::string& pattern, const std::string& text);

}  // namespace tessera::cts
