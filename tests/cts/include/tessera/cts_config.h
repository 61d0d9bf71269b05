// The conformance kit's configuration file: what a vendor's CI runs, skips and tolerates.
//
// Note [Conformance configuration]
// `tessera check --config FILE` reads one JSON object (schema: sdk/schema/cts_config.schema.json;
// docs/conformance.md):
//   {"config_version": 1,
//    "allow": ["add*", "matmul", "pointwise_chain"],
//    "skip": [{"case": "conv2d", "dtypes": ["float16"], "devices": ["npu"], "reason": "..."}],
//    "tolerances": {"matmul": {"atol": 1e-3, "rtol": 1e-3, "dtypes": {"bfloat16": {"rtol": 0.05}}}},
//    "devices": {"npu": {"allow": [...], "skip": [...], "tolerances": {...}}}}
// Every key is optional but config_version. Names are globs ('*', '?') on a case label ("add_alpha"),
// its operator's base name ("add") or full name ("add.Tensor"), or a graph-suite program name
// ("matmul_bias_relu"; cts_graphs.h). Device names are globs on the device type ("npu", "cuda").
//   allow       only cases matching one of these run (and, per matching "devices" entry, one of
//               its own "allow" too); the others are left out of the report, as --ops does.
//   skip        a case matching an entry (its dtypes and devices, when given) is not run and is
//               reported as `skip` with the entry's reason (required, non-empty): never as a pass.
//   tolerances  per name: atol and rtol replacing the dtype's default for the comparison (either
//               may be left out: it keeps the default); "dtypes" narrows them per dtype and wins.
//               Device sections are looked at first, then the top level; in each, the first
//               matching name in file order.
// The file is checked whole before anything runs: not JSON (with line and column), an unknown key
// (with the keys allowed there), a wrong type, an unknown dtype, a missing reason, or a name that
// matches no case, operator or program (a typo: the nearest name is suggested) is a ConfigError
// naming the file and the JSON path ("$.skip[1].case"); `tessera check` exits with status 2.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <tessera/dtype.h>
#include <tessera/error.h>

namespace tessera::cts {

// A configuration file that cannot be used: what() names the file, the JSON path and the fix.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message) : Error(ErrorCode::InvalidArgument, message) {}
};

class Config {
 public:
  struct Skip {
    std::string pattern;
    std::vector<std::string> dtypes;   // globs on dtype names; empty = every dtype
    std::vector<std::string> devices;  // globs on device types; empty = every device
    std::string reason;
  };
  struct Tolerance {
    std::string pattern;
    std::string dtype = "*";
    std::optional<double> atol, rtol;
  };
  struct Rules {
    std::vector<std::string> allow;  // empty = everything
    std::vector<Skip> skip;
    std::vector<Tolerance> tolerances;  // dtype-specific entries first within one name
  };

  // Parses the text of a configuration file. `source` names it in errors; a pattern must match one
  // of `known_names` (config_names() when empty). Throws ConfigError.
  static Config parse(const std::string& text, const std::string& source,
                      const std::vector<std::string>& known_names = {});
  // Reads and parses the file at `path`. Throws ConfigError (also when it cannot be read).
  static Config load(const std::string& path);

  const std::string& source() const { return source_; }
  // Whether a case runs under the allowlists for `device`; `label` is the case or program, `op`
  // its operator (base or full name; may be empty).
  bool allows(const std::string& device, const std::string& label, const std::string& op) const;
  // The skip entry that covers the case, or nullptr.
  const Skip* skip(const std::string& device, const std::string& label, const std::string& op, DType dtype) const;
  // The tolerance for the case: the defaults with the overrides that apply.
  void tolerance(const std::string& device, const std::string& label, const std::string& op, DType dtype,
                 double* rtol, double* atol) const;

 private:
  std::string source_;
  Rules top_;
  std::vector<std::pair<std::string, Rules>> devices_;  // device glob -> rules, in file order
};

// Every name a configuration may match: case labels, operator base and full names of the cases, and
// the programs of both graph suites.
std::vector<std::string> config_names();
// The name of `names` nearest to `typo` (edit distance), or "" when none is close.
std::string nearest_name(const std::string& typo, const std::vector<std::string>& names);

}  // namespace tessera::cts
