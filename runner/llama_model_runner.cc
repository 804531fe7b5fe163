#include "runner/llama_model_runner.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runner/kv_sizing.h"

namespace kvserve {
namespace {

// A choice whose token is the argmax of its raw logits and who wants nothing else from them.
bool DeviceGreedy(const SequenceSampling& sampling) {
  const kernels::SamplingParams& p = sampling.params;
  return p.temperature < kernels::kGreedyTemperature && p.repetition_penalty == 1.0f &&
         p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f && !sampling.logprobs &&
         sampling.constraint == nullptr;
}

// The matcher of a constrained sequence, made at its first sample: the output tokens it already
// has (a migrated or rebuilt sequence) are replayed into it.
absl::Status PrepareMatcher(RunnerSequence& seq) {
  if (seq.matcher != nullptr) return absl::OkStatus();
  KVSERVE_ASSIGN_OR_RETURN(seq.matcher, Matcher::Create(seq.sampling.constraint));
  for (size_t i = static_cast<size_t>(seq.sampling.num_prompt_tokens); i < seq.tokens.size(); ++i) {
    if (!seq.matcher->AcceptToken(seq.tokens[i])) {
      return absl::InternalError(absl::StrCat("structured output: output token ", seq.tokens[i],
                                              " at ", i, " does not match the constraint"));
    }
  }
  return absl::OkStatus();
}

// Batch sizes of the decode graphs: 1, 2, 4, 8, then every multiple of 8 up to max_num_seqs
// (vLLM's buckets), so a step pads at most 7 sequences.
std::vector<int32_t> DecodeGraphSizes(int32_t max_num_seqs) {
  std::vector<int32_t> sizes;
  for (int32_t size : {1, 2, 4}) {
    if (size < max_num_seqs) sizes.push_back(size);
  }
  for (int32_t size = 8; size < max_num_seqs; size += 8) sizes.push_back(size);
  sizes.push_back(max_num_seqs);
  return sizes;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModelRunner>> LlamaModelRunner::Create(
    std::shared_ptr<const DeviceWeights> weights, const LlamaRunnerOptions& options) {
  if (weights == nullptr)
    return absl::InvalidArgumentError("LlamaModelRunner: weights must be set");
  if (!(options.memory_utilization > 0.0 && options.memory_utilization <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpu_memory_utilization: must be in (0, 1], got ", options.memory_utilization));
  }
  if (absl::StatusOr<kernels::DType> dtype = KvKernelDType(options.kv_dtype); !dtype.ok()) {
    return dtype.status();
  }
  return std::unique_ptr<LlamaModelRunner>(new LlamaModelRunner(std::move(weights), options));
}

LlamaModelRunner::LlamaModelRunner(std::shared_ptr<const DeviceWeights> weights,
                                   const LlamaRunnerOptions& options)
    : weights_(std::move(weights)), options_(options), sampler_(weights_->config().vocab_size) {}

int64_t LlamaModelRunner::KvBytesPerBlock(int32_t block_size) const {
  const ModelConfig& c = weights_->config();
  const KvLayout layout{.num_layers = c.num_layers,
                        .num_kv_heads_local = weights_->shard().num_kv_heads,
                        .block_size = block_size,
                        .head_dim = c.head_dim,
                        .dtype = options_.kv_dtype};
  return layout.bytes_per_block();
}

absl::Status LlamaModelRunner::CreateModel(const RunnerConfig& config) {
  const ForwardLimits limits{.max_num_tokens = config.max_num_batched_tokens,
                             .max_num_seqs = config.max_num_seqs,
                             .max_context_len = config.max_context_len,
                             .max_logit_rows = config.max_num_seqs};
  if (model_ != nullptr) {
    const ForwardLimits& have = model_->limits();
    if (have.max_num_tokens == limits.max_num_tokens && have.max_num_seqs == limits.max_num_seqs &&
        have.max_context_len == limits.max_context_len &&
        model_->block_size() == config.block_size) {
      return absl::OkStatus();
    }
    model_.reset();
  }
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                           LlamaModel::Create(weights_.get(), limits, config.block_size,
                                              options_.kv_dtype, options_.comm));
  model_ = std::move(model);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LlamaModelRunner::ProfileKvBytes(const RunnerConfig& config) {
  KVSERVE_RETURN_IF_ERROR(CreateModel(config));
  // The largest step the engine can plan: max_num_batched_tokens tokens over max_num_seqs
  // sequences, every token a padding slot over the null block, so libraries (cuBLAS) set up their
  // workspaces for it before the free memory is read.
  absl::StatusOr<std::unique_ptr<KvPool>> scratch =
      KvPool::Create(model_->kv_layout(), 2, weights_->backend());
  if (!scratch.ok()) return scratch.status();
  const int32_t T = config.max_num_batched_tokens;
  const int32_t S = std::min(config.max_num_seqs, T);
  const int32_t per_seq = (T + S - 1) / S;
  const int32_t blocks = (per_seq + config.block_size - 1) / config.block_size;
  ForwardBatchBuilder builder(config.block_size, blocks, T, S);
  const std::vector<int32_t> table(blocks, 0);
  std::vector<int32_t> tokens;
  for (int32_t s = 0, left = T; s < S && left > 0; ++s) {
    tokens.assign(std::min(per_seq, left), 0);
    left -= static_cast<int32_t>(tokens.size());
    KVSERVE_RETURN_IF_ERROR(builder.AddSequence(tokens, 0, table, LogitsFor::kLast));
  }
  ForwardBatch batch = builder.View();
  std::vector<int32_t> padding(batch.slot_mapping.size(), -1);
  batch.slot_mapping = padding;
  KVSERVE_RETURN_IF_ERROR(model_->ForwardOnDevice(batch, **scratch));
  if (absl::StatusOr<absl::Span<const int32_t>> done = model_->GreedyTokens(); !done.ok()) {
    return done.status();
  }
  scratch->reset();
  return KvBudgetBytes(weights_->backend()->GetMemoryInfo(), options_.memory_utilization);
}

absl::Status LlamaModelRunner::BindThread() {
  if (!weights_->backend()->MakeCurrent()) {
    return absl::InternalError(
        absl::StrCat("cannot bind this thread to the ", weights_->backend()->name(), " device"));
  }
  return absl::OkStatus();
}

absl::Status LlamaModelRunner::Initialize(const RunnerConfig& config) {
  KVSERVE_RETURN_IF_ERROR(CreateModel(config));
  absl::StatusOr<std::unique_ptr<KvPool>> pool =
      KvPool::Create(model_->kv_layout(), config.num_blocks, weights_->backend());
  if (!pool.ok()) return pool.status();
  kv_pool_ = *std::move(pool);
  if (config.num_host_blocks > 0) {
    absl::StatusOr<std::unique_ptr<HostKvPool>> host =
        HostKvPool::Create(kv_pool_.get(), config.num_host_blocks);
    if (!host.ok()) return host.status();
    host_kv_ = *std::move(host);
    HostKvPool* tier = host_kv_.get();
    host_copies_.emplace(HostCopies::Ops{
        .store = [tier](BlockId device, HostBlockId host) { tier->Store(device, host); },
        .load = [tier](HostBlockId host, BlockId device) { tier->Load(host, device); },
        .join = [tier] { tier->JoinLoads(); }});
  }
  const int32_t max_blocks_per_seq =
      (config.max_context_len + config.block_size - 1) / config.block_size;
  batch_.emplace(config.block_size, max_blocks_per_seq, config.max_num_batched_tokens,
                 config.max_num_seqs);
  sequences_ = std::make_unique<RunnerSequences>(config.block_size);
  if (!options_.enforce_eager) {
    const std::vector<int32_t> sizes =
        DecodeGraphSizes(std::min(config.max_num_seqs, config.max_num_batched_tokens));
    if (absl::StatusOr<int32_t> graphs = model_->CaptureDecodeGraphs(*kv_pool_, sizes);
        !graphs.ok()) {
      return graphs.status();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StepResult> LlamaModelRunner::Execute(const StepPlan& plan) {
  if (model_ == nullptr || kv_pool_ == nullptr) {
    return absl::FailedPreconditionError("Initialize was not called");
  }
  KVSERVE_RETURN_IF_ERROR(CheckHostCopies(plan, kv_pool_->num_blocks(),
                                          host_kv_ == nullptr ? 0 : host_kv_->num_blocks()));
  KVSERVE_ASSIGN_OR_RETURN(std::vector<RunnerWork> work, sequences_->Apply(plan));
  if (host_copies_.has_value()) host_copies_->Issue(plan);
  for (const BlockCopy& copy : plan.block_copies) kv_pool_->CopyBlock(copy.src, copy.dst);
  if (work.empty()) {
    StepResult result;
    result.waited_for_host_loads = host_copies_.has_value() && host_copies_->Finish();
    return result;
  }

  batch_->Clear();
  for (const RunnerWork& item : work) {
    const RunnerSequence& seq = *item.sequence;
    absl::Status status = batch_->AddSequence(
        absl::MakeConstSpan(seq.tokens).subspan(item.first_position, item.num_tokens),
        item.first_position, seq.block_table,
        item.entry->sample ? LogitsFor::kLast : LogitsFor::kNone);
    if (!status.ok()) return status;
  }
  if (host_copies_.has_value()) host_copies_->BeforeForward(work);
  StartMasks(work);
  const absl::Status forward = model_->ForwardOnDevice(batch_->View(), *kv_pool_);
  mask_thread_.Join();  // the masks were filled beside the forward
  KVSERVE_RETURN_IF_ERROR(forward);
  KVSERVE_RETURN_IF_ERROR(mask_status_);
  // The loads ran beside the forward.
  const bool waited_for_host_loads = host_copies_.has_value() && host_copies_->Finish();
  sequences_->Commit(work);
  KVSERVE_ASSIGN_OR_RETURN(StepResult result, Sample(work));
  KVSERVE_RETURN_IF_ERROR(ScorePrompts(work, &result));
  result.waited_for_host_loads = waited_for_host_loads;
  return result;
}

void LlamaModelRunner::StartMasks(const std::vector<RunnerWork>& work) {
  masked_.clear();
  mask_status_ = absl::OkStatus();
  if (weights_->shard().rank != 0) return;  // a follower: the leader samples
  for (const RunnerWork& item : work) {
    if (item.entry->sample && item.sequence->sampling.constraint != nullptr) {
      masked_.push_back(item.sequence);
    }
  }
  if (masked_.empty()) return;
  const int32_t words = Matcher::MaskWords(vocab_size());
  masks_.resize(masked_.size() * static_cast<size_t>(words));
  // The matchers stand where the last step's tokens left them, so this step's masks are known
  // before its logits; nothing else touches these sequences until the join.
  mask_thread_.Post([this, words] {
    for (size_t i = 0; i < masked_.size() && mask_status_.ok(); ++i) {
      mask_status_ = PrepareMatcher(*masked_[i]);
      if (mask_status_.ok()) {
        mask_status_ = masked_[i]->matcher->FillNextTokenBitmask(masks_.data() + i * words);
      }
    }
  });
}

absl::StatusOr<StepResult> LlamaModelRunner::Sample(const std::vector<RunnerWork>& work) {
  StepResult result;
  if (weights_->shard().rank != 0) {  // a follower: the leader samples
    if (!weights_->backend()->Synchronize()) {
      return absl::InternalError("the backend reported an error");
    }
    return result;
  }
  KVSERVE_ASSIGN_OR_RETURN(absl::Span<const int32_t> greedy, model_->GreedyTokens());
  // Rows whose choice needs its logits on the host, in row order.
  host_rows_.clear();
  int32_t row = 0;
  for (const RunnerWork& item : work) {
    if (!item.entry->sample) continue;
    if (!DeviceGreedy(item.sequence->sampling)) host_rows_.push_back(row);
    ++row;
  }
  absl::Span<float> logits;
  if (!host_rows_.empty()) {
    KVSERVE_ASSIGN_OR_RETURN(absl::Span<float> rows, model_->LogitRows(host_rows_));
    logits = rows;
  }
  const int32_t vocab = vocab_size();
  row = 0;
  size_t host_index = 0;
  size_t mask_index = 0;  // into masked_ / masks_
  for (const RunnerWork& item : work) {
    if (!item.entry->sample) continue;
    const RunnerSequence& seq = *item.sequence;
    SampledToken& out = result.sampled.emplace_back();
    out.id = item.entry->id;
    if (host_index < host_rows_.size() && host_rows_[host_index] == row) {
      float* row_logits = logits.data() + host_index++ * static_cast<size_t>(vocab);
      RunnerSequence& constrained = *item.sequence;
      if (seq.sampling.constraint != nullptr) {
        // Structured output: tokens the constraint does not allow next get -inf (StartMasks
        // filled the mask).
        ApplyTokenMask(masks_.data() + mask_index++ * Matcher::MaskWords(vocab), row_logits, vocab);
      }
      const kernels::SampleResult sample =
          sampler_.Sample(row_logits, seq.sampling.params, seq.History(), seq.NextTokenIndex());
      out.token = sample.token;
      out.logprob = sample.logprob;
      if (constrained.matcher != nullptr && !constrained.matcher->AcceptToken(sample.token)) {
        return absl::InternalError(absl::StrCat("structured output: sampled token ", sample.token,
                                                " is not allowed by the constraint"));
      }
      if (seq.sampling.logprobs) {
        out.rank = TokenRank(row_logits, vocab, sample.token);
        out.top.assign(sample.top.begin(), sample.top.begin() + sample.num_top);
      }
    } else {
      out.token = greedy[row];
    }
    ++row;
  }
  return result;
}

absl::Status LlamaModelRunner::ScorePrompts(const std::vector<RunnerWork>& work,
                                            StepResult* result) {
  if (weights_->shard().rank != 0) return absl::OkStatus();  // a follower: the leader scores
  const int32_t max_rows = model_->limits().max_logit_rows;
  int32_t first_token = 0;  // of the item in the step's batch
  for (const RunnerWork& item : work) {
    const int32_t num_scores = NumPromptScores(item);
    if (num_scores > 0) {
      PromptScores& scores = result->prompt_logprobs.emplace_back();
      scores.id = item.entry->id;
      scores.first_token = item.first_position + 1;
      for (int32_t offset = 0; offset < num_scores; offset += max_rows) {
        const int32_t count = std::min(max_rows, num_scores - offset);
        KVSERVE_ASSIGN_OR_RETURN(absl::Span<const float> logits,
                                 model_->TokenLogits(first_token + offset, count));
        ScorePromptTokens(item, offset, logits.data(), count, vocab_size(), sampler_, &scores);
      }
    }
    first_token += item.num_tokens;
  }
  return absl::OkStatus();
}

std::string LlamaModelRunner::KvTransferFormat() const {
  if (kv_pool_ == nullptr || weights_->shard().size != 1) return {};
  const KvLayout& layout = kv_pool_->layout();
  const ModelConfig& config = weights_->config();
  return absl::StrCat("llama-kv/1 model=", config.name, " arch=", config.architecture,
                      " layers=", layout.num_layers, " kv_heads=", layout.num_kv_heads_local,
                      " head_dim=", layout.head_dim, " block_size=", layout.block_size,
                      " kv_dtype=", std::string(KvDtypeName(layout.dtype)),
                      " weights=", kernels::DTypeName(weights_->dtype()));
}

absl::Status LlamaModelRunner::ReadKvBlock(BlockId device, HostBlockId host, std::string* out) {
  if (KvTransferFormat().empty()) return absl::UnimplementedError("a shard cannot move KV blocks");
  const bool from_device = device != kNullBlock;
  if (from_device ? (device < 1 || device >= kv_pool_->num_blocks())
                  : (host_kv_ == nullptr || host < 0 || host >= host_kv_->num_blocks())) {
    return absl::InvalidArgumentError(
        absl::StrCat("no ", from_device ? "pool" : "host", " block ", from_device ? device : host));
  }
  const size_t offset = out->size();
  out->resize(offset + static_cast<size_t>(kv_pool_->layout().bytes_per_block()));
  if (from_device) {
    kv_pool_->ReadBlock(device, out->data() + offset);
  } else {
    host_kv_->ReadHost(host, out->data() + offset);
  }
  return absl::OkStatus();
}

absl::Status LlamaModelRunner::WriteHostKvBlock(HostBlockId host, std::string_view data) {
  if (KvTransferFormat().empty()) return absl::UnimplementedError("a shard cannot move KV blocks");
  if (host_kv_ == nullptr || host < 0 || host >= host_kv_->num_blocks()) {
    return absl::InvalidArgumentError(absl::StrCat("no host block ", host));
  }
  if (static_cast<int64_t>(data.size()) != host_kv_->block_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a KV block is ", host_kv_->block_bytes(), " bytes, got ", data.size()));
  }
  host_kv_->WriteHost(host, data.data());
  return absl::OkStatus();
}

}  // namespace kvserve
