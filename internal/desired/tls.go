package desired

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/pki"
)

// ComponentTLS marks the Secrets of the server's TLS (CASecretName,
// TLSSecretName) and the cert-manager Certificate.
const ComponentTLS = "tls"

// Keys of the TLS Secrets, as cert-manager names them.
const (
	// SecretKeyCA is the CA certificate: in TLSSecretName and
	// CASecretName, and in the credentials Secret for clients to verify
	// the server with.
	SecretKeyCA = "ca.crt"
	// SecretKeyCAKey is the CA's private key, in CASecretName only.
	SecretKeyCAKey = "ca.key"
	// SecretKeyTLSCert and SecretKeyTLSKey are the server's certificate
	// and key, in TLSSecretName.
	SecretKeyTLSCert = corev1.TLSCertKey
	SecretKeyTLSKey  = corev1.TLSPrivateKeyKey
)

// Validities of the certificates dbkeeper issues for a Database's TLS when
// spec.tls names no issuer. pki.Check renews the server's certificate when
// a third of its validity is left (30 days), pki.CheckCA the CA when it
// would not outlive a new server certificate by a third of its validity.
const (
	TLSCAValidity     = 10 * 365 * 24 * time.Hour
	TLSServerValidity = 90 * 24 * time.Hour
)

// CertificateGVK is cert-manager's Certificate.
var CertificateGVK = schema.GroupVersionKind{Group: dbv1.IssuerGroupCertManager, Version: "v1", Kind: "Certificate"}

// HasIssuer reports whether spec.tls names a cert-manager issuer: then
// cert-manager writes TLSSecretName, else dbkeeper does from the CA in
// CASecretName.
func HasIssuer(db *dbv1.Database) bool { return db.Spec.TLS != nil && db.Spec.TLS.IssuerRef != nil }

// TLSDNSNames returns the names the server's certificate covers: the
// client Service <name>, the read-only Service <name>-ro, the headless
// Service <name>-headless and each pod's name under it,
// <name>-<ordinal>.<name>-headless, for every ordinal below spec.replicas;
// each bare and with .<namespace>, .<namespace>.svc and
// .<namespace>.svc.cluster.local. A standby reaches its upstream by the
// pod's name under the headless Service with .<namespace>.svc, and
// verifies it.
func TLSDNSNames(db *dbv1.Database) []string {
	replicas := ptr.Deref(db.Spec.Replicas, 0)
	hosts := make([]string, 0, 3+max(replicas, 0))
	hosts = append(hosts, ClientServiceName(db), ReadOnlyServiceName(db), HeadlessServiceName(db))
	for i := range replicas {
		hosts = append(hosts, StatefulSetName(db)+"-"+strconv.Itoa(int(i))+"."+HeadlessServiceName(db))
	}
	names := make([]string, 0, 4*len(hosts))
	for _, h := range hosts {
		names = append(names, h, h+"."+db.Namespace, h+"."+db.Namespace+".svc", h+"."+db.Namespace+".svc.cluster.local")
	}
	return names
}

// TLSServerRequest is the server certificate dbkeeper issues from the
// Database's CA: TLSDNSNames, server usage, TLSServerValidity.
func TLSServerRequest(db *dbv1.Database) pki.Request {
	return pki.Request{CommonName: ClientServiceName(db), DNSNames: TLSDNSNames(db), Usage: pki.Server, Validity: TLSServerValidity}
}

// TLSCACommonName is the common name of the CA dbkeeper runs for the
// Database: <namespace>/<name> client TLS CA.
func TLSCACommonName(db *dbv1.Database) string {
	return db.Namespace + "/" + db.Name + " dbkeeper TLS CA"
}

// CASecret returns the Secret of the CA dbkeeper runs for the Database's
// TLS, CASecretName, with ca.crt and ca.key. No pod mounts it.
func CASecret(db *dbv1.Database, ca pki.KeyPair) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(CASecretName(db), db.Namespace).
		WithLabels(Labels(db, ComponentTLS)).
		WithOwnerReferences(ownerReference(db)).
		WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{SecretKeyCA: ca.CertPEM, SecretKeyCAKey: ca.KeyPEM})
}

