package desired

import (
	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// ComponentInstance marks the instance Secret (InstanceSecretName).
const ComponentInstance = "instance"

// ComponentAgentKeys marks the agent keys Secret (AgentKeysSecretName).
const ComponentAgentKeys = "agent-keys"

// Labels of the agent keys Secret, which no owner reference can tie to its
// Database (it lives in another namespace): they name the Database, and
// its UID tells the keys of a Database from those of an earlier one of the
// same name.
const (
	LabelDatabaseNamespace = "dbkeeper.io/database-namespace"
	LabelDatabaseName      = "dbkeeper.io/database-name"
	LabelDatabaseUID       = "dbkeeper.io/database-uid"
)

// InstanceSecretKeys are the keys of the instance Secret, each of which the
// controller makes once and keeps.
var InstanceSecretKeys = []string{
	SecretKeySuperuserPassword, SecretKeyInstanceReplicationPassword,
	SecretKeyAgentCA, SecretKeyAgentCert, SecretKeyAgentKey,
}

// ConfidentialKeys are the keys of a Database's Secrets (credentials,
// instance, TLS and CA) whose values must appear in no log, Event or
// status: the passwords, the connection URI, the legacy agent token and the
// private keys. The leak scans of the tests look for them.
var ConfidentialKeys = []string{
	SecretKeyPassword, SecretKeyURI, SecretKeyReplicationPassword, SecretKeyAgentToken,
	SecretKeySuperuserPassword, SecretKeyAgentCAKey, SecretKeyNextAgentCAKey, SecretKeyAgentKey, SecretKeyOperatorKey,
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
// the replication role's passwords, the bundle of agent CA certificates
// and the agents' serving certificate. The values are the
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

// AgentKeysSecret returns the agent keys Secret of the Database in the
// operator's namespace holding values, by key (AgentKeysSecretKeys; other
// keys and empty values are left out): the agent CA with its key, the CA
// replacing it or replaced by it while a rotation runs, and the
// operator's client certificate. No pod mounts it and no owner reference
// ties it to the Database: the controller deletes it when the Database is
// deleted (a finalizer), and finds it by name and by its labels.
func AgentKeysSecret(db *dbv1.Database, namespace string, values map[string][]byte) *corev1ac.SecretApplyConfiguration {
	data := make(map[string][]byte, len(AgentKeysSecretKeys))
	for _, k := range AgentKeysSecretKeys {
		if len(values[k]) > 0 {
			data[k] = values[k]
		}
	}
	return corev1ac.Secret(AgentKeysSecretName(db), namespace).
		WithLabels(AgentKeysLabels(db)).
		WithType(corev1.SecretTypeOpaque).
		WithData(data)
}

// AgentKeysLabels returns the labels of the Database's agent keys Secret.
func AgentKeysLabels(db *dbv1.Database) map[string]string {
	return map[string]string{
		LabelManagedBy:         ManagedByValue,
		LabelComponent:         ComponentAgentKeys,
		LabelDatabaseNamespace: db.Namespace,
		LabelDatabaseName:      db.Name,
		LabelDatabaseUID:       string(db.UID),
	}
}
