#include "runner/fake_model_runner.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace kvserve {

FakeModelRunner::FakeModelRunner(const FakeModelOptions& options)
    : options_(options), sampler_(options.vocab_size), logits_(options.vocab_size) {
  if (options.output_token_ids.empty()) return;
  std::vector<bool> allowed(options.vocab_size, false);
  for (int32_t id : options.output_token_ids) {
    if (id >= 0 && id < options.vocab_size) allowed[id] = true;
  }
  for (int32_t id = 0; id < options.vocab_size; ++id) {
    if (!allowed[id]) banned_.push_back(id);
  }
}

absl::Status FakeModelRunner::Initialize(const RunnerConfig& config) {
  if (config.num_blocks < 2 || config.block_size <= 0) {
    return absl::InvalidArgumentError("FakeModelRunner: bad RunnerConfig");
  }
  config_ = config;
  kv_.assign(static_cast<size_t>(config.num_blocks) * config.block_size, SlotContent{});
  host_kv_.assign(static_cast<size_t>(config.num_host_blocks) * config.block_size, SlotContent{});
  sequences_ = std::make_unique<RunnerSequences>(config.block_size);
  return absl::OkStatus();
}

int64_t FakeModelRunner::Slot(const RunnerSequence& seq, int32_t position) const {
  return static_cast<int64_t>(seq.block_table[position / config_.block_size]) * config_.block_size +
         position % config_.block_size;
}

