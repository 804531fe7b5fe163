// LlamaModelRunner on a synthetic model ("synthetic:tiny", no files needed): plans with full data
// and deltas, block copies (the K/V of every layer move with them), and the runner under the
// scheduler: batching and preemption do not change greedy outputs, and a prefix brought back
// from the host KV tier gives the same bits as one that never left the device.
#include "runner/llama_model_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/timed_backend.h"
#include "model/weights_loader.h"
#include "tests/engine/engine_test_util.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using testing::MakeRequest;
using testing::RequestResult;

std::shared_ptr<const DeviceWeights> TinyWeights() {
  static std::shared_ptr<const DeviceWeights> weights = [] {
    absl::StatusOr<ModelWeights> loaded = LoadWeights("synthetic:tiny:seed=3");
    KVSERVE_EXPECT_OK(loaded);
    auto uploaded = DeviceWeights::Upload(*loaded, std::make_shared<kernels::cpu::CpuBackend>(1),
                                          kernels::DType::kF32);
    KVSERVE_EXPECT_OK(uploaded);
    return std::shared_ptr<const DeviceWeights>(*std::move(uploaded));
  }();
  return weights;
}

std::unique_ptr<LlamaModelRunner> MakeRunner(const RunnerConfig& config) {
  auto runner = LlamaModelRunner::Create(TinyWeights(), {});
  KVSERVE_EXPECT_OK(runner);
  KVSERVE_EXPECT_OK((*runner)->Initialize(config));
  return *std::move(runner);
}

ScheduledSequence NewSequence(SequenceId id, std::vector<TokenId> tokens,
                              std::vector<BlockId> blocks, int32_t num_computed) {
  ScheduledSequence seq;
  seq.id = id;
  seq.is_new = true;
  seq.num_computed_tokens = num_computed;
  seq.num_scheduled_tokens = static_cast<int32_t>(tokens.size()) - num_computed;
  seq.token_ids = std::move(tokens);
  seq.block_ids = std::move(blocks);
  seq.sample = true;
  seq.sampling.params.temperature = 0.0f;
  seq.sampling.num_prompt_tokens = static_cast<int32_t>(seq.token_ids.size());
  seq.sampling.logprobs = true;
  return seq;
}

TEST(LlamaModelRunnerTest, CopiedBlocksCarryTheirKeysAndValues) {
  const RunnerConfig config{.block_size = 16,
                            .num_blocks = 8,
                            .max_num_batched_tokens = 64,
                            .max_num_seqs = 4,
                            .max_context_len = 64};
  auto runner = MakeRunner(config);
  std::vector<TokenId> tokens(20);
  for (int i = 0; i < 20; ++i) tokens[i] = (i * 37 + 11) % 256;

  StepPlan prefill;
  prefill.sequences.push_back(NewSequence(1, tokens, {1, 2}, 0));
  auto first = runner->Execute(prefill);
  KVSERVE_ASSERT_OK(first);
  ASSERT_EQ(first->sampled.size(), 1u);

  // Sequence 2 reuses the first 19 tokens' K/V through copies of blocks 1 and 2, and computes
  // only the last token: it must see the same distribution as sequence 1.
  StepPlan copied;
  copied.released = {1};
  copied.block_copies = {{.src = 1, .dst = 3}, {.src = 2, .dst = 4}};
  copied.sequences.push_back(NewSequence(2, tokens, {3, 4}, 19));
  auto second = runner->Execute(copied);
  KVSERVE_ASSERT_OK(second);
  ASSERT_EQ(second->sampled.size(), 1u);
  EXPECT_EQ(second->sampled[0].token, first->sampled[0].token);
  EXPECT_NEAR(second->sampled[0].logprob, first->sampled[0].logprob, 1e-4);
  EXPECT_EQ(second->sampled[0].rank, 1);

  // Control: the same step over blocks nobody wrote sees a different distribution.
  StepPlan uncopied;
  uncopied.sequences.push_back(NewSequence(3, tokens, {5, 6}, 19));
  auto third = runner->Execute(uncopied);
  KVSERVE_ASSERT_OK(third);
  EXPECT_GT(std::fabs(third->sampled[0].logprob - first->sampled[0].logprob), 1e-3);
}

