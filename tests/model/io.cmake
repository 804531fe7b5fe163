# Tests of kvserve_model_io (model/io.cmake). Tests about the default model fail (not skip) when
# it is missing: run scripts/setup.sh. Fixtures come from tests/model/make_dequant_fixture.py.
kvserve_add_test(NAME gguf_file_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/gguf_file_test.cc
                 LIBS kvserve_model_io GTest::gmock LABELS unit)
kvserve_add_test(NAME gguf_model_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/gguf_model_test.cc
                 LIBS kvserve_model_io nlohmann_json::nlohmann_json GTest::gmock LABELS unit)
kvserve_add_test(NAME dequantize_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/dequantize_test.cc
                 LIBS kvserve_model_io nlohmann_json::nlohmann_json GTest::gmock LABELS unit)
kvserve_add_test(NAME safetensors_file_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/safetensors_file_test.cc
                 LIBS kvserve_model_io nlohmann_json::nlohmann_json GTest::gmock LABELS unit)
kvserve_add_test(NAME hf_model_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/hf_model_test.cc
                 LIBS kvserve_model_io nlohmann_json::nlohmann_json GTest::gmock LABELS unit)
kvserve_add_test(NAME synthetic_weights_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/synthetic_weights_test.cc
                 LIBS kvserve_model_io GTest::gmock LABELS unit)
kvserve_add_test(NAME weights_loader_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/weights_loader_test.cc
                 LIBS kvserve_model_io nlohmann_json::nlohmann_json GTest::gmock LABELS unit)
# Shards of every loader (model/tensor_parallel.h).
kvserve_add_test(NAME tensor_parallel_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_test.cc
                 LIBS kvserve_model_io kvserve_kernels nlohmann_json::nlohmann_json GTest::gmock
                 LABELS unit)

# GGUF parser + config + weights under libFuzzer. Seeds: python3
# tests/model/gguf_make_fuzz_seeds.py seeds/; then gguf_fuzz -max_total_time=300 corpus/ seeds/.
# KVSERVE_FUZZ=ON instruments the library too (cmake/Sanitizers.cmake), so libFuzzer sees the
# parser's coverage; scripts/fuzz.sh does all of this.
kvserve_add_fuzzer(NAME gguf_fuzz SOURCES ${CMAKE_CURRENT_LIST_DIR}/gguf_fuzz.cc
                   LIBS kvserve_model_io)
kvserve_add_test(NAME served_model_name_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/served_model_name_test.cc
                 LIBS kvserve_model_io GTest::gmock LABELS unit)
