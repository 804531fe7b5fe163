#include "model/device_weights.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kvserve {
namespace {

using kernels::DType;

// values converted to dtype (f32, bf16 or f16), as bytes ready to copy.
std::vector<uint8_t> Convert(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> bytes(kernels::RowBytes(dtype, static_cast<int64_t>(values.size())));
  if (dtype == DType::kF32) {
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
  }
  auto* out = reinterpret_cast<uint16_t*>(bytes.data());
  for (size_t i = 0; i < values.size(); ++i) {
    out[i] = dtype == DType::kBF16 ? kernels::FloatToBFloat16(values[i])
                                   : kernels::FloatToHalf(values[i]);
  }
  return bytes;
}

}  // namespace

absl::StatusOr<kernels::DType> ParseDType(std::string_view value, bool on_gpu,
                                          std::string_view flag) {
  if (value == "auto") return on_gpu ? DType::kBF16 : DType::kF32;
  if (value == "float32") return DType::kF32;
  if (value == "bfloat16") return DType::kBF16;
  if (value == "float16") return DType::kF16;
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(flag), ": must be auto, float32, bfloat16 or float16, got \"",
                   std::string(value), "\""));
}

absl::StatusOr<std::unique_ptr<DeviceWeights>> DeviceWeights::Upload(
    const ModelWeights& weights, std::shared_ptr<kernels::Backend> backend, DType dtype) {
  if (backend == nullptr) return absl::InvalidArgumentError("DeviceWeights: backend must be set");
  KVSERVE_RETURN_IF_ERROR(weights.Validate());
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weights can be converted to f32, bf16 or f16, not ", kernels::DTypeName(dtype)));
  }
  const ModelConfig& c = weights.config;
  const TensorShard shard = *weights.shard();  // Validate checked it
  std::unique_ptr<DeviceWeights> out(new DeviceWeights(c, shard, backend, dtype));
  kernels::Backend* device = backend.get();
  const int64_t q_dim = shard.q_dim();
  const int64_t kv_dim = shard.kv_dim();
  const int64_t ffn = shard.intermediate_size;
  out->storage_ = weights.storage;
  out->shard_storage_ = weights.shard_storage;
  auto matrix = [&](const std::string& name, const std::vector<float>& v, int64_t rows,
                    int64_t cols, WeightView* view, bool may_pack = true) -> absl::Status {
    auto it = weights.stored.find(name);
    KVSERVE_ASSIGN_OR_RETURN(
        WeightView uploaded,
        out->UploadMatrix(v, rows, cols, it == weights.stored.end() ? nullptr : &it->second,
                          may_pack, weights));
    *view = uploaded;
    return absl::OkStatus();
  };
  auto vector = [&](const std::vector<float>& v, const float** ptr) -> absl::Status {
    KVSERVE_ASSIGN_OR_RETURN(const float* uploaded, out->UploadVector(v));
    *ptr = uploaded;
    return absl::OkStatus();
  };
  // The embedding table stays as rows for its lookup, unless the model is tied and the backend's
  // lookup reads its packed form: then one packed table serves the lookup and the projection.
  const auto stored_table = weights.stored.find("token_embedding");
  const DType table_type =
      stored_table != weights.stored.end() ? stored_table->second.dtype : dtype;
  const bool one_table = c.tie_word_embeddings && device->EmbeddingReadsPacked(table_type);
  absl::Status s = matrix("token_embedding", weights.token_embedding, c.vocab_size, c.hidden_size,
                          &out->embedding_, /*may_pack=*/one_table);
  out->embedding_bytes_ = out->bytes_;
  if (s.ok() && !c.tie_word_embeddings) {
    s = matrix("lm_head", weights.lm_head, c.vocab_size, c.hidden_size, &out->lm_head_);
  } else if (s.ok()) {  // tied: the table itself, or a packed copy of it for the projection
    out->lm_head_ = out->embedding_;
    if (!one_table && device->PackedWeightBytes(table_type, c.vocab_size, c.hidden_size) > 0) {
      s = matrix("token_embedding", weights.token_embedding, c.vocab_size, c.hidden_size,
                 &out->lm_head_);
    }
  }
  if (s.ok()) s = vector(weights.final_norm, &out->final_norm_);
  out->layers_.resize(c.num_layers);
  for (int32_t l = 0; s.ok() && l < c.num_layers; ++l) {
    const LayerWeights& src = weights.layers[l];
    DeviceLayer& dst = out->layers_[l];
    const std::string p = absl::StrCat("layers.", l, ".");
    for (const absl::Status& step :
         {vector(src.attn_norm, &dst.attn_norm),
          matrix(p + "wq", src.wq, q_dim, c.hidden_size, &dst.wq),
          matrix(p + "wk", src.wk, kv_dim, c.hidden_size, &dst.wk),
          matrix(p + "wv", src.wv, kv_dim, c.hidden_size, &dst.wv), vector(src.bq, &dst.bq),
          vector(src.bk, &dst.bk), vector(src.bv, &dst.bv),
          matrix(p + "wo", src.wo, c.hidden_size, q_dim, &dst.wo),
          vector(src.ffn_norm, &dst.ffn_norm),
          matrix(p + "w_gate", src.w_gate, ffn, c.hidden_size, &dst.w_gate),
          matrix(p + "w_up", src.w_up, ffn, c.hidden_size, &dst.w_up),
          matrix(p + "w_down", src.w_down, c.hidden_size, ffn, &dst.w_down)}) {
      if (!step.ok()) {
        s = step;
        break;
      }
    }
  }
  if (!s.ok()) return s;
  if (!device->Synchronize()) {
    return absl::InternalError("copying the weights to the device failed");
  }
  return out;
}

