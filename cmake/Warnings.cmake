# Warnings are errors on every C++ target of the project (not on generated code, see
# kvserve_warnings' users). Apply with target_link_libraries(t PRIVATE kvserve_warnings).
add_library(kvserve_warnings INTERFACE)
target_compile_options(kvserve_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-unused-parameter>)
