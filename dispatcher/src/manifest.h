// Plugin manifests: parsing and strict validation (private to the loader). See docs/plugins.md for
// every field and sdk/schema/manifest.schema.json for the JSON Schema.
#pragma once
#include <string>
#include <vector>

#include "tessera/device.h"
#include "tessera/plugin_kind.h"

namespace tessera::loader {

constexpr int kManifestVersion = 1;
// Manifests are a few hundred bytes; a larger file is refused before it is read (a 100 MB one took
// 2 GB of memory as a JSON document).
constexpr size_t kMaxManifestBytes = size_t(1) << 20;

struct Manifest {
  std::string path;         // absolute path of the manifest file
  int manifest_version = 0;
  std::string name;
  PluginKind kind = PluginKind::Backend;  // Note [Plugin kinds]
  std::string library;      // absolute: resolved against the manifest's folder
  int abi_major = 0;
  int abi_minor = 0;
  // abi.min_host_minor: the oldest runtime minor the plugin works with (Note [ABI range]); -1 when
  // the manifest does not say, and then it is abi_minor.
  int min_host_minor = -1;
  std::string version;
  std::string description;
  int priority = 0;
  bool has_device = false;
  DeviceType device_type = DeviceType::CPU;
  int privateuse_slot = 0;  // 1..3 when the manifest asks for a privateuse slot, else 0
  std::string device_name;  // "cpu", or the name the slot is given ("npu")
  std::vector<std::string> cpu_features;
  std::vector<std::string> libraries;
  // "autocast": the device's autocast policies, (op, policy word) (Note [Autocast
  // policies from the manifest] in manifest.cpp).
  std::vector<std::pair<std::string, std::string>> autocast;
  std::vector<std::string> unknown_fields;  // accepted, reported under TESSERA_LOG=plugins
};

// Reads the manifest file at `path` into `text`. Refuses (false, `error` set to one line naming the
// file) what is not a regular file, a file larger than kMaxManifestBytes (checked before reading and
// again while reading, in case it grows) and read errors.
bool read_manifest_file(const std::string& path, std::string* text, std::string* error);

// Parses `text` (the contents of the manifest at absolute `path`). On failure returns false and sets
// `error` to one line: "<path>:<line>:<column>: invalid JSON: <what>" for a syntax error, else
// "<path>: <what>" naming the field, the value or type got and the one expected. Also refused: text
// over kMaxManifestBytes, a key given twice in one object, a NUL byte in a path. Values quoted in the
// error are escaped (Note [Untrusted text] in tessera/text_escape.h). `name_hint`
// receives the plugin name as soon as it is known (empty when the JSON does not give one).
bool parse_manifest(const std::string& path, const std::string& text, Manifest* out, std::string* error,
                    std::string* name_hint = nullptr);

// 1-based line and column of byte offset `byte` (nlohmann's parse_error::byte: the count of bytes
// read, the last of which is the offending one).
void byte_to_line_column(const std::string& text, size_t byte, size_t* line, size_t* column);

}  // namespace tessera::loader
