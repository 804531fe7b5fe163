#include "worker/serving_context.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "api/prompt_conversion.h"
#include "api/serving_fingerprint.h"
#include "base/build_info.h"
#include "base/status_macros.h"
#include "grammar/vocabulary.h"
#include "tokenizer/tool_call_parser.h"
#include "worker/proto_conversion.h"
#include "worker/request_log.h"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;

// JSON may have white space between tokens, at most a short run at each place: left free, a
// small model at a high temperature can emit newlines until max_tokens (seen with SmolLM2 at
// 0.8 in a 2 x 2 integer matrix). 8 allows a newline and an indent of two levels.
GrammarCompilerOptions GrammarOptions() {
  GrammarCompilerOptions options;
  options.json_any_whitespace = true;
  options.json_max_whitespace = 8;
  return options;
}

absl::Status Draining() {
  return absl::UnavailableError("worker is draining: it accepts no new requests, retry elsewhere");
}

}  // namespace

ServingContext::ServingContext(Engine* engine, const Tokenizer* tokenizer,
                               const ModelConfig& config, std::vector<std::string> model_aliases,
                               std::string worker_id, WorkerMetrics* metrics,
                               int32_t tensor_parallel_size,
                               absl::Duration constraint_compile_timeout)
    : engine_(engine),
      renderer_(tokenizer),
      metrics_(metrics),
      constraint_compile_timeout_(constraint_compile_timeout) {
  const EngineOptions& options = engine_->options();
  const int64_t pool_tokens = static_cast<int64_t>(engine_->num_kv_blocks()) * options.block_size;
  limits_.model_name = config.name;
  limits_.model_aliases = std::move(model_aliases);
  limits_.vocab_size = engine_->vocab_size();
  limits_.model_context_length = engine_->max_context_len();
  limits_.context_length =
      static_cast<int32_t>(std::min<int64_t>(engine_->max_context_len(), pool_tokens));
  limits_.max_prompt_tokens = limits_.context_length - 1;
  limits_.max_tokens = limits_.context_length - 1;
  limits_.default_max_tokens = 0;
  limits_.max_n = options.max_n;
  limits_.max_logprobs = options.max_logprobs;
  limits_.max_stop_strings = tokenizer != nullptr ? options.max_stop_strings : 0;
  limits_.chat_supported = renderer_.chat_template() != nullptr;
  limits_.kv_block_size = options.block_size;
  limits_.kv_total_blocks = engine_->num_kv_blocks();

  model_info_.set_name(config.name);
  for (const std::string& alias : limits_.model_aliases) model_info_.add_aliases(alias);
  model_info_.set_architecture(config.architecture);
  model_info_.set_vocab_size(limits_.vocab_size);
  model_info_.set_context_length(limits_.model_context_length);
  model_info_.set_pool_limited_context_length(limits_.context_length);
  model_info_.set_kv_block_size(options.block_size);
  model_info_.set_kv_transfer_format(engine_->kv_transfer_format());
  for (int32_t eos : engine_->eos_token_ids()) model_info_.add_eos_token_ids(eos);
  if (tokenizer != nullptr && tokenizer->bos_id() >= 0) {
    model_info_.set_bos_token_id(tokenizer->bos_id());
  }
  // Every template is Jinja now (tokenizer/chat_template.h); empty still means no chat.
  if (tokenizer != nullptr) {
    absl::StatusOr<GrammarVocabulary> vocabulary =
        VocabularyFromTokenizer(*tokenizer, limits_.vocab_size, engine_->eos_token_ids());
    absl::StatusOr<std::unique_ptr<GrammarCompiler>> compiler =
        vocabulary.ok() ? GrammarCompiler::Create(*vocabulary, GrammarOptions())
                        : vocabulary.status();
    if (compiler.ok()) {
      grammar_ = *std::move(compiler);
    } else {
      std::fprintf(stderr, "kvserve-worker: no structured output: %s\n",
                   std::string(compiler.status().message()).c_str());
    }
  }
  if (renderer_.chat_template() != nullptr) {
    model_info_.set_chat_template_format("jinja");
    model_info_.set_tool_call_format(std::string(ToolCallFormatName(
        ServedToolCallFormat(*renderer_.chat_template(), tokenizer->chat_template()))));
  }
  *model_info_.mutable_limits() = ToProtoLimits(limits_);
  model_info_.set_tensor_parallel_size(tensor_parallel_size);
  model_info_.set_server_version(KvserveVersionString());
  *model_info_.mutable_fingerprint() = ServingFingerprintOf(tokenizer, options.block_size);

  absl::MutexLock lock(&identity_mu_);
  identity_.set_worker_id(std::move(worker_id));
  identity_.set_model_name(config.name);
  identity_.set_tensor_parallel_size(tensor_parallel_size);
}

