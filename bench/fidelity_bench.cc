// fidelity_bench: how far a quantized path's logits are from its fp32 path's, teacher-forced over
// every position of a token file. bench/peer/fidelity.sh runs it for kvserve and for llama.cpp,
// so that both engines are measured by this one definition. Two modes:
//
//   fidelity_bench --tokens=FILE [--kv_cache_dtype=float32] [--threads=2] [--chunk_tokens=256]
//       kvserve: reference = the weights dequantized to fp32 with an fp32 KV cache (--dtype=
//       float32); test = the weights as the GGUF stores them (Q4_1 blocks computed with int8
//       activations, kernels/cpu/quant_linear.h; --dtype=auto on the CPU) with a KV cache of
//       --kv_cache_dtype. Both run LlamaModel directly, in the same steps.
//   fidelity_bench --tokens=FILE --reference_logits=A --test_logits=B
//       any engine: A and B hold [rows, vocab] logits of the same positions (bench/peer/
//       llama_logits.cc writes them: int32 rows, int32 vocab, then float32 rows).
//
// FILE: one sequence per line, token ids separated by spaces. Each sequence is computed from
// position 0 in a fresh cache in steps of at most --chunk_tokens tokens, and every position is
// scored. Metrics over the scored rows (p = softmax of the reference's logits, q = the test's):
//   KLD       KL(p || q) = sum_v p_v (log p_v - log q_v), nats; mean (with its standard error,
//             rows taken as independent) and max over rows
//   rel err   max_v |test_v - ref_v| / max_v |ref_v| (the measure of RelativeError in
//             tests/model/llama_model_test_util.h); mean and max over rows
//   top-1     the share of rows whose argmax (lowest id on ties) is the same
//   RMS dp    sqrt(mean (q_next - p_next)^2), where next is the token that follows the position
//             in its sequence (a sequence's last position has none): llama-perplexity's
//             "RMS dp", so its figures can be set beside these
//   PPL       exp(mean -log p_next) of the reference and of the test, same rows as RMS dp
// The last output line is "fidelity: key=value ..." for scripts.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "base/status_macros.h"
#include "kernels/backend_factory.h"
#include "model/default_model.h"
#include "model/device_weights.h"
#include "model/forward_batch.h"
#include "model/kv_pool.h"
#include "model/llama_model.h"
#include "model/weights_loader.h"

ABSL_FLAG(std::string, tokens, "", "token file: one sequence per line, ids separated by spaces");
ABSL_FLAG(std::string, model, "", "GGUF model; default: the cached SmolLM2-135M-Instruct Q4_1");
ABSL_FLAG(std::string, kv_cache_dtype, "float32",
          "KV cache of the stored-weights path: float32 (the CPU worker's default for "
          "--dtype=auto), bfloat16, float16");
ABSL_FLAG(int32_t, threads, 2, "CPU threads");
ABSL_FLAG(int32_t, chunk_tokens, 256, "tokens per forward step (long sequences take several)");
ABSL_FLAG(std::string, reference_logits, "", "compare mode: the reference engine's logits");
ABSL_FLAG(std::string, test_logits, "", "compare mode: the test engine's logits");

namespace kvserve {
namespace {

constexpr int32_t kBlockSize = 16;

// Accumulates the distance of test logit rows from reference rows, one position at a time.
class FidelityStats {
 public:
  explicit FidelityStats(int32_t vocab) : log_p_(vocab), log_q_(vocab) {}