// TLSSecret returns the server's TLS Secret, TLSSecretName, as dbkeeper
// writes it from its CA caPEM: ca.crt, tls.crt and tls.key, the keys
// cert-manager writes.
func TLSSecret(db *dbv1.Database, caPEM []byte, server pki.KeyPair) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(TLSSecretName(db), db.Namespace).
		WithLabels(Labels(db, ComponentTLS)).
		WithOwnerReferences(ownerReference(db)).
		WithType(corev1.SecretTypeTLS).
		WithData(map[string][]byte{SecretKeyCA: caPEM, SecretKeyTLSCert: server.CertPEM, SecretKeyTLSKey: server.KeyPEM})
}

// Certificate returns the cert-manager Certificate named after the
// Database that asks spec.tls.issuerRef for the server's certificate in
// TLSSecretName: TLSDNSNames, usage server auth, an ECDSA P-256 key made
// anew at every renewal. The Secret carries the Database's labels
// (secretTemplate), so that the operator's cache, which holds only
// labelled Secrets, sees it, and dbv1.AnnotationAdopt with the Database's
// UID, since it has no owner reference: it is the Database's to take
// back when spec.tls.issuerRef goes, and a Certificate made again writes
// into it. It is unstructured: dbkeeper does not depend on cert-manager's
// module.
func Certificate(db *dbv1.Database) *unstructured.Unstructured {
	ref := db.Spec.TLS.IssuerRef
	labels := map[string]any{}
	for k, v := range Labels(db, ComponentTLS) {
		labels[k] = v
	}
	dnsNames := TLSDNSNames(db)
	names := make([]any, 0, len(dnsNames))
	for _, n := range dnsNames {
		names = append(names, n)
	}
	owner := ownerReference(db)
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{
			"name":      db.Name,
			"namespace": db.Namespace,
			"labels":    labels,
			"ownerReferences": []any{map[string]any{
				"apiVersion":         *owner.APIVersion,
				"kind":               *owner.Kind,
				"name":               *owner.Name,
				"uid":                string(*owner.UID),
				"controller":         true,
				"blockOwnerDeletion": true,
			}},
		},
		"spec": map[string]any{
			"secretName": TLSSecretName(db),
			"secretTemplate": map[string]any{
				"labels":      copyMap(labels),
				"annotations": map[string]any{dbv1.AnnotationAdopt: string(db.UID)},
			},
			"commonName": ClientServiceName(db),
			"dnsNames":   names,
			"usages":     []any{"server auth", "digital signature"},
			"privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
			"issuerRef":  map[string]any{"name": ref.Name, "kind": ref.Kind, "group": ref.Group},
		},
	}}
	u.SetGroupVersionKind(CertificateGVK)
	return u
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// tlsVolume is the Secret TLSSecretName as files readable by the pod's
// group (fsGroup, the server's user), not by others: the agent copies the
// key to a file of its own with mode 0600, as PostgreSQL requires. The
// kubelet updates the files when the Secret changes (renewal), which the
// agent notices and reloads the server for, without a restart.
func tlsVolume(db *dbv1.Database) *corev1ac.VolumeApplyConfiguration {
	return corev1ac.Volume().WithName(VolumeTLS).WithSecret(corev1ac.SecretVolumeSource().
		WithSecretName(TLSSecretName(db)).
		WithDefaultMode(0o440).
		WithItems(
			corev1ac.KeyToPath().WithKey(SecretKeyCA).WithPath(instance.TLSFileCA),
			corev1ac.KeyToPath().WithKey(SecretKeyTLSCert).WithPath(instance.TLSFileCert),
			corev1ac.KeyToPath().WithKey(SecretKeyTLSKey).WithPath(instance.TLSFileKey),
		))
}