void ServingContext::SetWorkerId(std::string worker_id) {
  absl::MutexLock lock(&identity_mu_);
  identity_.set_worker_id(std::move(worker_id));
}

v1::WorkerIdentity ServingContext::identity() const {
  absl::MutexLock lock(&identity_mu_);
  return identity_;
}

absl::Status ServingContext::Rejected(absl::Status status, absl::string_view id) {
  if (metrics_ != nullptr) metrics_->RecordRejected(status.code());
  LogRequestRefused(id, status);
  return status;
}

void ServingContext::SetDraining() { draining_.store(true, std::memory_order_release); }

void ServingContext::Abort(const std::string& engine_request_id) {
  (void)engine_->Abort(engine_request_id);  // NOT_FOUND: it already ended, nothing to free
}

absl::StatusOr<StartedRequest> ServingContext::StartGenerate(
    const v1::GenerateRequest& request, absl::string_view metadata_request_id) {
  const uint64_t number = next_request_number_.fetch_add(1);
  std::string client_id = !request.request_id().empty()  ? request.request_id()
                          : !metadata_request_id.empty() ? std::string(metadata_request_id)
                                                         : absl::StrCat("req-", number);
  if (draining()) return Rejected(Draining(), client_id);
  if (absl::Status s = ValidateGenerateRequest(request, limits_); !s.ok()) {
    return Rejected(s, client_id);
  }
  EngineRequest engine_request;
  absl::StatusOr<std::vector<int32_t>> prompt = renderer_.Render(PromptInputOf(request));
  if (!prompt.ok()) return Rejected(prompt.status(), client_id);
  engine_request.prompt_token_ids = *std::move(prompt);
  if (absl::Status s =
          ValidatePromptTokens(engine_request.prompt_token_ids, limits_, "prompt_token_ids.ids");
      !s.ok()) {
    return Rejected(s, client_id);
  }
  engine_request.sampling = ResolveSampling(request.sampling(), limits_);
  engine_request.n = ResolveN(request.sampling());
  if (absl::Status s = ValidateKvFit(static_cast<int32_t>(engine_request.prompt_token_ids.size()),
                                     engine_request.sampling.max_tokens, engine_request.n, limits_);
      !s.ok()) {
    return Rejected(s, client_id);
  }
  if (absl::Status s = CompileConstraint(request.sampling(), &engine_request.sampling); !s.ok()) {
    return Rejected(s, client_id);
  }
  engine_request.priority = request.priority();
  engine_request.request_id = absl::StrCat("g", number);
  engine_request.log_id = client_id;
  return Submit(std::move(engine_request), std::move(client_id));
}

