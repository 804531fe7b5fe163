#include "worker/llama_model_runner.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace kvserve {

absl::StatusOr<std::unique_ptr<LlamaModelRunner>> LlamaModelRunner::Create(
    std::shared_ptr<const ModelWeights> weights, std::shared_ptr<kernels::Backend> backend) {
  if (weights == nullptr || backend == nullptr) {
    return absl::InvalidArgumentError("LlamaModelRunner: weights and backend must be set");
  }
  if (absl::Status status = weights->Validate(); !status.ok()) return status;
  return std::unique_ptr<LlamaModelRunner>(
      new LlamaModelRunner(std::move(weights), std::move(backend)));
}

LlamaModelRunner::LlamaModelRunner(std::shared_ptr<const ModelWeights> weights,
                                   std::shared_ptr<kernels::Backend> backend)
    : weights_(std::move(weights)),
      backend_(std::move(backend)),
      sampler_(weights_->config.vocab_size) {}

int64_t LlamaModelRunner::KvBytesPerBlock(int32_t block_size) const {
  const ModelConfig& c = weights_->config;
  return 2LL * c.num_layers * c.num_kv_heads * c.head_dim * block_size *
         static_cast<int64_t>(sizeof(float));
}

absl::Status LlamaModelRunner::Initialize(const RunnerConfig& config) {
  ForwardLimits limits{.max_num_tokens = config.max_num_batched_tokens,
                       .max_num_seqs = config.max_num_seqs,
                       .max_context_len = config.max_context_len,
                       .max_logit_rows = config.max_num_seqs};
  absl::StatusOr<std::unique_ptr<LlamaModel>> model =
      LlamaModel::Create(weights_.get(), backend_.get(), limits, config.block_size);
  if (!model.ok()) return model.status();
  model_ = *std::move(model);
  absl::StatusOr<std::unique_ptr<HostKvPool>> pool =
      HostKvPool::Create(model_->kv_layout(), config.num_blocks);
  if (!pool.ok()) return pool.status();
  kv_pool_ = *std::move(pool);
  const int32_t max_blocks_per_seq =
      (config.max_context_len + config.block_size - 1) / config.block_size;
  batch_.emplace(config.block_size, max_blocks_per_seq, config.max_num_batched_tokens,
                 config.max_num_seqs);
  sequences_ = std::make_unique<RunnerSequences>(config.block_size);
  return absl::OkStatus();
}

void LlamaModelRunner::CopyBlock(const BlockCopy& copy) {
  const int64_t block_bytes = kv_pool_->layout().elements_per_block_per_pool() * sizeof(float);
  for (int32_t layer = 0; layer < kv_pool_->layout().num_layers; ++layer) {
    kernels::PagedKvView view = kv_pool_->Layer(layer);
    for (void* pool : {view.k, view.v}) {
      char* bytes = static_cast<char*>(pool);
      std::memcpy(bytes + copy.dst * block_bytes, bytes + copy.src * block_bytes, block_bytes);
    }
  }
}

absl::StatusOr<StepResult> LlamaModelRunner::Execute(const StepPlan& plan) {
  if (model_ == nullptr) return absl::FailedPreconditionError("Initialize was not called");
  absl::StatusOr<std::vector<RunnerWork>> work = sequences_->Apply(plan);
  if (!work.ok()) return work.status();
  for (const BlockCopy& copy : plan.block_copies) CopyBlock(copy);
  StepResult result;
  if (work->empty()) return result;

  batch_->Clear();
  for (const RunnerWork& item : *work) {
    const RunnerSequence& seq = *item.sequence;
    absl::Status status = batch_->AddSequence(
        absl::MakeConstSpan(seq.tokens).subspan(item.first_position, item.num_tokens),
        item.first_position, seq.block_table,
        item.entry->sample ? LogitsFor::kLast : LogitsFor::kNone);
    if (!status.ok()) return status;
  }
  absl::StatusOr<absl::Span<const float>> logits = model_->Forward(batch_->View(), *kv_pool_);
  if (!logits.ok()) return logits.status();
  sequences_->Commit(*work);

  const int32_t vocab = vocab_size();
  int32_t row = 0;
  for (const RunnerWork& item : *work) {
    if (!item.entry->sample) continue;
    const RunnerSequence& seq = *item.sequence;
    const float* row_logits = logits->data() + static_cast<size_t>(row++) * vocab;
    const kernels::SampleResult sample =
        sampler_.Sample(row_logits, seq.sampling.params, seq.History(), seq.NextTokenIndex());
    SampledToken& out = result.sampled.emplace_back();
    out.id = item.entry->id;
    out.token = sample.token;
    out.logprob = sample.logprob;
    if (seq.sampling.logprobs) {
      out.rank = TokenRank(row_logits, vocab, sample.token);
      out.top.assign(sample.top.begin(), sample.top.begin() + sample.num_top);
    }
  }
  return result;
}

}  // namespace kvserve
