# kvserve_worker: the worker's gRPC transport (Generation and Worker services, health,
# reflection), request handling on top of kvserve_api (validation), proto <-> engine conversion, Prometheus metrics, and the
# kvserve-worker binary. The engine (kvserve_engine, engine.cmake) does the work; this layer
# stays thin.
add_library(kvserve_worker STATIC
  ${CMAKE_CURRENT_LIST_DIR}/generate_reactor.cc
  ${CMAKE_CURRENT_LIST_DIR}/generation_service.cc
  ${CMAKE_CURRENT_LIST_DIR}/http_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/follower_processes.cc
  ${CMAKE_CURRENT_LIST_DIR}/metrics.cc
  ${CMAKE_CURRENT_LIST_DIR}/proto_conversion.cc
  ${CMAKE_CURRENT_LIST_DIR}/serving_context.cc
  ${CMAKE_CURRENT_LIST_DIR}/status_reactor.cc
  ${CMAKE_CURRENT_LIST_DIR}/tp_group.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_options.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_server.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_service.cc
)
target_include_directories(kvserve_worker PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(kvserve_worker
  PUBLIC kvserve_api kvserve_http kvserve_engine kvserve_comm kvserve_proto kvserve_kv_events_proto kvserve_tokenizer kvserve_model
         gRPC::grpc++
         gRPC::grpc++_reflection
         prometheus-cpp::core prometheus-cpp::pull
         absl::status absl::statusor absl::strings absl::synchronization absl::time
         absl::random_random absl::flat_hash_map
  PRIVATE kvserve_warnings)

add_executable(kvserve-worker ${CMAKE_CURRENT_LIST_DIR}/main.cc)
target_link_libraries(kvserve-worker PRIVATE kvserve_worker absl::flags absl::flags_config absl::flags_parse
                                             absl::flags_usage kvserve_warnings)
