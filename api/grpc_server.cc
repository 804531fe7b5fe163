#include "api/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "api/listen_check.h"

namespace kvserve {

std::shared_ptr<grpc::ServerCredentials> TlsServerCredentials(const std::string& cert_chain_pem,
                                                              const std::string& private_key_pem,
                                                              const std::string& client_ca_pem) {
  grpc::SslServerCredentialsOptions ssl(
      client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = client_ca_pem;
  ssl.pem_key_cert_pairs.push_back({private_key_pem, cert_chain_pem});
  return grpc::SslServerCredentials(ssl);
}

void EnableHealthAndReflection() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(grpc::ServerBuilder& builder,
                                                              absl::string_view listen,
                                                              const int& bound_port) {
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    return ListenError("--listen", listen, "cannot listen");
  }
  return server;
}

}  // namespace kvserve
