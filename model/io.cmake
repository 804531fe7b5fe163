# kvserve_model_io: model file readers (GGUF, safetensors, Hugging Face directories),
# dequantization to fp32, ModelConfig / ModelWeights validation, synthetic weights.
find_package(Threads REQUIRED)
add_library(kvserve_model_io STATIC
  ${CMAKE_CURRENT_LIST_DIR}/gguf_file.cc
  ${CMAKE_CURRENT_LIST_DIR}/gguf_file_lookup.cc
  ${CMAKE_CURRENT_LIST_DIR}/dequantize.cc
  ${CMAKE_CURRENT_LIST_DIR}/gguf_model.cc
  ${CMAKE_CURRENT_LIST_DIR}/hf_model.cc
  ${CMAKE_CURRENT_LIST_DIR}/mapped_file.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_config.cc
  ${CMAKE_CURRENT_LIST_DIR}/model_weights.cc
  ${CMAKE_CURRENT_LIST_DIR}/safetensors_file.cc
  ${CMAKE_CURRENT_LIST_DIR}/served_model_name.cc
  ${CMAKE_CURRENT_LIST_DIR}/synthetic_weights.cc
  ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel.cc
  ${CMAKE_CURRENT_LIST_DIR}/tensor_slice.cc
  ${CMAKE_CURRENT_LIST_DIR}/weight_slots.cc
  ${CMAKE_CURRENT_LIST_DIR}/weights_loader.cc
)
target_include_directories(kvserve_model_io PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(kvserve_model_io
  PUBLIC kvserve_base absl::status absl::statusor absl::strings absl::flat_hash_map
  PRIVATE kvserve_kernels nlohmann_json::nlohmann_json Threads::Threads kvserve_warnings)
