package controller

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller/apply"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/pki"
)

// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;create;patch;delete

// tlsObservation is what reconciling the server's TLS found.
type tlsObservation struct {
	// ca is the TLS Secret's ca.crt, for the credentials Secret; nil
	// while it does not exist.
	ca []byte
	// pending says why the TLS Secret is not ready yet, "" when it is.
	pending string
	// secretMissing is true when the TLS Secret does not exist, so that
	// pods mounting it cannot start (holdRollout).
	secretMissing bool
	// err is the error that stopped it, also in pending; the other
	// children are reconciled all the same.
	err error
	// blocked is set when a Secret or the Certificate of the TLS is not
	// the Database's (ownershipProblem): it was left as it is, and the
	// reconcile stops there, since the pods would mount it.
	blocked *problem
}

// reconcileTLS brings the server's TLS certificate to what the spec asks
// (docs/replication.md §22): with spec.tls.issuerRef a cert-manager
// Certificate that cert-manager fulfils into the Secret <name>-tls; without
// it the CA <name>-ca, made once (again only when it is about to expire or
// does not parse), and <name>-tls issued from it, again whenever pki.Check
// says it no longer fits (other names, replicas grown, a third of its
// validity left, another CA) or the Secret was deleted or edited.
func (r *DatabaseReconciler) reconcileTLS(ctx context.Context, s *scope) tlsObservation {
	if !desired.HasInstanceAgent(s.spec) {
		return tlsObservation{}
	}
	var obs tlsObservation
	if desired.HasIssuer(s.spec) {
		obs = r.reconcileCertificate(ctx, s)
	} else {
		obs = r.reconcileManagedTLS(ctx, s)
	}
	if obs.blocked != nil {
		obs.pending = obs.blocked.message
	}
	if obs.err != nil && obs.pending == "" {
		obs.pending = obs.err.Error()
	}
	if obs.err != nil && obs.ca == nil {
		obs.secretMissing = true // as far as this reconcile knows
	}
	return obs
}

// reconcileManagedTLS runs the Database's own CA and issues the server's
// certificate from it.
func (r *DatabaseReconciler) reconcileManagedTLS(ctx context.Context, s *scope) tlsObservation {
	now := r.now()
	ca, blocked, err := r.reconcileCA(ctx, s, now)
	if err != nil || blocked != nil {
		return tlsObservation{err: err, blocked: blocked}
	}
	key := client.ObjectKey{Namespace: s.spec.Namespace, Name: desired.TLSSecretName(s.spec)}
	live := &corev1.Secret{}
	found, err := r.applier().Find(ctx, key, live)
	if err != nil {
		return tlsObservation{err: err}
	}
	if found {
		// Before anything of it is read.
		if blocked, err := r.releaseFromCertManager(ctx, s, live); err != nil || blocked != nil {
			return tlsObservation{err: err, blocked: blocked}
		}
	}
	server := pki.KeyPair{CertPEM: live.Data[desired.SecretKeyTLSCert], KeyPEM: live.Data[desired.SecretKeyTLSKey]}
	if why := serverCertificateProblem(ca.CertPEM, live, server, desired.TLSServerRequest(s.spec), found, now); why != "" {
		log.FromContext(ctx).Info("issuing the server's TLS certificate", "secret", key.Name, "why", why)
		if server, err = pki.Issue(ca, desired.TLSServerRequest(s.spec), now, r.Random); err != nil {
			return tlsObservation{err: fmt.Errorf("issuing the server's TLS certificate: %w", err)}
		}
	}
	want := desired.TLSSecret(s.spec, ca.CertPEM, server)
	if blocked, err := r.applySecret(ctx, s, key, live, found, want); err != nil || blocked != nil {
		return tlsObservation{err: err, blocked: blocked}
	}
	return tlsObservation{ca: ca.CertPEM}
}

// serverCertificateProblem says why the TLS Secret must be issued anew,
// "" when it need not.
func serverCertificateProblem(caPEM []byte, live *corev1.Secret, server pki.KeyPair, req pki.Request, found bool, now time.Time) string {
	switch {
	case !found:
		return "the Secret does not exist"
	case !bytes.Equal(live.Data[desired.SecretKeyCA], caPEM):
		return "its ca.crt is not the CA's"
	}
	if why := pki.Check(caPEM, server.CertPEM, req, now); why != "" {
		return why
	}
	if _, err := tls.X509KeyPair(server.CertPEM, server.KeyPEM); err != nil {
		return "its key does not match its certificate"
	}
	return ""
}

// certManagerAnnotations start the annotations cert-manager sets on the
// Secrets it writes; certManagerCertificate names the Certificate.
const (
	certManagerAnnotations = "cert-manager.io/"
	certManagerCertificate = "cert-manager.io/certificate-name"
)

