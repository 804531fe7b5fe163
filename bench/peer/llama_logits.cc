// llama_logits: llama.cpp's teacher-forced logits of every position of a token file, for
// bench/peer/fidelity.sh (not part of the kvserve build: the script compiles it against the
// llama.cpp build it makes in /tmp and links that build's libllama).
//
//   llama_logits MODEL.gguf TOKENS OUT KV_TYPE FLASH_ATTN THREADS CHUNK_TOKENS
//
// TOKENS: one sequence per line, token ids separated by spaces (the format fidelity_bench
// reads). Each sequence is decoded from position 0 in a cleared cache, in llama_decode calls of
// at most CHUNK_TOKENS tokens, with logits requested for every token; the ids are fed as they
// are (no BOS is added, nothing is re-tokenized). KV_TYPE is the cache type: f32 or f16
// (llama.cpp's default). FLASH_ATTN: auto (llama.cpp's default; on for the CPU) or off. With
// flash attention on, llama.cpp casts f32 K and V to f16 before attending
// (src/llama-graph.cpp, build_attn_mha), so an f32 cache stays f32 only with off. Everything
// else is llama.cpp's default.
// OUT: int32 rows, int32 vocab, then [rows, vocab] float32 logits, sequences in file order
// (fidelity_bench --reference_logits / --test_logits reads it).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

namespace {

std::vector<std::vector<llama_token>> ReadSequences(const char* path) {
  std::vector<std::vector<llama_token>> sequences;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ids(line);
    std::vector<llama_token> sequence;
    for (llama_token id; ids >> id;) sequence.push_back(id);
    if (!sequence.empty()) sequences.push_back(std::move(sequence));
  }
  return sequences;
}

void QuietLog(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

bool NoProgress(float, void*) { return true; }

int Fail(const char* what) {
  std::fprintf(stderr, "llama_logits: %s\n", what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    return Fail("usage: llama_logits MODEL.gguf TOKENS OUT f32|f16 auto|off THREADS CHUNK_TOKENS");
  }
  const std::string kv_type = argv[4];
  const std::string flash_attn = argv[5];
  const int threads = std::atoi(argv[6]);
  const int chunk = std::atoi(argv[7]);
  if (kv_type != "f32" && kv_type != "f16") return Fail("KV_TYPE must be f32 or f16");
  if (flash_attn != "auto" && flash_attn != "off") return Fail("FLASH_ATTN must be auto or off");
  if (threads <= 0 || chunk <= 0) return Fail("THREADS and CHUNK_TOKENS must be positive");
  const std::vector<std::vector<llama_token>> sequences = ReadSequences(argv[2]);
  if (sequences.empty()) return Fail("no token sequences in TOKENS");
  size_t longest = 0;
  int64_t rows = 0;
  for (const auto& sequence : sequences) {
    longest = std::max(longest, sequence.size());
    rows += static_cast<int64_t>(sequence.size());
  }

  llama_log_set(QuietLog, nullptr);
  llama_backend_init();
  llama_model_params model_params = llama_model_default_params();
  model_params.n_gpu_layers = 0;
  model_params.progress_callback = NoProgress;
  llama_model* model = llama_model_load_from_file(argv[1], model_params);
  if (model == nullptr) return Fail("cannot load MODEL");
  const int32_t vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  llama_context_params params = llama_context_default_params();
  params.n_ctx = static_cast<uint32_t>(longest);
  params.n_batch = static_cast<uint32_t>(chunk);
  params.n_ubatch = static_cast<uint32_t>(chunk);
  params.n_seq_max = 1;
  params.n_threads = threads;
  params.n_threads_batch = threads;
  params.type_k = kv_type == "f32" ? GGML_TYPE_F32 : GGML_TYPE_F16;
  params.type_v = params.type_k;
  params.flash_attn_type =
      flash_attn == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
  params.no_perf = true;
  llama_context* context = llama_init_from_model(model, params);
  if (context == nullptr) return Fail("cannot create the context");

  std::FILE* out = std::fopen(argv[3], "wb");
  if (out == nullptr) return Fail("cannot open OUT");
  const int32_t header[2] = {static_cast<int32_t>(rows), vocab};
  std::fwrite(header, sizeof(header), 1, out);
  llama_batch batch = llama_batch_init(chunk, 0, 1);
  for (const auto& sequence : sequences) {
    llama_memory_clear(llama_get_memory(context), true);
    for (size_t start = 0; start < sequence.size(); start += chunk) {
      const int n = static_cast<int>(std::min<size_t>(chunk, sequence.size() - start));
      batch.n_tokens = n;
      for (int i = 0; i < n; ++i) {
        batch.token[i] = sequence[start + i];
        batch.pos[i] = static_cast<llama_pos>(start + i);
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
      }
      if (llama_decode(context, batch) != 0) return Fail("llama_decode failed");
      for (int i = 0; i < n; ++i) {
        std::fwrite(llama_get_logits_ith(context, i), sizeof(float), vocab, out);
      }
    }
  }
  llama_batch_free(batch);
  const bool written = std::fclose(out) == 0;
  llama_free(context);
  llama_model_free(model);
  llama_backend_free();
  return written ? 0 : Fail("cannot write OUT");
}
