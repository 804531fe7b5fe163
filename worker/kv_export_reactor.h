// KvExportReactor: serves one Worker.FetchKvBlocks call, the sending half of KV block transfer
// between workers (docs/kv-cache.md; kv_fetcher.h is the receiving half). It asks the engine for
// the requested blocks a chunk at a time (the engine thread reads their K/V between steps) and
// writes one KvBlockData per block on the shared WritePump (write_pump.h). It reads ahead of the
// writes: another chunk is asked for whenever fewer than two chunks wait to be written (after a
// chunk arrives and after each write), so at most three chunks are in memory.
//
// The stream ends OK after the last block asked for, or at the first block the engine no longer
// holds (the caller keeps the run it got); with the engine's error otherwise (UNAVAILABLE once
// it stopped). A cancel stops asking.
//
// Ownership: gRPC owns the reactor; it deletes itself in OnDone. The engine's callbacks reach
// it through a shared state and the pump's notifier, so a late callback never touches a deleted
// reactor.
//
// Thread-safety: as WritePump; the shared state has its own lock.
#ifndef KVSERVE_WORKER_KV_EXPORT_REACTOR_H_
#define KVSERVE_WORKER_KV_EXPORT_REACTOR_H_

#include <deque>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "engine/engine.h"
#include "kvserve/v1/worker.pb.h"
#include "worker/metrics.h"
#include "worker/write_pump.h"

namespace kvserve {

// Blocks the engine reads per turn: a turn stays short (a block is a few hundred KB).
inline constexpr int kKvExportChunkBlocks = 8;

class KvExportReactor final : public WritePump<kvserve::v1::KvBlockData> {
 public:
  // Validates `request` (FAILED_PRECONDITION for another kv_format or an engine that cannot
  // move blocks, INVALID_ARGUMENT for a malformed one) and starts exporting, or finishes at once
  // with the error. `metrics` may be null.
  static KvExportReactor* Start(Engine* engine, WorkerMetrics* metrics,
                                const kvserve::v1::FetchKvBlocksRequest& request);

  void OnWriteDone(bool ok) override;

 private:
  struct State {
    absl::Mutex mu;
    std::deque<KvBlockBytes> ready ABSL_GUARDED_BY(mu);
    KvTransferQuery next ABSL_GUARDED_BY(mu);  // the next chunk: first_block advances
    int remaining ABSL_GUARDED_BY(mu) = 0;     // blocks still wanted
    bool pending ABSL_GUARDED_BY(mu) = false;  // a chunk is with the engine
    bool done ABSL_GUARDED_BY(mu) = false;     // nothing more will be asked for
    absl::Status status ABSL_GUARDED_BY(mu);   // the engine's error, if any
  };

  explicit KvExportReactor(const grpc::Status& error) { FinishNow(error); }
  KvExportReactor(Engine* engine, WorkerMetrics* metrics, KvTransferQuery query);

  // Asks the engine for the next chunk unless one is pending, two are ready or none is wanted.
  // Called without the pump's lock.
  static void RequestMore(Engine* engine, const std::shared_ptr<State>& state,
                          const std::function<void()>& notify);

  Action PlanNext() override;
  void StopSource() override;

  Engine* const engine_ = nullptr;
  WorkerMetrics* const metrics_ = nullptr;
  const std::shared_ptr<State> state_ = std::make_shared<State>();
  const std::function<void()> notify_;
};

}  // namespace kvserve

#endif  // KVSERVE_WORKER_KV_EXPORT_REACTOR_H_
