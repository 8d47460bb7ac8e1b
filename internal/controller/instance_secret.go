package controller

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/controller/apply"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/pki"
)

// Validity of the agents' certificates. pki renews a certificate when a
// third of its validity is left, and a CA when it would not outlive a new
// leaf certificate by a third of the leaf's validity.
const (
	agentCAValidity   = 10 * 365 * 24 * time.Hour
	agentCertValidity = 365 * 24 * time.Hour
)

// reconcileInstanceSecret keeps the two Secrets of a Database with the
// instance agent: the instance Secret in its namespace, which its pods
// mount (the passwords, the agents' CA bundle and serving certificate), and
// the agent keys Secret in the operator's namespace, which only the
// operator reads (the agent CA's key, the operator's client certificate).
// Each present value is kept, a missing one is made (a password generated;
// the replication password of a Database made by an earlier release copied
// from its credentials Secret, which its servers use), and a certificate
// pki.Check finds unfit (expiring, another CA, other names, a key that does
// not match) is issued again; the agent CA is replaced with an overlap
// (instanceSecretValues). The keys Secret is written first, and only then
// the instance Secret and the removal from it of the keys an earlier
// release kept there, so that no key is ever only in a Secret about to
// lose it. It runs before the StatefulSet, whose pods mount the instance
// Secret. Like the credentials Secret, a Secret the cache lacks is created
// with a plain create and read only when the name is taken; an instance
// Secret that is not the Database's is left as it is, and none of its
// values used.
func (r *DatabaseReconciler) reconcileInstanceSecret(ctx context.Context, s *scope) childObservation {
	if r.keysNamespace == "" {
		return childObservation{err: errors.New("the operator has no namespace for the agents' keys: set --agent-keys-namespace")}
	}
	key := client.ObjectKey{Namespace: s.db.Namespace, Name: desired.InstanceSecretName(s.db)}
	live := &corev1.Secret{}
	found, err := r.applier().Find(ctx, key, live)
	if err != nil {
		return childObservation{err: err}
	}
	if found {
		if p := r.ownershipProblem(s.db, live); p != nil {
			return childObservation{blocked: p}
		}
	}
	if !found {
		values, err := r.reconcileAgentKeys(ctx, s, live)
		if err != nil {
			return childObservation{err: err}
		}
		created, err := r.createSecretObject(ctx, s, key, desired.InstanceSecret(s.spec, values.tenant))
		if err != nil || created {
			return childObservation{err: err}
		}
		if found, err = r.applier().GetLive(ctx, key, live); err == nil && !found {
			err = fmt.Errorf("creating Secret %s: it exists, and then did not: retrying", key.Name)
		}
		if err != nil {
			return childObservation{err: err}
		}
		if p := r.ownershipProblem(s.db, live); p != nil {
			return childObservation{blocked: p}
		}
	}
	values, err := r.reconcileAgentKeys(ctx, s, live)
	if err != nil {
		return childObservation{err: err}
	}
	s.obs.agentCARotation = values.rotation
	want := desired.InstanceSecret(s.spec, values.tenant)
	c := apply.Child{Key: key, Live: live, Want: want, Owned: func() (any, error) { return desired.SecretHeld(want, live), nil }}
	res, err := r.update(ctx, s, c)
	if err == nil && res.Wrote && len(values.renewed) > 0 {
		s.wrote("Updated", r.kindOf(live), key.Name, "agent certificates in Secrets "+key.Name+" and "+r.keysNamespace+"/"+desired.AgentKeysSecretName(s.db)+": "+strings.Join(values.renewed, "; "))
	}
	if err == nil && res.blocked == nil {
		err = r.removeLegacyInstanceKeys(ctx, s, live)
	}
	return childObservation{err: err, blocked: res.blocked}
}

