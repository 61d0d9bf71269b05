// The conformance kit runner: see Note [Conformance outcomes] in tessera/cts.h.
#include "tessera/cts.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <tessera/dispatcher.h>
#include <tessera/log.h>
#include <tessera/plugin_loader.h>
#include <tessera/tessera.h>

#include "cases.h"
#include "compare.h"
#include "tessera/cts_config.h"
#include "tessera/text_escape.h"

#ifndef TESSERA_CTS_XFAIL_DIR
#define TESSERA_CTS_XFAIL_DIR ""
#endif

namespace tessera::cts {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::Pass: return "pass";
    case Outcome::Fallback: return "fallback";
    case Outcome::Unsupported: return "unsupported";
    case Outcome::Fail: return "fail";
    case Outcome::XFail: return "xfail";
    case Outcome::XPass: return "xpass";
    case Outcome::Skip: return "skip";
  }
  return "?";
}

int Report::count(Outcome o) const {
  return int(std::count_if(cases.begin(), cases.end(), [o](const CaseResult& c) { return c.outcome == o; }));
}

std::vector<std::string> case_labels() {
  std::vector<std::string> v;
  for (const Case& c : cases()) v.push_back(c.label);
  return v;
}

std::vector<std::string> case_ops() {
  std::vector<std::string> v;
  for (const Case& c : cases()) v.push_back(c.op);
  return v;
}

// ---------------------------------------------------------------- globs and expected failures

bool glob_match(const std::string& p, const std::string& t) {
  size_t pi = 0, ti = 0, star = std::string::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == t[ti])) {
      ++pi, ++ti;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++, mark = ti;
    } else if (star != std::string::npos) {
      pi = star + 1, ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

std::vector<XFailEntry> parse_xfail(const std::string& text) {
  std::vector<XFailEntry> out;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    std::istringstream ls(line);
    std::string op, dt, extra;
    if (!(ls >> op)) continue;
    if (!(ls >> dt)) dt.assign(1, '*');
    TESSERA_CHECK(!(ls >> extra), "expected-failure list line ", lineno, ": got '", line,
                  "', expected '<op glob> [<dtype glob>]  # reason'");
    out.push_back({op, dt});
  }
  return out;
}

