# kvserve_engine: the worker's scheduler, engine thread and model runners (real and fake). No gRPC,
# protobuf or prometheus: the service layer (service.cmake) maps its API onto kvserve.v1.Worker.
add_library(kvserve_engine STATIC
  ${CMAKE_CURRENT_LIST_DIR}/choice_state.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine_core.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine_options.cc
  ${CMAKE_CURRENT_LIST_DIR}/engine_output.cc
  ${CMAKE_CURRENT_LIST_DIR}/fake_model_runner.cc
  ${CMAKE_CURRENT_LIST_DIR}/fault_injecting_runner.cc
  ${CMAKE_CURRENT_LIST_DIR}/kv_sizing.cc
  ${CMAKE_CURRENT_LIST_DIR}/offline_generate.cc
  ${CMAKE_CURRENT_LIST_DIR}/runner_factory.cc
  ${CMAKE_CURRENT_LIST_DIR}/llama_model_runner.cc
  ${CMAKE_CURRENT_LIST_DIR}/request.cc
  ${CMAKE_CURRENT_LIST_DIR}/request_stream.cc
  ${CMAKE_CURRENT_LIST_DIR}/runner_sequences.cc
  ${CMAKE_CURRENT_LIST_DIR}/scheduler.cc
  ${CMAKE_CURRENT_LIST_DIR}/status_subscription.cc
  ${CMAKE_CURRENT_LIST_DIR}/stop_checker.cc
  ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_runner.cc
  ${CMAKE_CURRENT_LIST_DIR}/tp_messages.cc
)
target_include_directories(kvserve_engine PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(kvserve_engine
  PUBLIC kvserve_kvcache kvserve_model kvserve_kernels kvserve_tokenizer
         absl::status absl::statusor absl::span absl::strings absl::synchronization
         absl::time absl::flat_hash_map absl::flat_hash_set absl::node_hash_map Threads::Threads
  PRIVATE kvserve_warnings)
