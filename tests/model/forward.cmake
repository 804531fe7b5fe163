# Tests of kvserve_model (model/forward.cmake): the forward pass, its cache fidelity, and the
# float64 reference (fixtures from reference_logits.py).
kvserve_add_test(NAME llama_model_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/llama_model_test.cc
                 LIBS kvserve_model GTest::gmock LABELS unit)
kvserve_add_test(NAME cache_fidelity_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/cache_fidelity_test.cc
                 LIBS kvserve_model GTest::gmock LABELS unit)
kvserve_add_test(NAME reference_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/reference_test.cc
                 LIBS kvserve_model kvserve_runner nlohmann_json::nlohmann_json GTest::gmock
                 LABELS unit)
# A tensor-parallel group (ranks as threads, Gloo over loopback) against the unsharded model.
kvserve_add_test(NAME tensor_parallel_forward_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_forward_test.cc
                 LIBS kvserve_model kvserve_comm GTest::gmock LABELS unit)
