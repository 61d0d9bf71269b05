// Internal to core/src: one per-thread flag shared by the two plugin-loader hooks
// (unknown device name, backend loader). While either hook runs on a thread, neither is called again
// on that thread: the loader holds its registry lock inside a hook, and a nested call would
// deadlock on it or recurse.
#pragma once

namespace tessera::detail {

bool& in_plugin_hook();

class PluginHookScope {
 public:
  PluginHookScope() { in_plugin_hook() = true; }
  ~PluginHookScope() { in_plugin_hook() = false; }
  PluginHookScope(const PluginHookScope&) = delete;
  PluginHookScope& operator=(const PluginHookScope&) = delete;
};

}  // namespace tessera::detail
