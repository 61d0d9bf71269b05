// `tessera ops [--json] [NAME...]`
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "tessera/dispatcher.h"
#include "tessera/op_info.h"
#include "tessera/plugin_loader.h"

namespace {

const char* kOpsUsage =
    "usage: tessera ops [--json] [NAME...]\n"
    "Loads every backend plugin and lists the op contract (dispatcher/ops/ops.json, installed as\n"
    "share/tessera/ops.json, plus ops that plugins define): each op's schema, tags and doc line, and\n"
    "for each loaded device how a call resolves per dtype: kernel, composite or fallback.\n"
    "  NAME     only these ops (\"add.Tensor\", or \"add\" for its overloads)\n"
    "  --json   one JSON object: {\"ops\": [{\"name\", \"schema\", \"tags\", \"doc\", \"provider\",\n"
    "           \"shape_rule\", \"sizes_rule\" (ops of the contract),\n"
    "           \"devices\": {\"cpu\": {\"kernel\": [dtypes], \"composite\": [...], \"fallback\": [...]}}}]}\n";

struct Backend {
  tessera::DeviceType type;
  std::string name;
};

bool selected(const std::string& op, const std::vector<std::string>& names) {
  if (names.empty()) return true;
  for (const std::string& n : names)
    if (op == n || op.substr(0, op.find('.')) == n) return true;
  return false;
}

}  // namespace

int tessera_cli_ops(int argc, char** argv) {
  bool json_out = false;
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") {
      json_out = true;
    } else if (a == "--help" || a == "-h") {
      std::fputs(kOpsUsage, stdout);
      return kCliOk;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "tessera ops: unknown option '%s'\n\n%s", a.c_str(), kOpsUsage);
      return kCliUsage;
    } else {
      names.push_back(a);
    }
  }
  tessera::load_plugins_of_kind("backend");
  std::vector<Backend> backends;
  for (int t = 0; t < tessera::kNumDeviceTypes; ++t)
    if (tessera::backend_device_if_loaded(tessera::DeviceType(t)))
      backends.push_back({tessera::DeviceType(t), tessera::device_type_name(tessera::DeviceType(t))});

  tessera::Dispatcher& d = tessera::Dispatcher::instance();
  nlohmann::json ops = nlohmann::json::array();
  for (const std::string& name : d.op_names()) {
    if (!selected(name, names)) continue;
    tessera::OperatorEntry& op = d.op(name);
    nlohmann::json devices = nlohmann::json::object();
    for (const Backend& b : backends) {
      nlohmann::json by_way = nlohmann::json::object();
      for (int t = 0; t < tessera::kNumDTypes; ++t) {
        const tessera::Resolution way = d.resolution(op, b.type, tessera::DType(t));
        if (way != tessera::Resolution::None) by_way[tessera::resolution_name(way)].push_back(std::string(tessera::dtype_name(tessera::DType(t))));
      }
      devices[b.name] = by_way;
    }
    nlohmann::json entry = {{"name", name},
                            {"schema", d.schema(op).str()},
                            {"tags", d.tags(op)},
                            {"doc", d.doc(op)},
                            {"provider", d.provider(op)},
                            {"devices", devices}};
    // Ops of the contract (Note [OpInfo]): their shape rule and sizes rule; a plugin's own ops have neither.
    if (const tessera::op::OpInfo* info = tessera::op::find_op_info(name)) {
      entry["shape_rule"] = info->shape_rule;
      entry["sizes_rule"] = tessera::op::kSizesRuleNames[int(info->sizes)];
    }
    ops.push_back(std::move(entry));
  }
  if (!names.empty() && ops.empty()) {
    std::fprintf(stderr, "tessera ops: no operator matches; `tessera ops` lists them all\n");
    return kCliFailure;
  }
  if (json_out) {
    std::printf("%s\n", nlohmann::json{{"ops", ops}}.dump(2).c_str());
    return kCliOk;
  }
  for (const auto& o : ops) {
    std::string tags;
    for (const auto& t : o["tags"]) tags += (tags.empty() ? "" : ", ") + t.get<std::string>();
    std::printf("%s%s\n", o["schema"].get<std::string>().c_str(), tags.empty() ? "" : ("  [" + tags + "]").c_str());
    const std::string doc = o["doc"].get<std::string>();
    if (!doc.empty()) std::printf("    %s\n", doc.c_str());
    if (o["provider"] != "builtin")
      std::printf(o.contains("shape_rule") ? "    declared in the contract, implemented by plugin '%s'\n"
                                           : "    defined by plugin '%s'\n",
                  o["provider"].get<std::string>().c_str());
    for (const auto& [device, by_way] : o["devices"].items()) {
      std::string line;
      for (const char* way : {"kernel", "composite", "fallback"}) {
        if (!by_way.contains(way)) continue;
        std::string dtypes;
        for (const auto& t : by_way[way]) {
          if (!dtypes.empty()) dtypes += ' ';
          dtypes += t.get<std::string>();
        }
        if (!line.empty()) line += "; ";
        line += way;
        line += ": " + dtypes;
      }
      std::printf("    %s: %s\n", device.c_str(), line.empty() ? "not implemented" : line.c_str());
    }
  }
  return kCliOk;
}
