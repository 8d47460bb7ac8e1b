package instance

import "crypto/tls"

// AgentClientName is the common name of the operator's client certificate:
// the only client an agent takes a command from (every path but
// PathReady). desired.AgentClientName is the same name.
const AgentClientName = "dbkeeper-operator"

// AgentCredentials are what the operator calls a Database's agents with.
type AgentCredentials struct {
	// TLS is the client's TLS configuration: RootCAs the Database's agent
	// CA, ServerName the name in the agents' serving certificate, and the
	// operator's client certificate (common name AgentClientName).
	TLS *tls.Config
	// LegacyToken is the bearer token of an earlier release's agents,
	// which serve plain HTTP; "" when there is none. It is sent only to an
	// agent that answered the TLS handshake in plain HTTP, never to one
	// that speaks TLS.
	LegacyToken string
}
