# KVSERVE_SANITIZE=address|undefined|thread instruments every target.
if(KVSERVE_SANITIZE)
  if(NOT KVSERVE_SANITIZE MATCHES "^(address|undefined|thread)$")
    message(FATAL_ERROR "KVSERVE_SANITIZE must be address, undefined or thread, not '${KVSERVE_SANITIZE}'")
  endif()
  set(_san "-fsanitize=${KVSERVE_SANITIZE}")
  if(KVSERVE_SANITIZE STREQUAL "undefined")
    string(APPEND _san " -fno-sanitize-recover=all")
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
