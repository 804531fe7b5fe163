// Tensor-parallel shards (model/tensor_parallel.h): the head and MLP arithmetic, the errors for
// models that cannot be split, and every loader (synthetic, GGUF as fp32 or as stored blocks,
// Hugging Face) reading exactly the part of each tensor the rules give a rank: the same values
// the whole model holds there.
#include "model/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "model/gguf_model.h"
#include "model/synthetic_weights.h"
#include "model/weights_loader.h"
#include "tests/model/gguf_test_writer.h"
#include "tests/model/safetensors_test_writer.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::QuantizedModelGguf;
using ::kvserve::testing::StatusIs;
using ::kvserve::testing::TempDir;
using ::kvserve::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::_;

ModelConfig Heads(int32_t heads, int32_t kv_heads, int32_t intermediate = 256) {
  ModelConfig c = *SyntheticConfig("tiny-tp");
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = 16;
  c.hidden_size = heads * 16;
  c.intermediate_size = intermediate;
  return c;
}

TEST(TensorParallelTest, SplitsQueryHeadsKvHeadsAndTheMlp) {
  const ModelConfig c = Heads(8, 4);
  absl::StatusOr<TensorShard> shard = MakeTensorShard(c, 1, 2);
  KVSERVE_ASSERT_OK(shard);
  EXPECT_EQ(shard->num_heads, 4);
  EXPECT_EQ(shard->first_head, 4);
  EXPECT_EQ(shard->num_kv_heads, 2);
  EXPECT_EQ(shard->first_kv_head, 2);
  EXPECT_EQ(shard->intermediate_size, 128);
  EXPECT_EQ(shard->first_intermediate, 128);
  EXPECT_EQ(shard->q_dim(), 64);
  EXPECT_EQ(shard->kv_dim(), 32);
  EXPECT_EQ(shard->first_q_row(), 64);
  EXPECT_EQ(shard->first_kv_row(), 32);
  const TensorShard full = FullShard(c);
  EXPECT_EQ(full.num_heads, 8);
  EXPECT_EQ(full.num_kv_heads, 4);
  EXPECT_EQ(full.intermediate_size, 256);
}

// With fewer KV heads than ranks each rank keeps one KV head: the one every one of its query
// heads reads under the model's grouping (query head h reads KV head h / (heads / kv_heads)).
TEST(TensorParallelTest, ReplicatesKvHeadsOverMoreRanksThanKvHeads) {
  for (auto [heads, kv_heads, size] :
       {std::tuple{8, 4, 8}, std::tuple{8, 2, 4}, std::tuple{8, 1, 8}, std::tuple{9, 3, 9}}) {
    const ModelConfig c = Heads(heads, kv_heads, 72);
    for (int32_t rank = 0; rank < size; ++rank) {
      absl::StatusOr<TensorShard> shard = MakeTensorShard(c, rank, size);
      KVSERVE_ASSERT_OK(shard);
      EXPECT_EQ(shard->num_kv_heads, 1);
      for (int32_t h = shard->first_head; h < shard->first_head + shard->num_heads; ++h) {
        EXPECT_EQ(h / (heads / kv_heads), shard->first_kv_head)
            << heads << "/" << kv_heads << " heads, rank " << rank << " of " << size;
      }
    }
  }
}

