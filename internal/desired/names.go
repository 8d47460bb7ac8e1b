package desired

import (
	"net"
	"strconv"
	"strings"

	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

// FieldManager is the one field manager dbkeeper uses for server-side apply
// and for extracting the fields it owns from live objects.
const FieldManager = "dbkeeper"

// ManagedByValue is the value of the app.kubernetes.io/managed-by label on
// every object dbkeeper creates. The manager caches only objects carrying it.
const ManagedByValue = "dbkeeper"

// The recommended labels dbkeeper sets on every child of a Database.
const (
	// LabelName is the application: the engine, postgres or mysql.
	LabelName = "app.kubernetes.io/name"
	// LabelInstance is the name of the Database.
	LabelInstance = "app.kubernetes.io/instance"
	// LabelManagedBy is always ManagedByValue.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelComponent is the role of the object: ComponentDatabase or
	// ComponentCredentials.
	LabelComponent = "app.kubernetes.io/component"
)

// Values of the LabelComponent label.
const (
	// ComponentDatabase marks the StatefulSet, its pods and volumes, and the
	// Services.
	ComponentDatabase = "database"
	// ComponentCredentials marks the credentials Secret.
	ComponentCredentials = "credentials"
)

// Keys of the credentials Secret.
const (
	SecretKeyUsername = "username"
	SecretKeyPassword = "password"
	SecretKeyDatabase = "database"
	SecretKeyHost     = "host"
	SecretKeyPort     = "port"
	SecretKeyURI      = "uri"

	// SecretKeyReplicationPassword is where an earlier release kept the
	// password of the replication role, ReplicationUser (postgres only):
	// the controller copies it into the instance Secret and removes it
	// once every pod runs the current template.
	SecretKeyReplicationPassword = "replication-password"
	// SecretKeyAgentToken is the bearer token an earlier release's
	// instance agents take (postgres only), removed with
	// SecretKeyReplicationPassword.
	SecretKeyAgentToken = "agent-token"
)

// ReplicationUser is the role the standbys connect to the primary as
// (docs/replication.md §2). Its password is the instance Secret's
// SecretKeyInstanceReplicationPassword.
const ReplicationUser = "dbkeeper_replication"

// SuperUser is the PostgreSQL superuser: the bootstrap role of a data
// directory dbkeeper initialises, and the role the instance agent connects
// as. Its password is the instance Secret's SecretKeySuperuserPassword. The
// application user (spec.username) is an ordinary role that owns its
// database.
const SuperUser = "postgres"

// Keys of the instance Secret (InstanceSecretName), in the Database's
// namespace, which holds what the Database's pods mount and nothing else:
// no private key that signs or commands anything beyond one pod's own
// serving certificate. The agents' CA key and the operator's client
// certificate live in the agent keys Secret (AgentKeysSecretName) in the
// operator's namespace.
const (
	// SecretKeySuperuserPassword is SuperUser's password.
	SecretKeySuperuserPassword = "superuser-password"
	// SecretKeyInstanceReplicationPassword is ReplicationUser's password.
	// (The credentials Secret of a Database made before the instance
	// Secret existed holds it as SecretKeyReplicationPassword.)
	SecretKeyInstanceReplicationPassword = "replication-password"
	// SecretKeyAgentCA is the bundle of the agent CA certificates the
	// agents trust (certificates only): the Database's agent CA, and while
	// it is being replaced the old and the new one.
	SecretKeyAgentCA = "agent-ca.crt"
	// SecretKeyAgentCert and SecretKeyAgentKey are the agents' serving
	// certificate (for AgentServerName) and key.
	SecretKeyAgentCert = "agent-tls.crt"
	SecretKeyAgentKey  = "agent-tls.key"
)

// Keys of the agent keys Secret (AgentKeysSecretName), in the operator's
// namespace, which only the operator reads. An earlier release kept
// SecretKeyAgentCAKey, SecretKeyOperatorCert and SecretKeyOperatorKey in
// the instance Secret (LegacyInstanceSecretKeys); the controller copies
// them here and then removes them there.
const (
	// SecretKeyAgentCACert and SecretKeyAgentCAKey are the Database's
	// agent CA, which signs the agents' serving certificates and the
	// operator's client certificate.
	SecretKeyAgentCACert = "agent-ca.crt"
	SecretKeyAgentCAKey  = "agent-ca.key"
	// SecretKeyNextAgentCACert and SecretKeyNextAgentCAKey are the CA that
	// replaces the agent CA, from the moment it joins the agents' bundle
	// until every pod trusts it (then it is the agent CA).
	SecretKeyNextAgentCACert = "next-agent-ca.crt"
	SecretKeyNextAgentCAKey  = "next-agent-ca.key"
	// SecretKeyPreviousAgentCACert is the CA the agent CA replaced, kept in
	// the agents' bundle until every pod serves a certificate of the new
	// one.
	SecretKeyPreviousAgentCACert = "previous-agent-ca.crt"
	// SecretKeyOperatorCert and SecretKeyOperatorKey are the operator's
	// client certificate (common name AgentClientName) and key.
	SecretKeyOperatorCert = "operator-tls.crt"
	SecretKeyOperatorKey  = "operator-tls.key"
)

// AgentKeysSecretKeys are the keys of the agent keys Secret.
var AgentKeysSecretKeys = []string{
	SecretKeyAgentCACert, SecretKeyAgentCAKey,
	SecretKeyNextAgentCACert, SecretKeyNextAgentCAKey, SecretKeyPreviousAgentCACert,
	SecretKeyOperatorCert, SecretKeyOperatorKey,
}

// LegacyInstanceSecretKeys are the keys an earlier release kept in the
// instance Secret that now live in the agent keys Secret only.
var LegacyInstanceSecretKeys = []string{SecretKeyAgentCAKey, SecretKeyOperatorCert, SecretKeyOperatorKey}

// InstanceSecretMounted are the instance Secret's keys the Database's pods
// mount.
var InstanceSecretMounted = []string{
	SecretKeySuperuserPassword, SecretKeyInstanceReplicationPassword,
	SecretKeyAgentCA, SecretKeyAgentCert, SecretKeyAgentKey,
}

// AgentClientName is the common name of the operator's client certificate,
// the only client an agent takes commands from.
const AgentClientName = "dbkeeper-operator"

// AgentKeysSecretName returns the name of the Secret in the operator's
// namespace holding the Database's agent CA and the operator's client
// certificate: <namespace>.<name>.agent-keys. Neither a namespace nor a
// Database's name has a dot, so no two Databases share one.
func AgentKeysSecretName(db *dbv1.Database) string {
	return db.Namespace + "." + db.Name + ".agent-keys"
}

// InstanceSecretName returns the name of the Secret holding the Database's
// superuser and replication passwords and its agents' certificates,
// <name>-instance. No application mounts it.
func InstanceSecretName(db *dbv1.Database) string { return db.Name + "-instance" }

// AgentServerName returns the name in the agents' serving certificate, which
// the operator checks when it calls an agent by pod IP:
// <name>.<namespace>.dbkeeper-agent. It is not a DNS name anything resolves.
func AgentServerName(db *dbv1.Database) string {
	return db.Name + "." + db.Namespace + ".dbkeeper-agent"
}

// TLSSecretName returns the name of the Secret holding the server's TLS
// certificate for clients and replication, <name>-tls, with the keys
// cert-manager writes: ca.crt, tls.crt and tls.key. cert-manager writes it
// for spec.tls.issuerRef; otherwise the operator does, from the CA in
// CASecretName.
func TLSSecretName(db *dbv1.Database) string { return db.Name + "-tls" }

// CASecretName returns the name of the Secret holding the CA the operator
// runs for the Database's client TLS when spec.tls names no issuer,
// <name>-ca (keys ca.crt and ca.key). No pod mounts it.
func CASecretName(db *dbv1.Database) string { return db.Name + "-ca" }

// SecretName returns the name of the Database's credentials Secret,
// <name>-credentials.
func SecretName(db *dbv1.Database) string { return db.Name + "-credentials" }

// HeadlessServiceName returns the name of the Database's headless Service,
// <name>-headless, the governing Service of its StatefulSet.
func HeadlessServiceName(db *dbv1.Database) string { return db.Name + "-headless" }

// ReadOnlyServiceName returns the name of the Service that routes to the
// standbys of a replicated Database, <name>-ro.
func ReadOnlyServiceName(db *dbv1.Database) string { return db.Name + "-ro" }

// ClientServiceName returns the name of the Service clients connect to: the
// Database's own name.
func ClientServiceName(db *dbv1.Database) string { return db.Name }

// StatefulSetName returns the name of the Database's StatefulSet: the
// Database's own name.
func StatefulSetName(db *dbv1.Database) string { return db.Name }

// Labels returns the labels of a child of the Database with the given
// component (ComponentDatabase or ComponentCredentials). A new map is
// returned on every call.
func Labels(db *dbv1.Database, component string) map[string]string {
	return map[string]string{
		LabelName:      string(db.Spec.Engine),
		LabelInstance:  db.Name,
		LabelManagedBy: ManagedByValue,
		LabelComponent: component,
	}
}

// SelectorLabels returns the labels that select the Database's pods: the
// StatefulSet selector and the Services' selector. They depend on nothing a
// user can change, since a StatefulSet's selector is immutable. A new map is
// returned on every call.
func SelectorLabels(db *dbv1.Database) map[string]string {
	return map[string]string{
		LabelInstance:  db.Name,
		LabelManagedBy: ManagedByValue,
		LabelComponent: ComponentDatabase,
	}
}

// Host returns the in-cluster DNS name of the client Service,
// <name>.<namespace>.svc.
func Host(db *dbv1.Database) string {
	return ClientServiceName(db) + "." + db.Namespace + ".svc"
}

// Endpoint returns the address clients connect to, host:port.
func Endpoint(db *dbv1.Database) string {
	return net.JoinHostPort(Host(db), strconv.Itoa(int(port(db))))
}

// URI returns the connection URI of the Database for the given password, for
// example postgresql://app:secret@orders.shop.svc:5432/app?sslmode=verify-full
// (postgres asks for TLS and a server certificate for the host). The user name,
// password and database name are percent-encoded: every byte but the
// unreserved characters of RFC 3986 is escaped, so that every client library
// reads them back unchanged.
func URI(db *dbv1.Database, password string) string {
	uri := uriScheme(db.Spec.Engine) + "://" +
		escape(db.Spec.Username) + ":" + escape(password) + "@" +
		Endpoint(db) + "/" + escape(db.Spec.DatabaseName)
	if HasInstanceAgent(db) {
		// Every postgres server runs TLS: clients verify it with the
		// Secret's ca.crt (libpq's sslrootcert, PGSSLROOTCERT).
		uri += "?sslmode=verify-full"
	}
	return uri
}

// uriScheme returns the URI scheme clients of the engine understand.
func uriScheme(engine dbv1.Engine) string {
	if engine == dbv1.EnginePostgres {
		return "postgresql"
	}
	return string(engine)
}

// escape percent-encodes every byte of s except RFC 3986's unreserved
// characters (ALPHA, DIGIT, "-", ".", "_", "~").
func escape(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '.', c == '_', c == '~':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0x0f])
		}
	}
	return b.String()
}

// ownerReference returns the controller owner reference every child carries,
// so that the garbage collector deletes it with the Database.
func ownerReference(db *dbv1.Database) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(dbv1.GroupVersion.String()).
		WithKind(dbv1.DatabaseKind).
		WithName(db.Name).
		WithUID(db.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
}

// HasInstanceAgent reports whether the Database's pods run the instance
// agent (internal/instance) as PID 1 of the database container, and so get
// its init container, its Secret keys, role-selecting Services and the
// read-only Service: PostgreSQL only.
func HasInstanceAgent(db *dbv1.Database) bool { return db.Spec.Engine == dbv1.EnginePostgres }

// engineInfo returns the catalog entry of the Database's engine. An engine
// missing from the catalog (which validation refuses) yields an empty entry,
// so that the builders never panic.
func engineInfo(db *dbv1.Database) catalog.EngineInfo {
	if info, ok := catalog.LookupEngine(db.Spec.Engine); ok {
		return *info
	}
	return catalog.EngineInfo{Name: db.Spec.Engine}
}

// port returns spec.port, which defaulting always sets for a known engine;
// 0 when it is unset, which validation refuses before anything is built.
func port(db *dbv1.Database) int32 {
	return ptr.Deref(db.Spec.Port, 0)
}
