# Kernel micro-benchmarks: sgemm through the linear kernel, memory bandwidth, paged decode
# attention at the SmolLM2 shape. Included by bench/CMakeLists.txt.
kvserve_add_bench(kernels_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/kernels_bench.cc
                  LIBS kvserve_kernels)
target_include_directories(kernels_bench PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_options(kernels_bench PRIVATE -fopenmp-simd)

# oneDNN against the kernels above (bench/onednn_bench.cc): built only where oneDNN is installed
# (Debian: libdnnl-dev). Nothing else in the project uses it, and setup.sh and CI do not install it.
find_path(KVSERVE_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(KVSERVE_DNNL_LIBRARY dnnl)
find_package(OpenMP QUIET COMPONENTS CXX)
if(KVSERVE_DNNL_INCLUDE_DIR AND KVSERVE_DNNL_LIBRARY AND OpenMP_CXX_FOUND)
  message(STATUS "oneDNN: ${KVSERVE_DNNL_LIBRARY}; building bench/onednn_bench")
  kvserve_add_bench(onednn_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/onednn_bench.cc
                    LIBS kvserve_kernels ${KVSERVE_DNNL_LIBRARY} OpenMP::OpenMP_CXX)
  target_include_directories(onednn_bench PRIVATE ${PROJECT_SOURCE_DIR}
                                                  ${KVSERVE_DNNL_INCLUDE_DIR})
else()
  message(STATUS "oneDNN (libdnnl-dev) or OpenMP not found; bench/onednn_bench not built")
endif()
