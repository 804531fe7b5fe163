# Kernel micro-benchmarks: sgemm through the linear kernel, memory bandwidth, paged decode
# attention at the SmolLM2 shape. Included by bench/CMakeLists.txt.
kvserve_add_bench(kernels_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/kernels_bench.cc
                  LIBS kvserve_kernels)
target_include_directories(kernels_bench PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_options(kernels_bench PRIVATE -fopenmp-simd)