TEST(LlamaModelRunnerTest, DeltasForAnUnknownSequenceAreAnError) {
  auto runner = MakeRunner({.block_size = 16,
                            .num_blocks = 4,
                            .max_num_batched_tokens = 16,
                            .max_num_seqs = 2,
                            .max_context_len = 32});
  StepPlan plan;
  ScheduledSequence seq;
  seq.id = 42;
  seq.num_scheduled_tokens = 1;
  seq.token_ids = {1};
  plan.sequences.push_back(seq);
  EXPECT_THAT(runner->Execute(plan), StatusIs(absl::StatusCode::kInternal));
}

std::map<std::string, RequestResult> RunOnCore(int32_t num_kv_blocks,
                                               const std::vector<EngineRequest>& requests,
                                               bool one_at_a_time, int64_t* preemptions) {
  EngineOptions options;
  options.block_size = 8;
  options.num_kv_blocks = num_kv_blocks;
  options.max_num_seqs = 8;
  options.max_num_batched_tokens = 48;
  auto runner = LlamaModelRunner::Create(TinyWeights(), {});
  KVSERVE_EXPECT_OK(runner);
  auto core = EngineCore::Create(options, *std::move(runner), nullptr, nullptr);
  KVSERVE_EXPECT_OK(core);
  std::map<std::string, RequestResult> results;
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  for (const EngineRequest& request : requests) {
    streams[request.request_id] = testing::SubmitToCore(**core, request);
    if (one_at_a_time) testing::RunCore(**core);
  }
  testing::RunCore(**core);
  for (auto& [id, stream] : streams) results[id].Drain(*stream);
  *preemptions = (*core)->Stats().num_preemptions;
  return results;
}

TEST(LlamaModelRunnerTest, BatchingAndPreemptionKeepGreedyOutputs) {
  const uint32_t seed = 2025;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, 255);
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> prompt(5 + 6 * i);
    for (int32_t& t : prompt) t = token(rng);
    requests.push_back(MakeRequest("r" + std::to_string(i), prompt, 24));
    if (i % 2 == 0) requests.back().sampling.prompt_logprobs = 2;
  }
  int64_t alone_preemptions = 0;
  int64_t tight_preemptions = 0;
  auto alone = RunOnCore(256, requests, /*one_at_a_time=*/true, &alone_preemptions);
  auto tight = RunOnCore(20, requests, /*one_at_a_time=*/false, &tight_preemptions);
  EXPECT_EQ(alone_preemptions, 0);
  EXPECT_GT(tight_preemptions, 0);
  for (const EngineRequest& request : requests) {
    EXPECT_EQ(tight[request.request_id].choices[0].tokens,
              alone[request.request_id].choices[0].tokens)
        << request.request_id;
    EXPECT_EQ(alone[request.request_id].choices[0].tokens.size(), 24u);
    // Prompt logprobs survive batching and preemption (a preempted prefill recomputes them).
    const auto& tight_prompt = tight[request.request_id].prompt_logprobs;
    const auto& alone_prompt = alone[request.request_id].prompt_logprobs;
    ASSERT_EQ(tight_prompt.has_value(), request.sampling.prompt_logprobs.has_value());
    ASSERT_EQ(alone_prompt.has_value(), request.sampling.prompt_logprobs.has_value());
    if (!tight_prompt.has_value()) continue;
    ASSERT_EQ(tight_prompt->size(), request.prompt_token_ids.size());
    ASSERT_EQ(alone_prompt->size(), request.prompt_token_ids.size());
    for (size_t p = 1; p < tight_prompt->size(); ++p) {
      EXPECT_EQ((*tight_prompt)[p].chosen.token_id, request.prompt_token_ids[p]);
      EXPECT_NEAR((*tight_prompt)[p].chosen.logprob, (*alone_prompt)[p].chosen.logprob, 1e-4)
          << request.request_id << " position " << p;
      EXPECT_EQ((*tight_prompt)[p].top.size(), 2u);
    }
  }
}

