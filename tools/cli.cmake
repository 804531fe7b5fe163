# kvserve-cli: command-line client of the router (generate, chat, tokenize, wait) and a table of the
# workers' capacity (RouterAdmin.ListWorkers, or Worker.StreamStatus with --workers). Needs only the
# generated stubs.
add_executable(kvserve-cli ${CMAKE_CURRENT_LIST_DIR}/cli_main.cc)
target_link_libraries(kvserve-cli PRIVATE kvserve_proto gRPC::grpc++ absl::flags
                      absl::flags_parse absl::flags_usage absl::flags_config absl::status
                      absl::strings absl::str_format kvserve_build_info kvserve_warnings)
# For api/program_usage.h (header-only).
target_include_directories(kvserve-cli PRIVATE ${PROJECT_SOURCE_DIR})
