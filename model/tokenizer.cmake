# kvserve_tokenizer: byte-level and SentencePiece BPE tokenizers (from GGUF metadata or a
# Hugging Face tokenizer.json), chat templates, and the incremental detokenizer. Links the GGUF
# reader only; no weights code, so the router can take it.
add_library(kvserve_tokenizer STATIC
  ${CMAKE_CURRENT_LIST_DIR}/bpe_merges.cc
  ${CMAKE_CURRENT_LIST_DIR}/bpe_pretokenizer.cc
  ${CMAKE_CURRENT_LIST_DIR}/chat_template.cc
  ${CMAKE_CURRENT_LIST_DIR}/detokenizer.cc
  ${CMAKE_CURRENT_LIST_DIR}/prompt.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_gguf.cc
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_hf.cc
  ${CMAKE_CURRENT_LIST_DIR}/unicode.cc
  ${CMAKE_CURRENT_LIST_DIR}/unicode_tables.cc
)
target_include_directories(kvserve_tokenizer PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(kvserve_tokenizer
  PUBLIC kvserve_model_io absl::status absl::statusor absl::strings absl::str_format
         absl::flat_hash_map absl::span
  PRIVATE nlohmann_json::nlohmann_json kvserve_warnings)