absl::StatusOr<StartedRequest> ServingContext::StartWorkerGenerate(
    const v1::WorkerGenerateRequest& request, absl::string_view metadata_request_id) {
  const std::string log_id =
      metadata_request_id.empty() ? request.request_id() : std::string(metadata_request_id);
  if (draining()) return Rejected(Draining(), log_id);
  if (absl::Status s = ValidateWorkerGenerateRequest(request, limits_); !s.ok()) {
    return Rejected(s, log_id);
  }
  EngineRequest engine_request;
  engine_request.prompt_token_ids.assign(request.prompt_token_ids().begin(),
                                         request.prompt_token_ids().end());
  engine_request.cache_salt = request.cache_salt();
  engine_request.progress_interval = absl::Milliseconds(request.progress_interval_ms());
  engine_request.sampling = ResolveSampling(request.sampling(), limits_);
  engine_request.n = ResolveN(request.sampling());
  if (absl::Status s = CompileConstraint(request.sampling(), &engine_request.sampling); !s.ok()) {
    return Rejected(s, log_id);
  }
  for (const v1::WorkerChoice& choice : request.choices()) {
    ChoiceStart& start = engine_request.choices.emplace_back();
    start.index = choice.index();
    start.generated_token_ids.assign(choice.generated_token_ids().begin(),
                                     choice.generated_token_ids().end());
    start.emitted_text_bytes = choice.emitted_text_bytes();
  }
  if (absl::Status s = ValidateKvFit(static_cast<int32_t>(engine_request.prompt_token_ids.size()),
                                     engine_request.sampling.max_tokens, engine_request.n, limits_);
      !s.ok()) {
    return Rejected(s, log_id);
  }
  if (request.has_kv_source() && kv_fetcher_ != nullptr) {
    // The context the router's books matched: the prompt and the first choice's tokens so far.
    KvTransferQuery context;
    context.tokens = engine_request.prompt_token_ids;
    const std::vector<int32_t>& generated = engine_request.choices.front().generated_token_ids;
    context.tokens.insert(context.tokens.end(), generated.begin(), generated.end());
    context.cache_salt = engine_request.cache_salt;
    kv_fetcher_->Fetch(request.kv_source(), context);
  }
  engine_request.request_id =
      absl::StrCat("w", next_request_number_.fetch_add(1), ":", request.request_id());
  engine_request.log_id = log_id;
  return Submit(std::move(engine_request), request.request_id());
}

absl::Status ServingContext::CompileConstraint(const v1::SamplingParams& sampling,
                                               SamplingOptions* options) {
  const Constraint constraint = ConstraintOf(sampling);
  if (!constraint.constrains()) return absl::OkStatus();
  if (grammar_ == nullptr) {
    return absl::InvalidArgumentError(
        "sampling.structured_output: the served model has no tokenizer to constrain");
  }
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> compiled =
      grammar_->Compile(constraint, constraint_compile_timeout_);
  if (!compiled.ok()) {
    return absl::Status(compiled.status().code(),
                        absl::StrCat("sampling.structured_output: ", compiled.status().message()));
  }
  options->constraint = *std::move(compiled);
  return absl::OkStatus();
}

absl::StatusOr<StartedRequest> ServingContext::Submit(EngineRequest request,
                                                      std::string client_request_id) {
  StartedRequest started;
  started.engine_request_id = request.request_id;
  started.client_request_id = std::move(client_request_id);
  const std::string log_id = request.log_id;
  absl::StatusOr<std::shared_ptr<RequestStream>> stream = engine_->Submit(std::move(request));
  if (!stream.ok()) return Rejected(stream.status(), log_id);
  started.stream = *std::move(stream);
  return started;
}

absl::StatusOr<v1::TokenizeResponse> ServingContext::Tokenize(
    const v1::TokenizeRequest& request) const {
  KVSERVE_RETURN_IF_ERROR(ValidateTokenizeRequest(request, limits_));
  KVSERVE_ASSIGN_OR_RETURN(
      TokenizedPrompt tokenized,
      renderer_.Tokenize(PromptInputOf(request), request.return_token_bytes()));
  return ToTokenizeResponse(std::move(tokenized));
}

absl::StatusOr<v1::DetokenizeResponse> ServingContext::Detokenize(
    const v1::DetokenizeRequest& request) const {
  KVSERVE_RETURN_IF_ERROR(ValidateDetokenizeRequest(request, limits_));
  KVSERVE_ASSIGN_OR_RETURN(
      std::string text,
      renderer_.Detokenize(request.token_ids(), !request.detokenize_special_tokens()));
  v1::DetokenizeResponse response;
  response.set_text(std::move(text));
  return response;
}

absl::StatusOr<v1::ModelInfo> ServingContext::GetModelInfo(absl::string_view model) const {
  KVSERVE_RETURN_IF_ERROR(ValidateModelName(model, limits_));
  return model_info_;
}

}  // namespace kvserve
