// kvserve-generate: generates text from one prompt through the serving engine (EngineCore: the
// scheduler, paged KV cache and runner kvserve-worker runs, without gRPC), on the CPU or a GPU,
// streaming it as it is produced, then prints prompt and decode throughput.
//
//   kvserve-generate --prompt "The capital of France is" --max_tokens 32
//   kvserve-generate --chat "Write a haiku about caches." --temperature 0.7 --seed 1
//   kvserve-generate --model synthetic:smollm2-135m --prompt_tokens 128 --batch 8
//   kvserve-generate --device cuda --dtype bfloat16 --prompt "The KV cache is"
//
// --score_jsonl FILE scores texts instead (the offline twin of an evaluation harness's
// loglikelihood requests): each line {"context": ..., "continuation": ...} is tokenized as
// lm-evaluation-harness splits it (trailing spaces of the context move to the continuation; the
// whole text and the context are tokenized without special tokens, and the continuation is the
// whole's tokens after the context's), the whole runs through the engine with prompt logprobs,
// and one line {"logprob", "is_greedy", "num_tokens"} per input goes to stdout: the sum of the
// continuation tokens' logprobs, whether each was its position's most likely token, and how
// many there were.
//
// --batch N runs N copies of the prompt as one batch (sampling seeds seed, seed + 1, ...) and
// streams only the first; the decode rate then counts the tokens of all N sequences.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "api/program_usage.h"
#include "base/status_macros.h"
#include "engine/engine_core.h"
#include "engine/offline_generate.h"
#include "model/default_model.h"
#include "runner/runner_factory.h"
#include "tokenizer/prompt_renderer.h"
#include "tokenizer/tokenizer.h"

ABSL_FLAG(std::string, model, "",
          "GGUF file, Hugging Face directory, or synthetic:<preset>[:layers=N][:seed=S]; "
          "default: $KVSERVE_MODEL or the cached SmolLM2-135M-Instruct");
ABSL_FLAG(std::string, prompt, "", "prompt text (used as is)");
ABSL_FLAG(std::string, chat, "", "a user message, rendered with the model's chat template");
ABSL_FLAG(int32_t, prompt_tokens, 0,
          "random prompt of this many token ids instead of text (synthetic models have no "
          "tokenizer; also for benchmarking)");
ABSL_FLAG(int32_t, max_tokens, 64, "tokens to generate per sequence");
ABSL_FLAG(float, temperature, 0.0f, "0: greedy");
ABSL_FLAG(int32_t, top_k, 0, "<= 0: off");
ABSL_FLAG(float, top_p, 1.0f, "1: off");
ABSL_FLAG(uint64_t, seed, 0, "sampling seed");
ABSL_FLAG(int32_t, block_size, 16, "KV cache block size in tokens (8, 16 or 32)");
ABSL_FLAG(int32_t, batch, 1, "run this many copies of the prompt as one batch");
ABSL_FLAG(int32_t, chunk, 512, "prefill chunk: tokens per step");
ABSL_FLAG(int32_t, num_threads, 0, "CPU kernel threads (0: one per core), as kvserve-worker's");
ABSL_FLAG(std::string, device, "cpu", "cpu, cuda or cuda:N");
ABSL_FLAG(std::string, dtype, "auto",
          "weights: auto (CPU: as stored, GGUF blocks included; CUDA: bfloat16), float32, "
          "bfloat16, float16");
ABSL_FLAG(std::string, kv_cache_dtype, "auto",
          "KV cache: auto (as kvserve-worker), float32, bfloat16, float16");
ABSL_FLAG(bool, enforce_eager, false, "no CUDA graphs for decode steps");
ABSL_FLAG(bool, ignore_eos, false, "do not stop at end-of-sequence tokens");
ABSL_FLAG(std::string, score_jsonl, "",
          "score the continuations of a JSONL file of {\"context\", \"continuation\"} lines "
          "(prompt logprobs) instead of generating; one JSON line per input on stdout");

