# kvserve_model: the Llama-family forward pass over the paged KV cache (llama_model), the batch
# metadata builder (forward_batch), the host KV pool (kv_pool) and the single-process generation
# loop the CLI and benchmarks use (generator).
add_library(kvserve_model STATIC
  ${CMAKE_CURRENT_LIST_DIR}/device_buffer.cc
  ${CMAKE_CURRENT_LIST_DIR}/device_weights.cc
  ${CMAKE_CURRENT_LIST_DIR}/forward_batch.cc
  ${CMAKE_CURRENT_LIST_DIR}/kv_pool.cc
  ${CMAKE_CURRENT_LIST_DIR}/llama_model.cc
)
target_include_directories(kvserve_model PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(kvserve_model
  PUBLIC kvserve_model_io kvserve_kernels kvserve_kvcache
         absl::status absl::statusor absl::span absl::strings
  PRIVATE kvserve_warnings)
