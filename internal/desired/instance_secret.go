package desired

import (
	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// ComponentInstance marks the instance Secret (InstanceSecretName).
const ComponentInstance = "instance"

// InstanceSecretKeys are the keys of the instance Secret, each of which the
// controller makes once and keeps.
var InstanceSecretKeys = []string{
	SecretKeySuperuserPassword, SecretKeyInstanceReplicationPassword,
	SecretKeyAgentCA, SecretKeyAgentCAKey,
	SecretKeyAgentCert, SecretKeyAgentKey,
	SecretKeyOperatorCert, SecretKeyOperatorKey,
}

// ConfidentialKeys are the keys of a Database's Secrets (credentials,
// instance, TLS and CA) whose values must appear in no log, Event or
// status: the passwords, the connection URI, the legacy agent token and the
// private keys. The leak scans of the tests look for them.
var ConfidentialKeys = []string{
	SecretKeyPassword, SecretKeyURI, SecretKeyReplicationPassword, SecretKeyAgentToken,
	SecretKeySuperuserPassword, SecretKeyAgentCAKey, SecretKeyAgentKey, SecretKeyOperatorKey,
	SecretKeyTLSKey, SecretKeyCAKey,
}

// instanceSecretFiles maps each key of InstanceSecretMounted to its file in
// the pod's secrets directory (instance.EnvSecretsDir).
var instanceSecretFiles = map[string]string{
	SecretKeySuperuserPassword:           instance.SecretFileSuperuserPassword,
	SecretKeyInstanceReplicationPassword: instance.SecretFileReplicationPassword,
	SecretKeyAgentCA:                     instance.SecretFileAgentCA,
	SecretKeyAgentCert:                   instance.SecretFileAgentCert,
	SecretKeyAgentKey:                    instance.SecretFileAgentKey,
}

// InstanceSecret returns the Database's instance Secret holding values, by
// key (InstanceSecretKeys; other keys are left out): the superuser's and
// the replication role's passwords, the agent CA, the agents' serving
// certificate and the operator's client certificate. The values are the
// caller's: the controller makes each once and keeps the ones already in
// the live Secret. Only the Database's pods mount it, and only the keys of
// InstanceSecretMounted.
func InstanceSecret(db *dbv1.Database, values map[string][]byte) *corev1ac.SecretApplyConfiguration {
	data := make(map[string][]byte, len(InstanceSecretKeys))
	for _, k := range InstanceSecretKeys {
		data[k] = values[k]
	}
	return corev1ac.Secret(InstanceSecretName(db), db.Namespace).
		WithLabels(Labels(db, ComponentInstance)).
		WithOwnerReferences(ownerReference(db)).
		WithType(corev1.SecretTypeOpaque).
		WithData(data)
}
