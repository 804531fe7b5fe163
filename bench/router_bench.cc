// Micro-benchmarks of the router's core (router/). Run:
//   build-routercore/bench/router_bench
// The cluster: 64 simulated workers (4096-block pools, varied free / running / waiting) whose
// prefix caches hold 100k blocks in total, fed through the real WorkerStatus path (snapshot
// parts). Prompts of 1-4k tokens start with one of 32 shared "document" prefixes (512-2048
// tokens) followed by a private suffix, so workers hold long prefixes of many of them.
// Counters of BM_RouteDecision: p50_us / p99_us of one decision (hash the prompt, match the
// index, score every worker, reserve), timed one by one with a steady clock (so they include
// time the thread was descheduled), and decisions_per_s (per CPU second: Google Benchmark
// divides rates by CPU time unless UseRealTime is set).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "router/cluster_books.h"

namespace kvserve {
namespace {

constexpr int kBlockSize = 16;
constexpr int kWorkers = 64;
constexpr int64_t kPoolBlocks = 4096;
constexpr int64_t kTargetCachedBlocks = 100'000;  // summed over workers
constexpr int kDocuments = 32;
constexpr int kPrompts = 1024;

struct Cluster {
  std::unique_ptr<ClusterBooks> books;
  std::vector<RouteRequest> prompts;
  int64_t cached_blocks = 0;  // summed over workers
};

std::vector<TokenId> RandomTokens(std::mt19937_64& rng, int n) {
  std::uniform_int_distribution<TokenId> token(0, 49151);
  std::vector<TokenId> tokens(n);
  for (TokenId& t : tokens) t = token(rng);
  return tokens;
}

std::vector<TokenId> MakePrompt(std::mt19937_64& rng, const std::vector<TokenId>& document) {
  std::uniform_int_distribution<int> total(1024, 4096);
  const int n = std::max<int>(total(rng), static_cast<int>(document.size()) + 64);
  std::vector<TokenId> prompt = document;
  const std::vector<TokenId> suffix = RandomTokens(rng, n - static_cast<int>(document.size()));
  prompt.insert(prompt.end(), suffix.begin(), suffix.end());
  return prompt;
}

void AddHashes(const std::vector<TokenId>& tokens, std::vector<BlockHash>* hashes) {
  HashFullBlocks(tokens, kBlockSize, /*cache_salt=*/"", hashes);
}

Cluster& GetCluster() {
  static Cluster* cluster = [] {
    auto* c = new Cluster;
    std::mt19937_64 rng(20261129);
    c->books = std::move(*ClusterBooks::Create(RouterCoreOptions{.block_size = kBlockSize}));
    std::vector<std::vector<TokenId>> documents;
    std::uniform_int_distribution<int> doc_length(512, 2048);
    for (int d = 0; d < kDocuments; ++d) documents.push_back(RandomTokens(rng, doc_length(rng)));
    std::uniform_int_distribution<int> pick_doc(0, kDocuments - 1);
    for (int p = 0; p < kPrompts; ++p) {
      c->prompts.push_back(RouteRequest{.request_id = "p" + std::to_string(p),
                                        .tokens = MakePrompt(rng, documents[pick_doc(rng)]),
                                        .max_tokens = 256});
    }
    // Each worker caches whole earlier prompts (document + suffix) until it holds its share.
    const int64_t per_worker = kTargetCachedBlocks / kWorkers;
    std::uniform_int_distribution<int> pick_prompt(0, kPrompts - 1);
    std::uniform_int_distribution<int64_t> free_blocks(kPoolBlocks / 8, kPoolBlocks);
    std::uniform_int_distribution<int> queue(0, 8);
    for (int w = 0; w < kWorkers; ++w) {
      const std::string id = "worker-" + std::to_string(w);
      (void)c->books->AddWorker(id);
      // Whole chains, parents before children, each hash once, cut at the worker's share.
      std::vector<BlockHash> hashes;
      absl::flat_hash_set<BlockHash> seen;
      std::vector<BlockHash> chain;
      while (static_cast<int64_t>(hashes.size()) < per_worker) {
        chain.clear();
        AddHashes(c->prompts[pick_prompt(rng)].tokens, &chain);
        for (const BlockHash& hash : chain) {
          if (static_cast<int64_t>(hashes.size()) < per_worker && seen.insert(hash).second) {
            hashes.push_back(hash);
          }
        }
      }
      const int64_t free = free_blocks(rng);
      constexpr size_t kPartBlocks = 512;
      for (size_t first = 0, part = 0; first < hashes.size() || part == 0;
           first += kPartBlocks, ++part) {
        kvserve::v1::WorkerStatus status;
        status.set_epoch(1000 + w);
        v1::Capacity* capacity = status.mutable_capacity();
        capacity->set_block_size(kBlockSize);
        capacity->set_total_blocks(kPoolBlocks);
        capacity->set_free_blocks(free);
        capacity->set_evictable_blocks(
            std::min<int64_t>(free, static_cast<int64_t>(hashes.size())));
        capacity->set_used_blocks(kPoolBlocks - free);
        capacity->set_running_requests(queue(rng) * 4);
        capacity->set_waiting_requests(queue(rng) / 4);
        v1::KvSnapshot* snapshot = status.mutable_snapshot();
        snapshot->set_part_index(static_cast<int32_t>(part));
        snapshot->set_last_part(first + kPartBlocks >= hashes.size());
        for (size_t i = first; i < std::min(hashes.size(), first + kPartBlocks); ++i) {
          v1::BlockHash* hash = snapshot->add_blocks()->mutable_hash();
          hash->set_low(hashes[i].low);
          hash->set_high(hashes[i].high);
        }
        (void)c->books->ApplyStatus(id, status);
      }
      c->cached_blocks += static_cast<int64_t>(hashes.size());
    }
    return c;
  }();
  return *cluster;
}

double Percentile(std::vector<double>& samples, double q) {
  if (samples.empty()) return 0;
  const size_t k = std::min(samples.size() - 1, static_cast<size_t>(q * samples.size()));
  std::nth_element(samples.begin(), samples.begin() + k, samples.end());
  return samples[k];
}

// One routing decision as the service makes it: hash the prompt, route (match, score, reserve);
// the request then ends at once (Release) so that the books stay in a steady state.
void BM_RouteDecision(benchmark::State& state) {
  Cluster& cluster = GetCluster();
  std::vector<double> latencies_us;
  latencies_us.reserve(1 << 20);
  int64_t cached_tokens = 0;
  int64_t prompt_tokens = 0;
  size_t next = 0;
  for (auto _ : state) {
    RouteRequest& request = cluster.prompts[next++ % cluster.prompts.size()];
    const auto start = std::chrono::steady_clock::now();
    PreparedRoute prepared = cluster.books->Prepare(std::move(request));
    const RoutingDecision decision = cluster.books->Route(prepared);
    const auto stop = std::chrono::steady_clock::now();
    latencies_us.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
    cluster.books->Release(prepared.request.request_id);
    cached_tokens += decision.cached_tokens;
    prompt_tokens += static_cast<int64_t>(prepared.request.tokens.size());
    request = std::move(prepared.request);
    benchmark::DoNotOptimize(decision);
  }
  state.counters["p50_us"] = Percentile(latencies_us, 0.50);
  state.counters["p99_us"] = Percentile(latencies_us, 0.99);
  state.counters["p999_us"] = Percentile(latencies_us, 0.999);
  state.counters["decisions_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["cached_token_ratio"] =
      prompt_tokens > 0 ? static_cast<double>(cached_tokens) / prompt_tokens : 0;
  state.counters["cached_blocks_total"] = static_cast<double>(cluster.cached_blocks);
  state.counters["distinct_hashes"] = static_cast<double>(cluster.books->num_cached_hashes());
}
BENCHMARK(BM_RouteDecision)->Unit(benchmark::kMicrosecond)->MinTime(2.0);

// The same decision with the prompt already hashed: the share of the lock-held part.
void BM_RouteDecisionPrehashed(benchmark::State& state) {
  Cluster& cluster = GetCluster();
  std::vector<PreparedRoute> prepared;
  for (const RouteRequest& request : cluster.prompts) {
    prepared.push_back(cluster.books->Prepare(request));
  }
  std::vector<double> latencies_us;
  latencies_us.reserve(1 << 20);
  size_t next = 0;
  for (auto _ : state) {
    const PreparedRoute& route = prepared[next++ % prepared.size()];
    const auto start = std::chrono::steady_clock::now();
    const RoutingDecision decision = cluster.books->Route(route);
    const auto stop = std::chrono::steady_clock::now();
    latencies_us.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
    cluster.books->Release(route.request.request_id);
    benchmark::DoNotOptimize(decision);
  }
  state.counters["p50_us"] = Percentile(latencies_us, 0.50);
  state.counters["p99_us"] = Percentile(latencies_us, 0.99);
  state.counters["decisions_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_RouteDecisionPrehashed)->Unit(benchmark::kMicrosecond)->MinTime(2.0);

// Applying one status message with a batch of 16 stored and 16 removed blocks (a busy worker's
// step), on a worker that holds ~1.5k blocks: the status-stream thread's cost per message.
void BM_ApplyEventBatch(benchmark::State& state) {
  Cluster& cluster = GetCluster();
  const std::string worker = "worker-0";
  // Re-sync worker-0 on a private epoch so the batch sequence starts at 1.
  kvserve::v1::WorkerStatus snapshot;
  snapshot.set_epoch(77);
  snapshot.mutable_capacity()->set_block_size(kBlockSize);
  snapshot.mutable_capacity()->set_total_blocks(kPoolBlocks);
  snapshot.mutable_capacity()->set_free_blocks(kPoolBlocks);
  snapshot.mutable_snapshot()->set_last_part(true);
  (void)cluster.books->ApplyStatus(worker, snapshot);
  std::mt19937_64 rng(7);
  std::vector<BlockHash> live;
  uint64_t sequence = 0;
  kvserve::v1::WorkerStatus status;
  for (auto _ : state) {
    state.PauseTiming();
    status.Clear();
    status.set_epoch(77);
    status.mutable_capacity()->set_block_size(kBlockSize);
    status.mutable_capacity()->set_total_blocks(kPoolBlocks);
    status.mutable_capacity()->set_free_blocks(kPoolBlocks);
    kvserve::v1::KvEventBatch* batch = status.add_event_batches();
    batch->set_sequence(++sequence);
    v1::BlocksStored* stored = batch->add_events()->mutable_stored();
    for (int i = 0; i < 16; ++i) {
      const BlockHash hash{.low = rng(), .high = rng()};
      live.push_back(hash);
      v1::StoredBlock* block = stored->add_blocks();
      block->mutable_hash()->set_low(hash.low);
      block->mutable_hash()->set_high(hash.high);
      block->set_num_tokens(kBlockSize);
    }
    if (live.size() > 1536) {
      v1::BlocksRemoved* removed = batch->add_events()->mutable_removed();
      for (int i = 0; i < 16; ++i) {
        v1::BlockHash* hash = removed->add_hashes();
        hash->set_low(live.front().low);
        hash->set_high(live.front().high);
        live.erase(live.begin());
      }
    }
    state.ResumeTiming();
    benchmark::DoNotOptimize(cluster.books->ApplyStatus(worker, status));
  }
}
BENCHMARK(BM_ApplyEventBatch)->Unit(benchmark::kMicrosecond);

// A resync of one worker: a one-part snapshot of 1562 blocks replaces its set. Emptying the old
// set scans the whole index (~45k distinct hashes here), so this is the worst case a
// reconnection costs the status thread (and holds the books' lock).
void BM_ResyncWorker(benchmark::State& state) {
  Cluster& cluster = GetCluster();
  const std::string worker = "worker-1";
  std::mt19937_64 rng(11);
  kvserve::v1::WorkerStatus status;
  status.set_epoch(1001);
  status.mutable_capacity()->set_block_size(kBlockSize);
  status.mutable_capacity()->set_total_blocks(kPoolBlocks);
  status.mutable_capacity()->set_free_blocks(kPoolBlocks);
  v1::KvSnapshot* snapshot = status.mutable_snapshot();
  snapshot->set_last_part(true);
  for (int64_t i = 0; i < kTargetCachedBlocks / kWorkers; ++i) {
    v1::BlockHash* hash = snapshot->add_blocks()->mutable_hash();
    hash->set_low(rng());
    hash->set_high(rng());
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(cluster.books->ApplyStatus(worker, status));
  }
  state.counters["index_hashes"] = static_cast<double>(cluster.books->num_cached_hashes());
}
BENCHMARK(BM_ResyncWorker)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvserve

BENCHMARK_MAIN();