// reconcileAgentKeys computes the values of both Secrets from the live
// ones and writes the agent keys Secret when its values changed: a create
// when the cache has none, and when the name is taken the live Secret read
// from the API server and the values computed again from it; otherwise an
// update. A keys Secret labelled with
// another Database's UID (an earlier Database of the same name whose
// deletion left it) is not used: its values are replaced. The update is a
// merge patch guarded by the resourceVersion, so that the operator needs
// no update verb on Secrets.
func (r *DatabaseReconciler) reconcileAgentKeys(ctx context.Context, s *scope, tenant *corev1.Secret) (agentTLSValues, error) {
	key := client.ObjectKey{Namespace: r.keysNamespace, Name: desired.AgentKeysSecretName(s.db)}
	credentials := map[string][]byte{}
	if s.credentials != nil {
		credentials = s.credentials.Data
	}
	live := &corev1.Secret{}
	err := r.Client.Get(ctx, key, live)
	found := err == nil
	if client.IgnoreNotFound(err) != nil {
		return agentTLSValues{}, fmt.Errorf("reading the agents' keys, Secret %s/%s: %w", key.Namespace, key.Name, err)
	}
	for attempt := 0; ; attempt++ {
		have := live.Data
		if found && live.Labels[desired.LabelDatabaseUID] != string(s.db.UID) {
			have = nil
		}
		var pods agentPodsLoaded
		if found && (len(have[desired.SecretKeyNextAgentCACert]) > 0 || len(have[desired.SecretKeyPreviousAgentCACert]) > 0) {
			pods = r.observeAgentFiles(ctx, s, live)
		}
		values, err := instanceSecretValues(s.spec, tenant.Data, have, credentials, pods, s.obs.now, r.Random)
		if err != nil {
			return agentTLSValues{}, err
		}
		want, err := typed[corev1.Secret](desired.AgentKeysSecret(s.spec, key.Namespace, values.keys))
		if err != nil {
			return agentTLSValues{}, err
		}
		if !found {
			err = r.Client.Create(ctx, want, client.FieldOwner(desired.FieldManager))
			switch {
			case err == nil:
				apply.CountWrite("Secret", "create")
				s.wrote("Created", r.kindOf(want), key.Name, "created Secret "+key.Namespace+"/"+key.Name+" (the agents' CA key and the operator's client certificate)")
				return values, nil
			case apierrors.IsAlreadyExists(err) && attempt == 0:
				if err := r.APIReader.Get(ctx, key, live); err != nil {
					return agentTLSValues{}, fmt.Errorf("reading Secret %s/%s: %w", key.Namespace, key.Name, err)
				}
				found = true
				continue
			}
			return agentTLSValues{}, fmt.Errorf("creating Secret %s/%s: %w", key.Namespace, key.Name, err)
		}
		if maps.EqualFunc(live.Data, want.Data, bytes.Equal) && maps.Equal(live.Labels, want.Labels) {
			return values, nil
		}
		updated := live.DeepCopy()
		updated.Labels, updated.Data, updated.Type = want.Labels, want.Data, want.Type
		patch := client.MergeFromWithOptions(live, client.MergeFromWithOptimisticLock{})
		if err := r.Client.Patch(ctx, updated, patch, client.FieldOwner(desired.FieldManager)); err != nil {
			return agentTLSValues{}, fmt.Errorf("updating Secret %s/%s: %w", key.Namespace, key.Name, err)
		}
		apply.CountWrite("Secret", "update")
		return values, nil
	}
}

// removeLegacyInstanceKeys removes from the instance Secret the keys an
// earlier release kept there (desired.LegacyInstanceSecretKeys), once the
// agent keys Secret holds them: the pods never mounted them, so nothing in
// them notices. One patch guarded by the resourceVersion; a conflict is
// retried at the next reconcile.
func (r *DatabaseReconciler) removeLegacyInstanceKeys(ctx context.Context, s *scope, live *corev1.Secret) error {
	var present []string
	for _, k := range desired.LegacyInstanceSecretKeys {
		if _, ok := live.Data[k]; ok {
			present = append(present, k)
		}
	}
	if len(present) == 0 {
		return nil
	}
	patched := live.DeepCopy()
	for _, k := range present {
		delete(patched.Data, k)
	}
	err := r.Client.Patch(ctx, patched, client.MergeFromWithOptions(live, client.MergeFromWithOptimisticLock{}), client.FieldOwner(desired.FieldManager))
	switch {
	case apierrors.IsConflict(err):
		return nil
	case err != nil:
		return fmt.Errorf("removing %v from Secret %s: %w", present, live.Name, err)
	}
	kind := r.kindOf(live)
	apply.CountWrite(kind.Kind, "update")
	s.wrote("Updated", kind, live.Name, fmt.Sprintf("removed %v from Secret %s: the operator keeps them in its own namespace (Secret %s/%s), where the Database's namespace cannot read them",
		present, live.Name, r.keysNamespace, desired.AgentKeysSecretName(s.db)))
	return nil
}

