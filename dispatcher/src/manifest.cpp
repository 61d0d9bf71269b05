#include "manifest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "tessera/op_info.h"
#include "tessera/text_escape.h"

namespace tessera::loader {
namespace {

using json = nlohmann::json;

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a floating-point number";
    default: return "an unsupported value";
  }
}

// Thrown inside this file only, turned into the one-line reason by parse_manifest.
struct ManifestError {
  std::string what;
};

// A value from the manifest, quoted for a one-line message: control characters and bytes that are
// not UTF-8 escaped, long values cut.
std::string in_quotes(const std::string& s) {
  if (s.size() <= 80) return "'" + printable_text(s) + "'";
  return "'" + printable_text(std::string_view(s).substr(0, 80)) + "...'";
}

// A string that names a file: a NUL byte would silently cut it where the C library reads it.
void check_no_nul(const std::string& s, const std::string& field) {
  if (s.find('\0') != std::string::npos)
    throw ManifestError{"field " + in_quotes(field) + " holds a NUL byte (\\u0000); a file name cannot contain one"};
}

const json* find(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

const json& require(const json& obj, const std::string& where, const char* key, const char* expected) {
  const json* v = find(obj, key);
  if (!v) throw ManifestError{"missing field " + in_quotes(where + key) + " (" + expected + ")"};
  return *v;
}

std::string get_string(const json& v, const std::string& field, bool allow_empty = false) {
  if (!v.is_string())
    throw ManifestError{"field " + in_quotes(field) + " must be a string, got " + type_name(v)};
  std::string s = v.get<std::string>();
  if (!allow_empty && s.empty()) throw ManifestError{"field " + in_quotes(field) + " must not be empty"};
  return s;
}

int get_int(const json& v, const std::string& field, long lo, long hi) {
  if (!v.is_number_integer())
    throw ManifestError{"field " + in_quotes(field) + " must be an integer, got " + type_name(v)};
  long x = v.is_number_unsigned() ? long(std::min<uint64_t>(v.get<uint64_t>(), uint64_t(hi) + 1)) : v.get<long>();
  if (x < lo || x > hi)
    throw ManifestError{"field " + in_quotes(field) + " is " + std::to_string(x) + ", expected " + std::to_string(lo) +
                        ".." + std::to_string(hi)};
  return int(x);
}

std::vector<std::string> get_string_array(const json& v, const std::string& field) {
  if (!v.is_array())
    throw ManifestError{"field " + in_quotes(field) + " must be an array of strings, got " + type_name(v)};
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      throw ManifestError{"field " + in_quotes(field + "[" + std::to_string(i) + "]") + " must be a string, got " +
                          type_name(v[i])};
    out.push_back(v[i].get<std::string>());
    check_no_nul(out.back(), field + "[" + std::to_string(i) + "]");
  }
  return out;
}

bool valid_plugin_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.';
    if (!ok) return false;
  }
  return true;
}

