#include "model/generator.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"

namespace kvserve {
namespace {

// One prompt being generated.
struct Live {
  SequenceId id = 0;
  int32_t prompt_len = 0;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t num_computed = 0;     // tokens whose K/V are in the cache
  bool done = false;
};

// One sequence's share of a step.
struct StepEntry {
  Live* seq;
  int32_t num_tokens;
  bool samples;  // its last token completes the known tokens: sample the next one
};

}  // namespace

absl::StatusOr<std::unique_ptr<Generator>> Generator::Create(const ModelWeights* weights,
                                                             kernels::Backend* backend,
                                                             const GeneratorOptions& options) {
  if (options.max_num_tokens <= 0 || options.max_num_seqs <= 0 || options.max_context_len <= 0) {
    return absl::InvalidArgumentError("GeneratorOptions: every limit must be positive");
  }
  ForwardLimits limits{.max_num_tokens = options.max_num_tokens,
                       .max_num_seqs = options.max_num_seqs,
                       .max_context_len = options.max_context_len,
                       .max_logit_rows = options.max_num_seqs};
  auto model = LlamaModel::Create(weights, backend, limits, options.block_size);
  if (!model.ok()) return model.status();
  const int32_t blocks_per_seq =
      (options.max_context_len + options.block_size - 1) / options.block_size;
  const int32_t num_blocks = options.max_num_seqs * blocks_per_seq + 1;
  auto pool = HostKvPool::Create((*model)->kv_layout(), num_blocks);
  if (!pool.ok()) return pool.status();
  auto manager = KvCacheManager::Create(
      KvCacheConfig{.num_blocks = num_blocks, .block_size = options.block_size});
  if (!manager.ok()) return manager.status();
  return std::unique_ptr<Generator>(new Generator(
      options, std::move(model).value(), std::move(pool).value(), std::move(manager).value()));
}

Generator::Generator(const GeneratorOptions& options, std::unique_ptr<LlamaModel> model,
                     std::unique_ptr<HostKvPool> pool, std::unique_ptr<KvCacheManager> manager)
    : options_(options),
      model_(std::move(model)),
      pool_(std::move(pool)),
      manager_(std::move(manager)),
      builder_(options.block_size,
               (options.max_context_len + options.block_size - 1) / options.block_size,
               options.max_num_tokens, options.max_num_seqs),
      sampler_(model_->config().vocab_size) {}

absl::StatusOr<GenerationStats> Generator::Generate(absl::Span<const std::vector<int32_t>> prompts,
                                                    const GenerateRequest& request,
                                                    const TokenCallback& on_token,
                                                    std::vector<std::vector<int32_t>>* outputs) {
  if (static_cast<int32_t>(prompts.size()) > options_.max_num_seqs) {
    return absl::InvalidArgumentError(
        absl::StrCat(prompts.size(), " prompts > max_num_seqs ", options_.max_num_seqs));
  }
  if (request.max_tokens <= 0) return absl::InvalidArgumentError("max_tokens must be positive");
  GenerationStats stats;
  std::vector<Live> live(prompts.size());
  outputs->assign(prompts.size(), {});
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int32_t prompt_len = static_cast<int32_t>(prompts[i].size());
    if (prompt_len == 0 || prompt_len + request.max_tokens > options_.max_context_len) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt ", i, ": ", prompt_len, " tokens + max_tokens ", request.max_tokens,
                       " must be in [1, max_context_len ", options_.max_context_len, "]"));
    }
    Live& seq = live[i];
    seq.id = next_sequence_id_++;
    seq.prompt_len = prompt_len;
    seq.tokens = prompts[i];
    auto start = manager_->AddSequence(seq.id, prompts[i], "", options_.max_num_tokens);
    if (!start.ok()) return start.status();
    seq.num_computed = start->num_cached_tokens;
    stats.cached_prompt_tokens += start->num_cached_tokens;
  }

  std::vector<StepEntry> entries;
  entries.reserve(prompts.size());
  for (;;) {
    builder_.Clear();
    entries.clear();
    int32_t budget = options_.max_num_tokens;
    bool has_prefill = false;
    // Decodes first, then prefill chunks in the remaining budget.
    for (int pass = 0; pass < 2; ++pass) {
      for (Live& seq : live) {
        if (seq.done) continue;
        const bool decoding = seq.num_computed >= seq.prompt_len;
        if (decoding != (pass == 0)) continue;
        const int32_t known = static_cast<int32_t>(seq.tokens.size());
        const int32_t n = std::min(known - seq.num_computed, budget);
        if (n <= 0) continue;
        budget -= n;
        has_prefill |= !decoding;
        if (absl::Status s = manager_->AllocateSlots(seq.id, n); !s.ok()) return s;
        auto table = manager_->GetBlockTable(seq.id);
        if (!table.ok()) return table.status();
        const bool samples = seq.num_computed + n == known;
        if (absl::Status s = builder_.AddSequence(
                absl::MakeConstSpan(seq.tokens).subspan(seq.num_computed, n), seq.num_computed,
                *table, samples ? LogitsFor::kLast : LogitsFor::kNone);
            !s.ok()) {
          return s;
        }
        entries.push_back({&seq, n, samples});
      }
    }
    if (entries.empty()) break;

    const auto step_start = std::chrono::steady_clock::now();
    auto logits = model_->Forward(builder_.View(), *pool_);
    if (!logits.ok()) return logits.status();
    const int32_t vocab = model_->config().vocab_size;
    int32_t row = 0;
    for (StepEntry& entry : entries) {
      Live& seq = *entry.seq;
      if (absl::Status s = manager_->CommitComputed(seq.id, entry.num_tokens); !s.ok()) return s;
      seq.num_computed += entry.num_tokens;
      if (!entry.samples) continue;
      const int32_t index = static_cast<int32_t>(&seq - live.data());
      std::vector<int32_t>& output = (*outputs)[index];
      kernels::SamplingParams params = request.sampling;
      params.seed += static_cast<uint64_t>(index);
      const kernels::TokenHistory history{.prompt = seq.tokens.data(),
                                          .prompt_len = seq.prompt_len,
                                          .output = output.data(),
                                          .output_len = static_cast<int32_t>(output.size())};
      const int32_t token = sampler_
                                .Sample(logits->data() + static_cast<size_t>(row++) * vocab, params,
                                        history, output.size())
                                .token;
      output.push_back(token);
      seq.tokens.push_back(token);
      if (on_token) on_token(index, token);
      const bool stop = std::find(request.stop_token_ids.begin(), request.stop_token_ids.end(),
                                  token) != request.stop_token_ids.end();
      if (stop || static_cast<int32_t>(output.size()) >= request.max_tokens) {
        seq.done = true;
        if (absl::Status s = manager_->FreeSequence(seq.id); !s.ok()) return s;
      } else if (absl::Status s = manager_->AppendTokens(seq.id, {&token, 1}); !s.ok()) {
        return s;
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    ++stats.steps;
    if (has_prefill) {
      stats.prefill_seconds += seconds;
      for (const StepEntry& entry : entries) {
        if (entry.seq->num_computed - entry.num_tokens < entry.seq->prompt_len) {
          stats.prompt_tokens += entry.num_tokens;
        }
      }
    } else {
      stats.decode_seconds += seconds;
      stats.decode_tokens += static_cast<int64_t>(entries.size());
    }
  }
  return stats;
}

}  // namespace kvserve
