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

	// SecretKeyReplicationPassword is the password of the replication
	// role, ReplicationUser (postgres only).
	SecretKeyReplicationPassword = "replication-password"
	// SecretKeyAgentToken is the bearer token the operator presents to the
	// instance agents (postgres only).
	SecretKeyAgentToken = "agent-token"
)

// ReplicationUser is the role the standbys connect to the primary as
// (docs/replication.md §2). Its password is the credentials Secret's
// SecretKeyReplicationPassword.
const ReplicationUser = "dbkeeper_replication"

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
// example postgresql://app:secret@orders.shop.svc:5432/app. The user name,
// password and database name are percent-encoded: every byte but the
// unreserved characters of RFC 3986 is escaped, so that every client library
// reads them back unchanged.
func URI(db *dbv1.Database, password string) string {
	return uriScheme(db.Spec.Engine) + "://" +
		escape(db.Spec.Username) + ":" + escape(password) + "@" +
		Endpoint(db) + "/" + escape(db.Spec.DatabaseName)
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
