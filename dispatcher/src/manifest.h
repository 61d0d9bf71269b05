// Plugin manifests: parsing and strict validation (private to the loader). See docs/plugins.md for
// every field and sdk/schema/manifest.schema.json for the JSON Schema.
#pragma once
#include <string>
#include <vector>

#include "tessera/device.h"

namespace tessera::loader {

constexpr int kManifestVersion = 1;

struct Manifest {
  std::string path;         // absolute path of the manifest file
  int manifest_version = 0;
  std::string name;
  std::string kind;         // backend, compiler, quantizer, sparsity
  std::string library;      // absolute: resolved against the manifest's folder
  int abi_major = 0;
  int abi_minor = 0;
  std::string version;
  std::string description;
  int priority = 0;
  bool has_device = false;
  DeviceType device_type = DeviceType::CPU;
  int privateuse_slot = 0;  // 1..3 when the manifest asks for a privateuse slot, else 0
  std::string device_name;  // "cpu", or the name the slot is given ("npu")
  std::vector<std::string> cpu_features;
  std::vector<std::string> libraries;
  std::vector<std::string> unknown_fields;  // accepted, reported under TESSERA_LOG=plugins
};

// Parses `text` (the contents of the manifest at absolute `path`). On failure returns false and sets
// `error` to one line: "<path>:<line>:<column>: invalid JSON: <what>" for a syntax error, else
// "<path>: <what>" naming the field, the value or type got and the one expected. `name_hint`
// receives the plugin name as soon as it is known (empty when the JSON does not give one).
bool parse_manifest(const std::string& path, const std::string& text, Manifest* out, std::string* error,
                    std::string* name_hint = nullptr);

// 1-based line and column of byte offset `byte` (nlohmann's parse_error::byte: the count of bytes
// read, the last of which is the offending one).
void byte_to_line_column(const std::string& text, size_t byte, size_t* line, size_t* column);

}  // namespace tessera::loader
