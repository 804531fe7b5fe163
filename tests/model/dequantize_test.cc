// Dequantization: half conversions at their edges, hand-built Q4_0 / Q4_1 / Q8_0 blocks checked
// element by element, the two-thread DequantizeAll, and the default model's tensors against
// values the python `gguf` package produced (tests/model/make_dequant_fixture.py).
#include "model/dequantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "model/default_model.h"
#include "nlohmann/json.hpp"
#include "tests/model/gguf_test_writer.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::GgufTestWriter;
using ::kvserve::testing::StatusIs;
using ::testing::HasSubstr;

TEST(HalfTest, DecodesKnownValues) {
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xC000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(HalfToFloat(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7E00)));
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
}

TEST(HalfTest, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << std::hex << h;
    } else {
      EXPECT_EQ(FloatToHalf(f), h) << std::hex << h;
    }
  }
}

TEST(HalfTest, EncodingRoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // halfway: to even (down)
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // halfway: to even (up)
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // overflows to infinity
  EXPECT_EQ(FloatToHalf(1e-8f), 0x0000);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25) * 1.5f), 0x0001);  // rounds up to the subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1023.75f, -24)), 0x0400);     // carries into a normal
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
}

TEST(BFloat16Test, ConvertsAndRoundsToNearestEven) {
  EXPECT_EQ(BFloat16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(0xC0A0), -5.0f);
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // halfway, even: down
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // halfway, even: up
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
}

std::string HalfBytes(float value) {
  std::string out;
  GgufTestWriter::Put<uint16_t>(&out, FloatToHalf(value));
  return out;
}

TEST(DequantizeTest, Q4_0BlockIsNibbleMinusEightTimesScale) {
  // Byte j holds low nibble j (element j) and high nibble 15 - j (element j + 16).
  std::string block = HalfBytes(0.5f);
  for (int j = 0; j < 16; ++j) block.push_back(static_cast<char>(j | ((15 - j) << 4)));
  float out[32];
  KVSERVE_ASSERT_OK(Dequantize(GgmlType::kQ4_0, reinterpret_cast<const uint8_t*>(block.data()),
                               block.size(), 32, out));
  EXPECT_EQ(out[0], -4.0f);   // (0 - 8) * 0.5
  EXPECT_EQ(out[8], 0.0f);    // (8 - 8) * 0.5
  EXPECT_EQ(out[15], 3.5f);   // (15 - 8) * 0.5
  EXPECT_EQ(out[16], 3.5f);   // high nibble of byte 0 is 15
  EXPECT_EQ(out[31], -4.0f);  // high nibble of byte 15 is 0
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], (j - 8) * 0.5f) << j;
    EXPECT_EQ(out[j + 16], (7 - j) * 0.5f) << j;
  }
}

TEST(DequantizeTest, Q4_1BlockIsNibbleTimesScalePlusMin) {
  std::string data;
  for (int b = 0; b < 2; ++b) {  // two blocks: scale 0.25 / min -1, then scale 2 / min 10
    data += HalfBytes(b == 0 ? 0.25f : 2.0f) + HalfBytes(b == 0 ? -1.0f : 10.0f);
    for (int j = 0; j < 16; ++j) data.push_back(static_cast<char>(((j + b) % 16) | (j << 4)));
  }
  float out[64];
  KVSERVE_ASSERT_OK(Dequantize(GgmlType::kQ4_1, reinterpret_cast<const uint8_t*>(data.data()),
                               data.size(), 64, out));
  EXPECT_EQ(out[0], -1.0f);
  EXPECT_EQ(out[15], 2.75f);  // 15 * 0.25 - 1
  EXPECT_EQ(out[32], 12.0f);  // block 1: 1 * 2 + 10
  EXPECT_EQ(out[47], 10.0f);  // (15 + 1) % 16 = 0
  EXPECT_EQ(out[63], 40.0f);  // high nibble 15: 15 * 2 + 10
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], j * 0.25f - 1.0f);
    EXPECT_EQ(out[j + 16], j * 0.25f - 1.0f);
    EXPECT_EQ(out[32 + j], ((j + 1) % 16) * 2.0f + 10.0f);
  }
}

TEST(DequantizeTest, Q8_0BlockIsSignedByteTimesScale) {
  std::string block = HalfBytes(0.125f);
  for (int j = 0; j < 32; ++j) block.push_back(static_cast<char>(static_cast<int8_t>(j * 8 - 128)));
  float out[32];
  KVSERVE_ASSERT_OK(Dequantize(GgmlType::kQ8_0, reinterpret_cast<const uint8_t*>(block.data()),
                               block.size(), 32, out));
  EXPECT_EQ(out[0], -16.0f);
  EXPECT_EQ(out[16], 0.0f);
  EXPECT_EQ(out[31], 15.0f);  // 120 * 0.125
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], (j * 8 - 128) * 0.125f);
}

