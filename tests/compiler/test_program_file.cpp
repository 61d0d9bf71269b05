// The program file (Note [Program file]): the zip archive, the safetensors layout, program.json,
// and what loading refuses, each with a one-line message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/compiler/program_file.h"
#include "tessera/compiler/safetensors.h"
#include "tessera/compiler/zip_archive.h"
#include "tessera/error.h"
#include "test_programs.h"

using namespace tessera;
using namespace tessera::compiler;
using json = nlohmann::json;
namespace tp = tessera::compiler::test_programs;

namespace {

std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("tessera_program_file_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

void write_all(const std::string& path, const std::vector<uint8_t>& data) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
}

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// The error's message, or "" when `fn` did not throw.
template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << "not one line: " << m;
    return m;
  }
  return "";
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

// Rewrites program.json inside a saved program file.
std::string with_program_json(const ExportedProgram& ep, const std::string& name,
                              const std::function<void(json&)>& edit) {
  json j = json::parse(program_json(ep));
  edit(j);
  std::string text = j.dump();
  std::map<std::string, Tensor> weights;
  for (const auto& [k, v] : ep.weights) weights[k] = v;
  std::vector<uint8_t> st = safetensors_serialize(weights);
  std::string path = temp_path(name);
  ZipWriter zip(path);
  zip.add("weights.safetensors", st);
  zip.add("program.json", as_bytes(text), 1);
  zip.finish();
  return path;
}

}  // namespace

TEST(ZipArchive, StoredEntriesReadBackInPlaceAndAligned) {
  std::string path = temp_path("two.zip");
  std::string a = "hello", b(1000, 'x');
  ZipWriter zip(path);
  zip.add("a.txt", as_bytes(a));
  zip.add("dir/b.bin", as_bytes(b), 128);
  zip.finish();
  ZipReader r(Bytes::map_file(path), path);
  ASSERT_EQ(r.entries().size(), 2u);
  const ZipEntry* ea = r.find("a.txt");
  const ZipEntry* eb = r.find("dir/b.bin");
  ASSERT_TRUE(ea && eb);
  EXPECT_EQ(ea->offset % 64, 0u);
  EXPECT_EQ(eb->offset % 128, 0u);
  auto da = r.stored_data(*ea);
  EXPECT_EQ(std::string(da.begin(), da.end()), a);
  EXPECT_EQ(da.data(), r.bytes()->data() + ea->offset);  // no copy
  auto db = r.read(*eb);
  EXPECT_EQ(std::string(db.begin(), db.end()), b);
}

TEST(ZipArchive, TruncatedOrCorruptArchivesAreRefused) {
  std::string path = temp_path("t.zip");
  std::string a(300, 'a');
  {
    ZipWriter zip(path);
    zip.add("a.txt", as_bytes(a));
    zip.finish();
  }
  std::vector<uint8_t> bytes = read_all(path);
  for (size_t cut : {size_t(0), size_t(10), bytes.size() / 2, bytes.size() - 1}) {
    std::string m = error_of([&] { ZipReader(Bytes::copy_of({bytes.data(), cut}), "cut.zip"); });
    EXPECT_CONTAINS(m, "cut.zip") << " cut at " << cut << " of " << bytes.size();
  }
  std::vector<uint8_t> flipped = bytes;
  flipped[100] ^= 0xff;  // inside the data
  ZipReader r(Bytes::copy_of(flipped), "flipped.zip");
  EXPECT_CONTAINS(error_of([&] { r.stored_data(*r.find("a.txt")); }), "CRC-32");
}

