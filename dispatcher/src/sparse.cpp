// 2:4 semi-structured tensors (tessera/sparse.h): compression into the canonical form
// (Note [2:4 canonical form]), densifying, and the Sparse key's densify fallback
// (Note [Sparse densify fallback]).
#include "tessera/sparse.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include "host_api.h"
#include "op_registry.h"
#include "sparse_internal.h"
#include "tessera/checked_math.h"
#include "tessera/log.h"
#include "tessera/ops.h"
#include "tessera/plugin_loader.h"
#include "tessera/semi_structured.h"
#include "tessera/sparse_format.h"

namespace tessera::sparse {
namespace {

constexpr size_t kHeaderBytes = 128;
static_assert(sizeof(tessera_semi_structured_header_t) <= kHeaderBytes);

// Frees the backend layouts published in the header, then the block (DataPtr deleter).
void free_semi_structured(void* /*ctx*/, void* handle) {
  auto* h = static_cast<tessera_semi_structured_header_t*>(handle);
  for (void*& layout : h->layouts) std::free(__atomic_load_n(&layout, __ATOMIC_ACQUIRE));
  std::free(handle);
}

// A semi-structured tensor: sizes (rows, cols), strides (0, 0), the canonical storage (on the CPU)
// or the device bytes its kernels plugin made from it (Note [Semi-structured tensors on a device]),
// and the dense form once someone asked for it.
class SemiStructuredImpl final : public TensorImpl {
 public:
  SemiStructuredImpl(Storage storage, DType dtype, Device device, int64_t rows, int64_t cols, Tensor host = {})
      : TensorImpl(std::move(storage), dtype, device, {rows, cols}, {0, 0}, 0), host(std::move(host)) {
    set_key_set(DispatchKeySet::functionality(Functionality::Sparse) | DispatchKeySet::backend(device.type()));
  }
  const Tensor host;  // the CPU tensor this one was moved from (only on a device)
  std::mutex mutex;
  Tensor dense;
};

const tessera_semi_structured_header_t& header_of(const TensorImpl& t) {
  if (t.device().type() != DeviceType::CPU) {
    const auto* impl = dynamic_cast<const SemiStructuredImpl*>(&t);
    TESSERA_INTERNAL_ASSERT(impl && impl->host.defined(), "a semi-structured tensor on ", t.device(),
                            " has no canonical form on the host");
    return header_of(*impl->host.impl());
  }
  const auto* h = static_cast<const tessera_semi_structured_header_t*>(t.storage()->data());
  TESSERA_INTERNAL_ASSERT(h && h->magic == TESSERA_SEMI_STRUCTURED_MAGIC,
                          "a tensor with the Sparse key has no semi-structured header");
  return *h;
}

bool is_zero_element(const uint8_t* p, size_t itemsize, bool floating) {
  uint64_t bits = 0;
  std::memcpy(&bits, p, itemsize);
  if (floating) bits &= ~(uint64_t(1) << (8 * itemsize - 1));  // -0.0 is zero
  return bits == 0;
}

Tensor densify(const TensorImpl& t) {
  const tessera_semi_structured_header_t& h = header_of(t);
  const size_t es = itemsize(t.dtype());
  Tensor out = zeros({h.rows, h.cols}, TensorOptions().dtype(t.dtype()));
  auto* dst = static_cast<uint8_t*>(out.raw_data_ptr());
  const auto* base = reinterpret_cast<const uint8_t*>(&h);
  const uint8_t* values = base + h.values_offset;
  const uint8_t* indices = base + h.indices_offset;
  const int64_t index_row = (h.groups + 1) / 2;
  for (int64_t r = 0; r < h.rows; ++r)
    for (int64_t g = 0; g < h.groups; ++g) {
      const unsigned nibble = (indices[r * index_row + g / 2] >> (4 * (g % 2))) & 0xfu;
      for (int j = 0; j < 2; ++j) {
        const int64_t col = 4 * g + ((nibble >> (2 * j)) & 3u);
        if (col < h.cols)
          std::memcpy(dst + size_t(r * h.cols + col) * es, values + size_t(r * 2 * h.groups + 2 * g + j) * es, es);
      }
    }
  return out;
}

// At the first semi-structured tensor: the kernels plugins.
void first_semi_structured_tensor() {
  static std::once_flag once;
  std::call_once(once, [] { load_plugins_of_kind(PluginKind::Kernels); });
}

bool is_semi_structured_dtype(DType dt) { return dt == kFloat32 || dt == kBFloat16 || dt == kFloat16 || dt == kInt8; }

struct FreeBlock {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Block = std::unique_ptr<uint8_t, FreeBlock>;

// The storage block of a semi-structured tensor of dense shape (rows, cols): the header filled in,
// values and indices zero. Sizes are checked against overflow (they may come from a file).
Block allocate_semi_structured(DType dt, int64_t rows, int64_t cols, const char* who) {
  TESSERA_INTERNAL_ASSERT(rows >= 0 && cols >= 0, "negative sizes for a semi-structured tensor");
  const int64_t groups = cols / 4 + (cols % 4 != 0), index_row = (groups + 1) / 2;
  const size_t es = itemsize(dt);
  size_t value_bytes = 0, value_end = 0, index_bytes = 0, total = 0, padded = 0;
  TESSERA_CHECK(!__builtin_mul_overflow(size_t(rows), size_t(groups), &value_bytes) &&
                    !__builtin_mul_overflow(value_bytes, 2 * es, &value_bytes) &&
                    !__builtin_add_overflow(value_bytes, kHeaderBytes + 63, &value_end) &&
                    !__builtin_mul_overflow(size_t(rows), size_t(index_row), &index_bytes) &&
                    !__builtin_add_overflow(value_end / 64 * 64, index_bytes, &total) &&
                    !__builtin_add_overflow(total, size_t(63), &padded),
                who, ": a 2:4 tensor of shape [", rows, ", ", cols, "] overflows the address space");
  padded = padded / 64 * 64;
  Block block(static_cast<uint8_t*>(std::aligned_alloc(64, padded)));
  TESSERA_CHECK(block, who, ": out of memory for ", total, " bytes");
  std::memset(block.get(), 0, padded);
  auto* h = reinterpret_cast<tessera_semi_structured_header_t*>(block.get());
  h->magic = TESSERA_SEMI_STRUCTURED_MAGIC;
  h->version = TESSERA_SEMI_STRUCTURED_VERSION;
  h->dtype = int32_t(dt);
  h->rows = rows;
  h->cols = cols;
  h->groups = groups;
  h->values_offset = kHeaderBytes;
  h->indices_offset = value_end / 64 * 64;
  h->total_bytes = total;
  return block;
}

Tensor wrap_semi_structured(Block block, DType dt, Device device) {
  const auto* h = reinterpret_cast<const tessera_semi_structured_header_t*>(block.get());
  const int64_t rows = h->rows, cols = h->cols;
  const size_t total = h->total_bytes;
  Storage storage = make_intrusive<StorageImpl>(
      DataPtr(block.release(), nullptr, &free_semi_structured, Device(DeviceType::CPU, 0)), total);
  first_semi_structured_tensor();
  return Tensor(IntrusivePtr<TensorImpl>(new SemiStructuredImpl(std::move(storage), dt, device, rows, cols)));
}

}  // namespace

Tensor prune_2_4(const Tensor& w) {
  TESSERA_CHECK(w.dim() == 2, "prune_2_4: expected a 2-D weight [out_features, in_features], got ", w.dim(),
                "-D of shape ", w.sizes());
  TESSERA_CHECK(is_floating(w.dtype()) || w.dtype() == kInt8, "prune_2_4: dtype ", w.dtype(),
                " is not supported; use float32, bfloat16, float16, float64 or int8");
  Tensor out = w.to(Device("cpu")).contiguous().clone();
  const Tensor mag = abs(out.to(kFloat64)).contiguous();
  const double* m = mag.data_ptr<double>();
  auto* p = static_cast<uint8_t*>(out.raw_data_ptr());
  const size_t es = out.itemsize();
  const int64_t rows = out.size(0), cols = out.size(1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c0 = 0; c0 < cols; c0 += 4) {
      const int64_t n = std::min<int64_t>(4, cols - c0);
      if (n <= 2) continue;
      const double* g = m + r * cols + c0;
      int a = 0, b = -1;  // the largest and the second largest; the lower position wins a tie
      for (int i = 1; i < n; ++i) {
        if (g[i] > g[a]) { b = a; a = i; }
        else if (b < 0 || g[i] > g[b]) b = i;
      }
      for (int i = 0; i < n; ++i)
        if (i != a && i != b) std::memset(p + size_t(r * cols + c0 + i) * es, 0, es);
    }
  return out;
}

Tensor to_sparse_semi_structured(const Tensor& w) {
  TESSERA_CHECK(!is_sparse(w), "to_sparse_semi_structured: the tensor is already semi-structured");
  TESSERA_CHECK(w.dim() == 2, "to_sparse_semi_structured: expected a 2-D weight [out_features, in_features], got ",
                w.dim(), "-D of shape ", w.sizes());
  const DType dt = w.dtype();
  TESSERA_CHECK(is_semi_structured_dtype(dt), "to_sparse_semi_structured: dtype ", dt,
                " is not supported; use float32, bfloat16, float16 or int8");
  TESSERA_CHECK(w.device().type() == DeviceType::CPU, "to_sparse_semi_structured: the weight is on ", w.device(),
                "; compress it on the CPU (w.to(\"cpu\"))");
  const Tensor src = w.contiguous();
  const int64_t rows = src.size(0), cols = src.size(1);
  Block block = allocate_semi_structured(dt, rows, cols, "to_sparse_semi_structured");
  auto* h = reinterpret_cast<tessera_semi_structured_header_t*>(block.get());
  const int64_t groups = h->groups, index_row = (groups + 1) / 2;
  const size_t es = src.itemsize();
  const auto* in = static_cast<const uint8_t*>(src.raw_data_ptr());
  uint8_t* values = block.get() + h->values_offset;
  uint8_t* indices = block.get() + h->indices_offset;
  const bool floating = is_floating(dt);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      int kept[2] = {-1, -1}, count = 0;
      for (int i = 0; i < 4 && 4 * g + i < cols; ++i) {
        if (is_zero_element(in + size_t(r * cols + 4 * g + i) * es, es, floating)) continue;
        TESSERA_CHECK(count < 2, "to_sparse_semi_structured: the weight is not 2:4 sparse: row ", r, ", group ", g,
                      " (columns ", 4 * g, "..", std::min(4 * g + 3, cols - 1),
                      ") has more than two non-zeros; prune it first with tessera::sparse::prune_2_4");
        kept[count++] = i;
      }
      for (int i = 0; i < 4 && count < 2; ++i)
        if (kept[0] != i && kept[1] != i) kept[count++] = i;
      if (kept[0] > kept[1]) std::swap(kept[0], kept[1]);
      for (int j = 0; j < 2; ++j)
        if (4 * g + kept[j] < cols)
          std::memcpy(values + size_t(r * 2 * groups + 2 * g + j) * es, in + size_t(r * cols + 4 * g + kept[j]) * es,
                      es);
      indices[r * index_row + g / 2] |= uint8_t((kept[0] | kept[1] << 2) << (4 * (g % 2)));
    }
  return wrap_semi_structured(std::move(block), dt, src.device());
}

SemiStructuredParts semi_structured_parts(const Tensor& t) {
  TESSERA_CHECK(is_sparse(t), "semi_structured_parts: expected a semi-structured tensor, got a dense one of shape ",
                t.sizes());
  const tessera_semi_structured_header_t& h = header_of(*t.impl());
  const auto* base = reinterpret_cast<const uint8_t*>(&h);
  SemiStructuredParts parts{empty({h.rows, 2 * h.groups}, TensorOptions().dtype(t.dtype())),
                            empty({h.rows, (h.groups + 1) / 2}, TensorOptions().dtype(kUInt8))};
  std::memcpy(parts.values.raw_data_ptr(), base + h.values_offset, parts.values.nbytes());
  std::memcpy(parts.indices.raw_data_ptr(), base + h.indices_offset, parts.indices.nbytes());
  return parts;
}

Tensor from_semi_structured_parts(const Tensor& values, const Tensor& indices, int64_t cols) {
  TESSERA_CHECK(values.defined() && indices.defined(), "a semi-structured tensor needs both values and indices");
  TESSERA_CHECK(values.device().type() == DeviceType::CPU && indices.device().type() == DeviceType::CPU &&
                    !is_sparse(values) && !is_sparse(indices),
                "the values and indices of a semi-structured tensor must be dense CPU tensors");
  const DType dt = values.dtype();
  TESSERA_CHECK(is_semi_structured_dtype(dt), "values have dtype ", dt,
                ", which a semi-structured tensor cannot hold (float32, bfloat16, float16 or int8)");
  TESSERA_CHECK(indices.dtype() == kUInt8, "indices have dtype ", indices.dtype(), "; expected uint8");
  TESSERA_CHECK(cols >= 0, "the dense width ", cols, " is negative");
  const int64_t groups = cols / 4 + (cols % 4 != 0), index_row = (groups + 1) / 2;
  int64_t value_cols = 0;
  TESSERA_CHECK(!__builtin_mul_overflow(groups, int64_t(2), &value_cols), "the dense width ", cols, " overflows");
  TESSERA_CHECK(values.dim() == 2 && values.size(1) == value_cols, "values have shape ", values.sizes(),
                "; a 2:4 tensor of ", cols, " columns keeps (rows, ", value_cols, ")");
  const int64_t rows = values.size(0);
  TESSERA_CHECK(indices.dim() == 2 && indices.size(0) == rows && indices.size(1) == index_row, "indices have shape ",
                indices.sizes(), "; expected (", rows, ", ", index_row, ") for ", rows, " rows of ", groups,
                " groups of four");
  Block block = allocate_semi_structured(dt, rows, cols, "from_semi_structured_parts");
  auto* h = reinterpret_cast<tessera_semi_structured_header_t*>(block.get());
  const size_t es = itemsize(dt);
  uint8_t* vals = block.get() + h->values_offset;
  uint8_t* idx = block.get() + h->indices_offset;
  const Tensor v = values.contiguous(), ix = indices.contiguous();
  std::memcpy(vals, v.raw_data_ptr(), size_t(rows) * size_t(value_cols) * es);
  std::memcpy(idx, ix.raw_data_ptr(), size_t(rows) * size_t(index_row));
  for (int64_t r = 0; r < rows; ++r) {
    if (groups % 2)
      TESSERA_CHECK((idx[r * index_row + index_row - 1] >> 4) == 0, "indices: row ", r, ": the unused high nibble of ",
                    "the last byte (group ", groups, ", past the last group) is not zero");
    for (int64_t g = 0; g < groups; ++g) {
      const unsigned nibble = (idx[r * index_row + g / 2] >> (4 * (g % 2))) & 0xfu;
      const unsigned first = nibble & 3u, second = nibble >> 2;
      TESSERA_CHECK(first < second, "indices: row ", r, ", group ", g, " keeps positions ", first, " and ", second,
                    "; the two positions of a group must be distinct and increasing");
      for (int j = 0; j < 2; ++j) {
        const int64_t col = 4 * g + (j ? second : first);
        TESSERA_CHECK(col < cols || is_zero_element(vals + size_t(r * value_cols + 2 * g + j) * es, es, false),
                      "values: row ", r, ", group ", g, " holds a non-zero value at column ", col,
                      ", past the dense width ", cols);
      }
    }
  }
  return wrap_semi_structured(std::move(block), dt, values.device());
}

bool is_sparse(const Tensor& t) { return t.defined() && t.key_set().has(Functionality::Sparse); }

Tensor to_dense(const Tensor& t) {
  if (!is_sparse(t)) return t;
  if (auto* impl = dynamic_cast<SemiStructuredImpl*>(t.impl())) {
    std::lock_guard lock(impl->mutex);
    if (!impl->dense.defined())
      impl->dense = impl->host.defined() ? to_dense(impl->host).to(t.device()) : densify(*impl);
    return impl->dense;
  }
  return densify(*t.impl());
}

std::string describe(const Tensor& t) {
  std::ostringstream os;
  if (!is_sparse(t)) {
    os << "dense tensor of shape " << t.sizes();
    return os.str();
  }
  const tessera_semi_structured_header_t& h = header_of(*t.impl());
  os << "SparseSemiStructuredTensor(shape=" << t.sizes() << ", dtype=" << t.dtype() << ", device=" << t.device()
     << ", kept=" << h.rows * 2 * h.groups << ")";
  return os.str();
}

}  // namespace tessera::sparse