void parse_device(const json& dev, Manifest* m) {
  if (!dev.is_object()) throw ManifestError{"field 'device' must be an object, got " + std::string(type_name(dev))};
  const json* type = find(dev, "type");
  const json* slot = find(dev, "slot");
  const json* name = find(dev, "name");
  if (type && slot) throw ManifestError{"field 'device' has both 'type' and 'slot'; give one"};
  if (type) {
    std::string t = get_string(*type, "device.type");
    if (t == "cpu") m->device_type = DeviceType::CPU;
    else if (t == "cuda") m->device_type = DeviceType::CUDA;
    else if (t == "opencl") m->device_type = DeviceType::OpenCL;
    else
      throw ManifestError{"unknown device.type " + in_quotes(t) +
                          " (expected cpu, cuda or opencl; a new device asks for a slot: "
                          "{\"slot\": \"privateuse1\", \"name\": \"npu\"})"};
    m->device_name = t;
    if (name && get_string(*name, "device.name") != t)
      throw ManifestError{"device.name " + in_quotes(name->get<std::string>()) + " differs from device.type " + in_quotes(t) +
                          "; only a privateuse slot can be named"};
  } else if (slot) {
    std::string s = get_string(*slot, "device.slot");
    if (s == "privateuse1") m->privateuse_slot = 1;
    else if (s == "privateuse2") m->privateuse_slot = 2;
    else if (s == "privateuse3") m->privateuse_slot = 3;
    else throw ManifestError{"unknown device.slot " + in_quotes(s) + " (expected privateuse1, privateuse2 or privateuse3)"};
    m->device_type = DeviceType(int(DeviceType::PrivateUse1) + m->privateuse_slot - 1);
    if (!name) throw ManifestError{"missing field 'device.name' (string): the name the slot is given, e.g. \"npu\""};
    m->device_name = get_string(*name, "device.name");
  } else {
    throw ManifestError{"missing field 'device.type' or 'device.slot' (string)"};
  }
  m->has_device = true;
}

// Parses `text`, refusing a key that appears twice in one object (nlohmann keeps the last one; a
// manifest that says two things must not mean one of them silently).
json parse_json_unique_keys(const std::string& text) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: keys.emplace_back(); break;
      case json::parse_event_t::object_end: keys.pop_back(); break;
      case json::parse_event_t::key:
        if (!keys.back().insert(parsed.get<std::string>()).second)
          throw ManifestError{"key " + in_quotes(parsed.get<std::string>()) +
                              " appears twice in one object; give each key once"};
        break;
      default: break;
    }
    return true;
  };
  return json::parse(text, cb);
}

}  // namespace

bool read_manifest_file(const std::string& path, std::string* text, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    *error = path + ": cannot read the manifest (" + std::strerror(errno) + ")";
    return false;
  }
  struct stat st{};
  bool ok = true;
  if (::fstat(fd, &st) != 0) {
    *error = path + ": cannot read the manifest (" + std::strerror(errno) + ")";
    ok = false;
  } else if (!S_ISREG(st.st_mode)) {
    *error = path + ": the manifest is not a regular file; point TESSERA_PLUGIN_PATH at manifest files or folders";
    ok = false;
  } else if (uint64_t(st.st_size) > kMaxManifestBytes) {
    *error = path + ": the manifest is " + std::to_string(st.st_size) + " bytes, more than the " +
             std::to_string(kMaxManifestBytes) + " allowed; a manifest is a small JSON object (docs/plugins.md)";
    ok = false;
  }
  std::string out;
  if (ok) {
    out.resize(kMaxManifestBytes + 1);
    size_t got = 0;
    while (got < out.size()) {
      ssize_t n = ::read(fd, out.data() + got, out.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        *error = path + ": cannot read the manifest (" + std::strerror(errno) + ")";
        ok = false;
      }
      if (n <= 0) break;
      got += size_t(n);
    }
    if (ok && got > kMaxManifestBytes) {
      *error = path + ": the manifest grew beyond " + std::to_string(kMaxManifestBytes) +
               " bytes while it was read; a manifest is a small JSON object (docs/plugins.md)";
      ok = false;
    }
    out.resize(got);
  }
  ::close(fd);
  if (ok) *text = std::move(out);
  return ok;
}

void byte_to_line_column(const std::string& text, size_t byte, size_t* line, size_t* column) {
  size_t pos = byte == 0 ? 0 : std::min(byte - 1, text.size());  // index of the offending byte
  size_t l = 1, last_nl = std::string::npos;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++l;
      last_nl = i;
    }
  }
  *line = l;
  *column = last_nl == std::string::npos ? pos + 1 : pos - last_nl;
}

