# Tests of kvserve_router_core. router_test_util builds WorkerStatus messages (by hand, or from a
# real KvCacheManager's events) for every test below.
add_library(kvserve_router_test_util STATIC ${CMAKE_CURRENT_LIST_DIR}/router_test_util.cc)
target_include_directories(kvserve_router_test_util PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(kvserve_router_test_util PUBLIC kvserve_kvcache kvserve_proto kvserve_kv_events_proto
  PRIVATE kvserve_warnings)

set(_router_test_libs kvserve_router_core kvserve_router_test_util GTest::gmock)
kvserve_add_test(NAME router_prefix_index_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/prefix_index_test.cc LIBS ${_router_test_libs} LABELS unit)
kvserve_add_test(NAME router_worker_books_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/worker_books_test.cc LIBS ${_router_test_libs} LABELS unit)
kvserve_add_test(NAME router_routing_policy_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/routing_policy_test.cc LIBS ${_router_test_libs} LABELS unit)
kvserve_add_test(NAME router_cluster_books_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cluster_books_test.cc LIBS ${_router_test_libs} LABELS unit)
kvserve_add_test(NAME router_admission_queue_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/admission_queue_test.cc LIBS ${_router_test_libs}
  LABELS unit TIMEOUT 120)