// Runs `requests` one after another on a fresh core; the results and the core's final stats.
std::map<std::string, RequestResult> RunInTurn(const EngineOptions& options,
                                               const std::vector<EngineRequest>& requests,
                                               EngineStats* stats) {
  auto runner = LlamaModelRunner::Create(TinyWeights(), {});
  KVSERVE_EXPECT_OK(runner);
  auto core = EngineCore::Create(options, *std::move(runner), nullptr, nullptr);
  KVSERVE_EXPECT_OK(core);
  std::map<std::string, RequestResult> results;
  for (const EngineRequest& request : requests) {
    std::shared_ptr<RequestStream> stream = testing::SubmitToCore(**core, request);
    testing::RunCore(**core);
    results[request.request_id].Drain(*stream);
  }
  *stats = (*core)->Stats();
  return results;
}

TEST(LlamaModelRunnerTest, APrefixBroughtBackFromTheHostTierGivesBitIdenticalLogprobs) {
  std::mt19937 rng(77);
  std::uniform_int_distribution<int32_t> token(0, 255);
  auto prompt_of = [&](int length) {
    std::vector<int32_t> prompt(length);
    for (int32_t& t : prompt) t = token(rng);
    return prompt;
  };
  const std::vector<int32_t> prompt = prompt_of(45);  // 5 full blocks of 8 and 5 tokens
  std::vector<EngineRequest> requests;
  requests.push_back(MakeRequest("first", prompt, 6));
  for (int i = 0; i < 3; ++i) {
    requests.push_back(MakeRequest("flood" + std::to_string(i), prompt_of(60), 4));
  }
  requests.push_back(MakeRequest("again", prompt, 6));
  for (EngineRequest& request : requests) request.sampling.logprobs = 5;

  EngineOptions options;
  options.block_size = 8;
  options.max_num_seqs = 4;
  options.max_num_batched_tokens = 64;
  // Tiered: 12 device blocks, so the flood evicts every block of `prompt`, and a host tier of
  // 32. Untiered: a pool nothing is evicted from, so "again" hits the device's prefix cache.
  EngineOptions tiered = options;
  tiered.num_kv_blocks = 12;
  {
    auto probe = LlamaModelRunner::Create(TinyWeights(), {});
    KVSERVE_ASSERT_OK(probe);
    tiered.host_kv_bytes = 32 * (*probe)->KvBytesPerBlock(options.block_size);
  }
  EngineOptions untiered = options;
  untiered.num_kv_blocks = 256;
  EngineStats tiered_stats, untiered_stats;
  auto with_tier = RunInTurn(tiered, requests, &tiered_stats);
  auto without = RunInTurn(untiered, requests, &untiered_stats);

  EXPECT_EQ(tiered_stats.host_blocks, 32);
  EXPECT_EQ(tiered_stats.prefix_host_hit_tokens, 40);  // all 5 blocks came back from the host
  EXPECT_EQ(untiered_stats.prefix_host_hit_tokens, 0);
  EXPECT_GE(untiered_stats.prefix_hit_tokens, 40);
  ASSERT_EQ(with_tier["again"].choices[0].tokens.size(), 6u);
  EXPECT_EQ(with_tier["again"].choices[0].tokens, without["again"].choices[0].tokens);
  EXPECT_EQ(with_tier["again"].choices[0].tokens, with_tier["first"].choices[0].tokens);
  const std::vector<float> restored = with_tier["again"].AllLogprobs();
  const std::vector<float> kept = without["again"].AllLogprobs();
  ASSERT_EQ(restored.size(), 6u * 6u);
  ASSERT_EQ(restored.size(), kept.size());
  for (size_t i = 0; i < restored.size(); ++i) {
    EXPECT_EQ(restored[i], kept[i]) << "logprob " << i << " differs in its bits";
  }
}