// observeAgentFiles asks the agent of every pod of the Database which TLS
// files it serves from, with the credentials in keys (the agent keys
// Secret as it is live): what a rotation of the agent CA waits on.
func (r *DatabaseReconciler) observeAgentFiles(ctx context.Context, s *scope, keys *corev1.Secret) agentPodsLoaded {
	config, err := agentTLSConfig(s.db, keys.Data)
	if err != nil {
		return agentPodsLoaded{}
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(s.db.Namespace), client.MatchingLabels(desired.SelectorLabels(s.db))); err != nil {
		return agentPodsLoaded{}
	}
	members := r.observeMembers(ctx, pods.Items, instance.AgentCredentials{TLS: config})
	out := agentPodsLoaded{all: len(members) == int(ptr.Deref(s.spec.Spec.Replicas, 1)), replicas: int(ptr.Deref(s.spec.Spec.Replicas, 1))}
	for _, m := range members {
		if m.status == nil || m.status.TLSFiles == nil {
			out.all = false
			out.silent = append(out.silent, m.name())
			continue
		}
		out.files = append(out.files, *m.status.TLSFiles)
		out.names = append(out.names, m.name())
	}
	return out
}

// agentTLSValues is what instanceSecretValues made: the values of the
// instance Secret (tenant) and of the agent keys Secret (keys), why each
// certificate made again (not a missing one) was, and rotation, while a
// rotation of the agent CA waits on the pods (see agentPodsLoaded), what it
// waits for.
type agentTLSValues struct {
	tenant, keys map[string][]byte
	renewed      []string
	rotation     string
}

// agentPodsLoaded is what the Database's agents report of the TLS files
// they serve from: whether every pod of the StatefulSet answered, and each
// answer's SHA-256 of the CA bundle and of the serving certificate
// (instance.Status.TLSFiles). The zero value says nothing is known, and
// holds every rotation where it is.
type agentPodsLoaded struct {
	all   bool
	files []instance.TLSFiles
	// names are the pods of files, in order, where known; silent the
	// pods whose agent did not report its files; replicas how many pods
	// the StatefulSet should have.
	names    []string
	silent   []string
	replicas int
}

// waitingOn says which pods do not serve from bundle (and cert, when not
// nil) yet, for a condition's message.
func (p agentPodsLoaded) waitingOn(bundle, cert []byte) string {
	if len(p.files) == 0 && len(p.silent) == 0 {
		return "no pod's agent has reported the files it serves yet"
	}
	var behind []string
	serving := 0
	for i, f := range p.files {
		if f.CA == instance.FileDigest(bundle) && (cert == nil || f.Cert == instance.FileDigest(cert)) {
			serving++
			continue
		}
		if i < len(p.names) {
			behind = append(behind, p.names[i])
		}
	}
	out := fmt.Sprintf("%d of %d pods do", serving, max(p.replicas, len(p.files)+len(p.silent)))
	if len(behind) > 0 {
		out += "; not yet " + strings.Join(behind, ", ")
	}
	if len(p.silent) > 0 {
		out += "; no answer from the agent of " + strings.Join(p.silent, ", ")
	}
	return out
}

// loaded reports whether every pod serves from data: its CA bundle is
// bundle, and its serving certificate cert when cert is not nil.
func (p agentPodsLoaded) loaded(bundle, cert []byte) bool {
	if !p.all || len(p.files) == 0 {
		return false
	}
	for _, f := range p.files {
		if f.CA != instance.FileDigest(bundle) || (cert != nil && f.Cert != instance.FileDigest(cert)) {
			return false
		}
	}
	return true
}