  // ref, test: [vocab] logits of one position; next_token: the id that follows the position in
  // its sequence, or -1 for a sequence's last position.
  void Add(absl::Span<const float> ref, absl::Span<const float> test, int32_t next_token) {
    LogSoftmax(ref, log_p_);
    LogSoftmax(test, log_q_);
    double kld = 0.0;
    double max_diff = 0.0;
    double max_ref = 0.0;
    for (size_t v = 0; v < ref.size(); ++v) {
      kld += std::exp(log_p_[v]) * (log_p_[v] - log_q_[v]);
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(test[v]) - ref[v]));
      max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[v])));
    }
    const double relative_error = max_ref > 0.0 ? max_diff / max_ref : max_diff;
    ++rows_;
    kld_sum_ += kld;
    kld_squared_sum_ += kld * kld;
    kld_max_ = std::max(kld_max_, kld);
    relative_error_sum_ += relative_error;
    relative_error_max_ = std::max(relative_error_max_, relative_error);
    top1_same_ += std::max_element(ref.begin(), ref.end()) - ref.begin() ==
                  std::max_element(test.begin(), test.end()) - test.begin();
    if (next_token >= 0) {
      const double dp = std::exp(log_q_[next_token]) - std::exp(log_p_[next_token]);
      ++next_rows_;
      dp_squared_sum_ += dp * dp;
      nll_ref_sum_ -= log_p_[next_token];
      nll_test_sum_ -= log_q_[next_token];
    }
  }

  void Print(const std::string& label) const {
    const double rows = static_cast<double>(rows_);
    const double next_rows = static_cast<double>(std::max<int64_t>(next_rows_, 1));
    std::printf("%s\n  rows %lld\n", label.c_str(), static_cast<long long>(rows_));
    const double kld_mean = kld_sum_ / rows;
    // The standard error of the mean: sqrt(variance / rows).
    const double kld_se =
        std::sqrt(std::max(0.0, kld_squared_sum_ / rows - kld_mean * kld_mean) / rows);
    std::printf("  KLD mean %.6f +- %.6f  max %.6f nats\n", kld_mean, kld_se, kld_max_);
    std::printf("  rel err mean %.5f  max %.5f\n", relative_error_sum_ / rows, relative_error_max_);
    std::printf("  top-1 agreement %.4f (%lld of %lld)\n", top1_same_ / rows,
                static_cast<long long>(top1_same_), static_cast<long long>(rows_));
    std::printf("  RMS dp %.5f  PPL ref %.4f  test %.4f (%lld rows with a next token)\n",
                std::sqrt(dp_squared_sum_ / next_rows), std::exp(nll_ref_sum_ / next_rows),
                std::exp(nll_test_sum_ / next_rows), static_cast<long long>(next_rows_));
    std::printf(
        "fidelity: rows=%lld kld_mean=%.6g kld_se=%.6g kld_max=%.6g rel_err_mean=%.6g "
        "rel_err_max=%.6g top1=%.6g rms_dp=%.6g ppl_ref=%.6g ppl_test=%.6g\n",
        static_cast<long long>(rows_), kld_mean, kld_se, kld_max_, relative_error_sum_ / rows,
        relative_error_max_, top1_same_ / rows, std::sqrt(dp_squared_sum_ / next_rows),
        std::exp(nll_ref_sum_ / next_rows), std::exp(nll_test_sum_ / next_rows));
  }

 private:
  static void LogSoftmax(absl::Span<const float> logits, std::vector<double>& out) {
    const double max = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (float logit : logits) sum += std::exp(logit - max);
    const double log_sum = max + std::log(sum);
    for (size_t v = 0; v < logits.size(); ++v) out[v] = logits[v] - log_sum;
  }

  std::vector<double> log_p_;  // [vocab] the reference row's log-probabilities
  std::vector<double> log_q_;  // [vocab] the test row's
  int64_t rows_ = 0;
  int64_t next_rows_ = 0;
  int64_t top1_same_ = 0;
  double kld_sum_ = 0.0;
  double kld_squared_sum_ = 0.0;
  double kld_max_ = 0.0;
  double relative_error_sum_ = 0.0;
  double relative_error_max_ = 0.0;
  double dp_squared_sum_ = 0.0;
  double nll_ref_sum_ = 0.0;
  double nll_test_sum_ = 0.0;
};

absl::StatusOr<std::vector<std::vector<int32_t>>> ReadSequences(const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) return absl::NotFoundError(absl::StrCat("tokens: cannot read ", path));
  std::vector<std::vector<int32_t>> sequences;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ids(line);
    std::vector<int32_t> sequence;
    for (int32_t id; ids >> id;) sequence.push_back(id);
    if (!ids.eof()) return absl::InvalidArgumentError(absl::StrCat("tokens: bad line: ", line));
    if (!sequence.empty()) sequences.push_back(std::move(sequence));
  }
  if (sequences.empty()) return absl::InvalidArgumentError(absl::StrCat("tokens: none in ", path));
  return sequences;
}