TEST(TensorParallelTest, ModelsThatCannotBeSplitNameTheNumbers) {
  absl::Status s = MakeTensorShard(Heads(9, 3), 0, 2).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("num_heads = 9 is not divisible by tensor_parallel_size = 2")));
  // 12 heads split over 6 ranks, but 4 KV heads neither split over 6 nor replicate onto them.
  s = MakeTensorShard(Heads(12, 4), 0, 6).status();
  EXPECT_THAT(s,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_kv_heads = 4 can be neither split across nor replicated over "
                                 "tensor_parallel_size = 6")));
  s = MakeTensorShard(Heads(8, 8), 0, 16).status();  // 8 heads cannot go to 16 ranks
  EXPECT_THAT(s, StatusIs(_, HasSubstr("num_heads = 8")));
  s = MakeTensorShard(Heads(8, 4, 100), 0, 8).status();
  EXPECT_THAT(
      s,
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("intermediate_size = 100 is not divisible by tensor_parallel_size = 8")));
  s = MakeTensorShard(Heads(8, 4), 2, 2).status();
  EXPECT_THAT(s, StatusIs(_, HasSubstr("rank 2 of size 2")));
  s = MakeTensorShard(Heads(8, 4), 0, 0).status();
  EXPECT_THAT(s, StatusIs(_, HasSubstr("rank 0 of size 0")));
  // The loader refuses before reading anything.
  s = LoadWeights("synthetic:tiny-tp", {.tensor_parallel = {.rank = 0, .size = 3}}).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("num_heads = 8 is not divisible by tensor_parallel_size = 3")));
}

// rows [begin, begin + n) of a row-major [?, cols] matrix.
std::vector<float> Rows(const std::vector<float>& m, int64_t cols, int64_t begin, int64_t n) {
  return std::vector<float>(m.begin() + begin * cols, m.begin() + (begin + n) * cols);
}
// columns [begin, begin + n) of every row of a row-major [?, cols] matrix.
std::vector<float> Columns(const std::vector<float>& m, int64_t cols, int64_t begin, int64_t n) {
  std::vector<float> out;
  for (size_t row = 0; row < m.size() / cols; ++row) {
    out.insert(out.end(), m.begin() + row * cols + begin, m.begin() + row * cols + begin + n);
  }
  return out;
}

// The fp32 values of a tensor: its vector, or its stored blocks decoded.
std::vector<float> Values(const ModelWeights& w, const std::string& name,
                          const std::vector<float>& field) {
  auto it = w.stored.find(name);
  if (it == w.stored.end()) return field;
  const kernels::DTypeInfo info = kernels::GetDTypeInfo(it->second.dtype);
  const int64_t n = it->second.num_bytes / info.block_bytes * info.block_elements;
  std::vector<float> out(n);
  kernels::cpu::DequantizeRow(it->second.data, it->second.dtype, n, out.data());
  return out;
}

// Every tensor of `shard` (rank `rank` of `size`) equals its part of the same tensor of `full`.
void ExpectShardOf(const ModelWeights& full, const ModelWeights& shard, int32_t rank,
                   int32_t size) {
  SCOPED_TRACE(::testing::Message() << "rank " << rank << " of " << size);
  ASSERT_EQ(shard.tp_rank, rank);
  ASSERT_EQ(shard.tp_size, size);
  KVSERVE_ASSERT_OK(shard.Validate());
  const ModelConfig& c = full.config;
  const TensorShard s = *MakeTensorShard(c, rank, size);
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = int64_t{c.num_heads} * c.head_dim;
  auto values = [](const ModelWeights& w, const std::string& name, const std::vector<float>& f) {
    return Values(w, name, f);
  };
  EXPECT_EQ(values(shard, "token_embedding", shard.token_embedding),
            values(full, "token_embedding", full.token_embedding));
  EXPECT_EQ(shard.final_norm, full.final_norm);
  if (!c.tie_word_embeddings) {
    EXPECT_EQ(values(shard, "lm_head", shard.lm_head), values(full, "lm_head", full.lm_head));
  }
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& a = full.layers[l];
    const LayerWeights& b = shard.layers[l];
    const std::string p = "layers." + std::to_string(l) + ".";
    auto full_of = [&](const char* name, const std::vector<float>& f) {
      return values(full, p + name, f);
    };
    auto shard_of = [&](const char* name, const std::vector<float>& f) {
      return values(shard, p + name, f);
    };
    EXPECT_EQ(b.attn_norm, a.attn_norm);
    EXPECT_EQ(b.ffn_norm, a.ffn_norm);
    EXPECT_EQ(shard_of("wq", b.wq), Rows(full_of("wq", a.wq), hidden, s.first_q_row(), s.q_dim()))
        << p << "wq";
    EXPECT_EQ(shard_of("wk", b.wk), Rows(full_of("wk", a.wk), hidden, s.first_kv_row(), s.kv_dim()))
        << p << "wk";
    EXPECT_EQ(shard_of("wv", b.wv), Rows(full_of("wv", a.wv), hidden, s.first_kv_row(), s.kv_dim()))
        << p << "wv";
    if (c.attention_bias) {
      EXPECT_EQ(b.bq, Rows(a.bq, 1, s.first_q_row(), s.q_dim())) << p << "bq";
      EXPECT_EQ(b.bk, Rows(a.bk, 1, s.first_kv_row(), s.kv_dim())) << p << "bk";
      EXPECT_EQ(b.bv, Rows(a.bv, 1, s.first_kv_row(), s.kv_dim())) << p << "bv";
    }
    EXPECT_EQ(shard_of("wo", b.wo), Columns(full_of("wo", a.wo), q_dim, s.first_q_row(), s.q_dim()))
        << p << "wo";
    EXPECT_EQ(shard_of("w_gate", b.w_gate),
              Rows(full_of("w_gate", a.w_gate), hidden, s.first_intermediate, s.intermediate_size))
        << p << "w_gate";
    EXPECT_EQ(shard_of("w_up", b.w_up),
              Rows(full_of("w_up", a.w_up), hidden, s.first_intermediate, s.intermediate_size))
        << p << "w_up";
    EXPECT_EQ(shard_of("w_down", b.w_down),
              Columns(full_of("w_down", a.w_down), c.intermediate_size, s.first_intermediate,
                      s.intermediate_size))
        << p << "w_down";
  }
}

