// Structured-output benchmarks (grammar/) on the default model's vocabulary (SmolLM2, 49152
// tokens). Run:
//   build/bench/grammar_bench
// BM_MaskStep: one decode step of a constrained request: fill the next-token bitmask and accept
// the token, along the tokens of a document valid for a 10-field JSON schema (the document as
// the tokenizer encodes it; rolled back at its end, the rollback outside the timing).
// BM_MaskPercentiles: the same walk, each step timed on its own, for the spread a mean hides:
// p50 / p99 / max of the mask fill per token (fill_*) and of the whole step (step_*: fill +
// accept), in µs, over every token of every pass. BM_ApplyTokenMask: masking 49152 logits on the
// CPU. BM_Compile*: the schema compiled with an empty cache (cold) and found in the cache
// (cached), each call timed on its own (p50_us, p99_us, max_us).
#include <benchmark/benchmark.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "bench/loadgen_stats.h"
#include "grammar/constraint.h"
#include "grammar/grammar_compiler.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"
#include "model/default_model.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

constexpr char kTenFieldDocument[] =
    R"({"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "score": 97.5, )"
    R"("active": true, "tags": ["math", "engines", "poetry"], "role": "editor", )"
    R"("address": {"street": "12 St James's Square", "city": "London", "zip": "10001"}, )"
    R"("manager": null, "notes": "Wrote the first published algorithm for a machine."})";

struct Setup {
  std::unique_ptr<Tokenizer> tokenizer;
  GrammarVocabulary vocabulary;
  std::unique_ptr<GrammarCompiler> compiler;
  std::vector<int32_t> document;  // kTenFieldDocument's tokens, then EOS
  std::string error;
};

const Setup& GetSetup() {
  static const Setup* const setup = [] {
    auto* s = new Setup;
    auto tokenizer = Tokenizer::FromModelPath(DefaultModelPath());
    if (!tokenizer.ok() || *tokenizer == nullptr) {
      s->error = "no tokenizer at " + DefaultModelPath() + " (scripts/fetch_model.sh)";
      return s;
    }
    s->tokenizer = std::move(*tokenizer);
    auto vocabulary = VocabularyFromTokenizer(*s->tokenizer, s->tokenizer->vocab_size(),
                                              {s->tokenizer->eos_id()});
    auto compiler = vocabulary.ok()
                        ? GrammarCompiler::Create(*vocabulary)
                        : absl::StatusOr<std::unique_ptr<GrammarCompiler>>(vocabulary.status());
    if (!compiler.ok()) {
      s->error = std::string(compiler.status().message());
      return s;
    }
    s->vocabulary = std::move(*vocabulary);
    s->compiler = std::move(*compiler);
    s->document = s->tokenizer->Encode(kTenFieldDocument, /*add_bos=*/false);
    s->document.push_back(s->tokenizer->eos_id());
    return s;
  }();
  return *setup;
}

// bench/ten_field_schema.json, which bench/structured_output.py serves too.
const Constraint& Schema() {
  static const Constraint* const schema = [] {
    std::ifstream in(std::string(KVSERVE_SOURCE_DIR) + "/bench/ten_field_schema.json");
    std::stringstream text;
    text << in.rdbuf();
    return new Constraint{Constraint::kJsonSchema, text.str(), {}};
  }();
  return *schema;
}

// A matcher at the start of the 10-field schema (compiled, or found in the cache).
absl::StatusOr<std::unique_ptr<Matcher>> SchemaMatcher(const Setup& setup) {
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> compiled =
      setup.compiler->Compile(Schema(), absl::Minutes(1));
  if (!compiled.ok()) return compiled.status();
  return Matcher::Create(*std::move(compiled));
}

using Clock = std::chrono::steady_clock;

double Microseconds(Clock::duration duration) {
  return std::chrono::duration<double, std::micro>(duration).count();
}

// `name`_p50_us, _p99_us and _max_us (nearest rank) of samples in µs, as counters (Percentiles
// is written for seconds but any unit goes through unchanged).
void ReportPercentiles(benchmark::State& state, const std::string& name,
                       std::vector<double> samples_us) {
  const LatencyPercentiles percentiles = Percentiles(std::move(samples_us));
  state.counters[name + "_p50_us"] = percentiles.p50_s;
  state.counters[name + "_p99_us"] = percentiles.p99_s;
  state.counters[name + "_max_us"] = percentiles.max_s;
}

void BM_MaskStep(benchmark::State& state) {
  const Setup& setup = GetSetup();
  if (!setup.error.empty()) return state.SkipWithError(setup.error.c_str());
  auto matcher = SchemaMatcher(setup);
  if (!matcher.ok()) return state.SkipWithError(std::string(matcher.status().message()).c_str());
  std::vector<uint32_t> mask(Matcher::MaskWords(setup.compiler->vocab_size()));
  size_t position = 0;
  for (auto _ : state) {
    (void)(*matcher)->FillNextTokenBitmask(mask.data());
    if (!(*matcher)->AcceptToken(setup.document[position])) {
      return state.SkipWithError("the document does not match the schema");
    }
    benchmark::DoNotOptimize(mask.data());
    if (++position == setup.document.size()) {
      state.PauseTiming();
      (void)(*matcher)->Rollback(static_cast<int32_t>(position));
      position = 0;
      state.ResumeTiming();
    }
  }
  state.counters["document_tokens"] = static_cast<double>(setup.document.size());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MaskStep)->Unit(benchmark::kMicrosecond);

