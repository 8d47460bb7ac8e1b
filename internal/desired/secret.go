package desired

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// Secret returns the Database's credentials Secret holding the given
// password. Its data keys are username, password, database, host, port and
// uri. The password is the caller's: the controller makes it once and keeps
// the one already in a live Secret.
func Secret(db *dbv1.Database, password string) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(SecretName(db), db.Namespace).
		WithLabels(Labels(db, ComponentCredentials)).
		WithOwnerReferences(ownerReference(db)).
		WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{
			SecretKeyUsername: []byte(db.Spec.Username),
			SecretKeyPassword: []byte(password),
			SecretKeyDatabase: []byte(db.Spec.DatabaseName),
			SecretKeyHost:     []byte(Host(db)),
			SecretKeyPort:     []byte(strconv.Itoa(int(port(db)))),
			SecretKeyURI:      []byte(URI(db, password)),
		})
}
