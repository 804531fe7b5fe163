# Router core micro-benchmarks (included by bench/CMakeLists.txt): routing decisions with 64
# simulated workers and 100k cached blocks, status-event application.
kvserve_add_bench(router_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/router_bench.cc
  LIBS kvserve_router_core)
