// NumPy .npy / .npz: tessera/compiler/npy.h.
#include "tessera/compiler/npy.h"

#include <cstring>
#include <fstream>

#include "tessera/checked_math.h"
#include "tessera/compiler/zip_archive.h"
#include "tessera/error.h"
#include "serialize/untrusted.h"

namespace tessera::compiler {

namespace {

struct Descr {
  const char* text;
  DType dtype;
};
constexpr Descr kDescrs[] = {{"|b1", DType::Bool},    {"|u1", DType::UInt8},   {"|i1", DType::Int8},
                             {"<i2", DType::Int16},   {"<i4", DType::Int32},   {"<i8", DType::Int64},
                             {"<f2", DType::Float16}, {"<f4", DType::Float32}, {"<f8", DType::Float64},
                             // NumPy has no bfloat16; ml_dtypes' bfloat16 arrays are saved as 2-byte
                             // void ('<V2'), and that is how bfloat16 is read and written here.
                             {"<V2", DType::BFloat16}};

const char* descr_of(DType t) {
  for (const Descr& d : kDescrs)
    if (d.dtype == t) return d.text;
  TESSERA_CHECK(false, "npy: NumPy has no ", dtype_name(t),
                " dtype; convert the tensor with .to(tessera::DType::Float32) first");
}

// A tiny reader for the header's Python dict literal.
struct DictReader {
  std::string_view s;
  size_t i = 0;
  const std::string& what;

  [[noreturn]] void fail(const std::string& msg) const {
    detail::throw_error(ErrorCode::InvalidArgument, what + ": npy header: " + msg + " at column " +
                                                        std::to_string(i) + " of \"" +
                                                        std::string(s.substr(0, 120)) + "\"");
  }
  void skip() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t')) ++i;
  }
  bool eat(char c) {
    skip();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  std::string str() {
    skip();
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) fail("expected a string");
    char q = s[i++];
    size_t start = i;
    while (i < s.size() && s[i] != q) ++i;
    if (i >= s.size()) fail("unterminated string");
    return std::string(s.substr(start, i++ - start));
  }
  int64_t integer() {
    skip();
    size_t start = i;
    int64_t v = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      auto m = checked_mul(v, 10);
      auto a = m ? checked_add(*m, s[i] - '0') : std::nullopt;
      if (!a) fail("size too large");
      v = *a;
      ++i;
    }
    if (i == start) fail("expected a non-negative integer");
    if (i < s.size() && s[i] == 'L') ++i;
    return v;
  }
};

}  // namespace