namespace kvserve {
namespace {

bool IsSynthetic(const std::string& spec) { return absl::StartsWith(spec, "synthetic:"); }

absl::StatusOr<std::vector<int32_t>> BuildPrompt(const Tokenizer* tokenizer, int32_t vocab) {
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  const std::string chat = absl::GetFlag(FLAGS_chat);
  const int32_t prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  if ((!prompt.empty()) + (!chat.empty()) + (prompt_tokens > 0) != 1) {
    return absl::InvalidArgumentError("give exactly one of --prompt, --chat, --prompt_tokens");
  }
  if (prompt_tokens > 0) {
    std::mt19937 rng(static_cast<uint32_t>(absl::GetFlag(FLAGS_seed)));
    std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
    std::vector<int32_t> ids(prompt_tokens);
    for (int32_t& id : ids) id = dist(rng);
    return ids;
  }
  if (tokenizer == nullptr) {
    return absl::InvalidArgumentError("this model has no tokenizer: use --prompt_tokens");
  }
  if (!prompt.empty()) return tokenizer->Encode(prompt, /*add_bos=*/false);
  // As the worker renders chat: the model's template, then special tokens off.
  PromptInput input;
  input.chat = std::vector<ChatMessage>{{.role = "user", .content = chat}};
  return PromptRenderer(tokenizer).Render(std::move(input));
}

struct ScoreItem {
  std::vector<int32_t> tokens;  // context + continuation
  size_t context_len = 0;
};

// One JSONL line, split as the harness splits it (see the file comment).
absl::StatusOr<ScoreItem> ParseScoreLine(const std::string& line, const Tokenizer& tokenizer) {
  const nlohmann::json json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("context") || !json["context"].is_string() ||
      !json.contains("continuation") || !json["continuation"].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--score_jsonl: not an object with string context and continuation: ", line));
  }
  std::string context = json["context"].get<std::string>();
  std::string continuation = json["continuation"].get<std::string>();
  const size_t kept = context.find_last_not_of(" \t\n\r\f\v");
  const size_t trimmed = kept == std::string::npos ? 0 : kept + 1;
  continuation = context.substr(trimmed) + continuation;
  context.resize(trimmed);
  ScoreItem item;
  item.tokens = tokenizer.Encode(context + continuation, /*add_bos=*/false);
  item.context_len = tokenizer.Encode(context, /*add_bos=*/false).size();
  if (item.context_len == 0 || item.context_len >= item.tokens.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--score_jsonl: needs a non-empty context and continuation: ", line));
  }
  return item;
}

absl::Status RunScore(CreatedRunner created, const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) return absl::InvalidArgumentError("--score_jsonl needs a tokenizer");
  std::ifstream file(absl::GetFlag(FLAGS_score_jsonl));
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot read ", absl::GetFlag(FLAGS_score_jsonl)));
  }
  std::vector<ScoreItem> items;
  size_t longest = 0;
  for (std::string line; std::getline(file, line);) {
    if (line.empty()) continue;
    KVSERVE_ASSIGN_OR_RETURN(ScoreItem item, ParseScoreLine(line, *tokenizer));
    longest = std::max(longest, item.tokens.size());
    items.push_back(std::move(item));
  }
  const int32_t block_size = absl::GetFlag(FLAGS_block_size);
  const int32_t context = static_cast<int32_t>(longest) + 1;  // one token is generated
  EngineOptions options;
  options.block_size = block_size;
  options.num_kv_blocks = (context + block_size - 1) / block_size;
  options.max_num_seqs = 1;
  options.max_num_batched_tokens = absl::GetFlag(FLAGS_chunk);
  options.max_context_len = std::min(context, created.config.max_context);
  options.max_waiting_requests = static_cast<int32_t>(items.size());
  KVSERVE_ASSIGN_OR_RETURN(
      std::unique_ptr<EngineCore> core,
      EngineCore::Create(options, std::move(created.runner), tokenizer, nullptr));
  std::vector<EngineRequest> requests(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    requests[i].request_id = absl::StrCat("score-", i);
    requests[i].prompt_token_ids = items[i].tokens;
    requests[i].sampling.temperature = 0.0f;
    requests[i].sampling.max_tokens = 1;
    requests[i].sampling.prompt_logprobs = 0;
  }
  std::vector<std::vector<PositionLogprobsOutput>> scores(items.size());
  auto on_output = [&](size_t index, const EngineOutput& output) {
    if (output.prompt_logprobs.has_value()) scores[index] = *output.prompt_logprobs;
  };
  std::vector<OfflineResult> results;
  KVSERVE_RETURN_IF_ERROR(GenerateOffline(*core, requests, &results, on_output).status());
  for (size_t i = 0; i < items.size(); ++i) {
    if (scores[i].size() != items[i].tokens.size()) {
      return absl::InternalError(absl::StrCat("item ", i, ": no prompt logprobs"));
    }
    double logprob = 0;
    bool is_greedy = true;
    for (size_t p = items[i].context_len; p < items[i].tokens.size(); ++p) {
      logprob += scores[i][p].chosen.logprob;
      is_greedy = is_greedy && scores[i][p].chosen.rank == 1;
    }
    const nlohmann::json line = {{"logprob", logprob},
                                 {"is_greedy", is_greedy},
                                 {"num_tokens", items[i].tokens.size() - items[i].context_len}};
    std::printf("%s\n", line.dump().c_str());
  }
  return absl::OkStatus();
}

