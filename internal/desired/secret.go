package desired

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// Credentials are the generated values of the credentials Secret. The
// controller makes each once and keeps the one already in a live Secret: a
// present value is never replaced.
type Credentials struct {
	// Password is the application user's password.
	Password string
	// CA is the certificate of the CA that signed the server's TLS
	// certificate (postgres), the TLS Secret's ca.crt; nil while that
	// Secret does not exist or has none.
	CA []byte
}

// Secret returns the Database's credentials Secret holding the given
// credentials. Its data keys are username, password, database, host, port
// and uri, and for postgres, once the TLS Secret exists, ca.crt. The values
// are the caller's: the controller makes them once and keeps the ones
// already in a live Secret. The replication password and the agents'
// credentials are in the instance Secret (InstanceSecret), which no
// application mounts; a Secret an earlier release made still holds
// SecretKeyReplicationPassword and SecretKeyAgentToken until the controller
// removes them.
func Secret(db *dbv1.Database, creds Credentials) *corev1ac.SecretApplyConfiguration {
	data := map[string][]byte{
		SecretKeyUsername: []byte(db.Spec.Username),
		SecretKeyPassword: []byte(creds.Password),
		SecretKeyDatabase: []byte(db.Spec.DatabaseName),
		SecretKeyHost:     []byte(Host(db)),
		SecretKeyPort:     []byte(strconv.Itoa(int(port(db)))),
		SecretKeyURI:      []byte(URI(db, creds.Password)),
	}
	if HasInstanceAgent(db) && len(creds.CA) > 0 {
		data[SecretKeyCA] = creds.CA
	}
	return corev1ac.Secret(SecretName(db), db.Namespace).
		WithLabels(Labels(db, ComponentCredentials)).
		WithOwnerReferences(ownerReference(db)).
		WithType(corev1.SecretTypeOpaque).
		WithData(data)
}

// SecretHeld returns what live holds of the fields want sets: each of want's
// labels, annotations and data keys with live's value, the Database's owner
// reference and the type: compared with want by Changes, it finds what an
// extraction would (an edited or removed label, key or reference). The
// controller creates the Secret with a plain create, so its managed fields
// are an update's, which corev1ac.ExtractSecret does not read. A label or key dbkeeper stopped
// setting stays on the Secret, which for a Secret is what a user wants.
func SecretHeld(want *corev1ac.SecretApplyConfiguration, live *corev1.Secret) *corev1ac.SecretApplyConfiguration {
	have := corev1ac.Secret(live.Name, live.Namespace)
	for k := range want.Labels {
		if v, ok := live.Labels[k]; ok {
			have.WithLabels(map[string]string{k: v})
		}
	}
	for k := range want.Annotations {
		if v, ok := live.Annotations[k]; ok {
			have.WithAnnotations(map[string]string{k: v})
		}
	}
	for _, w := range want.OwnerReferences {
		for _, ref := range live.OwnerReferences {
			if w.UID != nil && ref.UID == *w.UID {
				have.WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion(ref.APIVersion).WithKind(ref.Kind).
					WithName(ref.Name).WithUID(ref.UID))
				last := &have.OwnerReferences[len(have.OwnerReferences)-1]
				last.Controller, last.BlockOwnerDeletion = ref.Controller, ref.BlockOwnerDeletion
			}
		}
	}
	if want.Type != nil && live.Type != "" {
		have.WithType(live.Type)
	}
	for k := range want.Data {
		if v, ok := live.Data[k]; ok {
			have.WithData(map[string][]byte{k: v})
		}
	}
	return have
}
