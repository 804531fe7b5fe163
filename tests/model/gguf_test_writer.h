// GgufTestWriter: builds GGUF v2/v3 files in memory for tests (test-only; header-only). Each
// Add* call appends one metadata pair or tensor in order; Build() lays out the header, the
// tensor table, alignment padding and the data section exactly as the GGUF specification says.
// Raw*() helpers let a test write malformed values on purpose.
#ifndef KVSERVE_TESTS_MODEL_GGUF_TEST_WRITER_H_
#define KVSERVE_TESTS_MODEL_GGUF_TEST_WRITER_H_

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "model/dequantize.h"
#include "model/gguf_file.h"

namespace kvserve::testing {

class GgufTestWriter {
 public:
  explicit GgufTestWriter(uint32_t version = 3, uint64_t alignment = 32)
      : version_(version), alignment_(alignment) {}

  // Appends little-endian bytes to `out`.
  template <typename T>
  static void Put(std::string* out, T value) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));
    out->append(bytes, sizeof(T));
  }
  static void PutString(std::string* out, std::string_view s) {
    Put<uint64_t>(out, s.size());
    out->append(s);
  }

  // Metadata. The value bytes after the type tag are written by the caller for Raw().
  void Raw(std::string_view key, GgufValueType type, const std::string& value_bytes) {
    PutString(&kv_, key);
    Put<uint32_t>(&kv_, static_cast<uint32_t>(type));
    kv_ += value_bytes;
    ++kv_count_;
  }
  void AddString(std::string_view key, std::string_view value) {
    std::string v;
    PutString(&v, value);
    Raw(key, GgufValueType::kString, v);
  }
  void AddU32(std::string_view key, uint32_t value) {
    std::string v;
    Put(&v, value);
    Raw(key, GgufValueType::kUint32, v);
  }
  void AddI64(std::string_view key, int64_t value) {
    std::string v;
    Put(&v, value);
    Raw(key, GgufValueType::kInt64, v);
  }
  void AddF32(std::string_view key, float value) {
    std::string v;
    Put(&v, value);
    Raw(key, GgufValueType::kFloat32, v);
  }
  void AddBool(std::string_view key, bool value) {
    Raw(key, GgufValueType::kBool, std::string(1, value ? 1 : 0));
  }
  void AddStringArray(std::string_view key, const std::vector<std::string>& values) {
    std::string v;
    Put<uint32_t>(&v, static_cast<uint32_t>(GgufValueType::kString));
    Put<uint64_t>(&v, values.size());
    for (const std::string& s : values) PutString(&v, s);
    Raw(key, GgufValueType::kArray, v);
  }
  void AddI32Array(std::string_view key, const std::vector<int32_t>& values) {
    std::string v;
    Put<uint32_t>(&v, static_cast<uint32_t>(GgufValueType::kInt32));
    Put<uint64_t>(&v, values.size());
    for (int32_t x : values) Put(&v, x);
    Raw(key, GgufValueType::kArray, v);
  }
  void AddF32Array(std::string_view key, const std::vector<float>& values) {
    std::string v;
    Put<uint32_t>(&v, static_cast<uint32_t>(GgufValueType::kFloat32));
    Put<uint64_t>(&v, values.size());
    for (float x : values) Put(&v, x);
    Raw(key, GgufValueType::kArray, v);
  }

  // A tensor with already-encoded `data`; `dims` in ggml order (fastest first).
  void AddTensor(std::string_view name, GgmlType type, const std::vector<int64_t>& dims,
                 const std::string& data) {
    PutString(&tensors_, name);
    Put<uint32_t>(&tensors_, static_cast<uint32_t>(dims.size()));
    for (int64_t d : dims) Put<int64_t>(&tensors_, d);
    Put<uint32_t>(&tensors_, static_cast<uint32_t>(type));
    while (data_.size() % alignment_ != 0) data_.push_back('\0');
    Put<uint64_t>(&tensors_, data_.size());
    data_ += data;
    ++tensor_count_;
  }
  void AddF32Tensor(std::string_view name, const std::vector<int64_t>& dims,
                    const std::vector<float>& values) {
    AddTensor(name, GgmlType::kF32, dims,
              std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  }
  void AddF16Tensor(std::string_view name, const std::vector<int64_t>& dims,
                    const std::vector<float>& values) {
    std::string data;
    for (float x : values) Put<uint16_t>(&data, FloatToHalf(x));
    AddTensor(name, GgmlType::kF16, dims, data);
  }

  std::string Build() const {
    std::string out;
    Put<uint32_t>(&out, 0x46554747);
    Put<uint32_t>(&out, version_);
    Put<uint64_t>(&out, tensor_count_);
    Put<uint64_t>(&out, kv_count_);
    out += kv_;
    out += tensors_;
    while (out.size() % alignment_ != 0) out.push_back('\0');
    out += data_;
    return out;
  }

 private:
  uint32_t version_;
  uint64_t alignment_;
  uint64_t kv_count_ = 0;
  uint64_t tensor_count_ = 0;
  std::string kv_;
  std::string tensors_;
  std::string data_;
};

