# fidelity_bench: teacher-forced logit error of the quantized CPU path against the fp32 path
# (KLD, relative error, top-1 agreement), and the same measures between two logit files of
# another engine; bench/peer/fidelity.sh runs it beside llama.cpp. A plain program, not a
# Google Benchmark one. Included by bench/CMakeLists.txt.
add_executable(fidelity_bench ${CMAKE_CURRENT_LIST_DIR}/fidelity_bench.cc)
target_link_libraries(fidelity_bench PRIVATE kvserve_model absl::flags absl::flags_parse
                      absl::btree absl::status absl::statusor absl::strings kvserve_warnings)
