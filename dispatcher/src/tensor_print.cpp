// Printing tensors exactly like PyTorch's repr (torch/_tensor_str.py, default print options:
// precision 4, threshold 1000, edgeitems 3, linewidth 80).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "tessera/sparse.h"
#include "tessera/tensor.h"

namespace tessera {

namespace {

constexpr int kPrecision = 4;
constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kLineWidth = 80;

// Reads element at `offset` (in elements from the storage base) as double.
struct ElementReader {
  const char* base;
  DType dtype;
  double operator()(int64_t offset) const {
    const char* p = base + offset * int64_t(itemsize(dtype));
    return visit_dtype(dtype, [&](auto zero) -> double {
      using T = decltype(zero);
      if constexpr (std::is_same_v<T, bool>) {
        return *reinterpret_cast<const uint8_t*>(p) != 0 ? 1.0 : 0.0;
      } else {
        T v;
        std::memcpy(&v, p, sizeof(T));
        if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return double(float(v));
        else return double(v);
      }
    });
  }
};

// Int64 values above 2^53 do not survive double: integers are read exactly for printing.
int64_t read_int(const char* base, DType dtype, int64_t offset) {
  const char* p = base + offset * int64_t(itemsize(dtype));
  switch (dtype) {
    case DType::UInt8: return *reinterpret_cast<const uint8_t*>(p);
    case DType::Int8: return *reinterpret_cast<const int8_t*>(p);
    case DType::Int16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::Int32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::Int64: { int64_t v; std::memcpy(&v, p, 8); return v; }
    default: return *reinterpret_cast<const uint8_t*>(p) != 0;
  }
}

// Python's "{:.4f}", "{:.4e}" and "{:.0f}" for finite values.
std::string fixed_str(double v) {
  char buf[400];
  std::snprintf(buf, sizeof(buf), "%.*f", kPrecision, v);
  return buf;
}
std::string sci_str(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*e", kPrecision, v);
  return buf;
}
std::string int_str(double v) {
  char buf[400];
  std::snprintf(buf, sizeof(buf), "%.0f", v);
  return buf;
}

std::string nonfinite_str(double v) { return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"); }

class Formatter {
 public:
  Formatter(DType dtype, const std::vector<int64_t>& offsets, const char* base) : dtype_(dtype), base_(base) {
    floating_ = is_floating(dtype);
    ElementReader read{base, dtype};
    if (!floating_) {
      for (int64_t off : offsets) max_width_ = std::max(max_width_, raw_str(off).size());
      return;
    }
    std::vector<double> vals;
    for (int64_t off : offsets) {
      const double v = read(off);
      if (std::isfinite(v) && v != 0) vals.push_back(v);
    }
    if (vals.empty()) return;
    double mn = std::fabs(vals[0]), mx = mn;
    for (double v : vals) {
      mn = std::min(mn, std::fabs(v));
      mx = std::max(mx, std::fabs(v));
      if (v != std::ceil(v)) int_mode_ = false;
    }
    if (int_mode_) {
      if (mx / mn > 1000.0 || mx > 1.0e8) {
        sci_mode_ = true;
        for (double v : vals) max_width_ = std::max(max_width_, sci_str(v).size());
      } else {
        for (double v : vals) max_width_ = std::max(max_width_, int_str(v).size() + 1);
      }
    } else {
      if (mx / mn > 1000.0 || mx > 1.0e8 || mn < 1.0e-4) {
        sci_mode_ = true;
        for (double v : vals) max_width_ = std::max(max_width_, sci_str(v).size());
      } else {
        for (double v : vals) max_width_ = std::max(max_width_, fixed_str(v).size());
      }
    }
  }

  size_t width() const { return max_width_; }

  std::string format(int64_t off) const {
    std::string ret;
    if (floating_) {
      const double v = ElementReader{base_, dtype_}(off);
      if (!std::isfinite(v)) {
        ret = nonfinite_str(v);
      } else if (sci_mode_) {
        ret = sci_str(v);
      } else if (int_mode_) {
        ret = int_str(v) + ".";
      } else {
        ret = fixed_str(v);
      }
    } else {
      ret = raw_str(off);
    }
    if (ret.size() < max_width_) ret.insert(0, max_width_ - ret.size(), ' ');
    return ret;
  }

 private:
  std::string raw_str(int64_t off) const {
    if (dtype_ == DType::Bool) return read_int(base_, dtype_, off) ? "True" : "False";
    return std::to_string(read_int(base_, dtype_, off));
  }

  DType dtype_;
  const char* base_;
  bool floating_ = false;
  bool int_mode_ = true;
  bool sci_mode_ = false;
  size_t max_width_ = 1;
};

struct Printer {
  const Tensor& t;
  const char* base;
  bool summarize;

  // Offsets of the elements the formatter looks at (PyTorch's get_summarized_data).
  void collect(int64_t dim, int64_t offset, std::vector<int64_t>& out) const {
    if (dim == t.dim()) {
      out.push_back(offset);
      return;
    }
    const int64_t n = t.sizes()[size_t(dim)], st = t.strides()[size_t(dim)];
    if (summarize && n > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) collect(dim + 1, offset + i * st, out);
      for (int64_t i = n - kEdgeItems; i < n; ++i) collect(dim + 1, offset + i * st, out);
    } else {
      for (int64_t i = 0; i < n; ++i) collect(dim + 1, offset + i * st, out);
    }
  }

  std::string vector_str(int64_t offset, int64_t indent, const Formatter& f) const {
    const int64_t element_length = int64_t(f.width()) + 2;
    const int64_t per_line = std::max<int64_t>(1, (kLineWidth - indent) / element_length);
    const int64_t n = t.sizes().back(), st = t.strides().back();
    std::vector<std::string> data;
    if (summarize && n > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) data.push_back(f.format(offset + i * st));
      data.push_back(" ...");
      for (int64_t i = n - kEdgeItems; i < n; ++i) data.push_back(f.format(offset + i * st));
    } else {
      for (int64_t i = 0; i < n; ++i) data.push_back(f.format(offset + i * st));
    }
    std::string out = "[";
    for (size_t i = 0; i < data.size(); ++i) {
      if (i > 0) {
        if (int64_t(i) % per_line == 0) out += ",\n" + std::string(size_t(indent + 1), ' ');
        else out += ", ";
      }
      out += data[i];
    }
    return out + "]";
  }

