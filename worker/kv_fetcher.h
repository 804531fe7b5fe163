// KvFetcher: the receiving half of KV block transfer between workers (docs/kv-cache.md;
// kv_export_reactor.h sends). When the router's WorkerGenerateRequest names a kv_source, the
// worker fetches the request's leading context blocks it lacks from that worker
// (Worker.FetchKvBlocks) into its host tier before the request enters the engine, so the
// engine's next prefix lookup copies them back instead of computing them.
//
// Every block is verified on arrival: its index continues the run, its hash is the one this
// worker computes from its own tokens, its size is this worker's block size in bytes, and its
// checksum matches its bytes. The first block that fails, a broken stream (the holder died), a
// refusal or the timeout ends the fetch; the verified run before it is kept and the rest is
// computed as usual. A fetch therefore never fails its request and never changes its output.
//
// Thread-safety: thread-safe; Fetch blocks the calling thread for at most the timeout.
#ifndef KVSERVE_WORKER_KV_FETCHER_H_
#define KVSERVE_WORKER_KV_FETCHER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "kvserve/v1/worker.pb.h"
#include "worker/metrics.h"

namespace kvserve {

struct KvFetchResult {
  int held_blocks = 0;      // leading context blocks this worker held before the fetch
  int received_blocks = 0;  // blocks that arrived and passed verification
  int imported_blocks = 0;  // of those, the leading run now in this worker's cache
  absl::Status status;      // why it stopped short of the blocks asked for; OK when it did not
};

class KvFetcher {
 public:
  // `credentials` reach the other workers; `metrics` may be null. REQUIRES: engine outlives it.
  KvFetcher(Engine* engine, std::shared_ptr<grpc::ChannelCredentials> credentials,
            WorkerMetrics* metrics, absl::Duration timeout);

  // Fetches the blocks after the ones this worker holds, up to source.num_blocks, of the full
  // blocks of `context` (cache_salt in block 0) before its last token, and imports them.
  // Blocking.
  KvFetchResult Fetch(const kvserve::v1::KvSource& source, const KvTransferQuery& context);

 private:
  std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address);
  // Runs the transfer; `result` says how far it got.
  void Transfer(const kvserve::v1::KvSource& source, const KvTransferQuery& context,
                KvFetchResult* result);

  Engine* const engine_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  WorkerMetrics* const metrics_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve

#endif  // KVSERVE_WORKER_KV_FETCHER_H_