void FakeModelRunner::ContextLogits(const std::vector<TokenId>& context, float* logits,
                                    int32_t vocab) {
  uint64_t h = 0x243F6A8885A308D3ull;
  for (TokenId token : context) {
    h = (h ^ static_cast<uint64_t>(token)) * 0x100000001B3ull;
    h ^= h >> 29;
  }
  for (int32_t v = 0; v < vocab; ++v) {
    uint64_t z = h + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(v + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    logits[v] = static_cast<float>(z % 4096) / 512.0f;  // [0, 8)
  }
}

absl::Duration StepTimeModel::Of(int64_t prefill_tokens, int64_t decode_tokens,
                                 int64_t prefill_attended, int64_t decode_context) const {
  const double ms = fixed_ms + prefill_token_ms * static_cast<double>(prefill_tokens) +
                    decode_token_ms * static_cast<double>(decode_tokens) +
                    prefill_attention_ms_per_mtoken * static_cast<double>(prefill_attended) * 1e-6 +
                    decode_attention_ms_per_mtoken * static_cast<double>(decode_context) * 1e-6;
  return absl::Microseconds(static_cast<int64_t>(ms * 1000.0));
}

absl::StatusOr<StepResult> FakeModelRunner::Execute(const StepPlan& plan) {
  if (sequences_ == nullptr) return absl::FailedPreconditionError("Initialize was not called");
  const absl::Time start = absl::Now();
  if (options_.step_delay > absl::ZeroDuration()) absl::SleepFor(options_.step_delay);
  KVSERVE_ASSIGN_OR_RETURN(std::vector<RunnerWork> work, sequences_->Apply(plan));
  if (!options_.step_time.empty()) {
    int64_t prefill = 0, decode = 0, prefill_attended = 0, decode_context = 0;
    for (const RunnerWork& item : work) {
      const int64_t context = item.first_position + item.num_tokens;
      if (IsDecode(*item.entry)) {
        decode += item.num_tokens;
        decode_context += context;
      } else {
        prefill += item.num_tokens;
        prefill_attended += item.num_tokens * context;
      }
    }
    const absl::Time end =
        start + options_.step_time.Of(prefill, decode, prefill_attended, decode_context);
    // Sleep first: the fake work below is microseconds, the simulated step milliseconds.
    absl::SleepFor(end - absl::Now());
  }
  const int32_t block_size = config_.block_size;
  KVSERVE_RETURN_IF_ERROR(CheckHostCopies(plan, config_.num_blocks, config_.num_host_blocks));
  host_copies_.Issue(plan);
  for (const BlockCopy& copy : plan.block_copies) {
    CopyBlock(&kv_[static_cast<size_t>(copy.src) * block_size],
              &kv_[static_cast<size_t>(copy.dst) * block_size]);
  }
  // "Forward": write every scheduled token's K/V, then read each sampled context back; the loads
  // land only after that, unless the forward had to wait for them.
  host_copies_.BeforeForward(work);
  for (const RunnerWork& item : work) {
    for (int32_t i = 0; i < item.num_tokens; ++i) {
      const int32_t position = item.first_position + i;
      kv_[Slot(*item.sequence, position)] = {item.sequence->tokens[position], position};
    }
    num_computed_tokens_ += item.num_tokens;
  }
  StepResult result;
  for (const RunnerWork& item : work) {
    if (!item.entry->sample) continue;
    const RunnerSequence& seq = *item.sequence;
    context_.clear();
    for (int32_t p = 0; p < static_cast<int32_t>(seq.tokens.size()); ++p) {
      const SlotContent& content = kv_[Slot(seq, p)];
      if (content.position != p || content.token != seq.tokens[p]) {
        return absl::InternalError(absl::StrCat(
            "fake KV: sequence ", item.entry->id, " position ", p, " reads token ", content.token,
            " of position ", content.position, ", expected token ", seq.tokens[p]));
      }
      context_.push_back(content.token);
    }
    ContextLogits(context_, logits_.data(), options_.vocab_size);
    for (int32_t id : banned_) logits_[id] = -std::numeric_limits<float>::infinity();
    const kernels::SampleResult sample =
        sampler_.Sample(logits_.data(), seq.sampling.params, seq.History(), seq.NextTokenIndex());
    SampledToken& out = result.sampled.emplace_back();
    out.id = item.entry->id;
    out.token = sample.token;
    out.logprob = sample.logprob;
    if (seq.sampling.logprobs) {
      out.rank = TokenRank(logits_.data(), options_.vocab_size, sample.token);
      out.top.assign(sample.top.begin(), sample.top.begin() + sample.num_top);
    }
  }
  // Prompt logprobs: the logits after each scored position's context.
  for (const RunnerWork& item : work) {
    const int32_t num_scores = NumPromptScores(item);
    if (num_scores == 0) continue;
    PromptScores& scores = result.prompt_logprobs.emplace_back();
    scores.id = item.entry->id;
    scores.first_token = item.first_position + 1;
    for (int32_t i = 0; i < num_scores; ++i) {
      const auto& tokens = item.sequence->tokens;
      context_.assign(tokens.begin(), tokens.begin() + item.first_position + i + 1);
      ContextLogits(context_, logits_.data(), options_.vocab_size);
      ScorePromptTokens(item, i, logits_.data(), 1, options_.vocab_size, sampler_, &scores);
    }
  }
  result.waited_for_host_loads = host_copies_.Finish();
  sequences_->Commit(work);
  ++num_executed_steps_;
  return result;
}

void FakeModelRunner::CopyBlock(const SlotContent* from, SlotContent* to) const {
  std::copy(from, from + config_.block_size, to);
}

void FakeModelRunner::RunPendingLoads() {
  for (const HostCopy& load : pending_loads_) {
    CopyBlock(&host_kv_[static_cast<size_t>(load.host) * config_.block_size],
              &kv_[static_cast<size_t>(load.device) * config_.block_size]);
  }
  pending_loads_.clear();
}

std::string FakeModelRunner::KvTransferFormat() const {
  if (config_.block_size == 0) return {};  // not initialised
  return absl::StrCat("fake-kv/1 block_size=", config_.block_size, " vocab=", options_.vocab_size,
                      " slot_bytes=", sizeof(SlotContent));
}

absl::Status FakeModelRunner::ReadKvBlock(BlockId device, HostBlockId host, std::string* out) {
  const SlotContent* slots;
  if (device != kNullBlock) {
    if (device < 0 || device >= config_.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("no pool block ", device));
    }
    slots = &kv_[static_cast<size_t>(device) * config_.block_size];
  } else {
    if (host < 0 || host >= config_.num_host_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("no host block ", host));
    }
    slots = &host_kv_[static_cast<size_t>(host) * config_.block_size];
  }
  out->append(reinterpret_cast<const char*>(slots), sizeof(SlotContent) * config_.block_size);
  return absl::OkStatus();
}

absl::Status FakeModelRunner::WriteHostKvBlock(HostBlockId host, std::string_view data) {
  if (host < 0 || host >= config_.num_host_blocks) {
    return absl::InvalidArgumentError(absl::StrCat("no host block ", host));
  }
  const size_t bytes = sizeof(SlotContent) * config_.block_size;
  if (data.size() != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a KV block is ", bytes, " bytes, got ", data.size()));
  }
  std::memcpy(&host_kv_[static_cast<size_t>(host) * config_.block_size], data.data(), bytes);
  return absl::OkStatus();
}

}  // namespace kvserve
