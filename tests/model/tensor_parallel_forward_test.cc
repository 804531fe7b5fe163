// The forward pass of a tensor-parallel group equals the unsharded one: the synthetic "tiny-tp"
// model (8 query heads, 4 KV heads) at TP = 1, 2, 4 and 8 (KV heads replicated at 8), every rank
// a thread with its own CPU backend (1 thread) and a Gloo communicator, on a script of steps
// mixing prefills, a prefill chunked over three steps, and decodes, then greedy decoding of 64
// tokens per sequence. Every step's logits equal TP = 1's within 1e-4 relative; the greedy
// tokens are identical; every rank ends each step with the same logits. Also "tiny-qwen2" at
// TP = 2 and 4: Q/K/V biases split with their rows, tied embeddings, 2 KV heads replicated at 4.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/forward_batch.h"
#include "model/kv_pool.h"
#include "model/llama_model.h"
#include "model/synthetic_weights.h"
#include "tests/comm/comm_test_util.h"
#include "tests/model/llama_model_test_util.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using testing::PagedSequence;
using testing::RelativeError;
using testing::ShuffledBlocks;

constexpr double kMaxRelativeError = 1e-4;
constexpr int32_t kBlockSize = 8;
constexpr int32_t kNumBlocks = 96;
constexpr int32_t kGeneratedTokens = 64;
constexpr uint64_t kSeed = 11;

ModelConfig Config(const std::string& preset) { return *SyntheticConfig(preset); }

// What one rank saw: the logits of every step, and the generated tokens of every sequence.
struct RankRun {
  std::vector<std::vector<float>> logits;  // per step: [R, vocab]
  std::vector<std::vector<int32_t>> generated;
  int32_t kv_heads_local = 0;  // of the rank's KV pool
  absl::Status status;
};

// One sequence of the script: its prompt, the step it arrives at, and how many prompt tokens
// it may prefill per step.
struct ScriptSequence {
  std::vector<int32_t> prompt;
  int32_t arrival_step;
  int32_t chunk;
};

std::vector<ScriptSequence> Script(const ModelConfig& config) {
  std::mt19937 rng(kSeed);
  std::uniform_int_distribution<int32_t> token(3, config.vocab_size - 1);
  auto prompt = [&](int32_t n) {
    std::vector<int32_t> tokens(n);
    for (int32_t& t : tokens) t = token(rng);
    return tokens;
  };
  return {{prompt(21), 0, 64},   // A: one prefill at step 0
          {prompt(45), 0, 16},   // B: chunked, 16 + 16 + 13 over steps 0-2
          {prompt(7), 1, 64},    // C: arrives while B is still prefilling
          {prompt(30), 2, 64}};  // D: its prefill shares a step with decodes
}

// Runs the script on rank `rank` of a group of `size` (comm null when size is 1). Each step,
// every sequence that has work computes it; sequences whose prompt is complete get logits for
// their last token, and rank 0's argmax of them (broadcast to every rank) is the next token.
RankRun RunScript(const std::string& preset, int32_t rank, int32_t size, Communicator* comm) {
  RankRun run;
  const ModelConfig config = Config(preset);
  const ModelWeights host = MakeSyntheticWeights(config, kSeed, rank, size);
  auto weights = DeviceWeights::Upload(host, std::make_shared<kernels::cpu::CpuBackend>(1),
                                       kernels::DType::kF32);
  if (!weights.ok()) {
    run.status = weights.status();
    return run;
  }
  const ForwardLimits limits{
      .max_num_tokens = 128, .max_num_seqs = 8, .max_context_len = 256, .max_logit_rows = 8};
  auto model = LlamaModel::Create(weights->get(), limits, kBlockSize, KvDtype::kF32, comm);
  if (!model.ok()) {
    run.status = model.status();
    return run;
  }
  auto pool = KvPool::Create((*model)->kv_layout(), kNumBlocks, (*model)->backend());
  if (!pool.ok()) {
    run.status = pool.status();
    return run;
  }
  run.kv_heads_local = (*pool)->layout().num_kv_heads_local;
  const std::vector<ScriptSequence> script = Script(config);
  std::vector<PagedSequence> seqs(script.size());
  run.generated.resize(script.size());
  ShuffledBlocks blocks(kNumBlocks, /*seed=*/5);  // the same ids on every rank
  ForwardBatchBuilder builder(kBlockSize, 256 / kBlockSize, 128, 8);
  for (int32_t step = 0;; ++step) {
    builder.Clear();
    std::vector<size_t> sampled;  // sequences that get a logit row, in row order
    for (size_t i = 0; i < script.size(); ++i) {
      PagedSequence& seq = seqs[i];
      if (step < script[i].arrival_step ||
          static_cast<int32_t>(run.generated[i].size()) >= kGeneratedTokens) {
        continue;
      }
      if (seq.tokens.empty()) seq.tokens = script[i].prompt;
      const int32_t prompt_left = static_cast<int32_t>(script[i].prompt.size()) - seq.num_computed;
      const int32_t n = prompt_left > 0 ? std::min(prompt_left, script[i].chunk) : 1;
      seq.Reserve(seq.num_computed + n, kBlockSize, blocks);
      const bool last = seq.num_computed + n == static_cast<int32_t>(seq.tokens.size());
      absl::Status added = builder.AddSequence(
          absl::MakeConstSpan(seq.tokens).subspan(seq.num_computed, n), seq.num_computed,
          seq.block_table, last ? LogitsFor::kLast : LogitsFor::kNone);
      if (!added.ok()) {
        run.status = added;
        return run;
      }
      seq.num_computed += n;
      if (last) sampled.push_back(i);
    }
    if (builder.View().num_tokens() == 0) break;
    absl::StatusOr<absl::Span<const float>> logits = (*model)->Forward(builder.View(), **pool);
    if (!logits.ok()) {
      run.status = logits.status();
      return run;
    }
    run.logits.emplace_back(logits->begin(), logits->end());
    const int32_t vocab = config.vocab_size;
    std::vector<int32_t> next(sampled.size());
    for (size_t r = 0; r < sampled.size(); ++r) {
      const float* row = logits->data() + r * vocab;
      next[r] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    }
    if (comm != nullptr && !next.empty()) {
      run.status = comm->Broadcast(next.data(), next.size() * sizeof(int32_t), /*root=*/0);
      if (!run.status.ok()) return run;
    }
    for (size_t r = 0; r < sampled.size(); ++r) {
      seqs[sampled[r]].tokens.push_back(next[r]);
      run.generated[sampled[r]].push_back(next[r]);
    }
  }
  return run;
}

