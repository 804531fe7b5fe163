# Tests of kvserve_tokenizer (model/tokenizer.cmake). Fixtures: tests/model/fixtures/tokenizer_*,
# written by tests/model/make_tokenizer_fixtures.py (Hugging Face tokenizers, jinja2).
kvserve_add_test(NAME tokenizer_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/tokenizer_test.cc
                 LIBS kvserve_tokenizer nlohmann_json::nlohmann_json LABELS unit)
kvserve_add_test(NAME tokenizer_hf_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/tokenizer_hf_test.cc
                 LIBS kvserve_tokenizer nlohmann_json::nlohmann_json LABELS unit)
kvserve_add_test(NAME tokenizer_spec_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/tokenizer_spec_test.cc
                 LIBS kvserve_tokenizer nlohmann_json::nlohmann_json GTest::gmock LABELS unit)
kvserve_add_test(NAME chat_template_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/chat_template_test.cc
                 LIBS kvserve_tokenizer nlohmann_json::nlohmann_json GTest::gmock LABELS unit)
kvserve_add_test(NAME detokenizer_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/detokenizer_test.cc
                 LIBS kvserve_tokenizer nlohmann_json::nlohmann_json LABELS unit)
