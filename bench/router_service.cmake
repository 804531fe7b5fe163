# Router service benchmarks (included by bench/CMakeLists.txt): time to first token through the
# router vs straight to a worker, on live processes; bench/router_overhead.sh runs it.
kvserve_add_bench(router_overhead_bench
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/router_overhead_bench.cc
  LIBS kvserve_proto gRPC::grpc++)