// instanceSecretValues is the policy of reconcileInstanceSecret: tenant
// are the live instance Secret's values, keys the live agent keys Secret's,
// credentials the live credentials Secret's, pods what the agents report.
//
// The keys an earlier release kept in the instance Secret (the CA's key and
// the operator's client certificate) are taken from there when the keys
// Secret lacks them, so that a Database made by it keeps its CA and its
// agents keep trusting the operator; the caller removes them from the
// instance Secret once the keys Secret holds them.
//
// The agent CA is replaced with an overlap: once it would not outlive a
// new certificate by a third of that certificate's validity, a new CA joins
// the bundle the pods mount (SecretKeyNextAgentCACert); once every pod
// serves from that bundle, the new CA signs a new serving certificate and a
// new operator certificate and the old one stays in the bundle
// (SecretKeyPreviousAgentCACert); once every pod serves the new serving
// certificate, the old CA leaves the bundle. Only a CA that cannot sign
// (missing, not parsing, its key lost or not matching, expired or expiring
// within a third of a certificate's validity) is replaced at once.
func instanceSecretValues(db *dbv1.Database, tenant, keys, credentials map[string][]byte, pods agentPodsLoaded, now time.Time, random io.Reader) (agentTLSValues, error) {
	out := make(map[string][]byte, len(desired.InstanceSecretKeys))
	for _, k := range desired.InstanceSecretKeys {
		if v := tenant[k]; len(v) > 0 {
			out[k] = v
		}
	}
	password := func(key string, fallback []byte) error {
		if len(out[key]) > 0 {
			return nil
		}
		if len(fallback) > 0 {
			out[key] = fallback
			return nil
		}
		p, err := generatePassword(random)
		out[key] = []byte(p)
		return err
	}
	if err := password(desired.SecretKeySuperuserPassword, nil); err != nil {
		return agentTLSValues{}, err
	}
	if err := password(desired.SecretKeyInstanceReplicationPassword, credentials[desired.SecretKeyReplicationPassword]); err != nil {
		return agentTLSValues{}, err
	}

	k := make(map[string][]byte, len(desired.AgentKeysSecretKeys))
	for _, key := range desired.AgentKeysSecretKeys {
		if v := keys[key]; len(v) > 0 {
			k[key] = v
		}
	}
	if len(k[desired.SecretKeyAgentCAKey]) == 0 && len(tenant[desired.SecretKeyAgentCAKey]) > 0 {
		// An earlier release's instance Secret: its CA is the one the
		// pods trust, its certificate the first of the bundle.
		k[desired.SecretKeyAgentCACert] = firstCertificate(tenant[desired.SecretKeyAgentCA])
		k[desired.SecretKeyAgentCAKey] = tenant[desired.SecretKeyAgentCAKey]
	}
	if len(k[desired.SecretKeyOperatorCert]) == 0 && len(k[desired.SecretKeyOperatorKey]) == 0 {
		k[desired.SecretKeyOperatorCert], k[desired.SecretKeyOperatorKey] = tenant[desired.SecretKeyOperatorCert], tenant[desired.SecretKeyOperatorKey]
	}

	var v agentTLSValues
	ca := pki.KeyPair{CertPEM: k[desired.SecretKeyAgentCACert], KeyPEM: k[desired.SecretKeyAgentCAKey]}
	next := pki.KeyPair{CertPEM: k[desired.SecretKeyNextAgentCACert], KeyPEM: k[desired.SecretKeyNextAgentCAKey]}
	previous := k[desired.SecretKeyPreviousAgentCACert]
	if why := pki.CheckCA(next, agentCertValidity, now); len(next.CertPEM)+len(next.KeyPEM) > 0 && why != "" {
		// A next CA that went bad before it was used: made again below.
		next = pki.KeyPair{}
	}
	switch why, usable := checkAgentCA(ca, now); {
	case !usable:
		if len(ca.CertPEM) > 0 || len(ca.KeyPEM) > 0 {
			v.renewed = append(v.renewed, "the agent CA: "+why+" (replaced at once: it cannot sign)")
		}
		fresh, err := pki.NewCA(agentCAName(db), agentCAValidity, now, random)
		if err != nil {
			return agentTLSValues{}, fmt.Errorf("making the agent CA: %w", err)
		}
		ca, next, previous = fresh, pki.KeyPair{}, nil
	case why != "" && len(next.CertPEM) == 0 && len(previous) == 0:
		fresh, err := pki.NewCA(agentCAName(db), agentCAValidity, now, random)
		if err != nil {
			return agentTLSValues{}, fmt.Errorf("making the next agent CA: %w", err)
		}
		next = fresh
		v.renewed = append(v.renewed, "the agent CA: "+why+"; a new CA joins the agents' bundle, and signs once every pod trusts it")
	}
	if len(next.CertPEM) > 0 && bytes.Equal(out[desired.SecretKeyAgentCA], agentCABundle(previous, ca.CertPEM, next.CertPEM)) &&
		pods.loaded(out[desired.SecretKeyAgentCA], nil) {
		// Every pod trusts both: the new CA signs from now on.
		previous, ca, next = ca.CertPEM, next, pki.KeyPair{}
		v.renewed = append(v.renewed, "the agent CA: every pod trusts the new CA, which signs the certificates from now on")
	}

	leaves := []struct {
		what          string
		data          map[string][]byte
		certKey, kKey string
		req           pki.Request
	}{
		{"the agents' certificate", out, desired.SecretKeyAgentCert, desired.SecretKeyAgentKey, agentServerRequest(db)},
		{"the operator's certificate", k, desired.SecretKeyOperatorCert, desired.SecretKeyOperatorKey, operatorClientRequest()},
	}
	for _, l := range leaves {
		cert, key := l.data[l.certKey], l.data[l.kKey]
		why := pki.Check(ca.CertPEM, cert, l.req, now)
		if why == "" {
			if _, err := tls.X509KeyPair(cert, key); err != nil {
				why = "the key does not match the certificate"
			}
		}
		if why == "" {
			continue
		}
		if len(cert) > 0 || len(key) > 0 {
			v.renewed = append(v.renewed, l.what+": "+why)
		}
		pair, err := pki.Issue(ca, l.req, now, random)
		if err != nil {
			return agentTLSValues{}, fmt.Errorf("issuing %s: %w", l.what, err)
		}
		l.data[l.certKey], l.data[l.kKey] = pair.CertPEM, pair.KeyPEM
	}
	if len(previous) > 0 && bytes.Equal(out[desired.SecretKeyAgentCA], agentCABundle(previous, ca.CertPEM, nil)) &&
		pods.loaded(out[desired.SecretKeyAgentCA], out[desired.SecretKeyAgentCert]) {
		// Every pod serves a certificate of the new CA: the old one goes.
		previous = nil
		v.renewed = append(v.renewed, "the agent CA: every pod serves a certificate of the new CA; the old CA leaves the agents' bundle")
	}

	k[desired.SecretKeyAgentCACert], k[desired.SecretKeyAgentCAKey] = ca.CertPEM, ca.KeyPEM
	k[desired.SecretKeyNextAgentCACert], k[desired.SecretKeyNextAgentCAKey] = next.CertPEM, next.KeyPEM
	k[desired.SecretKeyPreviousAgentCACert] = previous
	for key, val := range k {
		if len(val) == 0 {
			delete(k, key)
		}
	}
	out[desired.SecretKeyAgentCA] = agentCABundle(previous, ca.CertPEM, next.CertPEM)
	v.tenant, v.keys = out, k
	// A rotation held by a pod that never answers ends, at the latest,
	// when the old CA can no longer sign: it is then replaced at once.
	switch {
	case len(next.CertPEM) > 0:
		v.rotation = "the agents' CA is being replaced: the new CA signs once every pod trusts it (" + pods.waitingOn(out[desired.SecretKeyAgentCA], nil) + ")"
	case len(previous) > 0:
		v.rotation = "the agents' CA is being replaced: the old CA leaves the agents' bundle once every pod serves a certificate of the new CA (" +
			pods.waitingOn(out[desired.SecretKeyAgentCA], out[desired.SecretKeyAgentCert]) + ")"
	}
	return v, nil
}

