// The default model (SmolLM2-135M Q4_1: 9 query heads, 3 KV heads, ffn 1536) split over 3
// tensor-parallel ranks -- threads, each with its own CPU backend (1 thread) and a Gloo
// communicator -- under the real EngineCore, against the whole model. Skips when the model file
// is absent.
//
// Two numeric regimes:
//   - fp32 weights (--dtype=float32): the group differs from the whole model only in the order
//     of the sums (each rank's share of o_proj and down_proj, then the all-reduce), so the
//     logprobs agree to ~1e-6 and the greedy tokens are identical.
//   - the file's Q4_1 blocks computed in place (--dtype=auto on the CPU): every Linear first
//     rounds its input activations to int8 per 32-value block. A 1e-7 difference in an input
//     flips the rounding of an element now and then, and each flip is a whole quantization step
//     that the next layers carry on: the group's logits differ from the whole model's by about
//     the int8 rounding error itself (measured 2-4% of the logit range after a 30-layer prefill),
//     so greedy texts part at near-ties. This test pins the first token and its logprob there.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/default_model.h"
#include "model/gguf_file.h"
#include "model/weights_loader.h"
#include "runner/llama_model_runner.h"
#include "tests/engine/engine_test_util.h"
#include "tests/status_matchers.h"
#include "tests/tp/threaded_group_runner.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

using testing::MakeRequest;
using testing::PhasedRun;

class TensorParallelModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = DefaultModelPath();
    if (!std::filesystem::exists(path_))
      GTEST_SKIP() << path_ << " is missing: run scripts/setup.sh";
    auto gguf = GgufFile::Open(path_);
    KVSERVE_ASSERT_OK(gguf);
    auto tokenizer = Tokenizer::FromGguf(**gguf);
    KVSERVE_ASSERT_OK(tokenizer);
    tokenizer_ = *std::move(tokenizer);
  }

  std::vector<EngineRequest> Requests(int32_t max_tokens) const {
    std::vector<EngineRequest> requests;
    for (const char* text :
         {"The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
          "The three primary colors are"}) {
      EngineRequest request =
          MakeRequest(text, tokenizer_->Encode(text, /*add_bos=*/false), max_tokens);
      request.sampling.logprobs = 0;  // the chosen token's logprob
      request.sampling.ignore_eos = true;
      requests.push_back(std::move(request));
    }
    return requests;
  }

  static EngineOptions Options() {
    EngineOptions options;
    options.block_size = 16;
    options.num_kv_blocks = 64;
    options.max_num_seqs = 4;
    options.max_num_batched_tokens = 64;
    return options;
  }

  // The whole model and the TP = 3 group on the same requests; keep_stored: the file's blocks.
  void RunBoth(bool keep_stored, int32_t max_tokens, PhasedRun* whole_run, PhasedRun* group_run) {
    auto host = LoadWeights(path_, {.keep_stored_types = keep_stored});
    KVSERVE_ASSERT_OK(host);
    auto weights = DeviceWeights::Upload(*host, std::make_shared<kernels::cpu::CpuBackend>(1),
                                         kernels::DType::kF32);
    KVSERVE_ASSERT_OK(weights);
    auto whole = LlamaModelRunner::Create(*std::move(weights), {.enforce_eager = true});
    KVSERVE_ASSERT_OK(whole);
    *whole_run = testing::RunPhases(*std::move(whole), Options(), {Requests(max_tokens)});
    auto group =
        testing::ThreadedGroupRunner::Create(path_, 3, /*threads_per_rank=*/1, keep_stored);
    KVSERVE_ASSERT_OK(group);
    *group_run = testing::RunPhases(*std::move(group), Options(), {Requests(max_tokens)});
  }

  std::string path_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(TensorParallelModelTest, Fp32WeightsAtTp3GiveTheSameGreedyTokens) {
  PhasedRun want, got;
  RunBoth(/*keep_stored=*/false, /*max_tokens=*/32, &want, &got);
  double max_logprob_diff = 0.0;
  for (const EngineRequest& request : Requests(32)) {
    const auto& w = want.results.at(request.request_id).choices.at(0);
    const auto& g = got.results.at(request.request_id).choices.at(0);
    EXPECT_EQ(w.tokens.size(), 32u) << request.request_id;
    EXPECT_EQ(g.tokens, w.tokens) << request.request_id
                                  << "\n  TP=1: " << tokenizer_->Decode(w.tokens)
                                  << "\n  TP=3: " << tokenizer_->Decode(g.tokens);
    for (size_t i = 0; i < std::min(w.logprobs.size(), g.logprobs.size()); ++i) {
      max_logprob_diff = std::max<double>(
          max_logprob_diff, std::fabs(g.logprobs[i].chosen.logprob - w.logprobs[i].chosen.logprob));
    }
  }
  EXPECT_LE(max_logprob_diff, 1e-3);
  std::printf("fp32 weights, TP=3 vs TP=1: largest difference of a chosen token's logprob %.3g\n",
              max_logprob_diff);
}

TEST_F(TensorParallelModelTest, StoredBlocksAtTp3AgreeWithinTheActivationRounding) {
  PhasedRun want, got;
  RunBoth(/*keep_stored=*/true, /*max_tokens=*/1, &want, &got);
  for (const EngineRequest& request : Requests(1)) {
    const auto& w = want.results.at(request.request_id).choices.at(0);
    const auto& g = got.results.at(request.request_id).choices.at(0);
    ASSERT_EQ(w.logprobs.size(), 1u);
    ASSERT_EQ(g.logprobs.size(), 1u);
    EXPECT_EQ(g.tokens, w.tokens) << request.request_id;
    // The ranks sum their row-parallel partial products in another order, so an activation now
    // and then rounds to the neighbouring int8 step downstream: the two runs differ by the
    // activation rounding itself (fidelity.sh: RMS dp of the next token 1.2% for either against
    // f32). Measured here: |dp| <= 0.03 on the packed weights, 0.014 on the rows as stored; in
    // log-probability that is up to 0.19 on the 0.15-probability token of the last prompt.
    const double diff =
        std::fabs(std::exp(g.logprobs[0].chosen.logprob) - std::exp(w.logprobs[0].chosen.logprob));
    EXPECT_LE(diff, 0.06) << request.request_id;
    std::printf("Q4_1 as stored, TP=3 vs TP=1, \"%s\": first token %d, logprob %.4f vs %.4f\n",
                request.request_id.c_str(), g.tokens.empty() ? -1 : g.tokens[0],
                g.logprobs[0].chosen.logprob, w.logprobs[0].chosen.logprob);
  }
}

}  // namespace
}  // namespace kvserve