namespace {

bool any_glob(const std::string& globs, const std::string& a, const std::string& b) {
  std::istringstream in(globs);
  std::string g;
  while (std::getline(in, g, ',')) {
    if (g.empty()) continue;
    if (glob_match(g, a) || (!b.empty() && glob_match(g, b))) return true;
  }
  return false;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Finds the expected-failure list for `device_name` (see Options::xfail_file).
std::string find_xfail_file(const Options& o, const std::string& device_name) {
  namespace fs = std::filesystem;
  if (!o.xfail_file.empty()) {
    TESSERA_CHECK(fs::exists(o.xfail_file), "expected-failure list '", o.xfail_file, "' does not exist; pass an existing file");
    return o.xfail_file;
  }
  if (const char* env = secure_env("TESSERA_CTS_XFAIL"); env && *env && fs::exists(env)) return env;
  for (const PluginInfo& p : plugins()) {
    if (p.has_device && p.device_name == device_name && !p.manifest.empty()) {
      fs::path next_to = fs::path(p.manifest).parent_path() / (device_name + ".xfail.txt");
      if (fs::exists(next_to)) return next_to.string();
    }
  }
  if (*TESSERA_CTS_XFAIL_DIR) {
    fs::path in_tree = fs::path(TESSERA_CTS_XFAIL_DIR) / (device_name + ".txt");
    if (fs::exists(in_tree)) return in_tree.lexically_normal().string();
  }
  return "";
}

}  // namespace

Tolerance default_tolerance(DType t, double scale) {
  switch (t) {
    case kFloat64: return {1e-9 * scale, 1e-9 * scale};
    case kFloat32: return {1e-4 * scale, 1e-5 * scale};
    case kFloat16: return {2e-3 * scale, 1e-3 * scale};
    case kBFloat16: return {1.6e-2 * scale, 1e-2 * scale};
    default: return {0, 0};  // integral and bool: exact
  }
}

namespace {

// Same values, non-contiguous layout, on the same device (exercises strided kernels and copy_).
Tensor non_contiguous(const Tensor& x) {
  if (x.dim() == 0 || x.numel() < 2) return x;
  Tensor y;
  if (x.dim() >= 2) {
    std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
    std::swap(sizes[sizes.size() - 1], sizes[sizes.size() - 2]);
    y = empty(sizes, tessera::dtype(x.dtype()).device(x.device())).transpose(-1, -2);
  } else {
    y = empty({x.size(0) * 2}, tessera::dtype(x.dtype()).device(x.device())).slice(0, 0, std::nullopt, 2);
  }
  y.copy_(x);
  return y;
}

OperatorEntry* find_operator(const std::string& base, std::string* full_name) {
  Dispatcher& d = Dispatcher::instance();
  if (OperatorEntry* e = d.find_op(base)) {
    *full_name = d.schema(*e).full_name();
    return e;
  }
  for (const std::string& n : d.op_names()) {
    if (n.rfind(base + ".", 0) == 0) {
      *full_name = n;
      return d.find_op(n);
    }
  }
  return nullptr;
}

}  // namespace

Comparison compare(const Tensor& got_any, const Tensor& want, const Tolerance& tol, const char* reference) {
  Comparison c;
  Tensor got = got_any.to(Device(kCPU));
  if (got.dtype() != want.dtype()) {
    c.ok = false;
    c.message = "dtype " + std::string(dtype_name(got.dtype())) + ", expected " + std::string(dtype_name(want.dtype()));
    return c;
  }
  if (!std::equal(got.sizes().begin(), got.sizes().end(), want.sizes().begin(), want.sizes().end())) {
    std::ostringstream os;
    os << "shape [";
    for (int64_t s : got.sizes()) os << s << ",";
    os << "], expected [";
    for (int64_t s : want.sizes()) os << s << ",";
    os << "]";
    c.ok = false;
    c.message = os.str();
    return c;
  }
  Tensor g = got.to(kFloat64).contiguous(), w = want.to(kFloat64).contiguous();
  const double* gp = g.data_ptr<double>();
  const double* wp = w.data_ptr<double>();
  int64_t worst = -1;
  for (int64_t i = 0; i < g.numel(); ++i) {
    const double a = gp[i], b = wp[i];
    if (std::isnan(a) && std::isnan(b)) continue;
    if (std::isinf(b) && a == b) continue;
    const double err = std::isnan(a) || std::isnan(b) ? INFINITY : std::fabs(a - b);
    const double rel = err == 0 ? 0 : err / (tol.atol + tol.rtol * std::fabs(b));
    c.max_abs = std::max(c.max_abs, err);
    if (rel > c.max_rel) c.max_rel = rel, worst = i;
  }
  if (c.max_rel > 1.0) {
    std::ostringstream os;
    os << "max error " << c.max_abs << " at element " << worst << " (got " << gp[worst] << ", " << reference << " " << wp[worst]
       << "; rtol " << tol.rtol << ", atol " << tol.atol << ")";
    c.ok = false;
    c.message = os.str();
  }
  return c;
}

bool is_unsupported_error(const Error& e) {
  if (e.code() == ErrorCode::Unimplemented) return true;
  const std::string m = e.what();
  return m.find("no kernel") != std::string::npos || m.find("not implemented") != std::string::npos ||
         m.find("not supported") != std::string::npos;
}

namespace {

uint64_t mix(uint64_t seed, const std::string& label, DType t) {
  uint64_t h = seed ^ 0x9E3779B97F4A7C15ull;
  for (char ch : label) h = (h ^ uint8_t(ch)) * 0x100000001B3ull;
  return (h ^ uint64_t(int(t))) * 0xff51afd7ed558ccdull;
}

}  // namespace

Report run(const Options& o) {
  Report report;
  const Device device(o.device);
  const std::string type_name = device_type_name(device.type());
  report.device = device.str();
  TESSERA_CHECK(device_count(device.type()) > 0, "tessera check: no '", type_name,
                "' device is available (device_count = 0); see `tessera devices` for the reason");
  // Resolution answers for loaded backends only (plugins load lazily): load the device's backend
  // and the CPU reference before asking.
  std::string why;
  TESSERA_CHECK(ensure_backend_loaded(DeviceType::CPU, &why), "tessera check: the CPU backend (the reference) did not load: ", why,
                "; run `tessera plugins` to see why");
  TESSERA_CHECK(ensure_backend_loaded(device.type(), &why), "tessera check: the backend of '", type_name, "' did not load: ", why,
                "; run `tessera plugins` to see why");
  report.seed = o.seed ? o.seed : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  report.xfail_file = find_xfail_file(o, type_name);
  std::vector<XFailEntry> xfail;
  if (!report.xfail_file.empty()) xfail = parse_xfail(read_file(report.xfail_file));
  if (o.config) report.config_file = o.config->source();

  for (const Case& c : cases()) {
    std::string op_name;
    OperatorEntry* entry = find_operator(c.op, &op_name);
    const std::string& op = op_name.empty() ? c.op : op_name;
    if (!any_glob(o.ops, c.label, op)) continue;
    if (o.config && !o.config->allows(type_name, c.label, op)) continue;
    for (DType t : c.dtypes) {
      if (!o.dtypes.empty() && std::find(o.dtypes.begin(), o.dtypes.end(), t) == o.dtypes.end()) continue;
      CaseResult r;
      r.op = c.label;
      r.op_name = op_name;
      r.dtype = t;
      if (const Config::Skip* skip = o.config ? o.config->skip(type_name, c.label, op, t) : nullptr) {
        r.outcome = Outcome::Skip;
        r.resolution = "none";
        r.message = skip->reason;
        report.cases.push_back(std::move(r));
        continue;
      }
      const auto start = std::chrono::steady_clock::now();
      r.resolution = entry ? resolution_name(Dispatcher::instance().resolution(*entry, device.type(), t)) : "unknown-op";
      Gen gen(mix(report.seed, c.label, t));
      bool done = false;
      // The reference: the same inputs on the CPU backend.
      std::vector<Tensor> inputs;
      Tensor want;
      try {
        inputs = c.make(gen, t);
        want = c.run(inputs, t);
      } catch (const Error& e) {
        r.outcome = Outcome::Unsupported;
        r.message = std::string("cpu reference: ") + e.what();
        done = true;
      }
      // Layouts: 0 as made (row-major), 1 transposed / sliced, 2 channels-last (4-D inputs only).
      const bool has_4d = std::any_of(inputs.begin(), inputs.end(), [](const Tensor& x) { return x.dim() == 4; });
      const int layouts = !o.strided ? 1 : has_4d ? 3 : 2;
      static const char* const kLayoutNote[] = {"", "strided inputs: ", "channels-last inputs: "};
      for (int layout = 0; !done && layout < layouts; ++layout) {
        try {
          std::vector<Tensor> dev_inputs;
          for (const Tensor& x : inputs) {
            Tensor d = x.to(device);
            if (layout == 1) d = non_contiguous(d);
            if (layout == 2 && d.dim() == 4) d = contiguous(d, MemoryFormat::ChannelsLast);
            dev_inputs.push_back(d);
          }
          const uint64_t fallbacks_before = cpu_fallback_calls_on_this_thread();
          Tensor got = c.run(dev_inputs, t);
          // What ran, not what was registered: a kernel that answered UNIMPLEMENTED fell back.
          if (cpu_fallback_calls_on_this_thread() != fallbacks_before) r.resolution = "fallback";
          if (!got.is(type_name)) {
            r.outcome = Outcome::Fail;
            r.message = "result is on " + got.device().str() + ", expected " + type_name;
            done = true;
            break;
          }
          // The default follows the result's dtype (atan of int32 is float32); an override is keyed
          // by the case's dtype, as the report shows it.
          Tolerance tol = default_tolerance(want.dtype(), c.tol_scale);
          if (o.config) o.config->tolerance(type_name, c.label, op, t, &tol.rtol, &tol.atol);
          Comparison cmp = compare(got, want, tol);
          r.max_abs_error = std::max(r.max_abs_error, cmp.max_abs);
          r.max_rel_error = std::max(r.max_rel_error, cmp.max_rel);
          if (!cmp.ok) {
            r.outcome = Outcome::Fail;
            r.message = kLayoutNote[layout] + cmp.message;
            done = true;
          }
        } catch (const Error& e) {
          r.outcome = is_unsupported_error(e) && r.resolution != "kernel" ? Outcome::Unsupported : Outcome::Fail;
          r.message = kLayoutNote[layout] + std::string(e.what());
          done = true;
        } catch (const std::exception& e) {
          r.outcome = Outcome::Fail;
          r.message = std::string("unexpected exception: ") + e.what();
          done = true;
        }
      }
      if (!done) r.outcome = r.resolution == "fallback" ? Outcome::Fallback : Outcome::Pass;
      const bool expected = std::any_of(xfail.begin(), xfail.end(), [&](const XFailEntry& x) {
        return (glob_match(x.op_glob, r.op) || glob_match(x.op_glob, r.op_name)) &&
               glob_match(x.dtype_glob, std::string(dtype_name(t)));
      });
      if (expected) {
        if (r.outcome == Outcome::Fail) r.outcome = Outcome::XFail;
        else if (r.outcome == Outcome::Pass || r.outcome == Outcome::Fallback) r.outcome = Outcome::XPass;
      }
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      report.cases.push_back(std::move(r));
    }
  }
  return report;
}

// ---------------------------------------------------------------- reports

namespace {
const char* cell(Outcome o) {
  switch (o) {
    case Outcome::Pass: return "ok";
    case Outcome::Fallback: return "fb";
    case Outcome::Unsupported: return "-";
    case Outcome::Fail: return "FAIL";
    case Outcome::XFail: return "xf";
    case Outcome::XPass: return "XP";
    case Outcome::Skip: return "sk";
  }
  return "?";
}

std::string summary_line(const Report& r) {
  std::ostringstream os;
  if (r.suite == "ops") {
    os << r.cases.size() << " cases on " << r.device << ": " << r.count(Outcome::Pass) << " pass, "
       << r.count(Outcome::Fallback) << " fallback, " << r.count(Outcome::Unsupported) << " unsupported, "
       << r.count(Outcome::XFail) << " xfail, " << r.count(Outcome::XPass) << " xpass, ";
  } else {  // the graph suites have no fallback or expected-failure list
    os << r.cases.size() << " programs through " << r.suite << " plugin '" << r.plugin << "' on " << r.device << ": "
       << r.count(Outcome::Pass) << " pass, " << r.count(Outcome::Unsupported) << " unsupported, ";
  }
  os << r.count(Outcome::Skip) << " skip, " << r.count(Outcome::Fail) << " FAIL (seed " << r.seed << ")";
  return os.str();
}
}  // namespace

// The graph suites: one line per program.
std::string format_programs(const Report& r) {
  size_t width = 7;
  for (const CaseResult& c : r.cases) width = std::max(width, c.op.size());
  std::ostringstream os;
  for (const CaseResult& c : r.cases) {
    os << c.op << std::string(width - c.op.size(), ' ') << "  " << cell(c.outcome);
    if (!c.details.empty()) os << "  (" << printable_text(c.details) << ")";
    if (c.outcome != Outcome::Pass) os << "  " << printable_text(c.message);
    os << "\n";
  }
  os << summary_line(r) << "\n";
  return os.str();
}

std::string format_table(const Report& r) {
  if (r.suite != "ops") return format_programs(r);
  const DType all[] = {kBool, kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};
  const char* short_names[] = {"bool", "u8", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64"};
  std::vector<std::string> rows;
  std::map<std::string, std::map<int, Outcome>> grid;
  size_t width = 2;
  for (const CaseResult& c : r.cases) {
    if (!grid.count(c.op)) rows.push_back(c.op);
    grid[c.op][int(c.dtype)] = c.outcome;
    width = std::max(width, c.op.size());
  }
  std::ostringstream os;
  os << std::string(width, ' ');
  for (const char* n : short_names) os << " " << std::string(5 - std::min<size_t>(5, std::strlen(n)), ' ') << n;
  os << "\n";
  for (const std::string& op : rows) {
    os << op << std::string(width - op.size(), ' ');
    for (DType t : all) {
      auto it = grid[op].find(int(t));
      std::string s = it == grid[op].end() ? "." : cell(it->second);
      os << " " << std::string(5 - std::min<size_t>(5, s.size()), ' ') << s;
    }
    os << "\n";
  }
  os << "legend: ok = own kernel (or a composite of ops), fb = ran on the CPU fallback (no kernel, or it answered "
        "UNIMPLEMENTED), - = unsupported, xf = expected failure, "
        "XP = listed as failing but passed, sk = skipped by the configuration, FAIL = unexpected failure, "
        ". = not applicable\n";
  for (const CaseResult& c : r.cases) {
    if (c.outcome == Outcome::Fail || c.outcome == Outcome::XFail || c.outcome == Outcome::Skip) {
      os << (c.outcome == Outcome::Fail ? "FAIL " : c.outcome == Outcome::XFail ? "xfail " : "skip ") << c.op << " " << dtype_name(c.dtype) << ": " << c.message
         << "\n";
    }
  }
  if (!r.xfail_file.empty()) os << "expected failures from " << r.xfail_file << "\n";
  if (!r.config_file.empty()) os << "configuration from " << r.config_file << "\n";
  os << summary_line(r) << "\n";
  return os.str();
}

std::string format_json(const Report& r) {
  std::ostringstream os;
  // The keys of the first version come first, in their order (readers look for {"device").
  os << "{\"device\": \"" << json_escape(r.device) << "\", \"seed\": " << r.seed << ", \"xfail_file\": \""
     << json_escape(r.xfail_file) << "\", \"suite\": \"" << r.suite << "\", \"plugin\": \"" << json_escape(r.plugin)
     << "\", \"config_file\": \"" << json_escape(r.config_file) << "\", \"summary\": {";
  const Outcome all[] = {Outcome::Pass,  Outcome::Fallback, Outcome::Unsupported, Outcome::Fail,
                         Outcome::XFail, Outcome::XPass,    Outcome::Skip};
  for (size_t i = 0; i < std::size(all); ++i) os << (i ? ", " : "") << "\"" << outcome_name(all[i]) << "\": " << r.count(all[i]);
  os << ", \"unexpected_failures\": " << r.unexpected_failures() << "}, \"cases\": [";
  for (size_t i = 0; i < r.cases.size(); ++i) {
    const CaseResult& c = r.cases[i];
    os << (i ? ",\n  " : "\n  ") << "{\"op\": \"" << json_escape(c.op) << "\", \"operator\": \"" << json_escape(c.op_name)
       << "\", \"dtype\": \"" << dtype_name(c.dtype) << "\", \"outcome\": \"" << outcome_name(c.outcome)
       << "\", \"resolution\": \"" << json_escape(c.resolution) << "\", \"max_abs_error\": "
       << (std::isfinite(c.max_abs_error) ? c.max_abs_error : 1e308) << ", \"max_rel_error\": "
       << (std::isfinite(c.max_rel_error) ? c.max_rel_error : 1e308) << ", \"seconds\": " << c.seconds
       << ", \"message\": \"" << json_escape(c.message) << "\", \"details\": \"" << json_escape(c.details) << "\"}";
  }
  os << "\n]}\n";
  return os.str();
}

}  // namespace tessera::cts