// The log-softmax of every prompt position, from one full forward of the whole prompt with the
// logits of every position (the offline reference): row i scores prompt token i + 1.
std::vector<std::vector<double>> FullForwardLogSoftmax(const std::vector<int32_t>& prompt,
                                                       int32_t block_size) {
  const int32_t length = static_cast<int32_t>(prompt.size());
  const int32_t num_blocks = (length + block_size - 1) / block_size;
  auto model = LlamaModel::Create(TinyWeights().get(),
                                  {.max_num_tokens = length,
                                   .max_num_seqs = 1,
                                   .max_context_len = num_blocks * block_size,
                                   .max_logit_rows = length},
                                  block_size);
  KVSERVE_EXPECT_OK(model);
  auto pool = KvPool::Create((*model)->kv_layout(), num_blocks + 1, TinyWeights()->backend());
  KVSERVE_EXPECT_OK(pool);
  std::vector<int32_t> table(num_blocks);
  for (int32_t j = 0; j < num_blocks; ++j) table[j] = j + 1;
  ForwardBatchBuilder builder(block_size, num_blocks, length, 1);
  KVSERVE_EXPECT_OK(builder.AddSequence(prompt, 0, table, LogitsFor::kAll));
  auto logits = (*model)->Forward(builder.View(), **pool);
  KVSERVE_EXPECT_OK(logits);
  const int32_t vocab = TinyWeights()->config().vocab_size;
  std::vector<std::vector<double>> rows(length);
  for (int32_t p = 0; p < length; ++p) {
    const float* row = logits->data() + static_cast<size_t>(p) * vocab;
    double max_logit = row[0];
    for (int32_t v = 1; v < vocab; ++v) max_logit = std::max<double>(max_logit, row[v]);
    double sum = 0;
    for (int32_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max_logit);
    rows[p].resize(vocab);
    for (int32_t v = 0; v < vocab; ++v) rows[p][v] = row[v] - max_logit - std::log(sum);
  }
  return rows;
}

// `got` (an engine's prompt logprobs) against the full forward: one entry per prompt token, the
// first unscored, each later token's logprob and rank, and its top-k most likely first.
void ExpectPromptLogprobsOf(const std::vector<int32_t>& prompt,
                            const std::vector<PositionLogprobsOutput>& got, size_t top_k,
                            const std::vector<std::vector<double>>& want) {
  ASSERT_EQ(got.size(), prompt.size());
  EXPECT_EQ(got[0].chosen.token_id, prompt[0]);
  EXPECT_EQ(got[0].chosen.rank, 0);
  EXPECT_TRUE(got[0].top.empty());
  for (size_t i = 1; i < prompt.size(); ++i) {
    const std::vector<double>& row = want[i - 1];
    EXPECT_EQ(got[i].chosen.token_id, prompt[i]) << "position " << i;
    EXPECT_NEAR(got[i].chosen.logprob, row[prompt[i]], 1e-4) << "position " << i;
    int32_t rank = 1;
    for (size_t v = 0; v < row.size(); ++v) rank += row[v] > row[prompt[i]] + 1e-6;
    EXPECT_NEAR(got[i].chosen.rank, rank, 1) << "position " << i;  // ties within float noise
    ASSERT_EQ(got[i].top.size(), top_k) << "position " << i;
    for (size_t k = 0; k < top_k; ++k) {
      EXPECT_NEAR(got[i].top[k].logprob, row[got[i].top[k].token_id], 1e-4);
      EXPECT_EQ(got[i].top[k].rank, static_cast<int32_t>(k) + 1);
      if (k > 0) {
        EXPECT_LE(got[i].top[k].logprob, got[i].top[k - 1].logprob);
      }
    }
    if (top_k > 0) {
      EXPECT_NEAR(got[i].top[0].logprob, *std::max_element(row.begin(), row.end()), 1e-4);
    }
  }
}