// Options of TinyModelGguf.
struct TinyModelOptions {
  std::string architecture = "llama";
  bool bias = false;          // attn_q/k/v biases (qwen2)
  bool output_weight = true;  // false: tied embeddings
  int64_t block_count = 2;    // written to <arch>.block_count
  std::string skip_tensor;    // leave this tensor out
  std::string wrong_tensor;   // write this tensor with its dims swapped
};

// Deterministic value i of the tensor numbered `t` in TinyModelGguf.
inline float TinyModelValue(int t, int64_t i) {
  return 0.001f * static_cast<float>((i * 7 + t * 13) % 97) - 0.048f;
}

// A complete tiny model in GGUF: 2 layers, hidden 32, 2 heads, 1 KV head (head_dim 16), ffn 64,
// vocab 32. Tensor t holds TinyModelValue(t, i); token_embd is F16 (values rounded to half),
// every other tensor F32. Tensors are numbered in the order WeightSlots lists them.
inline std::string TinyModelGguf(const TinyModelOptions& options = {}) {
  const std::string& a = options.architecture;
  GgufTestWriter w;
  w.AddString("general.architecture", a);
  w.AddString("general.name", "tiny " + a);
  w.AddU32(a + ".block_count", static_cast<uint32_t>(options.block_count));
  w.AddU32(a + ".context_length", 128);
  w.AddU32(a + ".embedding_length", 32);
  w.AddU32(a + ".feed_forward_length", 64);
  w.AddU32(a + ".attention.head_count", 2);
  w.AddU32(a + ".attention.head_count_kv", 1);
  w.AddF32(a + ".rope.freq_base", 5000.0f);
  w.AddF32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.AddU32(a + ".rope.dimension_count", 16);
  std::vector<std::string> tokens;
  for (int i = 0; i < 32; ++i) tokens.push_back("tok" + std::to_string(i));
  w.AddStringArray("tokenizer.ggml.tokens", tokens);
  w.AddU32("tokenizer.ggml.bos_token_id", 1);
  w.AddU32("tokenizer.ggml.eos_token_id", 2);
  w.AddU32("tokenizer.ggml.eot_token_id", 3);
  int t = 0;
  auto tensor = [&](const std::string& name, std::vector<int64_t> dims) {
    const int index = t++;
    if (name == options.skip_tensor) return;
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<float> values(n);
    for (int64_t i = 0; i < n; ++i) values[i] = TinyModelValue(index, i);
    if (name == options.wrong_tensor) std::swap(dims.front(), dims.back());
    if (name == "token_embd.weight") {
      w.AddF16Tensor(name, dims, values);
    } else {
      w.AddF32Tensor(name, dims, values);
    }
  };
  tensor("token_embd.weight", {32, 32});
  for (int layer = 0; layer < 2; ++layer) {
    const std::string b = "blk." + std::to_string(layer) + ".";
    tensor(b + "attn_norm.weight", {32});
    tensor(b + "attn_q.weight", {32, 32});
    tensor(b + "attn_k.weight", {32, 16});
    tensor(b + "attn_v.weight", {32, 16});
    if (options.bias) {
      tensor(b + "attn_q.bias", {32});
      tensor(b + "attn_k.bias", {16});
      tensor(b + "attn_v.bias", {16});
    }
    tensor(b + "attn_output.weight", {32, 32});
    tensor(b + "ffn_norm.weight", {32});
    tensor(b + "ffn_gate.weight", {32, 64});
    tensor(b + "ffn_up.weight", {32, 64});
    tensor(b + "ffn_down.weight", {64, 32});
  }
  tensor("output_norm.weight", {32});
  if (options.output_weight) tensor("output.weight", {32, 32});
  return w.Build();
}

