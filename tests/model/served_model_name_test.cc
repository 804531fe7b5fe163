#include "model/served_model_name.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace {

TEST(DefaultServedModelNameTest, AGgufFileIsItsNameWithoutEncodingAndShard) {
  EXPECT_EQ(DefaultServedModelName("/root/.cache/kvserve/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
            "SmolLM2-135M-Instruct");
  EXPECT_EQ(DefaultServedModelName("Qwen2.5-0.5B-Instruct-Q4_K_M.gguf"), "Qwen2.5-0.5B-Instruct");
  EXPECT_EQ(DefaultServedModelName("m/Llama-3.2-1B-Instruct-bf16.gguf"), "Llama-3.2-1B-Instruct");
  EXPECT_EQ(DefaultServedModelName("m/Mistral-7B-v0.3.IQ4_XS.gguf"), "Mistral-7B-v0.3");
  EXPECT_EQ(DefaultServedModelName("m/big-Q8_0-00002-of-00003.gguf"), "big");
  EXPECT_EQ(DefaultServedModelName("m/model.gguf"), "model");
  // A version or size part is not an encoding.
  EXPECT_EQ(DefaultServedModelName("m/phi-2.gguf"), "phi-2");
  EXPECT_EQ(DefaultServedModelName("m/Qwen2-7B.gguf"), "Qwen2-7B");
}

TEST(DefaultServedModelNameTest, NeverHoldsWhiteSpace) {
  EXPECT_EQ(DefaultServedModelName("/models/My Model Q4_0.gguf"), "My-Model-Q4_0");
  EXPECT_EQ(DefaultServedModelName("/models/My Model.Q4_0.gguf"), "My-Model");
}

TEST(DefaultServedModelNameTest, ADirectoryIsItsName) {
  EXPECT_EQ(DefaultServedModelName("/models/Qwen2.5-0.5B-Instruct/"), "Qwen2.5-0.5B-Instruct");
  EXPECT_EQ(DefaultServedModelName("/models/SmolLM2-135M"), "SmolLM2-135M");
}

TEST(DefaultServedModelNameTest, ASyntheticSpecIsItsPreset) {
  EXPECT_EQ(DefaultServedModelName("synthetic:tiny"), "synthetic-tiny");
  EXPECT_EQ(DefaultServedModelName("synthetic:smollm2:layers=2:seed=3"), "synthetic-smollm2");
}

TEST(IsGgufEncodingNameTest, KnowsTheEncodingsAndNothingElse) {
  for (const char* name : {"F32", "f16", "BF16", "Q4_0", "q4_1", "Q8_0", "Q4_K_M", "Q3_K_S", "Q6_K",
                           "IQ4_XS", "IQ2_XXS", "TQ1_0"}) {
    EXPECT_TRUE(IsGgufEncodingName(name)) << name;
  }
  for (const char* name : {"", "Q", "Instruct", "7B", "v0", "Q4_", "Qwen2", "IQ", "Q4__0"}) {
    EXPECT_FALSE(IsGgufEncodingName(name)) << name;
  }
}

}  // namespace
}  // namespace kvserve
