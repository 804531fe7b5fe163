# gpu_bench: HBM bandwidth, paged attention and bf16 Linear on the CUDA backend (one pass, plain
# text; scripts/gpu_check.sh runs it). Built only when the CUDA backend is. Included by
# bench/CMakeLists.txt.
if(KVSERVE_WITH_CUDA)
  add_executable(gpu_bench ${CMAKE_CURRENT_LIST_DIR}/gpu_bench.cc
                           ${CMAKE_CURRENT_LIST_DIR}/gpu_bench_read.cu)
  target_include_directories(gpu_bench PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(gpu_bench PRIVATE kvserve_kernels kvserve_cuda kvserve_warnings)
  target_compile_options(gpu_bench PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror --Werror=all-warnings>)
endif()
