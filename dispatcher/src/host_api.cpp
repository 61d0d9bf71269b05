#include "host_api.h"

#include <algorithm>
#include <new>

#include "profiler.h"
#include "profiler_spans.h"
#include "tessera/edit_distance.h"
#include "tessera/generator.h"
#include "tessera/log.h"
#include "tessera/profiler.h"
#include "tessera/schema.h"

namespace tessera {

// The C enums of the plugin ABI carry the core's values (plugin_abi.h says so; plugins cast freely).
#define TESSERA_ABI_SAME_VALUE(cpp, c) static_assert(int(cpp) == int(c), #cpp " != " #c)
TESSERA_ABI_SAME_VALUE(DType::Bool, TESSERA_DTYPE_BOOL);
TESSERA_ABI_SAME_VALUE(DType::UInt8, TESSERA_DTYPE_UINT8);
TESSERA_ABI_SAME_VALUE(DType::Int8, TESSERA_DTYPE_INT8);
TESSERA_ABI_SAME_VALUE(DType::Int16, TESSERA_DTYPE_INT16);
TESSERA_ABI_SAME_VALUE(DType::Int32, TESSERA_DTYPE_INT32);
TESSERA_ABI_SAME_VALUE(DType::Int64, TESSERA_DTYPE_INT64);
TESSERA_ABI_SAME_VALUE(DType::Float16, TESSERA_DTYPE_FLOAT16);
TESSERA_ABI_SAME_VALUE(DType::BFloat16, TESSERA_DTYPE_BFLOAT16);
TESSERA_ABI_SAME_VALUE(DType::Float32, TESSERA_DTYPE_FLOAT32);
TESSERA_ABI_SAME_VALUE(DType::Float64, TESSERA_DTYPE_FLOAT64);
TESSERA_ABI_SAME_VALUE(kNumPlainDTypes, TESSERA_DTYPE_COUNT_);
TESSERA_ABI_SAME_VALUE(DType::QInt8, TESSERA_DTYPE_QINT8);
TESSERA_ABI_SAME_VALUE(DType::QUInt8, TESSERA_DTYPE_QUINT8);
TESSERA_ABI_SAME_VALUE(DType::QInt32, TESSERA_DTYPE_QINT32);
TESSERA_ABI_SAME_VALUE(DeviceType::CPU, TESSERA_DEVICE_CPU);
TESSERA_ABI_SAME_VALUE(DeviceType::CUDA, TESSERA_DEVICE_CUDA);
TESSERA_ABI_SAME_VALUE(DeviceType::OpenCL, TESSERA_DEVICE_OPENCL);
TESSERA_ABI_SAME_VALUE(DeviceType::Meta, TESSERA_DEVICE_META);
TESSERA_ABI_SAME_VALUE(DeviceType::PrivateUse1, TESSERA_DEVICE_PRIVATEUSE1);
TESSERA_ABI_SAME_VALUE(DeviceType::PrivateUse2, TESSERA_DEVICE_PRIVATEUSE2);
TESSERA_ABI_SAME_VALUE(DeviceType::PrivateUse3, TESSERA_DEVICE_PRIVATEUSE3);
TESSERA_ABI_SAME_VALUE(kNumDeviceTypes, TESSERA_DEVICE_PRIVATEUSE3 + 1);
#undef TESSERA_ABI_SAME_VALUE

tessera_status_t status_make(tessera_status_code_t code, std::string_view message) {
  return new (std::nothrow) tessera_status_s{code, std::string(message)};
}

void status_free(tessera_status_t status) { delete status; }

std::string status_message_of(tessera_status_t status) { return status ? status->message : std::string(); }

ErrorCode error_code_of(tessera_status_code_t code) {
  switch (code) {
    case TESSERA_STATUS_OUT_OF_MEMORY: return ErrorCode::OutOfMemory;
    case TESSERA_STATUS_UNIMPLEMENTED: return ErrorCode::Unimplemented;
    case TESSERA_STATUS_UNAVAILABLE: return ErrorCode::Unavailable;
    case TESSERA_STATUS_ABI_MISMATCH: return ErrorCode::AbiMismatch;
    case TESSERA_STATUS_INTERNAL: return ErrorCode::Internal;
    default: return ErrorCode::InvalidArgument;
  }
}

namespace loader {
namespace {

// ---- the C entry points of the host table (no exception may cross them)

tessera_status_t c_status_make(tessera_status_code_t code, const char* message) {
  return status_make(code, message ? message : "");
}
void c_status_free(tessera_status_t status) { status_free(status); }
tessera_status_code_t c_status_code(tessera_status_t status) { return status ? status->code : TESSERA_STATUS_OK; }
const char* c_status_message(tessera_status_t status) { return status ? status->message.c_str() : ""; }

void c_log(tessera_log_level_t level, const char* component, const char* message) {
  try {
    LogLevel l = level <= TESSERA_LOG_DEBUG     ? LogLevel::Debug
                 : level == TESSERA_LOG_INFO    ? LogLevel::Info
                 : level == TESSERA_LOG_WARNING ? LogLevel::Warning
                                                : LogLevel::Error;
    log_message(l, component ? component : "plugins", message ? message : "");
  } catch (...) {
  }
}

const char* c_getenv(const char* name) { return name ? secure_env(name) : nullptr; }

std::string op_name_of_schema(const char* schema) {
  std::string s = schema;
  size_t paren = s.find('(');
  std::string name = s.substr(0, paren);
  while (!name.empty() && name.back() == ' ') name.pop_back();
  while (!name.empty() && name.front() == ' ') name.erase(0, 1);
  return name;
}

tessera_status_t invalid(const std::string& message) { return status_make(TESSERA_STATUS_INVALID_ARGUMENT, message); }

// Note [Graph ABI] in plugin_abi.h: the compiler library fills this table when it loads
// (set_graph_api); every plugin's host table points at it from the start.
tessera_graph_api_t g_graph_api{};

}  // namespace

HostContext::HostContext(std::string plugin_name, DeviceType backend)
    : plugin_name_(std::move(plugin_name)), backend_(backend) {
  api_.struct_size = sizeof(tessera_host_api_t);
  api_.abi_major = TESSERA_ABI_MAJOR;
  api_.abi_minor = TESSERA_ABI_MINOR;
  api_.host_ctx = this;
  api_.graph = &g_graph_api;
  api_.status_make = &c_status_make;
  api_.status_free = &c_status_free;
  api_.status_code = &c_status_code;
  api_.status_message = &c_status_message;
  api_.log = &c_log;
  api_.getenv = &c_getenv;
  api_.op_define = &HostContext::op_define;
  api_.kernel_register = &HostContext::kernel_register;
  api_.fallback_register = &HostContext::fallback_register;
  api_.op_forbid_fallback = &HostContext::op_forbid_fallback;
  // Note [Plugin spans]
  api_.profiler_enabled = [] { return int32_t(profiler_on() ? 1 : 0); };
  api_.profiler_clock_ns = &detail::profiler_clock_ns;
  api_.profiler_correlation_id = &tessera::profiler_correlation_id;
  api_.profiler_record_span = &HostContext::profiler_record_span;
  api_.generator_reserve = &HostContext::generator_reserve;
}

tessera_status_t HostContext::profiler_record_span(void* ctx, const tessera_profiler_span_t* span) {
  if (!ctx)
    return status_make(TESSERA_STATUS_INVALID_ARGUMENT,
                       "profiler_record_span: host_ctx is NULL; pass the host table's host_ctx");
  return detail::record_plugin_span(self(ctx)->plugin_name_, self(ctx)->backend_, span);
}

bool HostContext::op_known(const std::string& name) const { return !canonical_op(name).empty(); }

std::string HostContext::canonical_op(const std::string& name) const {
  for (const auto& p : pending_ops_)
    if (p == name) return p;
  if (OperatorEntry* e = Dispatcher::instance().find_op(name)) return Dispatcher::instance().schema(*e).full_name();
  return {};
}


// Up to three defined names nearest to `name`: overloads of the same operator first, then by edit
// distance.
std::string HostContext::closest_ops(const std::string& name) const {
  std::vector<std::string> names = Dispatcher::instance().op_names();
  names.insert(names.end(), pending_ops_.begin(), pending_ops_.end());
  const std::string_view base = std::string_view(name).substr(0, name.find('.'));
  auto rank = [&](const std::string& n) {
    const bool same_base = std::string_view(n).substr(0, n.find('.')) == base;
    return std::make_pair(same_base ? 0 : 1, edit_distance(name, n));
  };
  std::sort(names.begin(), names.end(), [&](const std::string& a, const std::string& b) {
    return std::make_pair(rank(a), a) < std::make_pair(rank(b), b);
  });
  std::string out;
  for (size_t i = 0; i < names.size() && i < 3; ++i) out += (i ? ", " : "") + names[i];
  return out;
}

// Note [Dangling registrations]
// A kernel for an op nobody defined, or a second kernel for the same op and functionality without
// TESSERA_KERNEL_FLAG_REPLACE, is refused at the call (the plugin gets an error status) and, when it
// happened during init, also fails the plugin's load at commit: a plugin that catches the error and
// carries on would otherwise run with a silently missing kernel (PyTorch's findDanglingImpls).
// The message names the plugin, the bad name and the closest defined names; the loader rolls back
// the plugin's other registrations as for any failed init.
tessera_status_t HostContext::record(Registration r) {
  std::lock_guard lock(mutex_);
  auto refuse = [&](const std::string& message) {
    if (!committed_) refused_.push_back(message);
    return invalid(message);
  };
  if (r.kind == Registration::Kind::Kernel || r.kind == Registration::Kind::ForbidFallback) {
    const std::string canonical = canonical_op(r.op);
    const char* call = r.kind == Registration::Kind::Kernel ? "kernel_register" : "op_forbid_fallback";
    if (canonical.empty())
      return refuse("plugin '" + plugin_name_ + "': " + call + "(\"" + r.op + "\"): unknown operator '" + r.op +
                    "'; closest defined: " + closest_ops(r.op) +
                    " (`tessera ops` lists the contract; op_define defines a new op)");
    if (r.kind == Registration::Kind::Kernel) {
      const std::string key = canonical + "/" + std::to_string(r.functionality);
      const bool again = std::find(kernel_keys_.begin(), kernel_keys_.end(), key) != kernel_keys_.end();
      if (again && !(r.kernel.flags & TESSERA_KERNEL_FLAG_REPLACE))
        return refuse("plugin '" + plugin_name_ + "': kernel_register(\"" + r.op + "\"): a kernel for '" +
                      canonical + "' is already registered by this plugin; register each op once, or pass " +
                      "TESSERA_KERNEL_FLAG_REPLACE to replace it");
      if (!again) kernel_keys_.push_back(key);
    }
  }
  if (!committed_) {
    if (r.kind == Registration::Kind::DefineOp) pending_ops_.push_back(op_name_of_schema(r.op.c_str()));
    pending_.push_back(std::move(r));
    return nullptr;
  }
  try {
    apply(r);
  } catch (const std::exception& e) {
    return invalid(e.what());
  }
  return nullptr;
}

void HostContext::apply(const Registration& r) {
  Dispatcher& d = Dispatcher::instance();
  switch (r.kind) {
    case Registration::Kind::DefineOp:
      d.define_op(r.schema ? *r.schema : parse_schema(r.op), r.meta_like, plugin_name_);
      log_message(LogLevel::Debug, "plugins", "plugin '" + plugin_name_ + "' defined operator " + r.op);
      break;
    case Registration::Kind::Kernel:
      handles_.push_back(d.register_kernel(d.op(r.op), backend_, Functionality(r.functionality), r.kernel));
      ++num_kernels_;
      break;
    case Registration::Kind::Fallback:
      handles_.push_back(d.register_fallback(backend_, Functionality(r.functionality), r.kernel));
      break;
    case Registration::Kind::ForbidFallback:
      d.forbid_fallback(d.op(r.op), backend_);
      break;
  }
}

void HostContext::commit() {
  std::lock_guard lock(mutex_);
  try {
    if (!refused_.empty()) {
      std::string message = refused_.front();
      if (refused_.size() > 1) message += " (and " + std::to_string(refused_.size() - 1) + " more: ";
      for (size_t i = 1; i < refused_.size(); ++i) {
        const std::string& m = refused_[i];
        const size_t q = m.find('"'), q2 = q == std::string::npos ? q : m.find('"', q + 1);
        message += (i > 1 ? ", " : "") + (q2 == std::string::npos ? m : m.substr(q + 1, q2 - q - 1));
      }
      if (refused_.size() > 1) message += ")";
      detail::throw_error(ErrorCode::InvalidArgument, message);
    }
    for (const auto& r : pending_) apply(r);
  } catch (...) {
    for (auto it = handles_.rbegin(); it != handles_.rend(); ++it) Dispatcher::instance().deregister(*it);
    handles_.clear();
    num_kernels_ = 0;
    pending_.clear();
    pending_ops_.clear();
    kernel_keys_.clear();
    refused_.clear();
    throw;
  }
  pending_.clear();
  pending_ops_.clear();
  committed_ = true;
}

void HostContext::discard() {
  std::lock_guard lock(mutex_);
  pending_.clear();
  pending_ops_.clear();
  kernel_keys_.clear();
  refused_.clear();
}

void HostContext::deregister_all() {
  std::lock_guard lock(mutex_);
  for (auto it = handles_.rbegin(); it != handles_.rend(); ++it) {
    try {
      Dispatcher::instance().deregister(*it);
    } catch (const std::exception& e) {
      log_message(LogLevel::Warning, "plugins", "plugin '" + plugin_name_ + "': deregistration failed: " + e.what());
    }
  }
  handles_.clear();
  kernel_keys_.clear();
  num_kernels_ = 0;
  committed_ = false;
}

size_t HostContext::num_kernels_registered() const {
  std::lock_guard lock(mutex_);
  return num_kernels_;
}

tessera_status_t HostContext::op_define(void* ctx, const char* schema, const char* meta_like) {
  if (!ctx || !schema) return invalid("op_define: host_ctx and schema must not be NULL");
  HostContext* h = self(ctx);
  try {
    // Everything the commit would refuse is refused here, at the call (the schema is parsed once).
    auto parsed = std::make_shared<const FunctionSchema>(parse_schema(schema));
    const std::string like = meta_like ? meta_like : "";
    bool like_pending = false;
    {
      std::lock_guard lock(h->mutex_);
      for (const Registration& p : h->pending_) {
        if (p.kind != Registration::Kind::DefineOp || !p.schema) continue;
        TESSERA_CHECK(p.schema->full_name() != parsed->full_name() || p.schema->str() == parsed->str(),
                      "operator '", parsed->full_name(), "' is already being defined by this plugin as \"",
                      p.schema->str(), "\"; use another overload name");
        if (!like.empty() && p.schema->full_name() == like) like_pending = true;
      }
    }
    Dispatcher::instance().check_define_op(*parsed, like, like_pending);
    Registration r{Registration::Kind::DefineOp, schema, like, 0, {}, std::move(parsed)};
    return h->record(std::move(r));
  } catch (const std::exception& e) {
    return invalid("plugin '" + h->plugin_name_ + "': op_define(\"" + schema + "\"): " + e.what());
  }
}

tessera_status_t HostContext::kernel_register(void* ctx, const char* op_name, int32_t functionality,
                                              uint64_t dtype_mask, tessera_kernel_fn_t fn, void* user_data,
                                              uint32_t flags) {
  if (!ctx || !op_name || !fn) return invalid("kernel_register: host_ctx, op_name and fn must not be NULL");
  HostContext* h = self(ctx);
  // 3 is the Autograd functionality: a backward kernel for the plugin's device (Note [Autograd
  // dispatch] in autograd_dispatch.h). TODO(#31): name it TESSERA_FUNCTIONALITY_AUTOGRAD in plugin_abi.h.
  static_assert(int(Functionality::Autograd) == 3, "the ABI value of the Autograd functionality");
  if (functionality < TESSERA_FUNCTIONALITY_DENSE || functionality > int32_t(Functionality::Autograd))
    return invalid("plugin '" + h->plugin_name_ + "': kernel_register(\"" + op_name + "\"): functionality " +
                   std::to_string(functionality) + " is not one of DENSE (0), QUANTIZED (1), SPARSE (2), AUTOGRAD (3)");
  try {
    Registration r{Registration::Kind::Kernel, op_name, "", functionality,
                   KernelEntry{fn, user_data, dtype_mask, flags, h->plugin_name_}};
    return h->record(std::move(r));
  } catch (const std::exception& e) {
    return invalid(e.what());
  }
}

tessera_status_t HostContext::fallback_register(void* ctx, int32_t functionality, tessera_kernel_fn_t fn,
                                                void* user_data) {
  if (!ctx || !fn) return invalid("fallback_register: host_ctx and fn must not be NULL");
  HostContext* h = self(ctx);
  if (functionality < TESSERA_FUNCTIONALITY_DENSE || functionality > TESSERA_FUNCTIONALITY_SPARSE)
    return invalid("plugin '" + h->plugin_name_ + "': fallback_register: functionality " +
                   std::to_string(functionality) + " is not one of DENSE (0), QUANTIZED (1), SPARSE (2)");
  try {
    Registration r{Registration::Kind::Fallback, "", "", functionality,
                   KernelEntry{fn, user_data, TESSERA_DTYPE_MASK_ALL, TESSERA_KERNEL_FLAG_NONE, h->plugin_name_}};
    return h->record(std::move(r));
  } catch (const std::exception& e) {
    return invalid(e.what());
  }
}

tessera_status_t HostContext::op_forbid_fallback(void* ctx, const char* op_name) {
  if (!ctx || !op_name) return invalid("op_forbid_fallback: host_ctx and op_name must not be NULL");
  try {
    Registration r{Registration::Kind::ForbidFallback, op_name, "", 0, {}};
    return self(ctx)->record(std::move(r));
  } catch (const std::exception& e) {
    return invalid(e.what());
  }
}

tessera_status_t HostContext::generator_reserve(void* ctx, int32_t device_index, uint64_t count,
                                                uint64_t* out_seed, uint64_t* out_offset) {
  if (!ctx || !out_seed || !out_offset)
    return invalid("generator_reserve: host_ctx, out_seed and out_offset must not be NULL");
  if (device_index < 0 || device_index >= 64)
    return invalid("generator_reserve: device index " + std::to_string(device_index) +
                   " is out of range (0..63)");
  try {
    // Note [Generators] in tessera/generator.h: no device-count check, so that a plugin may draw
    // while it loads.
    GeneratorState s = detail::default_generator_unchecked(self(ctx)->backend_, device_index).reserve(count);
    *out_seed = s.seed;
    *out_offset = s.offset;
    return nullptr;
  } catch (const std::exception& e) {
    return invalid(std::string("generator_reserve: ") + e.what());
  }
}

}  // namespace loader

void set_graph_api(const tessera_graph_api_t& api) { loader::g_graph_api = api; }

std::string status_take_message(tessera_status_t status) {
  std::string message = status_message_of(status);
  status_free(status);
  return message;
}

}  // namespace tessera
