package desired

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// Credentials are the generated values of the credentials Secret. The
// controller makes each once and keeps the one already in a live Secret: a
// present value is never replaced.
type Credentials struct {
	// Password is the application user's password.
	Password string
	// ReplicationPassword is ReplicationUser's password; used only for a
	// Database with the instance agent (HasInstanceAgent).
	ReplicationPassword string
	// AgentToken is the instance agents' bearer token; used only for a
	// Database with the instance agent.
	AgentToken string
}

// Secret returns the Database's credentials Secret holding the given
// credentials. Its data keys are username, password, database, host, port
// and uri, and for a Database with the instance agent (postgres) also
// replication-password and agent-token. The values are the caller's: the
// controller makes them once and keeps the ones already in a live Secret.
func Secret(db *dbv1.Database, creds Credentials) *corev1ac.SecretApplyConfiguration {
	data := map[string][]byte{
		SecretKeyUsername: []byte(db.Spec.Username),
		SecretKeyPassword: []byte(creds.Password),
		SecretKeyDatabase: []byte(db.Spec.DatabaseName),
		SecretKeyHost:     []byte(Host(db)),
		SecretKeyPort:     []byte(strconv.Itoa(int(port(db)))),
		SecretKeyURI:      []byte(URI(db, creds.Password)),
	}
	if HasInstanceAgent(db) {
		data[SecretKeyReplicationPassword] = []byte(creds.ReplicationPassword)
		data[SecretKeyAgentToken] = []byte(creds.AgentToken)
	}
	return corev1ac.Secret(SecretName(db), db.Namespace).
		WithLabels(Labels(db, ComponentCredentials)).
		WithOwnerReferences(ownerReference(db)).
		WithType(corev1.SecretTypeOpaque).
		WithData(data)
}