// A one-layer llama GGUF with block-quantized matrices (random blocks with small scales):
// hidden 512 as 4 heads of 128 and 2 KV heads, ffn 512, vocab 32. Q/K/V, gate and up are Q8_0,
// o_proj and down_proj Q4_K (256-element blocks), the embedding F16, norms F32.
inline std::string QuantizedModelGguf() {
  GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  w.AddU32("llama.block_count", 1);
  w.AddU32("llama.context_length", 64);
  w.AddU32("llama.embedding_length", 512);
  w.AddU32("llama.feed_forward_length", 512);
  w.AddU32("llama.attention.head_count", 4);
  w.AddU32("llama.attention.head_count_kv", 2);
  std::vector<std::string> tokens;
  for (int i = 0; i < 32; ++i) tokens.push_back("t" + std::to_string(i));
  w.AddStringArray("tokenizer.ggml.tokens", tokens);
  std::mt19937 rng(17);
  auto blocks = [&](kernels::DType dtype, int64_t rows, int64_t cols) {
    const kernels::DTypeInfo info = kernels::GetDTypeInfo(dtype);
    std::string bytes(kernels::RowBytes(dtype, cols) * rows, '\0');
    for (char& b : bytes) b = static_cast<char>(rng());
    for (size_t at = 0; at < bytes.size(); at += info.block_bytes) {
      const uint16_t scale = kernels::FloatToHalf(0.01f);  // d (and dmin for Q4_K) first
      std::memcpy(&bytes[at], &scale, 2);
      if (dtype == kernels::DType::kQ4_K) std::memcpy(&bytes[at + 2], &scale, 2);
    }
    return bytes;
  };
  std::vector<float> embedding(32 * 512), norm(512, 1.0f);
  for (size_t i = 0; i < embedding.size(); ++i) embedding[i] = 0.001f * static_cast<float>(i % 97);
  w.AddF16Tensor("token_embd.weight", {512, 32}, embedding);
  w.AddF32Tensor("blk.0.attn_norm.weight", {512}, norm);
  w.AddTensor("blk.0.attn_q.weight", GgmlType::kQ8_0, {512, 512},
              blocks(kernels::DType::kQ8_0, 512, 512));
  w.AddTensor("blk.0.attn_k.weight", GgmlType::kQ8_0, {512, 256},
              blocks(kernels::DType::kQ8_0, 256, 512));
  w.AddTensor("blk.0.attn_v.weight", GgmlType::kQ8_0, {512, 256},
              blocks(kernels::DType::kQ8_0, 256, 512));
  w.AddTensor("blk.0.attn_output.weight", GgmlType::kQ4_K, {512, 512},
              blocks(kernels::DType::kQ4_K, 512, 512));
  w.AddF32Tensor("blk.0.ffn_norm.weight", {512}, norm);
  w.AddTensor("blk.0.ffn_gate.weight", GgmlType::kQ8_0, {512, 512},
              blocks(kernels::DType::kQ8_0, 512, 512));
  w.AddTensor("blk.0.ffn_up.weight", GgmlType::kQ8_0, {512, 512},
              blocks(kernels::DType::kQ8_0, 512, 512));
  w.AddTensor("blk.0.ffn_down.weight", GgmlType::kQ4_K, {512, 512},
              blocks(kernels::DType::kQ4_K, 512, 512));
  w.AddF32Tensor("output_norm.weight", {512}, norm);
  return w.Build();
}

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_MODEL_GGUF_TEST_WRITER_H_