// checkAgentCA returns why ca needs replacing, "" when it does not, and
// whether it can still sign while it is replaced with an overlap: it
// parses, its key matches, and it outlives a third of a certificate's
// validity.
func checkAgentCA(ca pki.KeyPair, now time.Time) (string, bool) {
	why := pki.CheckCA(ca, agentCertValidity, now)
	if why == "" {
		return "", true
	}
	cert, err := pki.ParseCertificate(ca.CertPEM)
	if err != nil || pki.CheckCA(ca, 0, cert.NotBefore) != "" {
		// Not parsing, not a CA, or a key that does not match.
		return why, false
	}
	return why, cert.NotAfter.Sub(now) > agentCertValidity/3
}

// agentCAName is the common name of a Database's agent CA.
func agentCAName(db *dbv1.Database) string {
	return "dbkeeper agent CA " + db.Namespace + "/" + db.Name
}

// agentCABundle is the bundle of agent CA certificates the pods mount: the
// previous, current and next CA, each present one in that order, so that
// the bundle does not change when the next CA becomes the current one.
func agentCABundle(previous, current, next []byte) []byte {
	var out []byte
	for _, c := range [][]byte{previous, current, next} {
		if len(c) > 0 {
			out = append(out, c...)
		}
	}
	return out
}

// firstCertificate returns the first PEM certificate of bundle, re-encoded,
// or bundle itself when it holds none.
func firstCertificate(bundle []byte) []byte {
	block, _ := pem.Decode(bundle)
	if block == nil {
		return bundle
	}
	return pem.EncodeToMemory(block)
}

// agentServerRequest is the agents' serving certificate: the name the
// operator checks when it calls an agent by its pod's address.
func agentServerRequest(db *dbv1.Database) pki.Request {
	name := desired.AgentServerName(db)
	return pki.Request{CommonName: name, DNSNames: []string{name}, Usage: pki.Server, Validity: agentCertValidity}
}

// operatorClientRequest is the operator's client certificate, the only
// client the agents take commands from.
func operatorClientRequest() pki.Request {
	return pki.Request{CommonName: desired.AgentClientName, Usage: pki.Client, Validity: agentCertValidity}
}
