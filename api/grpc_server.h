// The parts of a gRPC serving port that the worker and the router build alike: the server's
// credentials (plain, TLS, or mTLS when a client CA is given), grpc.health.v1 and reflection,
// and starting the built server on a port of its own, with an error that names --listen when it
// cannot bind.
//
// Thread-safety: call from the thread that builds the server, before it starts.
#ifndef KVSERVE_API_GRPC_SERVER_H_
#define KVSERVE_API_GRPC_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvserve {

// TLS with the PEM certificate chain and private key; with a non-empty `client_ca_pem`, clients
// must present a certificate signed by that CA (mTLS).
std::shared_ptr<grpc::ServerCredentials> TlsServerCredentials(const std::string& cert_chain_pem,
                                                              const std::string& private_key_pem,
                                                              const std::string& client_ca_pem);

// grpc.health.v1 and server reflection on every server built from now on. Call before the
// ServerBuilder is made.
void EnableHealthAndReflection();

// builder.BuildAndStart() with SO_REUSEPORT off (gRPC turns it on by default, and then a second
// process on the same --listen port starts and shares it silently). INVALID_ARGUMENT
// "--listen <listen>: address already in use" (or the other reason it could not listen) when it
// failed or bound no port; `bound_port` is the variable given to AddListeningPort.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(grpc::ServerBuilder& builder,
                                                              absl::string_view listen,
                                                              const int& bound_port);

}  // namespace kvserve

#endif  // KVSERVE_API_GRPC_SERVER_H_
