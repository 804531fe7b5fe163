#include "worker/kv_fetcher.h"

#include <algorithm>
#include <iostream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "api/status_conversion.h"
#include "kvcache/block_hash.h"
#include "kvcache/kv_cache_manager.h"
#include "kvserve/v1/worker.grpc.pb.h"
#include "proto/kv_events_conversion.h"
#include "xxhash.h"

namespace kvserve {

namespace v1 = ::kvserve::v1;

namespace {

// Blocks handed to the engine per import: the engine writes them between two steps.
constexpr int kImportBatchBlocks = 16;

// The engine's import results, in the order the batches were handed over (the engine runs its
// tasks in order), folded into the leading run of imported blocks.
struct ImportTracker {
  absl::Mutex mu;
  int outstanding ABSL_GUARDED_BY(mu) = 0;
  int imported ABSL_GUARDED_BY(mu) = 0;     // the leading run
  bool broken ABSL_GUARDED_BY(mu) = false;  // a batch stopped short: later ones do not extend it
  absl::Status status ABSL_GUARDED_BY(mu);
};

void ImportBatch(Engine* engine, const KvTransferQuery& context, int first_block,
                 std::vector<std::string> blocks, const std::shared_ptr<ImportTracker>& tracker) {
  if (blocks.empty()) return;
  {
    absl::MutexLock lock(&tracker->mu);
    ++tracker->outstanding;
  }
  KvTransferQuery query;
  const size_t end = static_cast<size_t>(first_block + static_cast<int>(blocks.size())) *
                     static_cast<size_t>(engine->options().block_size);
  query.tokens.assign(context.tokens.begin(), context.tokens.begin() + end);
  query.cache_salt = context.cache_salt;
  query.first_block = first_block;
  const int asked = static_cast<int>(blocks.size());
  engine->ImportKvBlocks(
      std::move(query), std::move(blocks), [tracker, asked](absl::StatusOr<int> imported) {
        absl::MutexLock lock(&tracker->mu);
        --tracker->outstanding;
        if (tracker->broken) return;
        if (!imported.ok()) {
          tracker->broken = true;
          tracker->status = imported.status();
          return;
        }
        tracker->imported += *imported;
        if (*imported < asked) {
          tracker->broken = true;
          tracker->status =
              absl::ResourceExhaustedError("the host KV tier took fewer blocks than arrived");
        }
      });
}

// OK when `block` is the expected next block of the run; otherwise what is wrong with it.
absl::Status Verify(const v1::KvBlockData& block, int index, const std::vector<BlockHash>& hashes,
                    int64_t block_bytes) {
  if (block.index() != index) {
    return absl::DataLossError(absl::StrCat("block ", index, " arrived as ", block.index()));
  }
  if (FromProto(block.hash()) != hashes[index]) {
    return absl::DataLossError(absl::StrCat("block ", index, " has hash ",
                                            FromProto(block.hash()).ToHex(), ", this worker's is ",
                                            hashes[index].ToHex()));
  }
  if (static_cast<int64_t>(block.data().size()) != block_bytes) {
    return absl::DataLossError(
        absl::StrCat("block ", index, " is ", block.data().size(), " bytes, not ", block_bytes));
  }
  if (XXH3_64bits(block.data().data(), block.data().size()) != block.checksum()) {
    return absl::DataLossError(absl::StrCat("block ", index, " fails its checksum"));
  }
  return absl::OkStatus();
}

}  // namespace

KvFetcher::KvFetcher(Engine* engine, std::shared_ptr<grpc::ChannelCredentials> credentials,
                     WorkerMetrics* metrics, absl::Duration timeout)
    : engine_(engine), credentials_(std::move(credentials)), metrics_(metrics), timeout_(timeout) {}

std::shared_ptr<grpc::Channel> KvFetcher::ChannelTo(const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<grpc::Channel>& channel = channels_[address];
  if (channel == nullptr) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);  // a large model's block is more than gRPC's 4 MB default
    channel = grpc::CreateCustomChannel(address, credentials_, args);
  }
  return channel;
}

