# Forward-pass benchmarks on the default model (bench/model_bench.cc).
if(TARGET kvserve_model)
  kvserve_add_bench(model_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_bench.cc
                    LIBS kvserve_model)
endif()
