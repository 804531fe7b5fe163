# Tests of kvserve_engine (worker/engine.cmake). unit: the fake runner, no weights; integration:
# the real default model (model/default_model.h; scripts/setup.sh fetches it).
kvserve_add_test(NAME stop_checker_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/stop_checker_test.cc
                 LIBS kvserve_engine LABELS unit)
kvserve_add_test(NAME choice_state_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/choice_state_test.cc
                 LIBS kvserve_engine LABELS unit)
kvserve_add_test(NAME scheduler_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/scheduler_test.cc
                 LIBS kvserve_engine LABELS unit)
kvserve_add_test(NAME llama_model_runner_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/llama_model_runner_test.cc
                 LIBS kvserve_engine LABELS unit)
kvserve_add_test(NAME engine_api_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_api_test.cc
                 LIBS kvserve_engine LABELS unit)
kvserve_add_test(NAME engine_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_test.cc
                 LIBS kvserve_engine LABELS integration TIMEOUT 900)
kvserve_add_test(NAME device_runner_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/device_runner_test.cc
                 LIBS kvserve_engine LABELS unit)
# The default model on a CUDA device against the CPU (scripts/gpu_check.sh); skips without one.
kvserve_add_test(NAME gpu_model_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/gpu_model_test.cc
                 LIBS kvserve_engine nlohmann_json::nlohmann_json LABELS gpu TIMEOUT 600)
set_tests_properties(gpu_model_test PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
# A tensor-parallel group (ranks as threads, Gloo over loopback) under the real EngineCore,
# against the unsharded model: unit on a synthetic model, integration on the default one.
kvserve_add_test(NAME tensor_parallel_engine_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_engine_test.cc
                 LIBS kvserve_engine kvserve_comm nlohmann_json::nlohmann_json LABELS unit)
kvserve_add_test(NAME tensor_parallel_model_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_model_test.cc
                 LIBS kvserve_engine kvserve_comm LABELS integration TIMEOUT 900)
set_tests_properties(tensor_parallel_model_test PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
# The group's control plane (plans broadcast to followers, keep-alives, a follower gone) with
# recording runners as threads over Gloo.
kvserve_add_test(NAME tensor_parallel_runner_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_runner_test.cc
                 LIBS kvserve_engine kvserve_comm LABELS unit)
