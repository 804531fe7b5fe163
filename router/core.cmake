# kvserve_router_core: the router's books, prefix index, routing policy and admission queue.
# No transport: the gRPC service (router/service.cmake) builds on it. It links kvcache only for
# kvcache/block_hash.h (the same chained hash the workers compute) and the proto messages for
# WorkerStatus; never kernels or model weights.
add_library(kvserve_router_core STATIC
  ${CMAKE_CURRENT_LIST_DIR}/admission_queue.cc
  ${CMAKE_CURRENT_LIST_DIR}/cluster_books.cc
  ${CMAKE_CURRENT_LIST_DIR}/prefix_index.cc
  ${CMAKE_CURRENT_LIST_DIR}/router_options.cc
  ${CMAKE_CURRENT_LIST_DIR}/routing_policy.cc
  ${CMAKE_CURRENT_LIST_DIR}/worker_books.cc
)
target_include_directories(kvserve_router_core PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(kvserve_router_core
  PUBLIC kvserve_base kvserve_kvcache kvserve_proto kvserve_kv_events_proto absl::any_invocable
         absl::flat_hash_map
         absl::flat_hash_set absl::status absl::statusor absl::span absl::synchronization
         absl::time
  PRIVATE absl::strings kvserve_warnings)
