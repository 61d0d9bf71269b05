// The configuration file of the conformance kit: Note [Conformance configuration] in cts_config.h.
#include "tessera/cts_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>
#include <tessera/dispatcher.h>

#include "cases.h"
#include "tessera/cts.h"
#include "tessera/edit_distance.h"
#include "tessera/text_escape.h"
#ifdef TESSERA_CTS_HAS_GRAPHS
#include "tessera/cts_graphs.h"
#endif

namespace tessera::cts {

namespace {

using Json = nlohmann::ordered_json;

bool has_wildcard(const std::string& s) { return s.find_first_of("*?") != std::string::npos; }

bool any_match(const std::vector<std::string>& globs, const std::string& text) {
  return std::any_of(globs.begin(), globs.end(), [&](const std::string& g) { return glob_match(g, text); });
}

bool name_matches(const std::string& pattern, const std::string& label, const std::string& op) {
  if (glob_match(pattern, label)) return true;
  if (op.empty()) return false;
  if (glob_match(pattern, op)) return true;
  const std::string base = op.substr(0, op.find('.'));
  return base != op && glob_match(pattern, base);
}

// Reads one file's JSON, reporting every problem with the file and the JSON path.
class Reader {
 public:
  Reader(std::string source, const std::vector<std::string>& names) : source_(std::move(source)), names_(names) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw ConfigError(source_ + ": " + path + ": " + what);
  }

  void keys(const Json& j, const std::string& path, std::initializer_list<const char*> allowed) const {
    if (!j.is_object()) fail(path, "expected an object, got " + describe(j));
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (std::any_of(allowed.begin(), allowed.end(), [&](const char* k) { return it.key() == k; })) continue;
      std::string list;
      std::vector<std::string> choices;
      for (const char* k : allowed) list += (list.empty() ? "" : ", ") + std::string(k), choices.emplace_back(k);
      const std::string near = nearest_name(it.key(), choices);
      fail(path + "." + it.key(), "unknown key '" + printable(it.key()) + "'" +
                                      (near.empty() ? "" : "; did you mean '" + near + "'?") + " (allowed here: " +
                                      list + ")");
    }
  }

  std::string string(const Json& j, const std::string& path) const {
    if (!j.is_string()) fail(path, "expected a string, got " + describe(j));
    return j.get<std::string>();
  }

  std::vector<std::string> strings(const Json& j, const std::string& path) const {
    if (!j.is_array()) fail(path, "expected an array of strings, got " + describe(j));
    std::vector<std::string> out;
    for (size_t i = 0; i < j.size(); ++i) out.push_back(string(j[i], path + "[" + std::to_string(i) + "]"));
    return out;
  }

  // A glob that must match a case, operator or program.
  std::string pattern(const Json& j, const std::string& path) const {
    std::string p = string(j, path);
    if (p.empty()) fail(path, "empty name; give a case, operator or program name (globs allowed)");
    if (std::any_of(names_.begin(), names_.end(), [&](const std::string& n) { return glob_match(p, n); })) return p;
    if (has_wildcard(p))
      fail(path, "'" + printable(p) + "' matches no case, operator or program (see `tessera check --list`)");
    const std::string near = nearest_name(p, names_);
    fail(path, "'" + printable(p) + "' names no case, operator or program" +
                   (near.empty() ? "" : "; did you mean '" + near + "'?") + " (see `tessera check --list`)");
  }

  std::vector<std::string> patterns(const Json& j, const std::string& path) const {
    if (!j.is_array()) fail(path, "expected an array of names, got " + describe(j));
    std::vector<std::string> out;
    for (size_t i = 0; i < j.size(); ++i) out.push_back(pattern(j[i], path + "[" + std::to_string(i) + "]"));
    return out;
  }

  std::vector<std::string> dtypes(const Json& j, const std::string& path) const {
    std::vector<std::string> out = strings(j, path);
    for (size_t i = 0; i < out.size(); ++i) out[i] = dtype(out[i], path + "[" + std::to_string(i) + "]");
    return out;
  }

  // A dtype glob: without a wildcard it must be a dtype name (an alias, "f32", becomes "float32").
  std::string dtype(const std::string& name, const std::string& path) const {
    if (has_wildcard(name)) return name;
    try {
      return std::string(dtype_name(dtype_from_name(name)));
    } catch (const Error&) {
      const std::string near = nearest_name(name, {"bool", "uint8", "int8", "int16", "int32", "int64", "float16",
                                                   "bfloat16", "float32", "float64"});
      fail(path, "unknown dtype '" + printable(name) + "'" + (near.empty() ? "" : "; did you mean '" + near + "'?") +
                     " (one of bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64)");
    }
  }

