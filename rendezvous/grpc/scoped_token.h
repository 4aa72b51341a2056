// Scoped tokens: tokens a server derives from its own token, one per namespace (a user, a team,
// a job), so that the holders of one cannot reach the runs of another (docs/design.md §11).
//
// A scoped token is "ddprun1.<scope>.<mac>", mac the hex HMAC-SHA256 of the server's token over
// the scope: the server checks it without storing anything, and only whoever holds the server's
// token can make one (`ddprun-rdzv --mint-token SCOPE`). Agents use it as they use any token
// (DDPRUN_RDZV_TOKEN, token_file); the server keeps a run joined with it under
// "<scope>/<run id>" (ScopedRunId, run_config.h), so two scopes' runs of the same id are two
// runs. The server's own token reaches the runs of no scope (their ids contain '/', which a
// join's run id cannot), but its Status call may name them in full.
//
// Pure functions; thread-safe.
#ifndef DDPRUN_RENDEZVOUS_GRPC_SCOPED_TOKEN_H_
#define DDPRUN_RENDEZVOUS_GRPC_SCOPED_TOKEN_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ddprun::rendezvous {

// The scoped token of `scope` under `server_token`. kInvalidArgument naming the scope when it is
// not 1 to 64 of [A-Za-z0-9_-], or when `server_token` is empty (a server without a token has
// nothing to derive from).
absl::StatusOr<std::string> MintScopedToken(absl::string_view server_token,
                                            absl::string_view scope);

// What the bearer value `presented` of a call gives access to on a server whose token is
// `server_token`: "" for the server's token itself (or any call when `server_token` is empty),
// the scope for a scoped token of this server, nullopt for anything else. Constant time in the
// compared secrets.
std::optional<std::string> ScopeOfToken(absl::string_view presented,
                                        absl::string_view server_token);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_GRPC_SCOPED_TOKEN_H_
