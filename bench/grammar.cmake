# Structured-output benchmarks on the default model's vocabulary (bench/grammar_bench.cc).
# Percentiles come from bench/loadgen_stats.cc (the load generator's).
kvserve_add_bench(grammar_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/grammar_bench.cc
                                        ${CMAKE_CURRENT_LIST_DIR}/loadgen_stats.cc
                  LIBS kvserve_grammar kvserve_tokenizer absl::str_format)
if(TARGET grammar_bench)
  target_compile_definitions(grammar_bench PRIVATE KVSERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endif()
