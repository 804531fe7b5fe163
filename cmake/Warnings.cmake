# Warnings are errors on every C++ target of the project (not on generated code, see
# kvserve_warnings' users). Apply with target_link_libraries(t PRIVATE kvserve_warnings).
add_library(kvserve_warnings INTERFACE)
target_compile_options(kvserve_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-unused-parameter>)
# GCC 12 at -O3 (a Release build) reports -Wrestrict inside libstdc++'s own std::string
# concatenation (char_traits.h's memcpy; GCC bug 105329), in tests and benchmarks that only join
# strings: not our code, so that warning stays a warning there.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(kvserve_warnings INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-Wno-error=restrict>)
endif()