// releaseFromCertManager checks that the TLS Secret found is the
// Database's (ownershipProblem), and takes it back from cert-manager when
// spec.tls.issuerRef was removed: the Secret's annotations say which
// Certificate writes it. The Secret a Certificate this Database controls
// writes is the Database's: it carries AnnotationAdopt with the
// Database's UID from the Certificate's secretTemplate, or, written
// before the Certificate asked for that, the Certificate's name. Such a
// Secret gets the Database's controller owner reference and loses
// cert-manager's annotations and AnnotationAdopt, in one write guarded by
// its resourceVersion; only then is the Certificate deleted, so that
// cert-manager stops writing the Secret (in that order, so that the Secret
// is never left without an owner). The certificate cert-manager issued is
// not signed by the Database's CA, so it is then issued again.
func (r *DatabaseReconciler) releaseFromCertManager(ctx context.Context, s *scope, secret *corev1.Secret) (*problem, error) {
	name := secret.Annotations[certManagerCertificate]
	var cert *unstructured.Unstructured
	if name != "" {
		cert = certificateObject()
		switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: secret.Namespace, Name: name}, cert); {
		case meta.IsNoMatchError(err), apierrors.IsNotFound(err):
			cert = nil
		case err != nil:
			return nil, fmt.Errorf("reading Certificate %s: %w", name, err)
		case !metav1.IsControlledBy(cert, s.db):
			cert = nil
		}
	}
	if p := r.ownershipProblem(s.db, secret); p != nil && (cert == nil || p.reason == dbv1.ReasonControlledByOther) {
		return p, nil
	}
	if name == "" {
		return nil, nil
	}
	patch := client.MergeFromWithOptions(secret.DeepCopy(), client.MergeFromWithOptimisticLock{})
	for k := range secret.Annotations {
		if strings.HasPrefix(k, certManagerAnnotations) || k == dbv1.AnnotationAdopt {
			delete(secret.Annotations, k)
		}
	}
	if !metav1.IsControlledBy(secret, s.db) {
		secret.OwnerReferences = append(secret.OwnerReferences, *metav1.NewControllerRef(s.db, dbv1.GroupVersion.WithKind(dbv1.DatabaseKind)))
	}
	// dbkeeper's labels too, which a Secret written before the
	// Certificate's secretTemplate gave them lacks: the cache then holds
	// it, and the manager's write policy (docs/security.md §11) admits
	// only Secrets that carry them.
	if secret.Labels == nil {
		secret.Labels = map[string]string{}
	}
	maps.Copy(secret.Labels, desired.Labels(s.db, desired.ComponentTLS))
	if err := r.Client.Patch(ctx, secret, patch); err != nil {
		return nil, fmt.Errorf("taking Secret %s back from cert-manager: %w", secret.Name, err)
	}
	if cert != nil {
		if err := r.Client.Delete(ctx, cert, client.Preconditions{UID: ptr.To(cert.GetUID())}); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("deleting Certificate %s: %w", name, err)
		}
		apply.CountWrite(desired.CertificateGVK.Kind, "delete")
		s.wrote("Deleted", desired.CertificateGVK, name, fmt.Sprintf("deleted Certificate %s: spec.tls names no issuer", name))
	}
	return nil, nil
}

// reconcileCA returns the Database's TLS CA from the Secret <name>-ca,
// made when missing and made anew when it no longer does (pki.CheckCA):
// clients then need the new ca.crt from the credentials Secret. A CA is
// created with a plain create, which the API server refuses when the name
// is taken: a CA out of the cache's sight (its labels edited) is read and
// kept, never replaced by a race. A Secret of the name that is not the
// Database's (ownershipProblem) is left as it is, its key never used.
func (r *DatabaseReconciler) reconcileCA(ctx context.Context, s *scope, now time.Time) (pki.KeyPair, *problem, error) {
	key := client.ObjectKey{Namespace: s.spec.Namespace, Name: desired.CASecretName(s.spec)}
	live := &corev1.Secret{}
	found, err := r.applier().Find(ctx, key, live)
	if err != nil {
		return pki.KeyPair{}, nil, err
	}
	if !found {
		ca, err := r.newCA(ctx, s, key, "the Secret does not exist", now)
		if err != nil {
			return pki.KeyPair{}, nil, err
		}
		created, err := r.createSecretObject(ctx, s, key, desired.CASecret(s.spec, ca))
		if err != nil || created {
			return ca, nil, err
		}
		if ok, err := r.applier().GetLive(ctx, key, live); err != nil || !ok {
			return pki.KeyPair{}, nil, fmt.Errorf("creating Secret %s: it exists, and could not be read: %w", key.Name, err)
		}
	}
	if p := r.ownershipProblem(s.db, live); p != nil {
		return pki.KeyPair{}, p, nil
	}
	ca := pki.KeyPair{CertPEM: live.Data[desired.SecretKeyCA], KeyPEM: live.Data[desired.SecretKeyCAKey]}
	if why := pki.CheckCA(ca, desired.TLSServerValidity, now); why != "" {
		if ca, err = r.newCA(ctx, s, key, why, now); err != nil {
			return pki.KeyPair{}, nil, err
		}
	}
	blocked, err := r.applySecret(ctx, s, key, live, true, desired.CASecret(s.spec, ca))
	return ca, blocked, err
}