// Prompt logprobs come from the prefill the request runs anyway, in chunks of 16 tokens (the
// step budget) and 4 logit rows at a time (max_num_seqs), and equal a full forward of the
// prompt; a second request whose prompt is in the prefix cache computes them again (a cached
// prefix has no logits), and its blocks still serve a request that does not want them.
TEST(LlamaModelRunnerTest, PromptLogprobsEqualAFullForwardAlsoChunkedAndWhenCached) {
  std::mt19937 rng(91);
  std::uniform_int_distribution<int32_t> token(0, 255);
  std::vector<int32_t> prompt(45);  // 5 full blocks of 8 and 5 tokens; 3 chunks of 16
  for (int32_t& t : prompt) t = token(rng);
  std::vector<EngineRequest> requests;
  requests.push_back(MakeRequest("first", prompt, 3));
  requests.push_back(MakeRequest("cached", prompt, 3));
  requests.push_back(MakeRequest("two_choices", prompt, 3));
  requests.push_back(MakeRequest("plain", prompt, 3));
  for (size_t i = 0; i < 3; ++i) requests[i].sampling.prompt_logprobs = 3;
  requests[2].n = 2;
  requests[2].sampling.prompt_logprobs = 0;

  EngineOptions options;
  options.block_size = 8;
  options.num_kv_blocks = 64;
  options.max_num_seqs = 4;
  options.max_num_batched_tokens = 16;
  EngineStats stats;
  auto results = RunInTurn(options, requests, &stats);

  const auto want = FullForwardLogSoftmax(prompt, options.block_size);
  for (const char* id : {"first", "cached"}) {
    SCOPED_TRACE(id);
    ASSERT_TRUE(results[id].prompt_logprobs.has_value());
    ExpectPromptLogprobsOf(prompt, *results[id].prompt_logprobs, 3, want);
    EXPECT_EQ(results[id].usage->cached_prompt_tokens, 0);
    EXPECT_EQ(results[id].choices[0].tokens, results["plain"].choices[0].tokens);
  }
  ASSERT_TRUE(results["two_choices"].prompt_logprobs.has_value());
  ExpectPromptLogprobsOf(prompt, *results["two_choices"].prompt_logprobs, 0, want);
  EXPECT_EQ(results["two_choices"].choices.size(), 2u);
  EXPECT_FALSE(results["plain"].prompt_logprobs.has_value());
  EXPECT_EQ(results["plain"].usage->cached_prompt_tokens, 40) << "the blocks were still cached";
}

// A CPU backend whose beside-the-stream copies land only when joined (or synchronised): the
// latest moment Backend allows, so a read of a loading block that the runner did not order
// after its load reads what the block held before, every time.
class JoinLandsCopiesBackend : public kernels::TimedBackend {
 public:
  JoinLandsCopiesBackend() : TimedBackend(std::make_shared<kernels::cpu::CpuBackend>(1)) {}
  void CopyFromHostBeside(const CopyRegion* regions, int count) override {
    pending_.insert(pending_.end(), regions, regions + count);
  }
  void JoinCopies() override {
    for (const CopyRegion& region : pending_) std::memcpy(region.dst, region.src, region.bytes);
    pending_.clear();
  }
  bool Synchronize() override {
    JoinCopies();
    return TimedBackend::Synchronize();
  }

 private:
  std::vector<CopyRegion> pending_;
};

