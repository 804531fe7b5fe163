// kvserve-generate: generates text from one prompt with the paged-KV-cache forward pass on the
// CPU, streaming it as it is produced, then prints prompt and decode throughput.
//
//   kvserve-generate --prompt "The capital of France is" --max_tokens 32
//   kvserve-generate --chat "Write a haiku about caches." --temperature 0.7 --seed 1
//   kvserve-generate --model synthetic:smollm2-135m --prompt_tokens 128 --batch 8
//
// --batch N runs N copies of the prompt as one batch (sampling seeds seed, seed + 1, ...) and
// streams only the first; the decode rate then counts the tokens of all N sequences.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "api/program_usage.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/chat_template.h"
#include "model/default_model.h"
#include "model/detokenizer.h"
#include "model/generator.h"
#include "model/tokenizer.h"
#include "model/weights_loader.h"

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
ABSL_FLAG(int32_t, threads, 0, "attention threads; 0: all cores");
ABSL_FLAG(bool, ignore_eos, false, "do not stop at end-of-sequence tokens");

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
  auto chat_template = ChatTemplate::FromJinja(tokenizer->chat_template());
  if (!chat_template.ok()) return chat_template.status();
  const ChatMessage message{.role = "user", .content = chat};
  return tokenizer->Encode(chat_template->Render({&message, 1}, true), /*add_bos=*/false);
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
  auto weights = LoadWeights(spec);
  if (!weights.ok()) return weights.status();
  auto tokenizer = Tokenizer::FromModelPath(spec);
  if (!tokenizer.ok()) return tokenizer.status();
  const ModelConfig& config = weights->config;
  auto prompt = BuildPrompt(tokenizer->get(), config.vocab_size);
  if (!prompt.ok()) return prompt.status();

  const int32_t batch = absl::GetFlag(FLAGS_batch);
  const int32_t max_tokens = absl::GetFlag(FLAGS_max_tokens);
  if (batch < 1) return absl::InvalidArgumentError("--batch must be >= 1");
  kernels::cpu::CpuBackend backend(absl::GetFlag(FLAGS_threads));
  const GeneratorOptions options{
      .block_size = absl::GetFlag(FLAGS_block_size),
      .max_num_tokens = std::max(absl::GetFlag(FLAGS_chunk), batch),
      .max_num_seqs = batch,
      .max_context_len = static_cast<int32_t>(prompt->size()) + max_tokens};
  auto generator = Generator::Create(&*weights, &backend, options);
  if (!generator.ok()) return generator.status();

  GenerateRequest request;
  request.sampling.temperature = absl::GetFlag(FLAGS_temperature);
  request.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  request.sampling.top_p = absl::GetFlag(FLAGS_top_p);
  request.sampling.seed = absl::GetFlag(FLAGS_seed);
  request.max_tokens = max_tokens;
  if (!absl::GetFlag(FLAGS_ignore_eos)) {
    request.stop_token_ids = config.eos_token_ids;
    if (*tokenizer != nullptr) {
      if ((*tokenizer)->eos_id() >= 0) request.stop_token_ids.push_back((*tokenizer)->eos_id());
      // ChatML turns end with <|im_end|> whatever the file names as EOS.
      if (int32_t im_end = (*tokenizer)->PieceToId("<|im_end|>"); im_end >= 0) {
        request.stop_token_ids.push_back(im_end);
      }
    }
  }

  std::unique_ptr<IncrementalDetokenizer> detokenizer;
  if (*tokenizer != nullptr) {
    detokenizer = std::make_unique<IncrementalDetokenizer>(**tokenizer, /*skip_special=*/true);
    std::fputs((*tokenizer)->Decode(*prompt).c_str(), stdout);
  }
  auto on_token = [&](int32_t sequence, int32_t token) {
    if (sequence != 0) return;
    const std::string text = detokenizer ? detokenizer->Push(token) : absl::StrCat(" ", token);
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  };
  std::vector<std::vector<int32_t>> outputs;
  const std::vector<std::vector<int32_t>> prompts(batch, *prompt);
  auto stats = (*generator)->Generate(prompts, request, on_token, &outputs);
  if (!stats.ok()) return stats.status();
  if (detokenizer) std::fputs(detokenizer->Flush().c_str(), stdout);

  int64_t generated = 0;
  for (const auto& output : outputs) generated += static_cast<int64_t>(output.size());
  std::printf("\n\n[kvserve-generate] model %s, %d layers, block size %d, batch %d\n",
              config.name.empty() ? spec.c_str() : config.name.c_str(), config.num_layers,
              options.block_size, batch);
  std::printf("[kvserve-generate] prompt: %lld tokens in %.3f s = %.1f tokens/s\n",
              static_cast<long long>(stats->prompt_tokens), stats->prefill_seconds,
              stats->prefill_seconds > 0 ? stats->prompt_tokens / stats->prefill_seconds : 0.0);
  std::printf("[kvserve-generate] decode: %lld tokens in %.3f s = %.1f tokens/s (%lld generated)\n",
              static_cast<long long>(stats->decode_tokens), stats->decode_seconds,
              stats->decode_seconds > 0 ? stats->decode_tokens / stats->decode_seconds : 0.0,
              static_cast<long long>(generated));
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  kvserve::SetProgramUsage(
      "Generate text with kvserve's paged-KV-cache forward pass on the CPU.\n"
      "  kvserve-generate --prompt \"The capital of France is\" --max_tokens 32");
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = kvserve::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "kvserve-generate: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
