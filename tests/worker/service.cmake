# Tests of the worker's service layer (worker/service.cmake): conversion and metrics as unit
# tests, and the gRPC services in-process over loopback with the fake model runner. The
# real-process tests with the real model are in tests/e2e.
kvserve_add_test(NAME worker_options_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/worker_options_test.cc
                 LIBS kvserve_worker GTest::gmock LABELS unit TIMEOUT 60)
kvserve_add_test(NAME worker_proto_conversion_test
                 SOURCES ${CMAKE_CURRENT_LIST_DIR}/proto_conversion_test.cc
                 LIBS kvserve_worker LABELS unit TIMEOUT 60)
kvserve_add_test(NAME worker_metrics_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/metrics_test.cc
                 LIBS kvserve_worker GTest::gmock LABELS unit TIMEOUT 60)
kvserve_add_test(NAME worker_service_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/service_test.cc
                 LIBS kvserve_worker GTest::gmock LABELS integration TIMEOUT 300)
# Makes its certificates with the openssl command (scripts/setup.sh installs it).
kvserve_add_test(NAME worker_tls_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/tls_test.cc
                 LIBS kvserve_worker LABELS integration TIMEOUT 120)

# --device=cuda where no GPU can be used: a clear message naming the cause and exit status 2,
# before any model is loaded; a bad --dtype is named as its flag (exit 1). Skipped (77) on a
# machine with a usable GPU, where the first command would start serving.
add_test(NAME worker_device_flags_test
         COMMAND sh -c [=[
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then exit 77; fi
out=$("$0" --device=cuda --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 2>&1); rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 2 ] || { echo "want exit 2, got $rc"; exit 1; }
printf '%s' "$out" | grep -q "device cuda: .*CUDA" || exit 1
out=$("$0" --device=cpu --dtype=float8 --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 2>&1); rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 1 ] && printf '%s' "$out" | grep -q -- "--dtype: must be auto, float32, bfloat16 or float16"
]=] $<TARGET_FILE:kvserve-worker>)
set_tests_properties(worker_device_flags_test PROPERTIES LABELS integration TIMEOUT 120
                                                     SKIP_RETURN_CODE 77)