// Host-tier loads run beside the step; the runner orders every read of a loading block, and
// every write of its host entry, after the load.
TEST(LlamaModelRunnerTest, HostLoadsOverlapTheStepButNothingReadsThemEarly) {
  absl::StatusOr<ModelWeights> loaded = LoadWeights("synthetic:tiny:seed=3");
  KVSERVE_ASSERT_OK(loaded);
  auto weights = DeviceWeights::Upload(*loaded, std::make_shared<JoinLandsCopiesBackend>(),
                                       kernels::DType::kF32);
  KVSERVE_ASSERT_OK(weights);
  auto created =
      LlamaModelRunner::Create(std::shared_ptr<const DeviceWeights>(*std::move(weights)), {});
  KVSERVE_ASSERT_OK(created);
  std::unique_ptr<LlamaModelRunner> runner = *std::move(created);
  KVSERVE_ASSERT_OK(runner->Initialize({.block_size = 8,
                                        .num_blocks = 12,
                                        .num_host_blocks = 4,
                                        .max_num_batched_tokens = 64,
                                        .max_num_seqs = 4,
                                        .max_context_len = 64}));
  std::vector<TokenId> tokens(17);
  for (int i = 0; i < 17; ++i) tokens[i] = (i * 53 + 7) % 256;
  std::vector<TokenId> other(17);
  for (int i = 0; i < 17; ++i) other[i] = (i * 29 + 101) % 256;
  auto block_bytes = [&](BlockId block) {
    std::string bytes;
    KVSERVE_EXPECT_OK(runner->ReadKvBlock(block, kNoHostBlock, &bytes));
    return bytes;
  };

  // Sequence 1 computes `tokens` in blocks 1-3 and sequence 2 `other` in 4-6; blocks 1 and 2
  // go to host entries 0 and 1.
  StepPlan prefill;
  prefill.sequences.push_back(NewSequence(1, tokens, {1, 2, 3}, 0));
  prefill.sequences.push_back(NewSequence(2, other, {4, 5, 6}, 0));
  auto first = runner->Execute(prefill);
  KVSERVE_ASSERT_OK(first);
  StepPlan store;
  store.released = {1, 2};
  store.host_copies = {{.to_host = true, .device = 1, .host = 0},
                       {.to_host = true, .device = 2, .host = 1}};
  KVSERVE_ASSERT_OK(runner->Execute(store));
  const std::string block1 = block_bytes(1), block4 = block_bytes(4);

  // Loaded and read in one step: the forward waits, and sees what sequence 1 saw.
  StepPlan eager;
  eager.host_copies = {{.to_host = false, .device = 7, .host = 0},
                       {.to_host = false, .device = 8, .host = 1}};
  eager.sequences.push_back(NewSequence(3, tokens, {7, 8, 9}, 16));
  auto resumed = runner->Execute(eager);
  KVSERVE_ASSERT_OK(resumed);
  EXPECT_TRUE(resumed->waited_for_host_loads);
  EXPECT_EQ(resumed->sampled[0].token, first->sampled[0].token);
  EXPECT_NEAR(resumed->sampled[0].logprob, first->sampled[0].logprob, 1e-4);

  // Loaded while sequence 3 decodes, and read in the next step: nobody waits.
  StepPlan beside;
  beside.host_copies = {{.to_host = false, .device = 10, .host = 0}};
  ScheduledSequence decode;
  decode.id = 3;
  decode.token_ids = {resumed->sampled[0].token};
  decode.num_scheduled_tokens = 1;
  decode.sample = true;
  beside.sequences.push_back(decode);
  auto decoded = runner->Execute(beside);
  KVSERVE_ASSERT_OK(decoded);
  EXPECT_FALSE(decoded->waited_for_host_loads);
  EXPECT_TRUE(block_bytes(10) == block1) << "block 10 is not host entry 0's block";

  // A store into the entry a load reads, in the same plan: the load still gets the old bytes.
  StepPlan reused;
  reused.host_copies = {{.to_host = false, .device = 11, .host = 0},
                        {.to_host = true, .device = 4, .host = 0}};
  auto swapped = runner->Execute(reused);
  KVSERVE_ASSERT_OK(swapped);
  EXPECT_TRUE(swapped->waited_for_host_loads);
  EXPECT_TRUE(block_bytes(11) == block1) << "the load read the entry after the store";
  std::string entry;
  KVSERVE_ASSERT_OK(runner->ReadKvBlock(kNullBlock, 0, &entry));
  EXPECT_TRUE(entry == block4) << "host entry 0 does not hold block 4";
}

