// What a Hadoop web service's error answer means, for the YARN clients
// (collect/yarn_rest, actuate/yarn_resize). Checked against a real Hadoop
// 3.5.0 ResourceManager (tests/yarn):
//   - its REST errors are {"RemoteException":{"exception","message",...}};
//   - its authentication filter answers 401 (simple auth without user.name,
//     or a failed SPNEGO) with Jetty's error page, and so does a path that no
//     REST resource serves (404); the page is JSON {"servlet","message",
//     "url","status"} for a client that accepts JSON, HTML otherwise.
#pragma once

#include <string>

namespace khagent {

struct HadoopError {
  int err = 0;          // EACCES, ENOENT, EOPNOTSUPP, EINVAL or EIO
  std::string message;  // "HTTP <status>: <what the body says>", one line
};

// The errno for an HTTP error `status` with `body`:
//   401, 403          EACCES (authentication, or the RM's authorisation)
//   404 RemoteException NotFoundException
//                     ENOENT (the service is there; the node/app is not)
//   404 otherwise     EOPNOTSUPP (no such REST endpoint on this server: an HTML
//                     page, or Jersey 1's NotFoundException "null for uri: ..."
//                     as a Hadoop 2.x RM answers a path it does not serve)
//   400               EINVAL
//   anything else     EIO
// and the message: the RemoteException's exception and message, else the
// message of Jetty's JSON error page, else an HTML page's <title>, else the
// start of the body.
HadoopError hadoop_http_error(long status, const std::string& body);

// Just the readable part of an error body (as in hadoop_http_error).
std::string hadoop_error_text(const std::string& body);

}  // namespace khagent