  double number(const Json& j, const std::string& path) const {
    if (!j.is_number() || j.get<double>() < 0 || !std::isfinite(j.get<double>()))
      fail(path, "expected a finite number >= 0, got " + describe(j));
    return j.get<double>();
  }

  Config::Rules rules(const Json& j, const std::string& path, bool top) const {
    Config::Rules r;
    if (j.contains("allow")) {
      r.allow = patterns(j["allow"], path + ".allow");
      if (r.allow.empty()) fail(path + ".allow", "empty allowlist: it would run nothing; leave the key out to run everything");
    }
    if (j.contains("skip")) {
      const Json& s = j["skip"];
      if (!s.is_array()) fail(path + ".skip", "expected an array of {\"case\", \"reason\"} objects, got " + describe(s));
      for (size_t i = 0; i < s.size(); ++i) {
        const std::string at = path + ".skip[" + std::to_string(i) + "]";
        if (top) keys(s[i], at, {"case", "dtypes", "devices", "reason"});
        else keys(s[i], at, {"case", "dtypes", "reason"});
        Config::Skip e;
        if (!s[i].contains("case")) fail(at, "missing \"case\": the case, operator or program to skip");
        e.pattern = pattern(s[i]["case"], at + ".case");
        if (!s[i].contains("reason"))
          fail(at, "missing \"reason\": every skip entry says why (it is reported with the skipped case)");
        e.reason = string(s[i]["reason"], at + ".reason");
        if (e.reason.find_first_not_of(" \t") == std::string::npos) fail(at + ".reason", "empty reason; say why it is skipped");
        if (s[i].contains("dtypes")) e.dtypes = dtypes(s[i]["dtypes"], at + ".dtypes");
        if (s[i].contains("devices")) e.devices = strings(s[i]["devices"], at + ".devices");
        r.skip.push_back(std::move(e));
      }
    }
    if (j.contains("tolerances")) {
      const Json& t = j["tolerances"];
      const std::string tp = path + ".tolerances";
      if (!t.is_object()) fail(tp, "expected an object of name -> {\"atol\", \"rtol\", \"dtypes\"}, got " + describe(t));
      for (auto it = t.begin(); it != t.end(); ++it) {
        const std::string at = tp + "." + it.key();
        const std::string name = pattern(Json(it.key()), at);
        keys(it.value(), at, {"atol", "rtol", "dtypes"});
        auto entry = [&](const Json& e, const std::string& p, const std::string& dtype) {
          Config::Tolerance tol{name, dtype, std::nullopt, std::nullopt};
          if (e.contains("atol")) tol.atol = number(e["atol"], p + ".atol");
          if (e.contains("rtol")) tol.rtol = number(e["rtol"], p + ".rtol");
          return tol;
        };
        if (it.value().contains("dtypes")) {
          const Json& d = it.value()["dtypes"];
          if (!d.is_object()) fail(at + ".dtypes", "expected an object of dtype -> {\"atol\", \"rtol\"}, got " + describe(d));
          for (auto dt = d.begin(); dt != d.end(); ++dt) {
            const std::string dp = at + ".dtypes." + dt.key();
            const std::string canonical = dtype(dt.key(), dp);
            keys(dt.value(), dp, {"atol", "rtol"});
            r.tolerances.push_back(entry(dt.value(), dp, canonical));
          }
        }
        r.tolerances.push_back(entry(it.value(), at, "*"));
      }
    }
    return r;
  }

  static std::string describe(const Json& j) {
    std::string dump = j.dump();
    if (dump.size() > 40) dump = dump.substr(0, 37) + "...";
    return std::string(j.type_name()) + " " + printable(dump);
  }
  static std::string printable(const std::string& s) { return printable_text(s); }

 private:
  std::string source_;
  const std::vector<std::string>& names_;
};

}  // namespace

std::vector<std::string> config_names() {
  std::set<std::string> names;
  Dispatcher& d = Dispatcher::instance();
  for (const Case& c : cases()) {
    names.insert(c.label);
    names.insert(c.op);
    if (d.find_op(c.op)) names.insert(d.schema(*d.find_op(c.op)).full_name());
    for (const std::string& n : d.op_names())
      if (n.rfind(c.op + ".", 0) == 0) names.insert(n);
  }
#ifdef TESSERA_CTS_HAS_GRAPHS
  for (const std::string& n : compiler_program_names()) names.insert(n);
  for (const std::string& n : quantizer_program_names()) names.insert(n);
#endif
  return {names.begin(), names.end()};
}

