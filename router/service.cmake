# kvserve_router: the router's front ends on top of kvserve_router_core (core.cmake): discovery
# and status streams, request proxying with migration, bearer-token auth, TLS, Prometheus
# metrics, the gRPC service and the OpenAI-compatible HTTP API (kvserve_http) over one RouterApi;
# and the kvserve-router binary. It links the tokenizer (tokenizer and chat template only), never
# kernels or model weights.
add_library(kvserve_router STATIC
  ${CMAKE_CURRENT_LIST_DIR}/generate_call.cc
  ${CMAKE_CURRENT_LIST_DIR}/request_log.cc
  ${CMAKE_CURRENT_LIST_DIR}/request_progress.cc
  ${CMAKE_CURRENT_LIST_DIR}/router_admin_service.cc
  ${CMAKE_CURRENT_LIST_DIR}/router_api.cc
  ${CMAKE_CURRENT_LIST_DIR}/router_http_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/router_metrics.cc
  ${CMAKE_CURRENT_LIST_DIR}/router_server.cc
  ${CMAKE_CURRENT_LIST_DIR}/router_server_options.cc
  ${CMAKE_CURRENT_LIST_DIR}/router_service.cc
  ${CMAKE_CURRENT_LIST_DIR}/token_auth.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_connection.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_registry.cc
)
target_include_directories(kvserve_router PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(kvserve_router
  PUBLIC kvserve_api kvserve_http kvserve_router_core kvserve_proto kvserve_tokenizer kvserve_log
         gRPC::grpc++ gRPC::grpc++_reflection prometheus-cpp::core
         absl::flat_hash_map absl::flat_hash_set absl::random_random absl::status
         absl::statusor absl::strings absl::synchronization absl::time
  PRIVATE kvserve_warnings)

add_executable(kvserve-router ${CMAKE_CURRENT_LIST_DIR}/main.cc)
target_link_libraries(kvserve-router PRIVATE kvserve_router kvserve_log_flags absl::flags absl::flags_config absl::flags_parse
                                             absl::flags_usage absl::failure_signal_handler absl::symbolize
                                             kvserve_warnings)
