// The safetensors layout: tessera/compiler/safetensors.h.
#include "tessera/compiler/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "tessera/checked_math.h"
#include "tessera/error.h"
#include "serialize/untrusted.h"

namespace tessera::compiler {

namespace {

using json = nlohmann::json;

// Not a limit of the format: the largest header the reference implementation reads.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

const char* const kNames[kNumPlainDTypes] = {"BOOL", "U8", "I8", "I16", "I32", "I64", "F16", "BF16", "F32", "F64"};

struct Holder {
  std::shared_ptr<const Bytes> bytes;
};

void release_holder(void* ctx, void*) { delete static_cast<Holder*>(ctx); }

}  // namespace

const char* safetensors_dtype_name(DType t) {
  int i = int(t);
  TESSERA_CHECK(i >= 0 && i < kNumPlainDTypes, "safetensors has no dtype for ", dtype_name(t),
                "; dequantize() a quantized tensor (or save its int_repr() and parameters) before saving");
  return kNames[i];
}

DType safetensors_dtype(const std::string& name) {
  for (int i = 0; i < kNumPlainDTypes; ++i)
    if (name == kNames[i]) return DType(i);
  TESSERA_CHECK(false, "unknown safetensors dtype '", name,
                "' (known: BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64)");
}

std::vector<uint8_t> safetensors_serialize(const std::map<std::string, Tensor>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, Tensor>> order;
  for (const auto& [name, t] : tensors) {
    TESSERA_CHECK(t.defined(), "safetensors: tensor '", name, "' is undefined");
    TESSERA_CHECK(t.is_cpu(), "safetensors: tensor '", name, "' is on ", t.device().str(),
                  "; move it to the CPU first");
    TESSERA_CHECK(name != "__metadata__", "safetensors: '__metadata__' cannot name a tensor");
    order.emplace_back(name, t.is_contiguous() ? t : t.contiguous());
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second.itemsize() > b.second.itemsize(); });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : order) {
    uint64_t n = t.nbytes(), end = 0;
    TESSERA_CHECK(!__builtin_add_overflow(offset, n, &end),
                  "safetensors: the tensors' bytes overflow 64 bits");
    json shape = json::array();
    for (int64_t s : t.sizes()) shape.push_back(s);
    header[name] = {
        {"dtype", safetensors_dtype_name(t.dtype())}, {"shape", shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text = header.dump();
  size_t total_header = 8 + text.size();
  text.append((64 - total_header % 64) % 64, ' ');
  std::vector<uint8_t> out;
  out.reserve(8 + text.size() + offset);
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(n >> (8 * i)));
  out.insert(out.end(), text.begin(), text.end());
  for (const auto& [name, t] : order) {
    const auto* p = static_cast<const uint8_t*>(t.raw_data_ptr());
    out.insert(out.end(), p, p + t.nbytes());
  }
  return out;
}

namespace {

SafetensorsFile parse_unescaped(std::span<const uint8_t> data, std::shared_ptr<const Bytes> owner,
                                const std::string& what) {
  TESSERA_CHECK(data.size() >= 8, what, ": ", data.size(),
                " bytes, shorter than the 8-byte header length (truncated)");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(data[size_t(i)]) << (8 * i);
  TESSERA_CHECK(n <= kMaxHeaderBytes, what, ": header length ", n, " exceeds ", kMaxHeaderBytes, " bytes");
  TESSERA_CHECK(n <= data.size() - 8, what, ": header length ", n, " but only ", data.size() - 8,
                " bytes follow (truncated)");
  json header = json::parse(data.begin() + 8, data.begin() + 8 + ptrdiff_t(n), nullptr, false);
  TESSERA_CHECK(!header.is_discarded(), what, ": the header is not valid JSON");
  TESSERA_CHECK(header.is_object(), what, ": the header is a JSON ", header.type_name(),
                ", expected an object");
  const uint8_t* base = data.data() + 8 + n;
  const uint64_t data_size = data.size() - 8 - n;
  SafetensorsFile out;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  std::vector<std::string> span_names;
  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const json& entry = item.value();
    if (name == "__metadata__") {
      TESSERA_CHECK(entry.is_object(), what, ": __metadata__ is a JSON ", entry.type_name(),
                    ", expected an object");
      for (const auto& [k, v] : entry.items()) {
        TESSERA_CHECK(v.is_string(), what, ": __metadata__.", k, " is a JSON ", v.type_name(),
                      ", expected a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = what + ": tensor '" + name + "'";
    TESSERA_CHECK(entry.is_object(), where, " is a JSON ", entry.type_name(), ", expected an object");
    auto field = [&](const char* f) -> const json& {
      auto it = entry.find(f);
      TESSERA_CHECK(it != entry.end(), where, ": field '", f, "' is missing");
      return *it;
    };
    const json& dt = field("dtype");
    TESSERA_CHECK(dt.is_string(), where, ": field 'dtype' is a JSON ", dt.type_name(), ", expected a string");
    DType dtype;
    try {
      dtype = safetensors_dtype(dt.get<std::string>());
    } catch (const Error& e) {
      TESSERA_CHECK(false, where, ": ", e.what());
    }
    const json& shape = field("shape");
    TESSERA_CHECK(shape.is_array() && shape.size() <= 64, where,
                  ": field 'shape' must be an array of at most 64 sizes");
    std::vector<int64_t> sizes;
    int64_t numel = 1;
    for (const json& s : shape) {
      // nlohmann reads a non-negative integer as unsigned, a negative one as signed.
      TESSERA_CHECK(s.is_number_unsigned(), where, ": field 'shape' holds ", s.dump(), ", expected non-negative integers");
      TESSERA_CHECK(s.get<uint64_t>() <= uint64_t(INT64_MAX), where, ": size ", s.dump(), " too large");
      sizes.push_back(s.get<int64_t>());
      auto m = checked_mul(numel, sizes.back());
      TESSERA_CHECK(m.has_value(), where, ": shape ", shape.dump(), " has more elements than fit in 63 bits");
      numel = *m;
    }
    const json& offs = field("data_offsets");
    TESSERA_CHECK(
        offs.is_array() && offs.size() == 2 && offs[0].is_number_unsigned() && offs[1].is_number_unsigned(),
        where, ": field 'data_offsets' is ", offs.dump(), ", expected [begin, end] (non-negative integers)");
    uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
    TESSERA_CHECK(begin <= end && end <= data_size, where, ": data_offsets [", begin, ", ", end,
                  "] lie outside the ", data_size, " data bytes (truncated or corrupt file)");
    auto nbytes = checked_nbytes(numel, itemsize(dtype));
    TESSERA_CHECK(nbytes && *nbytes == end - begin, where, ": data_offsets [", begin, ", ", end, "] hold ",
                  end - begin, " bytes but shape ", shape.dump(), " of ", dt.get<std::string>(), " needs ",
                  nbytes ? std::to_string(*nbytes) : std::string("more than 2^64"));
    spans.emplace_back(begin, end);
    span_names.push_back(name);
    const uint8_t* p = base + begin;
    Tensor t;
    if (owner && reinterpret_cast<uintptr_t>(p) % itemsize(dtype) == 0) {
      DataPtr dp(const_cast<uint8_t*>(p), new Holder{owner}, release_holder, Device(DeviceType::CPU));
      Storage storage = make_intrusive<StorageImpl>(std::move(dp), size_t(end - begin));
      auto strides = contiguous_strides(sizes);
      t = Tensor(make_intrusive<TensorImpl>(std::move(storage), dtype, Device(DeviceType::CPU),
                                            IntArrayRef(sizes), IntArrayRef(strides), 0));
    } else {
      t = make_tensor(sizes, dtype, Device(DeviceType::CPU));
      if (end > begin) std::memcpy(t.raw_data_ptr(), p, size_t(end - begin));
    }
    out.tensors.emplace(name, std::move(t));
  }
  std::vector<size_t> idx(spans.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return spans[a] < spans[b]; });
  for (size_t i = 1; i < idx.size(); ++i) {
    const auto& prev = spans[idx[i - 1]];
    const auto& cur = spans[idx[i]];
    TESSERA_CHECK(cur.first >= prev.second || cur.first == cur.second || prev.first == prev.second, what,
                  ": tensors '", span_names[idx[i - 1]], "' [", prev.first, ", ", prev.second, ") and '",
                  span_names[idx[i]], "' [", cur.first, ", ", cur.second, ") overlap");
  }
  return out;
}

}  // namespace

SafetensorsFile safetensors_parse(std::span<const uint8_t> data, std::shared_ptr<const Bytes> owner,
                                  const std::string& what) {
  return with_printable_errors([&] { return parse_unescaped(data, std::move(owner), what); });
}

}  // namespace tessera::compiler
