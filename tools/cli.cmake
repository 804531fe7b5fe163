# kvserve-cli: command-line client of the router (generate, chat, tokenize) and a table of the
# workers' capacity (Worker.StreamStatus). Needs only the generated stubs.
add_executable(kvserve-cli ${CMAKE_CURRENT_LIST_DIR}/cli_main.cc)
target_link_libraries(kvserve-cli PRIVATE kvserve_proto gRPC::grpc++ absl::flags
                      absl::flags_parse absl::flags_usage absl::strings absl::str_format
                      kvserve_warnings)