namespace {

Tensor parse_unescaped(std::span<const uint8_t> data, const std::string& what) {
  static const uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  TESSERA_CHECK(data.size() >= 10 && std::memcmp(data.data(), kMagic, 6) == 0, what,
                ": not a .npy file (no \\x93NUMPY magic)");
  uint8_t major = data[6];
  TESSERA_CHECK(major >= 1 && major <= 3, what, ": .npy version ", int(major), ".", int(data[7]),
                " (versions 1.0, 2.0 and 3.0 are read)");
  size_t pre = major == 1 ? 10 : 12;
  TESSERA_CHECK(data.size() >= pre, what, ": truncated .npy header");
  uint64_t hlen = major == 1 ? uint64_t(data[8]) | uint64_t(data[9]) << 8
                             : uint64_t(data[8]) | uint64_t(data[9]) << 8 | uint64_t(data[10]) << 16 |
                                   uint64_t(data[11]) << 24;
  TESSERA_CHECK(hlen <= data.size() - pre, what, ": .npy header of ", hlen, " bytes but ", data.size() - pre,
                " follow (truncated)");
  std::string_view header(reinterpret_cast<const char*>(data.data() + pre), size_t(hlen));
  DictReader r{header, 0, what};
  r.expect('{');
  std::string descr;
  std::optional<bool> fortran;
  std::optional<std::vector<int64_t>> shape;
  while (!r.eat('}')) {
    std::string key = r.str();
    r.expect(':');
    if (key == "descr") {
      descr = r.str();
    } else if (key == "fortran_order") {
      r.skip();
      if (header.substr(r.i, 4) == "True")
        fortran = true, r.i += 4;
      else if (header.substr(r.i, 5) == "False")
        fortran = false, r.i += 5;
      else
        r.fail("fortran_order must be True or False");
    } else if (key == "shape") {
      r.expect('(');
      shape.emplace();
      while (!r.eat(')')) {
        shape->push_back(r.integer());
        if (shape->size() > 64) r.fail("more than 64 dims");
        if (!r.eat(',')) {
          r.expect(')');
          break;
        }
      }
    } else {
      r.fail("unknown key '" + key + "'");
    }
    if (!r.eat(',')) {
      r.expect('}');
      break;
    }
  }
  TESSERA_CHECK(!descr.empty() && fortran && shape, what, ": npy header lacks descr, fortran_order or shape");
  TESSERA_CHECK(!*fortran, what,
                ": the array is in Fortran order; save it with np.ascontiguousarray(a) first");
  std::optional<DType> dtype;
  std::string norm = descr;
  if (norm.size() == 3 && norm[0] == '=') norm[0] = '<';
  if (norm == "<b1" || norm == "=b1") norm = "|b1";
  if (norm == "<u1") norm = "|u1";
  if (norm == "<i1") norm = "|i1";
  if (norm == "|V2") norm = "<V2";
  for (const Descr& d : kDescrs)
    if (norm == d.text) dtype = d.dtype;
  TESSERA_CHECK(dtype, what, ": unsupported dtype '", descr,
                "' (read: little-endian bool, u1, i1, i2, i4, i8, f2, f4, f8, and V2 as bfloat16)");
  int64_t numel = 1;
  for (int64_t s : *shape) {
    auto m = checked_mul(numel, s);
    TESSERA_CHECK(m, what, ": shape has more elements than fit in 63 bits");
    numel = *m;
  }
  auto nbytes = checked_nbytes(numel, itemsize(*dtype));
  const uint64_t have = data.size() - pre - hlen;
  TESSERA_CHECK(nbytes && *nbytes == have, what, ": shape ", IntArrayRef(*shape), " of ", descr, " needs ",
                nbytes ? std::to_string(*nbytes) : std::string("more than 2^64"),
                " bytes but the file holds ", have);
  Tensor t = make_tensor(*shape, *dtype, Device(DeviceType::CPU));
  if (have) std::memcpy(t.raw_data_ptr(), data.data() + pre + hlen, size_t(have));
  if (*dtype == DType::Bool) {
    auto* p = static_cast<uint8_t*>(t.raw_data_ptr());
    for (int64_t k = 0; k < numel; ++k) p[k] = p[k] != 0;
  }
  return t;
}

}  // namespace

Tensor npy_parse(std::span<const uint8_t> data, const std::string& what) {
  return with_printable_errors([&] { return parse_unescaped(data, what); });
}

std::vector<uint8_t> npy_serialize(const Tensor& in) {
  TESSERA_CHECK(in.defined() && in.is_cpu(), "npy: write a defined CPU tensor (call .cpu() first)");
  Tensor t = in.is_contiguous() ? in : in.contiguous();
  std::string shape;
  for (int64_t i = 0; i < t.dim(); ++i) shape += (i ? ", " : "") + std::to_string(t.sizes()[size_t(i)]);
  if (t.dim() == 1) shape += ",";
  std::string header = std::string("{'descr': '") + descr_of(t.dtype()) +
                       "', 'fortran_order': False, 'shape': (" + shape + ")";
  header += ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  TESSERA_CHECK(header.size() <= 0xffff, "npy: header too long");
  out.push_back(uint8_t(header.size() & 0xff));
  out.push_back(uint8_t(header.size() >> 8));
  out.insert(out.end(), header.begin(), header.end());
  const auto* p = static_cast<const uint8_t*>(t.raw_data_ptr());
  out.insert(out.end(), p, p + t.nbytes());
  return out;
}

Tensor read_npy(const std::string& path) {
  auto b = Bytes::map_file(path);
  return npy_parse({b->data(), b->size()}, path);
}

void write_npy(const std::string& path, const Tensor& t) {
  std::vector<uint8_t> bytes = npy_serialize(t);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  TESSERA_CHECK(f.good(), "cannot write '", path, "'");
}

std::vector<std::pair<std::string, Tensor>> read_npz(const std::string& path) {
  return with_printable_errors([&] {
    ZipReader zip(Bytes::map_file(path), path);
    std::vector<std::pair<std::string, Tensor>> out;
    for (const ZipEntry& e : zip.entries()) {
      std::string name = e.name;
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0) name.resize(name.size() - 4);
      std::vector<uint8_t> bytes = zip.read(e);
      out.emplace_back(name, npy_parse(bytes, path + ": " + e.name));
    }
    return out;
  });
}

void write_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays) {
  ZipWriter zip(path);
  for (const auto& [name, t] : arrays) zip.add(name + ".npy", npy_serialize(t), 1);
  zip.finish();
}

}  // namespace tessera::compiler