namespace tessera::detail {

std::optional<Tensor> sparse_to_device(const Tensor& t, Device device) {
  using sparse::SemiStructuredImpl;
  auto* impl = dynamic_cast<SemiStructuredImpl*>(t.impl());
  if (!impl) return std::nullopt;
  if (impl->host.defined()) {  // on a device: back to the CPU form, or from it to another device
    if (device.type() == DeviceType::CPU) return impl->host;
    return sparse_to_device(impl->host, device);
  }
  if (device.type() == DeviceType::CPU) return t;
  tessera_ext_semi_structured_device_layout_fn_t fn = nullptr;
  std::string plugin;
  for (const PluginInfo& p : plugins())
    if (p.kind == PluginKind::Kernels && p.status == PluginStatus::Loaded && p.has_device && p.device_type == device.type())
      if ((fn = plugin_extension<tessera_ext_semi_structured_device_layout_fn_t>(
               p.name, TESSERA_EXT_SEMI_STRUCTURED_DEVICE_LAYOUT))) {
        plugin = p.name;
        break;
      }
  if (!fn) {
    if (log_enabled("sparse"))
      log_message(LogLevel::Info, "sparse",
                  "to(" + device.str() + "): no kernels plugin for " + device_type_name(device.type()) +
                      " offers semi-structured tensors; the result is the dense weight");
    return std::nullopt;
  }
  const auto& h = sparse::header_of(*impl);
  void* block = nullptr;
  uint64_t bytes = 0;
  tessera_status_t status = fn(nullptr, &h, &block, &bytes);
  std::unique_ptr<void, decltype(&std::free)> owned(block, &std::free);
  const std::string context = "plugin '" + plugin + "': " TESSERA_EXT_SEMI_STRUCTURED_DEVICE_LAYOUT;
  if (status && status->code == TESSERA_STATUS_UNIMPLEMENTED) {  // e.g. a dtype its kernels do not take
    const std::string why = status_take_message(status);
    if (log_enabled("sparse"))
      log_message(LogLevel::Info, "sparse",
                  "to(" + device.str() + "): " + context + ": " + why + "; the result is the dense weight");
    return std::nullopt;
  }
  throw_status(status, context);
  TESSERA_CHECK(block && bytes <= uint64_t(INT64_MAX), "plugin '", plugin, "' returned no device layout (",
                bytes, " bytes) for a semi-structured tensor of shape ", t.sizes());
  Tensor staged = empty({int64_t(bytes)}, TensorOptions().dtype(kUInt8));
  if (bytes) std::memcpy(staged.raw_data_ptr(), block, bytes);
  Tensor on_device = staged.to(device);
  if (log_enabled("sparse"))
    log_message(LogLevel::Info, "sparse",
                "to(" + device.str() + "): semi-structured, " + std::to_string(bytes) + " device bytes from plugin '" +
                    plugin + "'");
  return Tensor(IntrusivePtr<TensorImpl>(new SemiStructuredImpl(on_device.storage(), t.dtype(), on_device.device(),
                                                                h.rows, h.cols, t)));
}

Stack sparse_densify_and_call(OperatorEntry& op, const std::string& op_name, Stack args, const std::string& why) {
  bool in_place_on_sparse = false;
  for (size_t i = 0; i < args.size(); ++i) {
    Value& v = args[i];
    if (auto* t = std::get_if<Tensor>(&v)) {
      if (sparse::is_sparse(*t)) {
        if (i == 0 && !op_name.empty() && op_name.find('.') != 0 &&
            op_name.substr(0, op_name.find('.')).back() == '_')
          in_place_on_sparse = true;
        *t = sparse::to_dense(*t);
      }
    } else if (auto* o = std::get_if<std::optional<Tensor>>(&v)) {
      if (*o && sparse::is_sparse(**o)) *o = sparse::to_dense(**o);
    } else if (auto* l = std::get_if<std::vector<Tensor>>(&v)) {
      for (Tensor& e : *l)
        if (sparse::is_sparse(e)) e = sparse::to_dense(e);
    }
  }
  TESSERA_CHECK(!in_place_on_sparse, "'", op_name,
                "' would modify a semi-structured tensor in place, which keeps its compressed values; apply it to "
                "tessera::sparse::to_dense(t) and compress again");
  const bool dense_path = op_name == "linear" || op_name == "matmul";
  if (dense_path) {
    if (log_enabled("sparse"))
      log_message(LogLevel::Info, "sparse",
                  "'" + op_name + "' on a semi-structured tensor: dense path" + (why.empty() ? "" : " (" + why + ")"));
  } else {
    const char* strict = secure_env("TESSERA_SPARSE_STRICT");
    TESSERA_CHECK(!(strict && std::strcmp(strict, "1") == 0), "'", op_name,
                  "' has no kernel for semi-structured tensors and TESSERA_SPARSE_STRICT=1 forbids densifying; "
                  "call tessera::sparse::to_dense(t) first or unset TESSERA_SPARSE_STRICT");
    static std::mutex mutex;
    static std::set<std::string> warned;
    std::lock_guard lock(mutex);
    if (warned.insert(op_name).second)
      log_message(LogLevel::Warning, "sparse",
                  "'" + op_name + "' has no kernel for semi-structured tensors: running it on the densified tensor "
                  "(warned once per op; TESSERA_SPARSE_STRICT=1 makes this an error)");
  }
  return Dispatcher::instance().call_boxed(op, std::move(args));
}

}  // namespace tessera::detail