// One iteration is one pass over the document; its time is the sum of its steps.
void BM_MaskPercentiles(benchmark::State& state) {
  const Setup& setup = GetSetup();
  if (!setup.error.empty()) return state.SkipWithError(setup.error.c_str());
  auto matcher = SchemaMatcher(setup);
  if (!matcher.ok()) return state.SkipWithError(std::string(matcher.status().message()).c_str());
  std::vector<uint32_t> mask(Matcher::MaskWords(setup.compiler->vocab_size()));
  std::vector<double> fill_us, step_us;
  for (auto _ : state) {
    Clock::duration pass{};
    for (const int32_t token : setup.document) {
      const Clock::time_point start = Clock::now();
      (void)(*matcher)->FillNextTokenBitmask(mask.data());
      const Clock::time_point filled = Clock::now();
      const bool accepted = (*matcher)->AcceptToken(token);
      const Clock::time_point end = Clock::now();
      if (!accepted) return state.SkipWithError("the document does not match the schema");
      benchmark::DoNotOptimize(mask.data());
      fill_us.push_back(Microseconds(filled - start));
      step_us.push_back(Microseconds(end - start));
      pass += end - start;
    }
    (void)(*matcher)->Rollback(static_cast<int32_t>(setup.document.size()));
    state.SetIterationTime(std::chrono::duration<double>(pass).count());
  }
  state.counters["document_tokens"] = static_cast<double>(setup.document.size());
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(setup.document.size()));
  ReportPercentiles(state, "fill", std::move(fill_us));
  ReportPercentiles(state, "step", std::move(step_us));
}
BENCHMARK(BM_MaskPercentiles)->UseManualTime()->Unit(benchmark::kMicrosecond);

// The mask fill alone at the first token of the document and at one inside a free string.
void BM_FillMaskAt(benchmark::State& state) {
  const Setup& setup = GetSetup();
  if (!setup.error.empty()) return state.SkipWithError(setup.error.c_str());
  auto matcher = SchemaMatcher(setup);
  if (!matcher.ok()) return state.SkipWithError(std::string(matcher.status().message()).c_str());
  const int64_t tokens_before = state.range(0);
  for (int64_t i = 0; i < tokens_before; ++i) (*matcher)->AcceptToken(setup.document[i]);
  std::vector<uint32_t> mask(Matcher::MaskWords(setup.compiler->vocab_size()));
  for (auto _ : state) {
    (void)(*matcher)->FillNextTokenBitmask(mask.data());
    benchmark::DoNotOptimize(mask.data());
  }
}
// 0: before "{"; 5: inside the "name" string.
BENCHMARK(BM_FillMaskAt)->Arg(0)->Arg(5)->Unit(benchmark::kMicrosecond);

// Arg: the mask's words: 0 none allowed, 1 every other group of four, 2 a few tokens in words of
// none (a mask inside a JSON structure).
void BM_ApplyTokenMask(benchmark::State& state) {
  const int32_t vocab = 49152;
  std::vector<uint32_t> mask(Matcher::MaskWords(vocab), state.range(0) == 1 ? 0x0F0F0F0Fu : 0u);
  if (state.range(0) == 2) {
    for (size_t word = 0; word < mask.size(); word += 97) mask[word] = 1u << (word % 32);
  }
  std::vector<float> logits(vocab, 1.0f);
  for (auto _ : state) {
    ApplyTokenMask(mask.data(), logits.data(), vocab);
    benchmark::DoNotOptimize(logits.data());
  }
}
BENCHMARK(BM_ApplyTokenMask)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

// Arg: threads per compile. Each compile is timed from the call to its result (it runs on threads
// of its own); the cache is cleared outside the timing.
void BM_CompileCold(benchmark::State& state) {
  const Setup& setup = GetSetup();
  if (!setup.error.empty()) return state.SkipWithError(setup.error.c_str());
  GrammarCompilerOptions options;
  options.threads_per_compile = static_cast<int>(state.range(0));
  auto compiler = GrammarCompiler::Create(setup.vocabulary, options);
  if (!compiler.ok()) return state.SkipWithError(std::string(compiler.status().message()).c_str());
  std::vector<double> samples_us;
  for (auto _ : state) {
    (*compiler)->ClearCache();
    const Clock::time_point start = Clock::now();
    auto compiled = (*compiler)->Compile(Schema(), absl::Minutes(1));
    const Clock::duration elapsed = Clock::now() - start;
    if (!compiled.ok()) return state.SkipWithError("compile failed");
    state.SetIterationTime(std::chrono::duration<double>(elapsed).count());
    samples_us.push_back(Microseconds(elapsed));
  }
  ReportPercentiles(state, "compile", std::move(samples_us));
}
BENCHMARK(BM_CompileCold)
    ->Arg(1)
    ->Arg(2)
    ->MinTime(2.0)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_CompileCached(benchmark::State& state) {
  const Setup& setup = GetSetup();
  if (!setup.error.empty()) return state.SkipWithError(setup.error.c_str());
  (void)setup.compiler->Compile(Schema(), absl::Minutes(1));
  std::vector<double> samples_us;
  for (auto _ : state) {
    const Clock::time_point start = Clock::now();
    auto compiled = setup.compiler->Compile(Schema(), absl::Minutes(1));
    const Clock::duration elapsed = Clock::now() - start;
    benchmark::DoNotOptimize(compiled);
    state.SetIterationTime(std::chrono::duration<double>(elapsed).count());
    samples_us.push_back(Microseconds(elapsed));
  }
  ReportPercentiles(state, "compile", std::move(samples_us));
}
BENCHMARK(BM_CompileCached)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvserve

BENCHMARK_MAIN();