TEST(DequantizeTest, Q4_KBlockUnpacksSixBitScalesAndMins) {
  // d 0.5, dmin 0.25. Sub-block (scale, min): 0 (1, 0), 1 (2, 4), 2 (3, 8), 3 (63, 1),
  // 4 (37 = 0b10'0101, 18 = 0b01'0010), 5-7 (1, 0).
  std::string block = HalfBytes(0.5f) + HalfBytes(0.25f);
  const uint8_t packed[12] = {1 | (2 << 6), 2, 3, 63, 0 | (1 << 6), 4, 8, 1, 5 | (2 << 4), 1, 1, 1};
  block.append(reinterpret_cast<const char*>(packed), 12);
  for (int i = 0; i < 128; ++i) block.push_back(static_cast<char>((i % 16) | ((15 - i % 16) << 4)));
  ASSERT_EQ(block.size(), 144u);
  float out[256];
  KVSERVE_ASSERT_OK(Dequantize(GgmlType::kQ4_K, reinterpret_cast<const uint8_t*>(block.data()),
                               block.size(), 256, out));
  EXPECT_EQ(out[0], 0.0f);      // sub 0, low nibble of byte 0 = 0
  EXPECT_EQ(out[5], 2.5f);      // sub 0: 0.5 * 1 * 5
  EXPECT_EQ(out[35], 11.0f);    // sub 1, high nibble of byte 3 = 12: 0.5 * 2 * 12 - 0.25 * 4
  EXPECT_EQ(out[71], 8.5f);     // sub 2, low nibble of byte 39 = 7: 0.5 * 3 * 7 - 0.25 * 8
  EXPECT_EQ(out[97], 440.75f);  // sub 3, high nibble of byte 33 = 14: 0.5 * 63 * 14 - 0.25
  EXPECT_EQ(out[130], 32.5f);   // sub 4, low nibble of byte 66 = 2: 0.5 * 37 * 2 - 0.25 * 18
  EXPECT_EQ(out[255], 0.0f);    // sub 7, high nibble of byte 127 = 0
}

TEST(DequantizeTest, Q6_KBlockCombinesLowAndHighBits) {
  // ql[i] = i; every qh byte 0b11'10'01'00 (element group k gets high bits k); scales i - 8.
  std::string block;
  for (int i = 0; i < 128; ++i) block.push_back(static_cast<char>(i));
  block.append(64, static_cast<char>(0xE4));
  for (int i = 0; i < 16; ++i) block.push_back(static_cast<char>(i - 8));
  block += HalfBytes(0.5f);
  ASSERT_EQ(block.size(), 210u);
  float out[256];
  KVSERVE_ASSERT_OK(Dequantize(GgmlType::kQ6_K, reinterpret_cast<const uint8_t*>(block.data()),
                               block.size(), 256, out));
  EXPECT_EQ(out[0], 128.0f);    // q = 0 - 32, scale -8
  EXPECT_EQ(out[33], 45.0f);    // low nibble of ql[33] = 1, high 1: q = 17 - 32, scale -6
  EXPECT_EQ(out[84], -1.5f);    // high nibble of ql[20] = 1, high 2: q = 33 - 32, scale -3
  EXPECT_EQ(out[127], -9.5f);   // high nibble of ql[63] = 3, high 3: q = 51 - 32, scale -1
  EXPECT_EQ(out[145], -15.5f);  // low nibble of ql[81] = 1, high 0: q = -31, scale 1
  EXPECT_EQ(out[255], 80.5f);   // high nibble of ql[127] = 7, high 3: q = 55 - 32, scale 7
}

TEST(DequantizeTest, RandomBlocksMatchThePythonGgufPackage) {
  std::ifstream fixture_file(std::string(KVSERVE_SOURCE_DIR) +
                             "/tests/model/fixtures/dequant_smollm2.json");
  ASSERT_TRUE(fixture_file.good());
  const nlohmann::json fixture = nlohmann::json::parse(fixture_file);
  ASSERT_EQ(fixture["blocks"].size(), 6u);
  for (const nlohmann::json& blocks : fixture["blocks"]) {
    const std::string type = blocks["type"];
    SCOPED_TRACE(type);
    const std::string hex = blocks["hex"];
    std::string bytes;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
      bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    }
    const std::vector<float> expected = blocks["values"];
    GgmlType ggml_type = GgmlType::kF32;
    for (GgmlType t : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ4_K,
                       GgmlType::kQ6_K, GgmlType::kQ5_K}) {
      if (GgmlTypeName(t) == type) ggml_type = t;
    }
    ASSERT_NE(ggml_type, GgmlType::kF32);
    std::vector<float> values(expected.size());
    KVSERVE_ASSERT_OK(Dequantize(ggml_type, reinterpret_cast<const uint8_t*>(bytes.data()),
                                 bytes.size(), static_cast<int64_t>(values.size()), values.data()));
    for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(values[i], expected[i]) << i;
  }
}