const RankRun& Unsharded(const std::string& preset) {
  static auto* runs = new std::map<std::string, RankRun>;
  auto it = runs->find(preset);
  if (it == runs->end()) it = runs->emplace(preset, RunScript(preset, 0, 1, nullptr)).first;
  return it->second;
}

// (preset, tensor-parallel size)
class TensorParallelForwardTest
    : public ::testing::TestWithParam<std::tuple<std::string, int32_t>> {};

TEST_P(TensorParallelForwardTest, LogitsAndGreedyTokensEqualTheUnshardedModel) {
  const auto& [preset, size] = GetParam();
  const ModelConfig config = Config(preset);
  const RankRun& want = Unsharded(preset);
  KVSERVE_ASSERT_OK(want.status);
  std::vector<std::unique_ptr<Communicator>> comms = testing::MakeGlooGroup(size);
  ASSERT_EQ(comms.size(), static_cast<size_t>(size));
  std::vector<RankRun> runs(size);
  testing::RunRanks(
      size, [&](int rank) { runs[rank] = RunScript(preset, rank, size, comms[rank].get()); });
  for (int32_t rank = 0; rank < size; ++rank) {
    KVSERVE_ASSERT_OK(runs[rank].status) << "rank " << rank;
    // Each rank's pool holds its KV heads only: split up to 4 ranks, one replicated at 8.
    EXPECT_EQ(runs[rank].kv_heads_local, std::max(1, config.num_kv_heads / size));
  }
  const RankRun& got = runs[0];
  for (size_t i = 0; i < want.generated.size(); ++i) {
    ASSERT_EQ(want.generated[i].size(), static_cast<size_t>(kGeneratedTokens));
    EXPECT_EQ(got.generated[i], want.generated[i]) << "sequence " << i;
  }
  ASSERT_EQ(got.logits.size(), want.logits.size());
  const size_t vocab = config.vocab_size;
  double max_error = 0.0;
  for (size_t step = 0; step < want.logits.size(); ++step) {
    ASSERT_EQ(got.logits[step].size(), want.logits[step].size()) << "step " << step;
    for (size_t row = 0; row * vocab < want.logits[step].size(); ++row) {
      const absl::Span<const float> g(got.logits[step].data() + row * vocab, vocab);
      const absl::Span<const float> w(want.logits[step].data() + row * vocab, vocab);
      const double error = RelativeError(g, w);
      max_error = std::max(max_error, error);
      EXPECT_LE(error, kMaxRelativeError) << "step " << step << " row " << row;
      for (int32_t rank = 1; rank < size; ++rank) {
        const absl::Span<const float> other(runs[rank].logits[step].data() + row * vocab, vocab);
        EXPECT_LE(RelativeError(other, g), kMaxRelativeError)
            << "rank " << rank << " step " << step << " row " << row;
      }
    }
  }
  std::printf("%s TP=%d: %zu steps, max relative error of the logits vs TP=1: %.3g\n",
              preset.c_str(), size, want.logits.size(), max_error);
}

// tiny-tp: 8 query heads, 4 KV heads, split up to 4 ranks and replicated at 8. tiny-qwen2: 4
// query heads, 2 KV heads, Q/K/V biases (split with their rows), tied embeddings.
INSTANTIATE_TEST_SUITE_P(
    Sizes, TensorParallelForwardTest,
    ::testing::Values(std::tuple{"tiny-tp", 1}, std::tuple{"tiny-tp", 2}, std::tuple{"tiny-tp", 4},
                      std::tuple{"tiny-tp", 8}, std::tuple{"tiny-qwen2", 2},
                      std::tuple{"tiny-qwen2", 4}),
    [](const ::testing::TestParamInfo<std::tuple<std::string, int32_t>>& info) {
      std::string name = std::get<0>(info.param) + "_TP" + std::to_string(std::get<1>(info.param));
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

}  // namespace
}  // namespace kvserve
