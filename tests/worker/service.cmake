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
