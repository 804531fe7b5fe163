# kvserve_add_test(NAME <name> SOURCES <files...> LIBS <targets...> LABELS <unit|integration|e2e|gpu...>
#                  [TIMEOUT <seconds>])
# One GoogleTest binary registered as one ctest test with the given labels. Test bodies find
# data through KVSERVE_SOURCE_DIR (the source tree) and the default model through
# model/default_model.h.
function(kvserve_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main kvserve_warnings)
  target_compile_definitions(${T_NAME} PRIVATE KVSERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT})
endfunction()

# kvserve_add_fuzzer(NAME <name> SOURCES <files...> LIBS <targets...>)
# A libFuzzer target, built only with KVSERVE_FUZZ=ON and clang. Run it by hand, e.g.
#   build-fuzz/tests/kvcache/kv_cache_manager_fuzz -max_total_time=300
function(kvserve_add_fuzzer)
  cmake_parse_arguments(F "" "NAME" "SOURCES;LIBS" ${ARGN})
  if(NOT KVSERVE_FUZZ)
    return()
  endif()
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KVSERVE_FUZZ needs clang (configure with -DCMAKE_CXX_COMPILER=clang++)")
  endif()
  add_executable(${F_NAME} ${F_SOURCES})
  target_compile_options(${F_NAME} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(${F_NAME} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(${F_NAME} PRIVATE ${F_LIBS} kvserve_warnings)
endfunction()
