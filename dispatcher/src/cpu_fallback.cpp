// The CPU fallback of the call path (Note [Fallback report] in dispatcher.h): an op without a kernel
// on a device runs on the CPU with its inputs copied there and its outputs back, counted per op,
// device type and dtype, and warned about once per op and device type.
#include "cpu_fallback.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "op_registry.h"
#include "tessera/env.h"
#include "tessera/log.h"

namespace tessera {

namespace {
thread_local uint64_t t_cpu_fallback_calls = 0;

struct FallbackCounts {
  std::mutex mutex;
  std::map<std::tuple<std::string, int, int>, int64_t> calls;  // (op, device type, dtype)
};
FallbackCounts& fallback_counts() {
  static auto* c = new FallbackCounts;  // never destroyed: fallbacks may run during static destruction
  return *c;
}

void warn_fallback_once(const OperatorEntry& op, DeviceType type, bool answered_unimplemented) {
  static std::mutex mu;
  static std::set<std::pair<std::string, int>> warned;
  {
    std::lock_guard lock(mu);
    if (!warned.insert({op.name, int(type)}).second) return;
  }
  log_message(
      LogLevel::Warning, "fallback",
      "'" + op.name + (answered_unimplemented ? "' answered UNIMPLEMENTED on device '" : "' has no kernel on device '") +
          device_type_name(type) + "'; running it on the CPU (inputs copied to the CPU and outputs back). Register a kernel for "
          "speed (tessera::fallback_report() counts these calls), or set TESSERA_FALLBACK=error to make this an error");
}

}  // namespace

namespace detail {

int cpu_fallback(OperatorEntry& op, const CallFrame& f, Device dev, DType dtype, Tensor* outs,
                 bool answered_unimplemented) {
  ++t_cpu_fallback_calls;
  {
    FallbackCounts& c = fallback_counts();
    std::lock_guard lock(c.mutex);
    ++c.calls[{op.name, int(dev.type()), int(dtype)}];
  }
  warn_fallback_once(op, dev.type(), answered_unimplemented);
  detail::SmallVector<Tensor, 6> cpu_inputs;
  detail::SmallVector<const TensorImpl*, 8> impls;
  for (int i = 0; i < f.num_tensors; ++i) {
    const TensorImpl* t = f.tensors[i];
    if (!t) {
      impls.push_back(nullptr);
      continue;
    }
    Tensor src(IntrusivePtr<TensorImpl>(const_cast<TensorImpl*>(t)));
    Tensor c = src.to(Device(DeviceType::CPU));
    impls.push_back(c.impl());
    cpu_inputs.push_back(std::move(c));
  }
  Device cpu(DeviceType::CPU);
  CallFrame cf{impls.data(), f.num_tensors, f.attrs, f.num_attrs, &cpu};
  Tensor cpu_outs[kMaxOutputs];
  int n = call_unboxed(op, cf, cpu_outs);
  for (int i = 0; i < n; ++i) {
    int alias = i < int(op.return_alias.size()) ? op.return_alias[size_t(i)] : -1;
    if (alias >= 0 && f.tensors[alias]) {
      Tensor orig(IntrusivePtr<TensorImpl>(const_cast<TensorImpl*>(f.tensors[alias])));
      orig.copy_(cpu_outs[i]);
      outs[i] = orig;
    } else {
      outs[i] = cpu_outs[i].to(dev);
    }
  }
  return n;
}


}  // namespace detail

bool cpu_fallback_enabled() {
  if (const char* v = secure_env("TESSERA_FALLBACK")) {
    const std::string_view s(v);
    if (s == "allow" || s == "warn") return true;
    if (s == "error") return false;
    detail::throw_error(ErrorCode::InvalidArgument,
                        "TESSERA_FALLBACK='" + std::string(s) + "' is not a fallback policy; use allow or error");
  }
  const char* v = secure_env("TESSERA_CPU_FALLBACK");
  return v ? parse_env_bool("TESSERA_CPU_FALLBACK", v) : true;  // Note [Environment variables]
}

std::vector<FallbackCount> fallback_report() {
  std::vector<FallbackCount> r;
  {
    FallbackCounts& c = fallback_counts();
    std::lock_guard lock(c.mutex);
    for (const auto& [key, calls] : c.calls)
      r.push_back({std::get<0>(key), device_type_name(DeviceType(std::get<1>(key))), DType(std::get<2>(key)), calls});
  }
  std::stable_sort(r.begin(), r.end(), [](const FallbackCount& a, const FallbackCount& b) { return a.calls > b.calls; });
  return r;
}

std::string fallback_report_string() {
  std::string s;
  for (const FallbackCount& c : fallback_report())
    s += c.op + " on " + c.device + " (" + std::string(dtype_name(c.dtype)) + "): " + std::to_string(c.calls) +
         (c.calls == 1 ? " call\n" : " calls\n");
  return s.empty() ? "no CPU fallback ran\n" : s;
}

void clear_fallback_report() {
  FallbackCounts& c = fallback_counts();
  std::lock_guard lock(c.mutex);
  c.calls.clear();
}

uint64_t cpu_fallback_calls_on_this_thread() { return t_cpu_fallback_calls; }

}  // namespace tessera