// newCA makes a new TLS CA for the Database, saying why.
func (r *DatabaseReconciler) newCA(ctx context.Context, s *scope, key client.ObjectKey, why string, now time.Time) (pki.KeyPair, error) {
	log.FromContext(ctx).Info("making the Database's TLS CA", "secret", key.Name, "why", why)
	ca, err := pki.NewCA(desired.TLSCACommonName(s.spec), desired.TLSCAValidity, now, r.Random)
	if err != nil {
		return pki.KeyPair{}, fmt.Errorf("making the TLS CA: %w", err)
	}
	return ca, nil
}

// applySecret creates a Secret the cache did not find (createSecretObject;
// one out of the cache's sight is read and updated), and updates a found
// one when the fields dbkeeper sets differ. It reports the problem of a
// Secret that is not the Database's, which it leaves as it is.
func (r *DatabaseReconciler) applySecret(ctx context.Context, s *scope, key client.ObjectKey, live *corev1.Secret, found bool, want *corev1ac.SecretApplyConfiguration) (*problem, error) {
	if !found {
		created, err := r.createSecretObject(ctx, s, key, want)
		if err != nil || created {
			return nil, err
		}
		if ok, err := r.applier().GetLive(ctx, key, live); err != nil || !ok {
			return nil, fmt.Errorf("creating Secret %s: it exists, and could not be read: %w", key.Name, err)
		}
	}
	c := apply.Child{Key: key, Live: live, Want: want, Owned: func() (any, error) { return desired.SecretHeld(want, live), nil }}
	res, err := r.update(ctx, s, c)
	return res.blocked, err
}

// reconcileCertificate applies the cert-manager Certificate and reads the
// Secret cert-manager writes.
//
// The Certificate is read from the API server, not the cache: cert-manager
// is optional, and a cache of its kind fails to start where its CRD is
// missing, or would hold every Certificate of the cluster. It is not
// watched either: a change to it is undone at the Database's next
// reconcile. The Secret cert-manager writes carries the Database's labels
// and is watched (tlsSecretToDatabase), so a new or renewed certificate
// reaches the credentials Secret at once.
func (r *DatabaseReconciler) reconcileCertificate(ctx context.Context, s *scope) tlsObservation {
	want := desired.Certificate(s.spec)
	key := client.ObjectKeyFromObject(want)
	live := certificateObject()
	found := true
	switch err := r.APIReader.Get(ctx, key, live); {
	case meta.IsNoMatchError(err):
		return tlsObservation{err: fmt.Errorf("spec.tls.issuerRef names a cert-manager issuer, and cert-manager is not installed: the API server has no %s", desired.CertificateGVK.GroupKind())}
	case apierrors.IsNotFound(err):
		found = false
	case err != nil:
		return tlsObservation{err: fmt.Errorf("reading Certificate %s: %w", key.Name, err)}
	}
	if found {
		if p := r.ownershipProblem(s.db, live); p != nil {
			return tlsObservation{blocked: p}
		}
	} else if p, err := r.tlsSecretTaken(ctx, s); err != nil || p != nil {
		// cert-manager would write its certificate over it.
		return tlsObservation{err: err, blocked: p}
	}
	if changes := desired.Changes(want.Object, certificateHeld(want, live, found)); len(changes) > 0 {
		// Created only where none exists, updated only where it is
		// the one read.
		pre := apply.CreateOnly
		if found {
			pre = apply.UpdateOnly(live)
		}
		pre(want.Object["metadata"].(map[string]any))
		if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(want), client.FieldOwner(desired.FieldManager), client.ForceOwnership); err != nil {
			return tlsObservation{err: fmt.Errorf("applying Certificate %s: %w", key.Name, err)}
		}
		reason, operation, note := "Updated", "update", fmt.Sprintf("updated Certificate %s: %s", key.Name, strings.Join(changes, ", "))
		if !found {
			reason, operation, note = "Created", "create", "created Certificate "+key.Name
		}
		apply.CountWrite(desired.CertificateGVK.Kind, operation)
		s.wrote(reason, desired.CertificateGVK, key.Name, note)
	}

	secretKey := client.ObjectKey{Namespace: s.spec.Namespace, Name: desired.TLSSecretName(s.spec)}
	secret := &corev1.Secret{}
	ok, err := r.applier().Find(ctx, secretKey, secret)
	switch {
	case err != nil:
		return tlsObservation{err: err}
	case !ok:
		return tlsObservation{secretMissing: true, pending: fmt.Sprintf("waiting for cert-manager to issue Certificate %s into Secret %s%s",
			key.Name, secretKey.Name, certificateMessage(live))}
	case len(secret.Data[desired.SecretKeyCA]) == 0:
		return tlsObservation{pending: fmt.Sprintf("Secret %s has no %s: the issuer does not say which CA signed the certificate, which clients need to verify the server; use an issuer that does (CA, self-signed, Vault)",
			secretKey.Name, desired.SecretKeyCA)}
	}
	return tlsObservation{ca: secret.Data[desired.SecretKeyCA]}
}