TEST(TensorParallelTest, SyntheticShardsHoldTheWholeModelsValues) {
  for (const char* preset : {"tiny-tp", "tiny-qwen2"}) {
    SCOPED_TRACE(preset);
    const ModelConfig config = *SyntheticConfig(preset);
    const ModelWeights full = MakeSyntheticWeights(config, 7);
    for (int32_t size : {1, 2, 4}) {
      for (int32_t rank = 0; rank < size; ++rank) {
        ExpectShardOf(full, MakeSyntheticWeights(config, 7, rank, size), rank, size);
      }
    }
  }
  // KV heads replicated: ranks 2k and 2k + 1 hold the same K and V rows.
  const ModelConfig config = *SyntheticConfig("tiny-tp");
  const ModelWeights full = MakeSyntheticWeights(config, 7);
  for (int32_t rank = 0; rank < 8; ++rank) {
    absl::StatusOr<ModelWeights> shard =
        LoadWeights("synthetic:tiny-tp:seed=7", {.tensor_parallel = {.rank = rank, .size = 8}});
    KVSERVE_ASSERT_OK(shard);
    ExpectShardOf(full, *shard, rank, 8);
    EXPECT_EQ(shard->layers[1].wk, Rows(full.layers[1].wk, 128, (rank / 2) * 16, 16));
  }
}

TEST(TensorParallelTest, GgufShardsDecodeTheirPartsToFp32) {
  const std::string bytes = QuantizedModelGguf();
  std::unique_ptr<GgufFile> file = *GgufFile::Parse(bytes);
  absl::StatusOr<ModelWeights> full = WeightsFromGguf(*file);
  KVSERVE_ASSERT_OK(full);
  for (int32_t size : {2, 4}) {
    for (int32_t rank = 0; rank < size; ++rank) {
      absl::StatusOr<ModelWeights> shard =
          WeightsFromGguf(*file, {.tp_rank = rank, .tp_size = size});
      KVSERVE_ASSERT_OK(shard);
      ExpectShardOf(*full, *shard, rank, size);
      EXPECT_TRUE(shard->stored.empty());
    }
  }
}