// A logits file of bench/peer/llama_logits.cc, read one row at a time.
class LogitsFile {
 public:
  absl::Status Open(const std::string& path) {
    in_.open(path, std::ios::binary);
    int32_t header[2] = {0, 0};
    in_.read(reinterpret_cast<char*>(header), sizeof(header));
    if (!in_.good() || header[0] <= 0 || header[1] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot read a logits header from ", path));
    }
    rows_ = header[0];
    row_.resize(header[1]);
    return absl::OkStatus();
  }
  int64_t rows() const { return rows_; }
  int32_t vocab() const { return static_cast<int32_t>(row_.size()); }
  absl::StatusOr<absl::Span<const float>> Next() {
    in_.read(reinterpret_cast<char*>(row_.data()), row_.size() * sizeof(float));
    if (!in_.good()) return absl::DataLossError("logits file ends early");
    return absl::MakeConstSpan(row_);
  }

 private:
  std::ifstream in_;
  int64_t rows_ = 0;
  std::vector<float> row_;
};

absl::Status CompareFiles(const std::vector<std::vector<int32_t>>& sequences) {
  LogitsFile ref;
  LogitsFile test;
  KVSERVE_RETURN_IF_ERROR(ref.Open(absl::GetFlag(FLAGS_reference_logits)));
  KVSERVE_RETURN_IF_ERROR(test.Open(absl::GetFlag(FLAGS_test_logits)));
  int64_t positions = 0;
  for (const auto& sequence : sequences) positions += static_cast<int64_t>(sequence.size());
  if (ref.rows() != positions || test.rows() != positions || ref.vocab() != test.vocab()) {
    return absl::InvalidArgumentError(
        absl::StrCat("logits files hold ", ref.rows(), " and ", test.rows(), " rows of ",
                     ref.vocab(), " and ", test.vocab(), " logits; tokens has ", positions));
  }
  FidelityStats stats(ref.vocab());
  for (const std::vector<int32_t>& sequence : sequences) {
    for (size_t i = 0; i < sequence.size(); ++i) {
      KVSERVE_ASSIGN_OR_RETURN(absl::Span<const float> ref_row, ref.Next());
      KVSERVE_ASSIGN_OR_RETURN(absl::Span<const float> test_row, test.Next());
      stats.Add(ref_row, test_row, i + 1 < sequence.size() ? sequence[i + 1] : -1);
    }
  }
  stats.Print(absl::StrCat(absl::GetFlag(FLAGS_test_logits), " vs ",
                           absl::GetFlag(FLAGS_reference_logits)));
  return absl::OkStatus();
}

// One weights + model + pool, sized for the longest sequence.
struct Engine {
  std::unique_ptr<DeviceWeights> weights;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<KvPool> pool;
};

// The model at `path` on `backend`: fp32 weights, or with keep_stored_types the file's own blocks;
// *weight_types says which ("f32+q4_1x210+q8_0x1": stored types x count).
absl::StatusOr<Engine> MakeEngine(const std::string& path, bool keep_stored_types, KvDtype kv_dtype,
                                  int32_t longest, std::shared_ptr<kernels::Backend> backend,
                                  std::string* weight_types) {
  KVSERVE_ASSIGN_OR_RETURN(ModelWeights host,
                           LoadWeights(path, {.keep_stored_types = keep_stored_types}));
  absl::btree_map<std::string, int> stored;
  for (const auto& [name, matrix] : host.stored) ++stored[kernels::DTypeName(matrix.dtype)];
  *weight_types = "f32";
  for (const auto& [type, count] : stored) absl::StrAppend(weight_types, "+", type, "x", count);
  Engine engine;
  absl::StatusOr<std::unique_ptr<DeviceWeights>> weights =
      DeviceWeights::Upload(host, std::move(backend), kernels::DType::kF32);
  if (!weights.ok()) return weights.status();
  engine.weights = *std::move(weights);
  const int32_t chunk = std::min(absl::GetFlag(FLAGS_chunk_tokens), longest);
  const ForwardLimits limits{.max_num_tokens = chunk,
                             .max_num_seqs = 1,
                             .max_context_len = longest,
                             .max_logit_rows = chunk};
  absl::StatusOr<std::unique_ptr<LlamaModel>> model =
      LlamaModel::Create(engine.weights.get(), limits, kBlockSize, kv_dtype);
  if (!model.ok()) return model.status();
  engine.model = *std::move(model);
  const int32_t num_blocks = (longest + kBlockSize - 1) / kBlockSize + 1;  // + the null block
  absl::StatusOr<std::unique_ptr<KvPool>> pool =
      KvPool::Create(engine.model->kv_layout(), num_blocks, engine.model->backend());
  if (!pool.ok()) return pool.status();
  engine.pool = *std::move(pool);
  return engine;
}