// KV block transfer: blocks exported from one engine and imported into another's host tier give
// the bits the holder's own cache hit gives.
TEST(LlamaModelRunnerTest, BlocksMovedToAnotherEngineGiveBitIdenticalLogprobs) {
  std::mt19937 rng(78);
  std::uniform_int_distribution<int32_t> token(0, 255);
  std::vector<int32_t> prompt(45);  // 5 full blocks of 8 and 5 tokens
  for (int32_t& t : prompt) t = token(rng);
  EngineOptions options;
  options.block_size = 8;
  options.max_num_seqs = 4;
  options.max_num_batched_tokens = 64;
  options.num_kv_blocks = 64;
  auto make_core = [&](int64_t host_kv_bytes) {
    EngineOptions core_options = options;
    core_options.host_kv_bytes = host_kv_bytes;
    auto runner = LlamaModelRunner::Create(TinyWeights(), {});
    KVSERVE_EXPECT_OK(runner);
    auto core = EngineCore::Create(core_options, *std::move(runner), nullptr, nullptr);
    KVSERVE_EXPECT_OK(core);
    return *std::move(core);
  };
  auto run = [](EngineCore& core, const std::string& id, const std::vector<int32_t>& tokens) {
    EngineRequest request = MakeRequest(id, tokens, 6);
    request.sampling.logprobs = 5;
    std::shared_ptr<RequestStream> stream = testing::SubmitToCore(core, request);
    testing::RunCore(core);
    RequestResult result;
    result.Drain(*stream);
    return result;
  };
  std::unique_ptr<EngineCore> holder = make_core(0);
  ASSERT_FALSE(holder->kv_transfer_format().empty());
  run(*holder, "first", prompt);
  RequestResult kept = run(*holder, "again", prompt);  // its own cache hit

  absl::StatusOr<std::vector<KvBlockBytes>> exported =
      holder->ExportKvBlocks({.tokens = prompt, .first_block = 0});
  KVSERVE_ASSERT_OK(exported);
  ASSERT_EQ(exported->size(), 5u);
  std::vector<std::string> data;
  for (KvBlockBytes& block : *exported) data.push_back(std::move(block.data));

  std::unique_ptr<EngineCore> target = make_core(16 * holder->kv_transfer_block_bytes());
  ASSERT_EQ(target->kv_transfer_format(), holder->kv_transfer_format());
  EXPECT_EQ(target->CountHeldKvBlocks({.tokens = prompt}), 0);
  absl::StatusOr<int> imported = target->ImportKvBlocks({.tokens = prompt, .first_block = 0}, data);
  KVSERVE_ASSERT_OK(imported);
  EXPECT_EQ(*imported, 5);
  EXPECT_EQ(target->CountHeldKvBlocks({.tokens = prompt}), 5);
  RequestResult moved = run(*target, "again", prompt);
  EXPECT_EQ(target->Stats().prefix_host_hit_tokens, 40);
  ASSERT_EQ(moved.choices[0].tokens.size(), 6u);
  EXPECT_EQ(moved.choices[0].tokens, kept.choices[0].tokens);
  const std::vector<float> a = moved.AllLogprobs();
  const std::vector<float> b = kept.AllLogprobs();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "logprob " << i << " differs";

  // A block of the wrong size is refused before anything enters the tier.
  data[2].pop_back();
  EXPECT_THAT(target->ImportKvBlocks({.tokens = prompt, .first_block = 0}, data),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace kvserve