TEST(Safetensors, RoundTripsEveryDtypeAligned) {
  std::map<std::string, Tensor> in;
  for (DType t : {DType::Bool, DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64,
                  DType::Float16, DType::BFloat16, DType::Float32, DType::Float64}) {
    Tensor x = make_tensor({2, 3}, t, Device(DeviceType::CPU));
    auto* p = static_cast<uint8_t*>(x.raw_data_ptr());
    for (size_t i = 0; i < x.nbytes(); ++i) p[i] = t == DType::Bool ? uint8_t(i % 2) : uint8_t(i * 7 + 1);
    in[std::string(safetensors_dtype_name(t))] = x;
  }
  std::vector<uint8_t> bytes = safetensors_serialize(in, {{"k", "v"}});
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 64, 0u);
  auto owner = Bytes::copy_of(bytes);
  SafetensorsFile f = safetensors_parse({owner->data(), owner->size()}, owner, "w.safetensors");
  EXPECT_EQ(f.metadata.at("k"), "v");
  ASSERT_EQ(f.tensors.size(), in.size());
  for (const auto& [name, t] : in) {
    const Tensor& back = f.tensors.at(name);
    EXPECT_EQ(back.dtype(), t.dtype());
    EXPECT_EQ(std::vector<int64_t>(back.sizes().begin(), back.sizes().end()), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(std::memcmp(back.raw_data_ptr(), t.raw_data_ptr(), t.nbytes()), 0) << name;
    auto* p = static_cast<const uint8_t*>(back.raw_data_ptr());
    EXPECT_TRUE(p >= owner->data() && p < owner->data() + owner->size()) << name << " was copied";
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % t.itemsize(), 0u);
  }
}

namespace {

std::vector<uint8_t> safetensors_with_header(const std::string& header, size_t data_bytes) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes += char(uint8_t(uint64_t(header.size()) >> (8 * i)));
  bytes += header;
  bytes.append(data_bytes, '\1');
  return {bytes.begin(), bytes.end()};
}

std::string parse_error(const std::string& header, size_t data_bytes) {
  auto b = safetensors_with_header(header, data_bytes);
  return error_of([&] { safetensors_parse(b, nullptr, "w.safetensors"); });
}

}  // namespace

TEST(Safetensors, MalformedHeadersAreRefusedNamingTheEntry) {
  EXPECT_CONTAINS(parse_error(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                  "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                              12),
                  "overlap");
  EXPECT_CONTAINS(parse_error(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4),
                  "outside");
  EXPECT_CONTAINS(parse_error(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8),
                  "needs 12");
  EXPECT_CONTAINS(parse_error(R"({"a": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}})", 8), "F33");
  EXPECT_CONTAINS(parse_error(R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8),
                  "non-negative");
  EXPECT_CONTAINS(parse_error(R"({"a": {"dtype": "F32", "shape": [2]}})", 8), "'data_offsets' is missing");
  EXPECT_CONTAINS(parse_error(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296],
                                  "data_offsets": [0, 8]}})",
                              8),
                  "63 bits");
  EXPECT_CONTAINS(parse_error("{not json", 0), "not valid JSON");
  std::vector<uint8_t> short_header = safetensors_with_header("{}", 0);
  short_header[0] = 200;
  EXPECT_CONTAINS(error_of([&] { safetensors_parse(short_header, nullptr, "w.safetensors"); }), "truncated");
}

TEST(ProgramFile, SavesAndLoadsTheSameProgram) {
  ExportedProgram ep = tp::linear_relu_program();
  std::string path = temp_path("linear_relu.tsr");
  save(ep, path);
  ExportedProgram back = load_program(path);
  EXPECT_EQ(back.graph_string(), ep.graph_string());
  EXPECT_EQ(back.op_contract_version, "test");
  ASSERT_EQ(back.weights.size(), 2u);
  for (const char* name : {"w", "b"}) {
    const Tensor& w = back.weights.at(name);
    ASSERT_EQ(w.numel(), ep.weights.at(name).numel());
    EXPECT_EQ(std::memcmp(w.raw_data_ptr(), ep.weights.at(name).raw_data_ptr(), w.nbytes()), 0);
  }
  // The weights view the mapped file: the archive keeps them at a 64-byte aligned offset.
  ZipReader zip(Bytes::map_file(path), path);
  EXPECT_EQ(zip.entries().at(0).name, "weights.safetensors");
  EXPECT_EQ(zip.entries().at(0).offset % 64, 0u);
  EXPECT_FALSE(zip.entries().at(0).offset == 0);
}

