// Device names: one table for parsing and printing. See Note [Device names] and
// Note [PrivateUse renaming] in device.h.
#include "tessera/device.h"

#include <array>
#include <atomic>
#include <charconv>
#include <limits>
#include <mutex>
#include <shared_mutex>

#include "hook_guard.h"
#include "tessera/error.h"

namespace tessera {

namespace {

constexpr int kFirstPrivateUse = int(DeviceType::PrivateUse1);
constexpr int kNumPrivateUse = 3;
constexpr std::array<std::string_view, kNumDeviceTypes> kReservedNames = {
    "cpu", "cuda", "opencl", "meta", "privateuse1", "privateuse2", "privateuse3",
};

// The current names of the privateuse slots (empty: not renamed). Read on every parse and print,
// written a handful of times per process: a shared_mutex keeps readers concurrent.
struct NameTable {
  std::shared_mutex mutex;
  std::array<std::string, kNumPrivateUse> names;
  std::array<bool, kNumPrivateUse> claimed{};  // named by a manifest's claim, not a rename
};
NameTable& name_table() {
  static NameTable* table = new NameTable();  // leaked: usable during static destruction
  return *table;
}

std::atomic<UnknownDeviceNameHook> g_unknown_name_hook{nullptr};
std::atomic<DeviceNameReasonHook> g_name_reason_hook{nullptr};

bool is_identifier(std::string_view s) {
  if (s.empty()) return false;
  if (!((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_')) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

// Type by name under the current table, or -1.
int lookup_type(std::string_view name) {
  for (int i = 0; i < kNumDeviceTypes; ++i)
    if (kReservedNames[size_t(i)] == name) return i;
  NameTable& t = name_table();
  std::shared_lock lock(t.mutex);
  for (int s = 0; s < kNumPrivateUse; ++s)
    if (!t.names[size_t(s)].empty() && t.names[size_t(s)] == name) return kFirstPrivateUse + s;
  return -1;
}

std::string known_names_joined() {
  std::string out;
  for (const auto& n : known_device_names()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Looks `name` up; on a miss calls the unknown-name hook once (it may rename slots) and retries.
int lookup_type_or_hook(std::string_view name) {
  int t = lookup_type(name);
  if (t >= 0) return t;
  UnknownDeviceNameHook hook = g_unknown_name_hook.load(std::memory_order_acquire);
  if (hook && !detail::in_plugin_hook()) {
    {
      detail::PluginHookScope scope;
      hook();
    }
    t = lookup_type(name);
  }
  return t;
}

// "; <why>" from the reason hook, or "" when it has nothing to say.
std::string unknown_name_reason(std::string_view name) {
  DeviceNameReasonHook hook = g_name_reason_hook.load(std::memory_order_acquire);
  if (!hook || detail::in_plugin_hook()) return {};
  detail::PluginHookScope scope;
  std::string why = hook(name);
  return why.empty() ? why : "; " + why;
}

void check_slot(int slot) {
  TESSERA_CHECK(slot >= 1 && slot <= kNumPrivateUse, "privateuse slot ", slot,
                " does not exist; expected 1, 2 or 3");
}

}  // namespace

namespace detail {
bool& in_plugin_hook() {
  thread_local bool flag = false;
  return flag;
}
}  // namespace detail

std::string device_type_name(DeviceType t) {
  const int i = int(t);
  TESSERA_CHECK(i >= 0 && i < kNumDeviceTypes, "device type ", i, " is out of range; expected 0..",
                kNumDeviceTypes - 1);
  if (i >= kFirstPrivateUse) {
    NameTable& table = name_table();
    std::shared_lock lock(table.mutex);
    const std::string& n = table.names[size_t(i - kFirstPrivateUse)];
    if (!n.empty()) return n;
  }
  return std::string(kReservedNames[size_t(i)]);
}

DeviceType device_type_from_name(std::string_view name) {
  const int t = lookup_type_or_hook(name);
  if (t < 0) {
    const std::string why = unknown_name_reason(name);
    TESSERA_CHECK(false, "unknown device type '", name, "'", why, "; known device types: ", known_names_joined(),
                  "; a third-party device gets its name from its plugin's manifest (set TESSERA_PLUGIN_PATH) "
                  "or from rename_privateuse1_backend()");
  }
  return DeviceType(t);
}

std::vector<std::string> known_device_names() {
  std::vector<std::string> out;
  out.reserve(kNumDeviceTypes);
  for (int i = 0; i < kNumDeviceTypes; ++i) out.push_back(device_type_name(DeviceType(i)));
  return out;
}

Device::Device(std::string_view name) : type_(DeviceType::CPU), index_(-1) {
  TESSERA_CHECK(!name.empty(), "device string is empty; expected a device such as \"cpu\" or \"cuda:0\"");
  const size_t colon = name.find(':');
  const std::string_view type_part = name.substr(0, colon);
  int index = -1;
  if (colon != std::string_view::npos) {
    const std::string_view idx = name.substr(colon + 1);
    const bool digits_only = !idx.empty() && idx.find_first_not_of("0123456789") == std::string_view::npos;
    TESSERA_CHECK(digits_only && !(idx.size() > 1 && idx[0] == '0'), "invalid device string '", name,
                  "': the index '", idx, "' is not a non-negative integer; expected \"type\" or \"type:N\" "
                  "such as \"cuda:0\"");
    auto [ptr, ec] = std::from_chars(idx.data(), idx.data() + idx.size(), index);
    TESSERA_CHECK(ec == std::errc() && ptr == idx.data() + idx.size() &&
                      index <= std::numeric_limits<int16_t>::max(),
                  "invalid device string '", name, "': index ", idx, " is too large; expected at most ",
                  std::numeric_limits<int16_t>::max());
  }
  TESSERA_CHECK(!type_part.empty(), "invalid device string '", name,
                "': the device type is missing; expected \"type\" or \"type:N\" such as \"cuda:0\"");
  const int t = lookup_type_or_hook(type_part);
  if (t < 0) {
    const std::string why = unknown_name_reason(type_part);
    TESSERA_CHECK(false, "invalid device string '", name, "': unknown device type '", type_part, "'", why,
                  "; known device types: ", known_names_joined(),
                  "; a third-party device gets its name from its plugin's manifest (set TESSERA_PLUGIN_PATH) "
                  "or from rename_privateuse1_backend()");
  }
  type_ = DeviceType(t);
  index_ = int16_t(index);
}

std::string Device::str() const {
  std::string s = device_type_name(type_);
  if (index_ >= 0) {
    s += ':';
    s += std::to_string(index_);
  }
  return s;
}

namespace {

// Names `slot` under the table's lock. An explicit rename (claim == false) replaces a claim, see
// Note [PrivateUse renaming]; renaming a claimed slot to its claimed name makes it final.
void name_slot(int slot, std::string_view name, bool claim) {
  check_slot(slot);
  const std::string slot_name = "privateuse" + std::to_string(slot);
  TESSERA_CHECK(is_identifier(name), "cannot rename ", slot_name, " to '", name,
                "': a device name must be a lower-case identifier ([a-z_][a-z0-9_]*), such as \"npu\"");
  for (std::string_view reserved : kReservedNames)
    TESSERA_CHECK(name != reserved, "cannot rename ", slot_name, " to '", name, "': '", name,
                  "' is a built-in device name; choose another name such as \"", name, "2\"");
  NameTable& table = name_table();
  std::unique_lock lock(table.mutex);
  const size_t i = size_t(slot - 1);
  std::string& current = table.names[i];
  if (current == name) {
    if (!claim) table.claimed[i] = false;
    return;  // same name again: no-op
  }
  const bool replaceable = !claim && table.claimed[i];
  TESSERA_CHECK(current.empty() || replaceable, "cannot rename ", slot_name, " to '", name,
                "': it is already named '", current, "' and names never change; use '", current,
                "', or another privateuse slot");
  for (size_t s = 0; s < size_t(kNumPrivateUse); ++s)
    TESSERA_CHECK(table.names[s] != name || (!claim && table.claimed[s]), "cannot rename ", slot_name, " to '",
                  name, "': the name is already held by privateuse", s + 1, "; choose another name");
  for (size_t s = 0; s < size_t(kNumPrivateUse); ++s)
    if (table.names[s] == name) {
      table.names[s].clear();
      table.claimed[s] = false;
    }
  current = std::string(name);
  table.claimed[i] = claim;
}

}  // namespace

void rename_privateuse_backend(int slot, std::string_view name) { name_slot(slot, name, false); }

void claim_privateuse_backend(int slot, std::string_view name) { name_slot(slot, name, true); }

void rename_privateuse1_backend(std::string_view name) { rename_privateuse_backend(1, name); }

std::string privateuse_backend_name(int slot) {
  check_slot(slot);
  return device_type_name(DeviceType(kFirstPrivateUse + slot - 1));
}

std::string privateuse1_backend_name() { return privateuse_backend_name(1); }

void set_unknown_device_name_hook(UnknownDeviceNameHook hook) {
  g_unknown_name_hook.store(hook, std::memory_order_release);
}

void set_device_name_reason_hook(DeviceNameReasonHook hook) {
  g_name_reason_hook.store(hook, std::memory_order_release);
}

void reset_privateuse_names_for_testing() {
  NameTable& table = name_table();
  std::unique_lock lock(table.mutex);
  for (auto& n : table.names) n.clear();
  table.claimed.fill(false);
}

}  // namespace tessera
