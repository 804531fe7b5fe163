# Tests of kvserve_router (router/service.cmake): token auth, the start-up options, the metrics
# (each documented), a request's progress over migrations, and the prompt renderer (the default
# model's tokenizer). The service itself is tested end to end with real processes
# (tests/e2e/router_*_e2e_test.py).
kvserve_add_test(NAME router_token_auth_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/token_auth_test.cc LIBS kvserve_router GTest::gmock
  LABELS unit)
kvserve_add_test(NAME router_service_options_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/router_service_options_test.cc LIBS kvserve_router GTest::gmock
  LABELS unit)
kvserve_add_test(NAME router_request_progress_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/request_progress_test.cc LIBS kvserve_router LABELS unit)
kvserve_add_test(NAME router_metrics_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/router_metrics_test.cc LIBS kvserve_router GTest::gmock
  LABELS unit)
# The stall rule of a request stream (progress reports, and a silent stream that moves), with the
# router's real parts against a scripted Worker server on loopback.
kvserve_add_test(NAME router_stream_stall_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/stream_stall_test.cc
  LIBS kvserve_router kvserve_router_test_util GTest::gmock LABELS unit TIMEOUT 120)