absl::StatusOr<const float*> DeviceWeights::UploadVector(const std::vector<float>& values) {
  if (values.empty()) return nullptr;
  const size_t bytes = values.size() * sizeof(float);
  KVSERVE_ASSIGN_OR_RETURN(DeviceBuffer buffer,
                           DeviceBuffer::Allocate(backend_.get(), bytes, "weights"));
  backend_->CopyToDevice(buffer.data(), values.data(), bytes);
  bytes_ += static_cast<int64_t>(bytes);
  const float* data = buffer.as<const float>();
  buffers_.push_back(std::move(buffer));
  return data;
}

absl::StatusOr<WeightView> DeviceWeights::UploadMatrix(const std::vector<float>& values,
                                                       int64_t rows, int64_t cols,
                                                       const StoredMatrix* stored, bool may_pack,
                                                       const ModelWeights& weights) {
  // The matrix's bytes in host memory: the stored ones, or `values` converted to dtype_.
  std::vector<uint8_t> converted;
  if (stored == nullptr) converted = Convert(values, dtype_);
  const void* host = stored != nullptr ? stored->data : converted.data();
  const DType type = stored != nullptr ? stored->dtype : dtype_;
  const int64_t host_bytes =
      stored != nullptr ? stored->num_bytes : static_cast<int64_t>(converted.size());
  const int64_t packed_bytes = may_pack ? backend_->PackedWeightBytes(type, rows, cols) : 0;
  WeightView view{.dtype = type, .rows = rows, .cols = cols, .packed = packed_bytes > 0};
  if (stored != nullptr && packed_bytes == 0 && backend_->host_memory()) {
    view.data = stored->data;  // in place: the mapping is the weight
    bytes_ += host_bytes;
    return view;
  }
  const int64_t bytes = packed_bytes > 0 ? packed_bytes : host_bytes;
  absl::StatusOr<DeviceBuffer> buffer =
      DeviceBuffer::Allocate(backend_.get(), static_cast<size_t>(bytes), "weights");
  if (!buffer.ok()) return buffer.status();
  if (packed_bytes > 0) {
    backend_->PackWeight(host, type, rows, cols, buffer->data());
    if (stored != nullptr && weights.drop_stored_pages) {
      weights.drop_stored_pages(stored->data, stored->num_bytes);
    }
    ++num_packed_;
  } else {
    backend_->CopyToDevice(buffer->data(), host, static_cast<size_t>(bytes));
  }
  bytes_ += bytes;
  view.data = buffer->data();
  buffers_.push_back(*std::move(buffer));
  return view;
}

}  // namespace kvserve