KvFetchResult KvFetcher::Fetch(const v1::KvSource& source, const KvTransferQuery& context) {
  const absl::Time start = absl::Now();
  KvFetchResult result;
  Transfer(source, context, &result);
  if (metrics_ != nullptr) {
    metrics_->RecordKvTransferBlocks(/*sent=*/false, result.received_blocks);
    if (result.received_blocks > 0 || !result.status.ok()) {
      metrics_->RecordKvFetch(
          !result.status.ok() ? (result.imported_blocks > 0 ? "partial" : "failed") : "complete",
          absl::Now() - start);
    }
  }
  if (!result.status.ok()) {
    std::cerr << "kvserve-worker: KV fetch from " << source.address() << " kept "
              << result.imported_blocks << " blocks after the " << result.held_blocks
              << " held here; the rest is computed: " << result.status << std::endl;
  }
  return result;
}

void KvFetcher::Transfer(const v1::KvSource& source, const KvTransferQuery& context,
                         KvFetchResult* result) {
  const int block_size = engine_->options().block_size;
  // A block holding the last context token would never be reused: it is always computed.
  const int end =
      std::min(static_cast<int>(KvCacheManager::MaxPromptBlocks(context.tokens, block_size)),
               source.num_blocks());
  if (engine_->kv_transfer_format().empty()) {
    result->status = absl::FailedPreconditionError("this worker cannot receive KV blocks");
    return;
  }
  absl::Notification counted;
  absl::StatusOr<int> held;
  engine_->CountHeldKvBlocks(context, [&](absl::StatusOr<int> n) {
    held = std::move(n);
    counted.Notify();
  });
  counted.WaitForNotification();
  if (!held.ok()) {
    result->status = held.status();
    return;
  }
  result->held_blocks = *held;
  if (*held >= end) return;  // nothing this worker lacks

  const absl::Span<const TokenId> tokens =
      absl::MakeConstSpan(context.tokens).first(static_cast<size_t>(end) * block_size);
  std::vector<BlockHash> hashes;
  HashFullBlocks(tokens, block_size, context.cache_salt, &hashes);
  v1::FetchKvBlocksRequest request;
  request.mutable_token_ids()->Assign(tokens.begin(), tokens.end());
  request.set_cache_salt(context.cache_salt);
  request.set_first_block(*held);
  request.set_max_blocks(end - *held);
  request.set_kv_format(engine_->kv_transfer_format());

  grpc::ClientContext call;
  call.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  std::unique_ptr<v1::Worker::Stub> stub = v1::Worker::NewStub(ChannelTo(source.address()));
  std::unique_ptr<grpc::ClientReader<v1::KvBlockData>> reader = stub->FetchKvBlocks(&call, request);
  auto tracker = std::make_shared<ImportTracker>();
  const int64_t block_bytes = engine_->kv_transfer_block_bytes();
  int next = *held;
  int batch_first = next;
  std::vector<std::string> batch;
  v1::KvBlockData block;
  while (next < end && reader->Read(&block)) {
    if (absl::Status bad = Verify(block, next, hashes, block_bytes); !bad.ok()) {
      result->status = bad;
      call.TryCancel();
      break;
    }
    batch.push_back(std::move(*block.mutable_data()));
    ++next;
    if (static_cast<int>(batch.size()) == kImportBatchBlocks) {
      ImportBatch(engine_, context, batch_first, std::move(batch), tracker);
      batch.clear();
      batch_first = next;
    }
  }
  ImportBatch(engine_, context, batch_first, std::move(batch), tracker);
  const grpc::Status finished = reader->Finish();
  result->received_blocks = next - *held;
  if (result->status.ok() && next < end) {
    result->status = finished.ok()
                         ? absl::NotFoundError(absl::StrCat("the holder sent ", next - *held,
                                                            " of ", end - *held, " blocks"))
                         : FromGrpcStatus(finished);
  }
  absl::MutexLock lock(&tracker->mu);
  tracker->mu.Await(absl::Condition(
      +[](int* outstanding) { return *outstanding == 0; }, &tracker->outstanding));
  result->imported_blocks = tracker->imported;
  if (result->status.ok()) result->status = tracker->status;
}

}  // namespace kvserve
