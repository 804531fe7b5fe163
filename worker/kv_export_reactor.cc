#include "worker/kv_export_reactor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "api/request_validation.h"
#include "api/status_conversion.h"
#include "proto/kv_events_conversion.h"
#include "xxhash.h"

namespace kvserve {

namespace v1 = ::kvserve::v1;

KvExportReactor* KvExportReactor::Start(Engine* engine, WorkerMetrics* metrics,
                                        const v1::FetchKvBlocksRequest& request) {
  absl::Status invalid;
  if (engine->kv_transfer_format().empty()) {
    invalid = absl::FailedPreconditionError("this worker cannot send KV blocks");
  } else if (request.kv_format() != engine->kv_transfer_format()) {
    invalid = absl::FailedPreconditionError(absl::StrCat("kv_format: \"", request.kv_format(),
                                                         "\" is not this worker's \"",
                                                         engine->kv_transfer_format(), "\""));
  } else {
    invalid = ValidateFetchKvBlocksRequest(request);
  }
  if (!invalid.ok()) return new KvExportReactor(ToGrpcStatus(invalid));
  KvTransferQuery query;
  query.tokens.assign(request.token_ids().begin(), request.token_ids().end());
  query.cache_salt = request.cache_salt();
  query.first_block = request.first_block();
  query.max_blocks = request.max_blocks();
  return new KvExportReactor(engine, metrics, std::move(query));
}

KvExportReactor::KvExportReactor(Engine* engine, WorkerMetrics* metrics, KvTransferQuery query)
    : engine_(engine), metrics_(metrics), notify_(Notifier()) {
  const int full_blocks = static_cast<int>(query.tokens.size()) / engine->options().block_size;
  {
    absl::MutexLock lock(&state_->mu);
    state_->remaining = std::max(0, full_blocks - query.first_block);
    if (query.max_blocks > 0) state_->remaining = std::min(state_->remaining, query.max_blocks);
    state_->done = state_->remaining == 0;
    state_->next = std::move(query);
  }
  RequestMore(engine_, state_, notify_);
  notify_();  // nothing wanted: finish
}

void KvExportReactor::RequestMore(Engine* engine, const std::shared_ptr<State>& state,
                                  const std::function<void()>& notify) {
  KvTransferQuery query;
  {
    absl::MutexLock lock(&state->mu);
    if (state->pending || state->done ||
        state->ready.size() >= static_cast<size_t>(2 * kKvExportChunkBlocks)) {
      return;
    }
    state->pending = true;
    query = state->next;
    query.max_blocks = std::min(state->remaining, kKvExportChunkBlocks);
  }
  const int asked = query.max_blocks;
  engine->ExportKvBlocks(std::move(query), [engine, state, notify,
                                            asked](absl::StatusOr<std::vector<KvBlockBytes>> got) {
    {
      absl::MutexLock lock(&state->mu);
      state->pending = false;
      if (!got.ok()) {
        state->status = got.status();
        state->done = true;
      } else {
        const int n = static_cast<int>(got->size());
        for (KvBlockBytes& block : *got) state->ready.push_back(std::move(block));
        state->next.first_block += n;
        state->remaining -= n;
        // Fewer than asked: the engine holds no more of the chain.
        if (n < asked || state->remaining == 0) state->done = true;
      }
    }
    // Read one chunk ahead of the writes (on the engine thread: Post only queues).
    RequestMore(engine, state, notify);
    notify();
  });
}

void KvExportReactor::OnWriteDone(bool ok) {
  // Before the pump's reaction: until then no Finish can have been issued, so this is alive.
  if (ok) RequestMore(engine_, state_, notify_);
  WritePump::OnWriteDone(ok);
}

KvExportReactor::Action KvExportReactor::PlanNext() {
  absl::MutexLock lock(&state_->mu);
  if (!state_->ready.empty()) {
    KvBlockBytes block = std::move(state_->ready.front());
    state_->ready.pop_front();
    v1::KvBlockData message;
    message.set_index(block.index);
    ToProto(block.hash, message.mutable_hash());
    message.set_checksum(XXH3_64bits(block.data.data(), block.data.size()));
    *message.mutable_data() = std::move(block.data);
    if (metrics_ != nullptr) metrics_->RecordKvTransferBlocks(/*sent=*/true, 1);
    return Write(std::move(message));
  }
  if (state_->done && !state_->pending) return FinishWith(ToGrpcStatus(state_->status));
  return Action::kNone;  // a chunk is on its way; its callback notifies
}

void KvExportReactor::StopSource() {
  absl::MutexLock lock(&state_->mu);
  state_->done = true;
  state_->ready.clear();
}

}  // namespace kvserve