TEST(ProgramFile, RunGivesTheReferenceResultAfterLoading) {
  ExportedProgram ep = load_program([] {
    std::string path = temp_path("run.tsr");
    save(tp::linear_relu_program(), path);
    return path;
  }());
  for (int64_t batch : {1, 3, 7}) {
    Tensor x = tp::filled_tensor({batch, 4}, 1.5f, 0.7f);
    std::vector<Tensor> out = ep.run({x});
    ASSERT_EQ(out.size(), 2u);
    const float* px = x.data_ptr<float>();
    const float* pw = ep.weights.at("w").data_ptr<float>();
    const float* pb = ep.weights.at("b").data_ptr<float>();
    Tensor z = out[0].contiguous(), y = out[1].contiguous();
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t o = 0; o < 4; ++o) {
        double acc = pb[o];
        for (int64_t k = 0; k < 4; ++k) acc += double(px[i * 4 + k]) * double(pw[o * 4 + k]);
        double relu = acc > 0 ? acc : 0;
        EXPECT_NEAR(y.data_ptr<float>()[i * 4 + o], relu, 1e-5);
        EXPECT_NEAR(z.data_ptr<float>()[i * 4 + o], relu + 0.5 * px[i * 4 + o], 1e-5);
      }
  }
  EXPECT_CONTAINS(error_of([&] { ep.run({tp::filled_tensor({65, 4}, 1, 0)}); }), "batch = 65 is outside its range [1, 64]");
  EXPECT_CONTAINS(error_of([&] { ep.run({tp::filled_tensor({2, 5}, 1, 0)}); }), "dimension 1 must be 4)");
}

TEST(ProgramFile, UnknownMajorIsRefusedNamingBothVersions) {
  ExportedProgram ep = tp::linear_relu_program();
  std::string path = with_program_json(ep, "major2.tsr", [](json& j) {
    j["format_version"]["major"] = 2;
    j["format_version"]["minor"] = 0;
  });
  std::string m = error_of([&] { load_program(path); });
  EXPECT_CONTAINS(m, "format_version");
  EXPECT_CONTAINS(m, "format 2.0");
  EXPECT_CONTAINS(m, "reads 1.x");
}

// Format 1.1: what a compiler plugin compiled the program into (Note [Compiled artifact
// compatibility] in plugin_abi.h) goes into program.json and comes back, checked.
TEST(ProgramFile, CompiledRecordRoundTripsAndIsChecked) {
  ExportedProgram ep = tp::linear_relu_program();
  const json plain = json::parse(program_json(ep));
  EXPECT_FALSE(plain.contains("compiled"));
  EXPECT_EQ(plain["format_version"]["minor"], 1);
  std::vector<int32_t> groups(ep.graph.nodes.size(), -1);
  groups[1] = 0;
  ep.compiled = tessera::compiler::CompiledArtifact{"some_compiler", "cpu", "some-compiler 2.1 isa", groups};
  const ExportedProgram back = tessera::compiler::parse_program_json(program_json(ep));
  ASSERT_TRUE(back.compiled);
  EXPECT_EQ(back.compiled->backend, "some_compiler");
  EXPECT_EQ(back.compiled->device, "cpu");
  EXPECT_EQ(back.compiled->compatibility, "some-compiler 2.1 isa");
  EXPECT_EQ(back.compiled->group_of_node, groups);
  json j = json::parse(program_json(ep));
  j["compiled"]["group_of_node"].push_back(0);
  EXPECT_CONTAINS(error_of([&] { tessera::compiler::parse_program_json(j.dump()); }),
                  "compiled.group_of_node: has " + std::to_string(groups.size() + 1) + " entries");
  j = json::parse(program_json(ep));
  j["compiled"]["group_of_node"][0] = -7;
  EXPECT_CONTAINS(error_of([&] { tessera::compiler::parse_program_json(j.dump()); }), "group -7 is not -1");
  j.erase("compiled");
  j["compiled"] = {{"backend", "x"}};
  EXPECT_CONTAINS(error_of([&] { tessera::compiler::parse_program_json(j.dump()); }), "'device' is missing");
}