absl::Status CompareKvserve(const std::vector<std::vector<int32_t>>& sequences) {
  const std::string path =
      absl::GetFlag(FLAGS_model).empty() ? DefaultModelPath() : absl::GetFlag(FLAGS_model);
  absl::StatusOr<KvDtype> kv_dtype =
      ParseKvDtype(absl::GetFlag(FLAGS_kv_cache_dtype), kernels::DType::kF32, "kv_cache_dtype");
  if (!kv_dtype.ok()) return kv_dtype.status();
  if (absl::GetFlag(FLAGS_chunk_tokens) <= 0 || absl::GetFlag(FLAGS_threads) <= 0) {
    return absl::InvalidArgumentError("chunk_tokens and threads must be positive");
  }
  int32_t longest = 0;
  for (const auto& sequence : sequences) {
    longest = std::max(longest, static_cast<int32_t>(sequence.size()));
  }
  std::string error;
  std::shared_ptr<kernels::Backend> backend =
      kernels::CreateBackend("cpu", absl::GetFlag(FLAGS_threads), &error);
  if (backend == nullptr) return absl::FailedPreconditionError(error);
  std::string ref_types;
  std::string test_types;
  KVSERVE_ASSIGN_OR_RETURN(Engine ref,
                           MakeEngine(path, false, KvDtype::kF32, longest, backend, &ref_types));
  KVSERVE_ASSIGN_OR_RETURN(Engine test,
                           MakeEngine(path, true, *kv_dtype, longest, backend, &test_types));
  const int32_t vocab = ref.model->config().vocab_size;
  const int32_t chunk = ref.model->limits().max_num_tokens;

  std::vector<int32_t> block_table((longest + kBlockSize - 1) / kBlockSize);
  std::iota(block_table.begin(), block_table.end(), 1);
  ForwardBatchBuilder builder(kBlockSize, static_cast<int32_t>(block_table.size()), chunk, 1);
  FidelityStats stats(vocab);
  std::vector<float> ref_logits;
  for (const std::vector<int32_t>& sequence : sequences) {
    const int32_t length = static_cast<int32_t>(sequence.size());
    for (int32_t start = 0; start < length; start += chunk) {
      const int32_t n = std::min(chunk, length - start);
      builder.Clear();
      absl::Status added = builder.AddSequence(absl::MakeConstSpan(sequence).subspan(start, n),
                                               start, block_table, LogitsFor::kAll);
      if (!added.ok()) return added;
      absl::StatusOr<absl::Span<const float>> logits = ref.model->Forward(builder.View(), *ref.pool);
      if (!logits.ok()) return logits.status();
      ref_logits.assign(logits->begin(), logits->end());
      logits = test.model->Forward(builder.View(), *test.pool);
      if (!logits.ok()) return logits.status();
      for (int32_t i = 0; i < n; ++i) {
        const size_t offset = static_cast<size_t>(i) * vocab;
        const int32_t next = start + i + 1 < length ? sequence[start + i + 1] : -1;
        stats.Add(absl::MakeConstSpan(ref_logits).subspan(offset, vocab),
                  logits->subspan(offset, vocab), next);
      }
    }
  }
  stats.Print(absl::StrCat("kvserve ", test_types, " weights + ",
                           std::string(KvDtypeName(*kv_dtype)), " KV vs ", ref_types,
                           " weights + f32 KV (", path, ")"));
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<std::vector<std::vector<int32_t>>> sequences =
      kvserve::ReadSequences(absl::GetFlag(FLAGS_tokens));
  absl::Status status = sequences.status();
  if (status.ok()) {
    const bool files =
        !absl::GetFlag(FLAGS_reference_logits).empty() || !absl::GetFlag(FLAGS_test_logits).empty();
    status = files ? kvserve::CompareFiles(*sequences) : kvserve::CompareKvserve(*sequences);
  }
  if (!status.ok()) {
    std::fprintf(stderr, "fidelity_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
