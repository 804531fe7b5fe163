# Forward-pass benchmarks on the default model (bench/model_bench.cc).
kvserve_add_bench(model_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_bench.cc
                  LIBS kvserve_engine kvserve_model)