bool parse_manifest(const std::string& path, const std::string& text, Manifest* out, std::string* error,
                    std::string* name_hint) {
  if (text.size() > kMaxManifestBytes) {
    *error = path + ": the manifest is " + std::to_string(text.size()) + " bytes, more than the " +
             std::to_string(kMaxManifestBytes) + " allowed; a manifest is a small JSON object (docs/plugins.md)";
    return false;
  }
  json doc;
  try {
    doc = parse_json_unique_keys(text);
  } catch (const ManifestError& e) {
    *error = path + ": " + e.what;
    return false;
  } catch (const json::parse_error& e) {
    size_t line = 0, column = 0;
    byte_to_line_column(text, e.byte, &line, &column);
    // nlohmann's text is "[json.exception.parse_error.101] parse error at line L, column C: <what>".
    std::string what = e.what();
    size_t at = what.find("parse error");
    if (at != std::string::npos) {
      size_t colon = what.find(": ", at);
      if (colon != std::string::npos) what = what.substr(colon + 2);
    }
    // The message quotes the bytes last read, which may be control characters or not UTF-8.
    *error = path + ":" + std::to_string(line) + ":" + std::to_string(column) + ": invalid JSON: " +
             printable_text(what);
    return false;
  } catch (const json::exception& e) {
    // Not a syntax error but a value the parser cannot represent (a number overflowing a double,
    // found by manifest_fuzz): still a one-line reason naming the file.
    std::string what = e.what();
    size_t bracket = what.find("] ");
    if (bracket != std::string::npos) what = what.substr(bracket + 2);
    *error = path + ": invalid JSON: " + printable_text(what);
    return false;
  }
  Manifest m;
  m.path = path;
  try {
    if (!doc.is_object()) throw ManifestError{"the manifest must be a JSON object, got " + std::string(type_name(doc))};
    if (name_hint) {
      const json* n = find(doc, "name");
      if (n && n->is_string() && valid_plugin_name(n->get<std::string>())) *name_hint = n->get<std::string>();
    }
    m.manifest_version = get_int(require(doc, "", "manifest_version", "integer"), "manifest_version", LONG_MIN / 2,
                                 LONG_MAX / 2);
    if (m.manifest_version != kManifestVersion)
      throw ManifestError{"unknown manifest_version " + std::to_string(m.manifest_version) + " (this runtime reads " +
                          std::to_string(kManifestVersion) + "; upgrade Tessera or use a manifest of version 1)"};
    m.name = get_string(require(doc, "", "name", "string"), "name");
    if (!valid_plugin_name(m.name))
      throw ManifestError{"field 'name' is " + in_quotes(m.name) + ", expected letters, digits, '_', '-' or '.' (at most 64)"};
    const std::string kind = get_string(require(doc, "", "kind", "string"), "kind");
    const std::optional<PluginKind> known_kind = plugin_kind_from_word(kind);
    if (!known_kind)
      throw ManifestError{"unknown kind " + in_quotes(kind) + " (expected " + plugin_kind_words() + ")"};
    m.kind = *known_kind;
    std::string lib = get_string(require(doc, "", "library", "string"), "library");
    check_no_nul(lib, "library");
    std::filesystem::path manifest_dir = std::filesystem::path(path).parent_path();
    m.library = (manifest_dir / lib).lexically_normal().string();  // an absolute `lib` stays as it is
    const json& abi = require(doc, "", "abi", "object with integer 'major' and 'minor'");
    if (!abi.is_object())
      throw ManifestError{"field 'abi' must be an object with integer 'major' and 'minor', got " +
                          std::string(type_name(abi))};
    m.abi_major = get_int(require(abi, "abi.", "major", "integer"), "abi.major", 0, 1 << 20);
    if (const json* minor = find(abi, "minor")) m.abi_minor = get_int(*minor, "abi.minor", 0, 1 << 20);
    if (const json* oldest = find(abi, "min_host_minor")) {
      m.min_host_minor = get_int(*oldest, "abi.min_host_minor", 0, 1 << 20);
      if (m.min_host_minor > m.abi_minor)
        throw ManifestError{"abi.min_host_minor (" + std::to_string(m.min_host_minor) + ") is newer than abi.minor (" +
                            std::to_string(m.abi_minor) + "), the ABI the library was built against; it can be at most " +
                            std::to_string(m.abi_minor)};
    }
    m.version = get_string(require(doc, "", "version", "string"), "version");
    if (const json* d = find(doc, "description")) m.description = get_string(*d, "description", true);
    if (const json* p = find(doc, "priority")) m.priority = get_int(*p, "priority", -1000000, 1000000);
    if (const json* dev = find(doc, "device")) parse_device(*dev, &m);
    // A kernels plugin has no device of its own: 'device' names the existing device type its
    // kernels are for (Note [Kernels plugins] in plugin_loader.cpp).
    if (const char* required = plugin_kind_traits(m.kind).device_required; required && !m.has_device)
      throw ManifestError{std::string("missing field 'device' (object) required for kind '") + plugin_kind_name(m.kind) +
                          "': " + required};
    if (const json* req = find(doc, "requires")) {
      if (!req->is_object())
        throw ManifestError{"field 'requires' must be an object, got " + std::string(type_name(*req))};
      for (auto it = req->begin(); it != req->end(); ++it) {
        if (it.key() == "cpu_features") m.cpu_features = get_string_array(it.value(), "requires.cpu_features");
        else if (it.key() == "libraries") m.libraries = get_string_array(it.value(), "requires.libraries");
        else throw ManifestError{"unknown requirement " + in_quotes("requires." + it.key()) +
                              " (expected cpu_features or libraries)"};
      }
    }
    // Note [Autocast policies from the manifest]
    // "autocast": {"float32": ["gelu"], "lower_precision": [...], "promote": [...], "none": [...]}
    // sets the autocast policy (Note [Autocast policy] in tessera/amp.h) of each listed op on the
    // plugin's device type, over the default table, as set_autocast_policy would from the plugin's
    // code: libtessera_autograd applies the entries of the backend that provides a device type the
    // first time that type's policies are used, so an application's set_autocast_policy calls still
    // win. Each op must be in the contract (a name or an overload); an op listed twice is an error.
    if (const json* ac = find(doc, "autocast")) {
      if (!ac->is_object())
        throw ManifestError{"field 'autocast' must be an object of op lists by policy, got " + std::string(type_name(*ac))};
      if (!m.has_device)
        throw ManifestError{"field 'autocast' needs a 'device': the policies are for the plugin's device type"};
      std::set<std::string> seen;
      for (auto it = ac->begin(); it != ac->end(); ++it) {
        const std::string& word = it.key();
        if (word != "lower_precision" && word != "float32" && word != "promote" && word != "none")
          throw ManifestError{"unknown autocast policy " + in_quotes("autocast." + word) +
                              " (expected lower_precision, float32, promote or none)"};
        for (const std::string& op : get_string_array(it.value(), "autocast." + word)) {
          bool in_contract = false;
          for (const op::OpInfo& info : op::kOpInfos)
            in_contract = in_contract || op == info.name || op == info.base;
          if (!in_contract)
            throw ManifestError{"autocast." + word + " names " + in_quotes(op) +
                                ", which is not an op of the contract (`tessera ops` lists them)"};
          if (!seen.insert(op).second)
            throw ManifestError{"autocast lists " + in_quotes(op) + " twice; give each op one policy"};
          m.autocast.emplace_back(op, word);
        }
      }
    }
    static const std::set<std::string> known = {"manifest_version", "name", "kind", "library", "abi", "version",
                                                "description", "priority", "device", "requires", "autocast", "$schema"};
    for (auto it = doc.begin(); it != doc.end(); ++it)
      if (!known.count(it.key())) m.unknown_fields.push_back(it.key());
  } catch (const ManifestError& e) {
    *error = path + ": " + e.what;
    return false;
  }
  *out = std::move(m);
  return true;
}

}  // namespace tessera::loader