std::string nearest_name(const std::string& typo, const std::vector<std::string>& names) {
  // Close enough when at most a third of the longer name differs (and at most 3 edits).
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const std::string& n : names) {
    const size_t d = edit_distance(typo, n);
    if (d < best_d) best_d = d, best = n;
  }
  const size_t limit = std::min<size_t>(3, std::max<size_t>(1, std::max(typo.size(), best.size()) / 3));
  return best_d <= limit ? best : "";
}

Config Config::parse(const std::string& text, const std::string& source, const std::vector<std::string>& known_names) {
  const std::vector<std::string> all = known_names.empty() ? config_names() : known_names;
  Reader in(source, all);
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw ConfigError(source + ": not JSON: " + e.what());
  }
  in.keys(j, "$", {"$schema", "config_version", "allow", "skip", "tolerances", "devices"});
  if (!j.contains("config_version"))
    in.fail("$", "missing \"config_version\": 1 (the version of this file's format)");
  if (!j["config_version"].is_number_integer() || j["config_version"].get<int64_t>() != 1)
    in.fail("$.config_version", "expected 1 (the only version), got " + Reader::describe(j["config_version"]));
  Config c;
  c.source_ = source;
  c.top_ = in.rules(j, "$", true);
  if (j.contains("devices")) {
    const Json& d = j["devices"];
    if (!d.is_object()) in.fail("$.devices", "expected an object of device -> {\"allow\", \"skip\", \"tolerances\"}, got " + Reader::describe(d));
    for (auto it = d.begin(); it != d.end(); ++it) {
      const std::string at = "$.devices." + it.key();
      in.keys(it.value(), at, {"allow", "skip", "tolerances"});
      c.devices_.emplace_back(it.key(), in.rules(it.value(), at, false));
    }
  }
  return c;
}

Config Config::load(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ConfigError("configuration file '" + path + "' cannot be read; pass an existing file to --config");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse(ss.str(), path);
}

bool Config::allows(const std::string& device, const std::string& label, const std::string& op) const {
  auto ok = [&](const Rules& r) {
    return r.allow.empty() || std::any_of(r.allow.begin(), r.allow.end(),
                                          [&](const std::string& p) { return name_matches(p, label, op); });
  };
  if (!ok(top_)) return false;
  for (const auto& [glob, rules] : devices_)
    if (glob_match(glob, device) && !ok(rules)) return false;
  return true;
}

const Config::Skip* Config::skip(const std::string& device, const std::string& label, const std::string& op,
                                 DType dtype) const {
  const std::string dt(dtype_name(dtype));
  auto find = [&](const Rules& r) -> const Skip* {
    for (const Skip& s : r.skip) {
      if (!name_matches(s.pattern, label, op)) continue;
      if (!s.dtypes.empty() && !any_match(s.dtypes, dt)) continue;
      if (!s.devices.empty() && !any_match(s.devices, device)) continue;
      return &s;
    }
    return nullptr;
  };
  for (const auto& [glob, rules] : devices_)
    if (glob_match(glob, device))
      if (const Skip* s = find(rules)) return s;
  return find(top_);
}

void Config::tolerance(const std::string& device, const std::string& label, const std::string& op, DType dtype,
                       double* rtol, double* atol) const {
  const std::string dt(dtype_name(dtype));
  // The first name that matches decides; its dtype entry (listed first) wins over its plain one,
  // which fills what the dtype entry leaves out.
  auto apply = [&](const Rules& r) {
    const Tolerance* first = nullptr;
    std::optional<double> rt, at;
    for (const Tolerance& t : r.tolerances) {
      if (!name_matches(t.pattern, label, op) || !glob_match(t.dtype, dt)) continue;
      if (first && t.pattern != first->pattern) break;
      first = first ? first : &t;
      if (!rt) rt = t.rtol;
      if (!at) at = t.atol;
    }
    if (!first) return false;
    if (rt) *rtol = *rt;
    if (at) *atol = *at;
    return true;
  };
  for (const auto& [glob, rules] : devices_)
    if (glob_match(glob, device) && apply(rules)) return;
  apply(top_);
}

}  // namespace tessera::cts
