# Forward-pass benchmarks on the default model (bench/model_bench.cc).
kvserve_add_bench(model_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_bench.cc
                  LIBS kvserve_runner kvserve_model)
# One tensor-parallel rank's resident memory on the default model (bench/tp_rank_memory.cc):
# a plain program, one process per rank.
add_executable(tp_rank_memory ${CMAKE_CURRENT_LIST_DIR}/tp_rank_memory.cc)
target_link_libraries(tp_rank_memory PRIVATE kvserve_runner kvserve_comm absl::flags
                      absl::flags_parse kvserve_warnings)
