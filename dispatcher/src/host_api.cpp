#include "host_api.h"

#include <new>

#include "tessera/log.h"
#include "tessera/schema.h"

namespace tessera {

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

}  // namespace

HostContext::HostContext(std::string plugin_name, DeviceType backend)
    : plugin_name_(std::move(plugin_name)), backend_(backend) {
  api_.struct_size = sizeof(tessera_host_api_t);
  api_.abi_major = TESSERA_ABI_MAJOR;
  api_.abi_minor = TESSERA_ABI_MINOR;
  api_.host_ctx = this;
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
}

bool HostContext::op_known(const std::string& name) const {
  for (const auto& p : pending_ops_)
    if (p == name) return true;
  return Dispatcher::instance().find_op(name) != nullptr;
}

tessera_status_t HostContext::record(Registration r) {
  std::lock_guard lock(mutex_);
  if ((r.kind == Registration::Kind::Kernel || r.kind == Registration::Kind::ForbidFallback) && !op_known(r.op))
    return invalid("plugin '" + plugin_name_ + "': unknown operator '" + r.op +
                   "'; define it first with op_define or check the name (e.g. \"add.Tensor\")");
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
    for (const auto& r : pending_) apply(r);
  } catch (...) {
    for (auto it = handles_.rbegin(); it != handles_.rend(); ++it) Dispatcher::instance().deregister(*it);
    handles_.clear();
    num_kernels_ = 0;
    pending_.clear();
    pending_ops_.clear();
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
  if (functionality < TESSERA_FUNCTIONALITY_DENSE || functionality > TESSERA_FUNCTIONALITY_SPARSE)
    return invalid("plugin '" + h->plugin_name_ + "': kernel_register(\"" + op_name + "\"): functionality " +
                   std::to_string(functionality) + " is not one of DENSE (0), QUANTIZED (1), SPARSE (2)");
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

}  // namespace loader
}  // namespace tessera
