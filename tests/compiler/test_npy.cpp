// NumPy .npy / .npz files (tessera/compiler/npy.h): the bytes NumPy writes, read back; malformed
// headers refused with one line.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "tessera/compiler/npy.h"
#include "tessera/error.h"

using namespace tessera;
using namespace tessera::compiler;

namespace {

std::vector<uint8_t> npy_bytes(const std::string& header, const std::vector<uint8_t>& data) {
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + char(header.size()) + '\0' + header;
  bytes.append(data.begin(), data.end());
  return {bytes.begin(), bytes.end()};
}

std::string error_of(const std::vector<uint8_t>& b) {
  try {
    npy_parse(b, "x.npy");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Npy, ReadsWhatNumPyWrites) {
  // np.save of np.array([[1, -2, 3], [4, 5, -6]], dtype=np.int16): NumPy's own header text.
  std::string header = "{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3), }";
  header.append(118 - header.size() - 1, ' ');
  header += '\n';
  std::vector<uint8_t> data;
  for (int16_t v : {1, -2, 3, 4, 5, -6})
    data.insert(data.end(), {uint8_t(v & 0xff), uint8_t(uint16_t(v) >> 8)});
  Tensor t = npy_parse(npy_bytes(header, data), "x.npy");
  EXPECT_EQ(t.dtype(), DType::Int16);
  EXPECT_EQ(std::vector<int64_t>(t.sizes().begin(), t.sizes().end()), (std::vector<int64_t>{2, 3}));
  const int16_t* p = t.data_ptr<int16_t>();
  EXPECT_EQ(p[1], -2);
  EXPECT_EQ(p[5], -6);
}

TEST(Npy, RoundTripsShapesAndDtypes) {
  for (std::vector<int64_t> sizes : {std::vector<int64_t>{}, {5}, {2, 0, 3}, {2, 3, 4}}) {
    for (DType d :
         {DType::Bool, DType::UInt8, DType::Int64, DType::Float16, DType::Float32, DType::Float64}) {
      Tensor t = make_tensor(sizes, d, Device(DeviceType::CPU));
      auto* p = static_cast<uint8_t*>(t.raw_data_ptr());
      for (size_t i = 0; i < t.nbytes(); ++i) p[i] = d == DType::Bool ? uint8_t(i % 2) : uint8_t(i * 13 + 5);
      Tensor back = npy_parse(npy_serialize(t), "rt.npy");
      EXPECT_EQ(back.dtype(), d);
      EXPECT_EQ(std::vector<int64_t>(back.sizes().begin(), back.sizes().end()), sizes);
      EXPECT_EQ(std::memcmp(back.raw_data_ptr(), t.raw_data_ptr(), t.nbytes()), 0);
    }
  }
  std::vector<uint8_t> b = npy_serialize(make_tensor({4}, DType::Float32, Device(DeviceType::CPU)));
  std::string header(b.begin() + 10, b.end() - 16);
  EXPECT_NE(header.find("'shape': (4,)"), std::string::npos) << header;
  EXPECT_EQ((10 + header.size()) % 64, 0u);
  EXPECT_THROW(npy_serialize(make_tensor({2}, DType::QInt8, Device(DeviceType::CPU))), Error);
}

// bfloat16 is read and written as 2-byte void, as NumPy saves an ml_dtypes.bfloat16 array (the header
// below is what np.save writes for np.array([1, -2], dtype=ml_dtypes.bfloat16)).
TEST(Npy, BFloat16IsTwoByteVoid) {
  const std::vector<uint8_t> data = {0x80, 0x3F, 0x00, 0xC0};  // 1.0 and -2.0 as bfloat16
  for (const char* descr : {"<V2", "|V2"}) {
    Tensor t = npy_parse(npy_bytes(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (2,), }", data), "bf.npy");
    ASSERT_EQ(t.dtype(), DType::BFloat16);
    Tensor f = t.to(DType::Float32);
    EXPECT_EQ(f.data_ptr<float>()[0], 1.0f);
    EXPECT_EQ(f.data_ptr<float>()[1], -2.0f);
    std::vector<uint8_t> b = npy_serialize(t);
    EXPECT_NE(std::string(b.begin(), b.end()).find("'descr': '<V2'"), std::string::npos);
    EXPECT_EQ(std::memcmp(b.data() + b.size() - 4, data.data(), 4), 0);
  }
}

TEST(Npy, MalformedFilesAreRefused) {
  std::vector<uint8_t> four_floats(16, 0);
  EXPECT_NE(error_of(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", four_floats))
                .find("needs 20 bytes"),
            std::string::npos);
  EXPECT_NE(error_of(npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", four_floats))
                .find("unsupported dtype '>f4'"),
            std::string::npos);
  EXPECT_NE(error_of(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", four_floats))
                .find("Fortran order"),
            std::string::npos);
  EXPECT_NE(error_of(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
                               four_floats))
                .find("too large"),
            std::string::npos);
  EXPECT_NE(error_of(npy_bytes("{'descr': '<f4', 'shape': (4,", four_floats)).find("x.npy"),
            std::string::npos);
  EXPECT_NE(error_of({'P', 'K'}).find("not a .npy file"), std::string::npos);
  std::vector<uint8_t> long_header = npy_bytes("{}", {});
  long_header[8] = 0xff;
  EXPECT_NE(error_of(long_header).find("truncated"), std::string::npos);
}