// Kept as stored: row slices are views into the file at their first row, column slices on block
// boundaries are gathered copies, and column slices off them (Q4_K split 4 ways: 128 of every
// 256-element block) are decoded to fp32 and listed.
TEST(TensorParallelTest, GgufShardsKeepBlocksWhereTheSplitAllows) {
  const std::string bytes = QuantizedModelGguf();
  std::unique_ptr<GgufFile> file = *GgufFile::Parse(bytes);
  absl::StatusOr<ModelWeights> full = WeightsFromGguf(*file, {.keep_stored_types = true});
  KVSERVE_ASSERT_OK(full);
  const uint8_t* wq = file->FindTensor("blk.0.attn_q.weight")->data;
  const int64_t q_row_bytes = kernels::RowBytes(kernels::DType::kQ8_0, 512);

  absl::StatusOr<ModelWeights> half =
      WeightsFromGguf(*file, {.keep_stored_types = true, .tp_rank = 1, .tp_size = 2});
  KVSERVE_ASSERT_OK(half);
  ExpectShardOf(*full, *half, 1, 2);
  EXPECT_TRUE(half->decoded_for_shard.empty());
  EXPECT_EQ(half->stored.at("layers.0.wq").data, wq + 256 * q_row_bytes);
  EXPECT_EQ(half->stored.at("layers.0.wq").num_bytes, 256 * q_row_bytes);
  EXPECT_EQ(half->stored.at("layers.0.wo").dtype, kernels::DType::kQ4_K);
  EXPECT_EQ(half->stored.at("layers.0.wo").num_bytes,
            kernels::RowBytes(kernels::DType::kQ4_K, 256) * 512);
  EXPECT_NE(half->shard_storage, nullptr);

  absl::StatusOr<ModelWeights> quarter =
      WeightsFromGguf(*file, {.keep_stored_types = true, .tp_rank = 3, .tp_size = 4});
  KVSERVE_ASSERT_OK(quarter);
  ExpectShardOf(*full, *quarter, 3, 4);
  EXPECT_EQ(quarter->decoded_for_shard,
            (std::vector<std::string>{"layers.0.wo", "layers.0.w_down"}));
  EXPECT_FALSE(quarter->stored.contains("layers.0.wo"));
  EXPECT_EQ(quarter->layers[0].wo.size(), 512u * 128);
  EXPECT_EQ(quarter->stored.at("layers.0.w_up").data,
            file->FindTensor("blk.0.ffn_up.weight")->data + 384 * q_row_bytes);
}

// Through LoadWeights from a file on disk (mapped; the pages of gathered matrices are given
// back), and from a Hugging Face directory (2 heads, 1 KV head: replicated over 2 ranks).
TEST(TensorParallelTest, LoadWeightsReadsShardsFromFiles) {
  TempDir dir("tensor_parallel_test");
  const std::filesystem::path gguf = dir.path() / "model.gguf";
  WriteFile(gguf, QuantizedModelGguf());
  absl::StatusOr<ModelWeights> full = LoadWeights(gguf.string(), {.keep_stored_types = true});
  KVSERVE_ASSERT_OK(full);
  for (int32_t rank = 0; rank < 2; ++rank) {
    absl::StatusOr<ModelWeights> shard = LoadWeights(
        gguf.string(), {.keep_stored_types = true, .tensor_parallel = {.rank = rank, .size = 2}});
    KVSERVE_ASSERT_OK(shard);
    ExpectShardOf(*full, *shard, rank, 2);
  }
  const std::filesystem::path hf = dir.path() / "hf";
  std::filesystem::create_directories(hf);
  ::kvserve::testing::WriteTinyHfModel(hf, 2);
  full = LoadWeights(hf.string());
  KVSERVE_ASSERT_OK(full);
  for (int32_t rank = 0; rank < 2; ++rank) {
    absl::StatusOr<ModelWeights> shard =
        LoadWeights(hf.string(), {.tensor_parallel = {.rank = rank, .size = 2}});
    KVSERVE_ASSERT_OK(shard);
    ExpectShardOf(*full, *shard, rank, 2);
  }
}

}  // namespace
}  // namespace kvserve