// tlsSecretTaken reports the problem of a Secret named like the TLS Secret
// that is not the Database's, read from the API server, before the
// Certificate that would have cert-manager write into it is made. The
// Secret a Certificate of this Database wrote before is the Database's:
// its secretTemplate gives it AnnotationAdopt.
func (r *DatabaseReconciler) tlsSecretTaken(ctx context.Context, s *scope) (*problem, error) {
	secret := &corev1.Secret{}
	found, err := r.applier().GetLive(ctx, client.ObjectKey{Namespace: s.spec.Namespace, Name: desired.TLSSecretName(s.spec)}, secret)
	if err != nil || !found {
		return nil, err
	}
	return r.ownershipProblem(s.db, secret), nil
}

// certificateHeld returns what live holds of the fields want sets, in
// want's shape, for desired.Changes.
func certificateHeld(want, live *unstructured.Unstructured, found bool) map[string]any {
	if !found {
		return nil
	}
	have := map[string]any{"apiVersion": live.GetAPIVersion(), "kind": live.GetKind()}
	md := map[string]any{"name": live.GetName(), "namespace": live.GetNamespace()}
	labels := map[string]any{}
	for k := range want.GetLabels() {
		if v, ok := live.GetLabels()[k]; ok {
			labels[k] = v
		}
	}
	md["labels"] = labels
	if refs, ok, _ := unstructured.NestedSlice(live.Object, "metadata", "ownerReferences"); ok {
		var held []any
		for _, ref := range refs {
			if m, ok := ref.(map[string]any); ok && m["uid"] == string(want.GetOwnerReferences()[0].UID) {
				held = append(held, m)
			}
		}
		md["ownerReferences"] = held
	}
	have["metadata"] = md
	spec := map[string]any{}
	liveSpec, _, _ := unstructured.NestedMap(live.Object, "spec")
	wantSpec, _, _ := unstructured.NestedMap(want.Object, "spec")
	for k := range wantSpec {
		if v, ok := liveSpec[k]; ok {
			spec[k] = v
		}
	}
	have["spec"] = spec
	return have
}

// certificateMessage is the message of the Certificate's Ready condition,
// ": " and the message, "" when it has none.
func certificateMessage(cert *unstructured.Unstructured) string {
	conditions, _, _ := unstructured.NestedSlice(cert.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			if msg, _ := m["message"].(string); msg != "" {
				return ": " + msg
			}
		}
	}
	return ""
}

// tlsSecretToDatabase maps a TLS Secret cert-manager wrote (which no
// Database controls, so Owns does not see it) to the Database named by
// the instance label its secretTemplate gave it.
var tlsSecretToDatabase = handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[desired.LabelInstance]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
})

// isTLSSecret passes the Secrets labelled as a Database's TLS.
var isTLSSecret = predicate.NewPredicateFuncs(func(o client.Object) bool {
	return o.GetLabels()[desired.LabelComponent] == desired.ComponentTLS
})

// certificateObject is an empty cert-manager Certificate.
func certificateObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(desired.CertificateGVK)
	return u
}

// upstreamPlaintext says whether standby connects to its upstream up
// without TLS (instance.Spec.UpstreamPlaintext): only while up's agent
// answers without Status.TLS, a pod of a release before TLS during the
// upgrade that adds it (the StatefulSet restarts the standbys first, and
// a standby that insisted on TLS could not stream, nor become ready, and
// the rollout would stop at it). While up does not answer, what the
// standby was last told. Never from what the network answers: the
// agents' Status comes over the operator's authenticated channel.
func upstreamPlaintext(up, standby *member) bool {
	var upStatus *instance.Status
	if up != nil {
		upStatus = up.status
	}
	var last *instance.Spec
	if standby != nil && standby.status != nil {
		last = standby.status.Spec
	}
	return plaintextUpstream(upStatus, last)
}

// plaintextUpstream is upstreamPlaintext's decision from the upstream's
// Status (nil: it did not answer) and the standby's last Spec (nil: none).
func plaintextUpstream(up *instance.Status, last *instance.Spec) bool {
	if up != nil {
		return !up.TLS
	}
	return last != nil && last.UpstreamPlaintext
}
