# kvserve-loadgen: concurrent Generate streams against a running worker (or router); reports
# output tokens/s, TTFT and inter-token latency percentiles and peak KV usage. Not a Google
# Benchmark program: it measures a live server, so it is a plain executable.
add_executable(kvserve-loadgen
  ${CMAKE_CURRENT_LIST_DIR}/loadgen_main.cc
  ${CMAKE_CURRENT_LIST_DIR}/loadgen_stats.cc)
target_include_directories(kvserve-loadgen PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(kvserve-loadgen PRIVATE kvserve_proto gRPC::grpc++ absl::flags
  absl::flags_parse absl::flags_usage absl::str_format absl::strings absl::synchronization
  absl::time kvserve_warnings)