TEST(DequantizeTest, PlainFormatsDecodeEachElement) {
  const std::vector<float> values = {1.0f, -0.5f, 3.0f, 1e-3f};
  std::string f16, bf16;
  for (float v : values) {
    GgufTestWriter::Put<uint16_t>(&f16, FloatToHalf(v));
    GgufTestWriter::Put<uint16_t>(&bf16, FloatToBFloat16(v));
  }
  float out[4];
  KVSERVE_ASSERT_OK(
      Dequantize(GgmlType::kF16, reinterpret_cast<const uint8_t*>(f16.data()), 8, 4, out));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], HalfToFloat(FloatToHalf(values[i])));
  KVSERVE_ASSERT_OK(
      Dequantize(GgmlType::kBF16, reinterpret_cast<const uint8_t*>(bf16.data()), 8, 4, out));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], values[i]);  // exactly representable
  EXPECT_NEAR(out[3], 1e-3f, 1e-5f);
  KVSERVE_ASSERT_OK(
      Dequantize(GgmlType::kF32, reinterpret_cast<const uint8_t*>(values.data()), 16, 4, out));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], values[i]);
}

TEST(DequantizeTest, RejectsSizeMismatchesAndUnknownTypes) {
  const std::string bytes(64, '\0');
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  float out[64];
  EXPECT_THAT(Dequantize(GgmlType::kQ8_0, data, 34, 31, out),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Dequantize(GgmlType::kQ8_0, data, 35, 32, out),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Dequantize(GgmlType::kF32, data, 60, 16, out),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::Status unknown = Dequantize(static_cast<GgmlType>(10), data, 64, 32, out);
  EXPECT_THAT(unknown, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("type(10)")));
}

TEST(DequantizeAllTest, TwoThreadsMatchOneAndErrorsNameTheTensor) {
  std::vector<std::string> blobs;
  for (int t = 0; t < 7; ++t) {
    std::string blob;
    for (int b = 0; b < 3 + 5 * t; ++b) {
      blob += HalfBytes(0.01f * (t + 1));
      for (int j = 0; j < 32; ++j) blob.push_back(static_cast<char>(j * 7 + b + t));
    }
    blobs.push_back(blob);
  }
  std::vector<std::vector<float>> one(blobs.size()), two(blobs.size());
  auto jobs_for = [&](std::vector<std::vector<float>>* outs) {
    std::vector<DequantizeJob> jobs;
    for (size_t t = 0; t < blobs.size(); ++t) {
      jobs.push_back({"t" + std::to_string(t), GgmlType::kQ8_0,
                      reinterpret_cast<const uint8_t*>(blobs[t].data()), blobs[t].size(),
                      static_cast<int64_t>(blobs[t].size() / 34 * 32), &(*outs)[t]});
    }
    return jobs;
  };
  KVSERVE_ASSERT_OK(DequantizeAll(jobs_for(&one), 1));
  KVSERVE_ASSERT_OK(DequantizeAll(jobs_for(&two), 2));
  EXPECT_EQ(one, two);
  EXPECT_EQ(one[6].size(), 33u * 32u);
  std::vector<DequantizeJob> bad = jobs_for(&two);
  bad[4].num_bytes -= 1;
  absl::Status status = DequantizeAll(bad, 2);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t4: ")));
}

TEST(DequantizeTest, DefaultModelMatchesThePythonGgufPackage) {
  const std::string path = DefaultModelPath();
  ASSERT_TRUE(std::filesystem::exists(path))
      << path << " is missing: run scripts/setup.sh to fetch the default model";
  std::ifstream fixture_file(std::string(KVSERVE_SOURCE_DIR) +
                             "/tests/model/fixtures/dequant_smollm2.json");
  ASSERT_TRUE(fixture_file.good());
  const nlohmann::json fixture = nlohmann::json::parse(fixture_file);
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  KVSERVE_ASSERT_OK(file);
  for (const nlohmann::json& expected : fixture["tensors"]) {
    const std::string name = expected["name"];
    SCOPED_TRACE(name);
    const GgufTensorInfo* info = (*file)->FindTensor(name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(GgmlTypeName(info->type), expected["type"].get<std::string>());
    EXPECT_EQ(info->dims, expected["dims"].get<std::vector<int64_t>>());
    std::vector<float> values(info->num_elements());
    KVSERVE_ASSERT_OK(
        Dequantize(info->type, info->data, info->num_bytes, info->num_elements(), values.data()));
    const std::vector<float> first = expected["first"];
    for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(values[i], first[i]) << i;
    const size_t stride = expected["stride"];
    const std::vector<float> strided = expected["strided"];
    for (size_t i = 0; i < strided.size(); ++i) {
      EXPECT_EQ(values[i * stride], strided[i]) << i * stride;
    }
    double sum = 0, sum_abs = 0, sum_sq = 0;
    for (float v : values) {
      sum += v;
      sum_abs += std::fabs(v);
      sum_sq += static_cast<double>(v) * v;
    }
    const double tolerance = 1e-9 * sum_abs + 1e-9;  // only the summation order differs
    EXPECT_NEAR(sum, expected["sum"].get<double>(), tolerance);
    EXPECT_NEAR(sum_abs, expected["sum_abs"].get<double>(), tolerance);
    EXPECT_NEAR(sum_sq, expected["sum_sq"].get<double>(), 1e-9 * sum_sq);
  }
}

}  // namespace
}  // namespace kvserve