  std::string str(int64_t dim, int64_t offset, int64_t indent, const Formatter& f) const {
    const int64_t remaining = t.dim() - dim;
    if (remaining == 0) return f.format(offset);
    if (remaining == 1) return vector_str(offset, indent, f);
    const int64_t n = t.sizes()[size_t(dim)], st = t.strides()[size_t(dim)];
    std::vector<std::string> slices;
    if (summarize && n > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) slices.push_back(str(dim + 1, offset + i * st, indent + 1, f));
      slices.push_back("...");
      for (int64_t i = n - kEdgeItems; i < n; ++i) slices.push_back(str(dim + 1, offset + i * st, indent + 1, f));
    } else {
      for (int64_t i = 0; i < n; ++i) slices.push_back(str(dim + 1, offset + i * st, indent + 1, f));
    }
    const std::string sep = "," + std::string(size_t(remaining - 1), '\n') + std::string(size_t(indent + 1), ' ');
    std::string out = "[";
    for (size_t i = 0; i < slices.size(); ++i) out += (i ? sep : "") + slices[i];
    return out + "]";
  }
};

std::string size_tuple(IntArrayRef sizes) {
  std::string s = "(";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  if (sizes.size() == 1) s += ",";
  return s + ")";
}

std::string add_suffixes(const std::string& tensor_str, const std::vector<std::string>& suffixes, int64_t indent) {
  std::string out = tensor_str;
  const size_t nl = tensor_str.rfind('\n');
  int64_t last_line_len = int64_t(tensor_str.size()) - (nl == std::string::npos ? -1 : int64_t(nl)) + 1;
  for (const auto& s : suffixes) {
    const int64_t len = int64_t(s.size());
    if (last_line_len + len + 2 > kLineWidth) {
      out += ",\n" + std::string(size_t(indent), ' ') + s;
      last_line_len = indent + len;
    } else {
      out += ", " + s;
      last_line_len += len + 2;
    }
  }
  return out + ")";
}

