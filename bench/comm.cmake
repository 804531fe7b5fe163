# comm_bench: the Gloo all-reduce at 2 ranks on loopback for the default model's hidden size x
# 1..512 tokens (the tensor-parallel step's communication). Included by bench/CMakeLists.txt.
kvserve_add_bench(comm_bench SOURCES ${CMAKE_CURRENT_LIST_DIR}/comm_bench.cc LIBS kvserve_comm)