TEST(ProgramFile, NewerMinorLoadsIgnoringUnknownFields) {
  ExportedProgram ep = tp::linear_relu_program();
  std::string path = with_program_json(ep, "minor9.tsr", [](json& j) {
    j["format_version"]["minor"] = 9;
    j["something_new"] = {1, 2, 3};
    j["nodes"][3]["annotation"] = "fused";
    j["values"][0]["layout"] = "nhwc";
  });
  EXPECT_EQ(load_program(path).graph_string(), ep.graph_string());
}

TEST(ProgramFile, MissingOrMistypedFieldsNameTheEntryAndField) {
  ExportedProgram ep = tp::linear_relu_program();
  struct Case {
    std::function<void(json&)> edit;
    const char* expected;
  };
  std::vector<Case> cases = {
      {[](json& j) { j.erase("nodes"); }, "program.json: field 'nodes' is missing"},
      {[](json& j) { j["nodes"][3]["args"][1]["value"] = "w"; },
       "program.json: nodes[3].args[1].value: expected an integer, got a JSON string"},
      {[](json& j) { j["nodes"][3]["args"][1]["value"] = 99; },
       "nodes[3].args[1].value: value id 99 out of range"},
      {[](json& j) { j["values"][2]["sizes"][0] = "4 +"; }, "values[2].sizes[0]"},
      {[](json& j) { j["values"][1]["dtype"] = "f33"; }, "values[1].dtype: unknown dtype 'f33'"},
      {[](json& j) { j["nodes"][5]["args"][2]["type"] = "complex"; },
       "nodes[5].args[2].type: unknown constant type"},
      {[](json& j) { j["ranges"].erase("batch"); }, "nodes[0].outputs: placeholder 'x': symbol 'batch' of "},
      {[](json& j) { j["nodes"][4]["args"][0]["value"] = 5; },
       "nodes[4].args: node 4 ('relu') uses %5 before it is produced"},
      {[](json& j) { j["signature"]["outputs"][0]["value"] = 4; }, ".args: output 0 is %5 but signature output "},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string path = with_program_json(ep, "field" + std::to_string(i) + ".tsr", cases[i].edit);
    std::string m = error_of([&] { load_program(path); });
    EXPECT_CONTAINS(m, cases[i].expected);
    EXPECT_CONTAINS(m, path);
  }
}

TEST(ProgramFile, AnOpMissingFromThisRuntimeIsRefused) {
  ExportedProgram ep = tp::linear_relu_program();
  std::string path =
      with_program_json(ep, "unknown_op.tsr", [](json& j) { j["nodes"][4]["target"] = "fancy_relu.vendor"; });
  std::string m = error_of([&] { load_program(path); });
  EXPECT_CONTAINS(m, "nodes[4].target: node 4 ('fancy_relu.vendor'): the op is not in this runtime's op contract");
  EXPECT_CONTAINS(m, "load the plugin that defines it");
}

TEST(ProgramFile, AWeightOfTheWrongSizeIsRefused) {
  ExportedProgram ep = tp::linear_relu_program();
  ep.weights["b"] = tp::filled_tensor({5}, 1, 0);
  std::string path = temp_path("wrong_weight.tsr");
  save(ep, path);
  std::string m = error_of([&] { load_program(path); });
  EXPECT_CONTAINS(m, "weights.safetensors: tensor 'b' is f32[5] but program.json declares it f32[4] cpu:0");
  ep.weights.erase("b");
  EXPECT_CONTAINS(error_of([&] { save(ep, temp_path("no_weight.tsr")); }), "no such weight");
}

TEST(ProgramFile, ATruncatedFileGivesOneLine) {
  std::string path = temp_path("full.tsr");
  save(tp::linear_relu_program(), path);
  std::vector<uint8_t> bytes = read_all(path);
  for (size_t cut : {size_t(0), size_t(7), size_t(200), bytes.size() / 2, bytes.size() - 10}) {
    std::string cut_path = temp_path("cut" + std::to_string(cut) + ".tsr");
    write_all(cut_path, {bytes.begin(), bytes.begin() + ptrdiff_t(cut)});
    std::string m = error_of([&] { load_program(cut_path); });
    EXPECT_CONTAINS(m, cut_path);
  }
  EXPECT_CONTAINS(error_of([&] { load_program(temp_path("does_not_exist.tsr")); }), "cannot open");
}
