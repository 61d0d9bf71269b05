// The conformance report as JUnit XML, the format Jenkins (junit step) and GitLab
// (artifacts:reports:junit) read: <testsuites> with one <testsuite> holding one <testcase> per case.
//   pass, fallback, xpass   a plain <testcase> (fallback and xpass say so in <system-out>)
//   fail                    <failure message type="fail">
//   skip                    <skipped message="skipped by <config>: <reason>">
//   unsupported, xfail      <skipped message="unsupported: ..."> / "expected failure: ..."
// The counts on <testsuites> and <testsuite> are those of the testcases below them; errors is 0
// (a case that throws is a failure).
#include <cstdio>
#include <ctime>
#include <sstream>

#include "tessera/cts.h"
#include "tessera/text_escape.h"

namespace tessera::cts {

namespace {

// Text safe in an XML 1.0 attribute or element: no control character, well-formed UTF-8
// (printable_text writes the rest as \xNN), and the five markup characters as entities.
std::string xml(std::string_view s) {
  std::string out;
  for (char ch : printable_text(s)) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", s < 0 ? 0.0 : s);
  return buf;
}

}  // namespace

std::string format_junit(const Report& r) {
  int failures = 0, skipped = 0;
  double total = 0;
  for (const CaseResult& c : r.cases) {
    failures += c.outcome == Outcome::Fail;
    skipped += c.outcome == Outcome::Skip || c.outcome == Outcome::Unsupported || c.outcome == Outcome::XFail;
    total += c.seconds;
  }
  const std::string suite = r.suite == "ops" ? "tessera check --device " + r.device
                                             : "tessera check --" + r.suite + " " + r.plugin + " (" + r.device + ")";
  char stamp[32] = "";
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  if (gmtime_r(&now, &tm)) std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  const std::string counts = "tests=\"" + std::to_string(r.cases.size()) + "\" failures=\"" + std::to_string(failures) +
                             "\" errors=\"0\" skipped=\"" + std::to_string(skipped) + "\" time=\"" + seconds(total) + "\"";
  std::ostringstream os;
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  os << "<testsuites name=\"tessera check\" " << counts << ">\n";
  os << "  <testsuite name=\"" << xml(suite) << "\" " << counts << " timestamp=\"" << stamp << "\">\n";
  os << "    <properties>\n";
  auto property = [&](const char* name, const std::string& value) {
    if (!value.empty()) os << "      <property name=\"" << name << "\" value=\"" << xml(value) << "\"/>\n";
  };
  property("suite", r.suite);
  property("plugin", r.plugin);
  property("device", r.device);
  property("seed", std::to_string(r.seed));
  property("xfail_file", r.xfail_file);
  property("config_file", r.config_file);
  os << "    </properties>\n";
  const std::string prefix = r.suite == "ops" ? "cts." + r.device : r.suite + "." + r.plugin;
  for (const CaseResult& c : r.cases) {
    const std::string name = r.suite == "ops" ? c.op + " " + std::string(dtype_name(c.dtype)) : c.op;
    os << "    <testcase classname=\"" << xml(prefix + "." + c.op) << "\" name=\"" << xml(name) << "\" time=\""
       << seconds(c.seconds) << "\"";
    std::string body, out;
    switch (c.outcome) {
      case Outcome::Pass: break;
      case Outcome::Fallback: out = "ran through the CPU fallback (resolution: fallback)"; break;
      case Outcome::XPass: out = "listed as an expected failure in " + r.xfail_file + " but passed: take it off the list"; break;
      case Outcome::Fail:
        body = "      <failure message=\"" + xml(c.message) + "\" type=\"fail\">" + xml(c.message) + "</failure>\n";
        break;
      case Outcome::Skip:
        body = "      <skipped message=\"" + xml("skipped by " + r.config_file + ": " + c.message) + "\"/>\n";
        break;
      case Outcome::Unsupported: body = "      <skipped message=\"" + xml("unsupported: " + c.message) + "\"/>\n"; break;
      case Outcome::XFail: body = "      <skipped message=\"" + xml("expected failure: " + c.message) + "\"/>\n"; break;
    }
    if (!c.details.empty()) out += (out.empty() ? "" : "\n") + c.details;
    if (!out.empty()) body += "      <system-out>" + xml(out) + "</system-out>\n";
    if (body.empty()) os << "/>\n";
    else os << ">\n" << body << "    </testcase>\n";
  }
  os << "  </testsuite>\n</testsuites>\n";
  return os.str();
}

}  // namespace tessera::cts
