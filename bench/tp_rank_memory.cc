// tp_rank_memory: the resident memory of ONE tensor-parallel rank (one process) serving a
// model on the CPU, as the worker loads it (runner_factory: --dtype=auto keeps the file's
// blocks and computes from them in place). The rank loads its shard, runs a prefill of
// --prompt_tokens and --decode_steps greedy decode steps (the leader's token broadcast to the
// others), then prints its weight and KV bytes and its resident set from /proc/self/status.
//
//   tp_rank_memory                                   # TP = 1: the whole model
//   for r in 0 1 2; do tp_rank_memory --tp_size=3 --tp_rank=$r & done; wait
//
// Every rank of a group must be started with the same flags but --tp_rank.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "comm/gloo_communicator.h"
#include "model/default_model.h"
#include "runner/runner_factory.h"

ABSL_FLAG(std::string, model, "", "model spec; default: the cached SmolLM2-135M-Instruct Q4_1");
ABSL_FLAG(int32_t, tp_size, 1, "ranks in the group");
ABSL_FLAG(int32_t, tp_rank, 0, "this process's rank");
ABSL_FLAG(std::string, leader_address, "127.0.0.1:29517", "rank 0's rendezvous store");
ABSL_FLAG(int32_t, prompt_tokens, 128, "prefill length");
ABSL_FLAG(int32_t, decode_steps, 32, "greedy decode steps after the prefill");
ABSL_FLAG(int32_t, num_kv_blocks, 64, "KV pool blocks (per rank; the null block included)");
ABSL_FLAG(int32_t, block_size, 16, "tokens per KV block");

namespace kvserve {
namespace {

// kB fields of /proc/self/status ("VmRSS", "RssAnon", "RssFile", "VmHWM"), in MiB.
double StatusMiB(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, field + ":")) continue;
    int64_t kb = 0;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits.push_back(c);
    }
    if (absl::SimpleAtoi(digits, &kb)) return static_cast<double>(kb) / 1024.0;
  }
  return -1.0;
}

absl::Status Run() {
  const double start_rss = StatusMiB("VmRSS");
  const int32_t size = absl::GetFlag(FLAGS_tp_size);
  const int32_t rank = absl::GetFlag(FLAGS_tp_rank);
  std::unique_ptr<Communicator> comm;
  if (size > 1) {
    CommOptions comm_options;
    comm_options.rank = rank;
    comm_options.size = size;
    comm_options.leader_address = absl::GetFlag(FLAGS_leader_address);
    comm_options.hostname = "127.0.0.1";
    KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> joined,
                             CreateGlooCommunicator(comm_options));
    comm = std::move(joined);
  }
  RunnerFactoryOptions options;
  options.model =
      absl::GetFlag(FLAGS_model).empty() ? DefaultModelPath() : absl::GetFlag(FLAGS_model);
  options.num_threads = 1;
  options.enforce_eager = true;
  options.tensor_parallel = {.rank = rank, .size = size, .comm = comm.get()};
  KVSERVE_ASSIGN_OR_RETURN(CreatedRunner created, CreateLlamaRunner(options));
  const double loaded_rss = StatusMiB("VmRSS");

  const int32_t block_size = absl::GetFlag(FLAGS_block_size);
  const int32_t prompt = absl::GetFlag(FLAGS_prompt_tokens);
  const int32_t steps = absl::GetFlag(FLAGS_decode_steps);
  const int32_t num_blocks = absl::GetFlag(FLAGS_num_kv_blocks);
  const int32_t context = prompt + steps + 1;
  if ((context + block_size - 1) / block_size >= num_blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_kv_blocks: ", num_blocks, " blocks cannot hold ", context, " tokens"));
  }
  LlamaModelRunner& runner = *created.runner;
  KVSERVE_RETURN_IF_ERROR(runner.Initialize({.block_size = block_size,
                                             .num_blocks = num_blocks,
                                             .max_num_batched_tokens = prompt,
                                             .max_num_seqs = 1,
                                             .max_context_len = context}));
  // One sequence: blocks 1, 2, ... in order, the prompt's tokens i % vocab.
  ScheduledSequence seq;
  seq.id = 1;
  seq.is_new = true;
  for (int32_t i = 0; i < prompt; ++i) seq.token_ids.push_back(i * 7 % created.config.vocab_size);
  for (int32_t b = 1; b <= (prompt + block_size - 1) / block_size; ++b) seq.block_ids.push_back(b);
  seq.num_scheduled_tokens = prompt;
  seq.sample = true;
  seq.sampling.params.temperature = 0.0f;
  seq.sampling.num_prompt_tokens = prompt;
  int32_t num_tokens = prompt;
  for (int32_t step = 0; step <= steps; ++step) {
    StepPlan plan;
    plan.step_id = static_cast<uint64_t>(step);
    plan.sequences.push_back(seq);
    KVSERVE_ASSIGN_OR_RETURN(StepResult result, runner.Execute(plan));
    int32_t next = result.sampled.empty() ? 0 : result.sampled[0].token;
    if (comm != nullptr) {
      KVSERVE_RETURN_IF_ERROR(comm->Broadcast(&next, sizeof(next), 0));
    }
    // The next step's delta: the sampled token, and a block when it starts one.
    seq = ScheduledSequence{};
    seq.id = 1;
    seq.token_ids = {next};
    if (num_tokens % block_size == 0) seq.block_ids = {num_tokens / block_size + 1};
    seq.num_scheduled_tokens = 1;
    seq.sample = true;
    ++num_tokens;
  }
  const int64_t kv_bytes = runner.KvBytesPerBlock(block_size) * num_blocks;
  std::printf(
      "rank %d of %d: weights %.1f MiB (%s, %d converted for the shard), KV pool %.1f MiB "
      "(%d blocks of %d), RSS at start %.1f MiB, after load %.1f MiB, after %d prefill + %d "
      "decode tokens %.1f MiB (file-backed %.1f, anonymous %.1f), peak %.1f MiB\n",
      rank, size, created.weight_bytes / 1048576.0, created.weight_types.c_str(),
      created.num_converted_for_shard, kv_bytes / 1048576.0, num_blocks, block_size, start_rss,
      loaded_rss, prompt, steps, StatusMiB("VmRSS"), StatusMiB("RssFile"), StatusMiB("RssAnon"),
      StatusMiB("VmHWM"));
  if (comm != nullptr) return comm->Barrier();
  return absl::OkStatus();
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = kvserve::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "tp_rank_memory: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