absl::Status Run() {
  std::string spec = absl::GetFlag(FLAGS_model);
  if (spec.empty()) spec = DefaultModelPath();
  if (!IsSynthetic(spec) && !std::filesystem::exists(spec)) {
    return absl::NotFoundError(absl::StrCat(
        "model not found: ", spec,
        "\nRun scripts/setup.sh (or scripts/fetch_model.sh) to fetch the default model, or pass "
        "--model."));
  }
  absl::StatusOr<CreatedRunner> created =
      CreateLlamaRunner({.model = spec,
                         .device = absl::GetFlag(FLAGS_device),
                         .dtype = absl::GetFlag(FLAGS_dtype),
                         .kv_cache_dtype = absl::GetFlag(FLAGS_kv_cache_dtype),
                         .num_threads = absl::GetFlag(FLAGS_num_threads),
                         .enforce_eager = absl::GetFlag(FLAGS_enforce_eager)});
  if (!created.ok()) return created.status();
  KVSERVE_ASSIGN_OR_RETURN(auto tokenizer, Tokenizer::FromModelPath(spec));
  if (!absl::GetFlag(FLAGS_score_jsonl).empty()) {
    return RunScore(*std::move(created), tokenizer.get());
  }
  const ModelConfig config = created->config;
  KVSERVE_ASSIGN_OR_RETURN(auto prompt, BuildPrompt(tokenizer.get(), config.vocab_size));

  const int32_t batch = absl::GetFlag(FLAGS_batch);
  const int32_t max_tokens = absl::GetFlag(FLAGS_max_tokens);
  const int32_t block_size = absl::GetFlag(FLAGS_block_size);
  if (batch < 1) return absl::InvalidArgumentError("--batch must be >= 1");
  if (max_tokens < 1) return absl::InvalidArgumentError("--max_tokens must be >= 1");
  const int32_t context = static_cast<int32_t>(prompt.size()) + max_tokens;
  EngineOptions options;
  options.block_size = block_size;
  options.num_kv_blocks = batch * ((context + block_size - 1) / block_size);
  options.max_num_seqs = batch;
  options.max_num_batched_tokens = std::max(absl::GetFlag(FLAGS_chunk), batch);
  options.max_context_len = std::min(context, config.max_context);
  options.max_waiting_requests = batch;
  absl::StatusOr<std::unique_ptr<EngineCore>> core =
      EngineCore::Create(options, std::move(created->runner), tokenizer.get(), nullptr);
  if (!core.ok()) return core.status();

  std::vector<EngineRequest> requests(batch);
  for (int32_t i = 0; i < batch; ++i) {
    EngineRequest& request = requests[i];
    request.request_id = absl::StrCat("generate-", i);
    request.prompt_token_ids = prompt;
    request.sampling.temperature = absl::GetFlag(FLAGS_temperature);
    request.sampling.top_k = absl::GetFlag(FLAGS_top_k);
    request.sampling.top_p = absl::GetFlag(FLAGS_top_p);
    request.sampling.seed = absl::GetFlag(FLAGS_seed) + i;
    request.sampling.max_tokens = max_tokens;
    request.sampling.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
    if (!request.sampling.ignore_eos && tokenizer != nullptr) {
      // ChatML turns end with <|im_end|> whatever the file names as EOS.
      if (int32_t im_end = tokenizer->PieceToId("<|im_end|>"); im_end >= 0) {
        request.sampling.stop_token_ids.push_back(im_end);
      }
    }
  }

  // A text prompt is echoed so that the output reads as its continuation; a chat answer stands
  // alone (the rendered template is the model's business, special tokens and all).
  if (tokenizer != nullptr && absl::GetFlag(FLAGS_chat).empty()) {
    std::fputs(tokenizer->Decode(prompt).c_str(), stdout);
  }
  auto on_output = [&](size_t index, const EngineOutput& output) {
    if (index != 0) return;
    for (const ChoiceOutput& choice : output.choices) {
      if (tokenizer != nullptr) {
        std::fputs(choice.text.c_str(), stdout);
      } else {
        for (int32_t token : choice.token_ids) std::printf(" %d", token);
      }
    }
    std::fflush(stdout);
  };
  std::vector<OfflineResult> results;
  KVSERVE_ASSIGN_OR_RETURN(OfflineStats stats,
                           GenerateOffline(**core, requests, &results, on_output));

  // The first token of each sequence comes out of its prefill step; decode makes the rest.
  const int64_t decode_tokens = stats.generated_tokens - batch;
  std::printf(
      "\n\n[kvserve-generate] model %s, %d layers, %s weights, %s KV, %s, block size %d, "
      "batch %d\n",
      config.name.empty() ? spec.c_str() : config.name.c_str(), config.num_layers,
      created->weight_types.c_str(), std::string(KvDtypeName(created->kv_dtype)).c_str(),
      created->backend_name.c_str(), block_size, batch);
  std::printf("[kvserve-generate] prompt: %lld tokens in %.3f s = %.1f tokens/s\n",
              static_cast<long long>(stats.prompt_tokens), stats.prefill_seconds,
              stats.prefill_seconds > 0 ? stats.prompt_tokens / stats.prefill_seconds : 0.0);
  std::printf("[kvserve-generate] decode: %lld tokens in %.3f s = %.1f tokens/s (%lld generated)\n",
              static_cast<long long>(decode_tokens), stats.decode_seconds,
              stats.decode_seconds > 0 ? decode_tokens / stats.decode_seconds : 0.0,
              static_cast<long long>(stats.generated_tokens));
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  kvserve::SetProgramUsage(
      "Generate text through kvserve's serving engine on the CPU or a GPU, without a server.\n"
      "  kvserve-generate --prompt \"The capital of France is\" --max_tokens 32");
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = kvserve::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "kvserve-generate: %s\n", std::string(status.message()).c_str());
    return status.code() == absl::StatusCode::kFailedPrecondition ? 2 : 1;
  }
  return 0;
}
