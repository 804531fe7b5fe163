# KV cache bookkeeping micro-benchmarks (included by bench/CMakeLists.txt).
kvserve_add_bench(kvcache_bench SOURCES kvcache_bench.cc LIBS kvserve_kvcache)
