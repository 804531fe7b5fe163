# KVSERVE_SANITIZE instruments every target: one sanitizer or a comma-separated list, e.g.
# "address", "undefined", "address,undefined" (scripts/sanitize.sh), "thread". ThreadSanitizer
# cannot be combined with AddressSanitizer. UBSan is made fatal (-fno-sanitize-recover), so a
# finding fails the test that triggers it instead of only printing.
if(KVSERVE_SANITIZE)
  string(REPLACE "," ";" _san_list "${KVSERVE_SANITIZE}")
  foreach(_s IN LISTS _san_list)
    if(NOT _s MATCHES "^(address|undefined|thread)$")
      message(FATAL_ERROR "KVSERVE_SANITIZE: '${_s}' is not one of address, undefined, thread "
                          "(comma-separated, e.g. address,undefined)")
    endif()
  endforeach()
  if("thread" IN_LIST _san_list AND "address" IN_LIST _san_list)
    message(FATAL_ERROR "KVSERVE_SANITIZE: thread and address cannot be combined")
  endif()
  set(_san "-fsanitize=${KVSERVE_SANITIZE}")
  if("undefined" IN_LIST _san_list)
    string(APPEND _san " -fno-sanitize-recover=undefined")
  endif()
  string(APPEND CMAKE_CXX_FLAGS " ${_san} -fno-omit-frame-pointer")
  string(APPEND CMAKE_C_FLAGS " ${_san} -fno-omit-frame-pointer")
  string(APPEND CMAKE_EXE_LINKER_FLAGS " ${_san}")
  string(APPEND CMAKE_SHARED_LINKER_FLAGS " ${_san}")
endif()

# KVSERVE_FUZZ=ON builds every target with coverage instrumentation and ASan/UBSan
# (fuzzer-no-link), so that libFuzzer sees inside the libraries a fuzz target links; the fuzz
# targets themselves add -fsanitize=fuzzer for libFuzzer's main (cmake/Testing.cmake).
if(KVSERVE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KVSERVE_FUZZ needs clang (configure with CC=clang CXX=clang++)")
  endif()
  string(APPEND CMAKE_CXX_FLAGS " -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer")
  string(APPEND CMAKE_C_FLAGS " -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer")
endif()

# Instrumentation changes what the optimizer sees, and with -Werror that turns into errors that
# are not about the code: clang may fail to vectorize a loop marked `#pragma omp simd`
# (-Wpass-failed); GCC reports -Wmaybe-uninitialized false positives, e.g. inside Boost.Beast's
# headers under ASan (GCC's manual warns that sanitizers raise that warning's false-positive rate).
# The normal build keeps both warnings.
if((KVSERVE_SANITIZE OR KVSERVE_FUZZ) AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  string(APPEND CMAKE_CXX_FLAGS " -Wno-pass-failed")
endif()
if(KVSERVE_SANITIZE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  string(APPEND CMAKE_CXX_FLAGS " -Wno-maybe-uninitialized")
endif()
