// Plugin kinds as a type: the manifest's "kind" word becomes a PluginKind when the manifest is
// parsed, and everything the runtime does differently per kind is read from ONE traits table.
//
// Note [Plugin kinds]
// A kind is a row of kPluginKinds (plugin_kind.cpp): the word a manifest spells, what the manifest
// must say about a device, how the loader treats the library (does it register a device? is one
// loaded per device type?), the extension the runtime looks up in it, and a line for people
// (`tessera plugins`, docs/plugins.md). Nothing else compares kind words: the manifest parser
// refuses a word that is no row's (naming the word and the valid ones), the loader branches on
// the traits, and extension_of_kind() (plugin_loader.h) is the one lookup of a kind's extension.
// Adding a kind = an enumerator here, a row in the table, and whatever new code the kind's
// extension is for (docs/plugins.md, "Adding a plugin kind").
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tessera/export.h"

namespace tessera {

enum class PluginKind : uint8_t { Backend, Compiler, Quantizer, Kernels };

struct PluginKindTraits {
  PluginKind kind;
  const char* word;  // the manifest's "kind"
  // (optional) what the manifest must write under "device" for this kind, as the fix-it of the
  // error when it is missing; nullptr: "device" is optional.
  const char* device_required;
  // Loader hooks: the plugin provides a device (its header's device interface is checked and
  // registered with an allocator); `tessera devices` and first use load one per device type.
  bool provides_device;
  // (optional) the TESSERA_EXT_* name extension_of_kind() looks up for this kind; nullptr: none.
  const char* extension;
  const char* description;  // one line for people
};

// The table, in the order kinds are listed in messages.
TESSERA_API const std::array<PluginKindTraits, 4>& plugin_kinds();
TESSERA_API const PluginKindTraits& plugin_kind_traits(PluginKind kind);
// The manifest word of `kind` ("backend").
TESSERA_API const char* plugin_kind_name(PluginKind kind);
// The kind a manifest word names, or nullopt (exact, lower case).
TESSERA_API std::optional<PluginKind> plugin_kind_from_word(std::string_view word);
// "backend, compiler, quantizer or kernels": the valid words, for messages.
TESSERA_API std::string plugin_kind_words();

}  // namespace tessera