// The bracketed values of a host tensor, read as `dt` (offsets relative to its first element).
std::string format_values(const Tensor& host, DType dt, int64_t indent) {
  const auto* raw = static_cast<const char*>(host.raw_const_data_ptr());
  Printer p{host, raw, host.numel() > kThreshold};
  std::vector<int64_t> offsets;
  p.collect(0, 0, offsets);
  Formatter f(dt, offsets, raw);
  return p.str(0, 0, indent, f);
}

}  // namespace

std::string to_string(const Tensor& t) {
  if (!t.defined()) return "tensor(undefined)";
  const std::string prefix = "tensor(";
  const int64_t indent = int64_t(prefix.size());
  std::vector<std::string> suffixes;
  if (!t.is_cpu()) suffixes.push_back("device='" + t.device().str() + "'");
  const DType dt = t.dtype();
  const bool has_default_dtype = dt == default_dtype() || dt == kInt64 || dt == kBool;
  std::string body;
  if (t.device().type() == DeviceType::Meta) {
    suffixes.push_back("size=" + size_tuple(t.sizes()));
    if (dt != default_dtype()) suffixes.push_back("dtype=" + std::string(dtype_name(dt)));
    body = "...";
  } else if (t.numel() == 0) {
    if (t.dim() != 1) suffixes.push_back("size=" + size_tuple(t.sizes()));
    if (dt != default_dtype()) suffixes.push_back("dtype=" + std::string(dtype_name(dt)));
    body = "[]";
  } else if (t.key_set().has(Functionality::Sparse)) {
    // A 2:4 semi-structured tensor: its dense values, then size, dtype and layout, the way PyTorch
    // prints a tensor of a sparse layout.
    suffixes.push_back("size=" + size_tuple(t.sizes()));
    suffixes.push_back("dtype=" + std::string(dtype_name(dt)));
    suffixes.push_back("layout=sparse_semi_structured(2:4)");
    body = format_values(sparse::to_dense(t).to(Device(DeviceType::CPU)), dt, indent);
  } else if (const QuantParams* q = t.impl()->qparams()) {
    // As PyTorch: the dequantized values, then the representation and its parameters.
    body = format_values(detail::dequantize_reference(t), kFloat32, indent);
    suffixes.push_back("size=" + size_tuple(t.sizes()));
    suffixes.push_back("dtype=" + std::string(dtype_name(dt)));
    std::ostringstream params;
    params.precision(8);
    if (q->qscheme() == QScheme::PerTensorAffine) {
      suffixes.push_back("quantization_scheme=per_tensor_affine");
      params << q->scale();
      suffixes.push_back("scale=" + params.str());
      suffixes.push_back("zero_point=" + std::to_string(q->zero_point()));
    } else {
      suffixes.push_back("quantization_scheme=per_channel_affine");
      params << "scale=[";
      for (size_t c = 0; c < q->scales().size(); ++c) params << (c ? ", " : "") << q->scales()[c];
      params << "]";
      suffixes.push_back(params.str());
      std::string zps = "zero_point=[";
      for (size_t c = 0; c < q->zero_points().size(); ++c) zps += (c ? ", " : "") + std::to_string(q->zero_points()[c]);
      suffixes.push_back(zps + "]");
      suffixes.push_back("axis=" + std::to_string(q->axis()));
    }
  } else {
    if (!has_default_dtype) suffixes.push_back("dtype=" + std::string(dtype_name(dt)));
    body = format_values(t.is_cpu() ? t : t.cpu(), dt, indent);
  }
  return add_suffixes(prefix + body, suffixes, indent);
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << to_string(t); }

}  // namespace tessera
