package desired

import (
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// VolumeCustomQueries is the ConfigMap of spec.monitoring's custom
// queries at instance.CustomQueriesDir (postgres pods with one only).
const VolumeCustomQueries = "dbkeeper-custom-queries"

// customQueriesConfigMap is spec.monitoring.customQueriesConfigMap of a
// Database whose pods run the instance agent, "" otherwise.
func customQueriesConfigMap(db *dbv1.Database) string {
	if !HasInstanceAgent(db) || db.Spec.Monitoring == nil {
		return ""
	}
	return db.Spec.Monitoring.CustomQueriesConfigMap
}

// customQueriesVolume is the custom queries' ConfigMap, every key a file.
// Optional: a ConfigMap not made yet does not keep the pods from
// starting, and the agent reads the files once the kubelet writes them,
// as it reads them again whenever the ConfigMap changes. Readable by all:
// queries are no secret.
func customQueriesVolume(db *dbv1.Database) *corev1ac.VolumeApplyConfiguration {
	return corev1ac.Volume().WithName(VolumeCustomQueries).WithConfigMap(corev1ac.ConfigMapVolumeSource().
		WithName(customQueriesConfigMap(db)).
		WithDefaultMode(0o444).
		WithOptional(true))
}
